//! `rankvisor-dry-run` (`rankvisor dry-run`): manifest admission, the operator's env, the emulated controllers
//! (training operator, Volcano, kubelet), the `kubectl get -w` rendering (all pure), and the
//! event loop that runs the job with one real launcher per replica.
//!
//! Module map (shared layers, then one folder per controller; docs/architecture.md has the detail):
//! - `k8s`: Kubernetes' object types every kind embeds (raw metadata and containers, quantities,
//!   field errors, a file's documents and [`ManifestError`]);
//! - `volcano`: Volcano's gang admission (a shared layer);
//! - `kubelet`: the pods and the event dispatch every kind shares (`pod`, `cluster`: events in and
//!   actions out, `launch`, `replica`: the pod key [`ReplicaId`]);
//! - `pytorchjob`: the Kubeflow v1 PyTorchJob (admission, the operator's env, its controller with
//!   Volcano's gang, the training operator's rules, its scenarios);
//! - `trainjob`: the Trainer v2 TrainJob (admission, its JobSet and Job controllers);
//! - `manifest`: read a file and admit it as the kind it holds; `workload`: either kind behind one
//!   face for the event loop;
//! - `render`: what is shown (`rows`, `kubectl`: `kubectl get -w` and JSON, `timeline`);
//! - `runner`: the I/O (`event_loop` and its pure `run`, `setup`, `launcher`, `local`, ...);
//! - `options` and `cli`: the run's options and the command line.
//!
//! The event loop ([`run_dry_run`]: processes, timers, signals; the only I/O here) loads the job,
//! feeds its controllers the [`ClusterEvent`]s it observes, carries out the returned
//! [`ClusterAction`]s (starting each launcher from its launch spec) and prints each change as
//! `kubectl get -w` would.
//!
//! Public, and nothing else (every other item is `pub(crate)` or private; `unreachable_pub`
//! warns of a `pub` that is not listed here):
//! - for the binary (`main.rs`): [`cli`], [`DryRunOptions`] with the types of its fields
//!   ([`WatchKinds`], [`OutputFormat`] and its [`OutputFormatError`], [`QueueCapability`]), and
//!   [`run_dry_run`];
//! - for the integration tests: [`parse_job`] (with [`ManifestError`] and the field errors it
//!   carries) and the admitted [`PyTorchJob`] ([`ReplicaId`], [`ReplicaType`], [`ReplicaSpec`]);
//!   [`operator_env`], which `tests/heavy/real_node.rs` gives a real cluster's pods; and the PyTorchJob's
//!   [`Controller`] with what goes in and out of it ([`ControllerConfig`], [`ClusterEvent`],
//!   [`ClusterAction`], [`Step`], [`Outcome`], [`JobState`], [`PodStatus`]), which the chaos soak
//!   (`tests/heavy/chaos/soak.rs`) runs to predict a real run's outcome.

#![warn(missing_docs, unreachable_pub)]

pub mod cli; // the command line
mod hyperpodjob; // the SageMaker HyperPod HyperPodPyTorchJob and its emulated operator
mod k8s; // Kubernetes' object types every job kind shares
mod kubelet; // the pods, the cluster's events and actions, the pod key
mod manifest; // read a manifest file, admit it as the kind it holds
mod options; // the run's options
mod pytorchjob; // the Kubeflow v1 PyTorchJob and its operator
mod render; // what is shown: watch rows, kubectl get -w, JSON, timeline
mod runner; // the I/O: the event loop, launchers, output
mod trainjob; // the Trainer v2 TrainJob, its JobSet and Job
mod volcano; // Volcano's gang admission, shared by the controllers that make a PodGroup
mod workload; // either job kind behind one face for the event loop

// The binary's (`main.rs`): the command line, the options it becomes, the run.
pub use k8s::quantity::QueueCapability;
pub use options::{DryRunOptions, OutputFormat, OutputFormatError};
pub use render::kubectl::WatchKinds;
pub use runner::event_loop::run_dry_run;

// The integration tests' (the chaos soak predicts a run with the controller; the real-node test
// gives a kind cluster's pods the operator's env): the job, its controller, what goes in and out.
pub use k8s::document::ManifestError;
pub use k8s::field_error::{BadValue, FieldError, FieldErrorType, FieldErrors};
pub use kubelet::cluster::{ClusterAction, ClusterEvent, ControllerConfig, Outcome, Step};
pub use kubelet::replica::{ReplicaId, ReplicaType};
pub use pytorchjob::admission::parse_job;
pub use pytorchjob::controller::Controller;
pub use pytorchjob::env::operator_env;
pub use pytorchjob::{PyTorchJob, ReplicaSpec};
pub use render::rows::{JobState, PodStatus};

//! `rankvisor-dry-run` (`rankvisor dry-run`): manifest admission, the operator's env, the emulated controllers
//! (training operator, Volcano, kubelet), the `kubectl get -w` rendering (all pure), and the
//! event loop that runs the job with one real launcher per replica.
//!
//! Module map: `raw` (the manifest as written) -> `webhook_admission` (the CRD schema, the
//! validating webhook, then the defaulting) -> `document` (a file's documents and
//! [`ManifestError`], under both job kinds' admission) -> `manifest` (load and admit; `not_emulated` names
//! the fields the dry run leaves out) -> `pytorchjob` (the admitted job) -> `local` (`--command`,
//! `--path-map`); `env` (the operator's env and the downward API) and `launcher` (a launcher's
//! command line and status lines); `cluster` (events in, actions out), `kubelet` (the pods and
//! the event dispatch every job kind shares; `pod` is one pod as the kubelet runs it) and
//! `controller` (the PyTorchJob's rules: `operator` the training operator's); `render` (`rows` and
//! `kubectl`: what `kubectl get -w` shows; `timeline`: the `--timeline` drawing); `options` (the run's options); `runner` the I/O: `event_loop`
//! and its pure `run`, `setup`, `ports`, `workdir`, `launcher`, `launcher_process`, `orphans` (what a
//! killed launcher leaves), `output`, `injection`, `local`.
//!
//! `trainjob` is the same for a Trainer v2 TrainJob (its JobSet and Job); `workload` puts
//! either kind behind one face for the event loop.
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

pub mod cli;
mod k8s;
mod kubelet;
mod manifest;
mod options;
mod pytorchjob;
mod render;
mod runner;
mod trainjob;
mod workload;

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

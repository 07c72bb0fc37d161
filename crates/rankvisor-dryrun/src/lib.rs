//! `rankvisor-dry-run` (`rankvisor dry-run`): manifest admission, the operator's env, the emulated controllers
//! (training operator, Volcano, kubelet), the `kubectl get -w` rendering (all pure), and the
//! event loop that runs the job with one real launcher per replica.
//!
//! Module map: `raw` (the manifest as written) -> `webhook_admission` (the CRD schema, the
//! validating webhook, then the defaulting) -> `manifest` (load and admit; `not_emulated` names
//! the fields the dry run leaves out) -> `pytorchjob` (the admitted job) -> `local` (`--command`,
//! `--path-map`); `env` (the operator's env and the downward API) and `launcher` (a launcher's
//! command line and status lines); `cluster` (events in, actions out), `kubelet` (the pods and
//! the event dispatch every job kind shares; `pod` is one pod as the kubelet runs it) and
//! `controller` (the PyTorchJob's rules: `operator` the training operator's); `rows` and
//! `kubectl` (what `kubectl get -w` shows); the I/O: `options`, `setup`, `ports`, `workdir`,
//! `launcher_process`, `orphans` (what a killed launcher leaves), `output`, `event_loop`.
//!
//! The event loop ([`run_dry_run`]: processes, timers, signals; the only I/O here) loads the job with [`load_job`],
//! feeds a [`Controller`] the [`ClusterEvent`]s it observes, carries out the returned [`ClusterAction`]s
//! (starting each launcher from [`launch_spec`]) and prints each [`Change`] with a
//! [`TextRenderer`] or [`render_json`].

#![warn(missing_docs)]

pub mod cli;
mod cluster;
mod controller;
mod env;
mod event_loop;
mod injection;
mod kubectl;
mod kubelet;
mod launcher;
mod launcher_process;
mod local;
mod manifest;
mod not_emulated;
mod operator;
mod options;
mod orphans;
mod output;
mod pod;
mod ports;
mod pytorchjob;
mod quantity;
mod raw;
mod rows;
mod run;
#[cfg(test)]
mod scenarios;
mod setup;
mod timeline;
mod trainjob;
mod webhook_admission;
mod workdir;
mod workload;

pub use cluster::{ClusterAction, ClusterEvent, ControllerConfig, Outcome, Step};
pub use controller::Controller;
pub use env::{launch_spec, operator_env, LaunchSpec, DRY_RUN_MASTER_ADDR};
pub use event_loop::run_dry_run;
pub use injection::{parse_injection, Fault, Injection, InjectionError, DEFAULT_LABEL_KEY};
pub use kubectl::{kube_age, qualified_name, render_json, TextRenderer, WatchKinds, WatchKindsError};
pub use launcher::{
    healthy_labels, is_operator_managed_var, labels_file_text, launcher_args, parse_status_line, prefixed,
    LauncherFiles, LauncherSettings, StatusLineError, StatusTracker, HEALTHY_NODE, MAX_OUTPUT_LINE, UNLIMITED_RESTARTS,
};
pub use local::{localize, parse_command_override, parse_path_map, CommandOverride, Machine, PathMap};
pub use manifest::{admit_text, load_job, parse_job, LoadedJob, ManifestError, API_VERSION, KIND};
pub use options::{
    DryRunOptions, OutputFormat, OutputFormatError, DEFAULT_BACKOFF_INITIAL, DEFAULT_BACKOFF_MAX, DEFAULT_GRACE_PERIOD,
    DEFAULT_LAUNCHER_LOG_LEVEL, LAUNCHERS_READ_NODE_LABELS,
};
pub use pytorchjob::{
    CleanPodPolicy, Container, ElasticPolicy, EnvSource, PyTorchJob, ReplicaId, ReplicaSpec, ReplicaType, RunPolicy,
    SchedulingPolicy, DEFAULT_CONTAINER_NAME, DEFAULT_MASTER_PORT, DEFAULT_PORT_NAME, KUBEFLOW_JOBS_CONTROLLER,
    MULTIKUEUE_CONTROLLER,
};
pub use quantity::{format_quantity, parse_quantity, CapabilityError, QuantityError, QueueCapability, Resources};
pub use rows::{Change, JobRow, JobState, PodGroupPhase, PodGroupRow, PodRow, PodStatus, Row, WatchEventType};
pub use timeline::{render as render_timeline, FaultMark, Recording, TimelineFormat, TimelineFormatError};
pub use webhook_admission::{BadValue, FieldError, FieldErrorType, FieldErrors, MAX_DRY_RUN_REPLICAS};

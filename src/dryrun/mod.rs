//! `rankvisor dry-run`: manifest admission, the operator's env, the emulated controllers
//! (training operator, Volcano, kubelet), the `kubectl get -w` rendering (all pure), and the
//! driver that runs the job with one real launcher per replica.
//!
//! The driver ([`run_dry_run`]: processes, timers, signals; the only I/O here) loads the job with [`load_job`],
//! feeds a [`Controller`] the [`Event`]s it observes, carries out the returned [`Action`]s
//! (starting each launcher from [`launch_spec`]) and prints each [`Change`] with a
//! [`TextRenderer`] or [`render_json`].

#![warn(missing_docs)]

mod admission;
mod controller;
mod driver;
mod env;
mod injection;
mod job;
mod launcher;
mod manifest;
mod quantity;
mod render;
mod rows;
#[cfg(test)]
mod scenarios;
mod timeline;

pub use admission::{BadValue, FieldError, FieldErrorType, FieldErrors, MAX_DRY_RUN_REPLICAS};
pub use controller::{Action, Controller, ControllerConfig, Event, Outcome, Step};
pub use driver::{
    run_dry_run, DryRunOptions, OutputFormat, OutputFormatError, DEFAULT_BACKOFF_INITIAL, DEFAULT_BACKOFF_MAX,
    DEFAULT_GRACE_PERIOD, DEFAULT_LAUNCHER_LOG_LEVEL, LAUNCHERS_READ_NODE_LABELS,
};
pub use env::{launch_spec, operator_env, LaunchSpec, DRY_RUN_MASTER_ADDR};
pub use injection::{parse_injection, Fault, Injection, InjectionError, DEFAULT_LABEL_KEY};
pub use job::{
    Container, ElasticPolicy, ExitStatus, PyTorchJob, ReplicaId, ReplicaSpec, ReplicaType, RestartPolicy,
    DEFAULT_CONTAINER_NAME, DEFAULT_MASTER_PORT, DEFAULT_PORT_NAME,
};
pub use launcher::{
    exit_status, healthy_labels, is_operator_managed_var, labels_file_text, launcher_args, parse_status_line, prefixed,
    LauncherFiles, LauncherSettings, LineSplitter, StatusLine, StatusLineError, StatusTracker, HEALTHY_NODE,
    MAX_OUTPUT_LINE, UNLIMITED_RESTARTS,
};
pub use manifest::{load_job, parse_job, ManifestError, API_VERSION, KIND};
pub use quantity::{format_quantity, parse_quantity, CapabilityError, QuantityError, QueueCapability, Resources};
pub use render::{kube_age, qualified_name, render_json, TextRenderer, WatchKinds, WatchKindsError};
pub use rows::{Change, JobRow, JobState, PodGroupPhase, PodGroupRow, PodRow, PodStatus, Row, WatchEvent};
pub use timeline::{render as render_timeline, FaultMark, Recording, TimelineFormat, TimelineFormatError};

//! `rankvisor dry-run`, the pure part: manifest admission, the operator's env, the emulated
//! controllers (training operator, Volcano, kubelet) and the `kubectl get -w` rendering.
//!
//! The driver (processes, timers, signals) lives elsewhere: it loads the job with [`load_job`],
//! feeds a [`Controller`] the [`Event`]s it observes, carries out the returned [`Action`]s
//! (starting each launcher from [`launch_spec`]) and prints each [`Change`] with a
//! [`TextRenderer`] or [`render_json`].

#![warn(missing_docs)]

mod admission;
mod controller;
mod env;
mod injection;
mod job;
mod manifest;
mod quantity;
mod render;
mod rows;
#[cfg(test)]
mod scenarios;

pub use admission::{BadValue, FieldError, FieldErrorType, FieldErrors, MAX_DRY_RUN_REPLICAS};
pub use controller::{Action, Controller, ControllerConfig, Event, Outcome, Step};
pub use env::{launch_spec, operator_env, LaunchSpec, DRY_RUN_MASTER_ADDR};
pub use injection::{parse_injection, Fault, Injection, InjectionError, DEFAULT_LABEL_KEY};
pub use job::{
    Container, ElasticPolicy, ExitStatus, PyTorchJob, ReplicaId, ReplicaSpec, ReplicaType, RestartPolicy,
    DEFAULT_CONTAINER_NAME, DEFAULT_MASTER_PORT, DEFAULT_PORT_NAME,
};
pub use manifest::{load_job, parse_job, ManifestError, API_VERSION, KIND};
pub use quantity::{format_quantity, parse_quantity, CapabilityError, QuantityError, QueueCapability, Resources};
pub use render::{kube_age, qualified_name, render_json, TextRenderer, WatchKinds, WatchKindsError};
pub use rows::{Change, JobRow, JobState, PodGroupPhase, PodGroupRow, PodRow, PodStatus, Row, WatchEvent};

//! Configuration: the command line's types (`args`), every environment variable read once
//! (`env`), and the pure functions that turn both into validated settings (`supervise`).
//! A configuration error is exit 64 at the CLI edge, with a message naming the culprit.

mod agent;
pub use agent::replica_mode;
pub mod args;
pub mod env;
mod pod_labels;
mod supervise;

pub use env::EnvSnapshot;
pub use pod_labels::{pod_restart_attempt, POD_LABELS_FILE};
pub use supervise::{
    health_settings, identity, kube_settings, linger_limit_of, pod_name, rank_env, supervise_config, supervisor_config,
    HealthSettings, KubeEventsTarget, KubeSettings, SuperviseConfig, DEFAULT_RENDEZVOUS_PORT, MIN_RESTART_DELAY,
};

/// A configuration or environment problem: the message names the option or variable, the value
/// seen and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

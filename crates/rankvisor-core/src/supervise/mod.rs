//! Local supervision: Kubernetes restart semantics inside the container, as pure decisions.

mod backoff;
mod machine;
mod policy;

pub use backoff::BackoffConfig;
pub use machine::{Action, Event, GiveUp, HangConfig, Phase, StopCause, Supervisor, SupervisorConfig};
pub use policy::{is_retryable_exit_code, RestartPolicy, RestartScope};

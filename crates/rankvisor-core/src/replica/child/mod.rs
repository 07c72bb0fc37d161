//! The child's own lifecycle inside the replica, as pure decisions: Kubernetes restart semantics
//! (policy, the kubelet's backoff, the backoff limit), hang detection from the heartbeat, the
//! graceful stop, and the stop and release of a rendezvous generation. The replica's machine
//! feeds it events and carries out its [`ChildAction`]s; its [`ChildOutcome`]s (a new generation
//! is needed, the child is done for good) are the replica's to decide on.

mod machine;
#[cfg(test)]
mod tests;
mod types;

pub use machine::Supervisor;
pub use types::{
    escape_line, CheckpointConfig, ChildAction, ChildOutcome, ChildSteps, Event, GiveUp, HangConfig, LogRuleHit, Phase,
    StopCause, SupervisorConfig, KILL_WAIT, QUOTED_LINE_CHARS, SNAPSHOT_WAIT,
};

//! The replica's state as every reporter (HTTP, webhook, control channel, dry run) sees it.

use serde::{Deserialize, Serialize};

/// Where a replica is in its life, as reported upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReplicaState {
    /// Launcher started; nothing checked yet.
    Pending,
    /// Waiting at the rendezvous barrier.
    Rendezvous,
    /// The training process runs.
    Running,
    /// The training process ended and will be started again after a backoff.
    Restarting,
    /// The training process is being stopped (signal forwarded, grace period running).
    Stopping,
    /// Finished: the training process succeeded and will not be restarted.
    Succeeded,
    /// Finished: rankvisor gave up (child failed, hang, rendezvous).
    Failed,
    /// The node's health labels mark it unhealthy.
    NodeUnhealthy,
}

impl ReplicaState {
    /// True for the states after which nothing more happens.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::NodeUnhealthy)
    }
}

/// This replica's supervision status, published by the driver on every change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LocalStatus {
    /// Where the replica is.
    pub state: ReplicaState,
    /// Restarts made by rankvisor.
    pub restart_count: u32,
    /// Rendezvous generation of the running child.
    pub generation: u64,
    /// How the last child ended.
    pub last_exit: Option<crate::exit::ExitHow>,
    /// Why the last child is counted as failed beyond its exit (`Hung`), when it is.
    pub last_exit_reason: Option<String>,
    /// The running child's pid.
    pub child_pid: Option<i32>,
    /// Hangs detected so far.
    pub hang_detections: u32,
    /// The latest training progress from the heartbeat file.
    pub progress: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Default for LocalStatus {
    fn default() -> Self {
        Self {
            state: ReplicaState::Pending,
            restart_count: 0,
            generation: 0,
            last_exit: None,
            last_exit_reason: None,
            child_pid: None,
            hang_detections: 0,
            progress: None,
        }
    }
}

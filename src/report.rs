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

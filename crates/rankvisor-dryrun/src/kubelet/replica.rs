//! The key every controller names its pods by (the kubelet's, the events' and the rows'): a replica
//! type and an index. A PyTorchJob's pods are `master-0`, `worker-N`; a TrainJob's nodes are the workers.

use std::fmt;

use serde::Serialize;

/// The two replica types a PyTorchJob has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum ReplicaType {
    /// Rank 0; the job's state follows it.
    Master,
    /// Ranks 1.. (or 0.. in a job without a master).
    Worker,
}

impl ReplicaType {
    /// The spelling of the key in `spec.pytorchReplicaSpecs`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Master => "Master",
            Self::Worker => "Worker",
        }
    }

    /// The lowercase spelling used in pod names.
    pub fn lower(self) -> &'static str {
        match self {
            Self::Master => "master",
            Self::Worker => "worker",
        }
    }
}

impl fmt::Display for ReplicaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One replica (one pod) of the job: `master-0`, `worker-2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ReplicaId {
    /// Master or Worker.
    pub rtype: ReplicaType,
    /// Index within its type, from 0.
    pub index: u32,
}

impl ReplicaId {
    /// The master, `master-0`.
    pub const MASTER: ReplicaId = ReplicaId { rtype: ReplicaType::Master, index: 0 };

    /// Worker `index`.
    pub fn worker(index: u32) -> Self {
        Self { rtype: ReplicaType::Worker, index }
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.rtype.lower(), self.index)
    }
}

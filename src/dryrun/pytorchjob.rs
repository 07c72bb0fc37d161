//! A PyTorchJob after admission: the validated, defaulted model every other part of the dry run reads.

use std::fmt;

use serde::Serialize;

use super::quantity::Resources;
use crate::supervise::RestartPolicy;

/// The port the operator's defaulting webhook gives the `pytorchjob-port` when the manifest names none.
pub const DEFAULT_MASTER_PORT: u16 = 23456;

/// The name the operator requires for the training container.
pub const DEFAULT_CONTAINER_NAME: &str = "pytorch";

/// The name of the container port the operator reads MASTER_PORT from.
pub const DEFAULT_PORT_NAME: &str = "pytorchjob-port";

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

/// The training container of one replica type, as the dry run runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// The container's `command` followed by its `args`.
    pub command: Vec<String>,
    /// The container's own `env` (name, value), in manifest order.
    pub env: Vec<(String, String)>,
    /// The `pytorchjob-port` container port, if the manifest names one.
    pub port: Option<u16>,
}

/// One entry of `spec.pytorchReplicaSpecs`, defaulted and validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSpec {
    /// Master or Worker.
    pub rtype: ReplicaType,
    /// How many pods of this type.
    pub replicas: u32,
    /// The pods' restart policy (default OnFailure).
    pub restart_policy: RestartPolicy,
    /// The `pytorch` container.
    pub container: Container,
    /// What one pod asks of the queue: every container's limits (requests where no limit).
    pub resources: Resources,
}

/// `spec.elasticPolicy`, after the operator's defaulting (min and max are always set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElasticPolicy {
    /// Fewest replicas torchrun accepts.
    pub min_replicas: u32,
    /// Most replicas torchrun accepts.
    pub max_replicas: u32,
    /// `rdzvBackend` (default c10d).
    pub rdzv_backend: String,
    /// `rdzvPort`, if given.
    pub rdzv_port: Option<u16>,
    /// `rdzvId`, if given.
    pub rdzv_id: Option<String>,
    /// `rdzvConf` as (key, value) pairs.
    pub rdzv_conf: Vec<(String, String)>,
    /// `standalone: true`.
    pub standalone: bool,
    /// `maxRestarts`, if given.
    pub max_restarts: Option<u32>,
    /// The deprecated `elasticPolicy.nProcPerNode`, if given.
    pub nproc_per_node: Option<u32>,
}

/// A PyTorchJob that passed admission: what the dry run runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyTorchJob {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` (default `default`).
    pub namespace: String,
    /// `spec.runPolicy.backoffLimit`; absent means the operator sets no job-wide limit.
    pub backoff_limit: Option<u32>,
    /// `spec.nprocPerNode` (default `auto`), absent when the deprecated elastic field is used.
    pub nproc_per_node: Option<String>,
    /// `spec.elasticPolicy`.
    pub elastic: Option<ElasticPolicy>,
    /// The Master spec, if the job has one.
    pub master: Option<ReplicaSpec>,
    /// The Worker spec, if the job has one.
    pub worker: Option<ReplicaSpec>,
}

impl PyTorchJob {
    /// The spec of one replica type.
    pub fn spec(&self, rtype: ReplicaType) -> Option<&ReplicaSpec> {
        match rtype {
            ReplicaType::Master => self.master.as_ref(),
            ReplicaType::Worker => self.worker.as_ref(),
        }
    }

    /// Every replica in the order pods are listed: master-0, worker-0, worker-1, ...
    pub fn replicas(&self) -> Vec<ReplicaId> {
        [ReplicaType::Master, ReplicaType::Worker]
            .into_iter()
            .filter_map(|t| self.spec(t))
            .flat_map(|s| (0..s.replicas).map(move |index| ReplicaId { rtype: s.rtype, index }))
            .collect()
    }

    /// Whether the manifest has this replica.
    pub fn contains(&self, id: ReplicaId) -> bool {
        self.spec(id.rtype).is_some_and(|s| id.index < s.replicas)
    }

    /// The sum of all replicas: the PodGroup's minMember and the default PET_NNODES.
    pub fn total_replicas(&self) -> u32 {
        self.master.iter().chain(self.worker.iter()).map(|s| s.replicas).sum()
    }

    /// The pod's name, `<job>-master-0`, `<job>-worker-<i>`.
    pub fn pod_name(&self, id: ReplicaId) -> String {
        format!("{}-{}", self.name, id)
    }

    /// The replica's node rank: master 0, worker i -> i+1 (i in a job without a master).
    pub fn rank(&self, id: ReplicaId) -> u32 {
        match id.rtype {
            ReplicaType::Master => 0,
            ReplicaType::Worker if self.master.is_some() => id.index.saturating_add(1),
            ReplicaType::Worker => id.index,
        }
    }

    /// The master's `pytorchjob-port`, else the operator's default 23456.
    pub fn master_port(&self) -> u16 {
        self.master.as_ref().and_then(|s| s.container.port).unwrap_or(DEFAULT_MASTER_PORT)
    }

    /// What the whole job asks of the queue: the sum over every pod.
    pub fn total_resources(&self) -> Resources {
        let mut total = Resources::default();
        for spec in self.master.iter().chain(self.worker.iter()) {
            for _ in 0..spec.replicas {
                total.add(&spec.resources);
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_ids_render_like_pod_name_suffixes() {
        assert_eq!(ReplicaId::MASTER.to_string(), "master-0");
        assert_eq!(ReplicaId::worker(2).to_string(), "worker-2");
    }
}

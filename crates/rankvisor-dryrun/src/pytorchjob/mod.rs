//! A PyTorchJob after admission: the validated, defaulted model every other part of the dry run reads.

pub(crate) mod admission;
pub(crate) mod controller;
pub(crate) mod env;
mod not_emulated;
mod operator;
mod raw;
#[cfg(test)]
mod scenarios;
mod webhook_admission;

use crate::k8s::container::Container;
use crate::k8s::quantity::Resources;
use crate::kubelet::replica::{ReplicaId, ReplicaType};
use rankvisor_core::policy::RestartPolicy;

/// The port the operator's defaulting webhook gives the `pytorchjob-port` when the manifest names none.
pub(crate) const DEFAULT_MASTER_PORT: u16 = 23456;

/// The name the operator requires for the training container.
pub(crate) const DEFAULT_CONTAINER_NAME: &str = "pytorch";

/// The name of the container port the operator reads MASTER_PORT from.
pub(crate) const DEFAULT_PORT_NAME: &str = "pytorchjob-port";

/// One entry of `spec.pytorchReplicaSpecs`, defaulted and validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSpec {
    /// Master or Worker.
    pub(crate) rtype: ReplicaType,
    /// How many pods of this type.
    pub(crate) replicas: u32,
    /// The pods' restart policy (default OnFailure).
    pub restart_policy: RestartPolicy,
    /// The `pytorch` container.
    pub(crate) container: Container,
    /// What one pod asks of the queue: every container's requests (limits where no request).
    pub(crate) resources: Resources,
    /// The pod template's labels (the operator adds its own).
    pub(crate) labels: Vec<(String, String)>,
    /// The pod template's annotations.
    pub(crate) annotations: Vec<(String, String)>,
    /// `serviceAccountName` (default `default`).
    pub(crate) service_account: Option<String>,
}

/// `spec.elasticPolicy`, after the operator's defaulting (min and max are always set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ElasticPolicy {
    /// Fewest replicas torchrun accepts.
    pub min_replicas: i64,
    /// Most replicas torchrun accepts.
    pub max_replicas: i64,
    /// `rdzvBackend` (default c10d).
    pub rdzv_backend: String,
    /// `rdzvPort`, if given.
    pub rdzv_port: Option<i64>,
    /// `rdzvHost`, if given (a cluster name: the dry run's endpoint is on this machine).
    pub rdzv_host: Option<String>,
    /// `rdzvId`, if given.
    pub rdzv_id: Option<String>,
    /// `rdzvConf` as (key, value) pairs.
    pub rdzv_conf: Vec<(String, String)>,
    /// `standalone: true`.
    pub standalone: bool,
    /// `maxRestarts`, if given.
    pub max_restarts: Option<i64>,
    /// The deprecated `elasticPolicy.nProcPerNode`, if given.
    pub nproc_per_node: Option<i64>,
}

/// `spec.runPolicy.cleanPodPolicy`: which pods the operator deletes once the job has finished.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum CleanPodPolicy {
    /// Keep every pod (the operator's default): pods still running go on running.
    #[default]
    None,
    /// Delete the pods still running (or pending).
    Running,
    /// Delete every pod.
    All,
    /// A value the API does not define: the operator's comparisons treat it as `All`.
    Other(String),
}

impl CleanPodPolicy {
    /// Whether a finished job's pod in this state is deleted (`DeletePodsAndServices`).
    pub(crate) fn deletes(&self, running_or_pending: bool) -> bool {
        match self {
            Self::None => false,
            Self::Running => running_or_pending,
            Self::All | Self::Other(_) => true,
        }
    }
}

/// `spec.runPolicy.schedulingPolicy`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SchedulingPolicy {
    /// `minAvailable`: the PodGroup's minMember (default: every replica).
    pub min_available: Option<i32>,
    /// `queue` (default `default`).
    pub queue: Option<String>,
    /// `priorityClass`, set on the PodGroup.
    pub priority_class: Option<String>,
    /// `minResources`, the PodGroup's (default: what the first minMember pods ask).
    pub min_resources: Option<Resources>,
    /// `scheduleTimeoutSeconds` (scheduler-plugins only; Volcano ignores it).
    pub schedule_timeout_seconds: Option<i32>,
}

/// `spec.runPolicy`, as written (the operator defaults only cleanPodPolicy).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct RunPolicy {
    /// `backoffLimit`; absent: no job-wide limit. The webhook admits a negative one, which fails
    /// the job at its first reconcile (`PastBackoffLimit`: 0 restarts >= the limit).
    pub backoff_limit: Option<i32>,
    /// `cleanPodPolicy` (default None).
    pub clean_pod_policy: CleanPodPolicy,
    /// `activeDeadlineSeconds`.
    pub active_deadline_seconds: Option<i64>,
    /// `ttlSecondsAfterFinished`.
    pub ttl_seconds_after_finished: Option<i32>,
    /// `suspend`.
    pub suspend: bool,
    /// `managedBy` (the webhook admits only the operator's own name and Kueue's MultiKueue).
    pub managed_by: Option<String>,
    /// `schedulingPolicy`.
    pub scheduling: SchedulingPolicy,
}

/// The `managedBy` value under which the training operator runs the job itself.
pub(crate) const KUBEFLOW_JOBS_CONTROLLER: &str = "kubeflow.org/training-operator";

/// The other `managedBy` value the webhook admits: the job is left to Kueue's MultiKueue.
pub(crate) const MULTIKUEUE_CONTROLLER: &str = "kueue.x-k8s.io/multikueue";

impl RunPolicy {
    /// The controller that manages the job instead of the training operator
    /// (`ManagedByExternalController`), if any.
    pub(crate) fn external_manager(&self) -> Option<&str> {
        self.managed_by.as_deref().filter(|m| *m != KUBEFLOW_JOBS_CONTROLLER)
    }
}

/// A PyTorchJob that passed admission: what the dry run runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyTorchJob {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` (default `default`).
    pub namespace: String,
    /// `spec.runPolicy`.
    pub(crate) run_policy: RunPolicy,
    /// `spec.nprocPerNode` (default `auto`), absent when the deprecated elastic field is used.
    pub(crate) nproc_per_node: Option<String>,
    /// `spec.elasticPolicy`.
    pub(crate) elastic: Option<ElasticPolicy>,
    /// The Master spec, if the job has one.
    pub(crate) master: Option<ReplicaSpec>,
    /// The Worker spec, if the job has one.
    pub(crate) worker: Option<ReplicaSpec>,
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
    pub(crate) fn contains(&self, id: ReplicaId) -> bool {
        self.spec(id.rtype).is_some_and(|s| id.index < s.replicas)
    }

    /// The PodGroup's minMember: `schedulingPolicy.minAvailable`, else every replica.
    pub(crate) fn min_member(&self) -> u32 {
        match self.run_policy.scheduling.min_available {
            Some(n) => u32::try_from(n).unwrap_or(0),
            None => self.total_replicas(),
        }
    }

    /// The Volcano queue: `schedulingPolicy.queue`, else `default`.
    pub(crate) fn queue(&self) -> &str {
        self.run_policy.scheduling.queue.as_deref().filter(|q| !q.is_empty()).unwrap_or("default")
    }

    /// The sum of all replicas: the PodGroup's minMember and the default PET_NNODES.
    pub(crate) fn total_replicas(&self) -> u32 {
        self.master.iter().chain(self.worker.iter()).map(|s| s.replicas).sum()
    }

    /// The pod's name, `<job>-master-0`, `<job>-worker-<i>`.
    pub fn pod_name(&self, id: ReplicaId) -> String {
        format!("{}-{}", self.name, id)
    }

    /// The replica's node rank: master 0, worker i -> i+1 (i in a job without a master).
    pub(crate) fn rank(&self, id: ReplicaId) -> u32 {
        match id.rtype {
            ReplicaType::Master => 0,
            ReplicaType::Worker if self.master.is_some() => id.index.saturating_add(1),
            ReplicaType::Worker => id.index,
        }
    }

    /// The master's `pytorchjob-port` (the Worker's in a job without a master: elastic jobs'
    /// rendezvous port), else the operator's default 23456.
    pub fn master_port(&self) -> u16 {
        self.master.as_ref().or(self.worker.as_ref()).and_then(|s| s.container.port).unwrap_or(DEFAULT_MASTER_PORT)
    }

    /// The PodGroup's minResources: `schedulingPolicy.minResources`, else what the first
    /// minMember pods ask, Master first (`CalcPGMinResources`).
    pub(crate) fn min_resources(&self) -> Resources {
        if let Some(r) = &self.run_policy.scheduling.min_resources {
            return r.clone();
        }
        let mut total = Resources::default();
        let pods =
            self.master.iter().chain(self.worker.iter()).flat_map(|s| (0..s.replicas).map(move |_| &s.resources));
        for r in pods.take(self.min_member() as usize) {
            total.add(r);
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

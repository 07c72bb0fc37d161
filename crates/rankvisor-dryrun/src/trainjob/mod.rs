//! Kubeflow Trainer v2 (`kubeflow/trainer` v2.3.0): a TrainJob and its runtime become a JobSet
//! (`kubernetes-sigs/jobset` v0.12.0) whose Indexed Job runs the trainer nodes.
//!
//! Module map: `raw` (the documents as written) -> `runtime` (the built-in runtimes) ->
//! `admission` (the schema, the TrainJob webhook, the runtime's merge and every default) ->
//! [`TrainJob`] (what runs); `env` (the Torch plugin's env of node k); the pure rules of each
//! controller, each function named after the Go one it mirrors: `job` (Kubernetes' Job
//! controller), `jobset` (the JobSet controller), `conditions` (the TrainJob controller); and
//! `controller`, which applies them to the pods the shared kubelet ([`crate::kubelet`]) runs.

pub(crate) mod admission;
pub(crate) mod conditions;
pub(crate) mod controller;
pub(crate) mod env;
pub(crate) mod job;
pub(crate) mod jobset;
pub(crate) mod raw;
pub(crate) mod runtime;
#[cfg(test)]
mod scenarios;

use rankvisor_core::policy::RestartPolicy;

use crate::k8s::container::Container;
use crate::k8s::quantity::Resources;

/// `trainer.kubeflow.org/v1alpha1`.
pub(crate) const TRAINER_API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";
/// The TrainJob's kind.
pub(crate) const TRAINJOB_KIND: &str = "TrainJob";
/// The trainer ReplicatedJob's name and its container's (`constants.Node`).
pub(crate) const NODE: &str = "node";
/// The port every trainer node's torchrun meets on (`constants.ContainerTrainerPort`).
pub(crate) const TRAINER_PORT: u16 = 29500;
/// Kubernetes' default `backoffLimit` of a Job.
pub(crate) const DEFAULT_BACKOFF_LIMIT: i32 = 6;

/// One `podFailurePolicy` rule on exit codes (`onPodConditions` rules never match here: no pod
/// gets a DisruptionTarget condition on this machine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodFailurePolicyRule {
    /// FailJob, Ignore or Count.
    pub action: PodFailureAction,
    /// `onExitCodes.containerName`, if given.
    pub container_name: Option<String>,
    /// `onExitCodes.operator` is `In` (else `NotIn`).
    pub operator_in: bool,
    /// `onExitCodes.values`.
    pub values: Vec<i32>,
}

/// `podFailurePolicy` rule actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PodFailureAction {
    /// The Job fails at once with reason `PodFailurePolicy`.
    FailJob,
    /// The failure does not count towards `backoffLimit`.
    Ignore,
    /// The failure counts (the default handling).
    Count,
}

/// `failurePolicy.rules[].action` (the per-Job actions need a feature gate that is off by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailurePolicyAction {
    /// Fail the JobSet: `FailJobSetFailurePolicyAction`.
    FailJobSet,
    /// Recreate every Job, counting towards `maxRestarts`.
    RestartJobSet,
    /// Recreate every Job, not counting.
    RestartJobSetAndIgnoreMaxRestarts,
}

/// One `failurePolicy` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FailurePolicyRule {
    /// `name` (defaulted `failurePolicyRule<i>` by the JobSet webhook).
    pub name: String,
    /// `action`.
    pub action: FailurePolicyAction,
    /// `onJobFailureReasons` (empty: any).
    pub on_job_failure_reasons: Vec<String>,
    /// `targetReplicatedJobs` (empty: any).
    pub target_replicated_jobs: Vec<String>,
}

/// The JobSet's `failurePolicy`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FailurePolicy {
    /// `maxRestarts` (default 0).
    pub max_restarts: i32,
    /// `rules`, tried in order.
    pub rules: Vec<FailurePolicyRule>,
}

/// The JobSet's `successPolicy` (defaulted `All` over every ReplicatedJob).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SuccessPolicy {
    /// `Any` (else `All`).
    pub any: bool,
    /// `targetReplicatedJobs` (empty: every one).
    pub target_replicated_jobs: Vec<String>,
}

/// A TrainJob that passed admission, merged with its runtime: what the dry run runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TrainJob {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` (default `default`).
    pub namespace: String,
    /// The runtime, `ClusterTrainingRuntime/torch-distributed`.
    pub runtime: String,
    /// Trainer nodes: `spec.trainer.numNodes`, else the runtime's `mlPolicy.numNodes`.
    pub num_nodes: u32,
    /// `PET_NPROC_PER_NODE`: `numProcPerNode`, else `auto` with a GPU, else the CPU count.
    pub nproc_per_node: String,
    /// The trainer ReplicatedJob's name (`node`).
    pub replicated_job: String,
    /// The `node` container: the runtime's, with the TrainJob's image, command, args and env.
    pub container: Container,
    /// The resources one node asks for (`resourcesPerNode`, else the runtime's).
    pub resources: Resources,
    /// The pods' `restartPolicy` (the JobSet webhook's default: OnFailure).
    pub restart_policy: RestartPolicy,
    /// The Job's `backoffLimit` (Kubernetes' default 6), shared by every node.
    pub backoff_limit: i32,
    /// The Job's `podFailurePolicy` rules.
    pub pod_failure_policy: Vec<PodFailurePolicyRule>,
    /// The JobSet's `failurePolicy` (None: the first failed Job fails the JobSet).
    pub failure_policy: Option<FailurePolicy>,
    /// The JobSet's `successPolicy`.
    pub success_policy: SuccessPolicy,
    /// `spec.suspend`.
    pub suspend: bool,
    /// `spec.activeDeadlineSeconds` (0 or absent: none).
    pub active_deadline_seconds: Option<u64>,
    /// `spec.managedBy` when another controller manages the TrainJob.
    pub managed_by: Option<String>,
}

impl TrainJob {
    /// The trainer Job: `<trainjob>-<replicatedJob>-0`.
    pub(crate) fn job_name(&self) -> String {
        format!("{}-{}-0", self.name, self.replicated_job)
    }

    /// Node `k`'s hostname (the Indexed Job's `<job>-<k>`), which its pod keeps across recreations.
    pub(crate) fn hostname(&self, k: u32) -> String {
        format!("{}-{k}", self.job_name())
    }
}

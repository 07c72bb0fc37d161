//! A TrainJob, a (Cluster)TrainingRuntime and the JobSet template inside it, as written: serde's
//! view before admission. Containers, env and resources are the v1 manifest's own raw types.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::Deserialize;

use crate::k8s::raw::{RawContainer, RawEnvVar, RawMetadata, RawResources, Scalar};

/// Any document of the file: its kind decides which shape it is read as.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawHead {
    /// `apiVersion`.
    pub api_version: Option<String>,
    /// `kind`.
    pub kind: Option<String>,
}

/// `trainer.kubeflow.org/v1alpha1` `TrainJob`.
#[derive(Debug, Deserialize)]
pub(crate) struct RawTrainJob {
    /// `metadata`.
    #[serde(default)]
    pub metadata: RawMetadata,
    /// `spec`.
    #[serde(default)]
    pub spec: RawTrainJobSpec,
}

/// `TrainJob.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawTrainJobSpec {
    /// `runtimeRef`.
    pub runtime_ref: Option<RawRuntimeRef>,
    /// `trainer`.
    pub trainer: Option<RawTrainer>,
    /// `initializer` (model and dataset downloads: not emulated).
    pub initializer: Option<IgnoredAny>,
    /// `suspend`.
    pub suspend: Option<bool>,
    /// `activeDeadlineSeconds`.
    pub active_deadline_seconds: Option<i64>,
    /// `managedBy`.
    pub managed_by: Option<String>,
    /// `podTemplateOverrides` (older releases; not emulated).
    pub pod_template_overrides: Option<IgnoredAny>,
    /// `runtimePatches` (not emulated).
    pub runtime_patches: Option<IgnoredAny>,
}

/// `spec.runtimeRef`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawRuntimeRef {
    /// `name`.
    pub name: Option<String>,
    /// `apiGroup` (default `trainer.kubeflow.org`).
    pub api_group: Option<String>,
    /// `kind` (default `ClusterTrainingRuntime`).
    pub kind: Option<String>,
}

/// `spec.trainer`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawTrainer {
    /// `image`.
    pub image: Option<String>,
    /// `command`.
    pub command: Option<Vec<String>>,
    /// `args`.
    pub args: Option<Vec<String>>,
    /// `env`.
    #[serde(default)]
    pub env: Vec<RawEnvVar>,
    /// `numNodes`.
    pub num_nodes: Option<i64>,
    /// `resourcesPerNode`.
    pub resources_per_node: Option<RawResources>,
    /// `numProcPerNode` (an integer in v2.3.0's API).
    pub num_proc_per_node: Option<Scalar>,
}

/// `ClusterTrainingRuntime` / `TrainingRuntime`.
#[derive(Debug, Deserialize)]
pub(crate) struct RawRuntime {
    /// `metadata`.
    #[serde(default)]
    pub metadata: RawMetadata,
    /// `spec`.
    #[serde(default)]
    pub spec: RawRuntimeSpec,
}

/// The runtime's `spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawRuntimeSpec {
    /// `mlPolicy`.
    #[serde(default)]
    pub ml_policy: RawMlPolicy,
    /// `podGroupPolicy` (gang scheduling through a plugin: not emulated).
    pub pod_group_policy: Option<IgnoredAny>,
    /// `template`: the JobSet's.
    #[serde(default)]
    pub template: RawJobSetTemplate,
}

/// `mlPolicy`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawMlPolicy {
    /// `numNodes`.
    pub num_nodes: Option<i64>,
    /// `torch` (v2.3.0's TorchMLPolicySource has no field the dry run needs).
    pub torch: Option<IgnoredAny>,
    /// `mpi` (MPI's sshd and hostfile: not emulated).
    pub mpi: Option<IgnoredAny>,
}

/// `template` of a runtime.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawJobSetTemplate {
    /// `spec`: a JobSet spec.
    #[serde(default)]
    pub spec: RawJobSetSpec,
}

/// `jobset.x-k8s.io/v1alpha2` `JobSetSpec`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawJobSetSpec {
    /// `replicatedJobs`.
    #[serde(default)]
    pub replicated_jobs: Vec<RawReplicatedJob>,
    /// `failurePolicy`.
    pub failure_policy: Option<RawFailurePolicy>,
    /// `successPolicy`.
    pub success_policy: Option<RawSuccessPolicy>,
}

/// One `replicatedJobs` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawReplicatedJob {
    /// `name`.
    #[serde(default)]
    pub name: String,
    /// `dependsOn`.
    #[serde(default)]
    pub depends_on: Vec<RawDependsOn>,
    /// `template`: a Job template.
    #[serde(default)]
    pub template: RawJobTemplate,
}

/// `dependsOn` entry.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawDependsOn {
    /// `name`.
    #[serde(default)]
    pub name: String,
}

/// A Job template.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawJobTemplate {
    /// `metadata` (the ancestor label).
    #[serde(default)]
    pub metadata: RawLabels,
    /// `spec`.
    #[serde(default)]
    pub spec: RawJobSpec,
}

/// `metadata.labels`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawLabels {
    /// `labels`.
    #[serde(default)]
    pub labels: BTreeMap<String, Scalar>,
}

/// `batch/v1` `JobSpec`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawJobSpec {
    /// `backoffLimit` (Kubernetes' default 6).
    pub backoff_limit: Option<i64>,
    /// `completionMode`.
    pub completion_mode: Option<String>,
    /// `podFailurePolicy`.
    pub pod_failure_policy: Option<RawPodFailurePolicy>,
    /// `template`: the pod template.
    #[serde(default)]
    pub template: RawPodTemplate,
}

/// A pod template.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawPodTemplate {
    /// `spec`.
    #[serde(default)]
    pub spec: RawPodTemplateSpec,
}

/// A pod template's spec.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawPodTemplateSpec {
    /// `restartPolicy`.
    pub restart_policy: Option<String>,
    /// `initContainers` (not run).
    #[serde(default)]
    pub init_containers: Vec<IgnoredAny>,
    /// `containers`.
    #[serde(default)]
    pub containers: Vec<RawContainer>,
}

/// `podFailurePolicy`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawPodFailurePolicy {
    /// `rules`.
    #[serde(default)]
    pub rules: Vec<RawPodFailurePolicyRule>,
}

/// One `podFailurePolicy` rule.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawPodFailurePolicyRule {
    /// `action`: FailJob, Ignore, Count (FailIndex needs backoffLimitPerIndex).
    #[serde(default)]
    pub action: String,
    /// `onExitCodes`.
    pub on_exit_codes: Option<RawOnExitCodes>,
    /// `onPodConditions` (a pod condition such as DisruptionTarget: never set here).
    pub on_pod_conditions: Option<IgnoredAny>,
}

/// `onExitCodes`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawOnExitCodes {
    /// `containerName`.
    pub container_name: Option<String>,
    /// `operator`: In or NotIn.
    #[serde(default)]
    pub operator: String,
    /// `values`.
    #[serde(default)]
    pub values: Vec<i64>,
}

/// `failurePolicy`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawFailurePolicy {
    /// `maxRestarts` (default 0).
    pub max_restarts: Option<i64>,
    /// `restartStrategy` (Recreate, BlockingRecreate; InPlaceRestart is not emulated).
    pub restart_strategy: Option<String>,
    /// `rules`.
    #[serde(default)]
    pub rules: Vec<RawFailurePolicyRule>,
}

/// One `failurePolicy` rule.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawFailurePolicyRule {
    /// `name` (default `failurePolicyRule<i>`).
    pub name: Option<String>,
    /// `action`.
    #[serde(default)]
    pub action: String,
    /// `onJobFailureReasons`.
    #[serde(default)]
    pub on_job_failure_reasons: Vec<String>,
    /// `onJobFailureMessagePatterns`.
    #[serde(default)]
    pub on_job_failure_message_patterns: Vec<String>,
    /// `targetReplicatedJobs`.
    #[serde(default)]
    pub target_replicated_jobs: Vec<String>,
}

/// `successPolicy`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawSuccessPolicy {
    /// `operator`: All or Any.
    pub operator: Option<String>,
    /// `targetReplicatedJobs`.
    #[serde(default)]
    pub target_replicated_jobs: Vec<String>,
}

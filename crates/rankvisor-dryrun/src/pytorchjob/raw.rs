//! The manifest as written, before defaulting and admission: serde's view of a PyTorchJob.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::k8s::raw::{RawContainer, RawMetadata, Scalar};

/// The whole manifest, as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawJob {
    /// `apiVersion`.
    pub api_version: Option<String>,
    /// `kind`.
    pub kind: Option<String>,
    /// `metadata`.
    #[serde(default)]
    pub metadata: RawMetadata,
    /// `spec`.
    #[serde(default)]
    pub spec: RawSpec,
}

/// `spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawSpec {
    /// `runPolicy`.
    #[serde(default)]
    pub run_policy: RawRunPolicy,
    /// `elasticPolicy`.
    pub elastic_policy: Option<RawElasticPolicy>,
    /// `nprocPerNode`.
    pub nproc_per_node: Option<Scalar>,
    /// `pytorchReplicaSpecs`, keyed by replica type as written.
    pub pytorch_replica_specs: Option<BTreeMap<String, Option<RawReplicaSpec>>>,
}

/// `spec.runPolicy`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawRunPolicy {
    /// `backoffLimit`.
    pub backoff_limit: Option<i64>,
    /// `cleanPodPolicy`.
    pub clean_pod_policy: Option<String>,
    /// `activeDeadlineSeconds`.
    pub active_deadline_seconds: Option<i64>,
    /// `ttlSecondsAfterFinished`.
    pub ttl_seconds_after_finished: Option<i64>,
    /// `suspend`.
    pub suspend: Option<bool>,
    /// `managedBy`.
    pub managed_by: Option<String>,
    /// `schedulingPolicy`.
    pub scheduling_policy: Option<RawSchedulingPolicy>,
}

/// `spec.runPolicy.schedulingPolicy`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawSchedulingPolicy {
    /// `minAvailable`.
    pub min_available: Option<i64>,
    /// `queue`.
    pub queue: Option<String>,
    /// `priorityClass`.
    pub priority_class: Option<String>,
    /// `minResources`.
    #[serde(default)]
    pub min_resources: BTreeMap<String, Scalar>,
    /// `scheduleTimeoutSeconds`.
    pub schedule_timeout_seconds: Option<i64>,
}

/// `spec.elasticPolicy`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawElasticPolicy {
    /// `minReplicas`.
    pub min_replicas: Option<i64>,
    /// `maxReplicas`.
    pub max_replicas: Option<i64>,
    /// `rdzvBackend`.
    pub rdzv_backend: Option<String>,
    /// `rdzvPort`.
    pub rdzv_port: Option<i64>,
    /// `rdzvHost`.
    pub rdzv_host: Option<String>,
    /// `rdzvId`.
    pub rdzv_id: Option<String>,
    /// `rdzvConf`.
    #[serde(default)]
    pub rdzv_conf: Vec<RawKeyValue>,
    /// `standalone`.
    pub standalone: Option<bool>,
    /// `nProcPerNode` (deprecated).
    #[serde(rename = "nProcPerNode")]
    pub nproc_per_node: Option<i64>,
    /// `maxRestarts`.
    pub max_restarts: Option<i64>,
}

/// `{key, value}` of `rdzvConf`.
#[derive(Debug, Deserialize)]
pub(crate) struct RawKeyValue {
    /// `key`.
    pub key: String,
    /// `value`.
    pub value: Option<Scalar>,
}

/// One entry of `pytorchReplicaSpecs`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawReplicaSpec {
    /// `replicas`.
    pub replicas: Option<i64>,
    /// `restartPolicy`.
    pub restart_policy: Option<String>,
    /// `template`.
    #[serde(default)]
    pub template: RawTemplate,
}

/// `template`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawTemplate {
    /// `metadata`.
    #[serde(default)]
    pub metadata: RawPodMetadata,
    /// `spec`.
    #[serde(default)]
    pub spec: RawPodSpec,
}

/// `template.metadata`: what the downward API's `metadata.labels[...]`/`annotations[...]` read.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawPodMetadata {
    /// `labels`.
    #[serde(default)]
    pub labels: BTreeMap<String, Scalar>,
    /// `annotations`.
    #[serde(default)]
    pub annotations: BTreeMap<String, Scalar>,
}

/// `template.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawPodSpec {
    /// `containers`.
    #[serde(default)]
    pub containers: Vec<RawContainer>,
    /// `serviceAccountName` (the downward API's `spec.serviceAccountName`).
    pub service_account_name: Option<String>,
}

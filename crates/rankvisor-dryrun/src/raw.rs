//! The manifest as written, before defaulting and admission: serde's view of a PyTorchJob.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::Deserialize;

/// A number or string where Kubernetes accepts either (quantities, env values, nprocPerNode).
#[derive(Debug, Clone)]
pub(crate) enum Scalar {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl serde::de::Visitor<'_> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Scalar, E> {
                i64::try_from(v).map(Scalar::Int).or(Ok(Scalar::Str(v.to_string())))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

impl Scalar {
    /// The value as the apiserver would store it, a string.
    pub(crate) fn text(&self) -> String {
        match self {
            Self::Str(s) => s.clone(),
            Self::Int(i) => i.to_string(),
            Self::Float(f) => f.to_string(),
            Self::Bool(b) => b.to_string(),
        }
    }
}

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

/// `metadata`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawMetadata {
    /// `name`.
    pub name: Option<String>,
    /// `namespace`.
    pub namespace: Option<String>,
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

/// One container.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawContainer {
    /// `name`.
    #[serde(default)]
    pub name: String,
    /// `image`.
    #[serde(default)]
    pub image: String,
    /// `command`.
    #[serde(default)]
    pub command: Vec<String>,
    /// `args`.
    #[serde(default)]
    pub args: Vec<String>,
    /// `env`.
    #[serde(default)]
    pub env: Vec<RawEnvVar>,
    /// `ports`.
    #[serde(default)]
    pub ports: Vec<RawPort>,
    /// `resources`.
    #[serde(default)]
    pub resources: RawResources,
    /// `workingDir`.
    pub working_dir: Option<String>,
    /// `imagePullPolicy` (no image is pulled here, but the apiserver checks the value).
    pub image_pull_policy: Option<String>,
}

/// One `env` entry.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawEnvVar {
    /// `name`.
    pub name: String,
    /// `value`.
    pub value: Option<Scalar>,
    /// `valueFrom`.
    pub value_from: Option<RawEnvVarSource>,
}

/// `env[].valueFrom`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawEnvVarSource {
    /// `fieldRef`: the downward API.
    pub field_ref: Option<RawFieldRef>,
    /// `resourceFieldRef`: a container's requests or limits (not resolved locally).
    pub resource_field_ref: Option<IgnoredAny>,
    /// `secretKeyRef` (needs a cluster).
    pub secret_key_ref: Option<IgnoredAny>,
    /// `configMapKeyRef` (needs a cluster).
    pub config_map_key_ref: Option<IgnoredAny>,
}

/// `valueFrom.fieldRef`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawFieldRef {
    /// `fieldPath`, e.g. `metadata.name`.
    #[serde(default)]
    pub field_path: String,
}

/// One `ports` entry.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawPort {
    /// `name`.
    pub name: Option<String>,
    /// `containerPort`.
    pub container_port: i64,
}

/// `resources`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawResources {
    /// `limits`.
    #[serde(default)]
    pub limits: BTreeMap<String, Scalar>,
    /// `requests`.
    #[serde(default)]
    pub requests: BTreeMap<String, Scalar>,
}

/// The values a container's `imagePullPolicy` may take (`validatePullPolicy`).
pub(crate) const PULL_POLICIES: [&str; 3] = ["Always", "IfNotPresent", "Never"];

/// The apiserver's refusal of a pod whose container `c` has an `imagePullPolicy` it does not know.
pub(crate) fn pull_policy_problem(c: usize, container: &RawContainer) -> Option<String> {
    let policy = container.image_pull_policy.as_deref().filter(|p| !PULL_POLICIES.contains(p))?;
    Some(format!(
        "spec.containers[{c}].imagePullPolicy: Unsupported value: {policy:?}: supported values: \"Always\", \"IfNotPresent\", \"Never\""
    ))
}

/// The apiserver's refusal of a pod whose container `c` asks for a negative quantity
/// (`ValidateResourceRequirements`: `ValidateNonnegativeQuantity`).
pub(crate) fn negative_quantity_problem(c: usize, resources: &RawResources) -> Option<String> {
    let all = [("limits", &resources.limits), ("requests", &resources.requests)];
    all.into_iter().flat_map(|(kind, m)| m.iter().map(move |(name, v)| (kind, name, v.text()))).find_map(
        |(kind, name, text)| {
            text.trim_start().starts_with('-').then(|| {
                format!(
                    "spec.containers[{c}].resources.{kind}.{name}: Invalid value: {text:?}: must be greater than or equal to 0"
                )
            })
        },
    )
}

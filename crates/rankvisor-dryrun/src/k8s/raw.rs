//! The Kubernetes objects every job kind's manifest embeds, as written (serde's view): metadata,
//! containers, env, ports, resources, and the scalars Kubernetes accepts as number or string.

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

/// `metadata`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawMetadata {
    /// `name`.
    pub name: Option<String>,
    /// `namespace`.
    pub namespace: Option<String>,
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

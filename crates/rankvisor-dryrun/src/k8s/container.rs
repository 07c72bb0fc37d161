//! A pod's container as the dry run runs it, whatever job kind's template it comes from.

use super::raw::RawEnvVar;

/// Where an env variable of the container gets its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EnvSource {
    /// `value`.
    Value(String),
    /// `valueFrom.fieldRef.fieldPath`: the downward API, resolved per pod.
    FieldRef(String),
}

/// The training container of one replica type, as the dry run runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Container {
    /// The image (not pulled: named in messages).
    pub image: String,
    /// The container's `command` (empty: the image's entrypoint).
    pub command: Vec<String>,
    /// The container's `args`.
    pub args: Vec<String>,
    /// The container's own `env` (name, source), in manifest order.
    pub env: Vec<(String, EnvSource)>,
    /// The `pytorchjob-port` container port, if the manifest names one.
    pub port: Option<u16>,
    /// `workingDir`.
    pub working_dir: Option<String>,
}

impl Container {
    /// `command` followed by `args`, what the container runs.
    pub(crate) fn argv(&self) -> Vec<String> {
        self.command.iter().chain(self.args.iter()).cloned().collect()
    }
}

/// Container fields the dry run uses (`imagePullPolicy`: no image is pulled anyway).
pub(crate) const CONTAINER_EMULATED: [&str; 9] =
    ["name", "image", "imagePullPolicy", "command", "args", "env", "ports", "resources", "workingDir"];

/// A container's `env` as (name, source), in manifest order: a literal, or a downward-API path.
pub(crate) fn env_sources(env: &[RawEnvVar]) -> Vec<(String, EnvSource)> {
    env.iter()
        .map(|var| {
            let source = match var.value_from.as_ref().and_then(|f| f.field_ref.as_ref()) {
                Some(f) => EnvSource::FieldRef(f.field_path.clone()),
                None => EnvSource::Value(var.value.as_ref().map(|v| v.text()).unwrap_or_default()),
            };
            (var.name.clone(), source)
        })
        .collect()
}

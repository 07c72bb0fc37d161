//! Admission as the training operator does it: defaulting, then the validating webhook's checks
//! with its own messages (`pkg/webhooks/pytorch/pytorchjob_webhook.go`), in the apiserver's
//! `field.ErrorList` form, plus the schema checks the apiserver makes first.

use std::fmt;

use super::pytorchjob::{
    Container, ElasticPolicy, PyTorchJob, ReplicaSpec, ReplicaType, DEFAULT_CONTAINER_NAME, DEFAULT_PORT_NAME,
};
use super::quantity::{parse_quantity, Resources};
use crate::supervise::RestartPolicy;

use super::raw::{RawContainer, RawElasticPolicy, RawJob, RawReplicaSpec};

/// A local dry run starts one process per replica; more than this is refused.
pub const MAX_DRY_RUN_REPLICAS: u32 = 256;

/// The kind of a field error, as `k8s.io/apimachinery/pkg/util/validation/field` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorType {
    /// `Required value`.
    Required,
    /// `Forbidden`.
    Forbidden,
    /// `Invalid value`.
    Invalid,
    /// `Unsupported value`.
    NotSupported,
}

/// The bad value an `Invalid`/`NotSupported` error quotes, printed as Go's field package does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadValue {
    /// Printed quoted.
    Str(String),
    /// Printed bare.
    Int(i64),
}

/// One refusal: `<path>: <Type>: <detail>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `spec.pytorchReplicaSpecs[Master].replicas`.
    pub field: String,
    /// Required, Forbidden, Invalid or NotSupported.
    pub kind: FieldErrorType,
    /// The value quoted by Invalid and NotSupported.
    pub value: Option<BadValue>,
    /// The explanation.
    pub detail: String,
}

impl FieldError {
    fn new(field: impl Into<String>, kind: FieldErrorType, value: Option<BadValue>, detail: impl Into<String>) -> Self {
        Self { field: field.into(), kind, value, detail: detail.into() }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let type_name = match self.kind {
            FieldErrorType::Required => "Required value",
            FieldErrorType::Forbidden => "Forbidden",
            FieldErrorType::Invalid => "Invalid value",
            FieldErrorType::NotSupported => "Unsupported value",
        };
        write!(f, "{}: {type_name}", self.field)?;
        match (&self.kind, &self.value) {
            (FieldErrorType::Invalid | FieldErrorType::NotSupported, Some(BadValue::Str(s))) => write!(f, ": {s:?}")?,
            (FieldErrorType::Invalid | FieldErrorType::NotSupported, Some(BadValue::Int(i))) => write!(f, ": {i}")?,
            _ => {}
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// Every refusal of one manifest, printed as `ErrorList.ToAggregate()` does: one error alone,
/// several as `[a, b]`, duplicates dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut seen: Vec<String> = Vec::new();
        for e in &self.0 {
            let msg = e.to_string();
            if !seen.contains(&msg) {
                seen.push(msg);
            }
        }
        match seen.as_slice() {
            [one] => f.write_str(one),
            many => write!(f, "[{}]", many.join(", ")),
        }
    }
}

const NON_NEGATIVE: &str = "must be greater than or equal to 0";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

/// apimachinery's `IsDNS1035Label`: the reasons `name` is not a DNS-1035 label.
fn dns1035_problems(name: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if name.len() > 63 {
        problems.push("must be no more than 63 characters".to_string());
    }
    let bytes = name.as_bytes();
    let ok = matches!(bytes.first(), Some(b'a'..=b'z'))
        && matches!(bytes.last(), Some(b'a'..=b'z' | b'0'..=b'9'))
        && bytes.iter().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'));
    if !ok {
        problems.push(DNS1035_MSG.to_string());
    }
    problems
}

/// Map a `pytorchReplicaSpecs` key to its type, case-insensitively as the operator's defaulting does.
fn replica_type_of(key: &str) -> Option<ReplicaType> {
    [ReplicaType::Master, ReplicaType::Worker].into_iter().find(|t| t.as_str().eq_ignore_ascii_case(key))
}

/// Why admission did not produce a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The webhook (or the apiserver) refuses the job.
    Denied(FieldErrors),
    /// A valid job that a local dry run cannot run, and why.
    Unsupported(String),
}

/// Default, validate and convert a raw manifest into the job the dry run runs.
pub(crate) fn admit(raw: &RawJob) -> Result<PyTorchJob, Refusal> {
    use FieldErrorType::*;
    let mut errs: Vec<FieldError> = Vec::new();
    let spec_path = "spec.pytorchReplicaSpecs";

    let name = raw.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        errs.push(FieldError::new("metadata.name", Required, None, "name or generateName is required"));
    } else {
        let problems = dns1035_problems(&name);
        if !problems.is_empty() {
            let detail = format!("should match: {}", problems.join(","));
            errs.push(FieldError::new("metadata.name", Invalid, Some(BadValue::Str(name.clone())), detail));
        }
    }

    let backoff_limit = match raw.spec.run_policy.backoff_limit {
        Some(b) if b < 0 => {
            errs.push(FieldError::new("spec.runPolicy.backoffLimit", Invalid, Some(BadValue::Int(b)), NON_NEGATIVE));
            None
        }
        Some(b) => Some(u32::try_from(b).unwrap_or(u32::MAX)),
        None => None,
    };

    // Defaulting renames keys to camel case; a key that is neither type stays as written.
    let mut master_raw: Option<&RawReplicaSpec> = None;
    let mut worker_raw: Option<&RawReplicaSpec> = None;
    let mut typed: Vec<(String, Option<ReplicaType>, Option<&RawReplicaSpec>)> = Vec::new();
    match &raw.spec.pytorch_replica_specs {
        None => errs.push(FieldError::new(spec_path, Required, None, "must be required")),
        Some(map) => {
            for (key, spec) in map {
                let rtype = replica_type_of(key);
                let canonical = rtype.map_or_else(|| key.clone(), |t| t.as_str().to_string());
                match rtype {
                    Some(ReplicaType::Master) => master_raw = master_raw.or(spec.as_ref()),
                    Some(ReplicaType::Worker) => worker_raw = worker_raw.or(spec.as_ref()),
                    None => {}
                }
                typed.push((canonical, rtype, spec.as_ref()));
            }
        }
    }
    // Master first, then Worker, then the rest: a stable order for the messages.
    typed.sort_by_key(|(key, rtype, _)| (rtype.map_or(2, |t| t as u8), key.clone()));

    if let Some(elastic) = &raw.spec.elastic_policy {
        match worker_raw {
            None => errs.push(FieldError::new(
                "spec.pytorchReplicaSpecs.Worker",
                Required,
                None,
                "must be configured if elastic policy is used",
            )),
            Some(w) if w.replicas.is_some_and(|r| r < 1) => errs.push(FieldError::new(
                "spec.pytorchReplicaSpecs.Worker.replicas",
                Forbidden,
                None,
                "must be at least 1 worker if elastic policy is used",
            )),
            Some(_) => {}
        }
        if elastic.nproc_per_node.is_some() && raw.spec.nproc_per_node.is_some() {
            errs.push(FieldError::new(
                "spec.elasticPolicy.nProcPerNode",
                Forbidden,
                None,
                "must not be used with spec.nprocPerNode",
            ));
        }
    }

    for (key, rtype, spec) in &typed {
        let role_path = format!("{spec_path}[{key}]");
        let containers_path = format!("{role_path}.template.spec.containers");
        if rtype.is_none() {
            errs.push(FieldError::new(
                role_path.clone(),
                NotSupported,
                Some(BadValue::Str(key.clone())),
                "supported values: \"Master\", \"Worker\"",
            ));
        }
        let containers: &[RawContainer] = spec.map_or(&[], |s| s.template.spec.containers.as_slice());
        if containers.is_empty() {
            errs.push(FieldError::new(containers_path.clone(), Required, None, "must be specified"));
        }
        for (idx, c) in containers.iter().enumerate() {
            if c.image.is_empty() {
                errs.push(FieldError::new(
                    format!("{containers_path}[{idx}].image"),
                    Required,
                    None,
                    "must be required",
                ));
            }
        }
        if !containers.iter().any(|c| c.name == DEFAULT_CONTAINER_NAME) {
            errs.push(FieldError::new(
                containers_path.clone(),
                Required,
                None,
                format!("must have at least one container with name {DEFAULT_CONTAINER_NAME}"),
            ));
        }
        let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
        if *rtype == Some(ReplicaType::Master) && replicas != 1 {
            errs.push(FieldError::new(format!("{role_path}.replicas"), Forbidden, None, "must be 1"));
        }
        if replicas < 0 {
            errs.push(FieldError::new(
                format!("{role_path}.replicas"),
                Invalid,
                Some(BadValue::Int(replicas)),
                NON_NEGATIVE,
            ));
        }
        if let Some(policy) = spec.and_then(|s| s.restart_policy.as_deref()) {
            if policy.parse::<RestartPolicy>().is_err() {
                let supported: Vec<String> =
                    ["Always", "OnFailure", "Never", "ExitCode"].iter().map(|p| format!("{p:?}")).collect();
                errs.push(FieldError::new(
                    format!("{role_path}.restartPolicy"),
                    NotSupported,
                    Some(BadValue::Str(policy.to_string())),
                    format!("supported values: {}", supported.join(", ")),
                ));
            }
        }
        for (idx, c) in containers.iter().enumerate() {
            for (kind, map) in [("limits", &c.resources.limits), ("requests", &c.resources.requests)] {
                for (res, value) in map {
                    let text = value.text();
                    if let Err(e) = parse_quantity(&text) {
                        errs.push(FieldError::new(
                            format!("{containers_path}[{idx}].resources.{kind}[{res}]"),
                            Invalid,
                            Some(BadValue::Str(text)),
                            e.reason,
                        ));
                    }
                }
            }
            for (pidx, port) in c.ports.iter().enumerate() {
                if !(1..=65535).contains(&port.container_port) {
                    errs.push(FieldError::new(
                        format!("{containers_path}[{idx}].ports[{pidx}].containerPort"),
                        Invalid,
                        Some(BadValue::Int(port.container_port)),
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            }
        }
    }

    let elastic = raw.spec.elastic_policy.as_ref().map(|e| elastic_policy(e, worker_raw, &mut errs));

    if !errs.is_empty() {
        return Err(Refusal::Denied(FieldErrors(errs)));
    }

    let unsupported = Refusal::Unsupported;
    let master = master_raw.map(|s| replica_spec(ReplicaType::Master, s)).transpose().map_err(unsupported)?;
    let worker = worker_raw.map(|s| replica_spec(ReplicaType::Worker, s)).transpose().map_err(unsupported)?;
    let nproc_per_node = match (&raw.spec.nproc_per_node, &elastic) {
        (Some(n), _) => Some(n.text()),
        (None, Some(ElasticPolicy { nproc_per_node: Some(_), .. })) => None,
        (None, _) => Some("auto".to_string()),
    };
    let job = PyTorchJob {
        name,
        namespace: raw.metadata.namespace.clone().unwrap_or_else(|| "default".to_string()),
        backoff_limit,
        nproc_per_node,
        elastic,
        master,
        worker,
    };
    let total = job.total_replicas();
    if total == 0 {
        return Err(unsupported("the job has no replicas: nothing to run".to_string()));
    }
    if total > MAX_DRY_RUN_REPLICAS {
        return Err(unsupported(format!(
            "{total} replicas would start {total} local processes: at most {MAX_DRY_RUN_REPLICAS} are allowed"
        )));
    }
    Ok(job)
}

/// Default and check `spec.elasticPolicy` (the operator sets a missing min/max from the other, or
/// from the Worker replicas).
fn elastic_policy(
    raw: &RawElasticPolicy,
    worker: Option<&RawReplicaSpec>,
    errs: &mut Vec<FieldError>,
) -> ElasticPolicy {
    let mut count = |field: &str, v: Option<i64>| -> Option<u32> {
        let v = v?;
        match u32::try_from(v) {
            Ok(n) => Some(n),
            Err(_) => {
                errs.push(FieldError::new(
                    format!("spec.elasticPolicy.{field}"),
                    FieldErrorType::Invalid,
                    Some(BadValue::Int(v)),
                    NON_NEGATIVE,
                ));
                None
            }
        }
    };
    let min = count("minReplicas", raw.min_replicas);
    let max = count("maxReplicas", raw.max_replicas);
    let max_restarts = count("maxRestarts", raw.max_restarts);
    let nproc_per_node = count("nProcPerNode", raw.nproc_per_node);
    let rdzv_port = match raw.rdzv_port {
        Some(p) => match u16::try_from(p) {
            Ok(p) if p > 0 => Some(p),
            _ => {
                errs.push(FieldError::new(
                    "spec.elasticPolicy.rdzvPort",
                    FieldErrorType::Invalid,
                    Some(BadValue::Int(p)),
                    "must be between 1 and 65535, inclusive",
                ));
                None
            }
        },
        None => None,
    };
    let workers = worker.and_then(|w| w.replicas).map_or(1, |r| u32::try_from(r).unwrap_or(0));
    let (min_replicas, max_replicas) = match (min, max) {
        (Some(a), Some(b)) => (a, b),
        (Some(a), None) => (a, a),
        (None, Some(b)) => (b, b),
        (None, None) => (workers, workers),
    };
    if min_replicas > max_replicas {
        errs.push(FieldError::new(
            "spec.elasticPolicy.minReplicas",
            FieldErrorType::Invalid,
            Some(BadValue::Int(i64::from(min_replicas))),
            format!("must be less than or equal to maxReplicas ({max_replicas})"),
        ));
    }
    ElasticPolicy {
        min_replicas,
        max_replicas,
        rdzv_backend: raw.rdzv_backend.clone().unwrap_or_else(|| "c10d".to_string()),
        rdzv_port,
        rdzv_id: raw.rdzv_id.clone(),
        rdzv_conf: raw
            .rdzv_conf
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.as_ref().map(|v| v.text()).unwrap_or_default()))
            .collect(),
        standalone: raw.standalone.unwrap_or(false),
        max_restarts,
        nproc_per_node,
    }
}

/// Convert one admitted replica spec; fails only on what a local run cannot do.
fn replica_spec(rtype: ReplicaType, raw: &RawReplicaSpec) -> Result<ReplicaSpec, String> {
    let replicas = u32::try_from(raw.replicas.unwrap_or(1)).unwrap_or(0);
    let restart_policy = raw.restart_policy.as_deref().and_then(|p| p.parse().ok()).unwrap_or(RestartPolicy::OnFailure);
    let containers = &raw.template.spec.containers;
    let path = format!("spec.pytorchReplicaSpecs[{rtype}].template.spec.containers");
    let (idx, main) = containers
        .iter()
        .enumerate()
        .find(|(_, c)| c.name == DEFAULT_CONTAINER_NAME)
        .ok_or_else(|| format!("{path}: no container named {DEFAULT_CONTAINER_NAME}"))?;
    let mut env = Vec::new();
    for (i, var) in main.env.iter().enumerate() {
        if var.value_from.is_some() {
            return Err(format!(
                "{path}[{idx}].env[{i}] ({}) uses valueFrom, which needs a cluster: give it a literal value",
                var.name
            ));
        }
        env.push((var.name.clone(), var.value.as_ref().map(|v| v.text()).unwrap_or_default()));
    }
    let command: Vec<String> = main.command.iter().chain(main.args.iter()).cloned().collect();
    if main.command.is_empty() {
        return Err(format!(
            "{path}[{idx}].command is empty: the dry run does not pull image {:?}, so it cannot run its entrypoint; give the command",
            main.image
        ));
    }
    let port = main
        .ports
        .iter()
        .find(|p| p.name.as_deref() == Some(DEFAULT_PORT_NAME))
        .and_then(|p| u16::try_from(p.container_port).ok());
    let mut resources = Resources::default();
    for c in containers {
        let mut per = Resources::default();
        // A limit wins; a request counts where no limit is set, as Kubernetes defaults requests from limits.
        for (name, value) in c.resources.requests.iter().chain(c.resources.limits.iter()) {
            if let Ok(amount) = parse_quantity(&value.text()) {
                per.0.insert(name.clone(), amount);
            }
        }
        resources.add(&per);
    }
    Ok(ReplicaSpec { rtype, replicas, restart_policy, container: Container { command, env, port }, resources })
}

#[cfg(test)]
mod tests;

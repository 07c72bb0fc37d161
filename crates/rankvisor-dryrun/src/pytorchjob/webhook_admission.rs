//! Admission as a cluster does it: the apiserver's schema checks (the CRD's required fields and
//! quantity pattern), then the validating webhook (`validatePyTorchJob` in
//! `pkg/webhooks/pytorch/pytorchjob_webhook.go`, release-1.9) in its order and wording, on the job
//! as written; then the operator's defaulting (`SetDefaults_PyTorchJob`), which runs in the
//! controller after admission. Nothing the webhook admits is refused here: what a local run cannot
//! do is [`Refusal::Unsupported`], named as such.

use super::{
    CleanPodPolicy, ElasticPolicy, PyTorchJob, ReplicaSpec, RunPolicy, SchedulingPolicy, DEFAULT_CONTAINER_NAME,
    DEFAULT_PORT_NAME, KUBEFLOW_JOBS_CONTROLLER, MULTIKUEUE_CONTROLLER,
};
use crate::k8s::container::{env_sources, Container};
use crate::k8s::field_error::{dns1035_problems, BadValue, FieldError, FieldErrorType, FieldErrors};
use crate::k8s::quantity::{parse_quantity, Resources, QUANTITY_SCHEMA_PATTERN};
use crate::kubelet::too_many_pods;
use rankvisor_core::policy::RestartPolicy;

use super::raw::{RawElasticPolicy, RawJob, RawReplicaSpec, RawRunPolicy};
use crate::k8s::raw::{pull_policy_problem, RawContainer, Scalar};
use crate::kubelet::replica::ReplicaType;

/// The replica types the webhook supports, in its message's order.
const REPLICA_TYPES: [ReplicaType; 2] = [ReplicaType::Master, ReplicaType::Worker];

/// The downward API's `fieldRef` paths a pod's env may use (the apiserver's list), and so the
/// dry run resolves.
pub(crate) const FIELD_REF_PATHS: [&str; 11] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
    "metadata.labels",
    "metadata.annotations",
];

/// Why admission did not produce a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The apiserver's schema validation refuses the object (before any webhook).
    Invalid(FieldErrors),
    /// The webhook refuses the job.
    Denied(FieldErrors),
    /// A job the cluster admits but a local dry run cannot run, and why.
    Unsupported(String),
}

/// What admission says besides yes: the webhook's warnings (kubectl prints them as `Warning: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Admitted {
    /// The job, defaulted.
    pub job: PyTorchJob,
    /// `admission.Warnings`.
    pub warnings: Vec<String>,
}

/// The apiserver's structural-schema checks of the PyTorchJob CRD (`required: pytorchReplicaSpecs`,
/// the quantity pattern of `resources`), with its `<path> in body should match` wording.
fn schema_errors(raw: &RawJob) -> Vec<FieldError> {
    use FieldErrorType::*;
    let mut errs = Vec::new();
    if raw.metadata.name.as_deref().unwrap_or_default().is_empty() {
        errs.push(FieldError::new("metadata.name", Required, None, "name or generateName is required"));
    }
    let Some(specs) = &raw.spec.pytorch_replica_specs else {
        errs.push(FieldError::new("spec.pytorchReplicaSpecs", Required, None, ""));
        return errs;
    };
    let mut quantity = |path: String, value: &Scalar| {
        let text = value.text();
        if parse_quantity(&text).is_err() {
            let detail = format!("{path} in body should match '{QUANTITY_SCHEMA_PATTERN}'");
            errs.push(FieldError::new(path, Invalid, Some(BadValue::Str(text)), detail));
        }
    };
    for (key, spec) in specs {
        let Some(spec) = spec else { continue };
        for (idx, c) in spec.template.spec.containers.iter().enumerate() {
            for (kind, map) in [("limits", &c.resources.limits), ("requests", &c.resources.requests)] {
                for (res, value) in map {
                    quantity(
                        format!(
                            "spec.pytorchReplicaSpecs.{key}.template.spec.containers[{idx}].resources.{kind}.{res}"
                        ),
                        value,
                    );
                }
            }
        }
    }
    if let Some(sp) = &raw.spec.run_policy.scheduling_policy {
        for (res, value) in &sp.min_resources {
            quantity(format!("spec.runPolicy.schedulingPolicy.minResources.{res}"), value);
        }
    }
    errs
}

/// `ValidateRunPolicy` (`pkg/common/util/webhooks.go`): only `managedBy` is checked.
fn validate_run_policy(run_policy: &RawRunPolicy, errs: &mut Vec<FieldError>) {
    if let Some(manager) = &run_policy.managed_by {
        if manager != KUBEFLOW_JOBS_CONTROLLER && manager != MULTIKUEUE_CONTROLLER {
            errs.push(FieldError::new(
                "spec.runPolicy.managedBy",
                FieldErrorType::NotSupported,
                Some(BadValue::Str(manager.clone())),
                format!("supported values: {KUBEFLOW_JOBS_CONTROLLER:?}, {MULTIKUEUE_CONTROLLER:?}"),
            ));
        }
    }
}

/// `validatePyTorchReplicaSpecs`: the keys exactly as written (defaulting comes later), Master
/// then Worker then the rest (Go ranges over the map in no fixed order).
fn validate_replica_specs(raw: &RawJob, errs: &mut Vec<FieldError>) {
    use FieldErrorType::*;
    let Some(specs) = &raw.spec.pytorch_replica_specs else {
        errs.push(FieldError::new("spec.pytorchReplicaSpecs", Required, None, "must be required"));
        return;
    };
    let mut keys: Vec<&String> = specs.keys().collect();
    keys.sort_by_key(|k| (REPLICA_TYPES.iter().position(|t| t.as_str() == k.as_str()).unwrap_or(2), k.to_string()));
    for key in keys {
        let spec = specs.get(key).and_then(Option::as_ref);
        let role_path = format!("spec.pytorchReplicaSpecs[{key}]");
        let containers_path = format!("{role_path}.template.spec.containers");
        let rtype = REPLICA_TYPES.into_iter().find(|t| t.as_str() == key.as_str());
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
        let replicas = spec.and_then(|s| s.replicas);
        if rtype == Some(ReplicaType::Master) {
            if replicas != Some(1) {
                errs.push(FieldError::new(format!("{role_path}.replicas"), Forbidden, None, "must be 1"));
            }
        } else if replicas.is_some_and(|r| r < 1) {
            errs.push(FieldError::new(format!("{role_path}.replicas"), Forbidden, None, "must be at least 1"));
        }
    }
}

/// `validatePyTorchJob` then `SetDefaults_PyTorchJob`: the job the dry run runs, or why not.
pub(crate) fn admit(raw: &RawJob) -> Result<Admitted, Refusal> {
    use FieldErrorType::*;
    let schema = schema_errors(raw);
    if !schema.is_empty() {
        return Err(Refusal::Invalid(FieldErrors(schema)));
    }
    let mut errs: Vec<FieldError> = Vec::new();
    let mut warnings = Vec::new();
    let name = raw.metadata.name.clone().unwrap_or_default();
    let problems = dns1035_problems(&name);
    if !problems.is_empty() {
        let detail = format!("should match: {}", problems.join(","));
        errs.push(FieldError::new("metadata.name", Invalid, Some(BadValue::Str(name.clone())), detail));
    }
    validate_run_policy(&raw.spec.run_policy, &mut errs);
    // validateSpec
    let specs = raw.spec.pytorch_replica_specs.as_ref();
    if let Some(elastic) = &raw.spec.elastic_policy {
        if !specs.is_some_and(|m| m.contains_key(ReplicaType::Worker.as_str())) {
            errs.push(FieldError::new(
                "spec.pytorchReplicaSpecs[Worker]",
                Required,
                None,
                "must be configured if elastic policy is used",
            ));
        }
        if elastic.nproc_per_node.is_some() {
            warnings.push("spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead".to_string());
            if raw.spec.nproc_per_node.is_some() {
                errs.push(FieldError::new(
                    "spec.elasticPolicy.nProcPerNode",
                    Forbidden,
                    None,
                    "must not be used with spec.nprocPerNode",
                ));
            }
        }
    }
    validate_replica_specs(raw, &mut errs);
    if !errs.is_empty() {
        return Err(Refusal::Denied(FieldErrors(errs)));
    }
    let job = defaulted(raw, name)?;
    Ok(Admitted { job, warnings })
}

/// `SetDefaults_PyTorchJob` on an admitted job, and the conversion to the dry run's model; fails
/// only on what a local run cannot do.
fn defaulted(raw: &RawJob, name: String) -> Result<PyTorchJob, Refusal> {
    let specs = raw.spec.pytorch_replica_specs.as_ref();
    let raw_of = |t: ReplicaType| specs.and_then(|m| m.get(t.as_str())).and_then(Option::as_ref);
    let master = raw_of(ReplicaType::Master).map(|s| replica_spec(ReplicaType::Master, s)).transpose()?;
    let worker = raw_of(ReplicaType::Worker).map(|s| replica_spec(ReplicaType::Worker, s)).transpose()?;
    let elastic =
        raw.spec.elastic_policy.as_ref().map(|e| elastic_policy(e, worker.as_ref().map_or(1, |w| w.replicas)));
    // setDefaultNprocPerNode: "auto" unless the deprecated elastic field is used.
    let nproc_per_node = match (&raw.spec.nproc_per_node, &elastic) {
        (Some(n), _) => Some(n.text()),
        (None, Some(ElasticPolicy { nproc_per_node: Some(_), .. })) => None,
        (None, _) => Some("auto".to_string()),
    };
    let job = PyTorchJob {
        name,
        namespace: raw.metadata.namespace.clone().unwrap_or_else(|| "default".to_string()),
        run_policy: run_policy(&raw.spec.run_policy),
        nproc_per_node,
        elastic,
        master,
        worker,
    };
    let total = job.total_replicas();
    if total == 0 {
        return Err(Refusal::Unsupported("the job has no replicas: nothing to run".to_string()));
    }
    if let Some(why) = too_many_pods("the replicas of spec.pytorchReplicaSpecs (Master and Worker)", u64::from(total)) {
        return Err(Refusal::Unsupported(why));
    }
    Ok(job)
}

/// `spec.runPolicy`, with `cleanPodPolicy` defaulted to None.
fn run_policy(raw: &RawRunPolicy) -> RunPolicy {
    let int32 = |v: i64| i32::try_from(v).unwrap_or(if v < 0 { i32::MIN } else { i32::MAX });
    let clean_pod_policy = match raw.clean_pod_policy.as_deref() {
        None | Some("None") => CleanPodPolicy::None,
        Some("Running") => CleanPodPolicy::Running,
        Some("All") => CleanPodPolicy::All,
        Some(other) => CleanPodPolicy::Other(other.to_string()),
    };
    let scheduling = raw.scheduling_policy.as_ref().map_or_else(SchedulingPolicy::default, |s| SchedulingPolicy {
        min_available: s.min_available.map(int32),
        queue: s.queue.clone(),
        priority_class: s.priority_class.clone(),
        min_resources: (!s.min_resources.is_empty()).then(|| {
            let mut r = Resources::default();
            for (k, v) in &s.min_resources {
                if let Ok(q) = parse_quantity(&v.text()) {
                    r.0.insert(k.clone(), q);
                }
            }
            r
        }),
        schedule_timeout_seconds: s.schedule_timeout_seconds.map(int32),
    });
    RunPolicy {
        backoff_limit: raw.backoff_limit.map(int32),
        clean_pod_policy,
        active_deadline_seconds: raw.active_deadline_seconds,
        ttl_seconds_after_finished: raw.ttl_seconds_after_finished.map(int32),
        suspend: raw.suspend.unwrap_or(false),
        managed_by: raw.managed_by.clone(),
        scheduling,
    }
}

/// `setElasticPolicy`: a missing min or max is the other one, or the Worker replicas.
fn elastic_policy(raw: &RawElasticPolicy, workers: u32) -> ElasticPolicy {
    let workers = i64::from(workers);
    let (min_replicas, max_replicas) = match (raw.min_replicas, raw.max_replicas) {
        (Some(a), Some(b)) => (a, b),
        (Some(a), None) => (a, a),
        (None, Some(b)) => (b, b),
        (None, None) => (workers, workers),
    };
    ElasticPolicy {
        min_replicas,
        max_replicas,
        rdzv_backend: raw.rdzv_backend.clone().unwrap_or_else(|| "c10d".to_string()),
        rdzv_port: raw.rdzv_port,
        rdzv_host: raw.rdzv_host.clone(),
        rdzv_id: raw.rdzv_id.clone(),
        rdzv_conf: raw
            .rdzv_conf
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.as_ref().map(|v| v.text()).unwrap_or_default()))
            .collect(),
        standalone: raw.standalone.unwrap_or(false),
        max_restarts: raw.max_restarts,
        nproc_per_node: raw.nproc_per_node,
    }
}

/// The pod the apiserver would refuse to create for this replica spec (the operator then retries
/// forever, and the job never runs): the restart policy, the containers' ports and the env's
/// downward API paths.
fn pod_refusal(rtype: ReplicaType, raw: &RawReplicaSpec, idx: usize, main: &RawContainer) -> Option<String> {
    let policy = raw.restart_policy.as_deref().unwrap_or("OnFailure");
    let pod = format!("pod of replica type {rtype}");
    let refused = |what: String| {
        Some(format!(
            "the webhook admits it, but the operator cannot create any {pod}: the apiserver refuses its {what}"
        ))
    };
    if policy.parse::<RestartPolicy>().is_err() {
        return refused(format!(
            "spec.restartPolicy: Unsupported value: {policy:?}: supported values: \"Always\", \"OnFailure\", \"Never\""
        ));
    }
    for (c, container) in raw.template.spec.containers.iter().enumerate() {
        if let Some(why) = pull_policy_problem(c, container) {
            return refused(why);
        }
    }
    // `validateContainerPorts` (the CRD's schema only says int32).
    for (c, container) in raw.template.spec.containers.iter().enumerate() {
        for (i, port) in container.ports.iter().enumerate() {
            let path = format!("spec.containers[{c}].ports[{i}].containerPort");
            match port.container_port {
                0 => return refused(format!("{path}: Required value")),
                p if !(1..=65535).contains(&p) => {
                    return refused(format!("{path}: Invalid value: {p}: must be between 1 and 65535, inclusive"))
                }
                _ => {}
            }
        }
    }
    for (i, var) in main.env.iter().enumerate() {
        let Some(from) = &var.value_from else { continue };
        let path = format!("spec.containers[{idx}].env[{i}].valueFrom");
        if let Some(f) = &from.field_ref {
            let known = FIELD_REF_PATHS.iter().any(|p| {
                f.field_path == *p || (p.starts_with("metadata.") && f.field_path.starts_with(&format!("{p}[")))
            });
            if !known || matches!(f.field_path.as_str(), "metadata.labels" | "metadata.annotations") {
                return refused(format!("{path}.fieldRef.fieldPath: Unsupported value: {:?}", f.field_path));
            }
        } else {
            let what = if from.resource_field_ref.is_some() {
                "resourceFieldRef"
            } else if from.secret_key_ref.is_some() {
                "secretKeyRef (a Secret of the cluster)"
            } else if from.config_map_key_ref.is_some() {
                "configMapKeyRef (a ConfigMap of the cluster)"
            } else {
                "an empty valueFrom"
            };
            return Some(format!(
                "spec.pytorchReplicaSpecs[{rtype}].template.{path} ({}) uses {what}, which a local run cannot resolve: give it a literal value",
                var.name
            ));
        }
    }
    None
}

/// Convert one admitted replica spec (`setDefaultReplicas`, `setDefaultRestartPolicy`,
/// `setPyTorchDefaultPort`); fails only on what a local run cannot do.
fn replica_spec(rtype: ReplicaType, raw: &RawReplicaSpec) -> Result<ReplicaSpec, Refusal> {
    let replicas = u32::try_from(raw.replicas.unwrap_or(1)).unwrap_or(0);
    let containers = &raw.template.spec.containers;
    let (idx, main) =
        containers.iter().enumerate().find(|(_, c)| c.name == DEFAULT_CONTAINER_NAME).ok_or_else(|| {
            Refusal::Unsupported(format!("replica type {rtype} has no container named {DEFAULT_CONTAINER_NAME}"))
        })?;
    if let Some(why) = pod_refusal(rtype, raw, idx, main) {
        return Err(Refusal::Unsupported(why));
    }
    let restart_policy = raw.restart_policy.as_deref().and_then(|p| p.parse().ok()).unwrap_or(RestartPolicy::OnFailure);
    let env = env_sources(&main.env);
    let port = main
        .ports
        .iter()
        .find(|p| p.name.as_deref() == Some(DEFAULT_PORT_NAME))
        .and_then(|p| u16::try_from(p.container_port).ok());
    let mut resources = Resources::default();
    for c in containers {
        let mut per = Resources::default();
        // A request wins; a limit counts where no request is set, as Kubernetes defaults requests from limits.
        for (name, value) in c.resources.limits.iter().chain(c.resources.requests.iter()) {
            if let Ok(amount) = parse_quantity(&value.text()) {
                per.0.insert(name.clone(), amount);
            }
        }
        resources.add(&per);
    }
    let pairs = |m: &std::collections::BTreeMap<String, Scalar>| m.iter().map(|(k, v)| (k.clone(), v.text())).collect();
    Ok(ReplicaSpec {
        rtype,
        replicas,
        restart_policy,
        container: Container {
            image: main.image.clone(),
            command: main.command.clone(),
            args: main.args.clone(),
            env,
            port,
            working_dir: main.working_dir.clone(),
        },
        resources,
        labels: pairs(&raw.template.metadata.labels),
        annotations: pairs(&raw.template.metadata.annotations),
        service_account: raw.template.spec.service_account_name.clone(),
    })
}

#[cfg(test)]
mod tests;

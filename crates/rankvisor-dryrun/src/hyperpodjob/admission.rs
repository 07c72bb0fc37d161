//! A HyperPodPyTorchJob manifest admitted: every field checked against the CRD's (the model
//! generated in aws/sagemaker-hyperpod-cli, `hyperpod_pytorch_job_unified_config.py`, whose
//! classes forbid extra fields: a field the CRD does not have is refused as kubectl's strict
//! decoding refuses it, naming it), the values checked, the container's command mapped for the
//! agent ([`super::hyperpodrun`]), and what the dry run does not act on named.

use std::time::Duration;

use serde_json::{Map, Value};

use super::hyperpodrun::agent_command;
use super::{CleanPodPolicy, HpRunPolicy, HyperPodJob, RestartLimits, API_VERSION, KIND};
use crate::k8s::container::{env_sources, Container, EnvSource, CONTAINER_EMULATED};
use crate::k8s::document::ManifestError;
use crate::k8s::raw::RawContainer;
use crate::kubelet::too_many_pods;

/// The CRD's fields, level by level (the classes of the generated model).
const SPEC: [&str; 4] = ["nprocPerNode", "replicaSpecs", "runPolicy", "elasticPolicy"];
const REPLICA_SPEC: [&str; 5] = ["name", "replicas", "maxReplicas", "spares", "template"];
const TEMPLATE: [&str; 2] = ["metadata", "spec"];
const TEMPLATE_METADATA: [&str; 5] = ["annotations", "finalizers", "labels", "name", "namespace"];
const RUN_POLICY: [&str; 10] = [
    "activeDeadlineSeconds",
    "cleanPodPolicy",
    "faultDeadlineSeconds",
    "jobMaxRetryCount",
    "logMonitoringConfiguration",
    "restartPolicy",
    "startupDeadlineSeconds",
    "suspend",
    "ttlSecondsAfterFinished",
    "workloadMode",
];
const RESTART_POLICY: [&str; 5] = [
    "evalPeriodSeconds",
    "maxFullJobRestarts",
    "numRestartBeforeFullJobRestart",
    "maxNumRepeatOffendersToAvoid",
    "scaleUpSnoozeTimeInSeconds",
];
const LOG_RULE: [&str; 8] = [
    "expectedRecurringFrequencyInSeconds",
    "expectedStartCutOffInSeconds",
    "logPattern",
    "metricEvaluationDataPoints",
    "metricThreshold",
    "name",
    "operator",
    "stopPattern",
];

/// An admitted job, with what the dry run says about it before it starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LoadedHyperPodJob {
    /// The job.
    pub job: HyperPodJob,
    /// The fields the dry run does not act on, named.
    pub not_emulated: Vec<String>,
    /// What the container's `hyperpodrun` flags became.
    pub notes: Vec<String>,
}

/// Whether one of `docs` is a HyperPodPyTorchJob.
pub(crate) fn holds_hyperpod_job(docs: &[Value]) -> bool {
    docs.iter().any(|d| d["kind"] == KIND)
}

/// Admit the HyperPodPyTorchJob among `docs` (the only document) from `source_name`.
pub(crate) fn admit_hyperpod_job(docs: &[Value], source_name: &str) -> Result<LoadedHyperPodJob, ManifestError> {
    let unsupported = |reason: String| ManifestError::Unsupported { source_name: source_name.to_string(), reason };
    let [doc] = docs else {
        return Err(unsupported(format!("the file holds {} documents: expected one HyperPodPyTorchJob", docs.len())));
    };
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    if api_version != API_VERSION {
        return Err(unsupported(format!(
            "no matches for kind {KIND:?} in version {api_version:?}: expected apiVersion {API_VERSION}"
        )));
    }
    let unknown = unknown_fields(doc);
    if !unknown.is_empty() {
        return Err(ManifestError::UnknownFields { source_name: source_name.to_string(), kind: KIND, fields: unknown });
    }
    admit_checked(doc).map_err(unsupported)
}

/// Every field of `doc` the CRD does not have, as `spec.runPolicy.foo`.
fn unknown_fields(doc: &Value) -> Vec<String> {
    let spec = &doc["spec"];
    let rp = &spec["runPolicy"];
    let mut out = unknown_keys(spec, "spec", &SPEC);
    out.extend(unknown_keys(rp, "spec.runPolicy", &RUN_POLICY));
    out.extend(unknown_keys(&rp["restartPolicy"], "spec.runPolicy.restartPolicy", &RESTART_POLICY));
    for (i, rule) in items(&rp["logMonitoringConfiguration"]).iter().enumerate() {
        out.extend(unknown_keys(rule, &format!("spec.runPolicy.logMonitoringConfiguration[{i}]"), &LOG_RULE));
    }
    for (i, rs) in items(&spec["replicaSpecs"]).iter().enumerate() {
        let path = format!("spec.replicaSpecs[{i}]");
        out.extend(unknown_keys(rs, &path, &REPLICA_SPEC));
        out.extend(unknown_keys(&rs["template"], &format!("{path}.template"), &TEMPLATE));
        out.extend(unknown_keys(&rs["template"]["metadata"], &format!("{path}.template.metadata"), &TEMPLATE_METADATA));
    }
    out
}

/// `path.<key>` for each key of the object `v` not in `known`.
fn unknown_keys(v: &Value, path: &str, known: &[&str]) -> Vec<String> {
    let keys = v.as_object().map(|o| o.keys().filter(|k| !known.contains(&k.as_str())).cloned().collect::<Vec<_>>());
    keys.unwrap_or_default().into_iter().map(|k| format!("{path}.{k}")).collect()
}

/// The array at `v` (none when absent).
fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// An integer field: absent (None), or at least `min`; otherwise a message naming it.
fn int(obj: &Value, key: &str, path: &str, min: i64) -> Result<Option<i64>, String> {
    match &obj[key] {
        Value::Null => Ok(None),
        Value::Number(n) => match n.as_i64() {
            Some(i) if i >= min => Ok(Some(i)),
            _ => Err(format!("{path}.{key} is {n}: expected an integer of at least {min}")),
        },
        other => Err(format!("{path}.{key} is {other}: expected an integer")),
    }
}

/// Seconds as a duration (the field was checked to be at least 0).
fn secs(n: Option<i64>) -> Option<Duration> {
    n.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
}

/// A count (the field was checked to be at least 0).
fn count(n: Option<i64>) -> Option<u32> {
    n.map(|c| u32::try_from(c).unwrap_or(u32::MAX))
}

/// The job from a document whose fields are all the CRD's.
fn admit_checked(doc: &Value) -> Result<LoadedHyperPodJob, String> {
    let spec = &doc["spec"];
    if !spec["elasticPolicy"].is_null() || !spec["runPolicy"]["workloadMode"].is_null() {
        return Err("spec.elasticPolicy: elastic scaling (the operator resizing the job between minReplicas and maxReplicas) is not emulated: remove elasticPolicy and workloadMode to run the job at a fixed size".into());
    }
    let name = doc["metadata"]["name"].as_str().filter(|n| !n.is_empty()).ok_or("metadata.name is required")?;
    let namespace = doc["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
    let specs = items(&spec["replicaSpecs"]);
    let rs = match specs {
        [rs] => rs,
        [] => return Err("spec.replicaSpecs is required: expected one replica spec".into()),
        _ => return Err(format!("spec.replicaSpecs has {} entries: the dry run runs one replica spec", specs.len())),
    };
    if !rs["maxReplicas"].is_null() {
        return Err("spec.replicaSpecs[0].maxReplicas: elastic scaling is not emulated: remove it".into());
    }
    let spec_name = rs["name"].as_str().filter(|n| !n.is_empty()).ok_or("spec.replicaSpecs[0].name is required")?;
    let path = "spec.replicaSpecs[0]";
    let replicas =
        int(rs, "replicas", path, 1)?.ok_or("spec.replicaSpecs[0].replicas is required: expected at least 1")?;
    let spares = int(rs, "spares", path, 0)?.unwrap_or(0);
    if let Some(m) = too_many_pods("spec.replicaSpecs[0].replicas + spares", (replicas + spares) as u64) {
        return Err(m);
    }
    let (container, notes) = training_container(rs, spec)?;
    Ok(LoadedHyperPodJob {
        job: HyperPodJob {
            name: name.to_string(),
            namespace,
            nproc_per_node: nproc(spec)?,
            spec_name: spec_name.to_string(),
            replicas: replicas as u32,
            spares: spares as u32,
            container,
            run_policy: run_policy(&spec["runPolicy"])?,
        },
        not_emulated: not_emulated(rs, &spec["runPolicy"]),
        notes,
    })
}

/// `nprocPerNode` (CRD default `auto`): `auto`, `cpu`, `gpu` or a whole number.
fn nproc(spec: &Value) -> Result<String, String> {
    let text = match &spec["nprocPerNode"] {
        Value::Null => return Ok("auto".into()),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => return Err(format!("spec.nprocPerNode is {other}: expected auto, cpu, gpu or a number")),
    };
    let ok = matches!(text.as_str(), "auto" | "cpu" | "gpu") || text.parse::<u32>().is_ok_and(|n| n > 0);
    ok.then_some(text.clone()).ok_or(format!("spec.nprocPerNode is {text:?}: expected auto, cpu, gpu or a number"))
}

/// `spec.runPolicy`, checked and defaulted as the CRD defaults it.
fn run_policy(rp: &Value) -> Result<HpRunPolicy, String> {
    let p = "spec.runPolicy";
    let clean_pod_policy = match rp["cleanPodPolicy"].as_str() {
        None | Some("All") => CleanPodPolicy::All,
        Some("Running") => CleanPodPolicy::Running,
        Some("None") => CleanPodPolicy::None,
        Some(other) => return Err(format!("{p}.cleanPodPolicy is {other:?}: expected All, Running or None")),
    };
    let ttl = match int(rp, "ttlSecondsAfterFinished", p, -1)? {
        Some(-1) => None,
        n => Some(secs(n).unwrap_or(Duration::ZERO)),
    };
    let log_monitoring = match &rp["logMonitoringConfiguration"] {
        Value::Null => None,
        v @ Value::Array(_) => Some(v.clone()),
        other => return Err(format!("{p}.logMonitoringConfiguration is {other}: expected a list of rules")),
    };
    let suspend = match &rp["suspend"] {
        Value::Null => false,
        Value::Bool(b) => *b,
        other => return Err(format!("{p}.suspend is {other}: expected true or false")),
    };
    Ok(HpRunPolicy {
        active_deadline: secs(int(rp, "activeDeadlineSeconds", p, 1)?),
        clean_pod_policy,
        fault_deadline: secs(int(rp, "faultDeadlineSeconds", p, 1)?),
        job_max_retry_count: count(int(rp, "jobMaxRetryCount", p, 0)?),
        log_monitoring,
        restart_limits: restart_limits(&rp["restartPolicy"])?,
        startup_deadline: secs(int(rp, "startupDeadlineSeconds", p, 1)?),
        suspend,
        ttl_after_finished: ttl,
    })
}

/// `spec.runPolicy.restartPolicy` (`evalPeriodSeconds` is required there).
fn restart_limits(v: &Value) -> Result<Option<RestartLimits>, String> {
    if v.is_null() {
        return Ok(None);
    }
    let p = "spec.runPolicy.restartPolicy";
    let period = int(v, "evalPeriodSeconds", p, 1)?.ok_or(format!("{p}.evalPeriodSeconds is required"))?;
    Ok(Some(RestartLimits {
        eval_period: Duration::from_secs(period as u64),
        plr_before_jlr: count(int(v, "numRestartBeforeFullJobRestart", p, 0)?),
        max_full_job_restarts: count(int(v, "maxFullJobRestarts", p, 0)?),
    }))
}

/// The pod's first container, its command as the agent runs it (with what its flags became).
fn training_container(rs: &Value, spec: &Value) -> Result<(Container, Vec<String>), String> {
    let pod = &rs["template"]["spec"];
    let Some(first) = items(&pod["containers"]).first() else {
        return Err("spec.replicaSpecs[0].template.spec.containers is required: expected the training container".into());
    };
    let raw: RawContainer = serde_json::from_value(first.clone())
        .map_err(|e| format!("spec.replicaSpecs[0].template.spec.containers[0]: {e}"))?;
    let argv: Vec<String> = raw.command.iter().chain(raw.args.iter()).cloned().collect();
    let mapped = agent_command(&argv)?;
    let mut env = env_sources(&raw.env);
    if !spec["nprocPerNode"].is_null() {
        env.push(("PET_NPROC_PER_NODE".into(), EnvSource::Value(nproc(spec)?)));
    }
    let mut notes = mapped.notes;
    if let Some(t) = mapped.shutdown_timeout {
        notes.push(format!("(the dry run's --grace-period applies to every agent; hyperpodrun asked for {t}s)"));
    }
    let container = Container {
        image: raw.image,
        command: mapped.command,
        args: Vec::new(),
        env,
        // The agent's port (8080 in a pod) is each pod's own loopback port here.
        port: None,
        working_dir: raw.working_dir,
    };
    Ok((container, notes))
}

/// The fields the CRD has and the dry run does not act on, named.
fn not_emulated(rs: &Value, rp: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let path = "spec.replicaSpecs[0].template.spec";
    let pod: &Map<String, Value> = &rs["template"]["spec"].as_object().cloned().unwrap_or_default();
    out.extend(pod.keys().filter(|k| *k != "containers").map(|k| format!("{path}.{k}")));
    let containers = items(&rs["template"]["spec"]["containers"]);
    for (i, c) in containers.iter().enumerate().skip(1) {
        out.push(format!(
            "{path}.containers[{i}] ({}: only the first container runs)",
            c["name"].as_str().unwrap_or("?")
        ));
    }
    if let Some(c) = containers.first() {
        out.extend(unknown_keys(c, &format!("{path}.containers[0]"), &CONTAINER_EMULATED));
    }
    for key in ["maxNumRepeatOffendersToAvoid", "scaleUpSnoozeTimeInSeconds"] {
        if !rp["restartPolicy"][key].is_null() {
            out.push(format!("spec.runPolicy.restartPolicy.{key}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;

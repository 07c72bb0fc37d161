//! A TrainJob's file (with its runtimes, if any) read and admitted as the apiserver, the Trainer's
//! webhook and the JobSet's would, then merged with its runtime (`trainingruntime.go`'s
//! `NewObjects`, the JobSet plugin's `Build`, the Torch plugin's `EnforceMLPolicy`) and defaulted
//! (the JobSet webhook's `Default`, Kubernetes' Job defaults).

use rankvisor_core::policy::RestartPolicy;
use serde::Deserialize;
use serde_json::Value;

use super::raw::{RawFailurePolicy, RawHead, RawJobSpec, RawReplicatedJob, RawRuntime, RawTrainJob, RawTrainer};
use super::runtime;
use super::{
    FailurePolicy, FailurePolicyAction, FailurePolicyRule, PodFailureAction, PodFailurePolicyRule, SuccessPolicy,
    TrainJob, DEFAULT_BACKOFF_LIMIT, NODE, TRAINER_API_VERSION, TRAINJOB_KIND,
};
use crate::k8s::container::{env_sources, Container};
use crate::k8s::document::ManifestError;
use crate::k8s::field_error::{dns1035_problems, BadValue, FieldError, FieldErrorType, FieldErrors};
use crate::k8s::quantity::{parse_quantity, Resources, QUANTITY_SCHEMA_PATTERN};
use crate::k8s::raw::{negative_quantity_problem, pull_policy_problem, RawContainer, RawResources};
use crate::kubelet::too_many_pods;

/// The label that marks a runtime's ReplicatedJob as the TrainJob's trainer.
pub(crate) const ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
/// The variables torchrun reads that the Torch plugin owns (`TorchRunReservedEnvNames`).
pub(crate) const RESERVED_ENV: [&str; 5] =
    ["PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"];
/// The controllers `spec.managedBy` may name.
const MANAGERS: [&str; 2] = ["trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue"];

/// A TrainJob that passed admission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoadedTrainJob {
    /// The admitted TrainJob, merged with its runtime.
    pub job: TrainJob,
    /// What the dry run does not emulate, each named (one warning line).
    pub not_emulated: Vec<String>,
}

/// Whether the file's documents hold a TrainJob (so the file is a Trainer v2 one).
pub(crate) fn holds_train_job(docs: &[Value]) -> bool {
    docs.iter().any(|d| d["kind"] == TRAINJOB_KIND)
}

/// Read one document as `T`, naming the document and the field on a type error.
fn typed<T: for<'de> Deserialize<'de>>(doc: &Value, what: &str, source_name: &str) -> Result<T, ManifestError> {
    serde_json::from_value(doc.clone()).map_err(|e| ManifestError::Syntax {
        source_name: source_name.to_string(),
        line: 1,
        column: 1,
        message: format!("{what}: {e}"),
    })
}

fn kind_of(doc: &Value) -> (String, String) {
    let head: RawHead = serde_json::from_value(doc.clone()).unwrap_or(RawHead { api_version: None, kind: None });
    (head.api_version.unwrap_or_default(), head.kind.unwrap_or_default())
}

fn field(path: &str, kind: FieldErrorType, value: Option<BadValue>, detail: impl Into<String>) -> FieldError {
    FieldError { field: path.to_string(), kind, value, detail: detail.into() }
}

/// Admit the TrainJob in `docs` (the file's documents, then `--runtime` files' documents).
pub(crate) fn admit_train_job(docs: &[Value], source_name: &str) -> Result<LoadedTrainJob, ManifestError> {
    let (doc, runtimes) = documents(docs, source_name)?;
    let raw: RawTrainJob = typed(doc, TRAINJOB_KIND, source_name)?;
    let name = raw.metadata.name.clone().unwrap_or_default();
    let errs = schema_errors(&raw, &name);
    if !errs.is_empty() {
        return Err(ManifestError::InvalidObject {
            kind: "TrainJob.trainer.kubeflow.org".into(),
            name,
            errors: FieldErrors(errs),
        });
    }
    let runtime_ref = raw.spec.runtime_ref.as_ref();
    let runtime_name = runtime_ref.and_then(|r| r.name.clone()).unwrap_or_default();
    let denied = |errors: Vec<FieldError>| ManifestError::TrainJobDenied {
        source_name: source_name.to_string(),
        errors: FieldErrors(errors),
    };
    // The runtime: in this file (or --runtime), else one a v2.3.0 install ships.
    let runtime_kind = runtime_ref.and_then(|r| r.kind.clone()).unwrap_or_else(|| "ClusterTrainingRuntime".into());
    let unsupported = |reason: String| ManifestError::Unsupported { source_name: source_name.to_string(), reason };
    let mut builtin = None;
    let wanted = RuntimeWanted { kind: &runtime_kind, name: &runtime_name, job_namespace: &namespace(&raw.metadata) };
    let (rt, rt_doc) = wanted.find(&runtimes, &mut builtin, source_name)?;
    let mut not_emulated: Vec<String> = rt_doc.map(runtime_fields_not_emulated).unwrap_or_default();
    not_emulated.extend(train_job_fields_not_emulated(doc));
    if rt.spec.ml_policy.torch.is_none() {
        let what = if rt.spec.ml_policy.mpi.is_some() { "MPI (sshd, hostfile)" } else { "no torch policy" };
        return Err(unsupported(format!(
            "runtime {runtime_name:?} has mlPolicy {what}: the dry run emulates the Torch plugin only (mlPolicy.torch)"
        )));
    }
    if let Some(error) = reserved_env(raw.spec.trainer.as_ref()) {
        return Err(denied(vec![error]));
    }
    not_emulated.extend(spec_not_emulated(&raw, rt));
    let js = &rt.spec.template.spec;
    let trainer_rj = js
        .replicated_jobs
        .iter()
        .find(|rj| rj.template.metadata.labels.get(ANCESTOR_LABEL).map(|v| v.text()).as_deref() == Some("trainer"));
    let Some(rj) = trainer_rj else {
        return Err(unsupported(format!(
            "runtime {runtime_name:?} has no ReplicatedJob labelled {ANCESTOR_LABEL}: trainer"
        )));
    };
    not_emulated.extend(trainer_not_emulated(js, rj));
    let job = merge(&raw, rt, rj, js, &runtime_kind, &runtime_name).map_err(unsupported)?;
    Ok(LoadedTrainJob { job, not_emulated })
}

/// An object's namespace, `default` when unset.
fn namespace(m: &crate::k8s::raw::RawMetadata) -> String {
    m.namespace.clone().unwrap_or_else(|| "default".into())
}

/// The runtime a TrainJob names: its kind and name, and the TrainJob's namespace.
struct RuntimeWanted<'a> {
    kind: &'a str,
    name: &'a str,
    job_namespace: &'a str,
}

impl RuntimeWanted<'_> {
    /// The runtime among `runtimes` (and its document), else the built-in one (read into
    /// `builtin`), else a refusal naming it. A TrainingRuntime is namespaced: the Trainer looks it
    /// up in the TrainJob's namespace only (a ClusterTrainingRuntime has none).
    fn find<'b, 'd>(
        &self,
        runtimes: &'b [RuntimeDoc<'d>],
        builtin: &'b mut Option<RawRuntime>,
        source_name: &str,
    ) -> Result<(&'b RawRuntime, Option<&'d Value>), ManifestError> {
        let (kind, name, job_namespace) = (self.kind, self.name, self.job_namespace);
        let unsupported = |reason: String| ManifestError::Unsupported { source_name: source_name.to_string(), reason };
        let named = |(k, r, _): &&RuntimeDoc<'d>| k == kind && r.metadata.name.as_deref() == Some(name);
        let in_scope = |r: &RawRuntime| kind != "TrainingRuntime" || namespace(&r.metadata) == job_namespace;
        if let Some((_, r, doc)) = runtimes.iter().filter(named).find(|(_, r, _)| in_scope(r)) {
            return Ok((r, Some(*doc)));
        }
        let elsewhere: Vec<String> = runtimes
            .iter()
            .filter(named)
            .filter(|(_, r, _)| !in_scope(r))
            .map(|(_, r, _)| format!("{:?}", namespace(&r.metadata)))
            .collect();
        let detail = match (kind, runtime::builtin(name)) {
            ("ClusterTrainingRuntime", Some(Ok(text))) => {
                let parsed =
                    serde_yaml_ng::from_str(text).map_err(|e| unsupported(format!("the built-in runtime: {e}")))?;
                return Ok((builtin.insert(parsed), None));
            }
            ("ClusterTrainingRuntime", Some(Err(why))) => {
                return Err(unsupported(format!(
                    "the built-in ClusterTrainingRuntime {name:?} is not emulated: {why}; give a torch runtime in the file or with --runtime FILE"
                )))
            }
            _ if !elsewhere.is_empty() => format!(
                "{kind} {name:?} not found in namespace {job_namespace:?}, the TrainJob's: the one given is in namespace {}, and a TrainingRuntime is looked up in the TrainJob's namespace only",
                elsewhere.join(", ")
            ),
            _ => format!("{kind} {name:?} not found: expected one in this file, in --runtime FILE, or a built-in ClusterTrainingRuntime (torch-distributed)"),
        };
        let error = field("spec.runtimeRef", FieldErrorType::Invalid, Some(BadValue::Str(name.to_string())), detail);
        Err(ManifestError::TrainJobDenied { source_name: source_name.to_string(), errors: FieldErrors(vec![error]) })
    }
}

/// The Torch plugin's Validate: the trainer's env must not set the variables it owns.
fn reserved_env(trainer: Option<&RawTrainer>) -> Option<FieldError> {
    let mut reserved: Vec<&str> = trainer
        .map(|t| t.env.iter().filter_map(|e| RESERVED_ENV.iter().find(|r| **r == e.name).copied()).collect())
        .unwrap_or_default();
    reserved.sort_unstable();
    reserved.dedup();
    (!reserved.is_empty()).then(|| {
        field(
            "spec.trainer.env",
            FieldErrorType::Invalid,
            None,
            format!("must not have reserved envs, invalid envs configured: [{}]", reserved.join(" ")),
        )
    })
}

/// What the TrainJob's and the runtime's specs ask that the dry run does not do.
fn spec_not_emulated(raw: &RawTrainJob, rt: &RawRuntime) -> Vec<String> {
    let mut out = Vec::new();
    if raw.spec.initializer.is_some() {
        out.push(
            "spec.initializer (model and dataset initializers download from outside: nothing is downloaded here)"
                .into(),
        );
    }
    if raw.spec.runtime_patches.is_some() || raw.spec.pod_template_overrides.is_some() {
        out.push("spec.runtimePatches / podTemplateOverrides (the pod template is the runtime's)".into());
    }
    if rt.spec.pod_group_policy.is_some() {
        out.push(
            "the runtime's podGroupPolicy (gang scheduling by a scheduler plugin: every node starts at once here)"
                .into(),
        );
    }
    out
}

/// What the JobSet holds beside the trainer ReplicatedJob `rj`, or `rj` asks, that is not run.
fn trainer_not_emulated(js: &super::raw::RawJobSetSpec, rj: &RawReplicatedJob) -> Vec<String> {
    let mut out = Vec::new();
    for other in js.replicated_jobs.iter().filter(|o| o.name != rj.name) {
        out.push(format!(
            "ReplicatedJob {} of the runtime ({} {}: counted as complete, never run)",
            other.name,
            ANCESTOR_LABEL,
            other.template.metadata.labels.get(ANCESTOR_LABEL).map(|v| v.text()).unwrap_or_else(|| "unset".into())
        ));
    }
    for d in &rj.depends_on {
        out.push(format!("dependsOn {} (a ReplicatedJob not run here: the trainer starts at once)", d.name));
    }
    if !rj.template.spec.template.spec.init_containers.is_empty() {
        out.push("the trainer pods' initContainers (not run)".into());
    }
    let on_conditions = rj
        .template
        .spec
        .pod_failure_policy
        .iter()
        .flat_map(|p| &p.rules)
        .filter(|r| r.on_pod_conditions.is_some())
        .count();
    if on_conditions > 0 {
        out.push(format!(
            "{on_conditions} podFailurePolicy rule(s) on pod conditions (no pod gets a DisruptionTarget condition here: they never match)"
        ));
    }
    out
}

/// A runtime document: its kind, the typed runtime, and the document itself (for the fields
/// the dry run does not emulate).
type RuntimeDoc<'a> = (String, RawRuntime, &'a Value);

/// The one TrainJob among `docs`, and the runtimes beside it; any other kind, or not exactly one
/// TrainJob, is refused.
fn documents<'a>(docs: &'a [Value], source_name: &str) -> Result<(&'a Value, Vec<RuntimeDoc<'a>>), ManifestError> {
    let mut train_jobs = Vec::new();
    let mut runtimes: Vec<RuntimeDoc<'a>> = Vec::new();
    for doc in docs {
        match kind_of(doc) {
            (v, k) if v == TRAINER_API_VERSION && k == TRAINJOB_KIND => train_jobs.push(doc),
            (v, k) if v == TRAINER_API_VERSION && (k == "ClusterTrainingRuntime" || k == "TrainingRuntime") => {
                runtimes.push((k.clone(), typed(doc, &k, source_name)?, doc));
            }
            (api_version, kind) => {
                return Err(ManifestError::WrongKind { source_name: source_name.to_string(), api_version, kind })
            }
        }
    }
    match train_jobs.as_slice() {
        [one] => Ok((*one, runtimes)),
        other => {
            Err(ManifestError::Unsupported {
                source_name: source_name.to_string(),
                reason: format!(
                    "{} TrainJob documents: expected exactly one (with any ClusterTrainingRuntime or TrainingRuntime documents beside it)",
                    other.len()
                ),
            })
        }
    }
}

/// The CRD's schema and CEL rules on the TrainJob named `name`: every field they refuse.
fn schema_errors(raw: &RawTrainJob, name: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if name.is_empty() {
        errs.push(field("metadata.name", FieldErrorType::Required, None, "name or generateName is required"));
    } else if !dns1035_problems(name).is_empty() {
        let v = Some(BadValue::Str(name.to_string()));
        errs.push(field(
            "metadata.name",
            FieldErrorType::Invalid,
            v,
            "metadata.name must match RFC 1035 DNS label format",
        ));
    }
    let runtime_ref = raw.spec.runtime_ref.as_ref();
    if let Some(group) = runtime_ref.and_then(|r| r.api_group.as_deref()).filter(|g| *g != "trainer.kubeflow.org") {
        let detail = "supported values: \"trainer.kubeflow.org\"";
        errs.push(field(
            "spec.runtimeRef.apiGroup",
            FieldErrorType::NotSupported,
            Some(BadValue::Str(group.into())),
            detail,
        ));
    }
    let runtime_name = runtime_ref.and_then(|r| r.name.clone()).unwrap_or_default();
    if runtime_name.is_empty() {
        errs.push(field("spec.runtimeRef.name", FieldErrorType::Required, None, ""));
    }
    let trainer = raw.spec.trainer.as_ref();
    if let Some(n) = trainer.and_then(|t| t.num_nodes).filter(|n| *n < 1) {
        errs.push(field(
            "spec.trainer.numNodes",
            FieldErrorType::Invalid,
            Some(BadValue::Int(n)),
            "should be greater than or equal to 1",
        ));
    }
    if let Some(m) = raw.spec.managed_by.as_ref().filter(|m| !MANAGERS.contains(&m.as_str())) {
        errs.push(field(
            "spec.managedBy",
            FieldErrorType::Invalid,
            Some(BadValue::Str(m.clone())),
            "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set",
        ));
    }
    // The CRD's quantity pattern on `resourcesPerNode` (a negative amount matches it: the pod's
    // own validation refuses that one, below).
    if let Some(res) = trainer.and_then(|t| t.resources_per_node.as_ref()) {
        for (kind, map) in [("limits", &res.limits), ("requests", &res.requests)] {
            for (name, value) in map {
                let text = value.text();
                if !text.trim_start().starts_with('-') && parse_quantity(&text).is_err() {
                    let path = format!("spec.trainer.resourcesPerNode.{kind}.{name}");
                    let detail = format!("{path} in body should match '{QUANTITY_SCHEMA_PATTERN}'");
                    errs.push(field(&path, FieldErrorType::Invalid, Some(BadValue::Str(text)), detail));
                }
            }
        }
    }
    if let Some(s) = raw.spec.active_deadline_seconds.filter(|s| *s < 0) {
        errs.push(field(
            "spec.activeDeadlineSeconds",
            FieldErrorType::Invalid,
            Some(BadValue::Int(s)),
            "should be greater than or equal to 0",
        ));
    }
    errs
}

/// The runtime's trainer ReplicatedJob with the TrainJob's overrides, and every default.
fn merge(
    raw: &RawTrainJob,
    rt: &RawRuntime,
    rj: &RawReplicatedJob,
    js: &super::raw::RawJobSetSpec,
    runtime_kind: &str,
    runtime_name: &str,
) -> Result<TrainJob, String> {
    let pod = &rj.template.spec.template.spec;
    let Some(main) = pod.containers.iter().find(|c| c.name == NODE) else {
        return Err(format!("runtime {runtime_name:?}'s ReplicatedJob {} has no container named {NODE}", rj.name));
    };
    let trainer = raw.spec.trainer.as_ref();
    let container = trainer_container(main, trainer);
    let resources_raw = trainer.and_then(|t| t.resources_per_node.as_ref()).unwrap_or(&main.resources);
    job_refusal(rj, main, resources_raw)?;
    let num_nodes = num_nodes(trainer, rt, runtime_name)?;
    let nproc_per_node = match trainer.and_then(|t| t.num_proc_per_node.as_ref()) {
        Some(n) => n.text(),
        None => nproc_from_resources(resources_raw),
    };
    let restart_policy = match pod.restart_policy.as_deref() {
        None | Some("OnFailure") => RestartPolicy::OnFailure,
        Some("Never") => RestartPolicy::Never,
        Some(other) => {
            return Err(format!("the trainer pods' restartPolicy {other:?}: a Job's pods take OnFailure or Never"))
        }
    };
    let job_spec = &rj.template.spec;
    if job_spec.completion_mode.as_deref().is_some_and(|m| m != "Indexed") {
        return Err("the trainer Job's completionMode is not Indexed: PET_NODE_RANK reads the completion index".into());
    }
    let pod_failure_policy = pod_failure_policy(job_spec, restart_policy)?;
    let failure_policy = js.failure_policy.as_ref().map(failure_policy).transpose()?;
    let success_policy = SuccessPolicy {
        any: js.success_policy.as_ref().and_then(|s| s.operator.as_deref()) == Some("Any"),
        target_replicated_jobs: js
            .success_policy
            .as_ref()
            .map(|s| s.target_replicated_jobs.clone())
            .unwrap_or_default(),
    };
    Ok(TrainJob {
        name: raw.metadata.name.clone().unwrap_or_default(),
        namespace: raw.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        runtime: format!("{runtime_kind}/{runtime_name}"),
        num_nodes,
        nproc_per_node,
        replicated_job: rj.name.clone(),
        container,
        resources: resources_of(resources_raw),
        restart_policy,
        backoff_limit: job_spec.backoff_limit.map_or(DEFAULT_BACKOFF_LIMIT, |b| i32::try_from(b).unwrap_or(i32::MAX)),
        pod_failure_policy,
        failure_policy,
        success_policy,
        suspend: raw.spec.suspend.unwrap_or(false),
        active_deadline_seconds: raw
            .spec
            .active_deadline_seconds
            .and_then(|s| u64::try_from(s).ok())
            .filter(|s| *s > 0),
        managed_by: raw.spec.managed_by.clone().filter(|m| m != MANAGERS[0]),
    })
}

/// The JobSet plugin's Trainer(): the runtime's `node` container with the TrainJob's image,
/// command and args in place of its own, and its env upserted by name.
fn trainer_container(main: &RawContainer, trainer: Option<&RawTrainer>) -> Container {
    let mut env = env_sources(&main.env);
    for (k, v) in trainer.map(|t| env_sources(&t.env)).unwrap_or_default() {
        match env.iter_mut().find(|(n, _)| *n == k) {
            Some(slot) => slot.1 = v,
            None => env.push((k, v)),
        }
    }
    Container {
        image: trainer.and_then(|t| t.image.clone()).unwrap_or_else(|| main.image.clone()),
        command: trainer.and_then(|t| t.command.clone()).unwrap_or_else(|| main.command.clone()),
        args: trainer.and_then(|t| t.args.clone()).unwrap_or_else(|| main.args.clone()),
        env,
        port: Some(super::TRAINER_PORT),
        working_dir: main.working_dir.clone(),
    }
}

/// What the apiserver refuses in the Job the JobSet controller creates, or in its pods: the
/// TrainJob is admitted, but its trainer never runs.
fn job_refusal(rj: &RawReplicatedJob, main: &RawContainer, resources: &RawResources) -> Result<(), String> {
    let job_refused = |what: String| {
        format!(
            "the webhooks admit it, but the JobSet controller cannot create the Job {}: the apiserver refuses its {what}",
            rj.name
        )
    };
    let c = rj.template.spec.template.spec.containers.iter().position(|c| c.name == NODE).unwrap_or_default();
    let problem = pull_policy_problem(c, main).or_else(|| negative_quantity_problem(c, resources));
    if let Some(why) = problem {
        return Err(job_refused(format!("spec.template.{why}")));
    }
    if let Some(b) = rj.template.spec.backoff_limit.filter(|b| *b < 0) {
        return Err(job_refused(format!("spec.backoffLimit: Invalid value: {b}: must be greater than or equal to 0")));
    }
    Ok(())
}

/// The trainer's node count: the TrainJob's, else the runtime's, else 1; at least 1, and no more
/// pods than the dry run runs.
fn num_nodes(trainer: Option<&RawTrainer>, rt: &RawRuntime, runtime_name: &str) -> Result<u32, String> {
    let num_nodes = trainer.and_then(|t| t.num_nodes).or(rt.spec.ml_policy.num_nodes).unwrap_or(1);
    let nodes_field = match trainer.and_then(|t| t.num_nodes) {
        Some(_) => "spec.trainer.numNodes".to_string(),
        None => format!("runtime {runtime_name:?}'s spec.mlPolicy.numNodes"),
    };
    if let Some(why) = u64::try_from(num_nodes).ok().and_then(|n| too_many_pods(&nodes_field, n)) {
        return Err(why);
    }
    u32::try_from(num_nodes)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("numNodes {num_nodes}: expected at least 1"))
}

/// The trainer Job's `podFailurePolicy`: its rules on exit codes (those on pod conditions never
/// match here); it needs the pods' restartPolicy Never.
fn pod_failure_policy(
    job_spec: &RawJobSpec,
    restart_policy: RestartPolicy,
) -> Result<Vec<PodFailurePolicyRule>, String> {
    let mut out = Vec::new();
    for (i, r) in job_spec.pod_failure_policy.iter().flat_map(|p| p.rules.iter()).enumerate() {
        let action = match r.action.as_str() {
            "FailJob" => PodFailureAction::FailJob,
            "Ignore" => PodFailureAction::Ignore,
            "Count" => PodFailureAction::Count,
            other => return Err(format!("podFailurePolicy.rules[{i}].action {other:?}: expected FailJob, Ignore or Count (FailIndex needs backoffLimitPerIndex)")),
        };
        if restart_policy != RestartPolicy::Never {
            return Err(
                "podFailurePolicy needs the pods' restartPolicy Never (the apiserver refuses the Job otherwise)".into(),
            );
        }
        let Some(codes) = &r.on_exit_codes else { continue };
        out.push(PodFailurePolicyRule {
            action,
            container_name: codes.container_name.clone(),
            operator_in: codes.operator == "In",
            values: codes.values.iter().filter_map(|v| i32::try_from(*v).ok()).collect(),
        });
    }
    Ok(out)
}

/// The JobSet's `failurePolicy`: its JobSet-wide actions, on failure reasons only.
fn failure_policy(fp: &RawFailurePolicy) -> Result<FailurePolicy, String> {
    if fp.restart_strategy.as_deref().is_some_and(|s| s == "InPlaceRestart") {
        return Err(
            "failurePolicy.restartStrategy InPlaceRestart is behind a JobSet feature gate the dry run does not emulate"
                .into(),
        );
    }
    let mut rules = Vec::new();
    for (i, r) in fp.rules.iter().enumerate() {
        let action = match r.action.as_str() {
            "FailJobSet" => FailurePolicyAction::FailJobSet,
            "RestartJobSet" => FailurePolicyAction::RestartJobSet,
            "RestartJobSetAndIgnoreMaxRestarts" => FailurePolicyAction::RestartJobSetAndIgnoreMaxRestarts,
            other => return Err(format!("failurePolicy.rules[{i}].action {other:?}: expected FailJobSet, RestartJobSet or RestartJobSetAndIgnoreMaxRestarts (the per-Job actions need the RestartJob feature gate)")),
        };
        if !r.on_job_failure_message_patterns.is_empty() {
            return Err(format!(
                "failurePolicy.rules[{i}].onJobFailureMessagePatterns: regular expressions are not emulated"
            ));
        }
        rules.push(FailurePolicyRule {
            name: r.name.clone().unwrap_or_else(|| format!("failurePolicyRule{i}")),
            action,
            on_job_failure_reasons: r.on_job_failure_reasons.clone(),
            target_replicated_jobs: r.target_replicated_jobs.clone(),
        });
    }
    Ok(FailurePolicy { max_restarts: i32::try_from(fp.max_restarts.unwrap_or(0)).unwrap_or(i32::MAX), rules })
}

/// What one node asks for: requests, limits where no request.
fn resources_of(raw: &RawResources) -> Resources {
    let mut r = Resources::default();
    for (name, value) in raw.limits.iter().chain(raw.requests.iter()) {
        if let Ok(amount) = parse_quantity(&value.text()) {
            r.0.insert(name.clone(), amount);
        }
    }
    r
}

/// `EnforceMLPolicy`'s default `PET_NPROC_PER_NODE`: `auto` when a node asks for a GPU
/// (`GetNumGPUPerNode`: any resource whose name holds "gpu", requests before limits), else
/// `getNumCPUPerNode` (the CPU request, else the limit, rounded up; at least 1).
pub(crate) fn nproc_from_resources(raw: &RawResources) -> String {
    let units = |m: &std::collections::BTreeMap<String, crate::k8s::raw::Scalar>, pred: &dyn Fn(&str) -> bool| {
        m.iter()
            .find(|(k, _)| pred(k))
            .and_then(|(_, v)| parse_quantity(&v.text()).ok())
            .map(|milli| milli.div_ceil(1000))
    };
    let is_gpu = |k: &str| k.to_lowercase().contains("gpu");
    let gpus = units(&raw.requests, &is_gpu).filter(|n| *n > 0).or_else(|| units(&raw.limits, &is_gpu)).unwrap_or(0);
    if gpus > 0 {
        return "auto".into();
    }
    let is_cpu = |k: &str| k == "cpu";
    let cpus = units(&raw.requests, &is_cpu).filter(|n| *n > 0).or_else(|| units(&raw.limits, &is_cpu)).unwrap_or(0);
    cpus.max(1).to_string()
}

/// Fields of a TrainJob's `spec` and `spec.trainer` the dry run does not act on, named.
fn train_job_fields_not_emulated(doc: &Value) -> Vec<String> {
    const SPEC: [&str; 7] =
        ["runtimeRef", "trainer", "suspend", "activeDeadlineSeconds", "managedBy", "initializer", "runtimePatches"];
    const TRAINER: [&str; 7] = ["image", "command", "args", "env", "numNodes", "resourcesPerNode", "numProcPerNode"];
    let mut out = unknown_keys(&doc["spec"], "spec", &SPEC);
    out.extend(unknown_keys(&doc["spec"]["trainer"], "spec.trainer", &TRAINER));
    out
}

/// Fields of a runtime's JobSet, trainer Job, pod and `node` container the dry run does not act
/// on, named (the other ReplicatedJobs are named whole elsewhere).
fn runtime_fields_not_emulated(doc: &Value) -> Vec<String> {
    const JOBSET: [&str; 4] = ["replicatedJobs", "failurePolicy", "successPolicy", "startupPolicy"];
    const JOB: [&str; 6] =
        ["backoffLimit", "completionMode", "podFailurePolicy", "template", "parallelism", "completions"];
    const POD: [&str; 3] = ["containers", "restartPolicy", "initContainers"];
    let js = &doc["spec"]["template"]["spec"];
    let mut out = unknown_keys(js, "template.spec", &JOBSET);
    let trainer = js["replicatedJobs"].as_array().and_then(|rjs| {
        rjs.iter()
            .position(|rj| rj["template"]["metadata"]["labels"][ANCESTOR_LABEL] == "trainer")
            .map(|i| (i, &rjs[i]))
    });
    let Some((i, rj)) = trainer else { return out };
    let path = format!("template.spec.replicatedJobs[{i}].template.spec");
    out.extend(unknown_keys(&rj["template"]["spec"], &path, &JOB));
    let pod = &rj["template"]["spec"]["template"]["spec"];
    out.extend(unknown_keys(pod, &format!("{path}.template.spec"), &POD));
    for (j, c) in pod["containers"].as_array().map(Vec::as_slice).unwrap_or_default().iter().enumerate() {
        let cpath = format!("{path}.template.spec.containers[{j}]");
        if c["name"] != NODE {
            out.push(format!("{cpath} ({}: only the node container runs)", c["name"].as_str().unwrap_or("?")));
        } else {
            out.extend(unknown_keys(c, &cpath, &crate::k8s::container::CONTAINER_EMULATED));
        }
    }
    out
}

/// `path.<key>` for each key of the object `v` not in `known`.
fn unknown_keys(v: &Value, path: &str, known: &[&str]) -> Vec<String> {
    let keys: Option<Vec<String>> =
        v.as_object().map(|o| o.keys().filter(|k| !known.contains(&k.as_str())).cloned().collect());
    keys.unwrap_or_default().into_iter().map(|k| format!("{path}.{k}")).collect()
}

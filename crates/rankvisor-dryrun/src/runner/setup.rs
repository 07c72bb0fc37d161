//! What is checked and prepared before any launcher starts: the manifest, the injections, the
//! timing options, MASTER_PORT and the work directory with every node's labels file.

use std::collections::VecDeque;
use std::fmt;

use rankvisor_core::duration::format_duration;
use rankvisor_core::exit;
use rankvisor_core::policy::RestartPolicy;

use super::injection::{parse_injection, Injection};
use super::launcher::{healthy_labels, labels_file_text};
use super::local::{localize, parse_command_override, parse_path_map, CommandOverride, Machine, PathMap};
use super::output::note;
use super::ports::choose_master_port;
use super::workdir::{write_atomically, WorkDir};
use crate::hyperpodjob::{HyperPodJob, OperatorSettings};
use crate::k8s::container::Container;
use crate::k8s::quantity::Resources;
use crate::kubelet::replica::ReplicaType;
use crate::manifest::{load_manifest, Loaded};
use crate::options::DryRunOptions;
use crate::pytorchjob::{PyTorchJob, ReplicaSpec, RunPolicy, KUBEFLOW_JOBS_CONTROLLER};
use crate::render::timeline::TimelineFormat;
use crate::trainjob::TrainJob;
use crate::workload::AdmittedJob;

/// A reason not to start, with the exit status it means.
#[derive(Debug)]
pub(super) struct SetupError {
    pub(super) message: String,
    pub(super) code: i32,
}

impl SetupError {
    pub(super) fn config(message: impl fmt::Display) -> Self {
        Self { message: message.to_string(), code: exit::CONFIG_ERROR }
    }
}

/// What is known before anything starts.
#[derive(Debug)]
pub(super) struct Setup {
    pub(super) job: AdmittedJob,
    pub(super) injections: VecDeque<Injection>,
    pub(super) master_port: u16,
    pub(super) workdir: WorkDir,
    /// `RANKVISOR_JOB_TOKEN` for every replica of this run: a fresh secret, as a cluster's
    /// Secret would give them, so the barrier admits only this run's replicas.
    pub(super) job_token: String,
}

impl Setup {
    pub(super) fn new(opts: &DryRunOptions) -> Result<Self, SetupError> {
        let (mut job, train, not_emulated) = load_runnable(opts)?;
        let (train, hyperpod) = match train {
            Shaped::Train(t) => (Some(t), None),
            Shaped::HyperPod(h) => (None, Some(h)),
            Shaped::PyTorch => (None, None),
        };
        match &hyperpod {
            Some(h) => localize_hyperpod(opts, &mut job, &h.spec_name)?,
            None => localize_job(opts, &mut job, train.is_some())?,
        }
        if !not_emulated.is_empty() {
            note(&format!("warning: not emulated here: {}", not_emulated.join("; ")));
        }
        let mut injections = opts
            .inject
            .iter()
            .map(|spec| match (&train, &hyperpod) {
                (Some(_), _) => parse_injection(&spec.replacen(":node-", ":worker-", 1), &job),
                (_, Some(h)) => parse_injection(&spec.replacen(&format!(":{}-", h.spec_name), ":worker-", 1), &job),
                (None, None) => parse_injection(spec, &job),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(SetupError::config)?;
        injections.sort_by_key(|i| i.at);
        check_run_options(opts)?;
        let (master_port, port_note) = choose_master_port(
            if train.is_some() { crate::trainjob::TRAINER_PORT } else { job.master_port() },
            opts.master_port,
        )
        .map_err(|e| SetupError { message: e, code: 1 })?;
        if let Some(n) = port_note {
            note(&n);
        }
        let workdir = WorkDir::create().map_err(|e| SetupError { message: e, code: 1 })?;
        // A TrainJob's pods get theirs when they start (their names change with each attempt).
        for id in job.replicas().into_iter().filter(|_| train.is_none()) {
            let name = hyperpod.as_ref().map_or_else(|| job.pod_name(id), |h| h.pod_name(id));
            let path = workdir.labels(&name);
            write_atomically(&path, &labels_file_text(&healthy_labels()))
                .map_err(|e| SetupError { message: format!("cannot write {}: {e}", path.display()), code: 1 })?;
        }
        let job_token = new_job_token()?;
        let job = match (train, hyperpod) {
            // The shape's container went through --command and --path-map.
            (Some(mut t), _) => {
                if let Some(w) = job.worker {
                    t.container = w.container;
                }
                AdmittedJob::Train(Box::new(t))
            }
            (None, Some(mut h)) => {
                if let Some(w) = job.worker {
                    h.container = w.container;
                }
                AdmittedJob::HyperPod(Box::new(h), hyperpod_settings(opts))
            }
            (None, None) => AdmittedJob::PyTorch(Box::new(job)),
        };
        Ok(Self { job, injections: injections.into(), master_port, workdir, job_token })
    }
}

/// A job of another kind than a PyTorchJob, beside its PyTorchJob shape.
enum Shaped {
    /// A PyTorchJob: its own shape.
    PyTorch,
    /// A TrainJob (its nodes are Workers).
    Train(TrainJob),
    /// A HyperPodPyTorchJob (its pods are Workers).
    HyperPod(HyperPodJob),
}

/// The manifest's job, admitted, and one the dry run can run: not left to another controller
/// (`managedBy`). A TrainJob or a HyperPodPyTorchJob comes with its pods' shape (a PyTorchJob
/// of Workers); with what is not emulated.
fn load_runnable(opts: &DryRunOptions) -> Result<(PyTorchJob, Shaped, Vec<String>), SetupError> {
    match load_manifest(&opts.manifest, &opts.runtimes).map_err(SetupError::config)? {
        Loaded::HyperPod(loaded) => {
            for n in &loaded.notes {
                note(n);
            }
            let shape = pod_shape(&loaded.job);
            Ok((shape, Shaped::HyperPod(loaded.job), loaded.not_emulated))
        }
        Loaded::PyTorch(loaded) => {
            if let Some(manager) = loaded.job.run_policy.external_manager() {
                // `ManagedByExternalController`: the operator never reconciles it, so nothing would run;
                // exit 0 would read as Succeeded, 1 as a failed training: 64, a job not runnable here.
                return Err(SetupError::config(format!(
                    "{}: the dry run cannot run this job: spec.runPolicy.managedBy is {manager:?}: the training operator leaves this job to that controller, so nothing would run here (remove managedBy, or set it to {KUBEFLOW_JOBS_CONTROLLER:?}, to run it locally)",
                    opts.manifest.display()
                )));
            }
            for warning in &loaded.warnings {
                // As kubectl prints an admission webhook's warnings.
                eprintln!("Warning: {warning}");
            }
            Ok((loaded.job, Shaped::PyTorch, loaded.not_emulated))
        }
        Loaded::Train(loaded) => {
            if let Some(manager) = &loaded.job.managed_by {
                // As for a PyTorchJob: the TrainJob controller skips it, nothing would run.
                return Err(SetupError::config(format!(
                    "{}: the dry run cannot run this job: spec.managedBy is {manager:?}: the TrainJob controller leaves this TrainJob to that controller, so nothing would run here (remove managedBy to run it locally)",
                    opts.manifest.display()
                )));
            }
            Ok((node_shape(&loaded.job), Shaped::Train(loaded.job), loaded.not_emulated))
        }
    }
}

/// `--command` and `--path-map` applied to `job` for this machine, its notes printed. A
/// TrainJob's nodes are Worker-shaped here (`is_train`): `--command node=...`, and the notes and
/// errors name the node container.
fn localize_job(opts: &DryRunOptions, job: &mut PyTorchJob, is_train: bool) -> Result<(), SetupError> {
    let as_worker = |s: &String| match s.split_once('=') {
        Some((kind, rest)) if is_train && kind.trim() == crate::trainjob::NODE => format!("Worker={rest}"),
        _ => s.clone(),
    };
    let commands: Vec<CommandOverride> = opts
        .commands
        .iter()
        .map(|c| parse_command_override(&as_worker(c)))
        .collect::<Result<_, _>>()
        .map_err(SetupError::config)?;
    let cwd = std::env::current_dir().unwrap_or_default();
    let maps: Vec<PathMap> =
        opts.path_maps.iter().map(|m| parse_path_map(m, &cwd)).collect::<Result<_, _>>().map_err(SetupError::config)?;
    let for_kind = |text: String| match is_train {
        true => {
            text.replace("replica type Worker", "the node container").replace("--command Worker=", "--command node=")
        }
        false => text,
    };
    let notes = localize(job, &commands, &maps, &cwd, &Machine::this()).map_err(|e| {
        SetupError::config(format!("{}: the dry run cannot run this job: {}", opts.manifest.display(), for_kind(e)))
    })?;
    for n in notes.into_iter().map(for_kind) {
        note(&n);
    }
    Ok(())
}

/// `--command` and `--path-map` for a HyperPodPyTorchJob's pods: `--command NAME=...` (its
/// replicaSpec's name) or `--command Worker=...`.
fn localize_hyperpod(opts: &DryRunOptions, job: &mut PyTorchJob, spec_name: &str) -> Result<(), SetupError> {
    let mut renamed = opts.clone();
    renamed.commands = opts
        .commands
        .iter()
        .map(|c| match c.split_once('=') {
            Some((kind, rest)) if kind.trim() == spec_name => format!("Worker={rest}"),
            _ => c.clone(),
        })
        .collect();
    localize_job(&renamed, job, false)
}

/// The operator's unknowns, from the options.
fn hyperpod_settings(opts: &DryRunOptions) -> OperatorSettings {
    OperatorSettings {
        graceful_stop: opts.hyperpod_graceful_stop,
        stop_timeout: opts.hyperpod_stop_timeout.unwrap_or(opts.grace_period),
    }
}

/// A HyperPodPyTorchJob's pods (replicas and spares) as Worker replicas, for `--command`,
/// `--path-map` and the injections' replica names.
fn pod_shape(h: &HyperPodJob) -> PyTorchJob {
    let replicas = h.replicas + h.spares;
    workers_only(&h.name, &h.namespace, replicas, RestartPolicy::Never, &h.container, Default::default())
}

/// The run's own options: the timeline's format, the backoff's bounds, the logs directory
/// (created).
fn check_run_options(opts: &DryRunOptions) -> Result<(), SetupError> {
    if let Some(path) = &opts.timeline {
        TimelineFormat::from_path(path).map_err(SetupError::config)?;
    }
    if opts.backoff_max < opts.backoff_initial {
        return Err(SetupError::config(format!(
            "--backoff-max ({}) is shorter than --backoff-initial ({}): expected max >= initial",
            format_duration(opts.backoff_max),
            format_duration(opts.backoff_initial)
        )));
    }
    if let Some(dir) = &opts.logs {
        std::fs::create_dir_all(dir)
            .map_err(|e| SetupError::config(format!("--logs {}: cannot create the directory: {e}", dir.display())))?;
    }
    Ok(())
}

/// A fresh job token: 16 random bytes in hex.
fn new_job_token() -> Result<String, SetupError> {
    let mut secret = [0u8; 16];
    getrandom::fill(&mut secret)
        .map_err(|e| SetupError { message: format!("cannot draw the job token: {e}"), code: 1 })?;
    Ok(secret.iter().map(|b| format!("{b:02x}")).collect())
}

/// A TrainJob's trainer nodes as Worker replicas, for what a PyTorchJob and a TrainJob share:
/// `--command`, `--path-map` and the injections' replica names.
fn node_shape(t: &TrainJob) -> PyTorchJob {
    workers_only(&t.name, &t.namespace, t.num_nodes, t.restart_policy, &t.container, t.resources.clone())
}

/// A PyTorchJob of `replicas` Workers alone, each running `container`: the shape another kind's
/// pods take for what the kinds share.
fn workers_only(
    name: &str,
    namespace: &str,
    replicas: u32,
    restart_policy: RestartPolicy,
    container: &Container,
    resources: Resources,
) -> PyTorchJob {
    PyTorchJob {
        name: name.to_string(),
        namespace: namespace.to_string(),
        run_policy: RunPolicy::default(),
        nproc_per_node: None,
        elastic: None,
        master: None,
        worker: Some(ReplicaSpec {
            rtype: ReplicaType::Worker,
            replicas,
            restart_policy,
            container: container.clone(),
            resources,
            labels: Vec::new(),
            annotations: Vec::new(),
            service_account: None,
        }),
    }
}

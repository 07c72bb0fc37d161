//! `rankvisor [OPTIONS] -- COMMAND`: the arguments and the environment snapshot turned into one
//! validated configuration. Pure: nothing here opens a file, a socket or a runtime.

use super::args::{KubeArgs, OnOff, OnOffAuto, SuperviseArgs, UnhealthyNode};
use super::env::EnvSnapshot;
use super::ConfigError;
use crate::backoff::BackoffConfig;
use crate::health::NodeHealthSource;
use crate::http::HttpAddr;
use crate::kube::KubeOverrides;
use crate::policy::RestartScope;
use crate::process::ChildCommand;
use crate::rank::{self, RankEnv, ReplicaCount, Role};
use crate::rendezvous;
use crate::replica::child::{CheckpointConfig, HangConfig, SupervisorConfig};
use crate::replica::JobLinkConfig;
use crate::signo::Signo;
use crate::status::Identity;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// The rendezvous port when neither `--rendezvous-port` nor `MASTER_PORT` says: Kubeflow's default
/// `MASTER_PORT` (23456, `PyTorchJobDefaultPort`) plus one, as for a job with a Master.
pub const DEFAULT_RENDEZVOUS_PORT: u16 = 23457;
/// The shortest delay between restarts: a crash loop with `--backoff-initial 0s` must not spin.
pub const MIN_RESTART_DELAY: Duration = Duration::from_millis(10);

/// The node-health gate's settings, `auto` already resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSettings {
    /// Off, a labels file, or the Kubernetes API (never `Auto`).
    pub source: NodeHealthSource,
    /// A node without the node-health-status label is unhealthy.
    pub require_label: bool,
    /// `--unhealthy-node wait`: wait for health before the first start instead of exiting 138.
    pub wait: bool,
}

/// The Kubernetes API's settings (node health, Events).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeSettings {
    /// Explicit API server, token and CA.
    pub overrides: KubeOverrides,
    /// This pod's node (`NODE_NAME`).
    pub node_name: Option<String>,
    /// How long the API may be unreachable at start.
    pub node_health_timeout: Duration,
}

/// Where Kubernetes Events and the Pod condition go, when they are on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeEventsTarget {
    /// This pod.
    pub pod: String,
    /// Its namespace.
    pub namespace: String,
    /// `auto`: a client that cannot be built turns them off with a warning instead of failing.
    pub best_effort: bool,
}

/// Everything `rankvisor -- COMMAND` needs, validated.
#[derive(Debug, Clone)]
pub struct SuperviseConfig {
    /// The training command with the environment it gets on top of rankvisor's own, except the
    /// two per-start counters the loop adds (`RANKVISOR_RESTART_COUNT` and
    /// `TORCHELASTIC_RESTART_COUNT`, `RANKVISOR_GENERATION`).
    pub child: ChildCommand,
    /// Restart policy, backoff, grace, hang detection, scope.
    pub supervisor: SupervisorConfig,
    /// The rank contract.
    pub rank: RankEnv,
    /// Who this replica is, for every report.
    pub identity: Identity,
    /// The node-health gate.
    pub health: HealthSettings,
    /// The Kubernetes API's settings.
    pub kube: KubeSettings,
    /// The rendezvous, for a job of several replicas with rankvisor's barrier on.
    pub link: Option<JobLinkConfig>,
    /// `--http-addr`.
    pub http: HttpAddr,
    /// `--report-url` and `--report-interval`.
    pub webhook: Option<crate::webhook::WebhookConfig>,
    /// Kubernetes Events and the Pod condition.
    pub kube_events: Option<KubeEventsTarget>,
    /// `--heartbeat-file`.
    pub heartbeat_file: Option<PathBuf>,
    /// `--log-rules`, read and checked.
    pub log_rules: Option<std::sync::Arc<crate::logrules::RuleSet>>,
    /// `--straggler-rule` and its settings, checked against `log_rules`.
    pub straggler: Option<StragglerSettings>,
    /// Where to write why rankvisor gave up (None: nowhere).
    pub termination_log: Option<PathBuf>,
    /// `--status-fd`.
    pub status_fd: Option<i32>,
    /// `--agent hyperpod`: where the agent's API listens.
    pub agent: Option<std::net::SocketAddr>,
    /// What was inferred, for one INFO line at start.
    pub inferred: Vec<String>,
    /// Warnings to log once at start.
    pub warnings: Vec<String>,
}

fn err(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

/// The supervisor's settings from the arguments.
pub fn supervisor_config(a: &SuperviseArgs) -> Result<SupervisorConfig, ConfigError> {
    let hang = match (a.hang_timeout, &a.heartbeat_file) {
        (Some(_), None) => return Err(err("--hang-timeout (RANKVISOR_HANG_TIMEOUT) needs --heartbeat-file")),
        (Some(t), Some(_)) if t.is_zero() => return Err(err("--hang-timeout is 0s: expected a positive duration")),
        (Some(timeout), Some(_)) => {
            Some(HangConfig { timeout, startup: a.hang_startup.unwrap_or(Duration::from_secs(600).max(timeout)) })
        }
        (None, _) => None,
    };
    if a.backoff_max < a.backoff_initial {
        return Err(err(format!(
            "--backoff-max ({:?}) is shorter than --backoff-initial ({:?}): expected max >= initial",
            a.backoff_max, a.backoff_initial
        )));
    }
    let checkpoint = checkpoint_config(a)?;
    Ok(SupervisorConfig {
        checkpoint,
        policy: a.restart_policy,
        backoff_limit: a.backoff_limit,
        backoff: BackoffConfig { initial: a.backoff_initial, max: a.backoff_max, reset: a.backoff_reset },
        grace: a.grace_period,
        hang,
        scope: a.restart_scope,
    })
}

/// `--checkpoint-signal` and `--checkpoint-grace` (default: half the grace period).
fn checkpoint_config(a: &SuperviseArgs) -> Result<Option<CheckpointConfig>, ConfigError> {
    let Some(signal) = a.checkpoint_signal else {
        return match a.checkpoint_grace {
            Some(g) => Err(err(format!(
                "--checkpoint-grace ({g:?}) needs --checkpoint-signal (RANKVISOR_CHECKPOINT_SIGNAL): expected both or neither"
            ))),
            None => Ok(None),
        };
    };
    if signal == Signo::KILL || signal.raw() == libc::SIGSTOP {
        return Err(err(format!(
            "--checkpoint-signal {} cannot be caught: expected a signal the training process handles, such as SIGUSR1",
            signal.name()
        )));
    }
    let grace = a.checkpoint_grace.unwrap_or(a.grace_period / 2);
    if grace.is_zero() || grace >= a.grace_period {
        return Err(err(format!(
            "--checkpoint-grace ({grace:?}) must be positive and shorter than --grace-period ({:?}): the stop's own signal and SIGKILL follow within the grace period",
            a.grace_period
        )));
    }
    Ok(Some(CheckpointConfig { signal, grace }))
}

/// The pod's name: `POD_NAME` from the downward API, else `HOSTNAME`, else the kernel's hostname
/// (a pod's hostname is its name).
pub fn pod_name(env: &EnvSnapshot) -> Option<String> {
    env.non_empty("POD_NAME").or_else(|| env.non_empty("HOSTNAME")).or_else(|| env.hostname().map(str::to_string))
}

/// The rank contract from the snapshot (`rankvisor env` and the supervisor share it).
pub fn rank_env(env: &EnvSnapshot) -> Result<RankEnv, ConfigError> {
    env.check_utf8().map_err(|e| err(e.to_string()))?;
    rank::parse_rank_env_of_pod(env.lookup(), pod_name(env).as_deref()).map_err(|e| err(e.to_string()))
}

/// This replica's identity for reports: the rank contract, the downward API, `--job-name`.
pub fn identity(env: &EnvSnapshot, rank: &RankEnv, job_name: Option<&str>) -> Identity {
    let pod = pod_name(env);
    let master_addr = rank.master_addr.clone();
    let job = job_name.map(str::to_string).or_else(|| rank::derive_job_name(master_addr.as_deref(), pod.as_deref()));
    let role = match rank.role() {
        Role::Master => "Master",
        Role::Worker => "Worker",
    };
    let known_role = rank.injected || pod.as_deref().and_then(rank::PodName::parse).is_some();
    Identity {
        job,
        replica_type: known_role.then(|| role.to_string()),
        rank: rank.injected.then_some(rank.replica_index),
        replica_count: rank.injected.then(|| rank.replica_count.max()),
        world_size: rank.world_size.filter(|_| rank.injected),
        pod,
        namespace: env.non_empty("POD_NAMESPACE"),
        node: env.non_empty("NODE_NAME"),
        flavour: rank.injected.then_some(rank.flavour),
        restart_attempt: None,
    }
}

/// The node-health source with `auto` resolved.
pub fn health_settings(
    source: &NodeHealthSource,
    require_label: bool,
    wait: bool,
    kube: &KubeArgs,
    env: &EnvSnapshot,
    warnings: &mut Vec<String>,
) -> HealthSettings {
    let was_auto = matches!(source, NodeHealthSource::Auto);
    let source = match source.clone().resolve_auto(env.in_cluster()) {
        NodeHealthSource::Kubernetes if was_auto && kube.node_name.is_none() => {
            warnings.push(
                "in-cluster, but NODE_NAME is not set (expected from the downward API's spec.nodeName): node health is off"
                    .into(),
            );
            NodeHealthSource::Off
        }
        other => other,
    };
    HealthSettings { source, require_label, wait }
}

/// The Kubernetes API's settings from the arguments.
pub fn kube_settings(k: &KubeArgs) -> KubeSettings {
    KubeSettings {
        overrides: KubeOverrides {
            api_server: k.kube_api_server.clone(),
            token_file: k.kube_token_file.clone(),
            ca_file: k.kube_ca_file.clone(),
            namespace_file: None,
            allow_insecure_http: k.kube_allow_insecure_http,
        },
        node_name: k.node_name.clone(),
        node_health_timeout: k.node_health_timeout,
    }
}

/// Validate `a` and the environment into the supervisor's configuration.
pub fn supervise_config(
    a: &SuperviseArgs,
    command: &[OsString],
    env: &EnvSnapshot,
) -> Result<SuperviseConfig, ConfigError> {
    let Some((program, args)) = command.split_first() else {
        return Err(err("no command to supervise: expected `rankvisor [OPTIONS] -- COMMAND [ARGS]...`"));
    };
    if let Some(name) = &a.job_name {
        if name.is_empty() || name.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(err(format!(
                "--job-name (RANKVISOR_JOB_NAME) {name:?} is invalid: expected the PyTorchJob's name, non-empty, without spaces"
            )));
        }
    }
    let rank = rank_env(env)?;
    let mut supervisor = supervisor_config(a)?;
    let mut identity = identity(env, &rank, a.job_name.as_deref());
    let mut warnings = Vec::new();
    identity.restart_attempt = super::pod_labels::pod_restart_attempt(&a.node_health, &mut warnings);
    let mut inferred = rank.inferred.clone();
    if let Some(attempt) = identity.restart_attempt {
        inferred.push(format!("JobSet restart attempt {attempt} (pod label {})", rank::RESTART_ATTEMPT_LABEL));
    }
    let health = health_settings(
        &a.node_health,
        a.require_health_label,
        a.unhealthy_node == UnhealthyNode::Wait,
        &a.kube,
        env,
        &mut warnings,
    );
    // Under an agent the operator assigns ranks: rankvisor's barrier is off (see `agent`).
    let mut link = match a.agent {
        Some(_) => None,
        None => link_config(a, env, &rank, &identity, &mut inferred, &mut warnings)?,
    };
    if let Some(l) = link.as_mut() {
        l.checkpoint = supervisor.checkpoint.map(|c| c.grace);
    }
    let agent = super::agent::apply(a, &mut supervisor, &mut inferred);
    let kube_events = kube_events_target(a.kube_events, env)?;
    let webhook = a.report_url.clone().map(|url| crate::webhook::WebhookConfig {
        interval: a.report_interval,
        proxy: crate::net::client::ProxySettings::from_env(env.lookup()),
        ..crate::webhook::WebhookConfig::new(url)
    });
    if a.report_interval.is_zero() && webhook.is_some() {
        return Err(err("--report-interval is 0s: expected a positive duration such as 30s"));
    }
    let termination_log = a.termination_log.clone().or_else(crate::termination::default_path);
    let log_rules = a.log_rules.as_deref().map(read_log_rules).transpose()?;
    let straggler = straggler_settings(a, log_rules.as_deref())?;
    if let (Some(l), Some(st)) = (link.as_mut(), straggler.as_ref()) {
        l.straggler = Some((st.detector, st.action == super::args::StragglerAction::Restart));
    }
    Ok(SuperviseConfig {
        child: child_command(program, args, a.heartbeat_file.as_deref(), env),
        supervisor,
        rank,
        identity,
        health,
        kube: kube_settings(&a.kube),
        link,
        http: a.http_addr,
        webhook,
        kube_events,
        heartbeat_file: a.heartbeat_file.clone(),
        log_rules,
        straggler,
        termination_log,
        status_fd: a.status_fd,
        agent,
        inferred,
        warnings,
    })
}

/// `--log-rules FILE`: the rules, or an error naming the file, the rule and the field.
/// `--straggler-rule NAME[:lower]` and its settings.
#[derive(Debug, Clone, PartialEq)]
pub struct StragglerSettings {
    /// The rule whose captured metric each replica sends to the master.
    pub rule: String,
    /// Ratio, points, and which way the metric is better.
    pub detector: crate::rendezvous::straggler::StragglerConfig,
    /// `--straggler-action`.
    pub action: super::args::StragglerAction,
}

/// `--straggler-rule` checked against `--log-rules`: the rule exists and captures a metric.
pub(super) fn straggler_settings(
    a: &SuperviseArgs,
    rules: Option<&crate::logrules::RuleSet>,
) -> Result<Option<StragglerSettings>, ConfigError> {
    use crate::rendezvous::straggler::{Better, StragglerConfig};
    let Some(spec) = &a.straggler_rule else { return Ok(None) };
    let (name, better) = match spec.rsplit_once(':') {
        Some((name, "lower")) => (name, Better::Lower),
        Some((_, other)) => {
            return Err(err(format!(
                "--straggler-rule {:?}: unknown suffix {:?}: expected NAME or NAME:lower",
                crate::untrusted::escape(spec),
                crate::untrusted::escape(other)
            )))
        }
        None => (spec.as_str(), Better::Higher),
    };
    let Some(rules) = rules else {
        return Err(err("--straggler-rule needs --log-rules (RANKVISOR_LOG_RULES): the rule that captures the metric"));
    };
    match rules.rules().iter().find(|r| r.name == name) {
        None => {
            let names: Vec<&str> = rules.rules().iter().map(|r| r.name.as_str()).collect();
            return Err(err(format!(
                "--straggler-rule {:?} names no rule of --log-rules: expected one of {}",
                crate::untrusted::escape(name),
                names.join(", ")
            )));
        }
        Some(r) if r.metric.is_none() => {
            return Err(err(format!(
                "--straggler-rule {:?}: the rule has no metric (metricThreshold and operator, its logPattern's first group the value): expected a rule that captures one",
                crate::untrusted::escape(name)
            )))
        }
        Some(_) => {}
    }
    if !(a.straggler_ratio > 0.0 && a.straggler_ratio < 1.0) {
        return Err(err(format!(
            "--straggler-ratio {} is invalid: expected a fraction between 0 and 1, such as 0.75",
            a.straggler_ratio
        )));
    }
    if a.straggler_points == 0 {
        return Err(err("--straggler-points 0 is invalid: expected at least 1"));
    }
    let detector = StragglerConfig { ratio: a.straggler_ratio, points: a.straggler_points, better };
    Ok(Some(StragglerSettings { rule: name.to_string(), detector, action: a.straggler_action }))
}

fn read_log_rules(path: &std::path::Path) -> Result<std::sync::Arc<crate::logrules::RuleSet>, ConfigError> {
    let rules =
        crate::logrules::read_rules_file(path).map_err(|e| err(format!("--log-rules (RANKVISOR_LOG_RULES): {e}")))?;
    Ok(std::sync::Arc::new(rules))
}

/// The child's command and the environment it gets on top of rankvisor's: `LOCAL_RANK=0` and
/// `LOCAL_WORLD_SIZE=1` where unset (a program started without torchrun is one process per
/// replica), the heartbeat file's path, and without the job token (a secret meant for rankvisor
/// alone). The per-start counters are the loop's ([`crate::replica::event_loop`]).
pub(super) fn child_command(
    program: &OsString,
    args: &[OsString],
    heartbeat_file: Option<&std::path::Path>,
    env: &EnvSnapshot,
) -> ChildCommand {
    let mut vars: Vec<(OsString, OsString)> = [("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "1")]
        .into_iter()
        .filter(|(k, _)| !env.is_set(k))
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    if let Some(hb) = heartbeat_file {
        vars.push(("RANKVISOR_HEARTBEAT_FILE".into(), hb.as_os_str().to_os_string()));
    }
    ChildCommand {
        program: program.clone(),
        args: args.to_vec(),
        env: vars,
        env_remove: vec!["RANKVISOR_JOB_TOKEN".into()],
        stdout: None,
    }
}

/// Where Kubernetes Events go: `on` needs the downward API's POD_NAME and POD_NAMESPACE; `auto` is
/// on only in a cluster with both.
fn kube_events_target(mode: OnOffAuto, env: &EnvSnapshot) -> Result<Option<KubeEventsTarget>, ConfigError> {
    let (pod, namespace) = (env.non_empty("POD_NAME"), env.non_empty("POD_NAMESPACE"));
    match (mode, pod, namespace) {
        (OnOffAuto::Off, ..) => Ok(None),
        (OnOffAuto::Auto, Some(pod), Some(namespace)) if env.in_cluster() => {
            Ok(Some(KubeEventsTarget { pod, namespace, best_effort: true }))
        }
        (OnOffAuto::Auto, ..) => Ok(None),
        (OnOffAuto::On, Some(pod), Some(namespace)) => {
            Ok(Some(KubeEventsTarget { pod, namespace, best_effort: false }))
        }
        (OnOffAuto::On, p, n) => Err(err(format!(
            "--kube-events on needs POD_NAME ({:?}) and POD_NAMESPACE ({:?}) from the downward API \
             (fieldRef metadata.name and metadata.namespace): expected both set",
            p.unwrap_or_default(),
            n.unwrap_or_default()
        ))),
    }
}

/// The rendezvous settings for a job of several replicas; None for one replica, an elastic job
/// (torchrun's rendezvous owns membership) or `--rendezvous off`.
fn link_config(
    a: &SuperviseArgs,
    env: &EnvSnapshot,
    rank: &RankEnv,
    identity: &Identity,
    inferred: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<Option<JobLinkConfig>, ConfigError> {
    if a.rendezvous == OnOff::Off {
        return Ok(None);
    }
    let Some(count) = barrier_replica_count(rank, inferred) else { return Ok(None) };
    if a.rendezvous_timeout.is_zero() {
        return Err(err("--rendezvous-timeout is 0s: expected a positive duration"));
    }
    if a.rendezvous_port == Some(0) {
        return Err(err("--rendezvous-port 0 is invalid: expected a TCP port from 1 to 65535"));
    }
    let Some(job) = barrier_job(rank, identity, inferred, warnings) else { return Ok(None) };
    let (leader, port) = barrier_address(a, rank, &job, inferred)?;
    let token = job_token(env, &format!("{leader}:{port}"), count, warnings)?;
    let node = identity.node.clone().or_else(|| env.hostname().map(str::to_string)).unwrap_or_else(|| "unknown".into());
    Ok(Some(JobLinkConfig {
        identity: rendezvous::Member { job, replica_index: rank.replica_index, replica_count: count, node },
        master: (leader, port),
        listen: std::net::SocketAddr::from(([0, 0, 0, 0], port)),
        rendezvous: rendezvous::RendezvousConfig {
            barrier_timeout: a.rendezvous_timeout,
            token,
            ..rendezvous::RendezvousConfig::default()
        },
        checkpoint: None,
        straggler: None,
    }))
}

/// How many replicas meet at rankvisor's barrier: a fixed count above one; None for one replica
/// or an elastic job (torchrun's own rendezvous owns membership).
fn barrier_replica_count(rank: &RankEnv, inferred: &mut Vec<String>) -> Option<u32> {
    match rank.replica_count {
        ReplicaCount::Fixed { count } if count > 1 => Some(count),
        ReplicaCount::Fixed { .. } => None,
        ReplicaCount::Elastic { min, max } => {
            inferred.push(format!(
                "elastic job (PET_NNODES={}): torchrun's own rendezvous owns membership, rankvisor's barrier is off",
                if min == max { min.to_string() } else { format!("{min}:{max}") }
            ));
            None
        }
    }
}

/// The job's name, checked at the barrier: the PyTorchJob's, else (a local multi-process run) the
/// master's address, which every replica shares; None (the barrier off, with a warning) without.
fn barrier_job(
    rank: &RankEnv,
    identity: &Identity,
    inferred: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Option<String> {
    match (&identity.job, &rank.master_addr, rank.master_port) {
        (Some(job), ..) => Some(job.clone()),
        (None, Some(addr), Some(port)) => {
            let job = format!("{addr}:{port}");
            inferred.push(format!("job identity {job:?} from MASTER_ADDR:MASTER_PORT (not a Kubeflow pod name)"));
            Some(job)
        }
        (None, ..) => {
            warnings.push(format!(
                "cannot tell the job for rankvisor's barrier: POD_NAME {:?} is not <job>-worker-N and MASTER_ADDR is \
                 not set; the barrier is off (set --job-name and --rendezvous-port to turn it on)",
                identity.pod.clone().unwrap_or_default()
            ));
            None
        }
    }
}

/// Where the barrier's leader listens: host and port, each from its option, else the rank
/// environment, else Kubeflow's defaults (noted in `inferred` unless both came from MASTER_*).
fn barrier_address(
    a: &SuperviseArgs,
    rank: &RankEnv,
    job: &str,
    inferred: &mut Vec<String>,
) -> Result<(String, u16), ConfigError> {
    // The barrier's leader is replica 0: the Master, or without one Worker 0 (`<job>-worker-0`, the
    // headless Service of its pod), unless named (a run outside a cluster's DNS, as the dry run's).
    let (leader, leader_from) = match (&a.rendezvous_host, &rank.master_addr) {
        (Some(host), _) if !crate::rank::is_host(host) => {
            return Err(err(format!("--rendezvous-host {host:?} is invalid: expected a host name or IP address")));
        }
        (Some(host), _) => (host.clone(), "--rendezvous-host"),
        (None, Some(addr)) => (addr.clone(), "MASTER_ADDR"),
        (None, None) => (format!("{job}-worker-0"), "the job's Worker 0 (no Master)"),
    };
    let (port, port_from) = match (a.rendezvous_port, rank.master_port) {
        (Some(p), _) => (p, "--rendezvous-port"),
        (None, Some(mp)) => (
            mp.checked_add(1).ok_or_else(|| {
                err("MASTER_PORT=65535 leaves no default rendezvous port (MASTER_PORT+1): expected --rendezvous-port")
            })?,
            "MASTER_PORT+1",
        ),
        (None, None) => (DEFAULT_RENDEZVOUS_PORT, "Kubeflow's default port 23456 + 1"),
    };
    if a.rendezvous_host.is_some() || rank.master_addr.is_none() || rank.master_port.is_none() {
        inferred.push(format!("rankvisor's barrier at {leader}:{port} ({leader_from}, port {port_from})"));
    }
    Ok((leader, port))
}

/// `RANKVISOR_JOB_TOKEN`, the secret every replica proves at the barrier (`at`): set and empty is
/// an error; unset is a warning (anyone who reaches the barrier can join).
fn job_token(
    env: &EnvSnapshot,
    at: &str,
    count: u32,
    warnings: &mut Vec<String>,
) -> Result<Option<Vec<u8>>, ConfigError> {
    match env.get("RANKVISOR_JOB_TOKEN") {
        Some(t) if t.is_empty() => Err(err("RANKVISOR_JOB_TOKEN is set but empty: expected a secret, or unset")),
        Some(t) => Ok(Some(t.into_bytes())),
        None => {
            warnings.push(format!(
                "no RANKVISOR_JOB_TOKEN: anyone who reaches {at} can join this {count}-replica job's barrier; \
                 set the same secret on every replica"
            ));
            Ok(None)
        }
    }
}

/// How long a master whose child succeeded keeps the control channel for its workers: under job
/// scope a worker that loses the master stops its child, so the master waits (at most one
/// rendezvous timeout) for them to finish.
pub fn linger_limit_of(scope: RestartScope, link: &Option<JobLinkConfig>) -> Option<Duration> {
    link.as_ref().filter(|_| scope == RestartScope::Job).map(|l| l.rendezvous.barrier_timeout)
}

#[cfg(test)]
mod tests;

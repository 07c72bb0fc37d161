//! The rankvisor binary: parse the command line, then hand over to the library.

use clap::{Parser, Subcommand};
use rankvisor::dryrun::{self, DryRunOptions, OutputFormat, QueueCapability, WatchKinds};
use rankvisor::duration::parse_duration;
use rankvisor::health::{self, NodeHealthSource};
use rankvisor::logging::{self, LogFormat};
use rankvisor::process::{self, ChildCommand, Signals};
use rankvisor::supervise::{BackoffConfig, HangConfig, RestartPolicy, RestartScope, SupervisorConfig};
use rankvisor::{driver, exit, job_link, rank, rendezvous, termination};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;
use tracing::{error, Level};

/// PID 1 and replica supervisor for distributed PyTorch training jobs.
///
/// Every option can also be set by an environment variable RANKVISOR_<OPTION_NAME>.
#[derive(Parser, Debug)]
#[command(name = "rankvisor", version, args_conflicts_with_subcommands = true)]
#[command(
    override_usage = "rankvisor [OPTIONS] -- COMMAND [ARGS]...\n       rankvisor dry-run [OPTIONS] JOB.yaml\n       rankvisor env [--json]"
)]
struct Cli {
    #[command(subcommand)]
    sub: Option<Sub>,
    #[command(flatten)]
    sup: SuperviseArgs,
    /// Log format for rankvisor's own lines on stderr: text or json.
    #[arg(long, env = "RANKVISOR_LOG_FORMAT", default_value = "text", global = true)]
    log_format: LogFormat,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, env = "RANKVISOR_LOG_LEVEL", default_value = "info", value_parser = logging::parse_level, global = true)]
    log_level: Level,
    /// The training command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Print the resolved rank contract.
    Env {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print this node's health verdict; exit 0 only if healthy.
    CheckNode {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Where the node's labels come from: off, auto, file:PATH or kubernetes.
        #[arg(long, env = "RANKVISOR_NODE_HEALTH", default_value = "auto")]
        node_health: NodeHealthSource,
        /// Treat a node without the node-health-status label as unhealthy.
        #[arg(long, env = "RANKVISOR_REQUIRE_HEALTH_LABEL")]
        require_health_label: bool,
        #[command(flatten)]
        kube: KubeArgs,
    },
    /// Run a PyTorchJob manifest on this machine: one rankvisor launcher per replica, the job,
    /// PodGroup and pod states printed as `kubectl get -w` shows them. Exit 0 Succeeded, 1 Failed,
    /// 64 invalid manifest.
    DryRun(DryRunArgs),
}

/// `rankvisor dry-run`'s options. Timing defaults are a laptop's, not Kubernetes' (10s, 300s, 30s).
#[derive(clap::Args, Debug)]
struct DryRunArgs {
    /// The PyTorchJob manifest (YAML or JSON).
    #[arg(value_name = "JOB.yaml")]
    manifest: PathBuf,
    /// The Volcano queue's capability, e.g. cpu=2,memory=4Gi: a job that does not fit whole starts nothing.
    #[arg(long, env = "RANKVISOR_QUEUE_CAPABILITY", value_parser = QueueCapability::parse)]
    queue_capability: Option<QueueCapability>,
    /// What to show: job, podgroup, pods or all.
    #[arg(long, env = "RANKVISOR_WATCH", default_value = "all", value_parser = WatchKinds::parse)]
    watch: WatchKinds,
    /// text (kubectl's columns) or json (one change per line).
    #[arg(long, env = "RANKVISOR_OUTPUT", default_value = "text")]
    output: OutputFormat,
    /// Write each replica's output to DIR/<pod>.log (default: on stderr, each line prefixed by its pod).
    #[arg(long, env = "RANKVISOR_LOGS", value_name = "DIR")]
    logs: Option<PathBuf>,
    /// Fault to inject (repeatable): fail:REPLICA@TIME (SIGKILL to its training process),
    /// delete:REPLICA@TIME (kill its launcher; the pod is recreated), label:REPLICA@TIME=VALUE
    /// (its node's node-health-status label; or =KEY=VALUE). REPLICA: master-0, worker-N.
    #[arg(long, env = "RANKVISOR_INJECT", value_name = "SPEC", value_delimiter = ',')]
    inject: Vec<String>,
    /// Stop everything and exit 1 if the job has not ended after this long.
    #[arg(long, env = "RANKVISOR_TIMEOUT", value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// MASTER_PORT for every replica; 0 picks a free port [default: the manifest's, or a free
    /// port if that one or the next is in use]
    #[arg(long, env = "RANKVISOR_MASTER_PORT")]
    master_port: Option<u16>,
    /// Each launcher's delay before a replica's first restart; it doubles up to --backoff-max.
    #[arg(long, env = "RANKVISOR_BACKOFF_INITIAL", default_value = "1s", value_parser = parse_duration)]
    backoff_initial: Duration,
    /// Each launcher's longest delay between restarts.
    #[arg(long, env = "RANKVISOR_BACKOFF_MAX", default_value = "10s", value_parser = parse_duration)]
    backoff_max: Duration,
    /// Time between TERM and KILL when a replica is stopped.
    #[arg(long, env = "RANKVISOR_GRACE_PERIOD", default_value = "5s", value_parser = parse_duration)]
    grace_period: Duration,
    /// What a replica's failure restarts: replica (its own child) or job (every replica's child, in
    /// a new rendezvous generation).
    #[arg(long, env = "RANKVISOR_RESTART_SCOPE", default_value = "replica")]
    restart_scope: RestartScope,
    /// Every replica serves /healthz, /readyz, /metrics and /status on a free 127.0.0.1 port (said
    /// in the output).
    #[arg(long)]
    http: bool,
    /// The launchers' own log level (their lines appear among the replica's output).
    #[arg(long, env = "RANKVISOR_LAUNCHER_LOG_LEVEL", default_value = "warn", value_parser = logging::parse_level)]
    launcher_log_level: Level,
}

#[derive(clap::Args, Debug)]
struct SuperviseArgs {
    /// When to restart the training process: Never, OnFailure, Always or ExitCode.
    #[arg(long, env = "RANKVISOR_RESTART_POLICY", default_value = "OnFailure")]
    restart_policy: RestartPolicy,
    /// The most restarts, under every policy.
    #[arg(long, env = "RANKVISOR_BACKOFF_LIMIT", default_value_t = 6)]
    backoff_limit: u32,
    /// Delay before the first restart; it doubles up to --backoff-max.
    #[arg(long, env = "RANKVISOR_BACKOFF_INITIAL", default_value = "10s", value_parser = parse_duration)]
    backoff_initial: Duration,
    /// The longest delay between restarts.
    #[arg(long, env = "RANKVISOR_BACKOFF_MAX", default_value = "300s", value_parser = parse_duration)]
    backoff_max: Duration,
    /// Healthy running this long resets the delay to --backoff-initial.
    #[arg(long, env = "RANKVISOR_BACKOFF_RESET", default_value = "10m", value_parser = parse_duration)]
    backoff_reset: Duration,
    /// Time between TERM and KILL when stopping the training process.
    #[arg(long, env = "RANKVISOR_GRACE_PERIOD", default_value = "30s", value_parser = parse_duration)]
    grace_period: Duration,
    /// What a failure restarts: replica (this child) or job (every replica's child).
    #[arg(long, env = "RANKVISOR_RESTART_SCOPE", default_value = "replica")]
    restart_scope: RestartScope,
    /// A file the training process touches (or writes JSON progress to) as its heartbeat.
    #[arg(long, env = "RANKVISOR_HEARTBEAT_FILE")]
    heartbeat_file: Option<PathBuf>,
    /// A running child that does not beat for this long is hung (needs --heartbeat-file).
    #[arg(long, env = "RANKVISOR_HANG_TIMEOUT", value_parser = parse_duration)]
    hang_timeout: Option<Duration>,
    /// The allowance for the first beat after each start (default: 10m, or --hang-timeout if longer).
    #[arg(long, env = "RANKVISOR_HANG_STARTUP", value_parser = parse_duration)]
    hang_startup: Option<Duration>,
    /// Where to write why rankvisor gave up (default /dev/termination-log when it exists).
    #[arg(long, env = "RANKVISOR_TERMINATION_LOG")]
    termination_log: Option<PathBuf>,
    /// Where the node's HyperPod health labels come from: off, auto, file:PATH or kubernetes.
    #[arg(long, env = "RANKVISOR_NODE_HEALTH", default_value = "auto")]
    node_health: NodeHealthSource,
    /// What to do when the node is unhealthy before the start: exit (138) or wait for health.
    #[arg(long, env = "RANKVISOR_UNHEALTHY_NODE", default_value = "exit", value_parser = ["exit", "wait"])]
    unhealthy_node: String,
    /// Treat a node without the node-health-status label as unhealthy.
    #[arg(long, env = "RANKVISOR_REQUIRE_HEALTH_LABEL")]
    require_health_label: bool,
    /// on: replicas meet at a barrier before the first start (jobs of several replicas). off: no
    /// barrier and no control channel (when not every replica runs rankvisor).
    #[arg(long, env = "RANKVISOR_RENDEZVOUS", default_value = "on", value_parser = ["on", "off"])]
    rendezvous: String,
    /// The master's rendezvous port (default MASTER_PORT+1; MASTER_PORT belongs to torch's store).
    #[arg(long, env = "RANKVISOR_RENDEZVOUS_PORT")]
    rendezvous_port: Option<u16>,
    /// How long the replicas may take to meet (each generation's barrier, and a worker's dialling).
    #[arg(long, env = "RANKVISOR_RENDEZVOUS_TIMEOUT", default_value = "10m", value_parser = parse_duration)]
    rendezvous_timeout: Duration,
    /// The job's name, checked at the rendezvous (default: from MASTER_ADDR `<job>-master-0` or POD_NAME).
    #[arg(long, env = "RANKVISOR_JOB_NAME")]
    job_name: Option<String>,
    /// Write every status change as one JSON line to this inherited file descriptor (for tools).
    #[arg(long, env = "RANKVISOR_STATUS_FD")]
    status_fd: Option<i32>,
    /// Serve /healthz, /readyz, /metrics, /status (and /job on the master) here (IP:PORT), or off.
    #[arg(long, env = "RANKVISOR_HTTP_ADDR", default_value = rankvisor::http::HttpAddr::DEFAULT,
          value_parser = rankvisor::http::HttpAddr::parse)]
    http_addr: rankvisor::http::HttpAddr,
    /// POST the JSON report to this http:// URL on every state change and every --report-interval.
    #[arg(long, env = "RANKVISOR_REPORT_URL", value_parser = rankvisor::webhook::parse_url)]
    report_url: Option<hyper::Uri>,
    /// How often to POST the report to --report-url even without a change.
    #[arg(long, env = "RANKVISOR_REPORT_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    report_interval: Duration,
    /// Kubernetes Events on this Pod for each transition that matters, and the Pod condition
    /// rankvisor.dev/ReplicaHealthy: on, off, or auto (on in-cluster with POD_NAME and POD_NAMESPACE).
    #[arg(long, env = "RANKVISOR_KUBE_EVENTS", default_value = "auto", value_parser = ["on", "off", "auto"])]
    kube_events: String,
    #[command(flatten)]
    kube: KubeArgs,
}

/// The Kubernetes node-health source's settings (in-cluster defaults; overrides for tests and
/// out-of-cluster use).
#[derive(clap::Args, Debug, Clone)]
struct KubeArgs {
    /// This pod's node, from the downward API (env NODE_NAME from fieldRef spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// How long the Kubernetes API may stay unreachable (or refuse) at start before rankvisor gives up (138).
    #[arg(long, env = "RANKVISOR_NODE_HEALTH_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    node_health_timeout: Duration,
    /// The API server's URL [default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT]
    #[arg(long, env = "RANKVISOR_KUBE_API_SERVER", value_name = "URL")]
    kube_api_server: Option<String>,
    /// The bearer-token file, re-read before every request [default: the service account's token]
    #[arg(long, env = "RANKVISOR_KUBE_TOKEN_FILE", value_name = "PATH")]
    kube_token_file: Option<PathBuf>,
    /// The CA bundle the API server's certificate must chain to [default: the service account's ca.crt]
    #[arg(long, env = "RANKVISOR_KUBE_CA_FILE", value_name = "PATH")]
    kube_ca_file: Option<PathBuf>,
}

impl KubeArgs {
    /// The client and the checked node name, or a configuration error.
    fn client(&self) -> Result<(rankvisor::kube::KubeClient, String), String> {
        use rankvisor::kube::{check_node_name, KubeClient, KubeConfig, KubeOverrides};
        let node = self.node_name.clone().unwrap_or_default();
        check_node_name(&node).map_err(|e| e.to_string())?;
        let overrides = KubeOverrides {
            api_server: self.kube_api_server.clone(),
            token_file: self.kube_token_file.clone(),
            ca_file: self.kube_ca_file.clone(),
            namespace_file: None,
        };
        let cfg = KubeConfig::resolve(&overrides, |k| std::env::var(k).ok()).map_err(|e| e.to_string())?;
        Ok((KubeClient::new(cfg).map_err(|e| e.to_string())?, node))
    }
}

fn main() {
    // Before anything can start a thread: every thread must inherit the blocked mask.
    let signals = match process::block_signals() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("[rankvisor] ERROR cannot block signals: {e}");
            std::process::exit(exit::CONFIG_ERROR);
        }
    };
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
            if matches!(e.kind(), DisplayHelp | DisplayVersion) {
                let _ = e.print();
                std::process::exit(0);
            }
            let _ = e.print();
            let first = e.to_string().lines().next().unwrap_or_default().trim_start_matches("error: ").to_string();
            write_termination(None, &format!("configuration error: {first}"));
            std::process::exit(exit::CONFIG_ERROR);
        }
    };
    logging::init(cli.log_format, cli.log_level);
    let _ = TERMINATION_LOG.set(cli.sup.termination_log.clone());
    let code = match cli.sub {
        Some(Sub::Env { json }) => cmd_env(json),
        Some(Sub::CheckNode { json, node_health, require_health_label, kube }) => {
            cmd_check_node(json, node_health, require_health_label, &kube)
        }
        Some(Sub::DryRun(args)) => cmd_dry_run(args, &signals),
        None => cmd_supervise(cli.sup, cli.command, signals),
    };
    std::process::exit(code);
}

fn cmd_env(json: bool) -> i32 {
    match rank::parse_rank_env(|k| std::env::var(k).ok()) {
        Ok(env) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&env).unwrap_or_default());
            } else {
                println!("{env}");
            }
            0
        }
        Err(e) => config_error(&e.to_string()),
    }
}

/// In-cluster: the service-account token is mounted and the API server's address is injected.
fn in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        && std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token").exists()
}

/// The source to use: `auto` resolved (in a cluster without NODE_NAME it cannot name the node: off).
fn resolve_source(source: NodeHealthSource, kube: &KubeArgs) -> Result<NodeHealthSource, String> {
    let was_auto = matches!(source, NodeHealthSource::Auto);
    match source.resolve_auto(in_cluster()) {
        NodeHealthSource::Kubernetes if was_auto && kube.node_name.is_none() => {
            tracing::warn!(
                "in-cluster, but NODE_NAME is not set (expected from the downward API's spec.nodeName): node health is off"
            );
            Ok(NodeHealthSource::Off)
        }
        other => Ok(other),
    }
}

fn cmd_check_node(json: bool, source: NodeHealthSource, require: bool, kube: &KubeArgs) -> i32 {
    let observation = match resolve_source(source, kube) {
        Ok(NodeHealthSource::File(p)) => health::read_file_verdict(&p, require),
        Ok(NodeHealthSource::Kubernetes) => {
            let (client, node) = match kube.client() {
                Ok(c) => c,
                Err(e) => return config_error(&e),
            };
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(r) => r,
                Err(e) => {
                    error!("cannot start the event loop: {e}");
                    return exit::EXTERNAL_FAILURE;
                }
            };
            runtime.block_on(health::read_kubernetes_verdict(&client, &node, require))
        }
        Ok(_) => {
            println!("node health checking is off (no labels source): treated as healthy");
            return 0;
        }
        Err(e) => return config_error(&e),
    };
    match observation {
        Ok(v) => {
            print!("{}", if json { health::render_json(&v) } else { health::render_text(&v) });
            if v.healthy {
                0
            } else {
                exit::EXTERNAL_FAILURE
            }
        }
        Err(e) => {
            error!("{e}");
            exit::EXTERNAL_FAILURE
        }
    }
}

fn cmd_dry_run(a: DryRunArgs, signals: &Signals) -> i32 {
    // The dry run is not PID 1: it gets back the signal mask it inherited, so tokio handles INT,
    // TERM and CHLD, and the launchers do not inherit a mask with everything blocked.
    if let Err(e) =
        nix::sys::signal::pthread_sigmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(&signals.original), None)
    {
        error!("cannot restore the signal mask: {e}");
        return exit::EXTERNAL_FAILURE;
    }
    let rankvisor = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            error!("cannot find the rankvisor binary to run the launchers: {e}");
            return exit::EXTERNAL_FAILURE;
        }
    };
    let opts = DryRunOptions {
        queue_capability: a.queue_capability,
        watch: a.watch,
        output: a.output,
        logs: a.logs,
        inject: a.inject,
        timeout: a.timeout,
        master_port: a.master_port,
        backoff_initial: a.backoff_initial,
        backoff_max: a.backoff_max,
        grace_period: a.grace_period,
        launcher_log_level: a.launcher_log_level.to_string().to_lowercase(),
        restart_scope: a.restart_scope,
        http: a.http,
        ..DryRunOptions::new(a.manifest, rankvisor)
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            error!("cannot start the event loop: {e}");
            return exit::EXTERNAL_FAILURE;
        }
    };
    runtime.block_on(dryrun::run_dry_run(opts))
}

/// `--termination-log` once the command line is parsed.
static TERMINATION_LOG: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();

/// Write why rankvisor gives up where `kubectl describe pod` shows it, even before (or without)
/// a parsed command line: the flag, else RANKVISOR_TERMINATION_LOG, else /dev/termination-log.
fn write_termination(flag: Option<PathBuf>, msg: &str) {
    let path = flag
        .or_else(|| TERMINATION_LOG.get().cloned().flatten())
        .or_else(|| std::env::var_os("RANKVISOR_TERMINATION_LOG").map(PathBuf::from))
        .or_else(termination::default_path);
    if let Some(p) = path {
        let _ = termination::write_message(&p, msg);
    }
}

fn config_error(msg: &str) -> i32 {
    error!("configuration error: {msg}");
    write_termination(None, &format!("configuration error: {msg}"));
    exit::CONFIG_ERROR
}

fn supervisor_config(a: &SuperviseArgs) -> Result<SupervisorConfig, String> {
    let hang = match (a.hang_timeout, &a.heartbeat_file) {
        (Some(_), None) => return Err("--hang-timeout (RANKVISOR_HANG_TIMEOUT) needs --heartbeat-file".into()),
        (Some(t), Some(_)) if t.is_zero() => return Err("--hang-timeout is 0s: expected a positive duration".into()),
        (Some(timeout), Some(_)) => {
            Some(HangConfig { timeout, startup: a.hang_startup.unwrap_or(Duration::from_secs(600).max(timeout)) })
        }
        (None, _) => None,
    };
    if a.backoff_max < a.backoff_initial {
        return Err(format!(
            "--backoff-max ({:?}) is shorter than --backoff-initial ({:?}): expected max >= initial",
            a.backoff_max, a.backoff_initial
        ));
    }
    Ok(SupervisorConfig {
        policy: a.restart_policy,
        backoff_limit: a.backoff_limit,
        backoff: BackoffConfig { initial: a.backoff_initial, max: a.backoff_max, reset: a.backoff_reset },
        grace: a.grace_period,
        hang,
        scope: a.restart_scope,
    })
}

/// The rendezvous settings for a job of several replicas; None for one replica or an elastic job.
fn job_link_config(
    a: &SuperviseArgs,
    rank: &rank::RankEnv,
    job: Option<String>,
) -> Result<Option<job_link::JobLinkConfig>, String> {
    if a.rendezvous == "off" {
        return Ok(None);
    }
    let count = match rank.replica_count {
        rank::ReplicaCount::Fixed { count } if count > 1 => count,
        rank::ReplicaCount::Fixed { .. } => return Ok(None),
        rank::ReplicaCount::Elastic { min, max } => {
            tracing::info!(
                "elastic job (PET_NNODES={min}:{max}): torchrun's own rendezvous owns membership; rankvisor's barrier is off"
            );
            return Ok(None);
        }
    };
    let job = job.ok_or_else(|| {
        format!(
            "cannot tell the job's name for the rendezvous: MASTER_ADDR={:?} and POD_NAME={:?} are not of the form \
             <job>-master-0 / <job>-worker-N: expected --job-name (RANKVISOR_JOB_NAME)",
            rank.master_addr.clone().unwrap_or_default(),
            std::env::var("POD_NAME").unwrap_or_default()
        )
    })?;
    let (Some(master_addr), Some(master_port)) = (rank.master_addr.clone(), rank.master_port) else {
        return Err("MASTER_ADDR and MASTER_PORT are needed for the rendezvous".into());
    };
    let port = match a.rendezvous_port {
        Some(0) => return Err("--rendezvous-port 0 is invalid: expected a TCP port from 1 to 65535".into()),
        Some(p) => p,
        None => master_port.checked_add(1).ok_or_else(|| {
            "MASTER_PORT=65535 leaves no default rendezvous port (MASTER_PORT+1): expected --rendezvous-port"
                .to_string()
        })?,
    };
    let token = match std::env::var("RANKVISOR_JOB_TOKEN") {
        Ok(t) if t.is_empty() => return Err("RANKVISOR_JOB_TOKEN is set but empty: expected a secret, or unset".into()),
        Ok(t) => Some(t.into_bytes()),
        Err(_) => None,
    };
    if a.rendezvous_timeout.is_zero() {
        return Err("--rendezvous-timeout is 0s: expected a positive duration".into());
    }
    let node = std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()).unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown".into())
    });
    Ok(Some(job_link::JobLinkConfig {
        identity: rendezvous::Identity { job, replica_index: rank.replica_index, replica_count: count, node },
        master: (master_addr, port),
        listen: std::net::SocketAddr::from(([0, 0, 0, 0], port)),
        rendezvous: rendezvous::RendezvousConfig {
            barrier_timeout: a.rendezvous_timeout,
            token,
            scope: a.restart_scope,
            ..rendezvous::RendezvousConfig::default()
        },
        scope: a.restart_scope,
    }))
}

fn cmd_supervise(a: SuperviseArgs, command: Vec<OsString>, signals: Signals) -> i32 {
    let Some((program, args)) = command.split_first() else {
        return config_error("no command to supervise: expected `rankvisor [OPTIONS] -- COMMAND [ARGS]...`");
    };
    let rank = match rank::parse_rank_env(|k| std::env::var(k).ok()) {
        Ok(r) => r,
        Err(e) => return config_error(&e.to_string()),
    };
    let supervisor = match supervisor_config(&a) {
        Ok(c) => c,
        Err(e) => return config_error(&e),
    };
    let mut identity = rankvisor::report::identity(|k| std::env::var(k).ok(), Some(&rank));
    if a.job_name.is_some() {
        identity.job = a.job_name.clone();
    }
    // Under job scope a worker that loses the master stops its child: a master whose child
    // succeeded keeps the control channel open until the workers finish (bounded).
    let (linger_scope, linger_limit) = (a.restart_scope, a.rendezvous_timeout);
    let link_cfg = match job_link_config(&a, &rank, identity.job.clone()) {
        Ok(c) => c,
        Err(e) => return config_error(&e),
    };
    let kube_events_cfg = match kube_events_reporter(&a, &identity) {
        Ok(c) => c,
        Err(e) => return config_error(&e),
    };
    let status_sink = match a.status_fd.map(rankvisor::status_sink::StatusSink::from_fd).transpose() {
        Ok(s) => s,
        Err(e) => return config_error(&e.to_string()),
    };
    if std::process::id() != 1 {
        // Orphans of the child are reparented to us, not to the host's init, and reaped the same way.
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integers.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            tracing::warn!("cannot become a child subreaper: {}", std::io::Error::last_os_error());
        }
    }
    let source = match resolve_source(a.node_health.clone(), &a.kube) {
        Ok(s) => s,
        Err(e) => return config_error(&e),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build() {
        Ok(r) => r,
        Err(e) => {
            error!("cannot start the event loop: {e}");
            return exit::EXTERNAL_FAILURE;
        }
    };
    let (status, _keep) = tokio::sync::watch::channel(Default::default());
    let health = match source {
        NodeHealthSource::File(path) => {
            let _guard = runtime.enter();
            Some(driver::HealthGate {
                rx: health::spawn_file_watcher(path, a.require_health_label, Duration::from_secs(1)),
                wait: a.unhealthy_node == "wait",
            })
        }
        NodeHealthSource::Kubernetes => match runtime.block_on(kube_health(&a, &signals)) {
            Ok(rx) => Some(driver::HealthGate { rx, wait: a.unhealthy_node == "wait" }),
            Err(code) => return code,
        },
        _ => None,
    };
    let health_rx = health.as_ref().map(|g| g.rx.clone());
    // Reporting starts before the rendezvous link: the link streams this replica's reports to the
    // master, and the master's HTTP server serves the link's job view on /job.
    let reporting_cfg = rankvisor::reporting::ReportingConfig {
        http: a.http_addr,
        webhook: a.report_url.clone().map(|url| rankvisor::webhook::WebhookConfig {
            interval: a.report_interval,
            ..rankvisor::webhook::WebhookConfig::new(url)
        }),
    };
    let reporting = runtime.block_on(rankvisor::reporting::start(
        reporting_cfg,
        identity.clone(),
        status.subscribe(),
        health_rx.clone(),
    ));
    let link = match link_cfg {
        Some(lc) => {
            let _guard = runtime.enter();
            let rdzv_health = job_link::rendezvous_health(health_rx.clone());
            match job_link::start(lc, rdzv_health, status.subscribe(), Some(reporting.subscribe())) {
                Ok(l) => Some(l),
                Err(e) => {
                    let msg = format!("rendezvous failed: {e}");
                    error!("{msg}");
                    write_termination(None, &msg);
                    runtime.block_on(reporting.finish(Duration::from_secs(2)));
                    runtime.shutdown_background();
                    return exit::EXTERNAL_FAILURE;
                }
            }
        }
        None => None,
    };
    if let Some(view) = link.as_ref().and_then(|l| l.job_view.clone()) {
        reporting.attach_job_view(view);
    }
    let kube_events = kube_events_cfg.map(|cfg| {
        let _guard = runtime.enter();
        rankvisor::kube_events::spawn(cfg, reporting.subscribe())
    });
    let cfg = driver::DriverConfig {
        supervisor,
        command: ChildCommand { program: program.clone(), args: args.to_vec(), env: Vec::new() },
        heartbeat_file: a.heartbeat_file,
        termination_log: a.termination_log.or_else(termination::default_path),
        generation_requests: link.as_ref().map(|l| l.generation_requests.clone()),
        status_sink,
        health,
    };
    let (links, workers_done) = link.map(|l| (l.links, l.workers_done)).unwrap_or_default();
    let code = match runtime.block_on(driver::supervise(cfg, signals.clone(), status, links)) {
        Ok(code) => code,
        Err(e) => {
            error!("supervision failed: {e}");
            exit::EXTERNAL_FAILURE
        }
    };
    if code == 0 && workers_done.is_some() && matches!(linger_scope, RestartScope::Job) {
        runtime.block_on(linger_for_workers(workers_done, linger_limit, &signals));
    }
    runtime.block_on(reporting.finish(Duration::from_secs(2)));
    if let Some(k) = kube_events {
        runtime.block_on(k.finish(Duration::from_secs(2)));
    }
    // Do not wait for a blocked DNS lookup of the webhook's host.
    runtime.shutdown_background();
    code
}

/// The Kubernetes Events and Pod-condition reporter's settings, when `--kube-events` turns it on.
fn kube_events_reporter(
    a: &SuperviseArgs,
    identity: &rankvisor::report::Identity,
) -> Result<Option<rankvisor::kube_events::KubeEventsConfig>, String> {
    use rankvisor::kube::{KubeClient, KubeConfig, KubeOverrides};
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (pod, namespace) = (var("POD_NAME"), var("POD_NAMESPACE"));
    let (pod, namespace) = match (a.kube_events.as_str(), pod, namespace) {
        ("off", _, _) => return Ok(None),
        ("auto", Some(p), Some(n)) if in_cluster() => (p, n),
        ("auto", ..) => return Ok(None),
        (_, Some(p), Some(n)) => (p, n),
        (_, p, n) => {
            return Err(format!(
                "--kube-events on needs POD_NAME ({:?}) and POD_NAMESPACE ({:?}) from the downward API \
                 (fieldRef metadata.name and metadata.namespace): expected both set",
                p.unwrap_or_default(),
                n.unwrap_or_default()
            ))
        }
    };
    let overrides = KubeOverrides {
        api_server: a.kube.kube_api_server.clone(),
        token_file: a.kube.kube_token_file.clone(),
        ca_file: a.kube.kube_ca_file.clone(),
        namespace_file: None,
    };
    let client = KubeConfig::resolve(&overrides, |k| std::env::var(k).ok())
        .map_err(|e| e.to_string())
        .and_then(|cfg| KubeClient::new(cfg).map_err(|e| e.to_string()));
    let client = match client {
        Ok(c) => c,
        // auto is best effort: reporting must not keep training from starting.
        Err(e) if a.kube_events == "auto" => {
            tracing::warn!("Kubernetes Events and the Pod condition are off: {e}");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    Ok(Some(rankvisor::kube_events::KubeEventsConfig { client, namespace, pod, node: identity.node.clone() }))
}

/// The master's child succeeded: keep the control channel up until every worker has finished or
/// disconnected, at most `limit`, and no longer than a TERM or INT.
async fn linger_for_workers(done: Option<tokio::sync::watch::Receiver<bool>>, limit: Duration, signals: &Signals) {
    tracing::info!("the master's child succeeded; waiting for the workers to finish (at most {limit:?})");
    let shutdown = async {
        let Ok(mut stream) = process::SignalStream::new(signals) else {
            return std::future::pending().await;
        };
        loop {
            match stream.next().await {
                Ok(sigs) if sigs.iter().any(|&s| process::is_shutdown(s)) => return,
                Ok(_) => {}
                Err(_) => return std::future::pending().await,
            }
        }
    };
    tokio::select! {
        () = job_link::workers_finished(done) => tracing::info!("every worker has finished"),
        () = tokio::time::sleep(limit) => tracing::warn!("workers still running after {limit:?}; closing the control channel"),
        () = shutdown => tracing::info!("stopped while waiting for the workers"),
    }
}

/// Start the Kubernetes watcher and wait for its first observation (the API may be retried for
/// --node-health-timeout), while still honouring TERM and INT: nothing has started yet.
async fn kube_health(
    a: &SuperviseArgs,
    signals: &Signals,
) -> Result<tokio::sync::watch::Receiver<health::Observation>, i32> {
    let (client, node) = a.kube.client().map_err(|e| config_error(&e))?;
    let opts = health::KubeWatchOptions::new(node, a.require_health_label, a.kube.node_health_timeout);
    let mut stream = process::SignalStream::new(signals).map_err(|e| {
        error!("cannot read signals: {e}");
        exit::EXTERNAL_FAILURE
    })?;
    let watcher = health::spawn_kubernetes_watcher(client, opts);
    tokio::pin!(watcher);
    loop {
        tokio::select! {
            rx = &mut watcher => return Ok(rx),
            sigs = stream.next() => {
                let sigs = sigs.map_err(|e| {
                    error!("cannot read signals: {e}");
                    exit::EXTERNAL_FAILURE
                })?;
                if let Some(&s) = sigs.iter().find(|&&s| process::is_shutdown(s)) {
                    let msg = format!("stopped by {} before the child started", exit::signal_name(s));
                    tracing::info!("{msg}");
                    write_termination(a.termination_log.clone(), &msg);
                    return Err(128 + s);
                }
            }
        }
    }
}

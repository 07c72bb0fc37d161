//! The command line's types: clap parses them (every option also from `RANKVISOR_<OPTION>`), and
//! `config` turns them, with the environment snapshot, into validated configuration. Every choice
//! is an enum, never a string compared with literals.

use crate::duration::parse_duration;
use crate::health::NodeHealthSource;
use crate::logging;
use crate::policy::{RestartPolicy, RestartScope};
use std::path::PathBuf;
use std::time::Duration;
use tracing::Level;

/// A whole number written as plain decimal digits: `+1`, `-1`, ` 1` and `0x10` are refused (the
/// standard parser takes a leading `+`).
pub fn decimal<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match s.parse::<T>() {
        Ok(n) if digits => Ok(n),
        _ => Err(format!(
            "expected a whole number in plain decimal digits (no sign, no spaces) that fits {}",
            std::any::type_name::<T>()
        )),
    }
}

/// What to do when the node is unhealthy before the child's first start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UnhealthyNode {
    /// Exit 138 at once.
    Exit,
    /// Wait until the node is healthy.
    Wait,
}

/// What the master does with a straggler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StragglerAction {
    /// Name it (log line, `/job`, `/metrics`).
    Report,
    /// Name it and restart that replica's child (the job goes on).
    Restart,
}

/// A feature switched on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

/// A feature switched on, off, or on where it can work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOffAuto {
    /// On: missing prerequisites are a configuration error.
    On,
    /// Off.
    Off,
    /// On where it can work (in a cluster), silently off elsewhere.
    Auto,
}

/// `rankvisor check-node`'s options.
#[derive(clap::Args, Debug, Clone)]
pub struct CheckNodeArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Where the node's labels come from: off, auto, file:PATH or kubernetes.
    #[arg(long, env = "RANKVISOR_NODE_HEALTH", default_value = "auto")]
    pub node_health: NodeHealthSource,
    /// Treat a node without the node-health-status label as unhealthy.
    #[arg(long, env = "RANKVISOR_REQUIRE_HEALTH_LABEL")]
    pub require_health_label: bool,
    /// Where the Kubernetes node-health source finds the API server and this pod's node.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Options every subcommand takes.
#[derive(clap::Args, Debug, Clone)]
pub struct GlobalArgs {
    /// Log format for rankvisor's own lines on stderr: text or json.
    #[arg(long, env = "RANKVISOR_LOG_FORMAT", default_value = "text", global = true)]
    pub log_format: logging::LogFormat,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, env = "RANKVISOR_LOG_LEVEL", default_value = "info", value_parser = logging::parse_level, global = true)]
    pub log_level: Level,
}

/// The options of `rankvisor [OPTIONS] -- COMMAND`: supervising this replica's training process.
#[derive(clap::Args, Debug, Clone)]
pub struct SuperviseArgs {
    /// When to restart the training process: Never, OnFailure, Always or ExitCode.
    #[arg(long, env = "RANKVISOR_RESTART_POLICY", value_enum, default_value_t = RestartPolicy::OnFailure)]
    pub restart_policy: RestartPolicy,
    /// The most restarts, under every policy.
    #[arg(long, env = "RANKVISOR_BACKOFF_LIMIT", default_value_t = 6, value_parser = decimal::<u32>, allow_hyphen_values = true)]
    pub backoff_limit: u32,
    /// Delay before the first restart; it doubles up to --backoff-max.
    #[arg(long, env = "RANKVISOR_BACKOFF_INITIAL", default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub backoff_initial: Duration,
    /// The longest delay between restarts.
    #[arg(long, env = "RANKVISOR_BACKOFF_MAX", default_value = "300s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub backoff_max: Duration,
    /// Healthy running this long resets the delay to --backoff-initial.
    #[arg(long, env = "RANKVISOR_BACKOFF_RESET", default_value = "10m", value_parser = parse_duration, allow_hyphen_values = true)]
    pub backoff_reset: Duration,
    /// Time between TERM and KILL when stopping the training process.
    #[arg(long, env = "RANKVISOR_GRACE_PERIOD", default_value = "30s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub grace_period: Duration,
    /// What a failure restarts: replica (this child) or job (every replica's child).
    #[arg(long, env = "RANKVISOR_RESTART_SCOPE", value_enum, default_value_t = RestartScope::Replica)]
    pub restart_scope: RestartScope,
    /// Before any replica is stopped, send this signal (e.g. SIGUSR1) to every replica's training
    /// process so the whole job saves a checkpoint; the stop follows after --checkpoint-grace.
    #[arg(long, env = "RANKVISOR_CHECKPOINT_SIGNAL", value_name = "SIG")]
    pub checkpoint_signal: Option<crate::signo::Signo>,
    /// How long a stop waits after the checkpoint signal, unless the child exits first
    /// [default: half of --grace-period].
    #[arg(long, env = "RANKVISOR_CHECKPOINT_GRACE", value_parser = parse_duration, allow_hyphen_values = true)]
    pub checkpoint_grace: Option<Duration>,
    /// Name stragglers from this --log-rules rule's captured metric (samples/s, TFLOPs), each
    /// replica's sent to the master; NAME:lower for a metric where lower is better (a step time).
    #[arg(long, env = "RANKVISOR_STRAGGLER_RULE", value_name = "NAME[:lower]")]
    pub straggler_rule: Option<String>,
    /// A replica whose metric stays worse than this fraction of the job's median is behind.
    #[arg(long, env = "RANKVISOR_STRAGGLER_RATIO", default_value_t = 0.75, allow_hyphen_values = true)]
    pub straggler_ratio: f64,
    /// Consecutive points behind before a replica is named a straggler.
    #[arg(long, env = "RANKVISOR_STRAGGLER_POINTS", default_value_t = 3, value_parser = decimal::<u32>, allow_hyphen_values = true)]
    pub straggler_points: u32,
    /// What the master does with a straggler: report it, or restart that replica's child.
    #[arg(long, env = "RANKVISOR_STRAGGLER_ACTION", value_enum, default_value_t = StragglerAction::Report)]
    pub straggler_action: StragglerAction,
    /// A file the training process touches (or writes JSON progress to) as its heartbeat.
    #[arg(long, env = "RANKVISOR_HEARTBEAT_FILE")]
    pub heartbeat_file: Option<PathBuf>,
    /// Log rules (JSON or YAML, HyperPod's logMonitoringConfiguration) watching the child's stdout.
    #[arg(long, env = "RANKVISOR_LOG_RULES")]
    pub log_rules: Option<PathBuf>,
    /// A running child that does not beat for this long is hung (needs --heartbeat-file).
    #[arg(long, env = "RANKVISOR_HANG_TIMEOUT", value_parser = parse_duration, allow_hyphen_values = true)]
    pub hang_timeout: Option<Duration>,
    /// The allowance for the first beat after each start (default: 10m, or --hang-timeout if longer).
    #[arg(long, env = "RANKVISOR_HANG_STARTUP", value_parser = parse_duration, allow_hyphen_values = true)]
    pub hang_startup: Option<Duration>,
    /// Where to write why rankvisor gave up (default /dev/termination-log when it exists).
    #[arg(long, env = "RANKVISOR_TERMINATION_LOG")]
    pub termination_log: Option<PathBuf>,
    /// Where the node's HyperPod health labels come from: off, auto, file:PATH or kubernetes.
    #[arg(long, env = "RANKVISOR_NODE_HEALTH", default_value = "auto")]
    pub node_health: NodeHealthSource,
    /// What to do when the node is unhealthy before the start: exit (138) or wait for health.
    #[arg(long, env = "RANKVISOR_UNHEALTHY_NODE", value_enum, default_value_t = UnhealthyNode::Exit)]
    pub unhealthy_node: UnhealthyNode,
    /// Treat a node without the node-health-status label as unhealthy.
    #[arg(long, env = "RANKVISOR_REQUIRE_HEALTH_LABEL")]
    pub require_health_label: bool,
    /// on: replicas meet at a barrier before the first start (jobs of several replicas). off: no
    /// barrier and no control channel (when not every replica runs rankvisor).
    #[arg(long, env = "RANKVISOR_RENDEZVOUS", value_enum, default_value_t = OnOff::On)]
    pub rendezvous: OnOff,
    /// The master's rendezvous port (default MASTER_PORT+1; MASTER_PORT belongs to torch's store).
    #[arg(long, env = "RANKVISOR_RENDEZVOUS_PORT", value_parser = decimal::<u16>, allow_hyphen_values = true)]
    pub rendezvous_port: Option<u16>,
    /// The barrier leader's host (default MASTER_ADDR, else `<job>-worker-0`: Worker 0 of a job without a Master).
    #[arg(long, env = "RANKVISOR_RENDEZVOUS_HOST", value_name = "HOST")]
    pub rendezvous_host: Option<String>,
    /// How long the replicas may take to meet (each generation's barrier, and a worker's dialling).
    #[arg(long, env = "RANKVISOR_RENDEZVOUS_TIMEOUT", default_value = "10m", value_parser = parse_duration, allow_hyphen_values = true)]
    pub rendezvous_timeout: Duration,
    /// The job's name, checked at the rendezvous (default: from MASTER_ADDR `<job>-master-0` or POD_NAME).
    #[arg(long, env = "RANKVISOR_JOB_NAME")]
    pub job_name: Option<String>,
    /// Write every status change as one JSON line to this inherited file descriptor (for tools).
    #[arg(long, env = "RANKVISOR_STATUS_FD", value_parser = decimal::<i32>, allow_hyphen_values = true)]
    pub status_fd: Option<i32>,
    /// Serve /healthz, /readyz, /metrics, /status (and /job on the master) here (IP:PORT), or off.
    #[arg(long, env = "RANKVISOR_HTTP_ADDR", default_value = crate::http::HttpAddr::DEFAULT,
          value_parser = crate::http::HttpAddr::parse)]
    pub http_addr: crate::http::HttpAddr,
    /// POST the JSON report to this http(s):// URL on every state change and every --report-interval.
    #[arg(long, env = "RANKVISOR_REPORT_URL", value_parser = crate::webhook::parse_url)]
    pub report_url: Option<hyper::Uri>,
    /// How often to POST the report to --report-url even without a change.
    #[arg(long, env = "RANKVISOR_REPORT_INTERVAL", default_value = "30s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub report_interval: Duration,
    /// Kubernetes Events on this Pod for each transition that matters, and the Pod condition
    /// rankvisor.dev/ReplicaHealthy: on, off, or auto (on in-cluster with POD_NAME and POD_NAMESPACE).
    #[arg(long, env = "RANKVISOR_KUBE_EVENTS", value_enum, default_value_t = OnOffAuto::Auto)]
    pub kube_events: OnOffAuto,
    /// Serve an agent's API and start each attempt on its operator's order: hyperpod (the
    /// HyperPod elastic agent's API on --agent-addr; the restart policy is then the operator's).
    #[arg(long, env = "RANKVISOR_AGENT", value_enum)]
    pub agent: Option<crate::agent::AgentKind>,
    /// Where the agent's API listens (IP:PORT).
    #[arg(long, env = "RANKVISOR_AGENT_ADDR", default_value = "0.0.0.0:8080")]
    pub agent_addr: std::net::SocketAddr,
    /// Where the Kubernetes node-health source finds the API server and this pod's node.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// The Kubernetes node-health source's settings (in-cluster defaults; overrides for tests and
/// out-of-cluster use).
#[derive(clap::Args, Debug, Clone)]
pub struct KubeArgs {
    /// This pod's node, from the downward API (env NODE_NAME from fieldRef spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// How long the Kubernetes API may stay unreachable (or refuse) at start before rankvisor gives up (138).
    #[arg(long, env = "RANKVISOR_NODE_HEALTH_TIMEOUT", default_value = "60s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub node_health_timeout: Duration,
    /// The API server's URL [default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT]
    #[arg(long, env = "RANKVISOR_KUBE_API_SERVER", value_name = "URL")]
    pub kube_api_server: Option<String>,
    /// The bearer-token file, re-read before every request [default: the service account's token]
    #[arg(long, env = "RANKVISOR_KUBE_TOKEN_FILE", value_name = "PATH")]
    pub kube_token_file: Option<PathBuf>,
    /// The CA bundle the API server's certificate must chain to [default: the service account's ca.crt]
    #[arg(long, env = "RANKVISOR_KUBE_CA_FILE", value_name = "PATH")]
    pub kube_ca_file: Option<PathBuf>,
    /// Accept an http:// --kube-api-server: the bearer token then crosses the network in clear text
    #[arg(long, env = "RANKVISOR_KUBE_ALLOW_INSECURE_HTTP")]
    pub kube_allow_insecure_http: bool,
}

/// The text of a clap parse error, a bad value told where it came from: a value read from an
/// option's environment variable (as a pod manifest sets it) names the variable and the flag it
/// stands for; a value both the command line and the variable hold names both. `cmd` is the
/// parser's command, `argv` what it parsed (program name first), `var` reads the environment.
/// Any other error's text is clap's own.
pub fn error_text(
    e: &clap::Error,
    mut cmd: clap::Command,
    argv: &[std::ffi::OsString],
    var: impl Fn(&str) -> Option<String>,
) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let text = e.render().to_string();
    if !matches!(e.kind(), ErrorKind::InvalidValue | ErrorKind::ValueValidation) {
        return text;
    }
    let (Some(ContextValue::String(arg)), Some(ContextValue::String(value))) =
        (e.get(ContextKind::InvalidArg), e.get(ContextKind::InvalidValue))
    else {
        return text;
    };
    // Built, as the parser builds it: an option renders as the error names it only then.
    cmd.build();
    let Some(name) = find_arg(&cmd, arg).and_then(|a| a.get_env()).and_then(|n| n.to_str()).map(str::to_string) else {
        return text;
    };
    if var(&name).as_ref() != Some(value) {
        return text;
    }
    // Parsed again with no option read from the environment: the same error means the command
    // line gave the value (it wins over the variable); none, that the variable did.
    let same = |again: &clap::Error| {
        again.kind() == e.kind()
            && again.get(ContextKind::InvalidArg) == e.get(ContextKind::InvalidArg)
            && again.get(ContextKind::InvalidValue) == e.get(ContextKind::InvalidValue)
    };
    let from_flag = without_env(cmd).try_get_matches_from(argv).err().is_some_and(|again| same(&again));
    let told = if from_flag {
        format!("'{arg}' (and {name}, which holds the same value)")
    } else {
        format!("{name} (the environment variable of '{arg}')")
    };
    text.replacen(&format!("'{arg}'"), &told, 1)
}

/// The option of `cmd` (or of one of its subcommands) that clap's errors name as `rendered`.
fn find_arg<'a>(cmd: &'a clap::Command, rendered: &str) -> Option<&'a clap::Arg> {
    cmd.get_arguments()
        .find(|a| a.to_string() == rendered)
        .or_else(|| cmd.get_subcommands().find_map(|sub| find_arg(sub, rendered)))
}

/// `cmd` with no option read from the environment.
fn without_env(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| a.env(None::<&'static str>)).mut_subcommands(without_env)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command with one option that a variable can also set (the variable is never set here: the
    /// environment-only path is tested end to end, in tests/pid1/config_errors.rs).
    fn cmd() -> clap::Command {
        clap::Command::new("t").arg(
            clap::Arg::new("limit").long("limit").env("RANKVISOR_TEST_NEVER_SET_LIMIT").value_parser(decimal::<u32>),
        )
    }

    #[test]
    fn a_bad_flag_is_named_as_the_flag_and_also_as_the_variable_holding_the_same_value() {
        let argv: Vec<std::ffi::OsString> = ["t", "--limit", "abc"].into_iter().map(Into::into).collect();
        let e = cmd().try_get_matches_from(&argv).unwrap_err();
        let plain = error_text(&e, cmd(), &argv, |_| None);
        assert_eq!(plain, e.render().to_string(), "no variable holds it: clap's own text");
        let other = error_text(&e, cmd(), &argv, |_| Some("7".into()));
        assert_eq!(other, plain, "the variable holds another value, which the flag overrides");
        let both = error_text(&e, cmd(), &argv, |k| (k == "RANKVISOR_TEST_NEVER_SET_LIMIT").then(|| "abc".into()));
        assert!(
            both.starts_with("error: invalid value 'abc' for '--limit <limit>' (and RANKVISOR_TEST_NEVER_SET_LIMIT, which holds the same value): expected a whole number"),
            "{both}"
        );
    }
}

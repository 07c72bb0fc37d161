//! `rankvisor-dry-run`'s command line (also reached as `rankvisor dry-run`, which execs this binary).
//! Every option can also be set by an environment variable `RANKVISOR_<OPTION>`.

use std::path::PathBuf;
use std::time::Duration;

use rankvisor_core::config::args::{decimal, GlobalArgs};
use rankvisor_core::duration::parse_duration;
use rankvisor_core::logging;
use rankvisor_core::policy::RestartScope;
use tracing::Level;

use crate::k8s::quantity::QueueCapability;
use crate::options::OutputFormat;
use crate::render::kubectl::WatchKinds;

/// Run a Kubeflow job manifest (a PyTorchJob, or a Trainer v2 TrainJob) or a SageMaker HyperPod
/// HyperPodPyTorchJob on this machine: one
/// rankvisor launcher per replica, the job's objects printed as `kubectl get -w` shows them. Exit 0
/// Succeeded, 1 Failed (or --timeout), 64 a manifest it cannot run (invalid, pods the apiserver
/// would refuse, or managed by another controller).
#[derive(clap::Parser, Debug)]
#[command(name = "rankvisor dry-run", bin_name = "rankvisor dry-run", version)]
pub struct Cli {
    /// The manifest and how to run it.
    #[command(flatten)]
    pub args: DryRunArgs,
    /// The dry run's own log format and level.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The rankvisor binary each replica's launcher runs [default: `rankvisor` beside this
    /// program, else on PATH]
    #[arg(long, env = "RANKVISOR_LAUNCHER", value_name = "PATH")]
    pub launcher: Option<PathBuf>,
}

/// The dry run's options. Timing defaults are a laptop's, not Kubernetes' (10s, 300s, 30s).
#[derive(clap::Args, Debug, Clone)]
pub struct DryRunArgs {
    /// The job manifest (YAML or JSON): a PyTorchJob, or a TrainJob, alone or with its
    /// ClusterTrainingRuntime or TrainingRuntime documents.
    #[arg(value_name = "JOB.yaml")]
    pub manifest: PathBuf,
    /// The Volcano queue's capability, e.g. cpu=2,memory=4Gi: a job that does not fit whole starts nothing.
    #[arg(long, env = "RANKVISOR_QUEUE_CAPABILITY", value_parser = QueueCapability::parse)]
    pub queue_capability: Option<QueueCapability>,
    /// What to show: job, podgroup, pods or all.
    #[arg(long, env = "RANKVISOR_WATCH", default_value = "all", value_parser = WatchKinds::parse)]
    pub watch: WatchKinds,
    /// text (kubectl's columns) or json (one change per line).
    #[arg(long, env = "RANKVISOR_OUTPUT", default_value = "text")]
    pub output: OutputFormat,
    /// Write each replica's output to DIR/POD.log (default: on stderr, each line prefixed by its pod).
    #[arg(long, env = "RANKVISOR_LOGS", value_name = "DIR")]
    pub logs: Option<PathBuf>,
    /// Fault to inject (repeatable): fail:REPLICA@TIME (SIGKILL to its training process),
    /// delete:REPLICA@TIME (kill its launcher; the pod is recreated), preempt:REPLICA@TIME (delete
    /// it gracefully: TERM to its launcher, then recreated), label:REPLICA@TIME=VALUE
    /// (its node's node-health-status label; or =KEY=VALUE). REPLICA: master-0, worker-N.
    #[arg(long, env = "RANKVISOR_INJECT", value_name = "SPEC", value_delimiter = ',')]
    pub inject: Vec<String>,
    /// Stop everything and exit 1 if the job has not ended after this long.
    #[arg(long, env = "RANKVISOR_TIMEOUT", value_parser = parse_duration, allow_hyphen_values = true)]
    pub timeout: Option<Duration>,
    /// MASTER_PORT for every replica; 0 picks a free port [default: the manifest's, or a free
    /// port if that one or the next is in use]
    #[arg(long, env = "RANKVISOR_MASTER_PORT", value_parser = decimal::<u16>, allow_hyphen_values = true)]
    pub master_port: Option<u16>,
    /// Each launcher's delay before a replica's first restart; it doubles up to --backoff-max.
    #[arg(long, env = "RANKVISOR_BACKOFF_INITIAL", default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub backoff_initial: Duration,
    /// Each launcher's longest delay between restarts.
    #[arg(long, env = "RANKVISOR_BACKOFF_MAX", default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub backoff_max: Duration,
    /// Time between TERM and KILL when a replica is stopped.
    #[arg(long, env = "RANKVISOR_GRACE_PERIOD", default_value = "5s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub grace_period: Duration,
    /// What a replica's failure restarts: replica (its own child) or job (every replica's child, in
    /// a new rendezvous generation).
    #[arg(long, env = "RANKVISOR_RESTART_SCOPE", value_enum, default_value_t = RestartScope::Replica)]
    pub restart_scope: RestartScope,
    /// Every replica serves /healthz, /readyz, /metrics and /status on a free 127.0.0.1 port (said
    /// in the output).
    #[arg(long)]
    pub http: bool,
    /// Draw the run to FILE (.svg or .html) when it ends: one lane per pod over time, the job and
    /// the PodGroup above, restarts and injected faults marked.
    #[arg(long, env = "RANKVISOR_TIMELINE", value_name = "FILE")]
    pub timeline: Option<std::path::PathBuf>,
    /// The launchers' own log level (their lines appear among the replica's output).
    #[arg(long, env = "RANKVISOR_LAUNCHER_LOG_LEVEL", default_value = "warn", value_parser = logging::parse_level)]
    pub launcher_log_level: Level,
    /// A replica type's command instead of its image's entrypoint (repeatable), run by `sh -c`
    /// with the container's args after it: TYPE=COMMAND, e.g. Worker='python train.py'.
    #[arg(long = "command", value_name = "TYPE=COMMAND")]
    pub commands: Vec<String>,
    /// A path inside the image mapped onto a local one in the command, args, env values and
    /// workingDir (repeatable): IMAGE_PATH=LOCAL_PATH, e.g. /workspace=./examples.
    #[arg(long = "path-map", value_name = "IMAGE_PATH=LOCAL_PATH")]
    pub path_maps: Vec<String>,
    /// A file of ClusterTrainingRuntime or TrainingRuntime documents a TrainJob may reference
    /// (repeatable), besides those in its own file and the built-in torch-distributed.
    #[arg(long = "runtime", value_name = "FILE")]
    pub runtimes: Vec<PathBuf>,
    /// HyperPodPyTorchJob: a process-level restart's /stop is graceful (SIGUSR1 first; emulated,
    /// not verified: the operator's choice is not public).
    #[arg(long, env = "RANKVISOR_HYPERPOD_GRACEFUL_STOP", default_value_t = true, action = clap::ArgAction::Set)]
    pub hyperpod_graceful_stop: bool,
    /// HyperPodPyTorchJob: the /stop's timeout before SIGKILL (emulated, not verified) [default:
    /// --grace-period]
    #[arg(long, env = "RANKVISOR_HYPERPOD_STOP_TIMEOUT", value_parser = parse_duration, allow_hyphen_values = true)]
    pub hyperpod_stop_timeout: Option<Duration>,
    /// HyperPodPyTorchJob: the operator polls every agent's GET /status this often (emulated, not
    /// verified: the operator's interval is not public); 0s: no periodic poll.
    #[arg(long, env = "RANKVISOR_HYPERPOD_POLL", default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub hyperpod_poll: Duration,
    /// HyperPodPyTorchJob: the operator also reads an agent's GET /status at once when its pod's
    /// launcher says the agent's state changed, as an operator watching its pods would (emulated,
    /// not verified); false: the poll alone.
    #[arg(long, env = "RANKVISOR_HYPERPOD_READ_ON_CHANGE", default_value_t = true, action = clap::ArgAction::Set)]
    pub hyperpod_read_on_change: bool,
}

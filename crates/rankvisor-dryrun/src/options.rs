//! `rankvisor dry-run`'s options and their defaults (a laptop's, not a cluster's).

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::k8s::quantity::QueueCapability;
use crate::render::kubectl::WatchKinds;

/// The dry run's first restart delay: a laptop's, not the kubelet's 10s.
pub(crate) const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// The dry run's longest restart delay: a laptop's, not the kubelet's 300s.
pub(crate) const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// The dry run's TERM -> KILL delay: a laptop's, not Kubernetes' 30s.
pub(crate) const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(5);
/// The launchers' log level unless told otherwise: their warnings and errors only, since the
/// watch output already shows every state change.
pub(crate) const DEFAULT_LAUNCHER_LOG_LEVEL: &str = "warn";

/// Every launcher reads its replica's labels file (`--node-health file:`), so a `label:`
/// injection reaches that replica's node-health gate.
pub(crate) const LAUNCHERS_READ_NODE_LABELS: bool = true;

/// `--output`: how each change is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// `kubectl get -w` columns.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// An `--output` value that is neither text nor json.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid --output value {value:?}: expected text or json")]
pub struct OutputFormatError {
    /// The value seen.
    pub value: String,
}

impl FromStr for OutputFormat {
    type Err = OutputFormatError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(OutputFormatError { value: s.to_string() }),
        }
    }
}

/// Everything `rankvisor dry-run` was told.
#[derive(Debug, Clone)]
pub struct DryRunOptions {
    /// The PyTorchJob manifest.
    pub manifest: PathBuf,
    /// `--queue-capability`: the Volcano queue's capability (None: any job fits).
    pub queue_capability: Option<QueueCapability>,
    /// `--watch`: which kinds to print.
    pub watch: WatchKinds,
    /// `--output`.
    pub output: OutputFormat,
    /// `--logs DIR`: each replica's output to `DIR/<pod>.log` instead of prefixed on stderr.
    pub logs: Option<PathBuf>,
    /// `--inject` specs, as given.
    pub inject: Vec<String>,
    /// `--timeout`: stop everything and exit 1 (or with the job's outcome, if already decided)
    /// if the dry run has not ended by then.
    pub timeout: Option<Duration>,
    /// `--master-port`: MASTER_PORT for every replica (0: any free port; None: the manifest's,
    /// or a free one if that is in use).
    pub master_port: Option<u16>,
    /// `--backoff-initial`, passed to every launcher.
    pub backoff_initial: Duration,
    /// `--backoff-max`, passed to every launcher.
    pub backoff_max: Duration,
    /// `--grace-period`, passed to every launcher (and used for the dry run's own stops).
    pub grace_period: Duration,
    /// The launchers' `--log-level`.
    pub launcher_log_level: String,
    /// The rankvisor binary each launcher runs (normally `std::env::current_exe()`).
    pub rankvisor: PathBuf,
    /// `--restart-scope`, passed to every launcher.
    pub restart_scope: rankvisor_core::policy::RestartScope,
    /// `--timeline FILE`: draw the run (every pod's status over time, the job, the PodGroup and
    /// the injected faults) to FILE, `.svg` or `.html`, when it ends.
    pub timeline: Option<PathBuf>,
    /// `--command TYPE=CMD` specs, as given: a replica type's command instead of its image's entrypoint.
    pub commands: Vec<String>,
    /// `--path-map IMAGE_PATH=LOCAL_PATH` specs, as given: paths inside the image mapped onto local ones.
    pub path_maps: Vec<String>,
    /// `--runtime FILE` (repeatable): ClusterTrainingRuntime and TrainingRuntime documents a
    /// TrainJob may reference, besides those in its own file and the built-in ones.
    pub runtimes: Vec<PathBuf>,
    /// `--http`: every launcher serves /healthz, /readyz, /metrics and /status on a free loopback
    /// port, said in the output (off: `--http-addr off`).
    pub http: bool,
    /// `--hyperpod-graceful-stop`: a HyperPod PLR's `/stop` sends SIGUSR1 first.
    pub hyperpod_graceful_stop: bool,
    /// `--hyperpod-stop-timeout`: a HyperPod `/stop`'s timeout (None: the grace period).
    pub hyperpod_stop_timeout: Option<Duration>,
    /// `--hyperpod-poll`: the operator reads every agent's state by `GET /status` this often
    /// (None: no periodic poll).
    pub hyperpod_poll: Option<Duration>,
    /// `--hyperpod-read-on-change`: the operator also reads one agent's `GET /status` at once when
    /// its launcher's status pipe says the agent's state changed.
    pub hyperpod_read_on_change: bool,
}

/// `--hyperpod-poll`'s default (the operator's own interval is not public).
pub(crate) const DEFAULT_HYPERPOD_POLL: Duration = Duration::from_secs(1);

impl DryRunOptions {
    /// The defaults for `manifest`, with launchers running `rankvisor`.
    pub fn new(manifest: PathBuf, rankvisor: PathBuf) -> Self {
        Self {
            manifest,
            queue_capability: None,
            watch: WatchKinds::All,
            output: OutputFormat::Text,
            logs: None,
            inject: Vec::new(),
            timeout: None,
            master_port: None,
            backoff_initial: DEFAULT_BACKOFF_INITIAL,
            backoff_max: DEFAULT_BACKOFF_MAX,
            grace_period: DEFAULT_GRACE_PERIOD,
            launcher_log_level: DEFAULT_LAUNCHER_LOG_LEVEL.to_string(),
            rankvisor,
            restart_scope: rankvisor_core::policy::RestartScope::Replica,
            http: false,
            timeline: None,
            commands: Vec::new(),
            path_maps: Vec::new(),
            runtimes: Vec::new(),
            hyperpod_graceful_stop: true,
            hyperpod_stop_timeout: None,
            hyperpod_poll: Some(DEFAULT_HYPERPOD_POLL),
            hyperpod_read_on_change: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_formats_parse() {
        assert_eq!("text".parse::<OutputFormat>(), Ok(OutputFormat::Text));
        assert_eq!("json".parse::<OutputFormat>(), Ok(OutputFormat::Json));
        assert_eq!(
            "yaml".parse::<OutputFormat>().unwrap_err().to_string(),
            "invalid --output value \"yaml\": expected text or json"
        );
    }
}

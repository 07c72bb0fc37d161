//! `rankvisor dry-run`, the I/O part: one real launcher process per replica, its status lines,
//! fault injection, timers and signals, all turned into the [`Controller`]'s events; the
//! controller's actions carried out; every change printed as `kubectl get -w` would.
//!
//! One `tokio::select!` loop on a current-thread runtime owns the controller. Each launcher has a
//! task that owns its `tokio::process::Child` (the dry run is not PID 1, so `Child::wait` is the
//! only waiter), reads its `--status-fd` pipe line by line and reports to the loop; the task also
//! delivers signals to the launcher, so a signal never reaches a pid that was already reaped.
//!
//! What the dry run's injected faults do:
//! - `fail:REPLICA@T`: SIGKILL to the replica's training process group, as the OOM killer or a
//!   crash would end it. The child ends by signal 9 (status 137), which every policy but `Never`
//!   restarts (under `ExitCode`, 137 is one of the retryable codes). A child that is not running
//!   at T (still starting, or waiting for its restart) fails as soon as it runs; a replica whose
//!   launcher is gone or finished is left alone, and the dry run says so.
//! - `delete:REPLICA@T`: SIGKILL to the launcher and to its training process group (a pod lost
//!   with its node, or `kubectl delete --force --grace-period=0`), then the operator's view:
//!   Terminating, deleted, created anew with RESTARTS 0.
//! - `label:REPLICA@T=VALUE`: the replica's node labels file is rewritten atomically (temp file,
//!   then rename, as the kubelet does), which the launcher's `--node-health file:` source reads.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader, Lines};
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use crate::duration::format_duration;
use crate::exit;

use super::controller::{Action, Controller, ControllerConfig, Event, Outcome};
use super::env::{launch_spec, DRY_RUN_MASTER_ADDR};
use super::injection::{parse_injection, Fault, Injection};
use super::job::{ExitStatus, PyTorchJob, ReplicaId};
use super::launcher::{
    healthy_labels, is_operator_managed_var, labels_file_text, launcher_args, parse_status_line, prefixed,
    LauncherFiles, LauncherSettings, LineSplitter, StatusLine, StatusTracker,
};
use super::manifest::load_job;
use super::quantity::QueueCapability;
use super::render::{render_json, TextRenderer, WatchKinds};
use super::rows::Change;

/// The dry run's first restart delay: a laptop's, not the kubelet's 10s.
pub const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// The dry run's longest restart delay: a laptop's, not the kubelet's 300s.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// The dry run's TERM -> KILL delay: a laptop's, not Kubernetes' 30s.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(5);
/// The launchers' log level unless told otherwise: their warnings and errors only, since the
/// watch output already shows every state change.
pub const DEFAULT_LAUNCHER_LOG_LEVEL: &str = "warn";

/// Every launcher reads its replica's labels file (`--node-health file:`), so a `label:`
/// injection reaches that replica's node-health gate.
pub const LAUNCHERS_READ_NODE_LABELS: bool = true;

/// A launcher asked to stop gets this long beyond its grace period before the dry run kills it.
const STOP_MARGIN: Duration = Duration::from_secs(2);
/// After a success, replicas still running this long later are named (they keep the dry run alive).
const STRAGGLER_NOTE_AFTER: Duration = Duration::from_secs(1);
/// How long to wait for a launcher's last status lines and output after it exited.
const DRAIN_LIMIT: Duration = Duration::from_millis(500);

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
    pub restart_scope: crate::supervise::RestartScope,
    /// `--http`: every launcher serves /healthz, /readyz, /metrics and /status on a free loopback
    /// port, said in the output (off: `--http-addr off`).
    pub http: bool,
    /// `--timeline FILE`: draw the run (every pod's status over time, the job, the PodGroup and
    /// the injected faults) to FILE, `.svg` or `.html`, when it ends.
    pub timeline: Option<PathBuf>,
}

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
            restart_scope: crate::supervise::RestartScope::Replica,
            http: false,
            timeline: None,
        }
    }
}

/// Run the job in `opts.manifest` locally and return the dry run's exit status: 0 Succeeded,
/// 1 Failed (or `--timeout`), 64 invalid manifest or options, 128+N stopped by signal N.
/// Needs a tokio runtime with IO and time enabled, and the process's signal mask unblocked.
pub async fn run_dry_run(opts: DryRunOptions) -> i32 {
    let setup = match Setup::new(&opts) {
        Ok(s) => s,
        Err(SetupError { message, code }) => {
            eprintln!("{message}");
            return code;
        }
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let mut driver = Driver::new(opts, setup, tx);
    let code = driver.run(rx).await;
    driver.drain_output().await;
    match driver.opts.timeline.clone() {
        Some(path) => write_timeline(&path, driver.recording(), code),
        None => code,
    }
}

/// Write the timeline; a file that cannot be written turns a success into exit 1.
fn write_timeline(path: &Path, recording: super::timeline::Recording, code: i32) -> i32 {
    let text = match super::timeline::TimelineFormat::from_path(path) {
        Ok(format) => super::timeline::render(&recording, format),
        Err(e) => {
            eprintln!("dry-run: {e}");
            return if code == 0 { 1 } else { code };
        }
    };
    match std::fs::write(path, text) {
        Ok(()) => {
            note(&format!("timeline written to {}", path.display()));
            code
        }
        Err(e) => {
            eprintln!("dry-run: cannot write the timeline to {}: {e}", path.display());
            if code == 0 {
                1
            } else {
                code
            }
        }
    }
}

/// A reason not to start, with the exit status it means.
#[derive(Debug)]
struct SetupError {
    message: String,
    code: i32,
}

impl SetupError {
    fn config(message: impl fmt::Display) -> Self {
        Self { message: message.to_string(), code: exit::CONFIG_ERROR }
    }
}

/// What is known before anything starts.
#[derive(Debug)]
struct Setup {
    job: PyTorchJob,
    injections: VecDeque<Injection>,
    master_port: u16,
    workdir: WorkDir,
}

impl Setup {
    fn new(opts: &DryRunOptions) -> Result<Self, SetupError> {
        let job = load_job(&opts.manifest).map_err(SetupError::config)?;
        let mut injections = opts
            .inject
            .iter()
            .map(|spec| parse_injection(spec, &job))
            .collect::<Result<Vec<_>, _>>()
            .map_err(SetupError::config)?;
        injections.sort_by_key(|i| i.at);
        if let Some(path) = &opts.timeline {
            super::timeline::TimelineFormat::from_path(path).map_err(SetupError::config)?;
        }
        if opts.backoff_max < opts.backoff_initial {
            return Err(SetupError::config(format!(
                "--backoff-max ({}) is shorter than --backoff-initial ({}): expected max >= initial",
                format_duration(opts.backoff_max),
                format_duration(opts.backoff_initial)
            )));
        }
        if let Some(dir) = &opts.logs {
            std::fs::create_dir_all(dir).map_err(|e| {
                SetupError::config(format!("--logs {}: cannot create the directory: {e}", dir.display()))
            })?;
        }
        let (master_port, port_note) =
            choose_master_port(job.master_port(), opts.master_port).map_err(|e| SetupError { message: e, code: 1 })?;
        if let Some(n) = port_note {
            note(&n);
        }
        let workdir = WorkDir::create().map_err(|e| SetupError { message: e, code: 1 })?;
        for id in job.replicas() {
            let path = workdir.labels(&job.pod_name(id));
            write_atomically(&path, &labels_file_text(&healthy_labels()))
                .map_err(|e| SetupError { message: format!("cannot write {}: {e}", path.display()), code: 1 })?;
        }
        Ok(Self { job, injections: injections.into(), master_port, workdir })
    }
}

/// MASTER_PORT for the replicas, and a note when it is not the one asked for.
fn choose_master_port(manifest_port: u16, explicit: Option<u16>) -> Result<(u16, Option<String>), String> {
    match explicit {
        Some(0) => free_port().map(|p| (p, None)),
        Some(p) => Ok((p, None)),
        None if port_pair_free(manifest_port) => Ok((manifest_port, None)),
        None => {
            let p = free_port()?;
            let why = format!(
                "MASTER_PORT {manifest_port} (or {}, the rendezvous port) is in use on {DRY_RUN_MASTER_ADDR}: the replicas get MASTER_PORT={p} instead",
                u32::from(manifest_port) + 1
            );
            Ok((p, Some(why)))
        }
    }
}

/// Whether `port` (torch's store) and `port + 1` (rankvisor's rendezvous) can be bound locally.
fn port_pair_free(port: u16) -> bool {
    let free = |p: u16| std::net::TcpListener::bind((DRY_RUN_MASTER_ADDR, p)).is_ok();
    port.checked_add(1).is_some_and(|next| free(port) && free(next))
}

/// Below the usual ephemeral range (32768-60999), where a free pair is searched when the kernel's
/// ephemeral ports come without a free successor.
const PORT_SEARCH: std::ops::Range<u16> = 20000..32000;

/// A port whose successor is free too: a kernel-chosen one if possible, else one searched below
/// the ephemeral range (some systems hand out ephemeral ports whose neighbours are taken).
fn free_port() -> Result<u16, String> {
    // Never a port from the kernel's ephemeral range (what bind(0) hands out): clients that keep
    // dialling a store that is not listening yet (torch's TCPStore between generations) can be
    // given that very port as their own source port and connect to themselves, and then the
    // store cannot bind it. Real jobs use 23456, below that range; so does this search. Start at
    // a per-process, per-moment offset so concurrent dry runs do not all try the same ports.
    let span = PORT_SEARCH.end - PORT_SEARCH.start;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let offset = ((std::process::id() ^ nanos) % u32::from(span / 2)) as u16 * 2;
    (0..span / 2)
        .map(|i| PORT_SEARCH.start + (offset + i * 2) % span)
        .find(|p| port_pair_free(*p))
        .ok_or_else(|| format!("no two consecutive free ports found on {DRY_RUN_MASTER_ADDR} in {PORT_SEARCH:?}"))
}

/// A port the kernel just gave out on loopback (free now; a launcher binds it right after).
fn free_loopback_port() -> Option<u16> {
    let listener = std::net::TcpListener::bind((DRY_RUN_MASTER_ADDR, 0)).ok()?;
    listener.local_addr().ok().map(|a| a.port())
}

/// A private directory for the replicas' labels files and termination logs, removed at the end.
#[derive(Debug)]
struct WorkDir(PathBuf);

impl WorkDir {
    fn create() -> Result<Self, String> {
        let base = std::env::temp_dir();
        for attempt in 0..100u32 {
            let path = base.join(format!("rankvisor-dry-run-{}-{attempt}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(Self(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("cannot create a work directory in {}: {e}", base.display())),
            }
        }
        Err(format!("cannot create a work directory in {}: every name is taken", base.display()))
    }

    fn labels(&self, pod: &str) -> PathBuf {
        self.0.join(format!("{pod}.labels"))
    }

    fn termination_log(&self, pod: &str) -> PathBuf {
        self.0.join(format!("{pod}.termination-log"))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Replace `path` by a file holding `text`, so a reader sees the old or the new file, never half.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// One line on stderr from the dry run itself.
fn note(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "dry-run: {message}");
}

/// What a launcher's task reports to the loop.
#[derive(Debug)]
struct Report {
    pod: ReplicaId,
    instance: u64,
    what: Reported,
}

#[derive(Debug)]
enum Reported {
    Status(StatusLine),
    Unreadable(String),
    Exited(ExitStatus),
}

/// A running launcher, as the loop knows it.
#[derive(Debug)]
struct Launcher {
    instance: u64,
    tracker: StatusTracker,
    signals: mpsc::UnboundedSender<i32>,
    /// When to SIGKILL it if a stop has not ended it.
    kill_at: Option<Instant>,
}

/// Why the dry run is ending before the job settles.
#[derive(Debug, Clone)]
struct Abort {
    code: i32,
    /// Set for a signal: a second one kills at once.
    by_signal: bool,
}

struct Driver {
    opts: DryRunOptions,
    job: PyTorchJob,
    controller: Controller,
    renderer: TextRenderer,
    settings: LauncherSettings,
    master_port: u16,
    workdir: WorkDir,
    pod_width: usize,
    start: Instant,
    labels: BTreeMap<ReplicaId, BTreeMap<String, String>>,
    injections: VecDeque<Injection>,
    launchers: BTreeMap<ReplicaId, Launcher>,
    next_instance: u64,
    tx: mpsc::UnboundedSender<Report>,
    output_tasks: Vec<JoinHandle<()>>,
    /// `fail:` injections waiting for their replica's child to run.
    deferred_fails: Vec<ReplicaId>,
    /// When to say which replicas the dry run still waits for after the job succeeded.
    straggler_note_at: Option<Instant>,
    stop_all: bool,
    abort: Option<Abort>,
    /// What `--timeline` draws: every change and fault (empty without `--timeline`).
    recorded: (Vec<Change>, Vec<super::timeline::FaultMark>),
}

impl Driver {
    fn new(opts: DryRunOptions, setup: Setup, tx: mpsc::UnboundedSender<Report>) -> Self {
        let Setup { job, injections, master_port, workdir } = setup;
        let config = ControllerConfig { capability: opts.queue_capability.clone(), ..ControllerConfig::default() };
        let settings = LauncherSettings {
            backoff_initial: opts.backoff_initial,
            backoff_max: opts.backoff_max,
            grace_period: opts.grace_period,
            log_level: opts.launcher_log_level.clone(),
            node_health: LAUNCHERS_READ_NODE_LABELS,
            restart_scope: opts.restart_scope,
        };
        let pod_width = job.replicas().iter().map(|id| job.pod_name(*id).len()).max().unwrap_or(0);
        Self {
            renderer: TextRenderer::new(&job, opts.watch),
            controller: Controller::new(job.clone(), config),
            job,
            opts,
            settings,
            master_port,
            workdir,
            pod_width,
            start: Instant::now(),
            labels: BTreeMap::new(),
            injections,
            launchers: BTreeMap::new(),
            next_instance: 0,
            tx,
            output_tasks: Vec::new(),
            deferred_fails: Vec::new(),
            straggler_note_at: None,
            stop_all: false,
            abort: None,
            recorded: (Vec::new(), Vec::new()),
        }
    }

    async fn run(&mut self, mut reports: mpsc::UnboundedReceiver<Report>) -> i32 {
        let (mut interrupt, mut terminate) = match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            (Ok(i), Ok(t)) => (i, t),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("dry-run: cannot handle INT and TERM: {e}");
                return 1;
            }
        };
        note(&format!(
            "images are not pulled: each replica runs its container's command on this machine, under its own rankvisor launcher (MASTER_ADDR={DRY_RUN_MASTER_ADDR}, MASTER_PORT={})",
            self.master_port
        ));
        self.start = Instant::now();
        self.feed(Event::Submitted);
        while !self.done() {
            let wake = self.next_wake();
            tokio::select! {
                Some(report) = reports.recv() => self.on_report(report),
                _ = interrupt.recv() => self.on_signal(libc::SIGINT),
                _ = terminate.recv() => self.on_signal(libc::SIGTERM),
                () = sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => self.on_wake(),
            }
        }
        match (&self.abort, self.controller.outcome()) {
            (Some(a), _) => a.code,
            (None, Some(o)) => o.exit_code(),
            (None, None) => 1,
        }
    }

    /// Every launcher is gone, and the job is settled or the run was cut short.
    fn done(&self) -> bool {
        self.launchers.is_empty() && (self.abort.is_some() || self.controller.is_settled())
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// The earliest of: a row due to change, an injection, the timeout, a stop running late.
    fn next_wake(&self) -> Option<Instant> {
        let live = self.abort.is_none();
        let tick = self.controller.next_tick().filter(|_| live).map(|d| self.start + d);
        let inject = self.injections.front().filter(|_| live).map(|i| self.start + i.at);
        let timeout = self.opts.timeout.filter(|_| live).map(|t| self.start + t);
        let kills = self.launchers.values().filter_map(|l| l.kill_at);
        let straggler_note = self.straggler_note_at.filter(|_| live);
        [tick, inject, timeout, straggler_note].into_iter().flatten().chain(kills).min()
    }

    fn on_wake(&mut self) {
        let now = Instant::now();
        if self.abort.is_none() && self.controller.next_tick().is_some_and(|d| self.start + d <= now) {
            self.feed(Event::Tick);
        }
        while self.abort.is_none() && self.injections.front().is_some_and(|i| self.start + i.at <= now) {
            if let Some(injection) = self.injections.pop_front() {
                self.inject(injection);
            }
        }
        if self.straggler_note_at.is_some_and(|t| t <= now) {
            self.straggler_note_at = None;
            let running: Vec<String> = self
                .launchers
                .iter()
                .filter(|(_, l)| !l.tracker.ended())
                .map(|(id, _)| self.job.pod_name(*id))
                .collect();
            if !running.is_empty() && self.abort.is_none() {
                note(&format!(
                    "the job succeeded; waiting for {} still running: {} (Ctrl-C stops them)",
                    running.len(),
                    running.join(", ")
                ));
            }
        }
        if let Some(t) = self.opts.timeout.filter(|t| self.abort.is_none() && self.start + *t <= now) {
            let state = self.controller.state().map_or("not created", |s| s.as_str());
            note(&format!(
                "timeout: the job did not settle within {} (job {state}); the dry run ends here, stopping every launcher",
                format_duration(t)
            ));
            let code = self.controller.outcome().map_or(1, Outcome::exit_code);
            self.abort = Some(Abort { code, by_signal: false });
            self.stop_every_launcher();
        }
        let late: Vec<ReplicaId> =
            self.launchers.iter().filter(|(_, l)| l.kill_at.is_some_and(|k| k <= now)).map(|(id, _)| *id).collect();
        for pod in late {
            note(&format!("{} did not stop in time: killing it", self.job.pod_name(pod)));
            self.kill(pod);
        }
    }

    fn on_signal(&mut self, sig: i32) {
        let name = exit::signal_name(sig);
        match &self.abort {
            Some(Abort { by_signal: true, .. }) => {
                note(&format!("{name} again: killing every launcher and training process"));
                let pods: Vec<ReplicaId> = self.launchers.keys().copied().collect();
                for pod in pods {
                    self.kill(pod);
                }
            }
            _ => {
                let state = self.controller.state().map_or("not created", |s| s.as_str());
                note(&format!(
                    "{name}: the dry run ends here (job {state}); stopping {} launcher(s) within the {} grace period (send it again to kill them)",
                    self.launchers.len(),
                    format_duration(self.opts.grace_period)
                ));
                self.abort = Some(Abort { code: 128 + sig, by_signal: true });
                self.stop_every_launcher();
            }
        }
    }

    fn on_report(&mut self, report: Report) {
        let Report { pod, instance, what } = report;
        let Some(launcher) = self.launchers.get_mut(&pod).filter(|l| l.instance == instance) else {
            return;
        };
        if self.abort.is_some() {
            // The run was cut short: what the stops do is not the job's doing, so the emulation
            // (and the watch) ends where it was; only the launchers' exits are awaited.
            if let Reported::Exited(_) = what {
                self.launchers.remove(&pod);
            }
            return;
        }
        match what {
            Reported::Status(line) => {
                let events = launcher.tracker.observe(pod, &line);
                let child = launcher.tracker.child_pid();
                if let (Some(pid), Some(i)) = (child, self.deferred_fails.iter().position(|p| *p == pod)) {
                    self.deferred_fails.remove(i);
                    fail_child(&self.job.pod_name(pod), pid);
                }
                for event in events {
                    self.feed(event);
                }
            }
            Reported::Unreadable(message) => note(&format!("{}: {message}", self.job.pod_name(pod))),
            Reported::Exited(status) => {
                self.launchers.remove(&pod);
                self.deferred_fails.retain(|p| *p != pod);
                self.feed(Event::LauncherExited { pod, status });
            }
        }
    }

    /// Hand one observation to the controller; print its changes, carry out its actions.
    fn feed(&mut self, event: Event) {
        let step = self.controller.handle(self.now(), event);
        if self.opts.timeline.is_some() {
            self.recorded.0.extend(step.changes.iter().cloned());
        }
        for change in &step.changes {
            self.print(change);
        }
        for action in step.actions {
            self.perform(action);
        }
    }

    fn print(&mut self, change: &Change) {
        if !self.opts.watch.includes(&change.row) {
            return;
        }
        let lines = match self.opts.output {
            OutputFormat::Text => self.renderer.render(change),
            OutputFormat::Json => vec![render_json(change)],
        };
        let mut out = std::io::stdout().lock();
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }

    fn perform(&mut self, action: Action) {
        match action {
            Action::StartLauncher { pod } => {
                if self.abort.is_some() {
                    return;
                }
                self.start_launcher(pod);
                if self.stop_all {
                    self.stop(pod);
                }
            }
            Action::StopPod { pod } => self.stop(pod),
            Action::StopAll => {
                self.stop_all = true;
                self.stop_every_launcher();
            }
            Action::Unschedulable { message } => note(&message),
            Action::Finish { outcome, reason } => {
                note(&reason);
                if outcome == Outcome::Succeeded {
                    self.straggler_note_at = Some(Instant::now() + STRAGGLER_NOTE_AFTER);
                }
            }
        }
    }

    fn stop_every_launcher(&mut self) {
        let pods: Vec<ReplicaId> = self.launchers.keys().copied().collect();
        for pod in pods {
            self.stop(pod);
        }
    }

    /// TERM the launcher: it forwards TERM to its child's group, waits its grace period, kills.
    fn stop(&mut self, pod: ReplicaId) {
        let deadline = Instant::now() + self.opts.grace_period + STOP_MARGIN;
        if let Some(l) = self.launchers.get_mut(&pod) {
            if l.kill_at.is_none() {
                l.kill_at = Some(deadline);
                let _ = l.signals.send(libc::SIGTERM);
            }
        }
    }

    /// SIGKILL the launcher and its training process group.
    fn kill(&mut self, pod: ReplicaId) {
        if let Some(l) = self.launchers.get_mut(&pod) {
            if let Some(pid) = l.tracker.child_pid() {
                // SAFETY: kill(2) has no memory-safety preconditions.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
            let _ = l.signals.send(libc::SIGKILL);
            // Nothing ignores SIGKILL: no later deadline is needed.
            l.kill_at = None;
        }
    }

    fn inject(&mut self, injection: Injection) {
        let pod = injection.replica;
        let name = self.job.pod_name(pod);
        if self.opts.timeline.is_some() {
            self.recorded.1.push(super::timeline::FaultMark::new(self.now(), name.clone(), &injection));
        }
        match injection.fault {
            Fault::Fail => match self.launchers.get(&pod).map(|l| (l.tracker.child_pid(), l.tracker.ended())) {
                Some((Some(pid), _)) => fail_child(&name, pid),
                Some((None, false)) => {
                    note(&format!(
                        "injection fail:{pod}: {name}'s training process is not running yet: it fails once it runs"
                    ));
                    self.deferred_fails.push(pod);
                }
                Some((None, true)) | None => note(&format!(
                    "injection fail:{pod} skipped: {name} has no training process and will not start one"
                )),
            },
            Fault::Delete => {
                note(&format!("injected: {name} is deleted (its launcher and training process are killed)"));
                self.kill(pod);
                self.feed(Event::PodDeleted { pod });
            }
            Fault::Label { key, value } => {
                let labels = self.labels.entry(pod).or_insert_with(healthy_labels);
                labels.insert(key.clone(), value.clone());
                let path = self.workdir.labels(&name);
                match write_atomically(&path, &labels_file_text(labels)) {
                    Ok(()) if LAUNCHERS_READ_NODE_LABELS => {
                        note(&format!("injected: {name}'s node is labelled {key}={value}"));
                    }
                    Ok(()) => note(&format!(
                        "injected: {name}'s node is labelled {key}={value} (this launcher build does not read node labels)"
                    )),
                    Err(e) => note(&format!("injection label:{pod} failed: cannot write {}: {e}", path.display())),
                }
            }
        }
    }

    fn start_launcher(&mut self, pod: ReplicaId) {
        let Some(spec) = launch_spec(&self.job, pod, self.master_port) else {
            return;
        };
        let name = spec.pod.clone();
        let instance = self.next_instance;
        self.next_instance += 1;
        match self.spawn_launcher(&spec) {
            Ok((child, status_pipe)) => {
                let (signals, signal_rx) = mpsc::unbounded_channel();
                self.launchers
                    .insert(pod, Launcher { instance, tracker: StatusTracker::default(), signals, kill_at: None });
                let mut child = child;
                for out in [child.stdout.take().map(boxed), child.stderr.take().map(boxed)].into_iter().flatten() {
                    self.output_tasks.push(tokio::spawn(relay_output(out, name.clone(), self.pod_width)));
                }
                let task = LauncherTask { pod, instance, reports: self.tx.clone() };
                tokio::spawn(task.follow(child, status_pipe, signal_rx));
                self.feed(Event::LauncherStarted { pod });
            }
            Err(e) => {
                note(&format!("cannot start the launcher of {name} ({}): {e}", self.opts.rankvisor.display()));
                let code =
                    if e.kind() == std::io::ErrorKind::NotFound { exit::NOT_FOUND } else { exit::NOT_EXECUTABLE };
                self.feed(Event::LauncherExited { pod, status: ExitStatus::Code(code) });
            }
        }
    }

    /// Start one launcher: its own process group (the terminal's Ctrl-C reaches only the dry run,
    /// which stops everyone in order), stdin from /dev/null, the status pipe on an inherited fd.
    fn spawn_launcher(&self, spec: &super::env::LaunchSpec) -> std::io::Result<(Child, OwnedFd)> {
        let (status_read, status_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let status_write = above_stdio(status_write)?;
        let termination_log = self.workdir.termination_log(&spec.pod);
        let _ = std::fs::remove_file(&termination_log);
        let node_labels = self.workdir.labels(&spec.pod);
        let http_port = if self.opts.http { free_loopback_port() } else { None };
        if let Some(port) = http_port {
            note(&format!(
                "{} serves http://{DRY_RUN_MASTER_ADDR}:{port}/status (and /metrics, /readyz, /healthz)",
                spec.pod
            ));
        }
        let files = LauncherFiles {
            status_fd: status_write.as_raw_fd(),
            node_labels: &node_labels,
            termination_log: &termination_log,
            http_port,
        };
        let mut cmd = Command::new(&self.opts.rankvisor);
        cmd.args(launcher_args(spec, &self.settings, files));
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(is_operator_managed_var) {
                cmd.env_remove(name);
            }
        }
        cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
        // What the downward API gives a real pod: the launcher names its job and itself from it.
        cmd.env("POD_NAME", &spec.pod).env("POD_NAMESPACE", "default").env("NODE_NAME", "localhost");
        cmd.stdin(Stdio::null()).process_group(0).kill_on_drop(false);
        match &self.opts.logs {
            Some(dir) => {
                let log = open_log(&dir.join(format!("{}.log", spec.pod)))?;
                cmd.stdout(log.try_clone()?).stderr(log);
            }
            None => {
                cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            }
        }
        let fd = status_write.as_raw_fd();
        // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
        // functions (fcntl, prctl) on plain integers; no allocation, no locks.
        unsafe {
            cmd.pre_exec(move || {
                // The launcher inherits the status pipe's write end (it marks it close-on-exec
                // again itself, so its child does not).
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // A dry run killed outright still stops its launchers, gracefully.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        drop(status_write);
        Ok((child, status_read))
    }

    /// Give the replicas' last output lines a moment to arrive before the dry run exits.
    /// The run as `--timeline` draws it, ending now.
    fn recording(&mut self) -> super::timeline::Recording {
        let (changes, faults) = std::mem::take(&mut self.recorded);
        super::timeline::Recording { job: self.job.name.clone(), changes, faults, end: self.now() }
    }

    async fn drain_output(&mut self) {
        let deadline = Instant::now() + DRAIN_LIMIT;
        for task in self.output_tasks.drain(..) {
            let _ = tokio::time::timeout_at(deadline, task).await;
        }
    }
}

/// `fd` itself, or a copy numbered 3 or more: a dry run started with a standard stream closed
/// gets pipes numbered 0-2, which the launcher's own stdio would overwrite.
fn above_stdio(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl on an open descriptor; the new descriptor is owned only by the OwnedFd below.
    let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if copy < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `copy` is a fresh, open descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

/// The `fail:` injection: SIGKILL to the training process group, as a crash or the OOM killer.
fn fail_child(pod: &str, pid: i32) {
    note(&format!("injected: {pod}'s training process fails (SIGKILL to its process group {pid})"));
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
}

/// Append-only log file for a replica (kept across its restarts and recreations).
fn open_log(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

type Output = Box<dyn AsyncRead + Unpin + Send>;

fn boxed(out: impl AsyncRead + Unpin + Send + 'static) -> Output {
    Box::new(out)
}

/// Copy a replica's output to stderr, each line prefixed with its pod's name.
async fn relay_output(mut out: Output, pod: String, width: usize) {
    let mut splitter = LineSplitter::default();
    let mut buf = vec![0u8; 8192];
    loop {
        match out.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let lines = splitter.push(buf.get(..n).unwrap_or_default());
                write_lines(&pod, width, lines);
            }
        }
    }
    write_lines(&pod, width, splitter.finish());
}

fn write_lines(pod: &str, width: usize, lines: impl IntoIterator<Item = String>) {
    let mut err = std::io::stderr().lock();
    for line in lines {
        let _ = writeln!(err, "{}", prefixed(pod, width, &line));
    }
}

/// The task that owns one launcher process.
struct LauncherTask {
    pod: ReplicaId,
    instance: u64,
    reports: mpsc::UnboundedSender<Report>,
}

type StatusLines = Lines<BufReader<pipe::Receiver>>;

impl LauncherTask {
    fn send(&self, what: Reported) {
        let _ = self.reports.send(Report { pod: self.pod, instance: self.instance, what });
    }

    fn send_line(&self, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        match parse_status_line(line) {
            Ok(status) => self.send(Reported::Status(status)),
            Err(e) => self.send(Reported::Unreadable(e.to_string())),
        }
    }

    /// Relay status lines and signals until the launcher exits, then its last lines, then the exit.
    async fn follow(self, mut child: Child, status_pipe: OwnedFd, mut signals: mpsc::UnboundedReceiver<i32>) {
        let pid = child.id().and_then(|p| i32::try_from(p).ok());
        let mut lines: Option<StatusLines> = match pipe::Receiver::from_owned_fd(status_pipe) {
            Ok(r) => Some(BufReader::new(r).lines()),
            Err(e) => {
                self.send(Reported::Unreadable(format!("cannot read the status pipe: {e}")));
                None
            }
        };
        let mut signals_open = true;
        let status = loop {
            tokio::select! {
                biased;
                line = next_line(&mut lines) => match line {
                    Some(line) => self.send_line(&line),
                    None => lines = None,
                },
                sig = signals.recv(), if signals_open => match (sig, pid) {
                    // The child has not been reaped (wait() has not returned), so the pid is still ours.
                    // SAFETY: kill(2) has no memory-safety preconditions.
                    (Some(sig), Some(pid)) => { unsafe { libc::kill(pid, sig) }; }
                    (Some(_), None) => {}
                    (None, _) => signals_open = false,
                },
                status = child.wait() => break status,
            }
        };
        if let Some(mut rest) = lines {
            let _ = tokio::time::timeout(DRAIN_LIMIT, async {
                while let Ok(Some(line)) = rest.next_line().await {
                    self.send_line(&line);
                }
            })
            .await;
        }
        let exit = match status {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(code), _) => ExitStatus::Code(code),
                (None, Some(sig)) => ExitStatus::Signal(sig),
                (None, None) => ExitStatus::Code(exit::EXTERNAL_FAILURE),
            },
            Err(_) => ExitStatus::Code(exit::EXTERNAL_FAILURE),
        };
        self.send(Reported::Exited(exit));
    }
}

/// The next status line; None at the end of the pipe; never ready once the pipe is gone.
async fn next_line(lines: &mut Option<StatusLines>) -> Option<String> {
    match lines {
        Some(l) => l.next_line().await.ok().flatten(),
        None => std::future::pending().await,
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

    #[test]
    fn a_busy_master_port_is_replaced_and_said() {
        let busy = std::net::TcpListener::bind((DRY_RUN_MASTER_ADDR, 0)).unwrap();
        let port = busy.local_addr().unwrap().port();
        let (chosen, why) = choose_master_port(port, None).unwrap();
        assert_ne!(chosen, port);
        let why = why.unwrap();
        assert!(
            why.contains(&format!("MASTER_PORT {port}")) && why.contains(&format!("MASTER_PORT={chosen}")),
            "{why}"
        );
        assert_eq!(choose_master_port(port, Some(port)).unwrap(), (port, None), "an explicit port is kept");
        let (any, why) = choose_master_port(port, Some(0)).unwrap();
        assert!(any != 0 && why.is_none());
    }

    #[test]
    fn labels_are_replaced_whole() {
        let dir = WorkDir::create().unwrap();
        let path = dir.labels("p");
        write_atomically(&path, "a=\"1\"\n").unwrap();
        write_atomically(&path, "a=\"2\"\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a=\"2\"\n");
        let root = dir.0.clone();
        drop(dir);
        assert!(!root.exists(), "the work directory is removed");
    }
}

//! The supervisor's event loop: signals (CHLD included), timers and heartbeat checks become
//! `supervise::Event`s; the machine's `Action`s become syscalls. All I/O of supervision is here.

use crate::exit;
use crate::health::{self, Observation};
use crate::heartbeat::HeartbeatFile;
use crate::process::{self, ChildCommand, SignalStream, Signals};
use crate::report::{LocalStatus, ReplicaState};
use crate::supervise::{Action, Event, GiveUp, Phase, Supervisor, SupervisorConfig};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};
use tracing::{error, info, warn};

/// Everything the loop needs besides the signal masks.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Restart policy, backoff, grace, hang detection.
    pub supervisor: SupervisorConfig,
    /// The training command.
    pub command: ChildCommand,
    /// The heartbeat file, when configured.
    pub heartbeat_file: Option<PathBuf>,
    /// Where to write why rankvisor gave up.
    pub termination_log: Option<PathBuf>,
    /// Job scope: where the driver asks the rendezvous layer for a new generation.
    pub generation_requests: Option<tokio::sync::mpsc::UnboundedSender<()>>,
    /// Where to stream status lines (`--status-fd`).
    pub status_sink: Option<crate::status_sink::StatusSink>,
    /// The node-health gate, when a source is configured.
    pub health: Option<HealthGate>,
}

/// The node's health verdicts and what to do while the node is unhealthy before the start.
#[derive(Debug, Clone)]
pub struct HealthGate {
    /// The latest observation of the node's health.
    pub rx: watch::Receiver<Observation>,
    /// `--unhealthy-node wait`: wait for health before the start instead of exiting 138.
    pub wait: bool,
}

fn give_up_for(obs: &Observation) -> GiveUp {
    let message = match obs {
        Ok(v) => health::summary(v),
        Err(e) => format!("node health unknown, refusing to start: {e}"),
    };
    GiveUp { state: ReplicaState::NodeUnhealthy, message }
}

struct Driver {
    sup: Supervisor,
    cfg: DriverConfig,
    signals: Signals,
    heartbeat: Option<HeartbeatFile>,
    status: watch::Sender<LocalStatus>,
    exit_code: Option<i32>,
    shutdown_deadline: Option<Instant>,
    last_sent: Option<LocalStatus>,
    waiting_for_health: bool,
    gate_pending: bool,
}

/// A future that must succeed before the first start (the rendezvous barrier).
pub type StartGate = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), GiveUp>>>>;

/// What links the supervisor to the rest of the job: the first barrier, and later events
/// (new generations, releases, orders to give up) from the rendezvous layer.
#[derive(Default)]
pub struct Links {
    /// Must succeed before the first start.
    pub start_gate: Option<StartGate>,
    /// Events from outside, fed to the machine as they come.
    pub control: Option<tokio::sync::mpsc::UnboundedReceiver<Event>>,
}

/// The next control event; never ready without a channel; None when the channel closed.
async fn next_control(rx: &mut Option<tokio::sync::mpsc::UnboundedReceiver<Event>>) -> Option<Event> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The gate's outcome; never ready without a gate.
async fn pass_gate(gate: &mut Option<StartGate>) -> Result<(), GiveUp> {
    match gate {
        Some(g) => g.await,
        None => std::future::pending().await,
    }
}

/// Supervise the child until the machine decides to exit; return rankvisor's exit status.
///
/// `links.start_gate` (the rendezvous barrier) must succeed before the first start; signals are
/// handled while it runs, and its failure gives up with exit 138.
pub async fn supervise(
    cfg: DriverConfig,
    signals: Signals,
    status: watch::Sender<LocalStatus>,
    links: Links,
) -> std::io::Result<i32> {
    let mut stream = SignalStream::new(&signals)?;
    let heartbeat = cfg.heartbeat_file.clone().map(HeartbeatFile::new);
    let poll = heartbeat_poll(&cfg.supervisor);
    let mut d = Driver {
        sup: Supervisor::new(cfg.supervisor),
        cfg,
        signals,
        heartbeat,
        status,
        exit_code: None,
        shutdown_deadline: None,
        last_sent: None,
        waiting_for_health: false,
        gate_pending: false,
    };
    let mut health = d.cfg.health.clone();
    if let Some(gate) = health.as_mut() {
        let obs = gate.rx.borrow_and_update().clone();
        match &obs {
            Ok(v) if v.healthy => {}
            _ if gate.wait => {
                warn!("{}; waiting for the node to become healthy", give_up_for(&obs).message);
                d.waiting_for_health = true;
            }
            _ => d.apply(Event::GiveUp(give_up_for(&obs))),
        }
    }
    let Links { start_gate, mut control } = links;
    let mut start_gate = start_gate;
    d.gate_pending = start_gate.is_some();
    d.maybe_start();
    let mut beat_timer = tokio::time::interval(poll);
    beat_timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while d.exit_code.is_none() {
        let deadline = d.sup.next_deadline();
        tokio::select! {
            biased;
            sigs = stream.next() => {
                for sig in sigs? {
                    d.on_signal(sig);
                }
            }
            () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                d.check_beat();
                d.apply(Event::Tick);
            }
            _ = beat_timer.tick(), if d.heartbeat.is_some() => d.check_beat(),
            obs = next_health(&mut health), if health.is_some() => match obs {
                Some(obs) => d.on_health(obs),
                None => health = None,
            },
            event = next_control(&mut control), if control.is_some() => match event {
                Some(event) => d.apply(event),
                None => control = None,
            },
            passed = pass_gate(&mut start_gate), if start_gate.is_some() => {
                start_gate = None;
                d.gate_pending = false;
                match passed {
                    Ok(()) => d.maybe_start(),
                    Err(g) => d.apply(Event::GiveUp(g)),
                }
            }
        }
    }
    d.sweep(&mut stream).await;
    if let Some(sink) = &d.cfg.status_sink {
        sink.flush(Duration::from_secs(2));
    }
    Ok(d.exit_code.unwrap_or(exit::EXTERNAL_FAILURE))
}

/// The next health observation; None when the source is gone; never ready without a gate.
async fn next_health(gate: &mut Option<HealthGate>) -> Option<Observation> {
    match gate {
        Some(g) => match g.rx.changed().await {
            Ok(()) => Some(g.rx.borrow_and_update().clone()),
            Err(_) => None,
        },
        None => std::future::pending().await,
    }
}

/// How often to look at the heartbeat file: often enough for progress and a timely hang verdict.
fn heartbeat_poll(cfg: &SupervisorConfig) -> Duration {
    let base = cfg.hang.map_or(Duration::from_secs(1), |h| h.timeout / 4);
    base.clamp(Duration::from_millis(10), Duration::from_secs(1))
}

impl Driver {
    fn on_signal(&mut self, sig: i32) {
        match sig {
            libc::SIGCHLD => {
                for (pid, how) in process::reap_all() {
                    if Some(pid) == self.sup.child_pid() {
                        info!(pid, "child {how}");
                    }
                    self.apply(Event::Exited { pid, how });
                }
            }
            s if process::is_shutdown(s) => {
                info!(signal = %exit::signal_name(s), "received; stopping the child");
                let grace = self.cfg.supervisor.grace;
                self.shutdown_deadline.get_or_insert_with(|| Instant::now() + grace);
                self.apply(Event::Shutdown { signal: s });
            }
            // rankvisor's own broken pipe is not the child's business.
            libc::SIGPIPE => {}
            s => {
                if let Some(pid) = self.sup.child_pid() {
                    if let Err(e) = process::signal_group(pid, s) {
                        warn!(pid, signal = %exit::signal_name(s), "cannot forward: {e}");
                    }
                }
            }
        }
    }

    /// Start the first child once nothing holds it back.
    fn maybe_start(&mut self) {
        if !self.waiting_for_health && !self.gate_pending && matches!(self.sup.phase(), Phase::Pending) {
            self.apply(Event::Start);
        }
        self.publish();
    }

    fn on_health(&mut self, obs: Observation) {
        match &obs {
            Ok(v) if v.healthy => {
                if std::mem::take(&mut self.waiting_for_health) {
                    info!("node healthy");
                    self.maybe_start();
                }
            }
            Ok(_) if self.waiting_for_health => warn!("{}; still waiting", give_up_for(&obs).message),
            Ok(_) => self.apply(Event::GiveUp(give_up_for(&obs))),
            // A glitch reading the source never stops a running job; before the start it keeps us waiting.
            Err(e) => warn!("cannot read the node's health, keeping the last verdict: {e}"),
        }
    }

    fn check_beat(&mut self) {
        let Some(hb) = self.heartbeat.as_mut() else { return };
        let now = Instant::now();
        if let Some(beat) = hb.check(now) {
            if let Some(p) = beat.progress {
                if self.status.borrow().progress.as_ref() != Some(&p) {
                    info!(progress = %serde_json::Value::Object(p.clone()), "training progress");
                    self.status.send_modify(|s| s.progress = Some(p));
                }
            }
            self.apply_at(Event::Beat, beat.at.max(self.started_at().unwrap_or(beat.at)));
        }
    }

    fn started_at(&self) -> Option<Instant> {
        match self.sup.phase() {
            Phase::Running { started, .. } | Phase::Stopping { started, .. } => Some(*started),
            _ => None,
        }
    }

    fn apply(&mut self, event: Event) {
        self.apply_at(event, Instant::now());
    }

    fn apply_at(&mut self, event: Event, now: Instant) {
        let actions = self.sup.on_event(event, now);
        for action in actions {
            self.act(action);
        }
        self.publish();
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::Spawn { restart_count, generation } => self.spawn(restart_count, generation),
            Action::RequestGeneration => {
                if let Some(tx) = &self.cfg.generation_requests {
                    let _ = tx.send(());
                }
            }
            Action::SignalGroup { pid, signal } => {
                info!(pid, signal = %exit::signal_name(signal), "signalling the child's process group");
                if let Err(e) = process::signal_group(pid, signal) {
                    warn!(pid, "cannot signal the child's group: {e}");
                }
            }
            Action::KillLeftovers { pid } => {
                let _ = process::signal_group(pid, libc::SIGKILL);
            }
            Action::TerminationMessage(msg) => {
                error!("{msg}");
                if let Some(path) = &self.cfg.termination_log {
                    if let Err(e) = crate::termination::write_message(path, &msg) {
                        warn!(path = %path.display(), "cannot write the termination message: {e}");
                    }
                }
            }
            Action::Exit { code } => self.exit_code = Some(code),
        }
    }

    fn spawn(&mut self, restart_count: u32, generation: u64) {
        if let Some(hb) = self.heartbeat.as_mut() {
            hb.arm();
        }
        let cmd = self.child_command(restart_count, generation);
        match process::spawn_child(&cmd, &self.signals) {
            Ok(pid) => {
                info!(pid, restart_count, "child started");
                self.apply(Event::Spawned { pid });
            }
            Err(e) => {
                let code = e.code;
                self.apply(Event::SpawnFailed { code, message: e.to_string() });
            }
        }
    }

    fn child_command(&self, restart_count: u32, generation: u64) -> ChildCommand {
        let mut cmd = self.cfg.command.clone();
        let n = OsString::from(restart_count.to_string());
        let mut set = |k: &str, v: OsString| cmd.env.push((k.into(), v));
        set("RANKVISOR_RESTART_COUNT", n.clone());
        set("TORCHELASTIC_RESTART_COUNT", n);
        set("RANKVISOR_GENERATION", generation.to_string().into());
        for (k, v) in [("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "1")] {
            if std::env::var_os(k).is_none() && !cmd.env.iter().any(|(ek, _)| ek == k) {
                cmd.env.push((k.into(), v.into()));
            }
        }
        if let Some(hb) = &self.cfg.heartbeat_file {
            cmd.env.push(("RANKVISOR_HEARTBEAT_FILE".into(), hb.clone().into_os_string()));
        }
        cmd
    }

    fn publish(&mut self) {
        let state = match self.sup.state() {
            ReplicaState::Pending if self.waiting_for_health => ReplicaState::NodeUnhealthy,
            ReplicaState::Pending if self.gate_pending => ReplicaState::Rendezvous,
            s => s,
        };
        let hung = self.sup.last_exit_hung();
        let generation_stop = self.sup.last_exit_generation_stop();
        let before = self.status.borrow().state;
        if state != before {
            info!(from = ?before, to = ?state, restarts = self.sup.restarts(), "state");
        }
        let (restarts, last_exit, pid, hangs) =
            (self.sup.restarts(), self.sup.last_exit(), self.sup.child_pid(), self.sup.hang_detections());
        self.status.send_if_modified(|s| {
            let reason =
                if hung { Some("Hung".to_string()) } else { generation_stop.then(|| "NewGeneration".to_string()) };
            let next = LocalStatus {
                state,
                restart_count: restarts,
                generation: self.sup.generation(),
                last_exit,
                last_exit_reason: reason,
                child_pid: pid,
                hang_detections: hangs,
                progress: s.progress.clone(),
            };
            if *s == next {
                false
            } else {
                *s = next;
                true
            }
        });
        if let Some(sink) = &self.cfg.status_sink {
            let now = self.status.borrow().clone();
            if self.last_sent.as_ref() != Some(&now) {
                sink.send(&now);
                self.last_sent = Some(now);
            }
        }
    }

    /// TERM every process still below us (group leftovers, setsid escapees), then KILL at the deadline.
    async fn sweep(&mut self, stream: &mut SignalStream) {
        let me = std::process::id() as i32;
        let now = Instant::now();
        let grace = self.cfg.supervisor.grace;
        let deadline = self.shutdown_deadline.unwrap_or(now + grace).max(now + grace.min(Duration::from_secs(1)));
        process::reap_all();
        // The common case costs one syscall instead of a scan of /proc.
        if !process::has_children() {
            return;
        }
        let left = process::alive_descendants(me);
        if left.is_empty() {
            return;
        }
        info!(count = left.len(), "sending SIGTERM to leftover processes before exit");
        for pid in &left {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(*pid, libc::SIGTERM) };
        }
        if self.wait_descendants(stream, me, deadline).await {
            return;
        }
        let left = process::alive_descendants(me);
        warn!(count = left.len(), "leftover processes ignored SIGTERM; sending SIGKILL");
        for pid in &left {
            // SAFETY: as above.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        self.wait_descendants(stream, me, Instant::now() + Duration::from_secs(1)).await;
    }

    /// Reap until no descendant is alive (true) or the deadline passes (false).
    async fn wait_descendants(&mut self, stream: &mut SignalStream, me: i32, deadline: Instant) -> bool {
        loop {
            process::reap_all();
            if !process::has_children() || process::alive_descendants(me).is_empty() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            // Escapees are not our children, so no SIGCHLD tells us they are gone: poll too.
            tokio::select! {
                _ = stream.next() => {}
                () = tokio::time::sleep(Duration::from_millis(10)) => {}
                () = sleep_until(deadline) => {}
            }
        }
    }
}

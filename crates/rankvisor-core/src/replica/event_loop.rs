//! The one event loop: a `select!` that turns every source into an `Input` for the machine and
//! performs the machine's `Effect`s. Sources: the signalfd (SIGCHLD wakes the one reaper, the
//! only `waitpid` in the program), the machine's next deadline, the heartbeat file, the
//! node-health source, the rendezvous link. It decides nothing; it publishes the status after
//! every step.

use super::child::{ChildAction, Event, SupervisorConfig};
use super::link::{LinkCommand, LinkEvent};
use super::log_watch::{self, LogWatch, News};
use super::machine::{Effect, Input, Note, Replica, ReplicaConfig, SpawnOrder};
use crate::exit;
use crate::health::Observation;
use crate::heartbeat::HeartbeatFile;
use crate::process::{self, ChildCommand, SignalStream, Signals};
use crate::signo::Signo;
use crate::stacks::Snapshot;
use crate::status::LocalStatus;
use nix::unistd::Pid;
use std::ffi::OsString;
use std::future::Future;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};
use tracing::{error, info, warn};

/// Everything the loop needs besides its sources.
pub struct LoopConfig {
    /// The machine's settings.
    pub replica: ReplicaConfig,
    /// The training command and its environment (built once, in `config`).
    pub command: ChildCommand,
    /// The heartbeat file, when configured.
    pub heartbeat_file: Option<PathBuf>,
    /// Where to write why rankvisor gave up.
    pub termination_log: Option<PathBuf>,
    /// `--status-fd`: every status change, in order (the dry run follows replicas by it).
    pub status_sink: Option<crate::status::fd_sink::StatusSink>,
    /// Debug builds only, for the test of the last resort: panic right after the child started.
    pub panic_after_spawn: bool,
    /// `--straggler-rule`: the log rule whose captured values go to the master.
    pub metric_rule: Option<String>,
    /// What takes the snapshots a hang's stop waits for.
    pub snapshots: std::sync::Arc<crate::stacks::Snapshotter>,
}

/// A node-health source: its verdicts, possibly after a first look that takes a while.
pub type HealthSource = Pin<Box<dyn Future<Output = watch::Receiver<Observation>>>>;

/// A started link as the loop holds it: where its commands go, its events, and its task.
pub struct LinkParts {
    /// Where the machine's commands go.
    pub commands: mpsc::UnboundedSender<LinkCommand>,
    /// What the link saw.
    pub events: mpsc::UnboundedReceiver<LinkEvent>,
    /// The link's task: it ends once the status channel closes and its last frames are out.
    pub task: JoinHandle<()>,
}

/// Starts the rendezvous link when the machine asks (`Effect::StartLink`), with the node's
/// health; or says why it could not start.
pub type LinkStarter = Box<dyn FnOnce(Option<watch::Receiver<Observation>>) -> Result<LinkParts, String>>;

/// How the loop ended: rankvisor's exit status, and the link's task if one started (the caller
/// lets it send this replica's final state once the status channel is closed).
pub struct Finished {
    /// rankvisor's exit status.
    pub code: i32,
    /// The link's task.
    pub link: Option<JoinHandle<()>>,
}

/// The sources besides signals and timers.
pub struct Sources {
    /// The node-health source, when one is configured.
    pub health: Option<HealthSource>,
    /// The rendezvous link's starter, when the job has one.
    pub link: Option<LinkStarter>,
    /// Agent mode: the operator's orders in, the `/status` view out.
    pub agent: Option<AgentChannels>,
}

/// The event loop's side of the agent's API.
pub struct AgentChannels {
    /// Validated orders from the HTTP edge.
    pub orders: mpsc::UnboundedReceiver<crate::agent::Request>,
    /// The latest `/status` view, published after every step.
    pub status: watch::Sender<crate::agent::StatusView>,
}

/// A snapshot taken for a stop: why, and the snapshot.
type Taken = (String, Snapshot);

struct Loop {
    replica: Replica,
    cfg: LoopConfig,
    signals: Signals,
    heartbeat: Option<HeartbeatFile>,
    status: watch::Sender<LocalStatus>,
    health: Option<watch::Receiver<Observation>>,
    link_starter: Option<LinkStarter>,
    link_commands: Option<mpsc::UnboundedSender<LinkCommand>>,
    link_events: Option<mpsc::UnboundedReceiver<LinkEvent>>,
    agent: Option<AgentChannels>,
    /// One instant and the wall-clock time it was: the agent's transitions are shown as times.
    anchor: (Instant, SystemTime),
    link_task: Option<JoinHandle<()>>,
    exit_code: Option<i32>,
    /// The current attempt's log rules over its stdout, when it has rules.
    log: Option<LogWatch>,
    /// The last termination message written: what stuck processes add to.
    last_message: Option<String>,
    /// Snapshots taken (why, snapshot), from their tasks.
    snapshots: (mpsc::UnboundedSender<Taken>, mpsc::UnboundedReceiver<Taken>),
}

/// Run the replica until the machine decides to exit.
pub async fn run(
    cfg: LoopConfig,
    signals: Signals,
    status: watch::Sender<LocalStatus>,
    sources: Sources,
) -> std::io::Result<Finished> {
    let mut stream = SignalStream::new(&signals)?;
    let poll = heartbeat_poll(&cfg.replica.supervisor);
    let mut health_source = sources.health;
    let mut l = Loop::new(cfg, signals, status, sources.link, sources.agent);
    let effects = l.replica.start(Instant::now());
    l.perform(effects);
    let mut beat_timer = tokio::time::interval(poll);
    beat_timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Escapees are not our children, so no SIGCHLD tells us they are gone: poll while sweeping.
    let mut sweep_poll = tokio::time::interval(Duration::from_millis(10));
    // A shutdown's helpers get the signal once their parent has exited, and their parent need not
    // be our child (a torchrun worker's DataLoader workers): poll the tree while they wait.
    let mut order_poll = tokio::time::interval(ORDER_POLL);
    order_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while l.exit_code.is_none() {
        let deadline = l.replica.next_deadline();
        tokio::select! {
            biased;
            sigs = stream.next() => {
                for sig in sigs? {
                    l.on_signal(sig);
                }
            }
            () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                l.check_beat();
                l.feed(Input::Tick);
            }
            news = LogWatch::next(&mut l.log), if l.log.is_some() => l.on_log(news),
            rx = poll_health_source(&mut health_source), if health_source.is_some() => {
                health_source = None;
                let first = rx.borrow().clone();
                l.health = Some(rx);
                l.on_health(first);
            }
            obs = next_health(&mut l.health), if l.health.is_some() => match obs {
                Some(obs) => l.on_health(obs),
                None => l.health = None,
            },
            event = next_link_event(&mut l.link_events), if l.link_events.is_some() => match event {
                Some(LinkEvent::JobStacks(job)) => l.on_job_stacks(*job),
                Some(LinkEvent::StragglerNamed(named)) => l.on_straggler_named(*named),
                Some(event) => l.feed(Input::Link(event)),
                None => l.link_events = None,
            },
            req = next_order(&mut l.agent), if l.agent.is_some() => match req {
                Some(req) => {
                    l.feed(Input::Agent(req.order));
                    let _ = req.done.send(());
                }
                None => l.agent = None,
            },
            _ = beat_timer.tick(), if l.heartbeat.is_some() => l.check_beat(),
            _ = sweep_poll.tick(), if l.replica.sweeping() => l.count_descendants(),
            _ = order_poll.tick(), if l.replica.ordering() => l.scan_tree(),
            Some((why, snapshot)) = l.snapshots.1.recv() => l.on_snapshot(why, snapshot),
        }
    }
    // The last child's last output (it may have ended just before the exit was decided).
    if let Some(w) = l.log.take() {
        w.finish();
    }
    Ok(Finished { code: l.exit_code.unwrap_or(exit::EXTERNAL_FAILURE), link: l.link_task })
}

async fn poll_health_source(source: &mut Option<HealthSource>) -> watch::Receiver<Observation> {
    match source {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// The next health observation; None when the source is gone.
async fn next_health(rx: &mut Option<watch::Receiver<Observation>>) -> Option<Observation> {
    match rx {
        Some(rx) => match rx.changed().await {
            Ok(()) => Some(rx.borrow_and_update().clone()),
            Err(_) => None,
        },
        None => std::future::pending().await,
    }
}

async fn next_order(agent: &mut Option<AgentChannels>) -> Option<crate::agent::Request> {
    match agent {
        Some(a) => a.orders.recv().await,
        None => std::future::pending().await,
    }
}

async fn next_link_event(rx: &mut Option<mpsc::UnboundedReceiver<LinkEvent>>) -> Option<LinkEvent> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// How often a shutdown's order looks at the tree while helpers wait for their parent to exit:
/// the delay between a parent's exit and its helpers' signal, at most (a parent that is our own
/// child is seen at once, by its SIGCHLD).
const ORDER_POLL: Duration = Duration::from_millis(25);

/// How often to look at the heartbeat file: often enough for progress and a timely hang verdict.
fn heartbeat_poll(cfg: &SupervisorConfig) -> Duration {
    let base = cfg.hang.map_or(Duration::from_secs(1), |h| h.timeout / 4);
    base.clamp(Duration::from_millis(10), Duration::from_secs(1))
}

impl Loop {
    /// The loop before its first step: no health, link, log watch or exit yet.
    fn new(
        cfg: LoopConfig,
        signals: Signals,
        status: watch::Sender<LocalStatus>,
        link_starter: Option<LinkStarter>,
        agent: Option<AgentChannels>,
    ) -> Self {
        Loop {
            replica: Replica::new(cfg.replica.clone()),
            heartbeat: cfg.heartbeat_file.clone().map(HeartbeatFile::new),
            cfg,
            signals,
            status,
            health: None,
            link_starter,
            link_commands: None,
            link_events: None,
            agent,
            anchor: (Instant::now(), SystemTime::now()),
            link_task: None,
            exit_code: None,
            log: None,
            last_message: None,
            snapshots: mpsc::unbounded_channel(),
        }
    }

    fn on_signal(&mut self, sig: process::SignalInfo) {
        if sig.signal == Signo::CHLD {
            for (pid, how) in process::reap_all() {
                if Some(pid) == self.replica.supervisor().child_pid() {
                    info!(pid = pid.as_raw(), "child {how}");
                }
                self.feed(Input::Child(Event::Exited { pid, how }));
            }
            if self.replica.ordering() {
                self.scan_tree();
            }
            if self.replica.sweeping() {
                self.count_descendants();
            }
        } else {
            self.feed(Input::Signal { signal: sig.signal, own: sig.own });
        }
    }

    /// A verdict is news for the machine and part of the published status.
    fn on_health(&mut self, obs: Observation) {
        let report = crate::status::NodeHealthReport::from_observation(&obs);
        self.status.send_modify(|s| s.node_health = Some(report));
        self.feed(Input::Health(obs));
    }

    fn check_beat(&mut self) {
        let Some(hb) = self.heartbeat.as_mut() else { return };
        let now = Instant::now();
        if let Some(beat) = hb.check(now) {
            if let Some(p) = beat.progress {
                if self.status.borrow().progress.as_ref() != Some(&p) {
                    info!(progress = %serde_json::Value::Object(p.clone()), "training progress");
                    self.publish_with(|s| s.progress = Some(p));
                }
            }
            self.feed(Input::Beat { at: beat.at });
        }
    }

    /// The relay thread's news: a hit and "drained" are the machine's, rule states the status's.
    fn on_log(&mut self, news: News) {
        match news {
            News::Hit(hit) => self.feed(Input::LogRule(hit)),
            // A point for the master's straggler detector: the link's to send, nothing to decide.
            News::Metric(value) => {
                if let Some(tx) = &self.link_commands {
                    let _ = tx.send(LinkCommand::Metric { value: crate::rendezvous::straggler::Point(value) });
                }
            }
            News::Drained | News::Ended => self.feed(Input::OutputDrained),
            News::States(states) => {
                let changed = self.status.send_if_modified(|s| {
                    let new = s.log_rules != states;
                    if new {
                        s.log_rules = states;
                    }
                    new
                });
                if let (true, Some(sink)) = (changed, &self.cfg.status_sink) {
                    sink.send(&self.status.borrow());
                }
            }
        }
    }

    fn feed(&mut self, input: Input) {
        let effects = self.replica.on_input(input, Instant::now());
        self.perform(effects);
    }

    fn perform(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            self.act(effect);
        }
        self.publish();
    }

    fn act(&mut self, effect: Effect) {
        match effect {
            Effect::Spawn(order) => self.spawn(order),
            Effect::Child(ChildAction::Spawn { .. }) => {
                error!("internal error: a spawn without its attempt's order; the machine sends Effect::Spawn");
            }
            Effect::Child(ChildAction::SignalPrograms { .. } | ChildAction::Checkpoint { .. }) => {
                error!(
                    "internal error: a signal to the programs without its order; the machine sends Effect::ScanTree"
                );
            }
            Effect::DrainOutput => {
                if !self.log.as_ref().is_some_and(LogWatch::drain) {
                    self.feed(Input::OutputDrained);
                }
            }
            Effect::Child(ChildAction::SignalGroup { pid, signal }) => {
                info!(pid = pid.as_raw(), signal = %signal.name(), "signalling the child's process group");
                if let Err(e) = process::signal_group(pid, signal) {
                    warn!(pid = pid.as_raw(), signal = %signal.name(), "cannot signal the child's group: {e}");
                }
            }
            Effect::Child(ChildAction::KillLeftovers { pid }) => {
                let _ = process::signal_group(pid, Signo::KILL);
            }
            Effect::Child(ChildAction::TerminationMessage(msg)) => self.termination_message(msg),
            Effect::Child(ChildAction::Snapshot { pid, why }) => {
                info!(pid = pid.as_raw(), why = %why, "taking a snapshot of the child's stacks before it is stopped");
                let (taker, done) = (self.cfg.snapshots.clone(), self.snapshots.0.clone());
                tokio::spawn(async move {
                    let _ = done.send((why, taker.take(pid).await));
                });
            }
            Effect::NameStuck { message } => {
                process::reap_all();
                let stuck = process::describe_stuck(&process::stuck_below(Pid::this()));
                let line = format!("{message}: {stuck}");
                // After the child's own message, when it wrote one (the child ended, its escapees did not).
                let msg = match self.last_message.take() {
                    Some(first) => format!("{first}; {line}"),
                    None => line,
                };
                self.termination_message(msg);
            }
            Effect::StartLink => self.start_link(),
            Effect::Link(cmd) => match &self.link_commands {
                Some(tx) => {
                    let _ = tx.send(cmd);
                }
                None => warn!("rendezvous: no link for {cmd:?}"),
            },
            Effect::Note(Note::Info(line)) => info!("{line}"),
            Effect::Note(Note::Warn(line)) => warn!("{line}"),
            Effect::SweepTerm => self.sweep_signal(Signo::TERM),
            Effect::ScanTree => self.scan_tree(),
            Effect::SignalEach { pids, signal } => {
                info!(count = pids.len(), signal = %signal.name(), "signalling processes below rankvisor");
                for pid in pids {
                    if let Err(e) = process::signal_pid(pid, signal) {
                        warn!(pid = pid.as_raw(), signal = %signal.name(), "cannot signal: {e}");
                    }
                }
            }
            Effect::SweepKill => self.sweep_signal(Signo::KILL),
            Effect::Exit { code } => self.exit_code = Some(code),
        }
    }

    /// A snapshot is taken: its summary goes into the status (the report, the webhook, the Event),
    /// then the machine hears of it (a held stop goes on).
    fn on_snapshot(&mut self, why: String, snapshot: Snapshot) {
        let summary = snapshot.summary(&why, crate::status::rfc3339(SystemTime::now()));
        warn!(why = %crate::untrusted::escape(&why), "stacks: {}", summary.top);
        if summary.frames.len() > 1 {
            info!("stacks: main thread of pid {}: {}", summary.pid.unwrap_or_default(), summary.frames.join(" <- "));
        }
        let top = summary.top.clone();
        self.publish_with(|s| s.stacks = Some(summary));
        self.feed(Input::Child(Event::Snapshotted { top: Some(top) }));
    }

    /// Master: the job's stacks before a restart a hang caused, for the report, the webhook and
    /// the Event (the link logged them).
    fn on_job_stacks(&mut self, job: crate::stacks::JobStacks) {
        self.publish_with(|s| s.job_stacks = Some(job));
    }

    /// Master: a replica was named a straggler, for the report, the webhook and the Event (the
    /// link logged it).
    fn on_straggler_named(&mut self, named: crate::status::straggler::NamedStraggler) {
        self.publish_with(|s| crate::status::straggler::keep(&mut s.stragglers, named));
    }

    /// A change to the status that is not the machine's: to the watchers and the status pipe.
    fn publish_with(&mut self, change: impl FnOnce(&mut crate::status::LocalStatus)) {
        self.status.send_modify(change);
        if let Some(sink) = &self.cfg.status_sink {
            sink.send(&self.status.borrow());
        }
    }

    fn termination_message(&mut self, msg: String) {
        error!("{msg}");
        if let Some(path) = &self.cfg.termination_log {
            if let Err(e) = crate::termination::write_message(path, &msg) {
                warn!(path = %path.display(), "cannot write the termination message: {e}");
            }
        }
        self.last_message = Some(msg);
    }

    fn start_link(&mut self) {
        let Some(starter) = self.link_starter.take() else { return };
        match starter(self.health.clone()) {
            Ok(LinkParts { commands, events, task }) => {
                self.link_commands = Some(commands);
                self.link_events = Some(events);
                self.link_task = Some(task);
            }
            Err(message) => {
                let effects = self.replica.on_input(Input::Link(LinkEvent::Failed { message }), Instant::now());
                self.perform(effects);
            }
        }
    }

    /// Signal every process still below us, then tell the machine how many are left.
    fn sweep_signal(&mut self, sig: Signo) {
        process::reap_all();
        // The common case costs one syscall instead of a scan of /proc.
        let left = if process::has_children() { process::alive_descendants(Pid::this()) } else { vec![] };
        if !left.is_empty() {
            if sig == Signo::TERM {
                info!(count = left.len(), "sending SIGTERM to leftover processes before exit");
            } else {
                warn!(count = left.len(), "leftover processes ignored SIGTERM; sending SIGKILL");
            }
            for pid in &left {
                // One that ended meanwhile is no longer a leftover.
                let _ = process::signal_pid(*pid, sig);
            }
        }
        self.feed(Input::Descendants { alive: left.len() });
    }

    /// The processes below us, for the shutdown's order. Nothing is reaped here (the child may
    /// still run: its exit is the SIGCHLD path's); zombies are not in the tree.
    fn scan_tree(&mut self) {
        let root = Pid::this();
        // The common case costs one syscall instead of a scan of /proc.
        let tree = if process::has_children() {
            process::tree_below(root).map_err(|e| e.to_string())
        } else {
            Ok(process::Tree { root, members: Vec::new() })
        };
        self.feed(Input::Tree(tree));
    }

    fn count_descendants(&mut self) {
        process::reap_all();
        let alive = if process::has_children() { process::alive_descendants(Pid::this()).len() } else { 0 };
        self.feed(Input::Descendants { alive });
    }

    fn spawn(&mut self, order: SpawnOrder) {
        if let Some(hb) = self.heartbeat.as_mut() {
            hb.arm();
        }
        let restart_count = order.restart_count;
        let mut cmd = self.child_command(&order);
        // The previous attempt's relay thread relays what is left in its pipe and stops (the
        // next attempt's waits for it).
        let previous = self.log.take();
        let rules = order.rules.map(|r| r.0);
        let pipe = match rules.as_ref().map(|_| log_watch::pipe()).transpose() {
            Ok(p) => p,
            Err(e) => {
                let message = format!("cannot create the pipe for the log rules: {e}");
                warn!("{message}; retrying under the restart policy");
                let code = exit::EXTERNAL_FAILURE;
                return self.feed(Input::Child(Event::SpawnFailed { code, message, transient: true }));
            }
        };
        cmd.stdout = pipe.as_ref().map(|(_, w)| w.as_raw_fd());
        let spawned = process::spawn_child(&cmd, &self.signals);
        // The child holds its own copy of the write end: rankvisor's must go, or EOF never comes.
        let read = pipe.map(|(r, _w)| r);
        let input = match spawned {
            Ok(pid) => {
                info!(pid = pid.as_raw(), restart_count, "child started");
                if let (Some(rules), Some(rx)) = (rules, read) {
                    let metric =
                        self.cfg.metric_rule.as_ref().and_then(|m| rules.rules().iter().position(|r| &r.name == m));
                    match LogWatch::start(rules, rx, Instant::now(), previous, metric) {
                        Ok(w) => self.log = Some(w),
                        Err(e) => {
                            warn!("log rules: cannot start the relay thread: {e}; the child's output is not read")
                        }
                    }
                }
                if self.cfg.panic_after_spawn {
                    process::set_child_group(Some(pid));
                    panic!("failpoint panic-after-spawn");
                }
                Input::Child(Event::Spawned { pid })
            }
            Err(e) => {
                if e.transient {
                    warn!("{e}; retrying under the restart policy");
                }
                Input::Child(Event::SpawnFailed { code: e.code, message: e.to_string(), transient: e.transient })
            }
        };
        self.feed(input);
    }

    /// The configured command plus this start's counters, or in agent mode the operator's
    /// assignment (its counters are the job's `faultCount`).
    fn child_command(&self, order: &SpawnOrder) -> ChildCommand {
        let mut cmd = self.cfg.command.clone();
        let n = OsString::from(order.restart_count.to_string());
        cmd.env.push(("RANKVISOR_RESTART_COUNT".into(), n.clone()));
        cmd.env.push(("TORCHELASTIC_RESTART_COUNT".into(), n));
        cmd.env.push(("RANKVISOR_GENERATION".into(), order.generation.to_string().into()));
        cmd.env.extend(order.extra_env.iter().map(|(k, v)| (k.into(), v.into())));
        cmd
    }

    fn publish(&mut self) {
        if let Some(agent) = &self.agent {
            let (at, wall) = self.anchor;
            if let Some(view) = self.replica.agent_status(|t| wall + t.saturating_duration_since(at)) {
                agent.status.send_if_modified(|v| std::mem::replace(v, view.clone()) != view);
            }
        }
        let state = self.replica.state();
        let sup = self.replica.supervisor();
        let before = self.status.borrow().state;
        if state != before {
            info!(from = ?before, to = ?state, restarts = sup.restarts(), "state");
        }
        let log_rule = sup.last_exit_log_rule().map(log_watch::report);
        let reason = sup.exit_reason();
        let (restart_count, generation, last_exit) = (sup.restarts(), sup.generation(), sup.last_exit());
        let (child_pid, hang_detections) = (sup.child_pid(), sup.hang_detections());
        process::set_child_group(child_pid);
        let child_pid = child_pid.map(Pid::as_raw);
        // Only the supervisor's fields: node health and progress are set where they change, and
        // nothing is cloned on this path (it runs after every signal, exit and tick).
        let agent = self.replica.agent_state();
        let mut changed = self.status.send_if_modified(|s| {
            let new = s.log_rule != log_rule || s.agent != agent;
            if new {
                (s.log_rule, s.agent) = (log_rule, agent);
            }
            new
        });
        changed |= self.status.send_if_modified(|s| {
            let fields = (state, restart_count, generation, last_exit, reason, child_pid, hang_detections);
            let old = (
                s.state,
                s.restart_count,
                s.generation,
                s.last_exit,
                s.last_exit_reason,
                s.child_pid,
                s.hang_detections,
            );
            if fields == old {
                return false;
            }
            (s.state, s.restart_count, s.generation, s.last_exit, s.last_exit_reason, s.child_pid, s.hang_detections) =
                fields;
            true
        });
        if changed {
            if let Some(sink) = &self.cfg.status_sink {
                sink.send(&self.status.borrow());
            }
        }
    }
}

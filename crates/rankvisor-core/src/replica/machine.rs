//! The replica's one decision machine: every input (a reaped child, a signal, a deadline, a
//! heartbeat, a node-health verdict, a rendezvous event) in, the effects to perform out. It owns
//! every decision of supervision: the child's lifecycle (delegated to `child::Supervisor`), the
//! node-health gate, the rendezvous gate, what an order from the master or a lost master means,
//! how a master whose child finished waits for its workers, the leftover sweep, and the one
//! shutdown deadline with its order (programs first, forked helpers once their parent is gone:
//! `shutdown_order`). No I/O, no clock: the event loop passes `now` and asks `next_deadline`.

use super::child::{
    ChildAction, ChildOutcome, Event, GiveUp, LogRuleHit, Phase, Supervisor, SupervisorConfig, KILL_WAIT,
};
use super::link::{LinkCommand, LinkEvent};
use super::shutdown_order::ShutdownOrder;
use crate::agent::{AgentRecord, Assignment, Order};
use crate::health::{self, Observation};
use crate::logrules::RuleSet;
use crate::policy::RestartScope;
use crate::process::Tree;
use crate::rank::Role;
use crate::signo::Signo;
use crate::status::ReplicaState;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long a child's exit waits for its output to be drained through the log rules (its last
/// lines may fire a rule, which then names the exit): longer only when rankvisor's stdout is not
/// being read, and then the exit goes on without them.
pub const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// An attempt's compiled log rules, compared by identity (the same compiled set).
#[derive(Debug, Clone)]
pub struct LogRules(pub Arc<RuleSet>);

impl PartialEq for LogRules {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for LogRules {}

/// Everything the loop needs to start an attempt's child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnOrder {
    /// Restarts before this start.
    pub restart_count: u32,
    /// The rendezvous generation it belongs to.
    pub generation: u64,
    /// The rules over its stdout (agent mode: `/start`'s, else `--log-rules`); None: the child
    /// keeps rankvisor's stdout.
    pub rules: Option<LogRules>,
    /// Environment on top of the configured command's (agent mode: the operator's assignment).
    pub extra_env: Vec<(String, String)>,
}

/// How a replica is set up around its child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// Restart policy, backoff, grace, hang detection, scope.
    pub supervisor: SupervisorConfig,
    /// What an unhealthy node does to the first start.
    pub health_gate: HealthGate,
    /// A plain replica (with its rendezvous), or the HyperPod agent's.
    pub mode: Mode,
    /// `--log-rules`: evaluated on every attempt's stdout (in agent mode, unless `/start` brings
    /// the attempt's own, which replace them).
    pub log_rules: Option<LogRules>,
}

/// What the replica is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The child's end is rankvisor's exit (after the restart policy).
    Plain {
        /// This replica's side of the rendezvous, when the job has one.
        link: Option<Role>,
        /// Job scope, master: how long a master whose child succeeded keeps the channel for its
        /// workers (`config::linger_limit_of`).
        linger: Option<Duration>,
    },
    /// `--agent hyperpod`: the child starts on the operator's `/start` only, and an attempt's end
    /// is the agent's state (the operator decides what follows), not rankvisor's exit. No
    /// rendezvous of rankvisor's: the operator's assignment carries the job's.
    Agent,
}

impl Mode {
    /// A plain replica without a rendezvous.
    pub const ALONE: Mode = Mode::Plain { link: None, linger: None };

    /// This replica's side of the rendezvous, when it has one.
    pub fn link(self) -> Option<Role> {
        match self {
            Mode::Plain { link, .. } => link,
            Mode::Agent => None,
        }
    }

    /// How long a master whose child succeeded waits for its workers, when it does.
    pub fn linger(self) -> Option<Duration> {
        match self {
            Mode::Plain { linger, .. } => linger,
            Mode::Agent => None,
        }
    }
}

/// The node-health gate before the child's first start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthGate {
    /// No node-health source: the node counts as healthy.
    Off,
    /// An unhealthy node (or a source that cannot be read) stops the replica at once (138).
    FailFast,
    /// `--unhealthy-node wait`: wait until the node is healthy.
    Wait,
}

/// Something that happened, as the event loop saw it.
#[derive(Debug, Clone)]
pub enum Input {
    /// A signal other than SIGCHLD reached rankvisor.
    Signal {
        /// The signal.
        signal: Signo,
        /// rankvisor raised it itself (its own broken pipe).
        own: bool,
    },
    /// News of the child's process for its supervisor: `Exited` (the reaper collected a process,
    /// the child or anyone else), `Spawned` or `SpawnFailed`.
    Child(Event),
    /// A deadline may have passed.
    Tick,
    /// The relay thread has relayed and evaluated what the child's stdout held when asked
    /// (`Effect::DrainOutput`), or the output ended.
    OutputDrained,
    /// The heartbeat file was touched at `at`.
    Beat {
        /// When.
        at: Instant,
    },
    /// The node-health source's latest word.
    Health(Observation),
    /// The rendezvous link's news.
    Link(LinkEvent),
    /// While sweeping: how many processes are still alive below rankvisor.
    Descendants {
        /// The count.
        alive: usize,
    },
    /// The processes below rankvisor, asked for by `Effect::ScanTree` and polled while a
    /// shutdown's order waits on helpers; an error when /proc cannot be read.
    Tree(Result<Tree, String>),
    /// An order from the HyperPod operator (agent mode).
    Agent(Order),
    /// A log rule fired on the running child's output (the first firing verdict of its attempt).
    LogRule(LogRuleHit),
}

/// A line worth logging, decided here so that tests see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// Progress.
    Info(String),
    /// Something went wrong but supervision goes on.
    Warn(String),
}

/// What the event loop must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Something for the child: signal its group, kill its leftovers, or write the termination
    /// message (its start is `Spawn`).
    Child(ChildAction),
    /// Start the attempt's child.
    Spawn(SpawnOrder),
    /// The child exited: relay and evaluate what its stdout holds, then report `OutputDrained`
    /// (at once when its output is not watched). Never waited on.
    DrainOutput,
    /// Start the rendezvous link (once the node's health is first known).
    StartLink,
    /// Ask the link to do something.
    Link(LinkCommand),
    /// Log a line.
    Note(Note),
    /// SIGTERM every process still below rankvisor, then report `Descendants`.
    SweepTerm,
    /// Read the processes below rankvisor (`process::tree_below`), then report `Tree`.
    ScanTree,
    /// Send `signal` to each of these processes (one that ended meanwhile is skipped).
    SignalEach {
        /// The processes.
        pids: Vec<nix::unistd::Pid>,
        /// The signal.
        signal: Signo,
    },
    /// SIGKILL every process still below rankvisor, then report `Descendants`.
    SweepKill,
    /// Processes below rankvisor outlived SIGKILL and are given up on: log `message` and add it
    /// to the termination message, each such process named with its state and wait channel
    /// (from /proc, read by the loop).
    NameStuck {
        /// What was given up, without the processes.
        message: String,
    },
    /// Exit with `code`: nothing is left to do.
    Exit {
        /// rankvisor's exit status.
        code: i32,
    },
}

/// Where the node-health gate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    /// No source: always healthy.
    Off,
    /// No verdict yet (the Kubernetes API may take a while).
    Unknown,
    /// Healthy, or the child already started.
    Open,
    /// Unhealthy before the first start, `--unhealthy-node wait`.
    Waiting,
}

/// The rendezvous gate before the first start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// No rendezvous.
    None,
    /// The link is not started yet (it starts once health is known).
    NotStarted,
    /// The first barrier runs.
    Pending,
    /// Released.
    Passed,
}

/// Where the replica is once its child is done for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Still supervising.
    No,
    /// Master, job scope: the child succeeded; the control channel stays for the workers.
    Lingering {
        /// The exit status to return.
        code: i32,
        /// When to stop waiting.
        until: Instant,
    },
    /// TERM went to the leftovers; KILL at `deadline` (or, once `killed`, give up waiting then,
    /// naming those left).
    Sweeping {
        /// The exit status to return.
        code: i32,
        /// The next step's time.
        deadline: Instant,
        /// SIGKILL went out.
        killed: bool,
    },
    /// Exit was decided.
    Done,
}

/// A child's exit waiting for its output to be drained through the log rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HeldExit {
    pid: nix::unistd::Pid,
    how: crate::exit::ExitHow,
    /// The exit goes on without the rest of the output then.
    until: Instant,
}

/// Agent mode: an attempt is over only once its whole tree is gone (a `setsid` grandchild still
/// holds the GPU memory and ports READY says are free). TERM went to every process below
/// rankvisor; KILL at `deadline`; READY once none is left (or, after the KILL, at `deadline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Clearing {
    deadline: Instant,
    killed: bool,
}

/// The replica: its child's supervisor and everything around it.
#[derive(Debug, Clone)]
pub struct Replica {
    sup: Supervisor,
    cfg: ReplicaConfig,
    health: Health,
    gate: Gate,
    /// Worker: a link command to send once the child is gone.
    after_child: Option<LinkCommand>,
    /// Master: every worker has finished or disconnected.
    workers_done: bool,
    /// The first TERM/INT fixed the shutdown deadline.
    shutdown_deadline: Option<Instant>,
    /// The shutdown's order while it waits on processes (programs first, helpers once their
    /// parent is gone), until the shutdown deadline.
    shutdown_order: Option<ShutdownOrder>,
    /// `--checkpoint-signal`: the training process got it; the programs below it get it at the
    /// next look at the tree (never its forked helpers).
    checkpoint_order: Option<ShutdownOrder>,
    end: End,
    /// The current attempt's stdout goes through the log rules (its spawn carried rules).
    output_watched: bool,
    /// The child's exit, held until its output is drained or `until`.
    held_exit: Option<HeldExit>,
    /// Agent mode: the last attempt's escapees are being swept before READY.
    clearing: Option<Clearing>,
    /// Agent mode's own state (`Mode::Agent`, from the start on).
    agent: Option<AgentMode>,
}

/// Agent mode's state: the agent's record, the operator's last assignment, the last attempt's
/// exit status.
#[derive(Debug, Clone)]
struct AgentMode {
    record: AgentRecord,
    /// The current (or next) attempt's assignment.
    assignment: Option<Assignment>,
    /// `/status`'s rank: the last `/start`'s, kept when its transition is refused.
    assigned_rank: Option<i64>,
    last_code: Option<i32>,
}

mod attempts;

impl Replica {
    /// A replica that has done nothing yet; `start` returns its first effects.
    pub fn new(cfg: ReplicaConfig) -> Self {
        let health = if cfg.health_gate == HealthGate::Off { Health::Off } else { Health::Unknown };
        let gate = if cfg.mode.link().is_some() { Gate::NotStarted } else { Gate::None };
        Self {
            sup: Supervisor::new(cfg.supervisor),
            cfg,
            health,
            gate,
            after_child: None,
            workers_done: false,
            shutdown_deadline: None,
            shutdown_order: None,
            checkpoint_order: None,
            end: End::No,
            output_watched: false,
            held_exit: None,
            clearing: None,
            agent: None,
        }
    }

    /// The first effects: start the link and the child when nothing holds them back.
    #[must_use = "the effects are the loop's to perform"]
    pub fn start(&mut self, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.cfg.mode == Mode::Agent {
            self.agent = Some(AgentMode {
                record: AgentRecord::new(now),
                assignment: None,
                assigned_rank: None,
                last_code: None,
            });
        }
        if self.health == Health::Off {
            self.open_link(&mut out);
        }
        self.maybe_start(now, &mut out);
        out
    }

    /// The child's supervisor (its phase, counters, last exit).
    pub fn supervisor(&self) -> &Supervisor {
        &self.sup
    }

    /// The state to report: the child's, or what holds its first start back.
    pub fn state(&self) -> ReplicaState {
        match self.sup.state() {
            ReplicaState::Pending if self.health == Health::Waiting => ReplicaState::NodeUnhealthy,
            ReplicaState::Pending if self.gate == Gate::Pending => ReplicaState::Rendezvous,
            s => s,
        }
    }

    /// True while leftovers are being swept (the loop polls `Descendants` then).
    pub fn sweeping(&self) -> bool {
        matches!(self.end, End::Sweeping { .. }) || self.clearing.is_some()
    }

    /// True while a shutdown's order waits on processes (the loop brings `Tree` every few tens
    /// of milliseconds then, and after every reaped process).
    pub fn ordering(&self) -> bool {
        self.shutdown_order.is_some()
    }

    /// True once the machine decided to exit.
    pub fn done(&self) -> bool {
        self.end == End::Done
    }

    /// When the loop must come back with `Tick`.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.end {
            End::Lingering { until, .. } => Some(until),
            End::Sweeping { deadline, .. } => Some(deadline),
            End::Done => None,
            End::No => {
                let held = self.held_exit.map(|h| h.until);
                let clearing = self.clearing.map(|c| c.deadline);
                [self.sup.next_deadline(), held, clearing].into_iter().flatten().min()
            }
        }
    }

    /// Decide what to do about `input`, which happened at `now`.
    #[must_use = "the effects are the loop's to perform"]
    pub fn on_input(&mut self, input: Input, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        match input {
            Input::Signal { signal, own } => self.on_signal(signal, own, now, &mut out),
            Input::Child(Event::Exited { pid, how }) if self.output_watched && self.sup.child_pid() == Some(pid) => {
                // Its last lines may fire a rule that names this exit: decided once they are in.
                self.output_watched = false;
                self.held_exit = Some(HeldExit { pid, how, until: now + DRAIN_WAIT });
                out.push(Effect::DrainOutput);
            }
            Input::Child(event) => {
                self.feed(event, now, &mut out);
                self.after_child_gone(&mut out);
            }
            Input::OutputDrained => self.release_exit(now, &mut out),
            Input::Tick => {
                // The grace is over: what is left is KILLed (the child's group here, the rest by
                // the sweep), in no order.
                if self.shutdown_deadline.is_some_and(|d| now >= d) {
                    self.shutdown_order = None;
                }
                if self.held_exit.is_some_and(|h| now >= h.until) {
                    out.push(Effect::Note(Note::Warn(
                        "log rules: the child's last output is not evaluated yet (stdout is not being read); its exit goes on without it".into(),
                    )));
                    self.release_exit(now, &mut out);
                }
                self.on_clearing_tick(now, &mut out);
                self.on_tick(now, &mut out);
            }
            Input::Beat { at } => {
                // A beat before the child started (its file's old time) is its start.
                let at = match self.sup.phase() {
                    Phase::Running { started, .. } | Phase::Stopping { started, .. } => at.max(*started),
                    _ => at,
                };
                self.feed(Event::Beat, at, &mut out);
            }
            Input::Health(obs) => self.on_health(obs, now, &mut out),
            Input::Link(ev) => self.on_link(ev, now, &mut out),
            Input::Descendants { alive } => {
                if let (0, End::Sweeping { code, .. }) = (alive, self.end) {
                    self.finish(code, &mut out);
                } else if alive == 0 && self.end == End::No && self.clearing.is_some() {
                    self.attempt_cleared(now);
                }
            }
            Input::Tree(tree) => self.on_tree(tree, &mut out),
            Input::Agent(order) => self.on_order(order, now, &mut out),
            Input::LogRule(hit) if self.agent.is_some() => self.agent_log_fault(hit, now, &mut out),
            Input::LogRule(hit) => {
                if matches!(self.sup.phase(), Phase::Running { .. }) {
                    out.push(Effect::Note(Note::Warn(format!("{}: stopping the child", hit.describe()))));
                }
                self.feed(Event::LogRule(hit), now, &mut out);
            }
        }
        out
    }

    /// The held exit, if any, goes to the supervisor now.
    fn release_exit(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if let Some(HeldExit { pid, how, .. }) = self.held_exit.take() {
            self.feed(Event::Exited { pid, how }, now, out);
            self.after_child_gone(out);
        }
    }

    fn on_signal(&mut self, sig: Signo, own: bool, now: Instant, out: &mut Vec<Effect>) {
        if sig.is_shutdown() {
            if self.agent_idle_shutdown(sig, now, out) {
                return;
            }
            match self.end {
                End::No => {
                    out.push(Effect::Note(Note::Info(format!("{} received; stopping the child", sig.name()))));
                    self.shutdown_deadline.get_or_insert(now + self.cfg.supervisor.grace);
                    self.feed(Event::Shutdown { signal: sig }, now, out);
                }
                End::Lingering { code, .. } => {
                    out.push(Effect::Note(Note::Info("stopped while waiting for the workers".into())));
                    self.sweep(code, now, out);
                }
                End::Sweeping { .. } | End::Done => {}
            }
            return;
        }
        // rankvisor's own broken pipe is not the child's business; one another process sent is.
        if own {
            return;
        }
        if let Some(pid) = self.sup.child_pid() {
            out.push(Effect::Child(ChildAction::SignalGroup { pid, signal: sig }));
        }
    }

    fn on_tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        match self.end {
            End::No => self.feed(Event::Tick, now, out),
            End::Lingering { code, until } if now >= until => {
                let limit = self.cfg.mode.linger().unwrap_or_default();
                out.push(Effect::Note(Note::Warn(format!(
                    "workers still running after {limit:?}; closing the control channel"
                ))));
                self.sweep(code, now, out);
            }
            End::Sweeping { code, deadline, killed: false } if now >= deadline => {
                self.shutdown_order = None;
                out.push(Effect::SweepKill);
                self.end = End::Sweeping { code, deadline: now + KILL_WAIT, killed: true };
            }
            End::Sweeping { code, deadline, killed: true } if now >= deadline => {
                let message = format!("processes below rankvisor outlived SIGKILL by {KILL_WAIT:?}; gave up waiting");
                out.push(Effect::NameStuck { message });
                self.finish(code, out);
            }
            _ => {}
        }
    }

    fn on_health(&mut self, obs: Observation, now: Instant, out: &mut Vec<Effect>) {
        let first = self.health == Health::Unknown;
        match &obs {
            Ok(v) if v.healthy => {
                if matches!(self.health, Health::Waiting | Health::Unknown) {
                    if self.health == Health::Waiting {
                        out.push(Effect::Note(Note::Info("node healthy".into())));
                    }
                    self.health = Health::Open;
                }
            }
            // Fail closed: a source that cannot be read before the start is an unhealthy node.
            _ if first || self.health == Health::Waiting => {
                let give_up = give_up_for(&obs);
                if self.cfg.health_gate == HealthGate::Wait {
                    let already = self.health == Health::Waiting;
                    self.health = Health::Waiting;
                    self.explain_unhealthy(&give_up.message);
                    if !already || obs.is_ok() {
                        let what = if already { "still waiting" } else { "waiting for the node to become healthy" };
                        out.push(Effect::Note(Note::Warn(format!("{}; {what}", give_up.message))));
                    }
                } else {
                    self.health = Health::Open;
                    self.feed(Event::GiveUp(give_up), now, out);
                }
            }
            Ok(_) => self.feed(Event::GiveUp(give_up_for(&obs)), now, out),
            // A glitch reading the source never stops a running job.
            Err(e) => out.push(Effect::Note(Note::Warn(format!(
                "cannot read the node's health, keeping the last verdict: {e}"
            )))),
        }
        if first {
            self.open_link(out);
        }
        self.maybe_start(now, out);
    }

    fn open_link(&mut self, out: &mut Vec<Effect>) {
        if self.gate == Gate::NotStarted && self.end == End::No && !self.finished() {
            self.gate = Gate::Pending;
            out.push(Effect::StartLink);
        }
    }

    fn finished(&self) -> bool {
        matches!(self.sup.phase(), Phase::Finished { .. })
    }

    fn on_link(&mut self, ev: LinkEvent, now: Instant, out: &mut Vec<Effect>) {
        match ev {
            LinkEvent::Released { generation } => {
                if self.gate == Gate::Pending {
                    self.gate = Gate::Passed;
                    self.feed(Event::Released { generation }, now, out);
                    self.maybe_start(now, out);
                } else {
                    out.push(Effect::Note(Note::Info(format!("rendezvous: released generation {generation}"))));
                    self.feed(Event::Released { generation }, now, out);
                }
            }
            LinkEvent::Failed { message } => {
                self.feed(Event::GiveUp(GiveUp { state: ReplicaState::Failed, message }), now, out);
            }
            LinkEvent::RejoinAsked { generation } => self.on_rejoin_asked(generation, now, out),
            // The loop's, for the status: nothing to decide.
            LinkEvent::JobStacks(_) | LinkEvent::StragglerNamed(_) => {}
            LinkEvent::WorkersDone(done) => {
                self.workers_done = done;
                if let (true, End::Lingering { code, .. }) = (done, self.end) {
                    out.push(Effect::Note(Note::Info("every worker has finished".into())));
                    self.sweep(code, now, out);
                }
            }
            LinkEvent::OrderRestart { generation } => {
                if generation <= self.sup.target_generation() {
                    return;
                }
                self.feed(Event::NewGeneration { generation }, now, out);
                self.after_child = Some(LinkCommand::Rejoin { generation });
                self.after_child_gone(out);
            }
            LinkEvent::Checkpoint { reason } => self.on_job_checkpoint(&reason, now, out),
            LinkEvent::Straggler { reason } => self.on_straggler(reason, now, out),
            LinkEvent::OrderStop { reason } => {
                let message = format!("stopped by the master: {reason}");
                self.feed(Event::GiveUp(GiveUp { state: ReplicaState::Failed, message }), now, out);
            }
            // Training goes on: the job follows the master, and the pods are kept (seed 000).
            LinkEvent::MasterFinished { reason } => {
                out.push(Effect::Note(Note::Info(format!("rendezvous: {reason}; the control channel is closed"))));
            }
            ev @ (LinkEvent::MasterLost { .. } | LinkEvent::Reconnected { .. } | LinkEvent::ReconnectFailed { .. }) => {
                self.on_master_link(ev, now, out);
            }
        }
    }

    /// The master's connection lost, regained or given up: per the restart scope.
    fn on_master_link(&mut self, ev: LinkEvent, now: Instant, out: &mut Vec<Effect>) {
        let scope = self.cfg.supervisor.scope;
        match ev {
            LinkEvent::MasterLost { reason } => match scope {
                // The seed's behaviour: workers outlive the master; keep training, and meet a
                // recreated master when it comes back.
                RestartScope::Replica => {
                    out.push(Effect::Note(Note::Warn(format!(
                        "rendezvous: lost the master ({reason}); training continues; reconnecting"
                    ))));
                    out.push(Effect::Link(LinkCommand::Reconnect));
                }
                // torchrun's behaviour: the worker group stops and meets again.
                RestartScope::Job => {
                    out.push(Effect::Note(Note::Warn(format!(
                        "rendezvous: lost the master ({reason}); stopping the child and waiting for a new generation"
                    ))));
                    self.feed(Event::NewGeneration { generation: self.sup.target_generation() + 1 }, now, out);
                    self.after_child = Some(LinkCommand::Reconnect);
                    self.after_child_gone(out);
                }
            },
            LinkEvent::Reconnected { generation } => match scope {
                RestartScope::Replica => {
                    out.push(Effect::Note(Note::Info("rendezvous: reconnected to the master".into())));
                }
                RestartScope::Job => {
                    self.feed(Event::Released { generation }, now, out);
                }
            },
            LinkEvent::ReconnectFailed { message } => match scope {
                RestartScope::Replica => out.push(Effect::Note(Note::Warn(format!(
                    "rendezvous: could not reconnect to the master: {message}; training continues"
                )))),
                RestartScope::Job => {
                    let message = format!("lost the master and could not rejoin: {message}");
                    self.feed(Event::GiveUp(GiveUp { state: ReplicaState::Failed, message }), now, out);
                }
            },
            _ => {}
        }
    }

    /// `--straggler-action restart`: the master named this replica a straggler; its child is
    /// stopped and started again at once (only this replica).
    fn on_straggler(&mut self, reason: String, now: Instant, out: &mut Vec<Effect>) {
        if matches!(self.sup.phase(), Phase::Running { .. }) {
            let why = crate::untrusted::escape(&reason);
            out.push(Effect::Note(Note::Warn(format!("rendezvous: {why}; restarting the child"))));
        }
        self.feed(Event::Straggler { reason }, now, out);
    }

    /// The master's fan-out (`--checkpoint-signal`): a replica is being stopped and the job saves.
    fn on_job_checkpoint(&mut self, reason: &str, now: Instant, out: &mut Vec<Effect>) {
        if self.cfg.supervisor.checkpoint.is_some() && matches!(self.sup.phase(), Phase::Running { .. }) {
            let reason = crate::untrusted::escape(reason);
            out.push(Effect::Note(Note::Info(format!("rendezvous: {reason}; the job saves its checkpoint"))));
        }
        self.feed(Event::Checkpoint, now, out);
    }

    /// Master: a worker asks for a new generation.
    fn on_rejoin_asked(&mut self, generation: u64, now: Instant, out: &mut Vec<Effect>) {
        if self.cfg.supervisor.scope == RestartScope::Replica {
            out.push(Effect::Note(Note::Warn(format!(
                "rendezvous: refused a request for generation {generation}: the restart scope is replica"
            ))));
            return;
        }
        let current = self.sup.target_generation();
        if generation <= current {
            return;
        }
        if generation != current + 1 {
            out.push(Effect::Note(Note::Warn(format!(
                "rendezvous: refused a request for generation {generation}: expected {}",
                current + 1
            ))));
            return;
        }
        self.new_generation(generation, now, out);
    }

    /// Master: move the job to `generation`, or, once the master's own child is over, stop the
    /// workers (the job follows the master: a new generation would have no rank 0 to meet).
    fn new_generation(&mut self, generation: u64, now: Instant, out: &mut Vec<Effect>) {
        if let Phase::Finished { state, .. } = self.sup.phase() {
            out.push(Effect::Note(Note::Warn(
                "rendezvous: a new generation was asked for after the master finished; stopping the workers".into(),
            )));
            let reason =
                format!("the job is over (the master's training process {state:?}); no generation {generation}");
            out.push(Effect::Link(LinkCommand::StopWorkers { reason }));
            return;
        }
        // The supervisor holds the generation the job moves to (its child's stop, then its wait).
        self.feed(Event::NewGeneration { generation }, now, out);
        out.push(Effect::Link(LinkCommand::Barrier { generation }));
    }

    /// Feed the child's supervisor: its actions become effects, then its outcome is decided on.
    fn feed(&mut self, event: Event, now: Instant, out: &mut Vec<Effect>) {
        let pid = self.sup.child_pid();
        let steps = self.sup.on_event(event, now);
        let attempt_goes_on = self.attempt_goes_on();
        for action in steps.actions {
            let effect = match action {
                // Agent mode: an attempt's end is news for the operator, not why rankvisor exits.
                ChildAction::TerminationMessage(m) if attempt_goes_on => Effect::Note(Note::Warn(m)),
                ChildAction::Spawn { restart_count, generation } => {
                    Effect::Spawn(self.spawn_order(restart_count, generation))
                }
                // A shutdown: the child gets the signal at once (it always does first: no wait on
                // /proc), then a new order (a second signal starts over) looks at the tree.
                ChildAction::SignalPrograms { pid, signal } => {
                    let mut order = ShutdownOrder::new(signal);
                    order.signalled_already(pid);
                    self.shutdown_order = Some(order);
                    out.push(Effect::SignalEach { pids: vec![pid], signal });
                    Effect::ScanTree
                }
                ChildAction::Checkpoint { pid, signal } => {
                    let mut order = ShutdownOrder::new(signal);
                    order.signalled_already(pid);
                    self.checkpoint_order = Some(order);
                    out.push(Effect::Note(Note::Info(format!(
                        "{} to the training process and the programs below it: the job saves its checkpoint",
                        signal.name()
                    ))));
                    out.push(Effect::SignalEach { pids: vec![pid], signal });
                    Effect::ScanTree
                }
                a => Effect::Child(a),
            };
            out.push(effect);
        }
        match steps.outcome {
            Some(ChildOutcome::Exit { code }) if self.agent.is_some() => self.attempt_done(code, pid, now, out),
            Some(ChildOutcome::RequestGeneration) => self.request_generation(now, out),
            Some(ChildOutcome::Exit { code }) => self.child_done(code, now, out),
            Some(ChildOutcome::Unkillable { pid, code }) => self.unkillable(pid, code, out),
            None => {}
        }
    }

    /// The attempt's start: its counters, its rules (`/start`'s, else `--log-rules`), and in
    /// agent mode the operator's assignment as environment.
    fn spawn_order(&mut self, restart_count: u32, generation: u64) -> SpawnOrder {
        let assignment = self.agent.as_ref().and_then(|a| a.assignment.as_ref());
        let own = assignment.and_then(|a| a.rules.rules.clone()).map(LogRules);
        let rules = own.or_else(|| self.cfg.log_rules.clone());
        let extra_env = assignment.map(Assignment::child_env).unwrap_or_default();
        self.output_watched = rules.is_some();
        SpawnOrder { restart_count, generation, rules, extra_env }
    }

    /// Job scope: this replica's child failed and the job must move on together.
    fn request_generation(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let next = self.sup.target_generation() + 1;
        match self.cfg.mode.link() {
            Some(Role::Master) => self.new_generation(next, now, out),
            Some(Role::Worker) => out.push(Effect::Link(LinkCommand::Rejoin { generation: next })),
            // No rendezvous (one replica): the generation is ours alone.
            None => self.feed(Event::Released { generation: next }, now, out),
        }
    }

    /// Worker: a command that waited for the child to be gone goes out now.
    fn after_child_gone(&mut self, out: &mut Vec<Effect>) {
        if self.sup.child_pid().is_none() {
            if let Some(cmd) = self.after_child.take() {
                out.push(Effect::Link(cmd));
            }
        }
    }

    /// The child is done for good with `code`.
    fn child_done(&mut self, code: i32, now: Instant, out: &mut Vec<Effect>) {
        self.after_child = None;
        let linger = match (self.cfg.mode.link(), self.cfg.mode.linger()) {
            (Some(Role::Master), Some(limit)) if code == 0 && !self.workers_done => Some(limit),
            _ => None,
        };
        match linger {
            Some(limit) if self.shutdown_deadline.is_none() => {
                out.push(Effect::Note(Note::Info(format!(
                    "the master's child succeeded; waiting for the workers to finish (at most {limit:?})"
                ))));
                self.end = End::Lingering { code, until: now + limit };
            }
            _ => self.sweep(code, now, out),
        }
    }

    /// The child outlived SIGKILL: nothing can be started beside it, and waiting longer ends
    /// nothing. Everything else below rankvisor is KILLed and rankvisor exits, naming what is
    /// stuck (whatever the mode: an agent's READY would offer a node whose process holds on).
    fn unkillable(&mut self, pid: nix::unistd::Pid, code: i32, out: &mut Vec<Effect>) {
        self.after_child = None;
        self.clearing = None;
        let message = format!("the child (pid {pid}) outlived SIGKILL by {KILL_WAIT:?}; gave up waiting");
        out.push(Effect::SweepKill);
        out.push(Effect::NameStuck { message });
        self.finish(code, out);
    }

    /// TERM every process still below us (group leftovers, setsid escapees), KILL at the deadline.
    fn sweep(&mut self, code: i32, now: Instant, out: &mut Vec<Effect>) {
        self.clearing = None;
        let grace = self.cfg.supervisor.grace;
        let deadline = self.shutdown_deadline.unwrap_or(now + grace).max(now + grace.min(Duration::from_secs(1)));
        self.end = End::Sweeping { code, deadline, killed: false };
        // A shutdown's order goes on: the processes left get the signal as their parent exits.
        if self.shutdown_order.is_some() && self.shutdown_deadline.is_some_and(|d| now < d) {
            out.push(Effect::ScanTree);
        } else {
            self.shutdown_order = None;
            out.push(Effect::SweepTerm);
        }
    }

    /// The tree below rankvisor, for the shutdown's order: who gets its signal now; the end of a
    /// sweep once nobody is left.
    fn on_tree(&mut self, tree: Result<Tree, String>, out: &mut Vec<Effect>) {
        // The checkpoint's one look: the programs below the training process, not its helpers.
        if let (Some(mut order), Ok(tree)) = (self.checkpoint_order.take(), &tree) {
            let pids = order.step(tree).now;
            if !pids.is_empty() {
                out.push(Effect::SignalEach { pids, signal: order.signal() });
            }
        }
        let Some(order) = self.shutdown_order.as_mut() else { return };
        let signal = order.signal();
        let tree = match tree {
            Ok(tree) => tree,
            // Fail closed: no order without the tree; everything gets the signal now (the child,
            // signalled already, a second time: the group cannot leave it out).
            Err(e) => {
                self.shutdown_order = None;
                out.push(Effect::Note(Note::Warn(format!(
                    "cannot read the processes below rankvisor ({e}); {} to the child's whole process group",
                    signal.name()
                ))));
                if let Some(pid) = self.sup.child_pid() {
                    out.push(Effect::Child(ChildAction::SignalGroup { pid, signal }));
                }
                if matches!(self.end, End::Sweeping { .. }) {
                    out.push(Effect::SweepTerm);
                }
                return;
            }
        };
        let pass = order.step(&tree);
        let (n, waiting) = (pass.now.len(), pass.waiting);
        if pass.first {
            // With the child, signalled before this look.
            let child = self.sup.child_pid();
            let n = n + usize::from(tree.members.iter().any(|m| Some(m.pid) == child));
            out.push(Effect::Note(Note::Info(format!(
                "{} to the child and the programs below it ({n} of the {} processes below rankvisor); {waiting} forked helpers get it once their parent has exited",
                signal.name(),
                tree.members.len()
            ))));
        } else if n > 0 {
            out.push(Effect::Note(Note::Info(format!(
                "{} to {n} processes whose parent has exited ({waiting} still wait)",
                signal.name()
            ))));
        }
        if n > 0 {
            out.push(Effect::SignalEach { pids: pass.now, signal });
        }
        if let (true, End::Sweeping { code, .. }) = (tree.members.is_empty(), self.end) {
            self.finish(code, out);
        }
    }

    fn finish(&mut self, code: i32, out: &mut Vec<Effect>) {
        self.end = End::Done;
        out.push(Effect::Exit { code });
    }

    /// Start the first child once nothing holds it back.
    fn maybe_start(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let health_ok = matches!(self.health, Health::Off | Health::Open);
        let gate_ok = matches!(self.gate, Gate::None | Gate::Passed);
        if health_ok && gate_ok && self.agent.is_some() {
            self.agent_ready(now);
        } else if health_ok && gate_ok && matches!(self.sup.phase(), Phase::Pending) && self.end == End::No {
            self.feed(Event::Start, now, out);
        }
    }
}

/// Why an observation keeps the child from running.
fn give_up_for(obs: &Observation) -> GiveUp {
    let message = match obs {
        Ok(v) => health::summary(v),
        Err(e) => format!("node health unknown, refusing to start: {e}"),
    };
    GiveUp { state: ReplicaState::NodeUnhealthy, message }
}

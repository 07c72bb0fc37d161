//! The supervisor's state machine: every event in, the actions to take out. No I/O, no clock: the
//! driver passes `now`, and asks `next_deadline` when to come back with a `Tick`.

use super::{BackoffConfig, RestartPolicy, RestartScope};
use crate::exit::{self, ExitHow};
use crate::status::ReplicaState;
use std::time::Duration;
use tokio::time::Instant;

/// Hang detection from a heartbeat file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HangConfig {
    /// A running child that does not beat for this long is hung.
    pub timeout: Duration,
    /// The allowance for the first beat after a start (model loading is slow).
    pub startup: Duration,
}

/// What the machine needs to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SupervisorConfig {
    /// When to restart.
    pub policy: RestartPolicy,
    /// The most restarts, under every policy.
    pub backoff_limit: u32,
    /// Delays between restarts.
    pub backoff: BackoffConfig,
    /// TERM -> KILL delay.
    pub grace: Duration,
    /// Hang detection, when a heartbeat file is configured.
    pub hang: Option<HangConfig>,
    /// Replica: restart this child after a backoff. Job: ask for a new generation of every
    /// replica's child instead, and restart only when it is released.
    pub scope: RestartScope,
}

/// A reason from outside the training program to stop for good (exit 138).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiveUp {
    /// The state to report (`NodeUnhealthy`, `Failed`).
    pub state: ReplicaState,
    /// One line for the termination log.
    pub message: String,
}

/// Why a running child is being stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopCause {
    /// TERM/INT reached rankvisor: stop, then exit with the child's status.
    Shutdown {
        /// The signal received.
        signal: i32,
    },
    /// No heartbeat: a failure, handed to the restart policy.
    Hung,
    /// An outside reason: exit 138.
    GiveUp(GiveUp),
    /// The job moves to a new generation: every replica's child stops and starts again together.
    NewGeneration {
        /// The generation to start once released.
        generation: u64,
    },
}

/// Where the supervised child is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Not started yet (gates, rendezvous).
    Pending,
    /// The child runs.
    Running {
        /// Its pid (also its process group).
        pid: i32,
        /// When it started.
        started: Instant,
    },
    /// The child was signalled and has until `deadline` before SIGKILL.
    Stopping {
        /// Its pid.
        pid: i32,
        /// When it started.
        started: Instant,
        /// When SIGKILL goes out.
        deadline: Instant,
        /// True once SIGKILL went out.
        killed: bool,
        /// Why.
        cause: StopCause,
    },
    /// Waiting to start the child again.
    Backoff {
        /// When to start it.
        until: Instant,
    },
    /// Job scope: the child is gone; waiting for the next generation's barrier to release us.
    AwaitingGeneration,
    /// Done; rankvisor exits with `code`.
    Finished {
        /// rankvisor's exit status.
        code: i32,
        /// What to report.
        state: ReplicaState,
    },
}

/// Something that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The gates passed: start the first child.
    Start,
    /// The child was started.
    Spawned {
        /// Its pid.
        pid: i32,
    },
    /// The child could not be started (126 or 127).
    SpawnFailed {
        /// 126 or 127.
        code: i32,
        /// Why, for the log and termination message.
        message: String,
        /// The machine's fault (EMFILE, ENFILE, EAGAIN, ENOMEM), not the command's: a failed run
        /// for the restart policy instead of a permanent 126, and when the policy or the backoff
        /// limit ends the retries, 138 (a reason outside the training program), not 126.
        transient: bool,
    },
    /// A reaped process: the child or anyone else.
    Exited {
        /// Its pid.
        pid: i32,
        /// How it ended.
        how: ExitHow,
    },
    /// TERM or INT reached rankvisor.
    Shutdown {
        /// Which.
        signal: i32,
    },
    /// The heartbeat file was touched.
    Beat,
    /// A deadline may have passed.
    Tick,
    /// Stop for good for an outside reason.
    GiveUp(GiveUp),
    /// Job scope: the job moves to `generation`; stop the child and wait to be released.
    NewGeneration {
        /// The new generation.
        generation: u64,
    },
    /// Job scope: the barrier of `generation` passed; start the child.
    Released {
        /// The released generation.
        generation: u64,
    },
}

/// What the driver must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start the child; it is the `restart_count`th restart.
    Spawn {
        /// Restarts before this start.
        restart_count: u32,
        /// The rendezvous generation it belongs to.
        generation: u64,
    },
    /// Job scope: this replica's child failed; ask the job for a new generation.
    RequestGeneration,
    /// Send `signal` to the child's process group.
    SignalGroup {
        /// Group leader's pid.
        pid: i32,
        /// The signal.
        signal: i32,
    },
    /// SIGKILL whatever is left of a finished child's process group before the next start, as a
    /// container runtime does when a container's main process exits.
    KillLeftovers {
        /// Group leader's pid.
        pid: i32,
    },
    /// Write this line to the termination log.
    TerminationMessage(String),
    /// Finish: sweep leftover processes and exit with `code`.
    Exit {
        /// rankvisor's exit status.
        code: i32,
    },
}

/// The supervisor: configuration, phase and counters.
#[derive(Debug, Clone)]
pub struct Supervisor {
    cfg: SupervisorConfig,
    phase: Phase,
    restarts: u32,
    backoff_step: u32,
    last_exit: Option<ExitHow>,
    last_exit_hung: bool,
    last_exit_generation_stop: bool,
    last_beat: Option<Instant>,
    hang_detections: u32,
    generation: u64,
    /// A generation released while our old child was still stopping: start it once that child is gone.
    early_release: Option<u64>,
}

impl Supervisor {
    /// A supervisor that has started nothing yet.
    pub fn new(cfg: SupervisorConfig) -> Self {
        Self {
            cfg,
            phase: Phase::Pending,
            restarts: 0,
            backoff_step: 0,
            last_exit: None,
            last_exit_hung: false,
            last_exit_generation_stop: false,
            last_beat: None,
            hang_detections: 0,
            generation: 0,
            early_release: None,
        }
    }

    /// The current phase.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Restarts made so far.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// How the last child ended.
    pub fn last_exit(&self) -> Option<ExitHow> {
        self.last_exit
    }

    /// True when the last child was stopped by hang detection (its exit's reason is `Hung`).
    pub fn last_exit_hung(&self) -> bool {
        self.last_exit_hung
    }

    /// The generation of the current (or last) child.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// True when the last child was stopped because the job moved to a new generation (not a failure).
    pub fn last_exit_generation_stop(&self) -> bool {
        self.last_exit_generation_stop
    }

    /// Hangs detected so far.
    pub fn hang_detections(&self) -> u32 {
        self.hang_detections
    }

    /// The child's pid while it runs or is being stopped.
    pub fn child_pid(&self) -> Option<i32> {
        match self.phase {
            Phase::Running { pid, .. } | Phase::Stopping { pid, .. } => Some(pid),
            _ => None,
        }
    }

    /// The state reported upstream.
    pub fn state(&self) -> ReplicaState {
        match &self.phase {
            Phase::Pending => ReplicaState::Pending,
            Phase::Running { .. } => ReplicaState::Running,
            Phase::Stopping { .. } => ReplicaState::Stopping,
            Phase::Backoff { .. } | Phase::AwaitingGeneration => ReplicaState::Restarting,
            Phase::Finished { state, .. } => *state,
        }
    }

    /// When the driver must come back with `Event::Tick`.
    pub fn next_deadline(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Backoff { until } => Some(*until),
            Phase::Stopping { deadline, killed: false, .. } => Some(*deadline),
            Phase::Running { started, .. } => self.hang_deadline(*started),
            _ => None,
        }
    }

    fn hang_deadline(&self, started: Instant) -> Option<Instant> {
        let hang = self.cfg.hang?;
        Some(match self.last_beat {
            Some(beat) => beat + hang.timeout,
            None => started + hang.startup,
        })
    }

    /// Decide what to do about `event`, which happened at `now`.
    pub fn on_event(&mut self, event: Event, now: Instant) -> Vec<Action> {
        match event {
            Event::Start => match self.phase {
                Phase::Pending => vec![Action::Spawn { restart_count: 0, generation: self.generation }],
                _ => vec![],
            },
            Event::Spawned { pid } => {
                self.phase = Phase::Running { pid, started: now };
                self.last_beat = None;
                vec![]
            }
            Event::SpawnFailed { code, message, transient: false } => self.finish(code, Some(message)),
            Event::SpawnFailed { code: _, message, transient: true } => self.on_transient_spawn_failure(message, now),
            Event::Exited { pid, how } => self.on_exit(pid, how, now),
            Event::Shutdown { signal } => self.on_shutdown(signal, now),
            Event::Beat => {
                if matches!(self.phase, Phase::Running { .. }) {
                    self.last_beat = Some(now);
                }
                vec![]
            }
            Event::Tick => self.on_tick(now),
            Event::GiveUp(give_up) => self.on_give_up(give_up, now),
            Event::NewGeneration { generation } => self.on_new_generation(generation, now),
            Event::Released { generation } => match &self.phase {
                Phase::AwaitingGeneration => {
                    self.generation = generation;
                    vec![Action::Spawn { restart_count: self.restarts, generation }]
                }
                Phase::Stopping { cause: StopCause::NewGeneration { generation: g }, .. } if *g == generation => {
                    self.early_release = Some(generation);
                    vec![]
                }
                _ => vec![],
            },
        }
    }

    fn on_new_generation(&mut self, generation: u64, now: Instant) -> Vec<Action> {
        if generation <= self.generation {
            return vec![];
        }
        match &mut self.phase {
            Phase::Running { pid, started } => {
                let (pid, started) = (*pid, *started);
                self.stop(pid, started, StopCause::NewGeneration { generation }, libc::SIGTERM, now)
            }
            Phase::Stopping { cause, .. } if matches!(cause, StopCause::Hung) => {
                *cause = StopCause::NewGeneration { generation };
                vec![]
            }
            Phase::Backoff { .. } => {
                self.phase = Phase::AwaitingGeneration;
                vec![]
            }
            _ => vec![],
        }
    }

    fn finish(&mut self, code: i32, message: Option<String>) -> Vec<Action> {
        let state = if code == 0 { ReplicaState::Succeeded } else { ReplicaState::Failed };
        self.finish_as(code, state, message)
    }

    fn finish_as(&mut self, code: i32, state: ReplicaState, message: Option<String>) -> Vec<Action> {
        self.phase = Phase::Finished { code, state };
        let mut actions: Vec<Action> = message.into_iter().map(Action::TerminationMessage).collect();
        actions.push(Action::Exit { code });
        actions
    }

    fn stop(&mut self, pid: i32, started: Instant, cause: StopCause, signal: i32, now: Instant) -> Vec<Action> {
        self.phase = Phase::Stopping { pid, started, deadline: now + self.cfg.grace, killed: false, cause };
        vec![Action::SignalGroup { pid, signal }]
    }

    fn on_shutdown(&mut self, signal: i32, now: Instant) -> Vec<Action> {
        match &mut self.phase {
            Phase::Pending => self.finish(
                128 + signal,
                Some(format!("stopped by {} before the child started", exit::signal_name(signal))),
            ),
            Phase::Running { pid, started } => {
                let (pid, started) = (*pid, *started);
                self.stop(pid, started, StopCause::Shutdown { signal }, signal, now)
            }
            Phase::Stopping { pid, cause, .. } => {
                // A second TERM keeps the first deadline; a hang or give-up stop becomes a shutdown,
                // except that a give-up keeps its 138.
                if !matches!(cause, StopCause::GiveUp(_)) {
                    *cause = StopCause::Shutdown { signal };
                }
                vec![Action::SignalGroup { pid: *pid, signal }]
            }
            Phase::Backoff { .. } | Phase::AwaitingGeneration => {
                let code = self.last_exit.map_or(128 + signal, ExitHow::code);
                let msg = format!(
                    "stopped by {} while waiting to restart; last child {}",
                    exit::signal_name(signal),
                    self.last_exit.map_or_else(|| "none".into(), |h| h.to_string())
                );
                self.finish(code, Some(msg))
            }
            Phase::Finished { .. } => vec![],
        }
    }

    fn on_give_up(&mut self, give_up: GiveUp, now: Instant) -> Vec<Action> {
        match &self.phase {
            Phase::Running { pid, started } => {
                let (pid, started) = (*pid, *started);
                self.stop(pid, started, StopCause::GiveUp(give_up), libc::SIGTERM, now)
            }
            Phase::Stopping { cause: StopCause::GiveUp(_), .. } => vec![],
            Phase::Stopping { pid, started, deadline, killed, .. } => {
                self.phase = Phase::Stopping {
                    pid: *pid,
                    started: *started,
                    deadline: *deadline,
                    killed: *killed,
                    cause: StopCause::GiveUp(give_up),
                };
                vec![]
            }
            Phase::Pending | Phase::Backoff { .. } | Phase::AwaitingGeneration => {
                self.finish_as(exit::EXTERNAL_FAILURE, give_up.state, Some(give_up.message))
            }
            Phase::Finished { .. } => vec![],
        }
    }

    fn on_tick(&mut self, now: Instant) -> Vec<Action> {
        match &mut self.phase {
            Phase::Backoff { until } if now >= *until => {
                vec![Action::Spawn { restart_count: self.restarts, generation: self.generation }]
            }
            Phase::Stopping { pid, deadline, killed: killed @ false, .. } if now >= *deadline => {
                *killed = true;
                vec![Action::SignalGroup { pid: *pid, signal: libc::SIGKILL }]
            }
            Phase::Running { pid, started } => {
                let (pid, started) = (*pid, *started);
                match self.hang_deadline(started) {
                    Some(d) if now >= d => {
                        self.hang_detections += 1;
                        self.stop(pid, started, StopCause::Hung, libc::SIGTERM, now)
                    }
                    _ => vec![],
                }
            }
            _ => vec![],
        }
    }

    fn on_exit(&mut self, pid: i32, how: ExitHow, now: Instant) -> Vec<Action> {
        let (started, cause) = match &self.phase {
            Phase::Running { pid: p, started } if *p == pid => (*started, None),
            Phase::Stopping { pid: p, started, cause, .. } if *p == pid => (*started, Some(cause.clone())),
            // Someone else's exit (an orphan the reaper collected): nothing to decide.
            _ => return vec![],
        };
        self.last_exit = Some(how);
        self.last_exit_hung = cause == Some(StopCause::Hung);
        self.last_exit_generation_stop = matches!(cause, Some(StopCause::NewGeneration { .. }));
        match cause {
            Some(StopCause::Shutdown { signal }) => {
                let msg = format!("stopped by {}: child {how}", exit::signal_name(signal));
                let code = how.code();
                if code == 0 {
                    self.finish(0, None)
                } else {
                    self.finish(code, Some(msg))
                }
            }
            Some(StopCause::GiveUp(g)) => self.finish_as(exit::EXTERNAL_FAILURE, g.state, Some(g.message)),
            Some(StopCause::Hung) => self.after_run(pid, how, true, started, now),
            Some(StopCause::NewGeneration { generation }) => {
                if self.restarts >= self.cfg.backoff_limit {
                    let msg = format!(
                        "child {how} when the job moved to generation {generation}; gave up after {} restarts (backoff limit {})",
                        self.restarts, self.cfg.backoff_limit
                    );
                    return self.finish(how.code(), Some(msg));
                }
                self.restarts += 1;
                self.phase = Phase::AwaitingGeneration;
                let mut actions = vec![Action::KillLeftovers { pid }];
                if let Some(g) = self.early_release.take().filter(|g| *g == generation) {
                    self.generation = g;
                    actions.push(Action::Spawn { restart_count: self.restarts, generation: g });
                }
                actions
            }
            None => self.after_run(pid, how, false, started, now),
        }
    }

    /// A start that failed for a reason outside the command (no descriptors, no memory): retried
    /// like a failure from outside the program, within the backoff limit. When the policy (Never)
    /// or the limit ends the retries, the exit is 138, the code for a reason outside the training
    /// program (Kubeflow's ExitCode policy retries it, maybe on a node with room), never the
    /// permanent 126 of a command that cannot be executed.
    fn on_transient_spawn_failure(&mut self, message: String, now: Instant) -> Vec<Action> {
        let failed = ExitHow::Exited(exit::EXTERNAL_FAILURE);
        if !self.cfg.policy.should_restart(failed, true) {
            let msg = format!(
                "{message} (the machine's fault, not the command's); restart policy {} does not restart it",
                self.cfg.policy
            );
            return self.finish(exit::EXTERNAL_FAILURE, Some(msg));
        }
        if self.restarts >= self.cfg.backoff_limit {
            let msg = format!(
                "{message} (the machine's fault, not the command's); gave up after {} restarts (backoff limit {})",
                self.restarts, self.cfg.backoff_limit
            );
            return self.finish(exit::EXTERNAL_FAILURE, Some(msg));
        }
        let delay = self.cfg.backoff.delay(self.backoff_step.max(1));
        self.backoff_step = self.backoff_step.saturating_add(1).max(2);
        self.restarts += 1;
        self.phase = Phase::Backoff { until: now + delay };
        vec![]
    }

    /// The restart decision for a child that ended on its own (or was stopped as hung).
    fn after_run(&mut self, pid: i32, how: ExitHow, hung: bool, started: Instant, now: Instant) -> Vec<Action> {
        let what = if hung {
            match (self.cfg.hang, self.last_beat) {
                (Some(h), Some(_)) => format!("child hung (no heartbeat within {:?}), then {how}", h.timeout),
                // It never beat: the startup allowance is what ran out.
                (Some(h), None) => {
                    format!("child hung (no first heartbeat within {:?} of its start), then {how}", h.startup)
                }
                (None, _) => format!("child hung, then {how}"),
            }
        } else {
            format!("child {how}")
        };
        // A hung child that exits 0 once stopped still failed: do not report success.
        let code = if hung && how.success() { exit::EXTERNAL_FAILURE } else { how.code() };
        if !self.cfg.policy.should_restart(how, hung) {
            let msg = (code != 0).then(|| format!("{what}; restart policy {} does not restart it", self.cfg.policy));
            return self.finish(code, msg);
        }
        if self.restarts >= self.cfg.backoff_limit {
            let msg =
                format!("{what}; gave up after {} restarts (backoff limit {})", self.restarts, self.cfg.backoff_limit);
            return self.finish(code, Some(msg));
        }
        let mut actions = vec![Action::KillLeftovers { pid }];
        if self.cfg.scope == RestartScope::Job {
            // torchrun's behaviour: the whole worker group restarts together, in a new generation.
            self.restarts += 1;
            self.phase = Phase::AwaitingGeneration;
            return vec![Action::KillLeftovers { pid }, Action::RequestGeneration];
        }
        if now.saturating_duration_since(started) >= self.cfg.backoff.reset {
            self.backoff_step = 0;
        }
        let delay = self.cfg.backoff.delay(self.backoff_step);
        self.backoff_step = self.backoff_step.saturating_add(1);
        self.restarts += 1;
        self.phase = Phase::Backoff { until: now + delay };
        if delay.is_zero() {
            actions.push(Action::Spawn { restart_count: self.restarts, generation: self.generation });
        }
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervise::RestartPolicy::*;
    use libc::{SIGINT, SIGKILL, SIGTERM};

    const MS: Duration = Duration::from_millis(1);

    fn cfg(policy: RestartPolicy, limit: u32) -> SupervisorConfig {
        SupervisorConfig {
            policy,
            backoff_limit: limit,
            backoff: BackoffConfig { initial: 200 * MS, max: 800 * MS, reset: 10_000 * MS },
            grace: 1000 * MS,
            hang: None,
            scope: RestartScope::Replica,
        }
    }

    /// Drives a supervisor through paused tokio time, as the real driver does.
    struct Harness {
        sup: Supervisor,
        next_pid: i32,
        spawns: Vec<(Instant, u32)>,
        signals: Vec<(i32, i32)>,
        messages: Vec<String>,
        exit: Option<i32>,
        generations: Vec<u64>,
        requests: u32,
    }

    impl Harness {
        fn new(cfg: SupervisorConfig) -> Self {
            Self {
                sup: Supervisor::new(cfg),
                next_pid: 100,
                spawns: vec![],
                signals: vec![],
                messages: vec![],
                exit: None,
                generations: vec![],
                requests: 0,
            }
        }

        fn send(&mut self, ev: Event) {
            let actions = self.sup.on_event(ev, Instant::now());
            for a in actions {
                match a {
                    Action::RequestGeneration => self.requests += 1,
                    Action::Spawn { restart_count, generation } => {
                        self.spawns.push((Instant::now(), restart_count));
                        self.generations.push(generation);
                        self.next_pid += 1;
                        let pid = self.next_pid;
                        self.send(Event::Spawned { pid });
                    }
                    Action::SignalGroup { pid, signal } => self.signals.push((pid, signal)),
                    Action::KillLeftovers { .. } => {}
                    Action::TerminationMessage(m) => self.messages.push(m),
                    Action::Exit { code } => self.exit = Some(code),
                }
            }
        }

        fn pid(&self) -> i32 {
            self.sup.child_pid().expect("a child runs")
        }

        fn exit_child(&mut self, how: ExitHow) {
            let pid = self.pid();
            self.send(Event::Exited { pid, how });
        }

        /// After a failure: wait out the backoff, if any (the first restart is immediate), and
        /// return how long that was.
        async fn restart(&mut self) -> Duration {
            if matches!(self.sup.phase(), Phase::Backoff { .. }) {
                self.advance_to_deadline().await
            } else {
                Duration::ZERO
            }
        }

        /// Advance paused time to the next deadline and tick.
        async fn advance_to_deadline(&mut self) -> Duration {
            let d = self.sup.next_deadline().expect("a deadline");
            let wait = d.saturating_duration_since(Instant::now());
            tokio::time::advance(wait).await;
            self.send(Event::Tick);
            wait
        }
    }

    #[tokio::test(start_paused = true)]
    async fn on_failure_limit_3_runs_4_times_and_keeps_the_code() {
        let mut h = Harness::new(cfg(OnFailure, 3));
        h.send(Event::Start);
        let mut waits = vec![];
        for _ in 0..3 {
            h.exit_child(ExitHow::Exited(3));
            waits.push(h.restart().await);
        }
        h.exit_child(ExitHow::Exited(3));
        assert_eq!(h.spawns.len(), 4);
        assert_eq!(h.spawns.iter().map(|s| s.1).collect::<Vec<_>>(), [0, 1, 2, 3]);
        // The kubelet's crash-loop timing: the first restart at once, then initial, doubling.
        assert_eq!(waits, [Duration::ZERO, 200 * MS, 400 * MS]);
        assert_eq!(h.exit, Some(3));
        assert_eq!(h.sup.state(), ReplicaState::Failed);
        assert_eq!(h.messages, ["child exited with code 3; gave up after 3 restarts (backoff limit 3)"]);
    }

    #[tokio::test(start_paused = true)]
    async fn never_runs_once() {
        let mut h = Harness::new(cfg(Never, 6));
        h.send(Event::Start);
        h.exit_child(ExitHow::Exited(1));
        assert_eq!(h.spawns.len(), 1);
        assert_eq!(h.exit, Some(1));
        assert_eq!(h.messages, ["child exited with code 1; restart policy Never does not restart it"]);
        let mut ok = Harness::new(cfg(Never, 6));
        ok.send(Event::Start);
        ok.exit_child(ExitHow::Exited(0));
        assert_eq!(ok.exit, Some(0));
        assert_eq!(ok.sup.state(), ReplicaState::Succeeded);
        assert!(ok.messages.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn exit_code_policy_retries_138_and_stops_on_1() {
        let mut h = Harness::new(cfg(ExitCode, 6));
        h.send(Event::Start);
        h.exit_child(ExitHow::Exited(138));
        h.restart().await;
        h.exit_child(ExitHow::Signaled(SIGKILL));
        h.restart().await;
        h.exit_child(ExitHow::Exited(1));
        assert_eq!(h.spawns.len(), 3);
        assert_eq!(h.exit, Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn always_restarts_after_success() {
        let mut h = Harness::new(cfg(Always, 2));
        h.send(Event::Start);
        h.exit_child(ExitHow::Exited(0));
        h.restart().await;
        h.exit_child(ExitHow::Exited(0));
        h.restart().await;
        h.exit_child(ExitHow::Exited(0));
        assert_eq!(h.spawns.len(), 3);
        assert_eq!(h.exit, Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn success_on_third_run_ends_with_zero() {
        let mut h = Harness::new(cfg(OnFailure, 6));
        h.send(Event::Start);
        h.exit_child(ExitHow::Exited(1));
        h.restart().await;
        h.exit_child(ExitHow::Signaled(SIGKILL));
        h.restart().await;
        h.exit_child(ExitHow::Exited(0));
        assert_eq!(h.spawns.len(), 3);
        assert_eq!(h.exit, Some(0));
        assert_eq!(h.sup.state(), ReplicaState::Succeeded);
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_caps_then_resets_after_healthy_running() {
        let mut h = Harness::new(cfg(OnFailure, 100));
        h.send(Event::Start);
        let mut waits = vec![];
        for _ in 0..6 {
            h.exit_child(ExitHow::Exited(1));
            waits.push(h.restart().await);
        }
        assert_eq!(waits, [Duration::ZERO, 200 * MS, 400 * MS, 800 * MS, 800 * MS, 800 * MS]);
        // Healthy for the reset period: the next restart is immediate again, then the initial delay.
        tokio::time::advance(10_000 * MS).await;
        h.exit_child(ExitHow::Exited(1));
        assert_eq!(h.restart().await, Duration::ZERO);
        h.exit_child(ExitHow::Exited(1));
        assert_eq!(h.restart().await, 200 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_backoff_restarts_at_once_then_at_the_floor() {
        let mut c = cfg(OnFailure, 5);
        c.backoff.initial = Duration::ZERO;
        let mut h = Harness::new(c);
        h.send(Event::Start);
        h.exit_child(ExitHow::Exited(1));
        assert_eq!(h.spawns.len(), 2);
        assert_eq!(h.sup.state(), ReplicaState::Running);
        h.exit_child(ExitHow::Exited(1));
        assert_eq!(h.restart().await, super::super::backoff::MIN_DELAY, "no spinning with --backoff-initial 0s");
    }

    #[tokio::test(start_paused = true)]
    async fn term_forwards_then_kills_after_grace() {
        let mut h = Harness::new(cfg(OnFailure, 6));
        h.send(Event::Start);
        let pid = h.pid();
        h.send(Event::Shutdown { signal: SIGTERM });
        assert_eq!(h.signals, [(pid, SIGTERM)]);
        assert_eq!(h.sup.state(), ReplicaState::Stopping);
        assert_eq!(h.advance_to_deadline().await, 1000 * MS);
        assert_eq!(h.signals, [(pid, SIGTERM), (pid, SIGKILL)]);
        assert_eq!(h.sup.next_deadline(), None);
        h.exit_child(ExitHow::Signaled(SIGKILL));
        assert_eq!(h.exit, Some(137));
        assert_eq!(h.spawns.len(), 1, "no restart after a shutdown");
        assert_eq!(h.messages, ["stopped by SIGTERM: child killed by signal 9 (SIGKILL)"]);
    }

    #[tokio::test(start_paused = true)]
    async fn preempted_child_exits_143_and_a_trapping_child_keeps_its_code() {
        let mut h = Harness::new(cfg(OnFailure, 6));
        h.send(Event::Start);
        h.send(Event::Shutdown { signal: SIGTERM });
        h.exit_child(ExitHow::Signaled(SIGTERM));
        assert_eq!(h.exit, Some(143));
        let mut t = Harness::new(cfg(OnFailure, 6));
        t.send(Event::Start);
        t.send(Event::Shutdown { signal: SIGINT });
        t.send(Event::Shutdown { signal: SIGTERM });
        t.exit_child(ExitHow::Exited(0));
        assert_eq!(t.exit, Some(0));
        assert_eq!(t.sup.state(), ReplicaState::Succeeded);
    }

    #[tokio::test(start_paused = true)]
    async fn term_during_backoff_exits_at_once_with_the_last_status() {
        let mut c = cfg(OnFailure, 6);
        c.backoff.initial = Duration::from_secs(10);
        let mut h = Harness::new(c);
        h.send(Event::Start);
        h.exit_child(ExitHow::Exited(4));
        h.exit_child(ExitHow::Exited(5));
        assert_eq!(h.sup.state(), ReplicaState::Restarting);
        h.send(Event::Shutdown { signal: SIGTERM });
        assert_eq!(h.exit, Some(5));
        assert_eq!(h.spawns.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn term_before_start() {
        let mut h = Harness::new(cfg(OnFailure, 6));
        h.send(Event::Shutdown { signal: SIGTERM });
        assert_eq!(h.exit, Some(143));
        assert!(h.spawns.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn spawn_failure_is_permanent() {
        let mut h = Harness::new(cfg(Always, 6));
        h.send(Event::SpawnFailed { code: 127, message: "command not found".into(), transient: false });
        assert_eq!(h.exit, Some(127));
        assert_eq!(h.messages, ["command not found"]);
    }

    /// Regression (issue 15): a transient start failure the policy or the limit does not retry
    /// exited 126, which Kubeflow's ExitCode policy treats as permanent.
    #[tokio::test(start_paused = true)]
    async fn transient_spawn_failure_that_is_not_retried_exits_138() {
        let emfile = || Event::SpawnFailed {
            code: 126,
            message: "cannot run \"train\": Too many open files (os error 24)".into(),
            transient: true,
        };
        let mut h = Harness::new(cfg(Never, 6));
        h.send(Event::Start);
        h.send(emfile());
        assert_eq!(h.exit, Some(exit::EXTERNAL_FAILURE), "Never: no retry, but not a permanent 126");
        assert_eq!(h.sup.state(), ReplicaState::Failed);
        assert!(h.messages[0].contains("Too many open files") && h.messages[0].contains("restart policy Never"));
        // The backoff limit reached by a failed start after a crash.
        let mut h = Harness::new(cfg(OnFailure, 1));
        h.send(Event::Start);
        h.exit_child(ExitHow::Exited(1));
        h.send(emfile());
        assert_eq!(h.exit, Some(exit::EXTERNAL_FAILURE));
        assert!(h.messages[0].contains("backoff limit 1"), "{:?}", h.messages);
        // Under ExitCode a failed start is retried (it is outside the program, like a hang).
        let mut h = Harness::new(cfg(ExitCode, 6));
        h.send(Event::Start);
        h.send(emfile());
        assert_eq!((h.exit, h.sup.state()), (None, ReplicaState::Restarting));
    }

    #[tokio::test(start_paused = true)]
    async fn orphan_exits_are_ignored() {
        let mut h = Harness::new(cfg(OnFailure, 6));
        h.send(Event::Start);
        h.send(Event::Exited { pid: 4242, how: ExitHow::Exited(1) });
        assert_eq!(h.sup.state(), ReplicaState::Running);
        assert_eq!(h.exit, None);
    }

    #[tokio::test(start_paused = true)]
    async fn hang_detection_uses_startup_then_timeout() {
        let mut c = cfg(OnFailure, 1);
        c.hang = Some(HangConfig { timeout: 300 * MS, startup: 2000 * MS });
        let mut h = Harness::new(c);
        h.send(Event::Start);
        let pid = h.pid();
        let start = Instant::now();
        assert_eq!(h.sup.next_deadline(), Some(start + 2000 * MS));
        tokio::time::advance(1500 * MS).await;
        h.send(Event::Beat);
        assert_eq!(h.sup.next_deadline(), Some(Instant::now() + 300 * MS));
        tokio::time::advance(200 * MS).await;
        h.send(Event::Tick);
        assert_eq!(h.sup.state(), ReplicaState::Running);
        h.advance_to_deadline().await;
        assert_eq!(h.sup.state(), ReplicaState::Stopping);
        assert_eq!(h.signals, [(pid, SIGTERM)]);
        assert_eq!(h.sup.hang_detections(), 1);
        h.exit_child(ExitHow::Signaled(SIGTERM));
        assert_eq!(h.sup.state(), ReplicaState::Running, "the first restart is immediate");
        // The new child gets the startup allowance again.
        assert_eq!(h.sup.next_deadline(), Some(Instant::now() + 2000 * MS));
        h.advance_to_deadline().await;
        h.exit_child(ExitHow::Exited(0));
        assert_eq!(h.exit, Some(exit::EXTERNAL_FAILURE), "a hung child that exits 0 is still a failure");
        assert!(h.messages[0].starts_with(
            "child hung (no first heartbeat within 2s of its start), then exited with code 0; gave up after 1 restarts"
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn give_up_stops_the_child_and_exits_138() {
        let mut h = Harness::new(cfg(Always, 6));
        h.send(Event::Start);
        let pid = h.pid();
        let g = GiveUp { state: ReplicaState::NodeUnhealthy, message: "node unhealthy".into() };
        h.send(Event::GiveUp(g.clone()));
        assert_eq!(h.signals, [(pid, SIGTERM)]);
        // A TERM meanwhile does not turn the 138 into 143.
        h.send(Event::Shutdown { signal: SIGTERM });
        h.exit_child(ExitHow::Signaled(SIGTERM));
        assert_eq!(h.exit, Some(138));
        assert_eq!(h.sup.state(), ReplicaState::NodeUnhealthy);
        assert_eq!(h.messages, ["node unhealthy"]);
        let mut p = Harness::new(cfg(Always, 6));
        p.send(Event::GiveUp(g));
        assert_eq!(p.exit, Some(138));
        assert!(p.spawns.is_empty());
    }

    fn job_cfg(limit: u32) -> SupervisorConfig {
        SupervisorConfig { scope: RestartScope::Job, ..cfg(OnFailure, limit) }
    }

    #[tokio::test(start_paused = true)]
    async fn job_scope_failure_asks_for_a_generation_and_waits_for_release() {
        let mut h = Harness::new(job_cfg(3));
        h.send(Event::Start);
        h.exit_child(ExitHow::Exited(1));
        assert_eq!(h.requests, 1, "the failure goes to the job, not to a local backoff");
        assert_eq!(h.sup.state(), ReplicaState::Restarting);
        assert_eq!(h.sup.next_deadline(), None, "no local timer: the rendezvous owns the wait");
        h.send(Event::NewGeneration { generation: 1 });
        assert_eq!(h.spawns.len(), 1, "nothing starts before the barrier releases");
        h.send(Event::Released { generation: 1 });
        assert_eq!(h.spawns.iter().map(|s| s.1).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(h.generations, [0, 1]);
        assert_eq!(h.sup.generation(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn new_generation_stops_a_healthy_child_and_counts_a_restart() {
        let mut h = Harness::new(job_cfg(1));
        h.send(Event::Start);
        let pid = h.pid();
        h.send(Event::NewGeneration { generation: 1 });
        assert_eq!(h.signals, [(pid, SIGTERM)]);
        h.send(Event::NewGeneration { generation: 1 });
        assert_eq!(h.signals.len(), 1, "the same order twice signals once");
        h.exit_child(ExitHow::Signaled(SIGTERM));
        assert_eq!(h.sup.state(), ReplicaState::Restarting);
        assert_eq!(h.sup.restarts(), 1);
        assert_eq!(h.requests, 0, "a stop ordered by the job is not a new request");
        h.send(Event::Released { generation: 1 });
        assert_eq!(h.generations, [0, 1]);
        // The limit (1) is reached: the next generation ends this replica with the child's status.
        h.send(Event::NewGeneration { generation: 2 });
        h.exit_child(ExitHow::Signaled(SIGTERM));
        assert_eq!(h.exit, Some(143));
        assert!(h.messages[0].contains("gave up after 1 restarts"), "{:?}", h.messages);
    }

    #[tokio::test(start_paused = true)]
    async fn stale_generations_and_early_releases_are_ignored() {
        let mut h = Harness::new(job_cfg(3));
        h.send(Event::Start);
        h.send(Event::NewGeneration { generation: 0 });
        h.send(Event::Released { generation: 5 });
        assert_eq!(h.sup.state(), ReplicaState::Running);
        assert!(h.signals.is_empty());
        assert_eq!(h.spawns.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn term_or_give_up_while_awaiting_a_generation_exits() {
        let mut h = Harness::new(job_cfg(3));
        h.send(Event::Start);
        h.exit_child(ExitHow::Exited(4));
        h.send(Event::Shutdown { signal: SIGTERM });
        assert_eq!(h.exit, Some(4));
        let mut g = Harness::new(job_cfg(3));
        g.send(Event::Start);
        g.exit_child(ExitHow::Exited(4));
        g.send(Event::GiveUp(GiveUp { state: ReplicaState::Failed, message: "rendezvous timed out".into() }));
        assert_eq!(g.exit, Some(138));
        assert_eq!(g.messages, ["rendezvous timed out"]);
    }

    #[tokio::test(start_paused = true)]
    async fn job_scope_limit_and_success_behave_like_replica_scope() {
        let mut h = Harness::new(job_cfg(0));
        h.send(Event::Start);
        h.exit_child(ExitHow::Exited(2));
        assert_eq!(h.exit, Some(2));
        assert_eq!(h.requests, 0);
        let mut ok = Harness::new(job_cfg(3));
        ok.send(Event::Start);
        ok.exit_child(ExitHow::Exited(0));
        assert_eq!(ok.exit, Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_before_the_old_child_is_gone_starts_it_after() {
        let mut h = Harness::new(job_cfg(3));
        h.send(Event::Start);
        h.send(Event::NewGeneration { generation: 1 });
        h.send(Event::Released { generation: 1 });
        assert_eq!(h.spawns.len(), 1, "not while the old child still runs");
        h.exit_child(ExitHow::Signaled(SIGTERM));
        assert_eq!(h.generations, [0, 1]);
        assert_eq!(h.sup.state(), ReplicaState::Running);
    }
}

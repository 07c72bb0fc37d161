//! The supervisor's state machine: every event in, the actions to take out. No I/O, no clock: the
//! driver passes `now`, and asks `next_deadline` when to come back with a `Tick`.

use crate::exit::{self, ExitHow};
use crate::policy::RestartScope;
use crate::signo::Signo;
use crate::status::{ExitReason, ReplicaState};
use nix::unistd::Pid;
use tokio::time::Instant;

use super::types::*;

/// The supervisor: configuration, phase and counters.
#[derive(Debug, Clone)]
pub struct Supervisor {
    cfg: SupervisorConfig,
    phase: Phase,
    restarts: u32,
    backoff_step: u32,
    last_exit: Option<ExitHow>,
    /// Why rankvisor stopped the last child, when it did: the one record of it.
    last_stop: Option<StopCause>,
    last_beat: Option<Instant>,
    hang_detections: u32,
    generation: u64,
    /// A generation released while our old child was still stopping: start it once that child is gone.
    early_release: Option<u64>,
    /// The child that got the checkpoint signal (each child gets it once).
    checkpointed: Option<Pid>,
    /// The stop's signal (and the wait after it), held until its snapshot is taken.
    held: Option<(Signo, std::time::Duration)>,
    /// This stop's snapshot was asked for.
    snapped: bool,
    /// The top line of this stop's snapshot, for its termination message.
    last_stacks: Option<String>,
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
            last_stop: None,
            last_beat: None,
            hang_detections: 0,
            generation: 0,
            early_release: None,
            checkpointed: None,
            held: None,
            snapped: false,
            last_stacks: None,
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
        matches!(self.last_stop, Some(StopCause::Hung))
    }

    /// The log rule that made rankvisor stop the last child, when one did.
    pub fn last_exit_log_rule(&self) -> Option<&LogRuleHit> {
        match &self.last_stop {
            Some(StopCause::LogRule(hit)) => Some(hit),
            _ => None,
        }
    }

    /// Why rankvisor stopped the last child, as the status reports it (None: it ended on its
    /// own, or for a reason the exit itself tells: a shutdown, a give-up, an order).
    pub fn exit_reason(&self) -> Option<ExitReason> {
        match self.last_stop.as_ref()? {
            StopCause::Hung => Some(ExitReason::Hung),
            StopCause::LogRule(_) => Some(ExitReason::LogRule),
            StopCause::NewGeneration { .. } => Some(ExitReason::NewGeneration),
            StopCause::Straggler { .. } => Some(ExitReason::Straggler),
            StopCause::Shutdown { .. } | StopCause::GiveUp(_) | StopCause::Ordered => None,
        }
    }

    /// The generation of the current (or last) child.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The generation this replica is in or moving to: the child's, or the one its child is being
    /// stopped for. The replica's staleness checks use it: the supervisor is the generation's one
    /// owner.
    pub fn target_generation(&self) -> u64 {
        match &self.phase {
            Phase::Stopping { cause: StopCause::NewGeneration { generation }, .. }
            | Phase::AwaitingGeneration { next: Some(generation) } => (*generation).max(self.generation),
            _ => self.generation,
        }
    }

    /// True when the last child was stopped because the job moved to a new generation (not a failure).
    pub fn last_exit_generation_stop(&self) -> bool {
        matches!(self.last_stop, Some(StopCause::NewGeneration { .. }))
    }

    /// Hangs detected so far.
    pub fn hang_detections(&self) -> u32 {
        self.hang_detections
    }

    /// The child's pid while it runs or is being stopped.
    pub fn child_pid(&self) -> Option<Pid> {
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
            Phase::Backoff { .. } | Phase::AwaitingGeneration { .. } => ReplicaState::Restarting,
            Phase::Finished { state, .. } => *state,
        }
    }

    /// When the driver must come back with `Event::Tick`.
    pub fn next_deadline(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Backoff { until } => Some(*until),
            Phase::Stopping { deadline, held, .. } => Some(held.unwrap_or(*deadline)),
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
    #[must_use = "the steps are the loop's to perform"]
    pub fn on_event(&mut self, event: Event, now: Instant) -> ChildSteps {
        match event {
            Event::Start => match self.phase {
                Phase::Pending => vec![ChildAction::Spawn { restart_count: 0, generation: self.generation }].into(),
                _ => ChildSteps::default(),
            },
            Event::Spawned { pid } => {
                self.phase = Phase::Running { pid, started: now };
                self.last_beat = None;
                ChildSteps::default()
            }
            Event::SpawnFailed { code, message, transient: false } => self.finish(code, Some(message)),
            Event::SpawnFailed { code: _, message, transient: true } => self.on_transient_spawn_failure(message, now),
            Event::Exited { pid, how } => self.on_exit(pid, how, now),
            Event::Shutdown { signal } => self.on_shutdown(signal, now),
            Event::Beat => {
                if matches!(self.phase, Phase::Running { .. }) {
                    self.last_beat = Some(now);
                }
                ChildSteps::default()
            }
            Event::LogRule(hit) => match self.phase {
                // The same stop as a hang: TERM, the grace, KILL, then the restart policy.
                Phase::Running { pid, started } => {
                    self.stop(pid, started, StopCause::LogRule(hit), Signo::TERM, self.cfg.grace, now)
                }
                _ => ChildSteps::default(),
            },
            Event::Tick => self.on_tick(now),
            Event::GiveUp(give_up) => self.on_give_up(give_up, now),
            Event::NewGeneration { generation } => self.on_new_generation(generation, now),
            Event::Stop { signal, grace } => match self.phase {
                Phase::Running { pid, started } => self.stop(pid, started, StopCause::Ordered, signal, grace, now),
                _ => ChildSteps::default(),
            },
            Event::Checkpoint => self.on_checkpoint(),
            Event::Straggler { reason } => match self.phase {
                Phase::Running { pid, started } => {
                    self.stop(pid, started, StopCause::Straggler { reason }, Signo::TERM, self.cfg.grace, now)
                }
                _ => ChildSteps::default(),
            },
            Event::Snapshotted { top } => {
                if top.is_some() {
                    self.last_stacks = top;
                }
                self.release_held(now)
            }
            Event::Released { generation } => match &self.phase {
                // The first barrier: the first child belongs to the generation it released.
                Phase::Pending => {
                    self.generation = generation;
                    ChildSteps::default()
                }
                Phase::AwaitingGeneration { .. } => {
                    self.generation = generation;
                    vec![ChildAction::Spawn { restart_count: self.restarts, generation }].into()
                }
                Phase::Stopping { cause: StopCause::NewGeneration { generation: g }, .. } if *g == generation => {
                    self.early_release = Some(generation);
                    ChildSteps::default()
                }
                _ => ChildSteps::default(),
            },
        }
    }

    fn on_new_generation(&mut self, generation: u64, now: Instant) -> ChildSteps {
        if generation <= self.generation {
            return ChildSteps::default();
        }
        match &mut self.phase {
            Phase::Running { pid, started } => {
                let (pid, started) = (*pid, *started);
                self.stop_saving(pid, started, StopCause::NewGeneration { generation }, now)
            }
            // Stopped for a failure, or for an earlier generation: the stop is for this one now.
            Phase::Stopping { cause, .. } => {
                let earlier = match cause {
                    StopCause::Hung | StopCause::LogRule(_) => true,
                    StopCause::NewGeneration { generation: g } => *g < generation,
                    _ => false,
                };
                if earlier {
                    *cause = StopCause::NewGeneration { generation };
                }
                ChildSteps::default()
            }
            Phase::Backoff { .. } => {
                self.phase = Phase::AwaitingGeneration { next: Some(generation) };
                ChildSteps::default()
            }
            Phase::AwaitingGeneration { next } => {
                if next.is_none_or(|g| g < generation) {
                    *next = Some(generation);
                }
                ChildSteps::default()
            }
            Phase::Pending | Phase::Finished { .. } => ChildSteps::default(),
        }
    }

    fn finish(&mut self, code: i32, message: Option<String>) -> ChildSteps {
        let state = if code == 0 { ReplicaState::Succeeded } else { ReplicaState::Failed };
        self.finish_as(code, state, message)
    }

    fn finish_as(&mut self, code: i32, state: ReplicaState, message: Option<String>) -> ChildSteps {
        self.phase = Phase::Finished { code, state };
        let actions = message.into_iter().map(ChildAction::TerminationMessage).collect();
        ChildSteps { actions, outcome: Some(ChildOutcome::Exit { code }) }
    }

    /// Stop the child with `signal`, KILL after `grace`; a hang's stop first asks for a snapshot
    /// and holds the signal until it is taken.
    fn stop(
        &mut self,
        pid: Pid,
        started: Instant,
        cause: StopCause,
        signal: Signo,
        grace: std::time::Duration,
        now: Instant,
    ) -> ChildSteps {
        (self.held, self.snapped, self.last_stacks) = (None, false, None);
        let why = hang_why(&cause);
        self.phase = Phase::Stopping { pid, started, deadline: now + grace, killed: false, cause, held: None };
        match why {
            Some(why) => self.hold(pid, why, signal, grace, now),
            None => vec![ChildAction::SignalGroup { pid, signal }].into(),
        }
    }

    /// Ask for a snapshot of the stopping child; `signal` (then `wait`) follows once it is taken.
    fn hold(&mut self, pid: Pid, why: String, signal: Signo, wait: std::time::Duration, now: Instant) -> ChildSteps {
        (self.held, self.snapped) = (Some((signal, wait)), true);
        if let Phase::Stopping { deadline, .. } = &mut self.phase {
            *deadline = now + SNAPSHOT_WAIT;
        }
        vec![ChildAction::Snapshot { pid, why }].into()
    }

    /// The held signal goes out: the snapshot is taken, or its wait is over.
    fn release_held(&mut self, now: Instant) -> ChildSteps {
        let Some((signal, wait)) = self.held.take() else { return ChildSteps::default() };
        let Phase::Stopping { pid, deadline, killed, .. } = &mut self.phase else { return ChildSteps::default() };
        *deadline = now + wait;
        *killed |= signal == Signo::KILL;
        vec![ChildAction::SignalGroup { pid: *pid, signal }].into()
    }

    /// A termination message's text with the stop's snapshot, when it has one.
    fn with_stacks(&self, what: String) -> String {
        match &self.last_stacks {
            Some(top) => format!("{what}; stacks: {top}"),
            None => what,
        }
    }

    /// A stop the job saves before (a shutdown, a give-up, a new generation): with
    /// `--checkpoint-signal`, the training process gets it now (once) and the stop's own signal
    /// is held until `--checkpoint-grace` has passed or the child has exited; SIGKILL still
    /// follows at the grace period's end, counted from now.
    fn stop_saving(&mut self, pid: Pid, started: Instant, cause: StopCause, now: Instant) -> ChildSteps {
        (self.held, self.snapped, self.last_stacks) = (None, false, None);
        let deadline = now + self.cfg.grace;
        let Some(c) = self.cfg.checkpoint else {
            let signal = stop_signal(&cause, pid);
            self.phase = Phase::Stopping { pid, started, deadline, killed: false, cause, held: None };
            return vec![signal].into();
        };
        let held = Some((now + c.grace).min(deadline));
        self.phase = Phase::Stopping { pid, started, deadline, killed: false, cause, held };
        self.checkpoint_signal(pid).into_iter().collect::<Vec<_>>().into()
    }

    /// The checkpoint signal for `pid`, unless it got it already.
    fn checkpoint_signal(&mut self, pid: Pid) -> Option<ChildAction> {
        let c = self.cfg.checkpoint?;
        if self.checkpointed == Some(pid) {
            return None;
        }
        self.checkpointed = Some(pid);
        Some(ChildAction::Checkpoint { pid, signal: c.signal })
    }

    /// The master's fan-out: a running child saves, and goes on.
    fn on_checkpoint(&mut self) -> ChildSteps {
        match self.phase {
            Phase::Running { pid, .. } => self.checkpoint_signal(pid).into_iter().collect::<Vec<_>>().into(),
            _ => ChildSteps::default(),
        }
    }

    fn on_shutdown(&mut self, signal: Signo, now: Instant) -> ChildSteps {
        match &mut self.phase {
            Phase::Pending => self.finish(
                ExitHow::Signaled(signal).code(),
                Some(format!("stopped by {} before the child started", signal.name())),
            ),
            Phase::Running { pid, started } => {
                let (pid, started) = (*pid, *started);
                self.stop_saving(pid, started, StopCause::Shutdown { signal }, now)
            }
            Phase::Stopping { pid, cause, deadline, held, .. } => {
                // A second TERM keeps the first deadline; a hang or give-up stop becomes a shutdown,
                // except that a give-up keeps its 138. The pod is being deleted: a longer deadline
                // (an operator's `/stop` with its own timeout) shrinks to the grace, as in every
                // other phase. A stop held for the checkpoint stays held (the save goes on), but
                // a second shutdown signal ends the hold.
                let again = matches!(cause, StopCause::Shutdown { .. });
                if !matches!(cause, StopCause::GiveUp(_)) {
                    *cause = StopCause::Shutdown { signal };
                }
                *deadline = match self.held.take() {
                    // A held snapshot's signal is overtaken: the grace starts now.
                    Some(_) => now + self.cfg.grace,
                    None => (*deadline).min(now + self.cfg.grace),
                };
                match held {
                    Some(until) if !again => {
                        *until = (*until).min(*deadline);
                        ChildSteps::default()
                    }
                    _ => {
                        *held = None;
                        vec![ChildAction::SignalPrograms { pid: *pid, signal }].into()
                    }
                }
            }
            Phase::Backoff { .. } | Phase::AwaitingGeneration { .. } => {
                let code = self.last_exit.map_or(ExitHow::Signaled(signal).code(), ExitHow::code);
                let msg = format!(
                    "stopped by {} while waiting to restart; last child {}",
                    signal.name(),
                    self.last_exit.map_or_else(|| "none".into(), |h| h.to_string())
                );
                self.finish(code, Some(msg))
            }
            Phase::Finished { .. } => ChildSteps::default(),
        }
    }

    fn on_give_up(&mut self, give_up: GiveUp, now: Instant) -> ChildSteps {
        match &mut self.phase {
            Phase::Running { pid, started } => {
                let (pid, started) = (*pid, *started);
                self.stop_saving(pid, started, StopCause::GiveUp(give_up), now)
            }
            Phase::Stopping { cause: StopCause::GiveUp(_), .. } => ChildSteps::default(),
            Phase::Stopping { cause, .. } => {
                *cause = StopCause::GiveUp(give_up);
                ChildSteps::default()
            }
            Phase::Pending | Phase::Backoff { .. } | Phase::AwaitingGeneration { .. } => {
                self.finish_as(exit::EXTERNAL_FAILURE, give_up.state, Some(give_up.message))
            }
            Phase::Finished { .. } => ChildSteps::default(),
        }
    }

    fn on_tick(&mut self, now: Instant) -> ChildSteps {
        if self.held.is_some() {
            // No snapshot in time: the stop goes on without it.
            return match &self.phase {
                Phase::Stopping { deadline, .. } if now >= *deadline => self.release_held(now),
                _ => ChildSteps::default(),
            };
        }
        match &mut self.phase {
            // The checkpoint's time is over: the stop's own signal goes out.
            Phase::Stopping { pid, cause, held: held @ Some(_), .. } if held.is_some_and(|until| now >= until) => {
                *held = None;
                let mut steps = ChildSteps::from(vec![stop_signal(cause, *pid)]);
                // The grace period may be over too (a late tick): SIGKILL follows at once.
                let then = self.on_tick(now);
                steps.actions.extend(then.actions);
                steps.outcome = then.outcome;
                steps
            }
            // The child outlived its stop's grace: where it is, before the KILL (a shutdown's
            // KILL is not held: the pod's own grace is running out).
            Phase::Stopping { pid, deadline, killed: false, cause, .. }
                if now >= *deadline && !self.snapped && !matches!(cause, StopCause::Shutdown { .. }) =>
            {
                let pid = *pid;
                self.hold(pid, "survived its stop".into(), Signo::KILL, KILL_WAIT, now)
            }
            Phase::Backoff { until } if now >= *until => {
                vec![ChildAction::Spawn { restart_count: self.restarts, generation: self.generation }].into()
            }
            Phase::Stopping { pid, deadline, killed: killed @ false, .. } if now >= *deadline => {
                *killed = true;
                *deadline = now + KILL_WAIT;
                vec![ChildAction::SignalGroup { pid: *pid, signal: Signo::KILL }].into()
            }
            Phase::Stopping { pid, deadline, killed: true, .. } if now >= *deadline => {
                let (pid, how) = (*pid, ExitHow::Signaled(Signo::KILL));
                self.last_exit = Some(how);
                self.phase = Phase::Finished { code: how.code(), state: ReplicaState::Failed };
                ChildSteps { actions: Vec::new(), outcome: Some(ChildOutcome::Unkillable { pid, code: how.code() }) }
            }
            Phase::Running { pid, started } => {
                let (pid, started) = (*pid, *started);
                match self.hang_deadline(started) {
                    Some(d) if now >= d => {
                        self.hang_detections += 1;
                        self.stop(pid, started, StopCause::Hung, Signo::TERM, self.cfg.grace, now)
                    }
                    _ => ChildSteps::default(),
                }
            }
            _ => ChildSteps::default(),
        }
    }

    fn on_exit(&mut self, pid: Pid, how: ExitHow, now: Instant) -> ChildSteps {
        let (started, cause) = match &self.phase {
            Phase::Running { pid: p, started } if *p == pid => (*started, None),
            Phase::Stopping { pid: p, started, cause, .. } if *p == pid => (*started, Some(cause.clone())),
            // Someone else's exit (an orphan the reaper collected): nothing to decide.
            _ => return ChildSteps::default(),
        };
        self.last_exit = Some(how);
        self.last_stop = cause.clone();
        self.held = None;
        match cause {
            Some(StopCause::Shutdown { signal }) => {
                let msg = format!("stopped by {}: child {how}", signal.name());
                let code = how.code();
                if code == 0 {
                    self.finish(0, None)
                } else {
                    self.finish(code, Some(msg))
                }
            }
            Some(StopCause::GiveUp(g)) => self.finish_as(exit::EXTERNAL_FAILURE, g.state, Some(g.message)),
            Some(StopCause::Ordered) => self.finish(how.code(), None),
            Some(StopCause::Straggler { reason }) => self.restart_now(pid, how, &reason, now),
            Some(StopCause::Hung) => {
                let what = self.with_stacks(self.hang_text(how));
                self.after_run(pid, how, Some(what), started, now)
            }
            Some(StopCause::LogRule(hit)) => {
                let what = self.with_stacks(format!("{}, then child {how}", hit.describe()));
                self.after_run(pid, how, Some(what), started, now)
            }
            Some(StopCause::NewGeneration { generation }) => {
                if self.restarts >= self.cfg.backoff_limit {
                    let msg = format!(
                        "child {how} when the job moved to generation {generation}; gave up after {} restarts (backoff limit {})",
                        self.restarts, self.cfg.backoff_limit
                    );
                    return self.finish(how.code(), Some(msg));
                }
                self.restarts += 1;
                self.phase = Phase::AwaitingGeneration { next: Some(generation) };
                let mut actions = vec![ChildAction::KillLeftovers { pid }];
                if let Some(g) = self.early_release.take().filter(|g| *g == generation) {
                    self.generation = g;
                    actions.push(ChildAction::Spawn { restart_count: self.restarts, generation: g });
                }
                actions.into()
            }
            None => self.after_run(pid, how, None, started, now),
        }
    }

    /// A straggler's child, stopped: started again at once (within the backoff limit).
    fn restart_now(&mut self, pid: Pid, how: ExitHow, reason: &str, now: Instant) -> ChildSteps {
        if self.restarts >= self.cfg.backoff_limit {
            let msg = format!(
                "{reason}: child {how} when stopped as a straggler; gave up after {} restarts (backoff limit {})",
                self.restarts, self.cfg.backoff_limit
            );
            return self.finish(how.code(), Some(msg));
        }
        self.restarts += 1;
        self.phase = Phase::Backoff { until: now };
        vec![
            ChildAction::KillLeftovers { pid },
            ChildAction::Spawn { restart_count: self.restarts, generation: self.generation },
        ]
        .into()
    }

    /// A start that failed for a reason outside the command (no descriptors, no memory): retried
    /// like a failure from outside the program, within the backoff limit. When the policy (Never)
    /// or the limit ends the retries, the exit is 138, the code for a reason outside the training
    /// program (Kubeflow's ExitCode policy retries it, maybe on a node with room), never the
    /// permanent 126 of a command that cannot be executed.
    fn on_transient_spawn_failure(&mut self, message: String, now: Instant) -> ChildSteps {
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
        ChildSteps::default()
    }

    /// What the termination message says of a child stopped as hung.
    fn hang_text(&self, how: ExitHow) -> String {
        match (self.cfg.hang, self.last_beat) {
            (Some(h), Some(_)) => format!("child hung (no heartbeat within {:?}), then {how}", h.timeout),
            // It never beat: the startup allowance is what ran out.
            (Some(h), None) => {
                format!("child hung (no first heartbeat within {:?} of its start), then {how}", h.startup)
            }
            (None, _) => format!("child hung, then {how}"),
        }
    }

    /// The restart decision for a child that ended on its own, or that rankvisor stopped as failed
    /// (`stopped`: why, a hang or a log rule; such a child failed whatever its status).
    fn after_run(
        &mut self,
        pid: Pid,
        how: ExitHow,
        stopped: Option<String>,
        started: Instant,
        now: Instant,
    ) -> ChildSteps {
        let hung = stopped.is_some();
        let what = stopped.unwrap_or_else(|| format!("child {how}"));
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
        let mut actions = vec![ChildAction::KillLeftovers { pid }];
        if self.cfg.scope == RestartScope::Job {
            // torchrun's behaviour: the whole worker group restarts together, in a new generation.
            self.restarts += 1;
            self.phase = Phase::AwaitingGeneration { next: None };
            return ChildSteps { actions, outcome: Some(ChildOutcome::RequestGeneration) };
        }
        if now.saturating_duration_since(started) >= self.cfg.backoff.reset {
            self.backoff_step = 0;
        }
        let delay = self.cfg.backoff.delay(self.backoff_step);
        self.backoff_step = self.backoff_step.saturating_add(1);
        self.restarts += 1;
        self.phase = Phase::Backoff { until: now + delay };
        if delay.is_zero() {
            actions.push(ChildAction::Spawn { restart_count: self.restarts, generation: self.generation });
        }
        actions.into()
    }
}

/// The signal that stops the child for `cause`: a shutdown's goes to the programs first (the
/// shutdown's order), every other stop's TERM to the child's group.
fn stop_signal(cause: &StopCause, pid: Pid) -> ChildAction {
    match cause {
        StopCause::Shutdown { signal } => ChildAction::SignalPrograms { pid, signal: *signal },
        _ => ChildAction::SignalGroup { pid, signal: Signo::TERM },
    }
}

/// Why a stop is a hang's, worth a snapshot before the child is stopped: the heartbeat's verdict,
/// or a log rule's HANGING or SLOW (not a FAULT's: the child said what went wrong).
fn hang_why(cause: &StopCause) -> Option<String> {
    match cause {
        StopCause::Hung => Some("hung".into()),
        StopCause::LogRule(hit) if hit.is_hang() => Some(hit.reason.clone()),
        _ => None,
    }
}

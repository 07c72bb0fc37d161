//! The child machine under paused time: a harness turns `Spawn` into `Spawned` as the loop does.

use super::machine::*;
use super::types::*;
use crate::backoff::BackoffConfig;
use crate::exit::{self, ExitHow};
use crate::policy::RestartPolicy::*;
use crate::policy::{RestartPolicy, RestartScope};
use crate::signo::Signo;
use crate::status::ReplicaState;
use nix::unistd::Pid;

const SIGINT: Signo = Signo::INT;
const SIGKILL: Signo = Signo::KILL;
const SIGTERM: Signo = Signo::TERM;
use std::time::Duration;
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

fn cfg(policy: RestartPolicy, limit: u32) -> SupervisorConfig {
    SupervisorConfig {
        policy,
        backoff_limit: limit,
        backoff: BackoffConfig { initial: 200 * MS, max: 800 * MS, reset: 10_000 * MS },
        grace: 1000 * MS,
        hang: None,
        scope: RestartScope::Replica,
        checkpoint: None,
    }
}

/// Drives a supervisor through paused tokio time, as the real driver does.
struct Harness {
    sup: Supervisor,
    next_pid: i32,
    spawns: Vec<(Instant, u32)>,
    /// Every signal sent, to the group or programs first.
    signals: Vec<(Pid, Signo)>,
    /// The shutdowns' signals (`SignalPrograms`), also in `signals`.
    programs_first: Vec<(Pid, Signo)>,
    /// The checkpoint signals (`Checkpoint`), not in `signals`.
    checkpoints: Vec<(Pid, Signo)>,
    messages: Vec<String>,
    exit: Option<i32>,
    generations: Vec<u64>,
    requests: u32,
    unkillable: u32,
    /// Every snapshot asked for (its `why`), answered at once unless `answer_snapshots` is off.
    snapshots: Vec<String>,
    answer_snapshots: bool,
}

impl Harness {
    fn new(cfg: SupervisorConfig) -> Self {
        Self {
            sup: Supervisor::new(cfg),
            next_pid: 100,
            spawns: vec![],
            signals: vec![],
            programs_first: vec![],
            checkpoints: vec![],
            messages: vec![],
            exit: None,
            generations: vec![],
            requests: 0,
            unkillable: 0,
            snapshots: vec![],
            answer_snapshots: true,
        }
    }

    fn send(&mut self, ev: Event) {
        let steps = self.sup.on_event(ev, Instant::now());
        for a in steps.actions {
            match a {
                ChildAction::Spawn { restart_count, generation } => {
                    self.spawns.push((Instant::now(), restart_count));
                    self.generations.push(generation);
                    self.next_pid += 1;
                    let pid = Pid::from_raw(self.next_pid);
                    self.send(Event::Spawned { pid });
                }
                ChildAction::SignalGroup { pid, signal } => self.signals.push((pid, signal)),
                ChildAction::SignalPrograms { pid, signal } => {
                    self.signals.push((pid, signal));
                    self.programs_first.push((pid, signal));
                }
                ChildAction::Checkpoint { pid, signal } => self.checkpoints.push((pid, signal)),
                ChildAction::KillLeftovers { .. } => {}
                ChildAction::TerminationMessage(m) => self.messages.push(m),
                ChildAction::Snapshot { why, .. } => {
                    self.snapshots.push(why);
                    if self.answer_snapshots {
                        self.send(Event::Snapshotted { top: Some("pid 1 in slow_here (x.py:3)".into()) });
                    }
                }
            }
        }
        match steps.outcome {
            Some(ChildOutcome::RequestGeneration) => self.requests += 1,
            Some(ChildOutcome::Exit { code }) => self.exit = Some(code),
            Some(ChildOutcome::Unkillable { code, .. }) => {
                self.exit = Some(code);
                self.unkillable += 1;
            }
            None => {}
        }
    }

    fn pid(&self) -> Pid {
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
    assert_eq!(h.restart().await, crate::backoff::MIN_DELAY, "no spinning with --backoff-initial 0s");
}

#[tokio::test(start_paused = true)]
async fn term_forwards_then_kills_after_grace() {
    let mut h = Harness::new(cfg(OnFailure, 6));
    h.send(Event::Start);
    let pid = h.pid();
    h.send(Event::Shutdown { signal: SIGTERM });
    assert_eq!(h.signals, [(pid, SIGTERM)]);
    assert_eq!(h.programs_first, [(pid, SIGTERM)], "a shutdown signals the programs first, not the group");
    assert_eq!(h.sup.state(), ReplicaState::Stopping);
    assert_eq!(h.advance_to_deadline().await, 1000 * MS);
    assert_eq!(h.signals, [(pid, SIGTERM), (pid, SIGKILL)], "the grace's end KILLs the whole group");
    assert_eq!(h.programs_first.len(), 1);
    assert_eq!(h.sup.next_deadline(), Some(Instant::now() + KILL_WAIT), "how long the KILL may take");
    h.exit_child(ExitHow::Signaled(SIGKILL));
    assert_eq!(h.exit, Some(137));
    assert_eq!(h.spawns.len(), 1, "no restart after a shutdown");
    assert_eq!(h.messages, ["stopped by SIGTERM: child killed by signal 9 (SIGKILL)"]);
}

/// A child that outlives SIGKILL (uninterruptible sleep, a frozen cgroup) is given up on at the
/// KILL plus [`KILL_WAIT`], with the KILL's status, whatever stopped it (a hang here: no restart
/// beside it).
#[tokio::test(start_paused = true)]
async fn a_child_that_outlives_sigkill_is_given_up_after_the_kill_wait() {
    let mut h = Harness::new(SupervisorConfig {
        hang: Some(HangConfig { timeout: 1000 * MS, startup: 1000 * MS }),
        ..cfg(OnFailure, 6)
    });
    h.send(Event::Start);
    h.advance_to_deadline().await;
    assert_eq!(h.sup.state(), ReplicaState::Stopping, "stopped as hung");
    h.advance_to_deadline().await;
    assert_eq!(h.advance_to_deadline().await, KILL_WAIT);
    assert_eq!((h.exit, h.unkillable), (Some(137), 1));
    assert_eq!(h.sup.state(), ReplicaState::Failed);
    assert_eq!(h.sup.next_deadline(), None);
    assert_eq!(h.spawns.len(), 1, "nothing starts beside it");
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
    let pid = t.pid();
    assert_eq!(t.programs_first, [(pid, SIGINT), (pid, SIGTERM)], "a second signal goes out too, programs first");
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
    h.send(Event::Exited { pid: Pid::from_raw(4242), how: ExitHow::Exited(1) });
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
    assert!(h.programs_first.is_empty(), "a hang's stop is not a shutdown: the whole group at once");
    assert_eq!(h.sup.hang_detections(), 1);
    h.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(h.sup.state(), ReplicaState::Running, "the first restart is immediate");
    // The new child gets the startup allowance again.
    assert_eq!(h.sup.next_deadline(), Some(Instant::now() + 2000 * MS));
    h.advance_to_deadline().await;
    h.exit_child(ExitHow::Exited(0));
    assert_eq!(h.exit, Some(exit::EXTERNAL_FAILURE), "a hung child that exits 0 is still a failure");
    assert!(h.messages[0].starts_with(
        "child hung (no first heartbeat within 2s of its start), then exited with code 0; stacks: pid 1 in slow_here \
         (x.py:3); gave up after 1 restarts"
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

/// The generation a replica moves to is held by its phase: the stop's, then the wait's.
#[tokio::test(start_paused = true)]
async fn the_phase_holds_the_generation_the_replica_moves_to() {
    let mut h = Harness::new(job_cfg(3));
    h.send(Event::Start);
    h.send(Event::NewGeneration { generation: 1 });
    assert_eq!(h.sup.target_generation(), 1, "stopping for it");
    h.send(Event::NewGeneration { generation: 2 });
    assert_eq!(h.sup.target_generation(), 2, "a later generation replaces the stop's");
    h.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(h.sup.phase(), &Phase::AwaitingGeneration { next: Some(2) });
    assert_eq!((h.sup.generation(), h.sup.target_generation()), (0, 2), "still moving to it once the child is gone");
    h.send(Event::Released { generation: 2 });
    assert_eq!((h.sup.generation(), h.sup.target_generation()), (2, 2));

    // Its own failure: the job tells it the next generation (the master's barrier).
    h.exit_child(ExitHow::Exited(1));
    assert_eq!(h.sup.phase(), &Phase::AwaitingGeneration { next: None });
    assert_eq!(h.sup.target_generation(), 2);
    h.send(Event::NewGeneration { generation: 3 });
    assert_eq!(h.sup.target_generation(), 3);
    h.send(Event::NewGeneration { generation: 3 });
    h.send(Event::NewGeneration { generation: 1 });
    assert_eq!(h.sup.phase(), &Phase::AwaitingGeneration { next: Some(3) }, "never backwards");
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

fn hang_hit(line: &str) -> LogRuleHit {
    LogRuleHit { reason: "LogHang_Step".into(), named: vec![("Step".into(), Some(format!("{line}\n")))] }
}

#[tokio::test(start_paused = true)]
async fn a_firing_log_rule_stops_the_child_and_on_failure_restarts_it() {
    let mut h = Harness::new(cfg(OnFailure, 3));
    h.send(Event::Start);
    let pid = h.pid();
    h.send(Event::LogRule(hang_hit("step 1")));
    assert_eq!(h.signals, [(pid, SIGTERM)], "the hang's stop: TERM first");
    assert_eq!(h.sup.state(), ReplicaState::Stopping);
    h.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(h.spawns.len(), 2, "a failure for the restart policy: restarted at once");
    assert_eq!(h.sup.last_exit_log_rule().map(|r| r.reason.as_str()), Some("LogHang_Step"));
    assert!(!h.sup.last_exit_hung(), "a log rule is not the heartbeat's hang");
    h.send(Event::LogRule(hang_hit("step 2")));
    // The new child ignores TERM: KILL after the grace.
    let waited = h.advance_to_deadline().await;
    assert_eq!((h.signals[2].1, waited), (SIGKILL, 1000 * MS));
}

#[tokio::test(start_paused = true)]
async fn a_firing_log_rule_under_never_exits_with_the_failure_and_says_why() {
    let mut h = Harness::new(cfg(Never, 6));
    h.send(Event::Start);
    h.send(Event::LogRule(hang_hit("step \u{1b}[31m7")));
    h.exit_child(ExitHow::Exited(0));
    assert_eq!(h.exit, Some(exit::EXTERNAL_FAILURE), "stopped by a rule, an exit 0 is still a failure");
    assert_eq!(
        h.messages,
        [
            r#"log rule LogHang_Step (last matched line: "step \u{1b}[31m7"), then child exited with code 0; stacks: pid 1 in slow_here (x.py:3); restart policy Never does not restart it"#
        ]
    );
    let mut killed = Harness::new(cfg(Never, 6));
    killed.send(Event::Start);
    killed.send(Event::LogRule(hang_hit("x")));
    killed.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(killed.exit, Some(143));
}

#[tokio::test(start_paused = true)]
async fn a_log_rule_after_the_child_stopped_changes_nothing() {
    let mut h = Harness::new(cfg(Never, 6));
    h.send(Event::Start);
    h.send(Event::Shutdown { signal: SIGTERM });
    h.send(Event::LogRule(hang_hit("x")));
    assert_eq!(h.signals.len(), 1, "no second stop");
    h.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(h.exit, Some(143));
    assert!(h.messages[0].starts_with("stopped by SIGTERM"), "{:?}", h.messages);
}

/// `--straggler-action restart`: the straggler's child is stopped (TERM, the grace, KILL) and
/// started again at once, whatever the policy and scope (only this replica), counted against the
/// backoff limit; its exit's reason is `Straggler`.
#[tokio::test(start_paused = true)]
async fn a_straggler_is_stopped_and_started_again_at_once() {
    for scope in [RestartScope::Replica, RestartScope::Job] {
        let mut h = Harness::new(SupervisorConfig { scope, ..cfg(Never, 1) });
        h.send(Event::Start);
        let pid = h.pid();
        h.send(Event::Straggler { reason: "replica 2 is a straggler".into() });
        assert_eq!(h.signals, [(pid, SIGTERM)], "{scope:?}");
        h.exit_child(ExitHow::Signaled(SIGTERM));
        assert_eq!(h.spawns.len(), 2, "started again at once under Never, {scope:?}");
        assert_eq!((h.sup.restarts(), h.requests, h.exit), (1, 0, None), "only this replica: {scope:?}");
        assert_eq!(h.sup.exit_reason(), Some(crate::status::ExitReason::Straggler));
        // At the backoff limit: it ends with the child's status.
        h.send(Event::Straggler { reason: "replica 2 is a straggler".into() });
        h.exit_child(ExitHow::Signaled(SIGTERM));
        assert_eq!(h.exit, Some(143), "{scope:?}");
        assert!(h.messages[0].contains("gave up after 1 restarts (backoff limit 1)"), "{:?}", h.messages);
    }
}

/// Issue 36 item 2: a hang's stop asks for the snapshot first and holds its TERM until it is taken
/// (or [`SNAPSHOT_WAIT`] is over); the grace starts with the TERM; the message names the stacks.
#[tokio::test(start_paused = true)]
async fn a_hang_stop_holds_its_signal_until_the_snapshot_is_taken() {
    let mut c = cfg(Never, 0);
    c.hang = Some(HangConfig { timeout: 300 * MS, startup: 300 * MS });
    let mut h = Harness::new(c);
    h.answer_snapshots = false;
    h.send(Event::Start);
    let pid = h.pid();
    h.advance_to_deadline().await;
    assert_eq!((h.snapshots.as_slice(), h.signals.as_slice()), (&["hung".to_string()][..], &[][..]));
    assert_eq!(h.sup.state(), ReplicaState::Stopping);
    tokio::time::advance(100 * MS).await;
    h.send(Event::Snapshotted { top: Some("pid 7 in slow_here (hang.py:3)".into()) });
    assert_eq!(h.signals, [(pid, SIGTERM)]);
    assert_eq!(h.sup.next_deadline(), Some(Instant::now() + 1000 * MS), "the grace starts with the TERM");
    h.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(
        h.messages,
        ["child hung (no first heartbeat within 300ms of its start), then killed by signal 15 (SIGTERM); stacks: pid 7 in \
          slow_here (hang.py:3); restart policy Never does not restart it"]
    );
    // A snapshot that does not come: the TERM goes out at SNAPSHOT_WAIT.
    let mut late = Harness::new(cfg(Never, 0));
    late.answer_snapshots = false;
    late.send(Event::Start);
    late.send(Event::LogRule(hang_hit("x")));
    assert_eq!(late.advance_to_deadline().await, SNAPSHOT_WAIT);
    assert_eq!(late.signals.len(), 1);
    late.send(Event::Snapshotted { top: None });
    assert_eq!(late.signals.len(), 1, "a late snapshot sends nothing more");
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_overtakes_a_held_signal_and_a_fault_is_not_snapshotted() {
    let mut h = Harness::new(cfg(Never, 0));
    h.answer_snapshots = false;
    h.send(Event::Start);
    let pid = h.pid();
    h.send(Event::LogRule(LogRuleHit { reason: "LogSlow_Tput".into(), named: vec![] }));
    h.send(Event::Shutdown { signal: SIGTERM });
    assert_eq!(h.programs_first, [(pid, SIGTERM)]);
    assert_eq!(h.sup.next_deadline(), Some(Instant::now() + 1000 * MS), "the shutdown's own grace");
    h.send(Event::Snapshotted { top: None });
    assert_eq!(h.signals.len(), 1, "the held TERM is not sent again");
    let mut f = Harness::new(cfg(Never, 0));
    f.send(Event::Start);
    f.send(Event::LogRule(LogRuleHit { reason: "LogFault_Err".into(), named: vec![] }));
    assert!(f.snapshots.is_empty(), "a fault's line says what went wrong: {:?}", f.snapshots);
    assert_eq!(f.signals.len(), 1);
}

/// A child that outlives its stop's grace (not a shutdown's) is snapshotted before its KILL, once.
#[tokio::test(start_paused = true)]
async fn a_child_that_survives_its_stop_is_snapshotted_before_the_kill() {
    let mut h = Harness::new(cfg(OnFailure, 3));
    h.send(Event::Start);
    let pid = h.pid();
    h.send(Event::Stop { signal: Signo::USR1, grace: 500 * MS });
    assert!(h.snapshots.is_empty());
    h.answer_snapshots = false;
    h.advance_to_deadline().await;
    assert_eq!(h.snapshots, ["survived its stop"]);
    assert_eq!(h.signals, [(pid, Signo::USR1)], "the KILL waits for the snapshot");
    h.send(Event::Snapshotted { top: None });
    assert_eq!(h.signals, [(pid, Signo::USR1), (pid, SIGKILL)]);
    assert_eq!(h.sup.next_deadline(), Some(Instant::now() + KILL_WAIT));
    let mut s = Harness::new(cfg(OnFailure, 3));
    s.send(Event::Start);
    s.send(Event::Shutdown { signal: SIGTERM });
    s.advance_to_deadline().await;
    assert!(s.snapshots.is_empty(), "a shutdown's KILL is not held");
}

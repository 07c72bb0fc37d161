//! The replica machine's decisions, each without a process: paused tokio time, a fake process
//! layer that turns `Spawn` into `Spawned` (or a planned spawn failure) and records everything else.

use super::link::{LinkCommand, LinkEvent};
use super::machine::{Effect, HealthGate, Input, Mode, Note, Replica, ReplicaConfig, SpawnOrder};
use crate::backoff::BackoffConfig;
use crate::exit::ExitHow;
use crate::health::{verdict, HealthError, Observation};
use crate::kube::NodeSnapshot;
use crate::policy::{RestartPolicy, RestartScope};
use crate::process::{Member, Tree};
use crate::rank::Role;
use crate::replica::child::{ChildAction, Event, SupervisorConfig, KILL_WAIT};
use crate::signo::Signo;
use crate::status::ReplicaState;
use nix::unistd::Pid;
use std::collections::VecDeque;

const SIGKILL: Signo = Signo::KILL;
const SIGPIPE: Signo = Signo::PIPE;
const SIGTERM: Signo = Signo::TERM;
const SIGUSR1: Signo = Signo::USR1;
use std::time::Duration;
use tokio::time::Instant;

mod agent;

const MS: Duration = Duration::from_millis(1);

fn sup(policy: RestartPolicy, scope: RestartScope) -> SupervisorConfig {
    SupervisorConfig {
        policy,
        backoff_limit: 6,
        backoff: BackoffConfig { initial: 200 * MS, max: 800 * MS, reset: 10_000 * MS },
        grace: 1000 * MS,
        hang: None,
        scope,
        checkpoint: None,
    }
}

fn cfg() -> ReplicaConfig {
    ReplicaConfig {
        supervisor: sup(RestartPolicy::OnFailure, RestartScope::Replica),
        health_gate: HealthGate::Off,
        mode: Mode::ALONE,
        log_rules: None,
    }
}

/// A plain replica with this side of the rendezvous, no linger.
fn plain(role: Role) -> Mode {
    Mode::Plain { link: Some(role), linger: None }
}

fn label(value: &str) -> Observation {
    let mut s = NodeSnapshot::default();
    s.labels.insert("sagemaker.amazonaws.com/node-health-status".into(), value.into());
    Ok(verdict(&s, false))
}

/// The machine and what it asked for, with a fake process layer.
struct Fake {
    r: Replica,
    next_pid: i32,
    spawns: Vec<(u32, u64)>,
    signals: Vec<(Pid, Signo)>,
    messages: Vec<String>,
    links: Vec<LinkCommand>,
    notes: Vec<Note>,
    start_link: u32,
    sweeps: Vec<&'static str>,
    exit: Option<i32>,
    /// `DrainOutput`s asked for; unless `hold_drains`, each is answered `OutputDrained` at once.
    drains: u32,
    hold_drains: bool,
    /// What a sweep finds still alive below rankvisor.
    leftovers: usize,
    /// Answers to the next spawns in place of `Spawned` (a failed fork or exec).
    spawn_failures: VecDeque<Event>,
    /// `NameStuck` messages.
    stuck: Vec<String>,
    /// What a `ScanTree` finds below rankvisor besides the live child (which it always finds).
    below: Vec<Member>,
    /// The `SignalEach`es, in order (each pid is also in `signals`).
    each: Vec<(Vec<Pid>, Signo)>,
    /// The snapshots asked for (pid, why), each answered at once.
    snapshots: Vec<(Pid, String)>,
}

/// rankvisor's pid in these tests.
const ROOT: Pid = Pid::from_raw(1);

/// A process below rankvisor: a forked copy (a DataLoader worker) or an exec'd program.
fn member(pid: i32, ppid: Pid, forked: bool) -> Member {
    let cmdline = if forked { vec![] } else { b"python\0train.py\0".to_vec() };
    Member { pid: Pid::from_raw(pid), ppid, forked, cmdline }
}

impl Fake {
    fn new(cfg: ReplicaConfig) -> Self {
        Self::with_spawn_failures(cfg, [])
    }

    /// A replica whose first spawns get `failures`, in order, then `Spawned`.
    fn with_spawn_failures(cfg: ReplicaConfig, failures: impl IntoIterator<Item = Event>) -> Self {
        let mut f = Self {
            r: Replica::new(cfg),
            next_pid: 100,
            spawns: vec![],
            signals: vec![],
            messages: vec![],
            links: vec![],
            notes: vec![],
            start_link: 0,
            sweeps: vec![],
            exit: None,
            drains: 0,
            hold_drains: false,
            leftovers: 0,
            spawn_failures: failures.into_iter().collect(),
            stuck: vec![],
            below: vec![],
            each: vec![],
            snapshots: vec![],
        };
        let effects = f.r.start(Instant::now());
        f.apply(effects);
        f
    }

    fn send(&mut self, input: Input) {
        let effects = self.r.on_input(input, Instant::now());
        self.apply(effects);
    }

    fn apply(&mut self, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::Spawn(SpawnOrder { restart_count, generation, .. }) => {
                    self.spawns.push((restart_count, generation));
                    if let Some(failure) = self.spawn_failures.pop_front() {
                        self.send(Input::Child(failure));
                        continue;
                    }
                    self.next_pid += 1;
                    let pid = Pid::from_raw(self.next_pid);
                    self.send(Input::Child(Event::Spawned { pid }));
                }
                Effect::Child(ChildAction::SignalGroup { pid, signal }) => self.signals.push((pid, signal)),
                Effect::Child(ChildAction::TerminationMessage(m)) => self.messages.push(m),
                Effect::Child(ChildAction::Snapshot { pid, why }) => {
                    self.snapshots.push((pid, why));
                    self.send(Input::Child(Event::Snapshotted { top: None }))
                }
                Effect::Child(_) => {}
                Effect::StartLink => self.start_link += 1,
                Effect::Link(c) => self.links.push(c),
                Effect::Note(n) => self.notes.push(n),
                Effect::SweepTerm => {
                    self.sweeps.push("TERM");
                    self.send(Input::Descendants { alive: self.leftovers });
                }
                Effect::SweepKill => self.sweeps.push("KILL"),
                Effect::NameStuck { message } => self.stuck.push(message),
                Effect::ScanTree => {
                    let tree = self.tree();
                    self.send(Input::Tree(Ok(tree)));
                }
                Effect::SignalEach { pids, signal } => {
                    self.signals.extend(pids.iter().map(|p| (*p, signal)));
                    self.each.push((pids, signal));
                }
                Effect::DrainOutput => {
                    self.drains += 1;
                    if !self.hold_drains {
                        self.send(Input::OutputDrained);
                    }
                }
                Effect::Exit { code } => self.exit = Some(code),
            }
        }
    }

    fn pid(&self) -> Pid {
        self.r.supervisor().child_pid().expect("a child runs")
    }

    /// The live child (if any) and `below`.
    fn tree(&self) -> Tree {
        let child = self.r.supervisor().child_pid().map(|pid| Member {
            pid,
            ppid: ROOT,
            forked: false,
            cmdline: b"sh\0-c\0python train.py\0".to_vec(),
        });
        Tree { root: ROOT, members: child.into_iter().chain(self.below.iter().cloned()).collect() }
    }

    fn exit_child(&mut self, how: ExitHow) {
        let pid = self.pid();
        self.send(Input::Child(Event::Exited { pid, how }));
    }

    fn warned(&self, part: &str) -> bool {
        self.notes.iter().any(|n| matches!(n, Note::Warn(w) if w.contains(part)))
    }

    async fn advance_to_deadline(&mut self) {
        let d = self.r.next_deadline().expect("a deadline");
        tokio::time::advance(d.saturating_duration_since(Instant::now())).await;
        self.send(Input::Tick);
    }
}

#[tokio::test(start_paused = true)]
async fn without_gates_the_child_starts_at_once_and_the_first_restart_is_immediate() {
    let mut f = Fake::new(cfg());
    assert_eq!(f.spawns, [(0, 0)]);
    f.exit_child(ExitHow::Exited(1));
    assert_eq!(f.spawns, [(0, 0), (1, 0)], "the kubelet's first restart after a crash is immediate");
    f.exit_child(ExitHow::Exited(1));
    assert_eq!(f.spawns.len(), 2, "then the backoff starts at --backoff-initial");
    assert_eq!(f.r.state(), ReplicaState::Restarting);
    let before = Instant::now();
    f.advance_to_deadline().await;
    assert_eq!((f.spawns.len(), Instant::now() - before), (3, 200 * MS));
}

/// `--unhealthy-node wait`: the node's verdict gates the first start, then the link opens.
#[tokio::test(start_paused = true)]
async fn health_wait_gates_the_start_and_the_link() {
    let mut f = Fake::new(ReplicaConfig { health_gate: HealthGate::Wait, mode: plain(Role::Worker), ..cfg() });
    assert_eq!((f.spawns.len(), f.start_link), (0, 0), "nothing before the first verdict");
    assert_eq!(f.r.state(), ReplicaState::Pending);
    f.send(Input::Health(label("UnschedulablePendingReboot")));
    assert_eq!(f.r.state(), ReplicaState::NodeUnhealthy);
    assert!(f.warned("waiting for the node to become healthy"), "{:?}", f.notes);
    assert_eq!(f.start_link, 1, "the link starts once health is known, carrying the verdict");
    f.send(Input::Health(label("Schedulable")));
    assert_eq!(f.spawns.len(), 0, "the rendezvous still holds the start");
    assert_eq!(f.r.state(), ReplicaState::Rendezvous);
    f.send(Input::Link(LinkEvent::Released { generation: 0 }));
    assert_eq!(f.spawns, [(0, 0)]);
}

/// Fail closed: a source that cannot be read before the start refuses with 138.
#[tokio::test(start_paused = true)]
async fn unknown_health_before_the_start_exits_138() {
    let mut f = Fake::new(ReplicaConfig { health_gate: HealthGate::FailFast, ..cfg() });
    let err = HealthError::Unreadable { path: "/labels".into(), problem: "no such file".into() };
    f.send(Input::Health(Err(err)));
    assert_eq!(f.exit, Some(138));
    assert!(f.messages[0].starts_with("node health unknown, refusing to start"), "{:?}", f.messages);
    assert!(f.spawns.is_empty());
}

/// During the run, a glitch reading the source keeps the last verdict; an unhealthy one stops.
#[tokio::test(start_paused = true)]
async fn unhealthy_during_the_run_stops_the_child_and_exits_138() {
    let mut f = Fake::new(ReplicaConfig { health_gate: HealthGate::FailFast, ..cfg() });
    f.send(Input::Health(label("Schedulable")));
    let pid = f.pid();
    f.send(Input::Health(Err(HealthError::Unreadable { path: "/l".into(), problem: "gone".into() })));
    assert!(f.signals.is_empty() && f.warned("keeping the last verdict"));
    f.send(Input::Health(label("Unschedulable")));
    assert_eq!(f.signals, [(pid, SIGTERM)]);
    f.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(f.exit, Some(138));
}

#[tokio::test(start_paused = true)]
async fn a_failed_first_barrier_exits_138_with_the_reason() {
    let mut f = Fake::new(ReplicaConfig { mode: plain(Role::Worker), ..cfg() });
    assert_eq!(f.start_link, 1);
    assert_eq!(f.r.state(), ReplicaState::Rendezvous);
    f.send(Input::Link(LinkEvent::Failed { message: "rendezvous failed: timed out".into() }));
    assert_eq!((f.exit, f.messages.as_slice()), (Some(138), ["rendezvous failed: timed out".to_string()].as_slice()));
}

/// Job scope: a master whose child succeeded keeps the channel until the workers are done.
#[tokio::test(start_paused = true)]
async fn a_finished_master_lingers_for_its_workers() {
    let job = ReplicaConfig {
        supervisor: sup(RestartPolicy::OnFailure, RestartScope::Job),
        mode: Mode::Plain { link: Some(Role::Master), linger: Some(Duration::from_secs(60)) },
        ..cfg()
    };
    let mut f = Fake::new(job.clone());
    f.send(Input::Link(LinkEvent::Released { generation: 0 }));
    f.send(Input::Link(LinkEvent::WorkersDone(false)));
    f.exit_child(ExitHow::Exited(0));
    assert_eq!((f.exit, f.sweeps.len()), (None, 0), "lingering");
    f.send(Input::Link(LinkEvent::WorkersDone(true)));
    assert_eq!(f.exit, Some(0));

    // At most the limit, then a warning.
    let mut g = Fake::new(job.clone());
    g.send(Input::Link(LinkEvent::Released { generation: 0 }));
    g.exit_child(ExitHow::Exited(0));
    g.advance_to_deadline().await;
    assert_eq!(g.exit, Some(0));
    assert!(g.warned("workers still running after 60s"), "{:?}", g.notes);

    // And no longer than a TERM.
    let mut h = Fake::new(job);
    h.send(Input::Link(LinkEvent::Released { generation: 0 }));
    h.exit_child(ExitHow::Exited(0));
    h.send(Input::Signal { signal: SIGTERM, own: false });
    assert_eq!(h.exit, Some(0));
}

/// A worker that loses the master: replica scope trains on and redials.
#[tokio::test(start_paused = true)]
async fn replica_scope_worker_keeps_training_when_the_master_is_lost() {
    let mut f = Fake::new(ReplicaConfig { mode: plain(Role::Worker), ..cfg() });
    f.send(Input::Link(LinkEvent::Released { generation: 0 }));
    f.send(Input::Link(LinkEvent::MasterLost { reason: "connection reset".into() }));
    assert!(f.signals.is_empty(), "the child is not touched");
    assert_eq!(f.links, [LinkCommand::Reconnect]);
    f.send(Input::Link(LinkEvent::ReconnectFailed { message: "timed out".into() }));
    assert!(f.warned("training continues"));
    assert_eq!(f.exit, None);
}

/// Job scope: the worker stops its child, redials once it is gone, starts the new generation.
#[tokio::test(start_paused = true)]
async fn job_scope_worker_restarts_with_the_master() {
    let job = ReplicaConfig {
        supervisor: sup(RestartPolicy::OnFailure, RestartScope::Job),
        mode: plain(Role::Worker),
        ..cfg()
    };
    let mut f = Fake::new(job.clone());
    f.send(Input::Link(LinkEvent::Released { generation: 0 }));
    let pid = f.pid();
    f.send(Input::Link(LinkEvent::MasterLost { reason: "eof".into() }));
    assert_eq!(f.signals, [(pid, SIGTERM)]);
    assert!(f.links.is_empty(), "the redial waits for the child to be gone");
    f.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(f.links, [LinkCommand::Reconnect]);
    f.send(Input::Link(LinkEvent::Reconnected { generation: 1 }));
    assert_eq!(f.spawns, [(0, 0), (1, 1)]);

    // An order to restart: stop, rejoin that generation once the child is gone, start.
    let mut g = Fake::new(job.clone());
    g.send(Input::Link(LinkEvent::Released { generation: 0 }));
    g.send(Input::Link(LinkEvent::OrderRestart { generation: 1 }));
    g.exit_child(ExitHow::Exited(0));
    assert_eq!(g.links, [LinkCommand::Rejoin { generation: 1 }]);
    g.send(Input::Link(LinkEvent::Released { generation: 1 }));
    assert_eq!(g.spawns, [(0, 0), (1, 1)]);

    // Its own failure asks for the next generation.
    let mut h = Fake::new(job.clone());
    h.send(Input::Link(LinkEvent::Released { generation: 0 }));
    h.exit_child(ExitHow::Exited(1));
    assert_eq!(h.links, [LinkCommand::Rejoin { generation: 1 }]);

    // A lost master that does not come back: 138.
    let mut k = Fake::new(job);
    k.send(Input::Link(LinkEvent::Released { generation: 0 }));
    k.send(Input::Link(LinkEvent::MasterLost { reason: "eof".into() }));
    k.exit_child(ExitHow::Signaled(SIGTERM));
    k.send(Input::Link(LinkEvent::ReconnectFailed { message: "timed out".into() }));
    assert_eq!(k.exit, Some(138));
    assert!(k.messages[0].starts_with("lost the master and could not rejoin"), "{:?}", k.messages);
}

/// The master decides what a rejoin request means: only under job scope, only the next one,
/// and not once its own child is over.
#[tokio::test(start_paused = true)]
async fn master_rejoin_requests() {
    let mut replica = Fake::new(ReplicaConfig { mode: plain(Role::Master), ..cfg() });
    replica.send(Input::Link(LinkEvent::Released { generation: 0 }));
    replica.send(Input::Link(LinkEvent::RejoinAsked { generation: 1 }));
    assert!(replica.signals.is_empty() && replica.links.is_empty());
    assert!(replica.warned("the restart scope is replica"));

    let job = ReplicaConfig {
        supervisor: sup(RestartPolicy::OnFailure, RestartScope::Job),
        mode: plain(Role::Master),
        ..cfg()
    };
    let mut f = Fake::new(job.clone());
    f.send(Input::Link(LinkEvent::Released { generation: 0 }));
    let pid = f.pid();
    f.send(Input::Link(LinkEvent::RejoinAsked { generation: u64::MAX }));
    assert!(f.links.is_empty() && f.warned("expected 1"), "generations move forward by one");
    f.send(Input::Link(LinkEvent::RejoinAsked { generation: 1 }));
    assert_eq!(
        (f.signals.as_slice(), f.links.as_slice()),
        ([(pid, SIGTERM)].as_slice(), [LinkCommand::Barrier { generation: 1 }].as_slice())
    );
    f.send(Input::Link(LinkEvent::RejoinAsked { generation: 1 }));
    assert_eq!(f.links.len(), 1, "a barrier already runs for it");
    f.exit_child(ExitHow::Signaled(SIGTERM));
    f.send(Input::Link(LinkEvent::RejoinAsked { generation: 1 }));
    assert_eq!(f.links.len(), 1, "and still once the child is gone: the wait holds the generation");
    f.send(Input::Link(LinkEvent::Released { generation: 1 }));
    assert_eq!(f.spawns, [(0, 0), (1, 1)]);

    let mut done = Fake::new(ReplicaConfig {
        mode: Mode::Plain { link: Some(Role::Master), linger: Some(Duration::from_secs(60)) },
        ..job
    });
    done.send(Input::Link(LinkEvent::Released { generation: 0 }));
    done.exit_child(ExitHow::Exited(0));
    done.send(Input::Link(LinkEvent::RejoinAsked { generation: 1 }));
    assert!(
        matches!(done.links.as_slice(), [LinkCommand::StopWorkers { reason }] if reason.contains("the job is over"))
    );
}

#[tokio::test(start_paused = true)]
async fn signals_forwarded_ignored_or_stopping() {
    let mut f = Fake::new(cfg());
    let pid = f.pid();
    f.send(Input::Signal { signal: SIGPIPE, own: true });
    f.send(Input::Signal { signal: SIGUSR1, own: false });
    f.send(Input::Signal { signal: Signo::from(nix::sys::signal::Signal::SIGABRT), own: false });
    f.send(Input::Signal { signal: SIGPIPE, own: false });
    assert_eq!(
        f.signals,
        [(pid, SIGUSR1), (pid, Signo::from(nix::sys::signal::Signal::SIGABRT)), (pid, SIGPIPE)],
        "rankvisor's own SIGPIPE stays its own; what others send (a fatal one too) goes to the child"
    );
    f.send(Input::Signal { signal: SIGTERM, own: false });
    assert_eq!(f.signals.last(), Some(&(pid, SIGTERM)));
    f.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(f.exit, Some(143));
}

/// The sweep after a child that ended on its own: TERM to every leftover at once, KILL after the
/// grace, then exit regardless, naming what outlived the KILL.
#[tokio::test(start_paused = true)]
async fn leftover_sweep_terms_then_kills_after_the_grace() {
    let mut r = Replica::new(ReplicaConfig { supervisor: sup(RestartPolicy::Never, RestartScope::Replica), ..cfg() });
    let t0 = Instant::now();
    let mut effects = r.start(t0);
    let pid = match effects.remove(0) {
        Effect::Spawn(_) => Pid::from_raw(42),
        e => panic!("{e:?}"),
    };
    let _ = r.on_input(Input::Child(Event::Spawned { pid }), t0);
    tokio::time::advance(300 * MS).await;
    let out = r.on_input(Input::Child(Event::Exited { pid, how: ExitHow::Exited(0) }), Instant::now());
    assert_eq!(out, [Effect::SweepTerm]);
    assert!(!r.ordering(), "no shutdown: no order");
    assert!(r.on_input(Input::Descendants { alive: 2 }, Instant::now()).is_empty());
    assert_eq!(r.next_deadline(), Some(t0 + 1300 * MS));
    tokio::time::advance(1000 * MS).await;
    assert_eq!(r.on_input(Input::Tick, Instant::now()), [Effect::SweepKill]);
    tokio::time::advance(KILL_WAIT).await;
    let message = "processes below rankvisor outlived SIGKILL by 5s; gave up waiting".to_string();
    assert_eq!(r.on_input(Input::Tick, Instant::now()), [Effect::NameStuck { message }, Effect::Exit { code: 0 }]);
    assert!(r.done());
}

/// Issue 36: a child that outlives SIGKILL (uninterruptible sleep, a frozen cgroup) does not
/// keep rankvisor: at the grace plus [`KILL_WAIT`] it gives up with the KILL's status, KILLs
/// everything else and names what is stuck.
#[tokio::test(start_paused = true)]
async fn a_child_that_outlives_sigkill_is_given_up_at_the_grace_plus_the_kill_wait() {
    let mut f = Fake::new(cfg());
    let pid = f.pid();
    let t0 = Instant::now();
    f.send(Input::Signal { signal: SIGTERM, own: false });
    f.advance_to_deadline().await;
    assert_eq!(f.signals, [(pid, SIGTERM), (pid, SIGKILL)]);
    assert_eq!(f.exit, None);
    f.advance_to_deadline().await;
    assert_eq!(Instant::now() - t0, cfg().supervisor.grace + KILL_WAIT);
    assert_eq!(f.exit, Some(137));
    assert_eq!(f.sweeps, ["KILL"]);
    assert_eq!(f.stuck, [format!("the child (pid {pid}) outlived SIGKILL by 5s; gave up waiting")]);
    assert!(f.r.done());
    // Its late exit changes nothing.
    f.send(Input::Child(Event::Exited { pid, how: ExitHow::Signaled(SIGKILL) }));
    assert_eq!(f.exit, Some(137));
}

/// A shutdown's order: TERM to the child (a program), not to its forked workers; the child exits,
/// the workers are orphans now and get TERM; the one deadline KILLs what is left, then exit.
#[tokio::test(start_paused = true)]
async fn a_shutdown_signals_the_programs_first_and_the_forked_workers_once_their_parent_exited() {
    let mut f = Fake::new(cfg());
    let (t0, pid) = (Instant::now(), f.pid());
    f.below = vec![member(500, pid, true), member(501, pid, true)];
    f.send(Input::Signal { signal: SIGTERM, own: false });
    assert_eq!(f.each, [(vec![pid], SIGTERM)], "the child alone: its workers are forked copies");
    assert!(f.sweeps.is_empty() && f.signals == [(pid, SIGTERM)], "no group signal: {:?}", f.signals);
    assert!(f.r.ordering(), "the loop polls the tree while the workers wait");
    // Still saving: nothing new.
    f.send(Input::Tree(Ok(f.tree())));
    assert_eq!(f.each.len(), 1);
    // It saved and exited: its workers are rankvisor's now; the sweep goes on in the same order.
    tokio::time::advance(300 * MS).await;
    f.below = vec![member(500, ROOT, true), member(501, ROOT, true)];
    f.exit_child(ExitHow::Exited(0));
    let workers = vec![Pid::from_raw(500), Pid::from_raw(501)];
    assert_eq!(f.each.last(), Some(&(workers.clone(), SIGTERM)));
    assert!(f.sweeps.is_empty(), "no TERM to everything: {:?}", f.sweeps);
    f.send(Input::Tree(Ok(f.tree())));
    assert_eq!(f.each.len(), 2, "each gets the signal once");
    // One ignores it: KILL at the later of the shutdown's deadline and a second for the leftovers.
    f.below.pop();
    f.send(Input::Tree(Ok(f.tree())));
    assert_eq!(f.r.next_deadline(), Some(t0 + 1300 * MS));
    f.advance_to_deadline().await;
    assert_eq!((f.sweeps.as_slice(), f.r.ordering()), (["KILL"].as_slice(), false));
    f.advance_to_deadline().await;
    assert_eq!(f.exit, Some(0), "the child's own status");
}

/// The sweep ends as soon as the order finds nobody left.
#[tokio::test(start_paused = true)]
async fn an_ordered_sweep_ends_once_the_tree_is_empty() {
    let mut f = Fake::new(cfg());
    let pid = f.pid();
    f.below = vec![member(500, pid, true)];
    f.send(Input::Signal { signal: Signo::INT, own: false });
    f.below = vec![member(500, ROOT, true)];
    f.exit_child(ExitHow::Signaled(Signo::INT));
    assert_eq!(f.each, [(vec![pid], Signo::INT), (vec![Pid::from_raw(500)], Signo::INT)]);
    assert_eq!(f.exit, None);
    f.below.clear();
    f.send(Input::Tree(Ok(f.tree())));
    assert_eq!(f.exit, Some(130));
}

/// A shell that does not forward signals: it and its python are both programs and get TERM at
/// once; python's forked workers wait for python, not for the shell.
#[tokio::test(start_paused = true)]
async fn a_shell_child_and_its_program_get_the_signal_together() {
    let mut f = Fake::new(cfg());
    let pid = f.pid();
    let python = member(300, pid, false);
    f.below = vec![python.clone(), member(301, python.pid, true), member(302, python.pid, true)];
    f.send(Input::Signal { signal: SIGTERM, own: false });
    assert_eq!(f.each, [(vec![pid], SIGTERM), (vec![python.pid], SIGTERM)], "the child at once, then from the tree");
    assert!(
        f.notes.iter().any(
            |n| matches!(n, Note::Info(i) if i.contains("(2 of the 4 processes below rankvisor); 2 forked helpers"))
        ),
        "{:?}",
        f.notes
    );
    // The shell dies of it; python, saving, is rankvisor's now: its workers still wait.
    f.below[0].ppid = ROOT;
    f.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(f.each.len(), 2, "nothing new");
    assert_eq!(f.exit, None, "python and its workers are still there");
    f.below = vec![member(301, ROOT, true), member(302, ROOT, true)];
    f.send(Input::Tree(Ok(f.tree())));
    assert_eq!(f.each.last(), Some(&(vec![Pid::from_raw(301), Pid::from_raw(302)], SIGTERM)));
    f.below.clear();
    f.send(Input::Descendants { alive: 0 });
    assert_eq!(f.exit, Some(143), "the shell's status");
}

/// Fail closed: without the tree, the signal goes to the whole group at once, as without an order.
#[tokio::test(start_paused = true)]
async fn an_unreadable_proc_signals_the_whole_group() {
    let mut r = Replica::new(cfg());
    let t0 = Instant::now();
    let _ = r.start(t0);
    let pid = Pid::from_raw(42);
    let _ = r.on_input(Input::Child(Event::Spawned { pid }), t0);
    let out = r.on_input(Input::Signal { signal: SIGTERM, own: false }, t0);
    assert_eq!(out.last(), Some(&Effect::ScanTree));
    let out = r.on_input(Input::Tree(Err("/proc: permission denied".into())), t0);
    assert!(out.contains(&Effect::Child(ChildAction::SignalGroup { pid, signal: SIGTERM })), "{out:?}");
    assert!(!r.ordering());
    let out = r.on_input(Input::Child(Event::Exited { pid, how: ExitHow::Signaled(SIGTERM) }), t0);
    assert_eq!(out.last(), Some(&Effect::SweepTerm));
}

/// A stop that is not a shutdown (a hang, a log rule, a new generation) signals the group at
/// once: the child is restarted, nothing waits.
#[tokio::test(start_paused = true)]
async fn a_log_rule_stop_signals_the_group_at_once() {
    let mut f = Fake::new(cfg());
    let pid = f.pid();
    f.below = vec![member(500, pid, true)];
    f.send(Input::LogRule(super::child::LogRuleHit { reason: "LogHang_x".into(), named: vec![("x".into(), None)] }));
    assert_eq!((f.signals.as_slice(), f.each.len(), f.r.ordering()), ([(pid, SIGTERM)].as_slice(), 0, false));
}

/// EMFILE at a restart is the machine's fault: retried under the policy, never a permanent 126. A
/// command that is not there is permanent: 127 at once, no restart.
#[tokio::test(start_paused = true)]
async fn transient_spawn_failures_are_retried() {
    let emfile = Event::SpawnFailed { code: 126, message: "cannot run: Too many open files".into(), transient: true };
    let mut f = Fake::new(cfg());
    f.spawn_failures.push_back(emfile);
    f.exit_child(ExitHow::Exited(1));
    assert_eq!(f.spawns, [(0, 0), (1, 0)], "the immediate restart's spawn, which fails");
    assert_eq!(f.r.state(), ReplicaState::Restarting);
    assert_eq!(f.r.supervisor().child_pid(), None);
    f.advance_to_deadline().await;
    assert_eq!(f.spawns.len(), 3, "retried at the deadline: {:?}", f.spawns);
    assert!(f.r.supervisor().child_pid().is_some() && f.exit.is_none());
    let not_found = Event::SpawnFailed { code: 127, message: "not found".into(), transient: false };
    let g = Fake::with_spawn_failures(cfg(), [not_found]);
    assert_eq!(g.spawns, [(0, 0)]);
    assert_eq!(g.exit, Some(127), "a missing command is not restarted");
    assert_eq!(g.r.supervisor().restarts(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_worker_joining_a_later_generation_starts_its_child_in_it_and_ignores_a_stale_order() {
    let job = sup(RestartPolicy::OnFailure, RestartScope::Job);
    let mut f = Fake::new(ReplicaConfig { supervisor: job, mode: plain(Role::Worker), ..cfg() });
    assert_eq!(f.start_link, 1);
    f.send(Input::Link(LinkEvent::Released { generation: 3 }));
    assert_eq!(f.spawns, [(0, 3)], "the child belongs to the generation the barrier released");
    assert_eq!(f.r.supervisor().generation(), 3);
    f.send(Input::Link(LinkEvent::OrderRestart { generation: 3 }));
    assert!(f.signals.is_empty(), "an order for the generation it is in is stale");
    f.send(Input::Link(LinkEvent::OrderRestart { generation: 4 }));
    assert_eq!(f.signals, [(f.pid(), SIGTERM)], "a newer generation stops the child");
    // The same order again while the child stops for it: stale too, no second rejoin.
    f.send(Input::Link(LinkEvent::OrderRestart { generation: 4 }));
    f.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(f.links, [LinkCommand::Rejoin { generation: 4 }]);
}

fn watched() -> ReplicaConfig {
    let rules = crate::logrules::rules_from_value(&serde_json::json!([
        {"name": "Err", "logPattern": ".*ERROR.*", "faultOnMatch": true}
    ]))
    .unwrap();
    ReplicaConfig { log_rules: Some(super::machine::LogRules(std::sync::Arc::new(rules))), ..cfg() }
}

fn err_hit() -> crate::replica::child::LogRuleHit {
    crate::replica::child::LogRuleHit {
        reason: "LogFault_Err".into(),
        named: vec![("Err".into(), Some("ERROR: boom\n".into()))],
    }
}

/// Issue 34 item 2: a watched child's exit waits for its output to be drained, without the loop
/// waiting: the exit is held, its last lines' verdict names it, and "drained" releases it.
#[tokio::test(start_paused = true)]
async fn a_watched_childs_exit_is_decided_once_its_output_is_drained() {
    let mut f = Fake::new(watched());
    f.hold_drains = true;
    let pid = f.pid();
    f.exit_child(ExitHow::Exited(0));
    assert_eq!((f.drains, f.spawns.len(), f.r.state()), (1, 1, ReplicaState::Running), "held, drain asked");
    // The child's last line fired a rule: the exit is a failure the policy restarts.
    f.send(Input::LogRule(err_hit()));
    assert_eq!(f.signals, [(pid, SIGTERM)], "its group (leftovers) is stopped");
    f.send(Input::OutputDrained);
    assert_eq!(f.spawns.len(), 2, "restarted under OnFailure: the exit's reason is the rule");
    assert_eq!(f.r.supervisor().last_exit_log_rule(), Some(&err_hit()));
    // Without a rule, drained: the exit 0 is a success.
    f.exit_child(ExitHow::Exited(0));
    f.send(Input::OutputDrained);
    assert_eq!((f.r.state(), f.exit), (ReplicaState::Succeeded, Some(0)));
    // A plain child (no rules) is decided at once.
    let mut plain = Fake::new(cfg());
    plain.hold_drains = true;
    plain.exit_child(ExitHow::Exited(0));
    assert_eq!((plain.drains, plain.exit), (0, Some(0)));
}

/// A stdout nobody reads keeps "drained" from coming: the exit goes on at its deadline; a TERM
/// meanwhile is acted on at once.
#[tokio::test(start_paused = true)]
async fn a_held_exit_goes_on_at_its_deadline_and_a_term_meanwhile_is_acted_on_at_once() {
    let mut f = Fake::new(watched());
    f.hold_drains = true;
    let pid = f.pid();
    let t0 = Instant::now();
    f.exit_child(ExitHow::Exited(3));
    assert_eq!(f.r.next_deadline(), Some(t0 + super::machine::DRAIN_WAIT));
    f.send(Input::Signal { signal: SIGTERM, own: false });
    assert_eq!((f.signals.as_slice(), f.r.state()), ([(pid, SIGTERM)].as_slice(), ReplicaState::Stopping));
    f.advance_to_deadline().await;
    assert!(f.warned("not evaluated yet"), "{:?}", f.notes);
    assert_eq!((f.exit, f.r.state()), (Some(3), ReplicaState::Failed), "the child's own status");
    assert_eq!(Instant::now() - t0, super::machine::DRAIN_WAIT);
}

/// `--checkpoint-signal SIGUSR1 --checkpoint-grace 400ms` on top of `cfg`'s 1 s grace.
fn saving(mut c: ReplicaConfig) -> ReplicaConfig {
    c.supervisor.checkpoint = Some(crate::replica::child::CheckpointConfig { signal: Signo::USR1, grace: 400 * MS });
    c
}

/// A preempted replica saves first: the checkpoint signal to the training process and the
/// programs below it (a shell's python), never to the forked helpers; the stop's own TERM once
/// the checkpoint's grace is over, and SIGKILL still at the grace period's end.
#[tokio::test(start_paused = true)]
async fn a_stop_is_held_for_the_checkpoint_then_goes_on_in_the_shutdowns_order() {
    let mut f = Fake::new(saving(cfg()));
    let (t0, pid) = (Instant::now(), f.pid());
    let python = member(300, pid, false);
    f.below = vec![python.clone(), member(301, python.pid, true)];
    f.send(Input::Signal { signal: SIGTERM, own: false });
    assert_eq!(f.each, [(vec![pid], Signo::USR1), (vec![python.pid], Signo::USR1)], "helpers left out");
    assert_eq!(f.r.state(), ReplicaState::Stopping, "the master learns of the stop");
    assert!(!f.r.ordering(), "no shutdown order yet: the stop is held");
    assert_eq!(f.r.next_deadline(), Some(t0 + 400 * MS));
    // A fan-out from the master meanwhile: it got the signal already.
    f.send(Input::Link(LinkEvent::Checkpoint { reason: "replica 2 is being stopped".into() }));
    assert_eq!(f.each.len(), 2);
    f.advance_to_deadline().await;
    assert_eq!(f.each[2], (vec![pid], SIGTERM), "the stop's TERM in the shutdown's order");
    assert_eq!(f.each[3], (vec![python.pid], SIGTERM));
    assert_eq!(f.r.next_deadline(), Some(t0 + 1000 * MS), "KILL at the grace period's end, from the stop");
    f.advance_to_deadline().await;
    assert_eq!(f.signals.last(), Some(&(pid, Signo::KILL)));
}

/// A training process that saves and exits ends the held stop at once: no TERM to it.
#[tokio::test(start_paused = true)]
async fn a_child_that_exits_after_saving_ends_the_held_stop() {
    let mut f = Fake::new(saving(cfg()));
    let pid = f.pid();
    f.send(Input::Signal { signal: SIGTERM, own: false });
    tokio::time::advance(100 * MS).await;
    f.exit_child(ExitHow::Exited(0));
    assert_eq!(f.signals, [(pid, Signo::USR1)], "the checkpoint signal alone");
    assert_eq!(f.exit, Some(0));
    // A second TERM during the hold ends it at once (the user insists).
    let mut g = Fake::new(saving(cfg()));
    let pid = g.pid();
    g.send(Input::Signal { signal: SIGTERM, own: false });
    g.send(Input::Signal { signal: SIGTERM, own: false });
    assert_eq!(g.signals, [(pid, Signo::USR1), (pid, SIGTERM)]);
}

/// The master's fan-out: a running child saves once and goes on; without the option, nothing.
#[tokio::test(start_paused = true)]
async fn the_masters_checkpoint_signals_a_running_child_once_and_it_goes_on() {
    let mut f = Fake::new(saving(ReplicaConfig { mode: plain(Role::Worker), ..cfg() }));
    f.send(Input::Link(LinkEvent::Released { generation: 0 }));
    let pid = f.pid();
    let ask = || Input::Link(LinkEvent::Checkpoint { reason: "replica 3 is being stopped".into() });
    f.send(ask());
    f.send(ask());
    assert_eq!(f.signals, [(pid, Signo::USR1)]);
    assert_eq!(f.r.state(), ReplicaState::Running);
    let mut plain_worker = Fake::new(ReplicaConfig { mode: plain(Role::Worker), ..cfg() });
    plain_worker.send(Input::Link(LinkEvent::Released { generation: 0 }));
    plain_worker.send(ask());
    assert!(plain_worker.signals.is_empty());
}

/// Job scope: a restart order (another replica's fault) and a give-up (an unhealthy node) are
/// stops the job saves before, like a shutdown; a hang is not (the hung process cannot save).
#[tokio::test(start_paused = true)]
async fn a_job_restart_and_an_unhealthy_node_save_first() {
    let job = saving(ReplicaConfig {
        supervisor: sup(RestartPolicy::OnFailure, RestartScope::Job),
        mode: plain(Role::Worker),
        ..cfg()
    });
    let mut f = Fake::new(job);
    f.send(Input::Link(LinkEvent::Released { generation: 0 }));
    let pid = f.pid();
    f.send(Input::Link(LinkEvent::OrderRestart { generation: 1 }));
    assert_eq!(f.signals, [(pid, Signo::USR1)]);
    f.advance_to_deadline().await;
    assert_eq!(f.signals, [(pid, Signo::USR1), (pid, SIGTERM)], "TERM to the group after the checkpoint");
    f.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(f.links, [LinkCommand::Rejoin { generation: 1 }]);

    let mut g = Fake::new(ReplicaConfig { health_gate: HealthGate::FailFast, ..saving(cfg()) });
    g.send(Input::Health(label("Schedulable")));
    let pid = g.pid();
    g.send(Input::Health(label("UnschedulablePendingReplacement")));
    assert_eq!(g.signals, [(pid, Signo::USR1)]);
    g.advance_to_deadline().await;
    g.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(g.exit, Some(138));
}

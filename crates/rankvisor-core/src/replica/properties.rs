//! A property test over the replica machine: random but valid input sequences, fed as the event
//! loop feeds them (a `Spawn` becomes `Spawned` or a spawn failure, a child exits only while it
//! lives, a `Tick` comes at the named deadline or later), under every policy, scope, gate and
//! role, and in agent mode (`--agent hyperpod`: the operator's orders). After every step: at most one live child, never a `Spawn` while a child lives, never a
//! signal to a process that is not the live child, at most one `Exit`, and no deadline in the
//! past; a shutdown's order signals only processes of the tree it was given, and never the
//! child's forked worker while the child lives; in agent mode, a child starts only while the agent is RUNNING. Then a TERM and the loop's driving must end in exactly one `Exit`.

use super::child::{CheckpointConfig, ChildAction, Event, HangConfig, SupervisorConfig};
use super::link::LinkEvent;
use super::machine::{Effect, HealthGate, Input, Mode, Replica, ReplicaConfig};
use crate::agent::rules::AttemptRules;
use crate::agent::{AgentState, Assignment, Order, StopOrder};
use crate::backoff::BackoffConfig;
use crate::exit::ExitHow;
use crate::health::{verdict, HealthError, Observation};
use crate::kube::NodeSnapshot;
use crate::policy::{RestartPolicy, RestartScope};
use crate::process::{Member, Tree};
use crate::rank::Role;
use crate::signo::Signo;
use nix::unistd::Pid;
use proptest::prelude::*;
use std::time::Duration;
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// One thing that may happen next, made valid by the harness for the machine's current state.
#[derive(Debug, Clone)]
enum Step {
    /// The live child (if any) exits, or is killed by a signal.
    ChildExits { code: i32, signaled: bool },
    /// Someone else's process is reaped (an orphan).
    OrphanReaped,
    /// Time passes; then a Tick.
    Wait { ms: u64 },
    /// Time passes to the machine's next deadline; then a Tick.
    ToDeadline,
    /// A signal reaches rankvisor.
    Signal { signal: Signo, own: bool },
    /// The heartbeat file is touched.
    Beat,
    /// A node-health verdict (or a source that cannot be read).
    Health { healthy: Option<bool> },
    /// The link's news (taken modulo the events a link of this role can send).
    Link { which: u8, generation: u64 },
    /// The next spawn fails (transiently or not).
    NextSpawnFails { transient: bool },
    /// While sweeping: how many processes are left.
    Descendants { alive: usize },
    /// While a shutdown's order waits: the loop's poll of the tree.
    PollTree,
    /// An order from the HyperPod operator (ignored outside agent mode).
    Agent { which: u8, graceful: bool, timeout: Option<u8>, fault_count: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (prop_oneof![Just(0), Just(1), Just(3), Just(137), Just(143)], any::<bool>())
            .prop_map(|(code, signaled)| Step::ChildExits { code, signaled }),
        1 => Just(Step::OrphanReaped),
        3 => (0u64..3_000).prop_map(|ms| Step::Wait { ms }),
        4 => Just(Step::ToDeadline),
        2 => (prop_oneof![Just(Signo::TERM), Just(Signo::INT), Just(Signo::USR1), Just(Signo::PIPE)], any::<bool>())
            .prop_map(|(signal, own)| Step::Signal { signal, own }),
        2 => Just(Step::Beat),
        2 => prop_oneof![Just(Some(true)), Just(Some(false)), Just(None)].prop_map(|healthy| Step::Health { healthy }),
        3 => (0u8..9, 0u64..4).prop_map(|(which, generation)| Step::Link { which, generation }),
        1 => any::<bool>().prop_map(|transient| Step::NextSpawnFails { transient }),
        1 => (0usize..3).prop_map(|alive| Step::Descendants { alive }),
        2 => Just(Step::PollTree),
        4 => (0u8..4, any::<bool>(), prop::option::of(0u8..3), 0u8..3)
            .prop_map(|(which, graceful, timeout, fault_count)| Step::Agent { which, graceful, timeout, fault_count }),
    ]
}

fn config() -> impl Strategy<Value = ReplicaConfig> {
    let policy = prop_oneof![
        Just(RestartPolicy::Never),
        Just(RestartPolicy::OnFailure),
        Just(RestartPolicy::Always),
        Just(RestartPolicy::ExitCode)
    ];
    let scope = prop_oneof![Just(RestartScope::Replica), Just(RestartScope::Job)];
    let gate = prop_oneof![Just(HealthGate::Off), Just(HealthGate::FailFast), Just(HealthGate::Wait)];
    let link = prop_oneof![Just(None), Just(Some(Role::Master)), Just(Some(Role::Worker))];
    (policy, scope, gate, link, 0u32..4, any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
        |(policy, scope, health_gate, link, backoff_limit, hang, linger, agent, checkpoint)| ReplicaConfig {
            // Agent mode as `config::agent` sets it: each attempt once, no rankvisor barrier.
            supervisor: SupervisorConfig {
                policy: if agent { RestartPolicy::Never } else { policy },
                backoff_limit,
                backoff: BackoffConfig { initial: 200 * MS, max: 800 * MS, reset: 10_000 * MS },
                grace: 1000 * MS,
                hang: hang.then_some(HangConfig { timeout: 500 * MS, startup: 700 * MS }),
                scope: if agent { RestartScope::Replica } else { scope },
                checkpoint: checkpoint.then_some(CheckpointConfig { signal: Signo::USR1, grace: 400 * MS }),
            },
            health_gate,
            mode: if agent {
                Mode::Agent
            } else {
                Mode::Plain { link, linger: (linger && link == Some(Role::Master)).then_some(2000 * MS) }
            },
            log_rules: None,
        },
    )
}

fn observation(healthy: Option<bool>) -> Observation {
    match healthy {
        None => Err(HealthError::Unreadable { path: "/etc/podinfo/labels".into(), problem: "gone".into() }),
        Some(h) => {
            let mut s = NodeSnapshot::default();
            let value = if h { "Schedulable" } else { "UnschedulablePendingReplacement" };
            s.labels.insert("sagemaker.amazonaws.com/node-health-status".into(), value.into());
            Ok(verdict(&s, false))
        }
    }
}

/// The machine, driven as the event loop drives it, with the invariants checked on every effect.
struct Harness {
    r: Replica,
    role: Option<Role>,
    now: Instant,
    next_pid: i32,
    live: Option<Pid>,
    fail_next_spawn: Option<bool>,
    link_started: bool,
    exits: u32,
    sweeping: bool,
    /// A forked worker of the child's, found by the first look at the tree; its parent is the
    /// live child, or rankvisor once the child is gone. None once the leftovers are gone.
    worker: Option<Pid>,
    /// The pids of the last tree given.
    last_tree: Vec<Pid>,
}

const ROOT: Pid = Pid::from_raw(1);

impl Harness {
    fn new(cfg: ReplicaConfig) -> Result<Self, TestCaseError> {
        let role = cfg.mode.link();
        let now = Instant::now();
        let mut h = Self {
            r: Replica::new(cfg),
            role,
            now,
            next_pid: 1000,
            live: None,
            fail_next_spawn: None,
            link_started: false,
            exits: 0,
            sweeping: false,
            worker: None,
            last_tree: vec![],
        };
        let effects = h.r.start(now);
        h.apply(effects)?;
        Ok(h)
    }

    fn send(&mut self, input: Input) -> Result<(), TestCaseError> {
        let effects = self.r.on_input(input, self.now);
        self.apply(effects)?;
        if let Some(d) = self.r.next_deadline() {
            prop_assert!(d >= self.now, "a deadline {:?} in the past", self.now - d);
        }
        prop_assert_eq!(self.r.supervisor().child_pid(), self.live, "the machine and the processes disagree");
        Ok(())
    }

    fn apply(&mut self, effects: Vec<Effect>) -> Result<(), TestCaseError> {
        for e in effects {
            prop_assert_eq!(self.exits, 0, "an effect after Exit: {:?}", e);
            match e {
                Effect::Spawn(_) => {
                    prop_assert!(self.live.is_none(), "Spawn while child {:?} lives", self.live);
                    if let Some(view) = self.r.agent_status(|_| std::time::UNIX_EPOCH) {
                        prop_assert_eq!(view.state, AgentState::Running, "a child started outside RUNNING");
                    }
                    match self.fail_next_spawn.take() {
                        Some(transient) => self.send(Input::Child(Event::SpawnFailed {
                            code: 127,
                            message: "cannot run".into(),
                            transient,
                        }))?,
                        None => {
                            self.next_pid += 1;
                            let pid = Pid::from_raw(self.next_pid);
                            self.live = Some(pid);
                            self.send(Input::Child(Event::Spawned { pid }))?;
                        }
                    }
                }
                Effect::Child(ChildAction::SignalGroup { pid, .. }) => {
                    prop_assert_eq!(Some(pid), self.live, "a signal to a group that is not the live child's");
                }
                Effect::Child(ChildAction::KillLeftovers { pid }) => {
                    prop_assert!(self.live.is_none(), "leftovers killed while the child {} lives", pid);
                }
                Effect::Child(ChildAction::TerminationMessage(_)) | Effect::Note(_) => {}
                // Taken at once (the loop's task answers; its deadline is the machine's).
                Effect::Child(ChildAction::Snapshot { pid, .. }) => {
                    prop_assert_eq!(Some(pid), self.live, "a snapshot of a process that is not the live child");
                    self.send(Input::Child(Event::Snapshotted { top: None }))?;
                }
                Effect::StartLink => {
                    prop_assert!(!self.link_started, "the link started twice");
                    prop_assert!(self.role.is_some(), "a link started for a job without one");
                    self.link_started = true;
                }
                Effect::Link(_) => {}
                Effect::DrainOutput => self.send(Input::OutputDrained)?,
                Effect::Child(ChildAction::Spawn { .. }) => prop_assert!(false, "a spawn without its order"),
                Effect::Child(ChildAction::SignalPrograms { .. } | ChildAction::Checkpoint { .. }) => {
                    prop_assert!(false, "a signal to the programs without its order: the machine sends ScanTree")
                }
                Effect::SweepTerm | Effect::SweepKill => self.sweeping = true,
                // Given up on (it outlived SIGKILL): the machine no longer counts it, and exits.
                Effect::NameStuck { .. } => self.live = None,
                Effect::ScanTree => self.give_tree()?,
                Effect::SignalEach { pids, .. } => {
                    for pid in pids {
                        // The live child (signalled at once), or one the tree showed.
                        prop_assert!(
                            Some(pid) == self.live || self.last_tree.contains(&pid),
                            "{} is neither the child nor in the tree {:?}",
                            pid,
                            self.last_tree
                        );
                        let parent_lives = self.live.is_some();
                        prop_assert!(
                            !(Some(pid) == self.worker && parent_lives),
                            "a forked worker signalled while its parent lives"
                        );
                    }
                }
                Effect::Exit { .. } => self.exits += 1,
            }
        }
        Ok(())
    }

    /// The loop's answer to `ScanTree` (and its poll): the live child, and its forked worker.
    fn give_tree(&mut self) -> Result<(), TestCaseError> {
        if self.worker.is_none() {
            self.worker = self.live.map(|p| Pid::from_raw(p.as_raw() + 50_000));
        }
        let child = self.live.map(|pid| Member { pid, ppid: ROOT, forked: false, cmdline: b"train\0".to_vec() });
        let worker =
            self.worker.map(|pid| Member { pid, ppid: self.live.unwrap_or(ROOT), forked: true, cmdline: vec![] });
        let members: Vec<Member> = child.into_iter().chain(worker).collect();
        self.last_tree = members.iter().map(|m| m.pid).collect();
        self.send(Input::Tree(Ok(Tree { root: ROOT, members })))
    }

    fn link_event(&self, which: u8, generation: u64) -> Option<LinkEvent> {
        if !self.link_started {
            return None;
        }
        let reason = "test".to_string();
        match (self.role?, which) {
            (_, 0) => Some(LinkEvent::Released { generation }),
            (_, 8) => Some(LinkEvent::Checkpoint { reason }),
            (_, 1) => Some(LinkEvent::Failed { message: reason }),
            (Role::Master, 2) => Some(LinkEvent::RejoinAsked { generation }),
            (Role::Master, _) => Some(LinkEvent::WorkersDone(which.is_multiple_of(2))),
            (Role::Worker, 2) => Some(LinkEvent::OrderRestart { generation }),
            (Role::Worker, 3) => Some(LinkEvent::OrderStop { reason }),
            (Role::Worker, 4) => Some(LinkEvent::MasterFinished { reason }),
            (Role::Worker, 5) => Some(LinkEvent::MasterLost { reason }),
            (Role::Worker, 6) => Some(LinkEvent::Reconnected { generation }),
            (Role::Worker, _) => Some(LinkEvent::ReconnectFailed { message: reason }),
        }
    }

    fn child_exits(&mut self, code: i32, signaled: bool) -> Result<(), TestCaseError> {
        let Some(pid) = self.live.take() else { return Ok(()) };
        let how = if signaled {
            ExitHow::Signaled(Signo::new(code.clamp(1, 64)).expect("1..=64 is a signal"))
        } else {
            ExitHow::Exited(code)
        };
        self.send(Input::Child(Event::Exited { pid, how }))
    }

    fn step(&mut self, s: Step) -> Result<(), TestCaseError> {
        if self.exits > 0 {
            return Ok(());
        }
        match s {
            Step::ChildExits { code, signaled } => self.child_exits(code, signaled),
            Step::OrphanReaped => {
                self.send(Input::Child(Event::Exited { pid: Pid::from_raw(7), how: ExitHow::Exited(0) }))
            }
            Step::Wait { ms } => {
                self.now += Duration::from_millis(ms);
                self.send(Input::Tick)
            }
            Step::ToDeadline => match self.r.next_deadline() {
                Some(d) => {
                    self.now = self.now.max(d);
                    self.send(Input::Tick)
                }
                None => Ok(()),
            },
            Step::Signal { signal, own } => self.send(Input::Signal { signal, own }),
            Step::Beat => self.send(Input::Beat { at: self.now }),
            Step::Health { healthy } => self.send(Input::Health(observation(healthy))),
            Step::Link { which, generation } => match self.link_event(which, generation) {
                Some(ev) => self.send(Input::Link(ev)),
                None => Ok(()),
            },
            Step::NextSpawnFails { transient } => {
                self.fail_next_spawn = Some(transient);
                Ok(())
            }
            Step::Descendants { alive } if self.sweeping || self.r.sweeping() => {
                if alive == 0 {
                    self.worker = None;
                }
                self.send(Input::Descendants { alive })
            }
            Step::Descendants { .. } => Ok(()),
            Step::PollTree if self.r.ordering() => self.give_tree(),
            Step::PollTree => Ok(()),
            Step::Agent { which, graceful, timeout, fault_count } => {
                let assignment = Assignment {
                    rank: 0,
                    nnodes: 2,
                    fault_count: i64::from(fault_count),
                    master_addr: "m".into(),
                    master_port: 1,
                    ip_version: None,
                    rules: AttemptRules::none(),
                };
                let order = match which {
                    0 => Order::Start(assignment),
                    1 => Order::Update(assignment),
                    2 => Order::Stop(StopOrder { graceful, timeout: timeout.map(|t| Duration::from_secs(t.into())) }),
                    _ => Order::Shutdown,
                };
                self.send(Input::Agent(order))
            }
        }
    }

    /// What the loop does after a TERM: the child dies of it (or of the KILL at the grace
    /// deadline), the leftovers are swept, deadlines pass, until the machine exits.
    fn finish(&mut self) -> Result<(), TestCaseError> {
        if self.exits == 0 {
            self.send(Input::Signal { signal: Signo::TERM, own: false })?;
        }
        for _ in 0..200 {
            if self.exits > 0 {
                break;
            }
            if self.live.is_some() {
                self.child_exits(143, false)?;
            } else if self.r.ordering() {
                // The worker got its signal and is gone.
                self.worker = None;
                self.give_tree()?;
            } else if self.sweeping || self.r.sweeping() {
                self.send(Input::Descendants { alive: 0 })?;
            } else if let Some(d) = self.r.next_deadline() {
                self.now = self.now.max(d);
                self.send(Input::Tick)?;
            } else if self.role.is_some() && self.link_started {
                // Waiting on the link (a barrier, a new generation) when the TERM came: the
                // link answers, as it does, with a failure or a release.
                self.send(Input::Link(LinkEvent::Failed { message: "stopped".into() }))?;
            } else {
                // Waiting for the node's first verdict: the source answers.
                self.send(Input::Health(observation(Some(true))))?;
            }
        }
        prop_assert_eq!(self.exits, 1, "after TERM the machine must exit exactly once");
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn every_valid_input_sequence_keeps_the_invariants(cfg in config(), steps in prop::collection::vec(step(), 0..60)) {
        let mut h = Harness::new(cfg)?;
        for s in steps {
            h.step(s)?;
        }
        h.finish()?;
    }
}

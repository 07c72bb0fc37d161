//! Agent mode (`--agent hyperpod`): the operator's orders and each attempt's end, in the replica
//! machine, with paused time and the fake process layer.

use super::*;
use crate::agent::rules::AttemptRules;
use crate::agent::{AgentState, Assignment, Order, StopOrder};

fn agent_cfg() -> ReplicaConfig {
    ReplicaConfig { supervisor: sup(RestartPolicy::Never, RestartScope::Replica), mode: Mode::Agent, ..cfg() }
}

fn assignment(fault_count: i64) -> Assignment {
    Assignment {
        rank: 1,
        nnodes: 2,
        fault_count,
        master_addr: "10.0.0.1".into(),
        master_port: 23456,
        ip_version: None,
        rules: AttemptRules::none(),
    }
}

impl Fake {
    fn agent(&self) -> AgentState {
        self.r.agent_status(|_| std::time::UNIX_EPOCH).expect("agent mode").state
    }

    fn order(&mut self, order: Order) {
        self.send(Input::Agent(order));
    }

    fn reason(&self) -> Option<String> {
        self.r.agent_status(|_| std::time::UNIX_EPOCH).and_then(|v| v.reason)
    }
}

#[tokio::test(start_paused = true)]
async fn the_operators_sequence_fault_stop_restart_complete_shutdown() {
    let mut f = Fake::new(agent_cfg());
    assert_eq!((f.agent(), f.spawns.len()), (AgentState::Ready, 0), "the child waits for /start");
    f.order(Order::Start(assignment(0)));
    assert_eq!((f.agent(), f.reason().as_deref(), f.spawns.len()), (AgentState::Running, Some("Running"), 1));
    assert_eq!(f.r.assignment().map(|a| a.fault_count), Some(0));
    f.exit_child(ExitHow::Exited(3));
    assert_eq!((f.agent(), f.reason().as_deref()), (AgentState::Faulted, Some("WorkerCrash")));
    let msg = f.r.agent_status(|_| std::time::UNIX_EPOCH).and_then(|v| v.message).unwrap();
    assert!(msg.starts_with("A training worker process has crashed:\n    Local Rank 0 exited with code 3"), "{msg}");
    assert_eq!((f.spawns.len(), f.exit, f.messages.len()), (1, None, 0), "no restart, no exit, no termination message");
    f.order(Order::Stop(StopOrder::default()));
    assert_eq!(f.agent(), AgentState::Ready, "nothing to stop: READY at once");
    f.order(Order::Start(assignment(1)));
    assert_eq!((f.agent(), f.spawns.len()), (AgentState::Running, 2));
    assert_eq!(f.r.assignment().map(|a| a.fault_count), Some(1));
    f.exit_child(ExitHow::Exited(0));
    assert_eq!((f.agent(), f.reason()), (AgentState::Completed, None));
    f.order(Order::Shutdown);
    assert_eq!((f.agent(), f.exit), (AgentState::Shutdown, Some(0)), "/shutdown exits with the last attempt's status");
    let states: Vec<_> = f.r.agent_status(|_| std::time::UNIX_EPOCH).unwrap().transitions.iter().map(|t| t.0).collect();
    use AgentState::*;
    assert_eq!(states, [Init, Ready, Running, Faulted, Stopping, Completed, Shutdown], "first-entry order");
}

#[tokio::test(start_paused = true)]
async fn stop_signals_the_running_child_then_kills_after_the_timeout_then_ready() {
    let mut f = Fake::new(agent_cfg());
    f.order(Order::Start(assignment(0)));
    let pid = f.pid();
    f.order(Order::Stop(StopOrder { graceful: true, timeout: Some(Duration::from_secs(5)) }));
    assert_eq!((f.agent(), f.signals.as_slice()), (AgentState::Stopping, [(pid, SIGUSR1)].as_slice()));
    let before = Instant::now();
    f.advance_to_deadline().await;
    assert_eq!((f.signals[1], Instant::now() - before), ((pid, SIGKILL), Duration::from_secs(5)));
    f.exit_child(ExitHow::Signaled(SIGKILL));
    assert_eq!((f.agent(), f.exit), (AgentState::Ready, None));
    f.order(Order::Start(assignment(1)));
    f.order(Order::Stop(StopOrder::default()));
    assert_eq!(f.signals[2], (f.pid(), SIGTERM), "not graceful: SIGTERM, rankvisor's grace");
}

#[tokio::test(start_paused = true)]
async fn orders_the_table_refuses_are_ignored() {
    let mut f = Fake::new(agent_cfg());
    f.order(Order::Stop(StopOrder::default()));
    assert_eq!(f.agent(), AgentState::Ready, "READY -> STOPPING is not a transition");
    f.order(Order::Start(assignment(0)));
    f.order(Order::Start(assignment(5)));
    assert_eq!((f.agent(), f.spawns.len()), (AgentState::Running, 1), "a second /start starts nothing");
    assert_eq!(f.r.assignment().map(|a| a.fault_count), Some(5), "but its assignment is kept, as the agent does");
    f.exit_child(ExitHow::Exited(1));
    f.order(Order::Start(assignment(2)));
    assert_eq!((f.agent(), f.spawns.len()), (AgentState::Faulted, 1), "FAULTED -> RUNNING is not a transition");
    f.order(Order::Update(assignment(7)));
    assert_eq!((f.agent(), f.r.assignment().map(|a| a.fault_count)), (AgentState::Faulted, Some(7)));
}

#[tokio::test(start_paused = true)]
async fn shutdown_while_running_stops_the_child_and_exits_with_its_status() {
    let mut f = Fake::new(agent_cfg());
    f.order(Order::Start(assignment(0)));
    let pid = f.pid();
    f.order(Order::Shutdown);
    assert_eq!((f.agent(), f.signals.as_slice()), (AgentState::Shutdown, [(pid, SIGTERM)].as_slice()));
    f.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!(f.exit, Some(128 + SIGTERM.raw()));
}

#[tokio::test(start_paused = true)]
async fn sigterm_without_an_attempt_exits_with_the_last_status() {
    let mut f = Fake::new(agent_cfg());
    f.order(Order::Start(assignment(0)));
    f.exit_child(ExitHow::Exited(2));
    f.send(Input::Signal { signal: SIGTERM, own: false });
    assert_eq!(f.exit, Some(2));
    let mut idle = Fake::new(agent_cfg());
    idle.send(Input::Signal { signal: SIGTERM, own: false });
    assert_eq!(idle.exit, Some(128 + SIGTERM.raw()), "no attempt ever ran: 128+TERM, as before any start");
}

#[tokio::test(start_paused = true)]
async fn sigterm_during_an_attempt_exits_instead_of_faulting() {
    let mut f = Fake::new(agent_cfg());
    f.order(Order::Start(assignment(0)));
    f.send(Input::Signal { signal: SIGTERM, own: false });
    f.exit_child(ExitHow::Exited(0));
    assert_eq!((f.agent(), f.exit), (AgentState::Running, Some(0)));
}

#[tokio::test(start_paused = true)]
async fn an_unhealthy_node_keeps_the_agent_in_init_and_says_why() {
    let mut f = Fake::new(ReplicaConfig { health_gate: HealthGate::Wait, ..agent_cfg() });
    assert_eq!(f.agent(), AgentState::Init, "no verdict yet");
    f.send(Input::Health(label("Unschedulable")));
    let view = f.r.agent_status(|_| std::time::UNIX_EPOCH).unwrap();
    assert_eq!((view.state, view.reason.as_deref()), (AgentState::Init, Some("NodeUnhealthy")));
    assert!(view.message.as_deref().unwrap_or("").contains("Unschedulable"), "{view:?}");
    f.order(Order::Start(assignment(0)));
    assert_eq!((f.agent(), f.spawns.len()), (AgentState::Init, 0), "INIT -> RUNNING is not a transition");
    f.send(Input::Health(label("Schedulable")));
    assert_eq!((f.agent(), f.reason()), (AgentState::Ready, None));
}

#[tokio::test(start_paused = true)]
async fn a_hung_attempt_faults_as_unhealthy() {
    let hang = crate::replica::child::HangConfig { timeout: 100 * MS, startup: 100 * MS };
    let mut cfg = agent_cfg();
    cfg.supervisor.hang = Some(hang);
    let mut f = Fake::new(cfg);
    f.order(Order::Start(assignment(0)));
    let pid = f.pid();
    f.advance_to_deadline().await;
    assert_eq!(f.snapshots, [(pid, "hung".to_string())], "the snapshot before the hang's stop");
    f.exit_child(ExitHow::Exited(0));
    assert_eq!((f.agent(), f.reason().as_deref()), (AgentState::Faulted, Some("WorkerUnhealthy")));
}

#[tokio::test(start_paused = true)]
async fn a_firing_log_rule_faults_the_agent_and_leaves_the_child_to_the_operators_stop() {
    use crate::replica::child::LogRuleHit;
    let mut f = Fake::new(agent_cfg());
    f.order(Order::Start(assignment(0)));
    let pid = f.pid();
    let hit = LogRuleHit { reason: "LogHang_Step".into(), named: vec![("Step".into(), Some("it's step 3\n".into()))] };
    f.send(Input::LogRule(hit.clone()));
    assert!(f.signals.is_empty(), "as hyperpodrun: the child keeps running");
    // Issue 36 item 2: a hang's FAULTED takes the snapshot at once, while the child still is where
    // it hung (the operator's stop comes later).
    assert_eq!(f.snapshots, [(pid, "LogHang_Step".to_string())]);
    assert_eq!((f.agent(), f.reason().as_deref()), (AgentState::Faulted, Some("LogHang_Step")));
    let msg = f.r.agent_status(|_| std::time::UNIX_EPOCH).and_then(|v| v.message).unwrap();
    assert_eq!(
        msg,
        "The job is hanging (not receiving required logs) on the following log monitoring rules and corresponding \
         last matched log lines: {'Step': \"it's step 3\\n\"}"
    );
    assert_eq!((f.spawns.len(), f.exit), (1, None), "the operator decides what follows");
    // A second firing changes nothing; the graceful /stop reaches the child with SIGUSR1.
    f.send(Input::LogRule(hit));
    f.order(Order::Stop(StopOrder { graceful: true, timeout: Some(Duration::from_secs(5)) }));
    assert_eq!(f.signals, [(pid, SIGUSR1)]);
    assert_eq!(f.agent(), AgentState::Stopping);
    f.exit_child(ExitHow::Exited(0));
    f.send(Input::Descendants { alive: 0 });
    assert_eq!(f.agent(), AgentState::Ready);

    // One that ends on its own while FAULTED: still FAULTED, rankvisor stays for the operator.
    let mut g = Fake::new(agent_cfg());
    g.order(Order::Start(assignment(0)));
    g.send(Input::LogRule(LogRuleHit { reason: "LogFault_Err".into(), named: vec![("Err".into(), None)] }));
    g.exit_child(ExitHow::Exited(1));
    g.send(Input::Descendants { alive: 0 });
    assert_eq!((g.agent(), g.reason().as_deref(), g.exit), (AgentState::Faulted, Some("LogFault_Err"), None));
    assert!(g.snapshots.is_empty(), "a fault rule is not a hang: no snapshot");
}

/// Issue 34 item 6: SIGTERM while `/stop` runs with a long timeout is the pod's deletion: TERM,
/// rankvisor's grace, KILL, as in every other state (not the `/stop`'s 600 s).
#[tokio::test(start_paused = true)]
async fn sigterm_during_stopping_kills_after_the_grace_not_the_stops_timeout() {
    let mut f = Fake::new(agent_cfg());
    f.order(Order::Start(assignment(0)));
    let pid = f.pid();
    f.order(Order::Stop(StopOrder { graceful: false, timeout: Some(Duration::from_secs(600)) }));
    tokio::time::advance(Duration::from_secs(10)).await;
    let termed = Instant::now();
    f.send(Input::Signal { signal: SIGTERM, own: false });
    f.advance_to_deadline().await;
    assert_eq!(f.signals.last(), Some(&(pid, SIGKILL)));
    assert_eq!(Instant::now() - termed, 1000 * MS, "rankvisor's grace after the TERM");
    f.exit_child(ExitHow::Signaled(SIGKILL));
    assert_eq!(f.exit, Some(128 + SIGKILL.raw()));
}

/// Issue 34 item 6: READY says the node is free; an escapee of the stopped attempt (a `setsid`
/// grandchild) is swept first: TERM, KILL at the grace, READY once none is left.
#[tokio::test(start_paused = true)]
async fn ready_waits_until_the_stopped_attempts_escapees_are_gone() {
    let mut f = Fake::new(agent_cfg());
    f.order(Order::Start(assignment(0)));
    f.order(Order::Stop(StopOrder::default()));
    f.leftovers = 1;
    f.exit_child(ExitHow::Signaled(SIGTERM));
    assert_eq!((f.agent(), f.sweeps.as_slice()), (AgentState::Stopping, ["TERM"].as_slice()), "an escapee runs");
    assert!(f.r.sweeping(), "the loop counts what is left");
    f.advance_to_deadline().await;
    assert_eq!(f.sweeps, ["TERM", "KILL"], "it ignored TERM: KILL at the grace");
    f.send(Input::Descendants { alive: 0 });
    assert_eq!((f.agent(), f.exit), (AgentState::Ready, None), "READY once the tree is gone");
    assert!(!f.r.sweeping());
    f.order(Order::Start(assignment(1)));
    assert_eq!(f.agent(), AgentState::Running);
}

//! Scenarios on a fake clock: the operator's decisions with no process and no HTTP.

use std::time::Duration;

use rankvisor_core::exit::ExitHow;
use rankvisor_core::status::AgentState;

use super::*;
use crate::hyperpodjob::admission::{admit_hyperpod_job, LoadedHyperPodJob};
use crate::k8s::document::documents;
use crate::kubelet::cluster::ClusterAction;

const MS: Duration = Duration::from_millis(1);

fn job(extra_run_policy: &str, replicas: u32) -> LoadedHyperPodJob {
    let text = format!(
        "apiVersion: sagemaker.amazonaws.com/v1\nkind: HyperPodPyTorchJob\nmetadata:\n  name: hp\nspec:\n  replicaSpecs:\n    - name: pods\n      replicas: {replicas}\n      template:\n        spec:\n          containers:\n            - name: t\n              image: i\n              command: [sh, -c, 'true']\n  runPolicy:\n    ttlSecondsAfterFinished: -1\n{extra_run_policy}"
    );
    admit_hyperpod_job(&documents(&text, "t.yaml").unwrap(), "t.yaml").unwrap()
}

/// The operator with a fake clock, collecting what it asks for.
struct Sim {
    c: HyperPodController,
    now: Duration,
    calls: Vec<AgentRequest>,
    actions: Vec<ClusterAction>,
}

impl Sim {
    fn new(extra_run_policy: &str, replicas: u32) -> Self {
        let c = HyperPodController::new(
            job(extra_run_policy, replicas).job,
            ControllerConfig::default(),
            OperatorSettings::default(),
            23456,
        );
        Self { c, now: Duration::ZERO, calls: Vec::new(), actions: Vec::new() }
    }

    fn take(&mut self, step: Step) {
        self.actions.extend(step.actions);
        self.calls.extend(self.c.take_calls());
    }

    /// The clock moves to `now` and the controller's timers are looked at.
    fn tick_at(&mut self, now: Duration) {
        self.now = now;
        let step = self.c.handle(self.now, ClusterEvent::Tick);
        self.take(step);
    }

    /// The job Failed, and its Finish says `why`.
    fn failed_because(&self, why: &str) -> bool {
        self.c.state() == Some("Failed")
            && self.actions.iter().any(
                |a| matches!(a, ClusterAction::Finish { outcome: Outcome::Failed, reason } if reason.contains(why)),
            )
    }

    fn event(&mut self, e: ClusterEvent) {
        self.now += MS;
        let step = self.c.handle(self.now, e);
        self.take(step);
    }

    fn agent(&mut self, pod: u32, state: AgentState) {
        self.now += MS;
        let step = self.c.agent_seen(self.now, ReplicaId::worker(pod), state, None);
        self.take(step);
    }

    fn agents(&mut self, state: AgentState) {
        for i in 0..self.c.job().replicas {
            self.agent(i, state);
        }
    }

    fn drain_calls(&mut self) -> Vec<AgentRequest> {
        std::mem::take(&mut self.calls)
    }

    fn notes(&self) -> Vec<&str> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                ClusterAction::Note { message } => Some(message.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Submitted, launchers started, agents READY then RUNNING.
    fn running(extra: &str, replicas: u32) -> Self {
        let mut s = Self::new(extra, replicas);
        s.event(ClusterEvent::Submitted);
        for i in 0..replicas {
            s.event(ClusterEvent::LauncherStarted { pod: ReplicaId::worker(i) });
        }
        s.agents(AgentState::Ready);
        let starts = s.drain_calls();
        assert_eq!(starts.len(), replicas as usize, "{starts:?}");
        s.agents(AgentState::Running);
        assert_eq!(s.c.state(), Some("Running"));
        s
    }

    /// A PLR's stop and start again: every agent STOPPING, READY, then RUNNING.
    fn come_back(&mut self) -> Vec<AgentRequest> {
        self.agents(AgentState::Stopping);
        self.agents(AgentState::Ready);
        let starts = self.drain_calls();
        self.agents(AgentState::Running);
        starts
    }

    fn restart_type(&self) -> Option<&'static str> {
        match self.c.job_row(self.now) {
            Row::HyperPodJob(h) => h.restart_type,
            _ => None,
        }
    }
}

#[test]
fn every_agent_ready_gets_its_start_then_the_job_runs_and_completes() {
    let mut s = Sim::new("", 2);
    s.event(ClusterEvent::Submitted);
    assert_eq!(s.c.state(), Some("Created"));
    let starts: Vec<_> = s.actions.iter().filter(|a| matches!(a, ClusterAction::StartLauncher { .. })).collect();
    assert_eq!(starts.len(), 2);
    s.agent(0, AgentState::Ready);
    assert!(s.calls.is_empty(), "not before every agent is READY");
    s.agent(1, AgentState::Ready);
    assert_eq!(
        s.drain_calls(),
        (0..2)
            .map(|i| AgentRequest {
                pod: ReplicaId::worker(i),
                call: AgentCall::Start { rank: i, nnodes: 2, fault_count: 0 }
            })
            .collect::<Vec<_>>()
    );
    s.agents(AgentState::Running);
    assert_eq!(s.c.state(), Some("Running"));
    s.agents(AgentState::Completed);
    assert_eq!(s.c.state(), Some("Completed"));
    assert_eq!(s.drain_calls().iter().filter(|r| r.call == AgentCall::Shutdown).count(), 2);
    assert!(s.actions.iter().any(|a| matches!(a, ClusterAction::Finish { outcome: Outcome::Succeeded, .. })));
    assert!(!s.c.is_settled(), "the agents are still there");
    for i in 0..2 {
        s.event(ClusterEvent::LauncherExited { pod: ReplicaId::worker(i), status: ExitHow::Exited(0) });
    }
    assert!(s.c.is_settled());
    assert_eq!(s.c.exit_code(), 0);
}

#[test]
fn a_crash_is_a_process_level_restart_with_a_graceful_stop_and_the_next_fault_count() {
    let mut s = Sim::running("", 2);
    s.event(ClusterEvent::ChildExited {
        pod: ReplicaId::worker(1),
        exit: ExitHow::Exited(1),
        will_restart: false,
        restart_count: 0,
    });
    s.agent(1, AgentState::Faulted);
    assert_eq!((s.c.state(), s.restart_type()), (Some("Restarting"), Some("PLR")));
    let stops = s.drain_calls();
    assert_eq!(stops.len(), 2, "every agent is stopped");
    assert!(stops.iter().all(|r| r.call == AgentCall::Stop { graceful: true, timeout: Duration::from_secs(30) }));
    let starts = s.come_back();
    assert!(starts.iter().all(|r| matches!(r.call, AgentCall::Start { fault_count: 1, .. })), "{starts:?}");
    assert_eq!(s.c.state(), Some("Running"));
    assert!(
        s.notes().iter().any(|n| n.contains("The fault of reason WorkerCrash was remediated in ")),
        "{:?}",
        s.notes()
    );
    assert_eq!(s.c.figures().restart.len(), 1);
    assert_eq!(s.c.figures().detection[0], MS, "the worker's end to the FAULTED state");
}

#[test]
fn faults_past_num_restart_before_full_job_restart_recreate_the_pods_with_the_same_names() {
    let policy = "    restartPolicy:\n      evalPeriodSeconds: 3600\n      numRestartBeforeFullJobRestart: 1\n      maxFullJobRestarts: 1\n";
    let mut s = Sim::running(policy, 2);
    s.agent(0, AgentState::Faulted);
    assert_eq!(s.restart_type(), Some("PLR"));
    s.come_back();
    s.agent(0, AgentState::Faulted);
    assert_eq!(s.restart_type(), Some("JLR"));
    let stops: Vec<_> = s.actions.iter().filter(|a| matches!(a, ClusterAction::StopPod { .. })).collect();
    assert_eq!(stops.len(), 2, "every pod is deleted");
    let before = s.actions.len();
    for i in 0..2 {
        s.event(ClusterEvent::LauncherExited { pod: ReplicaId::worker(i), status: ExitHow::Exited(143) });
    }
    let created: Vec<_> =
        s.actions[before..].iter().filter(|a| matches!(a, ClusterAction::StartLauncher { .. })).collect();
    assert_eq!(created.len(), 2, "recreated once all are gone");
    let names: Vec<String> = s.c.kubelet.pods.iter().filter(|p| !p.gone).map(|p| p.name.clone()).collect();
    assert_eq!(names, ["hp-pods-0", "hp-pods-1"]);
    s.agents(AgentState::Ready);
    assert!(s.drain_calls().iter().all(|r| matches!(r.call, AgentCall::Start { fault_count: 2, .. })));
    s.agents(AgentState::Running);
    assert_eq!(s.c.state(), Some("Running"));
    // The second JLR in the window is one too many.
    s.agent(1, AgentState::Faulted);
    s.come_back();
    s.agent(1, AgentState::Faulted);
    assert!(s.failed_because("maxFullJobRestarts is 1"), "{:?}", s.actions);
}

#[test]
fn an_unhealthy_node_is_a_node_fault_and_its_pod_moves_to_a_replacement_node() {
    let mut s = Sim::running("", 2);
    let labels =
        [(rankvisor_core::health::NODE_HEALTH_STATUS.to_string(), "UnschedulablePendingReplacement".to_string())];
    s.now += MS;
    let step = s.c.node_labelled(s.now, ReplicaId::worker(1), &labels.into_iter().collect());
    s.take(step);
    assert!(
        s.notes().iter().any(|n| n.starts_with("Event: Warning NodeFault: Found unhealthy node localhost")),
        "{:?}",
        s.notes()
    );
    assert_eq!(s.restart_type(), Some("JLR"));
    for i in 0..2 {
        s.event(ClusterEvent::LauncherExited { pod: ReplicaId::worker(i), status: ExitHow::Exited(143) });
    }
    let nodes: Vec<Option<String>> = s.c.kubelet.pods.iter().filter(|p| !p.gone).map(|p| p.node.clone()).collect();
    assert_eq!(nodes, [None, Some("localhost-replacement-1".to_string())]);
    s.agents(AgentState::Ready);
    s.agents(AgentState::Running);
    assert!(s.notes().iter().any(|n| n.contains("The fault of reason NodeFault was remediated in")));
}

#[test]
fn the_startup_and_fault_deadlines_fail_the_job() {
    let mut s = Sim::new("    startupDeadlineSeconds: 5\n", 2);
    s.event(ClusterEvent::Submitted);
    s.agent(0, AgentState::Ready);
    assert_eq!(s.c.next_tick(), Some(Duration::from_secs(5) + MS));
    s.tick_at(Duration::from_secs(6));
    assert!(s.failed_because("startupDeadlineSeconds is 5"), "{:?}", s.actions);

    let mut s = Sim::running("    faultDeadlineSeconds: 2\n", 2);
    s.agent(0, AgentState::Faulted);
    s.tick_at(s.now + Duration::from_secs(3));
    assert!(s.failed_because("faultDeadlineSeconds is 2"), "{:?}", s.actions);
}

#[test]
fn job_max_retry_count_and_a_suspended_job() {
    let mut s = Sim::running("    jobMaxRetryCount: 1\n", 1);
    s.agent(0, AgentState::Faulted);
    s.come_back();
    s.agent(0, AgentState::Faulted);
    assert!(s.failed_because("jobMaxRetryCount is 1"), "{:?}", s.actions);

    let mut s = Sim::new("    suspend: true\n", 1);
    s.event(ClusterEvent::Submitted);
    assert_eq!(s.c.state(), Some("Suspended"));
    assert!(!s.actions.iter().any(|a| matches!(a, ClusterAction::StartLauncher { .. })));
    s.event(ClusterEvent::Resumed);
    assert!(s.actions.iter().any(|a| matches!(a, ClusterAction::StartLauncher { .. })));
}

#[test]
fn clean_pod_policy_none_keeps_the_pods_of_a_failed_job() {
    let mut s = Sim::running("    jobMaxRetryCount: 0\n    cleanPodPolicy: None\n", 1);
    s.agent(0, AgentState::Faulted);
    assert_eq!(s.c.state(), Some("Failed"));
    assert!(!s.actions.iter().any(|a| matches!(a, ClusterAction::StopPod { .. })), "kept");
    let mut s = Sim::running("    jobMaxRetryCount: 0\n", 1);
    s.agent(0, AgentState::Faulted);
    assert!(s.actions.iter().any(|a| matches!(a, ClusterAction::StopPod { .. })), "All: deleted");
}

#[test]
fn spare_pods_wait_ready_unranked_and_are_shut_down_at_the_end() {
    let mut loaded = job("", 2);
    loaded.job.spares = 1;
    let mut s = Sim::new("", 2);
    s.c = HyperPodController::new(loaded.job, ControllerConfig::default(), OperatorSettings::default(), 23456);
    s.event(ClusterEvent::Submitted);
    let created = s.actions.iter().filter(|a| matches!(a, ClusterAction::StartLauncher { .. })).count();
    assert_eq!(created, 3, "the replicas and the spare");
    s.agent(2, AgentState::Ready);
    s.agents(AgentState::Ready);
    let starts = s.drain_calls();
    assert_eq!(starts.len(), 2, "the spare gets no /start: {starts:?}");
    assert!(starts.iter().all(|r| r.pod != ReplicaId::worker(2)));
    s.agents(AgentState::Running);
    assert_eq!(s.c.state(), Some("Running"), "the spare's READY does not hold the job");
    s.agents(AgentState::Completed);
    let shutdowns: Vec<ReplicaId> =
        s.drain_calls().iter().filter(|r| r.call == AgentCall::Shutdown).map(|r| r.pod).collect();
    assert_eq!(shutdowns.len(), 3, "the spare too: {shutdowns:?}");
}

#[test]
fn the_active_deadline_fails_a_running_job_and_the_ttl_deletes_a_finished_one() {
    let mut s = Sim::running("    activeDeadlineSeconds: 10\n", 1);
    let started = s.c.started_at.unwrap();
    assert_eq!(s.c.next_tick(), Some(started + Duration::from_secs(10)));
    s.tick_at(started + Duration::from_secs(10));
    assert!(s.failed_because("activeDeadlineSeconds (10s)"), "{:?}", s.actions);

    let mut loaded = job("", 1);
    loaded.job.run_policy.ttl_after_finished = Some(Duration::from_secs(5));
    let mut s = Sim::new("", 1);
    s.c = HyperPodController::new(loaded.job, ControllerConfig::default(), OperatorSettings::default(), 23456);
    s.event(ClusterEvent::Submitted);
    s.agents(AgentState::Ready);
    s.agents(AgentState::Running);
    s.agents(AgentState::Completed);
    let finished = s.now;
    assert_eq!(s.c.next_tick(), Some(finished + Duration::from_secs(5)));
    s.now = finished + Duration::from_secs(5);
    let step = s.c.handle(s.now, ClusterEvent::Tick);
    assert!(step.changes.iter().any(|c| c.event == WatchEventType::Deleted && matches!(c.row, Row::HyperPodJob(_))));
    s.take(step);
    assert!(s.notes().iter().any(|n| n.contains("ttlSecondsAfterFinished (5s) has passed")), "{:?}", s.notes());
    assert!(s.c.next_tick().is_none(), "deleted once");
}

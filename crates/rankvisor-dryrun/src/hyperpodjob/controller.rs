//! The HyperPod training operator, emulated as one synchronous machine: observations in (the
//! kubelet's events, each agent's state as its `/status` says, a node's labels), rows, actions
//! and agent calls out. Nothing here reads a clock, touches a process or speaks HTTP: the event
//! loop does ([`crate::runner::agents`]).
//!
//! - Submitted: one pod per replica and per spare (`<job>-<replicaSpec>-<i>`), each pod's
//!   container the agent (`rankvisor --agent hyperpod`); condition `Created`. Suspended: no pod
//!   until resumed.
//! - Every ranked agent READY: `/start` to each (rank = pod index, nnodes = replicas, faultCount,
//!   master address and port, the job's `logMonitoringConfiguration`); every one RUNNING:
//!   condition `Running`. Spares stay READY, unranked.
//! - A fault (an agent FAULTED, a pod or its agent gone, a node whose HyperPod labels turn
//!   unhealthy) is decided by [`super::restart::decide`]: a PLR (`/stop` to every agent, graceful
//!   by default, then `/start` with `faultCount + 1` once all are READY), or a JLR (every pod
//!   deleted, then recreated with the same names; a pod on a faulted node is placed on
//!   `localhost-replacement-N`), or Failed. Once every agent is RUNNING again: the Event "The
//!   fault of reason R was remediated in N milliseconds." and the condition `Running`.
//! - Every ranked agent COMPLETED: `/shutdown` to every agent, condition `Completed`.
//! - Deadlines: `startupDeadlineSeconds` (not every agent running since the pods' creation),
//!   `faultDeadlineSeconds` (a restart not done), `activeDeadlineSeconds` (since the start);
//!   each fails the job. Finished: `cleanPodPolicy` deletes the pods (All, Running) or keeps
//!   them (None); `ttlSecondsAfterFinished` later the job is deleted, with its pods.

mod observe;
mod status;
#[cfg(test)]
mod tests;

use std::time::Duration;

use rankvisor_core::exit::ExitHow;
use rankvisor_core::status::AgentState;

use super::restart::{decide, Decision, RestartCounters, RestartType};
use super::{CleanPodPolicy, HyperPodJob, OperatorSettings};
use crate::kubelet::cluster::{ClusterAction, ClusterEvent, ControllerConfig, Outcome, Step};
use crate::kubelet::pod::Pod;
use crate::kubelet::replica::ReplicaId;
use crate::kubelet::{self, JobRules, Kubelet};
use crate::render::rows::{Change, Row, WatchEventType};
use rankvisor_core::policy::RestartPolicy;
pub(crate) use status::Figures;

/// A call the event loop makes to one pod's agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AgentCall {
    /// `POST /start` with this assignment.
    Start {
        /// `rank`.
        rank: u32,
        /// `nnodes`.
        nnodes: u32,
        /// `faultCount`.
        fault_count: u32,
    },
    /// `POST /stop`.
    Stop {
        /// `is_graceful`: SIGUSR1 first.
        graceful: bool,
        /// `timeout` before SIGKILL.
        timeout: Duration,
    },
    /// `POST /shutdown`.
    Shutdown,
}

/// One agent call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AgentRequest {
    /// The pod whose agent is called.
    pub pod: ReplicaId,
    /// The call.
    pub call: AgentCall,
}

/// A restart in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Restart {
    kind: RestartType,
    /// The fault's reason (`WorkerCrash`, `LogHang_<rule>`, `NodeFault`, `PodFailed`, ...).
    reason: String,
    /// When the fault was first seen (its detection).
    detected_at: Duration,
    /// When the fault happened, as far as seen (a worker's end; else its detection).
    happened_at: Duration,
}

/// Where the job is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not submitted yet.
    New,
    /// `runPolicy.suspend`: no pods.
    Suspended,
    /// Pods created (since then): waiting for every agent READY, then RUNNING.
    Starting(Duration),
    /// Every agent RUNNING.
    Running,
    /// A restart: its agents stopped or its pods recreated, then started again.
    Restarting(Restart),
    /// Succeeded or Failed.
    Finished(Outcome),
}

/// The emulated HyperPod operator of one job.
#[derive(Debug, Clone)]
pub(crate) struct HyperPodController {
    job: HyperPodJob,
    settings: OperatorSettings,
    kubelet: Kubelet,
    phase: Phase,
    /// When the job was submitted (its AGE).
    created_at: Duration,
    /// `status.startTime`.
    started_at: Option<Duration>,
    finished_at: Option<Duration>,
    job_deleted: bool,
    /// `status.conditions`, oldest first: (type, reason, message).
    conditions: Vec<(&'static str, String, String)>,
    counters: RestartCounters,
    /// `latestFaultyPodInstanceList`: (type, pods, ranks).
    latest_faulty: Option<(RestartType, Vec<String>, Vec<String>)>,
    /// The `faultCount` of the next `/start`.
    fault_count: u32,
    /// `/start` was sent in this round (since the pods' creation or the last restart).
    start_sent: bool,
    /// Pods whose node was found unhealthy: moved at the next JLR.
    faulted_nodes: Vec<ReplicaId>,
    /// Pods just placed on a replacement node (a healthy one), not yet told to the event loop.
    moved: Vec<ReplicaId>,
    replacements: u32,
    /// When each pod's worker last ended (a fault's start, for the detection figure).
    worker_ended: Vec<(ReplicaId, Duration)>,
    calls: Vec<AgentRequest>,
    figures: Figures,
    master_port: u16,
    shown_job: Option<Row>,
}

impl HyperPodController {
    /// The operator of an admitted job whose master listens on `master_port`.
    pub(crate) fn new(
        job: HyperPodJob,
        config: ControllerConfig,
        settings: OperatorSettings,
        master_port: u16,
    ) -> Self {
        Self {
            job,
            settings,
            kubelet: Kubelet::new(config),
            phase: Phase::New,
            created_at: Duration::ZERO,
            started_at: None,
            finished_at: None,
            job_deleted: false,
            conditions: Vec::new(),
            counters: RestartCounters::default(),
            latest_faulty: None,
            fault_count: 0,
            start_sent: false,
            faulted_nodes: Vec::new(),
            moved: Vec::new(),
            replacements: 0,
            worker_ended: Vec::new(),
            calls: Vec::new(),
            figures: Figures::default(),
            master_port,
            shown_job: None,
        }
    }

    /// The job.
    pub(crate) fn job(&self) -> &HyperPodJob {
        &self.job
    }

    /// Apply one of the kubelet's observations made at `now`.
    pub(crate) fn handle(&mut self, now: Duration, event: ClusterEvent) -> Step {
        match event {
            // The worker runs and ends inside the container: the agent's state says what it means.
            ClusterEvent::ChildRunning { .. } => Step::default(),
            ClusterEvent::ChildExited { pod, exit, .. } => {
                if !exit.success() {
                    self.worker_ended.retain(|(p, _)| *p != pod);
                    self.worker_ended.push((pod, now));
                }
                Step::default()
            }
            event => kubelet::handle(self, now, event),
        }
    }

    /// The agent calls decided since the last take, in order.
    pub(crate) fn take_calls(&mut self) -> Vec<AgentRequest> {
        std::mem::take(&mut self.calls)
    }

    /// The pods placed on a replacement node since the last take: their node's labels are
    /// healthy ones (the event loop rewrites their labels files before their launchers start).
    pub(crate) fn take_moved(&mut self) -> Vec<ReplicaId> {
        std::mem::take(&mut self.moved)
    }

    /// The dry run's exit status: 0 Completed, 1 Failed (or not finished).
    pub(crate) fn exit_code(&self) -> i32 {
        match self.phase {
            Phase::Finished(o) => o.exit_code(),
            _ => 1,
        }
    }

    /// Nothing more will happen: finished, and no launcher left.
    pub(crate) fn is_settled(&self) -> bool {
        matches!(self.phase, Phase::Finished(_)) && self.kubelet.live_launchers().is_empty()
    }

    /// The job's STATE: the newest condition's type.
    pub(crate) fn state(&self) -> Option<&'static str> {
        self.conditions.last().map(|c| c.0)
    }

    /// The operator's latency figures so far.
    #[cfg(test)]
    pub(crate) fn figures(&self) -> &Figures {
        &self.figures
    }

    /// When the next tick is due: a deadline, the TTL.
    pub(crate) fn next_tick(&self) -> Option<Duration> {
        let rp = &self.job.run_policy;
        let active = match (&self.phase, rp.active_deadline, self.started_at) {
            (Phase::Finished(_), _, _) => None,
            (_, Some(d), Some(start)) => Some(start + d),
            _ => None,
        };
        let phase = match (&self.phase, rp.startup_deadline, rp.fault_deadline) {
            (Phase::Starting(since), Some(d), _) => Some(*since + d),
            (Phase::Restarting(r), _, Some(d)) => Some(r.detected_at + d),
            _ => None,
        };
        let ttl = match (self.finished_at, rp.ttl_after_finished, self.job_deleted) {
            (Some(at), Some(ttl), false) => Some(at + ttl),
            _ => None,
        };
        [self.kubelet.next_tick(), active, phase, ttl].into_iter().flatten().min()
    }

    /// Create every pod (ADDED), bind it and ask for its launcher.
    fn create_pods(&mut self, now: Duration, step: &mut Step) {
        for id in self.job.pods() {
            let mut pod = Pod::new(id, self.job.pod_name(id), RestartPolicy::Never, now);
            if let Some(n) = self.faulted_nodes.iter().position(|p| *p == id) {
                self.faulted_nodes.remove(n);
                self.replacements += 1;
                pod.node = Some(format!("{}-replacement-{}", self.kubelet.config.node, self.replacements));
                self.moved.push(id);
            } else if let Some(old) = self.kubelet.pods.iter().rev().find(|p| p.id == id) {
                pod.node = old.node.clone();
            }
            pod.bind();
            self.kubelet.add(pod, now, step);
            step.actions.push(ClusterAction::StartLauncher { pod: id });
        }
        self.start_sent = false;
    }

    /// `/start` to every ranked agent once all are READY (a round's first time only).
    fn start_when_ready(&mut self, now: Duration, step: &mut Step) {
        if self.start_sent || !self.all_ranked(AgentState::Ready) {
            return;
        }
        self.start_sent = true;
        let nnodes = self.job.replicas;
        for p in self.ranked_pods().map(|p| p.id).collect::<Vec<_>>() {
            let call = AgentCall::Start { rank: p.index, nnodes, fault_count: self.fault_count };
            self.calls.push(AgentRequest { pod: p, call });
        }
        if self.started_at.is_none() {
            self.started_at = Some(now);
        }
        self.sync_job(now, step);
    }

    /// Every ranked agent RUNNING: the job runs (again).
    fn running_when_all_run(&mut self, now: Duration, step: &mut Step) {
        if !self.start_sent || !self.all_ranked(AgentState::Running) {
            return;
        }
        if let Phase::Restarting(r) = std::mem::replace(&mut self.phase, Phase::Running) {
            let took = now.saturating_sub(r.detected_at);
            self.figures.record(r.detected_at.saturating_sub(r.happened_at), took);
            let message =
                format!("The fault of reason {} was remediated in {} milliseconds.", r.reason, took.as_millis());
            step.actions.push(ClusterAction::Note { message: format!("Event: Normal FaultRemediated: {message}") });
        }
        self.condition("Running", "Running", "every agent is running", now, step);
    }

    /// The live pods that have a rank (not the spares).
    fn ranked_pods(&self) -> impl Iterator<Item = &Pod> + '_ {
        self.kubelet.pods.iter().filter(move |p| !p.gone && !p.deleting && !self.job.is_spare(p.id))
    }

    /// Every ranked pod is there and its agent is in `state`.
    fn all_ranked(&self, state: AgentState) -> bool {
        let mut n = 0;
        let all = self.ranked_pods().inspect(|_| n += 1).all(|p| p.agent == Some(state));
        all && n == self.job.replicas
    }
}

impl JobRules for HyperPodController {
    fn kubelet(&mut self) -> &mut Kubelet {
        &mut self.kubelet
    }

    fn submitted(&self) -> bool {
        self.phase != Phase::New
    }

    fn submit(&mut self, now: Duration, step: &mut Step) {
        self.created_at = now;
        self.condition("Created", "Created", &format!("HyperPodPyTorchJob {} is created.", self.job.name), now, step);
        if self.job.run_policy.suspend {
            self.phase = Phase::Suspended;
            self.condition("Suspended", "Suspended", "spec.runPolicy.suspend is true: no pod is created", now, step);
            let message = format!("HyperPodPyTorchJob {} is suspended (spec.runPolicy.suspend): no pod until it is resumed (--inject resume:job@T)", self.job.name);
            step.actions.push(ClusterAction::Note { message });
            return;
        }
        self.phase = Phase::Starting(now);
        self.create_pods(now, step);
    }

    fn resume(&mut self, now: Duration, step: &mut Step) {
        if self.phase == Phase::Suspended {
            self.phase = Phase::Starting(now);
            self.condition("Created", "Resumed", "spec.runPolicy.suspend is false: the pods are created", now, step);
            self.create_pods(now, step);
        }
    }

    fn launcher_exited(&mut self, pod: ReplicaId, status: ExitHow, now: Duration, step: &mut Step) {
        self.on_launcher_exit(pod, status, now, step);
    }

    fn pod_deleted(&mut self, pod: ReplicaId, now: Duration, step: &mut Step) {
        if let Some(i) = self.kubelet.live(pod) {
            self.kubelet.delete(i, now, step);
            self.fault(&[pod], "PodDeleted".into(), true, now, step);
        }
    }

    fn tick(&mut self, now: Duration, step: &mut Step) {
        self.kubelet.tick(now, matches!(self.phase, Phase::Finished(_)), step);
        self.check_deadlines(now, step);
    }

    fn reconcile(&mut self, now: Duration, step: &mut Step) {
        self.sync_job(now, step);
    }
}

impl HyperPodController {
    /// Restart or fail after a fault in `pods` (`lost`: a pod, its agent or its node is gone).
    fn fault(&mut self, pods: &[ReplicaId], reason: String, lost: bool, now: Duration, step: &mut Step) {
        match &self.phase {
            Phase::Finished(_) | Phase::New | Phase::Suspended => return,
            // Agents stopping or pods going away are the restart's doing; a fault after the new
            // round's `/start` (or a lost pod during a PLR) is a new fault.
            Phase::Restarting(r) if !(self.start_sent || lost && r.kind == RestartType::Plr) => return,
            _ => {}
        }
        let happened_at = pods
            .iter()
            .filter_map(|p| self.worker_ended.iter().find(|(q, _)| q == p).map(|(_, t)| *t))
            .min()
            .unwrap_or(now);
        let kind = match decide(&mut self.counters, &self.job.run_policy, now, lost) {
            Decision::Fail { reason: why, message } => return self.finish(Outcome::Failed, why, message, now, step),
            Decision::Restart(kind) => kind,
        };
        let names: Vec<String> = pods.iter().map(|p| self.job.pod_name(*p)).collect();
        let ranks: Vec<String> = pods.iter().filter(|p| !self.job.is_spare(**p)).map(|p| p.index.to_string()).collect();
        self.latest_faulty = Some((kind, names.clone(), ranks));
        self.fault_count += 1;
        self.start_sent = false;
        self.worker_ended.clear();
        self.phase = Phase::Restarting(Restart { kind, reason: reason.clone(), detected_at: now, happened_at });
        let message = format!(
            "fault of reason {reason} in {}: {} ({}), faultCount {}",
            names.join(", "),
            match kind {
                RestartType::Plr => "process-level restart",
                RestartType::Jlr => "full job restart",
            },
            kind.as_str(),
            self.fault_count
        );
        self.condition("Restarting", kind.as_str(), &message, now, step);
        match kind {
            RestartType::Plr => self.stop_agents(),
            RestartType::Jlr => self.delete_pods(now, step, |_| true),
        }
    }

    /// `/stop` to every ranked agent (a PLR).
    fn stop_agents(&mut self) {
        let call = AgentCall::Stop { graceful: self.settings.graceful_stop, timeout: self.settings.stop_timeout };
        for pod in self.ranked_pods().map(|p| p.id).collect::<Vec<_>>() {
            self.calls.push(AgentRequest { pod, call });
        }
    }

    /// Delete every live pod `which` picks (its launcher stopped first, then gone).
    fn delete_pods(&mut self, now: Duration, step: &mut Step, which: impl Fn(&Pod) -> bool) {
        for i in 0..self.kubelet.pods.len() {
            let p = &self.kubelet.pods[i];
            if !p.gone && !p.deleting && which(p) {
                self.kubelet.delete(i, now, step);
            }
        }
    }

    /// Succeeded or Failed: the condition, the agents shut down or the pods cleaned up.
    fn finish(&mut self, outcome: Outcome, reason: &str, message: String, now: Duration, step: &mut Step) {
        if matches!(self.phase, Phase::Finished(_)) {
            return;
        }
        self.phase = Phase::Finished(outcome);
        self.finished_at = Some(now);
        let kind = if outcome == Outcome::Succeeded { "Completed" } else { "Failed" };
        self.condition(kind, reason, &message, now, step);
        let pods: Vec<ReplicaId> = self.kubelet.live_launchers();
        match (outcome, self.job.run_policy.clean_pod_policy) {
            (Outcome::Succeeded, _) => {
                self.calls.extend(pods.into_iter().map(|pod| AgentRequest { pod, call: AgentCall::Shutdown }));
            }
            (Outcome::Failed, CleanPodPolicy::None) => {}
            (Outcome::Failed, _) => self.delete_pods(now, step, |_| true),
        }
        step.actions.push(ClusterAction::Note { message: self.figures.line() });
        step.actions.push(ClusterAction::Finish {
            outcome,
            reason: format!("HyperPodPyTorchJob {} {kind}: {message}", self.job.name),
        });
    }

    /// The deadlines at `now`: startup, fault, active; the TTL after the finish.
    fn check_deadlines(&mut self, now: Duration, step: &mut Step) {
        let rp = self.job.run_policy.clone();
        let secs = |d: Duration| d.as_secs();
        if let (Phase::Starting(since), Some(d)) = (&self.phase, rp.startup_deadline) {
            if now >= *since + d {
                let message = format!("not every agent was running {}s after the pods' creation: spec.runPolicy.startupDeadlineSeconds is {}", secs(d), secs(d));
                return self.finish(Outcome::Failed, "StartupDeadlineExceeded", message, now, step);
            }
        }
        if let (Phase::Restarting(r), Some(d)) = (&self.phase, rp.fault_deadline) {
            if now >= r.detected_at + d {
                let message = format!("the job was still faulted (reason {}) {}s after the fault: spec.runPolicy.faultDeadlineSeconds is {}", r.reason, secs(d), secs(d));
                return self.finish(Outcome::Failed, "FaultDeadlineExceeded", message, now, step);
            }
        }
        if let (false, Some(start), Some(d)) =
            (matches!(self.phase, Phase::Finished(_)), self.started_at, rp.active_deadline)
        {
            if now >= start + d {
                let message =
                    format!("the job was active longer than spec.runPolicy.activeDeadlineSeconds ({}s)", secs(d));
                return self.finish(Outcome::Failed, "DeadlineExceeded", message, now, step);
            }
        }
        if let (Some(at), Some(ttl), false) = (self.finished_at, rp.ttl_after_finished, self.job_deleted) {
            if now >= at + ttl {
                self.job_deleted = true;
                step.changes.push(Change { at: now, event: WatchEventType::Deleted, row: self.job_row(now) });
                let message = format!(
                    "HyperPodPyTorchJob {} is deleted: ttlSecondsAfterFinished ({}s) has passed, and its pods with it",
                    self.job.name,
                    secs(ttl)
                );
                step.actions.push(ClusterAction::Note { message });
                self.delete_pods(now, step, |_| true);
            }
        }
    }
}

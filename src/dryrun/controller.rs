//! The training operator, Volcano and the kubelet, emulated as one synchronous state machine.
//!
//! The driver starts real launchers and feeds what it observes as [`Event`]s, with the time since
//! its start; each call returns the rows that changed (for the watch output) and the [`Action`]s
//! the driver must carry out. Nothing here reads a clock or touches a process.
//!
//! Semantics (seed 000, checked against the training operator's source):
//! - The job is `Created` at submit, `Running` once the master's training process runs,
//!   `Succeeded` once the master completes (workers still running are left to finish; the
//!   PodGroup is deleted, the pods are kept).
//! - The job is `Failed` when a replica's pod fails for good (its launcher gave up: the operator's
//!   "N Master/Worker replica(s) failed"), when every worker has failed at the same time while the
//!   master lives, or when the restarts summed over the running pods whose restartPolicy is not
//!   Never reach `runPolicy.backoffLimit` (`pastBackoffLimit`; a limit of 0 fails on the first
//!   restart; no `backoffLimit` means no job-wide limit, as in the operator). Then every launcher
//!   is stopped and the pods and the PodGroup are deleted.
//! - A deleted pod is recreated with RESTARTS 0; so is a pod whose launcher exits with a retryable
//!   code (>= 128, `IsRetryableExitCode`) under the ExitCode policy, as the operator does.
//! - Volcano admits the gang only if the queue capability holds the whole job; otherwise the
//!   PodGroup stays `Inqueue` and every pod `Pending`, forever.

use std::time::Duration;

use super::job::{ExitStatus, PyTorchJob, ReplicaId, ReplicaType, RestartPolicy};
use super::quantity::{format_quantity, QueueCapability};
use super::rows::{Change, JobRow, JobState, PodGroupPhase, PodGroupRow, PodRow, PodStatus, Row, WatchEvent};

use crate::supervise::is_retryable_exit_code;

/// How the emulated cluster is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// The Volcano queue (QUEUE column).
    pub queue: String,
    /// The node every pod is placed on (NODE column).
    pub node: String,
    /// `--queue-capability`; None admits any job.
    pub capability: Option<QueueCapability>,
    /// How long a failed pod waiting for its restart shows `Error` before `CrashLoopBackOff`.
    pub crash_loop_after: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            queue: "default".to_string(),
            node: "localhost".to_string(),
            capability: None,
            crash_loop_after: Duration::from_secs(1),
        }
    }
}

/// What the driver observed. `restart_count` is the launcher's own count for this pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The manifest was submitted (call once, first).
    Submitted,
    /// The pod's launcher process was started.
    LauncherStarted {
        /// The pod.
        pod: ReplicaId,
    },
    /// The pod's training process started (again).
    ChildRunning {
        /// The pod.
        pod: ReplicaId,
        /// Restarts so far in this pod.
        restart_count: u32,
    },
    /// The pod's training process ended.
    ChildExited {
        /// The pod.
        pod: ReplicaId,
        /// How it ended.
        exit: ExitStatus,
        /// Whether the launcher will start it again.
        will_restart: bool,
        /// Restarts so far in this pod (before the coming restart).
        restart_count: u32,
    },
    /// The pod's launcher process ended (deliver it for every launcher started, also after a stop).
    LauncherExited {
        /// The pod.
        pod: ReplicaId,
        /// The launcher's exit status.
        status: ExitStatus,
    },
    /// Fault injection: the pod is deleted (the operator will recreate it).
    PodDeleted {
        /// The pod.
        pod: ReplicaId,
    },
    /// Time passed (lets `Error` turn into `CrashLoopBackOff`).
    Tick,
}

/// How the job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Outcome {
    /// The master completed.
    Succeeded,
    /// See the reason.
    Failed,
}

impl Outcome {
    /// The dry run's exit status: 0 Succeeded, 1 Failed.
    pub fn exit_code(self) -> i32 {
        match self {
            Self::Succeeded => 0,
            Self::Failed => 1,
        }
    }
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start this pod's launcher (also for a recreated pod: a fresh launcher, restart count 0).
    StartLauncher {
        /// The pod.
        pod: ReplicaId,
    },
    /// Stop this pod's launcher (TERM, grace period); then report `LauncherExited`.
    StopPod {
        /// The pod.
        pod: ReplicaId,
    },
    /// Stop every launcher (started, or started later); then report each `LauncherExited`.
    StopAll,
    /// Volcano cannot place the gang: nothing will start (tell the user why).
    Unschedulable {
        /// Names the resource, the capability and the demand.
        message: String,
    },
    /// The job's outcome is decided (sent once). Launchers still running (workers after a success,
    /// or ones being stopped) will still report; exit when `Controller::is_settled()`.
    Finish {
        /// Succeeded or Failed.
        outcome: Outcome,
        /// The operator's condition message.
        reason: String,
    },
}

/// The result of one event: rows that changed, and actions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    /// Watch lines, in order.
    pub changes: Vec<Change>,
    /// What the driver must do, in order.
    pub actions: Vec<Action>,
}

/// The launcher process of a pod, as the controller knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Launcher {
    /// Not asked for (not scheduled).
    NotStarted,
    /// `StartLauncher` sent; not yet reported started.
    Requested,
    /// Running.
    Alive,
    /// Ended with this status.
    Exited(ExitStatus),
}

/// The training container's state, as the kubelet reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Container {
    /// Never started in this pod.
    Waiting,
    /// Running.
    Running,
    /// Ended.
    Terminated(ExitStatus),
    /// Ended with this status, and waiting out the restart backoff.
    BackOff(ExitStatus),
}

/// The pod's phase, which the operator and Volcano count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

/// One pod's state.
#[derive(Debug, Clone)]
struct Pod {
    id: ReplicaId,
    name: String,
    restart_policy: RestartPolicy,
    created_at: Duration,
    scheduled: bool,
    launcher: Launcher,
    container: Container,
    phase: Phase,
    restarts: u32,
    /// The latest run's end: kubelet's `state.terminated`.
    current_termination: Option<Duration>,
    /// The run before: kubelet's `lastState.terminated`, which kubectl's "(2s ago)" reads.
    last_termination: Option<Duration>,
    restart_pending_since: Option<Duration>,
    latest_exit_failed: bool,
    deleting: bool,
    recreate: bool,
    gone: bool,
    shown: Option<Row>,
}

impl Pod {
    fn new(id: ReplicaId, name: String, restart_policy: RestartPolicy, now: Duration) -> Self {
        Self {
            id,
            name,
            restart_policy,
            created_at: now,
            scheduled: false,
            launcher: Launcher::NotStarted,
            container: Container::Waiting,
            phase: Phase::Pending,
            restarts: 0,
            current_termination: None,
            last_termination: None,
            restart_pending_since: None,
            latest_exit_failed: false,
            deleting: false,
            recreate: false,
            gone: false,
            shown: None,
        }
    }

    fn launcher_live(&self) -> bool {
        matches!(self.launcher, Launcher::Requested | Launcher::Alive)
    }

    fn status(&self) -> PodStatus {
        if self.deleting && self.launcher_live() {
            return PodStatus::Terminating;
        }
        match (self.container, self.launcher) {
            (Container::Running, _) => PodStatus::Running,
            (Container::Terminated(e), _) | (Container::Waiting, Launcher::Exited(e)) if e.success() => {
                PodStatus::Completed
            }
            (Container::Terminated(_), _) | (Container::Waiting, Launcher::Exited(_)) => PodStatus::Error,
            (Container::BackOff(_), _) => PodStatus::CrashLoopBackOff,
            (Container::Waiting, Launcher::Alive) => PodStatus::ContainerCreating,
            (Container::Waiting, Launcher::NotStarted | Launcher::Requested) => PodStatus::Pending,
        }
    }

    fn row(&self, now: Duration, node: &str) -> PodRow {
        let last_restart_ago = match (self.restarts, self.last_termination) {
            (0, _) | (_, None) => None,
            (_, Some(t)) => Some(now.saturating_sub(t)),
        };
        PodRow {
            name: self.name.clone(),
            replica: self.id,
            ready: self.container == Container::Running && self.launcher_live(),
            status: self.status(),
            restarts: self.restarts,
            last_restart_ago,
            age: now.saturating_sub(self.created_at),
            node: self.scheduled.then(|| node.to_string()),
        }
    }

    /// kubelet moves the ended run to `lastState` when the container waits or runs again.
    fn shift_termination(&mut self) {
        if let Some(t) = self.current_termination.take() {
            self.last_termination = Some(t);
        }
    }
}

/// The emulated controllers of one dry-run job.
#[derive(Debug, Clone)]
pub struct Controller {
    job: PyTorchJob,
    config: ControllerConfig,
    submitted_at: Option<Duration>,
    admitted: bool,
    state: Option<JobState>,
    outcome: Option<Outcome>,
    podgroup_status: Option<PodGroupPhase>,
    podgroup_deleted: bool,
    pods: Vec<Pod>,
    shown_job: Option<Row>,
    shown_podgroup: Option<Row>,
}

impl Controller {
    /// A controller for an admitted job; nothing happens until `Event::Submitted`.
    pub fn new(job: PyTorchJob, config: ControllerConfig) -> Self {
        Self {
            job,
            config,
            submitted_at: None,
            admitted: false,
            state: None,
            outcome: None,
            podgroup_status: None,
            podgroup_deleted: false,
            pods: Vec::new(),
            shown_job: None,
            shown_podgroup: None,
        }
    }

    /// The job being run.
    pub fn job(&self) -> &PyTorchJob {
        &self.job
    }

    /// The job's STATE (None before submit).
    pub fn state(&self) -> Option<JobState> {
        self.state
    }

    /// The outcome, once decided.
    pub fn outcome(&self) -> Option<Outcome> {
        self.outcome
    }

    /// Pods whose launcher was asked to start and has not been reported exited.
    pub fn live_launchers(&self) -> Vec<ReplicaId> {
        self.pods.iter().filter(|p| p.launcher_live()).map(|p| p.id).collect()
    }

    /// The outcome is decided and no launcher is left: the driver may exit.
    pub fn is_settled(&self) -> bool {
        self.outcome.is_some() && self.live_launchers().is_empty()
    }

    /// When the next `Event::Tick` would change a row (a failed pod due to show CrashLoopBackOff).
    pub fn next_tick(&self) -> Option<Duration> {
        self.pods
            .iter()
            .filter(|p| !p.gone && !p.deleting && matches!(p.container, Container::Terminated(_)))
            .filter_map(|p| p.restart_pending_since)
            .map(|t| t.saturating_add(self.config.crash_loop_after))
            .min()
    }

    /// Every existing object's row at `now` (job, PodGroup unless deleted, pods not deleted).
    pub fn rows(&self, now: Duration) -> Vec<Row> {
        let mut rows = Vec::new();
        if self.submitted_at.is_some() {
            rows.push(self.job_row(now));
            if !self.podgroup_deleted {
                rows.push(self.podgroup_row(now));
            }
        }
        rows.extend(self.pods.iter().filter(|p| !p.gone).map(|p| Row::Pod(p.row(now, &self.config.node))));
        rows
    }

    /// Apply one observation made at `now` (time since the driver started).
    pub fn handle(&mut self, now: Duration, event: Event) -> Step {
        let mut step = Step::default();
        if self.submitted_at.is_none() && event != Event::Submitted {
            return step;
        }
        match event {
            Event::Submitted => self.submit(now, &mut step),
            Event::LauncherStarted { pod } => {
                if let Some(i) = self.live_pod(pod) {
                    self.pods[i].launcher = Launcher::Alive;
                    self.sync_pod(i, now, &mut step);
                }
            }
            Event::ChildRunning { pod, restart_count } => {
                if let Some(i) = self.live_pod(pod) {
                    let p = &mut self.pods[i];
                    p.shift_termination();
                    p.container = Container::Running;
                    p.restarts = restart_count;
                    p.restart_pending_since = None;
                    p.latest_exit_failed = false;
                    if matches!(p.launcher, Launcher::NotStarted | Launcher::Requested) {
                        p.launcher = Launcher::Alive;
                    }
                    if !p.deleting {
                        p.phase = Phase::Running;
                    }
                    self.sync_pod(i, now, &mut step);
                }
            }
            Event::ChildExited { pod, exit, will_restart, restart_count } => {
                if let Some(i) = self.live_pod(pod) {
                    let p = &mut self.pods[i];
                    p.container = Container::Terminated(exit);
                    p.current_termination = Some(now);
                    p.restarts = restart_count;
                    p.latest_exit_failed = !exit.success();
                    // Under ExitCode a retryable end is decided by the launcher's exit (the
                    // operator recreates the pod), not by the child's.
                    let retryable = p.restart_policy == RestartPolicy::ExitCode && is_retryable_exit_code(exit.code());
                    if !p.deleting {
                        p.phase = match (will_restart, exit.success()) {
                            (true, _) => Phase::Running,
                            (false, true) => Phase::Succeeded,
                            (false, false) if retryable => p.phase,
                            (false, false) => Phase::Failed,
                        };
                        p.restart_pending_since = will_restart.then_some(now);
                    }
                    self.sync_pod(i, now, &mut step);
                }
            }
            Event::LauncherExited { pod, status } => self.launcher_exited(pod, status, now, &mut step),
            Event::PodDeleted { pod } => self.delete_pod(pod, now, &mut step),
            Event::Tick => self.tick(now, &mut step),
        }
        self.evaluate(now, &mut step);
        self.sync_podgroup(now, &mut step);
        step
    }

    fn live_pod(&self, id: ReplicaId) -> Option<usize> {
        self.pods.iter().position(|p| p.id == id && !p.gone)
    }

    fn submit(&mut self, now: Duration, step: &mut Step) {
        if self.submitted_at.is_some() {
            return;
        }
        self.submitted_at = Some(now);
        self.sync_job(now, WatchEvent::Added, step);
        self.state = Some(JobState::Created);
        self.sync_job(now, WatchEvent::Modified, step);
        self.sync_podgroup_as(now, WatchEvent::Added, step);
        for id in self.job.replicas() {
            let policy = self.job.spec(id.rtype).map_or(RestartPolicy::OnFailure, |s| s.restart_policy);
            self.pods.push(Pod::new(id, self.job.pod_name(id), policy, now));
            let i = self.pods.len() - 1;
            self.sync_pod_as(i, now, WatchEvent::Added, step);
        }
        self.podgroup_status = Some(PodGroupPhase::Inqueue);
        self.sync_podgroup(now, step);
        let demand = self.job.total_resources();
        if let Some((resource, cap, need)) = self.config.capability.as_ref().and_then(|c| c.shortfall(&demand)) {
            step.actions.push(Action::Unschedulable {
                message: format!(
                    "queue {} has capability {resource}={} but the job's {} pods need {resource}={}: Volcano's gang scheduling starts none of them (the PodGroup stays Inqueue)",
                    self.config.queue,
                    format_quantity(&resource, cap),
                    self.pods.len(),
                    format_quantity(&resource, need),
                ),
            });
            return;
        }
        self.admitted = true;
        for i in 0..self.pods.len() {
            self.schedule(i, now, step);
        }
        self.podgroup_status = Some(PodGroupPhase::Running);
        self.sync_podgroup(now, step);
    }

    /// Bind the pod to the node and ask for its launcher.
    fn schedule(&mut self, i: usize, now: Duration, step: &mut Step) {
        let Some(p) = self.pods.get_mut(i) else {
            return;
        };
        p.scheduled = true;
        p.launcher = Launcher::Requested;
        let id = p.id;
        self.sync_pod(i, now, step);
        step.actions.push(Action::StartLauncher { pod: id });
    }

    fn launcher_exited(&mut self, pod: ReplicaId, status: ExitStatus, now: Duration, step: &mut Step) {
        let Some(i) = self.live_pod(pod) else { return };
        let finished = self.outcome.is_some();
        let p = &mut self.pods[i];
        p.launcher = Launcher::Exited(status);
        p.restart_pending_since = None;
        if p.container == Container::Running {
            // The launcher died under its child: the container ends with it.
            p.container = Container::Terminated(status);
            p.current_termination = Some(now);
        }
        if let Container::BackOff(last) = p.container {
            p.container = Container::Terminated(last);
        }
        if p.deleting {
            let recreate = p.recreate && !finished;
            self.remove_pod(i, now, step);
            if recreate {
                self.recreate_pod(i, now, step);
            }
            return;
        }
        if !matches!(p.phase, Phase::Succeeded | Phase::Failed) {
            p.phase = if status.success() { Phase::Succeeded } else { Phase::Failed };
        }
        let retryable = p.restart_policy == RestartPolicy::ExitCode && is_retryable_exit_code(status.code());
        if p.phase == Phase::Failed && retryable && !finished {
            // The operator deletes and recreates a pod that failed with a retryable code.
            self.sync_pod(i, now, step);
            self.remove_pod(i, now, step);
            self.recreate_pod(i, now, step);
            return;
        }
        self.sync_pod(i, now, step);
    }

    fn delete_pod(&mut self, pod: ReplicaId, now: Duration, step: &mut Step) {
        let Some(i) = self.live_pod(pod) else { return };
        let finished = self.outcome.is_some();
        let p = &mut self.pods[i];
        if p.deleting {
            return;
        }
        p.recreate = !finished;
        if p.launcher_live() {
            p.deleting = true;
            self.sync_pod(i, now, step);
            step.actions.push(Action::StopPod { pod });
        } else {
            self.remove_pod(i, now, step);
            if !finished {
                self.recreate_pod(i, now, step);
            }
        }
    }

    /// Emit the pod's last row as deleted.
    fn remove_pod(&mut self, i: usize, now: Duration, step: &mut Step) {
        let Some(p) = self.pods.get_mut(i) else {
            return;
        };
        p.gone = true;
        let row = Row::Pod(p.row(now, &self.config.node));
        p.shown = Some(row.clone());
        step.changes.push(Change { at: now, event: WatchEvent::Deleted, row });
    }

    /// Replace a deleted pod by a fresh one (RESTARTS 0, AGE 0s) and schedule it if the gang runs.
    fn recreate_pod(&mut self, i: usize, now: Duration, step: &mut Step) {
        let Some(old) = self.pods.get(i) else { return };
        self.pods[i] = Pod::new(old.id, old.name.clone(), old.restart_policy, now);
        self.sync_pod_as(i, now, WatchEvent::Added, step);
        if self.admitted {
            self.schedule(i, now, step);
        }
    }

    fn tick(&mut self, now: Duration, step: &mut Step) {
        for i in 0..self.pods.len() {
            let p = &mut self.pods[i];
            let due = p.restart_pending_since.is_some_and(|t| now.saturating_sub(t) >= self.config.crash_loop_after);
            if let (true, false, false, Container::Terminated(last)) = (due, p.gone, p.deleting, p.container) {
                p.container = Container::BackOff(last);
                p.shift_termination();
                self.sync_pod(i, now, step);
            }
        }
    }

    /// The operator's reconcile: apply Running, Succeeded or Failed.
    fn evaluate(&mut self, now: Duration, step: &mut Step) {
        if self.outcome.is_some() || !self.admitted {
            return;
        }
        let (leader_runs, decision) = self.decide();
        if self.state == Some(JobState::Created) && leader_runs {
            self.state = Some(JobState::Running);
            self.sync_job(now, WatchEvent::Modified, step);
        }
        if let Some((outcome, reason)) = decision {
            self.finish(outcome, reason, now, step);
        }
    }

    /// Whether the leader (master, else a worker) runs, and the outcome if the job is decided.
    fn decide(&self) -> (bool, Option<(Outcome, String)>) {
        let name = &self.job.name;
        let has_master = self.job.master.is_some();
        let of_type = |t: ReplicaType| self.pods.iter().filter(move |p| !p.gone && !p.deleting && p.id.rtype == t);
        let leader = if has_master { ReplicaType::Master } else { ReplicaType::Worker };
        let leader_runs = of_type(leader).any(|p| p.container == Container::Running);

        let succeeded = if has_master {
            of_type(ReplicaType::Master).any(|p| p.phase == Phase::Succeeded)
        } else {
            let workers: Vec<&Pod> = of_type(ReplicaType::Worker).collect();
            !workers.is_empty() && workers.iter().all(|p| p.phase == Phase::Succeeded)
        };
        if succeeded {
            let reason = format!("PyTorchJob {name} is successfully completed.");
            return (leader_runs, Some((Outcome::Succeeded, reason)));
        }

        for rtype in [ReplicaType::Master, ReplicaType::Worker] {
            let failed = of_type(rtype).filter(|p| p.phase == Phase::Failed).count();
            if failed > 0 {
                let reason = format!("PyTorchJob {name} is failed because {failed} {rtype} replica(s) failed.");
                return (leader_runs, Some((Outcome::Failed, reason)));
            }
        }

        let master_lives = of_type(ReplicaType::Master).any(|p| matches!(p.phase, Phase::Pending | Phase::Running));
        let workers: Vec<&Pod> = of_type(ReplicaType::Worker).collect();
        let worker_count = self.job.worker.as_ref().map_or(0, |w| w.replicas) as usize;
        let all_workers_failed = worker_count > 0
            && workers.len() == worker_count
            && workers.iter().all(|p| {
                p.latest_exit_failed
                    && matches!(p.container, Container::Terminated(_) | Container::BackOff(_))
                    && p.phase != Phase::Succeeded
            });
        if has_master && master_lives && all_workers_failed {
            let reason = format!(
                "PyTorchJob {name} is failed because all {worker_count} Worker replica(s) failed while the Master was running."
            );
            return (leader_runs, Some((Outcome::Failed, reason)));
        }

        if let Some(limit) = self.job.backoff_limit {
            let restarts: u64 = self
                .pods
                .iter()
                .filter(|p| !p.gone && p.phase == Phase::Running && p.restart_policy.counts_against_backoff_limit())
                .map(|p| u64::from(p.restarts))
                .sum();
            // The operator: a limit of 0 fails on the first restart, else restarts >= limit.
            if restarts >= u64::from(limit.max(1)) {
                let reason = format!("PyTorchJob {name} has failed because it has reached the specified backoff limit");
                return (leader_runs, Some((Outcome::Failed, reason)));
            }
        }
        (leader_runs, None)
    }

    fn finish(&mut self, outcome: Outcome, reason: String, now: Duration, step: &mut Step) {
        self.outcome = Some(outcome);
        self.state = Some(match outcome {
            Outcome::Succeeded => JobState::Succeeded,
            Outcome::Failed => JobState::Failed,
        });
        self.sync_job(now, WatchEvent::Modified, step);
        self.sync_podgroup(now, step);
        self.podgroup_deleted = true;
        step.changes.push(Change { at: now, event: WatchEvent::Deleted, row: self.podgroup_row(now) });
        if outcome == Outcome::Failed {
            for i in 0..self.pods.len() {
                let Some(p) = self.pods.get_mut(i) else {
                    continue;
                };
                if p.gone {
                    continue;
                }
                p.recreate = false;
                if p.launcher_live() {
                    p.deleting = true;
                    self.sync_pod(i, now, step);
                } else {
                    self.remove_pod(i, now, step);
                }
            }
            step.actions.push(Action::StopAll);
        }
        step.actions.push(Action::Finish { outcome, reason });
    }

    fn job_row(&self, now: Duration) -> Row {
        Row::Job(JobRow {
            name: self.job.name.clone(),
            state: self.state,
            age: now.saturating_sub(self.submitted_at.unwrap_or(now)),
        })
    }

    fn podgroup_row(&self, now: Duration) -> Row {
        Row::PodGroup(PodGroupRow {
            name: self.job.name.clone(),
            status: self.podgroup_status,
            min_member: self.job.total_replicas(),
            runnings: self.pods.iter().filter(|p| !p.gone && p.phase == Phase::Running).count() as u32,
            age: now.saturating_sub(self.submitted_at.unwrap_or(now)),
            queue: self.config.queue.clone(),
        })
    }

    fn sync_job(&mut self, now: Duration, event: WatchEvent, step: &mut Step) {
        let row = self.job_row(now);
        push_if_changed(&mut self.shown_job, row, now, event, step);
    }

    fn sync_podgroup(&mut self, now: Duration, step: &mut Step) {
        self.sync_podgroup_as(now, WatchEvent::Modified, step);
    }

    fn sync_podgroup_as(&mut self, now: Duration, event: WatchEvent, step: &mut Step) {
        if self.podgroup_deleted {
            return;
        }
        let row = self.podgroup_row(now);
        push_if_changed(&mut self.shown_podgroup, row, now, event, step);
    }

    fn sync_pod(&mut self, i: usize, now: Duration, step: &mut Step) {
        self.sync_pod_as(i, now, WatchEvent::Modified, step);
    }

    fn sync_pod_as(&mut self, i: usize, now: Duration, event: WatchEvent, step: &mut Step) {
        let node = self.config.node.clone();
        let Some(p) = self.pods.get_mut(i) else {
            return;
        };
        if p.gone {
            return;
        }
        let row = Row::Pod(p.row(now, &node));
        if event == WatchEvent::Added {
            p.shown = None;
        }
        push_if_changed(&mut p.shown, row, now, event, step);
    }
}

/// Record `row` as shown and emit it, unless only its clock-driven columns changed.
fn push_if_changed(shown: &mut Option<Row>, row: Row, now: Duration, event: WatchEvent, step: &mut Step) {
    if shown.as_ref().is_some_and(|s| s.same_content(&row)) {
        return;
    }
    *shown = Some(row.clone());
    step.changes.push(Change { at: now, event, row });
}

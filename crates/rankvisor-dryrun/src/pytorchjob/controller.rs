//! The training operator, Volcano and the kubelet, emulated as one synchronous state machine.
//!
//! The event loop starts real launchers and feeds what it observes as [`ClusterEvent`]s, with
//! the time since its start; each call returns the rows that changed (for the watch output) and
//! the [`ClusterAction`]s the event loop must carry out. Nothing here reads a clock or touches a
//! process. The operator's rules are in [`super::operator`], each named after its Go function;
//! the pods and the events' dispatch are shared with the TrainJob's ([`crate::kubelet`]).
//!
//! - The kubelet: a replica's launcher is its container's PID 1. A launcher that exits under
//!   OnFailure (non-zero) or Always is a container crash: the kubelet restarts it in place (the
//!   first restart at once, then `backoff_initial` doubling), the pod stays Running and its
//!   RESTARTS go on counting. Under Never and ExitCode (the pod's policy is Never) the pod ends
//!   Succeeded or Failed with the launcher.
//! - The operator (`ReconcileJobs`): the backoff limit and the active deadline fail the job and
//!   delete every pod; a Failed pod is recreated (ExitCode retryable, OnFailure, Always: the job
//!   shows Restarting) or fails the job (ExitCode permanent); `UpdateJobStatus` sets Running,
//!   Succeeded, Restarting or Failed. A finished job's pods are cleaned up by `cleanPodPolicy`
//!   (default None: kept, running on), its PodGroup deleted, the job itself deleted
//!   `ttlSecondsAfterFinished` later. A suspended job has no pods until resumed; a job managed by
//!   another controller is left alone.
//! - Volcano ([`crate::volcano`]) admits the gang only if the queue capability holds the PodGroup's minResources and
//!   the job has minMember pods; otherwise the PodGroup stays `Inqueue` and every pod `Pending`,
//!   forever.

use std::time::Duration;

use super::operator::{self, Condition};
use super::PyTorchJob;
use crate::kubelet::cluster::{ClusterAction, ClusterEvent, ControllerConfig, Outcome, Step};
use crate::kubelet::pod::{LauncherProcess, Pod, PodPhase};
use crate::kubelet::replica::ReplicaId;
use crate::kubelet::{self, JobRules, Kubelet};
use crate::render::rows::{Change, JobState, PodGroupPhase, Row, WatchEventType};
use crate::volcano::{self, gang::Gang};
use rankvisor_core::exit::ExitHow;
use rankvisor_core::policy::RestartPolicy;

mod watch;

/// The emulated controllers of one dry-run job.
#[derive(Debug, Clone)]
pub struct Controller {
    job: PyTorchJob,
    kubelet: Kubelet,
    submitted_at: Option<Duration>,
    /// The job's `status.startTime` (reset on resume), from which the active deadline runs.
    started_at: Option<Duration>,
    admitted: bool,
    suspended: bool,
    state: Option<JobState>,
    outcome: Option<Outcome>,
    finished_at: Option<Duration>,
    job_deleted: bool,
    /// Pods in phase Failed at the previous reconcile (`GetTotalFailedReplicas`).
    failed_before: usize,
    podgroup_status: Option<PodGroupPhase>,
    podgroup_created: bool,
    podgroup_deleted: bool,
    shown_job: Option<Row>,
    shown_podgroup: Option<Row>,
}

impl Controller {
    /// A controller for an admitted job; nothing happens until `ClusterEvent::Submitted`.
    pub fn new(job: PyTorchJob, config: ControllerConfig) -> Self {
        Self {
            job,
            kubelet: Kubelet::new(config),
            submitted_at: None,
            started_at: None,
            admitted: false,
            suspended: false,
            state: None,
            outcome: None,
            finished_at: None,
            job_deleted: false,
            failed_before: 0,
            podgroup_status: None,
            podgroup_created: false,
            podgroup_deleted: false,
            shown_job: None,
            shown_podgroup: None,
        }
    }

    /// The job being run.
    pub(crate) fn job(&self) -> &PyTorchJob {
        &self.job
    }

    /// The job's STATE (None before submit).
    pub fn state(&self) -> Option<JobState> {
        self.state
    }

    /// The dry run's exit status: the outcome's, 1 while undecided (a job another controller
    /// manages never gets one here: the dry run refuses it with 64 before it starts).
    pub(crate) fn exit_code(&self) -> i32 {
        self.outcome.map_or(1, Outcome::exit_code)
    }

    /// Pods whose launcher was asked to start and has not been reported exited.
    pub fn live_launchers(&self) -> Vec<ReplicaId> {
        self.kubelet.live_launchers()
    }

    /// Nothing more will happen: the outcome is decided (and the TTL, if any, has deleted the
    /// job) or the job is another controller's, and no launcher is left.
    pub(crate) fn is_settled(&self) -> bool {
        let over = match (self.outcome, self.job.run_policy.ttl_seconds_after_finished) {
            (Some(_), Some(_)) => self.job_deleted,
            (Some(_), None) => true,
            (None, _) => self.submitted_at.is_some() && self.job.run_policy.external_manager().is_some(),
        };
        over && self.live_launchers().is_empty()
    }

    /// When the next `ClusterEvent::Tick` is due: a pod to show CrashLoopBackOff, a container
    /// to restart, the active deadline, the TTL after finishing.
    pub fn next_tick(&self) -> Option<Duration> {
        let kubelet = self.kubelet.next_tick();
        let deadline = match (self.outcome, self.job.run_policy.active_deadline_seconds, self.started_at) {
            (None, Some(secs), Some(start)) => Some(start.saturating_add(operator::deadline(secs))),
            _ => None,
        };
        let ttl = match (self.finished_at, self.job.run_policy.ttl_seconds_after_finished, self.job_deleted) {
            (Some(at), Some(ttl), false) => {
                Some(at.saturating_add(Duration::from_secs(u64::try_from(ttl).unwrap_or(0))))
            }
            _ => None,
        };
        [kubelet, deadline, ttl].into_iter().flatten().min()
    }

    /// Every existing object's row at `now` (job, PodGroup unless deleted, pods not deleted).
    #[cfg(test)]
    pub(crate) fn rows(&self, now: Duration) -> Vec<Row> {
        let mut rows = Vec::new();
        if self.submitted_at.is_some() && !self.job_deleted {
            rows.push(self.job_row(now));
        }
        if self.podgroup_created && !self.podgroup_deleted {
            rows.push(self.podgroup_row(now));
        }
        rows.extend(self.kubelet.rows(now));
        rows
    }

    /// Apply one observation made at `now` (time since the event loop started).
    pub fn handle(&mut self, now: Duration, event: ClusterEvent) -> Step {
        kubelet::handle(self, now, event)
    }

    fn set_state(&mut self, state: JobState, now: Duration, step: &mut Step) {
        if self.state != Some(state) {
            self.state = Some(state);
            self.sync_job(now, WatchEventType::Modified, step);
        }
    }

    /// The PodGroup (`SyncPodGroup`), every pod, and Volcano's gang admission, once `ReconcileJobs`
    /// has checked the backoff limit (a negative one is past with no restart: no PodGroup, no pod).
    fn create_pods(&mut self, now: Duration, step: &mut Step) {
        if operator::past_backoff_limit(&self.job, &self.kubelet.pods) {
            let limit = self.job.run_policy.backoff_limit.unwrap_or_default();
            let message = format!("spec.runPolicy.backoffLimit is {limit}: the CRD's schema sets no minimum, so the apiserver accepts it, and the operator's first reconcile finds 0 restarts >= {limit} (PastBackoffLimit): the job fails before any PodGroup or pod is created");
            step.actions.push(ClusterAction::Note { message });
            return self.finish(Outcome::Failed, operator::backoff_limit_message(&self.job), true, now, step);
        }
        self.podgroup_created = true;
        self.sync_podgroup_as(now, WatchEventType::Added, step);
        for id in self.job.replicas() {
            let policy = self.job.spec(id.rtype).map_or(RestartPolicy::OnFailure, |s| s.restart_policy);
            self.kubelet.add(Pod::new(id, self.job.pod_name(id), policy, now), now, step);
        }
        self.podgroup_status = Some(PodGroupPhase::Inqueue);
        self.sync_podgroup(now, step);
        let demand = self.job.min_resources();
        let gang = Gang {
            name: &self.job.name,
            queue: self.job.queue(),
            pods: self.job.total_replicas(),
            min_member: self.job.min_member(),
            demand: &demand,
        };
        if let Err(message) = volcano::gang::admit(&gang, self.kubelet.config.capability.as_ref()) {
            step.actions.push(ClusterAction::Unschedulable { message });
            return;
        }
        self.admitted = true;
        for i in 0..self.kubelet.pods.len() {
            self.schedule(i, now, step);
        }
        self.podgroup_status = Some(PodGroupPhase::Running);
        self.sync_podgroup(now, step);
    }

    /// Bind the pod to the node and ask for its launcher.
    fn schedule(&mut self, i: usize, now: Duration, step: &mut Step) {
        let Some(p) = self.kubelet.pods.get_mut(i) else {
            return;
        };
        p.bind();
        let id = p.id;
        self.kubelet.sync(i, now, WatchEventType::Modified, step);
        step.actions.push(ClusterAction::StartLauncher { pod: id });
    }

    /// Replace a deleted pod by a fresh one (RESTARTS 0, AGE 0s) and schedule it if the gang runs.
    fn recreate_pod(&mut self, i: usize, now: Duration, step: &mut Step) {
        let Some(old) = self.kubelet.pods.get(i) else { return };
        self.kubelet.pods[i] = Pod::new(old.id, old.name.clone(), old.restart_policy, now);
        self.kubelet.sync(i, now, WatchEventType::Added, step);
        if self.admitted {
            self.schedule(i, now, step);
        }
    }

    /// `CleanupJob`: `ttlSecondsAfterFinished` after the finish the job is deleted, and with it
    /// (by their owner references) every pod left.
    fn expire_ttl(&mut self, now: Duration, step: &mut Step) {
        let (Some(at), Some(ttl)) = (self.finished_at, self.job.run_policy.ttl_seconds_after_finished) else {
            return;
        };
        if self.job_deleted || now < at.saturating_add(Duration::from_secs(u64::try_from(ttl).unwrap_or(0))) {
            return;
        }
        self.job_deleted = true;
        step.changes.push(Change { at: now, event: WatchEventType::Deleted, row: self.job_row(now) });
        step.actions.push(ClusterAction::Note {
            message: format!("PyTorchJob {} is deleted: ttlSecondsAfterFinished ({ttl}s) has passed", self.job.name),
        });
        self.delete_pods(now, step, |_| true);
    }

    /// `ReconcileJobs` (after the pods' and the job's own changes), unless the job is finished,
    /// suspended or someone else's.
    fn reconcile_jobs(&mut self, now: Duration, step: &mut Step) {
        if self.outcome.is_some() || self.suspended || self.submitted_at.is_none() || !self.podgroup_created {
            return;
        }
        let failed_now = operator::failed_pods(&self.kubelet.pods);
        let exceeds = operator::exceeds_backoff_limit(&self.job, &self.kubelet.pods, self.failed_before);
        self.failed_before = failed_now;
        if exceeds || operator::past_backoff_limit(&self.job, &self.kubelet.pods) {
            return self.finish(Outcome::Failed, operator::backoff_limit_message(&self.job), true, now, step);
        }
        if operator::past_active_deadline(&self.job, self.started_at, now) {
            return self.finish(Outcome::Failed, operator::deadline_message(&self.job), true, now, step);
        }
        if !self.admitted {
            return;
        }
        // ReconcilePods: a Failed pod is recreated, or fails the job (ExitCode, permanent code).
        // UpdateJobStatus then counts the replica statuses as listed, the failed pod included.
        let mut conditions = Vec::new();
        let mut recreate = Vec::new();
        for (i, p) in self.kubelet.pods.iter().enumerate() {
            if p.gone || p.phase != PodPhase::Failed {
                continue;
            }
            let code = match p.launcher {
                LauncherProcess::Exited(how) => how.code(),
                _ => 0xbeef,
            };
            let Some(restart) = operator::restart_failed_pod(p.restart_policy, code) else { continue };
            conditions.push(operator::failed_pod_condition(&self.job, p.id.rtype, restart));
            if restart && !p.deleting {
                recreate.push(i);
            }
        }
        conditions.extend(operator::update_job_status(&self.job, &self.kubelet.pods));
        for i in recreate {
            self.kubelet.remove(i, now, step);
            self.recreate_pod(i, now, step);
        }
        // `setCondition` ignores everything once Failed is set.
        for condition in conditions {
            match condition {
                Condition::Running => self.set_state(JobState::Running, now, step),
                Condition::Restarting(_) => self.set_state(JobState::Restarting, now, step),
                Condition::Succeeded(reason) => return self.finish(Outcome::Succeeded, reason, false, now, step),
                Condition::Failed(reason) => return self.finish(Outcome::Failed, reason, false, now, step),
            }
        }
    }

    /// The job is Succeeded or Failed: the PodGroup is deleted, and the pods: every one after
    /// the backoff limit or the deadline (`DeletePodsAndServices` before the condition is set),
    /// else those `cleanPodPolicy` names.
    fn finish(&mut self, outcome: Outcome, reason: String, delete_all: bool, now: Duration, step: &mut Step) {
        self.outcome = Some(outcome);
        self.finished_at = Some(now);
        let state = match outcome {
            Outcome::Succeeded => JobState::Succeeded,
            Outcome::Failed => JobState::Failed,
        };
        self.set_state(state, now, step);
        self.sync_podgroup(now, step);
        if self.podgroup_created && !self.podgroup_deleted {
            self.podgroup_deleted = true;
            step.changes.push(Change { at: now, event: WatchEventType::Deleted, row: self.podgroup_row(now) });
        }
        let policy = self.job.run_policy.clean_pod_policy.clone();
        let deletes_all = delete_all || self.kubelet.pods.iter().all(|p| p.gone || policy.deletes(p.is_active()));
        self.delete_pods(now, step, |p| delete_all || policy.deletes(p.is_active()));
        if deletes_all {
            step.actions.push(ClusterAction::StopAll);
        }
        step.actions.push(ClusterAction::Finish { outcome, reason });
    }

    /// Delete the pods `which` picks, for good: stop their launchers, or remove them at once.
    fn delete_pods(&mut self, now: Duration, step: &mut Step, which: impl Fn(&Pod) -> bool) {
        for i in 0..self.kubelet.pods.len() {
            let p = &mut self.kubelet.pods[i];
            if p.gone || p.deleting || !which(p) {
                continue;
            }
            p.recreate = false;
            self.kubelet.delete(i, now, step);
        }
    }
}

impl JobRules for Controller {
    fn kubelet(&mut self) -> &mut Kubelet {
        &mut self.kubelet
    }

    fn submitted(&self) -> bool {
        self.submitted_at.is_some()
    }

    fn submit(&mut self, now: Duration, step: &mut Step) {
        if self.submitted_at.is_some() {
            return;
        }
        self.submitted_at = Some(now);
        self.sync_job(now, WatchEventType::Added, step);
        if let Some(manager) = self.job.run_policy.external_manager() {
            // `ManagedByExternalController`: the operator skips the job; its status stays empty.
            step.actions.push(ClusterAction::Note {
                message: format!(
                    "spec.runPolicy.managedBy is {manager:?}: the training operator leaves this job to that controller, so nothing runs here"
                ),
            });
            return;
        }
        self.set_state(JobState::Created, now, step);
        self.started_at = Some(now);
        if self.job.run_policy.suspend {
            self.suspended = true;
            self.set_state(JobState::Suspended, now, step);
            step.actions.push(ClusterAction::Note {
                message: format!(
                    "PyTorchJob {} is suspended: no PodGroup and no pods until spec.runPolicy.suspend is false (--inject resume:job@TIME)",
                    self.job.name
                ),
            });
            return;
        }
        self.create_pods(now, step);
    }

    /// `ReconcileJobs` on a resumed job: the Suspended condition turns False (still the latest,
    /// so STATE still reads Suspended), the start time is reset, pods are created.
    fn resume(&mut self, now: Duration, step: &mut Step) {
        if !self.suspended || self.outcome.is_some() {
            return;
        }
        self.suspended = false;
        self.started_at = Some(now);
        step.actions.push(ClusterAction::Note { message: format!("PyTorchJob {} is resumed.", self.job.name) });
        self.create_pods(now, step);
    }

    // Under Never (the pod's policy for Never and ExitCode) the pod ends with its container;
    // after the outcome the dry run restarts nothing, so it ends there too.
    fn launcher_exited(&mut self, pod: ReplicaId, status: ExitHow, now: Duration, step: &mut Step) {
        let finished = self.outcome.is_some();
        if let Some(i) = self.kubelet.launcher_exited(pod, status, now, finished, step) {
            self.recreate_pod(i, now, step);
        }
    }

    fn pod_deleted(&mut self, pod: ReplicaId, now: Duration, step: &mut Step) {
        let Some(i) = self.kubelet.live(pod) else { return };
        let finished = self.outcome.is_some();
        let p = &mut self.kubelet.pods[i];
        if p.deleting {
            return;
        }
        // A Never pod's container is killed (137/143): the pod ends Failed, which fails the job.
        let never = p.restart_policy == RestartPolicy::Never;
        if never && !matches!(p.phase, PodPhase::Succeeded) {
            p.phase = PodPhase::Failed;
        }
        p.recreate = !finished && !never;
        let recreate = p.recreate;
        if self.kubelet.delete(i, now, step) && recreate {
            self.recreate_pod(i, now, step);
        }
    }

    fn tick(&mut self, now: Duration, step: &mut Step) {
        self.kubelet.tick(now, self.outcome.is_some(), step);
        self.expire_ttl(now, step);
    }

    fn reconcile(&mut self, now: Duration, step: &mut Step) {
        self.reconcile_jobs(now, step);
        self.sync_podgroup(now, step);
    }
}

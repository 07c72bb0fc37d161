//! The TrainJob, JobSet and Job controllers of one TrainJob, emulated as one synchronous state
//! machine over the pods the shared kubelet ([`crate::kubelet`]) runs: the same [`ClusterEvent`]s
//! in, [`ClusterAction`]s and row changes out, as the PyTorchJob's controller.
//!
//! - TrainJob (`trainjob_controller.go`): creates the JobSet (suspended with the TrainJob);
//!   `Suspended` True, then False (`Resumed`) on resume; `activeDeadlineSeconds` from creation
//!   or the resume fails it (`DeadlineExceeded`) and deletes the JobSet; the JobSet's `Completed`
//!   and `Failed` are copied as `Complete` and `Failed` with their reason and message.
//! - JobSet: the trainer Job `<trainjob>-node-0`; a failed Job goes through the failure policy
//!   ([`super::jobset`]), a restart deletes every pod and then creates the Job anew with
//!   `jobset.sigs.k8s.io/restart-attempt` one higher; a complete Job through the success policy.
//! - Job (Indexed, [`super::job`]): pod k of each index; a failed pod is matched against the
//!   `podFailurePolicy`, counted, and replaced (same index, new name); failed pods past
//!   `backoffLimit`, or under OnFailure the containers' restarts summed over every node, fail it.

use std::collections::BTreeSet;
use std::time::Duration;

use rankvisor_core::exit::ExitHow;

use super::conditions::{self, Condition, ConditionType};
use super::env::NodePod;
use super::job::{self, CountedPod};
use super::jobset::{self, FailedJob, FailureVerdict};
use super::{PodFailureAction, TrainJob};
use crate::kubelet::cluster::{ClusterAction, ClusterEvent, ControllerConfig, Outcome, Step};
use crate::kubelet::pod::{LauncherProcess, Pod, PodPhase};
use crate::kubelet::replica::ReplicaId;
use crate::kubelet::{self, JobRules, Kubelet};
use crate::render::rows::{Change, Row, WatchEventType};

mod watch;

/// The trainer Job of one restart attempt.
#[derive(Debug, Clone)]
struct BatchJob {
    created_at: Duration,
    /// Failed pods counted towards `backoffLimit` (a podFailurePolicy Ignore leaves one out).
    failed: u32,
    succeeded: BTreeSet<u32>,
    /// `Failed`: reason, message, when.
    failure: Option<(String, String, Duration)>,
    complete_at: Option<Duration>,
    /// Failed pods already seen (by name).
    seen_failed: BTreeSet<String>,
    /// Indexes whose failed pod is to be replaced.
    to_replace: BTreeSet<u32>,
}

/// The emulated controllers of one TrainJob.
#[derive(Debug, Clone)]
pub(crate) struct TrainJobController {
    job: TrainJob,
    kubelet: Kubelet,
    submitted_at: Option<Duration>,
    /// Creation, or the last resume: where `activeDeadlineSeconds` counts from.
    deadline_from: Option<Duration>,
    suspended: bool,
    ever_suspended: bool,
    conditions: Vec<Condition>,
    outcome: Option<Outcome>,
    jobset_created_at: Option<Duration>,
    jobset_deleted: bool,
    restarts: u32,
    restarts_towards_max: i32,
    /// `Completed` or `Failed`, once the JobSet is finished.
    terminal: Option<&'static str>,
    /// A restart waits for every pod of the previous attempt to be gone.
    restarting: bool,
    batch: Option<BatchJob>,
    /// Pods created so far, for their names' suffixes.
    serial: u32,
    shown: [Option<Row>; 3],
}

/// The five characters the Job controller's pod names end with (`utilrand.String`'s alphabet),
/// drawn here from the pod's serial number so a run's names are the same every time.
fn suffix(name: &str, serial: u32) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes().chain(serial.to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (0..5).map(|i| char::from(ALPHABET[((h >> (i * 8)) % ALPHABET.len() as u64) as usize])).collect()
}

impl TrainJobController {
    /// A controller for an admitted TrainJob; nothing happens until `ClusterEvent::Submitted`.
    pub(crate) fn new(job: TrainJob, config: ControllerConfig) -> Self {
        Self {
            job,
            kubelet: Kubelet::new(config),
            submitted_at: None,
            deadline_from: None,
            suspended: false,
            ever_suspended: false,
            conditions: Vec::new(),
            outcome: None,
            jobset_created_at: None,
            jobset_deleted: false,
            restarts: 0,
            restarts_towards_max: 0,
            terminal: None,
            restarting: false,
            batch: None,
            serial: 0,
            shown: [None, None, None],
        }
    }

    /// The TrainJob being run.
    pub(crate) fn job(&self) -> &TrainJob {
        &self.job
    }

    /// The STATE column (the last condition's type), if any.
    pub(crate) fn state(&self) -> Option<&'static str> {
        conditions::state(&self.conditions).map(ConditionType::as_str)
    }

    /// The dry run's exit status: the outcome's, 0 for a TrainJob another controller manages, 1
    /// while undecided.
    pub(crate) fn exit_code(&self) -> i32 {
        match (self.outcome, &self.job.managed_by) {
            (Some(o), _) => o.exit_code(),
            (None, Some(_)) => 0,
            (None, None) => 1,
        }
    }

    /// Node k's pod now, for its launch.
    pub(crate) fn node_pod(&self, id: ReplicaId) -> Option<NodePod> {
        let pods = &self.kubelet.pods;
        self.kubelet.live(id).map(|i| NodePod {
            index: id.index,
            name: pods[i].name.clone(),
            restart_attempt: pods[i].restart_attempt.unwrap_or(0),
        })
    }

    /// Node k's pod's current name (the last one it had, once gone).
    pub(crate) fn pod_name(&self, id: ReplicaId) -> String {
        self.kubelet
            .pods
            .iter()
            .rev()
            .find(|p| p.id == id)
            .map_or_else(|| self.job.hostname(id.index), |p| p.name.clone())
    }

    /// Pods whose launcher was asked to start and has not been reported exited.
    pub(crate) fn live_launchers(&self) -> Vec<ReplicaId> {
        self.kubelet.live_launchers()
    }

    /// Nothing more will happen: the outcome is decided (or another controller manages the
    /// TrainJob) and no launcher is left.
    pub(crate) fn is_settled(&self) -> bool {
        let over = self.outcome.is_some() || (self.submitted_at.is_some() && self.job.managed_by.is_some());
        over && self.live_launchers().is_empty()
    }

    /// When the next `ClusterEvent::Tick` is due: a kubelet timer, the deadline.
    pub(crate) fn next_tick(&self) -> Option<Duration> {
        let kubelet = self.kubelet.next_tick();
        let deadline = match (self.outcome, self.job.active_deadline_seconds, self.deadline_from, self.suspended) {
            (None, Some(secs), Some(from), false) => Some(from.saturating_add(Duration::from_secs(secs))),
            _ => None,
        };
        [kubelet, deadline].into_iter().flatten().min()
    }

    /// Apply one observation made at `now`.
    pub(crate) fn handle(&mut self, now: Duration, event: ClusterEvent) -> Step {
        kubelet::handle(self, now, event)
    }

    /// A line for the user; rule names and the namespace come from the manifest, so escaped.
    fn note(step: &mut Step, message: String) {
        let message = rankvisor_core::untrusted::escape(&message).into_owned();
        step.actions.push(ClusterAction::Note { message });
    }

    /// The JobSet's Job for the current restart attempt, with a pod per index.
    fn create_job(&mut self, now: Duration, step: &mut Step) {
        self.batch = Some(BatchJob {
            created_at: now,
            failed: 0,
            succeeded: BTreeSet::new(),
            failure: None,
            complete_at: None,
            seen_failed: BTreeSet::new(),
            to_replace: BTreeSet::new(),
        });
        self.sync(now, step);
        for k in 0..self.job.num_nodes {
            self.create_pod(k, now, step);
        }
    }

    /// A new pod for index `k`, scheduled at once (no gang: the JobSet starts every node).
    fn create_pod(&mut self, k: u32, now: Duration, step: &mut Step) {
        self.serial += 1;
        let name = format!("{}-{}", self.job.hostname(k), suffix(&self.job.name, self.serial));
        let mut pod = Pod::new(ReplicaId::worker(k), name, self.job.restart_policy, now);
        pod.restart_attempt = Some(self.restarts);
        pod.bind();
        self.kubelet.add(pod, now, step);
        step.actions.push(ClusterAction::StartLauncher { pod: ReplicaId::worker(k) });
    }

    /// Delete a pod: its launcher is stopped; `counted`: as the Job controller counts a deleted
    /// pod that had not succeeded, as failed (and replaces it).
    fn delete_pod(&mut self, id: ReplicaId, counted: bool, now: Duration, step: &mut Step) {
        let Some(i) = self.kubelet.live(id) else { return };
        let p = &mut self.kubelet.pods[i];
        if p.deleting {
            return;
        }
        if counted && p.phase != PodPhase::Succeeded {
            p.phase = PodPhase::Failed;
        }
        self.kubelet.delete(i, now, step);
    }

    /// The three controllers, in the order their watches would wake them.
    fn reconcile_controllers(&mut self, now: Duration, step: &mut Step) {
        let finished = conditions::is_train_job_finished(&self.conditions);
        if finished || self.submitted_at.is_none() || self.job.managed_by.is_some() {
            return;
        }
        if let (Some(secs), Some(from), false) = (self.job.active_deadline_seconds, self.deadline_from, self.suspended)
        {
            if now >= from.saturating_add(Duration::from_secs(secs)) {
                let (reason, message) = conditions::DEADLINE_EXCEEDED;
                self.jobset_deleted = true;
                return self.finish(Outcome::Failed, ConditionType::Failed, reason, message.to_string(), now, step);
            }
        }
        if self.restarting {
            if self.kubelet.pods.iter().all(|p| p.gone) {
                self.restarting = false;
                self.create_job(now, step);
            }
            return;
        }
        if self.batch.is_some() {
            self.sync_job(now, step);
        }
        let Some(batch) = &self.batch else { return };
        if let Some((reason, _, at)) = batch.failure.clone() {
            let failed = [FailedJob {
                name: self.job.job_name(),
                replicated_job: self.job.replicated_job.clone(),
                reason,
                failed_at: at,
            }];
            match jobset::execute_failure_policy(self.job.failure_policy.as_ref(), &failed, self.restarts_towards_max) {
                Some(FailureVerdict::Fail { reason, message }) => {
                    self.terminal = Some("Failed");
                    self.finish(Outcome::Failed, ConditionType::Failed, reason, message, now, step);
                }
                Some(FailureVerdict::Restart { counts_towards_max, reason }) => {
                    self.restarts += 1;
                    self.restarts_towards_max += i32::from(counts_towards_max);
                    Self::note(step, format!(
                        "JobSet {} restarts ({reason}): every pod is deleted and created again with jobset.sigs.k8s.io/restart-attempt={}",
                        self.job.name, self.restarts
                    ));
                    self.restarting = true;
                    self.batch = None;
                    for id in self.kubelet.pods.iter().filter(|p| !p.gone).map(|p| p.id).collect::<Vec<_>>() {
                        self.delete_pod(id, false, now, step);
                    }
                    self.sync(now, step);
                    self.reconcile_controllers(now, step);
                }
                None => {}
            }
            return;
        }
        if batch.complete_at.is_some() {
            let replicated = [(self.job.replicated_job.clone(), 1)];
            if jobset::execute_success_policy(
                &self.job.success_policy,
                &replicated,
                std::slice::from_ref(&self.job.replicated_job),
            ) {
                self.terminal = Some("Completed");
                let message = jobset::ALL_JOBS_COMPLETED_MESSAGE.to_string();
                self.finish(
                    Outcome::Succeeded,
                    ConditionType::Complete,
                    jobset::ALL_JOBS_COMPLETED,
                    message,
                    now,
                    step,
                );
            }
        }
    }

    /// The Job controller's `syncJob` for the current Job: count new failed pods (through the
    /// `podFailurePolicy`), replace them, and decide Failed or Complete.
    fn sync_job(&mut self, now: Duration, step: &mut Step) {
        let Some(batch) = self.batch.as_mut() else { return };
        if batch.failure.is_some() || batch.complete_at.is_some() {
            return;
        }
        for p in self.kubelet.pods.iter().filter(|p| !p.gone && p.restart_attempt == Some(self.restarts)) {
            match p.phase {
                PodPhase::Succeeded => {
                    batch.succeeded.insert(p.id.index);
                }
                PodPhase::Failed if batch.seen_failed.insert(p.name.clone()) => {
                    let code = match p.launcher {
                        LauncherProcess::Exited(how) => how.code(),
                        _ => 137,
                    };
                    let (action, message) =
                        job::match_pod_failure_policy(&self.job.pod_failure_policy, &self.job.namespace, &p.name, code);
                    match action {
                        PodFailureAction::FailJob => {
                            let message = message.unwrap_or_default();
                            batch.failure = Some((job::POD_FAILURE_POLICY.to_string(), message, now));
                        }
                        PodFailureAction::Ignore => {
                            batch.to_replace.insert(p.id.index);
                        }
                        PodFailureAction::Count => {
                            batch.failed += 1;
                            batch.to_replace.insert(p.id.index);
                        }
                    }
                }
                _ => {}
            }
        }
        let counted: Vec<CountedPod> = self
            .kubelet
            .pods
            .iter()
            .filter(|p| !p.gone && p.restart_attempt == Some(self.restarts))
            .map(|p| CountedPod { active: p.is_active(), restart_count: p.restarts })
            .collect();
        if batch.failure.is_none()
            && (job::exceeds_backoff_limit(batch.failed, self.job.backoff_limit)
                || job::past_backoff_limit_on_failure(self.job.restart_policy, self.job.backoff_limit, &counted))
        {
            batch.failure =
                Some((job::BACKOFF_LIMIT_EXCEEDED.to_string(), job::BACKOFF_LIMIT_MESSAGE.to_string(), now));
        }
        if batch.failure.is_none() && batch.succeeded.len() as u32 >= self.job.num_nodes {
            batch.complete_at = Some(now);
        }
        if let Some((reason, message, _)) = batch.failure.clone() {
            Self::note(step, format!("Job {} failed ({reason}): {message}", self.job.job_name()));
            // A failed Job's active pods are deleted.
            for id in self.kubelet.pods.iter().filter(|p| !p.gone && p.is_active()).map(|p| p.id).collect::<Vec<_>>() {
                self.delete_pod(id, false, now, step);
            }
        } else {
            // A failed pod is replaced once its container is gone (same index, a new name).
            for k in batch.to_replace.clone() {
                let id = ReplicaId::worker(k);
                match self.kubelet.live(id) {
                    Some(i) if self.kubelet.pods[i].launcher_live() => continue,
                    Some(i) => self.kubelet.remove(i, now, step),
                    None => {}
                }
                if let Some(b) = self.batch.as_mut() {
                    b.to_replace.remove(&k);
                }
                self.create_pod(k, now, step);
            }
        }
        self.sync(now, step);
    }

    /// The JobSet is finished (or deleted by the deadline): the TrainJob copies its condition.
    fn finish(
        &mut self,
        outcome: Outcome,
        kind: ConditionType,
        reason: &str,
        message: String,
        now: Duration,
        step: &mut Step,
    ) {
        self.outcome = Some(outcome);
        let condition = Condition { kind, status: true, reason: reason.to_string(), message: message.clone() };
        conditions::set_status_condition(&mut self.conditions, condition);
        let mut live = false;
        for id in self
            .kubelet
            .pods
            .iter()
            .filter(|p| !p.gone && (p.is_active() || self.jobset_deleted))
            .map(|p| p.id)
            .collect::<Vec<_>>()
        {
            self.delete_pod(id, false, now, step);
            live = true;
        }
        if self.jobset_deleted {
            step.changes.push(Change { at: now, event: WatchEventType::Deleted, row: self.jobset_row(now) });
            if self.batch.is_some() {
                step.changes.push(Change { at: now, event: WatchEventType::Deleted, row: self.batch_row(now) });
            }
        }
        if live {
            step.actions.push(ClusterAction::StopAll);
        }
        self.sync(now, step);
        let reason = format!("TrainJob {} {}: {reason}: {message}", self.job.name, kind.as_str());
        let reason = rankvisor_core::untrusted::escape(&reason).into_owned();
        step.actions.push(ClusterAction::Finish { outcome, reason });
    }
}

impl JobRules for TrainJobController {
    fn kubelet(&mut self) -> &mut Kubelet {
        &mut self.kubelet
    }

    fn submitted(&self) -> bool {
        self.submitted_at.is_some()
    }

    fn submit(&mut self, now: Duration, step: &mut Step) {
        self.submitted_at = Some(now);
        self.deadline_from = Some(now);
        self.sync(now, step);
        if let Some(m) = &self.job.managed_by {
            let message = format!("spec.managedBy is {m:?}: the TrainJob controller leaves this TrainJob to that controller, so nothing runs here");
            return Self::note(step, message);
        }
        self.jobset_created_at = Some(now);
        self.suspended = self.job.suspend;
        self.ever_suspended = self.job.suspend;
        conditions::set_suspended_condition(&mut self.conditions, self.suspended);
        if self.suspended {
            self.sync(now, step);
            let message = format!(
                "TrainJob {} is suspended: its JobSet and Job hold no pods until spec.suspend is false (--inject resume:job@TIME)",
                self.job.name
            );
            return Self::note(step, message);
        }
        self.create_job(now, step);
    }

    fn resume(&mut self, now: Duration, step: &mut Step) {
        if !self.suspended || self.outcome.is_some() {
            return;
        }
        self.suspended = false;
        conditions::set_suspended_condition(&mut self.conditions, false);
        // The deadline counts from the Suspended condition's turn to False.
        self.deadline_from = Some(now);
        Self::note(step, format!("TrainJob {} is resumed.", self.job.name));
        self.create_job(now, step);
    }

    /// A failed Job restarts no container either; a deleted pod is replaced by `sync_job`, not
    /// recreated.
    fn launcher_exited(&mut self, pod: ReplicaId, status: ExitHow, now: Duration, step: &mut Step) {
        let finished = self.outcome.is_some() || self.batch.as_ref().is_some_and(|b| b.failure.is_some());
        self.kubelet.launcher_exited(pod, status, now, finished, step);
    }

    fn pod_deleted(&mut self, pod: ReplicaId, now: Duration, step: &mut Step) {
        self.delete_pod(pod, true, now, step);
    }

    fn tick(&mut self, now: Duration, step: &mut Step) {
        self.kubelet.tick(now, self.outcome.is_some(), step);
    }

    fn reconcile(&mut self, now: Duration, step: &mut Step) {
        self.reconcile_controllers(now, step);
        self.sync(now, step);
    }
}

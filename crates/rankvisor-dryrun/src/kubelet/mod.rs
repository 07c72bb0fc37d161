//! What both job kinds' controllers share: the pods of one job on the dry run's node
//! ([`Kubelet`]: find, show, delete, and the kubelet's timers), and the dispatch of each
//! [`ClusterEvent`] ([`handle`]): the kubelet's part is done here, the job kind's rules
//! ([`JobRules`], the training operator's or the TrainJob's, JobSet's and Job's) do the rest.

pub(crate) mod cluster;
pub(crate) mod launch;
pub(crate) mod pod;
pub(crate) mod replica;

use std::time::Duration;

use rankvisor_core::exit::ExitHow;

use crate::render::rows::{Change, Row, WatchEventType};
use cluster::{ClusterAction, ClusterEvent, ControllerConfig, Step};
use pod::{KubeletTick, LauncherEnd, Pod};
use replica::ReplicaId;

/// A local dry run starts one launcher process per pod: a job of more pods than this, whatever its
/// kind, is refused at admission, before anything starts.
pub(crate) const MAX_DRY_RUN_PODS: u64 = 1024;

/// Why a job whose `field` asks for `pods` pods cannot run here (more than [`MAX_DRY_RUN_PODS`]).
pub(crate) fn too_many_pods(field: &str, pods: u64) -> Option<String> {
    (pods > MAX_DRY_RUN_PODS).then(|| {
        format!("{field} is {pods}: {pods} pods would start {pods} local processes: must be at most {MAX_DRY_RUN_PODS}")
    })
}

/// The pods of one job, as the kubelet runs them, with the cluster's setup.
#[derive(Debug, Clone)]
pub(crate) struct Kubelet {
    pub(crate) config: ControllerConfig,
    /// Every pod created, in order; a deleted one stays, `gone`.
    pub(crate) pods: Vec<Pod>,
}

impl Kubelet {
    pub(crate) fn new(config: ControllerConfig) -> Self {
        Self { config, pods: Vec::new() }
    }

    /// The index of `id`'s pod that is not gone.
    pub(crate) fn live(&self, id: ReplicaId) -> Option<usize> {
        self.pods.iter().position(|p| p.id == id && !p.gone)
    }

    /// Pods whose launcher was asked to start and has not been reported exited.
    pub(crate) fn live_launchers(&self) -> Vec<ReplicaId> {
        self.pods.iter().filter(|p| !p.gone && p.launcher_live()).map(|p| p.id).collect()
    }

    /// The rows of the pods not gone, at `now`.
    #[cfg(test)]
    pub(crate) fn rows(&self, now: Duration) -> impl Iterator<Item = Row> + '_ {
        self.pods.iter().filter(|p| !p.gone).map(move |p| Row::Pod(p.row(now, &self.config.node)))
    }

    /// When the kubelet next acts on a pod: a crashed container's restart, a CrashLoopBackOff.
    pub(crate) fn next_tick(&self) -> Option<Duration> {
        self.pods.iter().filter_map(|p| p.next_kubelet_tick(self.config.crash_loop_after)).min()
    }

    /// Add a pod (ADDED) and return its index.
    pub(crate) fn add(&mut self, pod: Pod, now: Duration, step: &mut Step) -> usize {
        self.pods.push(pod);
        let i = self.pods.len() - 1;
        self.sync(i, now, WatchEventType::Added, step);
        i
    }

    /// Emit pod `i`'s row as `event`, unless it is gone or (not ADDED) only its clock changed.
    pub(crate) fn sync(&mut self, i: usize, now: Duration, event: WatchEventType, step: &mut Step) {
        let Some(p) = self.pods.get_mut(i).filter(|p| !p.gone) else { return };
        let row = Row::Pod(p.row(now, &self.config.node));
        if event != WatchEventType::Added && p.shown.as_ref().is_some_and(|s| s.same_content(&row)) {
            return;
        }
        p.shown = Some(row.clone());
        step.changes.push(Change { at: now, event, row });
    }

    /// Apply `f` to `id`'s live pod and show what changed.
    pub(crate) fn on_pod(&mut self, id: ReplicaId, now: Duration, step: &mut Step, f: impl FnOnce(&mut Pod)) {
        if let Some(i) = self.live(id) {
            f(&mut self.pods[i]);
            self.sync(i, now, WatchEventType::Modified, step);
        }
    }

    /// Pod `i` is gone: emit its last row as deleted.
    pub(crate) fn remove(&mut self, i: usize, now: Duration, step: &mut Step) {
        let Some(p) = self.pods.get_mut(i) else { return };
        p.gone = true;
        let row = Row::Pod(p.row(now, &self.config.node));
        p.shown = Some(row.clone());
        step.changes.push(Change { at: now, event: WatchEventType::Deleted, row });
    }

    /// Delete pod `i`: its restart timer is dropped; a live launcher is stopped (the pod shows
    /// Terminating until it exits), else the pod is gone at once (true).
    pub(crate) fn delete(&mut self, i: usize, now: Duration, step: &mut Step) -> bool {
        let Some(p) = self.pods.get_mut(i) else { return false };
        p.relaunch_at = None;
        if p.launcher_live() {
            p.deleting = true;
            let pod = p.id;
            self.sync(i, now, WatchEventType::Modified, step);
            step.actions.push(ClusterAction::StopPod { pod });
            return false;
        }
        self.remove(i, now, step);
        true
    }

    /// `id`'s launcher ended (`finished`: the job restarts nothing any more). A pod being deleted
    /// is gone: its index is returned if its controller wants it back; else the row shows the end.
    pub(crate) fn launcher_exited(
        &mut self,
        id: ReplicaId,
        status: ExitHow,
        now: Duration,
        finished: bool,
        step: &mut Step,
    ) -> Option<usize> {
        let i = self.live(id)?;
        let backoff = self.config.kubelet_backoff();
        match self.pods[i].launcher_exited(status, now, finished, &backoff) {
            LauncherEnd::Deleted { recreate } => {
                self.remove(i, now, step);
                recreate.then_some(i)
            }
            LauncherEnd::Ended => {
                self.sync(i, now, WatchEventType::Modified, step);
                None
            }
        }
    }

    /// The kubelet's timers at `now`: CrashLoopBackOff shown, crashed containers restarted
    /// (unless `finished`).
    pub(crate) fn tick(&mut self, now: Duration, finished: bool, step: &mut Step) {
        for i in 0..self.pods.len() {
            match self.pods[i].kubelet_tick(now, finished, self.config.crash_loop_after) {
                KubeletTick::Nothing => {}
                KubeletTick::Changed => self.sync(i, now, WatchEventType::Modified, step),
                KubeletTick::Relaunch => {
                    let pod = self.pods[i].id;
                    self.sync(i, now, WatchEventType::Modified, step);
                    step.actions.push(ClusterAction::StartLauncher { pod });
                }
            }
        }
    }
}

/// A job kind's controllers, under the dispatch they share ([`handle`]).
pub(crate) trait JobRules {
    /// The job's pods.
    fn kubelet(&mut self) -> &mut Kubelet;
    /// The job was submitted: until then every event but `Submitted` is ignored.
    fn submitted(&self) -> bool;
    /// `ClusterEvent::Submitted`.
    fn submit(&mut self, now: Duration, step: &mut Step);
    /// `ClusterEvent::Resumed`.
    fn resume(&mut self, now: Duration, step: &mut Step);
    /// `ClusterEvent::LauncherExited`.
    fn launcher_exited(&mut self, pod: ReplicaId, status: ExitHow, now: Duration, step: &mut Step);
    /// `ClusterEvent::PodDeleted`.
    fn pod_deleted(&mut self, pod: ReplicaId, now: Duration, step: &mut Step);
    /// `ClusterEvent::Tick`: the kubelet's timers ([`Kubelet::tick`]) and the job kind's own.
    fn tick(&mut self, now: Duration, step: &mut Step);
    /// After every event: the controllers reconcile and show their objects.
    fn reconcile(&mut self, now: Duration, step: &mut Step);
}

/// Apply one observation made at `now` (time since the event loop started) to `rules`.
pub(crate) fn handle(rules: &mut impl JobRules, now: Duration, event: ClusterEvent) -> Step {
    let mut step = Step::default();
    if !rules.submitted() && event != ClusterEvent::Submitted {
        return step;
    }
    match event {
        ClusterEvent::Submitted => rules.submit(now, &mut step),
        ClusterEvent::Resumed => rules.resume(now, &mut step),
        ClusterEvent::LauncherStarted { pod } => rules.kubelet().on_pod(pod, now, &mut step, Pod::launcher_started),
        ClusterEvent::ChildRunning { pod, restart_count } => {
            rules.kubelet().on_pod(pod, now, &mut step, |p| p.child_running(restart_count));
        }
        ClusterEvent::ChildExited { pod, exit, will_restart, restart_count } => {
            rules.kubelet().on_pod(pod, now, &mut step, |p| p.child_exited(exit, will_restart, restart_count, now));
        }
        ClusterEvent::LauncherExited { pod, status } => rules.launcher_exited(pod, status, now, &mut step),
        ClusterEvent::PodDeleted { pod } => rules.pod_deleted(pod, now, &mut step),
        ClusterEvent::Tick => rules.tick(now, &mut step),
    }
    rules.reconcile(now, &mut step);
    step
}

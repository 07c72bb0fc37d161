//! One pod as the kubelet runs it: its launcher process, its training container, its phase, and
//! the row `kubectl get pod` shows for it.

use std::time::Duration;

use crate::kubelet::replica::ReplicaId;
use crate::render::rows::{PodRow, PodStatus, Row};
use rankvisor_core::backoff::BackoffConfig;
use rankvisor_core::exit::ExitHow;
use rankvisor_core::policy::RestartPolicy;

/// The launcher process of a pod, as the controller knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LauncherProcess {
    /// Not asked for (not scheduled).
    NotStarted,
    /// `StartLauncher` sent; not yet reported started.
    Requested,
    /// Running.
    Alive,
    /// Ended with this status.
    Exited(ExitHow),
}

/// The training container's state, as the kubelet reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContainerState {
    /// Never started in this pod.
    Waiting,
    /// Running.
    Running,
    /// Ended.
    Terminated(ExitHow),
    /// Ended with this status, and waiting out the restart backoff.
    BackOff(ExitHow),
}

/// The pod's phase, which the operator and Volcano count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PodPhase {
    /// Not running yet (the dry run counts a launcher still before its child as Pending).
    Pending,
    /// The training process runs, or the kubelet is restarting the container.
    Running,
    /// The container ended with 0 and will not be restarted.
    Succeeded,
    /// The container ended non-zero and the pod's restartPolicy (Never: replica policies Never and
    /// ExitCode) does not restart it; or a Never pod was deleted.
    Failed,
}

/// What a launcher's end did to its pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LauncherEnd {
    /// The pod was being deleted: it is gone now (and its controller may create it anew).
    Deleted {
        /// Its controller wants it back.
        recreate: bool,
    },
    /// The container ended: restarted in place later, or the pod is Succeeded or Failed.
    Ended,
}

/// What a kubelet timer did to a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KubeletTick {
    /// Nothing due.
    Nothing,
    /// Its row changed (CrashLoopBackOff).
    Changed,
    /// Start its launcher again: the container restarts.
    Relaunch,
}

/// One pod's state.
#[derive(Debug, Clone)]
pub(crate) struct Pod {
    pub(crate) id: ReplicaId,
    pub(crate) name: String,
    pub(crate) restart_policy: RestartPolicy,
    pub(crate) created_at: Duration,
    pub(crate) scheduled: bool,
    pub(crate) launcher: LauncherProcess,
    pub(crate) container: ContainerState,
    pub(crate) phase: PodPhase,
    pub(crate) restarts: u32,
    /// Restarts by the kubelet (of the launcher, the container's PID 1) before the current
    /// launcher: the current launcher's own restart count adds to it.
    pub(crate) restart_base: u32,
    /// When the kubelet starts the crashed container (launcher) again.
    pub(crate) relaunch_at: Option<Duration>,
    /// The latest run's end: kubelet's `state.terminated`.
    pub(crate) current_termination: Option<Duration>,
    /// The run before: kubelet's `lastState.terminated`, which kubectl's "(2s ago)" reads.
    pub(crate) last_termination: Option<Duration>,
    pub(crate) restart_pending_since: Option<Duration>,
    pub(crate) latest_exit_failed: bool,
    pub(crate) deleting: bool,
    pub(crate) recreate: bool,
    pub(crate) gone: bool,
    pub(crate) shown: Option<Row>,
    /// A JobSet pod's restart attempt label (None for a PyTorchJob's pod).
    pub(crate) restart_attempt: Option<u32>,
    /// A HyperPod pod's agent state, as its `/status` says (None for the other kinds).
    pub(crate) agent: Option<rankvisor_core::status::AgentState>,
    /// The node the pod is placed on, when not the dry run's one (a HyperPod pod moved off a
    /// faulted node).
    pub(crate) node: Option<String>,
}

impl Pod {
    pub(crate) fn new(id: ReplicaId, name: String, restart_policy: RestartPolicy, now: Duration) -> Self {
        Self {
            id,
            name,
            restart_policy,
            created_at: now,
            scheduled: false,
            launcher: LauncherProcess::NotStarted,
            container: ContainerState::Waiting,
            phase: PodPhase::Pending,
            restarts: 0,
            restart_base: 0,
            relaunch_at: None,
            current_termination: None,
            last_termination: None,
            restart_pending_since: None,
            latest_exit_failed: false,
            deleting: false,
            recreate: false,
            gone: false,
            shown: None,
            restart_attempt: None,
            agent: None,
            node: None,
        }
    }

    /// Placed on the node, its launcher asked for.
    pub(crate) fn bind(&mut self) {
        self.scheduled = true;
        self.launcher = LauncherProcess::Requested;
    }

    /// `FilterActivePods`: neither Succeeded nor Failed, and not being deleted.
    pub(crate) fn is_active(&self) -> bool {
        !self.deleting && matches!(self.phase, PodPhase::Pending | PodPhase::Running)
    }

    /// Whether the kubelet restarts the container after it ended `how`, by the pod's own policy
    /// ([`pod_restart_policy`]: ExitCode becomes Never).
    pub(crate) fn kubelet_restarts(&self, how: ExitHow) -> bool {
        match pod_restart_policy(self.restart_policy) {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => !how.success(),
            RestartPolicy::Never | RestartPolicy::ExitCode => false,
        }
    }

    pub(crate) fn launcher_live(&self) -> bool {
        matches!(self.launcher, LauncherProcess::Requested | LauncherProcess::Alive)
    }

    pub(crate) fn status(&self) -> PodStatus {
        if self.deleting && self.launcher_live() {
            return PodStatus::Terminating;
        }
        match (self.container, self.launcher) {
            (ContainerState::Running, _) => PodStatus::Running,
            (ContainerState::Terminated(e), _) | (ContainerState::Waiting, LauncherProcess::Exited(e))
                if e.success() =>
            {
                PodStatus::Completed
            }
            (ContainerState::Terminated(_), _) | (ContainerState::Waiting, LauncherProcess::Exited(_)) => {
                PodStatus::Error
            }
            (ContainerState::BackOff(_), _) => PodStatus::CrashLoopBackOff,
            (ContainerState::Waiting, LauncherProcess::Alive) => PodStatus::ContainerCreating,
            (ContainerState::Waiting, LauncherProcess::NotStarted | LauncherProcess::Requested) => PodStatus::Pending,
        }
    }

    pub(crate) fn row(&self, now: Duration, node: &str) -> PodRow {
        let last_restart_ago = match (self.restarts, self.last_termination) {
            (0, _) | (_, None) => None,
            (_, Some(t)) => Some(now.saturating_sub(t)),
        };
        PodRow {
            name: self.name.clone(),
            replica: self.id,
            ready: self.container == ContainerState::Running && self.launcher_live(),
            status: self.status(),
            restarts: self.restarts,
            last_restart_ago,
            age: now.saturating_sub(self.created_at),
            node: self.scheduled.then(|| self.node.as_deref().unwrap_or(node).to_string()),
            restart_attempt: self.restart_attempt,
            agent: self.agent.map(agent_state_name),
        }
    }

    /// The kubelet: the launcher (the container's PID 1) reports started; a restarted container's
    /// previous run moves to lastState.
    pub(crate) fn launcher_started(&mut self) {
        self.launcher = LauncherProcess::Alive;
        if matches!(self.container, ContainerState::Terminated(_) | ContainerState::BackOff(_)) {
            self.shift_termination();
            self.container = ContainerState::Waiting;
        }
    }

    /// The kubelet: the training process runs (`restart_count`: the launcher's own restarts).
    pub(crate) fn child_running(&mut self, restart_count: u32) {
        self.shift_termination();
        self.container = ContainerState::Running;
        self.restarts = self.restart_base.saturating_add(restart_count);
        self.restart_pending_since = None;
        self.latest_exit_failed = false;
        if matches!(self.launcher, LauncherProcess::NotStarted | LauncherProcess::Requested) {
            self.launcher = LauncherProcess::Alive;
        }
        if !self.deleting && self.phase == PodPhase::Pending {
            self.phase = PodPhase::Running;
        }
    }

    /// The kubelet: the training process ended. A child that succeeded for good is the replica's
    /// verdict (the launcher exits 0 next, or lingers for the others' sake); a failure is decided
    /// by the launcher's exit, the container's end that the kubelet sees.
    pub(crate) fn child_exited(&mut self, exit: ExitHow, will_restart: bool, restart_count: u32, now: Duration) {
        self.container = ContainerState::Terminated(exit);
        self.current_termination = Some(now);
        self.restarts = self.restart_base.saturating_add(restart_count);
        self.latest_exit_failed = !exit.success();
        if !will_restart && exit.success() && !self.deleting {
            self.phase = PodPhase::Succeeded;
        }
        self.restart_pending_since = (will_restart && !self.deleting).then_some(now);
    }

    /// The kubelet: the launcher ended, and the container with it. A pod being deleted is gone;
    /// a container crash under OnFailure or Always is restarted in this pod (the first restart at
    /// once, then `backoff` doubling up to its max) unless `finished`; else the pod ends Succeeded
    /// or Failed with it.
    pub(crate) fn launcher_exited(
        &mut self,
        status: ExitHow,
        now: Duration,
        finished: bool,
        backoff: &BackoffConfig,
    ) -> LauncherEnd {
        self.launcher = LauncherProcess::Exited(status);
        self.restart_pending_since = None;
        if matches!(self.container, ContainerState::Running | ContainerState::Waiting) {
            self.container = ContainerState::Terminated(status);
            self.current_termination = Some(now);
        }
        if let ContainerState::BackOff(last) = self.container {
            self.container = ContainerState::Terminated(last);
        }
        if self.deleting {
            return LauncherEnd::Deleted { recreate: self.recreate && !finished };
        }
        if self.kubelet_restarts(status) && !finished {
            // The launcher's own backoff (the kubelet's, in one place), not a copy of it.
            let delay = backoff.delay(self.restarts);
            self.relaunch_at = Some(now.saturating_add(delay));
            if !delay.is_zero() {
                // Waiting out the back-off: kubectl shows CrashLoopBackOff.
                self.container = ContainerState::BackOff(status);
                self.shift_termination();
            }
            // A pod restarting its crashed container is Running (its restarts count).
            self.phase = PodPhase::Running;
        } else if !matches!(self.phase, PodPhase::Succeeded | PodPhase::Failed) {
            self.phase = if status.success() { PodPhase::Succeeded } else { PodPhase::Failed };
        }
        LauncherEnd::Ended
    }

    /// The kubelet's timers: the crashed container's restart is due (true: start its launcher),
    /// or CrashLoopBackOff shows from the second crash on (the first restart is immediate).
    pub(crate) fn kubelet_tick(&mut self, now: Duration, finished: bool, crash_loop_after: Duration) -> KubeletTick {
        if self.gone || self.deleting {
            return KubeletTick::Nothing;
        }
        if self.relaunch_at.is_some_and(|t| t <= now) && !finished {
            self.relaunch_at = None;
            self.restarts = self.restarts.saturating_add(1);
            self.restart_base = self.restarts;
            self.restart_pending_since = None;
            // The row keeps the last crash until the new container is there.
            self.launcher = LauncherProcess::Requested;
            return KubeletTick::Relaunch;
        }
        let due = self.restart_pending_since.is_some_and(|t| now.saturating_sub(t) >= crash_loop_after);
        if let (true, true, ContainerState::Terminated(last)) = (due, self.restarts > 0, self.container) {
            self.container = ContainerState::BackOff(last);
            self.shift_termination();
            return KubeletTick::Changed;
        }
        KubeletTick::Nothing
    }

    /// When the kubelet next acts on this pod: the restart of its crashed container, or the
    /// CrashLoopBackOff it shows.
    pub(crate) fn next_kubelet_tick(&self, crash_loop_after: Duration) -> Option<Duration> {
        if self.gone {
            return None;
        }
        let crash_loop =
            (!self.deleting && self.restarts > 0 && matches!(self.container, ContainerState::Terminated(_)))
                .then_some(self.restart_pending_since)
                .flatten()
                .map(|t| t.saturating_add(crash_loop_after));
        [crash_loop, self.relaunch_at].into_iter().flatten().min()
    }

    /// kubelet moves the ended run to `lastState` when the container waits or runs again.
    pub(crate) fn shift_termination(&mut self) {
        if let Some(t) = self.current_termination.take() {
            self.last_termination = Some(t);
        }
    }
}

/// The agent's state as its `/status` spells it upper-case (`READY`, `FAULTED`).
pub(crate) fn agent_state_name(state: rankvisor_core::status::AgentState) -> &'static str {
    use rankvisor_core::status::AgentState as A;
    match state {
        A::Init => "INIT",
        A::Ready => "READY",
        A::Running => "RUNNING",
        A::Completed => "COMPLETED",
        A::Faulted => "FAULTED",
        A::Stopping => "STOPPING",
        A::Shutdown => "SHUTDOWN",
    }
}

/// `SetRestartPolicy`: the restart policy of a replica's pod, which the kubelet follows: ExitCode
/// becomes Never (the operator, not the kubelet, restarts such a pod: it deletes and recreates it).
pub(crate) fn pod_restart_policy(policy: RestartPolicy) -> RestartPolicy {
    match policy {
        RestartPolicy::ExitCode => RestartPolicy::Never,
        p => p,
    }
}

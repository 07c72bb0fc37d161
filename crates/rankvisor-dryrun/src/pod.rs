//! One pod as the kubelet runs it: its launcher process, its training container, its phase, and
//! the row `kubectl get pod` shows for it.

use std::time::Duration;

use super::operator::pod_restart_policy;
use super::pytorchjob::ReplicaId;
use super::rows::{PodRow, PodStatus, Row};
use rankvisor_core::exit::ExitHow;
use rankvisor_core::policy::RestartPolicy;

/// The launcher process of a pod, as the controller knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LauncherProcess {
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
pub(super) enum ContainerState {
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
pub(super) enum PodPhase {
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

/// One pod's state.
#[derive(Debug, Clone)]
pub(super) struct Pod {
    pub(super) id: ReplicaId,
    pub(super) name: String,
    pub(super) restart_policy: RestartPolicy,
    pub(super) created_at: Duration,
    pub(super) scheduled: bool,
    pub(super) launcher: LauncherProcess,
    pub(super) container: ContainerState,
    pub(super) phase: PodPhase,
    pub(super) restarts: u32,
    /// Restarts by the kubelet (of the launcher, the container's PID 1) before the current
    /// launcher: the current launcher's own restart count adds to it.
    pub(super) restart_base: u32,
    /// When the kubelet starts the crashed container (launcher) again.
    pub(super) relaunch_at: Option<Duration>,
    /// The latest run's end: kubelet's `state.terminated`.
    pub(super) current_termination: Option<Duration>,
    /// The run before: kubelet's `lastState.terminated`, which kubectl's "(2s ago)" reads.
    pub(super) last_termination: Option<Duration>,
    pub(super) restart_pending_since: Option<Duration>,
    pub(super) latest_exit_failed: bool,
    pub(super) deleting: bool,
    pub(super) recreate: bool,
    pub(super) gone: bool,
    pub(super) shown: Option<Row>,
}

impl Pod {
    pub(super) fn new(id: ReplicaId, name: String, restart_policy: RestartPolicy, now: Duration) -> Self {
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
        }
    }

    /// `FilterActivePods`: neither Succeeded nor Failed, and not being deleted.
    pub(super) fn is_active(&self) -> bool {
        !self.deleting && matches!(self.phase, PodPhase::Pending | PodPhase::Running)
    }

    /// Whether the kubelet restarts the container after it ended `how`, by the pod's own policy
    /// ([`pod_restart_policy`]: ExitCode becomes Never).
    pub(super) fn kubelet_restarts(&self, how: ExitHow) -> bool {
        match pod_restart_policy(self.restart_policy) {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => !how.success(),
            RestartPolicy::Never | RestartPolicy::ExitCode => false,
        }
    }

    pub(super) fn launcher_live(&self) -> bool {
        matches!(self.launcher, LauncherProcess::Requested | LauncherProcess::Alive)
    }

    pub(super) fn status(&self) -> PodStatus {
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

    pub(super) fn row(&self, now: Duration, node: &str) -> PodRow {
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
            node: self.scheduled.then(|| node.to_string()),
        }
    }

    /// kubelet moves the ended run to `lastState` when the container waits or runs again.
    pub(super) fn shift_termination(&mut self) {
        if let Some(t) = self.current_termination.take() {
            self.last_termination = Some(t);
        }
    }
}

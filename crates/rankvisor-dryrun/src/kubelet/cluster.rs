//! What goes in and out of the emulated cluster: its configuration, the events the event loop
//! observes, and the actions it must carry out.

use std::time::Duration;

use crate::k8s::quantity::QueueCapability;
use crate::kubelet::launch::DRY_RUN_NODE;
use crate::kubelet::replica::ReplicaId;
use crate::render::rows::Change;
use rankvisor_core::exit::ExitHow;

/// How the emulated cluster is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// The node every pod is placed on (NODE column).
    pub(crate) node: String,
    /// `--queue-capability`; None admits any job.
    pub(crate) capability: Option<QueueCapability>,
    /// How long a failed pod waiting for its restart shows `Error` before `CrashLoopBackOff`.
    pub(crate) crash_loop_after: Duration,
    /// The kubelet's first delay before restarting a crashed container (the first restart is
    /// immediate), doubling up to `backoff_max`: the dry run's `--backoff-initial`.
    pub(crate) backoff_initial: Duration,
    /// The kubelet's longest restart delay: the dry run's `--backoff-max`.
    pub(crate) backoff_max: Duration,
}

impl ControllerConfig {
    /// The kubelet's restart delays: the launchers' own backoff (one doubling for both).
    pub(crate) fn kubelet_backoff(&self) -> rankvisor_core::backoff::BackoffConfig {
        rankvisor_core::backoff::BackoffConfig {
            initial: self.backoff_initial,
            max: self.backoff_max,
            ..rankvisor_core::backoff::BackoffConfig::default()
        }
    }
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            node: DRY_RUN_NODE.to_string(),
            capability: None,
            crash_loop_after: Duration::from_secs(1),
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(10),
        }
    }
}

/// What the event loop observed. `restart_count` is the launcher's own count for this pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterEvent {
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
        exit: ExitHow,
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
        status: ExitHow,
    },
    /// Fault injection: the pod is deleted (the operator recreates it, unless its replica's
    /// policy is Never: then the pod counts as failed).
    PodDeleted {
        /// The pod.
        pod: ReplicaId,
    },
    /// `spec.runPolicy.suspend` set to false on a suspended job.
    Resumed,
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

/// What the event loop must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterAction {
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
    /// Something the user should know that no row shows (suspension, a job managed elsewhere,
    /// the job's deletion after its TTL).
    Note {
        /// One line.
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
#[must_use = "the rows and actions are the cluster loop's to apply"]
pub struct Step {
    /// Watch lines, in order.
    pub(crate) changes: Vec<Change>,
    /// What the event loop must do, in order.
    pub actions: Vec<ClusterAction>,
}

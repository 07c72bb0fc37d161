//! What `kubectl get -w` shows: one row per job, PodGroup and pod, and the changes to them.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::kubelet::replica::ReplicaId;

/// The PyTorchJob's STATE column (its latest condition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum JobState {
    /// Accepted by the operator.
    Created,
    /// The master runs (in a job without a master, a worker).
    Running,
    /// The master completed (without a master: every worker; with elasticPolicy: any worker).
    Succeeded,
    /// A replica failed for good, or the backoff limit or the active deadline was reached.
    Failed,
    /// A failed pod is being recreated.
    Restarting,
    /// `runPolicy.suspend`: no pods.
    Suspended,
}

impl JobState {
    /// The column's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "Created",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Restarting => "Restarting",
            Self::Suspended => "Suspended",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The Volcano PodGroup's STATUS column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum PodGroupPhase {
    /// Admitted to the queue; waiting until the whole gang can be placed.
    Inqueue,
    /// The whole gang (minMember pods) is placed.
    Running,
}

impl PodGroupPhase {
    /// The column's text.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Inqueue => "Inqueue",
            Self::Running => "Running",
        }
    }
}

/// A pod's STATUS column, as kubectl derives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PodStatus {
    /// Not placed on a node, or placed and waiting for its launcher.
    Pending,
    /// The launcher runs; the training process has not started yet (rendezvous).
    ContainerCreating,
    /// The training process runs.
    Running,
    /// The training process exited non-zero.
    Error,
    /// The training process exited 0.
    Completed,
    /// The training process failed and waits for its restart backoff.
    CrashLoopBackOff,
    /// Being deleted; the launcher is stopping.
    Terminating,
}

impl PodStatus {
    /// The column's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::ContainerCreating => "ContainerCreating",
            Self::Running => "Running",
            Self::Error => "Error",
            Self::Completed => "Completed",
            Self::CrashLoopBackOff => "CrashLoopBackOff",
            Self::Terminating => "Terminating",
        }
    }
}

impl fmt::Display for PodStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `kubectl get pytorchjob`: NAME STATE AGE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct JobRow {
    /// The job's name.
    pub name: String,
    /// Blank until the operator has seen the job.
    pub state: Option<JobState>,
    /// Time since submission.
    pub age: Duration,
}

/// `kubectl get podgroup`: NAME STATUS MINMEMBER RUNNINGS AGE QUEUE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PodGroupRow {
    /// Named like the job.
    pub name: String,
    /// Blank until Volcano has seen the PodGroup.
    pub status: Option<PodGroupPhase>,
    /// The sum of all replicas.
    pub min_member: u32,
    /// Pods in phase Running (shown blank when 0, as kubectl shows an omitted field).
    pub runnings: u32,
    /// Time since creation.
    pub age: Duration,
    /// The Volcano queue.
    pub queue: String,
}

/// `kubectl get pod`: NAME READY STATUS RESTARTS AGE NODE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PodRow {
    /// `<job>-master-0`, `<job>-worker-<i>`.
    pub name: String,
    /// Which replica the pod is.
    pub replica: ReplicaId,
    /// READY 1/1 when the training process runs, else 0/1.
    pub ready: bool,
    /// STATUS.
    pub status: PodStatus,
    /// RESTARTS.
    pub restarts: u32,
    /// Time since the previous run ended, shown as `1 (2s ago)`.
    pub last_restart_ago: Option<Duration>,
    /// Time since this pod was created (a recreated pod starts again at 0s).
    pub age: Duration,
    /// The node, once scheduled.
    pub node: Option<String>,
    /// A JobSet pod's `jobset.sigs.k8s.io/restart-attempt` (None for a PyTorchJob's).
    pub restart_attempt: Option<u32>,
    /// A HyperPod pod's agent state (`READY`, `RUNNING`, `FAULTED`, ...).
    pub agent: Option<&'static str>,
}

/// `kubectl get trainjob`: NAME STATE AGE (STATE: the last condition's type).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TrainJobRow {
    /// The TrainJob's name.
    pub name: String,
    /// `Suspended`, `Complete`, `Failed`, or blank (no condition yet).
    pub state: Option<&'static str>,
    /// That condition's reason (`AllJobsCompleted`, `FailedJobs`, `DeadlineExceeded`, ...).
    pub reason: Option<String>,
    /// Time since submission.
    pub age: Duration,
}

/// `kubectl get jobset`: NAME TERMINALSTATE RESTARTS COMPLETED SUSPENDED AGE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct JobSetRow {
    /// Named like the TrainJob.
    pub name: String,
    /// `Completed` or `Failed` once finished.
    pub terminal_state: Option<&'static str>,
    /// `status.restarts`.
    pub restarts: u32,
    /// The `Completed` condition's status, once set.
    pub completed: bool,
    /// `spec.suspend` (blank when the TrainJob does not set it).
    pub suspended: Option<bool>,
    /// Time since creation.
    pub age: Duration,
}

/// `kubectl get job`: NAME STATUS COMPLETIONS DURATION AGE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct BatchJobRow {
    /// `<trainjob>-node-0`.
    pub name: String,
    /// `Running`, `Complete`, `Failed` or `Suspended`.
    pub status: &'static str,
    /// Succeeded indexes.
    pub succeeded: u32,
    /// `completions`.
    pub completions: u32,
    /// Time from start to completion, or so far.
    pub duration: Option<Duration>,
    /// Time since creation.
    pub age: Duration,
}

/// A HyperPodPyTorchJob's row: its status as the CRD has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct HyperPodJobRow {
    /// Its name.
    pub name: String,
    /// The newest condition's type (`Created`, `Running`, `Restarting`, `Completed`, `Failed`, ...).
    pub state: Option<&'static str>,
    /// The newest condition's reason.
    pub reason: Option<String>,
    /// `status.restartCount`.
    pub restart_count: u32,
    /// `status.restartStatus`: (`currentEvalPeriod` as seconds since the dry run's start,
    /// `fullJobRestartCount`, `restartCount`), once a fault happened.
    pub restart_status: Option<(u64, u32, u32)>,
    /// `status.latestFaultyPodInstanceList.restartType`: `PLR` or `JLR`.
    pub restart_type: Option<&'static str>,
    /// `latestFaultyPodInstanceList.faultyPodList`.
    pub faulty_pods: Vec<String>,
    /// `latestFaultyPodInstanceList.faultyRankList`.
    pub faulty_ranks: Vec<String>,
    /// `status.masterAddr` and `status.masterPort`, once the job started.
    pub master: Option<(String, u16)>,
    /// Since its creation.
    pub age: Duration,
}

/// One object's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) enum Row {
    /// The PyTorchJob.
    Job(JobRow),
    /// The Volcano PodGroup.
    PodGroup(PodGroupRow),
    /// A pod.
    Pod(PodRow),
    /// A Trainer v2 TrainJob.
    TrainJob(TrainJobRow),
    /// The TrainJob's JobSet.
    JobSet(JobSetRow),
    /// One of the JobSet's Jobs.
    BatchJob(BatchJobRow),
    /// A HyperPodPyTorchJob.
    HyperPodJob(HyperPodJobRow),
}

impl Row {
    /// The row's lane on the timeline: its key (a TrainJob shares the job's lane, its JobSet the
    /// PodGroup's), its label, its state and its restarts; None for a batch Job.
    pub(crate) fn lane(&self) -> Option<(String, String, Option<&'static str>, Option<u32>)> {
        Some(match self {
            Row::Job(j) => ("job".to_string(), format!("PyTorchJob {}", j.name), j.state.map(|s| s.as_str()), None),
            Row::PodGroup(g) => {
                ("podgroup".to_string(), format!("PodGroup {}", g.name), g.status.map(|s| s.as_str()), None)
            }
            Row::Pod(p) => (format!("pod/{}", p.name), p.name.clone(), Some(p.status.as_str()), Some(p.restarts)),
            Row::TrainJob(t) => ("job".to_string(), format!("TrainJob {}", t.name), t.state, None),
            Row::JobSet(j) => {
                ("podgroup".to_string(), format!("JobSet {}", j.name), j.terminal_state.or(Some("Active")), None)
            }
            Row::BatchJob(_) => return None,
            Row::HyperPodJob(h) => ("job".to_string(), format!("HyperPodPyTorchJob {}", h.name), h.state, None),
        })
    }

    /// The row without its clock-driven columns, to tell a real change from the passing of time.
    pub(crate) fn same_content(&self, other: &Row) -> bool {
        match (self, other) {
            (Row::Job(a), Row::Job(b)) => a.name == b.name && a.state == b.state,
            (Row::PodGroup(a), Row::PodGroup(b)) => {
                (&a.name, a.status, a.min_member, a.runnings) == (&b.name, b.status, b.min_member, b.runnings)
            }
            (Row::Pod(a), Row::Pod(b)) => {
                (&a.name, a.ready, a.status, a.restarts, &a.node, a.agent)
                    == (&b.name, b.ready, b.status, b.restarts, &b.node, b.agent)
            }
            (Row::TrainJob(a), Row::TrainJob(b)) => (&a.name, a.state, &a.reason) == (&b.name, b.state, &b.reason),
            (Row::JobSet(a), Row::JobSet(b)) => {
                (&a.name, a.terminal_state, a.restarts, a.completed, a.suspended)
                    == (&b.name, b.terminal_state, b.restarts, b.completed, b.suspended)
            }
            (Row::BatchJob(a), Row::BatchJob(b)) => {
                (&a.name, a.status, a.succeeded) == (&b.name, b.status, b.succeeded)
            }
            (Row::HyperPodJob(a), Row::HyperPodJob(b)) => {
                (&a.name, a.state, &a.reason, a.restart_count, a.restart_type)
                    == (&b.name, b.state, &b.reason, b.restart_count, b.restart_type)
            }
            _ => false,
        }
    }
}

/// What happened to the object, as `kubectl get -w --output-watch-events` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum WatchEventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Deleted (the row is its last state).
    Deleted,
}

impl WatchEventType {
    /// kubectl's spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One line of the watch: an object's row at the time of a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Change {
    /// When, on the event loop's clock.
    pub at: Duration,
    /// Added, Modified or Deleted.
    pub event: WatchEventType,
    /// The object's row.
    pub row: Row,
}

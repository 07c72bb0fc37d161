//! The training operator's reconcile rules (release-1.9), as pure functions of the job and its
//! pods. Each names the Go function it mirrors; the controller applies what they return.

use std::time::Duration;

use super::PyTorchJob;
use crate::kubelet::pod::{Pod, PodPhase};
use crate::kubelet::replica::ReplicaType;
use rankvisor_core::policy::{is_retryable_exit_code, RestartPolicy};

/// A job condition the operator sets (`JobConditionType`); the STATE column shows the latest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Condition {
    /// `JobRunning`.
    Running,
    /// `JobRestarting`, with its message.
    Restarting(String),
    /// `JobSucceeded`, with its message.
    Succeeded(String),
    /// `JobFailed`, with its message.
    Failed(String),
}

/// The replica types in the order the dry run reconciles them (Go ranges over a map).
const TYPES: [ReplicaType; 2] = [ReplicaType::Master, ReplicaType::Worker];

/// The pods the operator lists for the job: every pod not yet removed (a pod being deleted is
/// still listed, in its last phase).
fn listed(pods: &[Pod]) -> impl Iterator<Item = &Pod> {
    pods.iter().filter(|p| !p.gone)
}

/// `core.PastBackoffLimit`: the restart counts of the containers of the pods in phase Running,
/// summed over the replica types whose policy is OnFailure, Always or ExitCode, reach
/// `backoffLimit` (`> 0` when the limit is 0). No backoffLimit: never.
pub(super) fn past_backoff_limit(job: &PyTorchJob, pods: &[Pod]) -> bool {
    let Some(limit) = job.run_policy.backoff_limit else {
        return false;
    };
    let restarts: i64 = listed(pods)
        .filter(|p| p.restart_policy != RestartPolicy::Never && p.phase == PodPhase::Running)
        .map(|p| i64::from(p.restarts))
        .sum();
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= i64::from(limit)
    }
}

/// `ReconcileJobs`' `exceedsBackoffLimit`: a new failed pod while not every replica is active,
/// and `previousRetry + 1 > backoffLimit` (the work queue's retries are 0 here: only a limit
/// of 0 or less can be exceeded this way).
pub(super) fn exceeds_backoff_limit(job: &PyTorchJob, pods: &[Pod], failed_before: usize) -> bool {
    let Some(limit) = job.run_policy.backoff_limit else {
        return false;
    };
    let failed = failed_pods(pods);
    let active = listed(pods).filter(|p| p.is_active()).count();
    failed > failed_before && active != job.total_replicas() as usize && 1 > limit
}

/// The pods in phase Failed (`FilterPodCount(pods, PodFailed)`).
pub(super) fn failed_pods(pods: &[Pod]) -> usize {
    listed(pods).filter(|p| p.phase == PodPhase::Failed).count()
}

/// `core.PastActiveDeadline`: `activeDeadlineSeconds` have passed since the job's start time.
pub(super) fn past_active_deadline(job: &PyTorchJob, started_at: Option<Duration>, now: Duration) -> bool {
    match (job.run_policy.active_deadline_seconds, started_at) {
        (Some(secs), Some(start)) => now.saturating_sub(start) >= deadline(secs),
        _ => false,
    }
}

/// `activeDeadlineSeconds` as a duration (a negative one is already past).
pub(super) fn deadline(secs: i64) -> Duration {
    Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

/// `ReconcilePods` for a pod in phase Failed: true to delete and recreate it (ExitCode with a
/// retryable code, OnFailure, Always), false to fail the job (ExitCode with a permanent code);
/// None under Never (`UpdateJobStatus` decides).
pub(super) fn restart_failed_pod(policy: RestartPolicy, exit_code: i32) -> Option<bool> {
    match policy {
        RestartPolicy::ExitCode => Some(is_retryable_exit_code(exit_code)),
        RestartPolicy::OnFailure | RestartPolicy::Always => Some(true),
        RestartPolicy::Never => None,
    }
}

/// `ReconcilePods`' conditions for a failed pod it restarts, or that fails the job.
pub(super) fn failed_pod_condition(job: &PyTorchJob, rtype: ReplicaType, restart: bool) -> Condition {
    let name = &job.name;
    if restart {
        Condition::Restarting(format!("job {name} is restarting because {rtype} replica(s) failed."))
    } else {
        Condition::Failed(format!("job {name:?} is failing because {:?} replica(s) failed.", rtype.as_str()))
    }
}

/// `PyTorchJobReconciler.UpdateJobStatus`: the conditions it sets, in order, from the replica
/// statuses (active = pods in phase Running, succeeded, failed).
pub(super) fn update_job_status(job: &PyTorchJob, pods: &[Pod]) -> Vec<Condition> {
    let name = &job.name;
    let ns = &job.namespace;
    let mut conditions = Vec::new();
    let has_master = job.master.is_some();
    for rtype in TYPES {
        let Some(spec) = job.spec(rtype) else { continue };
        let count = |phase: PodPhase| listed(pods).filter(|p| p.id.rtype == rtype && p.phase == phase).count();
        let (running, succeeded, failed) =
            (count(PodPhase::Running), count(PodPhase::Succeeded), count(PodPhase::Failed));
        let replicas = spec.replicas as usize;
        let expected = replicas.saturating_sub(succeeded);
        if has_master {
            if rtype == ReplicaType::Master {
                if running > 0 {
                    conditions.push(Condition::Running);
                }
                if expected == 0 {
                    conditions.push(Condition::Succeeded(format!("PyTorchJob {name} is successfully completed.")));
                    return conditions;
                }
            }
        } else if rtype == ReplicaType::Worker {
            // Every worker succeeded, or, with an elasticPolicy, any one did.
            if expected == 0 || (job.elastic.is_some() && succeeded > 0) {
                conditions.push(Condition::Succeeded(format!("PyTorchJob {ns}/{name} successfully completed.")));
            } else if running > 0 {
                conditions.push(Condition::Running);
            }
        }
        if failed > 0 && replicas > succeeded + running {
            if spec.restart_policy == RestartPolicy::Never {
                conditions.push(Condition::Failed(format!(
                    "PyTorchJob {name} is failed because {failed} {rtype} replica(s) failed."
                )));
            } else {
                conditions.push(Condition::Restarting(format!(
                    "PyTorchJob {name} is restarting because {failed} {rtype} replica(s) failed."
                )));
            }
        }
    }
    conditions
}

/// The backoff-limit failure's message (`ReconcileJobs`).
pub(super) fn backoff_limit_message(job: &PyTorchJob) -> String {
    format!("Job {} has failed because it has reached the specified backoff limit", job.name)
}

/// The active-deadline failure's message (`ReconcileJobs`).
pub(super) fn deadline_message(job: &PyTorchJob) -> String {
    format!("Job {} has failed because it was active longer than specified deadline", job.name)
}

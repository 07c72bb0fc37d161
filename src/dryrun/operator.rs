//! The training operator's reconcile rules (release-1.9), as pure functions of the job and its pods.

use super::controller::Outcome;
use super::pod::{ContainerState, Pod, PodPhase};
use super::pytorchjob::{PyTorchJob, ReplicaType};
use crate::supervise::RestartPolicy;

/// Whether the leader (master, else a worker) runs, and the outcome if the job is decided.
pub(super) fn decide(job: &PyTorchJob, pods: &[Pod]) -> (bool, Option<(Outcome, String)>) {
    let name = &job.name;
    let has_master = job.master.is_some();
    let of_type = |t: ReplicaType| pods.iter().filter(move |p| !p.gone && !p.deleting && p.id.rtype == t);
    let leader = if has_master { ReplicaType::Master } else { ReplicaType::Worker };
    let leader_runs = of_type(leader).any(|p| p.container == ContainerState::Running);

    let succeeded = if has_master {
        of_type(ReplicaType::Master).any(|p| p.phase == PodPhase::Succeeded)
    } else {
        let workers: Vec<&Pod> = of_type(ReplicaType::Worker).collect();
        !workers.is_empty() && workers.iter().all(|p| p.phase == PodPhase::Succeeded)
    };
    if succeeded {
        let reason = format!("PyTorchJob {name} is successfully completed.");
        return (leader_runs, Some((Outcome::Succeeded, reason)));
    }

    for rtype in [ReplicaType::Master, ReplicaType::Worker] {
        let failed = of_type(rtype).filter(|p| p.phase == PodPhase::Failed).count();
        if failed > 0 {
            let reason = format!("PyTorchJob {name} is failed because {failed} {rtype} replica(s) failed.");
            return (leader_runs, Some((Outcome::Failed, reason)));
        }
    }

    let master_lives = of_type(ReplicaType::Master).any(|p| matches!(p.phase, PodPhase::Pending | PodPhase::Running));
    let workers: Vec<&Pod> = of_type(ReplicaType::Worker).collect();
    let worker_count = job.worker.as_ref().map_or(0, |w| w.replicas) as usize;
    let all_workers_failed = worker_count > 0
        && workers.len() == worker_count
        && workers.iter().all(|p| {
            p.latest_exit_failed
                && matches!(p.container, ContainerState::Terminated(_) | ContainerState::BackOff(_))
                && p.phase != PodPhase::Succeeded
        });
    if has_master && master_lives && all_workers_failed {
        let reason = format!(
            "PyTorchJob {name} is failed because all {worker_count} Worker replica(s) failed while the Master was running."
        );
        return (leader_runs, Some((Outcome::Failed, reason)));
    }

    if let Some(limit) = job.backoff_limit {
        let restarts: u64 = pods
            .iter()
            .filter(|p| !p.gone && p.phase == PodPhase::Running && p.restart_policy != RestartPolicy::Never)
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

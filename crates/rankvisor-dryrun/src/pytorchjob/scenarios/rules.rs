//! The training operator's rules, one test each.

use std::time::Duration;

use super::*;
use crate::k8s::quantity::QueueCapability;
use crate::kubelet::cluster::{ClusterAction, ClusterEvent, ControllerConfig, Outcome};
use crate::kubelet::replica::ReplicaId;
use crate::render::rows::{JobState, PodStatus, Row};
use rankvisor_core::exit::ExitHow;

#[test]
fn backoff_limit_zero_fails_on_the_first_restart_past_backoff_limit() {
    let manifest = NORMAL.replace("backoffLimit: 3", "backoffLimit: 0");
    let mut r = Run::new(&manifest);
    r.start_all();
    r.exit(2.0, W0, 1, true, 0);
    assert_eq!(r.c.state(), Some(JobState::Running));
    r.run(2.5, W0, 1);
    assert_eq!(r.c.state(), Some(JobState::Failed));
}

#[test]
fn no_backoff_limit_means_no_job_wide_limit_past_backoff_limit() {
    let manifest = NORMAL.replace("  runPolicy:\n    backoffLimit: 3\n", "");
    let mut r = Run::new(&manifest);
    r.start_all();
    for k in 0..20 {
        r.exit(2.0 + f64::from(k), MASTER, 1, true, k);
        r.run(2.5 + f64::from(k), MASTER, k + 1);
    }
    assert_eq!(r.c.state(), Some(JobState::Running));
    assert_eq!(r.pod(MASTER).unwrap().restarts, 20);
}

/// `NORMAL` with the Worker's restartPolicy replaced.
fn worker_policy(manifest: &str, policy: &str) -> String {
    manifest.replace(
        "    Worker:\n      replicas: 3\n      restartPolicy: OnFailure",
        &format!("    Worker:\n      replicas: 3\n      restartPolicy: {policy}"),
    )
}

#[test]
fn a_launcher_giving_up_under_on_failure_is_a_container_crash_the_kubelet_restarts() {
    // SetRestartPolicy: an OnFailure replica's pod is OnFailure; the launcher is its container.
    let mut r =
        Run::with(NORMAL, ControllerConfig { backoff_initial: Duration::from_secs(2), ..ControllerConfig::default() });
    r.start_all();
    r.exit(2.0, MASTER, 2, false, 0);
    let actions = r.at(2.0, ClusterEvent::LauncherExited { pod: MASTER, status: ExitHow::Exited(2) });
    assert!(actions.is_empty(), "{actions:?}");
    assert_eq!(r.c.state(), Some(JobState::Running), "the pod is not Failed");
    assert_eq!(r.pod(MASTER).unwrap().status, PodStatus::Error);
    // The first restart is immediate: the next tick is now.
    assert_eq!(r.c.next_tick(), Some(Duration::from_secs(2)));
    let actions = r.at(2.0, ClusterEvent::Tick);
    assert_eq!(actions, vec![ClusterAction::StartLauncher { pod: MASTER }]);
    r.at(2.1, ClusterEvent::LauncherStarted { pod: MASTER });
    r.run(2.2, MASTER, 0);
    assert_eq!(r.pod(MASTER).unwrap().restarts, 1, "the kubelet's restart counts");
    // 138 (node unhealthy) and 127 (command not found) the same way; the second restart waits.
    r.at(3.0, ClusterEvent::LauncherExited { pod: MASTER, status: ExitHow::Exited(138) });
    assert_eq!(r.c.next_tick(), Some(Duration::from_secs(5)), "backoff_initial after the first restart");
    assert_eq!(r.pod(MASTER).unwrap().status, PodStatus::CrashLoopBackOff);
    assert_eq!(r.at(5.0, ClusterEvent::Tick), vec![ClusterAction::StartLauncher { pod: MASTER }]);
    r.run(5.5, MASTER, 0);
    assert_eq!(r.pod(MASTER).unwrap().restarts, 2);
    assert_eq!(r.c.state(), Some(JobState::Running));

    // Same before the child ever ran (rendezvous, node health).
    let mut r = Run::new(NORMAL);
    r.at(0.0, ClusterEvent::Submitted);
    r.at(0.1, ClusterEvent::LauncherStarted { pod: MASTER });
    r.at(0.5, ClusterEvent::LauncherExited { pod: MASTER, status: ExitHow::Exited(127) });
    assert_eq!(r.c.state(), Some(JobState::Running), "a pod restarting its crashed container is Running");
    assert_eq!(r.at(0.5, ClusterEvent::Tick), vec![ClusterAction::StartLauncher { pod: MASTER }]);
    // Its restarts count: backoffLimit 3 is reached when the kubelet restarts it the third time.
    r.at(0.6, ClusterEvent::LauncherStarted { pod: MASTER });
    r.at(0.7, ClusterEvent::LauncherExited { pod: MASTER, status: ExitHow::Exited(127) });
    r.at(1.7, ClusterEvent::Tick);
    assert_eq!(r.pod(MASTER).unwrap().restarts, 2);
    r.at(1.8, ClusterEvent::LauncherStarted { pod: MASTER });
    r.at(1.9, ClusterEvent::LauncherExited { pod: MASTER, status: ExitHow::Exited(127) });
    assert_eq!(r.c.state(), Some(JobState::Running));
    r.at(3.9, ClusterEvent::Tick);
    assert_eq!(r.c.state(), Some(JobState::Failed), "PastBackoffLimit: {:?}", r.pod(MASTER));
}

#[test]
fn a_never_pod_failing_fails_the_job_update_job_status() {
    let mut r = Run::new(&worker_policy(WORKER_FAILS, "Never"));
    r.start_all();
    r.exit(2.0, W0, 1, false, 0);
    assert!(r.finishes().is_empty(), "the container ends with its launcher");
    let actions = r.at(2.0, ClusterEvent::LauncherExited { pod: W0, status: ExitHow::Exited(1) });
    assert_eq!(
        actions,
        vec![ClusterAction::Finish {
            outcome: Outcome::Failed,
            reason: "PyTorchJob pytest is failed because 1 Worker replica(s) failed.".into()
        }],
        "cleanPodPolicy None (the default): nothing is deleted"
    );
    assert_eq!(r.c.state(), Some(JobState::Failed));
    assert_eq!(r.pod(MASTER).unwrap().status, PodStatus::Running, "the other pods run on");
    assert!(!r.podgroup_exists());
    assert!(!r.c.is_settled(), "the dry run waits for the pods still running");
}

#[test]
fn a_deleted_never_pod_counts_as_failed() {
    let mut r = Run::new(&worker_policy(NORMAL, "Never"));
    r.start_all();
    let actions = r.at(1.5, ClusterEvent::PodDeleted { pod: W0 });
    assert_eq!(actions[0], ClusterAction::StopPod { pod: W0 });
    assert_eq!(
        r.finishes(),
        vec![(Outcome::Failed, "PyTorchJob pytest is failed because 1 Worker replica(s) failed.".into())]
    );
    r.at(1.6, ClusterEvent::LauncherExited { pod: W0, status: ExitHow::Signaled(rankvisor_core::signo::Signo::KILL) });
    assert!(!r.actions.iter().skip(4).any(|a| matches!(a, ClusterAction::StartLauncher { .. })), "not recreated");
}

#[test]
fn clean_pod_policy_running_and_all_delete_pods_delete_pods_and_services() {
    for (policy, deleted) in
        [("Running", vec![MASTER, ReplicaId::worker(1), ReplicaId::worker(2)]), ("All", all_pods())]
    {
        let manifest = worker_policy(NORMAL, "Never")
            .replace("  runPolicy:\n", &format!("  runPolicy:\n    cleanPodPolicy: {policy}\n"));
        let mut r = Run::new(&manifest);
        r.start_all();
        r.exit(2.0, W0, 1, false, 0);
        r.at(2.0, ClusterEvent::LauncherExited { pod: W0, status: ExitHow::Exited(1) });
        assert_eq!(r.c.state(), Some(JobState::Failed), "{policy}");
        let gone: Vec<ReplicaId> = all_pods()
            .into_iter()
            .filter(|p| r.pod(*p).is_none_or(|row| row.status == PodStatus::Terminating))
            .collect();
        assert_eq!(gone, deleted, "{policy}");
    }
}

#[test]
fn exit_code_policy_recreates_on_a_retryable_code_and_fails_on_a_permanent_one_reconcile_pods() {
    let mut r = Run::new(&worker_policy(NORMAL, "ExitCode"));
    r.start_all();
    // A node turned unhealthy: the launcher stops its child and exits 138 (retryable).
    r.exit(2.0, W0, 143, false, 0);
    let actions = r.at(2.1, ClusterEvent::LauncherExited { pod: W0, status: ExitHow::Exited(138) });
    assert_eq!(actions, vec![ClusterAction::StartLauncher { pod: W0 }]);
    assert_eq!(r.c.state(), Some(JobState::Restarting), "the operator deletes and recreates the pod");
    let row = r.pod(W0).unwrap();
    assert_eq!((row.status, row.restarts), (PodStatus::Pending, 0));
    r.at(2.2, ClusterEvent::LauncherStarted { pod: W0 });
    r.run(2.5, W0, 0);
    assert_eq!(r.c.state(), Some(JobState::Running), "the next reconcile sees the master running");
    // A permanent code (< 128) fails the job.
    r.exit(3.0, W0, 1, false, 0);
    r.at(3.0, ClusterEvent::LauncherExited { pod: W0, status: ExitHow::Exited(1) });
    assert_eq!(
        r.finishes(),
        vec![(Outcome::Failed, "job \"pytest\" is failing because \"Worker\" replica(s) failed.".into())]
    );
}

#[test]
fn a_negative_backoff_limit_fails_at_the_first_reconcile_before_any_pod_past_backoff_limit() {
    let mut r = Run::new(&NORMAL.replace("backoffLimit: 3", "backoffLimit: -1"));
    let actions = r.at(0.0, ClusterEvent::Submitted);
    assert_eq!(r.c.state(), Some(JobState::Failed), "0 restarts >= -1");
    assert_eq!(r.job_history(), vec![None, Some(JobState::Created), Some(JobState::Failed)]);
    assert!(!actions.iter().any(|a| matches!(a, ClusterAction::StartLauncher { .. })), "{actions:?}");
    assert!(r.c.rows(r.now).iter().all(|row| matches!(row, Row::Job(_))), "no PodGroup, no pods");
    assert!(r.podgroup_history().is_empty(), "the PodGroup is never created");
    assert_eq!(
        r.finishes(),
        vec![(Outcome::Failed, "Job pytest has failed because it has reached the specified backoff limit".into())]
    );
    assert!(r.c.is_settled());
}

#[test]
fn a_gang_larger_than_the_job_never_forms_gang_job_valid() {
    let manifest = NORMAL.replace("  runPolicy:\n", "  runPolicy:\n    schedulingPolicy:\n      minAvailable: 10\n");
    let mut r = Run::new(&manifest);
    let actions = r.at(0.0, ClusterEvent::Submitted);
    let [ClusterAction::Unschedulable { message }] = actions.as_slice() else { panic!("{actions:?}") };
    assert!(message.contains("Not enough valid tasks for gang-scheduling, valid: 4, min: 10"), "{message}");
    assert_eq!(r.c.state(), Some(JobState::Created));
    let last = r.podgroup_history().last().cloned();
    assert_eq!(last, Some((WatchEventType::Modified, Some(PodGroupPhase::Inqueue), 10, 0)));
    for pod in all_pods() {
        assert_eq!(r.pod(pod).map(|p| (p.status, p.node)), Some((PodStatus::Pending, None)), "{pod}");
    }
    assert_eq!(r.c.next_tick(), None, "nothing changes until the dry run's --timeout");
}

#[test]
fn active_deadline_fails_the_job_and_deletes_every_pod_past_active_deadline() {
    let mut r = Run::new(&NORMAL.replace("  runPolicy:\n", "  runPolicy:\n    activeDeadlineSeconds: 5\n"));
    r.start_all();
    assert_eq!(r.c.next_tick(), Some(Duration::from_secs(5)));
    r.at(4.9, ClusterEvent::Tick);
    assert_eq!(r.c.state(), Some(JobState::Running));
    let actions = r.at(5.0, ClusterEvent::Tick);
    assert!(actions.contains(&ClusterAction::StopAll), "{actions:?}");
    assert_eq!(
        r.finishes(),
        vec![(Outcome::Failed, "Job pytest has failed because it was active longer than specified deadline".into())]
    );
}

#[test]
fn ttl_deletes_the_finished_job_cleanup_job() {
    let mut r = Run::new(&NORMAL.replace("  runPolicy:\n", "  runPolicy:\n    ttlSecondsAfterFinished: 10\n"));
    r.start_all();
    for pod in all_pods() {
        r.complete(3.0, pod, 0);
    }
    assert_eq!(r.c.state(), Some(JobState::Succeeded));
    assert!(!r.c.is_settled(), "the job still exists");
    assert_eq!(r.c.next_tick(), Some(Duration::from_secs(13)));
    r.at(13.0, ClusterEvent::Tick);
    assert!(r.c.rows(r.now).is_empty(), "the job and its pods are gone");
    assert!(r.c.is_settled());
}

#[test]
fn a_suspended_job_has_no_pods_until_resumed_reconcile_jobs() {
    let mut r = Run::new(&NORMAL.replace("  runPolicy:\n", "  runPolicy:\n    suspend: true\n"));
    let actions = r.at(0.0, ClusterEvent::Submitted);
    assert!(matches!(actions.as_slice(), [ClusterAction::Note { .. }]), "{actions:?}");
    assert_eq!(r.job_history(), vec![None, Some(JobState::Created), Some(JobState::Suspended)]);
    assert!(r.c.rows(r.now).iter().all(|row| matches!(row, Row::Job(_))), "no PodGroup, no pods");
    let actions = r.at(5.0, ClusterEvent::Resumed);
    assert_eq!(actions.iter().filter(|a| matches!(a, ClusterAction::StartLauncher { .. })).count(), 4);
    assert_eq!(r.c.state(), Some(JobState::Suspended), "the False Suspended condition is still the latest");
    for pod in all_pods() {
        r.at(5.1, ClusterEvent::LauncherStarted { pod });
        r.run(5.5, pod, 0);
    }
    assert_eq!(r.c.state(), Some(JobState::Running));
}

#[test]
fn a_job_managed_elsewhere_is_left_alone_managed_by_external_controller() {
    let mut r = Run::new(&NORMAL.replace("  runPolicy:\n", "  runPolicy:\n    managedBy: kueue.x-k8s.io/multikueue\n"));
    let actions = r.at(0.0, ClusterEvent::Submitted);
    let [ClusterAction::Note { message }] = actions.as_slice() else { panic!("{actions:?}") };
    assert!(message.contains("leaves this job to that controller"), "{message}");
    assert_eq!(r.job_history(), vec![None], "no condition: the operator never reconciles it");
    assert!(r.c.is_settled());
    assert_eq!(r.finishes(), [], "no outcome: the dry run refuses such a job before it starts");
}

#[test]
fn scheduling_policy_sets_min_member_and_queue_reconcile_jobs() {
    let manifest = NORMAL.replace(
        "  runPolicy:\n",
        "  runPolicy:\n    schedulingPolicy:\n      minAvailable: 2\n      queue: research\n",
    );
    let mut r = Run::with(
        &manifest,
        ControllerConfig { capability: Some(QueueCapability::parse("cpu=2").unwrap()), ..ControllerConfig::default() },
    );
    r.start_all();
    let pg = r.c.rows(r.now).into_iter().find_map(|row| match row {
        Row::PodGroup(g) => Some(g),
        _ => None,
    });
    let pg = pg.expect("a PodGroup");
    assert_eq!((pg.min_member, pg.queue.as_str()), (2, "research"));
    assert_eq!(r.c.state(), Some(JobState::Running), "the 2 pods of minMember fit cpu=2: the gang is admitted");
}

#[test]
fn worker_only_jobs_succeed_when_every_worker_has_update_job_status() {
    let manifest = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: pytest\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 3\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: busybox\n              command: [\"true\"]\n".to_string();
    let mut r = Run::new(&manifest);
    assert!(r.c.job().master.is_none(), "{manifest}");
    r.at(0.0, ClusterEvent::Submitted);
    for w in 0..3 {
        r.at(0.1, ClusterEvent::LauncherStarted { pod: ReplicaId::worker(w) });
    }
    r.run(1.0, W0, 0);
    assert_eq!(r.c.state(), Some(JobState::Running), "a worker runs");
    r.complete(2.0, W0, 0);
    r.complete(2.0, ReplicaId::worker(1), 0);
    assert_eq!(r.c.state(), Some(JobState::Running));
    r.complete(2.5, ReplicaId::worker(2), 0);
    assert_eq!(r.finishes(), vec![(Outcome::Succeeded, "PyTorchJob default/pytest successfully completed.".into())]);

    // With an elasticPolicy, any worker's success is the job's.
    let elastic =
        manifest.replace("spec:\n  pytorchReplicaSpecs:", "spec:\n  elasticPolicy: {}\n  pytorchReplicaSpecs:");
    let mut r = Run::new(&elastic);
    r.start_all_of(&[W0, ReplicaId::worker(1), ReplicaId::worker(2)]);
    r.complete(2.0, W0, 0);
    assert_eq!(r.c.state(), Some(JobState::Succeeded));
}

#[test]
fn restarts_column_reads_the_previous_run_like_kubectl() {
    // Seed: "Error 0 16s", "Running 1 (2s ago) 17s", "Error 1 (12s ago) 27s",
    // "CrashLoopBackOff 1 (12s ago) 38s", "Running 2 (13s ago) 39s".
    let mut r = Run::with(
        WORKER_FAILS,
        ControllerConfig { crash_loop_after: Duration::from_secs(10), ..ControllerConfig::default() },
    );
    r.start_all();
    let ago = |r: &Run| {
        let p = r.pod(W0).unwrap();
        (p.status, p.restarts, p.last_restart_ago.map(|d| d.as_secs()))
    };
    r.exit(15.0, W0, 1, true, 0);
    assert_eq!(ago(&r), (PodStatus::Error, 0, None));
    r.run(17.0, W0, 1);
    assert_eq!(ago(&r), (PodStatus::Running, 1, Some(2)));
    r.exit(27.0, W0, 1, true, 1);
    assert_eq!(ago(&r), (PodStatus::Error, 1, Some(12)));
    r.at(38.0, ClusterEvent::Tick);
    assert_eq!(ago(&r), (PodStatus::CrashLoopBackOff, 1, Some(11)));
    r.run(39.0, W0, 2);
    assert_eq!(ago(&r), (PodStatus::Running, 2, Some(12)));
}

#[test]
fn events_before_submit_and_for_unknown_pods_are_ignored() {
    let mut r = Run::new(NORMAL);
    assert!(r.at(0.0, ClusterEvent::LauncherStarted { pod: MASTER }).is_empty());
    assert!(r.changes.is_empty());
    r.start_all();
    let before = r.changes.len();
    r.at(1.0, ClusterEvent::ChildRunning { pod: ReplicaId::worker(9), restart_count: 0 });
    r.at(1.0, ClusterEvent::PodDeleted { pod: ReplicaId::worker(9) });
    r.at(1.0, ClusterEvent::Submitted);
    assert_eq!(r.changes.len(), before);
}

#[test]
fn only_real_changes_are_emitted() {
    let mut r = Run::new(NORMAL);
    r.start_all();
    let before = r.changes.len();
    r.at(5.0, ClusterEvent::Tick);
    r.run(6.0, MASTER, 0);
    assert_eq!(r.changes.len(), before, "time passing alone changes no row");
}

#[test]
fn next_tick_says_when_crash_loop_back_off_is_due() {
    let mut r = Run::new(WORKER_FAILS);
    r.start_all();
    assert_eq!(r.c.next_tick(), None);
    r.exit(2.0, W0, 1, true, 0);
    assert_eq!(r.c.next_tick(), None, "no CrashLoopBackOff after the first crash");
    r.run(2.1, W0, 1);
    r.exit(2.5, W0, 1, true, 1);
    assert_eq!(r.c.next_tick(), Some(Duration::from_millis(3500)));
    r.at(3.5, ClusterEvent::Tick);
    assert_eq!(r.pod(W0).unwrap().status, PodStatus::CrashLoopBackOff);
    assert_eq!(r.c.next_tick(), None);
}

#[test]
fn a_new_failure_with_backoff_limit_zero_exceeds_it_reconcile_jobs_exceeds_backoff_limit() {
    // jobHasNewFailure && active != totalReplicas && previousRetry (0) + 1 > backoffLimit (0).
    let manifest = worker_policy(NORMAL, "Never").replace("backoffLimit: 3", "backoffLimit: 0");
    let mut r = Run::new(&manifest);
    r.start_all();
    r.exit(2.0, W0, 1, false, 0);
    let actions = r.at(2.0, ClusterEvent::LauncherExited { pod: W0, status: ExitHow::Exited(1) });
    assert!(actions.contains(&ClusterAction::StopAll), "every pod is deleted: {actions:?}");
    assert_eq!(
        r.finishes(),
        vec![(Outcome::Failed, "Job pytest has failed because it has reached the specified backoff limit".into())]
    );
}

/// A launcher killed outright (kill -9 from outside) while its training process runs: the
/// container's PID 1 ended with 137. What becomes of the pod and the job, per policy.
#[test]
fn a_launcher_killed_outright_is_a_container_ending_with_137() {
    let killed =
        ClusterEvent::LauncherExited { pod: W0, status: ExitHow::Signaled(rankvisor_core::signo::Signo::KILL) };
    // OnFailure and Always: the kubelet restarts the container in the same pod (RESTARTS 1).
    for policy in ["OnFailure", "Always"] {
        let mut r = Run::new(&worker_policy(NORMAL, policy));
        r.start_all();
        let actions = r.at(2.0, killed.clone());
        assert!(actions.is_empty(), "{policy}: {actions:?}");
        assert_eq!(r.pod(W0).unwrap().status, PodStatus::Error, "{policy}");
        assert_eq!(r.c.state(), Some(JobState::Running), "{policy}: the pod is not Failed");
        assert_eq!(r.at(2.0, ClusterEvent::Tick), vec![ClusterAction::StartLauncher { pod: W0 }], "{policy}");
        r.at(2.1, ClusterEvent::LauncherStarted { pod: W0 });
        r.run(2.5, W0, 0);
        let row = r.pod(W0).unwrap();
        assert_eq!((row.status, row.restarts), (PodStatus::Running, 1), "{policy}: the kubelet's restart counts");
        assert!(!r.changes.iter().any(|c| c.event == WatchEventType::Deleted), "{policy}: restarted in place");
    }
    // ExitCode: the pod's own policy is Never, so it fails; 137 is retryable: recreated.
    let mut r = Run::new(&worker_policy(NORMAL, "ExitCode"));
    r.start_all();
    assert_eq!(r.at(2.0, killed.clone()), vec![ClusterAction::StartLauncher { pod: W0 }]);
    assert_eq!(r.c.state(), Some(JobState::Restarting));
    assert_eq!(r.pod(W0).unwrap().restarts, 0, "a new pod");
    assert!(r.changes.iter().any(|c| c.event == WatchEventType::Deleted));
    assert!(r.finishes().is_empty());
    // Never: the pod fails with its container, and the job with it.
    let mut r = Run::new(&worker_policy(NORMAL, "Never"));
    r.start_all();
    r.at(2.0, killed);
    assert_eq!(r.pod(W0).unwrap().status, PodStatus::Error);
    assert_eq!(
        r.finishes(),
        vec![(Outcome::Failed, "PyTorchJob pytest is failed because 1 Worker replica(s) failed.".into())]
    );
}

//! The training operator's rules, one test each.

use std::time::Duration;

use super::super::controller::{ClusterAction, ClusterEvent, ControllerConfig, Outcome};
use super::super::pytorchjob::ReplicaId;
use super::super::rows::{JobState, PodStatus, WatchEventType};
use super::*;
use crate::exit::ExitHow;

#[test]
fn backoff_limit_zero_fails_on_the_first_restart() {
    let manifest = NORMAL.replace("backoffLimit: 3", "backoffLimit: 0");
    let mut r = Run::new(&manifest);
    r.start_all();
    r.exit(2.0, W0, 1, true, 0);
    assert_eq!(r.c.state(), Some(JobState::Running));
    r.run(2.5, W0, 1);
    assert_eq!(r.c.state(), Some(JobState::Failed));
}

#[test]
fn no_backoff_limit_means_no_job_wide_limit() {
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

#[test]
fn master_giving_up_fails_the_job() {
    let mut r = Run::new(NORMAL);
    r.start_all();
    let actions = r.exit(2.0, MASTER, 2, false, 0);
    assert_eq!(
        actions,
        vec![
            ClusterAction::StopAll,
            ClusterAction::Finish {
                outcome: Outcome::Failed,
                reason: "PyTorchJob pytest is failed because 1 Master replica(s) failed.".into()
            }
        ]
    );
    let master = r.pod(MASTER).unwrap();
    assert_eq!(master.status, PodStatus::Terminating, "its launcher has not exited yet");

    // Same when the launcher itself exits non-zero before its child ever ran (rendezvous, node health).
    let mut r = Run::new(NORMAL);
    r.at(0.0, ClusterEvent::Submitted);
    r.at(0.1, ClusterEvent::LauncherStarted { pod: MASTER });
    r.at(0.5, ClusterEvent::LauncherExited { pod: MASTER, status: ExitHow::Exited(138) });
    assert_eq!(r.c.state(), Some(JobState::Failed));
    assert_eq!(r.pod_history(MASTER).last(), Some(&(WatchEventType::Deleted, PodStatus::Error, 0)));
}

#[test]
fn a_worker_pod_failing_for_good_fails_the_job_as_the_operator_does() {
    let manifest = WORKER_FAILS.replace(
        "    Worker:\n      replicas: 3\n      restartPolicy: OnFailure",
        "    Worker:\n      replicas: 3\n      restartPolicy: Never",
    );
    let mut r = Run::new(&manifest);
    r.start_all();
    r.exit(2.0, W0, 1, false, 0);
    assert_eq!(
        r.finishes(),
        vec![(Outcome::Failed, "PyTorchJob pytest is failed because 1 Worker replica(s) failed.".into())]
    );
}

#[test]
fn exit_code_policy_recreates_a_pod_whose_launcher_exits_retryable() {
    let manifest = NORMAL.replace(
        "    Worker:\n      replicas: 3\n      restartPolicy: OnFailure",
        "    Worker:\n      replicas: 3\n      restartPolicy: ExitCode",
    );
    let mut r = Run::new(&manifest);
    r.start_all();
    // A node turned unhealthy: the launcher stops its child and exits 138.
    r.exit(2.0, W0, 143, false, 0);
    let actions = r.at(2.1, ClusterEvent::LauncherExited { pod: W0, status: ExitHow::Exited(138) });
    assert_eq!(actions, vec![ClusterAction::StartLauncher { pod: W0 }]);
    assert_eq!(r.c.state(), Some(JobState::Running));
    assert_eq!(r.pod(W0).unwrap().status, PodStatus::Pending);

    // A permanent code fails the pod, and the job.
    r.at(2.2, ClusterEvent::LauncherStarted { pod: W0 });
    r.run(2.5, W0, 0);
    r.exit(3.0, W0, 1, false, 0);
    assert_eq!(r.c.state(), Some(JobState::Failed));
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
    assert_eq!(r.c.next_tick(), Some(Duration::from_secs(3)));
    r.at(3.0, ClusterEvent::Tick);
    assert_eq!(r.pod(W0).unwrap().status, PodStatus::CrashLoopBackOff);
    assert_eq!(r.c.next_tick(), None);
}

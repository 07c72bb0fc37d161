//! Seed 000's five scenarios (and a deletion), as measured there.

use std::time::Duration;

use super::*;
use crate::k8s::quantity::QueueCapability;
use crate::kubelet::cluster::{ClusterAction, ClusterEvent, ControllerConfig, Outcome};
use crate::kubelet::replica::ReplicaId;
use crate::render::rows::{JobState, PodGroupPhase, PodStatus, Row, WatchEventType};
use rankvisor_core::exit::ExitHow;

#[test]
fn normal_job_succeeds_podgroup_deleted_pods_kept() {
    let mut r = Run::new(NORMAL);
    r.at(0.0, ClusterEvent::Submitted);
    // Submit: the job appears blank then Created; the PodGroup blank, Inqueue, then Running once
    // the gang is placed; every pod Pending, first unscheduled then on the node.
    let kinds: Vec<String> = r
        .changes
        .iter()
        .map(|c| match &c.row {
            Row::Job(j) => format!("job {:?}", j.state),
            Row::PodGroup(g) => format!("pg {:?} {}", g.status, g.min_member),
            Row::Pod(p) => format!("{} {} {:?}", p.name, p.status, p.node),
            other => panic!("a PyTorchJob shows no {other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "job None",
            "job Some(Created)",
            "pg None 4",
            "pytest-master-0 Pending None",
            "pytest-worker-0 Pending None",
            "pytest-worker-1 Pending None",
            "pytest-worker-2 Pending None",
            "pg Some(Inqueue) 4",
            "pytest-master-0 Pending Some(\"las1\")",
            "pytest-worker-0 Pending Some(\"las1\")",
            "pytest-worker-1 Pending Some(\"las1\")",
            "pytest-worker-2 Pending Some(\"las1\")",
            "pg Some(Running) 4",
        ]
    );
    for pod in all_pods() {
        r.at(0.1, ClusterEvent::LauncherStarted { pod });
    }
    assert_eq!(r.pod(W0).unwrap().status, PodStatus::ContainerCreating);
    r.run(2.0, MASTER, 0);
    assert_eq!(r.c.state(), Some(JobState::Running), "Running once the master runs, workers still starting");
    for pod in workers() {
        r.run(2.5, pod, 0);
    }
    let master = r.pod(MASTER).unwrap();
    assert!(master.ready);
    assert_eq!(master.status, PodStatus::Running);

    let actions = r.exit(3.3, MASTER, 0, false, 0);
    assert_eq!(
        actions,
        vec![ClusterAction::Finish {
            outcome: Outcome::Succeeded,
            reason: "PyTorchJob pytest is successfully completed.".into()
        }]
    );
    assert_eq!(r.c.state(), Some(JobState::Succeeded));
    assert!(!r.podgroup_exists(), "the PodGroup is deleted on success");
    assert_eq!(r.pod(MASTER).unwrap().status, PodStatus::Completed);
    assert_eq!(r.pod(W0).unwrap().status, PodStatus::Running, "workers are left to finish");
    assert!(!r.c.is_settled());

    r.at(3.3, ClusterEvent::LauncherExited { pod: MASTER, status: ExitHow::Exited(0) });
    for pod in workers() {
        r.complete(3.6, pod, 0);
    }
    assert!(r.c.is_settled());
    assert_eq!(r.c.rows(r.now).iter().filter(|row| matches!(row, Row::Pod(_))).count(), 4, "pods are kept");
    for pod in all_pods() {
        assert_eq!(r.pod(pod).unwrap().status, PodStatus::Completed);
        assert!(r.pod_history(pod).iter().all(|(e, _, _)| *e != WatchEventType::Deleted));
    }
    assert_eq!(
        r.job_history(),
        vec![None, Some(JobState::Created), Some(JobState::Running), Some(JobState::Succeeded)]
    );
    let pg = r.podgroup_history();
    assert_eq!(pg.first(), Some(&(WatchEventType::Added, None, 4, 0)));
    assert!(pg.contains(&(WatchEventType::Modified, Some(PodGroupPhase::Running), 4, 1)));
    assert!(pg.contains(&(WatchEventType::Modified, Some(PodGroupPhase::Running), 4, 4)));
    assert_eq!(
        pg.last(),
        Some(&(WatchEventType::Deleted, Some(PodGroupPhase::Running), 4, 3)),
        "deleted as the master completes"
    );
    assert_eq!(r.finishes().len(), 1);
}

#[test]
fn one_worker_failing_restarts_and_the_job_still_succeeds() {
    let mut r = Run::new(WORKER_FAILS);
    r.start_all();
    // worker-0 (RANK 1) fails after 1s and restarts; the job is unaffected.
    r.exit(2.0, W0, 1, true, 0);
    assert_eq!(r.pod(W0).unwrap().status, PodStatus::Error);
    assert_eq!(r.pod(W0).unwrap().restarts, 0);
    r.run(2.3, W0, 1);
    let row = r.pod(W0).unwrap();
    assert_eq!((row.status, row.restarts), (PodStatus::Running, 1));
    assert_eq!(row.last_restart_ago, Some(Duration::from_millis(300)), "time since the previous run ended");
    assert_eq!(r.c.state(), Some(JobState::Running));
    r.exit(3.3, W0, 1, true, 1);
    r.at(4.0, ClusterEvent::Tick);
    assert_eq!(r.pod(W0).unwrap().status, PodStatus::Error, "CrashLoopBackOff only after crash_loop_after");
    r.at(4.4, ClusterEvent::Tick);
    let row = r.pod(W0).unwrap();
    assert_eq!((row.status, row.restarts), (PodStatus::CrashLoopBackOff, 1));
    assert_eq!(row.last_restart_ago, Some(Duration::from_millis(1100)), "kubelet moved the last run to lastState");

    r.complete(4.5, MASTER, 0);
    assert_eq!(r.c.state(), Some(JobState::Succeeded), "Succeeded while the worker restarts");
    assert_eq!(r.finishes(), vec![(Outcome::Succeeded, "PyTorchJob pytest is successfully completed.".into())]);

    // After the success the worker goes on restarting; passing backoffLimit changes nothing now.
    for k in 2..=5 {
        r.run(4.5 + f64::from(k), W0, k);
        r.exit(5.0 + f64::from(k), W0, 1, true, k);
    }
    assert_eq!(r.pod(W0).unwrap().restarts, 5);
    assert_eq!(r.c.state(), Some(JobState::Succeeded));
    assert_eq!(r.finishes().len(), 1);
    assert!(!r.actions.contains(&ClusterAction::StopAll));
    for pod in [ReplicaId::worker(1), ReplicaId::worker(2)] {
        r.complete(11.0, pod, 0);
        assert_eq!(r.pod(pod).unwrap().status, PodStatus::Completed);
    }
}

#[test]
fn all_workers_failing_reach_the_backoff_limit_and_stop_the_master() {
    // Seed 000's all-workers-fail trace is `PastBackoffLimit` at work: each worker restarts once,
    // 3 workers x 1 restart = 3 = backoffLimit; there is no "all workers failed" rule.
    let mut r = Run::new(ALL_WORKERS_FAIL);
    r.start_all();
    for w in 0..3 {
        r.exit(2.0, ReplicaId::worker(w), 1, true, 0);
    }
    assert_eq!(r.c.state(), Some(JobState::Running), "failures under OnFailure restart in place");
    r.run(2.1, ReplicaId::worker(0), 1);
    r.run(2.1, ReplicaId::worker(1), 1);
    assert_eq!(r.c.state(), Some(JobState::Running), "2 restarts < backoffLimit 3");
    let actions = r.at(2.1, ClusterEvent::ChildRunning { pod: ReplicaId::worker(2), restart_count: 1 });
    let stops: Vec<ClusterAction> = all_pods().into_iter().map(|pod| ClusterAction::StopPod { pod }).collect();
    let mut want = stops;
    want.push(ClusterAction::StopAll);
    want.push(ClusterAction::Finish {
        outcome: Outcome::Failed,
        reason: "Job pytest has failed because it has reached the specified backoff limit".into(),
    });
    assert_eq!(actions, want);
    assert_eq!(r.c.state(), Some(JobState::Failed));
    assert!(!r.podgroup_exists());
    for pod in all_pods() {
        assert_eq!(r.pod(pod).unwrap().status, PodStatus::Terminating, "every pod is deleted, cleanPodPolicy or not");
    }
    assert!(r.pod(MASTER).unwrap().ready, "the master was still running when stopped");

    // The event loop stops everything; the stops do not restart anything or decide again.
    r.at(
        2.5,
        ClusterEvent::ChildExited {
            pod: MASTER,
            exit: ExitHow::Signaled(rankvisor_core::signo::Signo::TERM),
            will_restart: false,
            restart_count: 0,
        },
    );
    for pod in all_pods() {
        r.at(2.6, ClusterEvent::LauncherExited { pod, status: ExitHow::Exited(143) });
    }
    assert!(r.c.is_settled());
    assert!(r.c.rows(r.now).iter().all(|row| matches!(row, Row::Job(_))), "pods and PodGroup deleted");
    let master = r.pod_history(MASTER);
    assert_eq!(master.last(), Some(&(WatchEventType::Deleted, PodStatus::Error, 0)));
    assert!(master.contains(&(WatchEventType::Modified, PodStatus::Terminating, 0)));
    let starts = r.actions.iter().filter(|a| matches!(a, ClusterAction::StartLauncher { .. })).count();
    assert_eq!(starts, 4, "nothing is started again");
    assert_eq!(r.finishes().len(), 1);
}

#[test]
fn master_failing_keeps_the_job_running_until_restarts_reach_the_backoff_limit() {
    let mut r = Run::new(MASTER_FAILS);
    r.start_all();
    for pod in workers() {
        r.complete(4.0, pod, 0);
    }
    assert_eq!(r.podgroup_history().last().map(|g| g.3), Some(1), "only the master still runs");

    let mut runs = 1;
    let mut t = 4.0;
    for k in 0..3u32 {
        r.exit(t, MASTER, 1, true, k);
        assert_eq!(r.pod(MASTER).unwrap().status, PodStatus::Error);
        r.at(t + 1.0, ClusterEvent::Tick);
        // The kubelet restarts at once after the first crash: CrashLoopBackOff from the second on.
        let waiting = if k == 0 { PodStatus::Error } else { PodStatus::CrashLoopBackOff };
        assert_eq!(r.pod(MASTER).unwrap().status, waiting, "crash {k}");
        assert_eq!(r.c.state(), Some(JobState::Running), "Running through the master's restarts");
        r.run(t + 2.0, MASTER, k + 1);
        runs += 1;
        t += 5.0;
    }
    // The 4th run (restart 3) brings the summed restarts to backoffLimit 3: Failed.
    assert_eq!(runs, 1 + 3, "the master ran 1 + backoffLimit times");
    assert_eq!(r.c.state(), Some(JobState::Failed));
    assert_eq!(
        r.finishes(),
        vec![(Outcome::Failed, "Job pytest has failed because it has reached the specified backoff limit".into())]
    );
    assert!(r.actions.contains(&ClusterAction::StopAll));
    assert!(r.states[..r.states.len() - 1].iter().all(|s| *s != Some(JobState::Failed)));
    let master = r.pod(MASTER).unwrap();
    assert_eq!((master.status, master.restarts), (PodStatus::Terminating, 3));
    assert!(!r.podgroup_exists());
    for pod in workers() {
        assert_eq!(r.pod(pod), None, "completed workers are deleted");
        assert_eq!(r.pod_history(pod).last(), Some(&(WatchEventType::Deleted, PodStatus::Completed, 0)));
    }
    r.at(t, ClusterEvent::LauncherExited { pod: MASTER, status: ExitHow::Exited(143) });
    assert_eq!(r.pod(MASTER), None);
    assert!(r.c.is_settled());
}

#[test]
fn gang_that_does_not_fit_stays_inqueue_and_pending_forever() {
    let mut r = Run::with(
        GANG,
        ControllerConfig { capability: Some(QueueCapability::parse("cpu=2").unwrap()), ..ControllerConfig::default() },
    );
    let actions = r.at(0.0, ClusterEvent::Submitted);
    assert_eq!(actions.len(), 1);
    let ClusterAction::Unschedulable { message } = &actions[0] else {
        panic!("{actions:?}");
    };
    assert!(message.contains("capability cpu=2"), "{message}");
    assert!(message.contains("4 pods need cpu=4"), "{message}");
    for t in [1.0, 2.0, 60.0, 3600.0] {
        assert!(r.at(t, ClusterEvent::Tick).is_empty());
    }
    assert_eq!(r.c.state(), Some(JobState::Created));
    assert_eq!(r.podgroup_history().last(), Some(&(WatchEventType::Modified, Some(PodGroupPhase::Inqueue), 4, 0)));
    for pod in all_pods() {
        let row = r.pod(pod).unwrap();
        assert_eq!((row.status, row.node), (PodStatus::Pending, None));
        assert_eq!(row.age, Duration::from_secs(3600));
    }
    assert!(!r.actions.iter().any(|a| matches!(a, ClusterAction::StartLauncher { .. })));
    assert_eq!(r.finishes(), []);

    let mut roomy = Run::with(
        GANG,
        ControllerConfig {
            capability: Some(QueueCapability::parse("cpu=4,memory=400Mi").unwrap()),
            ..ControllerConfig::default()
        },
    );
    roomy.start_all();
    assert_eq!(roomy.c.state(), Some(JobState::Running), "a queue that holds the gang admits it");
}

#[test]
fn a_deleted_pod_is_recreated_with_zero_restarts() {
    let mut r = Run::new(MASTER_FAILS);
    r.start_all();
    // The master restarts twice...
    r.exit(4.0, MASTER, 1, true, 0);
    r.run(5.0, MASTER, 1);
    r.exit(6.0, MASTER, 1, true, 1);
    r.run(7.0, MASTER, 2);
    assert_eq!(r.pod(MASTER).unwrap().restarts, 2);
    // ...then is deleted: Terminating, stopped, deleted, created anew at RESTARTS 0.
    let actions = r.at(8.0, ClusterEvent::PodDeleted { pod: MASTER });
    assert_eq!(actions, vec![ClusterAction::StopPod { pod: MASTER }]);
    assert_eq!(r.pod(MASTER).unwrap().status, PodStatus::Terminating);
    r.at(
        8.2,
        ClusterEvent::ChildExited {
            pod: MASTER,
            exit: ExitHow::Signaled(rankvisor_core::signo::Signo::TERM),
            will_restart: false,
            restart_count: 2,
        },
    );
    assert_eq!(r.c.state(), Some(JobState::Running), "a deletion is not a failure");
    let actions = r.at(8.3, ClusterEvent::LauncherExited { pod: MASTER, status: ExitHow::Exited(143) });
    assert_eq!(actions, vec![ClusterAction::StartLauncher { pod: MASTER }]);
    let tail: Vec<_> = r.pod_history(MASTER).into_iter().rev().take(3).collect();
    assert_eq!(
        tail,
        vec![
            (WatchEventType::Modified, PodStatus::Pending, 0),
            (WatchEventType::Added, PodStatus::Pending, 0),
            (WatchEventType::Deleted, PodStatus::Error, 2),
        ]
    );
    let row = r.pod(MASTER).unwrap();
    assert_eq!((row.restarts, row.age, row.node.as_deref()), (0, Duration::ZERO, Some("las1")));

    // The recreated master restarts twice more: 2 + 2 would pass backoffLimit 3, but the deleted
    // pod's restarts are gone, so the job keeps running.
    r.at(8.4, ClusterEvent::LauncherStarted { pod: MASTER });
    r.run(9.0, MASTER, 0);
    r.exit(10.0, MASTER, 1, true, 0);
    r.run(11.0, MASTER, 1);
    r.exit(12.0, MASTER, 1, true, 1);
    r.run(13.0, MASTER, 2);
    assert_eq!(r.c.state(), Some(JobState::Running));
    assert_eq!(r.pod(MASTER).unwrap().restarts, 2);
    r.complete(14.0, MASTER, 0);
    assert_eq!(r.c.state(), Some(JobState::Succeeded));
}

#[test]
fn deleting_a_pod_that_has_no_launcher_recreates_it_at_once() {
    let mut r = Run::with(
        GANG,
        ControllerConfig { capability: Some(QueueCapability::parse("cpu=1").unwrap()), ..ControllerConfig::default() },
    );
    r.at(0.0, ClusterEvent::Submitted);
    let actions = r.at(5.0, ClusterEvent::PodDeleted { pod: W0 });
    assert!(actions.is_empty(), "still unschedulable: nothing to start");
    let row = r.pod(W0).unwrap();
    assert_eq!((row.status, row.age), (PodStatus::Pending, Duration::ZERO));
    let h = r.pod_history(W0);
    assert_eq!(
        &h[h.len() - 2..],
        &[(WatchEventType::Deleted, PodStatus::Pending, 0), (WatchEventType::Added, PodStatus::Pending, 0)]
    );
}

//! The TrainJob's controllers driven on a fake clock as the event loop would feed them: admission
//! and env first, then each rule, named after the Go function that decides it.

use std::time::Duration;

use rankvisor_core::exit::ExitHow;

use super::admission::{admit_train_job, LoadedTrainJob};
use super::controller::TrainJobController;
use super::env::{launch_spec, NodePod};
use crate::k8s::document::documents;
use crate::k8s::document::ManifestError;
use crate::kubelet::cluster::{ClusterAction, ClusterEvent, ControllerConfig, Outcome};
use crate::kubelet::replica::ReplicaId;
use crate::render::rows::{PodStatus, Row, WatchEventType};

const EXAMPLE: &str = include_str!("../../../../examples/trainjob.yaml");

/// A TrainJob on the built-in torch-distributed runtime, with `spec` lines under `spec:`.
fn builtin(extra: &str) -> String {
    format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: tj\nspec:\n  runtimeRef:\n    name: torch-distributed\n{extra}"
    )
}

/// `EXAMPLE`'s runtime with `job` lines added to its Job spec (after `backoffLimit: 3`), and
/// `jobset` lines to its JobSet spec.
fn example_with(job: &str, jobset: &str) -> String {
    EXAMPLE
        .replace("              backoffLimit: 3\n", &format!("              backoffLimit: 3\n{job}"))
        .replace("      replicatedJobs:\n", &format!("{jobset}      replicatedJobs:\n"))
}

fn load(text: &str) -> Result<LoadedTrainJob, ManifestError> {
    admit_train_job(&documents(text, "trainjob.yaml")?, "trainjob.yaml")
}

fn node(k: u32) -> ReplicaId {
    ReplicaId::worker(k)
}

#[test]
fn enforce_ml_policy_env_of_pod_k_for_three_nodes_without_resources() {
    let job =
        load(&builtin("  trainer:\n    numNodes: 3\n    command: [train]\n    env: [{name: LR, value: \"0.1\"}]\n"))
            .unwrap()
            .job;
    assert_eq!(job.runtime, "ClusterTrainingRuntime/torch-distributed");
    for k in 0..3 {
        let pod = NodePod { index: k, name: format!("tj-node-0-{k}-abcde"), restart_attempt: 0 };
        let env = super::env::container_env(&job);
        let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["LR", "PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"]
        );
        let spec = launch_spec(&job, &pod, 29500);
        let get = |n: &str| spec.env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        assert_eq!(get("PET_NNODES").as_deref(), Some("3"));
        assert_eq!(get("PET_NPROC_PER_NODE").as_deref(), Some("1"), "no resources: max(1, 0 CPUs)");
        assert_eq!(get("PET_NODE_RANK"), Some(k.to_string()), "the completion index, through the fieldRef");
        assert_eq!(get("JOB_COMPLETION_INDEX"), Some(k.to_string()));
        assert_eq!(get("PET_MASTER_PORT").as_deref(), Some("29500"));
        assert_eq!(get("HOSTNAME"), Some(format!("tj-node-0-{k}")));
        for absent in ["WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "PET_RDZV_ENDPOINT"] {
            assert_eq!(get(absent), None, "{absent}");
        }
    }
    let cluster = super::env::enforce_ml_policy(&job);
    assert_eq!(
        cluster[3].1,
        crate::k8s::container::EnvSource::Value("tj-node-0-0.tj".into()),
        "PET_MASTER_ADDR in a cluster"
    );
}

#[test]
fn enforce_ml_policy_nproc_from_resources_per_node() {
    let with = |res: &str| {
        load(&builtin(&format!("  trainer:\n    numNodes: 3\n    command: [t]\n    resourcesPerNode:\n{res}")))
            .unwrap()
            .job
            .nproc_per_node
    };
    assert_eq!(with("      limits: {cpu: \"2500m\"}\n"), "3", "the CPU limit, rounded up");
    assert_eq!(with("      requests: {cpu: \"2\"}\n      limits: {cpu: \"8\"}\n"), "2", "requests before limits");
    assert_eq!(with("      limits: {cpu: \"4\", nvidia.com/gpu: 2}\n"), "auto", "a GPU: torchrun decides");
    assert_eq!(with("      requests: {cpu: \"100m\"}\n"), "1");
    let n = load(&builtin(
        "  trainer:\n    numProcPerNode: 4\n    command: [t]\n    resourcesPerNode: {limits: {cpu: 2}}\n",
    ))
    .unwrap()
    .job;
    assert_eq!(n.nproc_per_node, "4", "numProcPerNode wins");
}

#[test]
fn validate_refuses_a_reserved_env_name_naming_it() {
    let e = load(&builtin(
        "  trainer:\n    command: [t]\n    env: [{name: PET_NODE_RANK, value: \"3\"}, {name: A, value: b}]\n",
    ))
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "error when creating \"trainjob.yaml\": admission webhook \"validator.trainjob.trainer.kubeflow.org\" denied the request: spec.trainer.env: Invalid value: must not have reserved envs, invalid envs configured: [PET_NODE_RANK]"
    );
}

#[test]
fn new_objects_takes_the_runtime_beside_the_train_job_or_a_built_in_one() {
    let loaded = load(EXAMPLE).unwrap();
    assert_eq!((loaded.job.num_nodes, loaded.job.backoff_limit), (4, 3));
    assert_eq!(loaded.job.runtime, "TrainingRuntime/pytest-runtime");
    assert_eq!(loaded.not_emulated, Vec::<String>::new(), "seed 000's job leaves nothing out");
    let extra = EXAMPLE
        .replace("      replicatedJobs:", "      ttlSecondsAfterFinished: 60\n      replicatedJobs:")
        .replace(
            "                      image: busybox:1.37.0-glibc\n",
            "                      image: busybox:1.37.0-glibc\n                      livenessProbe: {}\n                    - {name: sidecar, image: s}\n",
        )
        .replace("    numNodes: 4\n", "    numNodes: 4\n    podTemplateOverride: {}\n");
    let named = load(&extra).unwrap().not_emulated;
    assert_eq!(
        named,
        [
            "template.spec.ttlSecondsAfterFinished",
            "template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].livenessProbe",
            "template.spec.replicatedJobs[0].template.spec.template.spec.containers[1] (sidecar: only the node container runs)",
            "spec.trainer.podTemplateOverride",
        ]
    );
    let e = load(&EXAMPLE.replace("name: pytest-runtime\n    kind", "name: other\n    kind")).unwrap_err();
    assert!(e.to_string().contains("TrainingRuntime \"other\" not found"), "{e}");
    let e = load(&builtin("  trainer: {command: [t]}\n").replace("torch-distributed", "deepspeed-distributed"))
        .unwrap_err();
    assert!(e.to_string().contains("is not emulated: MPI"), "{e}");
    let e = load("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\n---\napiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\n").unwrap_err();
    assert!(e.to_string().contains("no matches for kind \"PyTorchJob\""), "{e}");
}

/// A controller plus everything it said, on a fake clock.
struct Run {
    c: TrainJobController,
    now: Duration,
    changes: Vec<crate::render::rows::Change>,
    actions: Vec<ClusterAction>,
}

impl Run {
    fn new(text: &str) -> Self {
        let job = load(text).unwrap().job;
        Self {
            c: TrainJobController::new(job, ControllerConfig::default()),
            now: Duration::ZERO,
            changes: vec![],
            actions: vec![],
        }
    }

    fn at(&mut self, secs: f64, event: ClusterEvent) -> Vec<ClusterAction> {
        self.now = Duration::from_secs_f64(secs);
        let step = self.c.handle(self.now, event);
        self.changes.extend(step.changes);
        self.actions.extend(step.actions.clone());
        step.actions
    }

    /// Every pod asked for is started and runs its child.
    fn run_all(&mut self, secs: f64) {
        for pod in self.c.live_launchers() {
            self.at(secs, ClusterEvent::LauncherStarted { pod });
            self.at(secs, ClusterEvent::ChildRunning { pod, restart_count: 0 });
        }
    }

    /// Node k's launcher exits with `code` (its child first).
    fn end(&mut self, secs: f64, k: u32, code: i32) {
        self.at(
            secs,
            ClusterEvent::ChildExited {
                pod: node(k),
                exit: ExitHow::Exited(code),
                will_restart: false,
                restart_count: 0,
            },
        );
        self.at(secs, ClusterEvent::LauncherExited { pod: node(k), status: ExitHow::Exited(code) });
    }

    /// Stopped launchers report their exit, as the event loop would.
    fn stopped(&mut self, secs: f64) {
        let stops: Vec<ReplicaId> = self
            .actions
            .iter()
            .filter_map(|a| match a {
                ClusterAction::StopPod { pod } => Some(*pod),
                _ => None,
            })
            .collect();
        self.actions.retain(|a| !matches!(a, ClusterAction::StopPod { .. }));
        for pod in stops {
            self.at(
                secs,
                ClusterEvent::LauncherExited { pod, status: ExitHow::Signaled(rankvisor_core::signo::Signo::TERM) },
            );
        }
    }

    fn trainjob(&self) -> (Option<&'static str>, Option<String>) {
        self.c
            .rows(self.now)
            .into_iter()
            .find_map(|r| match r {
                Row::TrainJob(t) => Some((t.state, t.reason)),
                _ => None,
            })
            .unwrap()
    }

    fn finish(&self) -> Option<Outcome> {
        self.actions.iter().find_map(|a| match a {
            ClusterAction::Finish { outcome, .. } => Some(*outcome),
            _ => None,
        })
    }

    /// Each ADDED pod's (name, restart attempt).
    fn pods_added(&self) -> Vec<(String, Option<u32>)> {
        self.changes
            .iter()
            .filter_map(|c| match (&c.row, c.event) {
                (Row::Pod(p), WatchEventType::Added) => Some((p.name.clone(), p.restart_attempt)),
                _ => None,
            })
            .collect()
    }

    fn jobset_restarts(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .changes
            .iter()
            .filter_map(|c| match &c.row {
                Row::JobSet(j) => Some(j.restarts),
                _ => None,
            })
            .collect();
        v.dedup();
        v
    }
}

#[test]
fn execute_success_policy_all_jobs_completed_is_the_train_jobs_complete() {
    let mut r = Run::new(EXAMPLE);
    let started = r.at(0.0, ClusterEvent::Submitted);
    assert_eq!(started.len(), 4, "{started:?}");
    r.run_all(0.5);
    assert_eq!(r.trainjob(), (None, None), "no condition while running: STATE blank");
    for k in 0..4 {
        r.end(3.0, k, 0);
    }
    assert_eq!(r.trainjob(), (Some("Complete"), Some("AllJobsCompleted".into())));
    assert_eq!(r.finish(), Some(Outcome::Succeeded));
    assert!(r.c.is_settled());
    let names: Vec<String> = r.pods_added().into_iter().map(|(n, _)| n).collect();
    assert!(
        names
            .iter()
            .enumerate()
            .all(|(k, n)| n.starts_with(&format!("pytest-node-0-{k}-")) && n.len() == "pytest-node-0-0-".len() + 5),
        "{names:?}"
    );
}

#[test]
fn past_backoff_limit_on_failure_is_shared_by_two_nodes_and_gives_failed_jobs() {
    // backoffLimit 3 under OnFailure: node 0 restarts twice, node 1 once: 3 in all.
    let mut r = Run::new(&example_with("", "").replace("numNodes: 4", "numNodes: 2"));
    r.at(0.0, ClusterEvent::Submitted);
    r.run_all(0.5);
    for (t, k) in [(1.0, 0), (3.0, 0), (5.0, 1)] {
        assert_eq!(r.trainjob().0, None, "a container restart is the kubelet's, in the same pod");
        r.at(t, ClusterEvent::LauncherExited { pod: node(k), status: ExitHow::Exited(1) });
        r.at(t, ClusterEvent::Tick);
        r.at(t + 1.5, ClusterEvent::Tick);
        r.at(t + 1.5, ClusterEvent::LauncherStarted { pod: node(k) });
        r.at(t + 1.5, ClusterEvent::ChildRunning { pod: node(k), restart_count: 0 });
    }
    assert_eq!(r.trainjob(), (Some("Failed"), Some("FailedJobs".into())), "2 + 1 restarts reach backoffLimit 3");
    assert_eq!(r.finish(), Some(Outcome::Failed));
    let tj = r.changes.iter().rev().find_map(|c| match &c.row {
        Row::BatchJob(j) => Some(j.status),
        _ => None,
    });
    assert_eq!(tj, Some("Failed"));
}

#[test]
fn restart_job_set_action_applier_two_restarts_then_reached_max_restarts() {
    let manifest = example_with("", "      failurePolicy:\n        maxRestarts: 2\n")
        .replace("numNodes: 4", "numNodes: 2")
        .replace("backoffLimit: 3", "backoffLimit: 0");
    let mut r = Run::new(&manifest);
    r.at(0.0, ClusterEvent::Submitted);
    for attempt in 0..3u32 {
        let t = f64::from(attempt) * 10.0;
        r.run_all(t + 0.5);
        // Node 1 crashes; its container restart exceeds backoffLimit 0: the Job fails.
        r.at(t + 1.0, ClusterEvent::LauncherExited { pod: node(1), status: ExitHow::Exited(1) });
        r.at(t + 1.0, ClusterEvent::Tick);
        r.at(t + 1.1, ClusterEvent::LauncherStarted { pod: node(1) });
        r.at(t + 1.2, ClusterEvent::ChildRunning { pod: node(1), restart_count: 0 });
        r.stopped(t + 2.0);
    }
    assert_eq!(r.jobset_restarts(), [0, 1, 2]);
    let added = r.pods_added();
    assert_eq!(added.len(), 6, "every pod recreated on each restart: {added:?}");
    let attempts: Vec<Option<u32>> = added.iter().map(|(_, a)| *a).collect();
    assert_eq!(attempts, [Some(0), Some(0), Some(1), Some(1), Some(2), Some(2)]);
    assert_eq!(r.trainjob(), (Some("Failed"), Some("ReachedMaxRestarts".into())));
    assert_eq!(r.finish(), Some(Outcome::Failed));
}

#[test]
fn restart_job_set_action_applier_max_restarts_zero_fails_at_once() {
    let manifest = example_with("", "      failurePolicy:\n        maxRestarts: 0\n")
        .replace("backoffLimit: 3", "backoffLimit: 0");
    let mut r = Run::new(&manifest);
    r.at(0.0, ClusterEvent::Submitted);
    r.run_all(0.5);
    r.at(1.0, ClusterEvent::LauncherExited { pod: node(2), status: ExitHow::Exited(1) });
    r.at(1.0, ClusterEvent::Tick);
    r.at(1.1, ClusterEvent::LauncherStarted { pod: node(2) });
    r.at(1.2, ClusterEvent::ChildRunning { pod: node(2), restart_count: 0 });
    assert_eq!(r.trainjob(), (Some("Failed"), Some("ReachedMaxRestarts".into())));
    assert_eq!(r.jobset_restarts(), [0]);
}

#[test]
fn match_pod_failure_policy_fail_job_gives_fail_job_set_failure_policy_action() {
    let manifest = example_with(
        "              podFailurePolicy:\n                rules:\n                  - action: FailJob\n                    onExitCodes: {operator: In, values: [42]}\n",
        "      failurePolicy:\n        maxRestarts: 5\n        rules:\n          - action: FailJobSet\n            onJobFailureReasons: [PodFailurePolicy]\n",
    )
    .replace("              template:\n                spec:\n                  containers:", "              template:\n                spec:\n                  restartPolicy: Never\n                  containers:");
    let mut r = Run::new(&manifest);
    r.at(0.0, ClusterEvent::Submitted);
    r.run_all(0.5);
    r.end(1.0, 3, 42);
    assert_eq!(r.trainjob(), (Some("Failed"), Some("FailJobSetFailurePolicyAction".into())));
    assert_eq!(r.jobset_restarts(), [0], "no restart");
    // Another exit code is counted and the pod replaced instead.
    let mut r = Run::new(&manifest);
    r.at(0.0, ClusterEvent::Submitted);
    r.run_all(0.5);
    r.end(1.0, 3, 1);
    assert_eq!(r.trainjob().0, None);
    assert_eq!(r.pods_added().len(), 5, "node 3's pod replaced: same index, a new name");
}

#[test]
fn set_suspended_condition_holds_every_pod_until_resumed() {
    let mut r = Run::new(&EXAMPLE.replace("spec:\n  runtimeRef:", "spec:\n  suspend: true\n  runtimeRef:"));
    let actions = r.at(0.0, ClusterEvent::Submitted);
    assert!(!actions.iter().any(|a| matches!(a, ClusterAction::StartLauncher { .. })), "{actions:?}");
    assert_eq!(r.trainjob(), (Some("Suspended"), Some("Suspended".into())));
    let actions = r.at(5.0, ClusterEvent::Resumed);
    assert_eq!(actions.iter().filter(|a| matches!(a, ClusterAction::StartLauncher { .. })).count(), 4);
    assert_eq!(
        r.trainjob(),
        (Some("Suspended"), Some("Resumed".into())),
        "kubectl's STATE: the last condition, now False"
    );
    assert_eq!(r.jobset_restarts(), [0], "a suspension is no restart");
}

#[test]
fn reconcile_deadline_fails_with_deadline_exceeded_and_deletes_the_jobset() {
    let mut r = Run::new(&EXAMPLE.replace("spec:\n  runtimeRef:", "spec:\n  activeDeadlineSeconds: 2\n  runtimeRef:"));
    r.at(0.0, ClusterEvent::Submitted);
    r.run_all(0.5);
    assert_eq!(r.c.next_tick(), Some(Duration::from_secs(2)));
    let actions = r.at(2.0, ClusterEvent::Tick);
    assert!(actions.contains(&ClusterAction::StopAll), "{actions:?}");
    assert_eq!(r.trainjob(), (Some("Failed"), Some("DeadlineExceeded".into())));
    assert!(r.changes.iter().any(|c| c.event == WatchEventType::Deleted && matches!(c.row, Row::JobSet(_))));
    r.stopped(2.5);
    assert!(r.c.is_settled());
    assert!(r.c.rows(r.now).iter().all(|row| !matches!(row, Row::Pod(p) if p.status != PodStatus::Terminating)));
}

//! `rankvisor dry-run` with SageMaker HyperPod HyperPodPyTorchJobs end to end: the real binary,
//! each pod's container a real `rankvisor --agent hyperpod` on its own loopback port, driven by
//! the emulated HyperPod operator over HTTP (`/start`, `/stop`, `/shutdown`); read from the JSON
//! watch stream (kinds HyperPodPyTorchJob and Pod) and the notes on stderr.

use std::path::Path;

use serde_json::Value;

use crate::common;
use common::dry_run::DryRun;
use common::TestDir;

/// A HyperPodPyTorchJob `hp` of `replicas` pods named `hp-pods-N`, each running `script` (sh),
/// with `run_policy` lines under `spec.runPolicy` (the job is kept after it finished).
fn manifest(dir: &TestDir, replicas: u32, script: &str, run_policy: &str) -> std::path::PathBuf {
    let script = serde_json::to_string(script).unwrap();
    dir.write(
        "job.yaml",
        &format!(
            "apiVersion: sagemaker.amazonaws.com/v1\nkind: HyperPodPyTorchJob\nmetadata:\n  name: hp\nspec:\n  replicaSpecs:\n    - name: pods\n      replicas: {replicas}\n      template:\n        spec:\n          containers:\n            - name: trainer\n              image: my-training-image\n              command: [\"sh\", \"-c\", {script}]\n  runPolicy:\n    ttlSecondsAfterFinished: -1\n{run_policy}"
        ),
    )
}

/// `rankvisor dry-run --output json ARGS... MANIFEST` with a safety timeout.
fn dry_run(manifest: &Path, args: &[&str]) -> DryRun {
    DryRun::json(manifest, &[&["--grace-period", "2s"], args].concat())
}

impl DryRun {
    /// The operator's `GET /status` reads of the agents, from the line said at the end: (on a
    /// state change, by the poll).
    fn status_reads(&self) -> (u64, u64) {
        let line = self.stderr.lines().find(|l| l.contains("HyperPod operator reads: ")).unwrap_or_else(|| {
            panic!("no reads line: {}", self.explain());
        });
        let number = |before: &str| -> u64 {
            let head = line.split(before).next().unwrap_or_default();
            head.rsplit(|c: char| !c.is_ascii_digit())
                .find(|w| !w.is_empty())
                .and_then(|w| w.parse().ok())
                .unwrap_or_else(|| {
                    panic!("no count before {before:?} in {line}");
                })
        };
        (number(" on a state change"), number(" by the poll"))
    }

    /// The job's (state, restartType) over time, repeats left out.
    fn hyperpod_states(&self) -> Vec<(String, String)> {
        self.states("HyperPodPyTorchJob", "restartType")
    }

    /// The job's last event.
    fn hyperpod_last(&self) -> Value {
        self.of_kind("HyperPodPyTorchJob").last().cloned().unwrap_or_default()
    }

    /// The names of the pods ADDED, in order.
    fn hp_pods_added(&self) -> Vec<String> {
        let added = self.of_kind("Pod").filter(|e| e["type"] == "ADDED");
        added.map(|e| e["name"].as_str().unwrap_or_default().to_string()).collect()
    }

    /// The agent states `pod`'s events carried, repeats left out.
    fn agent_states(&self, pod: &str) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for e in self.of_kind("Pod").filter(|e| e["name"] == pod) {
            if let Some(s) = e["fields"]["agent"].as_str().filter(|s| v.last().map(String::as_str) != Some(*s)) {
                v.push(s.to_string());
            }
        }
        v
    }
}

/// Rank 1's worker fails on the first attempt (faultCount 0); every attempt says its count.
const CRASH_ONCE: &str = "echo \"rank=$PET_NODE_RANK count=$JOB_RESTART_COUNT\"; if [ \"$JOB_RESTART_COUNT\" = 0 ] && [ \"$PET_NODE_RANK\" = 1 ]; then exit 3; fi; sleep 1";

#[test]
fn a_crash_is_a_process_level_restart_of_every_agent_with_the_next_fault_count() {
    let dir = TestDir::new("hp-crash");
    let r = dry_run(&manifest(&dir, 2, CRASH_ONCE, ""), &[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    let states = r.hyperpod_states();
    // (Rank 1 may fail before rank 0 runs: then the job was never Running before its restart.)
    let has = |state: &str, kind: &str| states.iter().position(|s| s.0 == state && s.1 == kind);
    assert_eq!(states.first().map(|s| s.0.as_str()), Some("Created"), "{}", r.explain());
    let order = (has("Restarting", "PLR"), has("Running", "PLR"));
    assert!(matches!(order, (Some(a), Some(b)) if a < b), "restarted, then running: {states:?}");
    assert_eq!(states.last(), Some(&("Completed".to_string(), "PLR".to_string())), "{}", r.explain());
    assert_eq!(r.hp_pods_added(), ["hp-pods-0", "hp-pods-1"], "a PLR keeps the pods");
    for rank in 0..2 {
        assert!(
            r.stderr.contains(&format!("rank={rank} count=1")),
            "every worker restarted with faultCount 1: {}",
            r.explain()
        );
    }
    let last = r.hyperpod_last();
    assert_eq!(last["fields"]["restartCount"], 1);
    assert_eq!(last["fields"]["latestFaultyPodInstanceList"]["faultyPodList"][0], "hp-pods-1");
    assert_eq!(last["fields"]["latestFaultyPodInstanceList"]["faultyRankList"][0], "1");
    assert_eq!(last["fields"]["masterAddr"], "127.0.0.1");
    assert!(r.stderr.contains("The fault of reason WorkerCrash was remediated in "), "{}", r.explain());
    assert!(r.stderr.contains("HyperPod operator figures over 1 restart(s)"), "{}", r.explain());
    // By default the operator reads the agents' states with GET /status alone: on each change
    // its pod's launcher says, and every second.
    let (on_change, _) = r.status_reads();
    assert!(
        on_change >= 2 * 4,
        "at least READY, RUNNING, READY, RUNNING of each agent read on change: {}",
        r.explain()
    );
    let agent = r.agent_states("hp-pods-1");
    // (STOPPING may pass unseen: a stop with no child to signal is READY at once; and SHUTDOWN:
    // the agent exits once its child is gone, maybe before its /status is read.)
    for s in ["READY", "RUNNING", "FAULTED"] {
        assert!(agent.contains(&s.to_string()), "the pod's events carry its agent's {s}: {agent:?}");
    }
}

#[test]
fn a_hang_rule_is_a_plr_whose_graceful_stop_reaches_the_worker_with_sigusr1() {
    let dir = TestDir::new("hp-hang");
    let saved = dir.join("saved");
    let script = format!(
        "if [ \"$JOB_RESTART_COUNT\" = 0 ]; then trap 'echo usr1 > {s}; exit 0' USR1; sleep 30 & wait; exit 1; fi; echo training started; sleep 1",
        s = saved.display()
    );
    let rules = "    logMonitoringConfiguration:\n      - name: Start\n        logPattern: \".*training started.*\"\n        expectedStartCutOffInSeconds: 1\n";
    let r = dry_run(&manifest(&dir, 2, &script, rules), &[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(r.hyperpod_states().contains(&("Restarting".into(), "PLR".into())), "{}", r.explain());
    assert!(r.stderr.contains("The fault of reason LogHang_Start was remediated"), "{}", r.explain());
    assert_eq!(
        std::fs::read_to_string(&saved).unwrap_or_default(),
        "usr1\n",
        "SIGUSR1 reached a worker: {}",
        r.explain()
    );
}

#[test]
fn faults_past_num_restart_before_full_job_restart_recreate_the_pods_with_the_same_names() {
    let dir = TestDir::new("hp-jlr");
    let script = "if [ \"$PET_NODE_RANK\" = 0 ] && [ \"$JOB_RESTART_COUNT\" -lt 2 ]; then exit 1; fi; sleep 1";
    let policy = "    restartPolicy:\n      evalPeriodSeconds: 3600\n      numRestartBeforeFullJobRestart: 1\n      maxFullJobRestarts: 1\n";
    let r = dry_run(&manifest(&dir, 2, script, policy), &[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    let types: Vec<String> = r.hyperpod_states().into_iter().filter(|s| s.0 == "Restarting").map(|s| s.1).collect();
    assert_eq!(types, ["PLR", "JLR"], "{}", r.explain());
    assert_eq!(r.hp_pods_added(), ["hp-pods-0", "hp-pods-1", "hp-pods-0", "hp-pods-1"], "recreated, same names");
    let status = &r.hyperpod_last()["fields"]["restartStatus"];
    assert_eq!((status["fullJobRestartCount"].as_u64(), status["restartCount"].as_u64()), (Some(1), Some(0)));
}

#[test]
fn max_full_job_restarts_spent_fails_the_job() {
    let dir = TestDir::new("hp-maxjlr");
    let policy = "    restartPolicy:\n      evalPeriodSeconds: 3600\n      numRestartBeforeFullJobRestart: 0\n      maxFullJobRestarts: 1\n";
    let r = dry_run(&manifest(&dir, 2, "exit 1", policy), &[]);
    assert_eq!(r.code, 1, "{}", r.explain());
    let last = r.hyperpod_last();
    assert_eq!(
        (last["fields"]["state"].as_str(), last["fields"]["reason"].as_str()),
        (Some("Failed"), Some("MaxFullJobRestartsExceeded")),
        "{}",
        r.explain()
    );
    assert!(r.stderr.contains("maxFullJobRestarts is 1"), "{}", r.explain());
}

#[test]
fn an_evaluation_window_that_expires_resets_the_counters() {
    let dir = TestDir::new("hp-window");
    // The second fault comes after the 1 s window: a PLR again, not the JLR none is allowed.
    let script = "case \"$JOB_RESTART_COUNT\" in 0) exit 1;; 1) sleep 2; exit 1;; esac; sleep 1";
    let policy = "    restartPolicy:\n      evalPeriodSeconds: 1\n      numRestartBeforeFullJobRestart: 1\n      maxFullJobRestarts: 0\n";
    let r = dry_run(&manifest(&dir, 1, script, policy), &[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    let types: Vec<String> = r.hyperpod_states().into_iter().filter(|s| s.0 == "Restarting").map(|s| s.1).collect();
    assert_eq!(types, ["PLR", "PLR"], "{}", r.explain());
    assert_eq!(r.hyperpod_last()["fields"]["restartCount"], 2);
    assert_eq!(r.hyperpod_last()["fields"]["restartStatus"]["restartCount"], 1, "the new window's count");
}

#[test]
fn an_unhealthy_node_label_is_a_node_fault_and_the_pod_moves() {
    let dir = TestDir::new("hp-node");
    let script = "if [ \"$JOB_RESTART_COUNT\" = 0 ]; then sleep 30; fi; sleep 1";
    let r = dry_run(&manifest(&dir, 2, script, ""), &["--inject", "label:pods-1@1s=UnschedulablePendingReplacement"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(r.stderr.contains("Event: Warning NodeFault: Found unhealthy node localhost"), "{}", r.explain());
    assert!(r.stderr.contains("The fault of reason NodeFault was remediated in "), "{}", r.explain());
    let node = |pod: &str| {
        let added = r.of_kind("Pod").filter(|e| e["name"] == pod && e["type"] == "ADDED").last();
        added.and_then(|e| e["fields"]["node"].as_str().map(String::from))
    };
    assert_eq!(node("hp-pods-1").as_deref(), Some("localhost-replacement-1"), "{}", r.explain());
    assert_eq!(node("hp-pods-0").as_deref(), Some("localhost"));
    assert!(r.hyperpod_states().contains(&("Restarting".into(), "JLR".into())));
}

#[test]
fn job_max_retry_count_fails_the_job_after_that_many_restarts() {
    let dir = TestDir::new("hp-retries");
    let r = dry_run(&manifest(&dir, 1, "exit 1", "    jobMaxRetryCount: 2\n"), &[]);
    assert_eq!(r.code, 1, "{}", r.explain());
    let last = r.hyperpod_last();
    assert_eq!(last["fields"]["reason"], "JobMaxRetryCountExceeded", "{}", r.explain());
    assert_eq!(last["fields"]["restartCount"], 2);
}

#[test]
fn the_fault_deadline_fails_a_job_whose_restart_does_not_finish() {
    let dir = TestDir::new("hp-faultdeadline");
    // The workers ignore SIGUSR1 and the stop waits 10 s before SIGKILL: still faulted after 1 s.
    let script = "trap '' USR1; if [ \"$PET_NODE_RANK\" = 1 ]; then exit 1; fi; sleep 30";
    let r = dry_run(&manifest(&dir, 2, script, "    faultDeadlineSeconds: 1\n"), &["--hyperpod-stop-timeout", "10s"]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.hyperpod_last()["fields"]["reason"], "FaultDeadlineExceeded", "{}", r.explain());
}

#[test]
fn clean_pod_policy_all_deletes_the_pods_and_none_keeps_them() {
    for (policy, deleted) in [("All", 2), ("None", 0)] {
        let dir = TestDir::new("hp-clean");
        let r = dry_run(&manifest(&dir, 2, "sleep 1", &format!("    cleanPodPolicy: {policy}\n")), &[]);
        assert_eq!(r.code, 0, "{}", r.explain());
        let n = r.of_kind("Pod").filter(|e| e["type"] == "DELETED").count();
        assert_eq!(n, deleted, "cleanPodPolicy {policy}: {}", r.explain());
    }
}

#[test]
fn a_suspended_job_starts_its_pods_once_resumed() {
    let dir = TestDir::new("hp-suspend");
    let r = dry_run(&manifest(&dir, 1, "sleep 1", "    suspend: true\n"), &["--inject", "resume:job@1s"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    let states: Vec<String> = r.hyperpod_states().into_iter().map(|s| s.0).collect();
    assert_eq!(states[..2], ["Created".to_string(), "Suspended".to_string()], "{}", r.explain());
    let first_pod = r.of_kind("Pod").next().and_then(|e| e["time_ms"].as_u64()).unwrap_or(0);
    assert!(first_pod >= 1000, "no pod before the resume: {}", r.explain());
    assert_eq!(states.last().map(String::as_str), Some("Completed"));
}

#[test]
fn a_field_the_crd_does_not_have_exits_64_naming_it() {
    let dir = TestDir::new("hp-unknown");
    let path = manifest(&dir, 1, "true", "    maxRetries: 3\n");
    let r = dry_run(&path, &[]);
    assert_eq!(r.code, 64, "{}", r.explain());
    assert!(r.stderr.contains("strict decoding error: unknown field \"spec.runPolicy.maxRetries\""), "{}", r.explain());
}

/// The AWS documentation's job (log rules, restart policy, port 8080, a nodeSelector), its
/// elisions filled in: examples/hyperpodjob.yaml, run with `--command`.
const AWS_EXAMPLE: &str = include_str!("../../examples/hyperpodjob.yaml");

/// Issue 35 item 2, the outputs as for the other kinds: `kubectl get -w` lines for the job and its
/// pods (without `--output json`), `--logs` (a file per pod with its worker's output) and
/// `--timeline` (a lane for the job and one per pod).
#[test]
fn the_watch_lines_the_logs_and_the_timeline_are_written_as_for_the_other_kinds() {
    let dir = TestDir::new("hp-outputs");
    let path = dir.write("job.yaml", AWS_EXAMPLE);
    let (logs, svg) = (dir.path().join("logs"), dir.path().join("t.svg"));
    let out = std::process::Command::new(common::bin())
        .args(["dry-run", "--master-port", "0", "--timeout", "60s", "--logs", logs.to_str().unwrap()])
        .args(["--timeline", svg.to_str().unwrap(), "--command", "pods=echo hello from $PET_NODE_RANK; sleep 0.5"])
        .arg(&path)
        .output()
        .expect("run rankvisor dry-run");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let job_line = |state: &str| {
        stdout
            .lines()
            .any(|l| l.starts_with("hyperpodpytorchjob.sagemaker.amazonaws.com/hp-example") && l.contains(state))
    };
    assert!(job_line("Created") && job_line("Running") && job_line("Completed"), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("pod/hp-example-pods-1") && l.contains("Running")), "{stdout}");
    for rank in 0..2 {
        let log = std::fs::read_to_string(logs.join(format!("hp-example-pods-{rank}.log"))).unwrap_or_default();
        assert_eq!(log.trim(), format!("hello from {rank}"), "pod {rank}'s worker's output");
    }
    let drawn = std::fs::read_to_string(&svg).expect("the timeline");
    for lane in ["HyperPodPyTorchJob hp-example", "hp-example-pods-0", "hp-example-pods-1"] {
        assert!(drawn.contains(&format!("data-name=\"{lane}\"")), "a lane for {lane}: {drawn}");
    }
}

#[test]
fn the_aws_documentation_example_runs_and_the_elastic_one_is_refused_by_name() {
    let dir = TestDir::new("hp-aws");
    let path = dir.write("job.yaml", AWS_EXAMPLE);
    let r = dry_run(&path, &["--command", "pods=echo Experiment configuration; sleep 1"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(r.stderr.contains("hyperpodrun --server-port 8080"), "the agent's flag is named: {}", r.explain());
    assert!(r.stderr.contains("not emulated here: spec.replicaSpecs[0].template.spec.nodeSelector"), "{}", r.explain());
    assert_eq!(r.hyperpod_last()["fields"]["state"], "Completed");

    let elastic = AWS_EXAMPLE
        .replace("  runPolicy:\n", "  elasticPolicy:\n    minReplicas: 1\n    maxReplicas: 4\n  runPolicy:\n");
    let r = dry_run(&dir.write("elastic.yaml", &elastic), &[]);
    assert_eq!(r.code, 64, "{}", r.explain());
    assert!(r.stderr.contains("spec.elasticPolicy: elastic scaling"), "{}", r.explain());
}

#[test]
fn the_startup_deadline_fails_a_job_whose_agents_are_not_running_in_time() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TestDir::new("hp-startup");
    // Every pod's container takes 3 s to start its agent: not running 1 s after the pods' creation.
    let wrapper = dir.write("slow-agent.sh", &format!("#!/bin/sh\nsleep 3\nexec {} \"$@\"\n", common::bin()));
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = manifest(&dir, 2, "sleep 1", "    startupDeadlineSeconds: 1\n");
    let r = dry_run(&path, &["--launcher", wrapper.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.hyperpod_last()["fields"]["reason"], "StartupDeadlineExceeded", "{}", r.explain());
    assert!(r.stderr.contains("startupDeadlineSeconds is 1"), "{}", r.explain());
}

/// The poll alone (no reads on change) runs the job too, every agent's state from its
/// `GET /status` every 200 ms; with neither the operator could never learn a state: 64.
#[test]
fn with_the_poll_alone_the_operator_reads_each_agents_status_over_http() {
    let dir = TestDir::new("hp-poll");
    let path = manifest(&dir, 2, CRASH_ONCE, "");
    let r = dry_run(&path, &["--hyperpod-poll", "200ms", "--hyperpod-read-on-change", "false"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    let (on_change, polled) = r.status_reads();
    assert_eq!(on_change, 0, "{}", r.explain());
    assert!(polled >= 2, "{}", r.explain());
    let neither = dry_run(&path, &["--hyperpod-poll", "0s", "--hyperpod-read-on-change", "false"]);
    assert_eq!(neither.code, 64, "{}", neither.explain());
    assert!(neither.stderr.contains("would never read an agent's state"), "{}", neither.explain());
    assert!(r.hyperpod_states().contains(&("Restarting".into(), "PLR".into())), "{}", r.explain());
    assert!(r.stderr.contains("The fault of reason WorkerCrash was remediated in "), "{}", r.explain());
    for rank in 0..2 {
        assert!(r.stderr.contains(&format!("rank={rank} count=1")), "{}", r.explain());
    }
}

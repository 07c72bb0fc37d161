//! `rankvisor dry-run` with Kubeflow Trainer v2 TrainJobs end to end: the real binary, one real
//! launcher per node, read from the JSON watch stream (kinds TrainJob, JobSet, Job, Pod).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common;
use common::dry_run::DryRun;
use common::{DryRunHttp, TestDir};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)
}

/// `rankvisor dry-run --output json ARGS... MANIFEST` on a free port, with a safety timeout.
fn dry_run(manifest: &Path, args: &[&str]) -> DryRun {
    DryRun::json(manifest, &[&["--backoff-max", "1s"], args].concat())
}

impl DryRun {
    /// The TrainJob's (state, reason) over time, repeats left out.
    fn train_job(&self) -> Vec<(String, String)> {
        self.states("TrainJob", "reason")
    }

    /// The JobSet's `restarts` over time, repeats left out.
    fn jobset_restarts(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.of_kind("JobSet").filter_map(|e| e["fields"]["restarts"].as_u64()).collect();
        v.dedup();
        v
    }

    /// Each ADDED pod: (name, restartAttempt).
    fn pods_added(&self) -> Vec<(String, u64)> {
        self.of_kind("Pod")
            .filter(|e| e["type"] == "ADDED")
            .map(|e| {
                (
                    e["name"].as_str().unwrap_or_default().to_string(),
                    e["fields"]["restartAttempt"].as_u64().unwrap_or(99),
                )
            })
            .collect()
    }

    fn last_status(&self, pod: &str) -> Option<&str> {
        self.of_kind("Pod").filter(|e| e["name"] == pod).last().and_then(|e| e["fields"]["status"].as_str())
    }
}

#[test]
fn the_trainjob_example_completes_on_four_nodes() {
    let r = dry_run(&example("trainjob.yaml"), &[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(
        r.train_job(),
        [("".into(), "".into()), ("Complete".into(), "AllJobsCompleted".into())],
        "{}",
        r.explain()
    );
    assert_eq!(r.jobset_restarts(), [0]);
    let pods = r.pods_added();
    assert_eq!(pods.len(), 4, "{pods:?}");
    for (k, (name, attempt)) in pods.iter().enumerate() {
        assert!(name.starts_with(&format!("pytest-node-0-{k}-")), "{name}");
        assert_eq!(*attempt, 0);
        assert_eq!(r.last_status(name), Some("Completed"), "{}", r.explain());
    }
    let job: Vec<&Value> = r.of_kind("Job").collect();
    assert_eq!(job.last().map(|e| e["fields"]["status"].clone()), Some("Complete".into()));
}

#[test]
fn max_restarts_two_recreates_every_pod_twice_then_reached_max_restarts() {
    let dir = TestDir::new("trainjob-restarts");
    let text = std::fs::read_to_string(example("trainjob.yaml"))
        .expect("example")
        .replace("      replicatedJobs:", "      failurePolicy:\n        maxRestarts: 2\n      replicatedJobs:")
        .replace("backoffLimit: 3", "backoffLimit: 0")
        .replace("numNodes: 4", "numNodes: 2")
        .replace("sleep 3", "sleep 0.5; exit 3");
    let manifest = dir.write("trainjob.yaml", &text);
    let r = dry_run(&manifest, &["--launcher-log-level", "info"]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.train_job().last(), Some(&("Failed".into(), "ReachedMaxRestarts".into())), "{}", r.explain());
    assert_eq!(r.jobset_restarts(), [0, 1, 2], "{}", r.explain());
    let attempts: Vec<u64> = r.pods_added().into_iter().map(|(_, a)| a).collect();
    assert_eq!(attempts, [0, 0, 1, 1, 2, 2], "every pod recreated at each restart: {}", r.explain());
    // The launchers read the attempt from their pod's labels file and name the TrainJob.
    assert!(
        r.stderr.contains("JobSet restart attempt 2 (pod label jobset.sigs.k8s.io/restart-attempt)"),
        "{}",
        r.explain()
    );
}

/// Issue 26 item 1 under a TrainJob: log rules set in the trainer's env (`RANKVISOR_LOG_RULES`, as
/// a pod sets it). The rule fires on node 1's first run: its launcher stops the child and the pod
/// fails, its Job (backoffLimit 0) fails, the JobSet restarts every node (maxRestarts 1), and the
/// second attempt, where the line is not printed, completes the TrainJob.
#[test]
fn a_log_rule_firing_on_a_node_fails_its_pod_and_the_jobset_restarts_every_node() {
    let dir = TestDir::new("trainjob-log-rule");
    let rules =
        dir.write("rules.json", r#"[{"name": "Oom", "logPattern": ".*out of memory.*", "faultOnMatch": true}]"#);
    let once = dir.file("fired");
    let text = std::fs::read_to_string(example("trainjob.yaml"))
        .expect("example")
        .replace("      replicatedJobs:", "      failurePolicy:\n        maxRestarts: 1\n      replicatedJobs:")
        .replace("backoffLimit: 3", "backoffLimit: 0")
        .replace(
            "    numNodes: 4\n",
            &format!("    numNodes: 2\n    env:\n      - {{name: RANKVISOR_LOG_RULES, value: \"{}\"}}\n", rules.display()),
        )
        .replace(
            "sleep 3",
            &format!(
                "if [ \\\"$PET_NODE_RANK\\\" = 1 ] && [ ! -e {once} ]; then touch {once}; echo 'CUDA out of memory'; exec sleep 30; fi; sleep 0.5"
            ),
        );
    let manifest = dir.write("trainjob.yaml", &text);
    let r = dry_run(&manifest, &[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.train_job().last(), Some(&("Complete".into(), "AllJobsCompleted".into())), "{}", r.explain());
    assert_eq!(r.jobset_restarts(), [0, 1], "{}", r.explain());
    let attempts: Vec<u64> = r.pods_added().into_iter().map(|(_, a)| a).collect();
    assert_eq!(attempts, [0, 0, 1, 1], "every pod recreated at the restart: {}", r.explain());
    assert!(r.stderr.contains(r#"log rule LogFault_Oom (last matched line: "CUDA out of memory")"#), "{}", r.explain());
}

#[test]
fn a_pod_failure_policy_exit_code_fails_the_jobset_by_its_fail_jobset_rule() {
    let dir = TestDir::new("trainjob-pfp");
    let text = std::fs::read_to_string(example("trainjob.yaml"))
        .expect("example")
        .replace(
            "      replicatedJobs:",
            "      failurePolicy:\n        maxRestarts: 3\n        rules:\n          - action: FailJobSet\n            onJobFailureReasons: [PodFailurePolicy]\n      replicatedJobs:",
        )
        .replace(
            "              backoffLimit: 3\n",
            "              backoffLimit: 3\n              podFailurePolicy:\n                rules:\n                  - action: FailJob\n                    onExitCodes: {operator: In, values: [42]}\n",
        )
        .replace("                spec:\n                  containers:", "                spec:\n                  restartPolicy: Never\n                  containers:")
        .replace("numNodes: 4", "numNodes: 2")
        .replace("sleep 3", "if [ \\\"$PET_NODE_RANK\\\" = 1 ]; then exit 42; fi; sleep 30");
    let manifest = dir.write("trainjob.yaml", &text);
    let r = dry_run(&manifest, &[]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(
        r.train_job().last(),
        Some(&("Failed".into(), "FailJobSetFailurePolicyAction".into())),
        "{}",
        r.explain()
    );
    assert_eq!(r.jobset_restarts(), [0], "FailJobSet restarts nothing");
    assert!(r.stderr.contains("failed with exit code 42 matching FailJob rule at index 0"), "{}", r.explain());
}

#[test]
fn a_reserved_env_name_is_refused_with_64_naming_it() {
    let dir = TestDir::new("trainjob-reserved");
    let text = std::fs::read_to_string(example("trainjob.yaml"))
        .expect("example")
        .replace("    numNodes: 4\n", "    numNodes: 4\n    env:\n      - {name: PET_MASTER_PORT, value: \"1234\"}\n");
    let manifest = dir.write("trainjob.yaml", &text);
    let r = dry_run(&manifest, &[]);
    assert_eq!(r.code, 64, "{}", r.explain());
    assert!(
        r.stderr.contains("admission webhook \"validator.trainjob.trainer.kubeflow.org\" denied the request: spec.trainer.env: Invalid value: must not have reserved envs, invalid envs configured: [PET_MASTER_PORT]"),
        "{}",
        r.explain()
    );
    assert!(r.stdout.is_empty(), "nothing is watched");
}

#[test]
fn a_runtime_file_with_the_command_and_env_json_of_pid_1_in_trainer_v2_shape() {
    let dir = TestDir::new("trainjob-runtime-file");
    let example = std::fs::read_to_string(example("trainjob.yaml")).expect("example");
    let (runtime, train_job) = example.split_once("---\n").expect("two documents");
    let runtime_file = dir.write("runtime.yaml", runtime);
    let manifest = dir.write("trainjob.yaml", &train_job.replace("numNodes: 4", "numNodes: 2"));
    let out = Command::new(common::bin())
        .args(["dry-run", "--master-port", "0", "--timeout", "60s", "--watch", "job", "--runtime"])
        .arg(&runtime_file)
        .args(["--command", "node=\"$RANKVISOR_LAUNCHER\" env --json | tr -d '\\n'; echo"])
        .arg(&manifest)
        .output()
        .expect("run rankvisor dry-run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for k in 0..2 {
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&format!("pytest-node-0-{k}-")) && l.contains('{'))
            .unwrap_or_else(|| panic!("node {k}'s env --json: {stderr}"));
        let json: Value = serde_json::from_str(&line[line.find('{').unwrap_or(0)..]).expect("env --json");
        assert_eq!(json["flavour"], "trainer-v2", "{json}");
        assert_eq!(json["job"], "pytest", "{json}");
        assert_eq!(json["replica_index"], k, "{json}");
        assert_eq!(json["sources"]["replica_index"], "PET_NODE_RANK", "{json}");
        assert_eq!(json["role"], if k == 0 { "Master" } else { "Worker" }, "node 0 leads: {json}");
    }
    // Without the runtime the reference is not found.
    let r = dry_run(&manifest, &[]);
    assert_eq!(r.code, 64, "{}", r.explain());
    assert!(r.stderr.contains("TrainingRuntime \"pytest-runtime\" not found"), "{}", r.explain());
}

#[test]
fn a_suspended_trainjob_runs_once_resumed_and_the_deadline_counts_from_the_resume() {
    let dir = TestDir::new("trainjob-suspend");
    let text = std::fs::read_to_string(example("trainjob.yaml"))
        .expect("example")
        .replace("spec:\n  runtimeRef:", "spec:\n  suspend: true\n  activeDeadlineSeconds: 3\n  runtimeRef:")
        .replace("numNodes: 4", "numNodes: 2")
        .replace("sleep 3", "sleep 30");
    let manifest = dir.write("trainjob.yaml", &text);
    let r = dry_run(&manifest, &["--inject", "resume:job@2s"]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(
        r.train_job(),
        [
            ("".into(), "".into()),
            ("Suspended".into(), "Suspended".into()),
            ("Suspended".into(), "Resumed".into()),
            ("Failed".into(), "DeadlineExceeded".into())
        ],
        "{}",
        r.explain()
    );
    let failed_at =
        r.of_kind("TrainJob").find(|e| e["fields"]["reason"] == "DeadlineExceeded").and_then(|e| e["time_ms"].as_u64());
    assert!(failed_at.is_some_and(|t| t >= 5000), "3s after the resume at 2s: {failed_at:?}");
    assert!(r.of_kind("JobSet").any(|e| e["type"] == "DELETED"), "the JobSet is deleted: {}", r.explain());
    assert_eq!(r.jobset_restarts(), [0], "a suspension is no restart");
}

#[test]
fn injected_faults_reach_a_trainjobs_nodes_by_index_and_the_timeline_draws_them() {
    let dir = TestDir::new("trainjob-inject");
    let text =
        std::fs::read_to_string(example("trainjob.yaml")).expect("example").replace("numNodes: 4", "numNodes: 2");
    let manifest = dir.write("trainjob.yaml", &text);
    let svg = dir.path().join("run.svg");
    let svg_arg = svg.to_str().expect("utf-8 path");
    let r = dry_run(&manifest, &["--inject", "fail:node-1@1s", "--timeline", svg_arg]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.train_job().last(), Some(&("Complete".into(), "AllJobsCompleted".into())), "{}", r.explain());
    let node1 = r.pods_added().into_iter().find(|(n, _)| n.starts_with("pytest-node-0-1-")).expect("node 1's pod").0;
    let restarts =
        r.of_kind("Pod").filter(|e| e["name"] == node1.as_str()).filter_map(|e| e["fields"]["restarts"].as_u64()).max();
    assert_eq!(
        restarts,
        Some(1),
        "the killed child is restarted in its pod (its launcher's own restart): {}",
        r.explain()
    );
    let drawn = std::fs::read_to_string(&svg).expect("the timeline");
    assert!(drawn.contains("TrainJob pytest") && drawn.contains("JobSet pytest") && drawn.contains(&node1), "{drawn}");
}

/// The live job view (node 0's `/job`, what the job page draws) and `--path-map` work for a
/// TrainJob as for a PyTorchJob.
#[test]
fn node_0_serves_the_job_view_and_a_path_map_reaches_every_nodes_command() {
    let dir = TestDir::new("trainjob-http-path-map");
    std::fs::write(dir.join("train.sh"), "echo \"TRAINED node $PET_NODE_RANK\"; sleep 2\n").unwrap();
    let text = std::fs::read_to_string(example("trainjob.yaml")).unwrap();
    let text = text.replace(r#"command: ["sh", "-c", "sleep 3"]"#, r#"command: ["sh", "/workspace/train.sh"]"#);
    assert!(text.contains("/workspace/train.sh"), "the example's command changed: {text}");
    let manifest = dir.join("trainjob.yaml");
    std::fs::write(&manifest, text).unwrap();
    let map = format!("/workspace={}", dir.path().display());
    let mut run = DryRunHttp::start(&dir, &manifest, &["--path-map", &map, "--timeout", "60s"]);
    let port = run.port_where("node 0", |pod| pod.starts_with("pytest-node-0-0-"));
    let view = common::wait_job(port, "the four nodes in node 0's job view", |v| {
        v["replicas"].as_object().is_some_and(|r| r.len() == 4)
    });
    assert_eq!(view["job"], "pytest", "{view:#}");
    assert!(run.wait_for(std::time::Duration::from_secs(60)).success(), "the TrainJob succeeds");
    let mut logs = String::new();
    for entry in std::fs::read_dir(dir.join("logs")).unwrap() {
        logs += &std::fs::read_to_string(entry.unwrap().path()).unwrap();
    }
    for k in 0..4 {
        assert!(logs.contains(&format!("TRAINED node {k}")), "node {k} ran the mapped script: {logs}");
    }
}

/// Issue 34: what the cluster refuses (or could never run) is refused on the TrainJob path too,
/// at once, with exit 64, naming the field and the value, before any pod: more nodes than the dry
/// run's cap shared by every job kind, a TrainingRuntime in another namespace than the TrainJob's,
/// quantities the CRD's pattern or the pod's validation refuses, a runtime Job's negative
/// backoffLimit and an imagePullPolicy Kubernetes does not know.
#[test]
fn what_the_cluster_refuses_on_the_trainjob_path_exits_64_naming_field_and_value() {
    let dir = TestDir::new("trainjob-refused");
    let text = std::fs::read_to_string(example("trainjob.yaml")).expect("example");
    let (runtime, train_job) = text.split_once("---\n").expect("two documents");
    let cases: [(&str, String, &str); 6] = [
        (
            "cap",
            text.replace("numNodes: 4", "numNodes: 100000"),
            "spec.trainer.numNodes is 100000: 100000 pods would start 100000 local processes: must be at most 1024",
        ),
        (
            "namespace",
            format!("{runtime}---\n{}", train_job.replacen("namespace: default", "namespace: team-a", 1)),
            "denied the request: spec.runtimeRef: Invalid value: \"pytest-runtime\": TrainingRuntime \"pytest-runtime\" not found in namespace \"team-a\", the TrainJob's: the one given is in namespace \"default\"",
        ),
        (
            "lots",
            text.replace("memory: \"100Mi\"", "memory: \"lots\""),
            "The TrainJob.trainer.kubeflow.org \"pytest\" is invalid: spec.trainer.resourcesPerNode.limits.memory: Invalid value: \"lots\": spec.trainer.resourcesPerNode.limits.memory in body should match '^(\\+|-)?",
        ),
        (
            "negative-cpu",
            text.replace("cpu: \"1\"", "cpu: \"-3\""),
            "cannot create the Job node: the apiserver refuses its spec.template.spec.containers[0].resources.limits.cpu: Invalid value: \"-3\": must be greater than or equal to 0",
        ),
        (
            "backoff-limit",
            text.replace("backoffLimit: 3", "backoffLimit: -1"),
            "cannot create the Job node: the apiserver refuses its spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            "pull-policy",
            text.replace("- name: node # must be `node`\n", "- name: node\n                      imagePullPolicy: Sometimes\n"),
            "spec.template.spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
        ),
    ];
    for (name, text, why) in cases {
        let manifest = dir.write(&format!("{name}.yaml"), &text);
        let r = dry_run(&manifest, &[]);
        assert_eq!(r.code, 64, "{name}: {}", r.explain());
        assert!(r.stderr.contains(why), "{name}: {}", r.explain());
        assert!(r.stdout.is_empty(), "{name}: nothing is watched: {}", r.explain());
        assert!(!r.stderr.contains("images are not pulled"), "{name}: nothing is started: {}", r.explain());
    }
}

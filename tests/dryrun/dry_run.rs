//! `rankvisor dry-run` end to end: the real binary, one real launcher per replica, the seed's five
//! scenarios (seed 000) read from the JSON watch stream, fault injection, admission refusals,
//! interruption.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use common::dry_run::DryRun;
use common::TestDir;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)
}

fn example_text(name: &str) -> String {
    std::fs::read_to_string(example(name)).expect("example manifest")
}

/// `rankvisor dry-run --logs LOGS ARGS... MANIFEST` (each replica's output to LOGS/<pod>.log):
/// its exit status and stderr.
fn logged_dry_run(args: &[&str], logs: &Path, manifest: &Path) -> (Option<i32>, String) {
    let out = Command::new(common::bin())
        .arg("dry-run")
        .args(args)
        .arg("--logs")
        .arg(logs)
        .arg(manifest)
        .output()
        .expect("run rankvisor dry-run");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `rankvisor dry-run ARGS...` with a safety `--timeout` and `--master-port 0` unless the test
/// sets them.
fn dry_run(args: &[&str]) -> DryRun {
    let mut cmd = Command::new(common::bin());
    cmd.arg("dry-run").args(args);
    if !args.contains(&"--timeout") {
        cmd.args(["--timeout", "50s"]);
    }
    // Parallel tests share the machine: each run on a free port of its own.
    if !args.contains(&"--master-port") {
        cmd.args(["--master-port", "0"]);
    }
    let out = cmd.output().expect("run rankvisor dry-run");
    // With `--output json` every line of stdout is an event.
    DryRun::new(&out, |stdout| {
        if args.contains(&"json") {
            stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
        } else {
            Vec::new()
        }
    })
}

fn json_run(manifest: &Path, extra: &[&str]) -> DryRun {
    let path = manifest.to_str().expect("utf-8 path");
    let mut args = vec!["--output", "json"];
    args.extend_from_slice(extra);
    args.push(path);
    dry_run(&args)
}

/// A pod's row in one event.
#[derive(Debug, Clone, PartialEq)]
struct PodEvent {
    kind: String,
    status: String,
    restarts: u64,
    at: u64,
}

/// The pods' and the gang's rows, and when the job reached a state.
impl DryRun {
    /// When the job first showed `state`.
    fn job_time(&self, state: &str) -> Option<u64> {
        self.of_kind("PyTorchJob").find(|e| e["fields"]["state"] == state).and_then(|e| e["time_ms"].as_u64())
    }

    fn pod(&self, name: &str) -> Vec<PodEvent> {
        self.of_kind("Pod")
            .filter(|e| e["name"] == name)
            .map(|e| PodEvent {
                kind: e["type"].as_str().unwrap_or_default().to_string(),
                status: e["fields"]["status"].as_str().unwrap_or_default().to_string(),
                restarts: e["fields"]["restarts"].as_u64().unwrap_or(99),
                at: e["time_ms"].as_u64().unwrap_or_default(),
            })
            .collect()
    }

    /// The restart counts of a pod's `Running` rows, in order.
    fn runs(&self, name: &str) -> Vec<u64> {
        self.pod(name).into_iter().filter(|p| p.status == "Running").map(|p| p.restarts).collect()
    }

    fn podgroup(&self) -> Vec<&Value> {
        self.of_kind("PodGroup").collect()
    }
}

const PODS: [&str; 4] = ["pytest-master-0", "pytest-worker-0", "pytest-worker-1", "pytest-worker-2"];

#[test]
fn normal_job_succeeds_podgroup_deleted_pods_kept() {
    let r = json_run(&example("pytorchjob.yaml"), &[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    let pg = r.podgroup();
    assert!(pg.iter().all(|g| g["fields"]["minMember"] == 4), "minMember is the sum of all replicas");
    let statuses: Vec<&str> = pg.iter().filter_map(|g| g["fields"]["status"].as_str()).collect();
    assert_eq!(statuses.first(), Some(&"Inqueue"));
    assert!(statuses.contains(&"Running"));
    assert!(pg.iter().any(|g| g["fields"]["runnings"] == 4), "the whole gang ran");
    assert_eq!(
        pg.last().map(|g| g["type"].clone()),
        Some(Value::from("DELETED")),
        "the PodGroup is deleted on success"
    );
    for pod in PODS {
        let events = r.pod(pod);
        assert_eq!(events.first().map(|e| (e.kind.as_str(), e.status.as_str())), Some(("ADDED", "Pending")));
        assert!(events.iter().any(|e| e.status == "Running"), "{pod}: {events:?}");
        assert_eq!(events.last().map(|e| e.status.as_str()), Some("Completed"), "{pod}: {events:?}");
        assert!(events.iter().all(|e| e.kind != "DELETED"), "pods are kept: {pod}");
    }
    assert!(r.stderr.contains("images are not pulled"), "{}", r.stderr);
    assert!(r.stderr.contains("PyTorchJob pytest is successfully completed."), "{}", r.stderr);
}

/// Issue 26 item 4: the AWS hang example (`examples/log-rules/hang.yaml`) under a PyTorchJob, set
/// as a pod sets it (the container's `RANKVISOR_LOG_RULES`): the training command prints its start
/// line and hangs; after the rule's 10 s the launcher stops it, the pod restarts (OnFailure), and
/// the second run, which goes on to finish, completes the job.
#[test]
fn the_aws_hang_rule_restarts_a_hanging_pod_and_the_job_completes() {
    let dir = common::TestDir::new("dry-run-log-rules");
    let rules = common::repo_file("examples/log-rules/hang.yaml");
    let manifest = dir.write(
        "job.yaml",
        &format!(
            r#"apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: hang
spec:
  runPolicy:
    backoffLimit: 2
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: busybox:1.37.0-glibc
              env:
                - name: RANKVISOR_LOG_RULES
                  value: "{}"
              command:
                - "sh"
                - "-c"
                - |
                  echo "Train Epoch: 1 [0/60000 (0%)]       loss=0.8470"
                  if [ "${{RANKVISOR_RESTART_COUNT}}" = "0" ]; then exec sleep 60; fi
"#,
            rules.display()
        ),
    );
    let r = json_run(&manifest, &[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    assert_eq!(r.runs("hang-master-0"), [0, 1], "{}", r.explain());
    assert!(r.pod("hang-master-0").iter().any(|e| e.status == "Error"), "{}", r.explain());
    let why = r#"log rule LogHang_JobHangingDetection (last matched line: "Train Epoch: 1 [0/60000 (0%)]       loss=0.8470")"#;
    assert!(r.stderr.contains(why), "{}", r.stderr);
}

#[test]
fn one_failing_worker_restarts_and_the_job_still_succeeds() {
    let r = json_run(&example("pytorchjob-worker-fails.yaml"), &["--backoff-max", "1s"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    let w0 = r.pod("pytest-worker-0");
    let first_error = w0.iter().position(|e| e.status == "Error").expect("worker-0 failed");
    assert_eq!(w0[first_error].restarts, 0, "RESTARTS goes up when the container runs again");
    assert!(r.runs("pytest-worker-0").starts_with(&[0, 1]), "{w0:?}");
    let succeeded = r.job_time("Succeeded").expect("Succeeded");
    assert!(
        w0.iter().any(|e| e.at >= succeeded && e.restarts >= 1 && e.status != "Completed"),
        "worker-0 was still restarting when the job succeeded: {w0:?}"
    );
    assert!(w0.iter().all(|e| e.kind != "DELETED"));
    for pod in ["pytest-master-0", "pytest-worker-1", "pytest-worker-2"] {
        assert_eq!(r.runs(pod), [0], "{pod}");
        assert_eq!(r.pod(pod).last().map(|e| e.status.clone()).as_deref(), Some("Completed"));
    }
}

#[test]
fn all_workers_failing_reach_the_backoff_limit_and_stop_the_master() {
    // Seed 000: each worker restarts once, 3 x 1 = backoffLimit 3 (PastBackoffLimit).
    let r = json_run(&example("pytorchjob-all-workers-fail.yaml"), &[]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Failed"], "{}", r.explain());
    for pod in &PODS[1..] {
        assert_eq!(r.runs(pod).first(), Some(&0), "{pod}");
        assert!(r.pod(pod).iter().any(|e| e.restarts == 1), "{pod} restarted once: {:?}", r.pod(pod));
    }
    let master = r.pod("pytest-master-0");
    assert!(master.iter().any(|e| e.status == "Terminating"), "{master:?}");
    assert!(master.iter().all(|e| e.status != "Completed"), "the master (sleep 3) was stopped early: {master:?}");
    for pod in PODS {
        assert_eq!(r.pod(pod).last().map(|e| e.kind.clone()).as_deref(), Some("DELETED"), "{pod}");
    }
    assert_eq!(r.podgroup().last().map(|g| g["type"].clone()), Some(Value::from("DELETED")));
    assert!(
        r.stderr.contains("Job pytest has failed because it has reached the specified backoff limit"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("all 3 Worker replica(s) failed"), "{}", r.stderr);
}

#[test]
fn master_failing_runs_through_its_restarts_then_fails_at_the_backoff_limit() {
    let r = json_run(&example("pytorchjob-master-fails.yaml"), &["--backoff-max", "1s"]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Failed"], "{}", r.explain());
    assert_eq!(r.runs("pytest-master-0"), [0, 1, 2, 3], "the master ran 1 + backoffLimit (3) times");
    let failed = r.job_time("Failed").expect("Failed");
    let last_start = r.pod("pytest-master-0").into_iter().find(|e| e.status == "Running" && e.restarts == 3);
    assert!(last_start.is_some_and(|e| e.at <= failed), "Running until the 3rd restart");
    for pod in PODS {
        assert_eq!(r.pod(pod).last().map(|e| e.kind.clone()).as_deref(), Some("DELETED"), "{pod}");
    }
    for pod in &PODS[1..] {
        assert!(r.pod(pod).iter().any(|e| e.status == "Completed"), "{pod} completed before the end");
    }
    assert_eq!(r.podgroup().last().map(|g| g["type"].clone()), Some(Value::from("DELETED")));
    assert!(r.stderr.contains("reached the specified backoff limit"), "{}", r.stderr);
}

#[test]
fn gang_that_does_not_fit_the_queue_starts_nothing() {
    let r = json_run(&example("pytorchjob-gang.yaml"), &["--queue-capability", "cpu=2", "--timeout", "1500ms"]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created"]);
    let statuses: Vec<Value> = r.podgroup().iter().map(|g| g["fields"]["status"].clone()).collect();
    assert_eq!(statuses, [Value::Null, Value::from("Inqueue")], "the PodGroup stays Inqueue");
    assert!(r.podgroup().iter().all(|g| g["fields"]["minMember"] == 4));
    for pod in PODS {
        let events = r.pod(pod);
        assert!(events.iter().all(|e| e.status == "Pending"), "{pod}: {events:?}");
    }
    assert!(r.of_kind("Pod").all(|e| e["fields"]["node"].is_null()), "no pod is placed");
    assert!(r.stderr.contains("capability cpu=2 but the job's 4 pods need cpu=4"), "{}", r.stderr);
    assert!(r.stderr.contains("timeout: the job did not settle within 1500ms (job Created)"), "{}", r.stderr);
}

#[test]
fn a_deleted_pod_is_recreated_with_zero_restarts() {
    let tmp = TestDir::new("dry-run-delete");
    let dir = tmp.path();
    let marker = dir.join("recreated");
    // The master fails twice, then waits; deleted at 4s, its new pod finds the marker and completes.
    let command = format!(
        "command: [\"sh\", \"-c\", \"if [ -e {m} ]; then sleep 0.5; exit 0; fi; if [ $RANKVISOR_RESTART_COUNT -ge 2 ]; then touch {m}; exec sleep 30; fi; sleep 0.2; exit 1\"]",
        m = marker.display()
    );
    // The workers outlive the deletion: they reconnect to the recreated master, whose barrier then
    // releases it (a recreated master whose workers have all finished would wait for them in vain).
    let text = example_text("pytorchjob.yaml")
        .replacen("command: [\"sh\", \"-c\", \"sleep 3\"]", &command, 1)
        .replace("command: [\"sh\", \"-c\", \"sleep 3\"]", "command: [\"sh\", \"-c\", \"sleep 7\"]");
    let manifest = tmp.write("job.yaml", &text);
    let r = json_run(&manifest, &["--backoff-max", "1s", "--inject", "delete:master-0@4s"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "a deletion is not a failure");
    let master = r.pod("pytest-master-0");
    let deleted = master.iter().position(|e| e.kind == "DELETED").expect("the master pod was deleted");
    assert!(master.get(..deleted).unwrap_or_default().iter().any(|e| e.status == "Terminating"));
    assert_eq!(master[deleted].restarts, 2, "deleted after two restarts: {master:?}");
    let recreated = &master[deleted + 1..];
    assert_eq!(recreated.first().map(|e| (e.kind.as_str(), e.restarts)), Some(("ADDED", 0)), "{master:?}");
    assert!(recreated.iter().all(|e| e.restarts == 0), "the new pod starts at RESTARTS 0: {recreated:?}");
    assert_eq!(recreated.last().map(|e| e.status.as_str()), Some("Completed"));
    assert!(r.stderr.contains("injected: pytest-master-0 is deleted"), "{}", r.stderr);
}

/// Issue 37 item 4: four replicas with `--checkpoint-signal SIGUSR1` (the pod template's env);
/// one pod is preempted (deleted gracefully: TERM to its launcher) -> every replica's training
/// process got SIGUSR1 and wrote its checkpoint before any got SIGTERM.
#[test]
fn a_preempted_pod_makes_every_replica_save_before_any_is_stopped() {
    let tmp = TestDir::new("dry-run-checkpoint");
    let dir = tmp.path().display().to_string();
    // Each saves on USR1 and records a TERM; all end once worker-1 got its TERM (the recreated
    // worker-1 ends at once).
    let script = tmp.write(
        "saver.sh",
        &format!(
            "trap 'date +%s%N > {dir}/saved-$POD_NAME' USR1\n\
             trap 'date +%s%N > {dir}/term-$POD_NAME; exit 0' TERM\n\
             [ -e {dir}/term-pytest-worker-1 ] && exit 0\n\
             i=0; while [ ! -e {dir}/term-pytest-worker-1 ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n"
        ),
    );
    let text = example_text("pytorchjob.yaml")
        .replace("command: [\"sh\", \"-c\", \"sleep 3\"]", &format!("command: [\"sh\", \"{}\"]", script.display()))
        .replace(
            "imagePullPolicy: IfNotPresent",
            "imagePullPolicy: IfNotPresent\n              env: [{name: RANKVISOR_CHECKPOINT_SIGNAL, value: SIGUSR1}]",
        );
    let manifest = tmp.write("job.yaml", &text);
    let r = json_run(&manifest, &["--grace-period", "4s", "--inject", "preempt:worker-1@3s"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(r.stderr.contains("injected: pytest-worker-1 is preempted"), "{}", r.stderr);
    let time = |name: &str| -> u128 {
        let text = std::fs::read_to_string(tmp.join(name)).unwrap_or_else(|e| panic!("{name}: {e}\n{}", r.explain()));
        text.trim().parse().unwrap_or_else(|e| panic!("{name}: {e}: {text:?}"))
    };
    let term = time("term-pytest-worker-1");
    for pod in PODS {
        assert!(time(&format!("saved-{pod}")) < term, "{pod} saved before pytest-worker-1 got SIGTERM");
        if pod != "pytest-worker-1" {
            assert!(!tmp.join(&format!("term-{pod}")).exists(), "{pod} was never stopped");
        }
    }
    let w1 = r.pod("pytest-worker-1");
    assert!(w1.iter().any(|e| e.status == "Terminating"), "deleted gracefully: {w1:?}");
}

#[test]
fn an_injected_failure_kills_the_training_process_and_it_restarts() {
    let r = json_run(&example("pytorchjob.yaml"), &["--inject", "fail:worker-1@1s"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.runs("pytest-worker-1"), [0, 1], "restarted under OnFailure");
    let w1 = r.pod("pytest-worker-1");
    assert!(w1.iter().any(|e| e.status == "Error" && e.restarts == 0), "{w1:?}");
    assert!(r.stderr.contains("injected: pytest-worker-1's training process fails (SIGKILL"), "{}", r.stderr);
}

#[test]
fn an_unhealthy_node_label_crash_loops_the_replica_until_the_backoff_limit() {
    // The launcher gives up (138) under OnFailure: a container crash the kubelet restarts in
    // place; the restarts reach backoffLimit 1 and the operator fails the job.
    let tmp = TestDir::new("dry-run-label");
    let text = example_text("pytorchjob.yaml").replace("backoffLimit: 3", "backoffLimit: 1");
    let manifest = tmp.write("job.yaml", &text);
    let r = json_run(&manifest, &["--inject", "label:worker-1@1s=UnschedulablePendingReboot"]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Failed"], "{}", r.explain());
    let w1 = r.pod("pytest-worker-1");
    assert!(w1.iter().all(|e| e.status != "Completed"), "stopped before its 3s were over: {w1:?}");
    assert!(w1.iter().any(|e| e.status == "Error" && e.kind == "MODIFIED"), "{w1:?}");
    assert!(r.stderr.contains("reached the specified backoff limit"), "{}", r.stderr);
    assert!(r.stderr.contains("UnschedulablePendingReboot"), "{}", r.stderr);
}

#[test]
fn replicas_get_the_operators_env_an_unblocked_signal_mask_and_their_own_log_file() {
    let tmp = TestDir::new("dry-run-env");
    let dir = tmp.path();
    let logs = dir.join("logs");
    let command = "command: [\"sh\", \"-c\", \"env | grep -E '^(RANK|WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PET_[A-Z_]+)=' | sort; grep -E '^Sig(Blk|Ign)' /proc/self/status\"]";
    let text = example_text("pytorchjob.yaml").replace("command: [\"sh\", \"-c\", \"sleep 3\"]", command);
    let manifest = tmp.write("job.yaml", &text);
    let out = Command::new(common::bin())
        .args(["dry-run", "--watch", "job", "--master-port", "0", "--logs"])
        .arg(&logs)
        .arg(&manifest)
        .env("RANK", "99")
        .env("PET_STRAY", "from the shell")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("NAME"), "text output with a header: {stdout}");
    assert!(stdout.contains("Succeeded"), "{stdout}");
    let worker = std::fs::read_to_string(logs.join("pytest-worker-1.log")).expect("worker-1's log");
    for want in ["RANK=2\n", "WORLD_SIZE=4\n", "MASTER_ADDR=127.0.0.1\n", "PET_NNODES=4\n", "PET_NODE_RANK=2\n"] {
        assert!(worker.contains(want), "{want:?} in\n{worker}");
    }
    assert!(!worker.contains("PET_STRAY"), "the shell's contract variables stay out: {worker}");
    assert!(!worker.contains("MASTER_PORT=23456"), "--master-port 0 picked another port: {worker}");
    // The dry run hands its launchers the mask it inherited (the launcher restores that in its
    // child), not the everything-blocked mask rankvisor sets up first.
    assert!(worker.contains("SigBlk:\t0000000000000000"), "{worker}");
    let master = std::fs::read_to_string(logs.join("pytest-master-0.log")).expect("master's log");
    assert!(master.contains("RANK=0\n"), "{master}");
}

#[test]
fn replica_output_is_prefixed_with_its_pod() {
    let tmp = TestDir::new("dry-run-prefix");
    let command = "command: [\"sh\", \"-c\", \"echo hello from rank $RANK; echo oops >&2\"]";
    let text = example_text("pytorchjob.yaml").replace("command: [\"sh\", \"-c\", \"sleep 3\"]", command);
    let manifest = tmp.write("job.yaml", &text);
    let r = dry_run(&["--watch", "pods", manifest.to_str().unwrap_or_default()]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(r.stderr.contains("pytest-worker-2 | hello from rank 3\n"), "{}", r.stderr);
    assert!(r.stderr.contains("pytest-master-0 | oops\n"), "{}", r.stderr);
    assert!(r.stdout.lines().skip(1).all(|l| l.starts_with("pytest-")), "only pod rows on stdout: {}", r.stdout);
}

/// The pids of processes whose command line is exactly `cmdline` (arguments joined by spaces).
fn processes_running(cmdline: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let args: Vec<String> = c
                    .split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                args.join(" ") == cmdline
            })
        })
        .collect()
}

/// Kills the dry run if the test fails before it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn ctrl_c_stops_every_replica_and_exits_130() {
    let tmp = TestDir::new("dry-run-interrupt");
    // A sleep no other test (or earlier run) uses, to count this run's replicas exactly.
    let sleep = format!("sleep 41.{}", std::process::id());
    let text = example_text("pytorchjob.yaml").replace("sleep 3", &sleep);
    let manifest = tmp.write("job.yaml", &text);
    let mut run = KillOnDrop(
        Command::new(common::bin())
            .args(["dry-run", "--output", "json", "--watch", "job", "--timeout", "50s"])
            .arg(&manifest)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let stdout = run.0.stdout.take().expect("stdout");
    let running = BufReader::new(stdout).lines().map_while(Result::ok).any(|l| l.contains("\"state\":\"Running\""));
    assert!(running, "the job ran");
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_running(&sleep).len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(processes_running(&sleep).len(), 4, "every replica runs");
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(run.0.id() as i32, libc::SIGINT) };
    let mut stderr = String::new();
    if let Some(mut e) = run.0.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    let status = run.0.wait().expect("wait");
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("SIGINT: the dry run ends here (job Running)"), "{stderr}");
    assert!(processes_running(&sleep).is_empty(), "no replica is left behind");
}

/// Admission: the operator's webhook messages, exit 64, nothing started.
fn refused(test: &str, text: &str) -> DryRun {
    let tmp = TestDir::new(&format!("dry-run-{test}"));
    let manifest = tmp.write("job.yaml", text);
    let r = dry_run(&[manifest.to_str().unwrap_or_default()]);
    assert_eq!(r.code, 64, "{}", r.explain());
    assert!(r.stdout.is_empty(), "nothing is watched: {}", r.stdout);
    assert!(!r.stderr.contains("images are not pulled"), "nothing is started: {}", r.stderr);
    r
}

#[test]
fn admission_refuses_two_masters() {
    let text = example_text("pytorchjob.yaml").replace("replicas: 1 # must be 1", "replicas: 2");
    let r = refused("two-masters", &text);
    assert!(r.stderr.contains("admission webhook \"validator.pytorchjob.training-operator.kubeflow.org\" denied the request: spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1"), "{}", r.stderr);
}

#[test]
fn admission_refuses_a_container_not_named_pytorch() {
    let text = example_text("pytorchjob.yaml").replacen("- name: pytorch", "- name: trainer", 1);
    let r = refused("container-name", &text);
    assert!(
        r.stderr.contains("spec.pytorchReplicaSpecs[Master].template.spec.containers: Required value: must have at least one container with name pytorch"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_unknown_restart_policy_is_admitted_but_its_pods_cannot_be_created() {
    let text = example_text("pytorchjob.yaml").replacen("restartPolicy: OnFailure", "restartPolicy: Sometimes", 1);
    let r = refused("restart-policy", &text);
    assert!(!r.stderr.contains("denied the request"), "the webhook admits it: {}", r.stderr);
    assert!(
        r.stderr.contains("the operator cannot create any pod of replica type Master: the apiserver refuses its spec.restartPolicy: Unsupported value: \"Sometimes\""),
        "{}",
        r.stderr
    );
}

#[test]
fn malformed_yaml_is_refused_with_its_position() {
    let text = example_text("pytorchjob.yaml").replace("  runPolicy:\n", "  runPolicy: [\n");
    let r = refused("malformed", &text);
    assert!(r.stderr.contains("error parsing ") && r.stderr.contains("line "), "{}", r.stderr);
}

#[test]
fn bad_options_exit_64() {
    let job = example("pytorchjob.yaml");
    let job = job.to_str().unwrap_or_default();
    let r = dry_run(&["--inject", "crash:worker-1@1s", job]);
    assert_eq!(r.code, 64, "{}", r.explain());
    assert!(r.stderr.contains("invalid fault injection \"crash:worker-1@1s\": unknown fault kind"), "{}", r.stderr);
    let r = dry_run(&["--inject", "fail:worker-7@1s", job]);
    assert_eq!(r.code, 64, "{}", r.explain());
    assert!(r.stderr.contains("the job has no replica worker-7"), "{}", r.stderr);
    for bad in [["--output", "yaml"], ["--watch", "nodes"], ["--queue-capability", "cpu"], ["--timeout", "soon"]] {
        let r = dry_run(&[bad[0], bad[1], job]);
        assert_eq!(r.code, 64, "{bad:?}: {}", r.explain());
    }
    let r = dry_run(&["--backoff-initial", "5s", "--backoff-max", "1s", job]);
    assert_eq!(r.code, 64, "{}", r.explain());
    assert!(r.stderr.contains("--backoff-max (1s) is shorter than --backoff-initial (5s)"), "{}", r.stderr);
    let r = dry_run(&["/no/such/job.yaml"]);
    assert_eq!(r.code, 64, "{}", r.explain());
    assert!(r.stderr.contains("cannot read manifest /no/such/job.yaml"), "{}", r.stderr);
}

/// A job in the shape of Kubeflow's examples: no command (the image's entrypoint), args and
/// paths inside the image.
const IMAGE_ENTRYPOINT_JOB: &str = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: entry\nspec:\n  pytorchReplicaSpecs:\n    Master:\n      replicas: 1\n      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: example/trainer:latest\n              args: [\"/workspace/data\"]\n    Worker:\n      replicas: 1\n      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: example/trainer:latest\n              args: [\"/workspace/data\"]\n";

#[test]
fn an_image_entrypoint_is_named_then_given_with_command_and_path_map() {
    let tmp = TestDir::new("dry-run-entrypoint");
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("data")).expect("data dir");
    std::fs::write(dir.join("data").join("hello"), "hi").expect("data file");
    let manifest = tmp.write("job.yaml", IMAGE_ENTRYPOINT_JOB);
    let path = manifest.to_str().unwrap_or_default();
    let r = dry_run(&[path]);
    assert_eq!(r.code, 64, "{}", r.explain());
    assert!(
        r.stderr.contains("replica type Master runs the entrypoint of image \"example/trainer:latest\", which the dry run cannot run (it pulls no image): give its command with --command Master='...'"),
        "{}",
        r.stderr
    );
    let map = format!("/workspace={}", dir.display());
    let r = json_run(
        &manifest,
        &["--command", "Master=cat \"$1\"/hello; echo", "--command", "worker=ls", "--path-map", &map],
    );
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    assert!(r.stderr.contains("entry-master-0 | hi"), "the args follow the command, mapped: {}", r.stderr);
    assert!(r.stderr.contains("entry-worker-0 | hello"), "{}", r.stderr);
}

#[test]
fn the_k8s_example_runs_with_its_downward_api_env_and_rankvisor_as_its_command() {
    // examples/k8s/pytorchjob.yaml: valueFrom.fieldRef env, and /rankvisor ... -- as the command.
    let tmp = TestDir::new("dry-run-k8s-example");
    let dir = tmp.path();
    let logs = dir.join("logs");
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/k8s/pytorchjob.yaml"))
        .expect("examples/k8s/pytorchjob.yaml")
        .replace("namespace: default", "namespace: research")
        .replace(
            "args: [\"sh\", \"-c\", \"sleep 30s\"]",
            "args: [\"sh\", \"-c\", \"env | grep -E '^(POD_NAME|POD_NAMESPACE|NODE_NAME)=' | sort\"]",
        );
    let manifest = tmp.write("job.yaml", &text);
    let (code, stderr) = logged_dry_run(&["--watch", "job", "--timeout", "50s"], &logs, &manifest);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("Master's command is rankvisor itself (/rankvisor)"), "{stderr}");
    assert!(stderr.contains("warning: not emulated here: ") && stderr.contains("livenessProbe"), "{stderr}");
    let worker = std::fs::read_to_string(logs.join("pytest-worker-1.log")).expect("worker-1's log");
    for want in ["NODE_NAME=localhost\n", "POD_NAME=pytest-worker-1\n", "POD_NAMESPACE=research\n"] {
        assert!(worker.contains(want), "{want:?} in\n{worker}");
    }
}

/// Issue 24 item 4: nothing runs here, so a CI script must not read Succeeded: 64, the dry run's
/// code for a job it cannot run (as for pods the apiserver would refuse), before anything starts.
#[test]
fn a_job_managed_by_another_controller_is_refused_with_64() {
    let text = example_text("pytorchjob.yaml")
        .replace("  runPolicy:\n", "  runPolicy:\n    managedBy: kueue.x-k8s.io/multikueue\n");
    let r = refused("managed-by", &text);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {}", r.stderr);
    assert!(
        lines[0].contains("spec.runPolicy.managedBy is \"kueue.x-k8s.io/multikueue\": the training operator leaves this job to that controller"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_suspended_job_starts_once_resumed() {
    let text = example_text("pytorchjob.yaml").replace("  runPolicy:\n", "  runPolicy:\n    suspend: true\n");
    let tmp = TestDir::new("dry-run-suspend");
    let manifest = tmp.write("job.yaml", &text);
    // Its own free port: the launchers start a second after the port was chosen.
    let r = json_run(&manifest, &["--inject", "resume:job@1s", "--master-port", "0"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Suspended", "Running", "Succeeded"], "{}", r.explain());
    let resumed = r.stderr.find("PyTorchJob pytest is resumed.").expect("resumed");
    assert!(r.stderr.find("is suspended").is_some_and(|s| s < resumed), "{}", r.stderr);
}

#[test]
fn the_active_deadline_fails_the_job_and_deletes_its_pods() {
    let text =
        example_text("pytorchjob.yaml").replace("  runPolicy:\n", "  runPolicy:\n    activeDeadlineSeconds: 1\n");
    let tmp = TestDir::new("dry-run-deadline");
    let manifest = tmp.write("job.yaml", &text);
    let r = json_run(&manifest, &[]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Failed"], "{}", r.explain());
    for pod in PODS {
        assert_eq!(r.pod(pod).last().map(|e| e.kind.clone()).as_deref(), Some("DELETED"), "{pod}");
        assert!(r.pod(pod).iter().all(|e| e.status != "Completed"), "{pod} stopped before its 3s");
    }
    assert!(
        r.stderr.contains("Job pytest has failed because it was active longer than specified deadline"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_never_worker_failing_fails_the_job_and_clean_pod_policy_none_keeps_the_rest_running() {
    let text = example_text("pytorchjob-worker-fails.yaml").replace(
        "    Worker:\n      replicas: 3\n      restartPolicy: OnFailure",
        "    Worker:\n      replicas: 3\n      restartPolicy: Never",
    );
    let tmp = TestDir::new("dry-run-never");
    let manifest = tmp.write("job.yaml", &text);
    let r = json_run(&manifest, &[]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Failed"], "{}", r.explain());
    assert!(r.stderr.contains("PyTorchJob pytest is failed because 1 Worker replica(s) failed."), "{}", r.stderr);
    let failed = r.job_time("Failed").expect("Failed");
    let master = r.pod("pytest-master-0");
    assert!(
        master.iter().any(|e| e.status == "Completed" && e.at > failed),
        "the master ran on after the job failed: {master:?}"
    );
    assert!(r.of_kind("Pod").all(|e| e["type"] != "DELETED"), "cleanPodPolicy None keeps every pod");
}

/// Kubeflow's elastic echo job's shape: no Master, an elasticPolicy, torchrun's rendezvous.
const ELASTIC_WORKERS: &str = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: echo\nspec:\n  elasticPolicy:\n    rdzvBackend: c10d\n    minReplicas: 1\n    maxReplicas: 2\n    maxRestarts: 100\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: echo\n              command: [\"sh\", \"-c\", \"env | grep -E '^(RANK|WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PET_[A-Z_]+)=' | sort\"]\n";

#[test]
fn a_worker_only_elastic_job_runs_under_real_launchers_with_the_operators_exact_env() {
    let tmp = TestDir::new("dry-run-elastic");
    let dir = tmp.path();
    let logs = dir.join("logs");
    let manifest = tmp.write("job.yaml", ELASTIC_WORKERS);
    // Its own free port (the rendezvous endpoint's), as parallel tests share the machine.
    let (code, stderr) =
        logged_dry_run(&["--output", "json", "--timeout", "50s", "--master-port", "0"], &logs, &manifest);
    assert_eq!(code, Some(0), "{stderr}");
    let worker = std::fs::read_to_string(logs.join("echo-worker-1.log")).expect("worker-1's log");
    let env: Vec<&str> = worker.lines().filter(|l| !l.contains("[rankvisor]")).collect();
    let endpoint = env.iter().find_map(|l| l.strip_prefix("PET_RDZV_ENDPOINT=127.0.0.1:"));
    assert!(endpoint.is_some_and(|p| p.parse::<u16>().is_ok()), "the endpoint is on this machine: {worker}");
    let rest: Vec<&str> = env.iter().copied().filter(|l| !l.starts_with("PET_RDZV_ENDPOINT=")).collect();
    assert_eq!(
        rest,
        ["PET_MAX_RESTARTS=100", "PET_NNODES=1:2", "PET_NPROC_PER_NODE=auto", "PET_RDZV_BACKEND=c10d"],
        "no MASTER_ADDR, MASTER_PORT, WORLD_SIZE or RANK without a Master:\n{worker}"
    );
}

#[test]
fn a_normal_completion_prints_no_warnings() {
    let r = json_run(&example("pytorchjob.yaml"), &[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    let warnings: Vec<&str> = r.stderr.lines().filter(|l| l.contains("WARN") || l.contains("warning")).collect();
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn what_a_local_run_cannot_do_is_said_in_one_line() {
    // The shapes of Kubeflow's examples: a script relative to the image's WORKDIR (elastic echo,
    // cpu-demo), a GPU limit (mnist nccl, deepspeed), the HPA's metrics (elastic imagenet).
    let tmp = TestDir::new("dry-run-cannot");
    let script_job = IMAGE_ENTRYPOINT_JOB.replace("args: [\"/workspace/data\"]", "command: [python3, ./train.py]");
    let manifest = tmp.write("script.yaml", &script_job);
    let r = dry_run(&[manifest.to_str().unwrap_or_default()]);
    assert_eq!(r.code, 64, "{}", r.explain());
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    assert!(
        lines[0].contains("replica type Master runs ./train.py from its working directory (image \"example/trainer:latest\"'s WORKDIR, unknown here)"),
        "{}",
        r.stderr
    );

    let gpu_job = ELASTIC_WORKERS
        .replace("    maxRestarts: 100\n", "    maxRestarts: 100\n    metrics: []\n")
        .replace(
            "              image: echo\n",
            "              image: echo\n              resources: {limits: {nvidia.com/gpu: 1}}\n",
        )
        .replace("replicas: 2", "replicas: 1")
        .replace("minReplicas: 1\n    maxReplicas: 2", "minReplicas: 1\n    maxReplicas: 1");
    let manifest = tmp.write("gpu.yaml", &gpu_job);
    let r = json_run(&manifest, &["--timeout", "1s"]);
    let warnings: Vec<&str> = r.stderr.lines().filter(|l| l.contains("warning: not emulated here:")).collect();
    assert_eq!(warnings.len(), 1, "one line: {}", r.stderr);
    assert!(
        warnings[0].contains("spec.elasticPolicy.metrics (the operator's HorizontalPodAutoscaler)"),
        "{}",
        r.stderr
    );
    assert!(warnings[0].contains("resources.limits[nvidia.com/gpu] (counted against --queue-capability; no device is given to a local process)"), "{}", r.stderr);
}

/// Issue 15: hostile manifests are refused at once (exit 64, naming why): a device that streams
/// forever, a FIFO that blocks, an oversized file, flow nesting that is quadratic to parse, and an
/// alias bomb that amplifies a 100 KB file into gigabytes.
#[test]
fn hostile_manifests_are_refused_without_hanging_or_growing() {
    let tmp = TestDir::new("dry-run-hostile");
    let fifo = tmp.path().join("fifo.yaml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo takes a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let big = tmp.write("big.yaml", &format!("# {}\n", "x".repeat(2 * 1024 * 1024)));
    let nested = tmp.write("nested.yaml", &"[".repeat(50_000));
    let bomb = tmp.write("bomb.yaml", &format!("a: &a {}\nb: [{}]\n", "x".repeat(100_000), vec!["*a"; 100].join(",")));
    let cases = [
        ("/dev/zero".to_string(), "is a character device: expected a regular file"),
        (fifo.to_string_lossy().into_owned(), "is a FIFO (named pipe): expected a regular file"),
        (big.to_string_lossy().into_owned(), "larger than 1048576 bytes"),
        (nested.to_string_lossy().into_owned(), "nested 50000 levels deep: expected at most 64"),
        (bomb.to_string_lossy().into_owned(), "uses 100 YAML aliases: expected at most 64"),
    ];
    for (path, why) in cases {
        let r = dry_run(&[&path]);
        assert_eq!(r.code, 64, "{path}: {}", r.explain());
        assert!(r.stderr.contains(why), "{path}: {}", r.stderr);
    }
}

/// Issue 24 item 1: a Worker-only job without an elasticPolicy gets no MASTER_ADDR; its workers
/// meet at `<job>-worker-0`, which the dry run resolves on this machine as it does the master.
const WORKERS_ONLY: &str = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: wonly\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 2\n      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: busybox\n              command: [\"sh\", \"-c\", \"echo nnodes=$PET_NNODES master=${MASTER_ADDR:-none}; sleep 1\"]\n";

#[test]
fn a_worker_only_job_without_elastic_policy_meets_at_worker_0_and_succeeds_once_every_worker_has() {
    let tmp = TestDir::new("dry-run-workers-only");
    let manifest = tmp.write("job.yaml", WORKERS_ONLY);
    let r = json_run(&manifest, &["--timeout", "30s"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    for pod in ["wonly-worker-0", "wonly-worker-1"] {
        assert!(r.stderr.contains(&format!("{pod} | nnodes=2 master=none")), "no MASTER_ADDR: {}", r.stderr);
        assert_eq!(r.pod(pod).last().map(|e| e.status.clone()).as_deref(), Some("Completed"), "{pod}");
    }
    assert!(r.stderr.contains("PyTorchJob default/wonly successfully completed."), "{}", r.stderr);
}

/// Issue 24 item 2: under ExitCode the pod's own policy is Never (`SetRestartPolicy`): a retryable
/// exit (143) fails the pod, the operator deletes it and creates a new one (RESTARTS 0), and the
/// job shows Restarting; the launcher does not restart the child in place.
#[test]
fn an_exit_code_worker_failing_with_a_retryable_code_gets_a_new_pod_not_a_restart() {
    let tmp = TestDir::new("dry-run-exit-code");
    let marker = tmp.path().join("failed-once");
    let mut text = example_text("pytorchjob.yaml").replace(
        "    Worker:\n      replicas: 3\n      restartPolicy: OnFailure",
        "    Worker:\n      replicas: 3\n      restartPolicy: ExitCode",
    );
    let sleep = "command: [\"sh\", \"-c\", \"sleep 3\"]";
    let at = text.rfind(sleep).expect("the Worker's command");
    let worker = format!(
        "command: [\"sh\", \"-c\", \"case $POD_NAME in *-worker-0) [ -e {m} ] || {{ touch {m}; exit 143; }};; esac; sleep 1\"]",
        m = marker.display()
    );
    text.replace_range(at..at + sleep.len(), &worker);
    let manifest = tmp.write("job.yaml", &text);
    let r = json_run(&manifest, &[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    let states = r.job_states();
    assert!(states.contains(&"Restarting".to_string()), "{}", r.explain());
    assert_eq!(states.last().map(String::as_str), Some("Succeeded"), "{}", r.explain());
    let w0 = r.pod("pytest-worker-0");
    assert!(w0.iter().all(|e| e.restarts == 0), "never restarted in place: {w0:?}");
    let deleted = w0.iter().position(|e| e.kind == "DELETED").expect("the failed pod is deleted");
    assert_eq!(w0[deleted].status, "Error", "{w0:?}");
    assert_eq!(w0.get(deleted + 1).map(|e| e.kind.as_str()), Some("ADDED"), "a new pod: {w0:?}");
    assert_eq!(w0.last().map(|e| e.status.as_str()), Some("Completed"), "{w0:?}");
}

/// Issue 24 item 3 (the Kubeflow SDK's e2e test for an unschedulable gang, minAvailable 10 for a
/// smaller job): Volcano's gang plugin never lets the PodGroup's pods be bound.
#[test]
fn a_gang_that_cannot_form_keeps_every_pod_pending_until_the_timeout() {
    let text = example_text("pytorchjob.yaml")
        .replace("  runPolicy:\n", "  runPolicy:\n    schedulingPolicy:\n      minAvailable: 10\n");
    let tmp = TestDir::new("dry-run-gang-too-big");
    let manifest = tmp.write("job.yaml", &text);
    let r = json_run(&manifest, &["--timeout", "1500ms"]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created"], "{}", r.explain());
    let statuses: Vec<Value> = r.podgroup().iter().map(|g| g["fields"]["status"].clone()).collect();
    assert_eq!(statuses, [Value::Null, Value::from("Inqueue")], "{}", r.explain());
    assert!(r.podgroup().iter().all(|g| g["fields"]["minMember"] == 10));
    for pod in PODS {
        assert!(r.pod(pod).iter().all(|e| e.status == "Pending"), "{pod}: {:?}", r.pod(pod));
    }
    assert!(r.of_kind("Pod").all(|e| e["fields"]["node"].is_null()), "no pod is placed");
    let why: Vec<&str> = r.stderr.lines().filter(|l| l.contains("minMember 10")).collect();
    assert_eq!(why.len(), 1, "one line saying why: {}", r.stderr);
    assert!(why[0].contains("Not enough valid tasks for gang-scheduling, valid: 4, min: 10"), "{}", r.stderr);
    assert!(r.stderr.contains("timeout: the job did not settle within 1500ms (job Created)"), "{}", r.stderr);
}

/// Issue 24 item 7: the apiserver refuses a pod whose containerPort is outside 1-65535, so the
/// operator never creates one: refused before anything starts, naming the field and the value.
#[test]
fn a_container_port_outside_1_to_65535_is_refused_naming_field_and_value() {
    let sleep = "              command: [\"sh\", \"-c\", \"sleep 3\"]\n";
    for (port, detail) in [
        (
            "70000",
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
        ),
        ("0", "spec.containers[0].ports[0].containerPort: Required value"),
        ("-1", "spec.containers[0].ports[0].containerPort: Invalid value: -1: must be between 1 and 65535, inclusive"),
    ] {
        let ports = format!("{sleep}              ports: [{{name: pytorchjob-port, containerPort: {port}}}]\n");
        let r = refused("container-port", &example_text("pytorchjob.yaml").replacen(sleep, &ports, 1));
        let lines: Vec<&str> = r.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {}", r.stderr);
        assert!(lines[0].contains("cannot create any pod of replica type Master"), "{}", r.stderr);
        assert!(lines[0].contains(detail), "{port}: {}", r.stderr);
    }
}

/// Issue 24 item 7: the CRD's schema sets no minimum on backoffLimit, so the apiserver stores -1;
/// the operator's first reconcile finds 0 restarts >= -1 (`PastBackoffLimit`) and fails the job
/// before it creates a PodGroup or a pod.
#[test]
fn a_negative_backoff_limit_fails_the_job_at_its_first_reconcile_before_any_pod() {
    let text = example_text("pytorchjob.yaml").replace("backoffLimit: 3", "backoffLimit: -1");
    let tmp = TestDir::new("dry-run-negative-backoff");
    let manifest = tmp.write("job.yaml", &text);
    let r = json_run(&manifest, &[]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Failed"], "{}", r.explain());
    assert_eq!(r.of_kind("Pod").count(), 0, "no pod is created: {}", r.explain());
    assert_eq!(r.podgroup().len(), 0, "no PodGroup: {}", r.explain());
    let why: Vec<&str> = r.stderr.lines().filter(|l| l.contains("backoffLimit is -1")).collect();
    assert_eq!(why.len(), 1, "one line saying what happens: {}", r.stderr);
    assert!(why[0].contains("PastBackoffLimit"), "{}", r.stderr);
    assert!(
        r.stderr.contains("Job pytest has failed because it has reached the specified backoff limit"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("[rankvisor]"), "no launcher started: {}", r.stderr);
}

/// Issue 34: the apiserver refuses a pod whose imagePullPolicy it does not know, so the operator
/// never creates one: refused before anything starts, naming the field and the value.
#[test]
fn an_unknown_image_pull_policy_is_refused_naming_field_and_value() {
    let text =
        example_text("pytorchjob.yaml").replacen("imagePullPolicy: IfNotPresent", "imagePullPolicy: Sometimes", 1);
    let r = refused("pull-policy", &text);
    assert!(
        r.stderr.contains("cannot create any pod of replica type Master: the apiserver refuses its spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\""),
        "{}",
        r.stderr
    );
}

/// Issue 37 item 2: seed 000's job at the dry run's cap, 1,024 replicas (a master and 1,023
/// workers), one real launcher each, runs to Succeeded and every pod completes. In the full tier
/// only (.config/nextest.toml): it starts 2,048 processes. Its wall time and memory are figures
/// for docs/benchmarks.md (`/usr/bin/time -v` on the same manifest), not asserted here.
#[test]
fn a_job_of_1024_replicas_succeeds() {
    let tmp = TestDir::new("dry-run-1024");
    let text = example_text("pytorchjob.yaml").replace("replicas: 3", "replicas: 1023").replace("sleep 3", "sleep 1");
    let manifest = tmp.write("job.yaml", &text);
    let r = json_run(&manifest, &["--timeout", "300s"]);
    assert_eq!(r.code, 0, "{}", r.stderr.get(..4000).unwrap_or(&r.stderr));
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"]);
    let mut last: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    for e in r.of_kind("Pod") {
        let (name, status) =
            (e["name"].as_str().unwrap_or_default(), e["fields"]["status"].as_str().unwrap_or_default());
        last.insert(name.to_string(), status.to_string());
    }
    assert_eq!(last.len(), 1024, "one pod per replica");
    let done = last.values().filter(|s| *s == "Completed").count();
    assert_eq!(
        done,
        1024,
        "every pod completed: {:?}",
        last.iter().filter(|(_, s)| *s != "Completed").take(5).collect::<Vec<_>>()
    );
}

/// Issue 34: a job of the largest size the dry run takes (256 pods) is created one pod at a time,
/// and SIGTERM is heard between two: the dry run stops where it is, starts no further pod, and
/// leaves no launcher or training process behind.
///
/// Handshake: worker 0's log is a FIFO, so the dry run blocks creating worker 0 until the test
/// opens it; the test sends SIGTERM once the master (created before it) has its log, and only
/// then opens the FIFO. The signal is pending before worker 0's start can finish, so the dry run
/// must see it before it creates worker 1.
#[test]
fn sigterm_while_creating_pods_stops_at_once_and_leaves_no_launcher() {
    let tmp = TestDir::new("dry-run-term-creating");
    let sleep = format!("sleep 43.{}", std::process::id());
    let text = format!(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: big\nspec:\n  pytorchReplicaSpecs:\n    Master:\n      replicas: 1\n      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: busybox\n              command: [\"sh\", \"-c\", \"echo up; exec {sleep}\"]\n    Worker:\n      replicas: 255\n      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: busybox\n              command: [\"sh\", \"-c\", \"exec {sleep}\"]\n"
    );
    let manifest = tmp.write("job.yaml", &text);
    let logs = tmp.path().join("logs");
    std::fs::create_dir(&logs).expect("logs dir");
    let fifo = logs.join("big-worker-0.log");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8 path")).expect("path");
    // SAFETY: mkfifo takes a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut run = KillOnDrop(
        Command::new(common::bin())
            .args(["dry-run", "--timeout", "50s", "--master-port", "0", "--grace-period", "2s", "--logs"])
            .arg(&logs)
            .arg(&manifest)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    // The master's log is created as its pod is: the dry run is creating pods.
    let deadline = Instant::now() + common::HANG_GUARD;
    while !logs.join("big-master-0.log").exists() {
        assert!(Instant::now() < deadline, "the master was never created");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(run.0.id() as i32, libc::SIGTERM) };
    // Only now can worker 0's start finish. Its launcher's few lines fit in the FIFO's buffer;
    // the read end stays open until the dry run ended.
    let fifo_reader =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo).expect("open the FIFO");
    let mut stderr = String::new();
    if let Some(mut e) = run.0.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    let status = run.0.wait().expect("wait");
    drop(fifo_reader);
    assert_eq!(status.code(), Some(143), "{stderr}");
    let stopping = stderr
        .lines()
        .find(|l| l.contains("SIGTERM: the dry run ends here"))
        .unwrap_or_else(|| panic!("no SIGTERM note: {stderr}"));
    assert!(
        stopping.contains("stopping 1 launcher(s)") || stopping.contains("stopping 2 launcher(s)"),
        "the master and at most worker 0: {stderr}"
    );
    let created: Vec<String> = std::fs::read_dir(&logs)
        .expect("logs")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        created.iter().all(|f| f == "big-master-0.log" || f == "big-worker-0.log"),
        "no pod is created after the signal: {created:?} {stderr}"
    );
    assert!(processes_running(&sleep).is_empty(), "no replica is left behind: {stderr}");
}

/// Issue 34: a launcher that cannot be started is a container that fails to start: the pod
/// fails and the kubelet restarts it with its backoff (at once, then 1s, 2s... here), never in a
/// tight loop.
#[test]
fn a_launcher_that_cannot_start_fails_its_pod_and_is_retried_with_backoff() {
    let tmp = TestDir::new("dry-run-spawn-fails");
    let missing = tmp.path().join("no-such-rankvisor");
    let manifest =
        tmp.write("job.yaml", &example_text("pytorchjob.yaml").replace("backoffLimit: 3", "backoffLimit: 100"));
    let r = json_run(
        &manifest,
        &[
            "--launcher",
            missing.to_str().expect("utf-8"),
            "--timeout",
            "3500ms",
            "--backoff-initial",
            "1s",
            "--backoff-max",
            "1s",
        ],
    );
    assert_eq!(r.code, 1, "the job never succeeds: {}", r.explain());
    let starts = r.stderr.matches("cannot start the launcher of pytest-master-0").count();
    // At 0s, at once again (the kubelet's first restart), then once a second: 5 by 3.5s at most.
    assert!((2..=5).contains(&starts), "{starts} starts: {}", r.explain());
    let statuses: Vec<String> = r.pod("pytest-master-0").into_iter().map(|p| p.status).collect();
    assert!(statuses.iter().any(|s| s == "Error"), "{statuses:?}");
    assert!(statuses.iter().any(|s| s == "CrashLoopBackOff"), "{statuses:?}");
}

/// Three replicas: ranks 0 and 1 print a step every 0.2 s in `wait_here`; rank 2 prints one in
/// `slow_here`, then sleeps (first run only); after the restart the master exits 0.
const STACKS_PY: &str = "import os, sys, time\n\
RESTARTS = os.environ.get('RANKVISOR_RESTART_COUNT', '0')\n\
def wait_here():\n    while True:\n        time.sleep(0.2)\n        print('step', flush=True)\n\
def slow_here():\n    print('step', flush=True)\n    time.sleep(600)\n\
if RESTARTS != '0' and os.environ['RANK'] == '0':\n    sys.exit(0)\n\
if os.environ['RANK'] == '2' and RESTARTS == '0':\n    slow_here()\n\
wait_here()\n";

/// Issue 36 item 6: under `--restart-scope job`, a worker's log rule HANGING restarts the job, and
/// the dry run prints the master's grouped stacks: replica 2 in `slow_here` with its line, apart
/// from the others.
#[test]
fn a_job_scope_hang_restart_prints_the_grouped_stacks() {
    let dir = common::TestDir::new("dry-run-stacks");
    let script = dir.write("job.py", STACKS_PY);
    let rules = dir.write(
        "rules.json",
        r#"[{"name": "Step", "logPattern": ".*step.*", "expectedRecurringFrequencyInSeconds": 1}]"#,
    );
    let container = |env: &str| {
        format!(
            "      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: python:3.11\n{env}              command: [\"python3\", \"{}\"]\n",
            script.display()
        )
    };
    let worker_env = format!(
        "              env:\n                - name: RANKVISOR_LOG_RULES\n                  value: \"{}\"\n",
        rules.display()
    );
    let manifest = dir.write(
        "job.yaml",
        &format!(
            "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: stk\nspec:\n  pytorchReplicaSpecs:\n    Master:\n      replicas: 1\n{}    Worker:\n      replicas: 2\n{}",
            container(""),
            container(&worker_env)
        ),
    );
    let r = json_run(&manifest, &["--restart-scope", "job"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    let line = r.stderr.lines().find(|l| l.contains("job stacks (replica 2: LogHang_Step)")).unwrap_or_else(|| {
        panic!("no job stacks line: {}", r.stderr);
    });
    assert!(line.contains("replica 2: slow_here (job.py:9) <- <module> (job.py:13)"), "{line}");
    assert!(line.contains("2 replicas (0, 1): wait_here (job.py:5) <- <module> (job.py:14)"), "{line}");
}

/// Issue 36 item 6: stragglers under a dry run. Three replicas log their throughput every 50 ms
/// (`--straggler-rule` by env, as a manifest would set it); rank 2 logs 60 samples/s, the others
/// 100: the dry run prints the master's verdict naming rank 2's pod, and `--timeline` marks it on
/// that pod's lane. The job then succeeds.
#[test]
fn a_straggler_is_named_on_stderr_and_on_the_timeline() {
    let dir = common::TestDir::new("dry-run-straggler");
    let rules = dir.write(
        "rules.json",
        r#"[{"name": "throughput", "logPattern": ".*samples/s: (\\S+)", "metricThreshold": 0, "operator": "lt"}]"#,
    );
    let script = "v=100; [ \"$RANK\" = 2 ] && v=60; i=0; while [ $i -lt 60 ]; do echo \"step samples/s: $v\"; sleep 0.05; i=$((i+1)); done";
    let container = format!(
        "      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: busybox\n              env:\n                - name: RANKVISOR_LOG_RULES\n                  value: \"{}\"\n                - name: RANKVISOR_STRAGGLER_RULE\n                  value: throughput\n              command: [\"sh\", \"-c\", {}]\n",
        rules.display(),
        serde_json::to_string(script).unwrap()
    );
    let manifest = dir.write(
        "job.yaml",
        &format!(
            "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: slow\nspec:\n  pytorchReplicaSpecs:\n    Master:\n      replicas: 1\n{container}    Worker:\n      replicas: 2\n{container}"
        ),
    );
    let svg = dir.path().join("timeline.svg");
    let r = json_run(&manifest, &["--timeline", svg.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.explain());
    let named: Vec<&str> =
        r.stderr.lines().filter(|l| l.starts_with("dry-run: ") && l.contains("straggler: replica")).collect();
    assert_eq!(named.len(), 1, "rank 2 alone, once: {}", r.stderr);
    assert!(
        named[0].contains(
            "dry-run: slow-master-0: straggler: replica 2 is a straggler: its metric 60 against the job's median 100"
        ),
        "{}",
        named[0]
    );
    assert!(named[0].contains("(pod slow-worker-1, node "), "{}", named[0]);
    let drawn = std::fs::read_to_string(&svg).expect("the timeline");
    assert_eq!(drawn.matches("<g class=\"straggler\" data-pod=\"slow-worker-1\">").count(), 1, "{drawn}");
}

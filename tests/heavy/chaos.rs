//! The chaos soak (issue 15, item 6; `chaos/soak.rs` has the faults and the checks): the real dry
//! run of `examples/chaos-job.yaml` (1 Master + 7 Workers, OnFailure) for 120 s with one random
//! fault every few seconds (launcher SIGSTOP/SIGCONT, launchers killed outright, child crashes and
//! hangs, label flips, pod deletions, hostile rendezvous peers, HTTP floods), checked after each
//! step: no zombie, bounded fds and RSS, every launcher exit accounted for, a killed launcher's
//! training child gone, the dry run alive and printing, the job's final state as the dry run's own
//! operator rules say for the faults applied, nothing left over. Seeded: a failure replays with
//! its seed. Longer soaks: `bash scripts/chaos.sh --duration 600 [--seed N]`, which runs the same
//! test with RANKVISOR_TEST_CHAOS_DURATION and RANKVISOR_TEST_CHAOS_SEED.
//! Then the launcher-kill cases one by one, each checked in detail.

use crate::common;
#[path = "chaos/soak.rs"]
mod soak;

use std::process::Stdio;
use std::time::Duration;

use common::{
    alive, children, environ_var, proc_stat, procs, rankvisor, wait_file, wait_until, wait_until_for, TestDir,
};

/// Fixed, so a CI failure replays with `bash scripts/chaos.sh --duration 120 --seed 15006`.
const SEED: u64 = 15006;

/// A setting of the soak from the environment (scripts/chaos.sh), or its default.
fn setting(var: &str, default: u64) -> u64 {
    match std::env::var(var) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{var}={v:?}: expected a whole number")),
        Err(_) => default,
    }
}

#[test]
fn chaos_soak_two_minutes() {
    let opts = soak::Options {
        duration: Duration::from_secs(setting("RANKVISOR_TEST_CHAOS_DURATION", 120)),
        seed: setting("RANKVISOR_TEST_CHAOS_SEED", SEED),
        interval: 4.0,
        tail: Duration::from_secs(15),
    };
    let summary = soak::run(opts.clone());
    println!("{summary}");
    assert!(
        summary.violations.is_empty(),
        "the chaos soak failed: replay with `bash scripts/chaos.sh --duration {} --seed {}`\n{summary}",
        opts.duration.as_secs(),
        opts.seed
    );
    // A soak that applied nothing or checked nothing proves nothing: at 120 s, at least 10
    // faults and 100 checks passed, and every kind of fault; other durations in proportion.
    let secs = opts.duration.as_secs();
    assert!(u64::from(summary.fault_total()) >= secs / 12, "too few faults applied for a soak:\n{summary}");
    assert!(u64::from(summary.check_total()) >= secs * 5 / 6, "too few checks passed:\n{summary}");
    for kind in soak::Kind::LIVE.iter().chain(&soak::Kind::UP_FRONT).filter(|_| secs >= 120) {
        assert!(
            summary.faults.contains_key(kind.name()),
            "no {} fault with seed {}:\n{summary}",
            kind.name(),
            opts.seed
        );
    }
    assert_eq!(summary.checks.get("final-state"), Some(&1), "{summary}");
}

// ---- A launcher killed outright (kill -9 from outside): in a pod the launcher is the container's
// PID 1, so the kernel ends the container's PID namespace with it and the kubelet sees a container
// that ended with 137. The dry run, a child subreaper, kills what the launcher left and reports its
// end only once that is gone; the operator's rules then decide the pod's and the job's fate.

/// 1 Master + 1 Worker (restartPolicy `POLICY`), backoffLimit 100. Each child waits for the file
/// `go` in the test's directory; the worker's also starts a grandchild in a session of its own
/// (`setsid sleep 300`) and writes its pid to `gc.<its own pid>`.
fn two_replicas(dir: &TestDir, worker_policy: &str) -> std::path::PathBuf {
    let go = dir.file("go");
    let wait = format!("while [ ! -e '{go}' ]; do sleep 0.05; done");
    let master = dir.script("master.sh", &wait);
    let gc = dir.file("gc");
    let worker = dir.script("worker.sh", &format!("setsid sleep 300 &\necho $! > '{gc}.'$$\n{wait}"));
    let manifest = dir.join("job.yaml");
    let text = format!(
        r#"apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: k9}}
spec:
  runPolicy: {{backoffLimit: 100}}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template: {{spec: {{containers: [{{name: pytorch, image: busybox, command: ["sh", "{master}"]}}]}}}}
    Worker:
      replicas: 1
      restartPolicy: {worker_policy}
      template: {{spec: {{containers: [{{name: pytorch, image: busybox, command: ["sh", "{worker}"]}}]}}}}
"#
    );
    std::fs::write(&manifest, text).expect("write manifest");
    manifest
}

/// The POD_NAME a launcher was started with.
fn pod_name(pid: i32) -> Option<String> {
    environ_var(pid, "POD_NAME")
}

/// worker-0's launcher (not `old`) and its training child, once both run.
fn worker_launcher(dry: i32, old: Option<i32>) -> Option<(i32, i32)> {
    let launcher =
        children(dry).into_iter().find(|&l| Some(l) != old && pod_name(l).as_deref() == Some("k9-worker-0"))?;
    let child = *children(launcher).first()?;
    Some((launcher, child))
}

/// The watch events printed so far (complete lines).
fn events(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |i| &text[..=i]);
    complete.lines().map(|l| serde_json::from_str(l).expect("watch line is JSON")).collect()
}

fn worker_rows(events: &[serde_json::Value]) -> impl Iterator<Item = &serde_json::Value> {
    events.iter().filter(|e| e["kind"] == "Pod" && e["fields"]["replica"] == "worker-0")
}

/// A killed launcher's run: what the dry run printed and did.
struct Killed {
    dir: TestDir,
    dry: std::process::Child,
    watch: std::path::PathBuf,
    /// The killed launcher, its training child and that child's grandchild in its own session.
    launcher: i32,
    child: i32,
    grandchild: i32,
    /// How many watch events were printed before the kill.
    before: usize,
}

impl Killed {
    /// Start the dry run, SIGKILL worker-0's launcher once its child and grandchild run, and wait
    /// for the row that reports the container's end (the launcher's exit as the kubelet sees it).
    /// By then, as in a pod, nothing the launcher started may be left: not its training child, not
    /// the grandchild in a session of its own, not as a zombie of the dry run either.
    fn run(name: &str, worker_policy: &str) -> Self {
        let dir = TestDir::new(name);
        let manifest = two_replicas(&dir, worker_policy);
        let watch = dir.join("watch.jsonl");
        let dry = rankvisor()
            .args(["dry-run", "--master-port", "0", "--output", "json", "--timeout", "60s"])
            .arg(&manifest)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&watch).expect("watch file"))
            .stderr(std::fs::File::create(dir.join("stderr")).expect("stderr file"))
            .spawn()
            .expect("spawn rankvisor dry-run");
        let dry_pid = dry.id() as i32;
        let (launcher, child) =
            wait_until("worker-0's launcher and its training child", || worker_launcher(dry_pid, None));
        let gc = dir.join(&format!("gc.{child}"));
        let grandchild: i32 =
            wait_until("the worker's grandchild pid", || std::fs::read_to_string(&gc).ok()?.trim().parse().ok());
        assert!(alive(grandchild), "the grandchild {grandchild} runs");
        // The dry run has seen the child run (its status line): what follows is the kill's doing.
        wait_until("worker-0 Running", || {
            worker_rows(&events(&watch)).any(|e| e["fields"]["status"] == "Running").then_some(())
        });
        let before = events(&watch).len();
        // SAFETY: kill(2) has no memory-safety preconditions.
        assert_eq!(unsafe { libc::kill(launcher, libc::SIGKILL) }, 0, "kill -9 {launcher}");
        let ended = wait_until("worker-0's container end (an Error row)", || {
            worker_rows(&events(&watch)[before..]).find(|e| e["fields"]["status"] == "Error").cloned()
        });
        for (what, pid) in [("training child", child), ("grandchild (own session)", grandchild)] {
            let left = proc_stat(pid).filter(|p| p.ppid == dry_pid || p.state != 'Z');
            assert!(
                left.is_none(),
                "the killed launcher's {what} {pid} is still there ({left:?}) when the dry run reports the container's end: {ended}"
            );
        }
        Self { dir, dry, watch, launcher, child, grandchild, before }
    }

    /// Let every child complete, and wait for the dry run's exit code.
    fn finish(&mut self) -> i32 {
        std::fs::write(self.dir.join("go"), "").expect("touch go");
        let status =
            wait_until_for("the dry run to end", Duration::from_secs(60), || self.dry.try_wait().expect("wait"));
        status.code().unwrap_or_else(|| panic!("the dry run was killed: {status:?}"))
    }

    fn events_after_kill(&self) -> Vec<serde_json::Value> {
        events(&self.watch).split_off(self.before)
    }

    fn job_state(&self) -> String {
        let events = events(&self.watch);
        let job = events.iter().rev().find(|e| e["kind"] == "PyTorchJob").expect("a job row");
        job["fields"]["state"].as_str().unwrap_or("").to_string()
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Ok(None) = self.dry.try_wait() {
            common::kill_tree(self.dry.id() as i32);
            let _ = self.dry.wait();
        }
        for pid in [self.child, self.grandchild] {
            if alive(pid) {
                // SAFETY: kill(2) has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// Under OnFailure the kubelet restarts a container whose PID 1 was killed (exit 137): the same
/// pod runs a new launcher with RESTARTS 1, and the job runs on to Succeeded when the master
/// completes.
#[test]
fn launcher_killed_outright_is_restarted_under_on_failure() {
    let mut k = Killed::run("chaos-kill9-onfailure", "OnFailure");
    let dry = k.dry.id() as i32;
    let (relaunched, _) =
        wait_until("a new launcher of worker-0 with its child", || worker_launcher(dry, Some(k.launcher)));
    assert_ne!(relaunched, k.launcher);
    wait_until("worker-0 Running again with RESTARTS 1", || {
        worker_rows(&k.events_after_kill())
            .find(|e| e["fields"]["status"] == "Running" && e["fields"]["restarts"] == 1)
            .map(|_| ())
    });
    assert!(
        !k.events_after_kill().iter().any(|e| e["type"] == "DELETED" && e["kind"] == "Pod"),
        "the kubelet restarts the container in place: no pod is deleted"
    );
    assert_eq!(k.finish(), 0, "the job must Succeed: OnFailure restarts the killed container");
    assert_eq!(k.job_state(), "Succeeded");
}

/// Under ExitCode the pod's own policy is Never: the pod fails with 137, which is retryable
/// (>= 128), so the operator deletes and recreates it (RESTARTS 0); the job Succeeds.
#[test]
fn launcher_killed_outright_recreates_the_pod_under_exit_code() {
    let mut k = Killed::run("chaos-kill9-exitcode", "ExitCode");
    let dry = k.dry.id() as i32;
    wait_until("a new launcher of worker-0 with its child", || worker_launcher(dry, Some(k.launcher)));
    let after = k.events_after_kill();
    let deleted = worker_rows(&after).position(|e| e["type"] == "DELETED").expect("the failed pod is deleted");
    let added = worker_rows(&after).position(|e| e["type"] == "ADDED").expect("and created again");
    assert!(deleted < added, "deleted, then created: {after:?}");
    assert!(worker_rows(&after).skip(added).all(|e| e["fields"]["restarts"] == 0), "a new pod starts at RESTARTS 0");
    assert_eq!(k.finish(), 0, "the job must Succeed: 137 is retryable under ExitCode");
    assert_eq!(k.job_state(), "Succeeded");
}

/// Under Never the pod fails with its container, and with it the job ("1 Worker replica(s)
/// failed"); nothing is restarted.
#[test]
fn launcher_killed_outright_fails_the_job_under_never() {
    let mut k = Killed::run("chaos-kill9-never", "Never");
    wait_until("the job Failed", || (k.job_state() == "Failed").then_some(()));
    assert_eq!(k.finish(), 1, "Never: the job fails");
    assert_eq!(k.job_state(), "Failed");
    let running = worker_rows(&k.events_after_kill()).filter(|e| e["fields"]["status"] == "Running").count();
    assert_eq!(running, 0, "Never: worker-0 is not restarted");
}

/// Nothing the killed launcher started outlives the dry run either (its training child and a
/// grandchild in a session of its own are gone before the container's end is reported, see
/// `Killed::run`; here: nothing of the run is left once the dry run has exited).
#[test]
fn launcher_killed_outright_leaves_no_training_process() {
    let mut k = Killed::run("chaos-kill9-leak", "OnFailure");
    let dry = k.dry.id() as i32;
    // The restarted worker runs (its grandchild too) before the master may complete: a worker
    // restarted after the master is gone would wait for the rendezvous in vain.
    let (_, child) = wait_until("a new launcher of worker-0 with its child", || worker_launcher(dry, Some(k.launcher)));
    wait_file(&k.dir.join(&format!("gc.{child}")));
    assert_eq!(k.finish(), 0);
    let dir = k.dir.path().to_string_lossy().into_owned();
    let mut left: Vec<String> = procs()
        .into_iter()
        .filter(|p| p.state != 'Z')
        .filter(|p| {
            std::fs::read(format!("/proc/{}/cmdline", p.pid)).is_ok_and(|c| String::from_utf8_lossy(&c).contains(&dir))
        })
        .map(|p| format!("{p:?}"))
        .collect();
    // Every worker run's grandchild, the killed one's and the restarted one's.
    let mut grandchildren = 0;
    for entry in std::fs::read_dir(k.dir.path()).expect("read the test dir").map_while(Result::ok) {
        if entry.file_name().to_string_lossy().starts_with("gc.") {
            grandchildren += 1;
            let pid: i32 = std::fs::read_to_string(entry.path()).expect("gc file").trim().parse().expect("a pid");
            if alive(pid) {
                left.push(format!("grandchild {pid} ({})", entry.file_name().to_string_lossy()));
            }
        }
    }
    assert_eq!(grandchildren, 2, "the killed run's grandchild and the restarted run's");
    assert!(left.is_empty(), "processes of the run left after the dry run ended: {left:?}");
}

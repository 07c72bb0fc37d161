//! The chaos soak's short version (issue 15, item 6): `scripts/chaos.py` runs the real dry run of
//! `examples/chaos-job.yaml` (1 Master + 7 Workers, OnFailure) for 120 s with one random fault
//! every few seconds (launcher SIGSTOP/SIGCONT, child crashes and hangs, label flips, pod
//! deletions, hostile rendezvous peers, HTTP floods) and checks after each step: no zombie, bounded
//! fds and RSS, every launcher exit accounted for, the dry run alive and printing, the job's final
//! state as the operator's rules say, nothing left over. The script exits non-zero on any
//! violation; its summary (faults by kind, checks passed, fd/RSS figures) is printed here.
//! The 10-minute soak: `python3 scripts/chaos.py` (see its --help).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{alive, procs, wait_until, wait_until_for, TestDir, BIN};

/// Fixed, so a CI failure replays with `scripts/chaos.py --duration 120 --seed 15006`.
const SEED: &str = "15006";

#[test]
fn chaos_soak_two_minutes() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/chaos.py");
    assert!(script.is_file(), "{} is missing", script.display());
    let out = Command::new("python3")
        .arg(&script)
        .args(["--duration", "120", "--seed", SEED, "--binary", BIN])
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e} (the soak needs python3)", script.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The summary is the script's last lines: show it whatever the result.
    let summary: Vec<&str> = stdout.lines().skip_while(|l| !l.starts_with("---- chaos soak summary")).collect();
    println!("{}", summary.join("\n"));
    assert!(
        out.status.success(),
        "the chaos soak failed ({}): replay with `python3 scripts/chaos.py --duration 120 --seed {SEED}`\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    // A soak that applied nothing or checked nothing proves nothing.
    assert!(!summary.is_empty(), "no summary in the output:\n{stdout}\n{stderr}");
    assert!(stdout.contains("chaos soak: OK, no violation"), "no OK verdict:\n{stdout}");
    let count = |prefix: &str| -> u64 {
        let line = summary.iter().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix:?} line"));
        let total = line.rsplit("(total ").next().and_then(|t| t.strip_suffix(')')).unwrap_or("0");
        total.parse().unwrap_or_else(|_| panic!("unreadable total in {line:?}"))
    };
    assert!(count("faults:") >= 10, "too few faults applied for a soak:\n{}", summary.join("\n"));
    assert!(count("checks passed:") >= 100, "too few checks passed:\n{}", summary.join("\n"));
    for kind in ["launcher-stop", "child-crash", "child-hang", "hostile-peer", "http-flood", "label-flip", "pod-delete"]
    {
        assert!(
            summary.iter().any(|l| l.starts_with("faults:") && l.contains(kind)),
            "no {kind} fault with seed {SEED}"
        );
    }
}

// ---- Known bugs the soak found (its `launcher-kill` fault, only with `--include-known-bugs`).
// Ignored so CI stays green; run them with `cargo nextest run --test chaos --run-ignored only`.

/// 1 Master + 1 Worker, OnFailure, each child `sleep 20`.
const TWO_REPLICAS: &str = r#"apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: k9}
spec:
  runPolicy: {backoffLimit: 100}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template: {spec: {containers: [{name: pytorch, image: busybox, command: ["sh", "-c", "sleep 20"]}]}}
    Worker:
      replicas: 1
      restartPolicy: OnFailure
      template: {spec: {containers: [{name: pytorch, image: busybox, command: ["sh", "-c", "sleep 20"]}]}}
"#;

/// The pids of `pid`'s children.
fn children(pid: i32) -> Vec<i32> {
    procs().into_iter().filter(|p| p.ppid == pid && p.state != 'Z').map(|p| p.pid).collect()
}

/// The POD_NAME a launcher was started with.
fn pod_name(pid: i32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0).find_map(|kv| kv.strip_prefix(b"POD_NAME=")).map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Start the two-replica dry run, SIGKILL worker-0's launcher once its child runs; return the
/// dry run's exit code and the pid of the killed launcher's child.
fn kill_a_launcher_outright(dir: &TestDir) -> (i32, i32) {
    let manifest = dir.join("job.yaml");
    std::fs::write(&manifest, TWO_REPLICAS).expect("write manifest");
    let mut dry = Command::new(BIN)
        .args(["dry-run", "--master-port", "0", "--output", "json", "--timeout", "60s"])
        .arg(&manifest)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn rankvisor dry-run");
    let dry_pid = dry.id() as i32;
    let (launcher, child) = wait_until("worker-0's launcher and its training child", || {
        let launcher = children(dry_pid).into_iter().find(|&l| pod_name(l).as_deref() == Some("k9-worker-0"))?;
        let child = *children(launcher).first()?;
        Some((launcher, child))
    });
    // SAFETY: kill(2) has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(launcher, libc::SIGKILL) }, 0, "kill -9 {launcher}");
    let status = wait_until_for("the dry run to end", Duration::from_secs(90), || dry.try_wait().expect("wait"));
    let code = status.code().unwrap_or(-1);
    (code, child)
}

/// Known bug: a launcher (the container's PID 1) killed outright under restartPolicy OnFailure
/// makes the dry run fail the whole job ("1 Worker replica(s) failed", exit 1); the kubelet
/// restarts a container whose main process died with 137 (RESTARTS 1) and the job runs on to
/// Succeeded when the master completes.
#[test]
#[ignore = "known bug: a launcher killed by SIGKILL under OnFailure fails the dry run's job"]
fn launcher_killed_outright_is_restarted_under_on_failure() {
    let dir = TestDir::new("chaos-kill9-outcome");
    let (code, child) = kill_a_launcher_outright(&dir);
    // SAFETY: as above; the child may be gone already.
    unsafe { libc::kill(child, libc::SIGKILL) };
    assert_eq!(code, 0, "the job must Succeed: OnFailure restarts the killed container");
}

/// Known bug: the training child of a launcher killed outright keeps running after the dry run
/// has ended (re-parented to init); in a pod the whole PID namespace dies with its PID 1.
#[test]
#[ignore = "known bug: the training child of a launcher killed by SIGKILL outlives the dry run"]
fn launcher_killed_outright_leaves_no_training_process() {
    let dir = TestDir::new("chaos-kill9-leak");
    let (_, child) = kill_a_launcher_outright(&dir);
    let leaked = alive(child);
    // SAFETY: as above.
    unsafe { libc::kill(child, libc::SIGKILL) };
    assert!(!leaked, "the killed launcher's training child {child} outlived the dry run");
}

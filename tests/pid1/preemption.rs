//! Issue 37, item 3: a preemption that saves the checkpoint. TERM to rankvisor reaches the training
//! process first and its fork()ed workers (a DataLoader's) only once it has exited, so the SIGTERM
//! handler's emergency save completes; a shell child that does not forward signals stops all the
//! same; the grace period still bounds everything. The training process is a Python stand-in with
//! no torch (tests/heavy/training.rs has the real DataLoader).

use crate::common;
use common::*;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// A training script's shape: two `os.fork()`ed workers (a DataLoader's), each answering its
/// parent's pings over a pipe of its own, and a SIGTERM handler that saves and, before it says
/// "saved ok", pings every worker: one that got a TERM too is gone by then (its TERM was pending
/// when the handler started: a group's signal reaches every member at once), its pipe ends, and
/// the save fails, as a DataLoader's does when a worker dies. No timing: a handshake decides.
/// Each worker records, when TERM reaches it, whether the save was complete ("after-save") or not.
/// `ready` appears once both workers run with their handler. Mode `ignore`: TERM is ignored.
const TRAIN_PY: &str = r#"
import os, signal, sys

out, mode = sys.argv[1], sys.argv[2]
ckpt = os.path.join(out, "ckpt")

def worker(ping, reply):
    def on_term(signum, frame):
        try:
            saved = open(ckpt).read()
        except FileNotFoundError:
            saved = ""
        when = "after-save" if saved.endswith("saved ok\n") else "during-save"
        with open(os.path.join(out, "workers"), "a") as f:
            f.write(f"{os.getpid()} {when}\n")
        os._exit(0)
    signal.signal(signal.SIGTERM, on_term)
    os.write(reply, b"x")
    while os.read(ping, 1):
        os.write(reply, b"y")
    # The parent is gone (its pipe ended): wait, as a DataLoader worker does, for a signal.
    while True:
        signal.pause()

workers = []
for _ in range(2):
    ping_r, ping_w = os.pipe()
    reply_r, reply_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ping_w)
        os.close(reply_r)
        for _, w, r in workers:
            os.close(w)
            os.close(r)
        worker(ping_r, reply_w)
    os.close(ping_r)
    os.close(reply_w)
    workers.append((pid, ping_w, reply_r))
for _, _, r in workers:
    assert os.read(r, 1) == b"x"

def alive(w):
    _, ping, reply = w
    try:
        os.write(ping, b"p")
    except BrokenPipeError:
        return False
    return os.read(reply, 1) == b"y"

def on_term(signum, frame):
    with open(ckpt, "w") as f:
        f.write("saving\n")
        f.flush()
        os.fsync(f.fileno())
        dead = [w[0] for w in workers if not alive(w)]
        if dead:
            f.write(f"worker {dead[0]} died during the save\n")
            sys.exit(3)
        f.write("saved ok\n")
    sys.exit(0)

if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, on_term)
with open(os.path.join(out, "pids"), "w") as f:
    f.write(" ".join(map(str, [os.getpid()] + [w[0] for w in workers])))
open(os.path.join(out, "ready"), "w").close()
while True:
    signal.pause()
"#;

/// The script in `dir`, and the words that run it on `dir`.
fn train(dir: &TestDir, mode: &str) -> Vec<String> {
    let script = dir.write("train.py", TRAIN_PY);
    vec!["python3".into(), script.display().to_string(), dir.path().display().to_string(), mode.into()]
}

fn shell_words(words: &[String]) -> String {
    words.iter().map(|w| q(w)).collect::<Vec<_>>().join(" ")
}

/// The workers' records: one line each, "PID after-save" or "PID during-save".
fn worker_records(dir: &Path) -> Vec<String> {
    let mut lines: Vec<String> =
        read(&dir.join("workers")).lines().map(|l| l.split(' ').nth(1).unwrap_or("").to_string()).collect();
    lines.sort();
    lines
}

/// The pids the script wrote: its own, then its workers'.
fn script_pids(dir: &Path) -> Vec<i32> {
    read(&dir.join("pids")).split_whitespace().map(|p| p.parse().unwrap()).collect()
}

#[test]
fn the_training_process_saves_before_its_forked_workers_get_term() {
    let dir = TestDir::new("preempt-python");
    let run = Rv::new(&dir).pid1().args(["--grace-period", "20s"]).cmd(train(&dir, "save")).spawn();
    wait_file(&dir.join("ready"));
    run.signal(libc::SIGTERM);
    let out = run.wait();
    out.assert_code(0);
    assert_eq!(read(&dir.join("ckpt")), "saving\nsaved ok\n", "stderr:\n{}", out.stderr);
    assert_eq!(worker_records(dir.path()), ["after-save", "after-save"], "both workers got TERM after the save");
    assert!(out.stderr.contains("2 forked helpers get it once their parent has exited"), "stderr:\n{}", out.stderr);
}

#[test]
fn a_shell_child_that_does_not_forward_stops_and_its_python_saves() {
    // sh runs python as a job of its own (a command follows): no exec, no forwarding of TERM.
    let dir = TestDir::new("preempt-sh");
    let script = format!("{}; echo after", shell_words(&train(&dir, "save")));
    let run = Rv::new(&dir).pid1().args(["--grace-period", "20s"]).sh(&script).spawn();
    wait_file(&dir.join("ready"));
    run.signal(libc::SIGTERM);
    let out = run.wait();
    // The shell died of the TERM at once: its status is rankvisor's.
    out.assert_code(143);
    assert!(!out.stdout.contains("after"), "the shell did not go on: {}", out.stdout);
    assert_eq!(read(&dir.join("ckpt")), "saving\nsaved ok\n", "stderr:\n{}", out.stderr);
    assert_eq!(worker_records(dir.path()), ["after-save", "after-save"]);
}

#[test]
fn a_launchers_rank_saves_before_its_forked_workers_get_term() {
    // torchrun's shape: the child is a launcher that waits for its rank (an exec'd program of its
    // own); the rank's workers are the rank's forked copies, not the child's.
    let dir = TestDir::new("preempt-launcher");
    let launcher = dir.write(
        "launcher.py",
        "import signal, subprocess, sys\n\
         signal.signal(signal.SIGTERM, lambda *_: None)\n\
         sys.exit(subprocess.Popen([sys.executable] + sys.argv[1:]).wait())\n",
    );
    let mut cmd = vec!["python3".to_string(), launcher.display().to_string()];
    cmd.extend(train(&dir, "save").into_iter().skip(1));
    let run = Rv::new(&dir).pid1().args(["--grace-period", "20s"]).cmd(cmd).spawn();
    wait_file(&dir.join("ready"));
    run.signal(libc::SIGTERM);
    let out = run.wait();
    out.assert_code(0);
    assert_eq!(read(&dir.join("ckpt")), "saving\nsaved ok\n", "stderr:\n{}", out.stderr);
    assert_eq!(worker_records(dir.path()), ["after-save", "after-save"]);
}

#[test]
fn a_main_process_ignoring_term_is_killed_with_its_workers_at_the_grace_end_137() {
    // Not PID 1, so that the processes can be looked at after rankvisor exits.
    let dir = TestDir::new("preempt-ignore");
    let run = Rv::new(&dir).args(["--grace-period", "1s"]).cmd(train(&dir, "ignore")).spawn();
    wait_file(&dir.join("ready"));
    let pids = script_pids(dir.path());
    assert_eq!(pids.len(), 3);
    run.signal(libc::SIGTERM);
    let out = run.wait();
    out.assert_code(137);
    assert_eq!(out.last_status()["last_exit"]["signaled"], 9);
    assert!(worker_records(dir.path()).is_empty(), "the workers waited for their parent: no TERM reached them");
    for p in pids {
        assert!(!alive(p), "{p} outlived rankvisor");
    }
}

/// The control: the same script, its whole process group TERMed at once (what rankvisor did
/// before), fails its save. The tests above can tell.
#[test]
fn control_term_to_the_whole_group_fails_the_save() {
    let dir = TestDir::new("preempt-control");
    let words = train(&dir, "save");
    let mut child = Command::new(&words[0])
        .args(&words[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("python3");
    wait_file(&dir.join("ready"));
    // SAFETY: kill(2) has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3), "the save failed: {}", read(&dir.join("ckpt")));
    assert!(read(&dir.join("ckpt")).contains("died during the save"));
    assert_eq!(worker_records(dir.path()), ["during-save", "during-save"]);
}

//! Issue 37, item 3, with torch: a training script with a real `torch.utils.data.DataLoader`
//! (`num_workers=2`, the workers fork()ed) under rankvisor as PID 1; TERM to rankvisor -> the
//! script's SIGTERM handler saves a checkpoint that `torch.load` reads, and no DataLoader worker
//! died before the save completed; the same when the child is a shell that runs python as a job
//! of its own. The control TERMs the script's whole process group at once (rankvisor's behaviour
//! before): the DataLoader's SIGCHLD handler fails the save. Needs `RANKVISOR_TORCH_VENV`
//! (tests/heavy/training.rs).

use crate::common;
use crate::training::venv_env;
use common::*;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// Trains a linear model on a DataLoader with two workers; each worker records, when TERM reaches
/// it, whether the checkpoint was already saved, then dies of it (as a worker with TERM's default
/// does). The SIGTERM handler saves, waits as slow storage would (up to 3 s; a worker dying meanwhile makes
/// the DataLoader's SIGCHLD handler raise in it), checks the workers, then publishes the file.
/// `ready` appears once each worker has produced a batch (their handlers installed) and the
/// SIGTERM handler is.
const TRAIN_PY: &str = r#"
import os, signal, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

out = sys.argv[1]
ckpt = os.path.join(out, "ckpt.pt")

class Numbers(Dataset):
    def __len__(self):
        return 1 << 30
    def __getitem__(self, i):
        return torch.full((4,), float(i % 100))

def on_worker_term(signum, frame):
    when = "after-save" if os.path.exists(ckpt) else "during-save"
    with open(os.path.join(out, "workers"), "a") as f:
        f.write(f"{os.getpid()} {when}\n")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)

def worker_init(_):
    signal.signal(signal.SIGTERM, on_worker_term)

loader = DataLoader(Numbers(), batch_size=8, num_workers=2, worker_init_fn=worker_init)
it = iter(loader)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
step = 0

def train_step():
    global step
    x = next(it)
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
    step += 1

def on_term(signum, frame):
    tmp = ckpt + ".tmp"
    torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, tmp)
    # As slow storage would: long enough that a worker TERMed with this process (the control)
    # is gone by then even on a loaded machine; the control's wait ends at its first death.
    end = time.monotonic() + 3
    while time.monotonic() < end and all(w.is_alive() for w in it._workers):
        time.sleep(0.02)
    if not all(w.is_alive() for w in it._workers):
        print("a DataLoader worker died during the save", flush=True)
        sys.exit(3)
    os.replace(tmp, ckpt)
    print(f"saved step {step}", flush=True)
    sys.exit(0)

# Batches come in order, one from each worker: both run, with their handler.
train_step()
train_step()
signal.signal(signal.SIGTERM, on_term)
open(os.path.join(out, "ready"), "w").close()
while True:
    train_step()
    time.sleep(0.01)
"#;

/// The venv's python.
fn python() -> String {
    let venv = crate::training::required_path("RANKVISOR_TORCH_VENV");
    venv.join("bin/python").display().to_string()
}

/// The checkpoint's step, as `torch.load` reads it.
fn saved_step(dir: &Path) -> u64 {
    let out = Command::new(python())
        .args(["-c", "import sys, torch; c = torch.load(sys.argv[1]); print(c['step'], sorted(c['model']))"])
        .arg(dir.join("ckpt.pt"))
        .envs(venv_env())
        .output()
        .expect("run the venv's python");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "torch.load failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("['bias', 'weight']"), "{text}");
    text.split_whitespace().next().and_then(|s| s.parse().ok()).expect("a step")
}

/// What the workers recorded (one line each that got TERM): "after-save" or "during-save".
fn worker_records(dir: &Path) -> Vec<String> {
    read(&dir.join("workers")).lines().filter_map(|l| l.split(' ').nth(1).map(str::to_string)).collect()
}

/// Run `child` under rankvisor as PID 1, TERM it once the script is ready.
fn preempt(dir: &TestDir, child: Rv) -> Finished {
    let mut rv = child.pid1().args(["--grace-period", "20s"]);
    for (k, v) in venv_env() {
        rv = rv.env(k, &v);
    }
    let run = rv.spawn();
    wait_until_for("the script to be ready", std::time::Duration::from_secs(120), || {
        dir.join("ready").exists().then_some(())
    });
    run.signal(libc::SIGTERM);
    run.wait_for(std::time::Duration::from_secs(60))
}

#[test]
fn a_dataloader_script_saves_a_checkpoint_that_loads_before_its_workers_get_term() {
    let dir = TestDir::new("preempt-torch");
    let script = dir.write("train.py", TRAIN_PY);
    let out = preempt(&dir, Rv::new(&dir).cmd(["python".to_string(), script.display().to_string(), dir.file("")]));
    out.assert_code(0);
    assert!(out.stdout.contains("saved step"), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(saved_step(dir.path()) >= 2);
    let records = worker_records(dir.path());
    assert!(records.iter().all(|r| r == "after-save"), "a worker got TERM before the save: {records:?}");
}

#[test]
fn the_same_under_a_shell_that_runs_python_as_a_job_of_its_own() {
    // `; echo after`: sh forks python and waits (no exec), and does not forward TERM.
    let dir = TestDir::new("preempt-torch-sh");
    let script = dir.write("train.py", TRAIN_PY);
    let sh = format!("python {} {}; echo after", q(&script.display().to_string()), q(&dir.file("")));
    let out = preempt(&dir, Rv::new(&dir).sh(&sh));
    out.assert_code(143);
    assert!(out.stdout.contains("saved step") && !out.stdout.contains("after"), "stdout:\n{}", out.stdout);
    assert!(saved_step(dir.path()) >= 2);
    let records = worker_records(dir.path());
    assert!(records.iter().all(|r| r == "after-save"), "a worker got TERM before the save: {records:?}");
}

/// The control: TERM to the script's whole group at once kills the workers during the save, and
/// the DataLoader's SIGCHLD handler fails it. The tests above can tell.
#[test]
fn control_term_to_the_whole_group_fails_the_dataloader_save() {
    let dir = TestDir::new("preempt-torch-control");
    let script = dir.write("train.py", TRAIN_PY);
    let mut child = Command::new(python())
        .arg(&script)
        .arg(dir.path())
        .envs(venv_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("the venv's python");
    wait_until_for("the script to be ready", std::time::Duration::from_secs(120), || {
        dir.join("ready").exists().then_some(())
    });
    // SAFETY: kill(2) has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "the save must fail: {status:?}\n{stderr}");
    assert!(!dir.join("ckpt.pt").exists(), "no checkpoint published");
    assert!(stderr.contains("DataLoader worker"), "the DataLoader's own error:\n{stderr}");
    assert!(worker_records(dir.path()).contains(&"during-save".to_string()));
}

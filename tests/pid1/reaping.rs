//! Issue 2, items 3 and 6: orphans reparented to rankvisor are reaped, whether rankvisor is PID 1
//! of its namespace or a child subreaper below another init. Negative controls run the same
//! workload under a PID 1 that never waits, and under a parent that is not a subreaper.

use crate::common;
use common::*;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const ORPHANS: usize = 100;

/// The main child (`workload.sh`, so its comm tells it apart) double-forks ORPHANS processes that
/// record the parent they were reparented to and exit, then waits for `done`.
fn workload(dir: &TestDir) -> String {
    // The orphan reads its parent only once `spawned` exists: by then the workload has waited for
    // every intermediate subshell, so the orphan has surely been reparented. No forks but `sleep`.
    let orphan = dir.script(
        "orphan.sh",
        &format!(
            "while [ ! -e {spawned} ]; do sleep 0.05; done
             read -r stat < /proc/$$/stat; set -- $stat
             echo $4 >> {ppids}",
            spawned = q(&dir.file("spawned")),
            ppids = q(&dir.file("ppids"))
        ),
    );
    dir.script(
        "workload.sh",
        &format!(
            "i=0; while [ $i -lt {ORPHANS} ]; do ({orphan} &); i=$((i+1)); done
             touch {spawned}
             while [ ! -e {done} ]; do sleep 0.02; done",
            orphan = q(&orphan),
            spawned = q(&dir.file("spawned")),
            done = q(&dir.file("done"))
        ),
    )
}

/// Processes whose parent is `reaper`, other than the workload itself.
fn orphans_of(reaper: i32) -> Vec<Proc> {
    procs().into_iter().filter(|p| p.ppid == reaper && p.comm != "workload.sh").collect()
}

/// Wait until every orphan has recorded its parent and exited; return the recorded parents.
fn wait_orphans_done(dir: &TestDir, reaper: i32) -> Vec<i32> {
    wait_file(&dir.join("spawned"));
    let ppids: Vec<i32> = wait_until("every orphan to record its parent", || {
        let text = read(&dir.join("ppids"));
        (text.lines().count() == ORPHANS).then(|| text.lines().map(|l| l.trim().parse().unwrap()).collect())
    });
    wait_until("every orphan to exit", || {
        orphans_of(reaper).iter().all(|p| p.state == 'Z' || p.state == 'X').then_some(())
    });
    ppids
}

fn zombies_of(reaper: i32) -> usize {
    orphans_of(reaper).iter().filter(|p| p.state == 'Z').count()
}

/// Wait (bounded by the hang guard, generous for a loaded machine) for no zombie to be left under
/// `reaper`; return how many are left.
fn settle_zombies(reaper: i32) -> usize {
    let until = std::time::Instant::now() + HANG_GUARD;
    loop {
        let z = zombies_of(reaper);
        if z == 0 || std::time::Instant::now() >= until {
            return z;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn pid1_reaps_100_orphans() {
    let dir = TestDir::new("reap-pid1");
    let script = workload(&dir);
    let run = Rv::new(&dir).pid1().cmd([&script]).spawn();
    let pid1 = run.rankvisor_pid();
    let ppids = wait_orphans_done(&dir, pid1);
    assert!(ppids.iter().all(|&p| p == 1), "every orphan was reparented to PID 1: {ppids:?}");
    let left = settle_zombies(pid1);
    println!("zombies left under rankvisor as PID 1: {left}");
    assert_eq!(left, 0, "rankvisor as PID 1 left zombies");
    std::fs::write(dir.join("done"), "").unwrap();
    let out = run.wait();
    out.assert_code(0);
    // Orphans' exits are not the child's: no restart, no spurious state.
    assert!(out.statuses.iter().all(|s| s["restart_count"] == 0));
}

/// Kills the namespace (through `unshare --kill-child`) when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        kill_tree(self.0.id() as i32);
        let _ = self.0.wait();
    }
}

#[test]
fn negative_control_a_pid1_that_does_not_reap_leaves_100_zombies() {
    let dir = TestDir::new("reap-control");
    let script = workload(&dir);
    // PID 1 is `sleep`, which never waits: the orphans it inherits stay zombies.
    let child = sh_as_pid1(&format!("{} & exec sleep 30", q(&script))).stderr(Stdio::null()).spawn().unwrap();
    let unshare = child.id() as i32;
    let guard = Guard(child);
    let pid1 = wait_until("PID 1 of the namespace", || {
        procs().into_iter().find(|p| p.ppid == unshare && p.comm == "sleep").map(|p| p.pid)
    });
    let ppids = wait_orphans_done(&dir, pid1);
    assert!(ppids.iter().all(|&p| p == 1));
    // Every orphan has said it is done; wait (bounded) until each has also exited: a zombie.
    let left = wait_until("every orphan to be a zombie under a non-reaping PID 1", || {
        let z = zombies_of(pid1);
        (z >= ORPHANS).then_some(z)
    });
    println!("zombies left under a non-reaping PID 1: {left}");
    assert_eq!(left, ORPHANS, "the control must show the zombies the real test looks for");
    drop(guard);
}

#[test]
fn subreaper_reaps_orphans_when_not_pid1() {
    let dir = TestDir::new("reap-sub");
    let script = workload(&dir);
    let run = Rv::new(&dir).cmd([&script]).spawn();
    let rv = run.rankvisor_pid();
    let ppids = wait_orphans_done(&dir, rv);
    assert!(ppids.iter().all(|&p| p == rv), "every orphan was reparented to rankvisor ({rv}): {ppids:?}");
    let left = settle_zombies(rv);
    println!("zombies left under rankvisor as subreaper: {left}");
    assert_eq!(left, 0, "rankvisor as subreaper left zombies");
    std::fs::write(dir.join("done"), "").unwrap();
    run.wait().assert_code(0);
}

#[test]
fn negative_control_without_a_subreaper_orphans_go_elsewhere() {
    let dir = TestDir::new("reap-sub-control");
    let script = workload(&dir);
    let child = Command::new("sh").args(["-c", &format!("{}; :", q(&script))]).process_group(0).spawn().unwrap();
    let parent = child.id() as i32;
    let guard = Guard(child);
    wait_file(&dir.join("spawned"));
    let ppids: Vec<i32> = wait_until("every orphan to record its parent", || {
        let text = read(&dir.join("ppids"));
        (text.lines().count() == ORPHANS).then(|| text.lines().map(|l| l.trim().parse().unwrap()).collect())
    });
    assert!(ppids.iter().all(|&p| p != parent), "a plain parent does not inherit the orphans: {ppids:?}");
    std::fs::write(dir.join("done"), "").unwrap();
    drop(guard);
}

//! Issue 2, item 5: processes that left the child's process group (setsid) get TERM, and a grace
//! period to clean up, before rankvisor exits; as PID 1 the kernel would otherwise SIGKILL them.

use crate::common;
use common::*;
use std::time::Instant;

/// A child that starts a setsid escapee trapping TERM, waits until the escapee is ready, then exits.
fn escaping_child(dir: &TestDir, escapee_trap: &str, exit_code: i32) -> String {
    let escapee = dir.script(
        "escapee.sh",
        &format!(
            "{escapee_trap}
             echo $$ > {pid}; touch {ready}
             while :; do sleep 0.05; done",
            pid = q(&dir.file("escapee.pid")),
            ready = q(&dir.file("ready"))
        ),
    );
    format!(
        "setsid {escapee} & while [ ! -e {ready} ]; do sleep 0.01; done; exit {exit_code}",
        escapee = q(&escapee),
        ready = q(&dir.file("ready"))
    )
}

fn got_term_trap(dir: &TestDir) -> String {
    format!("trap 'echo got-term > {}; exit 0' TERM", q(&dir.file("got-term")))
}

#[test]
fn pid1_terms_a_setsid_escapee_before_exiting() {
    let dir = TestDir::new("escapee-pid1");
    let out = Rv::new(&dir)
        .pid1()
        .args(["--restart-policy", "Never"])
        .sh(&escaping_child(&dir, &got_term_trap(&dir), 3))
        .run();
    out.assert_code(3);
    assert_eq!(read(&dir.join("got-term")), "got-term\n", "the escapee got TERM before PID 1 exited");
    // It was really in another session, i.e. outside the child's process group.
    assert!(out.stderr.contains("leftover"), "stderr:\n{}", out.stderr);
}

#[test]
fn negative_control_a_pid1_that_just_exits_leaves_no_time_to_clean_up() {
    // Same escapee under `sh` as PID 1: when sh exits, the kernel SIGKILLs the namespace.
    let dir = TestDir::new("escapee-control");
    // output() returns once every holder of the stdout and stderr pipes has gone, the escapee
    // among them: past it, the escapee can no longer write its file.
    let status = sh_as_pid1(&escaping_child(&dir, &got_term_trap(&dir), 0)).output().unwrap().status;
    assert!(status.success());
    assert!(dir.join("ready").exists());
    assert!(!dir.join("got-term").exists(), "the control must lose the escapee's cleanup");
}

#[test]
fn subreaper_terms_a_setsid_escapee_before_exiting() {
    let dir = TestDir::new("escapee-sub");
    let out =
        Rv::new(&dir).args(["--restart-policy", "Never"]).sh(&escaping_child(&dir, &got_term_trap(&dir), 0)).run();
    out.assert_code(0);
    assert_eq!(read(&dir.join("got-term")), "got-term\n");
    let pid: i32 = read(&dir.join("escapee.pid")).trim().parse().unwrap();
    assert!(!alive(pid), "escapee {pid} outlived rankvisor");
}

#[test]
fn an_escapee_ignoring_term_is_killed_after_the_grace_period() {
    let dir = TestDir::new("escapee-kill");
    let run = Rv::new(&dir)
        .args(["--restart-policy", "Never", "--grace-period", "300ms"])
        .sh(&escaping_child(&dir, "trap '' TERM", 5))
        .spawn();
    wait_file(&dir.join("ready"));
    let t0 = Instant::now();
    let out = run.wait();
    println!("child exit -> rankvisor exit: {:?} (grace 300ms)", t0.elapsed());
    out.assert_code(5);
    let pid: i32 = read(&dir.join("escapee.pid")).trim().parse().unwrap();
    assert!(!alive(pid), "escapee {pid} outlived rankvisor");
    assert!(out.stderr.contains("SIGKILL"), "stderr:\n{}", out.stderr);
}

#[test]
fn term_to_pid1_also_reaches_escapees() {
    let dir = TestDir::new("escapee-term");
    let escapee = dir.script(
        "escapee.sh",
        &format!(
            "trap 'echo got-term > {got}; exit 0' TERM; touch {ready}; while :; do sleep 0.05; done",
            got = q(&dir.file("got-term")),
            ready = q(&dir.file("ready"))
        ),
    );
    let run = Rv::new(&dir).pid1().sh(&format!("setsid {} & exec sleep 1000", q(&escapee))).spawn();
    wait_file(&dir.join("ready"));
    run.signal(libc::SIGTERM);
    let out = run.wait();
    out.assert_code(143);
    assert_eq!(read(&dir.join("got-term")), "got-term\n");
}

#[test]
fn leftovers_in_the_childs_group_get_term_when_the_child_exits() {
    // The child exits 0 but leaves a background job in its own group: rankvisor still exits (it
    // does not wait for the default 30 s grace, the job dies of TERM) and the job is gone.
    let dir = TestDir::new("leftover-group");
    let out = Rv::new(&dir)
        .args(["--restart-policy", "Never"])
        .sh(&format!("sleep 1000 & echo $! > {}; exit 0", q(&dir.file("bg.pid"))))
        .spawn()
        // Bounded well below the 30 s default grace it must not wait for, generous for a loaded machine.
        .wait_for(std::time::Duration::from_secs(20));
    out.assert_code(0);
    let pid: i32 = read(&dir.join("bg.pid")).trim().parse().unwrap();
    assert!(!alive(pid), "background job {pid} outlived rankvisor");
    println!("rankvisor ran {:?}", out.elapsed);
}

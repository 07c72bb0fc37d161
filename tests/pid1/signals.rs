//! Issue 2, item 2: TERM and INT sent to rankvisor stop the child's whole process group (grace
//! period, then SIGKILL) and rankvisor exits with the child's status; other signals reach the child.

use crate::common;
use common::*;
use std::time::{Duration, Instant};

#[test]
fn term_to_pid1_stops_an_untrapped_child_143() {
    let dir = TestDir::new("term-pid1");
    let ready = dir.file("ready");
    // No trap: the child's default TERM disposition (restored by rankvisor) kills it.
    let run = Rv::new(&dir).pid1().sh(&format!("touch {}; exec sleep 1000", q(&ready))).spawn();
    wait_file(&dir.join("ready"));
    run.signal(libc::SIGTERM);
    let out = run.wait();
    out.assert_code(143);
    assert_eq!(out.last_status()["last_exit"]["signaled"], 15);
    assert!(out.stderr.contains("stopped by SIGTERM"), "stderr:\n{}", out.stderr);
}

#[test]
fn term_to_pid1_from_inside_the_namespace_stops_the_child() {
    // `kill 1` from the training program (or a sidecar sharing the PID namespace) is a shutdown too:
    // init only gets signals it handles, and rankvisor reads them from a signalfd.
    let dir = TestDir::new("term-inside");
    let out = Rv::new(&dir).pid1().sh(&format!("kill -TERM 1; sleep 30; touch {}", q(&dir.file("survived")))).run();
    out.assert_code(143);
    assert!(!dir.join("survived").exists());
}

#[test]
fn int_to_pid1_stops_the_child_130() {
    let dir = TestDir::new("int-pid1");
    let ready = dir.file("ready");
    let run = Rv::new(&dir).pid1().sh(&format!("touch {}; exec sleep 1000", q(&ready))).spawn();
    wait_file(&dir.join("ready"));
    run.signal(libc::SIGINT);
    run.wait().assert_code(130);
}

#[test]
fn term_reaches_grandchildren_in_the_group() {
    let dir = TestDir::new("term-group");
    let (pids, ready, log) = (dir.file("pids"), dir.file("ready"), dir.file("log"));
    // Not PID 1, so the grandchildren's host pids are visible and outlive nothing by accident.
    // The child's own TERM trap waits for its grandchildren: it can only finish (with 0) once the
    // group-wide TERM has stopped them, not through rankvisor's final sweep (which comes later).
    let script = format!(
        "sleep 1000 & echo $! >> {pids}; sleep 1000 & echo $! >> {pids}
         trap 'wait; echo children-gone > {log}; exit 0' TERM
         touch {ready}; wait",
        pids = q(&pids),
        ready = q(&ready),
        log = q(&log)
    );
    let run = Rv::new(&dir).args(["--grace-period", "10s"]).sh(&script).spawn();
    wait_file(&dir.join("ready"));
    let grandchildren: Vec<i32> = read(&dir.join("pids")).lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(grandchildren.len(), 2);
    assert!(grandchildren.iter().all(|&p| alive(p)));
    run.signal(libc::SIGTERM);
    let out = run.wait();
    out.assert_code(0);
    assert_eq!(read(&dir.join("log")), "children-gone\n");
    for p in grandchildren {
        assert!(!alive(p), "grandchild {p} survived");
    }
}

#[test]
fn term_stops_an_untrapped_shell_and_its_background_jobs() {
    let dir = TestDir::new("term-sh");
    let (pids, ready) = (dir.file("pids"), dir.file("ready"));
    let script = format!(
        "sleep 1000 & echo $! >> {pids}; sleep 1000 & echo $! >> {pids}; touch {ready}; wait",
        pids = q(&pids),
        ready = q(&ready)
    );
    let run = Rv::new(&dir).sh(&script).spawn();
    wait_file(&dir.join("ready"));
    let grandchildren: Vec<i32> = read(&dir.join("pids")).lines().map(|l| l.parse().unwrap()).collect();
    run.signal(libc::SIGTERM);
    let out = run.wait();
    out.assert_code(143);
    for p in grandchildren {
        assert!(!alive(p), "grandchild {p} survived");
    }
}

#[test]
fn a_child_ignoring_term_is_killed_after_the_grace_period_137() {
    let dir = TestDir::new("grace");
    let ready = dir.file("ready");
    let run = Rv::new(&dir)
        .pid1()
        .args(["--grace-period", "500ms"])
        .sh(&format!("trap '' TERM; touch {}; exec sleep 1000", q(&ready)))
        .spawn();
    wait_file(&dir.join("ready"));
    let t0 = Instant::now();
    run.signal(libc::SIGTERM);
    let stopping = run.wait_status("state Stopping", |s| s["state"] == "Stopping");
    assert!(stopping["child_pid"].is_i64());
    let out = run.wait();
    let took = t0.elapsed();
    println!("TERM -> exit took {took:?} with a 500ms grace period");
    out.assert_code(137);
    assert_eq!(out.last_status()["last_exit"]["signaled"], 9);
    assert!(took >= Duration::from_millis(450), "SIGKILL came before the grace period ended: {took:?}");
    assert!(out.stderr.contains("SIGKILL"), "stderr:\n{}", out.stderr);
}

#[test]
fn a_child_that_handles_term_keeps_its_own_code() {
    let dir = TestDir::new("trap-term");
    let ready = dir.file("ready");
    let run = Rv::new(&dir)
        .pid1()
        .sh(&format!("trap 'exit 42' TERM; touch {}; while :; do sleep 0.05; done", q(&ready)))
        .spawn();
    wait_file(&dir.join("ready"));
    run.signal(libc::SIGTERM);
    run.wait().assert_code(42);
}

#[test]
fn usr1_usr2_and_hup_reach_the_child_of_pid1() {
    let dir = TestDir::new("forward");
    let (ready, log) = (dir.file("ready"), dir.file("log"));
    let script = format!(
        "trap 'echo USR1 >> {log}' USR1; trap 'echo USR2 >> {log}' USR2; trap 'echo HUP >> {log}' HUP
         trap 'exit 0' TERM
         touch {ready}; while :; do sleep 0.05; done",
        log = q(&log),
        ready = q(&ready)
    );
    let run = Rv::new(&dir).pid1().sh(&script).spawn();
    wait_file(&dir.join("ready"));
    for (sig, name) in [(libc::SIGUSR1, "USR1"), (libc::SIGHUP, "HUP"), (libc::SIGUSR2, "USR2")] {
        run.signal(sig);
        wait_until(&format!("{name} in the child's log"), || read(&dir.join("log")).contains(name).then_some(()));
    }
    assert!(run.statuses().iter().all(|s| s["restart_count"] == 0), "forwarded signals do not restart");
    run.signal(libc::SIGTERM);
    let out = run.wait();
    out.assert_code(0);
    assert_eq!(read(&dir.join("log")), "USR1\nHUP\nUSR2\n");
}

#[test]
fn term_is_honoured_even_when_rankvisor_was_started_with_it_ignored() {
    // A shell's background job starts with INT ignored, `nohup` with HUP ignored, some runtimes
    // with TERM ignored: rankvisor's blocked signals are queued regardless.
    let dir = TestDir::new("ign-term");
    let ready = dir.file("ready");
    let run = Rv::new(&dir)
        .ignore_signal(libc::SIGTERM)
        .ignore_signal(libc::SIGINT)
        .sh(&format!("touch {}; exec sleep 1000", q(&ready)))
        .spawn();
    wait_file(&dir.join("ready"));
    run.signal(libc::SIGINT);
    run.wait().assert_code(130);
}

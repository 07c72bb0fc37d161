//! Issue 3, item 6: when rankvisor gives up, the reason is written to the termination message file
//! (`--termination-log PATH`), replacing what was there, so `kubectl describe pod` shows it.

use crate::common;
use common::*;

fn rv(dir: &TestDir) -> Rv {
    Rv::new(dir).args(["--termination-log", &dir.file("termination-log"), "--backoff-initial", "20ms"])
}

fn message(dir: &TestDir) -> String {
    read(&dir.join("termination-log"))
}

#[test]
fn backoff_limit_reached() {
    let dir = TestDir::new("tl-limit");
    rv(&dir).args(["--backoff-limit", "1"]).sh("exit 3").run().assert_code(3);
    assert_eq!(message(&dir), "child exited with code 3; gave up after 1 restarts (backoff limit 1)\n");
}

#[test]
fn never_policy_failure() {
    let dir = TestDir::new("tl-never");
    rv(&dir).args(["--restart-policy", "Never"]).pid1().sh("exit 4").run().assert_code(4);
    assert_eq!(message(&dir), "child exited with code 4; restart policy Never does not restart it\n");
}

#[test]
fn killed_child_under_never_policy() {
    let dir = TestDir::new("tl-sig");
    rv(&dir).args(["--restart-policy", "Never"]).sh("kill -SEGV $$").run().assert_code(139);
    assert_eq!(message(&dir), "child killed by signal 11 (SIGSEGV); restart policy Never does not restart it\n");
}

#[test]
fn permanent_code_under_exit_code_policy() {
    let dir = TestDir::new("tl-perm");
    rv(&dir).args(["--restart-policy", "ExitCode"]).sh("exit 3").run().assert_code(3);
    assert_eq!(message(&dir), "child exited with code 3; restart policy ExitCode does not restart it\n");
}

#[test]
fn command_not_found() {
    let dir = TestDir::new("tl-127");
    let missing = dir.file("missing-trainer");
    rv(&dir).cmd([&missing]).run().assert_code(127);
    let m = message(&dir);
    assert!(m.contains("missing-trainer") && m.contains("No such file"), "{m}");
}

#[test]
fn stopped_by_term() {
    let dir = TestDir::new("tl-term");
    let ready = dir.file("ready");
    let run = rv(&dir).pid1().sh(&format!("touch {}; exec sleep 1000", q(&ready))).spawn();
    wait_file(&dir.join("ready"));
    run.signal(libc::SIGTERM);
    run.wait().assert_code(143);
    assert_eq!(message(&dir), "stopped by SIGTERM: child killed by signal 15 (SIGTERM)\n");
}

#[test]
fn the_old_content_is_replaced() {
    let dir = TestDir::new("tl-replace");
    std::fs::write(dir.join("termination-log"), "a much longer message from an earlier container run\n").unwrap();
    rv(&dir).args(["--restart-policy", "Never"]).sh("exit 2").run().assert_code(2);
    assert_eq!(message(&dir), "child exited with code 2; restart policy Never does not restart it\n");
}

#[test]
fn success_writes_nothing() {
    let dir = TestDir::new("tl-ok");
    rv(&dir).args(["--restart-policy", "OnFailure"]).sh("exit 0").run().assert_code(0);
    assert!(!dir.join("termination-log").exists(), "{}", message(&dir));
}

#[test]
fn path_from_the_environment() {
    let dir = TestDir::new("tl-env");
    Rv::new(&dir)
        .env("RANKVISOR_TERMINATION_LOG", &dir.file("termination-log"))
        .args(["--restart-policy", "Never"])
        .sh("exit 6")
        .run()
        .assert_code(6);
    assert_eq!(message(&dir), "child exited with code 6; restart policy Never does not restart it\n");
}

#[test]
fn configuration_error_is_written_too() {
    let dir = TestDir::new("tl-config");
    rv(&dir)
        .env("RANK", "5")
        .env("WORLD_SIZE", "4")
        .env("MASTER_ADDR", "m")
        .env("MASTER_PORT", "1234")
        .sh("true")
        .run()
        .assert_code(64);
    let m = message(&dir);
    assert!(m.contains("RANK=\"5\"") && m.contains("expected"), "termination log: {m:?}");
}

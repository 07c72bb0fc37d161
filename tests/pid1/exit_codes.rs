//! Issue 2, item 1: rankvisor exits with its child's status: the code itself, 128+N for a child
//! killed by signal N, 126 for a command that cannot be executed and 127 for one that is not found.

use crate::common;
use common::*;

fn never(dir: &TestDir) -> Rv {
    Rv::new(dir).args(["--restart-policy", "Never"])
}

#[test]
fn runs_as_pid1_of_its_namespace() {
    let dir = TestDir::new("pid1");
    // The child is rankvisor's child, and rankvisor is PID 1: the child's parent pid is 1.
    let out = never(&dir).pid1().sh("echo ppid=$PPID; echo parent=$(cat /proc/1/comm)").run();
    out.assert_code(0);
    assert!(out.stdout.contains("ppid=1\n"), "stdout: {}", out.stdout);
    assert!(out.stdout.contains("parent=rankvisor\n"), "stdout: {}", out.stdout);
}

#[test]
fn exit_codes_pass_through_as_pid1() {
    let dir = TestDir::new("codes-pid1");
    for code in [0, 1, 7, 255] {
        let out = never(&dir).pid1().sh(&format!("exit {code}")).run();
        out.assert_code(code);
    }
}

#[test]
fn exit_codes_pass_through_without_pid1() {
    let dir = TestDir::new("codes");
    for code in [0, 1, 7, 255] {
        let out = never(&dir).sh(&format!("exit {code}")).run();
        out.assert_code(code);
        let last = out.last_status();
        assert_eq!(last["last_exit"]["exited"], code, "status: {last}");
        assert_eq!(last["state"], if code == 0 { "Succeeded" } else { "Failed" });
    }
}

#[test]
fn killed_by_sigkill_is_137() {
    let dir = TestDir::new("kill9");
    let out = never(&dir).pid1().sh("kill -KILL $$").run();
    out.assert_code(137);
    assert_eq!(out.last_status()["last_exit"]["signaled"], 9);
}

#[test]
fn killed_by_sigterm_is_143() {
    let dir = TestDir::new("kill15");
    let out = never(&dir).pid1().sh("kill -TERM $$").run();
    out.assert_code(143);
    assert_eq!(out.last_status()["last_exit"]["signaled"], 15);
}

#[test]
fn not_executable_is_126() {
    let dir = TestDir::new("126");
    let path = dir.join("not-executable");
    std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
    let out = never(&dir).pid1().cmd([&path]).run();
    out.assert_code(126);
    assert!(out.stderr.contains("not-executable"), "the message names the command:\n{}", out.stderr);
    assert!(out.stderr.contains("Permission denied"), "stderr:\n{}", out.stderr);
}

#[test]
fn a_directory_is_not_executable_126() {
    let dir = TestDir::new("126dir");
    let out = never(&dir).cmd([dir.path()]).run();
    out.assert_code(126);
}

#[test]
fn not_found_is_127() {
    let dir = TestDir::new("127");
    let out = never(&dir).pid1().cmd([dir.join("no-such-command")]).run();
    out.assert_code(127);
    assert!(out.stderr.contains("no-such-command"), "the message names the command:\n{}", out.stderr);
    // Looked up in PATH too.
    let out = never(&dir).cmd(["rankvisor-test-no-such-command-in-path"]).run();
    out.assert_code(127);
}

#[test]
fn spawn_failure_is_not_retried_even_under_always() {
    let dir = TestDir::new("127always");
    let out = Rv::new(&dir)
        .args(["--restart-policy", "Always", "--backoff-initial", "10ms"])
        .cmd([dir.join("missing")])
        .run();
    out.assert_code(127);
    assert_eq!(out.last_status()["restart_count"], 0);
}

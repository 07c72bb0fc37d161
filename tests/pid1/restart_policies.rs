//! Issue 3, item 1: every restart policy end to end with real children, runs counted by the
//! children themselves (one line appended per run).

use crate::common;
use common::*;

/// A child that logs its run, then exits with the code `codes` gives for its restart count
/// (the last code repeats).
fn child(dir: &TestDir, codes: &[&str]) -> String {
    let mut cases = String::new();
    for (i, c) in codes.iter().enumerate() {
        let pat = if i + 1 == codes.len() { "*".to_string() } else { i.to_string() };
        cases.push_str(&format!("{pat}) {c};; "));
    }
    format!("echo run >> {}; case $RANKVISOR_RESTART_COUNT in {cases} esac", q(&dir.file("runs")))
}

fn runs(dir: &TestDir) -> usize {
    read(&dir.join("runs")).lines().count()
}

fn rv(dir: &TestDir, policy: &str, limit: u32) -> Rv {
    Rv::new(dir).args(["--restart-policy", policy, "--backoff-limit", &limit.to_string(), "--backoff-initial", "20ms"])
}

#[test]
fn on_failure_with_limit_3_runs_4_times_and_exits_with_the_childs_code() {
    let dir = TestDir::new("onfailure");
    let out = rv(&dir, "OnFailure", 3).sh(&child(&dir, &["exit 3"])).run();
    out.assert_code(3);
    assert_eq!(runs(&dir), 4);
    let last = out.last_status();
    assert_eq!(last["state"], "Failed");
    assert_eq!(last["restart_count"], 3);
    // The first restart is immediate (the kubelet's); every later one went through Restarting.
    let restarting = out.statuses.iter().filter(|s| s["state"] == "Restarting").count();
    assert_eq!(restarting, 2, "statuses: {:?}", out.statuses);
}

#[test]
fn on_failure_does_not_restart_a_success() {
    let dir = TestDir::new("onfailure-ok");
    let out = rv(&dir, "OnFailure", 3).sh(&child(&dir, &["exit 0"])).run();
    out.assert_code(0);
    assert_eq!(runs(&dir), 1);
    assert_eq!(out.last_status()["state"], "Succeeded");
}

#[test]
fn on_failure_restarts_a_child_killed_by_a_signal() {
    let dir = TestDir::new("onfailure-sig");
    let out = rv(&dir, "OnFailure", 1).sh(&child(&dir, &["kill -KILL $$"])).run();
    out.assert_code(137);
    assert_eq!(runs(&dir), 2);
}

#[test]
fn never_runs_once() {
    let dir = TestDir::new("never");
    let out = rv(&dir, "Never", 6).sh(&child(&dir, &["exit 1"])).run();
    out.assert_code(1);
    assert_eq!(runs(&dir), 1);
    assert_eq!(out.last_status()["state"], "Failed");
    assert_eq!(out.last_status()["restart_count"], 0);
}

#[test]
fn exit_code_policy_retries_138_137_143_130_and_stops_on_1() {
    let dir = TestDir::new("exitcode");
    let codes = ["exit 138", "kill -KILL $$", "exit 143", "kill -INT $$", "exit 1"];
    let out = rv(&dir, "ExitCode", 6).sh(&child(&dir, &codes)).run();
    out.assert_code(1);
    assert_eq!(runs(&dir), 5);
}

#[test]
fn exit_code_policy_stops_at_once_on_1() {
    let dir = TestDir::new("exitcode-1");
    let out = rv(&dir, "ExitCode", 6).sh(&child(&dir, &["exit 1"])).run();
    out.assert_code(1);
    assert_eq!(runs(&dir), 1);
}

/// `IsRetryableExitCode` (training-operator `pkg/util/train/train_util.go`, since v1.7): every
/// code below 128 is permanent, every code from 128 up is retried.
#[test]
fn exit_code_policy_treats_codes_below_128_as_permanent() {
    for code in [2, 126, 127] {
        let dir = TestDir::new("exitcode-perm");
        let out = rv(&dir, "ExitCode", 6).sh(&child(&dir, &[&format!("exit {code}")])).run();
        out.assert_code(code);
        assert_eq!(runs(&dir), 1, "exit {code} is permanent");
    }
}

#[test]
fn exit_code_policy_retries_every_code_from_128() {
    let dir = TestDir::new("exitcode-128");
    let codes = ["exit 128", "exit 139", "exit 255", "exit 3"];
    let out = rv(&dir, "ExitCode", 6).sh(&child(&dir, &codes)).run();
    out.assert_code(3);
    assert_eq!(runs(&dir), 4, "128, 139 and 255 are retried; 3 is permanent");
}

#[test]
fn always_restarts_after_success_up_to_the_limit() {
    let dir = TestDir::new("always");
    let out = rv(&dir, "Always", 2).sh(&child(&dir, &["exit 0"])).run();
    out.assert_code(0);
    assert_eq!(runs(&dir), 3);
    assert_eq!(out.last_status()["restart_count"], 2);
}

#[test]
fn a_child_that_succeeds_on_its_third_run_ends_with_0() {
    let dir = TestDir::new("third");
    let out = rv(&dir, "OnFailure", 6).sh(&child(&dir, &["exit 1", "kill -KILL $$", "exit 0"])).run();
    out.assert_code(0);
    assert_eq!(runs(&dir), 3);
    let last = out.last_status();
    assert_eq!(last["state"], "Succeeded");
    assert_eq!(last["restart_count"], 2);
}

#[test]
fn backoff_limit_0_means_no_restart() {
    let dir = TestDir::new("limit0");
    let out = rv(&dir, "OnFailure", 0).sh(&child(&dir, &["exit 9"])).run();
    out.assert_code(9);
    assert_eq!(runs(&dir), 1);
}

#[test]
fn policy_and_limit_from_the_environment() {
    let dir = TestDir::new("policy-env");
    let out = Rv::new(&dir)
        .env("RANKVISOR_RESTART_POLICY", "OnFailure")
        .env("RANKVISOR_BACKOFF_LIMIT", "2")
        .env("RANKVISOR_BACKOFF_INITIAL", "20ms")
        .sh(&child(&dir, &["exit 4"]))
        .run();
    out.assert_code(4);
    assert_eq!(runs(&dir), 3);
}

#[test]
fn pid1_restarts_too() {
    let dir = TestDir::new("policy-pid1");
    let out = rv(&dir, "OnFailure", 2).pid1().sh(&child(&dir, &["exit 1", "exit 0"])).run();
    out.assert_code(0);
    assert_eq!(runs(&dir), 2);
}

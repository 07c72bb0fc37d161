//! Issue 3, item 5: hang detection from the heartbeat file. A child that never beats is stopped and
//! restarted; one that beats runs to its end; JSON progress in the heartbeat shows up in the status
//! stream and in rankvisor's log.

use crate::common;
use common::*;
use serde_json::Value;

fn hang_args<'a>(dir: &TestDir, timeout: &'a str, startup: &'a str) -> Vec<String> {
    ["--heartbeat-file", &dir.file("hb"), "--hang-timeout", timeout, "--hang-startup", startup]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// A child that logs its run, then beats into `target` every 0.1 s until `secs` seconds (by the
/// wall clock, to within a second) have passed, then exits 0. Beats 0.1 s apart against a
/// `--hang-timeout` of seconds: a loaded machine may stall the loop for a while without a false hang.
fn beating_child(dir: &TestDir, target: &str, secs: u32) -> String {
    format!(
        "echo run >> {runs}; end=$(( $(date +%s) + {secs} )); i=0
         while [ $(date +%s) -lt $end ]; do echo \"{{\\\"step\\\": $i}}\" > {target}; sleep 0.1; i=$((i+1)); done",
        runs = q(&dir.file("runs")),
    )
}

#[test]
fn a_child_that_never_beats_is_stopped_and_restarted() {
    let dir = TestDir::new("hang-never");
    let out = Rv::new(&dir)
        .args(hang_args(&dir, "300ms", "300ms"))
        .args(["--backoff-initial", "20ms", "--backoff-limit", "1", "--termination-log", &dir.file("termination-log")])
        .sh(&format!("echo run >> {}; exec sleep 30", q(&dir.file("runs"))))
        .run();
    out.assert_code(143);
    assert_eq!(read(&dir.join("runs")).lines().count(), 2, "hung, restarted once, hung again");
    assert!(
        out.statuses.iter().any(|s| s["last_exit_reason"] == "Hung" && s["hang_detections"].as_u64() >= Some(1)),
        "statuses: {:?}",
        out.statuses
    );
    let last = out.last_status();
    assert_eq!(last["hang_detections"], 2);
    assert_eq!(last["state"], "Failed");
    assert_eq!(last["last_exit"]["signaled"], 15);
    // The snapshot taken before the stop names the process, which is not Python (tests/pid1/stacks.rs).
    let msg = read(&dir.join("termination-log"));
    let (head, stacks) = msg.split_once("; stacks: pid ").unwrap_or_else(|| panic!("no stacks: {msg}"));
    assert_eq!(head, "child hung (no first heartbeat within 300ms of its start), then killed by signal 15 (SIGTERM)");
    assert!(stacks.contains(" (sleep) S (sleeping)"), "{msg}");
    assert!(stacks.ends_with(": not a Python process; gave up after 1 restarts (backoff limit 1)\n"), "{msg}");
}

#[test]
fn negative_control_beats_to_the_wrong_file_are_no_beats() {
    // The same child and timeouts as `a_child_that_beats_runs_to_the_end`, beating elsewhere.
    let dir = TestDir::new("hang-wrong");
    let wrong = dir.file("not-the-heartbeat");
    let out = Rv::new(&dir)
        .args(hang_args(&dir, "2s", "2s"))
        .args(["--restart-policy", "Never"])
        .sh(&beating_child(&dir, &q(&wrong), 6))
        .run();
    assert_ne!(out.code(), 0);
    assert_eq!(out.last_status()["hang_detections"], 1);
}

#[test]
fn a_child_that_beats_runs_to_the_end() {
    // At least 5 s of work with a 2 s timeout: only the beats (every 0.1 s) keep it alive.
    let dir = TestDir::new("hang-beats");
    let out = Rv::new(&dir)
        .args(hang_args(&dir, "2s", "2s"))
        .args(["--restart-policy", "OnFailure", "--backoff-initial", "20ms"])
        .sh(&beating_child(&dir, "\"$RANKVISOR_HEARTBEAT_FILE\"", 6))
        .run();
    out.assert_code(0);
    assert_eq!(read(&dir.join("runs")).lines().count(), 1);
    let last = out.last_status();
    assert_eq!(last["hang_detections"], 0);
    assert_eq!(last["state"], "Succeeded");
}

#[test]
fn the_startup_allowance_covers_a_slow_first_beat() {
    // The first beat comes after 3 s: surely later than --hang-timeout (1 s), well within
    // --hang-startup (20 s); the child ends right after it.
    let dir = TestDir::new("hang-startup");
    let out = Rv::new(&dir)
        .args(hang_args(&dir, "1s", "20s"))
        .args(["--restart-policy", "Never"])
        .sh("sleep 3; echo '{\"step\": 1}' > \"$RANKVISOR_HEARTBEAT_FILE\"")
        .run();
    out.assert_code(0);
    assert_eq!(out.last_status()["hang_detections"], 0);
}

#[test]
fn a_stale_heartbeat_from_before_the_start_is_no_beat() {
    let dir = TestDir::new("hang-stale");
    std::fs::write(dir.join("hb"), "{\"step\": 1}").unwrap();
    let out = Rv::new(&dir)
        .args(hang_args(&dir, "300ms", "300ms"))
        .args(["--restart-policy", "Never"])
        .sh("exec sleep 30")
        .run();
    out.assert_code(143);
    assert_eq!(out.last_status()["hang_detections"], 1);
}

#[test]
fn progress_reaches_the_status_line_and_the_log() {
    let dir = TestDir::new("hang-progress");
    let status = q(&dir.file("status.jsonl"));
    // The child writes progress, then waits until rankvisor has published it (bounded).
    let script = format!(
        "echo '{{\"step\": 7, \"loss\": 0.5}}' > \"$RANKVISOR_HEARTBEAT_FILE\"
         i=0; while [ $i -lt 500 ] && ! grep -q '\"step\":7' {status}; do sleep 0.02; i=$((i+1)); done"
    );
    let out = Rv::new(&dir)
        .args(hang_args(&dir, "60s", "60s"))
        .args(["--restart-policy", "Never", "--log-format", "json"])
        .sh(&script)
        .run();
    out.assert_code(0);
    let with_progress = out
        .statuses
        .iter()
        .find(|s| !s["progress"].is_null())
        .unwrap_or_else(|| panic!("no progress in {:?}", out.statuses));
    assert_eq!(with_progress["progress"]["step"], 7);
    assert_eq!(with_progress["progress"]["loss"], 0.5);
    let log: Vec<Value> = out.stderr.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let line = log
        .iter()
        .find(|l| l["fields"]["message"] == "training progress")
        .unwrap_or_else(|| panic!("no progress log line in:\n{}", out.stderr));
    let progress = line["fields"]["progress"].to_string();
    assert!(progress.contains("step") && progress.contains('7'), "log line: {line}");
}

#[test]
fn a_hung_child_ignoring_term_is_killed_after_the_grace_period() {
    let dir = TestDir::new("hang-kill");
    let out = Rv::new(&dir)
        .args(hang_args(&dir, "200ms", "200ms"))
        .args(["--restart-policy", "Never", "--grace-period", "200ms"])
        .sh("trap '' TERM; exec sleep 30")
        .run();
    out.assert_code(137);
    assert_eq!(out.last_status()["hang_detections"], 1);
    assert_eq!(out.last_status()["last_exit"]["signaled"], 9);
}

#[test]
fn hang_is_retried_under_the_exit_code_policy() {
    // A hang is outside the program (like a kubelet liveness kill): ExitCode restarts it.
    let dir = TestDir::new("hang-exitcode");
    let script =
        format!("echo run >> {}; [ \"$RANKVISOR_RESTART_COUNT\" = 0 ] && exec sleep 30; exit 0", q(&dir.file("runs")));
    let out = Rv::new(&dir)
        .args(hang_args(&dir, "200ms", "200ms"))
        .args(["--restart-policy", "ExitCode", "--backoff-initial", "20ms"])
        .sh(&script)
        .run();
    out.assert_code(0);
    assert_eq!(read(&dir.join("runs")).lines().count(), 2);
}

#[test]
fn the_hung_reason_belongs_to_the_hung_run_only() {
    // Run 0 hangs and is restarted; run 1 exits 1 on its own: its status must not say Hung.
    let dir = TestDir::new("hang-reason");
    let out = Rv::new(&dir)
        .args(hang_args(&dir, "200ms", "200ms"))
        .args(["--backoff-initial", "20ms", "--backoff-limit", "1"])
        .sh("[ \"$RANKVISOR_RESTART_COUNT\" = 0 ] && exec sleep 30; exit 1")
        .run();
    out.assert_code(1);
    assert!(out.statuses.iter().any(|s| s["last_exit_reason"] == "Hung"), "run 0 was reported hung");
    let last = out.last_status();
    assert_eq!(last["last_exit"]["exited"], 1);
    assert!(last["last_exit_reason"].is_null(), "final status: {last}");
}

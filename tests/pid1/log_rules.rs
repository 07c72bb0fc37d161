//! `rankvisor log-rules test`: the AWS examples (examples/log-rules/) replayed on their sample logs,
//! JSON and YAML alike, and bad rules or logs refused with 64 and the culprit named.

use crate::common;

use common::{rankvisor, repo_file, wait_until, TestDir};
use std::io::Write;
use std::process::{Output, Stdio};

fn log_rules_test(rules: &str, log: &str, timestamps: bool) -> Output {
    let mut c = rankvisor();
    c.args(["log-rules", "test"]).arg(repo_file(rules)).arg(repo_file(log));
    if timestamps {
        c.arg("--timestamps");
    }
    c.output().unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}: {}", o.status, String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// The first printed row (of a replay with timestamps) whose verdict is `state`: (line number or
/// "-", time).
fn first_row_in(out: &str, state: &str) -> Option<(String, String)> {
    out.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        let (n, t, s) = (cols.first()?, cols.get(1)?, cols.get(2)?);
        (*s == state).then(|| (n.to_string(), t.to_string()))
    })
}

/// The line number of the first row (of a replay without timestamps) whose verdict is `state`.
fn first_line_in(out: &str, state: &str) -> Option<String> {
    out.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        (cols.get(1) == Some(&state)).then(|| cols[0].to_string())
    })
}

#[test]
fn job_start_hangs_past_its_cutoff_then_heals() {
    let out = stdout(&log_rules_test("examples/log-rules/job-start.yaml", "examples/log-rules/job-start.log", true));
    // 120 s cutoff, strict: the one-second tick after it.
    assert_eq!(first_row_in(&out, "HANGING"), Some(("-".into(), "+121.000s".into())), "{out}");
    assert!(out.contains("[LogHang_JobStart]"), "{out}");
    assert!(out.ends_with("final: HEALTHY\n"), "{out}");
}

#[test]
fn hang_fires_when_the_next_epoch_line_is_late_and_json_reads_as_yaml() {
    let yaml = stdout(&log_rules_test("examples/log-rules/hang.yaml", "examples/log-rules/hang.log", true));
    assert_eq!(first_row_in(&yaml, "HANGING"), Some(("-".into(), "+58.500s".into())), "{yaml}");
    assert!(yaml.ends_with("final: HANGING (LogHang_JobHangingDetection)\n"), "{yaml}");
    let json = stdout(&log_rules_test("examples/log-rules/hang.json", "examples/log-rules/hang.log", true));
    assert_eq!(json, yaml);
}

#[test]
fn loss_spike_is_slow_after_five_consecutive_points() {
    let out = stdout(&log_rules_test("examples/log-rules/loss-spike.yaml", "examples/log-rules/loss-spike.log", false));
    // Two points (lines 4, 5), a reset (6), five in a row (7..11).
    assert_eq!(first_line_in(&out, "SLOW").as_deref(), Some("11"), "{out}");
    assert!(out.ends_with("final: SLOW (LogSlow_LossSpikeDetection)\n"), "{out}");
}

#[test]
fn low_tflops_is_slow_then_hangs_when_the_lines_stop() {
    let out = stdout(&log_rules_test("examples/log-rules/tflops.yaml", "examples/log-rules/tflops.log", true));
    assert_eq!(first_row_in(&out, "SLOW"), Some(("10".into(), "+36.000s".into())), "{out}");
    assert_eq!(first_row_in(&out, "HANGING"), Some(("-".into(), "+42.000s".into())), "{out}");
}

#[test]
fn gpu_error_faults_at_once_and_stays_faulted() {
    let out = stdout(&log_rules_test("examples/log-rules/gpu-error.yaml", "examples/log-rules/gpu-error.log", false));
    assert_eq!(first_line_in(&out, "FAULTED").as_deref(), Some("3"), "{out}");
    assert!(out.ends_with("final: FAULTED (LogFault_GPU Error)\n"), "{out}");
}

#[test]
fn the_log_can_come_from_standard_input() {
    let mut child = rankvisor()
        .args(["log-rules", "test"])
        .arg(repo_file("examples/log-rules/gpu-error.yaml"))
        .args(["-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"ok\nRuntimeError: CUDA out of memory\n").unwrap();
    let out = stdout(&child.wait_with_output().unwrap());
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["state"], "FAULTED");
    assert_eq!(last["named"][0]["line"], "RuntimeError: CUDA out of memory\n");
}

/// `log-rules test` is an ordinary program: a TERM stops it (it ran with PID 1's blocked signals
/// once, and a log that never ended kept it forever).
#[test]
fn a_term_stops_log_rules_test_while_it_waits_for_the_log() {
    let mut child = rankvisor()
        .args(["log-rules", "test"])
        .arg(repo_file("examples/log-rules/gpu-error.yaml"))
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"ok\n").unwrap();
    // The first line's state is out: it is reading the log.
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("| ok") {
        line.clear();
        assert_ne!(std::io::BufRead::read_line(&mut out, &mut line).unwrap(), 0, "stdout ended early");
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = wait_until("log-rules test to stop on TERM", || child.try_wait().unwrap());
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGTERM));
    drop(stdin);
}

#[test]
fn bad_rules_exit_64_naming_the_rule_and_the_field() {
    let dir = TestDir::new("log-rules-bad");
    let log = dir.write("log", "x\n");
    for (rules, want) in [
        (
            r#"[{"name": "a", "logPattern": "(?<=x)y"}]"#,
            r#"log rule #1 ("a"): field logPattern: "(?<=x)y": lookbehind"#,
        ),
        (r#"[{"name": "a", "logPattern": ".*"}]"#, r#"field logPattern: ".*" matches an empty line"#),
        (
            r#"[{"name": "a", "logPattern": "x", "operator": "ge", "metricThreshold": 1}]"#,
            r#"field operator: "ge": expected gt, gteq, lt, lteq or eq"#,
        ),
        (
            r#"[{"name": "a", "logPattern": "x", "expectedStartCutoffInSeconds": 5}]"#,
            "field expectedStartCutoffInSeconds: unknown field",
        ),
        (
            r#"[{"name": "a", "logPattern": "x(\\d)", "metricThreshold": "2.5", "operator": "gt"}]"#,
            "field metricThreshold: expected an integer",
        ),
        (
            r#"[{"name": "a", "logPattern": "x"}, {"name": "a", "logPattern": "y"}]"#,
            r#"log rule #2 ("a"): field name: another rule has this name"#,
        ),
        (r#"[{"logPattern": "x"}]"#, "log rule #1 (no name): field name: required"),
        (
            r#"[{"name": "a", "logPattern": "x", "faultOnMatch": "false"}]"#,
            "field faultOnMatch: expected true or false",
        ),
        ("- name: a\n  logPattern: |\n    x\n", "line 2: block scalars"),
        ("{\"rules\": []}", "expected a list of rules"),
    ] {
        let path = dir.write("rules", rules);
        let out = rankvisor().args(["log-rules", "test"]).arg(&path).arg(&log).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{rules}: {err}");
        assert!(err.contains(want), "{rules}:\n  got {err}\n  want {want}");
    }
}

#[test]
fn a_line_without_a_timestamp_exits_64_naming_the_line() {
    let dir = TestDir::new("log-rules-stamp");
    let log = dir.write("log", "2025-06-17T05:50:00Z ok\nno stamp here\n");
    let out = rankvisor()
        .args(["log-rules", "test"])
        .arg(repo_file("examples/log-rules/hang.yaml"))
        .arg(&log)
        .arg("--timestamps")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2: \"no\" is not an RFC 3339 timestamp"), "{err}");
}

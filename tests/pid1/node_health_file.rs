//! The node-health gate with the labels-file source, end to end with the real binary.

use crate::common;
use common::rankvisor;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rv-nh-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write_labels(path: &Path, lines: &[&str]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, lines.join("\n") + "\n").unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn status_label(v: &str) -> String {
    format!("sagemaker.amazonaws.com/node-health-status=\"{v}\"")
}

fn run(dir: &Path, extra: &[&str], script: &str) -> Output {
    rankvisor()
        .args(["--node-health", &format!("file:{}", dir.join("labels").display())])
        .args(["--termination-log", dir.join("termination-log").to_str().unwrap()])
        .args(["--restart-policy", "Never", "--grace-period", "5s"])
        .args(extra)
        .args(["--", "sh", "-c", script])
        .env("MARK", dir.join("ran"))
        .output()
        .unwrap()
}

#[test]
fn every_unhealthy_value_refuses_to_start() {
    let cases: &[&[&str]] = &[
        &["sagemaker.amazonaws.com/node-health-status=\"Unschedulable\""],
        &["sagemaker.amazonaws.com/node-health-status=\"UnschedulablePendingReplacement\""],
        &["sagemaker.amazonaws.com/node-health-status=\"UnschedulablePendingReboot\""],
        &["sagemaker.amazonaws.com/node-health-status=\"SomethingNew\""],
        &[
            "sagemaker.amazonaws.com/node-health-status=\"Schedulable\"",
            "sagemaker.amazonaws.com/deep-health-check-status=\"InProgress\"",
        ],
        &[
            "sagemaker.amazonaws.com/node-health-status=\"Schedulable\"",
            "sagemaker.amazonaws.com/deep-health-check-status=\"Failed\"",
        ],
        &["this is not a labels file"],
    ];
    for (i, lines) in cases.iter().enumerate() {
        let dir = temp_dir(&format!("refuse{i}"));
        write_labels(&dir.join("labels"), lines);
        let out = run(&dir, &[], "touch \"$MARK\"");
        assert_eq!(out.status.code(), Some(138), "case {lines:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!dir.join("ran").exists(), "case {lines:?}: the child must not run");
        let reason = std::fs::read_to_string(dir.join("termination-log")).unwrap();
        let value = lines.last().unwrap().split('"').nth(1).unwrap_or("line 1");
        assert!(reason.contains(value), "case {lines:?}: termination log {reason:?} must name {value:?}");
    }
}

#[test]
fn missing_label_is_healthy_unless_required() {
    let dir = temp_dir("absent");
    write_labels(&dir.join("labels"), &["kubernetes.io/hostname=\"node-1\""]);
    assert_eq!(run(&dir, &[], "touch \"$MARK\"").status.code(), Some(0));
    assert!(dir.join("ran").exists());
    std::fs::remove_file(dir.join("ran")).unwrap();
    let out = run(&dir, &["--require-health-label"], "touch \"$MARK\"");
    assert_eq!(out.status.code(), Some(138));
    assert!(!dir.join("ran").exists());
}

#[test]
fn schedulable_starts_and_the_exit_code_passes_through() {
    let dir = temp_dir("ok");
    write_labels(&dir.join("labels"), &[&status_label("Schedulable")]);
    let out = run(&dir, &[], "touch \"$MARK\"; exit 3");
    assert_eq!(out.status.code(), Some(3));
    assert!(dir.join("ran").exists());
}

#[test]
fn a_label_change_mid_run_stops_the_child_and_exits_138() {
    let dir = temp_dir("flip");
    let labels = dir.join("labels");
    write_labels(&labels, &[&status_label("Schedulable")]);
    let ready = dir.join("ready");
    let got_term = dir.join("got-term");
    let script = format!(
        "trap 'touch {}; exit 0' TERM; touch {}; while true; do sleep 0.05; done",
        got_term.display(),
        ready.display()
    );
    let child = rankvisor()
        .args(["--node-health", &format!("file:{}", labels.display())])
        .args(["--termination-log", dir.join("termination-log").to_str().unwrap()])
        .args(["--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "the child never became ready");
        std::thread::sleep(Duration::from_millis(5));
    }
    let flipped = Instant::now();
    write_labels(
        &labels,
        &[&status_label("UnschedulablePendingReboot"), "sagemaker.amazonaws.com/fault-types=\"GpuFailure\""],
    );
    while !got_term.exists() {
        assert!(Instant::now() < deadline, "the child never got TERM");
        std::thread::sleep(Duration::from_millis(1));
    }
    println!("label change -> child's TERM handler ran: {:?} (file source, target < 100 ms)", flipped.elapsed());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(138), "{}", String::from_utf8_lossy(&out.stderr));
    let reason = std::fs::read_to_string(dir.join("termination-log")).unwrap();
    assert!(reason.contains("UnschedulablePendingReboot"), "{reason}");
    assert!(reason.contains("GpuFailure"), "the fault type is carried: {reason}");
}

#[test]
fn wait_mode_starts_once_healthy() {
    let dir = temp_dir("wait");
    let labels = dir.join("labels");
    write_labels(&labels, &[&status_label("Unschedulable")]);
    let (mut rd, wr) = std::io::pipe().unwrap();
    let mut cmd = rankvisor();
    cmd.args(["--node-health", &format!("file:{}", labels.display()), "--unhealthy-node", "wait"]).args([
        "--status-fd",
        "3",
        "--",
        "true",
    ]);
    let wr_fd = std::os::fd::AsRawFd::as_raw_fd(&wr);
    // SAFETY: dup2 in the forked child only, before exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            if libc::dup2(wr_fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.stderr(Stdio::null()).spawn().unwrap();
    drop(wr);
    let mut line = String::new();
    let mut reader = std::io::BufReader::new(&mut rd);
    std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
    assert!(line.contains("\"state\":\"NodeUnhealthy\""), "first status: {line}");
    write_labels(&labels, &[&status_label("Schedulable")]);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
    assert!(rest.contains("\"state\":\"Running\"") && rest.contains("\"state\":\"Succeeded\""), "{rest}");
}

#[test]
fn check_node_prints_the_verdict_and_exits_0_only_if_healthy() {
    let dir = temp_dir("check");
    let labels = dir.join("labels");
    let check = |json: bool| {
        let mut c = rankvisor();
        c.args(["check-node", "--node-health", &format!("file:{}", labels.display())]);
        if json {
            c.arg("--json");
        }
        c.output().unwrap()
    };
    write_labels(
        &labels,
        &[&status_label("Schedulable"), "sagemaker.amazonaws.com/deep-health-check-status=\"Passed\""],
    );
    let out = check(false);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("healthy") && text.contains("Schedulable"), "{text}");
    write_labels(
        &labels,
        &[&status_label("UnschedulablePendingReplacement"), "sagemaker.amazonaws.com/fault-reasons=\"XidError\""],
    );
    let out = check(false);
    assert_ne!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("unhealthy") && text.contains("UnschedulablePendingReplacement") && text.contains("XidError"),
        "{text}"
    );
    let out = check(true);
    assert_ne!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["healthy"], false);
    std::fs::write(&labels, "garbage\n").unwrap();
    let out = check(false);
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = rankvisor().args(["check-node", "--node-health", "bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus"));
}

/// Regression (issue 15): a BOM or zero-width space before the health key made another key, and
/// check-node said healthy (exit 0). Keys follow the Kubernetes label key syntax; the verdict fails closed.
#[test]
fn an_invisible_character_before_a_key_fails_closed_and_is_named() {
    let dir = temp_dir("invisible-key");
    let labels = dir.join("labels");
    for (what, prefix, shown) in [("BOM", "\u{feff}", "\\u{feff}"), ("zero-width space", "\u{200b}", "\\u{200b}")] {
        std::fs::write(&labels, format!("{prefix}{}\n", status_label("Unschedulable"))).unwrap();
        let out =
            rankvisor().args(["check-node", "--node-health", &format!("file:{}", labels.display())]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(138),
            "{what}: stdout {}\nstderr {stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(stderr.contains(shown) && stderr.contains("not a Kubernetes label key"), "{what}: {stderr}");
        assert!(!stderr.contains(prefix), "{what}: the invisible character is shown escaped: {stderr}");
    }
}

/// Regression (issue 15): a label value with `\n` wrote a forged line into the log and made the
/// one-line termination message two lines.
#[test]
fn a_label_value_with_a_newline_cannot_forge_a_line() {
    let dir = temp_dir("forged-value");
    // Go-quoted as the kubelet writes it: the value holds a real newline once unquoted.
    write_labels(
        &dir.join("labels"),
        &[r#"sagemaker.amazonaws.com/node-health-status="Unschedulable\n[rankvisor] ERROR forged\r""#],
    );
    let out = run(&dir, &[], "touch \"$MARK\"");
    assert_eq!(out.status.code(), Some(138), "{}", String::from_utf8_lossy(&out.stderr));
    let message = std::fs::read_to_string(dir.join("termination-log")).unwrap();
    assert_eq!(message.lines().count(), 1, "{message:?}");
    assert!(!message.contains('\r'), "{message:?}");
    assert!(message.contains("Unschedulable\\n[rankvisor] ERROR forged"), "{message:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in stderr.lines() {
        assert!(!line.starts_with("[rankvisor] ERROR forged"), "forged line:\n{stderr}");
    }
}

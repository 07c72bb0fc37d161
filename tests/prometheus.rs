//! Prometheus as a cluster runs it: the live `/metrics` of a real multi-replica run through
//! `promtool check metrics` (Prometheus' own linter for names, units, `_total` and HELP), and the
//! rules and alerts of `examples/k8s/` through `promtool check rules` and `promtool test rules`.
//! promtool is Debian's `prometheus` package (`scripts/setup-views.sh`); without it these tests fail.

mod common;

use common::{
    crashloop_and_hang_seen, crashloop_and_hung_manifest, http_get, required_tool, wait_job, DryRunHttp, TestDir,
};
use std::io::Write;
use std::process::{Command, Stdio};

/// `promtool ARGS` with `stdin`: (exit code, stdout + stderr).
fn promtool(args: &[&str], stdin: &str) -> (i32, String) {
    let mut child = Command::new(required_tool("promtool"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).expect("feed promtool");
    let out = child.wait_with_output().expect("promtool ends");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// Every metric family's name in an exposition.
fn families(text: &str) -> Vec<String> {
    text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap().to_string()).collect()
}

#[test]
fn live_metrics_of_master_and_workers_pass_promtool_check_metrics() {
    let dir = TestDir::new("promtool-metrics");
    let manifest = crashloop_and_hung_manifest(&dir);
    let run = DryRunHttp::start(
        &dir,
        &manifest,
        &["--backoff-initial", "200ms", "--backoff-max", "400ms", "--timeout", "120s"],
    );
    let master = run.port("pytest-master-0");
    wait_job(master, "a crash-looping and a hung worker while the job runs", crashloop_and_hang_seen);
    let mut seen = Vec::new();
    for pod in ["pytest-master-0", "pytest-worker-0", "pytest-worker-1"] {
        let (code, body) = http_get(run.port(pod), "/metrics").expect("/metrics answers");
        assert_eq!(code, 200, "{pod}: {body}");
        let (status, lint) = promtool(&["check", "metrics"], &body);
        assert_eq!((status, lint.trim()), (0, ""), "promtool check metrics on {pod}'s /metrics:\n{body}");
        seen.extend(families(&body));
    }
    for name in [
        "rankvisor_info",
        "rankvisor_replica_state",
        "rankvisor_replica_state_since_timestamp_seconds",
        "rankvisor_restarts_total",
        "rankvisor_last_exit_reason",
        "rankvisor_hang_detections_total",
        "rankvisor_training_step",
        "rankvisor_training_loss",
        "rankvisor_job_phase",
        "rankvisor_job_replicas",
    ] {
        assert!(seen.iter().any(|n| n == name), "{name} missing from the live metrics: {seen:?}");
    }
    let (_, worker) = http_get(run.port("pytest-worker-0"), "/metrics").unwrap();
    assert!(!worker.contains("rankvisor_job_phase"), "job metrics are the master's alone:\n{worker}");
}

//! Prometheus as a cluster runs it: the live `/metrics` of a real multi-replica run through
//! `promtool check metrics` (Prometheus' own linter for names, units, `_total` and HELP), and the
//! rules and alerts of `examples/k8s/` through `promtool check rules` and `promtool test rules`.
//! promtool is Debian's `prometheus` package (`scripts/setup-views.sh`); without it these tests fail.

use crate::common;

use common::{crashloop_and_hang_running, free_port, http_get, required_tool, wait_until, Rv, TestDir};
use std::io::Write;
use std::path::{Path, PathBuf};
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
    let (run, _) = crashloop_and_hang_running(&dir, "120s", "a crash-looping and a hung worker while the job runs");
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

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn yaml(path: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The PrometheusRule's `spec.groups` as a Prometheus rule file, written to `dir/rules.yaml`.
fn extract_rule_groups(dir: &TestDir) -> PathBuf {
    let rule = yaml("examples/k8s/prometheusrule.yaml");
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    let groups = serde_json::json!({ "groups": rule["spec"]["groups"] });
    let path = dir.join("rules.yaml");
    std::fs::write(&path, serde_yaml_ng::to_string(&groups).unwrap()).unwrap();
    path
}

/// Every `rankvisor_*` name in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("rankvisor_") {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// The metric names rankvisor exposes: the families of `src/http/metrics.rs`.
fn exposed_names() -> Vec<String> {
    let src = include_str!("../../crates/rankvisor-core/src/http/metrics.rs");
    let code = src.split("#[cfg(test)]").next().unwrap();
    code.split('"').filter(|s| s.starts_with("rankvisor_") && !s.contains(' ')).map(str::to_string).collect()
}

#[test]
fn prometheus_rule_groups_pass_promtool_check_rules() {
    let dir = TestDir::new("promtool-check-rules");
    let rules = extract_rule_groups(&dir);
    let (code, out) = promtool(&["check", "rules", rules.to_str().unwrap()], "");
    assert_eq!(code, 0, "promtool check rules:\n{out}");
    assert!(out.contains("SUCCESS: 5 rules found"), "{out}");
    let exposed = exposed_names();
    let groups = yaml("examples/k8s/prometheusrule.yaml")["spec"]["groups"].clone();
    let mut alerts = Vec::new();
    for rule in groups.as_array().unwrap().iter().flat_map(|g| g["rules"].as_array().unwrap()) {
        alerts.push(rule["alert"].as_str().unwrap().to_string());
        for name in metric_names(rule["expr"].as_str().unwrap()) {
            assert!(exposed.contains(&name), "alert {} uses {name}, which rankvisor does not expose", rule["alert"]);
        }
    }
    for seed_case in [
        "RankvisorReplicaCrashLoopingWhileJobRunning",
        "RankvisorReplicaHung",
        "RankvisorReplicaOnUnhealthyNode",
        "RankvisorRendezvousStuck",
    ] {
        assert!(alerts.iter().any(|a| a == seed_case), "{seed_case} missing: {alerts:?}");
    }
}

#[test]
fn alerts_fire_on_series_reproducing_the_seed_in_promtool_test_rules() {
    let dir = TestDir::new("promtool-test-rules");
    extract_rule_groups(&dir);
    let tests = dir.join("rules_test.yaml");
    std::fs::copy(repo("tests/prometheus/rules_test.yaml"), &tests).unwrap();
    let (code, out) = promtool(&["test", "rules", tests.to_str().unwrap()], "");
    assert_eq!(code, 0, "promtool test rules:\n{out}");
    assert!(out.contains("SUCCESS"), "{out}");
    // The test file must cover every alert, so none is shipped untested.
    let text = std::fs::read_to_string(&tests).unwrap();
    let groups = yaml("examples/k8s/prometheusrule.yaml")["spec"]["groups"].clone();
    for rule in groups.as_array().unwrap().iter().flat_map(|g| g["rules"].as_array().unwrap()) {
        let alert = rule["alert"].as_str().unwrap();
        assert!(
            text.contains(&format!("alertname: {alert}\n        exp_alerts:\n          - ")),
            "no firing case for {alert}"
        );
    }
}

#[test]
fn grafana_dashboard_queries_parse_and_name_exposed_metrics() {
    let dir = TestDir::new("promtool-dashboard");
    let text = std::fs::read_to_string(repo("examples/k8s/grafana-dashboard.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let exposed = exposed_names();
    let mut rules = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            for name in metric_names(expr) {
                assert!(
                    exposed.contains(&name),
                    "panel {:?} uses {name}, which rankvisor does not expose",
                    panel["title"]
                );
            }
            // Grafana's variables as Prometheus would see them once substituted.
            let expr = expr
                .replace("$namespace", ".*")
                .replace("$pytorchjob", ".*")
                .replace("$__rate_interval", "1m")
                .replace("$__range", "1h");
            rules.push(serde_json::json!({ "record": format!("dashboard:panel_{}", panel["id"]), "expr": expr }));
        }
    }
    assert!(rules.len() >= 10, "{} queries", rules.len());
    let file = dir.join("dashboard-rules.yaml");
    let groups = serde_json::json!({ "groups": [{ "name": "dashboard", "rules": rules }] });
    std::fs::write(&file, serde_yaml_ng::to_string(&groups).unwrap()).unwrap();
    let (code, out) = promtool(&["check", "rules", file.to_str().unwrap()], "");
    assert_eq!(code, 0, "the dashboard's queries through promtool check rules:\n{out}");
}

#[test]
fn pod_monitor_scrapes_the_port_the_job_exposes() {
    let monitor = yaml("examples/k8s/podmonitor.yaml");
    assert_eq!(monitor["kind"], "PodMonitor");
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!((endpoint["port"].as_str(), endpoint["path"].as_str()), (Some("rankvisor"), Some("/metrics")));
    let relabeled: Vec<&str> =
        endpoint["relabelings"].as_array().unwrap().iter().filter_map(|r| r["targetLabel"].as_str()).collect();
    assert!(relabeled.contains(&"pytorchjob"), "the alerts join on pytorchjob: {relabeled:?}");
    let job = yaml("examples/k8s/pytorchjob.yaml");
    for kind in ["Master", "Worker"] {
        let ports = &job["spec"]["pytorchReplicaSpecs"][kind]["template"]["spec"]["containers"][0]["ports"];
        let port = ports.as_array().unwrap().iter().find(|p| p["name"] == "rankvisor");
        assert_eq!(port.map(|p| &p["containerPort"]), Some(&serde_json::json!(9400)), "{kind}: {ports}");
    }
}

/// The per-rule gauge of `--log-rules`, live from a replica whose rule fired, passes promtool.
#[test]
fn live_log_rule_gauges_pass_promtool_check_metrics() {
    let dir = TestDir::new("promtool-log-rules");
    let port = free_port();
    let rules = dir.write(
        "rules.json",
        r#"[{"name": "Start", "logPattern": ".*started.*", "expectedStartCutOffInSeconds": 60},
            {"name": "Oom", "logPattern": ".*out of memory.*", "faultOnMatch": true}]"#,
    );
    let running = Rv::new(&dir)
        .args(["--node-health", "off", "--restart-policy", "Always", "--backoff-initial", "60s"])
        .args([
            "--http-addr".to_string(),
            format!("127.0.0.1:{port}"),
            "--log-rules".into(),
            rules.display().to_string(),
        ])
        .sh("echo started; echo 'CUDA out of memory'; exec sleep 30")
        .spawn();
    let body = wait_until("the fired rule in /metrics", || {
        let (_, body) = http_get(port, "/metrics")?;
        body.contains("rankvisor_last_exit_reason{reason=\"LogRule\"} 1").then_some(body)
    });
    let (status, lint) = promtool(&["check", "metrics"], &body);
    assert_eq!((status, lint.trim()), (0, ""), "promtool check metrics:\n{body}");
    assert!(body.contains("rankvisor_log_rule_state{rule=\"Oom\"} 3"), "{body}");
    assert!(body.contains("rankvisor_log_rule_state{rule=\"Start\"} 0"), "{body}");
    running.signal(libc::SIGTERM);
    running.wait();
}

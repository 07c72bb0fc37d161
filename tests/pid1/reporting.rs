//! Reporting end to end with the real binary: the probes through a run, `/metrics` read by a
//! Prometheus text parser, the webhook's order, and that a dead or hanging upstream costs nothing
//! but the bounded final flush.

use crate::common;

use common::{free_port, http_get_at as get, Rv, TestDir};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const GUARD: Duration = Duration::from_secs(20);

/// Poll `path` until `pred` holds for its answer.
fn wait_get(addr: SocketAddr, path: &str, what: &str, pred: impl Fn(u16, &str) -> bool) -> (u16, String) {
    let deadline = Instant::now() + GUARD;
    loop {
        let got = get(addr, path);
        if let Some((code, body)) = &got {
            if pred(*code, body) {
                return (*code, body.clone());
            }
        }
        assert!(Instant::now() < deadline, "waiting for {what} on {path}: last answer {got:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn status_json(addr: SocketAddr) -> Value {
    serde_json::from_str(&get(addr, "/status").expect("/status answers").1).expect("/status is JSON")
}

/// `/metrics` through a real Prometheus text parser: metric name -> (type, value) of unlabelled samples.
fn metrics(addr: SocketAddr) -> prometheus_parse::Scrape {
    let (code, body) = get(addr, "/metrics").expect("/metrics answers");
    assert_eq!(code, 200);
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("valid exposition format")
}

fn counter(s: &prometheus_parse::Scrape, name: &str) -> f64 {
    assert!(s.docs.contains_key(name), "{name} has HELP");
    match s.samples.iter().find(|x| x.metric == name).map(|x| &x.value) {
        Some(prometheus_parse::Value::Counter(v)) => *v,
        other => panic!("{name} is not a counter: {other:?}"),
    }
}

fn gauge(s: &prometheus_parse::Scrape, name: &str) -> Option<f64> {
    match s.samples.iter().find(|x| x.metric == name).map(|x| &x.value) {
        Some(prometheus_parse::Value::Gauge(v)) => Some(*v),
        None => None,
        other => panic!("{name} is not a gauge: {other:?}"),
    }
}

/// One webhook POST as the receiver saw it.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    at: SystemTime,
    pub(crate) report: Value,
}

/// How the test receiver behaves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Upstream {
    /// Answers 204 to every POST.
    Answers,
    /// Accepts connections, reads the request, never answers.
    Hangs,
}

/// A webhook receiver on a thread; returns its URL and what it received.
pub(crate) fn receiver(mode: Upstream) -> (String, Arc<Mutex<Vec<Received>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/reports", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            if mode == Upstream::Hangs {
                held.push(s);
                continue;
            }
            let sink = sink.clone();
            std::thread::spawn(move || serve_posts(&mut s, &sink));
        }
    });
    (url, got)
}

/// Answer every request on one keep-alive connection (plain or TLS) with 204, recording its JSON body.
fn serve_posts(s: &mut (impl Read + Write), sink: &Mutex<Vec<Received>>) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            let mut chunk = [0u8; 8192];
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < end + 4 + len {
            let mut chunk = [0u8; 8192];
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let at = SystemTime::now();
        let body: Vec<u8> = buf.drain(..end + 4 + len).skip(end + 4).collect();
        if let Ok(report) = serde_json::from_slice(&body) {
            sink.lock().unwrap().push(Received { at, report });
        }
        if s.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").and_then(|()| s.flush()).is_err() {
            return;
        }
    }
}

/// (state, restart_count) of each POST, consecutive repeats (interval re-sends) removed.
fn transitions(got: &[Received]) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for r in got {
        let t =
            (r.report["state"].as_str().unwrap_or("?").to_string(), r.report["restart_count"].as_u64().unwrap_or(0));
        if out.last() != Some(&t) {
            out.push(t);
        }
    }
    out
}

/// A child that fails its first run after `first` seconds and succeeds on the second.
fn fails_once(first: &str) -> String {
    format!(r#"if [ "$RANKVISOR_RESTART_COUNT" = 0 ]; then sleep {first}; exit 1; fi; sleep 0.2; exit 0"#)
}

/// Fails on its first two runs (the first after `first` seconds), then succeeds.
fn fails_twice(first: &str) -> String {
    format!(
        r#"case "$RANKVISOR_RESTART_COUNT" in 0) sleep {first}; exit 1;; 1) sleep 0.2; exit 1;; esac; sleep 0.2; exit 0"#
    )
}

/// Replace the labels file at once, as the kubelet's atomic writer does.
fn write_labels(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn probes_and_metrics_through_a_run() {
    let dir = TestDir::new("probes");
    let labels = dir.join("labels");
    write_labels(
        &labels,
        "sagemaker.amazonaws.com/node-health-status=\"UnschedulablePendingReboot\"\nsagemaker.amazonaws.com/fault-type=\"GpuFailure\"\n",
    );
    let (url, got) = receiver(Upstream::Answers);
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let go1 = dir.file("go1");
    let go2 = dir.file("go2");
    let script = format!(
        r#"if [ "$RANKVISOR_RESTART_COUNT" -lt 2 ]; then while [ ! -e {go1} ]; do sleep 0.01; done; exit 1; fi
           echo '{{"step": 42}}' > "$RANKVISOR_HEARTBEAT_FILE"; while [ ! -e {go2} ]; do sleep 0.01; done; exit 0"#
    );
    let run = Rv::new(&dir)
        .args(["--http-addr", &addr.to_string(), "--report-url", &url])
        .args(["--node-health", &format!("file:{}", labels.display()), "--unhealthy-node", "wait"])
        .args(["--heartbeat-file", &dir.file("hb"), "--backoff-initial", "1500ms", "--grace-period", "2s"])
        .env("POD_NAME", "pytest-worker-0")
        .env("POD_NAMESPACE", "team")
        .env("NODE_NAME", "node-a")
        .sh(&script)
        .spawn();

    // Before the start (waiting for a healthy node, the local stand-in for the barrier): alive, not ready.
    let (code, body) = wait_get(addr, "/readyz", "not ready while waiting", |_, _| true);
    assert_eq!((code, body.trim()), (503, "not ready: NodeUnhealthy"));
    assert_eq!(get(addr, "/healthz").map(|r| r.0), Some(200));
    let st = status_json(addr);
    assert_eq!(st["schema_version"], 1);
    assert_eq!((st["job"].as_str(), st["replica_type"].as_str()), (Some("pytest"), Some("Worker")));
    assert_eq!(
        (st["pod"].as_str(), st["namespace"].as_str(), st["node"].as_str()),
        (Some("pytest-worker-0"), Some("team"), Some("node-a"))
    );
    assert_eq!(st["node_health"]["healthy"], false);
    assert_eq!(st["node_health"]["verdict"]["fault_type"], "GpuFailure");
    assert_eq!(gauge(&metrics(addr), "rankvisor_node_healthy"), Some(0.0));

    // Running: ready.
    write_labels(&labels, "sagemaker.amazonaws.com/node-health-status=\"Schedulable\"\n");
    let (code, _) = wait_get(addr, "/readyz", "ready once running", |c, _| c == 200);
    assert_eq!(code, 200);
    let m = metrics(addr);
    assert_eq!(counter(&m, "rankvisor_restarts_total"), 0.0);
    assert_eq!(gauge(&m, "rankvisor_training_process_up"), Some(1.0));
    assert_eq!(gauge(&m, "rankvisor_node_healthy"), Some(1.0));
    assert_eq!(gauge(&m, "rankvisor_last_exit_code"), None, "no exit yet");

    // Two failures (the first restart is immediate, the second waits): not ready in the backoff,
    // alive, the counter moved, the exit is explained.
    std::fs::write(&go1, "").unwrap();
    let (code, body) = wait_get(addr, "/readyz", "not ready in backoff", |c, _| c == 503);
    assert_eq!((code, body.trim()), (503, "not ready: Restarting"));
    assert_eq!(get(addr, "/healthz").map(|r| r.0), Some(200));
    let m = metrics(addr);
    assert_eq!(counter(&m, "rankvisor_restarts_total"), 2.0);
    assert_eq!(gauge(&m, "rankvisor_training_process_up"), Some(0.0));
    assert_eq!(gauge(&m, "rankvisor_last_exit_code"), Some(1.0));
    let st = status_json(addr);
    assert_eq!(st["last_exit"]["code"], 1);
    assert_eq!(st["last_exit"]["reason"], "Exited");

    // The second run: ready again, the training step shows up.
    wait_get(addr, "/readyz", "ready after the restart", |c, _| c == 200);
    wait_get(addr, "/metrics", "the training step", |_, b| b.contains("rankvisor_training_step 42"));
    let m = metrics(addr);
    assert_eq!(counter(&m, "rankvisor_restarts_total"), 2.0);
    assert_eq!(gauge(&m, "rankvisor_training_step"), Some(42.0));
    assert_eq!(status_json(addr)["progress"]["step"], 42);

    // After exit the process is gone with its endpoint; the last report went out in the final flush.
    std::fs::write(&go2, "").unwrap();
    let done = run.wait();
    done.assert_code(0);
    assert_eq!(get(addr, "/healthz"), None, "nothing listens after exit");
    let got = got.lock().unwrap().clone();
    let last = &got.last().expect("webhook reports").report;
    assert_eq!((last["state"].as_str(), last["restart_count"].as_u64()), (Some("Succeeded"), Some(2)));
    println!("probes: 503 waiting, 200 running, 503 in backoff, 200 running, gone after exit; final report {last}");
}

#[test]
fn webhook_sees_running_restarting_succeeded_in_order() {
    let dir = TestDir::new("webhook-order");
    let (url, got) = receiver(Upstream::Answers);
    let done = Rv::new(&dir)
        .args(["--http-addr", "off", "--report-url", &url, "--backoff-initial", "300ms"])
        .sh(&fails_twice("0.3"))
        .run();
    done.assert_code(0);
    let got = got.lock().unwrap().clone();
    let seen = transitions(&got);
    // The first restart is immediate (the kubelet's), the second waits out --backoff-initial.
    let want: Vec<(String, u64)> =
        [("Running", 0), ("Running", 1), ("Restarting", 2), ("Running", 2), ("Succeeded", 2)]
            .map(|(s, n)| (s.to_string(), n))
            .to_vec();
    let seen_states: Vec<&(String, u64)> = seen.iter().filter(|t| t.0 != "Pending").collect();
    assert_eq!(seen_states, want.iter().collect::<Vec<_>>(), "all POSTs: {seen:?}");
    let seqs: Vec<u64> = got.iter().map(|r| r.report["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");
    let schema = &documented_json_blocks()[0];
    for r in &got {
        check(schema, &r.report, "$");
    }
    let restarting = got.iter().find(|r| r.report["state"] == "Restarting").unwrap();
    assert_eq!(restarting.report["last_exit"]["code"], 1);
    assert_eq!(restarting.report["last_exit"]["reason"], "Exited");
}

/// Issue 26 item 1: a rule that fires reaches the webhook. The report that ends the run names the
/// log rule's reason, the rule and its last matched line (escaped as everywhere: an escape
/// sequence the child printed arrives as text, not as a control byte), its exit is the log rule's,
/// and the per-rule state is in the reports, as in `/status`.
#[test]
fn a_fired_log_rule_reaches_the_webhook_with_its_reason_and_last_matched_line() {
    let dir = TestDir::new("webhook-log-rule");
    let rules =
        dir.write("rules.json", r#"[{"name": "Oom", "logPattern": ".*out of memory.*", "faultOnMatch": true}]"#);
    let (url, got) = receiver(Upstream::Answers);
    let done = Rv::new(&dir)
        .args(["--node-health", "off", "--http-addr", "off", "--report-url", &url, "--restart-policy", "Never"])
        .args(["--log-rules".as_ref(), rules.as_os_str()])
        .sh(r#"echo "step 1"; printf 'CUDA out of memory \033[31m(GPU 0)\n'; exec sleep 30"#)
        .run();
    done.assert_code(143);
    let got = got.lock().unwrap().clone();
    let last = &got.last().expect("the webhook got reports").report;
    assert_eq!(
        (last["state"].as_str(), last["last_exit"]["reason"].as_str()),
        (Some("Failed"), Some("LogRule")),
        "{last}"
    );
    assert_eq!(last["log_rule"]["reason"], "LogFault_Oom", "{last}");
    assert_eq!(last["log_rule"]["rule"], "Oom", "{last}");
    assert_eq!(last["log_rule"]["line"], r"CUDA out of memory \u{1b}[31m(GPU 0)", "{last}");
    assert!(
        got.iter().any(|r| r.report["log_rules"][0] == serde_json::json!({"rule": "Oom", "state": "FAULTED"})),
        "the per-rule state was sent: {:?}",
        got.iter().map(|r| &r.report["log_rules"]).collect::<Vec<_>>()
    );
    let schema = &documented_json_blocks()[0];
    for r in &got {
        check(schema, &r.report, "$");
    }
}

/// One run of the fail-once child, with the webhook pointing at `url`; its wall time.
fn timed_run(name: &str, url: Option<&str>) -> Duration {
    let dir = TestDir::new(name);
    let mut rv = Rv::new(&dir).args(["--http-addr", "off", "--backoff-initial", "200ms"]);
    if let Some(url) = url {
        rv = rv.args(["--report-url", url]);
    }
    let done = rv.sh(&fails_once("0.2")).run();
    done.assert_code(0);
    assert_eq!(done.last_status()["state"], "Succeeded");
    done.elapsed
}

#[test]
fn a_dead_or_hanging_webhook_does_not_delay_the_run() {
    let (hanging, _) = receiver(Upstream::Hangs);
    let refused = format!("http://127.0.0.1:{}/reports", free_port());
    let base = timed_run("wh-none", None);
    let down = timed_run("wh-down", Some(&refused));
    let hang = timed_run("wh-hang", Some(&hanging));
    println!(
        "run with a child that fails once: no webhook {base:?}, receiver down {down:?}, receiver hanging {hang:?}"
    );
    let slack = Duration::from_secs(3);
    assert!(down < base + slack, "receiver down: {down:?} vs {base:?}");
    assert!(hang < base + slack, "receiver hanging: {hang:?} vs {base:?} (the final flush is capped at 2 s)");

    // Signal handling too: TERM stops the child at once, with the upstream hanging.
    let dir = TestDir::new("wh-hang-term");
    let run = Rv::new(&dir).args(["--http-addr", "off", "--report-url", &hanging]).sh("sleep 30").spawn();
    run.wait_status("Running", |v| v["state"] == "Running");
    let t = Instant::now();
    run.signal(libc::SIGTERM);
    run.wait_status("the child's exit", |v| v["last_exit"].is_object());
    let child_gone = t.elapsed();
    let done = run.wait();
    let exited = t.elapsed();
    println!("receiver hanging: TERM -> child stopped {child_gone:?}, -> rankvisor exited {exited:?} (final flush)");
    assert_eq!(done.code, Some(143));
    assert!(child_gone < Duration::from_secs(1), "TERM reached the child late: {child_gone:?}");
    assert!(exited < slack, "TERM to exit took {exited:?}");
}

/// RFC 3339 as rankvisor writes it (`YYYY-MM-DDTHH:MM:SS.ffffffZ`) back to a time.
fn parse_rfc3339(s: &str) -> SystemTime {
    let n = |a: usize, b: usize| -> i64 { s[a..b].parse().unwrap() };
    let (y, mo, d) = (n(0, 4), n(5, 7), n(8, 10));
    let (h, mi, sec, us) = (n(11, 13), n(14, 16), n(17, 19), n(20, 26));
    // Days from civil (Howard Hinnant), the inverse of the writer's.
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec;
    UNIX_EPOCH + Duration::from_secs(secs as u64) + Duration::from_micros(us as u64)
}

/// The figure for docs/benchmarks.md: from a state change (the report's `state_since`) to the webhook's
/// receipt. No assertion on time: it is printed.
#[test]
fn bench_state_change_to_webhook_latency() {
    let dir = TestDir::new("wh-latency");
    let (url, got) = receiver(Upstream::Answers);
    let done = Rv::new(&dir)
        .args(["--http-addr", "off", "--report-url", &url, "--backoff-initial", "50ms", "--backoff-max", "50ms"])
        .args(["--backoff-limit", "20"])
        .sh("sleep 0.05; exit 3")
        .run();
    done.assert_code(3);
    let got = got.lock().unwrap().clone();
    let mut seen = std::collections::HashSet::new();
    let mut lat: Vec<Duration> = got
        .iter()
        .filter(|r| seen.insert((r.report["state"].to_string(), r.report["restart_count"].as_u64())))
        .filter_map(|r| r.at.duration_since(parse_rfc3339(r.report["state_since"].as_str()?)).ok())
        .collect();
    lat.sort();
    assert!(lat.len() >= 40, "every change reached the receiver: {} of {}", lat.len(), got.len());
    let pct = |p: usize| lat[(lat.len() - 1) * p / 100];
    println!(
        "state change -> webhook receipt over {} changes: median {:?}, p90 {:?}, max {:?}",
        lat.len(),
        pct(50),
        pct(90),
        lat[lat.len() - 1]
    );
}

/// The JSON blocks of the report's reference (docs/reporting.md, section "The report"): the schema,
/// then the example.
fn documented_json_blocks() -> Vec<Value> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reporting.md")).unwrap();
    let start = doc.find("\n## The report (").expect("docs/reporting.md has a section \"The report\"");
    let section = &doc[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    section
        .split("```json\n")
        .skip(1)
        .map(|b| serde_json::from_str(&b[..b.find("```").unwrap()]).expect("docs/reporting.md: a JSON block parses"))
        .collect()
}

/// A small validator for the keywords the documented schema uses: type, enum, const, required,
/// properties, items.
fn check(schema: &Value, v: &Value, at: &str) {
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    if let Some(t) = schema.get("type") {
        let allowed: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => panic!("{at}: bad type keyword"),
        };
        assert!(
            allowed.contains(&kind) || (kind == "integer" && allowed.contains(&"number")),
            "{at}: {kind} not in {allowed:?}"
        );
    }
    if let Some(e) = schema.get("enum") {
        assert!(e.as_array().unwrap().contains(v), "{at}: {v} not in {e}");
    }
    if let Some(c) = schema.get("const") {
        assert_eq!(c, v, "{at}");
    }
    if let (Some(req), Value::Object(o)) = (schema.get("required"), v) {
        for k in req.as_array().unwrap() {
            assert!(o.contains_key(k.as_str().unwrap()), "{at}: {k} is required");
        }
    }
    if let (Some(items), Value::Array(a)) = (schema.get("items"), v) {
        for (i, x) in a.iter().enumerate() {
            check(items, x, &format!("{at}[{i}]"));
        }
    }
    if let (Some(Value::Object(props)), Value::Object(o)) = (schema.get("properties"), v) {
        for (k, sub) in props {
            if let Some(x) = o.get(k) {
                check(sub, x, &format!("{at}.{k}"));
            }
        }
    }
}

#[test]
fn the_documented_schema_and_example_match_the_report() {
    let blocks = documented_json_blocks();
    assert_eq!(blocks.len(), 2, "the schema and the example");
    let (schema, example) = (&blocks[0], &blocks[1]);
    let report: rankvisor_core::status::Report =
        serde_json::from_value(example.clone()).expect("the example is a Report");
    assert_eq!(report.schema_version, rankvisor_core::status::SCHEMA_VERSION);
    let reserialized = serde_json::to_value(&report).unwrap();
    assert_eq!(&reserialized, example, "the example shows every field, as rankvisor writes them");
    // The log rules' fields are left out without rules (the example has none), the agent's state
    // outside agent mode: shown here too.
    let mut with_rules = report.clone();
    with_rules.agent = Some(rankvisor_core::status::AgentState::Ready);
    with_rules.log_rule = Some(rankvisor_core::status::LogRuleReport {
        reason: "LogHang_JobHang".into(),
        rule: "JobHang".into(),
        line: Some("Train Epoch: 1".into()),
    });
    with_rules.log_rules =
        vec![rankvisor_core::status::LogRuleGauge { rule: "JobHang".into(), state: "HANGING".into() }];
    // A hang's snapshot and, on the master, the job's stacks: left out until there is one.
    let summary = rankvisor_core::stacks::StacksSummary {
        taken_at: "2026-12-04T10:00:00.000000Z".into(),
        why: "hung".into(),
        pid: Some(42),
        frames: vec!["slow_here (train.py:40)".into()],
        top: "pid 42 in slow_here (train.py:40)".into(),
    };
    with_rules.job_stacks = Some(rankvisor_core::stacks::JobStacks {
        taken_at: summary.taken_at.clone(),
        why: "replica 2: hung".into(),
        elapsed_ms: 31,
        groups: vec![],
        summary: "replica 2: slow_here (train.py:40)".into(),
        replicas: vec![],
    });
    with_rules.stacks = Some(summary);
    let slow = rankvisor_core::rendezvous::straggler::Straggler {
        replica: 2,
        value: 60.0,
        median: 100.0,
        relative: 0.6,
        points: 3,
    };
    with_rules.stragglers =
        vec![slow.named("node-2".into(), Some("pytest-worker-1".into()), "2026-12-04T10:00:00.000000Z".into())];
    let with_rules = serde_json::to_value(&with_rules).unwrap();
    let mut fields: Vec<&String> = with_rules.as_object().unwrap().keys().collect();
    let mut documented: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    fields.sort();
    documented.sort();
    assert_eq!(fields, documented, "the schema names exactly the report's fields");
    let states: Vec<String> = rankvisor_core::status::ReplicaState::ALL.iter().map(|s| format!("{s:?}")).collect();
    assert_eq!(schema["properties"]["state"]["enum"], serde_json::json!(states));
    check(schema, example, "$");
    check(schema, &with_rules, "$");
}

#[test]
fn a_full_queue_drops_the_oldest_and_counts_them() {
    let dir = TestDir::new("wh-drop");
    let (hanging, _) = receiver(Upstream::Hangs);
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let go = dir.file("go");
    // 40 quick failures (80 state changes) while the upstream holds the first POST, then wait.
    let script =
        format!(r#"[ "$RANKVISOR_RESTART_COUNT" -lt 40 ] && exit 1; while [ ! -e {go} ]; do sleep 0.01; done"#);
    let run = Rv::new(&dir)
        .args(["--http-addr", &addr.to_string(), "--report-url", &hanging])
        .args(["--backoff-initial", "5ms", "--backoff-max", "5ms", "--backoff-limit", "50"])
        .sh(&script)
        .spawn();
    run.wait_status("the 41st run", |v| v["state"] == "Running" && v["restart_count"] == 40);
    let (_, body) = wait_get(addr, "/metrics", "restarts 40", |_, b| b.contains("rankvisor_restarts_total 40"));
    let m = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap();
    let dropped = counter(&m, "rankvisor_webhook_reports_dropped_total");
    println!("upstream hanging, 40 restarts: {dropped} reports dropped (queue of 64)");
    assert!(dropped >= 10.0, "about 80 changes into a queue of 64: {dropped}");
    assert_eq!(counter(&m, "rankvisor_webhook_reports_sent_total"), 0.0);
    std::fs::write(&go, "").unwrap();
    run.wait().assert_code(0);
}

/// A receiver that takes each POST and answers 200 with a 1 GB body it streams until the client
/// hangs up; returns its URL and how many POSTs it got.
fn endless_answers() -> (String, Arc<Mutex<u64>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/reports", listener.local_addr().unwrap());
    let posts = Arc::new(Mutex::new(0u64));
    let seen = posts.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                *seen.lock().unwrap() += 1;
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n");
                let block = vec![b'x'; 256 * 1024];
                while s.write_all(&block).is_ok() {}
            });
        }
    });
    (url, posts)
}

/// Peak resident memory of a process, in KiB (VmHWM).
fn peak_rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM in /proc/PID/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_receiver_answering_an_endless_body_costs_bounded_memory() {
    let dir = TestDir::new("wh-endless");
    let (url, posts) = endless_answers();
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let go = dir.file("go");
    // Five quick failures: ten state changes, each POSTed to a receiver that answers 1 GB.
    let script = format!(r#"[ "$RANKVISOR_RESTART_COUNT" -lt 5 ] && exit 1; while [ ! -e {go} ]; do sleep 0.01; done"#);
    let run = Rv::new(&dir)
        .args(["--http-addr", &addr.to_string(), "--report-url", &url])
        .args(["--backoff-initial", "5ms", "--backoff-max", "5ms", "--backoff-limit", "10"])
        .sh(&script)
        .spawn();
    // Supervision goes on whatever the receiver does: the sixth run starts.
    run.wait_status("the 6th run", |v| v["state"] == "Running" && v["restart_count"] == 5);
    // Every POST is accepted (200) once its answer's first 64 KiB are read.
    let (_, body) = wait_get(addr, "/metrics", "3 reports sent", |_, b| {
        b.contains("rankvisor_webhook_reports_sent_total") && {
            let m = prometheus_parse::Scrape::parse(b.lines().map(|l| Ok(l.to_string()))).unwrap();
            counter(&m, "rankvisor_webhook_reports_sent_total") >= 3.0
        }
    });
    let m = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap();
    let peak = peak_rss_kib(run.rankvisor_pid());
    println!(
        "receiver answering 1 GB bodies: {} POSTs, {} sent, rankvisor peak RSS {peak} KiB",
        posts.lock().unwrap(),
        counter(&m, "rankvisor_webhook_reports_sent_total")
    );
    assert!(peak < 64 * 1024, "peak RSS {peak} KiB: the answers were buffered");
    std::fs::write(&go, "").unwrap();
    run.wait().assert_code(0);
}

/// An https receiver (rustls, a certificate made for the test); its CA reaches rankvisor the way
/// it would in an image: SSL_CERT_FILE.
#[test]
fn an_https_webhook_is_trusted_through_its_ca() {
    use std::sync::Arc as A;
    let dir = TestDir::new("wh-https");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into()]).unwrap().self_signed(&key).unwrap();
    std::fs::write(dir.join("ca.pem"), cert.pem()).unwrap();
    let provider = A::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
    let tls = A::new(tls);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}/reports", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(tcp) = stream else { continue };
            let (tls, sink) = (tls.clone(), sink.clone());
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(tls).unwrap();
                let mut s = rustls::StreamOwned::new(conn, tcp);
                serve_posts(&mut s, &sink);
            });
        }
    });
    let run = Rv::new(&dir)
        .args(["--http-addr", "off", "--report-url", &url])
        .env("SSL_CERT_FILE", dir.join("ca.pem").to_str().unwrap())
        .sh("exit 0")
        .spawn();
    run.wait().assert_code(0);
    let states: Vec<String> =
        got.lock().unwrap().iter().map(|r| r.report["state"].as_str().unwrap_or("?").to_string()).collect();
    assert!(states.last().is_some_and(|s| s == "Succeeded"), "reports over https: {states:?}");
}

/// `http://user:pass@host/`: the receiver gets basic auth; rankvisor's log never shows the password.
#[test]
fn webhook_credentials_are_never_logged() {
    let dir = TestDir::new("wh-creds");
    let refused = format!("http://user:s3cret@127.0.0.1:{}/reports", free_port());
    let done = Rv::new(&dir).args(["--http-addr", "off", "--report-url", &refused]).sh("exit 0").run();
    done.assert_code(0);
    assert!(done.stderr.contains("http://***@127.0.0.1:"), "the failure names the redacted URL: {}", done.stderr);
    assert!(!done.stderr.contains("s3cret"), "the password was logged: {}", done.stderr);
}

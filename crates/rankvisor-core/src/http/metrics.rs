//! `/metrics`: the report in Prometheus's text exposition format (0.0.4), as pure functions.
//!
//! Names follow Prometheus' conventions: the `rankvisor_` prefix, base units in the name
//! (`_seconds`, `_timestamp_seconds`), `_total` on counters and only on counters, enum-like values
//! as one gauge per value with a `state`/`reason`/`phase` label, and no label whose values grow
//! without bound (identity lives in `rankvisor_info` only, for joins). The label `job` is left to
//! Prometheus' own target label: the PyTorchJob's name is `pytorchjob`.

use crate::status::{ExitReason, NodeHealthReport, ReplicaState, Report};
use crate::webhook::WebhookCounts;
use std::fmt::Write;

/// The `Content-Type` of [`render_metrics`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The job phases `rankvisor_job_phase` has a sample for (the master's `/job` `phase`).
pub(super) const JOB_PHASES: [&str; 4] = ["Created", "Running", "Succeeded", "Failed"];

const EXIT_REASONS: [ExitReason; 7] = [
    ExitReason::Exited,
    ExitReason::Signaled,
    ExitReason::Hung,
    ExitReason::NodeUnhealthy,
    ExitReason::NewGeneration,
    ExitReason::LogRule,
    ExitReason::Straggler,
];

/// Every metric of one replica, with HELP and TYPE lines. Metrics whose value is unknown (no exit
/// yet, node health off, no rendezvous, no step in the heartbeat) are left out rather than faked.
pub fn render_metrics(r: &Report, webhook: &WebhookCounts) -> String {
    let mut out = String::with_capacity(4096);
    render_identity_and_state(&mut out, r);
    render_training_process(&mut out, r);
    render_rendezvous_and_progress(&mut out, r);
    render_webhook(&mut out, webhook);
    out
}

/// Who the replica is, its state and since when, when rankvisor started.
fn render_identity_and_state(out: &mut String, r: &Report) {
    let id = &r.identity;
    let rank = id.rank.map(|n| n.to_string());
    let info_labels = [
        ("pytorchjob", id.job.as_deref()),
        ("replica_type", id.replica_type.as_deref()),
        ("rank", rank.as_deref()),
        ("pod", id.pod.as_deref()),
        ("namespace", id.namespace.as_deref()),
        ("node", id.node.as_deref()),
        ("version", Some(env!("CARGO_PKG_VERSION"))),
    ];
    let info: Vec<(&str, &str)> = info_labels.iter().filter_map(|(k, v)| v.map(|v| (*k, v))).collect();
    family(out, "rankvisor_info", "gauge", "Who this replica is; always 1.");
    sample(out, "rankvisor_info", &info, 1.0);

    family(out, "rankvisor_replica_state", "gauge", "1 for the replica's current state, 0 for the others.");
    for s in ReplicaState::ALL {
        let name = format!("{s:?}");
        sample(out, "rankvisor_replica_state", &[("state", &name)], f64::from(u8::from(s == r.state)));
    }
    gauge(
        out,
        "rankvisor_replica_state_since_timestamp_seconds",
        "Unix time the replica entered its current state.",
        unix_seconds(&r.state_since),
    );
    gauge(out, "rankvisor_start_time_seconds", "Unix time this rankvisor started.", unix_seconds(&r.started_at));
}

/// The training process: up, restarts, the node it runs on, its last exit, its log rules.
fn render_training_process(out: &mut String, r: &Report) {
    let child_up = r.state == ReplicaState::Running && r.child_pid.is_some();
    gauge(
        out,
        "rankvisor_training_process_up",
        "1 while the training process runs.",
        Some(f64::from(u8::from(child_up))),
    );
    counter(out, "rankvisor_restarts_total", "Restarts of the training process made by rankvisor.", r.restart_count);
    let healthy = r.node_health.as_ref().and_then(NodeHealthReport::healthy).map(|h| f64::from(u8::from(h)));
    gauge(out, "rankvisor_node_healthy", "1 when the node's health labels allow training, 0 when not.", healthy);
    let code = r.last_exit.as_ref().map(|e| f64::from(e.status));
    gauge(
        out,
        "rankvisor_last_exit_code",
        "Shell-style status of the last training process (128+N for signal N).",
        code,
    );
    if let Some(exit) = &r.last_exit {
        family(
            out,
            "rankvisor_last_exit_reason",
            "gauge",
            "1 for why the last training process ended, 0 for the others.",
        );
        for reason in EXIT_REASONS {
            let name = format!("{reason:?}");
            let value = f64::from(u8::from(reason == exit.reason));
            sample(out, "rankvisor_last_exit_reason", &[("reason", &name)], value);
        }
    }
    if !r.log_rules.is_empty() {
        family(
            out,
            "rankvisor_log_rule_state",
            "gauge",
            "Each log rule's state in the current attempt: 0 waiting or healthy, 1 slow, 2 hanging, 3 faulted.",
        );
        for g in &r.log_rules {
            let value = match g.state.as_str() {
                "SLOW" => 1.0,
                "HANGING" => 2.0,
                "FAULTED" => 3.0,
                _ => 0.0,
            };
            sample(out, "rankvisor_log_rule_state", &[("rule", &g.rule)], value);
        }
    }
}

/// The rendezvous, hangs and the heartbeat's progress.
fn render_rendezvous_and_progress(out: &mut String, r: &Report) {
    gauge(
        out,
        "rankvisor_rendezvous_generation",
        "Rendezvous generation of the running training process.",
        Some(r.generation as f64),
    );
    gauge(out, "rankvisor_rendezvous_duration_seconds", "Seconds the latest rendezvous took.", r.rendezvous_seconds);
    counter(out, "rankvisor_hang_detections_total", "Training processes found hung (no heartbeat).", r.hang_detections);
    let step = r.training_step().map(|s| s as f64);
    gauge(out, "rankvisor_training_step", "The step the training process last wrote to its heartbeat.", step);
    let loss = r.progress.as_ref().and_then(|p| p.get("loss")).and_then(serde_json::Value::as_f64);
    gauge(
        out,
        "rankvisor_training_loss",
        "The loss the training process last wrote to its heartbeat.",
        loss.filter(|l| l.is_finite()),
    );
}

/// The webhook's counters.
fn render_webhook(out: &mut String, webhook: &WebhookCounts) {
    counter(out, "rankvisor_webhook_reports_sent_total", "Reports the webhook accepted.", webhook.sent);
    counter(out, "rankvisor_webhook_failures_total", "Webhook requests that failed or timed out.", webhook.failed);
    counter(
        out,
        "rankvisor_webhook_reports_dropped_total",
        "Reports dropped unsent because the webhook queue was full.",
        webhook.dropped,
    );
}

/// The master's job-wide metrics from its `/job` view (`phase`, `replicas.*.state`): the job's
/// phase as the training-operator decides it, and how many replicas are in each state. Empty for a
/// view without a phase (before the first barrier).
pub fn render_job_metrics(job: &crate::rendezvous::JobView) -> String {
    let mut out = String::new();
    let phase = format!("{:?}", job.phase());
    family(
        &mut out,
        "rankvisor_job_phase",
        "gauge",
        "1 for the job's phase as the master decides it, 0 for the others.",
    );
    for p in JOB_PHASES {
        sample(&mut out, "rankvisor_job_phase", &[("phase", p)], f64::from(u8::from(p == phase)));
    }
    let count = |state: ReplicaState| job.replicas().values().filter(|r| r.state() == state).count();
    family(&mut out, "rankvisor_job_replicas", "gauge", "Replicas of the job in each state, as the master last heard.");
    for s in ReplicaState::ALL {
        let name = format!("{s:?}");
        sample(&mut out, "rankvisor_job_replicas", &[("state", &name)], count(s) as f64);
    }
    family(
        &mut out,
        "rankvisor_straggler",
        "gauge",
        "1 for each replica the master named a straggler (--straggler-rule), by replica index.",
    );
    for (index, _) in job.replicas().iter().filter(|(_, r)| r.straggler.is_some()) {
        sample(&mut out, "rankvisor_straggler", &[("replica", &index.to_string())], 1.0);
    }
    out
}

/// Unix seconds of an RFC 3339 UTC time as [`crate::status::rfc3339`] writes it
/// (`2026-11-29T14:39:54.123456Z`); None for any other shape.
pub fn unix_seconds(rfc3339: &str) -> Option<f64> {
    let b = rfc3339.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let s = rfc3339.get(r)?;
        s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok())?
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 || y < 1970 {
        return None;
    }
    let rest = rfc3339.get(19..)?.strip_suffix('Z')?;
    let frac = match rest.strip_prefix('.') {
        Some(f) if !f.is_empty() && f.len() <= 9 && f.bytes().all(|c| c.is_ascii_digit()) => {
            f.parse::<f64>().ok()? / 10f64.powi(f.len() as i32)
        }
        None if rest.is_empty() => 0.0,
        _ => return None,
    };
    let days = days_from_civil(y, m, d);
    Some((days * 86_400 + hh * 3600 + mm * 60 + ss) as f64 + frac)
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`), for years >= 1970.
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: Option<f64>) {
    if let Some(v) = value {
        family(out, name, "gauge", help);
        sample(out, name, &[], v);
    }
}

fn counter(out: &mut String, name: &str, help: &str, value: impl Into<u64>) {
    family(out, name, "counter", help);
    sample(out, name, &[], value.into() as f64);
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape_label(v));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// A label value as the exposition format quotes it: backslash, double quote and newline escaped.
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::ExitHow;
    use crate::status::{Identity, LocalStatus, NodeHealthReport, Timeline};
    use std::time::UNIX_EPOCH;

    fn report(status: LocalStatus, node: Option<NodeHealthReport>) -> Report {
        let id = Identity {
            job: Some("pytest".into()),
            replica_type: Some("Worker".into()),
            rank: Some(1),
            pod: Some("pytest-worker-0".into()),
            ..Identity::default()
        };
        Timeline::new(UNIX_EPOCH).report(&id, &LocalStatus { node_health: node, ..status }, UNIX_EPOCH)
    }

    fn values(text: &str) -> Vec<(String, f64)> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let (k, v) = l.rsplit_once(' ').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect()
    }

    fn value(text: &str, key: &str) -> Option<f64> {
        values(text).into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    #[test]
    fn running_replica() {
        let st = LocalStatus {
            state: ReplicaState::Running,
            restart_count: 2,
            child_pid: Some(7),
            last_exit: Some(ExitHow::Signaled(crate::signo::Signo::KILL)),
            hang_detections: 1,
            progress: crate::heartbeat::parse_progress(r#"{"step": 1200, "loss": 0.3}"#),
            ..LocalStatus::default()
        };
        let counts = WebhookCounts { sent: 5, failed: 2, dropped: 1 };
        let text = render_metrics(&report(st, None), &counts);
        assert_eq!(value(&text, "rankvisor_training_process_up"), Some(1.0));
        assert_eq!(value(&text, "rankvisor_restarts_total"), Some(2.0));
        assert_eq!(value(&text, "rankvisor_last_exit_code"), Some(137.0));
        assert_eq!(value(&text, "rankvisor_hang_detections_total"), Some(1.0));
        assert_eq!(value(&text, "rankvisor_training_step"), Some(1200.0));
        assert_eq!(value(&text, "rankvisor_webhook_reports_sent_total"), Some(5.0));
        assert_eq!(value(&text, "rankvisor_webhook_failures_total"), Some(2.0));
        assert_eq!(value(&text, "rankvisor_webhook_reports_dropped_total"), Some(1.0));
        assert_eq!(value(&text, "rankvisor_replica_state{state=\"Running\"}"), Some(1.0));
        assert_eq!(value(&text, "rankvisor_replica_state{state=\"Pending\"}"), Some(0.0));
        let ones: f64 =
            values(&text).iter().filter(|(k, _)| k.starts_with("rankvisor_replica_state{")).map(|(_, v)| v).sum();
        assert_eq!(ones, 1.0);
        let version = env!("CARGO_PKG_VERSION");
        assert!(text.contains(&format!(
            "rankvisor_info{{pytorchjob=\"pytest\",replica_type=\"Worker\",rank=\"1\",pod=\"pytest-worker-0\",version=\"{version}\"}} 1\n"
        )));
        assert_eq!(value(&text, "rankvisor_node_healthy"), None, "node health off: left out");
        assert_eq!(value(&text, "rankvisor_rendezvous_duration_seconds"), None);
    }

    #[test]
    fn unknown_values_are_left_out_and_node_health_shows() {
        let node = crate::status::unhealthy_node_for_tests();
        let text = render_metrics(&report(LocalStatus::default(), Some(node)), &WebhookCounts::default());
        assert_eq!(value(&text, "rankvisor_training_process_up"), Some(0.0));
        assert_eq!(value(&text, "rankvisor_node_healthy"), Some(0.0));
        assert_eq!(value(&text, "rankvisor_last_exit_code"), None);
        assert_eq!(value(&text, "rankvisor_training_step"), None);
        assert!(!text.contains("rankvisor_last_exit_code"), "no HELP without a sample");
        let unknown = NodeHealthReport::Unreadable("unreadable".into());
        let text = render_metrics(&report(LocalStatus::default(), Some(unknown)), &WebhookCounts::default());
        assert_eq!(value(&text, "rankvisor_node_healthy"), None);
    }

    #[test]
    fn every_family_has_help_and_type_before_its_samples() {
        let text = render_metrics(&report(LocalStatus::default(), None), &WebhookCounts::default());
        let mut declared: Vec<String> = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split(' ');
                let name = parts.next().unwrap();
                let kind = parts.next().unwrap();
                assert!(["gauge", "counter"].contains(&kind));
                assert_eq!(kind == "counter", name.ends_with("_total"), "{name}");
                declared.push(name.to_string());
            } else if !line.starts_with("# HELP ") {
                let name = line.split(['{', ' ']).next().unwrap();
                assert_eq!(declared.last().map(String::as_str), Some(name), "{line}");
            }
        }
        assert_eq!(text.matches("# HELP ").count(), declared.len());
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        assert_eq!(escape_label("plain-0"), "plain-0");
        let id = Identity { pod: Some("p\"od".into()), ..Identity::default() };
        let r = Timeline::new(UNIX_EPOCH).report(&id, &LocalStatus::default(), UNIX_EPOCH);
        assert!(render_metrics(&r, &WebhookCounts::default()).contains(r#"pod="p\"od""#));
    }

    #[test]
    fn exit_reason_loss_and_times() {
        let st = LocalStatus {
            state: ReplicaState::Restarting,
            restart_count: 1,
            last_exit: Some(ExitHow::Signaled(crate::signo::Signo::KILL)),
            last_exit_reason: Some(ExitReason::Hung),
            progress: crate::heartbeat::parse_progress(r#"{"step": 3, "loss": 0.25}"#),
            ..LocalStatus::default()
        };
        let text = render_metrics(&report(st, None), &WebhookCounts::default());
        assert_eq!(value(&text, "rankvisor_last_exit_reason{reason=\"Hung\"}"), Some(1.0));
        assert_eq!(value(&text, "rankvisor_last_exit_reason{reason=\"Signaled\"}"), Some(0.0));
        assert_eq!(value(&text, "rankvisor_training_loss"), Some(0.25));
        assert_eq!(value(&text, "rankvisor_replica_state_since_timestamp_seconds"), Some(0.0));
        assert_eq!(value(&text, "rankvisor_start_time_seconds"), Some(0.0));
        let quiet = render_metrics(&report(LocalStatus::default(), None), &WebhookCounts::default());
        assert!(!quiet.contains("rankvisor_last_exit_reason"), "no exit yet: left out");
        assert!(!quiet.contains("rankvisor_training_loss"));
    }

    #[test]
    fn each_log_rule_has_a_state_gauge_and_a_fired_rule_is_the_exit_reason() {
        use crate::status::LogRuleGauge;
        let gauge = |rule: &str, state: &str| LogRuleGauge { rule: rule.into(), state: state.into() };
        let st = LocalStatus {
            last_exit: Some(ExitHow::Signaled(crate::signo::Signo::TERM)),
            last_exit_reason: Some(ExitReason::LogRule),
            log_rules: vec![
                gauge("Start", "HEALTHY"),
                gauge("Step", "HANGING"),
                gauge("Loss", "SLOW"),
                gauge("Oom", "FAULTED"),
                gauge("W", "WAITING"),
            ],
            ..LocalStatus::default()
        };
        let text = render_metrics(&report(st, None), &WebhookCounts::default());
        let values: Vec<_> = ["Start", "Step", "Loss", "Oom", "W"]
            .iter()
            .map(|r| value(&text, &format!("rankvisor_log_rule_state{{rule=\"{r}\"}}")))
            .collect();
        assert_eq!(values, [Some(0.0), Some(2.0), Some(1.0), Some(3.0), Some(0.0)], "{text}");
        assert_eq!(value(&text, "rankvisor_last_exit_reason{reason=\"LogRule\"}"), Some(1.0));
        let quiet = render_metrics(&report(LocalStatus::default(), None), &WebhookCounts::default());
        assert!(!quiet.contains("rankvisor_log_rule_state"), "no rules: no family");
    }

    #[test]
    fn rfc3339_round_trips_to_unix_seconds() {
        use std::time::Duration;
        for (secs, micros) in [(0u64, 0u32), (951_782_400, 5), (1_709_164_799, 999_999), (4_102_444_800, 0)] {
            let t = UNIX_EPOCH + Duration::new(secs, micros * 1000);
            let got = unix_seconds(&crate::status::rfc3339(t)).unwrap();
            assert!((got - (secs as f64 + f64::from(micros) / 1e6)).abs() < 1e-6, "{secs}.{micros}: {got}");
        }
        assert_eq!(unix_seconds("2026-11-29T14:39:54Z"), Some(1_795_963_194.0));
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-11-29T14:39:54",
            "2026-11-29T14:39:54.Z",
            "1969-12-31T23:59:59Z",
        ] {
            assert_eq!(unix_seconds(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn job_metrics_from_the_masters_view() {
        use crate::rendezvous::{Health, JobView};
        let health = Health::from(crate::rendezvous::NodeHealth::Off);
        let mut view = JobView::new("pytest", 3, "n0", &health, 0);
        let update = |state| {
            let status = LocalStatus { state, ..LocalStatus::default() };
            Box::new(Timeline::new(UNIX_EPOCH).report(&Identity::default(), &status, UNIX_EPOCH))
        };
        for (i, state) in [(0, ReplicaState::Running), (1, ReplicaState::Restarting), (2, ReplicaState::Running)] {
            if i > 0 {
                view.joined(i, "n", &health, 0);
            }
            view.state(i, update(state), 0);
        }
        let text = render_job_metrics(&view);
        assert_eq!(value(&text, "rankvisor_job_phase{phase=\"Running\"}"), Some(1.0));
        assert_eq!(value(&text, "rankvisor_job_phase{phase=\"Failed\"}"), Some(0.0));
        assert_eq!(value(&text, "rankvisor_job_replicas{state=\"Running\"}"), Some(2.0));
        assert_eq!(value(&text, "rankvisor_job_replicas{state=\"Restarting\"}"), Some(1.0));
        assert_eq!(value(&text, "rankvisor_straggler{replica=\"2\"}"), None, "nobody named yet");
        assert_eq!(view.straggler(2, "replica 2 is a straggler".into()).0, "n");
        let text = render_job_metrics(&view);
        assert_eq!(value(&text, "rankvisor_straggler{replica=\"2\"}"), Some(1.0));
        assert_eq!(value(&text, "rankvisor_straggler{replica=\"1\"}"), None);
        assert_eq!(value(&text, "rankvisor_job_replicas{state=\"Failed\"}"), Some(0.0));
    }
}

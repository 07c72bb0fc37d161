//! `/metrics`: the report in Prometheus's text exposition format (0.0.4), as a pure function.

use crate::report::{ReplicaState, Report};
use crate::webhook::WebhookCounts;
use std::fmt::Write;

/// The `Content-Type` of [`render_metrics`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every metric of one replica, with HELP and TYPE lines. Metrics whose value is unknown (no exit
/// yet, node health off, no rendezvous, no step in the heartbeat) are left out rather than faked.
pub fn render_metrics(r: &Report, webhook: &WebhookCounts) -> String {
    let mut out = String::with_capacity(2048);
    let id = &r.identity;
    let rank = id.rank.map(|n| n.to_string());
    let info_labels = [
        ("job", id.job.as_deref()),
        ("replica_type", id.replica_type.as_deref()),
        ("rank", rank.as_deref()),
        ("pod", id.pod.as_deref()),
        ("namespace", id.namespace.as_deref()),
        ("node", id.node.as_deref()),
        ("version", Some(env!("CARGO_PKG_VERSION"))),
    ];
    let info: Vec<(&str, &str)> = info_labels.iter().filter_map(|(k, v)| v.map(|v| (*k, v))).collect();
    family(&mut out, "rankvisor_info", "gauge", "Who this replica is; always 1.");
    sample(&mut out, "rankvisor_info", &info, 1.0);

    family(&mut out, "rankvisor_state", "gauge", "1 for the replica's current state, 0 for the others.");
    for s in ReplicaState::ALL {
        let name = format!("{s:?}");
        sample(&mut out, "rankvisor_state", &[("state", &name)], f64::from(u8::from(s == r.state)));
    }

    let child_up = r.state == ReplicaState::Running && r.child_pid.is_some();
    gauge(&mut out, "rankvisor_child_up", "1 while the training process runs.", Some(f64::from(u8::from(child_up))));
    counter(
        &mut out,
        "rankvisor_restarts_total",
        "Restarts of the training process made by rankvisor.",
        r.restart_count,
    );
    let healthy = r.node_health.as_ref().and_then(|n| n.healthy).map(|h| f64::from(u8::from(h)));
    gauge(&mut out, "rankvisor_node_healthy", "1 when the node's health labels allow training, 0 when not.", healthy);
    let code = r.last_exit.as_ref().map(|e| f64::from(e.status));
    gauge(
        &mut out,
        "rankvisor_last_exit_code",
        "Shell-style status of the last training process (128+N for signal N).",
        code,
    );
    gauge(
        &mut out,
        "rankvisor_generation",
        "Rendezvous generation of the running training process.",
        Some(r.generation as f64),
    );
    gauge(&mut out, "rankvisor_rendezvous_seconds", "Seconds the latest rendezvous took.", r.rendezvous_seconds);
    counter(
        &mut out,
        "rankvisor_hang_detections_total",
        "Training processes found hung (no heartbeat).",
        r.hang_detections,
    );
    let step = r.training_step().map(|s| s as f64);
    gauge(&mut out, "rankvisor_training_step", "The step the training process last wrote to its heartbeat.", step);
    counter(&mut out, "rankvisor_reports_sent_total", "Reports the webhook accepted.", webhook.sent);
    counter(&mut out, "rankvisor_report_failures_total", "Webhook requests that failed or timed out.", webhook.failed);
    counter(
        &mut out,
        "rankvisor_reports_dropped_total",
        "Reports dropped unsent because the webhook queue was full.",
        webhook.dropped,
    );
    out
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
    use crate::report::{Identity, LocalStatus, NodeHealthReport, Timeline};
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
            last_exit: Some(ExitHow::Signaled(9)),
            hang_detections: 1,
            progress: crate::heartbeat::parse_progress(r#"{"step": 1200, "loss": 0.3}"#),
            ..LocalStatus::default()
        };
        let counts = WebhookCounts { sent: 5, failed: 2, dropped: 1 };
        let text = render_metrics(&report(st, None), &counts);
        assert_eq!(value(&text, "rankvisor_child_up"), Some(1.0));
        assert_eq!(value(&text, "rankvisor_restarts_total"), Some(2.0));
        assert_eq!(value(&text, "rankvisor_last_exit_code"), Some(137.0));
        assert_eq!(value(&text, "rankvisor_hang_detections_total"), Some(1.0));
        assert_eq!(value(&text, "rankvisor_training_step"), Some(1200.0));
        assert_eq!(value(&text, "rankvisor_reports_sent_total"), Some(5.0));
        assert_eq!(value(&text, "rankvisor_report_failures_total"), Some(2.0));
        assert_eq!(value(&text, "rankvisor_reports_dropped_total"), Some(1.0));
        assert_eq!(value(&text, "rankvisor_state{state=\"Running\"}"), Some(1.0));
        assert_eq!(value(&text, "rankvisor_state{state=\"Pending\"}"), Some(0.0));
        let ones: f64 = values(&text).iter().filter(|(k, _)| k.starts_with("rankvisor_state{")).map(|(_, v)| v).sum();
        assert_eq!(ones, 1.0);
        let version = env!("CARGO_PKG_VERSION");
        assert!(text.contains(&format!(
            "rankvisor_info{{job=\"pytest\",replica_type=\"Worker\",rank=\"1\",pod=\"pytest-worker-0\",version=\"{version}\"}} 1\n"
        )));
        assert_eq!(value(&text, "rankvisor_node_healthy"), None, "node health off: left out");
        assert_eq!(value(&text, "rankvisor_rendezvous_seconds"), None);
    }

    #[test]
    fn unknown_values_are_left_out_and_node_health_shows() {
        let node = NodeHealthReport { healthy: Some(false), verdict: None, error: None };
        let text = render_metrics(&report(LocalStatus::default(), Some(node)), &WebhookCounts::default());
        assert_eq!(value(&text, "rankvisor_child_up"), Some(0.0));
        assert_eq!(value(&text, "rankvisor_node_healthy"), Some(0.0));
        assert_eq!(value(&text, "rankvisor_last_exit_code"), None);
        assert_eq!(value(&text, "rankvisor_training_step"), None);
        assert!(!text.contains("rankvisor_last_exit_code"), "no HELP without a sample");
        let unknown = NodeHealthReport { healthy: None, verdict: None, error: Some("unreadable".into()) };
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
}

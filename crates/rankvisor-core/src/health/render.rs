//! What `rankvisor check-node` prints: the verdict, why, the labels it used and the fault info.

use super::verdict::{NodeVerdict, DEEP_HEALTH_CHECK_STATUS, NODE_HEALTH_STATUS};
use crate::untrusted::Escaped;

/// Multi-line human rendering of a verdict, ending with a newline.
pub fn render_text(v: &NodeVerdict) -> String {
    let mut out = String::new();
    out.push_str(if v.healthy { "node: healthy\n" } else { "node: unhealthy\n" });
    out.push_str("why:\n");
    if v.healthy {
        for line in healthy_explanation(v) {
            out.push_str(&format!("  - {line}\n"));
        }
    } else {
        for reason in &v.reasons {
            out.push_str(&format!("  - {}\n", crate::untrusted::escape_hidden(reason)));
        }
    }
    if v.fault_type.is_some() || v.fault_reason.is_some() || v.fault_details.is_some() {
        out.push_str("fault:\n");
        if let Some(t) = &v.fault_type {
            out.push_str(&format!("  type: {}\n", Escaped(t)));
        }
        if let Some(r) = &v.fault_reason {
            out.push_str(&format!("  reason: {}\n", Escaped(r)));
        }
        if let Some(d) = &v.fault_details {
            out.push_str(&format!("  details: {d}\n"));
        }
    }
    if v.labels.is_empty() {
        out.push_str("labels used: none (no sagemaker.amazonaws.com/ label on the node)\n");
    } else {
        out.push_str("labels used:\n");
        for (k, value) in &v.labels {
            out.push_str(&format!("  {}={}\n", Escaped(k), Escaped(value)));
        }
    }
    if !v.taints.is_empty() {
        out.push_str("health taints:\n");
        for t in &v.taints {
            out.push_str(&format!("  {}\n", t));
        }
    }
    out
}

/// Pretty JSON of the verdict (every field of [`NodeVerdict`]), ending with a newline.
pub fn render_json(v: &NodeVerdict) -> String {
    match serde_json::to_string_pretty(v) {
        Ok(json) => json + "\n",
        // Cannot happen for these field types; still print something a JSON reader accepts.
        Err(e) => format!("{}\n", serde_json::json!({ "error": e.to_string() })),
    }
}

/// The passed checks, derived from the fields: a healthy verdict means every check passed.
fn healthy_explanation(v: &NodeVerdict) -> Vec<String> {
    let status = match &v.node_health_status {
        Some(s) => format!("label {NODE_HEALTH_STATUS} is {s:?}"),
        None => format!("label {NODE_HEALTH_STATUS} is absent (allowed: --require-health-label is not set)"),
    };
    let deep = match &v.deep_health_check_status {
        Some(s) => format!("label {DEEP_HEALTH_CHECK_STATUS} is {s:?}"),
        None => format!("label {DEEP_HEALTH_CHECK_STATUS} is absent"),
    };
    vec![status, deep, "no HyperPod health taint on the node".to_string()]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::health::verdict::{verdict, FAULT_DETAILS};
    use crate::kube::{NodeSnapshot, Taint};

    fn snap(pairs: &[(&str, &str)]) -> NodeSnapshot {
        NodeSnapshot::from_labels(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn unhealthy_text() {
        let mut s = snap(&[
            (NODE_HEALTH_STATUS, "UnschedulablePendingReboot"),
            ("sagemaker.amazonaws.com/fault-types", "GpuFailure"),
            ("sagemaker.amazonaws.com/fault-reasons", "XidError"),
            ("kubernetes.io/hostname", "n1"),
        ]);
        s.annotations = BTreeMap::from([(FAULT_DETAILS.to_string(), r#"{"xid":79}"#.to_string())]);
        s.taints =
            vec![Taint { key: NODE_HEALTH_STATUS.into(), value: "Unschedulable".into(), effect: "NoSchedule".into() }];
        let text = render_text(&verdict(&s, false));
        let expected = "\
node: unhealthy
why:
  - label sagemaker.amazonaws.com/node-health-status is \"UnschedulablePendingReboot\" (the node failed health checks and must be rebooted): expected Schedulable
  - taint sagemaker.amazonaws.com/node-health-status=Unschedulable:NoSchedule is on the node: expected no HyperPod health taint with effect NoSchedule or NoExecute
fault:
  type: GpuFailure
  reason: XidError
  details: {\"xid\":79}
labels used:
  sagemaker.amazonaws.com/fault-reasons=XidError
  sagemaker.amazonaws.com/fault-types=GpuFailure
  sagemaker.amazonaws.com/node-health-status=UnschedulablePendingReboot
health taints:
  sagemaker.amazonaws.com/node-health-status=Unschedulable:NoSchedule
";
        assert_eq!(text, expected);
    }

    #[test]
    fn healthy_text() {
        let text = render_text(&verdict(
            &snap(&[(NODE_HEALTH_STATUS, "Schedulable"), (DEEP_HEALTH_CHECK_STATUS, "Passed")]),
            true,
        ));
        let expected = "\
node: healthy
why:
  - label sagemaker.amazonaws.com/node-health-status is \"Schedulable\"
  - label sagemaker.amazonaws.com/deep-health-check-status is \"Passed\"
  - no HyperPod health taint on the node
labels used:
  sagemaker.amazonaws.com/deep-health-check-status=Passed
  sagemaker.amazonaws.com/node-health-status=Schedulable
";
        assert_eq!(text, expected);
    }

    #[test]
    fn healthy_without_labels_says_so() {
        let text = render_text(&verdict(&snap(&[]), false));
        assert!(text.starts_with("node: healthy\n"), "{text}");
        assert!(text.contains("node-health-status is absent (allowed: --require-health-label is not set)"));
        assert!(text.contains("labels used: none"));
    }

    #[test]
    fn json_has_every_field_and_round_trips() {
        let v =
            verdict(&snap(&[(NODE_HEALTH_STATUS, "Foo"), ("sagemaker.amazonaws.com/fault-type", "GpuFailure")]), false);
        let json = render_json(&v);
        assert!(json.ends_with('\n'));
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["healthy"], false);
        assert_eq!(value["node_health_status"], "Foo");
        assert_eq!(value["deep_health_check_status"], serde_json::Value::Null);
        assert_eq!(value["fault_type"], "GpuFailure");
        assert_eq!(value["labels"][NODE_HEALTH_STATUS], "Foo");
        assert!(value["reasons"][0].as_str().unwrap().contains("\"Foo\""));
        let back: NodeVerdict = serde_json::from_str(&json).unwrap();
        assert_eq!(back, v);
    }
}

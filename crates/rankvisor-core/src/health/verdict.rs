//! The node-health verdict: a pure function of the node's labels, annotations and taints.
//!
//! Fail closed: every value that is not documented as healthy, including values HyperPod may add
//! in the future, makes the node unhealthy, and the reason names the label and the value seen.

use crate::kube::{NodeSnapshot, Taint};
use crate::untrusted::Escaped;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Prefix shared by every HyperPod label and annotation; labels under it are reported.
pub const LABEL_PREFIX: &str = "sagemaker.amazonaws.com/";
/// The node's overall health, set by HyperPod's health-monitoring agent.
pub const NODE_HEALTH_STATUS: &str = "sagemaker.amazonaws.com/node-health-status";
/// Progress of HyperPod's deep health check (stress test) of the node.
pub const DEEP_HEALTH_CHECK_STATUS: &str = "sagemaker.amazonaws.com/deep-health-check-status";
/// Every spelling of the fault-type key: AWS's prose says singular, tools in the wild read plural.
pub const FAULT_TYPE_KEYS: [&str; 2] = ["sagemaker.amazonaws.com/fault-type", "sagemaker.amazonaws.com/fault-types"];
/// Every spelling of the fault-reason key.
pub const FAULT_REASON_KEYS: [&str; 2] =
    ["sagemaker.amazonaws.com/fault-reason", "sagemaker.amazonaws.com/fault-reasons"];
/// Annotation holding the fault's details as JSON.
pub const FAULT_DETAILS: &str = "sagemaker.amazonaws.com/fault-details";

const SCHEDULABLE: &str = "Schedulable";
const PASSED: &str = "Passed";

/// The health verdict on the node, with everything needed to explain it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeVerdict {
    /// True iff the node may run (or keep running) the training process.
    pub healthy: bool,
    /// Why the node is unhealthy: one sentence per failed check, naming label and value; empty iff healthy.
    pub reasons: Vec<String>,
    /// The failed checks in short `key=value` form, for one-line summaries and metrics labels.
    pub failed_checks: Vec<String>,
    /// Value of `node-health-status`, if the label is present.
    pub node_health_status: Option<String>,
    /// Value of `deep-health-check-status`, if the label is present.
    pub deep_health_check_status: Option<String>,
    /// High-level fault category, from any spelling of the fault-type key.
    pub fault_type: Option<String>,
    /// Detailed fault reason, from any spelling of the fault-reason key.
    pub fault_reason: Option<String>,
    /// The fault-details annotation: parsed JSON, or the raw text as a JSON string if unparseable.
    pub fault_details: Option<serde_json::Value>,
    /// Every `sagemaker.amazonaws.com/` label of the node.
    pub labels: BTreeMap<String, String>,
    /// The HyperPod health taints on the node (those that count against it).
    pub taints: Vec<Taint>,
    /// Whether the verdict was computed with `--require-health-label`.
    pub require_health_label: bool,
}

/// A failed check: the sentence for humans and the short form for summaries.
struct Failure {
    sentence: String,
    short: String,
}

/// Judge the node. `require_health_label` makes an absent `node-health-status` unhealthy.
pub fn verdict(snapshot: &NodeSnapshot, require_health_label: bool) -> NodeVerdict {
    let node_health_status = snapshot.labels.get(NODE_HEALTH_STATUS).cloned();
    let deep_health_check_status = snapshot.labels.get(DEEP_HEALTH_CHECK_STATUS).cloned();
    let health_taints: Vec<Taint> = snapshot.taints.iter().filter(|t| counts_against_node(t)).cloned().collect();

    let mut failures = Vec::new();
    failures.extend(check_node_health_status(node_health_status.as_deref(), require_health_label));
    failures.extend(check_deep_health_check_status(deep_health_check_status.as_deref()));
    failures.extend(health_taints.iter().map(taint_failure));

    NodeVerdict {
        healthy: failures.is_empty(),
        reasons: failures.iter().map(|f| f.sentence.clone()).collect(),
        failed_checks: failures.into_iter().map(|f| f.short).collect(),
        node_health_status,
        deep_health_check_status,
        fault_type: fault_value(snapshot, &FAULT_TYPE_KEYS),
        fault_reason: fault_value(snapshot, &FAULT_REASON_KEYS),
        fault_details: fault_details(snapshot),
        labels: snapshot
            .labels
            .iter()
            .filter(|(k, _)| k.starts_with(LABEL_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        taints: health_taints,
        require_health_label,
    }
}

/// One line for the termination message and logs, e.g.
/// `node unhealthy: sagemaker.amazonaws.com/node-health-status=UnschedulablePendingReboot (fault-type=GpuFailure, fault-reason=XidError)`.
pub fn summary(v: &NodeVerdict) -> String {
    let mut line = if v.healthy {
        let mut line = "node healthy".to_string();
        if let Some(status) = &v.node_health_status {
            line.push_str(&format!(": {NODE_HEALTH_STATUS}={}", Escaped(status)));
        }
        line
    } else {
        format!("node unhealthy: {}", v.failed_checks.join(", "))
    };
    let fault: Vec<String> = [("fault-type", &v.fault_type), ("fault-reason", &v.fault_reason)]
        .into_iter()
        .filter_map(|(name, value)| value.as_ref().map(|value| format!("{name}={}", Escaped(value))))
        .collect();
    if !fault.is_empty() {
        line.push_str(&format!(" ({})", fault.join(", ")));
    }
    line
}

/// The HyperPod health taint counts when it forbids scheduling or execution; a
/// `PreferNoSchedule` one is only a preference. An unknown effect counts (fail closed).
fn counts_against_node(taint: &Taint) -> bool {
    taint.key == NODE_HEALTH_STATUS && taint.effect != "PreferNoSchedule"
}

fn check_node_health_status(value: Option<&str>, require: bool) -> Option<Failure> {
    let meaning = match value {
        Some(SCHEDULABLE) => return None,
        None if !require => return None,
        None => {
            return Some(Failure {
                sentence: format!(
                    "label {NODE_HEALTH_STATUS} is absent: expected {SCHEDULABLE} (--require-health-label is set)"
                ),
                short: format!("{NODE_HEALTH_STATUS} absent"),
            })
        }
        Some("Unschedulable") => "deep health checks are running",
        Some("UnschedulablePendingReplacement") => "the node failed health checks and must be replaced",
        Some("UnschedulablePendingReboot") => "the node failed health checks and must be rebooted",
        Some(_) => "unknown value, treated as unhealthy",
    };
    let value = value.unwrap_or_default();
    Some(Failure {
        sentence: format!("label {NODE_HEALTH_STATUS} is {value:?} ({meaning}): expected {SCHEDULABLE}"),
        short: format!("{NODE_HEALTH_STATUS}={}", Escaped(value)),
    })
}

fn check_deep_health_check_status(value: Option<&str>) -> Option<Failure> {
    let meaning = match value {
        None | Some(PASSED) => return None,
        Some("InProgress") => "deep health checks are running",
        Some("Failed") => "the node failed deep health checks",
        Some(_) => "unknown value, treated as unhealthy",
    };
    let value = value.unwrap_or_default();
    Some(Failure {
        sentence: format!("label {DEEP_HEALTH_CHECK_STATUS} is {value:?} ({meaning}): expected {PASSED} or absent"),
        short: format!("{DEEP_HEALTH_CHECK_STATUS}={}", Escaped(value)),
    })
}

fn taint_failure(taint: &Taint) -> Failure {
    Failure {
        sentence: format!(
            "taint {taint} is on the node: expected no HyperPod health taint with effect NoSchedule or NoExecute"
        ),
        short: format!("taint {taint}"),
    }
}

/// Labels first, then annotations; distinct values of different spellings are all kept so that
/// nothing the agent wrote is hidden.
fn fault_value(snapshot: &NodeSnapshot, keys: &[&str]) -> Option<String> {
    let mut values: Vec<&str> = Vec::new();
    for map in [&snapshot.labels, &snapshot.annotations] {
        for key in keys {
            if let Some(v) = map.get(*key) {
                if !v.is_empty() && !values.contains(&v.as_str()) {
                    values.push(v);
                }
            }
        }
    }
    if values.is_empty() {
        None
    } else {
        Some(values.join(","))
    }
}

/// Unparseable JSON is kept as a string: the details are informative and must not change the verdict.
fn fault_details(snapshot: &NodeSnapshot) -> Option<serde_json::Value> {
    let raw = snapshot.annotations.get(FAULT_DETAILS).or_else(|| snapshot.labels.get(FAULT_DETAILS))?;
    Some(serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn snap(pairs: &[(&str, &str)]) -> NodeSnapshot {
        NodeSnapshot::from_labels(labels(pairs))
    }

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint { key: key.into(), value: value.into(), effect: effect.into() }
    }

    /// (node-health-status, deep-health-check-status, require, healthy)
    #[test]
    fn label_table() {
        let nhs = [
            (Some("Schedulable"), true),
            (Some("Unschedulable"), false),
            (Some("UnschedulablePendingReplacement"), false),
            (Some("UnschedulablePendingReboot"), false),
            (Some("Foo"), false),
            (Some("schedulable"), false),
            (Some(""), false),
            (Some(" Schedulable"), false),
            (None, true),
        ];
        let dhc = [
            (None, true),
            (Some("Passed"), true),
            (Some("InProgress"), false),
            (Some("Failed"), false),
            (Some("passed"), false),
            (Some("Bar"), false),
            (Some(""), false),
        ];
        for (n, n_ok) in nhs {
            for (d, d_ok) in dhc {
                for require in [false, true] {
                    let mut pairs = Vec::new();
                    if let Some(n) = n {
                        pairs.push((NODE_HEALTH_STATUS, n));
                    }
                    if let Some(d) = d {
                        pairs.push((DEEP_HEALTH_CHECK_STATUS, d));
                    }
                    let v = verdict(&snap(&pairs), require);
                    let n_ok = n_ok && !(require && n.is_none());
                    let expected = n_ok && d_ok;
                    assert_eq!(v.healthy, expected, "{n:?} {d:?} require={require}: {v:?}");
                    assert_eq!(v.reasons.is_empty(), v.healthy);
                    assert_eq!(v.reasons.len(), v.failed_checks.len());
                    assert_eq!(v.reasons.len(), usize::from(!n_ok) + usize::from(!d_ok), "{v:?}");
                    assert_eq!(v.node_health_status.as_deref(), n);
                    assert_eq!(v.deep_health_check_status.as_deref(), d);
                    assert_eq!(v.require_health_label, require);
                    if let (false, Some(n)) = (n_ok, n) {
                        assert!(
                            v.reasons[0].starts_with(&format!("label {NODE_HEALTH_STATUS} is {n:?} (")),
                            "{}",
                            v.reasons[0]
                        );
                        assert!(v.reasons[0].ends_with(": expected Schedulable"));
                    }
                    if let (false, Some(d)) = (d_ok, d) {
                        let last = v.reasons.last().map(String::as_str).unwrap_or_default();
                        assert!(last.starts_with(&format!("label {DEEP_HEALTH_CHECK_STATUS} is {d:?} (")), "{last}");
                        assert!(last.ends_with(": expected Passed or absent"), "{last}");
                    }
                }
            }
        }
    }

    #[test]
    fn unknown_value_message_names_the_value() {
        let v = verdict(&snap(&[(NODE_HEALTH_STATUS, "Foo")]), false);
        assert_eq!(
            v.reasons,
            vec![format!(
                "label {NODE_HEALTH_STATUS} is \"Foo\" (unknown value, treated as unhealthy): expected Schedulable"
            )]
        );
        assert_eq!(v.failed_checks, vec![format!("{NODE_HEALTH_STATUS}=Foo")]);
    }

    #[test]
    fn documented_values_explain_themselves() {
        let cases = [
            ("Unschedulable", "deep health checks are running"),
            ("UnschedulablePendingReplacement", "must be replaced"),
            ("UnschedulablePendingReboot", "must be rebooted"),
        ];
        for (value, meaning) in cases {
            let v = verdict(&snap(&[(NODE_HEALTH_STATUS, value)]), false);
            assert!(v.reasons[0].contains(meaning), "{}", v.reasons[0]);
        }
        let v = verdict(&snap(&[(DEEP_HEALTH_CHECK_STATUS, "Failed")]), false);
        assert!(v.reasons[0].contains("failed deep health checks"), "{}", v.reasons[0]);
        let v = verdict(&snap(&[(DEEP_HEALTH_CHECK_STATUS, "InProgress")]), false);
        assert!(v.reasons[0].contains("running"), "{}", v.reasons[0]);
    }

    #[test]
    fn absent_label_required_names_the_flag() {
        let v = verdict(&snap(&[]), true);
        assert!(!v.healthy);
        assert_eq!(
            v.reasons,
            vec![format!("label {NODE_HEALTH_STATUS} is absent: expected Schedulable (--require-health-label is set)")]
        );
        assert_eq!(v.failed_checks, vec![format!("{NODE_HEALTH_STATUS} absent")]);
        assert!(verdict(&snap(&[]), false).healthy);
    }

    #[test]
    fn taint_table() {
        let cases = [
            (taint(NODE_HEALTH_STATUS, "Unschedulable", "NoSchedule"), false),
            (taint(NODE_HEALTH_STATUS, "Unschedulable", "NoExecute"), false),
            (taint(NODE_HEALTH_STATUS, "", "NoSchedule"), false),
            (taint(NODE_HEALTH_STATUS, "Unschedulable", "SomeFutureEffect"), false),
            (taint(NODE_HEALTH_STATUS, "Unschedulable", "PreferNoSchedule"), true),
            (taint("nvidia.com/gpu", "present", "NoSchedule"), true),
            (taint("node.kubernetes.io/unschedulable", "", "NoSchedule"), true),
            (taint("sagemaker.amazonaws.com/other", "x", "NoExecute"), true),
        ];
        for (t, healthy) in cases {
            let s = NodeSnapshot {
                labels: labels(&[(NODE_HEALTH_STATUS, "Schedulable")]),
                taints: vec![t.clone()],
                ..NodeSnapshot::default()
            };
            let v = verdict(&s, true);
            assert_eq!(v.healthy, healthy, "{t:?}: {v:?}");
            assert_eq!(v.taints.is_empty(), healthy);
            if !healthy {
                assert_eq!(
                    v.reasons,
                    vec![format!(
                        "taint {t} is on the node: expected no HyperPod health taint with effect NoSchedule or NoExecute"
                    )]
                );
                assert_eq!(v.failed_checks, vec![format!("taint {t}")]);
            }
        }
        assert_eq!(
            taint(NODE_HEALTH_STATUS, "Unschedulable", "NoSchedule").to_string(),
            "sagemaker.amazonaws.com/node-health-status=Unschedulable:NoSchedule"
        );
        assert_eq!(taint("k", "", "NoExecute").to_string(), "k:NoExecute");
    }

    #[test]
    fn every_failure_is_reported() {
        let s = NodeSnapshot {
            labels: labels(&[(NODE_HEALTH_STATUS, "UnschedulablePendingReboot"), (DEEP_HEALTH_CHECK_STATUS, "Failed")]),
            taints: vec![taint(NODE_HEALTH_STATUS, "Unschedulable", "NoExecute")],
            ..NodeSnapshot::default()
        };
        let v = verdict(&s, false);
        assert_eq!(v.reasons.len(), 3);
        assert_eq!(
            v.failed_checks,
            vec![
                format!("{NODE_HEALTH_STATUS}=UnschedulablePendingReboot"),
                format!("{DEEP_HEALTH_CHECK_STATUS}=Failed"),
                format!("taint {NODE_HEALTH_STATUS}=Unschedulable:NoExecute"),
            ]
        );
    }

    #[test]
    fn fault_spellings() {
        let singular = snap(&[
            ("sagemaker.amazonaws.com/fault-type", "GpuFailure"),
            ("sagemaker.amazonaws.com/fault-reason", "XidError"),
        ]);
        let plural = snap(&[
            ("sagemaker.amazonaws.com/fault-types", "GpuFailure"),
            ("sagemaker.amazonaws.com/fault-reasons", "XidError"),
        ]);
        let annotated = NodeSnapshot {
            annotations: labels(&[
                ("sagemaker.amazonaws.com/fault-types", "GpuFailure"),
                ("sagemaker.amazonaws.com/fault-reason", "XidError"),
            ]),
            ..NodeSnapshot::default()
        };
        for s in [singular, plural, annotated] {
            let v = verdict(&s, false);
            assert_eq!(v.fault_type.as_deref(), Some("GpuFailure"), "{s:?}");
            assert_eq!(v.fault_reason.as_deref(), Some("XidError"), "{s:?}");
            // Faults alone do not decide the verdict: the status labels do.
            assert!(v.healthy);
        }
        let both = snap(&[
            ("sagemaker.amazonaws.com/fault-type", "GpuFailure"),
            ("sagemaker.amazonaws.com/fault-types", "GpuFailure"),
            ("sagemaker.amazonaws.com/fault-reason", "XidError"),
            ("sagemaker.amazonaws.com/fault-reasons", "NvlinkError"),
        ]);
        let v = verdict(&both, false);
        assert_eq!(v.fault_type.as_deref(), Some("GpuFailure"));
        assert_eq!(v.fault_reason.as_deref(), Some("XidError,NvlinkError"));
        let empty = snap(&[("sagemaker.amazonaws.com/fault-type", "")]);
        assert_eq!(verdict(&empty, false).fault_type, None);
        let none = verdict(&snap(&[]), false);
        assert_eq!((none.fault_type, none.fault_reason, none.fault_details), (None, None, None));
    }

    #[test]
    fn fault_details_json_or_raw() {
        let parsed = NodeSnapshot {
            annotations: labels(&[(FAULT_DETAILS, r#"{"gpu":3,"xid":79}"#)]),
            ..NodeSnapshot::default()
        };
        assert_eq!(verdict(&parsed, false).fault_details, Some(serde_json::json!({"gpu": 3, "xid": 79})));
        let raw = NodeSnapshot {
            labels: labels(&[(NODE_HEALTH_STATUS, "Schedulable")]),
            annotations: labels(&[(FAULT_DETAILS, "{not json")]),
            ..NodeSnapshot::default()
        };
        let v = verdict(&raw, true);
        assert!(v.healthy, "bad fault-details must not fail the verdict");
        assert_eq!(v.fault_details, Some(serde_json::json!("{not json")));
    }

    #[test]
    fn reports_only_sagemaker_labels() {
        let v = verdict(
            &snap(&[
                (NODE_HEALTH_STATUS, "Schedulable"),
                ("sagemaker.amazonaws.com/instance-group-name", "workers"),
                ("kubernetes.io/hostname", "ip-10-0-0-1"),
                ("sagemaker.amazonaws.com.evil/x", "y"),
            ]),
            false,
        );
        assert_eq!(
            v.labels,
            labels(&[(NODE_HEALTH_STATUS, "Schedulable"), ("sagemaker.amazonaws.com/instance-group-name", "workers"),])
        );
    }

    #[test]
    fn summary_lines() {
        let s = snap(&[
            (NODE_HEALTH_STATUS, "UnschedulablePendingReboot"),
            ("sagemaker.amazonaws.com/fault-type", "GpuFailure"),
            ("sagemaker.amazonaws.com/fault-reason", "XidError"),
        ]);
        assert_eq!(
            summary(&verdict(&s, false)),
            "node unhealthy: sagemaker.amazonaws.com/node-health-status=UnschedulablePendingReboot (fault-type=GpuFailure, fault-reason=XidError)"
        );
        assert_eq!(
            summary(&verdict(&snap(&[(NODE_HEALTH_STATUS, "Schedulable")]), false)),
            "node healthy: sagemaker.amazonaws.com/node-health-status=Schedulable"
        );
        assert_eq!(summary(&verdict(&snap(&[]), false)), "node healthy");
        assert_eq!(
            summary(&verdict(&snap(&[]), true)),
            "node unhealthy: sagemaker.amazonaws.com/node-health-status absent"
        );
        let s = NodeSnapshot {
            labels: labels(&[(DEEP_HEALTH_CHECK_STATUS, "InProgress")]),
            taints: vec![taint(NODE_HEALTH_STATUS, "Unschedulable", "NoSchedule")],
            ..NodeSnapshot::default()
        };
        assert_eq!(
            summary(&verdict(&s, false)),
            "node unhealthy: sagemaker.amazonaws.com/deep-health-check-status=InProgress, taint sagemaker.amazonaws.com/node-health-status=Unschedulable:NoSchedule"
        );
    }

    #[test]
    fn verdict_round_trips_through_json() {
        let s = NodeSnapshot {
            labels: labels(&[(NODE_HEALTH_STATUS, "Unschedulable")]),
            annotations: labels(&[(FAULT_DETAILS, r#"{"a":[1,2]}"#)]),
            taints: vec![taint(NODE_HEALTH_STATUS, "Unschedulable", "NoSchedule")],
        };
        let v = verdict(&s, false);
        let back: NodeVerdict = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
        assert_eq!(back, v);
        let snap_back: NodeSnapshot = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(snap_back, s);
    }
}

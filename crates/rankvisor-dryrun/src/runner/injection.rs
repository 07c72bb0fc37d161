//! Fault injection specs: `fail:worker-1@5s`, `delete:master-0@10s`, `preempt:worker-0@4s`,
//! `label:worker-2@3s=UnschedulablePendingReboot`.

use std::time::Duration;

use rankvisor_core::duration::parse_duration;

use crate::kubelet::replica::{ReplicaId, ReplicaType};
use crate::pytorchjob::PyTorchJob;

/// The HyperPod label a `label:` injection sets when it names no key.
pub(crate) const DEFAULT_LABEL_KEY: &str = "sagemaker.amazonaws.com/node-health-status";

/// The forms an injection may take, for error messages.
const EXPECTED: &str = "expected fail:REPLICA@TIME, delete:REPLICA@TIME, preempt:REPLICA@TIME, label:REPLICA@TIME=VALUE (or =KEY=VALUE) or resume:job@TIME, with REPLICA like master-0 or worker-1 and TIME like 5s";

/// What to do to the replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Make the replica's training process fail (it ends as a crash would).
    Fail,
    /// Delete the pod: kill its launcher; the operator recreates it with restart count 0.
    Delete,
    /// Delete the pod gracefully, as a preemption or `kubectl delete pod` does: the kubelet's
    /// TERM to the launcher, its grace period, then KILL; the operator recreates it.
    Preempt,
    /// Set `spec.runPolicy.suspend` to false on the (suspended) job; `resume:job@TIME`, the replica
    /// is unused.
    Resume,
    /// Set a label on the replica's node (the launcher's node-health source sees it).
    Label {
        /// The label key (default `sagemaker.amazonaws.com/node-health-status`).
        key: String,
        /// The new value.
        value: String,
    },
}

/// One scheduled fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Injection {
    /// When, from the submit.
    pub at: Duration,
    /// Which replica.
    pub replica: ReplicaId,
    /// What to do.
    pub fault: Fault,
}

/// An injection spec that could not be read or names a replica the job does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fault injection {spec:?}: {reason}")]
pub(crate) struct InjectionError {
    /// The spec as given.
    pub spec: String,
    /// What is wrong, and what was expected.
    pub reason: String,
}

/// Parse a spec and check its replica exists in `job`.
pub(crate) fn parse_injection(spec: &str, job: &PyTorchJob) -> Result<Injection, InjectionError> {
    let err = |reason: String| InjectionError { spec: spec.to_string(), reason };
    let (verb, rest) = spec.split_once(':').ok_or_else(|| err(format!("no ':' after the fault kind: {EXPECTED}")))?;
    let (target, when) = rest.split_once('@').ok_or_else(|| err(format!("no '@TIME': {EXPECTED}")))?;
    let (time, label) = match when.split_once('=') {
        Some((t, l)) => (t, Some(l)),
        None => (when, None),
    };
    let at = parse_duration(time).map_err(|e| err(format!("{e}; {EXPECTED}")))?;
    if verb == "resume" {
        if target != "job" || label.is_some() {
            return Err(err(format!("resume acts on the job: resume:job@TIME; {EXPECTED}")));
        }
        return Ok(Injection { at, replica: ReplicaId::MASTER, fault: Fault::Resume });
    }
    let replica = parse_replica(target, job).map_err(&err)?;
    let fault = match (verb, label) {
        ("fail", None) => Fault::Fail,
        ("delete", None) => Fault::Delete,
        ("preempt", None) => Fault::Preempt,
        ("fail" | "delete" | "preempt", Some(_)) => {
            return Err(err(format!("{verb} takes no '=VALUE': {EXPECTED}")));
        }
        ("label", None) | ("label", Some("")) => {
            return Err(err(format!(
                "label needs '=VALUE' (e.g. label:worker-2@3s=UnschedulablePendingReboot): {EXPECTED}"
            )));
        }
        ("label", Some(l)) => match l.split_once('=') {
            Some((key, value)) if !key.is_empty() => Fault::Label { key: key.to_string(), value: value.to_string() },
            Some(_) => return Err(err(format!("empty label key: {EXPECTED}"))),
            None => Fault::Label { key: DEFAULT_LABEL_KEY.to_string(), value: l.to_string() },
        },
        (other, _) => return Err(err(format!("unknown fault kind {other:?}: {EXPECTED}"))),
    };
    Ok(Injection { at, replica, fault })
}

/// Read `master-0`, `worker-1` (or the full pod name `<job>-worker-1`) and check the job has it.
fn parse_replica(target: &str, job: &PyTorchJob) -> Result<ReplicaId, String> {
    let short = target.strip_prefix(job.name.as_str()).and_then(|s| s.strip_prefix('-')).unwrap_or(target);
    let parsed = short.rsplit_once('-').and_then(|(kind, index)| {
        let rtype = match kind {
            "master" => ReplicaType::Master,
            "worker" => ReplicaType::Worker,
            _ => return None,
        };
        let index = index.parse::<u32>().ok()?;
        Some(ReplicaId { rtype, index })
    });
    let id = parsed.ok_or_else(|| format!("replica {target:?} is not of the form master-0 or worker-N: {EXPECTED}"))?;
    if !job.contains(id) {
        let known: Vec<String> = job.replicas().iter().map(|r| r.to_string()).collect();
        return Err(format!("the job has no replica {id}: its replicas are {}", known.join(", ")));
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pytorchjob::admission::parse_job;

    fn job() -> PyTorchJob {
        parse_job(include_str!("../../../../examples/pytorchjob.yaml"), "pytorchjob.yaml").unwrap()
    }

    #[test]
    fn the_three_forms_parse() {
        let j = job();
        assert_eq!(
            parse_injection("fail:worker-1@5s", &j),
            Ok(Injection { at: Duration::from_secs(5), replica: ReplicaId::worker(1), fault: Fault::Fail })
        );
        assert_eq!(
            parse_injection("delete:master-0@10s", &j),
            Ok(Injection { at: Duration::from_secs(10), replica: ReplicaId::MASTER, fault: Fault::Delete })
        );
        assert_eq!(
            parse_injection("preempt:master-0@1s", &j),
            Ok(Injection { at: Duration::from_secs(1), replica: ReplicaId::MASTER, fault: Fault::Preempt })
        );
        assert_eq!(
            parse_injection("label:worker-2@3s=UnschedulablePendingReboot", &j),
            Ok(Injection {
                at: Duration::from_secs(3),
                replica: ReplicaId::worker(2),
                fault: Fault::Label { key: DEFAULT_LABEL_KEY.into(), value: "UnschedulablePendingReboot".into() }
            })
        );
        assert_eq!(
            parse_injection("label:worker-0@500ms=sagemaker.amazonaws.com/deep-health-check-status=Failed", &j)
                .unwrap()
                .fault,
            Fault::Label { key: "sagemaker.amazonaws.com/deep-health-check-status".into(), value: "Failed".into() }
        );
        assert_eq!(parse_injection("fail:pytest-worker-2@1s", &j).unwrap().replica, ReplicaId::worker(2));
    }

    #[test]
    fn resume_acts_on_the_job() {
        let j = job();
        assert_eq!(parse_injection("resume:job@2s", &j).unwrap().fault, Fault::Resume);
        assert!(parse_injection("resume:worker-1@2s", &j).unwrap_err().to_string().contains("resume:job@TIME"));
    }

    #[test]
    fn errors_name_the_spec_and_the_expected_form() {
        let j = job();
        for (spec, needle) in [
            ("fail", "no ':'"),
            ("fail:worker-1", "no '@TIME'"),
            ("fail:worker-1@soon", "invalid duration \"soon\""),
            ("crash:worker-1@5s", "unknown fault kind \"crash\""),
            ("fail:worker-1@5s=x", "fail takes no '=VALUE'"),
            ("label:worker-1@5s", "label needs '=VALUE'"),
            ("label:worker-1@5s==x", "empty label key"),
            ("fail:chief-0@5s", "not of the form master-0 or worker-N"),
            (
                "fail:worker-3@5s",
                "the job has no replica worker-3: its replicas are master-0, worker-0, worker-1, worker-2",
            ),
            ("delete:master-1@5s", "the job has no replica master-1"),
        ] {
            let e = parse_injection(spec, &j).unwrap_err();
            assert_eq!(e.spec, spec);
            let text = e.to_string();
            assert!(text.starts_with(&format!("invalid fault injection {spec:?}: ")), "{text}");
            assert!(text.contains(needle), "{spec}: {text}");
        }
        assert!(parse_injection("crash:worker-1@5s", &j)
            .unwrap_err()
            .to_string()
            .contains("expected fail:REPLICA@TIME"));
    }
}

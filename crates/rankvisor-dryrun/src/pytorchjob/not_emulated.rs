//! The fields of a manifest the dry run does not emulate, named (never silently ignored): read
//! from the document as written, against the list of what the dry run does with each v1 field.

use serde_json::Value;

use crate::k8s::container::CONTAINER_EMULATED;

/// `schedulingPolicy` fields the dry run does not act on.
const SCHEDULING_NOT_EMULATED: [(&str, &str); 2] = [
    ("priorityClass", "set on the PodGroup; one job alone in its queue has no one to be preferred over"),
    ("scheduleTimeoutSeconds", "scheduler-plugins only; Volcano ignores it"),
];

/// `elasticPolicy` fields the dry run does not act on.
const ELASTIC_NOT_EMULATED: [(&str, &str); 1] = [("metrics", "the operator's HorizontalPodAutoscaler")];

/// The job's labels and annotations that Kueue acts on (`kueue.x-k8s.io/queue-name`, ...): the
/// training operator itself ignores them.
const KUEUE_PREFIX: &str = "kueue.x-k8s.io/";

/// Pod template `spec` fields the dry run uses; every other one is named.
const POD_SPEC_EMULATED: [&str; 3] = ["containers", "serviceAccountName", "restartPolicy"];

/// Every field of `doc` (a PyTorchJob as written) the dry run does not emulate, each with why
/// where that is not plain, in document order.
pub(crate) fn not_emulated(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for kind in ["labels", "annotations"] {
        if let Some(fields) = doc["metadata"][kind].as_object() {
            for key in fields.keys().filter(|k| k.starts_with(KUEUE_PREFIX)) {
                out.push(format!(
                    "metadata.{kind}[{key}] (Kueue's admission: a cluster with Kueue holds the job suspended until its queue admits it; here it starts at once)"
                ));
            }
        }
    }
    let spec = &doc["spec"];
    if let Some(sp) = spec["runPolicy"]["schedulingPolicy"].as_object() {
        for (field, why) in SCHEDULING_NOT_EMULATED {
            if sp.contains_key(field) {
                out.push(format!("spec.runPolicy.schedulingPolicy.{field} ({why})"));
            }
        }
    }
    if let Some(ep) = spec["elasticPolicy"].as_object() {
        for (field, why) in ELASTIC_NOT_EMULATED {
            if ep.contains_key(field) {
                out.push(format!("spec.elasticPolicy.{field} ({why})"));
            }
        }
    }
    let Some(specs) = spec["pytorchReplicaSpecs"].as_object() else {
        return out;
    };
    for (rtype, rspec) in specs {
        let path = format!("spec.pytorchReplicaSpecs[{rtype}].template");
        let pod = &rspec["template"]["spec"];
        if let Some(fields) = pod.as_object() {
            for field in fields.keys().filter(|k| !POD_SPEC_EMULATED.contains(&k.as_str())) {
                out.push(format!("{path}.spec.{field}"));
            }
        }
        if pod.get("restartPolicy").is_some() {
            // The operator's own warning event (createNewPod).
            out.push(format!(
                "{path}.spec.restartPolicy (Restart policy in pod template will be overwritten by restart policy in replica spec)"
            ));
        }
        let containers = pod["containers"].as_array().map(Vec::as_slice).unwrap_or_default();
        for (i, c) in containers.iter().enumerate() {
            let cpath = format!("{path}.spec.containers[{i}]");
            if c["name"] != "pytorch" {
                out.push(format!("{cpath} ({}: only the pytorch container runs)", c["name"].as_str().unwrap_or("?")));
                continue;
            }
            if let Some(fields) = c.as_object() {
                for field in fields.keys().filter(|k| !CONTAINER_EMULATED.contains(&k.as_str())) {
                    out.push(format!("{cpath}.{field}"));
                }
            }
            for kind in ["limits", "requests"] {
                if let Some(res) = c["resources"][kind].as_object() {
                    for name in res.keys().filter(|r| !matches!(r.as_str(), "cpu" | "memory")) {
                        out.push(format!(
                            "{cpath}.resources.{kind}[{name}] (counted against --queue-capability; no device is given to a local process)"
                        ));
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Value {
        serde_yaml_ng::from_str(text).unwrap()
    }

    #[test]
    fn the_seeds_manifest_has_nothing_left_out() {
        assert_eq!(not_emulated(&doc(include_str!("../../../../examples/pytorchjob.yaml"))), Vec::<String>::new());
    }

    #[test]
    fn probes_volumes_sidecars_and_priority_are_named() {
        let fields = not_emulated(&doc(include_str!("../../../../examples/k8s/pytorchjob.yaml")));
        for want in [
            "spec.pytorchReplicaSpecs[Master].template.spec.containers[0].livenessProbe",
            "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].readinessProbe",
            "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].terminationMessagePolicy",
        ] {
            assert!(fields.iter().any(|f| f == want), "{want} in {fields:?}");
        }
        let kueue = "metadata:\n  labels: {kueue.x-k8s.io/queue-name: user-queue, team: a}\n";
        assert_eq!(
            not_emulated(&doc(kueue)),
            ["metadata.labels[kueue.x-k8s.io/queue-name] (Kueue's admission: a cluster with Kueue holds the job suspended until its queue admits it; here it starts at once)"]
        );
        let text = "spec:\n  runPolicy:\n    schedulingPolicy: {priorityClass: high}\n  pytorchReplicaSpecs:\n    Worker:\n      template:\n        spec:\n          volumes: []\n          containers:\n            - {name: pytorch, image: x}\n            - {name: sidecar, image: y}\n";
        assert_eq!(
            not_emulated(&doc(text)),
            [
                "spec.runPolicy.schedulingPolicy.priorityClass (set on the PodGroup; one job alone in its queue has no one to be preferred over)",
                "spec.pytorchReplicaSpecs[Worker].template.spec.volumes",
                "spec.pytorchReplicaSpecs[Worker].template.spec.containers[1] (sidecar: only the pytorch container runs)",
            ]
        );
    }
}

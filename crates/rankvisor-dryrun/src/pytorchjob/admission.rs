//! A PyTorchJob manifest's text (YAML or JSON) read into its raw shape, its kind checked, admitted
//! (`webhook_admission`), and the fields it leaves out named (`not_emulated`).

use super::not_emulated::not_emulated;
use super::raw::RawJob;
use super::webhook_admission::{admit, Refusal};
use super::PyTorchJob;
use crate::k8s::document::{json_syntax, yaml_syntax, ManifestError, API_VERSION, KIND};

/// A job that passed admission, with the webhook's warnings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoadedJob {
    /// The admitted, defaulted job.
    pub job: PyTorchJob,
    /// What the webhook warned about (kubectl prints each as `Warning: ...`).
    pub warnings: Vec<String>,
    /// The fields the dry run does not emulate, each named (one warning line).
    pub not_emulated: Vec<String>,
}

/// Parse and admit a manifest's text; `source_name` is used in messages.
pub fn parse_job(text: &str, source_name: &str) -> Result<PyTorchJob, ManifestError> {
    admit_text(text, source_name).map(|loaded| loaded.job)
}

/// Parse and admit a manifest's text, keeping the webhook's warnings.
pub(crate) fn admit_text(text: &str, source_name: &str) -> Result<LoadedJob, ManifestError> {
    let raw = parse_raw(text, source_name)?;
    let api_version = raw.api_version.clone().unwrap_or_default();
    let kind = raw.kind.clone().unwrap_or_default();
    if api_version != API_VERSION || kind != KIND {
        return Err(ManifestError::WrongKind { source_name: source_name.to_string(), api_version, kind });
    }
    let name = raw.metadata.name.clone().unwrap_or_default();
    let admitted = admit(&raw).map_err(|refusal| match refusal {
        Refusal::Invalid(errors) => ManifestError::Invalid { name, errors },
        Refusal::Denied(errors) => ManifestError::Denied { source_name: source_name.to_string(), errors },
        Refusal::Unsupported(reason) => ManifestError::Unsupported { source_name: source_name.to_string(), reason },
    })?;
    let doc: serde_json::Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).unwrap_or_default()
    } else {
        serde_yaml_ng::from_str(text).unwrap_or_default()
    };
    Ok(LoadedJob { job: admitted.job, warnings: admitted.warnings, not_emulated: not_emulated(&doc) })
}

/// Parse JSON (a document starting with `{`) or YAML into the raw manifest.
fn parse_raw(text: &str, source_name: &str) -> Result<RawJob, ManifestError> {
    if text.trim_start().starts_with('{') {
        return serde_json::from_str(text).map_err(|e| json_syntax(&e, source_name));
    }
    serde_yaml_ng::from_str(text).map_err(|e| yaml_syntax(&e, source_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed 000's manifest exactly as measured (indentation restored), with its trap and 30s sleeps.
    const SEED_MANIFEST: &str = r#"apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: pytest
  namespace: default
spec:
  runPolicy:
    backoffLimit: 3
  pytorchReplicaSpecs:
    Master:
      replicas: 1 # must be 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - image: busybox:1.37.0-glibc
              imagePullPolicy: IfNotPresent
              name: pytorch # must be `pytorch`
              command: ["sh", "-c", "trap exit INT TERM; sleep 30s & wait"]
              resources:
                limits:
                  cpu: "1"
                  memory: "100Mi"
    Worker:
      replicas: 3
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - image: busybox:1.37.0-glibc
              imagePullPolicy: IfNotPresent
              name: pytorch # must be `pytorch`
              command: ["sh", "-c", "trap exit INT TERM; sleep 30s & wait"]
              resources:
                limits:
                  cpu: "1"
                  memory: "100Mi"
"#;

    #[test]
    fn seed_manifest_parses() {
        use crate::kubelet::replica::ReplicaId;
        use rankvisor_core::policy::RestartPolicy;
        let job = parse_job(SEED_MANIFEST, "pytorchjob.yaml").unwrap();
        assert_eq!(job.name, "pytest");
        assert_eq!(job.namespace, "default");
        assert_eq!(job.run_policy.backoff_limit, Some(3));
        assert_eq!(job.total_replicas(), 4);
        let names: Vec<String> = job.replicas().iter().map(|r| job.pod_name(*r)).collect();
        assert_eq!(names, ["pytest-master-0", "pytest-worker-0", "pytest-worker-1", "pytest-worker-2"]);
        let master = job.master.as_ref().unwrap();
        assert_eq!(master.replicas, 1);
        assert_eq!(master.restart_policy, RestartPolicy::OnFailure);
        assert_eq!(master.container.command, ["sh", "-c", "trap exit INT TERM; sleep 30s & wait"]);
        assert_eq!(master.resources.get("cpu"), 1000);
        assert_eq!(master.resources.get("memory"), 100 * 1024 * 1024 * 1000);
        assert_eq!(job.worker.as_ref().unwrap().replicas, 3);
        assert_eq!(job.min_resources().get("cpu"), 4000);
        assert_eq!(job.rank(ReplicaId::worker(2)), 3);
        assert_eq!(job.master_port(), 23456);
    }

    #[test]
    fn json_manifest_parses_like_yaml() {
        let yaml = parse_job(SEED_MANIFEST, "pytorchjob.yaml").unwrap();
        let value: serde_json::Value = serde_yaml_ng::from_str(SEED_MANIFEST).unwrap();
        let json = parse_job(&serde_json::to_string_pretty(&value).unwrap(), "pytorchjob.json").unwrap();
        assert_eq!(json, yaml);
    }

    #[test]
    fn every_example_is_admitted() {
        for (name, text) in [
            ("pytorchjob.yaml", include_str!("../../../../examples/pytorchjob.yaml")),
            ("pytorchjob-worker-fails.yaml", include_str!("../../../../examples/pytorchjob-worker-fails.yaml")),
            ("pytorchjob-all-workers-fail.yaml", include_str!("../../../../examples/pytorchjob-all-workers-fail.yaml")),
            ("pytorchjob-master-fails.yaml", include_str!("../../../../examples/pytorchjob-master-fails.yaml")),
            ("pytorchjob-gang.yaml", include_str!("../../../../examples/pytorchjob-gang.yaml")),
        ] {
            let job = parse_job(text, name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(job.total_replicas(), 4, "{name}");
            for spec in [&job.master, &job.worker] {
                let command = &spec.as_ref().unwrap().container.command;
                assert!(!command.join(" ").contains("trap"), "{name}: rankvisor makes the trap unnecessary");
            }
        }
    }

    #[test]
    fn yaml_syntax_error_names_line_and_column() {
        let text = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: pytest\n   namespace: default\n";
        let e = parse_job(text, "job.yaml").unwrap_err();
        let ManifestError::Syntax { line, column, message, .. } = &e else {
            panic!("{e}");
        };
        assert_eq!((*line, *column), (5, 13), "{e}");
        assert!(!message.contains("at line 5 column 13"), "position given once: {e}");
        assert!(e.to_string().starts_with("error parsing job.yaml: line 5, column 13: "), "{e}");
    }

    #[test]
    fn yaml_type_error_names_field_line_and_column() {
        let text = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: pytest\nspec:\n  pytorchReplicaSpecs:\n    Master:\n      replicas: [1]\n";
        let e = parse_job(text, "job.yaml").unwrap_err();
        let ManifestError::Syntax { line, column, message, .. } = &e else {
            panic!("{e}");
        };
        assert_eq!(*line, 8, "{e}");
        assert!(*column > 1, "{e}");
        assert!(message.contains("replicas"), "{e}");
    }

    #[test]
    fn quantity_of_the_wrong_type_names_the_field() {
        let text = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: pytest\nspec:\n  pytorchReplicaSpecs:\n    Master:\n      template:\n        spec:\n          containers:\n          - name: pytorch\n            image: x\n            command: [a]\n            resources: {limits: {cpu: [1]}}\n";
        let e = parse_job(text, "job.yaml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "error parsing job.yaml: line 14, column 39: spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.limits.cpu: invalid type: sequence, expected a string or a number"
        );
    }

    #[test]
    fn numbers_are_accepted_where_kubernetes_takes_strings() {
        let text = include_str!("../../../../examples/pytorchjob.yaml")
            .replace("cpu: \"1\"", "cpu: 1")
            .replace("memory: \"100Mi\"", "memory: 104857600");
        let job = parse_job(&text, "j.yaml").unwrap();
        assert_eq!(job.min_resources().get("cpu"), 4000);
        assert_eq!(job.min_resources().get("memory"), 4 * 104_857_600_000);
    }

    #[test]
    fn json_syntax_error_names_line_and_column() {
        let text = "{\n  \"apiVersion\": \"kubeflow.org/v1\",\n  \"kind\": \"PyTorchJob\"\n  \"metadata\": {}\n}\n";
        let e = parse_job(text, "job.json").unwrap_err();
        let ManifestError::Syntax { line, column, .. } = &e else {
            panic!("{e}");
        };
        assert_eq!((*line, *column), (4, 3), "{e}");
        assert!(!e.to_string().contains("at line 4"), "{e}");
    }

    #[test]
    fn wrong_kind_is_refused() {
        let e = parse_job("apiVersion: batch/v1\nkind: Job\n", "job.yaml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "error parsing job.yaml: no matches for kind \"Job\" in version \"batch/v1\": expected apiVersion kubeflow.org/v1 and kind PyTorchJob"
        );
    }
}

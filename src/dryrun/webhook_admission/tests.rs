//! The webhook's refusals and the defaulting, message by message.

use super::super::manifest::{parse_job, ManifestError};
use super::*;

const HEAD: &str = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: pytest\n";

fn container(name: &str, image: &str) -> String {
    format!(
        "            containers:\n              - name: {name}\n                image: {image}\n                command: [\"sh\", \"-c\", \"true\"]\n"
    )
}

fn job(master_replicas: &str, worker_extra: &str, containers: &str) -> String {
    format!(
        "{HEAD}spec:\n  pytorchReplicaSpecs:\n    Master:\n      replicas: {master_replicas}\n      template:\n        spec:\n{c}    Worker:\n      replicas: 3\n{worker_extra}      template:\n        spec:\n{containers}",
        c = container("pytorch", "busybox")
    )
}

fn denied(text: &str) -> String {
    match parse_job(text, "pytorchjob.yaml") {
        Err(e @ ManifestError::Denied { .. }) => e.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

const PREFIX: &str = "error when creating \"pytorchjob.yaml\": admission webhook \"validator.pytorchjob.training-operator.kubeflow.org\" denied the request: ";

#[test]
fn master_replicas_must_be_one_with_the_seeds_message() {
    let msg = denied(&job("2", "", &container("pytorch", "busybox")));
    assert_eq!(msg, format!("{PREFIX}spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1"));
}

#[test]
fn container_must_be_named_pytorch() {
    let msg = denied(&job("1", "", &container("trainer", "busybox")));
    assert_eq!(
        msg,
        format!("{PREFIX}spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: must have at least one container with name pytorch")
    );
}

#[test]
fn image_is_required() {
    let msg = denied(&job("1", "", &container("pytorch", "\"\"")));
    assert_eq!(
        msg,
        format!("{PREFIX}spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image: Required value: must be required")
    );
}

#[test]
fn containers_are_required() {
    let text = format!("{HEAD}spec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 1\n");
    let msg = denied(&text);
    assert_eq!(
        msg,
        format!("{PREFIX}[spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: must be specified, spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: must have at least one container with name pytorch]")
    );
}

#[test]
fn replica_specs_are_required() {
    let msg = denied(&format!("{HEAD}spec: {{}}\n"));
    assert_eq!(msg, format!("{PREFIX}spec.pytorchReplicaSpecs: Required value: must be required"));
}

#[test]
fn unknown_replica_type_is_unsupported() {
    let text = format!(
        "{HEAD}spec:\n  pytorchReplicaSpecs:\n    Launcher:\n      template:\n        spec:\n{}",
        container("pytorch", "busybox")
    );
    assert_eq!(
        denied(&text),
        format!("{PREFIX}spec.pytorchReplicaSpecs[Launcher]: Unsupported value: \"Launcher\": supported values: \"Master\", \"Worker\"")
    );
}

#[test]
fn replicas_must_not_be_negative() {
    let text = job("1", "", &container("pytorch", "busybox")).replace("replicas: 3", "replicas: -1");
    assert_eq!(
        denied(&text),
        format!(
            "{PREFIX}spec.pytorchReplicaSpecs[Worker].replicas: Invalid value: -1: must be greater than or equal to 0"
        )
    );
}

#[test]
fn restart_policy_must_be_known() {
    let msg = denied(&job("1", "      restartPolicy: Sometimes\n", &container("pytorch", "busybox")));
    assert_eq!(
        msg,
        format!("{PREFIX}spec.pytorchReplicaSpecs[Worker].restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\", \"ExitCode\"")
    );
}

#[test]
fn backoff_limit_must_not_be_negative() {
    let text = job("1", "", &container("pytorch", "busybox"))
        .replace("spec:\n  pytorch", "spec:\n  runPolicy:\n    backoffLimit: -1\n  pytorch");
    assert_eq!(
        denied(&text),
        format!("{PREFIX}spec.runPolicy.backoffLimit: Invalid value: -1: must be greater than or equal to 0")
    );
}

#[test]
fn name_must_be_a_dns1035_label() {
    let text = job("1", "", &container("pytorch", "busybox")).replace("name: pytest", "name: 1pytest");
    assert_eq!(
        denied(&text),
        format!("{PREFIX}metadata.name: Invalid value: \"1pytest\": should match: {DNS1035_MSG}")
    );
    let text = job("1", "", &container("pytorch", "busybox")).replace("  name: pytest\n", "");
    assert_eq!(denied(&text), format!("{PREFIX}metadata.name: Required value: name or generateName is required"));
}

#[test]
fn bad_quantity_is_invalid() {
    let c = container("pytorch", "busybox")
        + "                resources:\n                  limits:\n                    cpu: lots\n";
    assert_eq!(
        denied(&job("1", "", &c)),
        format!("{PREFIX}spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].resources.limits[cpu]: Invalid value: \"lots\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    );
}

#[test]
fn several_errors_are_joined_as_the_apiserver_does() {
    let msg = denied(&job("2", "      restartPolicy: Sometimes\n", &container("pytorch", "busybox")));
    assert_eq!(
        msg,
        format!("{PREFIX}[spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1, spec.pytorchReplicaSpecs[Worker].restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\", \"ExitCode\"]")
    );
}

#[test]
fn elastic_policy_needs_workers() {
    let text = format!(
        "{HEAD}spec:\n  elasticPolicy:\n    maxReplicas: 2\n  pytorchReplicaSpecs:\n    Master:\n      template:\n        spec:\n{}",
        container("pytorch", "busybox")
    );
    assert_eq!(
        denied(&text),
        format!(
            "{PREFIX}spec.pytorchReplicaSpecs.Worker: Required value: must be configured if elastic policy is used"
        )
    );
    let text = format!(
        "{HEAD}spec:\n  nprocPerNode: \"2\"\n  elasticPolicy:\n    nProcPerNode: 2\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 0\n      template:\n        spec:\n{}",
        container("pytorch", "busybox")
    );
    assert_eq!(
        denied(&text),
        format!("{PREFIX}[spec.pytorchReplicaSpecs.Worker.replicas: Forbidden: must be at least 1 worker if elastic policy is used, spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with spec.nprocPerNode]")
    );
}

#[test]
fn defaults_are_applied() {
    let text = format!(
        "{HEAD}spec:\n  pytorchReplicaSpecs:\n    master:\n      template:\n        spec:\n{}",
        container("pytorch", "busybox")
    );
    let job = parse_job(&text, "j.yaml").unwrap();
    let m = job.master.as_ref().unwrap();
    assert_eq!(m.replicas, 1, "replicas default to 1; lowercase key is camel-cased");
    assert_eq!(m.restart_policy, RestartPolicy::OnFailure);
    assert_eq!(job.namespace, "default");
    assert_eq!(job.backoff_limit, None);
    assert_eq!(job.nproc_per_node.as_deref(), Some("auto"));
    assert_eq!(job.master_port(), 23456);
}

#[test]
fn value_from_and_missing_command_are_unsupported() {
    let c = container("pytorch", "busybox")
        + "                env:\n                  - name: NODE\n                    valueFrom:\n                      fieldRef: {fieldPath: spec.nodeName}\n";
    let e = parse_job(&job("1", "", &c), "j.yaml").unwrap_err();
    assert!(matches!(e, ManifestError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("env[0] (NODE) uses valueFrom"), "{e}");

    let c = "            containers:\n              - name: pytorch\n                image: busybox\n";
    let e = parse_job(&job("1", "", c), "j.yaml").unwrap_err();
    assert!(e.to_string().contains("command is empty"), "{e}");
}

#[test]
fn too_many_replicas_are_unsupported() {
    let text = job("1", "", &container("pytorch", "busybox")).replace("replicas: 3", "replicas: 100000");
    let e = parse_job(&text, "j.yaml").unwrap_err();
    assert!(e.to_string().contains("at most 256"), "{e}");
}

#[test]
fn limits_win_over_requests_and_pods_are_summed() {
    let c = container("pytorch", "busybox")
        + "                resources:\n                  requests: {cpu: 250m, memory: 1Gi}\n                  limits: {cpu: 1}\n";
    let job = parse_job(&job("1", "", &c), "j.yaml").unwrap();
    let w = job.worker.as_ref().unwrap();
    assert_eq!(w.resources.get("cpu"), 1000);
    assert_eq!(w.resources.get("memory"), 1024 * 1024 * 1024 * 1000);
    assert_eq!(job.total_resources().get("cpu"), 3000, "the master asks nothing");
}

//! The webhook's refusals and the defaulting, message by message.

use super::super::admission::parse_job;
use super::*;
use crate::k8s::container::EnvSource;
use crate::k8s::document::ManifestError;
use crate::k8s::field_error::DNS1035_MSG;

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

fn invalid(text: &str) -> String {
    match parse_job(text, "pytorchjob.yaml") {
        Err(e @ ManifestError::Invalid { .. }) => e.to_string(),
        other => panic!("expected the apiserver's refusal, got {other:?}"),
    }
}

const PREFIX: &str = "error when creating \"pytorchjob.yaml\": admission webhook \"validator.pytorchjob.training-operator.kubeflow.org\" denied the request: ";

#[test]
fn master_replicas_must_be_one_validate_pytorch_replica_specs() {
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
fn replica_specs_are_required_by_the_crd_schema() {
    let msg = invalid(&format!("{HEAD}spec: {{}}\n"));
    assert_eq!(msg, "The PyTorchJob \"pytest\" is invalid: spec.pytorchReplicaSpecs: Required value");
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
fn worker_replicas_must_be_at_least_one_validate_pytorch_replica_specs() {
    let text = job("1", "", &container("pytorch", "busybox")).replace("replicas: 3", "replicas: -1");
    assert_eq!(
        denied(&text),
        format!("{PREFIX}spec.pytorchReplicaSpecs[Worker].replicas: Forbidden: must be at least 1")
    );
}

#[test]
fn an_unknown_restart_policy_is_admitted_but_no_pod_can_be_created() {
    // validatePyTorchReplicaSpecs does not look at restartPolicy, nor does the CRD's schema: the
    // job is admitted, and the apiserver refuses the pods the operator then creates.
    let e = parse_job(&job("1", "      restartPolicy: Sometimes\n", &container("pytorch", "busybox")), "j.yaml")
        .unwrap_err();
    assert!(matches!(e, ManifestError::Unsupported { .. }), "{e}");
    assert!(
        e.to_string().contains("the webhook admits it, but the operator cannot create any pod of replica type Worker: the apiserver refuses its spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""),
        "{e}"
    );
}

#[test]
fn a_negative_backoff_limit_is_admitted_validate_run_policy() {
    let text = job("1", "", &container("pytorch", "busybox"))
        .replace("spec:\n  pytorch", "spec:\n  runPolicy:\n    backoffLimit: -1\n  pytorch");
    assert_eq!(parse_job(&text, "j.yaml").unwrap().run_policy.backoff_limit, Some(-1));
}

#[test]
fn managed_by_must_be_a_known_controller_validate_run_policy() {
    let with = |m: &str| {
        job("1", "", &container("pytorch", "busybox"))
            .replace("spec:\n  pytorch", &format!("spec:\n  runPolicy:\n    managedBy: {m}\n  pytorch"))
    };
    assert_eq!(
        denied(&with("example.com/mine")),
        format!("{PREFIX}spec.runPolicy.managedBy: Unsupported value: \"example.com/mine\": supported values: \"kubeflow.org/training-operator\", \"kueue.x-k8s.io/multikueue\"")
    );
    let job = parse_job(&with("kueue.x-k8s.io/multikueue"), "j.yaml").unwrap();
    assert_eq!(job.run_policy.external_manager(), Some("kueue.x-k8s.io/multikueue"));
    let job = parse_job(&with("kubeflow.org/training-operator"), "j.yaml").unwrap();
    assert_eq!(job.run_policy.external_manager(), None);
}

#[test]
fn name_must_be_a_dns1035_label_validate_pytorch_job() {
    let text = job("1", "", &container("pytorch", "busybox")).replace("name: pytest", "name: 1pytest");
    assert_eq!(
        denied(&text),
        format!("{PREFIX}metadata.name: Invalid value: \"1pytest\": should match: {DNS1035_MSG}")
    );
    let text = job("1", "", &container("pytorch", "busybox")).replace("  name: pytest\n", "");
    assert_eq!(
        invalid(&text),
        "The PyTorchJob \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
}

#[test]
fn a_bad_quantity_is_refused_by_the_crd_schema() {
    let c = container("pytorch", "busybox")
        + "                resources:\n                  limits:\n                    cpu: lots\n";
    assert_eq!(
        invalid(&job("1", "", &c)),
        format!("The PyTorchJob \"pytest\" is invalid: spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu: Invalid value: \"lots\": spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu in body should match '{QUANTITY_SCHEMA_PATTERN}'")
    );
}

#[test]
fn several_errors_are_joined_as_the_apiserver_does() {
    let text = job("2", "", &container("pytorch", "busybox")).replace("replicas: 3", "replicas: 0");
    assert_eq!(
        denied(&text),
        format!("{PREFIX}[spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1, spec.pytorchReplicaSpecs[Worker].replicas: Forbidden: must be at least 1]")
    );
}

#[test]
fn elastic_policy_needs_workers_validate_spec() {
    let text = format!(
        "{HEAD}spec:\n  elasticPolicy:\n    maxReplicas: 2\n  pytorchReplicaSpecs:\n    Master:\n      replicas: 1\n      template:\n        spec:\n{}",
        container("pytorch", "busybox")
    );
    assert_eq!(
        denied(&text),
        format!(
            "{PREFIX}spec.pytorchReplicaSpecs[Worker]: Required value: must be configured if elastic policy is used"
        )
    );
    let text = format!(
        "{HEAD}spec:\n  nprocPerNode: \"2\"\n  elasticPolicy:\n    nProcPerNode: 2\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 0\n      template:\n        spec:\n{}",
        container("pytorch", "busybox")
    );
    assert_eq!(
        denied(&text),
        format!("{PREFIX}[spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with spec.nprocPerNode, spec.pytorchReplicaSpecs[Worker].replicas: Forbidden: must be at least 1]")
    );
}

#[test]
fn the_deprecated_elastic_nproc_per_node_is_a_warning_validate_spec() {
    let text = format!(
        "{HEAD}spec:\n  elasticPolicy:\n    nProcPerNode: 2\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n        spec:\n{}",
        container("pytorch", "busybox")
    );
    let loaded = super::super::admission::admit_text(&text, "j.yaml").unwrap();
    assert_eq!(loaded.warnings, ["spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"]);
    assert_eq!(loaded.job.nproc_per_node, None, "setDefaultNprocPerNode leaves it unset");
}

#[test]
fn keys_are_checked_as_written_then_defaulted() {
    // The webhook runs before the controller's defaulting: a lowercase key is not a type, and a
    // Master without replicas is refused (the defaulting would have made it 1, too late).
    let text = format!(
        "{HEAD}spec:\n  pytorchReplicaSpecs:\n    master:\n      replicas: 1\n      template:\n        spec:\n{}",
        container("pytorch", "busybox")
    );
    assert_eq!(
        denied(&text),
        format!("{PREFIX}spec.pytorchReplicaSpecs[master]: Unsupported value: \"master\": supported values: \"Master\", \"Worker\"")
    );
    let text = format!(
        "{HEAD}spec:\n  pytorchReplicaSpecs:\n    Master:\n      template:\n        spec:\n{}",
        container("pytorch", "busybox")
    );
    assert_eq!(denied(&text), format!("{PREFIX}spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1"));
    let text = format!(
        "{HEAD}spec:\n  pytorchReplicaSpecs:\n    Master:\n      replicas: 1\n      template:\n        spec:\n{}    Worker:\n      template:\n        spec:\n{}",
        container("pytorch", "busybox"),
        container("pytorch", "busybox")
    );
    let job = parse_job(&text, "j.yaml").unwrap();
    let (m, w) = (job.master.as_ref().unwrap(), job.worker.as_ref().unwrap());
    assert_eq!(w.replicas, 1, "setDefaultReplicas");
    assert_eq!(m.restart_policy, RestartPolicy::OnFailure, "setDefaultRestartPolicy");
    assert_eq!(job.namespace, "default");
    assert_eq!(job.run_policy.backoff_limit, None);
    assert_eq!(job.run_policy.clean_pod_policy, CleanPodPolicy::None, "SetDefaults_PyTorchJob");
    assert_eq!(job.nproc_per_node.as_deref(), Some("auto"), "setDefaultNprocPerNode");
    assert_eq!(job.master_port(), 23456, "setPyTorchDefaultPort");
}

#[test]
fn field_refs_resolve_and_secrets_are_unsupported() {
    let c = container("pytorch", "busybox")
        + "                env:\n                  - name: NODE\n                    valueFrom:\n                      fieldRef: {fieldPath: spec.nodeName}\n";
    let admitted = parse_job(&job("1", "", &c), "j.yaml").unwrap();
    let w = admitted.worker.as_ref().unwrap();
    assert_eq!(w.container.env, [("NODE".to_string(), EnvSource::FieldRef("spec.nodeName".to_string()))]);

    let c = container("pytorch", "busybox")
        + "                env:\n                  - name: TOKEN\n                    valueFrom:\n                      secretKeyRef: {name: s, key: k}\n";
    let e = parse_job(&job("1", "", &c), "j.yaml").unwrap_err();
    assert!(matches!(e, ManifestError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("env[0].valueFrom (TOKEN) uses secretKeyRef"), "{e}");

    let c = container("pytorch", "busybox")
        + "                env:\n                  - name: X\n                    valueFrom:\n                      fieldRef: {fieldPath: spec.hostname}\n";
    let e = parse_job(&job("1", "", &c), "j.yaml").unwrap_err();
    assert!(e.to_string().contains("fieldRef.fieldPath: Unsupported value: \"spec.hostname\""), "{e}");
}

#[test]
fn too_many_replicas_are_unsupported() {
    let text = job("1", "", &container("pytorch", "busybox")).replace("replicas: 3", "replicas: 100000");
    let e = parse_job(&text, "j.yaml").unwrap_err();
    assert!(e.to_string().contains("at most 1024"), "{e}");
}

#[test]
fn requests_win_over_limits_and_pods_are_summed() {
    let c = container("pytorch", "busybox")
        + "                resources:\n                  requests: {cpu: 250m}\n                  limits: {cpu: 1, memory: 1Gi}\n";
    let admitted = parse_job(&job("1", "", &c), "j.yaml").unwrap();
    let w = admitted.worker.as_ref().unwrap();
    assert_eq!(w.resources.get("cpu"), 250, "a request is what the scheduler counts");
    assert_eq!(w.resources.get("memory"), 1024 * 1024 * 1024 * 1000, "a limit stands for a missing request");
    assert_eq!(admitted.min_resources().get("cpu"), 750, "the master asks nothing");
}

use super::*;
use crate::k8s::document::documents;

/// The AWS documentation's example, its elisions filled in (examples/hyperpodjob.yaml).
pub(crate) const AWS_EXAMPLE: &str = include_str!("../../../../../examples/hyperpodjob.yaml");

fn admit(text: &str) -> Result<LoadedHyperPodJob, ManifestError> {
    admit_hyperpod_job(&documents(text, "job.yaml")?, "job.yaml")
}

#[test]
fn the_aws_example_is_admitted_with_the_crds_defaults() {
    let loaded = admit(AWS_EXAMPLE).unwrap();
    let job = &loaded.job;
    assert_eq!((job.name.as_str(), job.spec_name.as_str(), job.replicas, job.spares), ("hp-example", "pods", 2, 0));
    assert_eq!(job.container.command, ["torchrun", "--nnodes=2", "--nproc-per-node=1", "train.py"]);
    let rp = &job.run_policy;
    assert_eq!(rp.job_max_retry_count, Some(50));
    assert_eq!(
        rp.restart_limits,
        Some(RestartLimits {
            eval_period: Duration::from_secs(21600),
            plr_before_jlr: Some(3),
            max_full_job_restarts: Some(1)
        })
    );
    assert_eq!(rp.clean_pod_policy, CleanPodPolicy::All);
    assert_eq!(rp.ttl_after_finished, Some(Duration::ZERO), "the CRD's default");
    assert_eq!(rp.log_monitoring.as_ref().and_then(|v| v.as_array()).map(Vec::len), Some(2));
    assert_eq!(loaded.not_emulated, ["spec.replicaSpecs[0].template.spec.nodeSelector"]);
    assert_eq!(job.pod_name(crate::kubelet::replica::ReplicaId::worker(1)), "hp-example-pods-1");
}

#[test]
fn a_field_the_crd_does_not_have_is_refused_naming_it() {
    let text = AWS_EXAMPLE.replace("    jobMaxRetryCount: 50\n", "    jobMaxRetryCount: 50\n    maxRetries: 3\n");
    let e = admit(&text).unwrap_err();
    assert!(matches!(e, ManifestError::UnknownFields { .. }), "{e:?}");
    assert!(e.to_string().contains("unknown field \"spec.runPolicy.maxRetries\""), "{e}");
    let text = AWS_EXAMPLE.replace("      replicas: 2\n", "      replicas: 2\n      replica: 2\n");
    assert!(admit(&text).unwrap_err().to_string().contains("\"spec.replicaSpecs[0].replica\""));
}

#[test]
fn bad_values_and_elastic_scaling_are_refused_by_name() {
    let cases = [
        (
            "      replicas: 2\n",
            "      replicas: 0\n",
            "spec.replicaSpecs[0].replicas is 0: expected an integer of at least 1",
        ),
        ("    cleanPodPolicy: \"All\"\n", "    cleanPodPolicy: Some\n", "spec.runPolicy.cleanPodPolicy is \"Some\""),
        ("      evalPeriodSeconds: 21600\n", "", "spec.runPolicy.restartPolicy.evalPeriodSeconds is required"),
        ("      replicas: 2\n", "      replicas: 2\n      maxReplicas: 4\n", "elastic scaling is not emulated"),
        ("      replicas: 2\n", "      replicas: 5000\n", "must be at most"),
        ("--nnodes=2", "--inprocess-restart", "hyperpodrun --inprocess-restart"),
    ];
    for (from, to, expected) in cases {
        let e = admit(&AWS_EXAMPLE.replace(from, to)).unwrap_err();
        assert!(e.to_string().contains(expected), "{to}: {e}");
    }
    let e = admit(&AWS_EXAMPLE.replace("sagemaker.amazonaws.com/v1", "sagemaker.amazonaws.com/v2")).unwrap_err();
    assert!(
        e.to_string()
            .contains("in version \"sagemaker.amazonaws.com/v2\": expected apiVersion sagemaker.amazonaws.com/v1"),
        "{e}"
    );
    let elastic = AWS_EXAMPLE.replace("  runPolicy:\n", "  elasticPolicy:\n    minReplicas: 1\n  runPolicy:\n");
    let e = admit(&elastic).unwrap_err().to_string();
    assert!(e.contains("spec.elasticPolicy: elastic scaling"), "{e}");
}

//! Trainer v2's shape of the rank contract: the env the Torch plugin gives node k of a TrainJob.

use std::collections::{BTreeMap, HashMap};

use super::*;

/// The trainer container's env of node `k` of TrainJob `name` with `nodes` nodes, as
/// `EnforceMLPolicy` writes it (plus the Indexed Job's JOB_COMPLETION_INDEX), and its hostname.
fn v2(name: &str, nodes: u32, k: u32) -> (HashMap<String, String>, String) {
    let env: HashMap<String, String> = [
        ("PET_NNODES", nodes.to_string()),
        ("PET_NPROC_PER_NODE", "1".to_string()),
        ("PET_NODE_RANK", k.to_string()),
        ("PET_MASTER_ADDR", format!("{name}-node-0-0.{name}")),
        ("PET_MASTER_PORT", "29500".to_string()),
        ("JOB_COMPLETION_INDEX", k.to_string()),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b))
    .collect();
    (env, format!("{name}-node-0-{k}"))
}

#[test]
fn enforce_ml_policy_env_is_recognised_as_trainer_v2() {
    for k in 0..3 {
        let (env, host) = v2("pytest", 3, k);
        let r = parse_rank_env_of_pod(|v| env.get(v).cloned(), Some(&host)).unwrap();
        assert_eq!(r.flavour, Flavour::TrainerV2);
        assert_eq!(r.replica_index, k);
        assert_eq!(r.replica_count, ReplicaCount::Fixed { count: 3 });
        assert_eq!(r.role(), if k == 0 { Role::Master } else { Role::Worker }, "node 0 leads");
        assert_eq!(r.world_size, None, "Trainer v2 sets no WORLD_SIZE");
        assert_eq!(r.job.as_deref(), Some("pytest"), "the TrainJob's name, not PET_MASTER_ADDR:PET_MASTER_PORT");
        assert_eq!(r.sources["replica_index"], "PET_NODE_RANK");
        assert_eq!(r.sources["master_addr"], "PET_MASTER_ADDR");
        assert_eq!(r.sources["job"], "PET_MASTER_ADDR (<trainjob>-node-0-0.<trainjob>)");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["flavour"], "trainer-v2");
        assert_eq!(json["sources"]["replica_count"], "PET_NNODES");
    }
}

#[test]
fn the_job_name_comes_from_the_hostname_when_the_master_is_an_address() {
    let (mut env, host) = v2("mnist", 2, 1);
    env.insert("PET_MASTER_ADDR".into(), "127.0.0.1".into());
    let r = parse_rank_env_of_pod(|v| env.get(v).cloned(), Some(&host)).unwrap();
    assert_eq!(r.job.as_deref(), Some("mnist"));
    assert_eq!(r.sources["job"], "the pod name \"mnist-node-0-1\" (<trainjob>-node-0-<k>)");
    assert_eq!(derive_job_name(Some("127.0.0.1"), Some("mnist-node-0-1-x7k2p")).as_deref(), Some("mnist"));
}

#[test]
fn job_completion_index_and_pet_node_rank_must_agree() {
    let (mut env, host) = v2("pytest", 3, 1);
    env.insert("JOB_COMPLETION_INDEX".into(), "2".into());
    let e = parse_rank_env_of_pod(|v| env.get(v).cloned(), Some(&host)).unwrap_err();
    assert_eq!(e.to_string(), "JOB_COMPLETION_INDEX=\"2\" disagrees with PET_NODE_RANK=\"1\": expected them equal");
}

#[test]
fn v1_and_bare_environments_keep_their_flavour() {
    let v1: HashMap<String, String> =
        [("MASTER_ADDR", "pytest-master-0"), ("MASTER_PORT", "23456"), ("WORLD_SIZE", "2"), ("RANK", "1")]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
    assert_eq!(parse_rank_env(|v| v1.get(v).cloned()).unwrap().flavour, Flavour::TrainingOperator);
    assert_eq!(parse_rank_env(|_| None).unwrap().flavour, Flavour::None);
}

#[test]
fn train_job_names_parse_from_hostnames_pod_names_and_master_addresses() {
    assert_eq!(train_job_of_pod("pytest-node-0-2"), Some(("pytest".into(), 2)));
    assert_eq!(train_job_of_pod("my-job-node-0-10-abc12"), Some(("my-job".into(), 10)));
    assert_eq!(train_job_of_pod("pytest-worker-2"), None);
    assert_eq!(train_job_of_pod("-node-0-1"), None);
    assert_eq!(train_job_of_pod("pytest-node-0-x"), None);
    assert_eq!(train_job_of_pod("pytest-node-0-1-TOOLONG"), None);
    assert_eq!(train_job_of_master_addr("pytest-node-0-0.pytest").as_deref(), Some("pytest"));
    assert_eq!(train_job_of_master_addr("pytest-node-0-0").as_deref(), Some("pytest"));
    assert_eq!(train_job_of_master_addr("pytest-node-0-0.other"), None);
    assert_eq!(train_job_of_master_addr("pytest-node-0-1.pytest"), None);
}

#[test]
fn restart_attempt_reads_the_jobset_label() {
    let labels = |v: &str| BTreeMap::from([(RESTART_ATTEMPT_LABEL.to_string(), v.to_string())]);
    assert_eq!(restart_attempt(&BTreeMap::new()), Ok(None));
    assert_eq!(restart_attempt(&labels("2")), Ok(Some(2)));
    let e = restart_attempt(&labels("-1\u{1b}")).unwrap_err();
    assert_eq!(
        e,
        "pod label jobset.sigs.k8s.io/restart-attempt=\"-1\\u{1b}\" is invalid: expected the JobSet's restart count, a number >= 0"
    );
}

//! The rank contract's unit tests (the v1 training-operator's env; Trainer v2's are in `trainer_v2_tests`).

use super::*;
use std::collections::HashMap;

fn env(pairs: &[(&str, &str)]) -> Result<RankEnv, RankError> {
    let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    parse_rank_env(|k| m.get(k).cloned())
}

/// Seed 000's master env, exactly as `kubectl describe pod pytest-master-0` showed it.
const SEED_MASTER: &[(&str, &str)] = &[
    ("PYTHONUNBUFFERED", "1"),
    ("MASTER_PORT", "23456"),
    ("PET_MASTER_PORT", "23456"),
    ("MASTER_ADDR", "pytest-master-0"),
    ("PET_MASTER_ADDR", "pytest-master-0"),
    ("WORLD_SIZE", "4"),
    ("RANK", "0"),
    ("PET_NODE_RANK", "0"),
    ("PET_NPROC_PER_NODE", "auto"),
    ("PET_NNODES", "4"),
];

fn with(over: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut v: Vec<_> = SEED_MASTER.iter().copied().filter(|(k, _)| !over.iter().any(|(o, _)| o == k)).collect();
    v.extend(over.iter().copied().filter(|(_, val)| *val != "<unset>"));
    v
}

#[test]
fn seed_master_and_worker() {
    let m = env(SEED_MASTER).unwrap();
    assert_eq!(m.role(), Role::Master);
    assert_eq!(m.replica_count, ReplicaCount::Fixed { count: 4 });
    assert_eq!(m.world_size, Some(4));
    assert_eq!(m.master_addr.as_deref(), Some("pytest-master-0"));
    assert_eq!(m.master_port, Some(23456));
    assert_eq!(m.nproc_per_node, Some(NprocPerNode::Device("auto".into())));
    let w = env(&with(&[("RANK", "3"), ("PET_NODE_RANK", "3")])).unwrap();
    assert_eq!(w.role(), Role::Worker);
    assert_eq!(w.replica_index, 3);
}

#[test]
fn nothing_injected_is_a_single_replica() {
    let e = env(&[]).unwrap();
    assert_eq!(e.replica_index, 0);
    assert_eq!(e.replica_count, ReplicaCount::Fixed { count: 1 });
    assert!(!e.injected);
    let one = env(&[("RANK", "0"), ("WORLD_SIZE", "1")]).unwrap();
    assert_eq!(one.replica_count, ReplicaCount::Fixed { count: 1 });
    assert!(one.master_addr.is_none());
}

#[test]
fn several_processes_per_node_count_replicas_from_nnodes() {
    let e = env(&with(&[("WORLD_SIZE", "16"), ("PET_NPROC_PER_NODE", "4"), ("RANK", "3"), ("PET_NODE_RANK", "3")]))
        .unwrap();
    assert_eq!(e.replica_count, ReplicaCount::Fixed { count: 4 });
    assert_eq!(e.world_size, Some(16));
    let err = env(&with(&[("WORLD_SIZE", "15"), ("PET_NPROC_PER_NODE", "4")])).unwrap_err();
    assert_eq!(err.to_string(), "WORLD_SIZE=\"15\" is invalid: expected PET_NNODES x PET_NPROC_PER_NODE = 4 x 4 = 16");
}

#[test]
fn elastic_nnodes() {
    let e = env(&with(&[
        ("PET_NNODES", "2:4"),
        ("RANK", "3"),
        ("PET_NODE_RANK", "3"),
        ("PET_RDZV_ENDPOINT", "pytest-master-0:23456"),
    ]))
    .unwrap();
    assert_eq!(e.replica_count, ReplicaCount::Elastic { min: 2, max: 4 });
    assert!(e.is_elastic());
    assert_eq!(e.rdzv_endpoint.as_deref(), Some("pytest-master-0:23456"));
    for bad in ["4:2", "0:2", "a:2", "2:", ":", "2:3:4"] {
        let err = env(&with(&[("PET_NNODES", bad)])).unwrap_err();
        assert!(err.to_string().starts_with(&format!("PET_NNODES=\"{bad}\" is invalid")), "{err}");
    }
}

#[test]
fn standalone_may_be_empty() {
    assert!(env(&with(&[("PET_STANDALONE", "")])).unwrap().standalone);
    assert!(!env(SEED_MASTER).unwrap().standalone);
}

#[test]
fn every_bad_input_names_variable_value_and_expectation() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("RANK", "4"), ("PET_NODE_RANK", "4")],
            "RANK=\"4\" is invalid: expected a replica index from 0 to 3 (replicas: 4)",
        ),
        (
            &[("RANK", "-1"), ("PET_NODE_RANK", "<unset>")],
            "RANK=\"-1\" is invalid: expected a replica index from 0 to 3 (replicas: 4)",
        ),
        (&[("RANK", "one")], "RANK=\"one\" is invalid"),
        (&[("WORLD_SIZE", "0")], "WORLD_SIZE=\"0\" is invalid: expected a number of processes from 1 to"),
        (&[("WORLD_SIZE", "four")], "WORLD_SIZE=\"four\" is invalid"),
        (&[("WORLD_SIZE", "<unset>")], "WORLD_SIZE is not set"),
        (
            &[("MASTER_PORT", "70000"), ("PET_MASTER_PORT", "70000")],
            "MASTER_PORT=\"70000\" is invalid: expected a TCP port number from 1 to 65535",
        ),
        (&[("MASTER_PORT", "0"), ("PET_MASTER_PORT", "0")], "MASTER_PORT=\"0\" is invalid"),
        (&[("MASTER_PORT", "http"), ("PET_MASTER_PORT", "http")], "MASTER_PORT=\"http\" is invalid"),
        (&[("RANK", "1")], "RANK=\"1\" disagrees with PET_NODE_RANK=\"0\": expected them equal"),
        (&[("MASTER_ADDR", "a")], "MASTER_ADDR=\"a\" disagrees with PET_MASTER_ADDR=\"pytest-master-0\""),
        (&[("MASTER_PORT", "1")], "MASTER_PORT=\"1\" disagrees with PET_MASTER_PORT=\"23456\""),
        (
            &[("MASTER_ADDR", "<unset>"), ("PET_MASTER_ADDR", "<unset>")],
            "MASTER_ADDR is not set: expected the master's address, since the job has 4 replicas",
        ),
        (&[("MASTER_PORT", "<unset>"), ("PET_MASTER_PORT", "<unset>")], "MASTER_PORT is not set"),
        (
            &[("MASTER_ADDR", "a b"), ("PET_MASTER_ADDR", "a b")],
            "MASTER_ADDR=\"a b\" is invalid: expected a host name or IP address",
        ),
        (
            &[("PET_NPROC_PER_NODE", "0")],
            "PET_NPROC_PER_NODE=\"0\" is invalid: expected a number >= 1, or auto, cpu, gpu, xpu",
        ),
        (&[("PET_NPROC_PER_NODE", "many")], "PET_NPROC_PER_NODE=\"many\" is invalid"),
        (&[("PET_NNODES", "0")], "PET_NNODES=\"0\" is invalid"),
        (&[("PET_NNODES", "x")], "PET_NNODES=\"x\" is invalid"),
        (&[("LOCAL_RANK", "x")], "LOCAL_RANK=\"x\" is invalid: expected a number >= 0"),
        (&[("RANK", " 1"), ("PET_NODE_RANK", "<unset>")], "RANK=\" 1\" is invalid"),
    ];
    for (over, want) in cases {
        let err = env(&with(over)).unwrap_err().to_string();
        assert!(err.starts_with(want), "for {over:?}: got {err:?}, want prefix {want:?}");
    }
}

#[test]
fn missing_rank_with_several_replicas() {
    let e = env(&[("WORLD_SIZE", "2"), ("MASTER_ADDR", "m"), ("MASTER_PORT", "1")]).unwrap_err();
    assert_eq!(e.to_string(), "RANK is not set: expected this replica's index from 0 to 1");
}

#[test]
fn job_name_from_master_addr_or_pod_name() {
    assert_eq!(derive_job_name(Some("pytest-master-0"), None).as_deref(), Some("pytest"));
    assert_eq!(derive_job_name(Some("my-job-master-0.default.svc"), None).as_deref(), Some("my-job"));
    assert_eq!(derive_job_name(Some("127.0.0.1"), Some("pytest-worker-2")).as_deref(), Some("pytest"));
    assert_eq!(derive_job_name(Some("10.0.0.1"), Some("a-b-master-0")).as_deref(), Some("a-b"));
    assert_eq!(derive_job_name(Some("-master-0"), None), None);
    assert_eq!(derive_job_name(Some("10.0.0.1"), Some("pytest-worker-x")), None);
    assert_eq!(derive_job_name(None, Some("pytest-launcher-0")), None);
    assert_eq!(derive_job_name(None, Some("worker-0")), None);
    assert_eq!(derive_job_name(None, None), None);
}

#[test]
fn pet_only_env_is_enough() {
    let e = env(&[("WORLD_SIZE", "2"), ("PET_NODE_RANK", "1"), ("PET_MASTER_ADDR", "m"), ("PET_MASTER_PORT", "29500")])
        .unwrap();
    assert_eq!(e.replica_index, 1);
    assert_eq!(e.master_addr.as_deref(), Some("m"));
    assert_eq!(e.master_port, Some(29500));
}

fn pod_env(pairs: &[(&str, &str)], pod: &str) -> Result<RankEnv, RankError> {
    let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    parse_rank_env_of_pod(|k| m.get(k).cloned(), Some(pod))
}

/// `setPodEnv` without a Master: PYTHONUNBUFFERED, PET_NNODES (and PET_NPROC_PER_NODE) only.
#[test]
fn set_pod_env_worker_only_job_infers_the_index_from_the_pod_name() {
    let e = pod_env(&[("PYTHONUNBUFFERED", "1"), ("PET_NNODES", "3")], "mnist-worker-2").unwrap();
    assert_eq!((e.role(), e.replica_index, e.replica_count), (Role::Worker, 2, ReplicaCount::Fixed { count: 3 }));
    assert_eq!((e.world_size, e.has_master, e.injected), (None, false, true));
    assert!(e.inferred.iter().any(|i| i.contains("replica index 2 from the pod name")), "{:?}", e.inferred);
    let w0 = pod_env(&[("PET_NNODES", "3")], "mnist-worker-0").unwrap();
    assert_eq!((w0.role(), w0.replica_index), (Role::Worker, 0), "worker-0 leads the barrier");
    let out = pod_env(&[("PET_NNODES", "3")], "mnist-worker-3").unwrap_err();
    assert_eq!(
        out.to_string(),
        "POD_NAME=\"mnist-worker-3\" is invalid: expected a replica index from 0 to 2 (replicas: 3)"
    );
}

/// `ElasticEnvVarGenerator.Generate`: the echo example (Worker only, min:max, c10d).
#[test]
fn elastic_generate_worker_only_echo_example() {
    let vars = [
        ("PET_RDZV_ENDPOINT", "elastic-example-echo-worker-0:23456"),
        ("PET_RDZV_BACKEND", "c10d"),
        ("PET_NNODES", "1:3"),
        ("PET_MAX_RESTARTS", "100"),
        ("PET_NPROC_PER_NODE", "1"),
    ];
    let e = pod_env(&vars, "elastic-example-echo-worker-1").unwrap();
    assert!(e.is_elastic());
    assert_eq!(
        (e.role(), e.replica_index, e.replica_count),
        (Role::Worker, 1, ReplicaCount::Elastic { min: 1, max: 3 })
    );
    // generateEnvNnodes without min/max: the Worker count, still torchrun's membership.
    let n = pod_env(
        &[("PET_RDZV_BACKEND", "c10d"), ("PET_RDZV_ENDPOINT", "j-worker-0:23456"), ("PET_NNODES", "2")],
        "j-worker-0",
    )
    .unwrap();
    assert_eq!(n.replica_count, ReplicaCount::Elastic { min: 2, max: 2 });
}

/// An elastic job with a Master: setPodEnv's Master variables and PET_NNODES = the Workers.
#[test]
fn elastic_job_with_a_master_does_not_check_world_size_against_nnodes() {
    let e = env(&with(&[
        ("WORLD_SIZE", "3"),
        ("PET_NNODES", "2"),
        ("PET_NPROC_PER_NODE", "1"),
        ("PET_RDZV_BACKEND", "c10d"),
        ("PET_RDZV_ENDPOINT", "j-worker-0:23456"),
    ]))
    .unwrap();
    assert!(e.is_elastic());
    assert_eq!(e.world_size, Some(3));
}

#[test]
fn numbers_hosts_and_maxima_are_strict() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("RANK", "+1"), ("PET_NODE_RANK", "<unset>")], "RANK=\"+1\" is invalid"),
        (
            &[("WORLD_SIZE", "16777217")],
            "WORLD_SIZE=\"16777217\" is invalid: expected a number of processes from 1 to 16777216",
        ),
        (&[("PET_NNODES", "131073")], "PET_NNODES=\"131073\" is invalid: expected a replica count from 1 to 131072"),
        (
            &[("MASTER_ADDR", "http://m:1"), ("PET_MASTER_ADDR", "http://m:1")],
            "MASTER_ADDR=\"http://m:1\" is invalid: expected a host name or IP address",
        ),
        (
            &[("MASTER_ADDR", "999.999.999.999"), ("PET_MASTER_ADDR", "<unset>")],
            "MASTER_ADDR=\"999.999.999.999\" is invalid",
        ),
        (
            &[("MASTER_PORT", "<unset>"), ("PET_MASTER_PORT", "abc")],
            "PET_MASTER_PORT=\"abc\" is invalid: expected a TCP port number",
        ),
        (
            &[
                ("PET_NNODES", "4"),
                ("WORLD_SIZE", "2"),
                ("PET_NPROC_PER_NODE", "<unset>"),
                ("RANK", "1"),
                ("PET_NODE_RANK", "1"),
            ],
            "WORLD_SIZE=\"2\" disagrees with PET_NNODES=\"4\"",
        ),
    ];
    for (over, want) in cases {
        let err = env(&with(over)).unwrap_err().to_string();
        assert!(err.starts_with(want), "for {over:?}: got {err:?}, want prefix {want:?}");
    }
    for good in ["pytest-master-0", "a.b.svc.cluster.local", "10.0.0.1", "::1", "fe80::1", "x"] {
        assert!(is_host(good), "{good}");
    }
    for bad in ["", "a b", "http://m:1", "999.999.999.999", "-a", "a..b", "a_b"] {
        assert!(!is_host(bad), "{bad}");
    }
}

#[test]
fn pod_names_as_replica_name_writes_them() {
    assert_eq!(PodName::parse("a-b-worker-12"), Some(PodName { job: "a-b".into(), role: Role::Worker, index: 12 }));
    assert_eq!(PodName::parse("pytest-master-0").map(|p| p.role), Some(Role::Master));
    for other in ["-worker-1", "train-worker-", "train-worker-x", "train-launcher-1", "worker-1", ""] {
        assert_eq!(PodName::parse(other), None, "{other:?}");
    }
}

//! The environment the training operator injects into each replica (`envvar.go`, `master.go`,
//! `elastic.go`), with every address pointed at this machine for the dry run.

use super::PyTorchJob;
use crate::k8s::container::EnvSource;
use crate::kubelet::launch::{set, LaunchSpec, DRY_RUN_MASTER_ADDR, DRY_RUN_NODE};
use crate::kubelet::pod::pod_restart_policy;
use crate::kubelet::replica::{ReplicaId, ReplicaType};

/// The launch of `replica`, with MASTER_PORT (and the rendezvous port unless the manifest sets
/// one) set to `master_port` (the manifest's `job.master_port()`, or a free port the event loop chose).
/// Returns `None` for a replica the job does not have.
pub(crate) fn launch_spec(job: &PyTorchJob, replica: ReplicaId, master_port: u16) -> Option<LaunchSpec> {
    if !job.contains(replica) {
        return None;
    }
    let spec = job.spec(replica.rtype)?;
    let mut env: Vec<(String, String)> = Vec::new();
    let own = spec.container.env.iter().map(|(k, source)| (k.clone(), resolve(job, replica, source)));
    for (k, v) in own.chain(operator_env(job, replica, master_port)) {
        set(&mut env, k, v);
    }
    Some(LaunchSpec {
        replica,
        pod: job.pod_name(replica),
        namespace: job.namespace.clone(),
        env,
        command: spec.container.argv(),
        working_dir: spec.container.working_dir.clone(),
        restart_policy: pod_restart_policy(spec.restart_policy),
        backoff_limit: job.run_policy.backoff_limit.map(|l| u32::try_from(l).unwrap_or(0)),
        leader: (job.master.is_none() && job.elastic.is_none() && job.total_replicas() > 1)
            .then(|| master_port.checked_add(1).map(|p| (DRY_RUN_MASTER_ADDR.to_string(), p)))
            .flatten(),
        agent_port: None,
    })
}

/// The labels the operator puts on a replica's pod (`GenLabels`, `SetReplicaType`,
/// `SetReplicaIndex`, `SetJobRole`), after the template's own.
pub(crate) fn pod_labels(job: &PyTorchJob, replica: ReplicaId) -> Vec<(String, String)> {
    let mut labels = job.spec(replica.rtype).map(|s| s.labels.clone()).unwrap_or_default();
    let mut put = |k: &str, v: String| set(&mut labels, k.to_string(), v);
    put("training.kubeflow.org/job-name", job.name.clone());
    put("training.kubeflow.org/operator-name", "pytorchjob-controller".to_string());
    put("training.kubeflow.org/replica-type", replica.rtype.lower().to_string());
    put("training.kubeflow.org/replica-index", replica.index.to_string());
    if replica.rtype == ReplicaType::Master {
        put("training.kubeflow.org/job-role", "master".to_string());
    }
    labels
}

/// A variable's value in `replica`'s pod: a literal, or what the downward API gives a pod on this
/// machine (admission let through only the paths the apiserver accepts).
fn resolve(job: &PyTorchJob, replica: ReplicaId, source: &EnvSource) -> String {
    let path = match source {
        EnvSource::Value(v) => return v.clone(),
        EnvSource::FieldRef(path) => path.as_str(),
    };
    let spec = job.spec(replica.rtype);
    let keyed = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix("['").and_then(|r| r.strip_suffix("']")))
            .map(str::to_string)
    };
    if let Some(key) = keyed("metadata.labels") {
        return pod_labels(job, replica).into_iter().find(|(k, _)| *k == key).map(|(_, v)| v).unwrap_or_default();
    }
    if let Some(key) = keyed("metadata.annotations") {
        // Volcano's gang scheduling names the PodGroup on every pod.
        if key == "scheduling.k8s.io/group-name" {
            return job.name.clone();
        }
        let annotations = spec.map(|s| s.annotations.clone()).unwrap_or_default();
        return annotations.into_iter().find(|(k, _)| *k == key).map(|(_, v)| v).unwrap_or_default();
    }
    match path {
        "metadata.name" => job.pod_name(replica),
        "metadata.namespace" => job.namespace.clone(),
        "metadata.uid" => format!("dry-run-{}-{}", job.namespace, job.pod_name(replica)),
        "spec.nodeName" => DRY_RUN_NODE.to_string(),
        "spec.serviceAccountName" => {
            spec.and_then(|s| s.service_account.clone()).unwrap_or_else(|| "default".to_string())
        }
        "status.hostIP" | "status.hostIPs" | "status.podIP" | "status.podIPs" => DRY_RUN_MASTER_ADDR.to_string(),
        _ => String::new(),
    }
}

/// The variables the operator appends, in its order (seed 000's `kubectl describe pod` order).
pub fn operator_env(job: &PyTorchJob, replica: ReplicaId, master_port: u16) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    let mut push = |k: &str, v: String| env.push((k.to_string(), v));
    push("PYTHONUNBUFFERED", "1".to_string());
    // A non-numeric nprocPerNode (auto, cpu, gpu) counts as 1, as the operator's Atoi fallback does.
    let nproc = job.nproc_per_node.as_deref().and_then(|n| n.parse::<u32>().ok()).unwrap_or(1);
    let world_size = u64::from(job.total_replicas()) * u64::from(nproc);
    if job.master.is_some() {
        push("MASTER_PORT", master_port.to_string());
        push("PET_MASTER_PORT", master_port.to_string());
        push("MASTER_ADDR", DRY_RUN_MASTER_ADDR.to_string());
        push("PET_MASTER_ADDR", DRY_RUN_MASTER_ADDR.to_string());
        let rank = job.rank(replica).to_string();
        push("WORLD_SIZE", world_size.to_string());
        push("RANK", rank.clone());
        push("PET_NODE_RANK", rank);
    }
    if let Some(n) = &job.nproc_per_node {
        push("PET_NPROC_PER_NODE", n.clone());
    }
    match &job.elastic {
        None => push("PET_NNODES", job.total_replicas().to_string()),
        Some(e) => {
            // rdzvHost (else `<job>-worker-0`) is a cluster name: here every replica is on this machine.
            let port = e.rdzv_port.map_or_else(|| master_port.to_string(), |p| p.to_string());
            push("PET_RDZV_ENDPOINT", format!("{DRY_RUN_MASTER_ADDR}:{port}"));
            push("PET_RDZV_BACKEND", e.rdzv_backend.clone());
            push("PET_NNODES", format!("{}:{}", e.min_replicas, e.max_replicas));
            if let Some(r) = e.max_restarts {
                push("PET_MAX_RESTARTS", r.to_string());
            }
            if let Some(n) = e.nproc_per_node {
                push("PET_NPROC_PER_NODE", n.to_string());
            }
            if let Some(id) = &e.rdzv_id {
                push("PET_RDZV_ID", id.clone());
            }
            if !e.rdzv_conf.is_empty() {
                let conf: Vec<String> = e.rdzv_conf.iter().map(|(k, v)| format!("{k}={v}")).collect();
                push("PET_RDZV_CONF", conf.join(","));
            }
            if e.standalone {
                push("PET_STANDALONE", String::new());
            }
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::super::admission::parse_job;
    use super::*;
    use rankvisor_core::policy::RestartPolicy;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const JOB: &str = include_str!("../../../../examples/pytorchjob.yaml");

    #[test]
    fn master_env_equals_the_seeds_list() {
        let job = parse_job(JOB, "pytorchjob.yaml").unwrap();
        let launch = launch_spec(&job, ReplicaId::MASTER, job.master_port()).unwrap();
        assert_eq!(launch.pod, "pytest-master-0");
        assert_eq!(
            launch.env,
            pairs(&[
                ("PYTHONUNBUFFERED", "1"),
                ("MASTER_PORT", "23456"),
                ("PET_MASTER_PORT", "23456"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("PET_MASTER_ADDR", "127.0.0.1"),
                ("WORLD_SIZE", "4"),
                ("RANK", "0"),
                ("PET_NODE_RANK", "0"),
                ("PET_NPROC_PER_NODE", "auto"),
                ("PET_NNODES", "4"),
            ])
        );
        assert_eq!(launch.command, vec!["sh", "-c", "sleep 3"]);
        assert_eq!(launch.restart_policy, RestartPolicy::OnFailure);
        assert_eq!(launch.backoff_limit, Some(3));
    }

    #[test]
    fn worker_env_equals_the_seeds_list() {
        let job = parse_job(JOB, "pytorchjob.yaml").unwrap();
        for i in 0..3u32 {
            let launch = launch_spec(&job, ReplicaId::worker(i), 23456).unwrap();
            let rank = (i + 1).to_string();
            assert_eq!(launch.pod, format!("pytest-worker-{i}"));
            assert_eq!(
                launch.env,
                pairs(&[
                    ("PYTHONUNBUFFERED", "1"),
                    ("MASTER_PORT", "23456"),
                    ("PET_MASTER_PORT", "23456"),
                    ("MASTER_ADDR", "127.0.0.1"),
                    ("PET_MASTER_ADDR", "127.0.0.1"),
                    ("WORLD_SIZE", "4"),
                    ("RANK", &rank),
                    ("PET_NODE_RANK", &rank),
                    ("PET_NPROC_PER_NODE", "auto"),
                    ("PET_NNODES", "4"),
                ])
            );
        }
        assert_eq!(launch_spec(&job, ReplicaId::worker(3), 23456), None);
    }

    #[test]
    fn the_launcher_restarts_only_where_the_kubelet_would_set_restart_policy() {
        for (policy, launcher) in [
            ("OnFailure", RestartPolicy::OnFailure),
            ("Always", RestartPolicy::Always),
            ("Never", RestartPolicy::Never),
            ("ExitCode", RestartPolicy::Never),
        ] {
            let job =
                parse_job(&JOB.replace("restartPolicy: OnFailure", &format!("restartPolicy: {policy}")), "j.yaml")
                    .unwrap();
            let launch = launch_spec(&job, ReplicaId::worker(0), 23456).unwrap();
            assert_eq!(launch.restart_policy, launcher, "{policy}");
        }
    }

    #[test]
    fn a_worker_only_job_without_elastic_policy_meets_at_worker_0_on_this_machine() {
        let text = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: w\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n        spec:\n          containers:\n            - {name: pytorch, image: x, command: [\"true\"]}\n";
        let job = parse_job(text, "w.yaml").unwrap();
        let launch = launch_spec(&job, ReplicaId::worker(1), 40000).unwrap();
        assert_eq!(launch.leader, Some(("127.0.0.1".to_string(), 40001)));
        assert!(!launch.env.iter().any(|(k, _)| k == "MASTER_ADDR"), "the operator's env is unchanged");
        let with_master = parse_job(JOB, "pytorchjob.yaml").unwrap();
        assert_eq!(
            launch_spec(&with_master, ReplicaId::worker(1), 40000).unwrap().leader,
            None,
            "MASTER_ADDR names it"
        );
        let elastic =
            text.replace("spec:\n  pytorchReplicaSpecs:", "spec:\n  elasticPolicy: {}\n  pytorchReplicaSpecs:");
        let elastic = parse_job(&elastic, "e.yaml").unwrap();
        assert_eq!(launch_spec(&elastic, ReplicaId::worker(1), 40000).unwrap().leader, None, "torchrun's rendezvous");
    }

    #[test]
    fn port_is_the_drivers_and_user_env_comes_first() {
        // Only the master's container (the first command line) gets args, a port and env.
        let text = JOB.replacen(
            "              command: [\"sh\", \"-c\", \"sleep 3\"]\n",
            "              command: [\"sh\", \"-c\", \"sleep 3\"]\n              args: [\"extra\"]\n              ports: [{name: pytorchjob-port, containerPort: 29500}]\n              env:\n                - {name: LR, value: \"0.1\"}\n                - {name: RANK, value: \"7\"}\n",
            1,
        );
        let job = parse_job(&text, "j.yaml").unwrap();
        assert_eq!(job.master_port(), 29500);
        let launch = launch_spec(&job, ReplicaId::MASTER, 40000).unwrap();
        assert_eq!(launch.command, vec!["sh", "-c", "sleep 3", "extra"]);
        assert_eq!(launch.env[0], ("LR".to_string(), "0.1".to_string()));
        assert_eq!(launch.env[1], ("RANK".to_string(), "0".to_string()), "the operator's RANK wins");
        assert!(launch.env.contains(&("MASTER_PORT".to_string(), "40000".to_string())));
        assert_eq!(launch.env.iter().filter(|(k, _)| k == "RANK").count(), 1);
    }

    #[test]
    fn nproc_per_node_multiplies_world_size() {
        let text = JOB.replace("spec:\n  runPolicy:", "spec:\n  nprocPerNode: \"2\"\n  runPolicy:");
        let job = parse_job(&text, "j.yaml").unwrap();
        let env = operator_env(&job, ReplicaId::worker(1), 23456);
        assert!(env.contains(&("WORLD_SIZE".to_string(), "8".to_string())));
        assert!(env.contains(&("PET_NPROC_PER_NODE".to_string(), "2".to_string())));
        assert!(env.contains(&("PET_NNODES".to_string(), "4".to_string())));
        assert!(env.contains(&("RANK".to_string(), "2".to_string())));
    }

    #[test]
    fn elastic_policy_sets_nnodes_range_and_rendezvous() {
        let text = JOB.replace(
            "spec:\n  runPolicy:",
            "spec:\n  elasticPolicy:\n    minReplicas: 2\n    maxReplicas: 4\n    rdzvId: job1\n    maxRestarts: 5\n    standalone: true\n  runPolicy:",
        );
        let job = parse_job(&text, "j.yaml").unwrap();
        let env = operator_env(&job, ReplicaId::worker(0), 23456);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("PET_NNODES"), Some("2:4"));
        assert_eq!(get("PET_RDZV_ENDPOINT"), Some("127.0.0.1:23456"));
        assert_eq!(get("PET_RDZV_BACKEND"), Some("c10d"));
        assert_eq!(get("PET_RDZV_ID"), Some("job1"));
        assert_eq!(get("PET_MAX_RESTARTS"), Some("5"));
        assert_eq!(get("PET_STANDALONE"), Some(""));

        let text = JOB.replace("spec:\n  runPolicy:", "spec:\n  elasticPolicy: {}\n  runPolicy:");
        let job = parse_job(&text, "j.yaml").unwrap();
        let env = operator_env(&job, ReplicaId::worker(0), 23456);
        assert!(
            env.contains(&("PET_NNODES".to_string(), "3:3".to_string())),
            "min and max default to the Worker replicas"
        );
    }

    #[test]
    fn a_worker_only_elastic_job_gets_exactly_what_set_pod_env_and_the_elastic_generator_give() {
        // Kubeflow's elastic echo example's shape: no Master, elasticPolicy min 1 max 2.
        let text = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: echo\nspec:\n  elasticPolicy:\n    rdzvBackend: c10d\n    minReplicas: 1\n    maxReplicas: 2\n    maxRestarts: 100\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: echo\n              env: [{name: LOGLEVEL, value: DEBUG}]\n              command: [python, echo.py]\n";
        let job = parse_job(text, "echo.yaml").unwrap();
        let launch = launch_spec(&job, ReplicaId::worker(1), job.master_port()).unwrap();
        assert_eq!(
            launch.env,
            pairs(&[
                ("LOGLEVEL", "DEBUG"),
                ("PYTHONUNBUFFERED", "1"),
                ("PET_NPROC_PER_NODE", "auto"),
                ("PET_RDZV_ENDPOINT", "127.0.0.1:23456"),
                ("PET_RDZV_BACKEND", "c10d"),
                ("PET_NNODES", "1:2"),
                ("PET_MAX_RESTARTS", "100"),
            ]),
            "no MASTER_ADDR, MASTER_PORT, WORLD_SIZE or RANK without a Master"
        );
    }

    #[test]
    fn a_worker_only_job_without_elastic_policy_gets_pet_nnodes_only() {
        let text = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: w\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 3\n      template:\n        spec:\n          containers:\n            - {name: pytorch, image: x, command: [\"true\"]}\n";
        let job = parse_job(text, "w.yaml").unwrap();
        let env = operator_env(&job, ReplicaId::worker(2), 23456);
        assert_eq!(env, pairs(&[("PYTHONUNBUFFERED", "1"), ("PET_NPROC_PER_NODE", "auto"), ("PET_NNODES", "3")]));
    }

    #[test]
    fn field_refs_resolve_to_what_this_pod_would_see() {
        let text = JOB.replacen(
            "              command: [\"sh\", \"-c\", \"sleep 3\"]\n",
            "              command: [\"sh\", \"-c\", \"sleep 3\"]\n              env:\n                - {name: ME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}\n                - {name: NS, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}\n                - {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}\n                - {name: IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}\n                - {name: TYPE, valueFrom: {fieldRef: {fieldPath: \"metadata.labels['training.kubeflow.org/replica-type']\"}}}\n                - {name: SA, valueFrom: {fieldRef: {fieldPath: spec.serviceAccountName}}}\n",
            1,
        )
        .replace("namespace: default", "namespace: research");
        let job = parse_job(&text, "j.yaml").unwrap();
        let launch = launch_spec(&job, ReplicaId::MASTER, 23456).unwrap();
        let get = |k: &str| launch.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("ME"), Some("pytest-master-0"));
        assert_eq!(get("NS"), Some("research"));
        assert_eq!(get("NODE"), Some("localhost"));
        assert_eq!(get("IP"), Some("127.0.0.1"));
        assert_eq!(get("TYPE"), Some("master"));
        assert_eq!(get("SA"), Some("default"));
        assert_eq!(launch.namespace, "research", "POD_NAMESPACE follows metadata.namespace");
    }
}

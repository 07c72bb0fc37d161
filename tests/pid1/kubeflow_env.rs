//! Issue 12, at PID 1: every environment the training-operator produces is accepted by real
//! rankvisor launchers. `setPodEnv` (pkg/controller.v1/pytorch/envvar.go) sets MASTER_ADDR,
//! MASTER_PORT, WORLD_SIZE and RANK only when the job has a Master; a Worker-only job gets
//! PET_NNODES alone, an elastic one the `ElasticEnvVarGenerator` variables (elastic.go).

use crate::common;
use common::*;
use std::path::PathBuf;

/// A Worker-only PyTorchJob of 3 replicas, exactly as setPodEnv writes its env (no Master: no
/// MASTER_*, WORLD_SIZE, RANK). The replicas meet at worker 0, whose name stands in for the
/// operator's headless service through a private /etc/hosts in each launcher's mount namespace.
#[test]
fn set_pod_env_worker_only_job_meets_at_worker_0() {
    let dir = TestDir::new("kf-worker-only");
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n127.0.0.1 kfjob-worker-0\n").unwrap();
    let port = free_port();
    let runs: Vec<(TestDir, Running)> = (0..3)
        .map(|i| {
            let d = TestDir::new(&format!("kf-worker-only-{i}"));
            let out = dir.file(&format!("ran-{i}"));
            let r = Rv::new(&d)
                .pid1()
                .shell_wrapper(&format!("mount --bind {} /etc/hosts", q(&hosts.to_string_lossy())))
                .env("PYTHONUNBUFFERED", "1")
                .env("PET_NNODES", "3")
                .env("POD_NAME", &format!("kfjob-worker-{i}"))
                .args(["--http-addr", "off", "--rendezvous-port", &port.to_string(), "--node-health", "off"])
                .args(["--rendezvous-timeout", "60s"])
                .sh(&format!("echo \"$RANKVISOR_GENERATION ${{RANK:-unset}}\" > {}", q(&out)))
                .spawn();
            (d, r)
        })
        .collect();
    for (i, (_d, r)) in runs.into_iter().enumerate() {
        let done = r.wait();
        assert_eq!(done.code(), 0, "worker {i} ran under the operator's env: {}", done.stderr);
        assert_eq!(
            read(&dir.join(&format!("ran-{i}"))).trim(),
            "0 unset",
            "worker {i}'s child ran once, in generation 0"
        );
        if i == 2 {
            assert!(
                done.stderr.contains("replica index 2 from the pod name"),
                "the INFO line says what was inferred: {}",
                done.stderr
            );
            assert!(done.stderr.contains(&format!("barrier at kfjob-worker-0:{port}")), "{}", done.stderr);
        }
        if i == 0 {
            assert!(done.stderr.contains("rendezvous master listening"), "worker 0 leads the barrier: {}", done.stderr);
        }
    }
}

/// `rankvisor env` names the role and what it inferred, for the same env.
#[test]
fn env_names_the_inferred_worker_role() {
    let out = std::process::Command::new(common::bin())
        .args(["env", "--json"])
        .env_clear()
        .env("PET_NNODES", "3")
        .env("POD_NAME", "kfjob-worker-1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["role"].as_str(), v["replica_index"].as_u64()), (Some("Worker"), Some(1)));
    assert_eq!((v["world_size"].clone(), v["has_master"].as_bool()), (serde_json::Value::Null, Some(false)));
}

fn torch_venv() -> PathBuf {
    let how =
        "run `bash scripts/test.sh`, which installs torch (scripts/setup-torch.sh) and exports RANKVISOR_TORCH_VENV";
    let venv = PathBuf::from(
        std::env::var_os("RANKVISOR_TORCH_VENV").unwrap_or_else(|| panic!("RANKVISOR_TORCH_VENV is not set: {how}")),
    );
    assert!(venv.join("bin/torchrun").exists(), "{}: no bin/torchrun: {how}", venv.display());
    venv
}

/// An elastic Worker-only job (elasticPolicy minReplicas 2, maxReplicas 2, rdzvBackend c10d,
/// nProcPerNode 1, maxRestarts 3): the env `ElasticEnvVarGenerator.Generate` writes, torchrun as
/// the child reading its PET_* variables, rankvisor's barrier out of the way.
#[test]
fn elastic_worker_only_job_runs_torchrun_under_real_launchers() {
    let venv = torch_venv();
    let dir = TestDir::new("kf-elastic");
    let script = dir.join("echo.py");
    std::fs::write(
        &script,
        "import os, torch.distributed as dist\n\
         dist.init_process_group('gloo')\n\
         print('echo', os.environ['RANK'], os.environ['WORLD_SIZE'], os.environ['GROUP_RANK'], flush=True)\n\
         dist.barrier()\n\
         dist.destroy_process_group()\n",
    )
    .unwrap();
    let rdzv = free_port();
    let runs: Vec<(TestDir, Running)> = (0..2)
        .map(|i| {
            let d = TestDir::new(&format!("kf-elastic-{i}"));
            let r = Rv::new(&d)
                .env("PYTHONUNBUFFERED", "1")
                .env("PET_RDZV_ENDPOINT", &format!("127.0.0.1:{rdzv}"))
                .env("PET_RDZV_BACKEND", "c10d")
                .env("PET_NNODES", "2:2")
                .env("PET_MAX_RESTARTS", "3")
                .env("PET_NPROC_PER_NODE", "1")
                .env("PET_RDZV_ID", "kf-elastic")
                .env("POD_NAME", &format!("echo-worker-{i}"))
                .args(["--http-addr", "off", "--node-health", "off"])
                .cmd([venv.join("bin/torchrun").into_os_string(), script.clone().into_os_string()])
                .spawn();
            (d, r)
        })
        .collect();
    let mut ranks = Vec::new();
    for (i, (_d, r)) in runs.into_iter().enumerate() {
        let done = r.wait();
        assert_eq!(done.code(), 0, "elastic worker {i}: {}\n{}", done.stdout, done.stderr);
        assert!(done.stderr.contains("elastic job (PET_NNODES=2"), "{}", done.stderr);
        let line = done
            .stdout
            .lines()
            .find(|l| l.starts_with("echo "))
            .unwrap_or_else(|| panic!("no echo: {}", done.stdout))
            .to_string();
        let parts: Vec<&str> = line.split(' ').collect();
        assert_eq!(parts[2], "2", "torchrun's world of 2: {line}");
        ranks.push(parts[1].to_string());
    }
    ranks.sort();
    assert_eq!(ranks, ["0", "1"], "torchrun assigned the ranks");
}

//! Training smoke tests under rankvisor: real training programs (the tch trainer, torch DDP over
//! gloo, torchrun) run by `rankvisor dry-run`, so through one real launcher per replica.
//!
//! They need what `scripts/setup-torch.sh` installs and `scripts/test.sh` exports: `LIBTORCH`,
//! `RANKVISOR_TORCH_VENV` and `RANKVISOR_SMOKE_TRAIN` (the built `smoke_train` example). Without
//! them these tests fail, on purpose: a missing set-up must not pass as a skipped test.

use crate::common;

use common::dry_run::{json_lines, DryRun};
use common::{http_get, rankvisor, repo_file, wait_until_for, DryRunHttp, TestDir};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

const THRESHOLD: f64 = 0.05;
const HOW_TO: &str = "run `bash scripts/test.sh`, which installs libtorch and torch (scripts/setup-torch.sh), \
                      builds the smoke_train example and exports these variables";

/// An environment variable naming an existing path, or a loud failure saying how to set it up.
pub(crate) fn required_path(var: &str) -> PathBuf {
    let value = std::env::var_os(var).unwrap_or_else(|| panic!("{var} is not set: {HOW_TO}"));
    let path = PathBuf::from(value);
    assert!(path.exists(), "{var}={} does not exist: {HOW_TO}", path.display());
    path
}

/// Everything the tch tests need.
fn tch_setup() {
    required_path("RANKVISOR_SMOKE_TRAIN");
    let libtorch = required_path("LIBTORCH");
    assert!(
        libtorch.join("lib/libtorch_cpu.so").exists(),
        "LIBTORCH={}: no lib/libtorch_cpu.so: {HOW_TO}",
        libtorch.display()
    );
}

/// Everything the Python tests need.
pub(crate) fn torch_venv_setup() {
    let venv = required_path("RANKVISOR_TORCH_VENV");
    for exe in ["bin/python", "bin/torchrun"] {
        assert!(venv.join(exe).exists(), "RANKVISOR_TORCH_VENV={}: no {exe}: {HOW_TO}", venv.display());
    }
}

fn example(name: &str) -> PathBuf {
    repo_file(&format!("examples/{name}"))
}

/// One finished dry run, with each replica's output in `logs/<pod>.log`.
struct Run {
    run: DryRun,
    logs: PathBuf,
}

/// The dry run's exit code, events, outputs and job states.
impl std::ops::Deref for Run {
    type Target = DryRun;

    fn deref(&self) -> &DryRun {
        &self.run
    }
}

/// `rankvisor dry-run --output json --logs DIR/logs MANIFEST`, run in `cwd`, on any free master port
/// (tests run in parallel).
fn dry_run(manifest: &Path, cwd: &Path, dir: &Path, timeout: &str) -> Run {
    dry_run_with(manifest, cwd, dir, timeout, &[])
}

/// `dry_run` with extra dry-run options.
fn dry_run_with(manifest: &Path, cwd: &Path, dir: &Path, timeout: &str, extra: &[&str]) -> Run {
    dry_run_env(manifest, cwd, dir, timeout, extra, &[])
}

/// `dry_run_with` with extra environment variables for the dry run (and so its replicas).
fn dry_run_env(manifest: &Path, cwd: &Path, dir: &Path, timeout: &str, extra: &[&str], env: &[(&str, String)]) -> Run {
    let logs = dir.join("logs");
    // rankvisor() drops the runner's RANKVISOR_* configuration: each manifest says where its
    // heartbeat goes, and whoever runs the tests must not add one.
    let out = rankvisor()
        .args(["dry-run", "--output", "json", "--master-port", "0", "--timeout", timeout, "--backoff-max", "1s"])
        .args(extra)
        .arg("--logs")
        .arg(&logs)
        .arg(manifest)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir(cwd)
        .output()
        .expect("run rankvisor dry-run");
    Run { run: DryRun::new(&out, json_lines), logs }
}

impl Run {
    /// A pod's (STATUS, RESTARTS) rows, in order.
    fn pod(&self, name: &str) -> Vec<(String, u64)> {
        self.of_kind("Pod")
            .filter(|e| e["name"] == name)
            .map(|e| {
                let status = e["fields"]["status"].as_str().unwrap_or_default().to_string();
                (status, e["fields"]["restarts"].as_u64().unwrap_or(99))
            })
            .collect()
    }

    fn log(&self, pod: &str) -> String {
        std::fs::read_to_string(self.logs.join(format!("{pod}.log"))).unwrap_or_default()
    }

    /// The JSON objects a pod's output printed after `tag ` (`RESULT`, `RESUMED`, `DDP_CHECK`).
    fn tagged(&self, pod: &str, tag: &str) -> Vec<Value> {
        let prefix = format!("{tag} ");
        self.log(pod)
            .lines()
            .filter_map(|l| l.strip_prefix(prefix.as_str()))
            .map(|j| serde_json::from_str(j).unwrap_or_else(|e| panic!("{pod}: {tag} line {j:?}: {e}")))
            .collect()
    }

    /// The dry run's explanation, then every replica's log.
    fn explain(&self) -> String {
        let mut text = self.run.explain();
        if let Ok(entries) = std::fs::read_dir(&self.logs) {
            let mut names: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
            names.sort();
            for path in names {
                text += &format!("--- {}\n{}", path.display(), std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
        text
    }
}

/// The job's pods and the RANK the operator gives each.
fn pods(job: &str, workers: u32) -> Vec<(String, u64)> {
    std::iter::once((format!("{job}-master-0"), 0))
        .chain((0..workers).map(|i| (format!("{job}-worker-{i}"), u64::from(i) + 1)))
        .collect()
}

/// A progress line's loss: `smoke_train rank=1 step=21 loss=0.26202 ...`.
fn loss_at(log: &str, step: u64) -> Vec<f64> {
    let needle = format!(" step={step} loss=");
    log.lines()
        .filter_map(|l| l.split_once(needle.as_str()))
        .filter_map(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn tch_trainer_on_4_replicas_succeeds_with_every_rank_under_the_loss_threshold() {
    tch_setup();
    let dir = TestDir::new("training-tch");
    let r = dry_run(&example("pytorchjob-tch-train.yaml"), dir.path(), dir.path(), "180s");
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    for (pod, rank) in pods("tch-train", 3) {
        let results = r.tagged(&pod, "RESULT");
        let [res] = results.as_slice() else { panic!("{pod}: one RESULT line expected: {}", r.explain()) };
        assert_eq!((res["rank"].as_u64(), res["world_size"].as_u64()), (Some(rank), Some(4)), "{pod}: {res}");
        assert_eq!((res["first_step"].as_u64(), res["step"].as_u64()), (Some(1), Some(200)), "{pod}: {res}");
        let loss = res["loss"].as_f64().unwrap_or(f64::NAN);
        assert!(loss < THRESHOLD, "{pod}: final loss {loss} not under {THRESHOLD}: {res}");
        assert_eq!(res["passed"], true, "{pod}: {res}");
        assert!(r.tagged(&pod, "RESUMED").is_empty(), "{pod} never restarted");
        assert_eq!(r.pod(&pod).last().map(|(s, n)| (s.as_str(), *n)), Some(("Completed", 0)), "{pod}");
        let ckpt = dir.join(&format!("checkpoints/rank-{rank}/step-00000200.ot"));
        assert!(ckpt.is_file(), "{pod}: no final checkpoint {}", ckpt.display());
    }
    // The master's launcher watched the heartbeat the trainer wrote through rankvisor_trainer.
    let hb = std::fs::read_to_string(dir.join("master-heartbeat.json")).expect("the master's heartbeat file");
    let hb: Value = serde_json::from_str(&hb).unwrap_or_else(|e| panic!("heartbeat {hb:?}: {e}"));
    assert_eq!((hb["step"].as_u64(), hb["checkpoint_step"].as_u64()), (Some(200), Some(200)), "{hb}");
    assert!(hb["loss"].as_f64().is_some_and(|l| l < THRESHOLD), "{hb}");
}

#[test]
fn a_crashed_rank_is_restarted_and_resumes_from_its_checkpoint_and_the_job_succeeds() {
    tch_setup();
    let dir = TestDir::new("training-tch-crash");
    let r = dry_run(&example("pytorchjob-tch-train-crash.yaml"), dir.path(), dir.path(), "180s");
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(r.job_states().ends_with(&["Succeeded".to_string()]), "{}", r.explain());

    let crashed = "tch-train-crash-worker-0"; // RANK 1
    let rows = r.pod(crashed);
    assert!(rows.iter().any(|(s, n)| s == "Error" && *n == 0), "{crashed} failed once: {rows:?}");
    assert!(rows.iter().any(|(s, n)| s == "Running" && *n == 1), "{crashed} ran again: {rows:?}");
    assert_eq!(rows.last().map(|(s, n)| (s.as_str(), *n)), Some(("Completed", 1)), "{rows:?}");

    let log = r.log(crashed);
    assert!(log.contains("crashing after step 25"), "{}", r.explain());
    let resumed = r.tagged(crashed, "RESUMED");
    let [resumed] = resumed.as_slice() else { panic!("one RESUMED line expected: {}", r.explain()) };
    assert_eq!((resumed["checkpoint_step"].as_u64(), resumed["restart_count"].as_u64()), (Some(20), Some(1)));
    let results = r.tagged(crashed, "RESULT");
    let [res] = results.as_slice() else { panic!("one RESULT line expected: {}", r.explain()) };
    assert_eq!((res["first_step"].as_u64(), res["restart_count"].as_u64()), (Some(21), Some(1)), "{res}");
    assert!(res["loss"].as_f64().is_some_and(|l| l < THRESHOLD), "{res}");
    // Continued, not restarted from scratch: the weights came back, so the loss did too.
    let (first, resumed_at) = (loss_at(&log, 1), loss_at(&log, 21));
    let (Some(first), Some(resumed_at)) = (first.first(), resumed_at.first()) else {
        panic!("progress lines for steps 1 and 21 expected: {log}")
    };
    assert!(*resumed_at < first * 0.5, "step 21 loss {resumed_at} should be far below step 1's {first}");
    assert_eq!(loss_at(&log, 1).len(), 1, "step 1 ran once: the restart did not start over: {log}");

    for (pod, _) in pods("tch-train-crash", 3).into_iter().filter(|(p, _)| p != crashed) {
        let results = r.tagged(&pod, "RESULT");
        let [res] = results.as_slice() else { panic!("{pod}: one RESULT line expected: {}", r.explain()) };
        assert_eq!((res["restart_count"].as_u64(), res["passed"].as_bool()), (Some(0), Some(true)), "{pod}: {res}");
    }
}

/// Every replica's `DDP_CHECK` line: passed, its own rank, one shared master address.
fn assert_ddp_checks(r: &Run, job: &str, workers: u32, torchelastic: bool) {
    let mut masters = Vec::new();
    for (pod, rank) in pods(job, workers) {
        let checks = r.tagged(&pod, "DDP_CHECK");
        let [c] = checks.as_slice() else { panic!("{pod}: one DDP_CHECK line expected: {}", r.explain()) };
        assert_eq!(c["passed"], true, "{pod}: {c}");
        assert_eq!(c["failures"].as_array().map(Vec::len), Some(0), "{pod}: {c}");
        assert_eq!((c["rank"].as_u64(), c["world_size"].as_u64()), (Some(rank), Some(u64::from(workers) + 1)), "{c}");
        assert_eq!(c["torchelastic"], torchelastic, "{pod}: {c}");
        masters.push(c["master"].as_str().unwrap_or_default().to_string());
        assert_eq!(r.pod(&pod).last().map(|(s, _)| s.as_str()), Some("Completed"), "{pod}");
    }
    assert!(masters.iter().all(|m| m.starts_with("127.0.0.1:") && *m == masters[0]), "{masters:?}");
}

#[test]
fn ddp_on_4_replicas_meets_over_gloo_and_every_ranks_checks_pass() {
    torch_venv_setup();
    let dir = TestDir::new("training-ddp");
    let r = dry_run(&example("pytorchjob-ddp-train.yaml"), &repo_file(""), dir.path(), "300s");
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    assert_ddp_checks(&r, "ddp-train", 3, false);
}

#[test]
fn torchrun_as_the_child_on_2_replicas_succeeds() {
    torch_venv_setup();
    let dir = TestDir::new("training-torchrun");
    let r = dry_run(&example("pytorchjob-torchrun-train.yaml"), &repo_file(""), dir.path(), "300s");
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    assert_ddp_checks(&r, "torchrun-train", 1, true);
}

/// A TrainJob's nodes: `<job>-node-0-<k>-<suffix>` (the names of the pods that ended Completed).
fn train_job_pods(r: &Run) -> Vec<String> {
    let mut names: Vec<String> = r
        .of_kind("Pod")
        .filter(|e| e["fields"]["status"] == "Completed")
        .filter_map(|e| e["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn a_trainjob_under_torchrun_on_2_nodes_succeeds_with_every_ranks_ddp_checks() {
    torch_venv_setup();
    let dir = TestDir::new("training-trainjob");
    let r = dry_run(&example("trainjob-torchrun-train.yaml"), &repo_file(""), dir.path(), "300s");
    assert_eq!(r.code, 0, "{}", r.explain());
    let last = r.of_kind("TrainJob").last().map(|e| (e["fields"]["state"].clone(), e["fields"]["reason"].clone()));
    assert_eq!(last, Some(("Complete".into(), "AllJobsCompleted".into())), "{}", r.explain());
    let pods = train_job_pods(&r);
    assert_eq!(pods.len(), 2, "{pods:?}: {}", r.explain());
    let mut ranks = Vec::new();
    for (k, pod) in pods.iter().enumerate() {
        assert!(pod.starts_with(&format!("torchrun-train-node-0-{k}-")), "{pod}");
        let checks = r.tagged(pod, "DDP_CHECK");
        let [c] = checks.as_slice() else { panic!("{pod}: one DDP_CHECK line expected: {}", r.explain()) };
        assert_eq!(c["passed"], true, "{pod}: {c}");
        assert_eq!(c["world_size"], 2, "PET_NNODES x PET_NPROC_PER_NODE: {c}");
        assert_eq!(c["torchelastic"], true, "{c}");
        assert_eq!(c["rank"], k, "node k is rank k (PET_NODE_RANK): {c}");
        ranks.push(c["rank"].as_u64());
        assert!(c["master"].as_str().is_some_and(|m| m.starts_with("127.0.0.1:")), "{c}");
    }
    assert_eq!(ranks, [Some(0), Some(1)]);
}

#[test]
fn job_scope_restarts_every_ddp_rank_in_a_new_generation_after_one_rank_dies() {
    torch_venv_setup();
    let dir = TestDir::new("training-ddp-job-scope");
    let text = std::fs::read_to_string(example("pytorchjob-ddp-train.yaml")).expect("the DDP example");
    // Rank 2 dies after its all_reduce checks, in generation 0 only; every replica's restart counts,
    // so the job's backoffLimit must allow one generation change of 4 replicas.
    let crash_env =
        "- name: DDP_SMOKE_CRASH_RANK\n                  value: \"2\"\n                - name: OMP_NUM_THREADS";
    let text = text.replace("backoffLimit: 3", "backoffLimit: 10").replace("- name: OMP_NUM_THREADS", crash_env);
    assert!(text.contains("DDP_SMOKE_CRASH_RANK"), "the manifest changed shape");
    let manifest = dir.write("job.yaml", &text);
    let r = dry_run_with(&manifest, &repo_file(""), dir.path(), "300s", &["--restart-scope", "job"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    let crashed = std::fs::read_to_string(r.logs.join("ddp-train-worker-1.log")).unwrap_or_default();
    assert!(crashed.contains("crashing mid-run on purpose (generation 0)"), "rank 2 died in generation 0: {crashed}");
    for (pod, _) in pods("ddp-train", 3) {
        let log = std::fs::read_to_string(r.logs.join(format!("{pod}.log"))).unwrap_or_default();
        let checks: Vec<Value> = log
            .lines()
            .filter_map(|l| l.strip_prefix("DDP_CHECK "))
            .filter_map(|j| serde_json::from_str(j).ok())
            .collect();
        let last = checks.last().unwrap_or_else(|| panic!("{pod} printed no DDP_CHECK: {log}"));
        assert_eq!(last["passed"], true, "{pod}: {last}");
        assert_eq!(last["generation"], 1, "{pod} finished in generation 1, with everyone: {last}");
        assert!(
            checks.iter().all(|c| c["generation"] != 0),
            "no rank finishes generation 0 once one rank died: {pod}: {checks:?}"
        );
    }
}

#[test]
fn status_shows_the_trainers_step_and_loss_while_it_runs() {
    tch_setup();
    let dir = TestDir::new("training-status");
    // 200 steps at 20 ms: about 4 s of training to watch.
    let text = std::fs::read_to_string(example("pytorchjob-tch-train.yaml"))
        .expect("the tch example")
        .replace("--loss-threshold 0.05", "--loss-threshold 0.05 --step-delay-ms 20");
    let manifest = dir.write("job.yaml", &text);
    let mut run = DryRunHttp::start_in(&dir, &manifest, &["--watch", "job", "--timeout", "300s"], Some(dir.path()));
    let port = run.port("tch-train-master-0");
    let progress = wait_until_for("/status to show the trainer's step and loss", Duration::from_secs(120), || {
        let (_, body) = http_get(port, "/status")?;
        let report: Value = serde_json::from_str(&body).ok()?;
        let p = &report["progress"];
        (p["step"].as_u64().is_some_and(|s| s > 0) && p["loss"].is_number()).then(|| p.clone())
    });
    let status = run.wait_for(Duration::from_secs(300));
    println!("/status progress while training: {progress}");
    assert!(progress["step"].as_u64().unwrap_or(0) < 200, "seen mid-run, not only at the end: {progress}");
    assert_eq!(status.code(), Some(0));
}

// Kubeflow's own examples (the training-operator's examples/pytorch/, release-1.9), as the job
// shapes modelled in tests/kubeflow_examples/ with this project's own programs, run as a user
// would: in that directory, torch's venv first on PATH (as `source VENV/bin/activate` does),
// `--command` where the manifest relies on its image's entrypoint.

/// The directory of the modelled examples and their programs.
fn kubeflow_examples() -> PathBuf {
    repo_file("tests/kubeflow_examples")
}

/// PATH with the torch venv's bin/ first, and no numpy warning from torch's import.
pub(crate) fn venv_env() -> Vec<(&'static str, String)> {
    torch_venv_setup();
    let venv = required_path("RANKVISOR_TORCH_VENV");
    let path = std::env::var("PATH").unwrap_or_default();
    vec![("PATH", format!("{}:{path}", venv.join("bin").display())), ("PYTHONWARNINGS", "ignore".to_string())]
}

/// The one `SENDRECV_CHECK` line of each pod: passed, its rank, the world, who it talked to.
fn assert_sendrecv_checks(r: &Run, pods: &[(String, u64)], backend: &str) {
    let world = pods.len() as u64;
    for (pod, rank) in pods {
        let checks = r.tagged(pod, "SENDRECV_CHECK");
        let [c] = checks.as_slice() else { panic!("{pod}: one SENDRECV_CHECK line expected: {}", r.explain()) };
        assert_eq!(c["passed"], true, "{pod}: {c}");
        assert_eq!((c["rank"].as_u64(), c["world_size"].as_u64()), (Some(*rank), Some(world)), "{pod}: {c}");
        assert_eq!(c["backend"], backend, "{pod}: {c}");
        let peers: Vec<u64> = c["peers"].as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
        let want: Vec<u64> = if *rank == 0 { (1..world).collect() } else { vec![0] };
        assert_eq!(peers, want, "{pod}: rank 0 talks to every other rank, each of them to rank 0: {c}");
        assert_eq!(r.pod(pod).last().map(|(s, _)| s.as_str()), Some("Completed"), "{pod}");
    }
}

#[test]
fn kubeflow_sendrecv_runs_with_its_entrypoint_given_by_command_and_every_peer_checks_out() {
    let env = venv_env();
    let dir = TestDir::new("training-kf-sendrecv");
    let command = ["--command", "Master=python sendrecv.py", "--command", "Worker=python sendrecv.py"];
    let manifest = kubeflow_examples().join("sendrecv.yaml");
    let r = dry_run_env(&manifest, &kubeflow_examples(), dir.path(), "300s", &command, &env);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    assert_sendrecv_checks(&r, &pods("pytorch-dist-basic-sendrecv", 3), "gloo");
}

#[test]
fn kubeflow_mnist_gloo_shape_passes_its_args_to_the_command_that_stands_for_its_entrypoint() {
    // The image's entrypoint takes `--backend gloo` from the container's args: sendrecv.py stands
    // in for it and must see them.
    let env = venv_env();
    let dir = TestDir::new("training-kf-mnist-gloo");
    let command = ["--command", "Master=python sendrecv.py", "--command", "Worker=python sendrecv.py"];
    let manifest = kubeflow_examples().join("mnist_gloo.yaml");
    let r = dry_run_env(&manifest, &kubeflow_examples(), dir.path(), "300s", &command, &env);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    assert_sendrecv_checks(&r, &pods("pytorch-dist-mnist-gloo", 1), "gloo");
}

#[test]
fn kubeflow_elastic_echo_runs_under_torchrun_on_worker_only_replicas() {
    let env = venv_env();
    let dir = TestDir::new("training-kf-echo");
    // As written the job leaves nprocPerNode unset: PET_NPROC_PER_NODE=auto, which torchrun reads
    // as one process per CPU, dozens per replica on a large CI machine. Two per replica here, so
    // the run is the same everywhere; the echo example's dir stays the working directory.
    let text = std::fs::read_to_string(kubeflow_examples().join("elastic_echo.yaml")).expect("elastic_echo.yaml");
    let text = text.replace("spec:\n  elasticPolicy:", "spec:\n  nprocPerNode: \"2\"\n  elasticPolicy:");
    assert!(text.contains("nprocPerNode: \"2\""), "the manifest changed shape");
    let manifest = dir.write("elastic_echo.yaml", &text);
    let r = dry_run_env(&manifest, &kubeflow_examples(), dir.path(), "300s", &[], &env);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    let mut ranks = Vec::new();
    let mut nodes = Vec::new();
    let mut worlds = Vec::new();
    for pod in ["elastic-example-echo-worker-0", "elastic-example-echo-worker-1"] {
        let checks = r.tagged(pod, "ECHO_CHECK");
        assert!(!checks.is_empty(), "{pod}: ECHO_CHECK lines expected: {}", r.explain());
        for c in &checks {
            assert_eq!(c["passed"], true, "{pod}: {c}");
            let agent = &c["agent"];
            // From the operator's PET_MAX_RESTARTS (elasticPolicy.maxRestarts), through torchrun.
            assert_eq!(agent["TORCHELASTIC_MAX_RESTARTS"], "100", "{pod}: {c}");
            assert_eq!(agent["TORCHELASTIC_RESTART_COUNT"], "0", "{pod}: {c}");
            assert_eq!(agent["LOCAL_WORLD_SIZE"], "2", "{pod}: PET_NPROC_PER_NODE=2: {c}");
            assert_eq!(checks.len(), 2, "{pod}: one line per local process: {checks:?}");
            ranks.push(c["rank"].as_u64().unwrap_or(u64::MAX));
            worlds.push(c["world_size"].as_u64().unwrap_or(0));
        }
        let groups: Vec<&str> = checks.iter().filter_map(|c| c["agent"]["GROUP_RANK"].as_str()).collect();
        assert!(groups.iter().all(|g| *g == groups[0]), "{pod}: one node, one GROUP_RANK: {groups:?}");
        nodes.push(groups[0].to_string());
        assert_eq!(r.pod(pod).last().map(|(s, _)| s.as_str()), Some("Completed"), "{pod}");
    }
    nodes.sort();
    assert_eq!(nodes, ["0", "1"], "torchrun's rendezvous took both Worker replicas (PET_NNODES=1:2)");
    ranks.sort_unstable();
    assert!(worlds.iter().all(|w| *w == 4), "every process saw the world of 2 nodes x 2: {worlds:?}");
    assert_eq!(ranks, [0, 1, 2, 3], "every rank once");
}

#[test]
fn kubeflow_cpu_demo_trains_ddp_on_4_processes_under_torchrun_as_written() {
    let env = venv_env();
    let dir = TestDir::new("training-kf-cpu-demo");
    let manifest = kubeflow_examples().join("cpu_demo.yaml");
    let r = dry_run_env(&manifest, &kubeflow_examples(), dir.path(), "300s", &[], &env);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    let mut weights = Vec::new();
    // nprocPerNode "2": WORLD_SIZE 4, torchrun starts 2 processes in each of the 2 replicas.
    for (pod, node) in [("torchrun-cpu-master-0", 0), ("torchrun-cpu-worker-0", 1)] {
        let mut checks = r.tagged(pod, "DEMO_CHECK");
        checks.sort_by_key(|c| c["rank"].as_u64());
        let ranks: Vec<Option<u64>> = checks.iter().map(|c| c["rank"].as_u64()).collect();
        assert_eq!(ranks, [Some(2 * node), Some(2 * node + 1)], "{pod}: PET_NODE_RANK {node}'s ranks: {}", r.explain());
        for c in &checks {
            assert_eq!(c["passed"], true, "{pod}: {c}");
            assert_eq!((c["world_size"].as_u64(), c["node_rank"].as_u64()), (Some(4), Some(node)), "{pod}: {c}");
            let (first, last) = (c["first_loss"].as_f64().unwrap_or(0.0), c["loss"].as_f64().unwrap_or(f64::NAN));
            assert!(last < first / 10.0, "{pod}: the loss fell from {first} to {last}: {c}");
            weights.push(c["weights"].clone());
        }
        assert_eq!(r.pod(pod).last().map(|(s, _)| s.as_str()), Some("Completed"), "{pod}");
    }
    assert!(weights.iter().all(|w| *w == weights[0]), "DDP kept the weights equal on every rank: {weights:?}");
}

/// Four gloo DDP replicas; every step prints `step N` and all_reduces a tensor. In generation 0
/// rank 2 sleeps in `slow_here()` before its third all_reduce, so the other three wait in theirs.
const STACKS_DDP: &str = r#"import os, time
import torch
import torch.distributed as dist

def slow_here():
    time.sleep(600)

def train_step(step):
    if step == 3 and os.environ["RANK"] == "2" and os.environ.get("RANKVISOR_RESTART_COUNT", "0") == "0":
        slow_here()
    t = torch.ones(4)
    dist.all_reduce(t)
    return t

def main():
    dist.init_process_group("gloo", init_method="env://")
    for step in range(6):
        print(f"step {step}", flush=True)
        train_step(step)
    dist.destroy_process_group()

main()
"#;

/// Issue 36, the torch tier: four replicas of a gloo DDP script under the dry run with
/// `--restart-scope job` and a hang rule; rank 2 sleeps in `slow_here()` before its all_reduce.
/// The master's grouped stacks name replica 2 in `slow_here` with its line, and the other three
/// in `all_reduce`; after the job-scope restart the job succeeds.
#[test]
fn a_ddp_hang_is_named_by_the_masters_grouped_stacks() {
    torch_venv_setup();
    let dir = TestDir::new("training-stacks");
    let script = dir.write("train.py", STACKS_DDP);
    let rules = dir.write(
        "rules.json",
        r#"[{"name": "Step", "logPattern": "step .*", "expectedRecurringFrequencyInSeconds": 5, "expectedStartCutOffInSeconds": 120}]"#,
    );
    let spec = |kind: &str, n: u32| {
        format!(
            "    {kind}:\n      replicas: {n}\n      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: my-training-image\n              command: [\"sh\", \"-c\", \"exec \\\"$RANKVISOR_TORCH_VENV/bin/python\\\" {}\"]\n              env:\n                - name: OMP_NUM_THREADS\n                  value: \"1\"\n                - name: PYTHONWARNINGS\n                  value: \"ignore\"\n                - name: RANKVISOR_LOG_RULES\n                  value: \"{}\"\n",
            script.display(),
            rules.display()
        )
    };
    let manifest = dir.write(
        "job.yaml",
        &format!(
            "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: stacks-ddp\nspec:\n  runPolicy:\n    backoffLimit: 10\n  pytorchReplicaSpecs:\n{}{}",
            spec("Master", 1),
            spec("Worker", 3)
        ),
    );
    let r = dry_run_with(&manifest, &repo_file(""), dir.path(), "300s", &["--restart-scope", "job"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    let line = r.stderr.lines().find(|l| l.contains("job stacks (")).unwrap_or_else(|| panic!("{}", r.stderr));
    eprintln!("{line}");
    assert!(line.contains("replica 2: slow_here (train.py:6) <- train_step (train.py:10)"), "{line}");
    assert!(line.contains("3 replicas (0, 1, 3): all_reduce (distributed_c10d.py:"), "{line}");
}

/// Issue 36: under torchrun, `/stacks` reads the worker's stack (in `slow_here`), not only
/// torchrun's own (its agent's loop), both being Python processes of the child's tree.
#[test]
fn under_torchrun_stacks_name_the_workers_function() {
    torch_venv_setup();
    let venv = required_path("RANKVISOR_TORCH_VENV");
    let dir = TestDir::new("training-torchrun-stacks");
    let script = dir.write(
        "hang.py",
        "import sys, time\ndef slow_here(ready):\n    open(ready, 'w').close()\n    time.sleep(600)\nslow_here(sys.argv[1])\n",
    );
    let ready = dir.join("ready");
    let port = common::free_port();
    let torchrun = venv.join("bin/torchrun");
    let cmd: Vec<std::ffi::OsString> = vec![
        torchrun.into(),
        "--standalone".into(),
        "--nproc-per-node".into(),
        "1".into(),
        script.into(),
        ready.clone().into(),
    ];
    let running = common::Rv::new(&dir)
        .args(["--node-health", "off", "--http-addr", &format!("127.0.0.1:{port}")])
        .cmd(cmd)
        .spawn();
    common::wait_file(&ready);
    let main_top = |p: &Value| -> Option<String> {
        let t = p["threads"].as_array()?.iter().find(|t| t["main"] == true)?;
        Some(format!("{}:{}", t["frames"][0]["function"].as_str()?, t["frames"][0]["line"]))
    };
    let snapshot = common::wait_until("/stacks to show the worker in slow_here", || {
        let (code, body) = common::http_get(port, "/stacks")?;
        let v: Value = serde_json::from_str(&body).ok().filter(|_| code == 200)?;
        let procs = v["processes"].as_array()?;
        procs.iter().any(|p| main_top(p).as_deref() == Some("slow_here:4")).then_some(v)
    });
    let procs = snapshot["processes"].as_array().unwrap();
    let torchrun = &procs[0];
    assert!(torchrun["command"].as_str().unwrap().contains("torchrun"), "{snapshot:#}");
    assert!(main_top(torchrun).is_some_and(|t| !t.starts_with("slow_here")), "torchrun's own stack: {snapshot:#}");
    let worker = procs.iter().find(|p| main_top(p).as_deref() == Some("slow_here:4")).unwrap();
    assert_ne!(worker["pid"], torchrun["pid"], "{snapshot:#}");
    running.signal(libc::SIGTERM);
    running.wait();
}

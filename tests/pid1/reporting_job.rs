//! The master's `/job` end to end: four real rankvisor processes on loopback meet at the
//! rendezvous; the master serves every replica's latest whole report, including a worker's
//! restart; a worker answers `/job` with a clear 404.

use crate::common;

use common::{free_port, free_port_pair, http_get, wait_file, wait_job, wait_until, Running, Rv, TestDir};

use common::HANG_GUARD as GUARD;
const JOB: &str = "rj";

/// Replica `i` of the job: the master serves HTTP on `http`, workers only when given a port.
fn replica(dir: &TestDir, i: u32, port: u16, http: Option<u16>, script: &str) -> Rv {
    let pod = if i == 0 { format!("{JOB}-master-0") } else { format!("{JOB}-worker-{}", i - 1) };
    let http = http.map(|p| format!("127.0.0.1:{p}")).unwrap_or_else(|| "off".into());
    Rv::new(dir)
        .without_status_fd()
        .env("RANK", &i.to_string())
        .env("WORLD_SIZE", "4")
        .env("PET_NNODES", "4")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", &port.to_string())
        .env("POD_NAME", &pod)
        .env("DIR", &dir.path().to_string_lossy())
        .args(["--http-addr", &http, "--backoff-initial", "100ms", "--grace-period", "2s"])
        .args(["--rendezvous-timeout", "15s", "--node-health", "off", "--kube-events", "off"])
        .sh(script)
}

/// Runs until TERM.
/// Runs until TERM; `$DIR/ready-$RANK` says its trap is set (the handshake before a TERM).
const STEADY: &str = r#"trap 'exit 0' TERM; touch "$DIR/ready-$RANK"; sleep 60 & wait"#;
/// Fails once, then runs until TERM.
const FLAKY: &str =
    r#"if [ ! -f "$DIR/failed-once" ]; then touch "$DIR/failed-once"; exit 3; fi; trap 'exit 0' TERM; sleep 60 & wait"#;

#[test]
fn job_view_shows_every_replica_and_a_restart() {
    let port = free_port_pair();
    let (http, worker_http) = (free_port(), free_port());
    let dirs: Vec<TestDir> = (0..4).map(|i| TestDir::new(&format!("job-view-{i}"))).collect();
    let mut running = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let i = i as u32;
        let http = match i {
            0 => Some(http),
            1 => Some(worker_http),
            _ => None,
        };
        running.push(replica(dir, i, port, http, if i == 2 { FLAKY } else { STEADY }).spawn());
    }
    let view = wait_job(http, "four Running replicas, worker rank 2 restarted once", |v| {
        let r = &v["replicas"];
        (0..4).all(|i| r[i.to_string()]["state"] == "Running") && r["2"]["restart_count"] == 1
    });
    assert_eq!(view["job"], JOB);
    assert_eq!(view["replica_count"], 4);
    assert_eq!(view["phase"], "Running");
    let replicas = view["replicas"].as_object().unwrap();
    assert_eq!(replicas.len(), 4, "{view:#}");
    for (k, r) in replicas {
        // The payload is the whole report of that replica, not just its state fields.
        let report = &r["report"];
        assert_eq!(report["schema_version"], 1, "replica {k}: {r:#}");
        assert_eq!(report["rank"].to_string(), *k, "replica {k}: {r:#}");
        assert_eq!(report["job"], JOB);
        assert!(report["updated_at"].is_string() && report["started_at"].is_string(), "{r:#}");
    }
    let flaky = &replicas["2"]["report"];
    assert_eq!(flaky["pod"], format!("{JOB}-worker-1"));
    assert_eq!(flaky["replica_type"], "Worker");
    assert_eq!(flaky["restart_count"], 1);
    assert_eq!(flaky["last_exit"]["code"], 3);
    assert_eq!(flaky["state"], "Running");
    assert_eq!(replicas["0"]["report"]["replica_type"], "Master");
    assert_eq!(replicas["0"]["report"]["restart_count"], 0);

    // A worker has no job view, and says where to look.
    let (code, body) = http_get(worker_http, "/job").expect("the worker's HTTP server answers");
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("Worker rank 1") && body.contains("served by the master"), "{body}");
    // The master's own /status still answers.
    assert_eq!(http_get(http, "/status").map(|(c, _)| c), Some(200));

    for r in running.iter().rev() {
        r.signal(libc::SIGTERM);
    }
    for r in running {
        let done = r.wait_for(GUARD);
        assert!(done.code.is_some(), "rankvisor ended by a signal: {done:?}");
    }
}

/// Poll `path` until its status code is `want` and its body contains `text`.
fn wait_answer(port: u16, path: &str, want: u16, text: &str) -> String {
    wait_until(&format!("{want} {text:?} on {path}"), || {
        http_get(port, path).filter(|(code, body)| *code == want && body.contains(text)).map(|(_, body)| body)
    })
}

#[test]
fn readyz_is_503_at_the_barrier_and_200_once_every_replica_is_here() {
    let dir = TestDir::new("rj-readyz");
    let port = free_port_pair();
    let http = free_port();
    // The master alone: the barrier holds, the launcher is alive but not ready.
    let master = replica(&dir, 0, port, Some(http), STEADY).spawn();
    let body = wait_answer(http, "/readyz", 503, "Rendezvous");
    assert!(!dir.join("ready-0").exists(), "the master's child waits for the barrier");
    println!("/readyz before the barrier: 503 {body}");
    wait_answer(http, "/healthz", 200, "");
    let status = wait_answer(http, "/status", 200, "\"state\"");
    assert!(status.contains("\"Rendezvous\""), "the report says Rendezvous: {status}");
    // The workers arrive: released, the child runs, the master is ready.
    let workers: Vec<_> = (1..4).map(|i| replica(&dir, i, port, None, STEADY).spawn()).collect();
    wait_answer(http, "/readyz", 200, "");
    for i in 0..4 {
        wait_file(&dir.join(&format!("ready-{i}")));
    }
    for r in std::iter::once(&master).chain(workers.iter()) {
        r.signal(libc::SIGTERM);
    }
    for r in workers {
        assert_eq!(r.wait().code(), 0);
    }
    assert_eq!(master.wait().code(), 0);
}

/// Issue 15: a worker's final state reaches the master before the worker's launcher exits (two
/// workers that exited 3 and 4 under Never used to stay `Running` with no last exit in `/job`).
#[test]
fn a_finished_workers_final_state_reaches_the_master() {
    let port = free_port_pair();
    let http = free_port();
    let dirs: Vec<TestDir> = (0..4).map(|i| TestDir::new(&format!("job-final-{i}"))).collect();
    let scripts = [STEADY, "exit 3", "exit 4", STEADY];
    let runs: Vec<Running> = (0..4)
        .map(|i| {
            let rv = replica(&dirs[i], i as u32, port, (i == 0).then_some(http), scripts[i]);
            rv.args(["--restart-policy", "Never"]).spawn()
        })
        .collect();
    let mut runs = runs.into_iter();
    let master = runs.next().unwrap();
    let rest: Vec<Running> = runs.collect();
    let mut rest = rest.into_iter();
    for code in [3, 4] {
        assert_eq!(rest.next().unwrap().wait().code(), code);
    }
    let view = wait_job(http, "workers 1 and 2 Failed with their codes", |v| {
        let r = &v["replicas"];
        r["1"]["state"] == "Failed" && r["2"]["state"] == "Failed"
    });
    assert_eq!(
        (view["replicas"]["1"]["last_exit"].clone(), view["replicas"]["2"]["last_exit"].clone()),
        (3.into(), 4.into())
    );
    for r in std::iter::once(master).chain(rest) {
        r.signal(libc::SIGTERM);
        let _ = r.wait();
    }
}

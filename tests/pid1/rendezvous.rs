//! The rendezvous and control channel end to end (issue 5): four real `rankvisor` launchers on
//! loopback, one per replica of a Kubeflow-style job, with the environment the training-operator
//! gives each pod. Each test uses its own pair of ports (MASTER_PORT, MASTER_PORT+1).

use crate::common;

use common::{free_port_pair, read, wait_until, Finished, Running, Rv, TestDir};
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The launcher's exit code for an external failure (the rendezvous failed).
const EXTERNAL: i32 = 138;
/// Replicas of every job here.
const N: u32 = 4;

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default()
}

/// One replica's launcher: the pod environment of replica `i` of job `job`.
struct Replica {
    dir: TestDir,
    index: u32,
}

impl Replica {
    fn new(test: &str, index: u32) -> Self {
        Self { dir: TestDir::new(&format!("{test}-r{index}")), index }
    }

    /// rankvisor for replica `index` of a job of `count` replicas whose master listens at `port`.
    fn rv(&self, job: &str, count: u32, port: u16) -> Rv {
        let i = self.index;
        let pod = if i == 0 { format!("{job}-master-0") } else { format!("{job}-worker-{}", i - 1) };
        Rv::new(&self.dir)
            .env("RANK", &i.to_string())
            .env("PET_NODE_RANK", &i.to_string())
            .env("WORLD_SIZE", &count.to_string())
            .env("PET_NNODES", &count.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", &port.to_string())
            .env("POD_NAME", &pod)
            .env("REPLICA", &i.to_string())
            .args(["--http-addr", "off", "--node-health", "off", "--termination-log"])
            .args([self.dir.file("termination-log")])
    }

    fn termination_log(&self) -> String {
        read(&self.dir.join("termination-log"))
    }
}

/// The training process: records `REPLICA RANK GENERATION start-ns` in `out/start-...`, runs
/// `body`, then records completion.
fn child(out: &Path, body: &str) -> String {
    let o = common::q(&out.to_string_lossy());
    format!(
        "g=${{RANKVISOR_GENERATION:-x}}; echo \"$REPLICA $RANK $g $(date +%s%N)\" > {o}/start-$REPLICA-$g; \
         echo $g >> {o}/gens-$REPLICA; {body}; echo done > {o}/done-$REPLICA-$g"
    )
}

fn finish_all(runs: Vec<Running>) -> Vec<Finished> {
    runs.into_iter().map(|r| r.wait()).collect()
}

fn assert_all_code(fin: &[Finished], code: i32) {
    for (i, f) in fin.iter().enumerate() {
        assert_eq!(f.code, Some(code), "replica {i} exit (signal {:?})\nstderr:\n{}", f.signal, f.stderr);
    }
}

/// The master's debug line for an admitted worker.
const JOINED: &str = "replica joined the rendezvous";
/// The master's line for a peer refused before admission.
const REFUSED: &str = "refused a rendezvous peer";

fn wait_state(r: &Running, state: &str) {
    r.wait_status(&format!("state {state}"), |v| v["state"] == state);
}

/// The worker's debug line for a dial that found no master (yet).
const DIAL_FAILED: &str = "rendezvous attempt failed, retrying";

/// Wait until every worker in `runs` has dialled the master in vain: they wait at the barrier for
/// a master that is not there yet (an event, where a sleep only hoped for it).
fn wait_dialled_in_vain(runs: &[Running]) {
    for w in runs {
        wait_state(w, "Rendezvous");
        w.wait_log(DIAL_FAILED, 1);
    }
}

/// Item 1: workers first, the master once each has dialled it in vain; no child starts before
/// the barrier.
#[test]
fn children_start_only_after_every_replica_met() {
    let port = free_port_pair();
    let out = TestDir::new("rdzv-barrier-out");
    let reps: Vec<Replica> = (0..N).map(|i| Replica::new("rdzv-barrier", i)).collect();
    let script = child(out.path(), "sleep 0.2");
    let mut runs: Vec<Running> =
        reps[1..].iter().map(|r| r.rv("barrier", N, port).args(["--log-level", "debug"]).sh(&script).spawn()).collect();
    wait_dialled_in_vain(&runs);
    let master_launched = now_ns();
    runs.insert(0, reps[0].rv("barrier", N, port).sh(&script).spawn());
    let fin = finish_all(runs);
    assert_all_code(&fin, 0);
    for (i, f) in fin.iter().enumerate() {
        assert_eq!(f.statuses.first().map(|s| s["state"].clone()), Some("Rendezvous".into()), "replica {i}");
        let line = read(&out.join(&format!("start-{i}-0")));
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.len(), 4, "replica {i} start record {line:?}");
        assert_eq!(fields[0], i.to_string(), "replica {i}");
        assert_eq!(fields[1], i.to_string(), "replica {i} sees its own RANK");
        let started: u128 = fields[3].parse().expect("start time");
        assert!(started > master_launched, "replica {i}'s child started before the master was launched");
    }
}

/// Item 2: replica 2 never comes; everyone gives up after the timeout, no child started.
#[test]
fn a_missing_replica_fails_the_rendezvous_after_the_timeout() {
    let port = free_port_pair();
    let out = TestDir::new("rdzv-missing-out");
    let script = child(out.path(), "true");
    let reps: Vec<Replica> = [0, 1, 3].iter().map(|&i| Replica::new("rdzv-missing", i)).collect();
    let rv = |r: &Replica| {
        r.rv("missing", N, port).args(["--rendezvous-timeout", "2s", "--log-level", "debug"]).sh(&script).spawn()
    };
    // Workers first (each has dialled the master in vain): their own 2 s run out before the
    // master's, yet they wait for its verdict.
    let mut runs: Vec<Running> = reps[1..].iter().map(rv).collect();
    wait_dialled_in_vain(&runs);
    runs.insert(0, rv(&reps[0]));
    let fin = finish_all(runs);
    assert_all_code(&fin, EXTERNAL);
    for f in &fin {
        assert!(f.elapsed >= Duration::from_millis(1900), "gave up after {:?}", f.elapsed);
        assert!(f.statuses.iter().all(|s| s["child_pid"].is_null()), "a child started:\n{}", f.stderr);
    }
    assert_eq!(std::fs::read_dir(out.path()).map(|d| d.count()).unwrap_or(0), 0, "no child may start");
    for r in &reps {
        let log = r.termination_log();
        assert!(log.contains("replica indexes [2] missing"), "replica {}'s termination log names 2: {log:?}", r.index);
    }
    assert!(fin[0].stderr.contains("[2] missing"), "master stderr names replica 2:\n{}", fin[0].stderr);
}

/// Item 3: intruders are refused with a message naming the cause; the real job completes.
#[test]
fn intruders_are_refused_and_the_job_still_completes() {
    let port = free_port_pair();
    let out = TestDir::new("rdzv-intruders-out");
    let script = child(out.path(), "sleep 0.2");
    let token = ("RANKVISOR_JOB_TOKEN", "s3cret");
    let reps: Vec<Replica> = (0..N).map(|i| Replica::new("rdzv-intruders", i)).collect();
    let legit = |r: &Replica| r.rv("intr", N, port).env(token.0, token.1).args(["--log-level", "debug"]).sh(&script);
    // The master and workers 1 and 2 meet first (the master has admitted both), so the duplicate
    // of 1 comes second.
    let mut runs: Vec<Running> = reps[..3].iter().map(|r| legit(r).spawn()).collect();
    runs[0].wait_log(JOINED, 2);
    let intruders = [
        ("duplicate", Replica::new("rdzv-intruder-dup", 1), N, "intr", token.1, "already held"),
        ("count", Replica::new("rdzv-intruder-count", 3), N + 1, "intr", token.1, "replica_count 5"),
        ("job", Replica::new("rdzv-intruder-job", 3), N, "other", token.1, "\"other\""),
        ("token", Replica::new("rdzv-intruder-token", 3), N, "intr", "wrong", "RANKVISOR_JOB_TOKEN"),
    ];
    let intruder_runs: Vec<(&str, &str, Running)> = intruders
        .iter()
        .map(|(what, r, count, job, tok, cause)| {
            // Another node: the same node and index would be replica 1 reconnecting (it replaces its
            // stale connection), not a duplicate.
            let rv =
                r.rv("intr", *count, port).args(["--job-name", job]).env(token.0, tok).env("NODE_NAME", "elsewhere");
            let rv = rv.sh(&script);
            (*what, *cause, rv.spawn())
        })
        .collect();
    for (what, cause, run) in intruder_runs {
        let f = run.wait();
        assert_eq!(f.code, Some(EXTERNAL), "{what} intruder exit\nstderr:\n{}", f.stderr);
        assert!(f.stderr.contains(cause), "{what} intruder's message names {cause:?}:\n{}", f.stderr);
    }
    runs.push(legit(&reps[3]).spawn());
    let fin = finish_all(runs);
    assert_all_code(&fin, 0);
    for i in 0..N {
        assert!(out.join(&format!("done-{i}-0")).exists(), "replica {i}'s child completed");
    }
}

/// Item 4: garbage, an oversized line and a silent connection during the barrier change nothing.
#[test]
fn garbage_at_the_master_does_not_stop_the_barrier() {
    let port = free_port_pair();
    let out = TestDir::new("rdzv-garbage-out");
    let script = child(out.path(), "sleep 0.2");
    let reps: Vec<Replica> = (0..N).map(|i| Replica::new("rdzv-garbage", i)).collect();
    let mut runs: Vec<Running> =
        reps[..3].iter().map(|r| r.rv("garbage", N, port).args(["--log-level", "debug"]).sh(&script).spawn()).collect();
    runs[0].wait_log(JOINED, 2);
    let rdzv = ("127.0.0.1", port + 1);
    let silent = wait_until("the master to listen", || TcpStream::connect(rdzv).ok());
    // Random bytes, newline-terminated and not.
    let mut noise: Vec<u8> = (0..64 * 1024u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let mut random = TcpStream::connect(rdzv).expect("connect");
    let _ = random.write_all(&noise);
    noise.truncate(100);
    let _ = random.write_all(&noise);
    // One 10 MB line: the master must cut it at its frame limit, not buffer it.
    let big = std::thread::spawn(move || {
        if let Ok(mut s) = TcpStream::connect(rdzv) {
            let line = vec![b'{'; 10 * 1024 * 1024];
            let _ = s.write_all(&line);
            let _ = s.write_all(b"\n");
        }
    });
    // Both refused (the first at WARN, the next at DEBUG) while the barrier still waits for 3.
    runs[0].wait_log(REFUSED, 2);
    assert!(runs.iter().all(|r| r.statuses().iter().all(|s| s["state"] == "Rendezvous")), "the barrier held");
    runs.push(reps[3].rv("garbage", N, port).sh(&script).spawn());
    let fin = finish_all(runs);
    assert_all_code(&fin, 0);
    let _ = big.join();
    drop((silent, random));
}

/// Item 5a: job scope; replica 2's child fails in generation 0, every child restarts in 1 and
/// the job completes.
#[test]
fn job_scope_restarts_every_child_in_a_new_generation() {
    let port = free_port_pair();
    let out = TestDir::new("rdzv-jobscope-out");
    // The master's child finishes first: its launcher must keep the control channel up until the
    // workers finish, or they take the close for a lost master and kill their children.
    let script = child(
        out.path(),
        "if [ \"$g\" = 0 ]; then if [ \"$REPLICA\" = 2 ]; then sleep 0.3; exit 1; fi; sleep 10; fi; \
         [ \"$REPLICA\" = 0 ] || sleep 0.8",
    );
    let reps: Vec<Replica> = (0..N).map(|i| Replica::new("rdzv-jobscope", i)).collect();
    let runs: Vec<Running> = reps
        .iter()
        .map(|r| {
            r.rv("jobscope", N, port)
                .args(["--restart-scope", "job", "--backoff-initial", "100ms", "--grace-period", "2s"])
                .sh(&script)
                .spawn()
        })
        .collect();
    let fin = finish_all(runs);
    assert_all_code(&fin, 0);
    for (i, f) in fin.iter().enumerate() {
        assert_eq!(read(&out.join(&format!("gens-{i}"))), "0\n1\n", "replica {i}'s generations\n{}", f.stderr);
        assert!(out.join(&format!("done-{i}-1")).exists(), "replica {i} finished generation 1");
        assert!(!out.join(&format!("done-{i}-0")).exists(), "replica {i}'s generation 0 was stopped");
        assert_eq!(f.last_status()["generation"], 1, "replica {i}");
    }
}

/// Start a job whose children run `secs`, wait for all to run, SIGKILL the master's launcher.
fn kill_master_mid_run(test: &str, scope: &str, secs: &str) -> (TestDir, Vec<Finished>) {
    let port = free_port_pair();
    let out = TestDir::new(&format!("{test}-out"));
    let script = child(out.path(), &format!("sleep {secs}"));
    let reps: Vec<Replica> = (0..N).map(|i| Replica::new(test, i)).collect();
    let mut runs: Vec<Running> = reps
        .iter()
        .map(|r| {
            r.rv(test, N, port)
                .args(["--restart-scope", scope, "--rendezvous-timeout", "2s", "--grace-period", "2s"])
                .sh(&script)
                .spawn()
        })
        .collect();
    for r in &runs {
        wait_state(r, "Running");
    }
    let master = runs.remove(0);
    master.signal(libc::SIGKILL);
    let killed = master.wait();
    assert_eq!(killed.signal, Some(libc::SIGKILL));
    (out, finish_all(runs))
}

/// Item 5b: replica scope; the workers outlive a killed master and finish their training.
#[test]
fn replica_scope_workers_outlive_a_killed_master() {
    let (out, fin) = kill_master_mid_run("rdzv-kill-replica", "replica", "1.5");
    assert_all_code(&fin, 0);
    for i in 1..N {
        assert!(out.join(&format!("done-{i}-0")).exists(), "worker {i}'s child ran to completion");
    }
}

/// Item 5c: job scope; the workers stop their children and give up when no master comes back.
#[test]
fn job_scope_workers_stop_when_the_master_is_killed() {
    let (out, fin) = kill_master_mid_run("rdzv-kill-job", "job", "8");
    assert_all_code(&fin, EXTERNAL);
    for (k, f) in fin.iter().enumerate() {
        let i = k + 1;
        assert!(!out.join(&format!("done-{i}-0")).exists(), "worker {i}'s child was stopped");
        assert!(f.elapsed < Duration::from_secs(8), "worker {i} gave up after {:?}", f.elapsed);
        assert!(f.stderr.contains("master"), "worker {i} names the lost master:\n{}", f.stderr);
    }
}

/// Job scope: a worker fails after the master's child succeeded. The job is over (it follows the
/// master), so no new generation starts without a rank 0: the workers are stopped, naming why.
#[test]
fn job_scope_after_the_master_succeeded_a_failure_stops_the_workers() {
    let port = free_port_pair();
    let out = TestDir::new("rdzv-after-out");
    let script = child(out.path(), "case $REPLICA in 0) true ;; 2) sleep 0.5; exit 1 ;; *) sleep 10 ;; esac");
    let reps: Vec<Replica> = (0..N).map(|i| Replica::new("rdzv-after", i)).collect();
    let runs: Vec<Running> = reps
        .iter()
        .map(|r| {
            r.rv("after", N, port)
                .args(["--restart-scope", "job", "--backoff-initial", "100ms", "--grace-period", "2s"])
                .sh(&script)
                .spawn()
        })
        .collect();
    let fin = finish_all(runs);
    fin[0].assert_code(0);
    for (i, f) in fin.iter().enumerate().skip(1) {
        assert_eq!(f.code, Some(EXTERNAL), "worker {i} exit\nstderr:\n{}", f.stderr);
        assert!(f.stderr.contains("the job is over"), "worker {i} names why:\n{}", f.stderr);
        assert_eq!(read(&out.join(&format!("gens-{i}"))), "0\n", "worker {i} started no new generation");
        assert!(f.elapsed < Duration::from_secs(8), "worker {i} stopped after {:?}", f.elapsed);
    }
}

/// Issue 15: a master SIGSTOPped mid-barrier long enough for a worker to give up on its
/// connection; after SIGCONT the worker's new connection replaces its own half-open one instead
/// of being refused as a duplicate (it exited 138), and the job completes.
#[test]
fn a_worker_reconnecting_to_a_stopped_master_replaces_its_stale_connection() {
    let port = free_port_pair();
    let out = TestDir::new("rdzv-sigstop-out");
    let script = child(out.path(), "sleep 0.2");
    let reps: Vec<Replica> = (0..3).map(|i| Replica::new("rdzv-sigstop", i)).collect();
    let master = reps[0].rv("sigstop", 3, port).args(["--log-level", "debug"]).sh(&script).spawn();
    let worker = reps[1].rv("sigstop", 3, port).args(["--log-level", "debug"]).sh(&script).spawn();
    master.wait_log(JOINED, 1);
    master.signal(libc::SIGSTOP);
    // The worker hears nothing for 3 heartbeats (15 s), drops the connection and dials again.
    let worker_stderr = reps[1].dir.join("stderr");
    common::wait_until_for("the worker to give up on the stopped master", Duration::from_secs(60), || {
        read(&worker_stderr).contains("retrying: master silent").then_some(())
    });
    master.signal(libc::SIGCONT);
    // Which the master sees first after SIGCONT, the old connection's end or the new hello, is a
    // race; either way the worker must be admitted (rendezvous::tests::
    // a_reconnecting_replica_replaces_its_stale_connection pins the replacement down).
    let last = reps[2].rv("sigstop", 3, port).sh(&script).spawn();
    let fin = finish_all(vec![master, worker, last]);
    assert_all_code(&fin, 0);
}

/// A job's end at scale: every worker finishing at once would be one INFO line per replica (16K
/// lines at 16,384 replicas, twice over). The master logs the first at INFO, the others at DEBUG,
/// and when its job is done one line with how many were not logged at INFO; no peer is "lost".
#[test]
fn workers_finishing_together_are_summed_up_in_the_masters_log() {
    const JOB: u32 = 8;
    let port = free_port_pair();
    let out = TestDir::new("rdzv-departures-out");
    let reps: Vec<Replica> = (0..JOB).map(|i| Replica::new("rdzv-departures", i)).collect();
    let go = out.join("go");
    let master_body = format!("while [ ! -e {} ]; do sleep 0.02; done", common::q(&go.to_string_lossy()));
    let master =
        reps[0].rv("departures", JOB, port).args(["--log-level", "debug"]).sh(&child(out.path(), &master_body)).spawn();
    let workers: Vec<Running> =
        reps[1..].iter().map(|r| r.rv("departures", JOB, port).sh(&child(out.path(), "true")).spawn()).collect();
    let workers = finish_all(workers);
    assert_all_code(&workers, 0);
    let stderr = reps[0].dir.join("stderr");
    let finished_lines = |log: &str| log.lines().filter(|l| l.contains("rendezvous peer finished and closed")).count();
    wait_until("the master saw every worker finish", || (finished_lines(&read(&stderr)) == 7).then_some(()));
    std::fs::write(&go, "").expect("write go");
    let master = master.wait();
    assert_eq!(master.code, Some(0), "master:\n{}", master.stderr);
    let log = &master.stderr;
    let at = |level: &str| {
        log.lines()
            .filter(|l| l.contains(&format!("] {level} ")) && l.contains("rendezvous peer finished and closed"))
            .count()
    };
    assert_eq!(at("INFO"), 1, "one INFO line for the first worker that finished:\n{log}");
    assert_eq!(at("DEBUG"), 6, "the other six at DEBUG:\n{log}");
    assert!(
        log.lines().any(|l| l.contains("] INFO ") && l.contains("6 more rendezvous peers finished and closed")),
        "a summary line when the job is done:\n{log}"
    );
    assert!(!log.contains("peer lost") && !log.contains("peers were lost"), "no worker was lost:\n{log}");
}

/// A training process that saves on SIGUSR1 (`saved-REPLICA-GEN` holds when, in ns) and goes
/// on (a minute at most: a failed test leaves no immortal child), and on TERM records when
/// (`term-REPLICA-GEN`) and exits 0; `ready-REPLICA-GEN` once its
/// traps are in place. In generation 1 (after a job restart) it just finishes.
fn saver(out: &Path, on_start: &str) -> String {
    let o = common::q(&out.to_string_lossy());
    child(
        out,
        &format!(
            "cd {o}; [ \"$g\" = 1 ] && exit 0; \
             trap 'date +%s%N > saved-$REPLICA-$g' USR1; \
             trap 'date +%s%N > term-$REPLICA-$g; exit 0' TERM; \
             touch ready-$REPLICA-$g; {on_start} i=0; while [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done"
        ),
    )
}

/// The time written in `out/name` (ns), once the file is complete.
fn stamp(out: &TestDir, name: &str) -> u128 {
    common::wait_until(&format!("{name} to be written"), || read(&out.join(name)).trim().parse().ok())
}

/// Four launchers with `--checkpoint-signal SIGUSR1 --checkpoint-grace 2s`, each running
/// `script` (their directories live as long as the replicas returned).
fn saving_job(test: &str, scope: &str, script: &str) -> (Vec<Replica>, Vec<Running>) {
    let port = free_port_pair();
    let reps: Vec<Replica> = (0..N).map(|i| Replica::new(test, i)).collect();
    let runs = reps
        .iter()
        .map(|r| {
            r.rv(test, N, port)
                .args(["--restart-scope", scope, "--grace-period", "10s", "--rendezvous-timeout", "20s"])
                .args(["--checkpoint-signal", "SIGUSR1", "--checkpoint-grace", "2s"])
                .sh(script)
                .spawn()
        })
        .collect();
    (reps, runs)
}

fn wait_ready(out: &TestDir) {
    for i in 0..N {
        common::wait_until(&format!("replica {i}'s traps"), || {
            out.join(&format!("ready-{i}-0")).exists().then_some(())
        });
    }
}

/// Issue 37 item 4: a preempted worker (TERM to its launcher) makes every replica's training
/// process save (SIGUSR1), and its own TERM comes only after the checkpoint's grace: every
/// replica saved before the stopped one got its TERM.
#[test]
fn a_stopping_worker_makes_every_replica_save_first() {
    let out = TestDir::new("rdzv-ckpt-worker-out");
    let (_reps, mut runs) = saving_job("rdzv-ckpt-worker", "replica", &saver(out.path(), ""));
    wait_ready(&out);
    let stopped = runs.remove(2);
    stopped.signal(libc::SIGTERM);
    let fin = stopped.wait();
    assert_eq!(fin.code, Some(0), "its child's status after its TERM handler\n{}", fin.stderr);
    let term = stamp(&out, "term-2-0");
    for i in 0..N {
        let saved = stamp(&out, &format!("saved-{i}-0"));
        assert!(saved < term, "replica {i} saved before replica 2 got TERM\n{}", fin.stderr);
    }
    assert!(fin.stderr.contains("SIGUSR1 to the training process"), "{}", fin.stderr);
    for r in &runs {
        r.signal(libc::SIGTERM);
    }
    let rest = finish_all(runs);
    assert_all_code(&rest, 0);
    assert!(
        rest[0].stderr.contains("checkpoint: replica 2 is being stopped: every replica saves"),
        "{}",
        rest[0].stderr
    );
}

/// The master's own stop makes the job save too.
#[test]
fn the_masters_stop_makes_every_replica_save_first() {
    let out = TestDir::new("rdzv-ckpt-master-out");
    let (_reps, mut runs) = saving_job("rdzv-ckpt-master", "replica", &saver(out.path(), ""));
    wait_ready(&out);
    let master = runs.remove(0);
    master.signal(libc::SIGTERM);
    let fin = master.wait();
    assert_eq!(fin.code, Some(0), "{}", fin.stderr);
    let term = stamp(&out, "term-0-0");
    for i in 0..N {
        assert!(stamp(&out, &format!("saved-{i}-0")) < term, "replica {i} saved before the master's TERM");
    }
    for r in &runs {
        r.signal(libc::SIGTERM);
    }
    assert_all_code(&finish_all(runs), 0);
}

/// Job scope: one replica's child fails; before the job restarts, every other replica's child
/// saves, then is stopped, and generation 1 runs to completion.
#[test]
fn a_job_scope_fault_makes_every_replica_save_before_the_restart() {
    let out = TestDir::new("rdzv-ckpt-job-out");
    // Replica 2 fails once every replica's traps are in place.
    let fail =
        "if [ \"$REPLICA\" = 2 ]; then while [ \"$(ls ready-* | wc -l)\" -lt 4 ]; do sleep 0.02; done; exit 1; fi;";
    let (_reps, runs) = saving_job("rdzv-ckpt-job", "job", &saver(out.path(), fail));
    let fin = finish_all(runs);
    assert_all_code(&fin, 0);
    for i in [0, 1, 3] {
        let (saved, term) = (stamp(&out, &format!("saved-{i}-0")), stamp(&out, &format!("term-{i}-0")));
        assert!(saved < term, "replica {i} saved before its stop");
        assert_eq!(read(&out.join(&format!("gens-{i}"))), "0\n1\n", "replica {i}'s generations");
    }
    assert!(!out.join("saved-2-0").exists(), "the failed child was gone");
}

/// Issue 36 item 4: `--straggler-rule` names the replica whose logged throughput stays below
/// 0.75 of the job's median (replica 2 at 60 samples/s, the others at 100), with its node and
/// figures, in the master's log, its status (`stragglers`) and its webhook reports; the others are
/// not named.
#[test]
fn the_master_names_a_straggler_from_the_logged_throughput() {
    let port = free_port_pair();
    let (url, webhook) = crate::reporting::receiver(crate::reporting::Upstream::Answers);
    let rules_dir = TestDir::new("rdzv-straggler-rules");
    let rules = rules_dir.write(
        "rules.json",
        r#"[{"name": "throughput", "logPattern": ".*samples/s: (\\S+)", "metricThreshold": 0, "operator": "lt"}]"#,
    );
    // At most a minute: a failed assertion leaves no immortal child behind.
    let script = "v=100; [ \"$REPLICA\" = 2 ] && v=60; i=0; while [ $i -lt 1200 ]; do echo \"step samples/s: $v\"; sleep 0.05; i=$((i+1)); done";
    let reps: Vec<Replica> = (0..N).map(|i| Replica::new("rdzv-straggler", i)).collect();
    let runs: Vec<Running> = reps
        .iter()
        .map(|r| {
            let rv = r.rv("straggler", N, port);
            let rv = if r.index == 0 { rv.args(["--report-url", &url]) } else { rv };
            rv.args(["--grace-period", "2s", "--straggler-rule", "throughput", "--log-rules"])
                .args([&rules])
                .sh(script)
                .spawn()
        })
        .collect();
    runs[0].wait_log("straggler: replica 2 is a straggler", 1);
    for r in &runs {
        r.signal(libc::SIGTERM);
    }
    let fin = finish_all(runs);
    let log = &fin[0].stderr;
    let line = log.lines().find(|l| l.contains("straggler: replica 2")).unwrap_or_default();
    assert!(line.contains("its metric 60 against the job's median 100 (0.60x"), "{line}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    assert!(line.contains(&format!("node {})", host.trim())), "the node is the replica's (its hostname here): {line}");
    assert_eq!(log.matches("is a straggler").count(), 1, "only replica 2, once:\n{log}");
    // The master's status and its webhook carry it, figures and node.
    let named = fin[0].statuses.iter().find_map(|s| s["stragglers"].as_array().cloned()).unwrap_or_default();
    assert_eq!(named.len(), 1, "{:?}", fin[0].statuses.last());
    assert_eq!((named[0]["replica"].as_u64(), named[0]["median"].as_f64()), (Some(2), Some(100.0)), "{named:?}");
    assert_eq!(named[0]["node"].as_str(), Some(host.trim()), "{named:?}");
    let posts = webhook.lock().unwrap().clone();
    let posted: Vec<&serde_json::Value> =
        posts.iter().filter_map(|p| p.report["stragglers"].as_array()).flatten().collect();
    assert!(posted.iter().all(|s| s["replica"] == 2) && !posted.is_empty(), "the webhook's reports: {posts:?}");
}

/// `--straggler-action restart`: the straggler's child alone is restarted (its second start
/// has RANKVISOR_RESTART_COUNT 1); after the restart it keeps pace and is not named again.
#[test]
fn a_straggler_alone_is_restarted_under_straggler_action_restart() {
    let port = free_port_pair();
    let out = TestDir::new("rdzv-straggler-restart-out");
    let rules = out.write(
        "rules.json",
        r#"[{"name": "throughput", "logPattern": ".*samples/s: (\\S+)", "metricThreshold": 0, "operator": "lt"}]"#,
    );
    let o = common::q(&out.path().to_string_lossy());
    // At most a minute: a failed assertion leaves no immortal child behind.
    let script = format!(
        "touch {o}/start-$REPLICA-$RANKVISOR_RESTART_COUNT; v=100; \
         [ \"$REPLICA\" = 2 ] && [ \"$RANKVISOR_RESTART_COUNT\" = 0 ] && v=60; \
         i=0; while [ $i -lt 1200 ]; do echo \"step samples/s: $v\"; sleep 0.05; i=$((i+1)); done"
    );
    let reps: Vec<Replica> = (0..N).map(|i| Replica::new("rdzv-straggler-restart", i)).collect();
    let runs: Vec<Running> = reps
        .iter()
        .map(|r| {
            r.rv("stragglerrestart", N, port)
                .args(["--grace-period", "2s", "--straggler-rule", "throughput", "--straggler-action", "restart"])
                .args(["--log-rules".to_string(), rules.to_string_lossy().into_owned()])
                .sh(&script)
                .spawn()
        })
        .collect();
    common::wait_until("replica 2's second start", || out.join("start-2-1").exists().then_some(()));
    // A few more points at pace from everyone after the restart.
    runs[0].wait_log("straggler: replica 2 is a straggler", 1);
    runs[2].wait_log("restarting the child", 1);
    for r in &runs {
        r.signal(libc::SIGTERM);
    }
    let fin = finish_all(runs);
    for i in [0, 1, 3] {
        assert!(!out.join(&format!("start-{i}-1")).exists(), "replica {i} was not restarted");
    }
    assert_eq!(fin[0].stderr.matches("is a straggler").count(), 1, "named once:\n{}", fin[0].stderr);
    assert!(fin[2].statuses.iter().any(|s| s["last_exit_reason"] == "Straggler"), "{:?}", fin[2].statuses.last());
}

//! Issue 36 item 1: `GET /stacks` names where the child's processes are: a Python child's function
//! and line (read from outside by `rankvisor-stacks`, beside the binary under test), the same
//! under `sh -c`, and for a program that is not Python its state, wait channel and the reason.

use crate::common;
use common::*;
use serde_json::Value;

/// A Python script that waits in `slow_here` once it has written the ready file (argv[1]).
const HANG_PY: &str = "import sys, time\n\
def slow_here(ready):\n    open(ready, 'w').close()\n    time.sleep(600)\n\
slow_here(sys.argv[1])\n";

fn supervise(dir: &TestDir, port: u16, script: &str) -> Running {
    Rv::new(dir).args(["--node-health", "off", "--http-addr", &format!("127.0.0.1:{port}")]).sh(script).spawn()
}

/// `/stacks` once the server answers 200 (it does once the child runs).
fn stacks(port: u16) -> Option<Value> {
    let (code, body) = http_get(port, "/stacks")?;
    (code == 200).then(|| serde_json::from_str(&body).expect("/stacks is JSON"))
}

/// The process whose main thread's innermost frame is `function`, polled until its line is `line`.
fn wait_frame(port: u16, function: &str, line: i64) -> (Value, Value) {
    wait_until(&format!("/stacks to show {function} at line {line}"), || {
        let s = stacks(port)?;
        let p = s["processes"].as_array()?.iter().find(|p| {
            p["threads"].as_array().is_some_and(|t| {
                t.iter().any(|t| {
                    t["main"] == true && t["frames"][0]["function"] == function && t["frames"][0]["line"] == line
                })
            })
        })?;
        Some((s.clone(), p.clone()))
    })
}

#[test]
fn a_python_child_in_a_named_function_is_named_with_its_line() {
    let dir = TestDir::new("stacks-python");
    let script = dir.write("hang.py", HANG_PY);
    let port = free_port();
    let running =
        supervise(&dir, port, &format!("exec python3 {} {}", q(script.to_str().unwrap()), q(&dir.file("ready"))));
    wait_file(&dir.join("ready"));
    let (snapshot, p) = wait_frame(port, "slow_here", 4);
    assert!(p["command"].as_str().unwrap().contains("hang.py"), "{p}");
    assert_eq!(p["reason"], Value::Null, "{p}");
    let main = p["threads"].as_array().unwrap().iter().find(|t| t["main"] == true).unwrap();
    assert_eq!(main["frames"][0]["file"], script.to_str().unwrap());
    assert_eq!(main["frames"][1]["function"], "<module>");
    assert_eq!(main["active"], false, "sleeping is idle: {main}");
    assert!(snapshot["reader"].as_str().unwrap().starts_with("py-spy"), "{snapshot}");
    running.signal(libc::SIGTERM);
    running.wait();
}

#[test]
fn a_python_child_under_sh_c_is_read_below_the_shell() {
    let dir = TestDir::new("stacks-sh");
    let script = dir.write("hang.py", HANG_PY);
    let port = free_port();
    // `; true` keeps the shell from exec'ing python: two processes.
    let cmd = format!("python3 {} {}; true", q(script.to_str().unwrap()), q(&dir.file("ready")));
    let running = supervise(&dir, port, &cmd);
    wait_file(&dir.join("ready"));
    let (snapshot, python) = wait_frame(port, "slow_here", 4);
    let procs = snapshot["processes"].as_array().unwrap();
    let shell = &procs[0];
    assert!(shell["command"].as_str().unwrap().starts_with("sh -c"), "{snapshot}");
    assert_eq!(shell["reason"], "not a Python process", "{shell}");
    assert_eq!(python["ppid"], shell["pid"], "{snapshot}");
    running.signal(libc::SIGTERM);
    running.wait();
}

#[test]
fn a_child_that_is_not_python_has_its_state_wchan_and_the_reason() {
    let dir = TestDir::new("stacks-sleep");
    let port = free_port();
    let running = supervise(&dir, port, "exec sleep 600");
    let p = wait_until("/stacks to show sleep asleep", || {
        let s = stacks(port)?;
        let p = s["processes"].get(0)?.clone();
        (p["command"] == "sleep 600" && p["state"].as_str()?.starts_with('S')).then_some(p)
    });
    assert_eq!(p["reason"], "not a Python process", "{p}");
    assert_eq!(p["threads"], serde_json::json!([]), "{p}");
    assert!(p["wchan"].as_str().is_some_and(|w| !w.is_empty()), "/proc names where it sleeps: {p}");
    running.signal(libc::SIGTERM);
    running.wait();
}

/// Issue 36 item 2: a hang (no heartbeat after the child's last, from inside `slow_here`) is
/// snapshotted before the child is stopped: the termination message names the innermost frame of
/// the training process's main thread, and the last status carries the summary.
#[test]
fn a_hang_is_snapshotted_before_the_stop_and_named_in_the_termination_message() {
    let dir = TestDir::new("stacks-hang");
    let script = dir.write("hang.py", HANG_PY);
    let heartbeat = dir.file("heartbeat");
    let out = Rv::new(&dir)
        .args(["--node-health", "off", "--http-addr", "off", "--restart-policy", "Never"])
        .args(["--heartbeat-file", &heartbeat, "--hang-timeout", "1s", "--hang-startup", "20s"])
        .args(["--termination-log", &dir.file("termination-log")])
        .sh(&format!("python3 {} {}; exit 3", q(script.to_str().unwrap()), q(&heartbeat)))
        .run();
    let msg = read(&dir.join("termination-log"));
    let python = wait_until("the summary in the last status", || {
        let st = out.last_status();
        st["stacks"]["pid"].as_i64()
    });
    let want = format!("; stacks: pid {python} in slow_here (hang.py:4)");
    assert!(msg.starts_with("child hung (no heartbeat within 1s)") && msg.contains(&want), "{msg}");
    let st = out.last_status();
    assert_eq!(st["stacks"]["why"], "hung", "{st}");
    assert_eq!(st["stacks"]["frames"][0], "slow_here (hang.py:4)", "{st}");
    assert_eq!(st["stacks"]["frames"][1], "<module> (hang.py:5)", "{st}");
    assert!(out.stderr.contains("stacks: pid"), "{}", out.stderr);
}

/// Three replicas of a job: ranks 0 and 1 wait in `wait_here`, rank 2 sleeps in `slow_here`
/// (first start only). With a heartbeat file, `wait_here` beats every 0.2 s and `slow_here` once.
const JOB_PY: &str = "import os, pathlib, time\n\
HB = os.environ.get('RANKVISOR_HEARTBEAT_FILE')\n\
RESTARTS = os.environ.get('RANKVISOR_RESTART_COUNT', '0')\n\
READY = f\"{os.environ['DIR']}/ready-{os.environ['RANK']}-{RESTARTS}\"\n\
def wait_here():\n    pathlib.Path(READY).touch()\n    while HB:\n        pathlib.Path(HB).touch()\n        time.sleep(0.2)\n    time.sleep(600)\n\
def slow_here():\n    pathlib.Path(HB or READY).touch()\n    pathlib.Path(READY).touch()\n    time.sleep(600)\n\
if os.environ['RANK'] == '2' and RESTARTS == '0':\n    slow_here()\n\
wait_here()\n";

const JOB: &str = "stk";

/// Replica `i` of a job of three on loopback.
fn replica(dir: &TestDir, i: u32, port: u16, http: u16, script: &str, extra: &[&str]) -> Rv {
    let pod = if i == 0 { format!("{JOB}-master-0") } else { format!("{JOB}-worker-{}", i - 1) };
    Rv::new(dir)
        .env("RANK", &i.to_string())
        .env("WORLD_SIZE", "3")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", &port.to_string())
        .env("POD_NAME", &pod)
        .env("DIR", &dir.path().to_string_lossy())
        .args(["--http-addr", &format!("127.0.0.1:{http}"), "--grace-period", "2s", "--backoff-initial", "100ms"])
        .args(["--rendezvous-timeout", "20s", "--node-health", "off", "--kube-events", "off"])
        .args(extra)
        .sh(&format!("exec python3 {}", q(script)))
}

fn job_of_three(name: &str, extra: impl Fn(u32) -> Vec<String>) -> (Vec<TestDir>, Vec<Running>, u16) {
    let port = free_port_pair();
    let http: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let dirs: Vec<TestDir> = (0..3).map(|i| TestDir::new(&format!("{name}-{i}"))).collect();
    let script = dirs[0].write("job.py", JOB_PY);
    let running = (0..3)
        .map(|i| {
            let extra = extra(i);
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            replica(&dirs[i as usize], i, port, http[i as usize], script.to_str().unwrap(), &extra).spawn()
        })
        .collect();
    (dirs, running, http[0])
}

/// Issue 36 item 3: `GET /job/stacks` on the master asks every replica over the control channel
/// and groups them by the main thread's frames, largest group first.
#[test]
fn the_master_groups_the_jobs_stacks_and_names_the_odd_replica() {
    let (dirs, running, http) = job_of_three("job-stacks", |_| vec![]);
    for (i, d) in dirs.iter().enumerate() {
        wait_file(&d.join(&format!("ready-{i}-0")));
    }
    let job = wait_until("/job/stacks with every replica in its function", || {
        let (code, body) = http_get(http, "/job/stacks")?;
        let v: Value = serde_json::from_str(&body).ok().filter(|_| code == 200)?;
        let s = v["summary"].as_str()?;
        (s.contains("wait_here (job.py:10)") && s.contains("slow_here (job.py:14)")).then_some(v)
    });
    assert_eq!(
        job["summary"],
        "2 replicas (0, 1): wait_here (job.py:10) <- <module> (job.py:17); replica 2: slow_here (job.py:14) <- \
         <module> (job.py:16)",
        "{job:#}"
    );
    assert_eq!(job["groups"][0]["replicas"], serde_json::json!([0, 1]));
    assert_eq!(job["replicas"].as_array().unwrap().len(), 3, "{job:#}");
    for r in running {
        r.signal(libc::SIGTERM);
        r.wait();
    }
}

/// Issue 36 item 3: a hang under `--restart-scope job` (rank 2's heartbeat stops in `slow_here`):
/// as the hang's snapshot reaches the master it gathers the job's stacks, the restart waiting for
/// them, and its report carries the groups.
#[test]
fn a_hang_restart_of_the_job_is_preceded_by_the_grouped_stacks() {
    let (dirs, running, http) = job_of_three("job-hang", |i| {
        let mut a: Vec<String> = ["--restart-scope", "job"].iter().map(|s| s.to_string()).collect();
        if i == 2 {
            a.extend(["--heartbeat-file".into(), "hb".into(), "--hang-timeout".into(), "1s".into()]);
            a.extend(["--hang-startup".into(), "20s".into()]);
        }
        a
    });
    wait_file(&dirs[2].join("ready-2-1"));
    let status = wait_until("the master's report with the job's stacks", || {
        let (_, body) = http_get(http, "/status")?;
        let v: Value = serde_json::from_str(&body).ok()?;
        v["job_stacks"]["summary"].as_str().is_some().then_some(v)
    });
    let job = &status["job_stacks"];
    assert_eq!(
        job["summary"],
        "2 replicas (0, 1): wait_here (job.py:10) <- <module> (job.py:17); replica 2: slow_here (job.py:14) <- \
         <module> (job.py:16)",
        "{status:#}"
    );
    assert_eq!(job["why"], "replica 2: hung");
    for r in running {
        r.signal(libc::SIGTERM);
        let out = r.wait();
        if out.stderr.contains("job stacks (replica 2: hung)") {
            assert!(out.stderr.contains("replica 2: slow_here (job.py:14)"), "{}", out.stderr);
        }
    }
}

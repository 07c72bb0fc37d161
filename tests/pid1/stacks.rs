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

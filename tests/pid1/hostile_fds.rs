//! File-descriptor exhaustion at a restart (issue 15, item 5), through the real binary: rankvisor
//! runs under a low RLIMIT_NOFILE with its HTTP port open; the test fills rankvisor's descriptor
//! table with idle connections to that port and lets the child crash.
//!
//! The usual start (`posix_spawn`, CLONE_VFORK) needs no descriptor, so the restart succeeds with
//! the table full. The fork path (stdin a terminal, as a container with `tty: true`) needs a pipe
//! for exec's errors, so there the restart fails with a real EMFILE. A start that fails for the machine's reasons is retried under the restart policy
//! (never the permanent 126 of a command that cannot be executed); once the connections are gone
//! the restart succeeds and the run ends with the child's own status. When the policy's retries
//! run out on such a failure, the exit is 138 (a reason outside the training program), not 126,
//! and the termination message is written all the same (from a descriptor held in reserve).

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use std::os::fd::{AsRawFd, OwnedFd};

use common::{free_port, pty, read, wait_until, Running, Rv, TestDir};

/// rankvisor's descriptor limit: room for its own dozen descriptors and a few connections, below
/// the HTTP server's cap of 64 connections (at the cap it would close the oldest one itself).
const NOFILE: u32 = 40;
/// Idle connections the test opens: more than fit, so the listen backlog keeps the table full even
/// when the server's header timeout (10 s) closes the first ones; fewer than the listen backlog
/// (128), so every connect completes at once.
const CONNECTIONS: usize = 100;

/// The line rankvisor logs for a start that failed for the machine's reasons.
const RETRYING: &str = "Too many open files (os error 24); retrying under the restart policy";

fn healthz(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.starts_with("HTTP/1.1 200").then_some(out)
}

/// Start rankvisor (limit `NOFILE`, `--http-addr`, debug logs, `extra` options; stdin from
/// `stdin_path` when given, /dev/null otherwise) on a child whose first run waits for the file `go`
/// and then fails (exit 1), and whose later runs write their restart count to `ran` and exit 0.
/// Fill rankvisor's descriptor table with idle connections, let the first run fail, and return
/// with the connections still held.
fn crash_with_a_full_fd_table(dir: &TestDir, extra: &[&str], stdin_path: Option<&Path>) -> (Running, Vec<TcpStream>) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let (go, ran) = (dir.file("go"), dir.file("ran"));
    let script = format!(
        "if [ \"$RANKVISOR_RESTART_COUNT\" = 0 ]; then while [ ! -e '{go}' ]; do sleep 0.02; done; exit 1; fi\n\
         echo \"$RANKVISOR_RESTART_COUNT\" > '{ran}'"
    );
    let mut args =
        vec!["--http-addr", &addr, "--node-health", "off", "--backoff-initial", "1s", "--log-level", "debug"];
    args.extend_from_slice(extra);
    let wrapper = match stdin_path {
        Some(path) => format!("ulimit -n {NOFILE}; exec 0<'{}'", path.display()),
        None => format!("ulimit -n {NOFILE}"),
    };
    let run = Rv::new(dir).shell_wrapper(&wrapper).args(args).sh(&script).spawn();
    run.wait_status("the first run", |s| s["state"] == "Running" && s["child_pid"].is_i64());
    wait_until("/healthz to answer", || healthz(port));
    let pid = run.rankvisor_pid();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("/proc/PID/limits");
    let nofile = limits.lines().find(|l| l.starts_with("Max open files")).expect("a Max open files line");
    assert!(nofile.split_whitespace().nth(3) == Some(&NOFILE.to_string()), "rankvisor's limit: {nofile}");
    let mut held = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        match TcpStream::connect_timeout(&std::net::SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(5)) {
            Ok(s) => held.push(s),
            Err(e) => panic!("connection {} to rankvisor's HTTP port: {e}", held.len() + 1),
        }
    }
    // Handshake: rankvisor's own table is full once its accept fails with EMFILE.
    let stderr = dir.join("stderr");
    wait_until("rankvisor's accept to fail with EMFILE", || {
        read(&stderr).contains("http accept failed: Too many open files").then_some(())
    });
    std::fs::write(dir.join("go"), "").expect("touch go");
    (run, held)
}

/// As [`crash_with_a_full_fd_table`] with stdin a terminal, so rankvisor starts its child by fork;
/// returns once a restart failed with EMFILE, with the terminal's controller still held.
fn fork_restart_with_a_full_fd_table(dir: &TestDir, extra: &[&str]) -> (Running, Vec<TcpStream>, OwnedFd) {
    let (controller, terminal) = pty();
    let tty = std::fs::read_link(format!("/proc/self/fd/{}", terminal.as_raw_fd())).expect("the terminal's path");
    let (run, held) = crash_with_a_full_fd_table(dir, extra, Some(&tty));
    drop(terminal);
    let stderr = dir.join("stderr");
    wait_until("a restart that fails with EMFILE", || read(&stderr).contains(RETRYING).then_some(()));
    let starts = read(&stderr);
    assert!(starts.contains("path=Fork(Terminal)"), "stdin is a terminal: the fork path\n{starts}");
    (run, held, controller)
}

#[test]
fn emfile_at_a_restart_is_retried_and_the_run_ends_with_the_childs_status() {
    let dir = TestDir::new("hostile-fds-retried");
    let (run, held, _terminal) = fork_restart_with_a_full_fd_table(&dir, &[]);
    // Still supervising, restarting: not the permanent 126 it once exited with.
    let restarting = run.wait_status("Restarting after the failed start", |s| {
        s["state"] == "Restarting" && s["last_exit"] == serde_json::json!({"exited": 1})
    });
    assert!(restarting["child_pid"].is_null(), "{restarting}");
    assert!(!dir.join("ran").exists(), "no run started while the table is full");
    drop(held);
    let out = run.wait_for(Duration::from_secs(60));
    out.assert_code(0);
    assert_eq!(out.last_status()["state"], "Succeeded", "{:?}", out.statuses);
    let ran: u32 = read(&dir.join("ran")).trim().parse().expect("the restarted run wrote its restart count");
    // Each failed start counts as a restart (the kubelet counts a container that failed to start).
    assert!(ran >= 2, "the successful run is restart {ran}: the crash and at least one failed start came first");
    let failed_starts = out.stderr.lines().filter(|l| l.contains(RETRYING)).count();
    assert!(failed_starts >= 1, "{}", out.stderr);
    assert!(
        !out.statuses.iter().any(|s| s["last_exit"] == serde_json::json!({"exited": 126})),
        "a failed start is not a child exit: {:?}",
        out.statuses
    );
}

#[test]
fn emfile_when_the_backoff_limit_is_reached_exits_138_not_126() {
    let dir = TestDir::new("hostile-fds-limit");
    let log = dir.file("termination-log");
    // One restart allowed: the crash's. The failed start that follows reaches the limit.
    let (run, held, _terminal) =
        fork_restart_with_a_full_fd_table(&dir, &["--backoff-limit", "1", "--termination-log", &log]);
    let out = run.wait_for(Duration::from_secs(30));
    drop(held);
    out.assert_code(138);
    assert_eq!(out.last_status()["state"], "Failed", "{:?}", out.statuses);
    let message = read(&dir.join("termination-log"));
    assert!(
        message.contains("Too many open files") && message.contains("backoff limit 1"),
        "the termination message names the cause and the limit: {message:?}"
    );
    assert!(!dir.join("ran").exists(), "no run after the crash started");
}

/// The usual start needs no descriptor: with rankvisor's table full (stdin not a terminal, so
/// `posix_spawn`), the crashed child is started again at once and the run ends with its status.
#[test]
fn a_full_fd_table_does_not_stop_a_posix_spawn_restart() {
    let dir = TestDir::new("hostile-fds-spawn");
    let (run, held) = crash_with_a_full_fd_table(&dir, &[], None);
    // The restarted run ends while every connection is still held: the table stayed full.
    wait_until("the restarted run to write its restart count", || {
        std::fs::read_to_string(dir.join("ran")).ok().filter(|t| t.ends_with('\n'))
    });
    let out = run.wait_for(Duration::from_secs(30));
    drop(held);
    out.assert_code(0);
    assert_eq!(read(&dir.join("ran")).trim(), "1", "the first restart ran: no failed start before it");
    assert!(!out.stderr.contains(RETRYING), "no start failed\n{}", out.stderr);
    assert!(out.stderr.contains("path=Spawn"), "posix_spawn started the child\n{}", out.stderr);
}

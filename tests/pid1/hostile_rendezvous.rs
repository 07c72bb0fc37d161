//! Hostile rendezvous peers (issue 15) against a real `rankvisor` master on loopback.

use crate::common;

use common::{free_port_pair, read, wait_until, Rv, TestDir};
use rankvisor_core::rendezvous::PROTOCOL_VERSION;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The master of a 2-replica job `job` whose rendezvous port is `port + 1`.
fn master(dir: &TestDir, job: &str, port: u16) -> Rv {
    Rv::new(dir)
        .env("RANK", "0")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", &port.to_string())
        .args(["--job-name", job, "--http-addr", "off", "--node-health", "off", "--termination-log"])
        .args([dir.file("termination-log")])
}

fn connect(port: u16) -> TcpStream {
    wait_until("the master's rendezvous port", || TcpStream::connect(("127.0.0.1", port + 1)).ok())
}

fn hello(job: &str, index: u32, node: &str) -> String {
    let frame = serde_json::json!({
        "v": PROTOCOL_VERSION, "type": "hello", "job": job, "replica_index": index, "replica_count": 2,
        "node": node, "healthy": true, "health": null, "nonce": ""
    });
    format!("{frame}\n")
}

/// Regression: a hello's `node` with a newline wrote a forged `[rankvisor] ERROR` line.
#[test]
fn a_forged_node_name_cannot_forge_a_log_line() {
    let dir = TestDir::new("hostile-rdzv-forge");
    let port = free_port_pair();
    // A join is a DEBUG line (one per replica is too many at scale).
    let run = master(&dir, "fj", port).args(["--log-level", "debug"]).sh("sleep 100").spawn();
    let forged = "n1\n[rankvisor] ERROR forged line\r\x1b[2K";
    // Refused (index out of range): logged with the peer's node.
    let mut refused = connect(port);
    refused.write_all(hello("fj", 7, forged).as_bytes()).unwrap();
    let mut answer = String::new();
    BufReader::new(&refused).read_line(&mut answer).unwrap();
    assert!(answer.contains("\"type\":\"error\""), "{answer}");
    // Admitted: logged when it joins.
    let mut admitted = connect(port);
    admitted.write_all(hello("fj", 1, forged).as_bytes()).unwrap();
    let stderr = dir.join("stderr");
    wait_until("the forged peer's join to be logged", || read(&stderr).contains("(re)joined").then_some(()));
    run.signal(libc::SIGTERM);
    let out = run.wait_for(Duration::from_secs(20));
    drop((refused, admitted));
    for line in out.stderr.lines() {
        assert!(!line.starts_with("[rankvisor] ERROR forged"), "forged line in the log:\n{}", out.stderr);
        assert!(!line.contains('\r') && !line.contains('\x1b'), "control character in a log line: {line:?}");
    }
    let refusal = out.stderr.lines().find(|l| l.contains("refused a rendezvous peer")).expect("refusal logged");
    assert!(refusal.contains("n1\\n[rankvisor] ERROR forged line\\r"), "{refusal}");
}

/// Regression: one WARN per refused connection let any peer flood the log.
#[test]
fn refused_peers_are_logged_at_warn_once_per_window() {
    let dir = TestDir::new("hostile-rdzv-flood");
    let port = free_port_pair();
    let run = master(&dir, "fl", port).sh("sleep 100").spawn();
    for _ in 0..50 {
        let mut s = connect(port);
        s.write_all(b"not a frame\n").unwrap();
        // The refusal comes back before the master closes: one connection at a time.
        let mut answer = String::new();
        BufReader::new(&s).read_line(&mut answer).unwrap();
        assert!(answer.contains("\"type\":\"error\"") && answer.contains("not json"), "{answer}");
    }
    run.signal(libc::SIGTERM);
    let out = run.wait_for(Duration::from_secs(20));
    let warned =
        out.stderr.lines().filter(|l| l.starts_with("[rankvisor] WARN") && l.contains("refused a rendezvous peer"));
    // 50 refusals within one 10 s window: the first is logged; a second only if the run crossed a window.
    assert!(warned.count() <= 2, "refusals flooded the log:\n{}", out.stderr);
    assert!(out.stderr.contains("refused a rendezvous peer"), "{}", out.stderr);
}

//! The unauthenticated HTTP port under a flood (issue 15): 1,000 slowloris connections keep
//! rankvisor's memory bounded and /healthz answering for a well-behaved client.

use crate::common;

use common::{free_port, wait_until, Rv, TestDir};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// Peak resident memory of `pid`, from /proc (kB).
fn peak_rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("VmHWM value")
}

/// Regression: each connection could hold ~400 KB of unfinished headers and connections were
/// unlimited (1,000 connections took RSS from 4 MiB to 410 MiB).
#[test]
fn a_slowloris_flood_keeps_memory_bounded_and_healthz_answering() {
    let dir = TestDir::new("hostile-http-flood");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let run = Rv::new(&dir).args(["--http-addr", &addr, "--node-health", "off"]).sh("sleep 1000").spawn();
    wait_until("/healthz to answer", || get(port, "/healthz").filter(|r| r.starts_with("HTTP/1.1 200")));
    let pid = run.rankvisor_pid();
    // Unfinished request heads: 96 KB each, never ended by the blank line.
    let head = format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: {}", "a".repeat(96 * 1024));
    let mut flood = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { continue };
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        // A closed (evicted or refused) connection is the server protecting itself: fine.
        let _ = s.write_all(head.as_bytes());
        flood.push(s);
    }
    assert!(flood.len() >= 900, "only {} of 1000 connections were accepted at all", flood.len());
    let healthz = get(port, "/healthz").expect("/healthz answers during the flood");
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    let peak = peak_rss_kib(pid);
    drop(flood);
    assert!(peak < 64 * 1024, "rankvisor's peak RSS under the flood: {peak} kB");
    run.signal(libc::SIGTERM);
    run.wait().assert_code(143);
}

/// Regression: out of descriptors, "http accept failed" was logged every 100 ms.
#[test]
fn accept_errors_are_logged_once_per_window() {
    let dir = TestDir::new("hostile-http-emfile");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let run = Rv::new(&dir)
        .shell_wrapper("ulimit -n 48")
        .args(["--http-addr", &addr, "--node-health", "off"])
        .sh("sleep 1000")
        .spawn();
    wait_until("/healthz to answer", || get(port, "/healthz").filter(|r| r.starts_with("HTTP/1.1 200")));
    // Idle connections until rankvisor runs out of descriptors (each held until the 10 s header timeout).
    let mut held = Vec::new();
    for _ in 0..100 {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            held.push(s);
        }
    }
    let stderr = dir.join("stderr");
    wait_until("an accept error", || common::read(&stderr).contains("http accept failed").then_some(()));
    // The first connection was accepted first: its end (the header timeout) marks that the
    // accept errors went on for the whole time the descriptors were held.
    let mut first = held.remove(0);
    first.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut buf = Vec::new();
    let _ = first.read_to_end(&mut buf);
    drop(held);
    wait_until("/healthz to answer again", || get(port, "/healthz").filter(|r| r.starts_with("HTTP/1.1 200")));
    run.signal(libc::SIGTERM);
    let out = run.wait();
    let warned = out.stderr.lines().filter(|l| l.contains("http accept failed")).count();
    // 10 s of failures: one line for the first window, one more at most for the next.
    assert!((1..=2).contains(&warned), "{warned} accept-failure lines:\n{}", out.stderr);
}

/// Regression: a 405 said nothing of what is allowed (RFC 9110 wants `Allow`).
#[test]
fn a_405_says_what_is_allowed() {
    let dir = TestDir::new("hostile-http-405");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let run = Rv::new(&dir).args(["--http-addr", &addr, "--node-health", "off"]).sh("sleep 1000").spawn();
    wait_until("/healthz to answer", || get(port, "/healthz").filter(|r| r.starts_with("HTTP/1.1 200")));
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"POST /status HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 405"), "{reply}");
    assert!(reply.to_ascii_lowercase().contains("\r\nallow: get, head\r\n"), "{reply}");
    run.signal(libc::SIGTERM);
    run.wait().assert_code(143);
}

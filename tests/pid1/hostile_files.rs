//! Hostile files (issue 15): a `--heartbeat-file` or `--termination-log` that is a FIFO never
//! blocks rankvisor, and a huge heartbeat file is read only in its head.

use crate::common;

use common::{wait_until, Rv, TestDir};
use rankvisor_core::heartbeat::HeartbeatFile;
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
}

/// The most memory this test process ever held, from /proc (kB).
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("VmHWM value")
}

/// Regression: the whole file was read at every change (a 500 MB file cost 481 MiB of RSS).
#[test]
fn a_huge_heartbeat_file_is_read_only_in_its_head() {
    let dir = TestDir::new("hostile-hb-huge");
    let path = dir.join("hb");
    std::fs::write(&path, "x").unwrap();
    let mut hb = HeartbeatFile::new(path.clone());
    // Sparse: 2 GiB of apparent size, no disk; reading it whole would take 2 GiB of memory.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(2 << 30).unwrap();
    drop(f);
    let before = peak_rss_kib();
    let beat = hb.check(Instant::now()).expect("the change is a beat");
    assert!(beat.progress.is_none());
    let grown = peak_rss_kib().saturating_sub(before);
    assert!(grown < 4 * 1024, "reading the heartbeat file took {grown} kB of memory");
}

/// Regression: rankvisor blocked in open(2) on the FIFO forever and ignored TERM.
#[test]
fn a_fifo_heartbeat_file_never_blocks_and_is_reported() {
    // A FIFO there at the start is a configuration error (tests/pid1/config_errors.rs); one that
    // replaces the file during the run must not block the loop either.
    let dir = TestDir::new("hostile-hb-fifo");
    let fifo = dir.join("hb");
    let fifo_s = fifo.to_string_lossy().into_owned();
    // The child turns the heartbeat file into a FIFO, then keeps changing its mtime without
    // opening it: a "beat" rankvisor looks at.
    let run = Rv::new(&dir)
        .args(["--heartbeat-file", &fifo_s, "--node-health", "off", "--http-addr", "off"])
        .sh(&format!("mkfifo {f}; while :; do touch {f}; sleep 0.05; done", f = common::q(&fifo_s)))
        .spawn();
    let stderr = dir.join("stderr");
    wait_until("the FIFO heartbeat file to be reported", || {
        common::read(&stderr).contains("is a FIFO (named pipe): expected a regular file").then_some(())
    });
    run.signal(libc::SIGTERM);
    let out = run.wait_for(Duration::from_secs(20));
    out.assert_code(143);
    assert!(out.stderr.contains(&format!("heartbeat file ignored: {fifo_s} is a FIFO")), "{}", out.stderr);
}

/// Regression: writing the termination message blocked forever in open(2) and the exit status was lost.
#[test]
fn a_fifo_termination_log_never_blocks_the_exit() {
    let dir = TestDir::new("hostile-term-fifo");
    let fifo = dir.join("termination-log");
    mkfifo(&fifo);
    let fifo_s = fifo.to_string_lossy().into_owned();
    let out = Rv::new(&dir)
        .args(["--termination-log", &fifo_s, "--restart-policy", "Never", "--node-health", "off"])
        .args(["--http-addr", "off"])
        .sh("exit 3")
        .spawn()
        .wait_for(Duration::from_secs(20));
    out.assert_code(3);
    assert!(out.stderr.contains("is a FIFO (named pipe): expected a regular file"), "{}", out.stderr);
}

/// Regression: the configuration-error path blocked the same way, losing exit 64.
#[test]
fn a_fifo_termination_log_never_blocks_a_configuration_error() {
    let dir = TestDir::new("hostile-term-fifo-config");
    let fifo = dir.join("termination-log");
    mkfifo(&fifo);
    let out = Rv::new(&dir)
        .env("RANKVISOR_TERMINATION_LOG", &fifo.to_string_lossy())
        .args(["--backoff-initial", "soon"])
        .sh("exit 0")
        .spawn()
        .wait_for(Duration::from_secs(20));
    out.assert_code(64);
}

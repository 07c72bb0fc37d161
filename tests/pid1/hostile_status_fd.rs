//! `--status-fd` whose reader does not read (issue 15): the queue is bounded.

use rankvisor_core::status::fd_sink::StatusSink;
use rankvisor_core::status::LocalStatus;
use std::os::fd::IntoRawFd;

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("VmHWM value")
}

/// Regression: every status line was queued without bound for a reader that never reads.
#[test]
fn a_status_reader_that_never_reads_costs_bounded_memory() {
    let (reader, writer) = nix::unistd::pipe().expect("pipe");
    let sink = StatusSink::from_fd(writer.into_raw_fd()).expect("sink");
    // 4 KB lines: 50,000 of them are 200 MB if all are kept.
    let status = LocalStatus { progress: progress_of_size(4000), ..LocalStatus::default() };
    let before = peak_rss_kib();
    for _ in 0..50_000 {
        sink.send(&status);
    }
    let grown = peak_rss_kib().saturating_sub(before);
    assert!(grown < 32 * 1024, "queueing for a reader that never reads took {grown} kB");
    drop(reader);
}

/// Training progress whose status line is about `bytes` long.
fn progress_of_size(bytes: usize) -> Option<serde_json::Map<String, serde_json::Value>> {
    let mut m = serde_json::Map::new();
    m.insert("note".into(), serde_json::Value::String("x".repeat(bytes)));
    Some(m)
}

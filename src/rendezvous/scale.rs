//! Scale measurement (ignored by default): one master process against a fleet of raw workers in
//! a second process (the test binary re-executed), so the master's memory and CPU are its own.
//!
//! `cargo test --release --lib rendezvous::scale -- --ignored --nocapture` (SCALE_N, default
//! 16384). Each process needs SCALE_N file descriptors (`ulimit -n`).

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use super::frame::{encode, Frame, Hello, DEFAULT_MAX_FRAME};
use super::io::FrameReader;
use super::*;

fn proc_field(file: &str, key: &str) -> u64 {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<u64> =
        stat.rsplit(')').next().unwrap_or_default().split_whitespace().filter_map(|f| f.parse().ok()).collect();
    // utime and stime, counted after the state letter.
    fields.get(10).copied().unwrap_or(0) + fields.get(11).copied().unwrap_or(0)
}

fn fleet_size() -> u32 {
    std::env::var("SCALE_N").ok().and_then(|n| n.parse().ok()).unwrap_or(16384)
}

#[tokio::test]
#[ignore]
async fn scale_master() {
    let n = fleet_size();
    let rss_before = proc_field("/proc/self/status", "VmRSS:");
    let cpu_before = cpu_ticks();
    let listener = listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let me = Identity { job: "scale".into(), replica_index: 0, replica_count: n + 1, node: "node-0".into() };
    let cfg = RendezvousConfig { barrier_timeout: Duration::from_secs(60), ..RendezvousConfig::default() };
    let healthy = Health { healthy: true, verdict: json!(null) };
    let m = start_master(listener, me, healthy.fixed(), cfg).unwrap();
    let mut fleet = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "rendezvous::scale::scale_fleet", "--nocapture"])
        .env("SCALE_PORT", m.local_addr().port().to_string())
        .env("SCALE_N", n.to_string())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let released = m.barrier(0).await;
    let took = started.elapsed();
    eprintln!(
        "scale: {n} workers released={:?} after {took:?}; master RSS {rss_before} -> {} kB; CPU {} ticks",
        released.as_ref().map(|r| r.generation),
        proc_field("/proc/self/status", "VmRSS:"),
        cpu_ticks() - cpu_before,
    );
    // Waiting in a blocking thread keeps this runtime writing the release to every worker.
    let fleet = tokio::task::spawn_blocking(move || fleet.wait()).await;
    assert!(released.is_ok());
    assert!(fleet.is_ok_and(|status| status.is_ok_and(|s| s.success())));
}

#[tokio::test]
#[ignore]
async fn scale_fleet() {
    let Some(port) = std::env::var("SCALE_PORT").ok().and_then(|p| p.parse::<u16>().ok()) else {
        return;
    };
    let n = fleet_size();
    let dialling = std::sync::Arc::new(Semaphore::new(2000));
    let mut workers = tokio::task::JoinSet::new();
    for index in 1..=n {
        let dialling = std::sync::Arc::clone(&dialling);
        workers.spawn(async move {
            let permit = dialling.acquire_owned().await.unwrap();
            let stream = loop {
                match TcpStream::connect(("127.0.0.1", port)).await {
                    Ok(s) => break s,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            let (read, mut write) = stream.into_split();
            let hello = Frame::Hello(Hello {
                job: "scale".into(),
                replica_index: index,
                replica_count: n + 1,
                node: format!("node-{index}"),
                healthy: true,
                health: json!(null),
                nonce: "00".repeat(32),
            });
            write.write_all(&encode(&hello, DEFAULT_MAX_FRAME).unwrap()).await.unwrap();
            drop(permit);
            let mut reader = FrameReader::new(read, DEFAULT_MAX_FRAME);
            while let Ok(Some(frame)) = reader.next().await {
                if let Frame::Release { .. } = frame {
                    return (reader, write);
                }
            }
            panic!("worker {index} was not released");
        });
    }
    // Hold every connection until all are released, so the master counts them all at once.
    let mut held = Vec::new();
    while let Some(worker) = workers.join_next().await {
        held.push(worker.unwrap());
    }
    eprintln!("scale fleet: all {n} released");
}

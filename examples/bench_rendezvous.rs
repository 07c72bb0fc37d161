//! Rendezvous scale benchmark: one master (this process, on a current-thread runtime like the
//! launcher's) against N simulated workers opened by a second process (this binary re-executed
//! with `--fleet`), so the master's memory and CPU are measured alone.
//!
//! `cargo run --release --example bench_rendezvous -- N` (N replicas: the master and N-1
//! workers; default 16384). The fleet spreads its
//! source addresses over 127.0.0.0/8 so N connections to one port never exhaust ephemeral ports;
//! BENCH_DIAL bounds the dials in flight (default 2000, below the listen backlog).
//! Prints one line: `replicas=N barrier_ms=.. master_peak_rss_kb=.. master_cpu_ms=..`.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rankvisor::rendezvous::frame::{encode, Frame, Hello, DEFAULT_MAX_FRAME};
use rankvisor::rendezvous::{listen, start_master, Health, Identity, RendezvousConfig};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpSocket;
use tokio::sync::Semaphore;

fn proc_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// User plus system CPU time of this process, in milliseconds.
fn cpu_ms() -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
    ms(u.ru_utime) + ms(u.ru_stime)
}

/// One descriptor per connection: raise the limit to 2^20 when allowed (root), else the soft
/// limit to the hard one.
fn raise_nofile() {
    // SAFETY: getrlimit/setrlimit only read and write the struct given.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            let wide = libc::rlimit { rlim_cur: 1 << 20, rlim_max: (1 << 20).max(r.rlim_max) };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &wide) != 0 {
                r.rlim_cur = r.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &r);
            }
        }
    }
}

/// The soft limit on open files.
fn nofile() -> u64 {
    // SAFETY: getrlimit only writes the struct given.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return 0;
    }
    r.rlim_cur
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

fn main() {
    raise_nofile();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--fleet") {
        let port = args.get(1).and_then(|p| p.parse().ok()).expect("--fleet PORT N");
        let n = args.get(2).and_then(|p| p.parse().ok()).expect("--fleet PORT N");
        runtime().block_on(fleet(port, n));
        return;
    }
    let replicas: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(16384);
    runtime().block_on(master(replicas.max(2) - 1));
}

/// Serve the barrier of `n` workers and the master.
async fn master(n: u32) {
    if u64::from(n) + 64 > nofile() {
        eprintln!("master: {n} connections need {} file descriptors, the limit is {} (ulimit -n)", n + 64, nofile());
        std::process::exit(1);
    }
    let rss_before = proc_kb("VmRSS:");
    let cpu_before = cpu_ms();
    let listener = listen("127.0.0.1:0".parse().expect("address")).expect("listen");
    let me = Identity { job: "bench".into(), replica_index: 0, replica_count: n + 1, node: "node-0".into() };
    let cfg = RendezvousConfig { barrier_timeout: Duration::from_secs(300), ..RendezvousConfig::default() };
    let healthy = Health { healthy: true, verdict: serde_json::Value::Null };
    let m = start_master(listener, me, healthy.fixed(), cfg).expect("start master");
    let exe = std::env::current_exe().expect("own path");
    let started = Instant::now();
    let mut fleet = Command::new(exe)
        .args(["--fleet", &m.local_addr().port().to_string(), &n.to_string()])
        .spawn()
        .expect("spawn the fleet");
    // Waiting in a blocking thread keeps this runtime serving the barrier (and writing the
    // release to every worker) while the fleet runs.
    let mut fleet = tokio::task::spawn_blocking(move || fleet.wait());
    let (released, fleet) = tokio::select! {
        released = m.barrier(0) => (released, fleet.await),
        // The fleet gave up (it says why): do not wait for the barrier's timeout.
        done = &mut fleet => (Err(rankvisor::rendezvous::RendezvousError::MasterStopped), done),
    };
    let took = started.elapsed();
    let rss_after = proc_kb("VmRSS:");
    let ok = released.is_ok() && fleet.is_ok_and(|s| s.is_ok_and(|s| s.success()));
    println!(
        "replicas={} barrier_ms={} master_rss_before_kb={rss_before} master_rss_released_kb={rss_after} \
         master_peak_rss_kb={} master_cpu_ms={} ok={ok}",
        n + 1,
        took.as_millis(),
        proc_kb("VmHWM:"),
        cpu_ms() - cpu_before,
    );
    if let Err(e) = released {
        let text = e.to_string();
        eprintln!("barrier failed: {}", text.get(..300).unwrap_or(&text));
    }
    if !ok {
        std::process::exit(1);
    }
}

/// 127.1.0.1, 127.1.0.2, ...: 250 workers per third octet.
fn source(index: u32) -> SocketAddr {
    let hi = 1 + index / (250 * 256);
    let mid = (index / 250) % 256;
    let lo = 1 + index % 250;
    SocketAddr::from((Ipv4Addr::new(127, hi as u8, mid as u8, lo as u8), 0))
}

/// Open `n` worker connections, say hello, wait for every release.
async fn fleet(port: u16, n: u32) {
    let limit = nofile();
    if u64::from(n) + 64 > limit {
        eprintln!("fleet: {n} connections need {} file descriptors, the limit is {limit} (ulimit -n)", n + 64);
        std::process::exit(1);
    }
    let inflight = std::env::var("BENCH_DIAL").ok().and_then(|d| d.parse().ok()).unwrap_or(2000);
    let dialling = Arc::new(Semaphore::new(inflight));
    let master = SocketAddr::from(([127, 0, 0, 1], port));
    let mut workers = tokio::task::JoinSet::new();
    for index in 1..=n {
        let dialling = Arc::clone(&dialling);
        workers.spawn(async move {
            let permit = dialling.acquire_owned().await.map_err(|e| e.to_string())?;
            let stream = loop {
                let socket = TcpSocket::new_v4().map_err(|e| e.to_string())?;
                socket.bind(source(index)).map_err(|e| format!("bind {}: {e}", source(index)))?;
                match socket.connect(master).await {
                    Ok(s) => break s,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            let (read, mut write) = stream.into_split();
            let hello = Frame::Hello(Hello {
                job: "bench".into(),
                replica_index: index,
                replica_count: n + 1,
                node: format!("node-{index}"),
                healthy: true,
                health: serde_json::Value::Null,
                nonce: "00".repeat(32),
            });
            let line = encode(&hello, DEFAULT_MAX_FRAME).map_err(|e| e.to_string())?;
            write.write_all(&line).await.map_err(|e| e.to_string())?;
            drop(permit);
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                if let Ok(Frame::Release { .. }) = serde_json::from_str::<Frame>(&l) {
                    return Ok((lines, write));
                }
            }
            Err(format!("worker {index} was not released"))
        });
    }
    // Hold every connection until all are released, so the master counts them all at once.
    let mut held = Vec::new();
    while let Some(worker) = workers.join_next().await {
        match worker {
            Ok(Ok(w)) => held.push(w),
            Ok(Err(e)) => {
                eprintln!("fleet: {e}");
                std::process::exit(1);
            }
            Err(e) => {
                eprintln!("fleet: {e}");
                std::process::exit(1);
            }
        }
    }
}

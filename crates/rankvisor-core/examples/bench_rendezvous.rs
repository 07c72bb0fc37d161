//! Rendezvous scale benchmark: one master against N-1 simulated workers opened by fleet processes
//! (this binary re-executed with `--fleet`), so the master's memory and CPU are measured alone.
//!
//! - `bench_rendezvous N`: the library's master (this process, on a current-thread runtime like
//!   the launcher's).
//! - `bench_rendezvous --launcher BIN N`: the real launcher `BIN` as replica 0 of an N-replica job
//!   (RANK=0, WORLD_SIZE=N, MASTER_ADDR=127.0.0.1), whose child (started once the barrier released
//!   the master) waits until every worker is released; the launcher's peak RSS and CPU come from
//!   `wait4` when it exits (its whole life, the workers' disconnection included, not a sample).
//!
//! The workers are spread over BENCH_FLEETS processes (default 1), each dialling from source
//! addresses spread over 127.0.0.0/8, so N connections to one port never exhaust the ephemeral
//! ports of one source address; BENCH_DIAL bounds the dials in flight per fleet (default 2000,
//! below the listen backlog). Every process raises its open-files limit (2^20 as root).
//! The barrier time is measured by the fleets on CLOCK_MONOTONIC: from the first dial to the last
//! worker released; `dialled_ms` is when the last hello was written.
//! Prints one line: `replicas=N barrier_ms=.. dialled_ms=.. master_peak_rss_kb=.. master_cpu_ms=..`.
//! A fleet that fails names the worker and what it got last, and ends the run at once.
//! BENCH_MASTER_LOG=1: the library master's warnings (a dropped or refused worker) on stderr.
//!
//! BENCH_RESTARTS=K (with `--launcher`, one fleet): after the barrier, K job-wide restarts. The
//! launcher runs `--restart-scope job`; in round r a simulated worker faults as a real one does
//! (it asks for generation r with a `rejoin` frame), the launcher stops its own child and gathers
//! generation r, each simulated worker answers the `restart` frame with its `rejoin` at once (its
//! child's stop and start are not simulated), and the round ends when every worker got the
//! release of generation r. Printed: `restart_p50_ms`, `restart_p99_ms`, `restart_max_ms` (the
//! fault's frame written -> the last release read, CLOCK_MONOTONIC, one process).
//!
//! BENCH_CHECKPOINT=FILE with `--launcher` (and RANKVISOR_CHECKPOINT_SIGNAL=SIGUSR1): after the
//! barrier, worker 1 reports `Stopping` and each fleet appends when its workers got the master's
//! `checkpoint` frame to FILE (`checkpoint_phase`).
//!
//! - `bench_rendezvous --stacks N ROUNDS`: the job's stacks (issue 36): N-1 simulated workers in
//!   this process (a runtime of their own on another thread) answer the master's `stacks_ask` with
//!   a 24-frame summary (one of them an odd one); the master gathers and groups them ROUNDS times.
//!   Prints `stacks replicas=N round=R gather_ms=.. groups=..` per round. The workers' own snapshot
//!   (a `rankvisor-stacks` run, in parallel on their nodes) is not in it.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rankvisor_core::policy::RestartScope;
use rankvisor_core::rendezvous::frame::{encode, Frame, Hello, DEFAULT_MAX_FRAME};
use rankvisor_core::rendezvous::{listen, start_master, Health, Member, RendezvousConfig};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpSocket;
use tokio::sync::Semaphore;

/// Counts the heap bytes in use, so the bench can say what the master's state costs per replica
/// (RSS alone cannot: freed pages are reused or returned unevenly).
struct CountingAlloc;

static HEAP_IN_USE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only a counter is added.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        HEAP_IN_USE.fetch_add(layout.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's layout is passed on as is.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        HEAP_IN_USE.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: ptr came from alloc with this layout.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn heap_kb() -> usize {
    HEAP_IN_USE.load(std::sync::atomic::Ordering::Relaxed) / 1024
}

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

/// CLOCK_MONOTONIC in nanoseconds: comparable across the fleet processes.
fn mono_ns() -> u64 {
    // SAFETY: clock_gettime only writes the struct it is given.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

fn main() {
    raise_nofile();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).and_then(|p| p.parse::<u32>().ok());
    match args.first().map(String::as_str) {
        Some("--fleet") => {
            let usage = "--fleet PORT REPLICAS FIRST LAST";
            let port = arg(1).and_then(|p| u16::try_from(p).ok()).expect(usage);
            let (replicas, first, last) = (arg(2).expect(usage), arg(3).expect(usage), arg(4).expect(usage));
            runtime().block_on(fleet(port, replicas, first, last));
        }
        Some("--launcher") => {
            let bin = args.get(1).expect("--launcher BIN N");
            launcher(bin, arg(2).unwrap_or(16384).max(2));
        }
        Some("--stacks") => stacks::run(arg(1).unwrap_or(1024).max(2), arg(2).unwrap_or(5).max(1)),
        _ => {
            if std::env::var_os("BENCH_MASTER_LOG").is_some() {
                // The library master's warnings (a dropped or refused worker) on stderr.
                tracing_subscriber::fmt().with_max_level(tracing::Level::WARN).with_writer(std::io::stderr).init();
            }
            let replicas = arg(0).unwrap_or(16384);
            runtime().block_on(master(replicas.max(2) - 1));
        }
    }
}

/// The fleet processes for workers 1..replicas-1 against `port`, started at once.
fn spawn_fleets(port: u16, replicas: u32) -> Vec<std::process::Child> {
    let fleets: u32 = std::env::var("BENCH_FLEETS").ok().and_then(|d| d.parse().ok()).unwrap_or(1).max(1);
    let workers = replicas - 1;
    let per = workers.div_ceil(fleets);
    let exe = std::env::current_exe().expect("own path");
    (0..fleets)
        .map(|f| (1 + f * per, ((f + 1) * per).min(workers)))
        .filter(|(first, last)| first <= last)
        .map(|(first, last)| {
            Command::new(&exe)
                .args(["--fleet", &port.to_string(), &replicas.to_string(), &first.to_string(), &last.to_string()])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn a fleet")
        })
        .collect()
}

/// Wait for the fleets; each prints `first_dial_ns dialled_ns released_ns` (and, with
/// BENCH_RESTARTS, a second line `restarts NS...`: each round's fault -> last release). Returns the
/// barrier (first dial of any -> last release of all) and the dialling time, in ms, with the
/// restart rounds in ns, or None if one failed.
/// A fleet that fails (it says why on stderr) ends the run: the others are killed, so the master's
/// barrier, which can no longer complete, is not waited out.
fn join_fleets(mut fleets: Vec<std::process::Child>) -> Option<(u64, u64, Vec<u64>)> {
    let mut running: Vec<usize> = (0..fleets.len()).collect();
    while !running.is_empty() {
        let mut failed = false;
        running.retain(|&i| match fleets[i].try_wait().expect("wait for a fleet") {
            None => true,
            Some(status) => {
                failed |= !status.success();
                false
            }
        });
        if failed {
            for &i in &running {
                let _ = fleets[i].kill();
            }
            for f in fleets {
                let _ = f.wait_with_output();
            }
            return None;
        }
        if !running.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut stamps = Vec::new();
    let mut restarts = Vec::new();
    let mut ok = true;
    for f in fleets {
        let out = f.wait_with_output().expect("wait for a fleet");
        ok &= out.status.success();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        let v: Vec<u64> = lines.next().unwrap_or("").split_whitespace().filter_map(|w| w.parse().ok()).collect();
        if v.len() == 3 {
            stamps.push((v[0], v[1], v[2]));
        } else {
            ok = false;
        }
        if let Some(r) = lines.next().and_then(|l| l.strip_prefix("restarts")) {
            restarts.extend(r.split_whitespace().filter_map(|w| w.parse::<u64>().ok()));
        }
    }
    let first = stamps.iter().map(|s| s.0).min()?;
    let dialled = stamps.iter().map(|s| s.1).max()?;
    let released = stamps.iter().map(|s| s.2).max()?;
    ok.then(|| ((released - first) / 1_000_000, (dialled - first) / 1_000_000, restarts))
}

/// Is anything listening on `port` (any IPv4 address)? Read from /proc/net/tcp: no probe connection.
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/tcp").unwrap_or_default().lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
    })
}

/// BENCH_RESTARTS: the job-wide restarts to measure after the barrier (0: none).
fn restarts() -> u64 {
    std::env::var("BENCH_RESTARTS").ok().and_then(|r| r.parse().ok()).unwrap_or(0)
}

/// ` restarts=K restart_p50_ms=.. restart_p99_ms=.. restart_max_ms=..`, or nothing without rounds.
fn restart_summary(rounds_ns: &[u64]) -> String {
    if rounds_ns.is_empty() {
        return String::new();
    }
    let mut ms: Vec<f64> = rounds_ns.iter().map(|&n| n as f64 / 1e6).collect();
    ms.sort_by(f64::total_cmp);
    let pct = |q: f64| ms[((q * (ms.len() - 1) as f64).round() as usize).min(ms.len() - 1)];
    format!(
        " restarts={} restart_p50_ms={:.1} restart_p99_ms={:.1} restart_max_ms={:.1}",
        ms.len(),
        pct(0.5),
        pct(0.99),
        ms[ms.len() - 1]
    )
}

/// The real launcher as replica 0 of an N-replica job.
#[expect(clippy::zombie_processes, reason = "the launcher is reaped by wait4, which also gives its rusage")]
fn launcher(bin: &str, replicas: u32) {
    if u64::from(replicas) + 64 > nofile() {
        eprintln!(
            "launcher: {replicas} connections need {} file descriptors, the limit is {}",
            replicas + 64,
            nofile()
        );
        std::process::exit(1);
    }
    if restarts() > 0 && std::env::var("BENCH_FLEETS").is_ok_and(|f| f != "1") {
        eprintln!(
            "launcher: BENCH_RESTARTS needs one fleet (BENCH_FLEETS=1): a round waits for every worker's release"
        );
        std::process::exit(1);
    }
    // Below the ephemeral range (32768 and up), so no fleet socket of an earlier run (in TIME_WAIT)
    // holds it; MASTER_PORT itself is not opened by the launcher.
    let port = 20_001 + (std::process::id() % 10_000) as u16;
    // The launcher's child waits on a FIFO until every worker was released: the master's release
    // frames are written after its own child starts, and a launcher whose child is already done
    // would exit (and close the connections) before they all went out.
    let fifo = std::env::temp_dir().join(format!("bench-rendezvous-{}.fifo", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    let c_fifo = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("a path without NUL");
    // SAFETY: mkfifo reads the NUL-terminated path it is given.
    assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0, "mkfifo {}", fifo.display());
    let log = std::env::var("BENCH_LAUNCHER_LOG").unwrap_or_else(|_| "/dev/null".into());
    let log = std::fs::File::create(&log).expect("the launcher's log file");
    let mut child = Command::new(bin)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs([
            ("RANK", "0".to_string()),
            ("PET_NODE_RANK", "0".to_string()),
            ("WORLD_SIZE", replicas.to_string()),
            ("PET_NNODES", replicas.to_string()),
            ("MASTER_ADDR", "127.0.0.1".to_string()),
            ("MASTER_PORT", (port - 1).to_string()),
        ])
        // RANKVISOR_* from the bench's environment (e.g. RANKVISOR_LOG_LEVEL=warn) reach the launcher.
        .envs(std::env::vars().filter(|(k, _)| k.starts_with("RANKVISOR_")))
        .args(["--job-name", "bench", "--http-addr", "off", "--node-health", "off", "--kube-events", "off"])
        // The child ignores SIGUSR1: BENCH_CHECKPOINT runs the launcher with --checkpoint-signal SIGUSR1.
        .args(["--rendezvous-timeout", "5m"])
        .args(if restarts() > 0 {
            &["--restart-scope", "job", "--restart-policy", "OnFailure", "--backoff-limit", "1000000"][..]
        } else {
            &["--restart-policy", "Never"][..]
        })
        .args(["--", "/bin/sh", "-c", "trap '' USR1; read _ < \"$0\""])
        .arg(&fifo)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn the launcher");
    let pid = child.id() as libc::pid_t;
    let t = Instant::now();
    while !listening(port) {
        if t.elapsed() > Duration::from_secs(30) || child.try_wait().ok().flatten().is_some() {
            eprintln!("launcher: not listening on port {port} (MASTER_PORT+1) after {:?}", t.elapsed());
            let _ = child.kill();
            let _ = child.wait();
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let barrier = join_fleets(spawn_fleets(port, replicas));
    let restart_figures = barrier.as_ref().map(|(_, _, r)| restart_summary(r)).unwrap_or_default();
    if barrier.is_none() {
        // A fleet failed: the barrier will not complete; stop the launcher instead of waiting out
        // its rendezvous timeout.
        // SAFETY: kill sends a signal to our own child, not reaped yet.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    // Let the launcher's child end. Nothing reads the FIFO (ENXIO) while the child of the last
    // generation is still starting, or if the child never started: tried again for up to 10 s
    // while the launcher runs.
    let opened = Instant::now();
    loop {
        // SAFETY: open gets a valid NUL-terminated path.
        let fd = unsafe { libc::open(c_fifo.as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK) };
        if fd >= 0 {
            // SAFETY: write reads one byte of a valid buffer; the descriptor is ours and closed here.
            unsafe {
                libc::write(fd, b"\n".as_ptr().cast(), 1);
                libc::close(fd);
            }
            break;
        }
        // Has the launcher exited? WNOWAIT leaves it to wait4 below.
        // SAFETY: waitid writes the siginfo it is given, about our own child.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let rc = unsafe {
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT)
        };
        // SAFETY: si_pid is set by waitid (0 when the child has not changed state).
        let exited = rc != 0 || unsafe { info.si_pid() } != 0;
        if opened.elapsed() > Duration::from_secs(10) || barrier.is_none() || exited {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_file(&fifo);
    // The launcher's own peak RSS and CPU over its whole life, from the kernel when it is reaped.
    let mut status = 0;
    // SAFETY: wait4 writes the status and the rusage it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; pid is our child, not reaped yet.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let code = if reaped == pid && libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 };
    let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
    let (barrier_ms, dialled_ms) =
        barrier.as_ref().map_or(("failed".to_string(), "-".to_string()), |(b, d, _)| (b.to_string(), d.to_string()));
    println!(
        "replicas={replicas} barrier_ms={barrier_ms} dialled_ms={dialled_ms} launcher_peak_rss_kb={} launcher_cpu_ms={} launcher_exit={code}{restart_figures}",
        usage.ru_maxrss,
        ms(usage.ru_utime) + ms(usage.ru_stime),
    );
    if barrier.is_none() {
        std::process::exit(1);
    }
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
    let me = Member { job: "bench".into(), replica_index: 0, replica_count: n + 1, node: "node-0".into() };
    let cfg = RendezvousConfig { barrier_timeout: Duration::from_secs(300), ..RendezvousConfig::default() };
    let healthy = Health::from(rankvisor_core::rendezvous::NodeHealth::Off);
    let (m, _events) = start_master(listener, me, healthy.fixed(), cfg, RestartScope::Job).expect("start master");
    let started = Instant::now();
    let port = m.local_addr().port();
    // Waiting in a blocking thread keeps this runtime serving the barrier (and writing the
    // release to every worker) while the fleets run.
    let mut fleets = tokio::task::spawn_blocking(move || join_fleets(spawn_fleets(port, n + 1)));
    let (released, fleet) = tokio::select! {
        released = m.barrier(0) => (released, fleets.await),
        // A fleet gave up (it says why): do not wait for the barrier's timeout.
        done = &mut fleets => (Err(rankvisor_core::rendezvous::RendezvousError::MasterStopped), done),
    };
    let took = started.elapsed();
    let rss_after = proc_kb("VmRSS:");
    // The heap the master holds once released, and what one snapshot of the job view adds (the
    // launcher publishes such copies for /job).
    let heap_released_kb = heap_kb();
    let copy = m.job_view();
    let view_copy_kb = heap_kb().saturating_sub(heap_released_kb);
    drop(copy);
    let fleet = fleet.ok().flatten();
    let ok = released.is_ok() && fleet.is_some();
    println!(
        "replicas={} barrier_ms={} fleet_barrier_ms={} master_rss_before_kb={rss_before} master_rss_released_kb={rss_after} \
         master_peak_rss_kb={} master_cpu_ms={} heap_released_kb={heap_released_kb} job_view_copy_kb={view_copy_kb} ok={ok}",
        n + 1,
        took.as_millis(),
        fleet.map_or("-".to_string(), |(b, _, _)| b.to_string()),
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

/// IP_BIND_ADDRESS_NO_PORT: bind the address now, the port at `connect`.
fn no_port_at_bind(socket: &TcpSocket) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads an int of the given size from a valid pointer, on our own socket.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("setsockopt(IP_BIND_ADDRESS_NO_PORT): {}", std::io::Error::last_os_error()))
    }
}

/// 127.1.0.1, 127.1.0.2, ...: 250 workers per third octet.
fn source(index: u32) -> SocketAddr {
    let hi = 1 + index / (250 * 256);
    let mid = (index / 250) % 256;
    let lo = 1 + index % 250;
    SocketAddr::from((Ipv4Addr::new(127, hi as u8, mid as u8, lo as u8), 0))
}

/// Open the connections of workers `first..=last` of a `replicas`-replica job, say hello, wait
/// for every release; print `first_dial_ns dialled_ns released_ns` (CLOCK_MONOTONIC) and exit at
/// once (closing thousands of sockets one by one is not part of the barrier).
async fn fleet(port: u16, replicas: u32, first: u32, last: u32) {
    let n = last + 1 - first;
    let limit = nofile();
    if u64::from(n) + 64 > limit {
        eprintln!("fleet: {n} connections need {} file descriptors, the limit is {limit} (ulimit -n)", n + 64);
        std::process::exit(1);
    }
    let inflight = std::env::var("BENCH_DIAL").ok().and_then(|d| d.parse().ok()).unwrap_or(2000);
    let dialling = Arc::new(Semaphore::new(inflight));
    let master = SocketAddr::from(([127, 0, 0, 1], port));
    let started = mono_ns();
    let dialled = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for index in first..=last {
        let dialling = Arc::clone(&dialling);
        let dialled = Arc::clone(&dialled);
        workers.spawn(async move {
            let permit = dialling.acquire_owned().await.map_err(|e| e.to_string())?;
            let stream = loop {
                let socket = TcpSocket::new_v4().map_err(|e| e.to_string())?;
                // The port is chosen by `connect`, for the whole 4-tuple: `bind` with port 0 would
                // search the ports for one no other socket of any address holds, a cost that grows
                // with the fleet (workers on their own nodes never pay it).
                no_port_at_bind(&socket)?;
                socket.bind(source(index)).map_err(|e| format!("bind {}: {e}", source(index)))?;
                match socket.connect(master).await {
                    Ok(s) => break s,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            let (read, mut write) = stream.into_split();
            write.write_all(&hello(replicas, index)?).await.map_err(|e| e.to_string())?;
            dialled.fetch_max(mono_ns(), std::sync::atomic::Ordering::Relaxed);
            drop(permit);
            let mut lines = BufReader::new(read).lines();
            let mut last = "the master closed the connection".to_string();
            loop {
                let l = match lines.next_line().await {
                    Ok(Some(l)) => l,
                    Ok(None) => break,
                    Err(e) => {
                        last = format!("read: {e}");
                        break;
                    }
                };
                match serde_json::from_str::<Frame>(&l) {
                    Ok(Frame::Release { .. }) => return Ok((lines, write)),
                    // A worker that waits long (a join of many thousands on a slow machine) shows
                    // it is alive, as a real one does, or the master drops it for silence (15 s).
                    Ok(Frame::Heartbeat) => {
                        let beat = encode(&Frame::Heartbeat, DEFAULT_MAX_FRAME).map_err(|e| e.to_string())?;
                        write.write_all(&beat).await.map_err(|e| e.to_string())?;
                    }
                    _ => last = format!("last frame {:?}", l.get(..200).unwrap_or(&l)),
                }
            }
            Err(format!("worker {index} was not released: {last}"))
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
    // Either phase takes the held connections: BENCH_CHECKPOINT's, else BENCH_RESTARTS'.
    let mut held = Some(held);
    if let Some(out) = std::env::var_os("BENCH_CHECKPOINT") {
        checkpoint_phase(held.take().unwrap_or_default(), first, std::path::Path::new(&out)).await;
    }
    println!("{started} {} {}", dialled.load(std::sync::atomic::Ordering::Relaxed), mono_ns());
    if let Some(held) = held.filter(|_| restarts() > 0) {
        match restart_rounds(held, restarts()).await {
            Ok(rounds) => println!("restarts {}", rounds.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")),
            Err(e) => {
                eprintln!("fleet: {e}");
                std::process::exit(1);
            }
        }
    }
    std::process::exit(0);
}

async fn send_frame(w: &mut tokio::net::tcp::OwnedWriteHalf, frame: &Frame) -> Result<(), String> {
    let line = encode(frame, DEFAULT_MAX_FRAME).map_err(|e| e.to_string())?;
    w.write_all(&line).await.map_err(|e| e.to_string())
}

/// A released worker: its connection's lines and write half.
type Held = (tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>, tokio::net::tcp::OwnedWriteHalf);

/// `rounds` job-wide restarts: in round r the first worker asks for generation r as a faulted
/// replica does; each round's time is that frame written -> the last worker's release read (ns).
async fn restart_rounds(held: Vec<Held>, rounds: u64) -> Result<Vec<u64>, String> {
    let n = held.len();
    let (released, mut news) = tokio::sync::mpsc::unbounded_channel();
    let mut victim = None;
    for (lines, write) in held {
        let (fault, faults) = tokio::sync::mpsc::unbounded_channel();
        victim.get_or_insert(fault);
        tokio::spawn(follow(lines, write, faults, released.clone(), rounds));
    }
    drop(released);
    let victim = victim.ok_or("no worker to fault")?;
    let mut took = Vec::new();
    for g in 1..=rounds {
        let (tx, rx) = tokio::sync::oneshot::channel();
        victim.send((g, tx)).map_err(|_| format!("round {g}: the faulting worker is gone"))?;
        let fault = rx.await.map_err(|_| format!("round {g}: the faulting worker is gone"))?;
        let (mut got, mut last) = (0, 0);
        while got < n {
            let next = tokio::time::timeout(Duration::from_secs(60), news.recv()).await;
            match next {
                Ok(Some(Ok((generation, at)))) if generation == g => (got, last) = (got + 1, at.max(last)),
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(e))) => return Err(e),
                Ok(None) | Err(_) => return Err(format!("round {g}: {got} of {n} workers released within 60 s")),
            }
        }
        took.push(last - fault);
    }
    Ok(took)
}

/// One released worker through the restart rounds: rejoins when told to fault (answering when its
/// frame is written) or when ordered to restart, reports each release; ends after the last round.
async fn follow(
    mut lines: tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
    mut write: tokio::net::tcp::OwnedWriteHalf,
    mut faults: tokio::sync::mpsc::UnboundedReceiver<(u64, tokio::sync::oneshot::Sender<u64>)>,
    released: tokio::sync::mpsc::UnboundedSender<Result<(u64, u64), String>>,
    rounds: u64,
) {
    let mut asked = 0;
    loop {
        let result = tokio::select! {
            Some((g, written)) = faults.recv() => {
                asked = g;
                let r = send_frame(&mut write, &Frame::Rejoin { generation: g }).await;
                let _ = written.send(mono_ns());
                r
            }
            line = lines.next_line() => match line {
                Ok(Some(l)) => match serde_json::from_str::<Frame>(&l) {
                    Ok(Frame::Restart { generation }) if generation > asked => {
                        asked = generation;
                        send_frame(&mut write, &Frame::Rejoin { generation }).await
                    }
                    Ok(Frame::Release { generation }) => {
                        let _ = released.send(Ok((generation, mono_ns())));
                        if generation >= rounds {
                            return;
                        }
                        Ok(())
                    }
                    Ok(Frame::Heartbeat) => send_frame(&mut write, &Frame::Heartbeat).await,
                    Ok(Frame::Error { message }) => Err(format!("the master said: {message}")),
                    _ => Ok(()),
                },
                Ok(None) => Err("the master closed the connection".to_string()),
                Err(e) => Err(format!("read: {e}")),
            },
        };
        if let Err(e) = result {
            let _ = released.send(Err(e));
            return;
        }
    }
}

/// BENCH_CHECKPOINT=FILE (the launcher run with `--checkpoint-signal`): once released, worker 1
/// (in the first fleet) reports `Stopping`, as a preempted replica does, and every worker of the
/// fleet waits for the master's `checkpoint` frame. Appends `stop_ns first_ns last_ns count`
/// (CLOCK_MONOTONIC; stop_ns 0 in the other fleets) to FILE.
async fn checkpoint_phase(held: Vec<Held>, first: u32, out: &std::path::Path) {
    use rankvisor_core::status::{Identity, LocalStatus, ReplicaState, Timeline};
    let mut writers = Vec::new();
    let mut waiting = tokio::task::JoinSet::new();
    for (mut lines, write) in held {
        writers.push(write);
        waiting.spawn(async move {
            while let Ok(Some(l)) = lines.next_line().await {
                if let Ok(Frame::Checkpoint { .. }) = serde_json::from_str::<Frame>(&l) {
                    return Some(mono_ns());
                }
            }
            None
        });
    }
    let mut stop_ns = 0;
    if first == 1 {
        let id = Identity { job: Some("bench".into()), rank: Some(1), ..Identity::default() };
        let status = LocalStatus { state: ReplicaState::Stopping, ..LocalStatus::default() };
        let report = Timeline::new(std::time::UNIX_EPOCH).report(&id, &status, std::time::SystemTime::now());
        let line = encode(&Frame::State(Box::new(report)), DEFAULT_MAX_FRAME).expect("a state frame");
        stop_ns = mono_ns();
        writers[0].write_all(&line).await.expect("write the stopping state");
    }
    let mut got = Vec::new();
    let all = async {
        while let Some(r) = waiting.join_next().await {
            got.extend(r.ok().flatten());
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), all).await.is_err() {
        eprintln!(
            "fleet: {} of {} workers got no checkpoint frame within 30 s",
            writers.len() - got.len(),
            writers.len()
        );
    }
    let (lo, hi) = (got.iter().min().copied().unwrap_or(0), got.iter().max().copied().unwrap_or(0));
    let line = format!("{stop_ns} {lo} {hi} {}\n", got.len());
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(out).expect("the checkpoint figures' file");
    std::io::Write::write_all(&mut f, line.as_bytes()).expect("write the checkpoint figures");
}

/// Simulated replica `index`'s hello to the master of a job of `replicas`, encoded.
fn hello(replicas: u32, index: u32) -> Result<Vec<u8>, String> {
    let hello = Frame::Hello(Hello {
        job: "bench".into(),
        replica_index: index,
        replica_count: replicas,
        node: format!("node-{index}"),
        healthy: true,
        health: rankvisor_core::rendezvous::NodeHealth::Off,
        nonce: "00".repeat(32),
    });
    encode(&hello, DEFAULT_MAX_FRAME).map_err(|e| e.to_string())
}

/// `--stacks N ROUNDS`: the master's gathering of the job's stacks from N-1 simulated workers.
mod stacks {
    use super::{hello, raise_nofile, runtime};
    use rankvisor_core::policy::RestartScope;
    use rankvisor_core::rendezvous::frame::{encode, Frame, DEFAULT_MAX_FRAME};
    use rankvisor_core::rendezvous::{listen, start_master, Health, Member, NodeHealth, RendezvousConfig};
    use rankvisor_core::stacks::StacksSummary;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    /// A summary as a training process waiting in a collective would give, 24 frames deep.
    fn summary(odd: bool) -> StacksSummary {
        let mut frames: Vec<String> = (0..22).map(|i| format!("layer_{i} (model.py:{})", 100 + i)).collect();
        let top = if odd { "slow_here (train.py:40)" } else { "all_reduce (distributed_c10d.py:2501)" };
        frames.insert(0, top.to_string());
        frames.push("<module> (train.py:120)".into());
        StacksSummary {
            taken_at: "2026-12-04T10:00:00.000000Z".into(),
            why: "asked".into(),
            pid: Some(42),
            top: format!("pid 42 in {top}"),
            frames,
        }
    }

    /// One simulated worker: join, then answer every `stacks_ask` until the master closes.
    async fn worker(port: u16, replicas: u32, index: u32) -> Result<(), String> {
        let stream = loop {
            match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                Ok(s) => break s,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let (read, mut write) = stream.into_split();
        write.write_all(&hello(replicas, index)?).await.map_err(|e| e.to_string())?;
        let mine = summary(index == replicas / 2);
        let mut lines = BufReader::new(read).lines();
        while let Some(l) = lines.next_line().await.map_err(|e| e.to_string())? {
            let reply = match serde_json::from_str::<Frame>(&l) {
                Ok(Frame::StacksAsk { id }) => Frame::Stacks { id, summary: mine.clone() },
                Ok(Frame::Heartbeat) => Frame::Heartbeat,
                _ => continue,
            };
            write
                .write_all(&encode(&reply, DEFAULT_MAX_FRAME).map_err(|e| e.to_string())?)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    pub(super) fn run(replicas: u32, rounds: u32) {
        raise_nofile();
        runtime().block_on(async move {
            let listener = listen("127.0.0.1:0".parse().expect("address")).expect("listen");
            let me = Member { job: "bench".into(), replica_index: 0, replica_count: replicas, node: "node-0".into() };
            let cfg = RendezvousConfig { barrier_timeout: Duration::from_secs(120), ..RendezvousConfig::default() };
            let health = Health::from(NodeHealth::Off).fixed();
            let (m, _events) = start_master(listener, me, health, cfg, RestartScope::Job).expect("start master");
            let port = m.local_addr().port();
            std::thread::spawn(move || {
                runtime().block_on(async move {
                    let mut all = tokio::task::JoinSet::new();
                    for index in 1..replicas {
                        all.spawn(worker(port, replicas, index));
                    }
                    while let Some(w) = all.join_next().await {
                        if let Ok(Err(e)) = w {
                            eprintln!("stacks bench: a worker failed: {e}");
                        }
                    }
                })
            });
            m.barrier(0).await.expect("the barrier");
            let own: rankvisor_core::rendezvous::StacksAnswerer =
                Arc::new(|| Box::pin(async { summary(false) }));
            for round in 1..=rounds {
                let started = Instant::now();
                let job = rankvisor_core::replica::job_stacks::gather(&m, &own, "bench").await;
                let took = started.elapsed().as_millis();
                let answered = job.replicas.iter().filter(|(_, s)| s.pid.is_some()).count();
                println!(
                    "stacks replicas={replicas} round={round} gather_ms={took} answered={answered} groups={} summary={:?}",
                    job.groups.len(),
                    job.summary.get(..120).unwrap_or(&job.summary)
                );
            }
        });
        std::process::exit(0);
    }
}

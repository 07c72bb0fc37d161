//! Loopback ports for the servers a test starts (rankvisor's HTTP endpoint, a master's rendezvous,
//! an apiserver), free of collisions between test processes that nextest runs in parallel.
//!
//! "Bind port 0, read the port, drop the listener" is racy: between the drop and the server's own
//! bind, any other process may be handed the same port by the kernel. Here a port is only handed out
//! under an exclusive `flock` on `/tmp/rankvisor-test-ports/<port>.lock`, held until this test process
//! exits (the kernel drops it even on a crash), so no two test processes ever get the same port.
//! Ports come from below the kernel's ephemeral range (`ip_local_port_range`), so neither a `bind(0)`
//! nor the source port of an outgoing connection, from any process, can take one; a port some
//! unrelated server already listens on is skipped by a bind probe.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Mutex;

/// The locks of every port this process was handed: kept open until it exits.
static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// The lowest port handed out (below it: well-known and registered services).
const LOWEST: u16 = 20000;

fn lock_dir() -> PathBuf {
    let dir = std::env::temp_dir().join("rankvisor-test-ports");
    std::fs::create_dir_all(&dir).expect("create the port lock directory");
    dir
}

/// The ports a test may hand out: from `LOWEST` up to the start of the ephemeral range (or, when
/// that range starts too low, from its end up to 65535).
fn range() -> std::ops::Range<u32> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut bounds = text.split_whitespace().filter_map(|n| n.parse::<u32>().ok());
    let (low, high) = (bounds.next().unwrap_or(32768), bounds.next().unwrap_or(60999));
    if low >= u32::from(LOWEST) + 2000 {
        u32::from(LOWEST)..low
    } else {
        (high + 1)..65536
    }
}

/// An exclusive, non-blocking lock on `port`'s lock file, or None when another process holds it.
fn lock(port: u32) -> Option<File> {
    let path = lock_dir().join(format!("{port}.lock"));
    let file = OpenOptions::new().create(true).truncate(false).write(true).open(&path).ok()?;
    // SAFETY: flock(2) on a descriptor we own; no memory is involved.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    (r == 0).then_some(file)
}

/// True when nothing listens on `port` (any address).
fn bindable(port: u32) -> bool {
    let Ok(port) = u16::try_from(port) else { return false };
    std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// `n` consecutive ports, locked for the rest of this process's life.
pub fn consecutive_ports(n: u32) -> u16 {
    let range = range();
    let span = range.end - range.start - n;
    // Start each process somewhere else, so parallel tests rarely contend for the same lock files.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    let seed = std::process::id().wrapping_mul(7919).wrapping_add(nanos);
    for i in 0..span {
        let first = range.start + (seed.wrapping_add(i) % span);
        let locks: Vec<File> = (first..first + n).map_while(lock).collect();
        if locks.len() as u32 == n && (first..first + n).all(bindable) {
            HELD.lock().unwrap_or_else(|e| e.into_inner()).extend(locks);
            return first as u16;
        }
    }
    panic!("no {n} consecutive free loopback ports in {range:?} (locks in {})", lock_dir().display());
}

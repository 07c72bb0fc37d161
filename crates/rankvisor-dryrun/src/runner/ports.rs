//! MASTER_PORT for a local run: the manifest's if it (and the next port, the rendezvous's) is
//! free, else a free pair below the kernel's ephemeral range.

use crate::kubelet::launch::DRY_RUN_MASTER_ADDR;

/// MASTER_PORT for the replicas, and a note when it is not the one asked for.
pub(super) fn choose_master_port(manifest_port: u16, explicit: Option<u16>) -> Result<(u16, Option<String>), String> {
    match explicit {
        Some(0) => free_port().map(|p| (p, None)),
        Some(p) => Ok((p, None)),
        None if port_pair_free(manifest_port) => Ok((manifest_port, None)),
        None => {
            let p = free_port()?;
            let why = format!(
                "MASTER_PORT {manifest_port} (or {}, the rendezvous port) is in use on {DRY_RUN_MASTER_ADDR}: the replicas get MASTER_PORT={p} instead",
                u32::from(manifest_port) + 1
            );
            Ok((p, Some(why)))
        }
    }
}

/// Whether `port` (torch's store) and `port + 1` (rankvisor's rendezvous) can be bound locally.
fn port_pair_free(port: u16) -> bool {
    let free = |p: u16| std::net::TcpListener::bind((DRY_RUN_MASTER_ADDR, p)).is_ok();
    port.checked_add(1).is_some_and(|next| free(port) && free(next))
}

/// Below the usual ephemeral range (32768-60999), where a free pair is searched when the kernel's
/// ephemeral ports come without a free successor.
const PORT_SEARCH: std::ops::Range<u16> = 20000..32000;

/// A port whose successor is free too: a kernel-chosen one if possible, else one searched below
/// the ephemeral range (some systems hand out ephemeral ports whose neighbours are taken).
fn free_port() -> Result<u16, String> {
    // Never a port from the kernel's ephemeral range (what bind(0) hands out): clients that keep
    // dialling a store that is not listening yet (torch's TCPStore between generations) can be
    // given that very port as their own source port and connect to themselves, and then the
    // store cannot bind it. Real jobs use 23456, below that range; so does this search. Start at
    // a per-process, per-moment offset so concurrent dry runs do not all try the same ports.
    let span = PORT_SEARCH.end - PORT_SEARCH.start;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let offset = ((std::process::id() ^ nanos) % u32::from(span / 2)) as u16 * 2;
    (0..span / 2)
        .map(|i| PORT_SEARCH.start + (offset + i * 2) % span)
        .find(|p| port_pair_free(*p))
        .ok_or_else(|| format!("no two consecutive free ports found on {DRY_RUN_MASTER_ADDR} in {PORT_SEARCH:?}"))
}

/// A port for a listener a child binds later (a HyperPod pod's agent): below the ephemeral range,
/// as the master's (a bind(0) port may meanwhile be any outgoing connection's source port: seen
/// with 256 agents, one of which then could not listen), bindable now and not `taken`; searched
/// from `*next` on, which moves past it. None if the whole range is in use.
pub(super) fn free_listen_port(next: &mut u16, taken: impl Fn(u16) -> bool) -> Option<u16> {
    let span = PORT_SEARCH.end - PORT_SEARCH.start;
    let bindable = |p: u16| std::net::TcpListener::bind((DRY_RUN_MASTER_ADDR, p)).is_ok();
    for _ in 0..span {
        let p = PORT_SEARCH.start + (next.wrapping_sub(PORT_SEARCH.start)) % span;
        *next = p + 1;
        if !taken(p) && bindable(p) {
            return Some(p);
        }
    }
    None
}

/// Where a run's [`free_listen_port`] search starts: a per-process, per-moment offset, so
/// concurrent dry runs do not all try the same ports.
pub(super) fn listen_port_start() -> u16 {
    let span = u32::from(PORT_SEARCH.end - PORT_SEARCH.start);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    PORT_SEARCH.start + ((std::process::id().wrapping_mul(7919) ^ nanos) % span) as u16
}

/// A port the kernel just gave out on loopback (free now; a launcher binds it right after).
pub(super) fn free_loopback_port() -> Option<u16> {
    let listener = std::net::TcpListener::bind((DRY_RUN_MASTER_ADDR, 0)).ok()?;
    listener.local_addr().ok().map(|a| a.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_ports_are_below_the_ephemeral_range_distinct_and_never_taken_ones() {
        let mut next = PORT_SEARCH.end - 1;
        let first = free_listen_port(&mut next, |_| false).unwrap();
        assert!(PORT_SEARCH.contains(&first));
        let second = free_listen_port(&mut next, |p| p == first).unwrap();
        assert_ne!(first, second);
        assert!(PORT_SEARCH.contains(&second), "the search wraps round");
        assert_eq!(free_listen_port(&mut next, |_| true), None, "all taken: none");
    }

    #[test]
    fn a_busy_master_port_is_replaced_and_said() {
        let busy = std::net::TcpListener::bind((DRY_RUN_MASTER_ADDR, 0)).unwrap();
        let port = busy.local_addr().unwrap().port();
        let (chosen, why) = choose_master_port(port, None).unwrap();
        assert_ne!(chosen, port);
        let why = why.unwrap();
        assert!(
            why.contains(&format!("MASTER_PORT {port}")) && why.contains(&format!("MASTER_PORT={chosen}")),
            "{why}"
        );
        assert_eq!(choose_master_port(port, Some(port)).unwrap(), (port, None), "an explicit port is kept");
        let (any, why) = choose_master_port(port, Some(0)).unwrap();
        assert!(any != 0 && why.is_none());
    }
}

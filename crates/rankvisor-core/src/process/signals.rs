//! Signals: blocked in every thread before the runtime starts, then read from a signalfd.
//!
//! A PID 1 only receives signals it handles or blocks (the kernel drops default-disposition signals
//! sent to init). Blocking everything and reading a signalfd gives one ordered stream of TERM, INT,
//! CHLD and the rest, with no handler running at an arbitrary point.

use crate::signo::Signo;
use nix::sys::signal::{SigSet, SigmaskHow};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;
use std::io;
use tokio::io::unix::AsyncFd;

// Every signal is blocked, the synchronous ones (SEGV, BUS, FPE, ILL, TRAP, ABRT, SYS) included:
// a real fault of rankvisor's own is forced on it by the kernel, blocked or not (and `abort`
// unblocks SIGABRT itself), so it still kills rankvisor; the same signals *sent* by another
// process queue on the signalfd instead of killing rankvisor and orphaning the child, and are
// forwarded to the child as dumb-init does.

/// The masks around the block: what to read from the signalfd, and what to give the child back.
#[derive(Clone)]
pub struct Signals {
    /// Every signal now blocked (and read from the signalfd).
    pub blocked: SigSet,
    /// The mask rankvisor inherited, restored in the child before exec.
    pub original: SigSet,
    /// The signals rankvisor inherited ignored (SIG_IGN), read once at start: the only ones the
    /// child must get back to SIG_DFL, since `exec` keeps SIG_IGN and resets every caught signal
    /// itself. rankvisor never ignores a signal after that (the SIG_IGN of SIGPIPE that Rust's
    /// runtime sets happens before `main`, so it is in this set).
    pub ignored: SignalMask,
}

/// A set of the signals 1..=64 (Linux's range on every architecture rankvisor builds for), bit
/// `sig - 1` as in the kernel's `sigset_t` and `/proc/PID/status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SignalMask(pub u64);

impl SignalMask {
    /// The set with `sigs` in it (numbers outside 1..=64 are left out).
    pub fn of(sigs: &[i32]) -> Self {
        sigs.iter().fold(Self(0), |m, &s| m.with(s))
    }

    /// This set plus `sig` (unchanged when `sig` is outside 1..=64).
    pub fn with(self, sig: i32) -> Self {
        if (1..=64).contains(&sig) {
            Self(self.0 | 1 << (sig - 1))
        } else {
            self
        }
    }

    /// This set without `sig`.
    pub fn without(self, sig: i32) -> Self {
        if (1..=64).contains(&sig) {
            Self(self.0 & !(1 << (sig - 1)))
        } else {
            self
        }
    }

    /// Whether `sig` is in the set.
    pub fn contains(self, sig: i32) -> bool {
        (1..=64).contains(&sig) && self.0 & (1 << (sig - 1)) != 0
    }

    /// The signal numbers in the set, ascending.
    pub fn iter(self) -> impl Iterator<Item = i32> {
        (1..=64).filter(move |&s| self.contains(s))
    }

    /// True when no signal is in the set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// The `SigIgn:` mask of a `/proc/PID/status` text, None when the line is missing, cut off (no
/// newline after it yet) or malformed.
pub fn parse_sig_ign(status: &[u8]) -> Option<SignalMask> {
    let whole_lines = &status[..status.iter().rposition(|&b| b == b'\n')? + 1];
    let line = whole_lines.split(|&b| b == b'\n').find_map(|l| l.strip_prefix(b"SigIgn:"))?;
    let hex = std::str::from_utf8(line).ok()?.trim();
    if hex.is_empty() || hex.len() > 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok().map(SignalMask)
}

/// The signals now ignored in this process: /proc/self/status's SigIgn (read into a buffer on the
/// stack until the line is whole: usually one read), else one `rt_sigaction` query per signal.
fn ignored_now() -> SignalMask {
    use std::io::Read;
    let mut buf = [0u8; 4096];
    let mut len = 0;
    if let Ok(mut f) = std::fs::File::open("/proc/self/status") {
        while len < buf.len() {
            match f.read(&mut buf[len..]) {
                Ok(0) => break,
                Ok(n) => {
                    len += n;
                    if let Some(mask) = parse_sig_ign(&buf[..len]) {
                        return mask;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    }
    parse_sig_ign(&buf[..len]).unwrap_or_else(ignored_by_query)
}

/// No /proc (or a status text without SigIgn): ask the kernel signal by signal, with the raw
/// syscall so that glibc's reserved 32 and 33 are asked too.
fn ignored_by_query() -> SignalMask {
    let mut mask = SignalMask::default();
    for sig in 1..=64 {
        // The kernel's struct sigaction: handler, flags, restorer, mask (8 bytes on 64-bit).
        let mut old = [0usize; 4];
        // SAFETY: a query (no new action) writes only `old`, which is as large as the kernel's struct.
        let r =
            unsafe { libc::syscall(libc::SYS_rt_sigaction, sig, std::ptr::null::<usize>(), old.as_mut_ptr(), 8usize) };
        if r == 0 && old[0] == libc::SIG_IGN {
            mask = mask.with(sig);
        }
    }
    mask
}

/// Block every asynchronous signal in the calling thread. Call before any thread exists so every
/// thread (the tokio runtime's included) inherits the mask.
pub fn block_signals() -> io::Result<Signals> {
    // An inherited SIG_IGN for SIGCHLD makes the kernel reap children itself and send no SIGCHLD:
    // the reaper would never hear of the child's exit.
    // SAFETY: SIG_DFL installs no handler; nothing else runs yet.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    let blocked = SigSet::all();
    let mut original = SigSet::empty();
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&blocked), Some(&mut original))?;
    Ok(Signals { blocked, original, ignored: ignored_now() })
}

/// Send `sig` to the process group led by `pid`. A group that is already gone is not an error.
pub fn signal_group(pid: Pid, sig: Signo) -> io::Result<()> {
    kill(Pid::from_raw(-pid.as_raw()), sig)
}

/// Send `sig` to the one process `pid`. A process that is already gone is not an error.
pub fn signal_pid(pid: Pid, sig: Signo) -> io::Result<()> {
    kill(pid, sig)
}

/// kill(2) with any signal 1..=64 (`nix::sys::signal::Signal` has no real-time signals, which a PID 1
/// forwards); ESRCH (already gone) is not an error.
fn kill(target: Pid, sig: Signo) -> io::Result<()> {
    // SAFETY: kill(2) has no memory-safety preconditions.
    let r = unsafe { libc::kill(target.as_raw(), sig.raw()) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(e)
    }
}

/// One signal read from the signalfd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalInfo {
    /// The signal.
    pub signal: Signo,
    /// rankvisor raised it itself (its own SIGPIPE on a broken pipe), as opposed to another
    /// process's kill(2) or the kernel on behalf of a child (SIGCHLD).
    pub own: bool,
}

/// The stream of signals delivered to rankvisor.
pub struct SignalStream {
    fd: AsyncFd<SignalFd>,
    /// rankvisor's own pid, to tell its own signals (a broken pipe) from others'.
    me: u32,
}

impl SignalStream {
    /// A signalfd over the blocked set, registered with the current tokio runtime.
    pub fn new(signals: &Signals) -> io::Result<Self> {
        let sfd = SignalFd::with_flags(&signals.blocked, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        // SAFETY: the SignalFd owns its descriptor and closes it only when dropped, which happens
        // after the AsyncFd that holds it has deregistered it.
        let fd = unsafe { AsyncFd::register_with_interest(sfd, tokio::io::Interest::READABLE) }?;
        Ok(Self { fd, me: std::process::id() })
    }

    /// Wait for at least one signal and return every one pending, in order.
    pub async fn next(&mut self) -> io::Result<Vec<SignalInfo>> {
        let me = self.me;
        loop {
            let mut guard = self.fd.readable_mut().await?;
            let mut out = Vec::new();
            loop {
                match guard.get_inner_mut().read_signal() {
                    Ok(Some(info)) => {
                        // The kernel's numbers are 1..=64: anything else is not a signal to act on.
                        if let Some(signal) = i32::try_from(info.ssi_signo).ok().and_then(Signo::new) {
                            out.push(SignalInfo { signal, own: info.ssi_pid == me });
                        }
                    }
                    Ok(None) => break,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            guard.clear_ready();
            if !out.is_empty() {
                return Ok(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sig_ign_from_a_status_text() {
        let status =
            b"Name:\tx\nSigPnd:\t0000000000000000\nSigBlk:\tfffffffe7ffbfeff\nSigIgn:\t0000000180001001\nSigCgt:\t0\n";
        let m = parse_sig_ign(status).unwrap();
        assert_eq!(m.iter().collect::<Vec<_>>(), [1, 13, 32, 33]);
        assert!(m.contains(libc::SIGHUP) && m.contains(libc::SIGPIPE) && !m.contains(libc::SIGINT));
    }

    #[test]
    fn a_missing_or_malformed_sig_ign_is_none() {
        assert_eq!(parse_sig_ign(b""), None);
        assert_eq!(parse_sig_ign(b"SigBlk:\t0000000000000000\n"), None);
        assert_eq!(parse_sig_ign(b"SigIgn:\tnothex\n"), None);
        assert_eq!(parse_sig_ign(b"SigIgn:\t\n"), None);
        assert_eq!(parse_sig_ign(b"SigIgn:\t00000000000000000000\n"), None, "more than 64 signals");
        // A text cut off in the line (a short read) is not taken: the rest may be more digits.
        assert_eq!(parse_sig_ign(b"SigIgn:\t0000000000001000"), None);
        assert_eq!(parse_sig_ign(b"SigIgn:\t00000000"), None);
        assert_eq!(parse_sig_ign(b"SigIgn:\t0000000000001000\nSigCgt:\t00"), Some(SignalMask::of(&[13])));
    }

    #[test]
    fn signal_masks_hold_1_to_64_only() {
        let m = SignalMask::of(&[0, 1, 64, 65, -3]);
        assert_eq!(m.iter().collect::<Vec<_>>(), [1, 64]);
        assert!(!m.contains(0) && !m.contains(65));
        assert_eq!(m.without(1).without(64), SignalMask::default());
        assert!(m.without(1).without(64).is_empty());
    }

    #[test]
    fn the_ignored_set_read_at_start_matches_the_kernels() {
        // This test process ignores what Rust's runtime ignores (SIGPIPE) plus one real-time
        // signal nothing else in the test binary uses.
        let sig = libc::SIGRTMAX() - 2;
        // SAFETY: SIG_IGN and SIG_DFL install no handler.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
        let (from_proc, queried) = (ignored_now(), ignored_by_query());
        unsafe { libc::signal(sig, libc::SIG_DFL) };
        assert!(from_proc.contains(sig), "{from_proc:?}");
        assert!(from_proc.contains(libc::SIGPIPE), "Rust's runtime ignores SIGPIPE before main: {from_proc:?}");
        assert!(!from_proc.contains(libc::SIGTERM), "{from_proc:?}");
        assert_eq!(from_proc, queried, "/proc/self/status and the per-signal queries agree");
    }
}

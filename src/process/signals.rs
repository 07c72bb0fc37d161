//! Signals: blocked in every thread before the runtime starts, then read from a signalfd.
//!
//! A PID 1 only receives signals it handles or blocks (the kernel drops default-disposition signals
//! sent to init). Blocking everything and reading a signalfd gives one ordered stream of TERM, INT,
//! CHLD and the rest, with no handler running at an arbitrary point.

use nix::sys::signal::{SigSet, SigmaskHow};
use nix::sys::signalfd::{SfdFlags, SignalFd};
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
    Ok(Signals { blocked, original })
}

/// TERM and INT stop the child (forward, grace, KILL); the rest are only forwarded.
pub fn is_shutdown(sig: i32) -> bool {
    sig == libc::SIGTERM || sig == libc::SIGINT
}

/// Send `sig` to the process group led by `pid`. A group that is already gone is not an error.
pub fn signal_group(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill(2) has no memory-safety preconditions.
    let r = unsafe { libc::kill(-pid, sig) };
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
    /// The signal number.
    pub signal: i32,
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
                    Ok(Some(info)) => out.push(SignalInfo { signal: info.ssi_signo as i32, own: info.ssi_pid == me }),
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

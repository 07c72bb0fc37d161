//! Processes at the OS edge: signals, the one reaper, spawning the child, sweeping leftovers.

mod fatal;
mod procfs;
mod reaper;
mod signals;
mod spawn;

pub use fatal::{install_panic_hook, set_child_group};
pub use procfs::{alive_descendants, children_of, ProcEntry};
pub use reaper::{has_children, reap, reap_all};
pub use signals::{
    block_signals, is_shutdown, parse_sig_ign, signal_group, SignalInfo, SignalMask, SignalStream, Signals,
};
pub use spawn::{spawn_child, start_path, ChildCommand, ForkReason, SpawnError, StartPath};

/// Orphans of the child are reparented to rankvisor, not to the host's init, and reaped the same
/// way (PID 1 gets them anyway).
pub fn become_subreaper() {
    if std::process::id() != 1 {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integers.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            tracing::warn!("cannot become a child subreaper: {}", std::io::Error::last_os_error());
        }
    }
}

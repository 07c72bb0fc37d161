//! Processes at the OS edge: signals, the one reaper, spawning the child, sweeping leftovers.

mod fatal;
mod procfs;
mod reaper;
mod signals;
mod spawn;

pub use fatal::{install_panic_hook, set_child_group};
pub use procfs::{
    alive_descendants, children_of, cmdline, describe, describe_stuck, stuck_below, subtree, tree_below, Member,
    ProcEntry, Stuck, Tree, CMDLINE_LIMIT,
};
pub use reaper::{has_children, reap, reap_all};
pub use signals::{
    block_signals, parse_sig_ign, signal_group, signal_pid, SignalInfo, SignalMask, SignalStream, Signals,
};
pub use spawn::{spawn_child, start_path, ChildCommand, ForkReason, SpawnError, StartPath};

/// Orphans of our children are reparented to this process, not to the host's init, and reaped
/// the same way. PID 1 gets them anyway: nothing to do there.
pub fn become_subreaper() -> std::io::Result<()> {
    if std::process::id() == 1 {
        return Ok(());
    }
    nix::sys::prctl::set_child_subreaper(true).map_err(std::io::Error::from)
}

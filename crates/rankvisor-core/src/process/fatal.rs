//! The last resort: if rankvisor itself panics, the child's process group must not run on
//! unsupervised. A panic hook (the only place that needs global state: it runs outside any
//! owner) SIGKILLs the current child's group and writes why to the termination log.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

static CHILD_GROUP: AtomicI32 = AtomicI32::new(0);
static TERMINATION_LOG: OnceLock<Option<PathBuf>> = OnceLock::new();

/// Record the running child's process group (None once it is gone).
pub fn set_child_group(pid: Option<nix::unistd::Pid>) {
    CHILD_GROUP.store(pid.map_or(0, nix::unistd::Pid::as_raw), Ordering::SeqCst);
}

/// Install the hook: on a panic, kill the child's group, then say so in the termination log.
pub fn install_panic_hook(termination_log: Option<PathBuf>) {
    let _ = TERMINATION_LOG.set(termination_log);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let pgid = CHILD_GROUP.swap(0, Ordering::SeqCst);
        if pgid > 0 {
            // Best effort: the group may be gone already, and a panic hook has no one to tell.
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
        }
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        let msg = format!(
            "rankvisor failed: internal error{at}: {}{}",
            what.escape_debug(),
            if pgid > 0 { "; the child's process group was killed" } else { "" }
        );
        if let Some(Some(path)) = TERMINATION_LOG.get() {
            let _ = crate::termination::write_message(path, &msg);
        }
        eprintln!("[rankvisor] ERROR {msg}");
        previous(info);
    }));
}

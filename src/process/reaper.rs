//! The one reaper. Nothing else in rankvisor waits for a process: std's and tokio's child handles are
//! never awaited, so no exit status is lost to a race between two waiters.

use crate::exit::ExitHow;

/// Collect every exited child (the training process, orphans, anything reparented to us) without
/// blocking. Returns (pid, how it ended) in the order the kernel gives them.
pub fn reap_all() -> Vec<(i32, ExitHow)> {
    let mut out = Vec::new();
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes only to `status`.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid > 0 {
            let how = if libc::WIFEXITED(status) {
                ExitHow::Exited(libc::WEXITSTATUS(status))
            } else if libc::WIFSIGNALED(status) {
                ExitHow::Signaled(libc::WTERMSIG(status))
            } else {
                continue;
            };
            out.push((pid, how));
            continue;
        }
        if pid == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        // 0: children remain but none has exited; -1/ECHILD: no children at all.
        return out;
    }
}

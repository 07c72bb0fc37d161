//! The one reaper. Nothing else in rankvisor waits for a process: std's and tokio's child handles are
//! never awaited, so no exit status is lost to a race between two waiters.

use crate::exit::ExitHow;
use crate::signo::Signo;
use nix::unistd::Pid;

/// How a `waitpid` status ended, None for a stop or a continue.
fn how(status: libc::c_int) -> Option<ExitHow> {
    if libc::WIFEXITED(status) {
        Some(ExitHow::Exited(libc::WEXITSTATUS(status)))
    } else if libc::WIFSIGNALED(status) {
        // The kernel's termination signals are 1..=64. The process was reaped whatever the
        // number: its end is never dropped, at worst reported as the shell's 128+N status.
        let n = libc::WTERMSIG(status);
        Some(Signo::new(n).map_or(ExitHow::Exited(128 + n), ExitHow::Signaled))
    } else {
        None
    }
}

/// Collect every exited child (the training process, orphans, anything reparented to us) without
/// blocking. Returns (pid, how it ended) in the order the kernel gives them.
pub fn reap_all() -> Vec<(Pid, ExitHow)> {
    let mut out = Vec::new();
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes only to `status`.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid > 0 {
            if let Some(how) = how(status) {
                out.push((Pid::from_raw(pid), how));
            }
            continue;
        }
        if pid == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        // 0: children remain but none has exited; -1/ECHILD: no children at all.
        return out;
    }
}

/// True while rankvisor has a child, running or exited but not yet reaped. As PID 1 or a child
/// subreaper every orphan below us becomes our child, so no child means nothing below us lives.
pub fn has_children() -> bool {
    // SAFETY: an all-zero siginfo_t is a valid value for waitid to overwrite.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only to `info`; WNOWAIT leaves an exited child for `reap_all`.
    let r = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
    !(r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD))
}

/// Collect the exit of the one child `pid`, if it has exited (never blocks, never touches another
/// child: a caller that shares its children with another waiter, as the dry run does with tokio,
/// reaps only the pids that are its own).
pub fn reap(pid: Pid) -> Option<ExitHow> {
    let pid = pid.as_raw();
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes only to `status`.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            match how(status) {
                Some(h) => return Some(h),
                None => continue,
            }
        }
        if r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reaped_status_is_never_dropped() {
        // waitpid's encoding: exit code in bits 8..16; a terminating signal in bits 0..7.
        assert_eq!(how(3 << 8), Some(ExitHow::Exited(3)));
        assert_eq!(how(libc::SIGKILL), Some(ExitHow::Signaled(Signo::KILL)));
        assert_eq!(how(65), Some(ExitHow::Exited(128 + 65)), "a number outside 1..=64 keeps its status");
        // Stopped (0x7f in the low byte): not an end.
        assert_eq!(how((libc::SIGSTOP << 8) | 0x7f), None);
    }
}

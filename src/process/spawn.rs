//! Starting the training process: its own process group, the terminal's foreground when there is
//! one, the original signal mask and default dispositions, the rank contract's extra env.

use super::Signals;
use crate::exit;
use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// What to run and with which additions to the inherited environment.
#[derive(Debug, Clone)]
pub struct ChildCommand {
    /// argv\[0\], looked up in PATH when it has no slash.
    pub program: OsString,
    /// The rest of argv.
    pub args: Vec<OsString>,
    /// Variables set on top of rankvisor's own environment.
    pub env: Vec<(OsString, OsString)>,
    /// Variables of rankvisor's own environment the child must not see (secrets).
    pub env_remove: Vec<OsString>,
}

/// The child could not be started; `code` is what a shell would return.
#[derive(Debug, thiserror::Error)]
#[error("cannot run {program:?}: {source}")]
pub struct SpawnError {
    /// 127 (not found) or 126 (not executable).
    pub code: i32,
    /// The failure is the machine's, not the command's (EMFILE, ENFILE, EAGAIN, ENOMEM): a later
    /// start may work, so it is a failed run for the restart policy, not a permanent 126.
    pub transient: bool,
    /// The command.
    pub program: String,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

/// Start `cmd` and return its pid, which is also its process group id. Nobody waits on the
/// returned handle: the reaper collects the exit.
pub fn spawn_child(cmd: &ChildCommand, signals: &Signals) -> Result<i32, SpawnError> {
    let mut c = Command::new(&cmd.program);
    c.args(&cmd.args).process_group(0);
    for k in &cmd.env_remove {
        c.env_remove(k);
    }
    c.envs(cmd.env.iter().map(|(k, v)| (k, v)));
    let original: libc::sigset_t = *signals.original.as_ref();
    let sigrtmax = libc::SIGRTMAX();
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe functions
    // (signal, isatty, tcsetpgrp, getpid, sigprocmask) on values prepared before the fork; no
    // allocation, no locks.
    unsafe {
        c.pre_exec(move || {
            // The raw syscall, not glibc's signal(): glibc refuses its reserved 32 and 33, which
            // posix_spawn-based parents commonly leave ignored. An all-zero kernel sigaction is
            // SIG_DFL with no flags and an empty mask, whatever the architecture's layout.
            let default_action = [0u64; 4];
            for sig in 1..=sigrtmax {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::syscall(
                        libc::SYS_rt_sigaction,
                        sig,
                        default_action.as_ptr(),
                        std::ptr::null_mut::<u64>(),
                        8usize,
                    );
                }
            }
            // A child in its own group must own the terminal, or reading it stops it with SIGTTIN.
            if libc::isatty(libc::STDIN_FILENO) == 1 {
                libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpid());
                libc::signal(libc::SIGTTOU, libc::SIG_DFL);
            }
            libc::sigprocmask(libc::SIG_SETMASK, &original, std::ptr::null_mut());
            Ok(())
        });
    }
    match c.spawn() {
        Ok(child) => Ok(child.id() as i32),
        Err(source) => Err(SpawnError {
            transient: matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::EAGAIN | libc::ENOMEM)),
            code: if source.kind() == io::ErrorKind::NotFound { exit::NOT_FOUND } else { exit::NOT_EXECUTABLE },
            program: cmd.program.to_string_lossy().into_owned(),
            source,
        }),
    }
}

//! Starting the training process: its own process group, the terminal's foreground when there is
//! one, the original signal mask and default dispositions, the rank contract's extra env.
//!
//! Two ways, chosen by [`start_path`]: `posix_spawn` (musl's and glibc's clone the child with
//! `CLONE_VM | CLONE_VFORK`: no copy of rankvisor's page tables, and the child does only what the
//! attributes say), or `fork` + `exec` with a pre-exec step, when `posix_spawn` cannot do what the
//! child needs: to take the terminal's foreground (`tcsetpgrp`), or to look the program up in a
//! PATH the child's environment changes. Either way the child gets the mask rankvisor started with
//! and SIG_DFL for every signal rankvisor inherited ignored (exec resets caught signals itself).

use super::{SignalMask, Signals};
use crate::exit;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
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
    /// A descriptor to become the child's stdout (the log rules' pipe); None: the child inherits
    /// rankvisor's. The caller keeps it open until `spawn_child` returns.
    pub stdout: Option<RawFd>,
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

impl SpawnError {
    fn new(program: &OsStr, source: io::Error) -> Self {
        Self {
            transient: matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::EAGAIN | libc::ENOMEM)),
            code: if source.kind() == io::ErrorKind::NotFound { exit::NOT_FOUND } else { exit::NOT_EXECUTABLE },
            program: program.to_string_lossy().into_owned(),
            source,
        }
    }
}

/// How the child is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPath {
    /// `posix_spawn` (or `posix_spawnp`): a `CLONE_VFORK` child, no pre-exec code.
    Spawn,
    /// `fork`, a pre-exec step, `exec`: for what `posix_spawn` cannot do.
    Fork(ForkReason),
}

/// Why the child is started with `fork`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkReason {
    /// stdin is a terminal: the child's new group must become its foreground (`tcsetpgrp`).
    Terminal,
    /// The program is looked up in PATH and the child's environment changes PATH: libc's
    /// `posix_spawnp` would search rankvisor's PATH, `execvp` in the child searches the child's.
    PathChanged,
    /// libc's `sigset_t` did not take one of the signals to reset (see [`signals_to_default`]).
    SignalSet,
}

/// Signals libc treats as its own: glibc's `posix_spawn` sets 32 and 33 to SIG_IGN in every child
/// unless they are in the spawn's default set, and musl's sets 32-34 to SIG_IGN when it ever
/// installed a handler for them. Both libcs' `sigaddset` refuse these numbers, so they are written
/// into the set directly (its layout is the kernel's bitmap; [`sigset_from_mask`] checks it).
#[cfg(target_env = "musl")]
pub(super) const LIBC_INTERNAL: &[i32] = &[32, 33, 34];
/// See the musl variant.
#[cfg(not(target_env = "musl"))]
pub(super) const LIBC_INTERNAL: &[i32] = &[32, 33];

/// The signals the child gets SIG_DFL for before `exec`: those rankvisor inherited ignored (`exec`
/// keeps SIG_IGN, while it resets every caught signal by itself), plus on the `posix_spawn` path
/// the libc's own (`libc_internal`), which its `posix_spawn` would otherwise leave ignored.
/// SIGKILL and SIGSTOP cannot be changed and are never in the set.
pub(super) fn signals_to_default(ignored_at_start: SignalMask, libc_internal: &[i32]) -> SignalMask {
    libc_internal.iter().fold(ignored_at_start, |m, &s| m.with(s)).without(libc::SIGKILL).without(libc::SIGSTOP)
}

/// Whether PATH lookup in the child would see another PATH than rankvisor's own.
pub(super) fn path_lookup_changed(cmd: &ChildCommand) -> bool {
    let searched = !cmd.program.as_bytes().contains(&b'/');
    searched && (cmd.env.iter().any(|(k, _)| k == "PATH") || cmd.env_remove.iter().any(|k| k == "PATH"))
}

/// Which way to start the child: `posix_spawn` unless it cannot do what the child needs.
pub fn start_path(stdin_is_terminal: bool, path_changed: bool, signal_set_complete: bool) -> StartPath {
    if stdin_is_terminal {
        StartPath::Fork(ForkReason::Terminal)
    } else if path_changed {
        StartPath::Fork(ForkReason::PathChanged)
    } else if !signal_set_complete {
        StartPath::Fork(ForkReason::SignalSet)
    } else {
        StartPath::Spawn
    }
}

/// Start `cmd` and return its pid, which is also its process group id. Nobody waits on the
/// returned handle: the reaper collects the exit.
pub fn spawn_child(cmd: &ChildCommand, signals: &Signals) -> Result<nix::unistd::Pid, SpawnError> {
    let defaults = signals_to_default(signals.ignored, LIBC_INTERNAL);
    let sigdefault = sigset_from_mask(defaults);
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdin());
    let path = start_path(terminal, path_lookup_changed(cmd), sigdefault.is_some());
    let result = match (path, sigdefault) {
        (StartPath::Spawn, Some(set)) => {
            tracing::debug!(?path, reset = ?defaults.iter().collect::<Vec<_>>(), "starting the child");
            posix_spawn(cmd, signals, &set)
        }
        _ => {
            tracing::debug!(?path, reset = ?signals.ignored.iter().collect::<Vec<_>>(), "starting the child");
            fork_exec(cmd, signals, signals.ignored, terminal)
        }
    };
    result.map(nix::unistd::Pid::from_raw).map_err(|e| SpawnError::new(&cmd.program, e))
}

/// A libc `sigset_t` holding exactly `mask`, or None when libc's own `sigismember` does not agree
/// with the bits written (a layout this code does not know: then the fork path is taken).
pub(super) fn sigset_from_mask(mask: SignalMask) -> Option<libc::sigset_t> {
    // SAFETY: an all-zero sigset_t is the empty set in glibc and musl; sigemptyset makes sure.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigemptyset writes only `set`.
    unsafe { libc::sigemptyset(&mut set) };
    // The kernel's bitmap, which both libcs use: signal n is bit (n - 1) of an array of unsigned
    // longs. sigaddset refuses the libcs' reserved signals; sigismember reads every bit.
    const _: () = assert!(std::mem::size_of::<libc::sigset_t>() >= 8);
    // SAFETY: sigset_t is at least 8 bytes (checked above) of plain integers; the first 8 bytes
    // hold signals 1..=64 on a little-endian 64-bit target, and the check below confirms it.
    let words = unsafe { &mut *(&mut set as *mut libc::sigset_t as *mut [u8; 8]) };
    *words = mask.0.to_le_bytes();
    let agrees = (1..=64).all(|sig| {
        // SAFETY: sigismember only reads `set`.
        let member = unsafe { libc::sigismember(&set, sig) };
        member == i32::from(mask.contains(sig))
    });
    agrees.then_some(set)
}

/// The child's environment as `posix_spawn` takes it: pointers into rankvisor's own environment
/// (not copied), less the removed and overridden names, then the additions.
struct Envp {
    _added: Vec<CString>,
    ptrs: Vec<*const libc::c_char>,
}

extern "C" {
    static environ: *const *const libc::c_char;
}

fn name_of(entry: &[u8]) -> &[u8] {
    // A name may start with '=' in odd environments; the name ends at the next '='.
    let from = usize::from(entry.first() == Some(&b'='));
    entry[from..].iter().position(|&b| b == b'=').map_or(entry, |i| &entry[..from + i])
}

fn envp(cmd: &ChildCommand) -> io::Result<Envp> {
    let mut added = Vec::with_capacity(cmd.env.len());
    for (i, (k, v)) in cmd.env.iter().enumerate() {
        // The last setting of a name wins, as with std's Command.
        if cmd.env[i + 1..].iter().any(|(later, _)| later == k) {
            continue;
        }
        let mut kv = Vec::with_capacity(k.len() + v.len() + 1);
        kv.extend_from_slice(k.as_bytes());
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        added.push(CString::new(kv)?);
    }
    let mut ptrs = Vec::new();
    // SAFETY: rankvisor never changes its own environment (no setenv/putenv anywhere), so
    // `environ` is a stable NULL-terminated array of NUL-terminated strings for the whole run.
    unsafe {
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let entry = CStr::from_ptr(*p).to_bytes();
            let name = name_of(entry);
            let dropped = cmd.env_remove.iter().any(|k| k.as_bytes() == name)
                || cmd.env.iter().any(|(k, _)| k.as_bytes() == name);
            if !dropped {
                ptrs.push(*p);
            }
            p = p.add(1);
        }
    }
    ptrs.reserve_exact(added.len() + 1);
    ptrs.extend(added.iter().map(|c| c.as_ptr()));
    ptrs.push(std::ptr::null());
    Ok(Envp { _added: added, ptrs })
}

/// Owns a `posix_spawnattr_t` and destroys it.
struct Attr(libc::posix_spawnattr_t);

impl Drop for Attr {
    fn drop(&mut self) {
        // SAFETY: initialized by posix_spawnattr_init in `posix_spawn` before this value exists.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// Owns a `posix_spawn_file_actions_t` and destroys it.
struct FileActions(libc::posix_spawn_file_actions_t);

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialized by posix_spawn_file_actions_init in `posix_spawn` before this value exists.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

fn posix_spawn(cmd: &ChildCommand, signals: &Signals, sigdefault: &libc::sigset_t) -> io::Result<i32> {
    let program = CString::new(cmd.program.as_bytes())?;
    let args = cmd.args.iter().map(|a| CString::new(a.as_bytes())).collect::<Result<Vec<_>, _>>()?;
    let mut argv: Vec<*mut libc::c_char> = Vec::with_capacity(args.len() + 2);
    argv.push(program.as_ptr().cast_mut());
    argv.extend(args.iter().map(|a| a.as_ptr().cast_mut()));
    argv.push(std::ptr::null_mut());
    let env = envp(cmd)?;
    let original: &libc::sigset_t = signals.original.as_ref();
    // SAFETY: posix_spawnattr_init initializes the zeroed value; `Attr` destroys it.
    let mut attr = Attr(unsafe { std::mem::zeroed() });
    // SAFETY: as above.
    check(unsafe { libc::posix_spawnattr_init(&mut attr.0) })?;
    let flags = libc::POSIX_SPAWN_SETPGROUP | libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
    // SAFETY: `attr` is initialized; the setters copy the values they are given.
    unsafe {
        check(libc::posix_spawnattr_setflags(&mut attr.0, flags as libc::c_short))?;
        // Group 0: the child's own pid, a new group it leads.
        check(libc::posix_spawnattr_setpgroup(&mut attr.0, 0))?;
        check(libc::posix_spawnattr_setsigmask(&mut attr.0, original))?;
        check(libc::posix_spawnattr_setsigdefault(&mut attr.0, sigdefault))?;
    }
    // The log rules' pipe becomes fd 1; dup2 clears its close-on-exec flag in the child only.
    let actions = match cmd.stdout {
        Some(fd) => {
            // SAFETY: init initializes the zeroed value; `FileActions` destroys it; adddup2 copies
            // the numbers it is given.
            let mut fa = FileActions(unsafe { std::mem::zeroed() });
            check(unsafe { libc::posix_spawn_file_actions_init(&mut fa.0) })?;
            check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut fa.0, fd, libc::STDOUT_FILENO) })?;
            Some(fa)
        }
        None => None,
    };
    let actions_ptr = actions.as_ref().map_or(std::ptr::null(), |fa| &fa.0 as *const _);
    let mut pid: libc::pid_t = 0;
    let spawn = if cmd.program.as_bytes().contains(&b'/') { libc::posix_spawn } else { libc::posix_spawnp };
    // SAFETY: every pointer is to a NUL-terminated string or a NULL-terminated array that outlives
    // the call; posix_spawn returns after the child has called exec (or failed to).
    check(unsafe { spawn(&mut pid, program.as_ptr(), actions_ptr, &attr.0, argv.as_ptr(), env.ptrs.as_ptr().cast()) })?;
    Ok(pid)
}

fn fork_exec(cmd: &ChildCommand, signals: &Signals, ignored: SignalMask, terminal: bool) -> io::Result<i32> {
    let mut c = Command::new(&cmd.program);
    c.args(&cmd.args).process_group(0);
    for k in &cmd.env_remove {
        c.env_remove(k);
    }
    c.envs(cmd.env.iter().map(|(k, v)| (k, v)));
    if let Some(fd) = cmd.stdout {
        // SAFETY: the caller keeps `fd` open for this call; std dups it to fd 1 in the child.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        c.stdout(std::process::Stdio::from(fd.try_clone_to_owned()?));
    }
    let original: libc::sigset_t = *signals.original.as_ref();
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe functions
    // (rt_sigaction, signal, tcsetpgrp, getpid, sigprocmask) on values prepared before the fork;
    // no allocation, no locks.
    unsafe {
        c.pre_exec(move || {
            // The raw syscall, not glibc's signal(): glibc refuses its reserved 32 and 33, which
            // posix_spawn-based parents commonly leave ignored. An all-zero kernel sigaction is
            // SIG_DFL with no flags and an empty mask, whatever the architecture's layout.
            let default_action = [0u64; 4];
            for sig in ignored.iter() {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    default_action.as_ptr(),
                    std::ptr::null_mut::<u64>(),
                    8usize,
                );
            }
            // A child in its own group must own the terminal, or reading it stops it with SIGTTIN.
            if terminal {
                libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpid());
                libc::signal(libc::SIGTTOU, libc::SIG_DFL);
            }
            libc::sigprocmask(libc::SIG_SETMASK, &original, std::ptr::null_mut());
            Ok(())
        });
    }
    c.spawn().map(|child| child.id() as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(program: &str, env: &[(&str, &str)], remove: &[&str]) -> ChildCommand {
        ChildCommand {
            program: program.into(),
            args: Vec::new(),
            env: env.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect(),
            env_remove: remove.iter().map(|k| (*k).into()).collect(),
            stdout: None,
        }
    }

    #[test]
    fn only_inherited_ignored_signals_and_the_libcs_own_are_reset() {
        let ignored = SignalMask::of(&[libc::SIGHUP, libc::SIGPIPE, 40]);
        assert_eq!(signals_to_default(ignored, &[]), ignored);
        assert_eq!(signals_to_default(SignalMask::default(), &[]), SignalMask::default(), "nothing ignored: no reset");
        let with_glibc = signals_to_default(ignored, &[32, 33]);
        assert_eq!(with_glibc.iter().collect::<Vec<_>>(), [1, 13, 32, 33, 40]);
        let with_musl = signals_to_default(SignalMask::default(), &[32, 33, 34]);
        assert_eq!(with_musl.iter().collect::<Vec<_>>(), [32, 33, 34]);
        // KILL and STOP cannot be ignored or reset; a bogus mask naming them changes nothing.
        let bogus = SignalMask::of(&[libc::SIGKILL, libc::SIGSTOP, libc::SIGTERM]);
        assert_eq!(signals_to_default(bogus, &[]), SignalMask::of(&[libc::SIGTERM]));
    }

    #[test]
    fn this_libcs_internal_signals_are_reset_on_every_start() {
        let d = signals_to_default(SignalMask::default(), LIBC_INTERNAL);
        assert!(d.contains(32) && d.contains(33), "{d:?}");
    }

    #[test]
    fn posix_spawn_unless_a_terminal_a_changed_path_or_an_incomplete_set() {
        assert_eq!(start_path(false, false, true), StartPath::Spawn);
        assert_eq!(start_path(true, false, true), StartPath::Fork(ForkReason::Terminal));
        assert_eq!(start_path(true, true, false), StartPath::Fork(ForkReason::Terminal));
        assert_eq!(start_path(false, true, true), StartPath::Fork(ForkReason::PathChanged));
        assert_eq!(start_path(false, false, false), StartPath::Fork(ForkReason::SignalSet));
    }

    #[test]
    fn a_changed_path_matters_only_for_a_looked_up_program() {
        assert!(!path_lookup_changed(&cmd("python", &[("RANK", "0")], &["RANKVISOR_JOB_TOKEN"])));
        assert!(path_lookup_changed(&cmd("python", &[("PATH", "/opt/bin")], &[])));
        assert!(path_lookup_changed(&cmd("python", &[], &["PATH"])));
        assert!(!path_lookup_changed(&cmd("/usr/bin/python", &[("PATH", "/opt/bin")], &[])));
        assert!(!path_lookup_changed(&cmd("./train", &[], &["PATH"])));
    }

    #[test]
    fn the_signal_set_layout_is_the_one_libc_reads() {
        // Every signal alone, and the sets spawn_child builds, read back by libc's sigismember;
        // glibc's and musl's reserved signals included, which their sigaddset refuses.
        for sig in 1..=64 {
            let set = sigset_from_mask(SignalMask::of(&[sig])).unwrap_or_else(|| panic!("signal {sig}"));
            // SAFETY: sigismember only reads the set.
            assert_eq!(unsafe { libc::sigismember(&set, sig) }, 1, "signal {sig}");
        }
        let mask = signals_to_default(SignalMask::of(&[libc::SIGPIPE, libc::SIGHUP]), LIBC_INTERNAL);
        let set = sigset_from_mask(mask).unwrap();
        for sig in 1..=64 {
            // SAFETY: as above.
            assert_eq!(unsafe { libc::sigismember(&set, sig) } == 1, mask.contains(sig), "signal {sig}");
        }
    }

    #[test]
    fn the_environment_drops_removed_and_overridden_names_and_adds_the_last_setting() {
        // This test's own environment: PATH is set in any test run; HOME nearly always.
        let c = cmd("x", &[("RV_SPAWN_TEST", "1"), ("RV_SPAWN_TEST", "2"), ("HOME", "/elsewhere")], &["PATH"]);
        let env = envp(&c).unwrap();
        assert!(env.ptrs.last().unwrap().is_null(), "NULL-terminated");
        let entries: Vec<String> = env.ptrs[..env.ptrs.len() - 1]
            .iter()
            // SAFETY: every pointer but the last is a NUL-terminated string that `env` keeps alive.
            .map(|&p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            .collect();
        assert!(!entries.iter().any(|e| e.starts_with("PATH=")), "PATH was removed: {entries:?}");
        assert_eq!(entries.iter().filter(|e| e.starts_with("RV_SPAWN_TEST=")).collect::<Vec<_>>(), ["RV_SPAWN_TEST=2"]);
        assert_eq!(entries.iter().filter(|e| e.starts_with("HOME=")).collect::<Vec<_>>(), ["HOME=/elsewhere"]);
        let own = std::env::vars_os().filter(|(k, _)| k != "PATH" && k != "HOME" && k != "RV_SPAWN_TEST").count();
        assert_eq!(entries.len(), own + 2, "the rest of the environment is passed on");
        assert!(envp(&cmd("x", &[("BAD", "a\0b")], &[])).is_err(), "a NUL in a value is an error");
    }

    #[test]
    fn names_end_at_the_first_equals_sign() {
        assert_eq!(name_of(b"A=b=c"), b"A");
        assert_eq!(name_of(b"=C:=x"), b"=C:");
        assert_eq!(name_of(b"NOEQUALS"), b"NOEQUALS");
        assert_eq!(name_of(b""), b"");
    }
}

//! The PID namespace's end, emulated. In a pod the launcher is its container's PID 1: when it dies
//! (SIGKILL from outside, a crash), the kernel kills every other process of the container's PID
//! namespace, and the kubelet sees the container end only once they are all gone. In the dry run
//! the launchers share the host's PID namespace, so a launcher killed outright would leave its
//! training process (its own process group) running on, re-parented to init.
//!
//! So the dry run is a child subreaper (`PR_SET_CHILD_SUBREAPER`): whatever a dead launcher leaves
//! (its training process, the orphans it had adopted as a subreaper itself) becomes a child of the
//! dry run. Any child of the dry run that is not one of its launchers is such an orphan: it is
//! SIGKILLed with its process group, and reaped by its pid only, so tokio (which waits for each
//! launcher by its own pid) never loses an exit status to this reaper. Its descendants in other
//! groups come back to the dry run when it dies and are killed the same way.
//!
//! Why not a PID namespace per launcher (`unshare(CLONE_NEWPID)`, exactly the pod's semantics)? It
//! needs root (or a user namespace), and a launcher that is PID 1 sweeps its descendants by
//! reading /proc: without a mount namespace and a /proc of its own it would see the host's
//! processes as its own. The subreaper works unprivileged and leaves /proc as it is.

use std::collections::BTreeSet;

use nix::unistd::Pid;
use rankvisor_core::exit::ExitHow;
use rankvisor_core::process::{self, ProcEntry};
use rankvisor_core::signo::Signo;

/// What to do with one child of the dry run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OrphanStep {
    /// An orphan that has exited: collect it.
    Reap(Pid),
    /// An orphan still alive: SIGKILL it, and its process group when that is safe to name.
    Kill {
        /// The orphan.
        pid: Pid,
        /// Its process group, unless it is the dry run's own, a live launcher's or not a group.
        group: Option<Pid>,
    },
}

/// The steps for the dry run's `children`: every child that is not a live launcher (`launchers`) is
/// an orphan of a dead one. `own_group` is the dry run's process group (never signalled).
pub(super) fn plan(children: &[ProcEntry], launchers: &BTreeSet<Pid>, own_group: Pid) -> Vec<OrphanStep> {
    children
        .iter()
        .filter(|c| !launchers.contains(&c.pid))
        .map(|c| match c.state {
            'Z' | 'X' => OrphanStep::Reap(c.pid),
            _ => OrphanStep::Kill {
                pid: c.pid,
                group: (c.pgrp.as_raw() > 1 && c.pgrp != own_group && !launchers.contains(&c.pgrp)).then_some(c.pgrp),
            },
        })
        .collect()
}

/// What one sweep did.
#[derive(Debug, Default)]
pub(super) struct Sweep {
    /// Orphans SIGKILLed (pid, process group), not yet collected (they are once they are zombies).
    pub(super) killed: Vec<(Pid, Option<Pid>)>,
    /// Orphans collected, with how they ended.
    pub(super) reaped: Vec<(Pid, ExitHow)>,
}

impl Sweep {
    /// No orphan is left to wait for.
    pub(super) fn clear(&self) -> bool {
        self.killed.is_empty()
    }
}

/// Make the dry run a child subreaper; the error says what is lost without it.
pub(super) fn become_subreaper() -> Result<(), String> {
    process::become_subreaper().map_err(|e| {
        format!(
            "cannot become a child subreaper ({e}): the training process of a launcher killed outright is not stopped with it"
        )
    })
}

/// Kill and collect the orphans among the dry run's children (`launchers`: the pids of the live
/// launchers, which only tokio waits for).
pub(super) fn sweep(launchers: &BTreeSet<Pid>) -> Sweep {
    let me = Pid::this();
    let own_group = nix::unistd::getpgrp();
    let mut out = Sweep::default();
    for step in plan(&process::children_of(me), launchers, own_group) {
        match step {
            OrphanStep::Reap(pid) => {
                if let Some(how) = process::reap(pid) {
                    out.reaped.push((pid, how));
                }
            }
            OrphanStep::Kill { pid, group } => {
                // The orphan is our child and not collected, so neither its pid nor its group's id
                // can name another process yet.
                if let Some(g) = group {
                    let _ = process::signal_group(g, Signo::KILL);
                }
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                out.killed.push((pid, group));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, state: char, pgrp: i32) -> ProcEntry {
        ProcEntry { pid: Pid::from_raw(pid), ppid: Pid::from_raw(100), state, pgrp: Pid::from_raw(pgrp), forked: false }
    }

    fn pids<const N: usize>(ns: [i32; N]) -> BTreeSet<Pid> {
        ns.into_iter().map(Pid::from_raw).collect()
    }

    fn kill(pid: i32, group: Option<i32>) -> OrphanStep {
        OrphanStep::Kill { pid: Pid::from_raw(pid), group: group.map(Pid::from_raw) }
    }

    #[test]
    fn launchers_are_left_to_tokio_and_orphans_are_killed_with_their_group() {
        let launchers = pids([10, 20]);
        let children = [
            p(10, 'S', 10),  // a live launcher
            p(20, 'Z', 20),  // a launcher that exited: tokio reaps it
            p(31, 'S', 31),  // a dead launcher's training process, leading its own group
            p(32, 'R', 30),  // a member of a training group whose leader is gone
            p(33, 'Z', 33),  // an orphan that died: collected here
            p(34, 'S', 100), // in the dry run's own group: only itself
            p(35, 'S', 10),  // in a live launcher's group: only itself
            p(36, 'D', 1),   // init's group: only itself
        ];
        assert_eq!(
            plan(&children, &launchers, Pid::from_raw(100)),
            vec![
                kill(31, Some(31)),
                kill(32, Some(30)),
                OrphanStep::Reap(Pid::from_raw(33)),
                kill(34, None),
                kill(35, None),
                kill(36, None),
            ]
        );
    }

    #[test]
    fn nothing_to_do_without_orphans() {
        let launchers = pids([10]);
        assert!(plan(&[p(10, 'S', 10)], &launchers, Pid::from_raw(100)).is_empty());
        assert!(plan(&[], &launchers, Pid::from_raw(100)).is_empty());
    }
}

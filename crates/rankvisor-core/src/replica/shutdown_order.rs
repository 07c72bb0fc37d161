//! Who gets a shutdown's signal, and when: the programs first, their forked helpers once their
//! parent is gone. A pure rule over the process tree below rankvisor (`process::tree_below` reads
//! it at the edge); the replica machine holds one [`ShutdownOrder`] per shutdown and the loop
//! brings it a fresh tree until the grace period's end.
//!
//! Why: a training script's `DataLoader(num_workers=N)` workers are `fork()`ed copies of it, in
//! its process group. A TERM to the whole group kills them while the script's own SIGTERM handler
//! saves its emergency checkpoint, and the script's SIGCHLD handler then fails the save ("DataLoader
//! worker (pid X) is killed by signal"). So:
//!
//! - when the shutdown begins, the signal goes to every process below rankvisor that is a program
//!   of its own: one that exec'd (the kernel clears `PF_FORKNOEXEC` at `execve`) and is not one of
//!   Python multiprocessing's own processes (a `spawn` or `forkserver` child, the resource tracker:
//!   exec'd interpreters started with `-c 'from multiprocessing.…'`, a spawn child also with
//!   `--multiprocessing-fork`); and to every process whose parent is rankvisor: the child itself,
//!   and every orphan (rankvisor is the subreaper, so a process whose parent has exited is
//!   reparented to it);
//! - afterwards, a process gets it once its parent is gone (it became rankvisor's), whatever it
//!   is; a process present at the start that has exec'd a program meanwhile (a shell's fork caught
//!   between its fork and its exec) gets it at once too;
//! - a process started after the shutdown began (a checkpoint upload the SIGTERM handler runs) is
//!   left to its parent, like a helper: it gets the signal once its parent is gone;
//! - each process gets the signal once (a second TERM to rankvisor starts a new order);
//! - the grace period bounds it all: at its end everything left is SIGKILLed, as before.
//!
//! A shell child that does not forward signals (`sh -c 'python train.py; echo done'`) stops all
//! the same: the shell and python are both programs, both get TERM at once; the shell dies of it,
//! python saves, and its DataLoader workers get TERM once python has exited.

use crate::process::{Member, Tree};
use crate::signo::Signo;
use nix::unistd::Pid;
use std::collections::HashSet;

/// One shutdown's order: its signal, the processes present when it began, those signalled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownOrder {
    signal: Signo,
    /// The processes below rankvisor when the order first saw the tree (None: not yet seen).
    at_start: Option<HashSet<Pid>>,
    /// The processes that got the signal (still alive when last seen).
    signalled: HashSet<Pid>,
}

/// What one look at the tree decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pass {
    /// Signal these now.
    pub now: Vec<Pid>,
    /// How many processes wait for their parent to exit.
    pub waiting: usize,
    /// This was the order's first look (the programs' turn).
    pub first: bool,
}

impl ShutdownOrder {
    /// An order for a shutdown by `signal` that has not looked at the tree yet.
    pub fn new(signal: Signo) -> Self {
        Self { signal, at_start: None, signalled: HashSet::new() }
    }

    /// `pid` got the signal before the order's first look (the child: it always gets it at once,
    /// so its latency does not wait on reading /proc).
    pub fn signalled_already(&mut self, pid: Pid) {
        self.signalled.insert(pid);
    }

    /// The shutdown's signal.
    pub fn signal(&self) -> Signo {
        self.signal
    }

    /// Who gets the signal now, given the tree as it is; they are remembered as signalled.
    pub fn step(&mut self, tree: &Tree) -> Pass {
        let first = self.at_start.is_none();
        let alive: HashSet<Pid> = tree.members.iter().map(|m| m.pid).collect();
        // Only the living are remembered: a pid that comes back is another process.
        let at_start = self.at_start.get_or_insert_with(|| alive.clone());
        at_start.retain(|p| alive.contains(p));
        self.signalled.retain(|p| alive.contains(p));
        let mut now = Vec::new();
        let mut waiting = 0;
        for m in tree.members.iter().filter(|m| !self.signalled.contains(&m.pid)) {
            if m.ppid == tree.root || (at_start.contains(&m.pid) && is_program(m)) {
                now.push(m.pid);
            } else {
                waiting += 1;
            }
        }
        self.signalled.extend(now.iter().copied());
        Pass { now, waiting, first }
    }
}

/// A program of its own: it exec'd, and is not one of Python multiprocessing's processes.
pub fn is_program(m: &Member) -> bool {
    !m.forked && !is_multiprocessing_helper(&m.cmdline)
}

/// A process Python's multiprocessing started for its parent: a `spawn` child
/// (`python -c 'from multiprocessing.spawn import spawn_main; …' --multiprocessing-fork`), the
/// forkserver or the resource tracker (`python -c 'from multiprocessing.… import main; …'`).
fn is_multiprocessing_helper(cmdline: &[u8]) -> bool {
    cmdline
        .split(|b| *b == 0)
        .skip(1)
        .any(|arg| arg == b"--multiprocessing-fork" || arg.starts_with(b"from multiprocessing."))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: i32 = 1;

    fn pid(p: i32) -> Pid {
        Pid::from_raw(p)
    }

    /// An exec'd program with these arguments.
    fn program(p: i32, ppid: i32, args: &[&str]) -> Member {
        Member {
            pid: pid(p),
            ppid: pid(ppid),
            forked: false,
            cmdline: args.iter().flat_map(|a| [a.as_bytes(), b"\0"].concat()).collect(),
        }
    }

    /// A forked copy of its parent that did not exec.
    fn copy(p: i32, ppid: i32) -> Member {
        Member { pid: pid(p), ppid: pid(ppid), forked: true, cmdline: Vec::new() }
    }

    fn tree(members: &[Member]) -> Tree {
        Tree { root: pid(ROOT), members: members.to_vec() }
    }

    fn pids(ps: &[i32]) -> Vec<Pid> {
        ps.iter().copied().map(pid).collect()
    }

    fn sorted(mut v: Vec<Pid>) -> Vec<Pid> {
        v.sort();
        v
    }

    #[test]
    fn python_with_forked_dataloader_workers_first_then_the_workers_once_it_exited() {
        let mut o = ShutdownOrder::new(Signo::TERM);
        let train = program(10, ROOT, &["python", "train.py"]);
        let t = tree(&[train, copy(11, 10), copy(12, 10)]);
        assert_eq!(o.step(&t), Pass { now: pids(&[10]), waiting: 2, first: true });
        // Still saving: nobody new.
        assert_eq!(o.step(&t), Pass { now: vec![], waiting: 2, first: false });
        // It exited: its workers are rankvisor's now.
        let orphans = tree(&[copy(11, ROOT), copy(12, ROOT)]);
        assert_eq!(sorted(o.step(&orphans).now), pids(&[11, 12]));
        assert_eq!(o.step(&orphans), Pass { now: vec![], waiting: 0, first: false }, "each gets it once");
    }

    #[test]
    fn a_shell_that_does_not_forward_and_its_python_get_it_at_once() {
        let mut o = ShutdownOrder::new(Signo::TERM);
        let t = tree(&[
            program(10, ROOT, &["sh", "-c", "python train.py; echo done"]),
            program(11, 10, &["python", "train.py"]),
            copy(12, 11),
            copy(13, 11),
        ]);
        assert_eq!(sorted(o.step(&t).now), pids(&[10, 11]));
        // The shell died of it: python is rankvisor's, already signalled; the workers still wait.
        let t = tree(&[program(11, ROOT, &["python", "train.py"]), copy(12, 11), copy(13, 11)]);
        assert_eq!(o.step(&t), Pass { now: vec![], waiting: 2, first: false });
        assert_eq!(sorted(o.step(&tree(&[copy(12, ROOT), copy(13, ROOT)])).now), pids(&[12, 13]));
    }

    #[test]
    fn torchrun_and_its_workers_first_their_dataloader_helpers_after() {
        let mut o = ShutdownOrder::new(Signo::TERM);
        let python = |p, ppid| program(p, ppid, &["/usr/bin/python", "-u", "train.py", "--epochs", "3"]);
        let t = tree(&[
            program(10, ROOT, &["/usr/bin/python", "/usr/bin/torchrun", "--nproc-per-node", "2", "train.py"]),
            python(20, 10),
            python(30, 10),
            copy(21, 20),
            copy(22, 20),
            copy(31, 30),
        ]);
        assert_eq!(o.step(&t), Pass { now: pids(&[10, 20, 30]), waiting: 3, first: true });
        // Worker 20 exited: its helpers are orphans; 30's keeps waiting.
        let t = tree(&[program(10, ROOT, &["torchrun"]), python(30, 10), copy(21, ROOT), copy(22, ROOT), copy(31, 30)]);
        assert_eq!(o.step(&t), Pass { now: pids(&[21, 22]), waiting: 1, first: false });
    }

    #[test]
    fn multiprocessing_spawn_children_forkserver_and_tracker_are_helpers() {
        let mut o = ShutdownOrder::new(Signo::TERM);
        let spawn = program(
            11,
            10,
            &[
                "python",
                "-c",
                "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
                "--multiprocessing-fork",
            ],
        );
        let tracker = program(12, 10, &["python", "-c", "from multiprocessing.resource_tracker import main;main(4)"]);
        let forkserver = program(
            13,
            10,
            &["python", "-c", "from multiprocessing.forkserver import main; main(8, 9, ['__main__'], **{})"],
        );
        let t = tree(&[program(10, ROOT, &["python", "train.py"]), spawn, tracker, forkserver, copy(14, 13)]);
        assert_eq!(o.step(&t), Pass { now: pids(&[10]), waiting: 4, first: true });
    }

    #[test]
    fn a_program_named_like_multiprocessing_in_its_first_word_is_still_a_program() {
        // Only an argument after the program's name marks a helper.
        let m = program(10, 2, &["from multiprocessing.x", "--flag"]);
        assert!(is_program(&m));
        assert!(!is_program(&program(10, 2, &["python", "--multiprocessing-fork"])));
    }

    #[test]
    fn an_orphaned_helper_gets_it_at_once() {
        // A daemonized copy (double fork): its parent is long gone.
        let mut o = ShutdownOrder::new(Signo::INT);
        let t = tree(&[program(10, ROOT, &["python", "train.py"]), copy(40, ROOT), copy(41, 40)]);
        assert_eq!(o.step(&t), Pass { now: pids(&[10, 40]), waiting: 1, first: true });
        assert_eq!(o.signal(), Signo::INT);
    }

    #[test]
    fn a_process_started_after_the_stop_began_waits_for_its_parent() {
        let mut o = ShutdownOrder::new(Signo::TERM);
        assert_eq!(o.step(&tree(&[program(10, ROOT, &["python", "train.py"])])).now, pids(&[10]));
        // The SIGTERM handler runs an upload: a program, but new; it is left to python.
        let t = tree(&[program(10, ROOT, &["python", "train.py"]), program(50, 10, &["aws", "s3", "cp"])]);
        assert_eq!(o.step(&t), Pass { now: vec![], waiting: 1, first: false });
        // Python exits without waiting for it: now it is an orphan.
        assert_eq!(o.step(&tree(&[program(50, ROOT, &["aws", "s3", "cp"])])).now, pids(&[50]));
    }

    #[test]
    fn a_fork_caught_before_its_exec_gets_it_once_it_exec_d() {
        // A shell's background job between fork and exec at the first look.
        let mut o = ShutdownOrder::new(Signo::TERM);
        let t = tree(&[program(10, ROOT, &["sh", "-c", "sleep 1000 & wait"]), copy(11, 10)]);
        assert_eq!(o.step(&t), Pass { now: pids(&[10]), waiting: 1, first: true });
        let t = tree(&[program(10, ROOT, &["sh"]), program(11, 10, &["sleep", "1000"])]);
        assert_eq!(o.step(&t).now, pids(&[11]));
    }

    #[test]
    fn a_pid_reused_after_the_start_is_a_new_process() {
        let mut o = ShutdownOrder::new(Signo::TERM);
        let t = tree(&[program(10, ROOT, &["python"]), program(11, 10, &["sleep"])]);
        assert_eq!(sorted(o.step(&t).now), pids(&[10, 11]));
        // 11 ended; the next look no longer holds it; a new 11 below python waits.
        assert_eq!(o.step(&tree(&[program(10, ROOT, &["python"])])).now, vec![]);
        let t = tree(&[program(10, ROOT, &["python"]), program(11, 10, &["upload"])]);
        assert_eq!(o.step(&t), Pass { now: vec![], waiting: 1, first: false });
    }

    #[test]
    fn an_empty_tree_signals_nobody() {
        let mut o = ShutdownOrder::new(Signo::TERM);
        assert_eq!(o.step(&tree(&[])), Pass { now: vec![], waiting: 0, first: true });
    }
}

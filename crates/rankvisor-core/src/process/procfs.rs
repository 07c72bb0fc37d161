//! Finding our descendants in /proc, for the final sweep (processes that left the child's process
//! group with setsid would otherwise be SIGKILLed by the kernel when PID 1 exits, with no chance to
//! clean up) and for a shutdown's order (`tree_below`: which of them exec'd a program of their own,
//! which are forked copies of their parent).

use nix::unistd::Pid;
use std::collections::HashMap;
use std::io::Read;

/// The kernel's "forked but did not exec" flag (`PF_FORKNOEXEC`, include/linux/sched.h): set on
/// every new process by fork/clone, cleared by execve. Bit 0x40 of /proc/PID/stat's 9th field.
const PF_FORKNOEXEC: u64 = 0x40;

/// The most of a /proc/PID/cmdline read (a command line may be up to ARG_MAX, megabytes; what the
/// stop's order looks for is in its first arguments).
pub const CMDLINE_LIMIT: u64 = 16 * 1024;

/// One process as /proc/PID/stat describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcEntry {
    /// Its pid.
    pub pid: Pid,
    /// Its parent.
    pub ppid: Pid,
    /// Its state letter (R, S, Z, ...).
    pub state: char,
    /// Its process group.
    pub pgrp: Pid,
    /// A forked copy that has not exec'd (`PF_FORKNOEXEC`).
    pub forked: bool,
}

/// Parse the fields we need from a /proc/PID/stat line; `comm` may hold spaces and parentheses.
pub(super) fn parse_stat(line: &str) -> Option<ProcEntry> {
    let (head, rest) = line.rsplit_once(')')?;
    let pid = Pid::from_raw(head.split_once(' ')?.0.trim().parse().ok()?);
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = Pid::from_raw(fields.next()?.parse().ok()?);
    let pgrp = Pid::from_raw(fields.next()?.parse().ok()?);
    // session, tty_nr, tpgid, then flags.
    let flags: u64 = fields.nth(3)?.parse().ok()?;
    Some(ProcEntry { pid, ppid, state, pgrp, forked: flags & PF_FORKNOEXEC != 0 })
}

fn list() -> Vec<ProcEntry> {
    read_list().unwrap_or_default()
}

/// Every process in /proc; an error when /proc itself cannot be read.
fn read_list() -> std::io::Result<Vec<ProcEntry>> {
    let dir = std::fs::read_dir("/proc")?;
    Ok(dir
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name();
            let name = name.to_str()?;
            if !name.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            parse_stat(&std::fs::read_to_string(e.path().join("stat")).ok()?)
        })
        .collect())
}

/// The children of `parent`, zombies included (an unreadable /proc gives none).
pub fn children_of(parent: Pid) -> Vec<ProcEntry> {
    list().into_iter().filter(|p| p.ppid == parent).collect()
}

/// Every living (non-zombie) descendant of `root`.
pub fn alive_descendants(root: Pid) -> Vec<Pid> {
    descendants_of(root, &list()).into_iter().map(|p| p.pid).collect()
}

/// One living process below rankvisor, as a shutdown's order sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its pid.
    pub pid: Pid,
    /// Its parent: rankvisor itself for the child and for every process whose parent is gone.
    pub ppid: Pid,
    /// A forked copy of its parent that has not exec'd (`PF_FORKNOEXEC`).
    pub forked: bool,
    /// Its arguments, NUL-separated as /proc/PID/cmdline holds them, at most [`CMDLINE_LIMIT`]
    /// bytes; empty for a forked copy (its parent's) and when it cannot be read.
    pub cmdline: Vec<u8>,
}

/// The living processes below `root` (rankvisor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// rankvisor's pid: the parent of its child and of every orphan below it.
    pub root: Pid,
    /// Every living descendant.
    pub members: Vec<Member>,
}

/// Every living descendant of `root` with what a shutdown's order needs of it; an error only
/// when /proc cannot be read at all (a process that ends meanwhile is left out).
pub fn tree_below(root: Pid) -> std::io::Result<Tree> {
    let procs = read_list()?;
    let members = descendants_of(root, &procs)
        .into_iter()
        .map(|p| Member {
            pid: p.pid,
            ppid: p.ppid,
            forked: p.forked,
            cmdline: if p.forked { Vec::new() } else { read_cmdline(p.pid) },
        })
        .collect();
    Ok(Tree { root, members })
}

/// The head of /proc/PID/cmdline, empty when it cannot be read (the process ended).
fn read_cmdline(pid: Pid) -> Vec<u8> {
    let mut out = Vec::new();
    if let Ok(f) = std::fs::File::open(format!("/proc/{pid}/cmdline")) {
        let _ = f.take(CMDLINE_LIMIT).read_to_end(&mut out);
    }
    out
}

fn descendants_of(root: Pid, procs: &[ProcEntry]) -> Vec<&ProcEntry> {
    let mut children: HashMap<Pid, Vec<&ProcEntry>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        for c in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            if c.pid == root {
                continue;
            }
            if c.state != 'Z' && c.state != 'X' {
                out.push(*c);
            }
            stack.push(c.pid);
        }
    }
    out
}

/// What /proc says of a process that will not die: its name, its state (`D (disk sleep)`) and
/// the kernel function it waits in (`wchan`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stuck {
    /// Its pid.
    pub pid: Pid,
    /// Its command name (`comm`), as the process set it.
    pub name: String,
    /// Its state, letter and word.
    pub state: String,
    /// Where in the kernel it sleeps; empty when /proc does not say.
    pub wchan: String,
}

/// Every living descendant of `root`, as [`Stuck`] describes it (one that ended meanwhile is left out).
pub fn stuck_below(root: Pid) -> Vec<Stuck> {
    alive_descendants(root).into_iter().filter_map(describe).collect()
}

/// What /proc says of `pid`: its name, state and wait channel; None once it has ended.
pub fn describe(pid: Pid) -> Option<Stuck> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field =
        |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).map(|v| v.trim().to_string()).unwrap_or_default();
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    let wchan = if wchan.trim() == "0" { String::new() } else { wchan.trim().to_string() };
    Some(Stuck { pid, name: field("Name:"), state: field("State:"), wchan })
}

/// `root` and every living descendant, parents before their children (empty once `root` has ended).
pub fn subtree(root: Pid) -> Vec<ProcEntry> {
    let procs = list();
    let Some(top) = procs.iter().find(|p| p.pid == root) else { return Vec::new() };
    let mut children: HashMap<Pid, Vec<&ProcEntry>> = HashMap::new();
    for p in &procs {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut out = vec![top.clone()];
    let mut at = 0;
    while at < out.len() {
        let pid = out[at].pid;
        at += 1;
        for c in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            if c.pid != root && c.state != 'Z' && c.state != 'X' && !out.iter().any(|o| o.pid == c.pid) {
                out.push((*c).clone());
            }
        }
    }
    out
}

/// The head of /proc/PID/cmdline, empty when it cannot be read (the process ended).
pub fn cmdline(pid: Pid) -> Vec<u8> {
    read_cmdline(pid)
}

/// One line naming each stuck process: `pid 42 (sleep) D (disk sleep) in hrtimer_nanosleep`; the
/// names are the processes' own, escaped.
pub fn describe_stuck(stuck: &[Stuck]) -> String {
    if stuck.is_empty() {
        return "none is left".to_string();
    }
    let one = |s: &Stuck| {
        let name = crate::untrusted::escape(&s.name);
        let state = crate::untrusted::escape(&s.state);
        let wchan =
            if s.wchan.is_empty() { String::new() } else { format!(" in {}", crate::untrusted::escape(&s.wchan)) };
        format!("pid {} ({name}) {state}{wchan}", s.pid)
    };
    stuck.iter().map(one).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stuck_processes_are_named_with_state_and_wait_channel_escaped() {
        let s = |pid, name: &str, wchan: &str| Stuck {
            pid: Pid::from_raw(pid),
            name: name.into(),
            state: "D (disk sleep)".into(),
            wchan: wchan.into(),
        };
        assert_eq!(
            describe_stuck(&[s(42, "sleep", "hrtimer_nanosleep"), s(43, "evil\nname", "")]),
            "pid 42 (sleep) D (disk sleep) in hrtimer_nanosleep, pid 43 (evil\\nname) D (disk sleep)"
        );
        assert_eq!(describe_stuck(&[]), "none is left");
    }

    #[test]
    fn parses_odd_command_names_and_the_fork_flag() {
        let p = Pid::from_raw;
        // flags 4194368 = PF_FORKNOEXEC | PF_RANDOMIZE: a forked copy; 4194560 (no 0x40): exec'd.
        let e = parse_stat("42 (a b) c)) S 7 42 42 0 -1 4194368 0 0").unwrap();
        assert_eq!(e, ProcEntry { pid: p(42), ppid: p(7), state: 'S', pgrp: p(42), forked: true });
        assert!(!parse_stat("42 (x) S 7 42 42 0 -1 4194560 0").unwrap().forked);
        assert!(parse_stat("garbage").is_none());
        assert!(parse_stat("1 (x) S notanumber").is_none());
        assert!(parse_stat("1 (x) S 0").is_none(), "no process group");
        assert!(parse_stat("1 (x) S 0 1 1 0 -1").is_none(), "no flags");
    }

    #[test]
    fn walks_the_tree_and_skips_zombies() {
        let p = |pid, ppid, state| {
            let (pid, ppid) = (Pid::from_raw(pid), Pid::from_raw(ppid));
            ProcEntry { pid, ppid, state, pgrp: pid, forked: false }
        };
        let procs = [p(1, 0, 'S'), p(2, 1, 'S'), p(3, 2, 'Z'), p(4, 3, 'S'), p(5, 9, 'S'), p(6, 1, 'R')];
        let mut d: Vec<i32> = descendants_of(Pid::from_raw(1), &procs).into_iter().map(|e| e.pid.as_raw()).collect();
        d.sort();
        assert_eq!(d, [2, 4, 6]);
        assert!(descendants_of(Pid::from_raw(5), &procs).is_empty());
    }

    #[test]
    fn sees_our_own_child() {
        let mut c = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let me = Pid::this();
        let child = Pid::from_raw(c.id() as i32);
        assert!(alive_descendants(me).contains(&child));
        assert!(children_of(me).iter().any(|p| p.pid == child && p.ppid == me));
        c.kill().unwrap();
        c.wait().unwrap();
    }

    /// The kernel's flag tells a forked copy (python's os.fork) from an exec'd program (python),
    /// and the tree carries the program's arguments.
    #[test]
    fn tree_below_tells_a_forked_copy_from_an_exec_d_program() {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        // python forks a copy of itself that waits for python's end (EOF on the pipe), writes
        // the copy's pid and waits.
        let script = "import os, sys\n\
                      r, w = os.pipe()\n\
                      pid = os.fork()\n\
                      if pid == 0:\n    os.close(w); os.read(r, 1); os._exit(0)\n\
                      open(sys.argv[1], 'w').write(str(pid))\n\
                      os.read(r, 1)\n";
        let mut c = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(&ready)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let me = Pid::this();
        let python = Pid::from_raw(c.id() as i32);
        let copy: i32 = loop {
            if let Some(pid) = std::fs::read_to_string(&ready).ok().and_then(|s| s.parse().ok()) {
                break pid;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let tree = tree_below(me).unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
        assert_eq!(tree.root, me);
        let find = |pid: Pid| tree.members.iter().find(|m| m.pid == pid).cloned();
        let (parent, copy) = (find(python).expect("python"), find(Pid::from_raw(copy)).expect("its copy"));
        assert!(!parent.forked, "python exec'd: {parent:?}");
        let args: Vec<&[u8]> = parent.cmdline.split(|b| *b == 0).collect();
        assert_eq!(args.get(1), Some(&&b"-c"[..]), "{parent:?}");
        assert!(copy.forked && copy.ppid == python && copy.cmdline.is_empty(), "{copy:?}");
    }
}

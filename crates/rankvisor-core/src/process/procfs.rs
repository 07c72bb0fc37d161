//! Finding our descendants in /proc, for the final sweep: processes that left the child's process
//! group (setsid) would otherwise be SIGKILLed by the kernel when PID 1 exits, with no chance to clean up.

use nix::unistd::Pid;
use std::collections::HashMap;

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
}

/// Parse the fields we need from a /proc/PID/stat line; `comm` may hold spaces and parentheses.
pub(super) fn parse_stat(line: &str) -> Option<ProcEntry> {
    let (head, rest) = line.rsplit_once(')')?;
    let pid = Pid::from_raw(head.split_once(' ')?.0.trim().parse().ok()?);
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = Pid::from_raw(fields.next()?.parse().ok()?);
    let pgrp = Pid::from_raw(fields.next()?.parse().ok()?);
    Some(ProcEntry { pid, ppid, state, pgrp })
}

fn list() -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let name = e.file_name();
        let name = name.to_str()?;
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        parse_stat(&std::fs::read_to_string(e.path().join("stat")).ok()?)
    })
    .collect()
}

/// The children of `parent`, zombies included (an unreadable /proc gives none).
pub fn children_of(parent: Pid) -> Vec<ProcEntry> {
    list().into_iter().filter(|p| p.ppid == parent).collect()
}

/// Every living (non-zombie) descendant of `root`.
pub fn alive_descendants(root: Pid) -> Vec<Pid> {
    descendants_of(root, &list())
}

fn descendants_of(root: Pid, procs: &[ProcEntry]) -> Vec<Pid> {
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
                out.push(c.pid);
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
    alive_descendants(root)
        .into_iter()
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let field = |key: &str| {
                status.lines().find_map(|l| l.strip_prefix(key)).map(|v| v.trim().to_string()).unwrap_or_default()
            };
            let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
            let wchan = if wchan.trim() == "0" { String::new() } else { wchan.trim().to_string() };
            Some(Stuck { pid, name: field("Name:"), state: field("State:"), wchan })
        })
        .collect()
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
    fn parses_odd_command_names() {
        let e = parse_stat("42 (a b) c)) S 7 42 42 0 -1").unwrap();
        let p = Pid::from_raw;
        assert_eq!(e, ProcEntry { pid: p(42), ppid: p(7), state: 'S', pgrp: p(42) });
        assert!(parse_stat("garbage").is_none());
        assert!(parse_stat("1 (x) S notanumber").is_none());
        assert!(parse_stat("1 (x) S 0").is_none(), "no process group");
    }

    #[test]
    fn walks_the_tree_and_skips_zombies() {
        let p = |pid, ppid, state| {
            let (pid, ppid) = (Pid::from_raw(pid), Pid::from_raw(ppid));
            ProcEntry { pid, ppid, state, pgrp: pid }
        };
        let procs = [p(1, 0, 'S'), p(2, 1, 'S'), p(3, 2, 'Z'), p(4, 3, 'S'), p(5, 9, 'S'), p(6, 1, 'R')];
        let mut d: Vec<i32> = descendants_of(Pid::from_raw(1), &procs).into_iter().map(Pid::as_raw).collect();
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
}

//! The `/proc` facts of the child's tree: what every snapshot keeps, stacks or not.

use super::model::ProcessStacks;
use crate::process;
use nix::unistd::Pid;

/// The most bytes of a command line kept in a snapshot.
const COMMAND_BYTES: u64 = 1024;

/// `root` and every living process below it, with pid, parent, command, state and wait channel,
/// no stacks, and `reason` for each (the caller replaces it where it reads a stack).
pub fn proc_facts(root: Pid, reason: &str) -> Vec<ProcessStacks> {
    process::subtree(root)
        .into_iter()
        .filter_map(|e| {
            let d = process::describe(e.pid)?;
            let raw = process::cmdline(e.pid);
            let raw = &raw[..raw.len().min(COMMAND_BYTES as usize)];
            let args: Vec<String> = raw
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let command = if args.is_empty() { format!("[{}]", d.name) } else { args.join(" ") };
            Some(ProcessStacks {
                pid: e.pid.as_raw(),
                ppid: e.ppid.as_raw(),
                command,
                state: d.state,
                wchan: d.wchan,
                forked: e.forked,
                threads: Vec::new(),
                reason: Some(reason.to_string()),
            })
        })
        .collect()
}

/// Whether `pid` runs a Python interpreter: its executable is named `python…`, or it maps a
/// `libpython` (an embedding program); an ended process is not.
pub fn looks_like_python(pid: i32) -> bool {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if name.starts_with("python") {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains("/libpython"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_of_a_real_tree_parents_first() {
        let mut c = std::process::Command::new("sh").args(["-c", "sleep 30 & wait"]).spawn().unwrap();
        let root = Pid::from_raw(c.id() as i32);
        let facts = loop {
            let f = proc_facts(root, "not read");
            // Both there, and sleep asleep (just after its exec it may still be running).
            if f.len() == 2 && f[1].command == "sleep 30" && f[1].state.starts_with('S') {
                break f;
            }
            std::thread::yield_now();
        };
        let _ = nix::sys::signal::kill(Pid::from_raw(facts[1].pid), nix::sys::signal::Signal::SIGKILL);
        c.kill().unwrap();
        c.wait().unwrap();
        assert_eq!(facts[0].pid, root.as_raw());
        assert!(facts[0].command.starts_with("sh -c"), "{facts:?}");
        assert_eq!(facts[1].ppid, root.as_raw());
        assert_eq!(facts[1].command, "sleep 30");
        assert!(facts[1].state.starts_with('S'), "{facts:?}");
        assert_eq!(facts[1].reason.as_deref(), Some("not read"));
        assert!(!looks_like_python(facts[1].pid));
    }
}

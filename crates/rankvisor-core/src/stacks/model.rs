//! The snapshot's schema (the reader's output, `GET /stacks`) and its summary (the report, the
//! rendezvous frames, the job's grouping). docs/reporting.md describes both.

use serde::{Deserialize, Serialize};

/// One Python frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PyFrame {
    /// The function's name.
    pub function: String,
    /// Its file, as the interpreter names it.
    pub file: String,
    /// The line being run (0 when unknown).
    pub line: i32,
}

impl PyFrame {
    /// `slow_here (hang.py:3)`: the function, the file's last component and the line; escaped.
    pub fn short(&self) -> String {
        let file = self.file.rsplit('/').next().unwrap_or(&self.file);
        let f = crate::untrusted::escape(&cut(&self.function, 200)).into_owned();
        let file = crate::untrusted::escape(&cut(file, 80)).into_owned();
        if self.line > 0 {
            format!("{f} ({file}:{})", self.line)
        } else {
            format!("{f} ({file})")
        }
    }
}

/// One thread's Python stack, innermost frame first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadStack {
    /// The OS thread id, when known.
    pub os_thread_id: Option<u64>,
    /// Its Python name (`MainThread`), when known.
    pub name: Option<String>,
    /// The process's main thread (its OS thread id is the pid).
    pub main: bool,
    /// Running Python code (or holding the GIL), not idle in a wait.
    pub active: bool,
    /// Innermost first.
    pub frames: Vec<PyFrame>,
}

/// One process of the child's tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStacks {
    /// Its pid.
    pub pid: i32,
    /// Its parent's pid.
    pub ppid: i32,
    /// Its command line, arguments joined by spaces (bounded).
    pub command: String,
    /// Its state from /proc/PID/status (`S (sleeping)`).
    pub state: String,
    /// The kernel function it sleeps in; empty when /proc does not say.
    pub wchan: String,
    /// A forked copy of its parent that has not exec'd (a DataLoader worker).
    pub forked: bool,
    /// Every Python thread's stack (empty when not read).
    #[serde(default)]
    pub threads: Vec<ThreadStack>,
    /// Why there is no stack (not Python, permission, an unsupported version, the deadline).
    #[serde(default)]
    pub reason: Option<String>,
}

impl ProcessStacks {
    /// The main thread's stack, when it was read.
    pub fn main_thread(&self) -> Option<&ThreadStack> {
        self.threads.iter().find(|t| t.main).or_else(|| self.threads.first())
    }
}

/// A replica's snapshot: every process from the child down, parents before their children.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The child's pid: the root of the tree.
    pub root: i32,
    /// How long the reading took, in milliseconds.
    pub elapsed_ms: u64,
    /// What read the stacks (`py-spy 0.4.3`), or why nothing did.
    pub reader: String,
    /// Frames or threads were left out to stay within the bound.
    pub truncated: bool,
    /// The processes.
    pub processes: Vec<ProcessStacks>,
}

/// The most frames of a summary.
pub const MAX_SUMMARY_FRAMES: usize = 24;

/// What the reports and the master carry of a snapshot: the training process's main thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StacksSummary {
    /// When it was taken (RFC 3339).
    pub taken_at: String,
    /// Why it was taken (`hung`, `LogHang_<rule>`, `survived SIGTERM`, `asked`).
    pub why: String,
    /// The training process's pid, when there is one.
    pub pid: Option<i32>,
    /// Its main thread's frames, innermost first, as `function (file:line)`; escaped and bounded.
    pub frames: Vec<String>,
    /// One line: `pid 42 in slow_here (hang.py:3)`, or the process's state and why there is no stack.
    pub top: String,
}

impl Snapshot {
    /// The training process: the deepest Python process with a stack that exec'd its program
    /// (torchrun's worker, not torchrun; not a forked DataLoader worker); else the root.
    pub fn training_process(&self) -> Option<&ProcessStacks> {
        let depth = |p: &ProcessStacks| {
            let mut d = 0;
            let mut at = p.ppid;
            while let Some(parent) = self.processes.iter().find(|q| q.pid == at) {
                d += 1;
                at = parent.ppid;
                if d > self.processes.len() {
                    break;
                }
            }
            d
        };
        let python =
            self.processes.iter().filter(|p| !p.forked && p.main_thread().is_some_and(|t| !t.frames.is_empty()));
        python.max_by_key(|p| (depth(p), -p.pid)).or_else(|| self.processes.iter().find(|p| p.pid == self.root))
    }

    /// The summary of this snapshot, taken at `taken_at` because of `why`.
    pub fn summary(&self, why: &str, taken_at: String) -> StacksSummary {
        let Some(p) = self.training_process() else {
            let top = format!("no process below the child {}: {}", self.root, crate::untrusted::escape(&self.reader));
            return StacksSummary { taken_at, why: why.into(), pid: None, frames: Vec::new(), top };
        };
        let frames: Vec<String> = p
            .main_thread()
            .map(|t| t.frames.iter().take(MAX_SUMMARY_FRAMES).map(PyFrame::short).collect())
            .unwrap_or_default();
        let top = match frames.first() {
            Some(f) => format!("pid {} in {f}", p.pid),
            None => {
                let name = p.command.split(' ').next().unwrap_or_default();
                let name = name.rsplit('/').next().unwrap_or(name);
                let wchan = if p.wchan.is_empty() { String::new() } else { format!(" in {}", p.wchan) };
                let reason = p.reason.as_deref().unwrap_or("no Python stack");
                let line = format!("pid {} ({name}) {}{wchan}: {reason}", p.pid, p.state);
                crate::untrusted::escape(&line).into_owned()
            }
        };
        StacksSummary { taken_at, why: why.into(), pid: Some(p.pid), frames, top }
    }
}

/// The most characters of one frame, and of a summary's other lines, kept from a peer.
const MAX_LINE_CHARS: usize = 300;

/// `text` cut at `max` characters.
fn cut(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

impl StacksSummary {
    /// A summary as a peer sent it, made safe for a log line and bounded: at most
    /// [`MAX_SUMMARY_FRAMES`] frames, each line cut, every hidden character escaped (what the
    /// peer escaped itself stays as it is).
    pub fn from_peer(self) -> Self {
        let clean = |t: &str| crate::untrusted::escape_hidden(&cut(t, MAX_LINE_CHARS)).into_owned();
        StacksSummary {
            taken_at: clean(&self.taken_at),
            why: clean(&self.why),
            pid: self.pid,
            frames: self.frames.iter().take(MAX_SUMMARY_FRAMES).map(|f| clean(f)).collect(),
            top: clean(&self.top),
        }
    }

    /// What replicas are grouped by: the frames, or where there are none the top line without its pid.
    pub fn signature(&self) -> Vec<String> {
        if !self.frames.is_empty() {
            return self.frames.clone();
        }
        let rest = self.top.split_once(' ').and_then(|(_, r)| r.split_once(' ')).map_or(self.top.as_str(), |(_, r)| r);
        vec![rest.to_string()]
    }
}

/// `snapshot` cut to at most `max` bytes of JSON: fewer frames per thread (64, 16, 4), then no
/// threads but the main one's, then no stacks at all (the `/proc` facts stay), then fewer processes.
pub fn bound(mut snapshot: Snapshot, max: usize) -> Snapshot {
    let fits = |s: &Snapshot| serde_json::to_vec(s).is_ok_and(|v| v.len() <= max);
    if fits(&snapshot) {
        return snapshot;
    }
    snapshot.truncated = true;
    for keep in [64, 16, 4] {
        for t in snapshot.processes.iter_mut().flat_map(|p| p.threads.iter_mut()) {
            t.frames.truncate(keep);
        }
        if fits(&snapshot) {
            return snapshot;
        }
    }
    for p in &mut snapshot.processes {
        p.threads.retain(|t| t.main);
    }
    if fits(&snapshot) {
        return snapshot;
    }
    for p in &mut snapshot.processes {
        p.threads.clear();
        p.command = p.command.chars().take(256).collect();
    }
    while !fits(&snapshot) && snapshot.processes.len() > 1 {
        snapshot.processes.pop();
    }
    snapshot
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn frame(function: &str, file: &str, line: i32) -> PyFrame {
        PyFrame { function: function.into(), file: file.into(), line }
    }

    pub(crate) fn process(pid: i32, ppid: i32, frames: Vec<PyFrame>) -> ProcessStacks {
        let threads = if frames.is_empty() {
            Vec::new()
        } else {
            vec![ThreadStack { os_thread_id: Some(pid as u64), name: None, main: true, active: false, frames }]
        };
        ProcessStacks {
            pid,
            ppid,
            command: "python3 x.py".into(),
            state: "S (sleeping)".into(),
            wchan: "do_select".into(),
            forked: false,
            threads,
            reason: None,
        }
    }

    #[test]
    fn the_training_process_is_the_deepest_exec_d_python_process() {
        let torchrun = process(10, 1, vec![frame("_monitor", "/x/api.py", 5)]);
        let worker = process(11, 10, vec![frame("slow_here", "/w/train.py", 40), frame("main", "/w/train.py", 90)]);
        let mut loader = process(12, 11, vec![frame("_worker_loop", "/t/worker.py", 300)]);
        loader.forked = true;
        let s = Snapshot { root: 10, processes: vec![torchrun, worker, loader], ..Snapshot::default() };
        assert_eq!(s.training_process().unwrap().pid, 11);
        let sum = s.summary("hung", "t".into());
        assert_eq!(sum.top, "pid 11 in slow_here (train.py:40)");
        assert_eq!(sum.frames, ["slow_here (train.py:40)", "main (train.py:90)"]);
        assert_eq!(sum.signature(), sum.frames);
    }

    #[test]
    fn a_process_without_a_stack_is_named_by_its_state_and_reason_escaped() {
        let mut p = process(7, 1, vec![]);
        p.command = "/bin/sle\nep 100".into();
        p.reason = Some("not a Python process".into());
        let s = Snapshot { root: 7, processes: vec![p], ..Snapshot::default() };
        let sum = s.summary("asked", "t".into());
        assert_eq!(sum.top, "pid 7 (sle\\nep) S (sleeping) in do_select: not a Python process");
        assert_eq!(sum.signature(), ["(sle\\nep) S (sleeping) in do_select: not a Python process"]);
        let none = Snapshot { root: 9, reader: "gone".into(), ..Snapshot::default() }.summary("asked", "t".into());
        assert_eq!((none.pid, none.top.as_str()), (None, "no process below the child 9: gone"));
    }

    #[test]
    fn a_peers_summary_is_bounded_and_its_hidden_characters_escaped() {
        let hostile = StacksSummary {
            taken_at: "t".into(),
            why: "hung\u{1b}[2J".into(),
            pid: Some(1),
            frames: (0..100).map(|i| format!("f{i} (x.py:1)\nforged line")).collect(),
            top: "x".repeat(10_000),
        };
        let s = hostile.from_peer();
        assert_eq!(s.frames.len(), MAX_SUMMARY_FRAMES);
        assert_eq!(s.frames[0], "f0 (x.py:1)\\nforged line");
        assert_eq!(s.why, "hung\\u{1b}[2J");
        assert_eq!(s.top.len(), MAX_LINE_CHARS);
        let ours =
            Snapshot { root: 1, processes: vec![process(1, 0, vec![frame("a\\b", "x.py", 2)])], ..Snapshot::default() };
        let mine = ours.summary("asked", "t".into());
        assert_eq!(mine.clone().from_peer(), mine, "what a replica escaped itself is left as it is");
    }

    #[test]
    fn a_big_snapshot_is_cut_to_the_bound_keeping_the_proc_facts() {
        let deep: Vec<PyFrame> = (0..500).map(|i| frame(&format!("f{i}"), "/a/very/long/path/module.py", i)).collect();
        let processes = (0..40).map(|i| process(100 + i, 1, deep.clone())).collect();
        let s = bound(Snapshot { root: 100, processes, ..Snapshot::default() }, crate::stacks::MAX_BYTES);
        assert!(serde_json::to_vec(&s).unwrap().len() <= crate::stacks::MAX_BYTES);
        assert!(s.truncated);
        assert_eq!(s.processes.len(), 40, "every process's /proc facts are kept");
        let small =
            Snapshot { root: 1, processes: vec![process(1, 0, vec![frame("f", "x.py", 1)])], ..Snapshot::default() };
        assert_eq!(bound(small.clone(), crate::stacks::MAX_BYTES), small);
    }
}

//! One finished `rankvisor dry-run`, as the tests that run one to its end read it: the exit code,
//! the JSON watch events of `--output json` and both outputs. Each test file adds the readings of
//! its own (`impl DryRun` blocks there); what more than one file reads is here.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// One finished dry run.
pub struct DryRun {
    pub code: i32,
    pub events: Vec<Value>,
    pub stdout: String,
    pub stderr: String,
}

/// The lines of `stdout` that are JSON (the watch events), any other line left out.
pub fn json_lines(stdout: &str) -> Vec<Value> {
    stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

impl DryRun {
    /// `rankvisor dry-run --output json --master-port 0 --timeout 60s ARGS... MANIFEST` to its
    /// end (a free port, a safety timeout), its watch events read by [`json_lines`].
    pub fn json(manifest: &Path, args: &[&str]) -> Self {
        let out = Command::new(super::bin())
            .args(["dry-run", "--output", "json", "--master-port", "0", "--timeout", "60s"])
            .args(args)
            .arg(manifest)
            .output()
            .expect("run rankvisor dry-run");
        Self::new(&out, json_lines)
    }

    /// The dry run that printed `out`, its watch events read from its stdout by `events` (say
    /// [`json_lines`]).
    pub fn new(out: &Output, events: impl FnOnce(&str) -> Vec<Value>) -> Self {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        DryRun {
            code: out.status.code().unwrap_or(-1),
            events: events(&stdout),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// A `kind`'s (`fields.state`, `fields.<second>`) over time, repeats left out.
    pub fn states(&self, kind: &str, second: &str) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = Vec::new();
        for e in self.of_kind(kind) {
            let field = |name: &str| e["fields"][name].as_str().unwrap_or("").to_string();
            let s = (field("state"), field(second));
            if v.last() != Some(&s) {
                v.push(s);
            }
        }
        v
    }

    /// The events about objects of `kind` (`PyTorchJob`, `Pod`, `PodGroup`), in order.
    pub fn of_kind(&self, kind: &str) -> impl Iterator<Item = &Value> {
        let kind = kind.to_string();
        self.events.iter().filter(move |e| e["kind"] == kind.as_str())
    }

    /// The job's STATE column over time, blanks and repeats left out.
    pub fn job_states(&self) -> Vec<String> {
        let mut states: Vec<String> = Vec::new();
        for e in self.of_kind("PyTorchJob") {
            if let Some(s) = e["fields"]["state"].as_str() {
                if states.last().map(String::as_str) != Some(s) {
                    states.push(s.to_string());
                }
            }
        }
        states
    }

    /// The exit code and both outputs, for an assertion's message.
    pub fn explain(&self) -> String {
        format!("exit {}\n--- stdout\n{}--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

//! `rankvisor-stacks PID [--budget-ms N]`: one JSON snapshot (`rankvisor_core::stacks::Snapshot`)
//! of PID and every process below it on stdout: each process's `/proc` facts and, for Python
//! processes, every thread's stack, read from outside as `py-spy dump` does. A stack that cannot
//! be read keeps the facts and says why. Bounded: at most `stacks::MAX_BYTES` of output, and
//! reading stops at the budget (what is left says so). rankvisor runs it with a deadline.

use rankvisor_core::stacks::{self, ProcessStacks, PyFrame, Snapshot, ThreadStack};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Exit status for bad arguments (as rankvisor's configuration errors).
const USAGE: i32 = 64;

fn main() {
    let started = Instant::now();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (root, budget) = match parse(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\nusage: rankvisor-stacks PID [--budget-ms N]");
            std::process::exit(USAGE);
        }
    };
    let mut processes = stacks::proc_facts(nix::unistd::Pid::from_raw(root), "not read");
    let deadline = started + budget;
    for p in &mut processes {
        p.reason = read_one(p, deadline).err();
    }
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let reader = format!("py-spy {}", PY_SPY_VERSION);
    let snapshot = stacks::bound(Snapshot { root, elapsed_ms, reader, truncated: false, processes }, stacks::MAX_BYTES);
    match serde_json::to_string(&snapshot) {
        Ok(json) => println!("{json}"),
        Err(e) => {
            eprintln!("error: cannot encode the snapshot: {e}");
            std::process::exit(1);
        }
    }
    // A read that did not finish is still running in its thread: exit ends it.
    std::process::exit(0);
}

/// The py-spy release this reader is built on (Cargo.lock pins it).
const PY_SPY_VERSION: &str = "0.4";

fn parse(args: &[String]) -> Result<(i32, Duration), String> {
    let mut pid = None;
    let mut budget = Duration::from_millis(1_500);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--budget-ms" => {
                let v = it.next().ok_or("--budget-ms needs a value")?;
                let ms: u64 = v.parse().map_err(|_| format!("--budget-ms {v:?}: expected milliseconds"))?;
                budget = Duration::from_millis(ms);
            }
            other => match other.parse::<i32>() {
                Ok(n) if n > 0 && pid.is_none() => pid = Some(n),
                _ => return Err(format!("unexpected argument {:?}: expected one PID", other)),
            },
        }
    }
    Ok((pid.ok_or("no PID given")?, budget))
}

/// Read one process's Python stacks into `p` before `deadline`; Err: why there are none.
fn read_one(p: &mut ProcessStacks, deadline: Instant) -> Result<(), String> {
    if p.state.starts_with('Z') {
        return Err("a zombie: it has exited".into());
    }
    if !stacks::looks_like_python(p.pid) {
        return Err("not a Python process".into());
    }
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err("not read: the snapshot's deadline passed first".into());
    }
    // A read can block (a process in uninterruptible sleep cannot be stopped): it runs in a
    // thread, and the snapshot goes on without it past the deadline.
    let (tx, rx) = mpsc::channel();
    let pid = p.pid;
    std::thread::spawn(move || {
        let _ = tx.send(read_python(pid));
    });
    match rx.recv_timeout(left) {
        Ok(Ok(threads)) => {
            p.threads = threads;
            Ok(())
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err("not read: its read did not finish within the snapshot's deadline".into()),
    }
}

fn read_python(pid: i32) -> Result<Vec<ThreadStack>, String> {
    let config = py_spy::Config { include_idle: true, ..py_spy::Config::default() };
    let mut spy = py_spy::PythonSpy::new(pid, &config).map_err(explain)?;
    let traces = spy.get_stack_traces().map_err(explain)?;
    let main_index = main_thread(pid, &traces);
    Ok(traces
        .into_iter()
        .enumerate()
        .map(|(i, t)| ThreadStack {
            os_thread_id: t.os_thread_id,
            name: t.thread_name,
            main: Some(i) == main_index,
            active: t.active,
            frames: t
                .frames
                .into_iter()
                .map(|f| PyFrame { function: f.name, file: f.filename, line: f.line })
                .collect(),
        })
        .collect())
}

/// The main thread: the one whose OS thread id is the pid, else the one named `MainThread`, else
/// the oldest (py-spy lists the interpreter's threads newest first).
fn main_thread(pid: i32, traces: &[py_spy::StackTrace]) -> Option<usize> {
    traces
        .iter()
        .position(|t| t.os_thread_id == Some(pid as u64))
        .or_else(|| traces.iter().position(|t| t.thread_name.as_deref() == Some("MainThread")))
        .or_else(|| traces.len().checked_sub(1))
}

/// py-spy's error chain in one line, with what to do about a permission error.
fn explain(e: impl std::fmt::Display) -> String {
    let text = format!("{e:#}");
    if text.contains("Permission denied") || text.contains("Operation not permitted") {
        format!(
            "{text} (reading another process's memory needs ptrace access: same user, and under Yama \
             ptrace_scope 1 the reader must descend from it, else CAP_SYS_PTRACE)"
        )
    } else {
        text
    }
}

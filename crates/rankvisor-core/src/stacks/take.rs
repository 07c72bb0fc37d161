//! Taking a snapshot from the PID 1: `rankvisor-stacks PID` as a subprocess in its own process
//! group, its output read without blocking the event loop, bounded in bytes and in time. Nothing
//! waits for it: the one reaper collects its exit like any other process's.

use super::model::{bound, Snapshot};
use super::procfs::proc_facts;
use super::{DEADLINE, MAX_BYTES};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::AsyncReadExt;

/// The reader's binary, beside `rankvisor`.
pub const READER_NAME: &str = "rankvisor-stacks";
/// The variable naming another reader binary.
pub const READER_ENV: &str = "RANKVISOR_STACKS_READER";

/// How long the reader may read stacks: the rest of [`DEADLINE`] is its start and its output.
const READER_BUDGET_MS: u64 = 1_500;

/// Where the stack reader is, if anywhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reader {
    /// The binary; None when there is none.
    pub path: Option<PathBuf>,
}

/// Snapshots one at a time (a flood of `GET /stacks` starts one reader at a time, not one each).
#[derive(Debug, Default)]
pub struct Snapshotter {
    reader: Reader,
    busy: tokio::sync::Mutex<()>,
}

impl Snapshotter {
    /// Snapshots read by `reader`.
    pub fn new(reader: Reader) -> Self {
        Self { reader, busy: tokio::sync::Mutex::new(()) }
    }

    /// [`take`], after any snapshot already being taken.
    pub async fn take(&self, root: Pid) -> Snapshot {
        let _one = self.busy.lock().await;
        take(&self.reader, root).await
    }
}

/// The reader named by `named` ([`READER_ENV`]), else `rankvisor-stacks` beside `exe`, else in a
/// directory of `path` (`PATH`), where it is a file.
pub fn reader_beside(exe: Option<&Path>, named: Option<PathBuf>, path: Option<&std::ffi::OsStr>) -> Reader {
    let beside = exe.and_then(Path::parent).map(|d| d.join(READER_NAME)).filter(|p| p.is_file());
    let on_path = || path.and_then(|p| std::env::split_paths(p).map(|d| d.join(READER_NAME)).find(|p| p.is_file()));
    Reader { path: named.filter(|p| !p.as_os_str().is_empty()).or(beside).or_else(on_path) }
}

/// A snapshot of `root` (the child) and every process below it, within [`DEADLINE`] and
/// [`MAX_BYTES`]. Never fails: where the reader is missing or does not answer, the `/proc` facts
/// say why.
pub async fn take(reader: &Reader, root: Pid) -> Snapshot {
    let started = tokio::time::Instant::now();
    let Some(path) = &reader.path else {
        let why = format!("no stack reader: {READER_NAME} is not beside rankvisor and {READER_ENV} is not set");
        return facts_only(root, why, started);
    };
    match run(path, root, started).await {
        Ok(s) => bound(s, MAX_BYTES),
        Err(why) => facts_only(root, format!("stack reader {}: {why}", path.display()), started),
    }
}

fn facts_only(root: Pid, why: String, started: tokio::time::Instant) -> Snapshot {
    let processes = proc_facts(root, &why);
    let elapsed_ms = started.elapsed().as_millis() as u64;
    bound(Snapshot { root: root.as_raw(), elapsed_ms, reader: why, truncated: false, processes }, MAX_BYTES)
}

async fn run(path: &Path, root: Pid, started: tokio::time::Instant) -> Result<Snapshot, String> {
    let mut child = std::process::Command::new(path)
        .arg(root.as_raw().to_string())
        .arg("--budget-ms")
        .arg(READER_BUDGET_MS.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start: {e}"))?;
    let group = Pid::from_raw(child.id() as i32);
    let stdout = child.stdout.take().ok_or("no output pipe")?;
    // Dropped without a wait: the reaper collects it.
    drop(child);
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(stdout))
        .map_err(|e| format!("cannot read its output: {e}"))?;
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 8192];
        loop {
            let n = pipe.read(&mut buf).await?;
            if n == 0 || out.len() + n > MAX_BYTES * 2 {
                return Ok::<bool, std::io::Error>(n == 0);
            }
            out.extend_from_slice(&buf[..n]);
        }
    };
    let ended = tokio::time::timeout_at(started + DEADLINE, read).await;
    // Whatever it did, nothing of it is left running.
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    match ended {
        Err(_) => Err(format!("no answer within {DEADLINE:?}")),
        Ok(Err(e)) => Err(format!("cannot read its output: {e}")),
        Ok(Ok(false)) => Err(format!("more than {} bytes of output", MAX_BYTES * 2)),
        Ok(Ok(true)) => serde_json::from_slice(&out).map_err(|e| {
            let head = String::from_utf8_lossy(&out[..out.len().min(200)]).into_owned();
            format!("its output is not a snapshot ({e}): {}", crate::untrusted::escape(&head))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_named_reader_wins_over_the_one_beside() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("rankvisor");
        assert_eq!(reader_beside(Some(&exe), None, None), Reader { path: None });
        let on_path = std::env::join_paths(["/nonexistent".into(), dir.path().to_path_buf()]).unwrap();
        std::fs::write(dir.path().join(READER_NAME), "").unwrap();
        assert_eq!(reader_beside(None, None, Some(&on_path)).path, Some(dir.path().join(READER_NAME)));
        assert_eq!(reader_beside(Some(&exe), None, None).path, Some(dir.path().join(READER_NAME)));
        assert_eq!(reader_beside(Some(&exe), Some("/x/r".into()), None).path, Some(PathBuf::from("/x/r")));
        assert_eq!(reader_beside(None, Some("".into()), None).path, None);
    }

    #[tokio::test]
    async fn a_missing_or_silent_reader_leaves_the_proc_facts_and_says_why() {
        let mut c = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let root = Pid::from_raw(c.id() as i32);
        let none = take(&Reader::default(), root).await;
        assert!(none.reader.starts_with("no stack reader"), "{none:?}");
        assert_eq!(none.processes.len(), 1);
        assert_eq!(none.processes[0].command, "sleep 30");
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("reader");
        std::fs::write(&bad, "#!/bin/sh\necho not json\n").unwrap();
        std::fs::set_permissions(&bad, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let s = take(&Reader { path: Some(bad) }, root).await;
        assert!(s.reader.contains("not a snapshot") && s.reader.contains("not json"), "{s:?}");
        assert_eq!(s.processes[0].reason.as_deref(), Some(s.reader.as_str()));
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

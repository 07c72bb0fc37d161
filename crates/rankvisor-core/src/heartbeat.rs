//! The heartbeat file: any write is a beat; a JSON object written there is training progress.

use serde_json::{Map, Value};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use tokio::time::Instant;
use tracing::warn;

use crate::untrusted::files::{self, FileError};

/// Only the head of the heartbeat file is read (progress is a small JSON object): a child that
/// appends to the file forever must not make each beat cost the whole file.
pub const MAX_HEARTBEAT_BYTES: u64 = 1 << 20;

/// Training progress read from a JSON heartbeat (`step`, `loss`, `checkpoint_step`, anything else).
pub type Progress = Map<String, Value>;

/// A change of the heartbeat file.
#[derive(Debug, Clone, PartialEq)]
pub struct Beat {
    /// When the file was written (its mtime, on the monotonic clock).
    pub at: Instant,
    /// The progress it holds, when it is a JSON object.
    pub progress: Option<Progress>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    mtime: SystemTime,
    len: u64,
    ino: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp { mtime: m.modified().ok()?, len: m.len(), ino: m.ino() })
}

/// Read `text` as progress: a JSON object, else nothing (a plain touch is a beat without progress).
pub fn parse_progress(text: &str) -> Option<Progress> {
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

/// Check `--heartbeat-file` at start: absent (the child creates it) or a regular file; a FIFO,
/// device, socket or directory is refused with an error naming the path and what is there.
pub fn check_path(path: &Path) -> Result<(), FileError> {
    files::regular_or_absent(path)
}

/// Read the progress in the head of the heartbeat file, without ever blocking (see `files`).
pub fn read_progress(path: &Path) -> Result<Option<Progress>, FileError> {
    let head = files::read_head(path, MAX_HEARTBEAT_BYTES)?;
    Ok(parse_progress(&String::from_utf8_lossy(&head)))
}

/// Watches one heartbeat file by its (mtime, size, inode) stamp.
#[derive(Debug)]
pub struct HeartbeatFile {
    path: PathBuf,
    last: Option<Stamp>,
    /// Set once a read failed, so a broken file is reported once, not at every poll.
    warned: bool,
}

impl HeartbeatFile {
    /// Watch `path`; whatever is there now does not count as a beat.
    pub fn new(path: PathBuf) -> Self {
        let last = stamp(&path);
        Self { path, last, warned: false }
    }

    /// The watched path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Forget earlier beats: called at each child start, so a stale file from the last run is no beat.
    pub fn arm(&mut self) {
        self.last = stamp(&self.path);
    }

    /// A beat, if the file changed since the last call.
    pub fn check(&mut self, now: Instant) -> Option<Beat> {
        let s = stamp(&self.path)?;
        if self.last == Some(s) {
            return None;
        }
        self.last = Some(s);
        let age = SystemTime::now().duration_since(s.mtime).unwrap_or_default();
        let at = now.checked_sub(age).unwrap_or(now).min(now);
        let progress = match read_progress(&self.path) {
            Ok(p) => {
                self.warned = false;
                p
            }
            // A file that is not a regular file gives no beat: the hang check sees silence.
            Err(e @ FileError::NotRegular { .. }) => {
                if !std::mem::replace(&mut self.warned, true) {
                    warn!("heartbeat file ignored: {e}");
                }
                return None;
            }
            Err(_) => None,
        };
        Some(Beat { at, progress })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_a_json_object_only() {
        let p = parse_progress(r#"{"step": 12, "loss": 0.5, "checkpoint_step": 10, "lr": 0.001}"#).unwrap();
        assert_eq!(p["step"], 12);
        assert_eq!(p["lr"], 0.001);
        assert!(parse_progress("").is_none());
        assert!(parse_progress("12").is_none());
        assert!(parse_progress("[1]").is_none());
        assert!(parse_progress("{broken").is_none());
    }

    #[tokio::test]
    async fn a_write_is_a_beat_and_a_stale_file_is_not() {
        let dir = std::env::temp_dir().join(format!("rv-hb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("hb");
        std::fs::write(&path, "old").unwrap();
        let mut hb = HeartbeatFile::new(path.clone());
        assert!(hb.check(Instant::now()).is_none(), "a file that was already there is no beat");
        std::fs::write(&path, r#"{"step":3}"#).unwrap();
        let beat = hb.check(Instant::now()).expect("beat");
        assert_eq!(beat.progress.unwrap()["step"], 3);
        assert!(beat.at <= Instant::now());
        assert!(hb.check(Instant::now()).is_none(), "no change, no beat");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_the_head_of_a_huge_file_is_read() {
        let dir = std::env::temp_dir().join(format!("rv-hb-big-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("hb");
        let small = r#"{"step":1}"#;
        std::fs::write(&path, small).unwrap();
        assert_eq!(read_progress(&path).unwrap().unwrap()["step"], 1);
        // Sparse: 4 GiB of apparent size costs no disk, and reading it whole would cost 4 GiB.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(4 << 30).unwrap();
        drop(f);
        let head = files::read_head(&path, MAX_HEARTBEAT_BYTES).unwrap();
        assert_eq!(head.len() as u64, MAX_HEARTBEAT_BYTES);
        assert_eq!(read_progress(&path).unwrap(), None, "a cut JSON object is no progress");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

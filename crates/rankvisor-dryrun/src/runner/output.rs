//! What the dry run writes on stderr: its own notes, and each replica's output prefixed with its pod.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use tokio::io::{AsyncRead, AsyncReadExt};

use rankvisor_core::lines::{LineSplitter, Overlong};

use super::launcher::{prefixed, MAX_OUTPUT_LINE};
use crate::render::timeline::{render as render_timeline, Recording, TimelineFormat};

/// One line on stderr from the dry run itself.
pub(super) fn note(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "dry-run: {message}");
}

/// Append-only log file for a replica (kept across its restarts and recreations).
pub(super) fn open_log(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

pub(super) type Output = Box<dyn AsyncRead + Unpin + Send>;

pub(super) fn boxed(out: impl AsyncRead + Unpin + Send + 'static) -> Output {
    Box::new(out)
}

/// Copy a replica's output to stderr, each line prefixed with its pod's name.
pub(super) async fn relay_output(mut out: Output, pod: String, width: usize) {
    let mut splitter = LineSplitter::new(MAX_OUTPUT_LINE, Overlong::Cut);
    let mut buf = vec![0u8; 8192];
    loop {
        match out.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let lines = splitter.push(buf.get(..n).unwrap_or_default()).unwrap_or_default();
                write_lines(&pod, width, lines);
            }
        }
    }
    write_lines(&pod, width, splitter.finish());
}

/// Each line (its `\r` before the newline trimmed, bytes that are not UTF-8 replaced), prefixed.
fn write_lines(pod: &str, width: usize, lines: impl IntoIterator<Item = Vec<u8>>) {
    let mut err = std::io::stderr().lock();
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(&line);
        let _ = writeln!(err, "{}", prefixed(pod, width, &String::from_utf8_lossy(line)));
    }
}

/// Write the timeline; a file that cannot be written turns a success into exit 1.
pub(super) fn write_timeline(path: &Path, recording: Recording, code: i32) -> i32 {
    let failed = if code == 0 { 1 } else { code };
    let text = match TimelineFormat::from_path(path) {
        Ok(format) => render_timeline(&recording, format),
        Err(e) => {
            eprintln!("dry-run: {e}");
            return failed;
        }
    };
    match std::fs::write(path, text) {
        Ok(()) => {
            note(&format!("timeline written to {}", path.display()));
            code
        }
        Err(e) => {
            eprintln!("dry-run: cannot write the timeline to {}: {e}", path.display());
            failed
        }
    }
}

//! `--status-fd N`: every status change as one JSON line on an inherited file descriptor. The dry
//! run and the tests read it to follow a replica without parsing logs or sleeping.

use crate::report::LocalStatus;
use std::fs::File;
use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::sync::mpsc;

/// Sends status lines to a writer thread, so a slow reader never blocks supervision.
#[derive(Debug, Clone)]
pub struct StatusSink {
    tx: mpsc::Sender<Msg>,
}

#[derive(Debug)]
enum Msg {
    Line(String),
    Flush(mpsc::Sender<()>),
}

/// The descriptor is not usable.
#[derive(Debug, thiserror::Error)]
#[error("--status-fd {fd} (RANKVISOR_STATUS_FD) is not an open file descriptor: {problem}")]
pub struct StatusFdError {
    fd: RawFd,
    problem: String,
}

impl StatusSink {
    /// Take ownership of `fd` (marked close-on-exec, so the child does not inherit it).
    pub fn from_fd(fd: RawFd) -> Result<Self, StatusFdError> {
        let err = |problem: String| StatusFdError { fd, problem };
        if fd < 3 {
            return Err(err("expected a descriptor >= 3 (0-2 are stdio)".into()));
        }
        // SAFETY: fcntl on an integer descriptor has no memory-safety preconditions.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags < 0 {
            return Err(err(std::io::Error::last_os_error().to_string()));
        }
        // SAFETY: as above.
        unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
        // SAFETY: the descriptor is open (checked above) and from here on owned only by this File.
        let mut file = unsafe { File::from_raw_fd(fd) };
        let (tx, rx) = mpsc::channel::<Msg>();
        std::thread::Builder::new()
            .name("status-fd".into())
            .spawn(move || {
                let mut broken = false;
                for msg in rx {
                    match msg {
                        Msg::Line(line) if !broken => broken = file.write_all(line.as_bytes()).is_err(),
                        Msg::Line(_) => {}
                        Msg::Flush(ack) => {
                            let _ = ack.send(());
                        }
                    }
                }
            })
            .map_err(|e| err(e.to_string()))?;
        Ok(Self { tx })
    }

    /// Queue one status line.
    pub fn send(&self, status: &LocalStatus) {
        if let Ok(mut line) = serde_json::to_string(status) {
            line.push('\n');
            let _ = self.tx.send(Msg::Line(line));
        }
    }

    /// Wait (at most `limit`) until every queued line is written: called before rankvisor exits.
    pub fn flush(&self, limit: std::time::Duration) {
        let (ack, done) = mpsc::channel();
        if self.tx.send(Msg::Flush(ack)).is_ok() {
            let _ = done.recv_timeout(limit);
        }
    }
}

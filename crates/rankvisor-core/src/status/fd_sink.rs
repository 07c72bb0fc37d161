//! `--status-fd N`: every status change as one JSON line on an inherited file descriptor. The dry
//! run and the tests read it to follow a replica without parsing logs or sleeping.
//!
//! Supervision never waits for the reader: lines go to a bounded queue that a writer thread
//! empties. A reader that stops reading fills the queue; then the oldest lines are dropped (the
//! latest status is what matters) and counted. Waiting for the queue to be written (before exit)
//! is async (`flushed`), so it never blocks the runtime's thread.

use super::LocalStatus;
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::os::fd::{BorrowedFd, FromRawFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;

/// Lines kept for a slow reader; beyond this the oldest are dropped.
pub const MAX_QUEUED_LINES: usize = 1024;

/// Sends status lines to a writer thread, so a slow reader never blocks supervision.
#[derive(Debug, Clone)]
pub struct StatusSink {
    shared: Arc<Shared>,
    /// How many lines were taken off the queue (written, or failed to write), in order.
    done: watch::Receiver<u64>,
}

#[derive(Debug, Default)]
struct Queue {
    lines: VecDeque<String>,
    /// Lines ever queued (dropped ones included), so `done` can be compared with it.
    queued: u64,
    dropped: u64,
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The descriptor is not usable.
#[derive(Debug, thiserror::Error)]
#[error("--status-fd {fd} (RANKVISOR_STATUS_FD) is not an open file descriptor: {problem}")]
pub struct StatusFdError {
    fd: RawFd,
    problem: String,
}

/// Push `line`, dropping the oldest when full; returns how many were dropped by this push.
fn push_bounded(q: &mut Queue, line: String, cap: usize) -> u64 {
    let mut dropped = 0;
    while q.lines.len() >= cap {
        q.lines.pop_front();
        dropped += 1;
    }
    q.lines.push_back(line);
    q.queued += 1;
    q.dropped += dropped;
    dropped
}

fn write_lines(shared: &Arc<Shared>, mut file: File, done: &watch::Sender<u64>) {
    let mut broken = false;
    loop {
        let (line, position) = {
            let mut q = shared.lock();
            while q.lines.is_empty() {
                // Every sink handle is gone and nothing is left to write: the thread ends.
                if Arc::strong_count(shared) == 1 {
                    return;
                }
                q = shared.ready.wait_timeout(q, Duration::from_millis(100)).unwrap_or_else(|p| p.into_inner()).0;
            }
            let position = q.queued - q.lines.len() as u64 + 1;
            (q.lines.pop_front(), position)
        };
        if let (Some(line), false) = (line, broken) {
            broken = file.write_all(line.as_bytes()).is_err();
        }
        done.send_replace(position);
    }
}

impl StatusSink {
    /// Take ownership of `fd` (marked close-on-exec, so the child does not inherit it).
    pub fn from_fd(fd: RawFd) -> Result<Self, StatusFdError> {
        let err = |problem: String| StatusFdError { fd, problem };
        if fd < 3 {
            return Err(err("expected a descriptor >= 3 (0-2 are stdio)".into()));
        }
        let os_error = |e: nix::Error| err(std::io::Error::from(e).to_string());
        // SAFETY: the borrow lasts only for the two fcntl calls, which touch no memory; on a
        // descriptor that is not open the kernel answers EBADF, reported as the error.
        let probe = unsafe { BorrowedFd::borrow_raw(fd) };
        let flags = FdFlag::from_bits_retain(fcntl(probe, FcntlArg::F_GETFD).map_err(os_error)?);
        fcntl(probe, FcntlArg::F_SETFD(flags | FdFlag::FD_CLOEXEC)).map_err(os_error)?;
        // SAFETY: the descriptor is open (checked above) and from here on owned only by this File.
        let file = unsafe { File::from_raw_fd(fd) };
        let shared = Arc::new(Shared { queue: Mutex::new(Queue::default()), ready: Condvar::new() });
        let (done_tx, done) = watch::channel(0);
        let writer = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("status-fd".into())
            .spawn(move || write_lines(&writer, file, &done_tx))
            .map_err(|e| err(e.to_string()))?;
        Ok(Self { shared, done })
    }

    /// Queue one status line (never blocks; drops the oldest queued line when the queue is full).
    pub fn send(&self, status: &LocalStatus) {
        if let Ok(mut line) = serde_json::to_string(status) {
            line.push('\n');
            let dropped = push_bounded(&mut self.shared.lock(), line, MAX_QUEUED_LINES);
            self.shared.ready.notify_one();
            if dropped > 0 && self.dropped() == dropped {
                tracing::warn!("--status-fd is not being read: dropping the oldest status lines");
            }
        }
    }

    /// Lines dropped so far because the reader did not keep up.
    pub fn dropped(&self) -> u64 {
        self.shared.lock().dropped
    }

    /// Lines waiting to be written.
    pub fn queued(&self) -> usize {
        self.shared.lock().lines.len()
    }

    /// Wait (at most `limit`, without blocking the thread) until every line queued so far is
    /// written; true if it was. For the runtime's thread, before rankvisor exits.
    pub async fn flushed(&self, limit: Duration) -> bool {
        let target = self.shared.lock().queued;
        let mut done = self.done.clone();
        let written = tokio::time::timeout(limit, done.wait_for(|d| *d >= target)).await;
        matches!(written, Ok(Ok(_)))
    }

    /// Blocking form of [`StatusSink::flushed`]: only for threads outside the async runtime.
    pub fn flush(&self, limit: Duration) {
        let target = self.shared.lock().queued;
        let deadline = std::time::Instant::now() + limit;
        while *self.done.borrow() < target && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_bounded_and_drops_the_oldest() {
        let mut q = Queue::default();
        for i in 0..5 {
            assert_eq!(push_bounded(&mut q, i.to_string(), 3), u64::from(i >= 3));
        }
        assert_eq!(q.lines, ["2", "3", "4"]);
        assert_eq!((q.queued, q.dropped), (5, 2));
    }

    /// Training progress whose status line is about `bytes` long.
    fn progress_of_size(bytes: usize) -> Option<serde_json::Map<String, serde_json::Value>> {
        let mut m = serde_json::Map::new();
        m.insert("note".into(), serde_json::Value::String("x".repeat(bytes)));
        Some(m)
    }

    fn pipe() -> (File, RawFd) {
        let (r, w) = nix::unistd::pipe().unwrap();
        (File::from(r), std::os::fd::IntoRawFd::into_raw_fd(w))
    }

    #[test]
    fn a_descriptor_that_is_not_open_is_refused_with_the_kernels_reason() {
        // Above any open-file limit, so never open in this process.
        let fd = i32::MAX;
        let Err(e) = StatusSink::from_fd(fd) else { panic!("descriptor {fd} is not open, yet taken") };
        assert_eq!(e.fd, fd);
        assert_eq!(e.problem, std::io::Error::from_raw_os_error(libc::EBADF).to_string());
    }

    #[tokio::test]
    async fn the_sinks_descriptor_is_closed_on_exec() {
        let (_reader, w) = pipe();
        let flags = |fd: RawFd| {
            let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
            let octal = info.lines().find_map(|l| l.strip_prefix("flags:")).unwrap().trim().to_string();
            u32::from_str_radix(&octal, 8).unwrap()
        };
        assert_eq!(flags(w) & libc::O_CLOEXEC as u32, 0, "a pipe end starts inheritable");
        let _sink = StatusSink::from_fd(w).unwrap();
        assert_ne!(flags(w) & libc::O_CLOEXEC as u32, 0);
    }

    #[tokio::test]
    async fn a_reader_that_never_reads_costs_a_bounded_queue_and_no_wait() {
        let (_reader, w) = pipe();
        let sink = StatusSink::from_fd(w).unwrap();
        let status = LocalStatus { progress: progress_of_size(1000), ..LocalStatus::default() };
        for _ in 0..(MAX_QUEUED_LINES * 4) {
            sink.send(&status);
        }
        assert!(sink.queued() <= MAX_QUEUED_LINES);
        assert!(sink.dropped() > 0);
        assert!(!sink.flushed(Duration::from_millis(50)).await, "the pipe is full: not flushed");
    }

    #[tokio::test]
    async fn flushed_waits_for_the_lines_to_be_written() {
        let (reader, w) = pipe();
        let sink = StatusSink::from_fd(w).unwrap();
        sink.send(&LocalStatus::default());
        assert!(sink.flushed(Duration::from_secs(20)).await);
        drop(sink);
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(reader), &mut line).unwrap();
        assert!(line.starts_with('{') && line.ends_with('\n'), "{line:?}");
    }
}

//! rankvisor's own log lines: on stderr, each marked as rankvisor's, so they stand out among the
//! child's output (which passes through untouched). Text by default, JSON for log shippers.
//!
//! Logging never blocks supervision: a log call writes its line at once only when stderr takes it
//! without waiting (a file, `/dev/null`, a pipe with room) and nothing is queued; otherwise it
//! queues the line (bounded) for a writer thread, started the first time a line is queued. When
//! stderr is a pipe nobody drains, the queue fills and further lines are dropped and counted; once
//! stderr moves again, the writer says how many were lost. At exit, queued lines get a bounded time
//! to be written.
//!
//! Every text line is one line: control characters (newlines, ANSI escapes) and invisible
//! characters in messages and values are escaped, so a value from outside cannot forge a line.

use std::fmt;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{FmtContext, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// `[rankvisor] INFO message key=value`.
    Text,
    /// One JSON object per line.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(format!("log format {s:?} is invalid: expected text or json")),
        }
    }
}

/// Parse a log level name (error, warn, info, debug, trace).
pub fn parse_level(s: &str) -> Result<Level, String> {
    Level::from_str(s).map_err(|_| format!("log level {s:?} is invalid: expected error, warn, info, debug or trace"))
}

struct Marked;

impl<S, N> FormatEvent<S, N> for Marked
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut fields = String::new();
        ctx.field_format().format_fields(Writer::new(&mut fields), event)?;
        writeln!(w, "[rankvisor] {} {}", event.metadata().level(), crate::untrusted::escape_hidden(&fields))
    }
}

/// Lines waiting for the writer thread; beyond this they are dropped (and counted).
const QUEUE_LINES: usize = 1024;
/// How long the exit path waits for queued lines to be written.
const EXIT_FLUSH: Duration = Duration::from_secs(1);
/// The most a pipe takes in one write without splitting it or blocking once it polls writable.
const PIPE_BUF: usize = 4096;

/// What stderr is, as far as writing a line at once goes (decided once, at start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stderr {
    /// A regular file, or a character device that is not a terminal (`/dev/null`): a write does
    /// not wait on a reader.
    NeverBlocks,
    /// A pipe or FIFO (a container runtime's log pipe): a line of at most `PIPE_BUF` bytes is
    /// written whole and at once when the pipe polls writable (it has a free page).
    Pipe,
    /// A terminal (flow control can stop it), a socket, or unknown: every line goes through the
    /// writer thread.
    MayBlock,
}

impl Stderr {
    fn detect() -> Self {
        let Ok(st) = nix::sys::stat::fstat(std::io::stderr()) else { return Stderr::MayBlock };
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => Stderr::NeverBlocks,
            // A terminal is a character device too: asked only then (one system call at start).
            libc::S_IFCHR if !std::io::stderr().is_terminal() => Stderr::NeverBlocks,
            libc::S_IFIFO => Stderr::Pipe,
            _ => Stderr::MayBlock,
        }
    }

    /// Whether `len` bytes can be written now without waiting.
    fn ready(self, len: usize) -> bool {
        match self {
            Stderr::NeverBlocks => true,
            Stderr::Pipe if len <= PIPE_BUF => {
                use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
                let stderr = std::io::stderr();
                let mut fds = [PollFd::new(stderr.as_fd(), PollFlags::POLLOUT)];
                // Timeout zero: a question, never a wait.
                let n = poll(&mut fds, PollTimeout::ZERO);
                let revents = fds[0].revents().unwrap_or(PollFlags::empty());
                n == Ok(1)
                    && revents.contains(PollFlags::POLLOUT)
                    && !revents.intersects(PollFlags::POLLERR | PollFlags::POLLHUP)
            }
            Stderr::Pipe | Stderr::MayBlock => false,
        }
    }
}

/// Between log calls and stderr. A line is written by the thread that logs it when nothing is
/// queued and stderr takes it without waiting (a file, `/dev/null`, a pipe with room): no thread
/// hand-off, so the last lines before exit cost no wake-up of another thread. Otherwise (a pipe
/// nobody drains, a terminal) it is queued for the writer thread, started the first time one is.
struct Queue {
    stderr: Stderr,
    /// The writer thread's queue, once started (None inside: it could not be started).
    writer: OnceLock<Option<SyncSender<Vec<u8>>>>,
    dropped: AtomicU64,
    /// Lines queued and not yet written; the exit flush waits for zero, and a line is written at
    /// once only at zero (under this lock), so it never overtakes a queued one.
    pending: Mutex<u64>,
    written: Condvar,
    format: LogFormat,
}

static QUEUE: OnceLock<Queue> = OnceLock::new();

impl Queue {
    fn push(&self, line: &[u8]) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if *pending == 0 && self.stderr.ready(line.len()) {
            self.write(&mut std::io::stderr().lock(), line, |len| self.stderr.ready(len));
            return;
        }
        let Some(tx) = self.writer.get_or_init(start_writer) else {
            // No writer thread: write here, as a process without threads would.
            drop(pending);
            let _ = std::io::stderr().write_all(line);
            return;
        };
        match tx.try_send(line.to_vec()) {
            Ok(()) => *pending += 1,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Write a line, then say how many were dropped before it, if any and if `room` for that
    /// report (else they stay counted for the next line).
    fn write(&self, out: &mut impl Write, line: &[u8], room: impl Fn(usize) -> bool) {
        let _ = out.write_all(line);
        let lost = self.dropped.swap(0, Ordering::Relaxed);
        if lost > 0 {
            let report = dropped_line(self.format, lost);
            if room(report.len()) {
                let _ = out.write_all(report.as_bytes());
            } else {
                self.dropped.fetch_add(lost, Ordering::Relaxed);
            }
        }
    }

    fn done(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        *pending = pending.saturating_sub(1);
        if *pending == 0 {
            self.written.notify_all();
        }
    }

    /// Wait until every queued line is written, at most `limit`; true if they all were.
    fn flush(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        while *pending > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            pending = self.written.wait_timeout(pending, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        true
    }
}

/// Start the writer thread; None (and one warning, written directly) when it cannot be.
fn start_writer() -> Option<SyncSender<Vec<u8>>> {
    let (tx, rx) = sync_channel(QUEUE_LINES);
    match std::thread::Builder::new().name("log-writer".into()).spawn(move || write_lines(rx, std::io::stderr())) {
        Ok(_) => Some(tx),
        Err(e) => {
            eprintln!("[rankvisor] WARN cannot start the log writer thread ({e}): logging directly to stderr");
            None
        }
    }
}

/// The line that reports lost lines, in the log's own format.
pub fn dropped_line(format: LogFormat, count: u64) -> String {
    let message = format!("{count} log lines dropped: stderr was not being read");
    match format {
        LogFormat::Text => format!("[rankvisor] WARN {message}\n"),
        LogFormat::Json => format!("{}\n", serde_json::json!({"level": "WARN", "fields": {"message": message}})),
    }
}

fn write_lines(rx: Receiver<Vec<u8>>, mut out: impl Write) {
    for line in rx {
        let Some(q) = QUEUE.get() else { continue };
        // This thread may wait on stderr: the report always goes out with the line.
        q.write(&mut out, &line, |_| true);
        let _ = out.flush();
        q.done();
    }
}

/// A handle the subscriber writes each formatted event through: one `write` is one event.
#[derive(Debug, Clone, Copy)]
pub struct QueuedStderr;

impl Write for QueuedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match QUEUE.get() {
            Some(q) => q.push(buf),
            None => return std::io::stderr().write(buf),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for QueuedStderr {
    type Writer = QueuedStderr;
    fn make_writer(&'a self) -> Self::Writer {
        QueuedStderr
    }
}

/// Lines dropped so far because stderr was not being read (and not yet reported).
pub fn dropped() -> u64 {
    QUEUE.get().map_or(0, |q| q.dropped.load(Ordering::Relaxed))
}

/// Wait at most `limit` until every queued line is written; true if they all were.
pub fn flush(limit: Duration) -> bool {
    QUEUE.get().is_none_or(|q| q.flush(limit))
}

extern "C" fn flush_at_exit() {
    flush(EXIT_FLUSH);
}

/// Install the global subscriber. Safe to call once; later calls are ignored.
pub fn init(format: LogFormat, level: Level) {
    let queue = Queue {
        stderr: Stderr::detect(),
        writer: OnceLock::new(),
        dropped: AtomicU64::new(0),
        pending: Mutex::new(0),
        written: Condvar::new(),
        format,
    };
    if QUEUE.set(queue).is_ok() {
        // `std::process::exit` runs atexit handlers: the last lines (why rankvisor exits) get written.
        // SAFETY: registering a plain extern "C" function with no preconditions.
        unsafe { libc::atexit(flush_at_exit) };
    }
    let builder = tracing_subscriber::fmt().with_writer(QueuedStderr).with_max_level(level).with_ansi(false);
    let _ = match format {
        LogFormat::Text => builder.event_format(Marked).try_init(),
        LogFormat::Json => builder.json().with_current_span(false).with_target(false).try_init(),
    };
}

/// A warning that may repeat many times a second (refused peers, accept errors): the first of a
/// window is logged, the rest are counted and summed up with the first of the next window.
#[derive(Debug)]
pub struct Throttle {
    window: Duration,
    window_start: Option<Instant>,
    suppressed: u64,
}

/// What to do with one occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throttled {
    /// Log it; `suppressed` occurrences were not logged since the last one that was.
    Log {
        /// Occurrences counted but not logged before this one.
        suppressed: u64,
    },
    /// Count it only.
    Suppress,
}

impl Throttle {
    /// At most one logged occurrence per `window`.
    pub fn new(window: Duration) -> Self {
        Throttle { window, window_start: None, suppressed: 0 }
    }

    /// Decide about an occurrence at `now`.
    pub fn hit(&mut self, now: Instant) -> Throttled {
        match self.window_start {
            Some(start) if now.saturating_duration_since(start) < self.window => {
                self.suppressed += 1;
                Throttled::Suppress
            }
            _ => {
                self.window_start = Some(now);
                Throttled::Log { suppressed: std::mem::take(&mut self.suppressed) }
            }
        }
    }

    /// The occurrences counted but not logged since the last one that was, and reset the count:
    /// for a summary when the throttled source goes away.
    pub fn take_suppressed(&mut self) -> u64 {
        std::mem::take(&mut self.suppressed)
    }
}

impl Throttled {
    /// `" (N more since the last one logged)"`, or nothing.
    pub fn note(self) -> String {
        match self {
            Throttled::Log { suppressed } if suppressed > 0 => {
                format!(" ({suppressed} more like it were not logged)")
            }
            _ => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_logs_the_first_of_each_window_and_counts_the_rest() {
        let t0 = Instant::now();
        let mut t = Throttle::new(Duration::from_secs(10));
        assert_eq!(t.hit(t0), Throttled::Log { suppressed: 0 });
        for ms in [1, 500, 9_999] {
            assert_eq!(t.hit(t0 + Duration::from_millis(ms)), Throttled::Suppress);
        }
        let next = t.hit(t0 + Duration::from_secs(10));
        assert_eq!(next, Throttled::Log { suppressed: 3 });
        assert_eq!(next.note(), " (3 more like it were not logged)");
        assert_eq!(t.hit(t0 + Duration::from_secs(30)), Throttled::Log { suppressed: 0 });
        assert_eq!(Throttled::Log { suppressed: 0 }.note(), "");
    }

    #[test]
    fn the_dropped_line_is_in_the_log_format() {
        assert_eq!(
            dropped_line(LogFormat::Text, 7),
            "[rankvisor] WARN 7 log lines dropped: stderr was not being read\n"
        );
        let json: serde_json::Value = serde_json::from_str(&dropped_line(LogFormat::Json, 2)).unwrap();
        assert_eq!(json["fields"]["message"], "2 log lines dropped: stderr was not being read");
    }
}

//! Connection plumbing shared by master and worker: a bounded, cancel-safe frame reader and a
//! writer task that sends queued lines and a heartbeat whenever it has been idle.
//!
//! Per-connection memory is kept small on purpose (a master holds thousands of connections):
//! a 512-byte read buffer, a line buffer that exists only while a long frame is being read, and
//! an outbox of shared, pre-encoded lines.

use std::collections::VecDeque;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Notify};

use super::frame::{decode, encode, Frame, FrameError};

/// One encoded frame, newline included, shared between every connection it is sent to.
pub(crate) type Line = Arc<[u8]>;

/// Lines queued towards one peer before it counts as not reading.
pub(crate) const OUTBOX: usize = 32;

const READ_BUFFER: usize = 512;

static HEARTBEAT: LazyLock<Line> = LazyLock::new(|| Arc::from(&b"{\"v\":1,\"type\":\"heartbeat\"}\n"[..]));

/// Encode a frame for the outbox.
pub(crate) fn line(frame: &Frame, max: usize) -> Result<Line, FrameError> {
    encode(frame, max).map(Line::from)
}

/// Why reading a frame failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The socket failed.
    #[error("connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent a bad frame.
    #[error("{0}")]
    Frame(#[from] FrameError),
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed in the middle of a frame ({0} bytes without a newline)")]
    Truncated(usize),
}

/// Reads newline-delimited frames, never buffering more than `max + 1` bytes of one line.
pub(crate) struct FrameReader<R> {
    inner: BufReader<R>,
    buf: Vec<u8>,
    max: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wrap a read half.
    pub(crate) fn new(read: R, max: usize) -> Self {
        FrameReader { inner: BufReader::with_capacity(READ_BUFFER, read), buf: Vec::new(), max }
    }

    /// The next frame, or None at a clean end of stream.
    ///
    /// A line that fits in the read buffer is decoded in place; only a line spread over several
    /// reads is copied, so an idle connection holds no line buffer. Cancel-safe: a partly read
    /// line stays in the buffer and the next call goes on.
    pub(crate) async fn next(&mut self) -> Result<Option<Frame>, ReadError> {
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                let len = std::mem::take(&mut self.buf).len();
                return if len == 0 { Ok(None) } else { Err(ReadError::Truncated(len)) };
            }
            let newline = available.iter().position(|&b| b == b'\n');
            if let (Some(end), true) = (newline, self.buf.is_empty()) {
                let frame = decode(&available[..end], self.max);
                self.inner.consume(end + 1);
                return Ok(Some(frame?));
            }
            let take = newline.map_or(available.len(), |end| end + 1);
            let content = self.buf.len() + take - usize::from(newline.is_some());
            if content > self.max {
                self.inner.consume(take);
                self.buf = Vec::new();
                return Err(FrameError::LineTooLong { max: self.max }.into());
            }
            self.buf.extend_from_slice(&available[..take]);
            self.inner.consume(take);
            if newline.is_some() {
                let line = std::mem::take(&mut self.buf);
                return Ok(Some(decode(&line, self.max)?));
            }
        }
    }
}

/// The heartbeat frame, encoded once for every connection.
pub(crate) fn heartbeat_line() -> Line {
    Line::clone(&HEARTBEAT)
}

/// A bounded queue of lines towards one peer: a tenth of a channel's footprint, which matters
/// when the master holds thousands of connections.
struct Outbox {
    state: Mutex<OutboxState>,
    ready: Notify,
}

struct OutboxState {
    lines: VecDeque<Line>,
    closed: bool,
}

impl Outbox {
    fn state(&self) -> MutexGuard<'_, OutboxState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The sending side of an outbox; dropping it closes the outbox once its lines are taken.
pub(crate) struct OutboxTx(Arc<Outbox>);

/// The receiving side of an outbox.
pub(crate) struct OutboxRx(Arc<Outbox>);

/// A new outbox holding at most `OUTBOX` lines.
pub(crate) fn outbox() -> (OutboxTx, OutboxRx) {
    let shared = Arc::new(Outbox {
        state: Mutex::new(OutboxState { lines: VecDeque::new(), closed: false }),
        ready: Notify::new(),
    });
    (OutboxTx(Arc::clone(&shared)), OutboxRx(shared))
}

impl OutboxTx {
    /// Queue a line; false when the outbox is full (the peer is not reading).
    pub(crate) fn push(&self, line: Line) -> bool {
        {
            let mut state = self.0.state();
            if state.lines.len() >= OUTBOX {
                return false;
            }
            state.lines.push_back(line);
        }
        self.0.ready.notify_one();
        true
    }
}

impl Drop for OutboxTx {
    fn drop(&mut self) {
        self.0.state().closed = true;
        self.0.ready.notify_one();
    }
}

impl OutboxRx {
    /// The next queued line, or None once the sender is gone and every line was taken.
    /// Cancel-safe: a line is only removed when it is returned.
    pub(crate) async fn recv(&mut self) -> Option<Line> {
        loop {
            {
                let mut state = self.0.state();
                if let Some(line) = state.lines.pop_front() {
                    return Some(line);
                }
                if state.closed {
                    return None;
                }
            }
            self.0.ready.notified().await;
        }
    }
}

/// Write queued lines until every sender is gone, with a heartbeat after each idle `heartbeat`.
/// A peer that does not take a line within three heartbeats is abandoned, so a stuck reader
/// never pins this task.
pub(crate) async fn write_loop<W: AsyncWrite + Unpin>(
    mut write: W,
    mut outbox: mpsc::Receiver<Line>,
    heartbeat: Duration,
) {
    let stuck = heartbeat.saturating_mul(3);
    loop {
        let line = match tokio::time::timeout(heartbeat, outbox.recv()).await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(_) => heartbeat_line(),
        };
        match tokio::time::timeout(stuck, write.write_all(&line)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return,
        }
    }
    let _ = tokio::time::timeout(heartbeat, write.shutdown()).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rendezvous::frame::DEFAULT_MAX_FRAME;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn the_heartbeat_line_is_an_encoded_heartbeat() {
        assert_eq!(&HEARTBEAT[..], &encode(&Frame::Heartbeat, DEFAULT_MAX_FRAME).unwrap()[..]);
    }

    #[tokio::test]
    async fn reads_frames_in_pieces_and_stops_at_end() {
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut reader = FrameReader::new(rx, 1024);
        let writer = tokio::spawn(async move {
            let line = encode(&Frame::Release { generation: 3 }, 1024).unwrap();
            for chunk in line.chunks(5) {
                tx.write_all(chunk).await.unwrap();
                tokio::task::yield_now().await;
            }
            tx.write_all(&encode(&Frame::Heartbeat, 1024).unwrap()).await.unwrap();
        });
        assert_eq!(reader.next().await.unwrap(), Some(Frame::Release { generation: 3 }));
        assert_eq!(reader.next().await.unwrap(), Some(Frame::Heartbeat));
        writer.await.unwrap();
        assert_eq!(reader.next().await.unwrap(), None);
    }

    #[tokio::test]
    async fn an_endless_line_is_refused_after_the_limit() {
        let (mut tx, rx) = tokio::io::duplex(4096);
        let mut reader = FrameReader::new(rx, 1024);
        let writer = tokio::spawn(async move {
            let junk = vec![b'x'; 64 * 1024];
            // The reader stops reading, so this write is expected to stall or fail.
            let _ = tokio::time::timeout(Duration::from_millis(200), tx.write_all(&junk)).await;
        });
        match reader.next().await {
            Err(ReadError::Frame(FrameError::LineTooLong { max: 1024 })) => {}
            other => panic!("expected too long, got {other:?}"),
        }
        assert_eq!(reader.buf.capacity(), 0, "the line buffer is released");
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn lines_longer_than_the_read_buffer_are_read_up_to_the_limit() {
        let (mut tx, rx) = tokio::io::duplex(8192);
        let mut reader = FrameReader::new(rx, 2048);
        let long = |n: usize| Frame::Error { message: "m".repeat(n) };
        let exact = encode(&long(1), 2048).unwrap().len() - 1;
        let fits = long(2048 - exact + 1);
        let line = encode(&fits, 2048).unwrap();
        assert_eq!(line.len(), 2049, "exactly at the limit");
        tx.write_all(&line).await.unwrap();
        tx.write_all(&encode(&long(2048 - exact + 2), 4096).unwrap()).await.unwrap();
        tx.write_all(&encode(&Frame::Heartbeat, 2048).unwrap()).await.unwrap();
        assert_eq!(reader.next().await.unwrap(), Some(fits));
        assert_eq!(reader.buf.capacity(), 0, "the line buffer is released");
        assert!(matches!(reader.next().await, Err(ReadError::Frame(FrameError::LineTooLong { max: 2048 }))));
    }

    #[tokio::test]
    async fn bad_lines_and_cut_lines_are_errors() {
        let (mut tx, rx) = tokio::io::duplex(4096);
        let mut reader = FrameReader::new(rx, 1024);
        tx.write_all(b"\x00\x01garbage\n{\"v\":1,\"type\":\"heart").await.unwrap();
        drop(tx);
        assert!(matches!(reader.next().await, Err(ReadError::Frame(FrameError::NotJson { .. }))));
        assert!(matches!(reader.next().await, Err(ReadError::Truncated(20))));
    }

    #[tokio::test]
    async fn cancelling_a_read_loses_nothing() {
        let (mut tx, rx) = tokio::io::duplex(4096);
        let mut reader = FrameReader::new(rx, 1024);
        let line = encode(&Frame::Rejoin { generation: 9 }, 1024).unwrap();
        let (head, tail) = line.split_at(10);
        tx.write_all(head).await.unwrap();
        let early = tokio::time::timeout(Duration::from_millis(20), reader.next()).await;
        assert!(early.is_err(), "no full line yet");
        tx.write_all(tail).await.unwrap();
        assert_eq!(reader.next().await.unwrap(), Some(Frame::Rejoin { generation: 9 }));
    }

    #[tokio::test]
    async fn an_outbox_is_bounded_and_drains_before_closing() {
        let (tx, mut rx) = outbox();
        let l = |g| line(&Frame::Release { generation: g }, 1024).unwrap();
        for g in 0..OUTBOX as u64 {
            assert!(tx.push(l(g)));
        }
        assert!(!tx.push(l(99)), "full");
        assert_eq!(rx.recv().await, Some(l(0)));
        assert!(tx.push(l(100)));
        drop(tx);
        let mut rest = Vec::new();
        while let Some(line) = rx.recv().await {
            rest.push(line);
        }
        assert_eq!(rest.len(), OUTBOX);
        assert_eq!(rest.last(), Some(&l(100)));
    }

    #[tokio::test]
    async fn an_outbox_wakes_its_reader() {
        let (tx, mut rx) = outbox();
        let reader = tokio::spawn(async move { (rx.recv().await, rx.recv().await) });
        tokio::task::yield_now().await;
        let l = line(&Frame::Heartbeat, 1024).unwrap();
        assert!(tx.push(Line::clone(&l)));
        drop(tx);
        assert_eq!(reader.await.unwrap(), (Some(l), None));
    }

    #[tokio::test]
    async fn the_writer_sends_queued_lines_then_heartbeats_then_closes() {
        let (tx, rx) = tokio::io::duplex(4096);
        let (out, outbox) = mpsc::channel(OUTBOX);
        let task = tokio::spawn(write_loop(tx, outbox, Duration::from_millis(20)));
        out.send(line(&Frame::Release { generation: 1 }, 1024).unwrap()).await.unwrap();
        let mut reader = FrameReader::new(rx, 1024);
        assert_eq!(reader.next().await.unwrap(), Some(Frame::Release { generation: 1 }));
        assert_eq!(reader.next().await.unwrap(), Some(Frame::Heartbeat));
        drop(out);
        loop {
            match reader.next().await.unwrap() {
                Some(Frame::Heartbeat) => continue,
                None => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        task.await.unwrap();
    }
}

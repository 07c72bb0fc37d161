//! Connection plumbing shared by master and worker: a bounded, cancel-safe frame reader and a
//! writer task that sends queued lines and a heartbeat whenever it has been idle.
//!
//! Per-connection memory is kept small on purpose (a master holds thousands of connections): no
//! read buffer while idle (reads go to the stack; only the unread rest of a read is kept, until it
//! is decoded), and an outbox of shared, pre-encoded lines.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::mpsc;

use super::frame::{decode, encode, Frame, FrameError, PROTOCOL_VERSION};

/// One encoded frame, newline included, shared between every connection it is sent to.
pub(crate) type Line = Arc<[u8]>;

/// Lines queued towards one peer before it counts as not reading.
pub(crate) const OUTBOX: usize = 32;

/// One read from the socket, into a buffer on the stack of the poll.
const READ_CHUNK: usize = 2048;

/// The heartbeat line, encoded once (it is the same on every connection, at every beat).
static HEARTBEAT: LazyLock<Line> = LazyLock::new(|| {
    let line = format!("{{\"v\":{PROTOCOL_VERSION},\"type\":\"heartbeat\"}}\n");
    Arc::from(line.as_bytes())
});

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

/// Reads newline-delimited frames, never buffering more than `max` bytes of an incomplete line.
///
/// Holds no buffer while idle: each read goes to a buffer on the stack of the poll (so not in the
/// connection's task either), a line found whole there is decoded in place, and only bytes that
/// are not consumed yet (the part of a line spread over several reads, or the lines after the
/// first) are kept on the heap, in a buffer released once it is drained.
pub(crate) struct FrameReader<R> {
    read: R,
    /// Bytes read but not decoded yet; `start` is where they begin. Empty (no allocation)
    /// whenever everything read has been decoded.
    buf: Vec<u8>,
    start: usize,
    max: usize,
    eof: bool,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wrap a read half.
    pub(crate) fn new(read: R, max: usize) -> Self {
        FrameReader { read, buf: Vec::new(), start: 0, max, eof: false }
    }

    /// The next frame, or None at a clean end of stream.
    ///
    /// Cancel-safe: bytes are only ever taken from the socket inside a poll that also stores
    /// them, so a cancelled call loses nothing and the next call goes on.
    pub(crate) async fn next(&mut self) -> Result<Option<Frame>, ReadError> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Frame>, ReadError>> {
        loop {
            if let Some(done) = self.buffered() {
                return Poll::Ready(done);
            }
            if self.eof {
                let len = self.pending().len();
                self.release();
                return Poll::Ready(if len == 0 { Ok(None) } else { Err(ReadError::Truncated(len)) });
            }
            let mut chunk = [0u8; READ_CHUNK];
            let mut filled = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut self.read).poll_read(cx, &mut filled))?;
            let got = filled.filled();
            if got.is_empty() {
                self.eof = true;
                continue;
            }
            // The common case: nothing pending and one whole line read: decode it in place.
            if self.pending().is_empty() {
                if let Some(end) = got.iter().position(|&b| b == b'\n') {
                    let frame = self.decode(&got[..end]);
                    if end + 1 < got.len() {
                        self.buf.extend_from_slice(&got[end + 1..]);
                    }
                    return Poll::Ready(frame.map(Some));
                }
            }
            self.buf.extend_from_slice(got);
        }
    }

    /// The bytes read and not decoded yet.
    fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Decode the first whole line of the pending bytes, or refuse an incomplete one over the
    /// bound; None when more bytes are needed.
    fn buffered(&mut self) -> Option<Result<Option<Frame>, ReadError>> {
        let pending = self.pending();
        match pending.iter().position(|&b| b == b'\n') {
            Some(end) => {
                let frame = self.decode(&pending[..end]);
                self.start += end + 1;
                if self.start == self.buf.len() {
                    self.release();
                } else if self.start > self.buf.len() / 2 {
                    // Keep the buffer compact: what was decoded is not held.
                    self.buf.drain(..self.start);
                    self.start = 0;
                }
                Some(frame.map(Some))
            }
            // `max` bytes without a newline: no frame can end within the bound any more.
            None if pending.len() > self.max => {
                self.release();
                Some(Err(FrameError::LineTooLong { max: self.max }.into()))
            }
            None => None,
        }
    }

    /// One line, newline excluded; a line over the bound is refused as such however it was read.
    fn decode(&self, line: &[u8]) -> Result<Frame, ReadError> {
        if line.len() > self.max {
            return Err(FrameError::LineTooLong { max: self.max }.into());
        }
        Ok(decode(line, self.max)?)
    }

    fn release(&mut self) {
        self.buf = Vec::new();
        self.start = 0;
    }
}

/// The heartbeat frame, encoded once for every connection.
pub(crate) fn heartbeat_line() -> Line {
    Line::clone(&HEARTBEAT)
}

/// A bounded queue of lines towards one peer: a tenth of a channel's footprint, which matters
/// when the master holds thousands of connections. The receiver's waker is kept with the lines,
/// so waiting for one costs the connection's task no room (a `Notify` waiter would).
struct Outbox {
    state: Mutex<OutboxState>,
}

struct OutboxState {
    lines: VecDeque<Line>,
    closed: bool,
    waker: Option<Waker>,
}

impl Outbox {
    fn state(&self) -> MutexGuard<'_, OutboxState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Change the state, then wake the receiver (outside the lock).
    fn update(&self, change: impl FnOnce(&mut OutboxState) -> bool) -> bool {
        let (done, waker) = {
            let mut state = self.state();
            let done = change(&mut state);
            (done, if done { state.waker.take() } else { None })
        };
        if let Some(w) = waker {
            w.wake();
        }
        done
    }
}

/// The sending side of an outbox; dropping it closes the outbox once its lines are taken.
pub(crate) struct OutboxTx(Arc<Outbox>);

/// The receiving side of an outbox.
pub(crate) struct OutboxRx(Arc<Outbox>);

/// A new outbox holding at most `OUTBOX` lines.
pub(crate) fn outbox() -> (OutboxTx, OutboxRx) {
    let shared =
        Arc::new(Outbox { state: Mutex::new(OutboxState { lines: VecDeque::new(), closed: false, waker: None }) });
    (OutboxTx(Arc::clone(&shared)), OutboxRx(shared))
}

impl OutboxTx {
    /// Queue a line; false when the outbox is full (the peer is not reading).
    pub(crate) fn push(&self, line: Line) -> bool {
        self.0.update(|state| {
            if state.lines.len() >= OUTBOX {
                return false;
            }
            state.lines.push_back(line);
            true
        })
    }
}

impl Drop for OutboxTx {
    fn drop(&mut self) {
        self.0.update(|state| {
            state.closed = true;
            true
        });
    }
}

impl OutboxRx {
    /// The next queued line, or None once the sender is gone and every line was taken.
    /// Cancel-safe: a line is only removed when it is returned.
    pub(crate) async fn recv(&mut self) -> Option<Line> {
        std::future::poll_fn(|cx| {
            let mut state = self.0.state();
            if let Some(line) = state.lines.pop_front() {
                if state.lines.is_empty() {
                    // Lines are rare (a release, an order, a heartbeat per interval): an idle
                    // outbox keeps no room for them.
                    state.lines = VecDeque::new();
                }
                return Poll::Ready(Some(line));
            }
            if state.closed {
                return Poll::Ready(None);
            }
            match &mut state.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await
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
        assert!(reader.pending().len() <= READ_CHUNK, "only the unread rest is kept");
        assert!(matches!(reader.next().await, Err(ReadError::Frame(FrameError::LineTooLong { max: 2048 }))));
    }

    #[tokio::test]
    async fn an_idle_reader_holds_no_buffer() {
        let (mut tx, rx) = tokio::io::duplex(4096);
        let mut reader = FrameReader::new(rx, 1024);
        let l = |g| encode(&Frame::Release { generation: g }, 1024).unwrap();
        tx.write_all(&l(1)).await.unwrap();
        assert_eq!(reader.next().await.unwrap(), Some(Frame::Release { generation: 1 }));
        assert_eq!(reader.buf.capacity(), 0, "a whole line is decoded where it was read");
        let two = l(2);
        let (head, tail) = two.split_at(7);
        tx.write_all(head).await.unwrap();
        let early = tokio::time::timeout(Duration::from_millis(20), reader.next()).await;
        assert!(early.is_err(), "no full line yet");
        assert_eq!(reader.pending(), head, "the incomplete line is kept");
        tx.write_all(tail).await.unwrap();
        assert_eq!(reader.next().await.unwrap(), Some(Frame::Release { generation: 2 }));
        assert_eq!(reader.buf.capacity(), 0, "released once the line is decoded");
        tx.write_all(&[l(3), l(4), l(5)].concat()).await.unwrap();
        assert_eq!(reader.next().await.unwrap(), Some(Frame::Release { generation: 3 }));
        assert_eq!(reader.pending(), &[l(4), l(5)].concat()[..], "the lines after the first wait");
        assert_eq!(reader.next().await.unwrap(), Some(Frame::Release { generation: 4 }));
        assert_eq!(reader.next().await.unwrap(), Some(Frame::Release { generation: 5 }));
        assert_eq!(reader.buf.capacity(), 0, "released once drained");
    }

    #[tokio::test]
    async fn a_whole_line_over_the_bound_is_refused_as_too_long() {
        let (mut tx, rx) = tokio::io::duplex(8192);
        let mut reader = FrameReader::new(rx, 1024);
        let big = encode(&Frame::Error { message: "m".repeat(1500) }, 4096).unwrap();
        assert!(big.len() > 1025 && big.len() < READ_CHUNK, "one read holds it whole");
        tx.write_all(&big).await.unwrap();
        tx.write_all(&encode(&Frame::Heartbeat, 1024).unwrap()).await.unwrap();
        assert!(matches!(reader.next().await, Err(ReadError::Frame(FrameError::LineTooLong { max: 1024 }))));
        assert_eq!(reader.next().await.unwrap(), Some(Frame::Heartbeat));
    }

    #[tokio::test]
    async fn bad_lines_and_cut_lines_are_errors() {
        let (mut tx, rx) = tokio::io::duplex(4096);
        let mut reader = FrameReader::new(rx, 1024);
        tx.write_all(b"\x00\x01garbage\n{\"v\":2,\"type\":\"heart").await.unwrap();
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

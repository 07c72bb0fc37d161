//! Connection plumbing shared by master and worker: a bounded, cancel-safe frame reader and a
//! writer task that sends queued lines and a heartbeat whenever it has been idle.
//!
//! Per-connection memory is kept small on purpose (a master holds thousands of connections):
//! a 512-byte read buffer, a line buffer that only grows while a frame is being read and is
//! released after a large one, and an outbox of shared, pre-encoded lines.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::frame::{decode, encode, Frame, FrameError};

/// One encoded frame, newline included, shared between every connection it is sent to.
pub(crate) type Line = Arc<[u8]>;

/// Lines queued towards one peer before it counts as not reading.
pub(crate) const OUTBOX: usize = 32;

const READ_BUFFER: usize = 512;
const KEEP_LINE_BUFFER: usize = 4096;

static HEARTBEAT: LazyLock<Line> =
    LazyLock::new(|| Arc::from(&b"{\"v\":1,\"type\":\"heartbeat\"}\n"[..]));

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
        FrameReader {
            inner: BufReader::with_capacity(READ_BUFFER, read),
            buf: Vec::new(),
            max,
        }
    }

    /// The next frame, or None at a clean end of stream.
    ///
    /// Cancel-safe: bytes of a partly read line stay in the buffer and the next call goes on.
    pub(crate) async fn next(&mut self) -> Result<Option<Frame>, ReadError> {
        loop {
            let room = (self.max + 1).saturating_sub(self.buf.len()) as u64;
            let n = (&mut self.inner)
                .take(room)
                .read_until(b'\n', &mut self.buf)
                .await?;
            if self.buf.last() == Some(&b'\n') {
                let frame = decode(&self.buf, self.max);
                self.reset();
                return Ok(Some(frame?));
            }
            if self.buf.len() > self.max {
                let len = self.buf.len();
                self.reset();
                return Err(FrameError::TooLarge { len, max: self.max }.into());
            }
            if n == 0 {
                let len = self.buf.len();
                self.reset();
                return if len == 0 {
                    Ok(None)
                } else {
                    Err(ReadError::Truncated(len))
                };
            }
        }
    }

    fn reset(&mut self) {
        if self.buf.capacity() > KEEP_LINE_BUFFER {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
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
            Err(_) => HEARTBEAT.clone(),
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
        assert_eq!(
            &HEARTBEAT[..],
            &encode(&Frame::Heartbeat, DEFAULT_MAX_FRAME).unwrap()[..]
        );
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
            tx.write_all(&encode(&Frame::Heartbeat, 1024).unwrap())
                .await
                .unwrap();
        });
        assert_eq!(
            reader.next().await.unwrap(),
            Some(Frame::Release { generation: 3 })
        );
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
            Err(ReadError::Frame(FrameError::TooLarge {
                len: 1025,
                max: 1024,
            })) => {}
            other => panic!("expected too large, got {other:?}"),
        }
        assert!(
            reader.buf.capacity() <= KEEP_LINE_BUFFER,
            "the line buffer is released"
        );
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn bad_lines_and_cut_lines_are_errors() {
        let (mut tx, rx) = tokio::io::duplex(4096);
        let mut reader = FrameReader::new(rx, 1024);
        tx.write_all(b"\x00\x01garbage\n{\"v\":1,\"type\":\"heart")
            .await
            .unwrap();
        drop(tx);
        assert!(matches!(
            reader.next().await,
            Err(ReadError::Frame(FrameError::NotJson { .. }))
        ));
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
        assert_eq!(
            reader.next().await.unwrap(),
            Some(Frame::Rejoin { generation: 9 })
        );
    }

    #[tokio::test]
    async fn the_writer_sends_queued_lines_then_heartbeats_then_closes() {
        let (tx, rx) = tokio::io::duplex(4096);
        let (out, outbox) = mpsc::channel(OUTBOX);
        let task = tokio::spawn(write_loop(tx, outbox, Duration::from_millis(20)));
        out.send(line(&Frame::Release { generation: 1 }, 1024).unwrap())
            .await
            .unwrap();
        let mut reader = FrameReader::new(rx, 1024);
        assert_eq!(
            reader.next().await.unwrap(),
            Some(Frame::Release { generation: 1 })
        );
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

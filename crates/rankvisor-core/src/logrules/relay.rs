//! The stdout relay: when log rules are on, the child's stdout is a pipe to rankvisor, which
//! copies every byte to its own stdout as soon as it is read (partial lines, binary, no buffer of
//! its own) and hands each complete line to the rules. Without rules the caller creates no relay
//! and the child keeps rankvisor's stdout itself.
//!
//! Memory is bounded: one read buffer ([`READ_BYTES`]) and the splitter's pending line
//! ([`super::lines::LINE_CAP`]). A line that is not UTF-8 is matched as Python would never see it
//! (the agent's reader stops on it): with U+FFFD in place of each bad sequence.

use super::lines::Lines;
use std::io::{self, Write};
use tokio::net::unix::pipe::Receiver;

/// The size of the read buffer (one `read` at most this much).
pub const READ_BYTES: usize = 64 * 1024;
/// At most this much is read per [`Relay::pump`] call, so other inputs get their turn.
pub const PUMP_BUDGET: usize = 1024 * 1024;

/// What [`Relay::pump`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pumped {
    /// The pipe is empty for now (or the budget was used): wait for readability again.
    Again,
    /// The child's end is closed: the last unfinished line has been handed on.
    Eof,
}

/// Copies the child's stdout to `out` and splits it into lines for the rules.
#[derive(Debug)]
pub struct Relay<W: Write> {
    out: W,
    lines: Lines,
    buf: Box<[u8]>,
    /// Writing to `out` failed: the child's output is still read and evaluated (so the child
    /// never blocks on a full pipe) but no longer written.
    out_failed: bool,
    /// That failure, until the caller takes it.
    write_error: Option<io::Error>,
}

/// A line's bytes as text for the patterns.
fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

impl<W: Write> Relay<W> {
    /// A relay writing to `out` (rankvisor's stdout).
    pub fn new(out: W) -> Self {
        Self {
            out,
            lines: Lines::default(),
            buf: vec![0; READ_BYTES].into_boxed_slice(),
            out_failed: false,
            write_error: None,
        }
    }

    /// Copy one chunk the child wrote: to `out` at once, then its complete lines to `on_line`.
    pub fn copy(&mut self, chunk: &[u8], on_line: &mut impl FnMut(&str)) {
        if !self.out_failed {
            if let Err(e) = self.out.write_all(chunk).and_then(|()| self.out.flush()) {
                self.out_failed = true;
                self.write_error = Some(e);
            }
        }
        self.lines.push(chunk, &mut |l: &[u8]| on_line(&text(l)));
    }

    /// The first error writing to `out`, once (to be logged); writing stopped there.
    pub fn take_write_error(&mut self) -> Option<io::Error> {
        self.write_error.take()
    }

    /// The child's stdout ended: hand on its unfinished last line, if any.
    pub fn finish(&mut self, on_line: &mut impl FnMut(&str)) {
        self.lines.finish(&mut |l: &[u8]| on_line(&text(l)));
    }

    /// Read what `rx` holds now, without waiting (call it when the pipe is readable), copying
    /// each read as [`Relay::copy`] does; an error is a read error.
    pub fn pump(&mut self, rx: &Receiver, on_line: &mut impl FnMut(&str)) -> io::Result<Pumped> {
        let mut read = 0;
        let mut buf = std::mem::take(&mut self.buf);
        let outcome = loop {
            if read >= PUMP_BUDGET {
                break Ok(Pumped::Again);
            }
            match rx.try_read(&mut buf) {
                Ok(0) => {
                    self.finish(on_line);
                    break Ok(Pumped::Eof);
                }
                Ok(n) => {
                    read += n;
                    self.copy(&buf[..n], on_line);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(Pumped::Again),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        self.buf = buf;
        outcome
    }

    /// Relay until the child's end is closed (for a task that does only this).
    pub async fn run(&mut self, rx: &Receiver, on_line: &mut impl FnMut(&str)) -> io::Result<()> {
        loop {
            rx.readable().await?;
            if self.pump(rx, on_line)? == Pumped::Eof {
                return Ok(());
            }
        }
    }

    /// The output, for tests and for the caller to take back.
    pub fn into_output(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests;

//! The stdout relay: when log rules are on, the child's stdout is a pipe to rankvisor, whose relay
//! thread copies every byte to its own stdout as soon as it is read (partial lines, binary, no
//! buffer of its own) and hands each complete line to the rules. It blocks on its reads and
//! writes (a stdout nobody drains stops it, not the event loop). Without rules the caller creates
//! no relay and the child keeps rankvisor's stdout itself.
//!
//! When rankvisor's stdout is a pipe (a container runtime's log pipe usually is) and the child
//! writes in bulk (the last read was at least [`TEE_FROM`] bytes), each read's bytes are first
//! duplicated into it with `tee(2)`, page references and no copy through this process, then read
//! for the rules. Otherwise they are read and written as usual, the write waiting for room: when
//! the output pipe is full, when stdout is not a pipe, and for a child that writes a line now and
//! then, whose lines the output pipe then packs into its pages (a teed buffer takes one of the
//! pipe's sixteen slots however few bytes it holds: teeing single lines would shrink what the
//! pipe buffers from 64 KiB to sixteen lines).
//!
//! Memory is bounded: one read buffer ([`READ_BYTES`]) and the splitter's pending line
//! ([`super::lines::LINE_CAP`]). A line that is not UTF-8 is matched as Python would never see it
//! (the agent's reader stops on it): with U+FFFD in place of each bad sequence.

use super::lines::python_lines;
use crate::lines::LineSplitter;
use nix::errno::Errno;
use nix::fcntl::SpliceFFlags;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::stat::SFlag;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// The size of the read buffer (one `read` at most this much).
pub const READ_BYTES: usize = 64 * 1024;
/// A read at least this large says the child writes in bulk: the next read's bytes are teed.
pub const TEE_FROM: usize = READ_BYTES / 2;
/// What [`Relay::step`] and [`Relay::read_now`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// One read was copied to the output; its lines are for [`Relay::lines`].
    Read,
    /// The child's end is closed: nothing more will come ([`Relay::finish`] hands on the last line).
    Eof,
    /// The pipe is empty for now ([`Relay::read_now`] only).
    Empty,
    /// The wake descriptor was written to (its bytes are consumed), or closed (`closed`).
    Woken {
        /// The wake descriptor's writer is gone.
        closed: bool,
    },
}

/// Copies the child's stdout to `out` and splits it into lines for the rules.
#[derive(Debug)]
pub struct Relay<W: Write> {
    out: W,
    /// `out`'s pipe (a duplicate of its descriptor) when the input is teed into it; `None`: every
    /// read is written.
    tee: Option<OwnedFd>,
    /// The bytes the last read took (0 after an empty pipe): whether the next one is teed.
    last_read: usize,
    /// The bytes teed so far.
    teed: u64,
    lines: LineSplitter,
    buf: Box<[u8]>,
    /// The bytes of the last read, at the start of `buf`.
    filled: usize,
    /// Writing to `out` failed: the child's output is still read and evaluated (so the child
    /// never blocks on a full pipe) but no longer written.
    out_failed: bool,
    /// That failure, until the caller takes it.
    write_error: Option<io::Error>,
}

impl<W: Write> Relay<W> {
    /// A relay writing to `out` (rankvisor's stdout).
    pub fn new(out: W) -> Self {
        Self {
            out,
            tee: None,
            last_read: 0,
            teed: 0,
            lines: python_lines(),
            buf: vec![0; READ_BYTES].into_boxed_slice(),
            filled: 0,
            out_failed: false,
            write_error: None,
        }
    }

    /// Duplicate what `input` holds into the output pipe (`tee`), without waiting, when the child
    /// writes in bulk: the bytes teed, which the read then takes (`None`: nothing teed, the read
    /// is written).
    fn tee_now(&mut self, input: BorrowedFd<'_>) -> Option<usize> {
        let out = self.tee.as_ref().filter(|_| !self.out_failed && self.last_read >= TEE_FROM)?;
        match nix::fcntl::tee(input, out, READ_BYTES, SpliceFFlags::SPLICE_F_NONBLOCK) {
            Ok(0) => None,
            Ok(n) => Some(n),
            // The input is empty (the read says so) or the output full (the write waits for
            // room), or a signal: read and write this time. A broken output: the write reports it.
            Err(Errno::EAGAIN | Errno::EINTR | Errno::EPIPE) => None,
            // Not teeable after all: write from now on.
            Err(_) => {
                self.tee = None;
                None
            }
        }
    }

    /// Wait until `input` (the pipe's read end, nonblocking) has something or `wake` is readable
    /// (or closed); read once and copy what was read to `out` before returning (partial lines
    /// and binary included, unchanged). Blocks: for a thread of its own. An error is a read error.
    pub fn step(&mut self, input: BorrowedFd<'_>, wake: BorrowedFd<'_>) -> io::Result<Step> {
        loop {
            let mut fds = [PollFd::new(input, PollFlags::POLLIN), PollFd::new(wake, PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            if fds[1].revents().is_some_and(|r| !r.is_empty()) {
                let mut bytes = [0u8; 64];
                let closed = !matches!(nix::unistd::read(wake, &mut bytes), Ok(n) if n > 0);
                return Ok(Step::Woken { closed });
            }
            if fds[0].revents().is_some_and(|r| !r.is_empty()) {
                match self.read_now(input)? {
                    Step::Empty => {}
                    step => return Ok(step),
                }
            }
        }
    }

    /// Read once from `input` without waiting (`Empty`: nothing there now) and copy it to `out`.
    pub fn read_now(&mut self, input: BorrowedFd<'_>) -> io::Result<Step> {
        self.filled = 0;
        if let Some(teed) = self.tee_now(input) {
            // Already in the output: read exactly those bytes (this thread is the pipe's only
            // reader, so they are there).
            while self.filled < teed {
                match nix::unistd::read(input, &mut self.buf[self.filled..teed]) {
                    Ok(0) | Err(Errno::EAGAIN) => return Err(io::Error::other("the input lost bytes it had teed")),
                    Ok(n) => self.filled += n,
                    Err(Errno::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            self.last_read = teed;
            self.teed += teed as u64;
            return Ok(Step::Read);
        }
        self.last_read = 0;
        let n = loop {
            match nix::unistd::read(input, &mut self.buf) {
                Ok(0) => return Ok(Step::Eof),
                Ok(n) => break n,
                Err(Errno::EAGAIN) => return Ok(Step::Empty),
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        };
        self.filled = n;
        self.last_read = n;
        if !self.out_failed {
            if let Err(e) = self.out.write_all(&self.buf[..n]).and_then(|()| self.out.flush()) {
                self.out_failed = true;
                self.write_error = Some(e);
            }
        }
        Ok(Step::Read)
    }

    /// The complete lines of the last read, to `on_line` (at most once per read).
    pub fn lines(&mut self, on_line: &mut impl FnMut(&str)) {
        let chunk = &self.buf[..std::mem::take(&mut self.filled)];
        // Truncating, the splitter never refuses a line.
        let _ = self.lines.feed(chunk, &mut |line| on_line(&String::from_utf8_lossy(line)));
    }

    /// The first error writing to `out`, once (to be logged); writing stopped there.
    pub fn take_write_error(&mut self) -> Option<io::Error> {
        self.write_error.take()
    }

    /// The child's stdout ended: hand on its unfinished last line, if any.
    pub fn finish(&mut self, on_line: &mut impl FnMut(&str)) {
        self.lines.finish_into(&mut |line: &[u8]| on_line(&String::from_utf8_lossy(line)));
    }

    /// Relay until the child's end is closed, every line to `on_line` (tests; `wake` is never
    /// written to).
    pub fn run(
        &mut self,
        input: BorrowedFd<'_>,
        wake: BorrowedFd<'_>,
        on_line: &mut impl FnMut(&str),
    ) -> io::Result<()> {
        loop {
            match self.step(input, wake)? {
                Step::Read => self.lines(on_line),
                Step::Eof => {
                    self.finish(on_line);
                    return Ok(());
                }
                Step::Empty | Step::Woken { .. } => {}
            }
        }
    }

    /// Whether reads may be teed into the output (it is a pipe, and teeing has not failed).
    pub fn is_teeing(&self) -> bool {
        self.tee.is_some()
    }

    /// The bytes teed into the output so far (the rest were written).
    pub fn teed(&self) -> u64 {
        self.teed
    }

    /// The output, for tests and for the caller to take back.
    pub fn into_output(self) -> W {
        self.out
    }
}

impl<W: Write + AsFd> Relay<W> {
    /// A relay writing to `out`, teeing into it when it is a pipe (see the module's text).
    pub fn teeing(out: W) -> Self {
        let pipe = nix::sys::stat::fstat(out.as_fd())
            .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFIFO);
        let tee = if pipe { out.as_fd().try_clone_to_owned().ok() } else { None };
        Self { tee, ..Self::new(out) }
    }
}

#[cfg(test)]
mod tests;

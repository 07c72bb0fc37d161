//! Lines as the HyperPod agent reads them (a text file opened with Python's universal newlines):
//! `\n`, `\r\n` and a lone `\r` each end a line, handed on as the line's text plus `\n`; a stream
//! that ends mid-line hands its last piece without one. Memory is bounded: of a longer line only
//! the first [`LINE_CAP`] bytes are kept (cut at a character boundary), then the newline; the rest
//! is dropped (its pieces would be lines the agent never sees). The splitter is the one of every
//! stream ([`crate::lines`]) with these settings.

use crate::lines::{LineEnds, LineSplitter, Overlong};

/// The most bytes of one line kept for matching (64 KiB).
pub const LINE_CAP: usize = 64 * 1024;

/// A splitter of the child's stdout for the rules. It never refuses a line
/// ([`Overlong::Truncate`]): its `feed` cannot fail.
pub fn python_lines() -> LineSplitter {
    LineSplitter::with_ends(LINE_CAP, Overlong::Truncate, LineEnds::Universal)
}

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

/// The complete lines of one read, as text, one after the other (each with its `\n`, the last of a
/// stream maybe without): what the evaluator takes in one go ([`super::Evaluator::on_lines`]),
/// searching the whole text once per pattern rather than each line. The buffers are reused.
#[derive(Debug, Clone, Default)]
pub struct LineBatch {
    /// The lines' bytes while they are added ([`LineBatch::push`]); moved into `text` by `seal`.
    raw: Vec<u8>,
    /// The lines, concatenated (valid once sealed).
    text: String,
    /// The end of each line in `text`.
    ends: Vec<usize>,
}

impl LineBatch {
    /// Empty it (its buffers kept), to take the next read's lines.
    pub fn clear(&mut self) {
        self.raw = std::mem::take(&mut self.text).into_bytes();
        self.raw.clear();
        self.ends.clear();
    }

    /// Add a line's bytes (the splitter's: a `\n` at most at its end, which the matching relies
    /// on), to be checked as UTF-8 by [`LineBatch::seal`].
    pub fn push(&mut self, line: &[u8]) {
        self.raw.extend_from_slice(line);
        self.ends.push(self.raw.len());
    }

    /// Add a run of lines, each ending in its `\n` (a [`crate::lines::Lines::Run`]).
    pub fn push_lines(&mut self, run: &[u8]) {
        let base = self.raw.len();
        self.raw.extend_from_slice(run);
        self.ends.extend(memchr::memchr_iter(b'\n', run).map(|i| base + i + 1));
    }

    /// The lines added are complete: make them text. UTF-8 is checked once for all; a line that
    /// is not UTF-8 is matched as Python would never see it (the agent's reader stops on it): with
    /// U+FFFD in place of each bad sequence.
    pub fn seal(&mut self) {
        let raw = std::mem::take(&mut self.raw);
        self.text = match String::from_utf8(raw) {
            Ok(text) => text,
            Err(e) => {
                let raw = e.into_bytes();
                let mut text = String::with_capacity(raw.len());
                let mut start = 0;
                for end in &mut self.ends {
                    text.push_str(&String::from_utf8_lossy(&raw[start..*end]));
                    start = *end;
                    *end = text.len();
                }
                text
            }
        };
    }

    /// The lines, concatenated.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The end of each line in [`LineBatch::text`].
    pub fn ends(&self) -> &[usize] {
        &self.ends
    }

    /// The number of lines.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// No line.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Line `i`'s span in the text.
    #[inline(always)]
    pub fn span(&self, i: usize) -> std::ops::Range<usize> {
        (if i == 0 { 0 } else { self.ends[i - 1] })..self.ends[i]
    }

    /// Line `i`.
    #[inline(always)]
    pub fn line(&self, i: usize) -> &str {
        &self.text[self.span(i)]
    }

    /// The lines, in order.
    pub fn lines(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len()).map(|i| self.line(i))
    }
}

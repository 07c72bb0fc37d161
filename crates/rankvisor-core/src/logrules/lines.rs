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
        newline_ends(run, base, &mut self.ends);
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

/// One past each `\n` of `run`, plus `base`, onto `ends`, in order.
fn newline_ends(run: &[u8], base: usize, ends: &mut Vec<usize>) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of every x86-64 processor (the target's baseline).
    let done = unsafe { newline_ends_sse2(run, base, ends) };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    ends.extend(memchr::memchr_iter(b'\n', &run[done..]).map(|i| base + done + i + 1));
}

/// [`newline_ends`] sixteen bytes at a time (SSE2, in every x86-64), a line costing a push rather
/// than a search's start; returns how far it got (the rest is under sixteen bytes).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn newline_ends_sse2(run: &[u8], base: usize, ends: &mut Vec<usize>) -> usize {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8};
    let newline = _mm_set1_epi8(b'\n' as i8);
    let mut at = 0;
    while at + 16 <= run.len() {
        // SAFETY: the sixteen-byte load ends within `run` (`at + 16 <= run.len()`).
        let bytes = unsafe { _mm_loadu_si128(run.as_ptr().add(at).cast()) };
        let mut mask = _mm_movemask_epi8(_mm_cmpeq_epi8(bytes, newline)) as u32;
        while mask != 0 {
            ends.push(base + at + mask.trailing_zeros() as usize + 1);
            mask &= mask - 1;
        }
        at += 16;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// A run of lines is the same batch as its lines pushed one by one.
        #[test]
        fn a_run_is_its_lines(
            before in proptest::collection::vec("[a-z]{0,20}\n", 0..3),
            lines in proptest::collection::vec("[a-z é\n]{0,40}\n", 0..40),
        ) {
            let (mut one_by_one, mut runs) = (LineBatch::default(), LineBatch::default());
            for line in &before {
                one_by_one.push(line.as_bytes());
                runs.push(line.as_bytes());
            }
            let run = lines.concat();
            for line in run.split_inclusive('\n') {
                one_by_one.push(line.as_bytes());
            }
            runs.push_lines(run.as_bytes());
            one_by_one.seal();
            runs.seal();
            proptest::prop_assert_eq!(runs.text(), one_by_one.text());
            proptest::prop_assert_eq!(runs.ends(), one_by_one.ends());
        }
    }
}

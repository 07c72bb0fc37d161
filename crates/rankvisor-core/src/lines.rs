//! Splitting a byte stream into lines with bounded memory: the one splitter for every stream read
//! line by line (a Kubernetes watch, a webhook's or API server's body, a replica's output in the
//! dry run, the child's stdout for the log rules).
//!
//! Two choices make the streams differ, and each is a setting here rather than another splitter:
//! - where a line ends ([`LineEnds`]): at `\n` (protocols, the dry run's output), or at `\n`, `\r\n`
//!   and a lone `\r` as Python's universal newlines read a text file (the HyperPod agent's log);
//! - what a line longer than the limit becomes ([`Overlong`]): pieces, an error, or its head.
//!
//! [`LineSplitter::feed`] hands each line to a callback as a slice, without an allocation when the
//! line is whole in the chunk; [`LineSplitter::push`] collects them.

/// Where a line ends, and how it is handed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEnds {
    /// At `\n`; the line is handed on without it (a `\r` before it is the caller's to trim).
    Newline,
    /// At `\n`, `\r\n` or a lone `\r` (Python's universal newlines); the line is handed on with
    /// one `\n`, as Python's `readline` returns it.
    Universal,
}

/// What to do with a line longer than the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlong {
    /// Emit it in pieces of the limit's size (output meant for people: nothing is lost).
    Cut,
    /// Refuse it: the stream is broken or hostile (a protocol with a line limit).
    Refuse,
    /// Keep its head (the limit, cut before a UTF-8 character that would not fit whole) and drop
    /// the rest: one line, as the reader of the whole line would count it.
    Truncate,
}

/// A line over the limit, under [`Overlong::Refuse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a line longer than {limit} bytes")]
pub struct LineTooLong {
    /// The limit.
    pub limit: usize,
}

/// Splits chunks into lines, holding at most `max` bytes of an unfinished line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineSplitter {
    pending: Vec<u8>,
    max: usize,
    overlong: Overlong,
    ends: LineEnds,
    /// Universal: the last byte seen was a `\r`, so a `\n` right after it is that line's end.
    after_cr: bool,
    /// Truncate: the pending line reached the limit; the rest of it is dropped.
    truncated: bool,
}

impl LineSplitter {
    /// A splitter of `\n`-ended lines of at most `max` bytes (at least 1), longer ones handled by
    /// `overlong`.
    pub fn new(max: usize, overlong: Overlong) -> Self {
        Self::with_ends(max, overlong, LineEnds::Newline)
    }

    /// A splitter whose lines end as `ends` says.
    pub fn with_ends(max: usize, overlong: Overlong, ends: LineEnds) -> Self {
        Self { pending: Vec::new(), max: max.max(1), overlong, ends, after_cr: false, truncated: false }
    }

    /// Append a chunk; hand every line it completes to `on_line`. Under `Refuse` a line over the
    /// limit is an error, and what was held of it is freed (the lines before it were handed on).
    pub fn feed(&mut self, mut chunk: &[u8], on_line: &mut impl FnMut(&[u8])) -> Result<(), LineTooLong> {
        loop {
            if self.after_cr {
                let Some(&first) = chunk.first() else { return Ok(()) };
                self.after_cr = false;
                if first == b'\n' {
                    chunk = &chunk[1..];
                }
            }
            let Some(pos) = self.next_end(chunk) else {
                return self.append(chunk, on_line);
            };
            let body = &chunk[..pos];
            let whole = self.pending.is_empty() && !self.truncated && body.len() <= self.max;
            match self.ends {
                // The common cases: the whole line is in the chunk, handed on as a slice of it.
                LineEnds::Newline if whole && body.len() < self.max => on_line(body),
                LineEnds::Universal if whole && chunk[pos] == b'\n' => on_line(&chunk[..=pos]),
                _ => {
                    self.append(body, on_line)?;
                    if self.ends == LineEnds::Universal {
                        self.pending.push(b'\n');
                    }
                    on_line(&self.pending);
                    self.pending.clear();
                    self.truncated = false;
                }
            }
            self.after_cr = chunk[pos] == b'\r';
            chunk = &chunk[pos + 1..];
        }
    }

    /// Where the first line in `chunk` ends (its `\n`, or `\r` in `Universal` mode).
    fn next_end(&self, chunk: &[u8]) -> Option<usize> {
        match self.ends {
            LineEnds::Newline => memchr::memchr(b'\n', chunk),
            LineEnds::Universal => memchr::memchr2(b'\n', b'\r', chunk),
        }
    }

    /// Append a chunk; return every line it completes (see [`LineSplitter::feed`]).
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, LineTooLong> {
        let mut lines = Vec::new();
        self.feed(chunk, &mut |l| lines.push(l.to_vec()))?;
        Ok(lines)
    }

    /// Add `piece` of the current line to what is held, as `overlong` says.
    fn append(&mut self, mut piece: &[u8], on_line: &mut impl FnMut(&[u8])) -> Result<(), LineTooLong> {
        match self.overlong {
            Overlong::Refuse if self.pending.len() + piece.len() > self.max => {
                self.pending = Vec::new();
                Err(LineTooLong { limit: self.max })
            }
            Overlong::Refuse => {
                self.pending.extend_from_slice(piece);
                Ok(())
            }
            Overlong::Cut => {
                while self.pending.len() + piece.len() >= self.max {
                    let (head, tail) = piece.split_at(self.max - self.pending.len());
                    self.pending.extend_from_slice(head);
                    on_line(&self.pending);
                    self.pending.clear();
                    piece = tail;
                }
                self.pending.extend_from_slice(piece);
                Ok(())
            }
            Overlong::Truncate => {
                if self.truncated {
                    return Ok(());
                }
                let room = self.max.saturating_sub(self.pending.len());
                if piece.len() <= room {
                    self.pending.extend_from_slice(piece);
                    return Ok(());
                }
                let mut end = room;
                // Cut before a character that would not fit whole (continuation bytes are 10xxxxxx).
                while end > 0 && (piece[end] & 0xC0) == 0x80 {
                    end -= 1;
                }
                self.pending.extend_from_slice(&piece[..end]);
                self.truncated = true;
                Ok(())
            }
        }
    }

    /// The unfinished line held so far.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// The stream ended: hand on the unfinished last line, if any (without a line end), and start
    /// afresh.
    pub fn finish_into(&mut self, on_line: &mut impl FnMut(&[u8])) {
        if !self.pending.is_empty() {
            on_line(&self.pending);
        }
        self.pending.clear();
        self.truncated = false;
        self.after_cr = false;
    }

    /// The unfinished line, taken: the stream ended without a last line end.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        let mut last = None;
        self.finish_into(&mut |l| last = Some(l.to_vec()));
        last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(s: &mut LineSplitter, text: &[u8], size: usize) -> Vec<Vec<u8>> {
        text.chunks(size).flat_map(|c| s.push(c).unwrap()).collect()
    }

    #[test]
    fn lines_are_the_same_under_any_chunking() {
        let text = b"one\r\n\ntwo\nthree";
        for size in [1, 2, 3, 7, text.len()] {
            let mut s = LineSplitter::new(100, Overlong::Refuse);
            assert_eq!(all(&mut s, text, size), [b"one\r".to_vec(), vec![], b"two".to_vec()], "chunk size {size}");
            assert_eq!(s.pending(), b"three");
            assert_eq!(s.finish(), Some(b"three".to_vec()));
            assert_eq!(s.finish(), None);
        }
    }

    #[test]
    fn refuse_frees_what_it_held() {
        let mut s = LineSplitter::new(8, Overlong::Refuse);
        assert_eq!(s.push(b"12345678\n1234").unwrap(), [b"12345678".to_vec()]);
        assert_eq!(s.push(b"56789"), Err(LineTooLong { limit: 8 }));
        assert!(s.pending().is_empty(), "what was held of the long line is freed");
        // A whole line over the limit inside one chunk is refused too.
        let mut s = LineSplitter::new(4, Overlong::Refuse);
        assert_eq!(s.push(b"12345\n"), Err(LineTooLong { limit: 4 }));
    }

    #[test]
    fn cut_emits_pieces_of_the_limit() {
        for size in [1, 3, 50] {
            let mut s = LineSplitter::new(4, Overlong::Cut);
            let lines = all(&mut s, b"abcdefghij\nxy", size);
            assert_eq!(lines, [b"abcd".to_vec(), b"efgh".to_vec(), b"ij".to_vec()], "chunk size {size}");
            assert_eq!(s.finish(), Some(b"xy".to_vec()));
        }
        // Exactly the limit: the piece, then the (empty) rest of the line.
        let mut s = LineSplitter::new(4, Overlong::Cut);
        assert_eq!(s.push(b"abcd\n").unwrap(), [b"abcd".to_vec(), vec![]]);
    }

    /// The HyperPod agent's reading of its log: Python's universal newlines, a long line's head.
    fn python(chunks: &[&[u8]], cap: usize) -> Vec<String> {
        let mut s = LineSplitter::with_ends(cap, Overlong::Truncate, LineEnds::Universal);
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c, &mut |l: &[u8]| out.push(String::from_utf8_lossy(l).into_owned())).unwrap();
        }
        s.finish_into(&mut |l: &[u8]| out.push(String::from_utf8_lossy(l).into_owned()));
        out
    }

    #[test]
    fn universal_newlines_as_python_reads_them() {
        assert_eq!(python(&[b"a\nb\r\nc\rd"], 100), ["a\n", "b\n", "c\n", "d"]);
        // \r\n split across reads is one line end; \r\r is two.
        assert_eq!(python(&[b"a\r", b"\nb\r", b"\r", b"c\n"], 100), ["a\n", "b\n", "\n", "c\n"]);
        assert_eq!(python(&[b"x", b"y", b"", b"z\n\n"], 100), ["xyz\n", "\n"]);
        assert_eq!(python(&[b"tail\r"], 100), ["tail\n"]);
        assert!(python(&[b""], 100).is_empty());
    }

    #[test]
    fn truncate_keeps_a_long_lines_head_at_a_character() {
        let long = vec![b'x'; 50];
        assert_eq!(python(&[&long, b"\nnext\n"], 8), ["xxxxxxxx\n", "next\n"]);
        assert_eq!(python(&[&long[..5], &long[..5], &long[..5], b"\n"], 8), ["xxxxxxxx\n"]);
        // "aaaaaaa" + "é" (2 bytes): the 8-byte cut would split the é.
        assert_eq!(python(&["aaaaaaaé tail\n".as_bytes()], 8), ["aaaaaaa\n"]);
        assert_eq!(python(&[&long], 8), ["xxxxxxxx"]);
        // A line within the limit after a truncated one is whole again.
        assert_eq!(python(&[&long, b"\r", b"\nab\r"], 8), ["xxxxxxxx\n", "ab\n"]);
    }

    #[test]
    fn a_whole_line_in_the_chunk_is_handed_on_without_a_copy() {
        let chunk = b"whole\npart";
        let mut s = LineSplitter::with_ends(100, Overlong::Truncate, LineEnds::Universal);
        let mut seen = Vec::new();
        s.feed(chunk, &mut |l: &[u8]| seen.push(l.as_ptr())).unwrap();
        assert_eq!(seen, [chunk.as_ptr()], "the line is a slice of the chunk");
        let mut s = LineSplitter::new(100, Overlong::Refuse);
        let mut seen = Vec::new();
        s.feed(chunk, &mut |l: &[u8]| seen.push(l.as_ptr())).unwrap();
        assert_eq!(seen, [chunk.as_ptr()]);
    }
}

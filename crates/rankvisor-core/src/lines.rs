//! Splitting a byte stream into lines with bounded memory: the one splitter for every stream read
//! line by line (a Kubernetes watch, a webhook's or API server's body, a replica's output in the
//! dry run).

/// What to do with a line longer than the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlong {
    /// Emit it in pieces of the limit's size (output meant for people: nothing is lost).
    Cut,
    /// Refuse it: the stream is broken or hostile (a protocol with a line limit).
    Refuse,
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
}

impl LineSplitter {
    /// A splitter for lines of at most `max` bytes (at least 1), longer ones handled by `overlong`.
    pub fn new(max: usize, overlong: Overlong) -> Self {
        Self { pending: Vec::new(), max: max.max(1), overlong }
    }

    /// Append a chunk; return every line it completes, without its `\n` (a `\r` before it is the
    /// caller's to trim). Under `Refuse` a line over the limit is an error, and what was held of
    /// it is freed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, LineTooLong> {
        let mut lines = Vec::new();
        let mut rest = chunk;
        loop {
            let newline = rest.iter().position(|&b| b == b'\n');
            self.append(&rest[..newline.unwrap_or(rest.len())], &mut lines)?;
            match newline {
                Some(i) => {
                    lines.push(std::mem::take(&mut self.pending));
                    rest = &rest[i + 1..];
                }
                None => return Ok(lines),
            }
        }
    }

    fn append(&mut self, mut piece: &[u8], lines: &mut Vec<Vec<u8>>) -> Result<(), LineTooLong> {
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
                    lines.push(std::mem::take(&mut self.pending));
                    piece = tail;
                }
                self.pending.extend_from_slice(piece);
                Ok(())
            }
        }
    }

    /// The unfinished line held so far.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// The unfinished line, taken: the stream ended without a last newline.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        (!self.pending.is_empty()).then(|| std::mem::take(&mut self.pending))
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
}

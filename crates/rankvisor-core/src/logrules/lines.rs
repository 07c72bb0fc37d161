//! Lines as the HyperPod agent reads them (a text file opened with Python's universal newlines):
//! `\n`, `\r\n` and a lone `\r` each end a line, handed on as the line's text plus `\n`; a stream
//! that ends mid-line hands its last piece without one. Memory is bounded: of a longer line only
//! the first [`LINE_CAP`] bytes are kept (cut at a character boundary), then the newline.
//!
//! Not `crate::lines::LineSplitter` (the splitter of protocol streams and the dry run's output):
//! that one ends lines at `\n` only, hands each line as a new `Vec`, and cuts a long line into
//! several lines. The rules need Python's line ends, the rest of a long line dropped (its pieces
//! would be lines the agent never sees), and no allocation per line (the relay's throughput).

/// The most bytes of one line kept for matching (64 KiB).
pub const LINE_CAP: usize = 64 * 1024;

/// Splits a byte stream into capped lines.
#[derive(Debug)]
pub struct Lines {
    pending: Vec<u8>,
    cap: usize,
    /// The last byte seen was a `\r`: a `\n` right after it belongs to that line's end.
    after_cr: bool,
    /// The pending line was longer than the cap.
    cut: bool,
}

impl Default for Lines {
    fn default() -> Self {
        Self::new(LINE_CAP)
    }
}

impl Lines {
    /// A splitter keeping at most `cap` bytes of a line.
    pub fn new(cap: usize) -> Self {
        Self { pending: Vec::new(), cap, after_cr: false, cut: false }
    }

    /// Feed a chunk; `on_line` gets every line it completes, as bytes ending in `\n`.
    pub fn push(&mut self, mut chunk: &[u8], on_line: &mut impl FnMut(&[u8])) {
        loop {
            if self.after_cr {
                let Some(&first) = chunk.first() else { return };
                self.after_cr = false;
                if first == b'\n' {
                    chunk = &chunk[1..];
                }
            }
            let Some(pos) = memchr::memchr2(b'\n', b'\r', chunk) else {
                self.keep(chunk);
                return;
            };
            let body = &chunk[..pos];
            if self.pending.is_empty() && !self.cut && chunk[pos] == b'\n' && body.len() <= self.cap {
                // The common case: the whole line, newline included, is in the chunk.
                on_line(&chunk[..=pos]);
            } else {
                self.keep(body);
                self.pending.push(b'\n');
                on_line(&self.pending);
                self.pending.clear();
                self.cut = false;
            }
            self.after_cr = chunk[pos] == b'\r';
            chunk = &chunk[pos + 1..];
        }
    }

    /// The stream ended: hand on an unfinished last line (without a newline).
    pub fn finish(&mut self, on_line: &mut impl FnMut(&[u8])) {
        if !self.pending.is_empty() {
            on_line(&self.pending);
        }
        self.pending.clear();
        self.cut = false;
        self.after_cr = false;
    }

    /// Keep what fits of `bytes` in the pending line; once it is cut, drop the rest.
    fn keep(&mut self, bytes: &[u8]) {
        if self.cut {
            return;
        }
        let room = self.cap.saturating_sub(self.pending.len());
        if bytes.len() <= room {
            self.pending.extend_from_slice(bytes);
            return;
        }
        let mut end = room;
        // Cut before a character that would not fit whole (UTF-8 continuation bytes are 10xxxxxx).
        while end > 0 && (bytes[end] & 0xC0) == 0x80 {
            end -= 1;
        }
        self.pending.extend_from_slice(&bytes[..end]);
        self.cut = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]], cap: usize) -> Vec<Vec<u8>> {
        let mut s = Lines::new(cap);
        let mut out = Vec::new();
        for c in chunks {
            s.push(c, &mut |l: &[u8]| out.push(l.to_vec()));
        }
        s.finish(&mut |l: &[u8]| out.push(l.to_vec()));
        out
    }

    fn strs(v: &[Vec<u8>]) -> Vec<String> {
        v.iter().map(|l| String::from_utf8_lossy(l).into_owned()).collect()
    }

    #[test]
    fn universal_newlines_as_python_reads_them() {
        assert_eq!(strs(&split(&[b"a\nb\r\nc\rd"], 100)), ["a\n", "b\n", "c\n", "d"]);
        // \r\n split across reads is one line end; \r\r is two.
        assert_eq!(strs(&split(&[b"a\r", b"\nb\r", b"\r", b"c\n"], 100)), ["a\n", "b\n", "\n", "c\n"]);
        assert_eq!(strs(&split(&[b"x", b"y", b"", b"z\n\n"], 100)), ["xyz\n", "\n"]);
        assert_eq!(strs(&split(&[b"tail\r"], 100)), ["tail\n"]);
        assert!(split(&[b""], 100).is_empty());
    }

    #[test]
    fn a_long_line_is_cut_at_the_cap_and_at_a_character() {
        let long = vec![b'x'; 50];
        assert_eq!(strs(&split(&[&long, b"\nnext\n"], 8)), ["xxxxxxxx\n", "next\n"]);
        assert_eq!(strs(&split(&[&long[..5], &long[..5], &long[..5], b"\n"], 8)), ["xxxxxxxx\n"]);
        // "aaaaaaa" + "é" (2 bytes): the 8-byte cut would split the é.
        assert_eq!(strs(&split(&["aaaaaaaé tail\n".as_bytes()], 8)), ["aaaaaaa\n"]);
        assert_eq!(strs(&split(&[&long], 8)), ["xxxxxxxx"]);
    }
}

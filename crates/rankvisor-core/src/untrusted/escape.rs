//! Escaping values from outside (peers, files, the environment, the child) before they reach a
//! text log line or the termination message, so a value can neither start a forged line, move
//! the terminal's cursor, nor hide characters from whoever reads the log.
//!
//! The style is Rust's `escape_debug`, kept readable: printable text (any script) passes as it is;
//! `\n`, `\r`, `\t`, `\0` and `\\` are written as such; other control characters, ANSI escape
//! sequences (their ESC), and invisible format characters (zero-width spaces, the BOM,
//! bidirectional overrides) become `\u{..}`; bytes that are not UTF-8 become `\xNN`.

use std::borrow::Cow;
use std::fmt;

/// Characters that would not show, or would show as something else: C0/C1 controls (incl. ESC,
/// the start of every ANSI sequence), DEL, and Unicode format characters that are invisible or
/// reorder text (zero-width space/joiners, bidi marks and overrides, word joiner, BOM, line and
/// paragraph separators).
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
        )
}

/// Whether `c` is written differently by [`escape`].
fn escaped(c: char) -> bool {
    c == '\\' || hidden(c)
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\0' => out.push_str("\\0"),
        '\\' => out.push_str("\\\\"),
        c if hidden(c) => {
            use std::fmt::Write as _;
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// `text` with every hidden character and backslash escaped; borrowed when nothing needs it.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

/// `bytes` as text: UTF-8 runs as [`escape`] writes them, every other byte as `\xNN`.
pub fn escape_bytes(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return escape(text);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_escaped(&mut out, c);
        }
        for b in chunk.invalid() {
            use std::fmt::Write as _;
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

/// Only the characters that break a line or a terminal (controls and invisible format
/// characters), leaving backslashes alone: for text that is already escaped once, such as a
/// whole log line whose values were escaped or debug-quoted.
pub fn escape_hidden(text: &str) -> Cow<'_, str> {
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hidden(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A value from outside, displayed escaped: `node = %Escaped(&hello.node)` in a log call.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_passes_unchanged_and_borrowed() {
        for t in ["node-1", "ip-10-0-0-1.ec2.internal", "Unschedulable", "é ü 日本 🙂", "a \"quoted\" value", ""]
        {
            assert!(matches!(escape(t), Cow::Borrowed(_)), "{t}");
            assert_eq!(escape(t), t);
        }
    }

    #[test]
    fn line_breaks_cannot_forge_a_line() {
        let forged = "n1\n[rankvisor] ERROR forged\r\n";
        let e = escape(forged);
        assert_eq!(e, "n1\\n[rankvisor] ERROR forged\\r\\n");
        assert!(!e.contains('\n') && !e.contains('\r'));
    }

    #[test]
    fn controls_ansi_and_invisible_characters_are_shown() {
        assert_eq!(escape("\x1b[31mred\x1b[0m"), "\\u{1b}[31mred\\u{1b}[0m");
        assert_eq!(escape("a\tb\0c\x7f"), "a\\tb\\0c\\u{7f}");
        assert_eq!(escape("\u{feff}key"), "\\u{feff}key");
        assert_eq!(escape("a\u{200b}b"), "a\\u{200b}b");
        assert_eq!(escape("\u{202e}gnp.exe"), "\\u{202e}gnp.exe");
        assert_eq!(escape("\u{85}next line"), "\\u{85}next line");
        assert_eq!(escape("a\u{2028}b"), "a\\u{2028}b");
    }

    #[test]
    fn backslashes_are_doubled_so_escaping_is_unambiguous() {
        assert_eq!(escape("a\\nb"), "a\\\\nb");
        assert_ne!(escape("a\\nb"), escape("a\nb"));
    }

    #[test]
    fn non_utf8_bytes_are_shown_as_hex() {
        assert_eq!(escape_bytes(b"tok\xffen\n"), "tok\\xffen\\n");
        assert_eq!(escape_bytes(b"\xe2\x82"), "\\xe2\\x82");
        assert_eq!(escape_bytes("ok é".as_bytes()), "ok é");
    }

    #[test]
    fn escape_hidden_leaves_backslashes() {
        assert_eq!(escape_hidden("path=C:\\x \"n1\\n\"\nX"), "path=C:\\x \"n1\\n\"\\nX");
        assert!(matches!(escape_hidden("a\\b"), Cow::Borrowed(_)));
    }

    #[test]
    fn escaped_values_never_hold_a_hidden_character() {
        let all: String = (0u32..0x3000).filter_map(char::from_u32).chain(['\u{feff}', '\u{fffa}']).collect();
        assert!(!escape(&all).chars().any(hidden));
        assert!(!escape_hidden(&all).chars().any(hidden));
        assert_eq!(format!("{}", Escaped("x\ny")), "x\\ny");
    }
}

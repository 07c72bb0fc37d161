//! The translation itself: Python's grammar read character by character, the crate's syntax
//! written out (see the parent module for what changes and why).

use super::PatternError;
use std::collections::HashSet;

/// The character classes whose Python meaning the crate spells differently.
const WORD: &str = r"\p{L}\p{N}_";
const SPACE: &str = r"\s\x{1C}-\x{1F}";

/// What came last at the current level, for Python's "nothing to repeat" and "multiple repeat".
#[derive(Clone, Copy, PartialEq, Eq)]
enum Last {
    /// The start of the pattern, of a group, or of an alternative.
    Nothing,
    /// An anchor (`^ $ \A \Z \b \B`): Python refuses to repeat it.
    Anchor,
    /// A repeatable item.
    Atom,
    /// A quantifier.
    Quantified,
}

struct Parser<'a> {
    chars: Vec<(usize, char)>,
    i: usize,
    out: String,
    groups: usize,
    names: HashSet<String>,
    depth: usize,
    last: Last,
    /// Nothing but global flags emitted yet (Python allows them only at the start).
    at_start: bool,
    _src: &'a str,
}

/// A translated pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translation {
    /// The crate's syntax, anchored at the start.
    pub pattern: String,
    /// The number of capturing groups.
    pub groups: usize,
}

/// Translate Python syntax to the crate's.
pub fn translate(src: &str) -> Result<Translation, PatternError> {
    let mut p = Parser {
        chars: src.char_indices().collect(),
        i: 0,
        out: String::with_capacity(src.len() + 16),
        groups: 0,
        names: HashSet::new(),
        depth: 0,
        last: Last::Nothing,
        at_start: true,
        _src: src,
    };
    p.out.push_str(r"\A(?:");
    p.run()?;
    p.out.push(')');
    Ok(Translation { pattern: p.out, groups: p.groups })
}

fn err<T>(offset: usize, problem: impl Into<String>) -> Result<T, PatternError> {
    Err(PatternError { offset, problem: problem.into() })
}

fn hex_char(out: &mut String, c: char) {
    use std::fmt::Write as _;
    let _ = write!(out, "\\x{{{:X}}}", c as u32);
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).map(|&(_, c)| c)
    }

    fn peek_at(&self, k: usize) -> Option<char> {
        self.chars.get(self.i + k).map(|&(_, c)| c)
    }

    fn run(&mut self) -> Result<(), PatternError> {
        while let Some(c) = self.peek() {
            let at = self.i;
            self.i += 1;
            match c {
                '(' => self.group(at)?,
                ')' => {
                    if self.depth == 0 {
                        return err(at, "unbalanced parenthesis");
                    }
                    self.depth -= 1;
                    self.out.push(')');
                    self.last = Last::Atom;
                }
                '|' => {
                    self.out.push('|');
                    self.last = Last::Nothing;
                }
                '.' => self.atom("."),
                '^' => self.anchor("^"),
                '$' => self.anchor("(?m:$)"),
                '*' | '+' | '?' => self.quantifier(at, &c.to_string())?,
                '{' => match self.counted() {
                    Some(q) => self.quantifier(at, &q)?,
                    None => self.literal('{'),
                },
                '[' => self.class(at)?,
                '\\' => self.escape(at)?,
                c => self.literal(c),
            }
            if !matches!(c, '(') {
                self.at_start = false;
            }
        }
        if self.depth > 0 {
            return err(self.chars.len(), "missing ), unterminated subpattern");
        }
        Ok(())
    }

    fn atom(&mut self, text: &str) {
        self.out.push_str(text);
        self.last = Last::Atom;
    }

    fn anchor(&mut self, text: &str) {
        self.out.push_str(text);
        self.last = Last::Anchor;
    }

    fn quantifier(&mut self, at: usize, q: &str) -> Result<(), PatternError> {
        match self.last {
            Last::Nothing | Last::Anchor => return err(at, "nothing to repeat"),
            Last::Quantified => return err(at, "multiple repeat"),
            Last::Atom => {}
        }
        self.out.push_str(q);
        match self.peek() {
            Some('?') => {
                self.i += 1;
                self.out.push('?');
            }
            Some('+') => return err(self.i, "possessive quantifiers (*+, ++, ?+, {m,n}+) are not supported"),
            _ => {}
        }
        self.last = Last::Quantified;
        Ok(())
    }

    /// `{m}`, `{m,}`, `{,n}`, `{m,n}` after the `{`; `None` (and nothing consumed) when the brace
    /// is a literal, as Python reads it.
    fn counted(&mut self) -> Option<String> {
        let start = self.i;
        let mut lo = String::new();
        while let Some(c) = self.peek().filter(char::is_ascii_digit) {
            lo.push(c);
            self.i += 1;
        }
        let mut hi = None;
        if self.peek() == Some(',') {
            self.i += 1;
            let mut h = String::new();
            while let Some(c) = self.peek().filter(char::is_ascii_digit) {
                h.push(c);
                self.i += 1;
            }
            hi = Some(h);
        }
        if self.peek() != Some('}') || (lo.is_empty() && hi.is_none()) {
            self.i = start;
            return None;
        }
        self.i += 1;
        let lo = if lo.is_empty() { "0".to_string() } else { lo };
        Some(match hi {
            None => format!("{{{lo}}}"),
            Some(h) => format!("{{{lo},{h}}}"),
        })
    }

    fn group(&mut self, at: usize) -> Result<(), PatternError> {
        if self.peek() != Some('?') {
            self.groups += 1;
            self.open("(");
            return Ok(());
        }
        self.i += 1;
        match self.peek() {
            Some(':') => {
                self.i += 1;
                self.open("(?:");
            }
            Some('P') => {
                self.i += 1;
                match self.peek() {
                    Some('<') => {
                        self.i += 1;
                        let name = self.until('>', at, "missing >, unterminated name")?;
                        let mut cs = name.chars();
                        let ident = cs.next().is_some_and(|c| c.is_alphabetic() || c == '_')
                            && cs.all(|c| c.is_alphanumeric() || c == '_');
                        if !ident {
                            return err(at, format!("bad character in group name {name:?}"));
                        }
                        if !self.names.insert(name.clone()) {
                            return err(at, format!("redefinition of group name {name:?}"));
                        }
                        self.groups += 1;
                        self.open("(");
                    }
                    Some('=') => return err(at, "backreferences ((?P=name)) are not supported"),
                    _ => return err(at, "unknown extension ?P"),
                }
            }
            Some('#') => {
                self.until(')', at, "missing ), unterminated comment")?;
                return Ok(());
            }
            Some('=') | Some('!') => return err(at, "lookahead assertions ((?=...), (?!...)) are not supported"),
            Some('<') => {
                return match self.peek_at(1) {
                    Some('=') | Some('!') => err(at, "lookbehind assertions ((?<=...), (?<!...)) are not supported"),
                    _ => err(at, "unknown extension ?< (Python names a group (?P<name>...))"),
                }
            }
            Some('(') => return err(at, "conditional groups ((?(id)yes|no)) are not supported"),
            Some('>') => return err(at, "atomic groups ((?>...)) are not supported"),
            _ => self.flags(at)?,
        }
        Ok(())
    }

    fn open(&mut self, text: &str) {
        self.out.push_str(text);
        self.depth += 1;
        self.last = Last::Nothing;
        self.at_start = false;
    }

    /// The text up to `end` (consumed), or the error.
    fn until(&mut self, end: char, at: usize, missing: &str) -> Result<String, PatternError> {
        let mut s = String::new();
        loop {
            match self.peek() {
                None => return err(at, missing),
                Some(c) => {
                    self.i += 1;
                    if c == end {
                        return Ok(s);
                    }
                    s.push(c);
                }
            }
        }
    }

    /// `(?flags)` at the start, or `(?flags-flags:...)` anywhere, after the `(?`.
    fn flags(&mut self, at: usize) -> Result<(), PatternError> {
        let mut on = String::new();
        let mut off = String::new();
        let mut minus = false;
        let mut any = false;
        loop {
            let Some(c) = self.peek() else { return err(at, "missing -, : or )") };
            self.i += 1;
            if matches!(c, ')' | ':') && !any {
                return err(at, "missing flag");
            }
            any |= c != '-';
            match c {
                'i' | 'm' | 's' => (if minus { &mut off } else { &mut on }).push(c),
                'u' if !minus => {}
                'a' | 'L' | 'u' => {
                    return err(at, format!("the flag {c:?} (ASCII, locale or unicode switching) is not supported"))
                }
                'x' => return err(at, "the verbose flag (?x) is not supported"),
                '-' if !minus => minus = true,
                ')' if !minus => {
                    if !self.at_start {
                        return err(at, "global flags not at the start of the expression");
                    }
                    if !on.is_empty() {
                        self.out.push_str(&format!("(?{on})"));
                    }
                    return Ok(());
                }
                ':' => {
                    if minus && off.is_empty() {
                        return err(at, "missing flag after -");
                    }
                    let spec = if off.is_empty() { on } else { format!("{on}-{off}") };
                    self.open(&format!("(?{spec}:"));
                    return Ok(());
                }
                _ => return err(at, format!("unknown flag or extension {c:?}")),
            }
        }
    }

    /// `\` outside a class, after the backslash.
    fn escape(&mut self, at: usize) -> Result<(), PatternError> {
        let Some(c) = self.peek() else { return err(at, "bad escape (end of pattern)") };
        self.i += 1;
        match c {
            'd' => self.atom(r"\d"),
            'D' => self.atom(r"\D"),
            'w' => self.atom(&format!("[{WORD}]")),
            'W' => self.atom(&format!("[^{WORD}]")),
            's' => self.atom(&format!("[{SPACE}]")),
            'S' => self.atom(&format!("[^{SPACE}]")),
            'b' => self.anchor(r"\b"),
            'B' => self.anchor(r"\B"),
            'A' => self.anchor(r"\A"),
            'Z' => self.anchor(r"\z"),
            '1'..='9' => {
                if let Some(v) = self.octal_after(c) {
                    let ch = self.octal_char(at, v)?;
                    self.literal(ch);
                } else {
                    return err(at, format!("backreferences (\\{c}) are not supported"));
                }
            }
            _ => {
                let ch = self.char_escape(at, c)?;
                self.literal(ch);
            }
        }
        Ok(())
    }

    /// A literal character, written escaped.
    fn literal(&mut self, c: char) {
        if c.is_ascii_alphanumeric() || c == ' ' {
            self.out.push(c);
        } else {
            hex_char(&mut self.out, c);
        }
        self.last = Last::Atom;
    }

    /// Python's `\ddd` outside a class: three octal digits starting with `first` (1-7) make a
    /// character; anything else is a group reference.
    fn octal_after(&mut self, first: char) -> Option<u32> {
        let (a, b) = (self.peek()?, self.peek_at(1)?);
        if first <= '7' && ('0'..='7').contains(&a) && ('0'..='7').contains(&b) {
            self.i += 2;
            return Some((first as u32 - 48) * 64 + (a as u32 - 48) * 8 + (b as u32 - 48));
        }
        None
    }

    /// Up to two more octal digits after the value `v` of the first (Python reads three at most).
    fn octal_digits(&mut self, mut v: u32) -> u32 {
        for _ in 0..2 {
            match self.peek() {
                Some(d @ '0'..='7') => {
                    self.i += 1;
                    v = v * 8 + (d as u32 - 48);
                }
                _ => break,
            }
        }
        v
    }

    fn octal_char(&self, at: usize, v: u32) -> Result<char, PatternError> {
        if v > 0o377 {
            return err(at, format!("octal escape value \\{v:o} outside of range 0-0o377"));
        }
        Ok(char::from_u32(v).unwrap_or('\0'))
    }

    /// A single-character escape (after the backslash, `c` consumed), shared by both contexts:
    /// `\a \f \n \r \t \v \xhh \uhhhh \Uhhhhhhhh \0oo`, and escaped punctuation.
    fn char_escape(&mut self, at: usize, c: char) -> Result<char, PatternError> {
        Ok(match c {
            'a' => '\x07',
            'f' => '\x0C',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\x0B',
            'x' => self.hex(at, 2, 'x')?,
            'u' => self.hex(at, 4, 'u')?,
            'U' => self.hex(at, 8, 'U')?,
            '0' => {
                let v = self.octal_digits(0);
                self.octal_char(at, v)?
            }
            'N' => return err(at, "named characters (\\N{...}) are not supported: write the character or \\uXXXX"),
            c if c.is_ascii_alphanumeric() => return err(at, format!("bad escape \\{c}")),
            c => c,
        })
    }

    fn hex(&mut self, at: usize, n: usize, kind: char) -> Result<char, PatternError> {
        let mut v: u32 = 0;
        for k in 0..n {
            match self.peek().and_then(|c| c.to_digit(16)) {
                Some(d) => {
                    self.i += 1;
                    v = v * 16 + d;
                }
                None => {
                    let got: String =
                        self.chars[self.i.min(self.chars.len())..].iter().take(n - k).map(|&(_, c)| c).collect();
                    return err(at, format!("incomplete escape \\{kind}{got}"));
                }
            }
        }
        match char::from_u32(v) {
            Some(c) => Ok(c),
            None if (0xD800..=0xDFFF).contains(&v) => {
                err(at, format!("the surrogate \\{kind}{v:X} never matches decoded text"))
            }
            None => err(at, format!("bad escape \\{kind}{v:X}: beyond U+10FFFF")),
        }
    }

    /// A class `[...]`, after the `[`.
    fn class(&mut self, at: usize) -> Result<(), PatternError> {
        let mut body = String::from("[");
        if self.peek() == Some('^') {
            self.i += 1;
            body.push('^');
        }
        let mut first = true;
        loop {
            let Some(c) = self.peek() else { return err(at, "unterminated character set") };
            if c == ']' && !first {
                self.i += 1;
                break;
            }
            first = false;
            let item_at = self.i;
            let lo = self.class_item()?;
            if self.peek() == Some('-') && self.peek_at(1).is_some_and(|n| n != ']') {
                self.i += 1;
                let hi = self.class_item()?;
                match (lo, hi) {
                    (ClassItem::Char(a), ClassItem::Char(b)) if a <= b => {
                        hex_char(&mut body, a);
                        body.push('-');
                        hex_char(&mut body, b);
                    }
                    _ => return err(item_at, "bad character range"),
                }
            } else {
                match lo {
                    ClassItem::Char(a) => hex_char(&mut body, a),
                    ClassItem::Set(s) => body.push_str(s),
                }
            }
        }
        body.push(']');
        self.atom(&body);
        Ok(())
    }

    fn class_item(&mut self) -> Result<ClassItem, PatternError> {
        let at = self.i;
        let Some(c) = self.peek() else { return err(at, "unterminated character set") };
        self.i += 1;
        if c != '\\' {
            return Ok(ClassItem::Char(c));
        }
        let Some(e) = self.peek() else { return err(at, "bad escape (end of pattern)") };
        self.i += 1;
        Ok(match e {
            'd' => ClassItem::Set(r"\d"),
            'D' => ClassItem::Set(r"\D"),
            'w' => ClassItem::Set(r"\p{L}\p{N}_"),
            'W' => ClassItem::Set(r"[^\p{L}\p{N}_]"),
            's' => ClassItem::Set(r"\s\x{1C}-\x{1F}"),
            'S' => ClassItem::Set(r"[^\s\x{1C}-\x{1F}]"),
            'b' => ClassItem::Char('\x08'),
            '1'..='7' => {
                let v = self.octal_digits(e as u32 - 48);
                ClassItem::Char(self.octal_char(at, v)?)
            }
            e => ClassItem::Char(self.char_escape(at, e)?),
        })
    }
}

enum ClassItem {
    Char(char),
    Set(&'static str),
}

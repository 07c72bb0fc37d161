//! Python's `float(str)` and `int(str)`, which the agent applies to a captured metric and to the
//! rules' numeric fields: surrounding whitespace (Python's `str.isspace`), `_` between digits, any
//! Unicode decimal digit, `inf`/`infinity`/`nan` in any case for floats.

use std::sync::OnceLock;

/// Python's `str.isspace()`: Unicode White_Space plus U+001C..U+001F.
pub fn py_isspace(c: char) -> bool {
    match u8::try_from(c) {
        Ok(b) if b.is_ascii() => is_ascii_pyspace(b),
        _ => c.is_whitespace(),
    }
}

/// The value of a Unicode decimal digit (`\p{Nd}`), as Python's numeric parsers read it.
fn decimal_value(c: char) -> Option<u32> {
    if c.is_ascii() {
        return c.to_digit(10);
    }
    static ND: OnceLock<regex::Regex> = OnceLock::new();
    let nd = ND.get_or_init(|| regex::Regex::new(r"^\p{Nd}$").expect("a valid class"));
    let is_nd = |c: char| nd.is_match(c.encode_utf8(&mut [0; 4]));
    if !is_nd(c) {
        return None;
    }
    // Unicode encodes every decimal digit set as ten contiguous code points from its zero, and
    // adjacent sets (the mathematical digits) each take ten: the offset from the start of the
    // contiguous run, modulo ten, is the value.
    let mut start = c as u32;
    while let Some(p) = start.checked_sub(1).and_then(char::from_u32).filter(|&p| is_nd(p)) {
        start = p as u32;
    }
    Some((c as u32 - start) % 10)
}

/// The text with Python's number spelling normalized to Rust's: whitespace stripped, every
/// decimal digit in ASCII, `_` removed where Python allows it (one, between two digits); `None`
/// where Python would refuse the underscores.
fn normalize(text: &str) -> Option<String> {
    let t = text.trim_matches(py_isspace);
    let chars: Vec<char> = t.chars().collect();
    let mut out = String::with_capacity(t.len());
    for (k, &c) in chars.iter().enumerate() {
        if c == '_' {
            let digit = |i: Option<usize>| i.and_then(|i| chars.get(i)).and_then(|&d| decimal_value(d)).is_some();
            if !(digit(k.checked_sub(1)) && digit(Some(k + 1))) {
                return None;
            }
            continue;
        }
        match decimal_value(c) {
            Some(v) => out.push(char::from_digit(v, 10).unwrap_or('0')),
            None if c.is_ascii() => out.push(c),
            None => return None,
        }
    }
    Some(out)
}

/// Python's `float(text)`, or `None` where it raises.
pub fn py_float(text: &str) -> Option<f64> {
    // The common capture (`1.9001`, `123 `): ASCII whitespace around ASCII digits.
    let b = text.as_bytes();
    let start = b.iter().position(|&c| !is_ascii_pyspace(c)).unwrap_or(b.len());
    let end = b.iter().rposition(|&c| !is_ascii_pyspace(c)).map_or(start, |i| i + 1);
    if let Some(v) = simple_decimal(&b[start..end]) {
        return Some(v);
    }
    let t = normalize(text)?;
    let body = t.strip_prefix(['+', '-']).unwrap_or(&t);
    let lower = body.to_ascii_lowercase();
    if matches!(lower.as_str(), "inf" | "infinity" | "nan") {
        return t.parse().ok();
    }
    // Rust also reads "infinity" spellings and nothing Python refuses beyond them, except forms
    // the check below rules out: only digits, one point, one exponent.
    let ok = !body.is_empty()
        && body.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
        && body.chars().next().is_some_and(|c| c.is_ascii_digit() || c == '.');
    if !ok {
        return None;
    }
    t.parse().ok()
}

/// An ASCII byte Python's `str.isspace()` is true of: White_Space's (tab to carriage return,
/// space) and U+001C..U+001F.
fn is_ascii_pyspace(c: u8) -> bool {
    matches!(c, b'\t'..=b'\r' | 0x1C..=0x20)
}

/// `digits`, `digits.digits`, `digits.` or `.digits`: its value as std reads it (which is
/// Python's); `None` for anything else, left to the full check.
fn simple_decimal(b: &[u8]) -> Option<f64> {
    let plain = b.iter().any(u8::is_ascii_digit)
        && b.iter().all(|&c| c.is_ascii_digit() || c == b'.')
        && b.iter().filter(|&&c| c == b'.').count() <= 1;
    if !plain {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// Python's `int(text)` for a decimal string, or `None` where it raises or the value is beyond
/// `i64`.
pub fn py_int(text: &str) -> Option<i64> {
    py_int_text(text)?.parse().ok()
}

/// Whether Python's `int(text)` reads `text` (at any size).
pub fn is_py_int(text: &str) -> bool {
    py_int_text(text).is_some()
}

/// `text` normalized, when it is what Python's `int()` reads: a sign and decimal digits.
fn py_int_text(text: &str) -> Option<String> {
    let t = normalize(text)?;
    let body = t.strip_prefix(['+', '-']).unwrap_or(&t);
    (!body.is_empty() && body.bytes().all(|b| b.is_ascii_digit())).then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_python_reads_them() {
        for (text, want) in [
            ("1.5", Some(1.5)),
            (" 150 ", Some(150.0)),
            ("\t2e3\n", Some(2000.0)),
            ("1_000.5", Some(1000.5)),
            ("+.5", Some(0.5)),
            ("5.", Some(5.0)),
            ("-1E-2", Some(-0.01)),
            ("٣.٥", Some(3.5)),
            ("𝟑", Some(3.0)),
            ("\u{1C}7\u{1F}", Some(7.0)),
            ("", None),
            ("  ", None),
            (".", None),
            ("e5", None),
            ("1e", None),
            ("_1", None),
            ("1_", None),
            ("1__0", None),
            ("1._5", None),
            ("0x10", None),
            ("1.5j", None),
            ("1,5", None),
            ("1.2.3", None),
            ("5.", Some(5.0)),
            (".5", Some(0.5)),
            ("007.50", Some(7.5)),
            ("abc", None),
        ] {
            assert_eq!(py_float(text), want, "{text:?}");
        }
        assert_eq!(py_float("-InFinity"), Some(f64::NEG_INFINITY));
        assert_eq!(py_float("inf"), Some(f64::INFINITY));
        assert!(py_float("nan").is_some_and(f64::is_nan));
        assert!(py_float("-NaN").is_some_and(f64::is_nan));
        assert_eq!(py_float("infinit"), None);
    }

    #[test]
    fn plain_decimals_read_exactly_as_the_full_parse_does() {
        // Every length of digits and point position near the fast path's limits, and values
        // whose correct rounding is a tie or close to one.
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..20_000 {
            let len = 1 + (next() % 24) as usize;
            let mut t: String = (0..len).map(|_| char::from(b'0' + (next() % 10) as u8)).collect();
            if round % 4 != 0 {
                t.insert((next() % (len as u64 + 1)) as usize, '.');
            }
            if round % 7 == 0 {
                t = format!(" {t}\t");
            }
            assert_eq!(py_float(&t), t.trim().parse().ok(), "{t:?}");
        }
        for t in ["9007199254740993", "9007199254740992.5", "0.1", "1.0000000000000002220446", "4503599627370497.5"] {
            assert_eq!(py_float(t), t.parse().ok(), "{t:?}");
        }
        assert_eq!(simple_decimal(b"1.2.3"), None);
        assert_eq!(simple_decimal(b"."), None);
    }

    #[test]
    fn whitespace_is_pythons_str_isspace() {
        // Python: ''.join(chr(c) for c in range(128) if chr(c).isspace())
        let ascii: Vec<char> = (0..128u8).map(char::from).filter(|&c| py_isspace(c)).collect();
        assert_eq!(ascii, "\t\n\x0B\x0C\r\x1C\x1D\x1E\x1F ".chars().collect::<Vec<_>>());
        for c in ['\u{85}', '\u{A0}', '\u{2028}', '\u{3000}'] {
            assert!(py_isspace(c), "{c:?}");
        }
        assert!(!py_isspace('\u{200B}'), "zero width space is not");
    }

    #[test]
    fn ints_as_python_reads_them() {
        assert_eq!(py_int(" 120 "), Some(120));
        assert_eq!(py_int("-3"), Some(-3));
        assert_eq!(py_int("1_000"), Some(1000));
        assert_eq!(py_int("2.0"), None);
        assert_eq!(py_int(""), None);
        assert_eq!(py_int("99999999999999999999"), None);
    }
}

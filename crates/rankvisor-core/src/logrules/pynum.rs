//! Python's `float(str)` and `int(str)`, which the agent applies to a captured metric and to the
//! rules' numeric fields: surrounding whitespace (Python's `str.isspace`), `_` between digits, any
//! Unicode decimal digit, `inf`/`infinity`/`nan` in any case for floats.

use std::sync::OnceLock;

/// Python's `str.isspace()`: Unicode White_Space plus U+001C..U+001F.
pub fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1C}'..='\u{1F}').contains(&c)
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
    let trimmed = text.trim_matches(py_isspace);
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        // The common capture (`1.9001`, `123 `): `normalize` would return it stripped and the
        // checks below pass it to the same parse; no allocation.
        return trimmed.parse().ok();
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

/// Python's `int(text)` for a decimal string, or `None` where it raises or the value is beyond
/// `i64`.
pub fn py_int(text: &str) -> Option<i64> {
    let t = normalize(text)?;
    let body = t.strip_prefix(['+', '-']).unwrap_or(&t);
    if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
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
    fn ints_as_python_reads_them() {
        assert_eq!(py_int(" 120 "), Some(120));
        assert_eq!(py_int("-3"), Some(-3));
        assert_eq!(py_int("1_000"), Some(1000));
        assert_eq!(py_int("2.0"), None);
        assert_eq!(py_int(""), None);
        assert_eq!(py_int("99999999999999999999"), None);
    }
}

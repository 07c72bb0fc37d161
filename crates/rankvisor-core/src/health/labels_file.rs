//! The Kubernetes downward-API labels (and annotations) file: one `key="value"` per line.
//!
//! The kubelet writes each pair with Go's `%q`, so values are escaped as `strconv.Quote` does
//! (`\"`, `\\`, `\n`, `\t`, `\xNN`, `\uNNNN`, ...); this module undoes exactly that escaping.
//!
//! Duplicate keys are an error: the kubelet never writes one (it formats a map), so a duplicate
//! means a hand-edited file whose intent is ambiguous, and the health gate fails closed on it.

use std::collections::BTreeMap;

/// Longest excerpt of an offending line kept in an error, so a huge line cannot flood a message.
const MAX_LINE_EXCERPT: usize = 200;

/// A labels file that does not follow the downward-API format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelsFileError {
    /// A line that is not `key="value"`.
    #[error("line {line_no} {line:?}: expected key=\"value\" with a Go-quoted value: {problem}")]
    Malformed {
        /// 1-based line number.
        line_no: usize,
        /// The line as seen (cut short if very long).
        line: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A key written twice.
    #[error("line {line_no}: key {key:?} already set on line {first_line_no}: expected each key once")]
    DuplicateKey {
        /// 1-based line number of the second occurrence.
        line_no: usize,
        /// The repeated key.
        key: String,
        /// 1-based line number of the first occurrence.
        first_line_no: usize,
    },
}

/// Parse a downward-API labels or annotations file into its key/value pairs.
///
/// Blank lines (and surrounding whitespace, and `\r` line ends) are accepted; everything else must
/// be `key="value"`.
pub fn parse_labels_file(text: &str) -> Result<BTreeMap<String, String>, LabelsFileError> {
    let mut pairs = BTreeMap::new();
    let mut first_seen: BTreeMap<String, usize> = BTreeMap::new();
    for (index, raw_line) in text.split('\n').enumerate() {
        let line_no = index + 1;
        let line = raw_line.trim();
        if line.is_empty() {
            continue;
        }
        let (key, value) = parse_line(line).map_err(|problem| LabelsFileError::Malformed {
            line_no,
            line: excerpt(raw_line),
            problem,
        })?;
        if let Some(&first_line_no) = first_seen.get(&key) {
            return Err(LabelsFileError::DuplicateKey { line_no, key, first_line_no });
        }
        first_seen.insert(key.clone(), line_no);
        pairs.insert(key, value);
    }
    Ok(pairs)
}

fn excerpt(line: &str) -> String {
    match line.char_indices().nth(MAX_LINE_EXCERPT) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line.to_string(),
    }
}

fn parse_line(line: &str) -> Result<(String, String), String> {
    let (key, quoted) = line.split_once('=').ok_or_else(|| "missing '='".to_string())?;
    if key.is_empty() {
        return Err("empty key".into());
    }
    if let Some(c) = key.chars().find(|c| c.is_whitespace() || *c == '"') {
        return Err(format!("key {key:?} contains {c:?}"));
    }
    check_key(key)?;
    Ok((key.to_string(), unquote_go(quoted)?))
}

/// Longest label name (the part after the prefix's '/').
const MAX_NAME: usize = 63;
/// Longest label key prefix (a DNS subdomain).
const MAX_PREFIX: usize = 253;

/// A Kubernetes label (or annotation) key: an optional DNS-subdomain prefix and '/', then a name
/// of at most 63 of `[A-Za-z0-9._-]` that starts and ends alphanumeric. Anything else (a BOM or
/// zero-width space before a real key, say) would make a different key silently, so it is refused.
pub(super) fn check_key(key: &str) -> Result<(), String> {
    let bad = |what: String| Err(format!("key {key:?} is not a Kubernetes label key: {what}"));
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > MAX_PREFIX {
            return bad(format!("expected a prefix of 1 to {MAX_PREFIX} characters before '/'"));
        }
        if let Some(c) = p.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.')) {
            return bad(format!("prefix contains {c:?}: expected a DNS subdomain of [a-z0-9.-]"));
        }
        if p.split('.').any(|l| l.is_empty() || l.starts_with('-') || l.ends_with('-')) {
            return bad(
                "prefix is not a DNS subdomain: expected dot-separated labels that start and end with [a-z0-9]".into(),
            );
        }
    }
    if name.is_empty() || name.chars().count() > MAX_NAME {
        return bad(format!("expected a name of 1 to {MAX_NAME} characters"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))) {
        return bad(format!("name contains {c:?}: expected [A-Za-z0-9._-]"));
    }
    let alnum_ends =
        name.starts_with(|c: char| c.is_ascii_alphanumeric()) && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !alnum_ends {
        return bad("expected a name that starts and ends with [A-Za-z0-9]".into());
    }
    Ok(())
}

/// Undo Go's `strconv.Quote` (the rules of `strconv.Unquote` for a double-quoted string).
fn unquote_go(quoted: &str) -> Result<String, String> {
    let body = quoted.strip_prefix('"').ok_or_else(|| format!("value {quoted:?} does not start with '\"'"))?;
    let bytes = body.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut i = 0;
    loop {
        let Some(&b) = bytes.get(i) else {
            return Err("unterminated value: missing closing '\"'".into());
        };
        i += 1;
        match b {
            b'"' => {
                let rest = body.get(i..).unwrap_or_default();
                if !rest.is_empty() {
                    return Err(format!("unexpected text {rest:?} after the closing '\"'"));
                }
                break;
            }
            b'\\' => i = unescape(bytes, i, &mut out)?,
            _ => out.push(b),
        }
    }
    String::from_utf8(out).map_err(|_| "value is not valid UTF-8 once unescaped".to_string())
}

/// Decode the escape whose letter is at `bytes[i]` (just after the backslash); returns the index
/// after the escape.
fn unescape(bytes: &[u8], i: usize, out: &mut Vec<u8>) -> Result<usize, String> {
    let Some(&letter) = bytes.get(i) else {
        return Err("unterminated value: a '\\' ends the line".into());
    };
    let simple = match letter {
        b'a' => Some(0x07),
        b'b' => Some(0x08),
        b'f' => Some(0x0c),
        b'n' => Some(b'\n'),
        b'r' => Some(b'\r'),
        b't' => Some(b'\t'),
        b'v' => Some(0x0b),
        b'\\' => Some(b'\\'),
        b'"' => Some(b'"'),
        _ => None,
    };
    if let Some(byte) = simple {
        out.push(byte);
        return Ok(i + 1);
    }
    match letter {
        b'x' => {
            let value = digits(bytes, i + 1, 2, 16, "\\x")?;
            out.push(u8::try_from(value).map_err(|_| "\\x escape out of range".to_string())?);
            Ok(i + 3)
        }
        b'0'..=b'7' => {
            let value = digits(bytes, i, 3, 8, "octal \\")?;
            let byte = u8::try_from(value).map_err(|_| format!("octal escape \\{value:o} is larger than \\377"))?;
            out.push(byte);
            Ok(i + 3)
        }
        b'u' | b'U' => {
            let (width, name) = if letter == b'u' { (4, "\\u") } else { (8, "\\U") };
            let value = digits(bytes, i + 1, width, 16, name)?;
            let c =
                char::from_u32(value).ok_or_else(|| format!("{name}{value:X} is not a valid Unicode code point"))?;
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            Ok(i + 1 + width)
        }
        other => Err(format!("unknown escape '\\{}'", char::from(other).escape_default())),
    }
}

/// Read exactly `count` digits in `radix` starting at `bytes[start]`.
fn digits(bytes: &[u8], start: usize, count: usize, radix: u32, name: &str) -> Result<u32, String> {
    let what = || format!("{name} escape needs {count} base-{radix} digits");
    let slice = bytes.get(start..start + count).ok_or_else(what)?;
    slice.iter().try_fold(0u32, |acc, &b| {
        let d = char::from(b).to_digit(radix).ok_or_else(what)?;
        Ok(acc * radix + d)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_kubernetes_label_key_syntax() {
        for good in [
            "sagemaker.amazonaws.com/node-health-status",
            "app",
            "a",
            "kubernetes.io/hostname",
            "x/Y_z.9",
            &format!("{}/{}", "a".repeat(253), "b".repeat(63)),
        ] {
            assert_eq!(check_key(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("\u{feff}sagemaker.amazonaws.com/node-health-status", "prefix contains '\\u{feff}'"),
            ("\u{200b}sagemaker.amazonaws.com/node-health-status", "prefix contains '\\u{200b}'"),
            ("sagemaker.amazonaws.com/node\u{200b}-health-status", "name contains '\\u{200b}'"),
            ("Sagemaker.com/x", "prefix contains 'S'"),
            ("/x", "prefix of 1 to 253"),
            ("a//b", "name contains '/'"),
            ("a..b/x", "not a DNS subdomain"),
            ("-a.com/x", "not a DNS subdomain"),
            ("a.com/", "name of 1 to 63"),
            ("a.com/-x", "starts and ends"),
            ("x_", "starts and ends"),
            ("ключ", "name contains 'к'"),
        ] {
            let e = check_key(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert!(check_key(&"b".repeat(64)).is_err());
        assert!(check_key(&format!("{}/b", "a".repeat(254))).is_err());
    }

    #[test]
    fn a_bom_before_the_health_key_is_an_error_not_another_key() {
        let text = "\u{feff}sagemaker.amazonaws.com/node-health-status=\"Unschedulable\"\n";
        let e = parse_labels_file(text).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("\\u{feff}"), "{e}");
    }

    fn one(line: &str) -> Result<String, LabelsFileError> {
        parse_labels_file(&format!("k={line}\n")).map(|m| m.get("k").cloned().unwrap_or_default())
    }

    #[test]
    fn downward_api_file() {
        let text = "kubernetes.io/hostname=\"ip-10-1-2-3.ec2.internal\"\n\
                    sagemaker.amazonaws.com/deep-health-check-status=\"Passed\"\n\
                    sagemaker.amazonaws.com/node-health-status=\"Schedulable\"\n\
                    app_v1.2-x=\"\"\n";
        let m = parse_labels_file(text).unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(m["kubernetes.io/hostname"], "ip-10-1-2-3.ec2.internal");
        assert_eq!(m["sagemaker.amazonaws.com/node-health-status"], "Schedulable");
        assert_eq!(m["sagemaker.amazonaws.com/deep-health-check-status"], "Passed");
        assert_eq!(m["app_v1.2-x"], "");
    }

    #[test]
    fn blank_lines_whitespace_and_crlf() {
        let m = parse_labels_file("\n  \n a=\"1\"  \r\n\tb=\"2\"\r\n\n").unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!((m["a"].as_str(), m["b"].as_str()), ("1", "2"));
        assert!(parse_labels_file("").unwrap().is_empty());
        assert!(parse_labels_file("\n\n").unwrap().is_empty());
        let m = parse_labels_file("a=\"no newline at end\"").unwrap();
        assert_eq!(m["a"], "no newline at end");
    }

    #[test]
    fn go_escapes() {
        let cases = [
            (r#""plain""#, "plain"),
            (r#""a\"b""#, "a\"b"),
            (r#""a\\b""#, "a\\b"),
            (r#""l1\nl2""#, "l1\nl2"),
            (r#""\t\r\a\b\f\v""#, "\t\r\u{7}\u{8}\u{c}\u{b}"),
            (r#""\x41\x7a\x00""#, "Az\0"),
            (r#""\xc3\xa9""#, "é"),
            (r#""\101\000\177""#, "A\0\u{7f}"),
            (r#""\u00e9\u2603""#, "é☃"),
            (r#""\U0001F600""#, "😀"),
            (r#""é☃ raw utf-8""#, "é☃ raw utf-8"),
            (r#""{\"gpu\":3,\"msg\":\"xid 79\"}""#, r#"{"gpu":3,"msg":"xid 79"}"#),
            (r#""a=b=c""#, "a=b=c"),
            (r#""""#, ""),
        ];
        for (quoted, expected) in cases {
            assert_eq!(one(quoted).as_deref(), Ok(expected), "{quoted}");
        }
    }

    #[test]
    fn malformed_escapes() {
        let cases = [
            (r#""\q""#, "unknown escape"),
            (r#""\'""#, "unknown escape"),
            (r#""\x4""#, "\\x escape needs 2 base-16 digits"),
            (r#""\xZZ""#, "\\x escape needs 2 base-16 digits"),
            (r#""\18""#, "octal \\ escape needs 3 base-8 digits"),
            (r#""\400""#, "larger than \\377"),
            (r#""\u12""#, "\\u escape needs 4 base-16 digits"),
            (r#""\ud800""#, "not a valid Unicode code point"),
            (r#""\U00110000""#, "not a valid Unicode code point"),
            (r#""\xff""#, "not valid UTF-8"),
            (r#""abc\"#, "a '\\' ends the line"),
            (r#""abc"#, "missing closing"),
            (r#""a"b""#, "after the closing"),
            (r#""a" x"#, "after the closing"),
            (r#"abc"#, "does not start with"),
            (r#"'abc'"#, "does not start with"),
            (r#" "abc""#, "does not start with"),
        ];
        for (quoted, problem_part) in cases {
            match one(quoted) {
                Err(LabelsFileError::Malformed { line_no, problem, .. }) => {
                    assert_eq!(line_no, 1);
                    assert!(problem.contains(problem_part), "{quoted}: {problem}");
                }
                other => panic!("{quoted}: {other:?}"),
            }
        }
    }

    #[test]
    fn error_names_line_number_and_text() {
        let text = "a=\"1\"\n\nthis is not a label\nb=\"2\"\n";
        let err = parse_labels_file(text).unwrap_err();
        assert_eq!(
            err,
            LabelsFileError::Malformed {
                line_no: 3,
                line: "this is not a label".into(),
                problem: "missing '='".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "line 3 \"this is not a label\": expected key=\"value\" with a Go-quoted value: missing '='"
        );
    }

    #[test]
    fn malformed_keys() {
        for (line, part) in [
            ("=\"v\"", "empty key"),
            ("a b=\"v\"", "contains ' '"),
            ("a\"b=\"v\"", "contains '\"'"),
            ("key =\"v\"", "contains ' '"),
            ("key", "missing '='"),
        ] {
            match parse_labels_file(line) {
                Err(LabelsFileError::Malformed { problem, .. }) => {
                    assert!(problem.contains(part), "{line}: {problem}")
                }
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    #[test]
    fn keys_with_slash_dot_dash_underscore() {
        let m =
            parse_labels_file("sagemaker.amazonaws.com/fault-types=\"GpuFailure\"\nfoo.bar/baz_q-x=\"1\"\n").unwrap();
        assert_eq!(m["sagemaker.amazonaws.com/fault-types"], "GpuFailure");
        assert_eq!(m["foo.bar/baz_q-x"], "1");
    }

    #[test]
    fn duplicate_key_is_an_error() {
        let err = parse_labels_file("a=\"1\"\nb=\"2\"\na=\"3\"\n").unwrap_err();
        assert_eq!(err, LabelsFileError::DuplicateKey { line_no: 3, key: "a".into(), first_line_no: 1 });
        assert_eq!(err.to_string(), "line 3: key \"a\" already set on line 1: expected each key once");
    }

    #[test]
    fn long_lines_are_cut_in_errors() {
        let long = "x".repeat(10_000);
        match parse_labels_file(&long) {
            Err(LabelsFileError::Malformed { line, .. }) => {
                assert_eq!(line.len(), MAX_LINE_EXCERPT + 3);
                assert!(line.ends_with("..."));
            }
            other => panic!("{other:?}"),
        }
        let long_utf8 = "é".repeat(1000);
        assert!(parse_labels_file(&long_utf8).is_err());
    }
}

//! The YAML subset rule files use (the AWS examples' form), read without a YAML library: the PID 1
//! binary stays small. Anything outside the subset is refused with its line, never guessed.
//!
//! The subset: comments; an optional `---`; either a block list of rules or a mapping whose key
//! `logMonitoringConfiguration` holds it; each rule a block mapping (`- key: value`, further keys
//! aligned under the first); values on one line: double-quoted (YAML escapes), single-quoted
//! (`''`), or plain (`true`/`false`, `null`/`~`, integers and decimals, else a string). Not
//! supported: flow collections, block scalars (`|`, `>`), anchors, aliases, tags, multi-line
//! values, several documents.

use serde_json::{Map, Number, Value};

/// Parse `text` (the subset above) into the JSON value it denotes.
pub(super) fn parse(text: &str) -> Result<Value, String> {
    let mut lines: Vec<(usize, usize, &str)> = Vec::new();
    for (k, raw) in text.lines().enumerate() {
        let no = k + 1;
        if raw[..raw.len() - raw.trim_start().len()].contains('\t') {
            return Err(format!("line {no}: a tab in the indentation (YAML allows spaces only)"));
        }
        let body = strip_comment(raw);
        let content = body.trim_end();
        if content.trim().is_empty() {
            continue;
        }
        if lines.is_empty() && content.trim() == "---" {
            continue;
        }
        if content.starts_with("---") || content.starts_with("...") {
            return Err(format!("line {no}: several documents are not supported: one list of rules"));
        }
        let indent = content.len() - content.trim_start().len();
        lines.push((no, indent, content.trim_start()));
    }
    let Some(&(no, indent, first)) = lines.first() else { return Err("the file has no rules".into()) };
    if first.starts_with('-') {
        return list(&lines, 0, indent).map(|(v, _)| v);
    }
    let (key, rest) = split_key(first).ok_or_else(|| {
        format!("line {no}: expected a list of rules (\"- name: ...\") or logMonitoringConfiguration:")
    })?;
    if key != "logMonitoringConfiguration" || !rest.is_empty() {
        return Err(format!(
            "line {no}: expected a list of rules (\"- name: ...\") or \"logMonitoringConfiguration:\" followed by the list"
        ));
    }
    if lines.len() < 2 {
        return Err(format!("line {no}: logMonitoringConfiguration has no rules"));
    }
    let (_, inner, _) = lines[1];
    if inner < indent {
        return Err(format!("line {}: expected the list under logMonitoringConfiguration", lines[1].0));
    }
    let (v, used) = list(&lines[1..], 0, inner)?;
    if let Some(&(no, _, _)) = lines[1..].get(used) {
        return Err(format!("line {no}: unexpected text after the list of rules"));
    }
    let mut m = Map::new();
    m.insert(key.into(), v);
    Ok(Value::Object(m))
}

/// The text before a `#` that starts a comment (outside quotes, after a space or at the start).
fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match quote {
            Some('"') if c == '\\' => {
                prev = '\0';
                continue;
            }
            Some(q) if c == q && prev != '\0' => quote = None,
            Some(_) => {}
            None if c == '#' && (prev == ' ' || prev == '\t' || i == 0) => return &line[..i],
            None if (c == '"' || c == '\'') && (prev == ' ' || prev == '-' || prev == ':') => quote = Some(c),
            None => {}
        }
        prev = c;
    }
    line
}

/// `key: value` (value possibly empty), with a plain key.
fn split_key(text: &str) -> Option<(&str, &str)> {
    let pos = text.find(": ").or_else(|| text.strip_suffix(':').map(|k| k.len()))?;
    let key = text[..pos].trim_end();
    if key.is_empty() || key.starts_with(['"', '\'', '{', '[', '&', '*', '!', '?', '|', '>']) {
        return None;
    }
    Some((key, text.get(pos + 1..).unwrap_or("").trim()))
}

/// A block list at `indent` starting at `lines[from]`: its value and how many lines it used.
fn list(lines: &[(usize, usize, &str)], from: usize, indent: usize) -> Result<(Value, usize), String> {
    let mut items = Vec::new();
    let mut i = from;
    while let Some(&(no, ind, text)) = lines.get(i) {
        if ind < indent {
            break;
        }
        if ind > indent {
            return Err(format!("line {no}: unexpected indentation"));
        }
        let Some(rest) = text.strip_prefix('-') else {
            return Err(format!("line {no}: expected \"- \" (a list item)"));
        };
        if !rest.is_empty() && !rest.starts_with(' ') {
            return Err(format!("line {no}: expected \"- \" (a list item)"));
        }
        let rest = rest.trim_start();
        if rest.is_empty() {
            return Err(format!("line {no}: put the rule's first field on the line of its \"-\""));
        }
        let col = ind + (text.len() - rest.len());
        let mut m = Map::new();
        entry(&mut m, no, rest)?;
        i += 1;
        while let Some(&(no, ind, text)) = lines.get(i) {
            if ind <= indent {
                break;
            }
            if ind != col {
                return Err(format!(
                    "line {no}: a rule's fields must be aligned under its first one (column {})",
                    col + 1
                ));
            }
            entry(&mut m, no, text)?;
            i += 1;
        }
        items.push(Value::Object(m));
    }
    Ok((Value::Array(items), i - from))
}

fn entry(m: &mut Map<String, Value>, no: usize, text: &str) -> Result<(), String> {
    if text.starts_with("- ") || text == "-" {
        return Err(format!("line {no}: a list inside a rule is not supported: every field has one value"));
    }
    let (key, value) = split_key(text).ok_or_else(|| format!("line {no}: expected \"field: value\""))?;
    if value.is_empty() {
        return Err(format!("line {no}: {key} has no value (nested mappings and multi-line values are not supported)"));
    }
    if m.insert(key.to_string(), scalar(no, value)?).is_some() {
        return Err(format!("line {no}: {key} is given twice"));
    }
    Ok(())
}

fn scalar(no: usize, text: &str) -> Result<Value, String> {
    let bad = |what: &str| {
        Err(format!("line {no}: {what} are not supported in rule files: write the value on one line, quoted"))
    };
    match text.chars().next() {
        Some('"') => double_quoted(no, text).map(Value::String),
        Some('\'') => {
            let inner = text.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')).filter(|_| text.len() >= 2);
            match inner {
                Some(inner) if !inner.replace("''", "").contains('\'') => Ok(Value::String(inner.replace("''", "'"))),
                _ => Err(format!("line {no}: unterminated or malformed single-quoted value")),
            }
        }
        Some('[') | Some('{') => bad("flow collections ([...], {...})"),
        Some('|') | Some('>') => bad("block scalars (| and >)"),
        Some('&') | Some('*') => bad("anchors and aliases"),
        Some('!') => bad("tags"),
        _ => Ok(plain(text)),
    }
}

/// A plain value, typed as YAML 1.2's core schema types it.
fn plain(text: &str) -> Value {
    match text {
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        "null" | "Null" | "NULL" | "~" => return Value::Null,
        _ => {}
    }
    let numeric = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !numeric.is_empty() && numeric.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(n) = text.parse::<i64>() {
            return Value::Number(n.into());
        }
    }
    let decimal = numeric.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
        && numeric.bytes().next().is_some_and(|b| b.is_ascii_digit() || b == b'.')
        && numeric.bytes().any(|b| b.is_ascii_digit());
    if decimal {
        if let Some(n) = text.parse::<f64>().ok().and_then(Number::from_f64) {
            return Value::Number(n);
        }
    }
    Value::String(text.to_string())
}

fn double_quoted(no: usize, text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = text[1..].chars();
    loop {
        let Some(c) = chars.next() else { return Err(format!("line {no}: unterminated double-quoted value")) };
        match c {
            '"' => {
                let rest: String = chars.collect();
                if !rest.trim().is_empty() {
                    return Err(format!("line {no}: unexpected text after the quoted value"));
                }
                return Ok(out);
            }
            '\\' => {
                let e = chars.next().ok_or_else(|| format!("line {no}: unterminated double-quoted value"))?;
                let hex = |n: usize, chars: &mut std::str::Chars| -> Result<char, String> {
                    let digits: String = chars.by_ref().take(n).collect();
                    u32::from_str_radix(&digits, 16)
                        .ok()
                        .filter(|_| digits.len() == n)
                        .and_then(char::from_u32)
                        .ok_or_else(|| format!("line {no}: bad escape in a double-quoted value"))
                };
                out.push(match e {
                    '0' => '\0',
                    'a' => '\x07',
                    'b' => '\x08',
                    't' | '\t' => '\t',
                    'n' => '\n',
                    'v' => '\x0B',
                    'f' => '\x0C',
                    'r' => '\r',
                    'e' => '\x1B',
                    ' ' => ' ',
                    '"' => '"',
                    '/' => '/',
                    '\\' => '\\',
                    'N' => '\u{85}',
                    '_' => '\u{A0}',
                    'L' => '\u{2028}',
                    'P' => '\u{2029}',
                    'x' => hex(2, &mut chars)?,
                    'u' => hex(4, &mut chars)?,
                    'U' => hex(8, &mut chars)?,
                    other => return Err(format!("line {no}: bad escape \\{other} in a double-quoted value (a regex's backslash is written \\\\)")),
                });
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_aws_examples_form() {
        let text = "# rules\nlogMonitoringConfiguration:\n  - name: \"JobStart\"\n    logPattern: \".*Experiment configuration.*\" # start\n    expectedStartCutOffInSeconds: 120\n  - name: LossSpike\n    logPattern: '.*loss (\\d+)'\n    metricThreshold: 2.0\n    operator: \"gt\"\n    faultOnMatch: false\n";
        assert_eq!(
            parse(text).unwrap(),
            json!({"logMonitoringConfiguration": [
                {"name": "JobStart", "logPattern": ".*Experiment configuration.*", "expectedStartCutOffInSeconds": 120},
                {"name": "LossSpike", "logPattern": ".*loss (\\d+)", "metricThreshold": 2.0, "operator": "gt", "faultOnMatch": false}
            ]})
        );
        let bare = "- name: a\n  logPattern: \".*\\\\[Epoch \\\\d+ # x\"\n- name: b # c\n  logPattern: 'it''s'\n";
        assert_eq!(
            parse(bare).unwrap(),
            json!([{"name": "a", "logPattern": ".*\\[Epoch \\d+ # x"}, {"name": "b", "logPattern": "it's"}])
        );
    }

    #[test]
    fn outside_the_subset_is_refused_with_its_line() {
        for (text, want) in [
            ("- name: a\n  logPattern: |\n    x\n", "line 2: block scalars"),
            ("- name: &a x\n", "line 1: anchors"),
            ("- name: [a]\n", "line 1: flow collections"),
            ("- name: a\n   logPattern: x\n", "line 2: a rule's fields must be aligned"),
            ("- name: \"a\\q\"\n", "line 1: bad escape \\q"),
            ("- name: a\n  name: b\n", "line 2: name is given twice"),
            ("rules:\n  - name: a\n", "line 1: expected a list of rules"),
            ("- name: a\n---\n- name: b\n", "line 2: several documents"),
            ("- name:\n    x: 1\n", "line 1: name has no value"),
            ("", "no rules"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}

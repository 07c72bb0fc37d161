//! `rankvisor log-rules test`: a saved log replayed through the rules, printing each rule's state
//! line by line, the way a user tries rules before submitting a job.
//!
//! With `--timestamps` every line starts with an RFC 3339 time and one space, as
//! `kubectl logs --timestamps` and `docker logs --timestamps` write them
//! (`2025-06-17T05:51:29.300123456Z text`); the prefix is not part of the line the rules see. The
//! attempt starts at the first line's time, and between lines (and after the last one, while a
//! timeout is pending) time passes as in the agent's monitor loop, which evaluates once a second
//! while the log is quiet: idle evaluations happen on that one-second grid after each line, at
//! the ticks where a timeout has expired (at the others nothing can change). Without
//! `--timestamps` every line comes at the attempt's start, so no timeout fires.

use super::eval::{Evaluator, LogState};
use super::lines::python_lines;
use super::ruleset::RuleSet;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How to replay and print.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayOptions {
    /// Lines start with an RFC 3339 timestamp and a space.
    pub timestamps: bool,
    /// One JSON object per evaluation instead of the table.
    pub json: bool,
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Reading the log or writing the report failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A line without a usable timestamp (with `--timestamps`).
    #[error("line {line}: {problem}")]
    Timestamp {
        /// 1-based line number.
        line: u64,
        /// What is wrong and what was expected.
        problem: String,
    },
}

const SECOND: Duration = Duration::from_secs(1);

/// Nanoseconds since 1970 for an RFC 3339 time (`2025-06-17T05:51:29.3Z`, `...+02:00`).
pub fn parse_rfc3339(text: &str) -> Option<i128> {
    let b = text.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(r)?;
        s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok())?
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d, h, mi, s) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac_ns: i64 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        for k in 0..9 {
            frac_ns = frac_ns * 10 + if k < digits { i64::from(b[i + k] - b'0') } else { 0 };
        }
        i += digits;
    }
    let offset_s = match &text[i..] {
        "Z" | "z" => 0,
        tz if tz.len() == 6 && matches!(tz.as_bytes()[0], b'+' | b'-') && tz.as_bytes()[3] == b':' => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            let o = oh * 3600 + om * 60;
            if tz.starts_with('-') {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    // Days from the civil date (H. Hinnant's algorithm).
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * ((mo + 9) % 12) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + s - offset_s;
    Some(i128::from(secs) * 1_000_000_000 + i128::from(frac_ns))
}

struct Printer<'a, W: Write> {
    out: &'a mut W,
    json: bool,
    timestamps: bool,
    names: Vec<String>,
    shown: Option<(LogState, Vec<LogState>)>,
}

impl<W: Write> Printer<'_, W> {
    fn header(&mut self) -> io::Result<()> {
        if !self.json {
            writeln!(self.out, "rules: {}", self.names.join(", "))?;
        }
        Ok(())
    }

    /// One evaluation: `line` is its number and text, `None` for an idle one.
    fn record(&mut self, ev: &Evaluator, line: Option<(u64, &str)>, at: Duration) -> io::Result<()> {
        let states: Vec<LogState> = ev.rule_states().collect();
        let verdict = ev.verdict();
        let now = (verdict.state, states.clone());
        let changed = self.shown.as_ref() != Some(&now);
        self.shown = Some(now);
        if self.json {
            let named: Vec<serde_json::Value> = verdict
                .named
                .iter()
                .map(|(i, l)| serde_json::json!({"rule": self.names[*i], "line": l.as_deref()}))
                .collect();
            let rec = serde_json::json!({
                "line": line.map(|(n, _)| n),
                "at_ns": at.as_nanos() as u64,
                "state": verdict.state.as_str(),
                "reason": ev.reason(),
                "named": named,
                "rules": states.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
                "stopped": ev.stopped(),
            });
            return writeln!(self.out, "{rec}");
        }
        if line.is_none() && !changed {
            return Ok(());
        }
        let no = line.map_or_else(|| "-".to_string(), |(n, _)| n.to_string());
        write!(self.out, "{no:>6}")?;
        if self.timestamps {
            write!(self.out, " {:>12}", format!("+{:.3}s", at.as_secs_f64()))?;
        }
        write!(self.out, "  {:<8}", verdict.state.as_str())?;
        for (name, s) in self.names.iter().zip(&states) {
            write!(self.out, " {name}={}", s.as_str())?;
        }
        if let Some(reason) = ev.reason() {
            write!(self.out, "  [{}]", crate::untrusted::escape(&reason))?;
        }
        match line {
            Some((_, text)) => {
                let t = text.strip_suffix('\n').unwrap_or(text);
                let t: String = t.chars().take(160).collect();
                writeln!(self.out, "  | {}", crate::untrusted::escape(&t))
            }
            None => writeln!(self.out, "  | (quiet)"),
        }
    }
}

/// Replay `log` through `rules`, writing the report to `out`.
pub fn replay(
    rules: Arc<RuleSet>,
    mut log: impl Read,
    opts: ReplayOptions,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let base = Instant::now();
    let names = rules.rules().iter().map(|r| crate::untrusted::escape(&r.name).into_owned()).collect();
    let mut ev = Evaluator::new(rules, base);
    let mut printer = Printer { out, json: opts.json, timestamps: opts.timestamps, names, shown: None };
    printer.header()?;
    let mut state = State { first_ns: None, prev: Duration::ZERO, last_line_at: None, number: 0, error: None };
    let mut lines = python_lines();
    let mut buf = vec![0u8; 64 * 1024];
    let mut io_error: Option<io::Error> = None;
    let mut handle = |bytes: &[u8], ev: &mut Evaluator, state: &mut State, printer: &mut Printer<'_, _>| {
        if state.error.is_some() || io_error.is_some() {
            return;
        }
        state.number += 1;
        if let Err(e) = state.line(bytes, opts.timestamps, base, ev, printer) {
            match e {
                ReplayError::Io(e) => io_error = Some(e),
                e => state.error = Some(e),
            }
        }
    };
    loop {
        let n = match log.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        // Truncating, the splitter never refuses a line.
        let _ = lines.feed(&buf[..n], &mut |l: &[u8]| handle(l, &mut ev, &mut state, &mut printer));
        // What each read decided is out before the next read waits: a live log (`tail -f ... |
        // rankvisor log-rules test RULES -`) shows its lines' states as they come.
        printer.out.flush()?;
    }
    lines.finish_into(&mut |l: &[u8]| handle(l, &mut ev, &mut state, &mut printer));
    if let Some(e) = io_error {
        return Err(e.into());
    }
    if let Some(e) = state.error {
        return Err(e);
    }
    if opts.timestamps {
        idle_until(&mut ev, base, state.last_line_at.unwrap_or(Duration::ZERO), None, &mut printer)?;
    }
    if !opts.json {
        let v = ev.verdict();
        let reason = ev.reason().map(|r| format!(" ({})", crate::untrusted::escape(&r))).unwrap_or_default();
        writeln!(printer.out, "final: {}{reason}", v.state.as_str())?;
    }
    Ok(())
}

struct State {
    first_ns: Option<i128>,
    prev: Duration,
    last_line_at: Option<Duration>,
    number: u64,
    error: Option<ReplayError>,
}

impl State {
    fn line<W: Write>(
        &mut self,
        bytes: &[u8],
        timestamps: bool,
        base: Instant,
        ev: &mut Evaluator,
        p: &mut Printer<'_, W>,
    ) -> Result<(), ReplayError> {
        let text = String::from_utf8_lossy(bytes);
        let (at, body) = if timestamps {
            let bad = |problem: String| ReplayError::Timestamp { line: self.number, problem };
            let (stamp, body) = text.split_once(' ').ok_or_else(|| {
                bad("expected an RFC 3339 timestamp and a space before the text (kubectl logs --timestamps)".into())
            })?;
            let ns = parse_rfc3339(stamp).ok_or_else(|| {
                bad(format!(
                    "{:?} is not an RFC 3339 timestamp such as 2025-06-17T05:51:29.300Z",
                    crate::untrusted::escape(stamp)
                ))
            })?;
            let first = *self.first_ns.get_or_insert(ns);
            let since = ns - first;
            let at = Duration::from_nanos(
                u64::try_from(since).map_err(|_| bad("its time is before the first line's".into()))?,
            );
            if at < self.prev {
                return Err(bad(format!(
                    "its time is {:.3}s before the previous line's",
                    (self.prev - at).as_secs_f64()
                )));
            }
            (at, body.to_string())
        } else {
            (Duration::ZERO, text.into_owned())
        };
        if let Some(last) = self.last_line_at {
            idle_until(ev, base, last, Some(at), p)?;
        }
        self.prev = at;
        self.last_line_at = Some(at);
        let _ = ev.on_line(&body, base + at);
        p.record(ev, Some((self.number, &body)), at)?;
        Ok(())
    }
}

/// Idle evaluations on the one-second grid after `last` (the last line's time), before `until`,
/// at the ticks where a timeout has expired.
fn idle_until<W: Write>(
    ev: &mut Evaluator,
    base: Instant,
    last: Duration,
    until: Option<Duration>,
    p: &mut Printer<'_, W>,
) -> io::Result<()> {
    while let Some(deadline) = ev.next_deadline() {
        let due = deadline.saturating_duration_since(base + last);
        let ticks = due.as_nanos().div_ceil(SECOND.as_nanos()).max(1);
        let Some(tick) =
            u32::try_from(ticks).ok().and_then(|t| SECOND.checked_mul(t)).and_then(|d| last.checked_add(d))
        else {
            return Ok(());
        };
        if until.is_some_and(|u| tick >= u) {
            return Ok(());
        }
        let _ = ev.on_idle(base + tick);
        p.record(ev, None, tick)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01.5Z"), Some(1_500_000_000));
        assert_eq!(parse_rfc3339("2000-03-01T00:00:00Z"), Some(951_868_800 * 1_000_000_000));
        assert_eq!(parse_rfc3339("2025-06-17T05:51:29.300123456Z"), Some(1_750_139_489_300_123_456));
        assert_eq!(parse_rfc3339("2025-06-17T07:51:29.300123456+02:00"), Some(1_750_139_489_300_123_456));
        for bad in [
            "2025-06-17",
            "2025-06-17T05:51:29",
            "2025-13-17T05:51:29Z",
            "2025-06-17T05:51:29.Z",
            "x025-06-17T05:51:29Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}

//! The evaluator: the HyperPod agent's `LogEvaluator` (one per rule) and its monitor loop's
//! combination of the rules (`LogAgent._monitor_log_loop`), as pure functions of (line, time).
//!
//! Per rule, in the agent's order: an inactive rule is HEALTHY; a line matching `logPattern`
//! (at its start) is remembered with its time, and is FAULTED at once with `faultOnMatch`; a line
//! matching `stopPattern` deactivates the rule (HEALTHY); with no match yet, more than
//! `expectedStartCutOffInSeconds` since the attempt started is HANGING; after a match, more than
//! `expectedRecurringFrequencyInSeconds` since the last one is HANGING; a line that does not match
//! leaves the state as it was; a match without a metric is HEALTHY; a match whose first group meets
//! the condition counts one data point (a match that does not resets the count), and
//! `metricEvaluationDataPoints` of them in a row are SLOW.
//!
//! Combined: FAULTED > HANGING > SLOW > HEALTHY > WAITING; the verdict names the rules in the
//! winning state in configuration order, with their last matched lines, and keeps them while the
//! verdict's state is unchanged. Two of the agent's failure paths are kept, because they decide
//! what it reports: a captured value that Python's `float()` refuses abandons the line (the rules
//! after it do not see it, the verdict is not updated), and a verdict leaving FAULTED is a
//! transition the agent does not allow, which ends its monitoring: here too the evaluator stops.

use super::lines::LineBatch;
use super::pynum::py_float;
use super::pyre::{Found, PyRegex};
use super::rule::Rule;
use super::ruleset::RuleSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A rule's or the verdict's state, in the agent's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogState {
    /// No decision yet (no match, no timeout).
    Waiting,
    /// Within expectations.
    Healthy,
    /// The metric met its condition often enough.
    Slow,
    /// An expected line did not come in time.
    Hanging,
    /// A `faultOnMatch` pattern matched.
    Faulted,
}

impl LogState {
    /// The agent's spelling: `WAITING`, `HEALTHY`, `SLOW`, `HANGING`, `FAULTED`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "WAITING",
            Self::Healthy => "HEALTHY",
            Self::Slow => "SLOW",
            Self::Hanging => "HANGING",
            Self::Faulted => "FAULTED",
        }
    }

    /// True for the states that fail the attempt (SLOW, HANGING, FAULTED).
    pub fn firing(self) -> bool {
        self >= Self::Slow
    }

    /// The agent's allowed verdict transitions (`LOGSTATE_TRANSITIONS`): none out of FAULTED,
    /// none back to WAITING.
    fn may_become(self, next: Self) -> bool {
        self == next || (self != Self::Faulted && next != Self::Waiting)
    }
}

/// The longest line kept as a rule's last match, in bytes (the splitter's cap).
pub const MAX_KEPT_LINE: usize = super::lines::LINE_CAP + 1;

#[derive(Debug, Clone)]
struct RuleRun {
    active: bool,
    state: LogState,
    /// The last matched line (`last_match` says whether there is one); a buffer reused, so a
    /// match costs no allocation.
    last_line: String,
    /// Within `on_lines`: the batch's line that is the last matched one, not yet copied to
    /// `last_line` (copied when the verdict names it, or at the end of the batch).
    pending: Option<usize>,
    last_match: Option<Instant>,
    slow_count: u32,
}

/// The combined verdict: its state and the rules it names (configuration order) with the line
/// each had last matched when the verdict took this state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The combined state.
    pub state: LogState,
    /// `(rule index, its last matched line)` for the rules in `state`, first rule first.
    pub named: Vec<(usize, Option<Arc<str>>)>,
}

/// The rules of one attempt, evaluated line by line.
#[derive(Debug, Clone)]
pub struct Evaluator {
    rules: Arc<RuleSet>,
    runs: Vec<RuleRun>,
    start: Instant,
    last_eval: Instant,
    verdict: Verdict,
    /// The verdict's state is the rules' states combined (false when a line that changed one was
    /// abandoned before the verdict was taken).
    settled: bool,
    stopped: bool,
    /// `on_lines`' buffers, reused: which rules may match each line, where in the line each
    /// pattern's needle occurs first, which rules were evaluated, which a line is shown to.
    marks: Vec<u64>,
    firsts: Vec<u32>,
    done: Vec<bool>,
    order: Vec<usize>,
}

impl Evaluator {
    /// Fresh state for an attempt that started at `attempt_start` (the agent creates its
    /// evaluators when it starts the workers).
    pub fn new(rules: Arc<RuleSet>, attempt_start: Instant) -> Self {
        let runs = rules
            .rules()
            .iter()
            .map(|_| RuleRun {
                active: true,
                state: LogState::Waiting,
                last_line: String::new(),
                pending: None,
                last_match: None,
                slow_count: 0,
            })
            .collect();
        Self {
            rules,
            runs,
            start: attempt_start,
            last_eval: attempt_start,
            verdict: Verdict { state: LogState::Waiting, named: Vec::new() },
            settled: true,
            stopped: false,
            marks: Vec::new(),
            firsts: Vec::new(),
            done: Vec::new(),
            order: Vec::new(),
        }
    }

    /// Evaluate one line of the child's output (with its newline, as the agent reads it; the
    /// last line of a stream that ends without one, without) at `now`; returns the verdict.
    pub fn on_line(&mut self, line: &str, now: Instant) -> &Verdict {
        self.evaluate(Some(line), now)
    }

    /// Evaluate the passing of time at `now` with no new line (the agent's idle evaluation);
    /// returns the verdict.
    pub fn on_idle(&mut self, now: Instant) -> &Verdict {
        self.evaluate(None, now)
    }

    /// The verdict as of the last evaluation.
    pub fn verdict(&self) -> &Verdict {
        &self.verdict
    }

    /// The rules, in configuration order.
    pub fn rules(&self) -> &[Rule] {
        self.rules.rules()
    }

    /// Each rule's own state, in configuration order.
    pub fn rule_states(&self) -> impl Iterator<Item = LogState> + '_ {
        self.runs.iter().map(|r| r.state)
    }

    /// The last line rule `index` matched (with its newline), if any.
    pub fn last_line(&self, index: usize) -> Option<&str> {
        self.runs.get(index).filter(|r| r.last_match.is_some()).map(|r| r.last_line.as_str())
    }

    /// True once the verdict left FAULTED, where the agent's monitoring ends: nothing changes
    /// any more.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// `LogHang_<rule>`, `LogSlow_<rule>` or `LogFault_<rule>` for a firing verdict (the first
    /// rule it names), as the agent's `/status` reason spells it.
    pub fn reason(&self) -> Option<String> {
        let prefix = match self.verdict.state {
            LogState::Hanging => "LogHang_",
            LogState::Slow => "LogSlow_",
            LogState::Faulted => "LogFault_",
            _ => return None,
        };
        let &(i, _) = self.verdict.named.first()?;
        Some(format!("{prefix}{}", self.rules.rules()[i].name))
    }

    /// The earliest time after the last evaluation at which `on_idle` can change a state (a
    /// timeout expiring, `>` being strict: one nanosecond after it); `None` when no timeout is
    /// pending. The loop sleeps until then; idle evaluations in between change nothing (no
    /// pattern matches an empty line: rules that would are refused).
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.stopped {
            return None;
        }
        let after = |t: Instant, d: Duration| t.checked_add(d).and_then(|t| t.checked_add(Duration::from_nanos(1)));
        self.rules
            .rules()
            .iter()
            .zip(&self.runs)
            .filter(|(_, run)| run.active)
            .filter_map(|(rule, run)| match run.last_match {
                None => rule.start_cutoff.and_then(|c| after(self.start, c)),
                Some(m) => rule.recurring.and_then(|f| after(m, f)),
            })
            .filter(|&d| d > self.last_eval)
            .min()
    }

    fn evaluate(&mut self, line: Option<&str>, now: Instant) -> &Verdict {
        if !self.stopped {
            self.last_eval = self.last_eval.max(now);
            self.step(line, now, None, None, |_| Some(if line.is_some() { Shown::Line } else { Shown::Idle }));
        }
        &self.verdict
    }

    /// Evaluate the complete lines of one read, all at `now` (as one `on_line` each, in order);
    /// `on_change` sees the evaluator after each line that changed the verdict's state.
    ///
    /// Each pattern's needle (`PyRegex::needle`) is searched once in the whole batch, which
    /// tells each rule the lines it may match and where in them the needle is first; a rule is
    /// shown only those (its patterns then need no search of their own), and is otherwise
    /// evaluated idle once, at the first line. Exact, because all the lines share one
    /// `now`: a rule shown a line that neither of its patterns matches does what an idle
    /// evaluation at `now` does, and an idle evaluation at `now` after any evaluation at `now`
    /// changes nothing (the timeouts compare with `now`, and a match at `now` is 0 s old; an
    /// inactive rule stays HEALTHY). A line no rule may match then leaves every rule as it was,
    /// and the verdict too, unless the line before it was abandoned (a `NotANumber`) before the
    /// verdict was taken: that line takes it.
    pub fn on_lines(&mut self, batch: &LineBatch, now: Instant, on_change: &mut impl FnMut(&Self)) {
        if self.stopped || batch.is_empty() {
            return;
        }
        self.last_eval = self.last_eval.max(now);
        let rules = Arc::clone(&self.rules);
        let n = rules.rules().len();
        // Two bits a rule: its log pattern's needle was found in the line, its stop pattern's;
        // and where, in `firsts` (`NOT_SEARCHED`: the pattern has no needle).
        let words = (2 * n).div_ceil(64).max(1);
        let mut marks = std::mem::take(&mut self.marks);
        marks.clear();
        marks.resize(batch.len() * words, 0);
        let mut firsts = std::mem::take(&mut self.firsts);
        firsts.resize(batch.len() * 2 * n, 0);
        let text = batch.text().as_bytes();
        let ascii = text.is_ascii();
        for (r, (rule, run)) in rules.rules().iter().zip(&self.runs).enumerate() {
            if !run.active {
                continue;
            }
            for (b, pattern) in [(2 * r, Some(&rule.log_pattern)), (2 * r + 1, rule.stop_pattern.as_ref())] {
                let Some(pattern) = pattern else { continue };
                let (word, bit) = (b / 64, 1u64 << (b % 64));
                let Some(needle) = pattern.needle(ascii) else {
                    marks.iter_mut().skip(word).step_by(words).for_each(|m| *m |= bit);
                    firsts.iter_mut().skip(b).step_by(2 * n).for_each(|f| *f = NOT_SEARCHED);
                    continue;
                };
                // From each line's first occurrence on, the search goes on: the next one is in
                // the same line (which then has more: the search goes on after it) or is the
                // next line's first.
                let (mut from, mut line, mut open) = (0, 0, usize::MAX);
                while let Some(pos) = needle.find(text, from) {
                    line = line_from(batch.ends(), line, pos);
                    let Some(&end) = batch.ends().get(line) else { break };
                    let k = line * 2 * n + b;
                    if line == open {
                        firsts[k] |= MORE;
                        from = end;
                        continue;
                    }
                    marks[line * words + word] |= bit;
                    // A line is at most `LINE_CAP` bytes and its newline.
                    firsts[k] = (pos - batch.span(line).start) as u32;
                    open = line;
                    from = pos + 1;
                }
            }
        }
        // The rules evaluated at `now` in this batch.
        let mut done = std::mem::take(&mut self.done);
        done.clear();
        done.resize(n, false);
        let mut order = std::mem::take(&mut self.order);
        let mut all_done = n == 0;
        // The last line was abandoned: the verdict was not taken after it.
        let mut stale = false;
        for i in 0..batch.len() {
            if self.stopped {
                break;
            }
            let m = &marks[i * words..(i + 1) * words];
            if all_done && !stale && m.iter().all(|&w| w == 0) {
                continue;
            }
            let f = &firsts[i * 2 * n..(i + 1) * 2 * n];
            // Once every rule was evaluated at `now`, only those that may match are shown.
            if all_done {
                marked_rules(m, &mut order);
            }
            let order = all_done.then_some(&order[..]);
            let outcome = self.step(Some(batch.line(i)), now, order, Some(batch), |r| {
                let hit = |b: usize| match (m[b / 64] >> (b % 64) & 1 != 0, f[b]) {
                    (false, _) => Hit::Absent,
                    (true, NOT_SEARCHED) => Hit::Unsearched,
                    (true, at) => Hit::At(Found { first: (at & !MORE) as usize, once: at & MORE == 0 }),
                };
                let found = Searched { log: hit(2 * r), stop: hit(2 * r + 1), line: i };
                let first = !std::mem::replace(&mut done[r], true);
                match found {
                    Searched { log: Hit::Absent, stop: Hit::Absent, .. } => first.then_some(Shown::Idle),
                    found => Some(Shown::Searched(found)),
                }
            });
            all_done = all_done || done.iter().all(|&d| d);
            stale = outcome == Outcome::Abandoned;
            if outcome == Outcome::Changed {
                on_change(self);
            }
        }
        copy_last_lines(&mut self.runs, batch);
        self.marks = marks;
        self.firsts = firsts;
        self.done = done;
        self.order = order;
    }

    /// One evaluation of `line` (`None`: idle) at `now` by each rule in order (those in `order`,
    /// ascending, when given), then the verdict. `show(i)` says what rule `i` sees ([`Shown`]),
    /// or `None`: it is skipped, which must change nothing (see `on_lines`). `batch`: the line is
    /// one of its lines (the matched lines' copies wait for the verdict to need them).
    fn step(
        &mut self,
        line: Option<&str>,
        now: Instant,
        order: Option<&[usize]>,
        batch: Option<&LineBatch>,
        mut show: impl FnMut(usize) -> Option<Shown>,
    ) -> Outcome {
        let rules = self.rules.rules();
        let mut changed = false;
        for k in 0..order.map_or(rules.len(), <[usize]>::len) {
            let i = order.map_or(k, |o| o[k]);
            let (Some(rule), Some(run)) = (rules.get(i), self.runs.get_mut(i)) else { break };
            let (seen, searched) = match show(i) {
                None => continue,
                Some(Shown::Line) => (line, None),
                Some(Shown::Searched(s)) => (line, Some(s)),
                Some(Shown::Idle) => (None, None),
            };
            let before = run.state;
            let outcome = evaluate_rule(rule, run, self.start, seen, searched, now);
            changed |= run.state != before;
            if outcome.is_err() {
                // The agent's loop catches the exception and goes on to the next line.
                self.settled &= !changed;
                return Outcome::Abandoned;
            }
        }
        if self.settled && !changed {
            // The verdict is the rules' states combined, and none changed.
            return Outcome::Same;
        }
        self.settled = true;
        let state = self.runs.iter().map(|r| r.state).max().unwrap_or(LogState::Waiting);
        if state == self.verdict.state {
            return Outcome::Same;
        }
        if !self.verdict.state.may_become(state) {
            self.stopped = true;
            return Outcome::Same;
        }
        if let Some(batch) = batch {
            copy_last_lines(&mut self.runs, batch);
        }
        let named = self
            .runs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.state == state)
            .map(|(i, r)| (i, r.last_match.map(|_| Arc::from(r.last_line.as_str()))))
            .collect();
        self.verdict = Verdict { state, named };
        Outcome::Changed
    }
}

/// The matched lines of `batch` whose copies `on_lines` deferred, copied to the rules' last lines.
fn copy_last_lines(runs: &mut [RuleRun], batch: &LineBatch) {
    for run in runs {
        if let Some(i) = run.pending.take() {
            run.last_line.clear();
            run.last_line.push_str(batch.line(i));
        }
    }
}

/// The rules with a bit in a line's `marks` (two a rule, in one word), ascending, into `out`.
fn marked_rules(marks: &[u64], out: &mut Vec<usize>) {
    out.clear();
    for (w, &word) in marks.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            let r = (w * 64 + bits.trailing_zeros() as usize) / 2;
            if out.last() != Some(&r) {
                out.push(r);
            }
            bits &= bits - 1;
        }
    }
}

/// What one rule sees of an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shown {
    /// The line.
    Line,
    /// The line, with what the batch's search found in it.
    Searched(Searched),
    /// No line: an idle evaluation, as the rule sees a line neither of its patterns matches.
    Idle,
}

/// What one evaluation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// A captured value was not a number: the line was abandoned before the verdict was taken.
    Abandoned,
    /// The verdict's state is the same (or the evaluator stopped).
    Same,
    /// The verdict took a new state.
    Changed,
}

/// The captured value was not a number for Python's `float()`.
struct NotANumber;

/// The line holding byte `pos`, given the lines' `ends` and a line `from` at or before it (the
/// positions a search finds grow): a few steps forward, the common case (the text is in most
/// lines), else a binary search.
fn line_from(ends: &[usize], from: usize, pos: usize) -> usize {
    let mut line = from;
    while ends.get(line).is_some_and(|&e| e <= pos) {
        if line - from == 8 {
            return line + ends[line..].partition_point(|&e| e <= pos);
        }
        line += 1;
    }
    line
}

/// What the search of a batch found in a line for one rule's log pattern and stop pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Searched {
    log: Hit,
    stop: Hit,
    /// The line's index in its batch.
    line: usize,
}

/// What the search of a batch found in a line for one pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hit {
    /// Its needle is not there (or there is no pattern): it does not match.
    Absent,
    /// Its needle is in the line, there: it needs no search of its own.
    At(Found),
    /// It has no needle: it is matched as it is.
    Unsearched,
}

impl Hit {
    /// The pattern may match.
    #[inline]
    fn found(self) -> bool {
        self != Self::Absent
    }

    /// Where its needle is, when searched.
    #[inline]
    fn at(self) -> Option<Found> {
        match self {
            Self::At(at) => Some(at),
            _ => None,
        }
    }
}

/// In `on_lines`' `firsts`: the pattern has no needle.
const NOT_SEARCHED: u32 = u32::MAX;
/// In `on_lines`' `firsts`, besides the first occurrence's byte: the line has more.
const MORE: u32 = 1 << 31;

/// One rule's `LogEvaluator.evaluate(line)` at `now` (`None`: an idle evaluation); `searched`:
/// what a batch's search found in the line, if it was searched.
fn evaluate_rule(
    rule: &Rule,
    run: &mut RuleRun,
    start: Instant,
    seen: Option<&str>,
    searched: Option<Searched>,
    now: Instant,
) -> Result<(), NotANumber> {
    if !run.active {
        run.state = LogState::Healthy;
        return Ok(());
    }
    // One search per line: the first group's value is taken with the match when a metric needs it
    // (the agent reads it further down; matching has no side effect, so when does not matter).
    let matched = match (seen, searched) {
        (None, _) | (Some(_), Some(Searched { log: Hit::Absent, .. })) => None,
        (Some(l), Some(s)) if rule.metric.is_some() => rule.log_pattern.match_group1_at(l, s.log.at()),
        (Some(l), Some(s)) => rule.log_pattern.is_match_at(l, s.log.at()).then_some(None),
        (Some(l), None) if rule.metric.is_some() => rule.log_pattern.match_group1(l),
        (Some(l), None) => rule.log_pattern.is_match(l).then_some(None),
    };
    let line = seen.filter(|_| matched.is_some());
    if let Some(l) = line {
        match searched {
            // A batch's line: copied when needed.
            Some(s) => run.pending = Some(s.line),
            None => {
                run.last_line.clear();
                run.last_line.push_str(l);
                run.pending = None;
            }
        }
        run.last_match = Some(now);
        if rule.fault_on_match {
            run.state = LogState::Faulted;
            return Ok(());
        }
    }
    let stops = |l: &str, p: &PyRegex| match searched {
        Some(Searched { stop, .. }) => stop.found() && p.is_match_at(l, stop.at()),
        None => p.is_match(l),
    };
    if seen.is_some_and(|l| rule.stop_pattern.as_ref().is_some_and(|p| stops(l, p))) {
        run.active = false;
        run.state = LogState::Healthy;
        return Ok(());
    }
    let since = |t: Instant| now.saturating_duration_since(t);
    // A match is 0 s old, within any timeout: only a line that did not match may time out.
    let timed_out = line.is_none()
        && match (run.last_match, rule.start_cutoff, rule.recurring) {
            (None, Some(cutoff), _) => since(start) > cutoff,
            (Some(m), _, Some(freq)) => since(m) > freq,
            _ => false,
        };
    if timed_out {
        run.state = LogState::Hanging;
        return Ok(());
    }
    let Some(group1) = matched else { return Ok(()) };
    let Some((op, threshold)) = rule.metric else {
        run.state = LogState::Healthy;
        return Ok(());
    };
    let value = group1.and_then(py_float).ok_or(NotANumber)?;
    if op.holds(value, threshold) {
        run.slow_count = (run.slow_count + 1).min(rule.data_points);
    } else {
        run.slow_count = 0;
    }
    run.state = if run.slow_count >= rule.data_points { LogState::Slow } else { LogState::Healthy };
    Ok(())
}

#[cfg(test)]
mod tests;

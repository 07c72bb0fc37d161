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

use super::pynum::py_float;
use super::rule::Rule;
use super::ruleset::RuleSet;
use regex_automata::{PatternID, PatternSet};
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

#[derive(Debug, Clone)]
struct RuleRun {
    active: bool,
    state: LogState,
    /// The last matched line (`last_match` says whether there is one); a buffer reused, so a
    /// match costs no allocation.
    last_line: String,
    last_match: Option<Instant>,
    slow_count: u32,
    /// The metric's values captured so far, and the last (`--straggler-rule`).
    values: u64,
    last_value: f64,
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
    /// The rules that can match the line being evaluated (a buffer reused).
    candidates: PatternSet,
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
                last_match: None,
                slow_count: 0,
                values: 0,
                last_value: 0.0,
            })
            .collect::<Vec<_>>();
        Self {
            candidates: PatternSet::new(runs.len()),
            rules,
            runs,
            start: attempt_start,
            last_eval: attempt_start,
            verdict: Verdict { state: LogState::Waiting, named: Vec::new() },
            settled: true,
            stopped: false,
        }
    }

    /// Evaluate one line of the child's output (with its newline, as the agent reads it; the
    /// last line of a stream that ends without one, without) at `now`; returns the verdict.
    #[must_use]
    pub fn on_line(&mut self, line: &str, now: Instant) -> &Verdict {
        self.evaluate(Some(line), now)
    }

    /// Evaluate the passing of time at `now` with no new line (the agent's idle evaluation);
    /// returns the verdict.
    #[must_use]
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

    /// Rule `index`'s metric: how many values it captured so far, and the last (None before
    /// the first). A straggler rule's points are its values.
    pub fn metric(&self, index: usize) -> Option<(u64, f64)> {
        self.runs.get(index).filter(|r| r.values > 0).map(|r| (r.values, r.last_value))
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

    /// One evaluation of `line` (`None`: idle) at `now` by each rule in order, then the verdict.
    fn evaluate(&mut self, line: Option<&str>, now: Instant) -> &Verdict {
        if self.stopped {
            return &self.verdict;
        }
        self.last_eval = self.last_eval.max(now);
        let rules = self.rules.rules();
        let screened = line.is_some_and(|l| self.rules.screen(l, &mut self.candidates));
        let mut changed = false;
        for (i, (rule, run)) in rules.iter().zip(&mut self.runs).enumerate() {
            let before = run.state;
            let candidate = match screened {
                true => Some(self.candidates.contains(PatternID::new_unchecked(i))),
                false => None,
            };
            let outcome = evaluate_rule(rule, run, self.start, line, candidate, now);
            changed |= run.state != before;
            if outcome.is_err() {
                // The agent's loop catches the exception and goes on to the next line.
                self.settled &= !changed;
                return &self.verdict;
            }
        }
        if self.settled && !changed {
            // The verdict is the rules' states combined, and none changed.
            return &self.verdict;
        }
        self.settled = true;
        let state = self.runs.iter().map(|r| r.state).max().unwrap_or(LogState::Waiting);
        if state == self.verdict.state {
            return &self.verdict;
        }
        if !self.verdict.state.may_become(state) {
            self.stopped = true;
            return &self.verdict;
        }
        let named = self
            .runs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.state == state)
            .map(|(i, r)| (i, r.last_match.map(|_| Arc::from(r.last_line.as_str()))))
            .collect();
        self.verdict = Verdict { state, named };
        &self.verdict
    }
}

/// The captured value was not a number for Python's `float()`.
struct NotANumber;

/// One rule's `LogEvaluator.evaluate(line)` at `now` (`None`: an idle evaluation); `candidate`
/// is what the rule set's screen said of the line (`None`: not screened).
fn evaluate_rule(
    rule: &Rule,
    run: &mut RuleRun,
    start: Instant,
    seen: Option<&str>,
    candidate: Option<bool>,
    now: Instant,
) -> Result<(), NotANumber> {
    if !run.active {
        run.state = LogState::Healthy;
        return Ok(());
    }
    // One search per line: the first group's value is taken with the match when a metric needs it
    // (the agent reads it further down; matching has no side effect, so when does not matter).
    let matched = match (seen, candidate) {
        (None, _) | (_, Some(false)) => None,
        (Some(l), _) if rule.metric.is_some() => rule.log_pattern.match_group1(l),
        (Some(l), Some(true)) => rule.log_pattern.is_match_screened(l).then_some(None),
        (Some(l), None) => rule.log_pattern.is_match(l).then_some(None),
    };
    let line = seen.filter(|_| matched.is_some());
    if let Some(l) = line {
        run.last_line.clear();
        run.last_line.push_str(l);
        run.last_match = Some(now);
        if rule.fault_on_match {
            run.state = LogState::Faulted;
            return Ok(());
        }
    }
    if seen.is_some_and(|l| rule.stop_pattern.as_ref().is_some_and(|p| p.is_match(l))) {
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
    run.values += 1;
    run.last_value = value;
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

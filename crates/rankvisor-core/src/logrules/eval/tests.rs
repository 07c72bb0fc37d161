use super::*;
use crate::logrules::ruleset::rules_from_value;
use serde_json::json;

fn rules(v: serde_json::Value) -> Arc<RuleSet> {
    Arc::new(rules_from_value(&v).unwrap())
}

struct T {
    ev: Evaluator,
    base: Instant,
}

impl T {
    fn new(v: serde_json::Value) -> Self {
        let base = Instant::now();
        Self { ev: Evaluator::new(rules(v), base), base }
    }
    fn at(&self, s: f64) -> Instant {
        self.base + Duration::from_secs_f64(s)
    }
    fn line(&mut self, s: f64, l: &str) -> LogState {
        let now = self.at(s);
        self.ev.on_line(&format!("{l}\n"), now).state
    }
    fn idle(&mut self, s: f64) -> LogState {
        let now = self.at(s);
        self.ev.on_idle(now).state
    }
    fn rule(&self, i: usize) -> LogState {
        self.ev.rule_states().nth(i).unwrap()
    }
}

use LogState::*;

#[test]
fn start_cutoff_is_strict_and_counted_from_the_attempt_start() {
    let mut t = T::new(json!([{"name": "start", "logPattern": ".*ready", "expectedStartCutOffInSeconds": 10}]));
    assert_eq!(t.idle(10.0), Waiting, "exactly 10 s is not more than 10 s");
    assert_eq!(t.ev.next_deadline(), Some(t.at(10.0) + Duration::from_nanos(1)));
    assert_eq!(t.idle(10.001), Hanging);
    assert_eq!(t.ev.reason().as_deref(), Some("LogHang_start"));
    assert_eq!(t.ev.next_deadline(), None, "a start cutoff fires once");
    assert_eq!(t.line(11.0, "now ready"), Healthy, "a late match heals it");
}

#[test]
fn recurring_frequency_counts_only_after_a_first_match() {
    let mut t = T::new(json!([{"name": "beat", "logPattern": "step", "expectedRecurringFrequencyInSeconds": 5}]));
    assert_eq!(t.idle(100.0), Waiting, "no first match: no recurring timeout");
    assert_eq!(t.ev.next_deadline(), None);
    assert_eq!(t.line(100.0, "step 1"), Healthy);
    assert_eq!(t.line(105.0, "other"), Healthy, "5 s is not more than 5 s");
    assert_eq!(t.idle(105.5), Hanging);
    assert_eq!(t.line(106.0, "step 2"), Healthy);
    assert_eq!(t.ev.next_deadline(), Some(t.at(111.0) + Duration::from_nanos(1)));
}

#[test]
fn a_line_not_matching_at_its_start_is_not_a_match() {
    let mut t = T::new(json!([{"name": "r", "logPattern": "step", "faultOnMatch": true}]));
    assert_eq!(t.line(0.0, "a step"), Waiting);
    assert_eq!(t.line(0.0, "step"), Faulted);
}

#[test]
fn threshold_is_truncated_and_consecutive_points_count() {
    let mut t = T::new(json!([{"name": "loss", "logPattern": r".*loss (\S+)", "metricThreshold": 2.9,
        "operator": "gt", "metricEvaluationDataPoints": 2}]));
    assert_eq!(t.line(0.0, "loss 2.5"), Healthy, "2.9 is truncated to 2: one point of two");
    assert_eq!(t.line(0.0, "loss 1.0"), Healthy, "a match not meeting it resets the count");
    assert_eq!(t.line(0.0, "loss 3"), Healthy);
    assert_eq!(t.line(0.0, "noise"), Healthy, "a line that does not match changes nothing");
    assert_eq!(t.line(0.0, "loss 2.1"), Slow);
    assert_eq!(t.ev.reason().as_deref(), Some("LogSlow_loss"));
    assert_eq!(t.line(0.0, "loss 9"), Slow, "the count saturates");
    assert_eq!(t.line(0.0, "loss 1"), Healthy);
}

#[test]
fn operators() {
    for (op, value, slow) in [
        ("gt", "5", false),
        ("gt", "5.01", true),
        ("gteq", "5", true),
        ("lt", "4.99", true),
        ("lt", "5", false),
        ("lteq", "5", true),
        ("eq", "5.0", true),
        ("eq", "nan", false),
        ("gt", "inf", true),
    ] {
        let mut t = T::new(json!([{"name": "m", "logPattern": "v=(.*)", "metricThreshold": 5, "operator": op}]));
        let want = if slow { Slow } else { Healthy };
        assert_eq!(t.line(0.0, &format!("v={value}")), want, "{op} {value}");
    }
}

#[test]
fn stop_pattern_deactivates_the_rule_for_the_attempt() {
    let mut t = T::new(json!([{"name": "r", "logPattern": "step", "expectedRecurringFrequencyInSeconds": 5,
        "stopPattern": "done"}]));
    assert_eq!(t.line(0.0, "step"), Healthy);
    assert_eq!(t.line(1.0, "done"), Healthy);
    assert_eq!(t.ev.next_deadline(), None);
    assert_eq!(t.idle(100.0), Healthy);
    assert_eq!(t.line(101.0, "step"), Healthy);
}

#[test]
fn fault_on_match_is_sticky_and_wins_over_stop() {
    let mut t = T::new(json!([{"name": "oom", "logPattern": ".*out of memory", "faultOnMatch": true,
        "stopPattern": ".*memory"}]));
    assert_eq!(t.line(0.0, "CUDA out of memory"), Faulted, "the fault is decided before the stop pattern");
    assert_eq!(t.line(1.0, "fine"), Faulted);
    assert_eq!(t.idle(50.0), Faulted);
    assert_eq!(t.ev.verdict().named, vec![(0, Some(Arc::from("CUDA out of memory\n")))]);
}

#[test]
fn priority_and_the_first_rule_named() {
    let mut t = T::new(json!([
        {"name": "a", "logPattern": "x", "expectedStartCutOffInSeconds": 1},
        {"name": "b", "logPattern": "y", "expectedStartCutOffInSeconds": 1},
        {"name": "c", "logPattern": "v(\\d)", "metricThreshold": 0, "operator": "gt"},
        {"name": "f", "logPattern": "boom", "faultOnMatch": true}
    ]));
    assert_eq!(t.line(0.0, "v1"), Slow);
    assert_eq!(t.idle(2.0), Hanging);
    assert_eq!(t.ev.reason().as_deref(), Some("LogHang_a"));
    assert_eq!(t.ev.verdict().named.iter().map(|n| n.0).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(t.line(3.0, "x"), Hanging, "b still hangs");
    assert_eq!(t.ev.reason().as_deref(), Some("LogHang_a"), "the names stay while the state does (the agent's)");
    assert_eq!(t.line(4.0, "boom"), Faulted);
    assert_eq!(t.ev.reason().as_deref(), Some("LogFault_f"));
}

#[test]
fn a_value_float_refuses_abandons_the_line_as_the_agent_does() {
    let mut t = T::new(json!([
        {"name": "m", "logPattern": r"v=(\S*)", "metricThreshold": 0, "operator": "gt"},
        {"name": "later", "logPattern": "v=", "faultOnMatch": true}
    ]));
    assert_eq!(t.line(0.0, "v=abc"), Waiting, "float('abc') raises: the line is dropped");
    assert_eq!(t.rule(1), Waiting, "the rules after it never saw it");
    assert_eq!(t.ev.last_line(0), Some("v=abc\n"), "but the match was recorded first");
    assert_eq!(t.line(0.0, "v=1_0"), Faulted, "float('1_0') is 10");
}

#[test]
fn leaving_faulted_stops_the_evaluation_as_the_agent_does() {
    let mut t = T::new(json!([{"name": "f", "logPattern": "boom", "faultOnMatch": true, "stopPattern": "ok"}]));
    assert_eq!(t.line(0.0, "boom"), Faulted);
    assert_eq!(t.line(1.0, "ok"), Faulted, "the rule is HEALTHY, the verdict cannot leave FAULTED");
    assert!(t.ev.stopped());
    assert_eq!(t.rule(0), Healthy);
    assert_eq!(t.line(2.0, "boom"), Faulted);
    assert_eq!(t.rule(0), Healthy, "nothing is evaluated any more");
}

#[test]
fn a_line_not_utf8_is_matched_with_replacement_characters() {
    let mut t = T::new(json!([{"name": "err", "logPattern": ".*ERROR", "faultOnMatch": true}]));
    let line = String::from_utf8_lossy(b"bad \xff ERROR\n");
    assert_eq!(t.ev.on_line(&line, t.base).state, Faulted);
    assert_eq!(t.ev.last_line(0), Some("bad \u{FFFD} ERROR\n"));
}

#[test]
fn the_line_after_an_abandoned_one_takes_the_verdict() {
    let mut t = T::new(json!([
        {"name": "beat", "logPattern": ".*step", "expectedRecurringFrequencyInSeconds": 3},
        {"name": "loss", "logPattern": r".*loss: (\S+)", "metricThreshold": 2, "operator": "gt", "metricEvaluationDataPoints": 2},
    ]));
    // On the second line "step" heals `beat`, then `loss` captures "x" and abandons the line
    // before the verdict; the third matches nothing but takes the verdict.
    let seen: Vec<LogState> =
        ["noise\n", "step loss: x\n", "noise\n"].iter().map(|l| t.ev.on_line(l, t.at(1.0)).state).collect();
    assert_eq!(seen, [Waiting, Waiting, Healthy]);
}

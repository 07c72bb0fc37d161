use super::*;
use crate::logrules::lines::LineBatch;
use crate::logrules::rule::rules_from_value;
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

/// Rules of every kind for the batch differential: with and without text to search for (one up
/// to case), a stop pattern, metrics whose capture may not be a number, both timeouts.
fn batch_rules() -> serde_json::Value {
    json!([
        {"name": "start", "logPattern": ".*ready", "expectedStartCutOffInSeconds": 5},
        {"name": "beat", "logPattern": ".*step", "expectedRecurringFrequencyInSeconds": 3},
        {"name": "nan", "logPattern": "(?i).*loss[=: ]+nan", "faultOnMatch": true},
        {"name": "any", "logPattern": r".*(\d)x", "metricThreshold": 5, "operator": "lt", "metricEvaluationDataPoints": 3},
        {"name": "err", "logPattern": "ERROR", "faultOnMatch": true, "stopPattern": ".*done"},
        {"name": "stop", "logPattern": ".*tick", "expectedRecurringFrequencyInSeconds": 2, "stopPattern": "(a|b)end"},
        {"name": "tp", "logPattern": r".*rate (\d+(?:\.\d+)?)", "metricThreshold": 3, "operator": "lteq", "metricEvaluationDataPoints": 2},
        // Last: a line it abandons may have changed the other rules' states.
        {"name": "loss", "logPattern": r".*loss: (\S+)", "metricThreshold": 2, "operator": "gt", "metricEvaluationDataPoints": 2},
    ])
}

const BATCH_PIECES: &[&str] = &[
    "ready ",
    "step ",
    "loss: 1 ",
    "loss: 3 ",
    "loss: x ",
    "LOSS=NaN ",
    "3x ",
    "7x ",
    "ERROR ",
    "done ",
    "tick ",
    "aend",
    "bend",
    "rate 2.5 ",
    "rate 4 ",
    "é ",
    "noise ",
    "loss ",
    "rate . ",
];

/// What an evaluator shows: the verdict, each rule's state and last line, the next deadline.
fn observed(ev: &Evaluator) -> (Verdict, Vec<LogState>, Vec<Option<String>>, Option<Instant>, bool) {
    (
        ev.verdict().clone(),
        ev.rule_states().collect(),
        (0..ev.rules().len()).map(|i| ev.last_line(i).map(str::to_string)).collect(),
        ev.next_deadline(),
        ev.stopped(),
    )
}

proptest::proptest! {
    /// `on_lines` is `on_line` on each of its lines at its time: the same verdicts, in the same
    /// order, and the same state after each read.
    #[test]
    fn a_batch_is_its_lines_one_by_one(
        reads in proptest::collection::vec(
            (0u64..3000, proptest::collection::vec(proptest::collection::vec(0..BATCH_PIECES.len(), 0..4), 0..10)),
            1..10,
        ),
        searchable_only: bool,
    ) {
        let base = Instant::now();
        // Without the rules whose patterns have no text to search for, lines that no rule may
        // match are skipped.
        let mut all = batch_rules();
        if searchable_only {
            all.as_array_mut().unwrap().retain(|r| r["name"] != "any" && r["name"] != "stop");
        }
        let set = rules(all);
        let mut one = Evaluator::new(set.clone(), base);
        let mut batched = Evaluator::new(set, base);
        let mut at = 0;
        let mut batch = LineBatch::default();
        for (step, lines) in reads {
            at += step;
            let now = base + Duration::from_millis(at);
            let lines: Vec<String> =
                lines.iter().map(|l| l.iter().map(|&p| BATCH_PIECES[p]).collect::<String>() + "\n").collect();
            let mut expected = Vec::new();
            for l in &lines {
                let before = one.verdict().state;
                if one.on_line(l, now).state != before {
                    expected.push(one.verdict().clone());
                }
            }
            batch.clear();
            lines.iter().for_each(|l| batch.push(l.as_bytes()));
            batch.seal();
            let mut seen = Vec::new();
            batched.on_lines(&batch, now, &mut |ev| seen.push(ev.verdict().clone()));
            proptest::prop_assert_eq!(seen, expected);
            proptest::prop_assert_eq!(observed(&batched), observed(&one));
            if step % 7 == 0 {
                one.on_idle(now);
                batched.on_idle(now);
            }
        }
    }
}

#[test]
fn a_batch_of_lines_not_utf8_is_matched_with_replacement_characters() {
    let mut batch = LineBatch::default();
    batch.push(b"ok\n");
    batch.push(b"bad \xff ERROR\n");
    batch.seal();
    assert_eq!(batch.lines().collect::<Vec<_>>(), ["ok\n", "bad \u{FFFD} ERROR\n"]);
    let mut t = T::new(json!([{"name": "err", "logPattern": ".*ERROR", "faultOnMatch": true}]));
    t.ev.on_lines(&batch, t.base, &mut |_| {});
    assert_eq!(t.ev.verdict().state, Faulted);
    assert_eq!(t.ev.last_line(0), Some("bad \u{FFFD} ERROR\n"));
}

#[test]
fn in_a_batch_the_line_after_an_abandoned_one_takes_the_verdict() {
    // Every rule has text to search for: a line without it is skipped unless it must take the
    // verdict.
    let mut t = T::new(json!([
        {"name": "beat", "logPattern": ".*step", "expectedRecurringFrequencyInSeconds": 3},
        {"name": "loss", "logPattern": r".*loss: (\S+)", "metricThreshold": 2, "operator": "gt", "metricEvaluationDataPoints": 2},
    ]));
    let mut batch = LineBatch::default();
    // Every rule sees the first line; on the second, "step" heals `beat`, then `loss` captures
    // "x" and abandons the line before the verdict; the third matches nothing but takes the
    // verdict, as `on_line` would.
    for l in ["noise\n", "step loss: x\n", "noise\n"] {
        batch.push(l.as_bytes());
    }
    batch.seal();
    let mut seen = Vec::new();
    t.ev.on_lines(&batch, t.at(1.0), &mut |ev| seen.push(ev.verdict().state));
    assert_eq!(seen, [Healthy]);
    assert_eq!(t.ev.verdict().state, Healthy);
}

#[test]
fn the_line_of_a_position_is_found_from_an_earlier_line() {
    let ends: Vec<usize> = (1..=40).map(|i| i * 3).collect();
    for pos in 0..125 {
        let expected = ends.partition_point(|&e| e <= pos);
        for from in 0..=expected {
            assert_eq!(line_from(&ends, from, pos), expected, "pos {pos} from {from}");
        }
    }
}

#[test]
fn the_rules_a_batch_line_is_shown_are_its_marked_ones_once_each_in_order() {
    // Two bits a rule (log pattern, stop pattern), 64 a word.
    let marked = |m: &[u64]| {
        let mut out = vec![7];
        marked_rules(m, &mut out);
        out
    };
    assert_eq!(marked(&[0b1011, 1 << 63 | 1]), [0, 1, 32, 63]);
    assert_eq!(marked(&[0, 0b1100]), [33]);
    assert!(marked(&[0]).is_empty());
}

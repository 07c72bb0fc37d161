use super::*;
use crate::logrules::pyre::LAZY_DFA_CACHE;
use regex_automata::PatternSet;
use serde_json::json;

/// `n` rules named `r0`..`r{n-1}` with `pattern`.
fn rules(n: usize, pattern: &str) -> Value {
    Value::Array((0..n).map(|i| json!({"name": format!("r{i}"), "logPattern": pattern})).collect())
}

#[test]
fn more_rules_than_the_limit_are_refused_before_any_is_compiled() {
    assert_eq!(rules_from_value(&rules(MAX_RULES, ".*step")).unwrap().rules().len(), MAX_RULES);
    let e = rules_from_value(&rules(MAX_RULES + 1, ".*step")).unwrap_err().to_string();
    assert!(e.contains("101 rules: more than 100"), "{e}");
    // 9,000 rules, each of which would be refused: the count is what is reported.
    let e = rules_from_value(&rules(9_000, "(?<=x)y")).unwrap_err().to_string();
    assert!(e.contains("9000 rules: more than 100"), "{e}");
}

#[test]
fn patterns_whose_automata_exceed_the_budget_are_refused_naming_it() {
    // A pattern over the limit of one pattern (60 of them took 417 MB of RSS once evaluated).
    let e = rules_from_value(&rules(1, r".*\w{60}x")).unwrap_err().to_string();
    assert!(e.contains("too large: its automaton would take more than 1048576 bytes, the limit of one pattern"), "{e}");
    // One within the bytes but over the states.
    let e = rules_from_value(&rules(1, r".*\w{10}x")).unwrap_err().to_string();
    assert!(e.contains("too complex: its automaton has"), "{e}");
    // One pattern of about 0.8 MB (caches counted) fits; a hundred do not.
    assert!(rules_from_value(&rules(1, r".*\w{5}x")).is_ok());
    let e = rules_from_value(&rules(MAX_RULES, r".*\w{5}x")).unwrap_err().to_string();
    assert!(e.contains("more than 64 MiB, the limit of one configuration"), "{e}");
    assert!(e.contains("field logPattern"), "{e}");
}

#[test]
fn the_budget_counts_what_the_automata_hold() {
    let mut budget = Budget::new();
    let re = budget.compile(".*Train Epoch").unwrap();
    assert_eq!(re.automata(), 2, "a .*Q pattern is two automata");
    assert_eq!(MAX_COMPILED - budget.left, re.memory_usage() + 2 * 2 * LAZY_DFA_CACHE);
    // Too little left for even the caches: refused before compiling.
    budget.left = LAZY_DFA_CACHE;
    assert!(budget.compile("x").unwrap_err().contains("64 MiB"));
}

#[test]
fn a_document_over_1_mib_is_refused() {
    let big = format!("[{}]", " ".repeat(MAX_RULES_BYTES as usize));
    let e = parse_rules(&big).unwrap_err().to_string();
    assert!(e.contains("larger than 1 MiB"), "{e}");
}

#[test]
fn duplicate_names_are_found_among_many_rules() {
    let mut v = rules(MAX_RULES - 1, ".*step");
    v.as_array_mut().unwrap().push(json!({"name": "r7", "logPattern": "x"}));
    let e = rules_from_value(&v).unwrap_err().to_string();
    assert!(e.contains(r#"log rule #100 ("r7"): field name: another rule has this name"#), "{e}");
}

#[test]
fn a_rules_file_is_a_bounded_regular_file() {
    let dir = std::env::temp_dir().join(format!("rankvisor-ruleset-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("rules.json");
    std::fs::write(&good, r#"[{"name": "a", "logPattern": ".*step"}]"#).unwrap();
    assert_eq!(read_rules_file(&good).unwrap().rules().len(), 1);
    let big = dir.join("big.json");
    std::fs::write(&big, vec![b' '; MAX_RULES_BYTES as usize + 1]).unwrap();
    let e = read_rules_file(&big).unwrap_err().to_string();
    assert!(e.contains("big.json: larger than 1 MiB"), "{e}");
    // A FIFO with no writer: refused at once (a blocking open would wait for a writer forever).
    let fifo = dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let e = read_rules_file(&fifo).unwrap_err().to_string();
    assert!(e.contains("fifo: cannot read it: a FIFO (named pipe), expected a regular file"), "{e}");
    // An endless device: refused, not read until memory runs out.
    let e = read_rules_file(Path::new("/dev/zero")).unwrap_err().to_string();
    assert!(e.contains("/dev/zero: cannot read it: a character device"), "{e}");
    let e = read_rules_file(&dir).unwrap_err().to_string();
    assert!(e.contains("a directory"), "{e}");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, b"[\xff]").unwrap();
    assert!(read_rules_file(&bad).unwrap_err().to_string().contains("bad.json: not UTF-8 text"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_huge_integer_is_out_of_range_not_a_non_integer() {
    for threshold in [json!(1e30), json!(u64::MAX), json!("123456789012345678901234567890")] {
        let v = json!([{"name": "m", "logPattern": "x (\\d+)", "metricThreshold": threshold, "operator": "gt"}]);
        let e = rules_from_value(&v).unwrap_err().to_string();
        assert!(e.contains("is out of range: expected -9007199254740992 to 9007199254740992"), "{threshold}: {e}");
    }
    let v = json!([{"name": "m", "logPattern": "x (\\d+)", "metricThreshold": "ten", "operator": "gt"}]);
    assert!(rules_from_value(&v).unwrap_err().to_string().contains("expected an integer"));
}

#[test]
fn a_pattern_is_quoted_once_in_errors() {
    let v = json!([{"name": "b", "logPattern": r"(?<=\d)x"}]);
    let e = rules_from_value(&v).unwrap_err().to_string();
    assert!(e.contains(r#"field logPattern: "(?<=\d)x": lookbehind"#), "{e}");
    let v = json!([{"name": "b", "logPattern": r"\d*"}]);
    let e = rules_from_value(&v).unwrap_err().to_string();
    assert!(e.contains(r#""\d*" matches an empty line"#), "{e}");
    // What would break a line is still escaped.
    let v = json!([{"name": "b", "logPattern": "a\u{1b}[2J(?<=x)"}]);
    let e = rules_from_value(&v).unwrap_err().to_string();
    assert!(e.contains(r#""a\u{1b}[2J(?<=x)""#), "{e}");
}

#[test]
fn the_screen_names_exactly_the_rules_that_can_match_a_line() {
    let mut v: Value = serde_json::from_str(include_str!("../../../../../scripts/bench/log-rules-10.json")).unwrap();
    // Beside the benchmark's rules: DOTALL, a lazy `.*?` with a group, an anchored pattern with
    // `$`, a pattern that is not `.*Q`.
    for (name, pattern) in
        [("dotall", "(?s).*finished"), ("lazy", ".*?step (\\d+)"), ("end", "done$"), ("alt", "(?:a|.*b)c")]
    {
        v.as_array_mut().unwrap().push(json!({"name": name, "logPattern": pattern}));
    }
    let set = rules_from_value(&v).unwrap();
    let lines = [
        "[default0] Train Epoch: 1 [640/60000 (1%)] training_loss_step 1.9001 'samples/sec': 812.5\n",
        "[default0]:2025-06-17 05:51:29,301 [INFO] data: fetched shard 1 from s3://bucket/x.tar\n",
        "perf: step 7 speed: 102 TFLOPs, mem 61.2 GiB\n",
        "RuntimeError: CUDA out of memory\n",
        "Traceback (most recent call last)\n",
        "LOSS = NaN\n",
        "done\n",
        "xbc\n",
        "ac",
        "",
        // Q after a newline inside the text: the screen names the rule, the rule does not match
        // (`.` stops at the newline), except with DOTALL.
        "first\nTrain Epoch 2 step 3 finished\n",
    ];
    let mut candidates = PatternSet::new(set.rules().len());
    let mut named_any = false;
    for line in lines {
        assert!(set.screen(line, &mut candidates), "the rules fit the budget: there is a screen");
        let mut left_out = 0;
        for (i, rule) in set.rules().iter().enumerate() {
            let p = &rule.log_pattern;
            let screened = candidates.contains(regex_automata::PatternID::must(i));
            if p.is_match(line) {
                assert!(screened, "{:?} matches {line:?} but the screen left it out", p.source());
            }
            if screened {
                assert_eq!(p.is_match_screened(line), p.is_match(line), "{:?} on {line:?}", p.source());
                named_any = true;
            } else {
                left_out += 1;
            }
            if !line.trim_end_matches('\n').contains('\n') {
                assert_eq!(screened, p.is_match(line), "{:?} on the line {line:?}", p.source());
            }
        }
        assert!(left_out > 0, "every rule named for {line:?}");
    }
    assert!(named_any);
    let rule = |name: &str| set.rules().iter().position(|r| r.name == name).unwrap();
    set.screen(lines[10], &mut candidates);
    for name in ["JobHang", "lazy", "dotall"] {
        assert!(candidates.contains(regex_automata::PatternID::must(rule(name))), "{name}");
    }
    assert!(!set.rules()[rule("JobHang")].log_pattern.is_match(lines[10]));
    assert!(set.rules()[rule("dotall")].log_pattern.is_match(lines[10]));
}

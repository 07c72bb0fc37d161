//! rankvisor's log rules against the real HyperPod elastic agent (hyperpod-elastic-agent 1.1.3,
//! its `logagent/log_agent.py` run by python3 with a mocked clock; scripts/setup-hyperpod.sh
//! installs it): generated rules and timed logs, covering every corner of the agent's semantics,
//! replayed through `rankvisor log-rules test --timestamps --json` and through the agent's own
//! monitor loop (tests/hyperpod/replay_log_agent.py) on the same schedule; every evaluation must
//! give the same per-rule states, verdict, named rules and lines. Also the regex classes: Python's
//! `\w`, `\d`, `\s` against their translation, over every assigned character.

use crate::common;

use common::{rankvisor, repo_file, TestDir};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;

/// Where the agent's source is: `RANKVISOR_TEST_HYPERPOD_AGENT` (scripts/test.sh sets it from
/// scripts/setup-hyperpod.sh), else that script's cache directory. Fails loudly when absent.
fn agent_src() -> PathBuf {
    let dir = std::env::var_os("RANKVISOR_TEST_HYPERPOD_AGENT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/rankvisor/hyperpod-elastic-agent-1.1.3/src"));
    let file = dir.join("hyperpod_elastic_agent/logagent/log_agent.py");
    assert!(
        file.is_file(),
        "the HyperPod agent's log_agent.py is not at {}: run `bash scripts/setup-hyperpod.sh` (scripts/test.sh does) \
         or set RANKVISOR_TEST_HYPERPOD_AGENT to the unpacked package's src/",
        file.display()
    );
    dir
}

/// splitmix64: a seeded, reproducible stream.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Patterns for lines (none matches an empty line; several only in the middle of a line, to check
/// the anchoring; `$`, `\s` and `\w` see the newline and Unicode as Python does).
const PATTERNS: &[&str] = &[
    "step",
    ".*step",
    r"step (\d+)",
    r"\s+step",
    r".*Train Epoch.*",
    r".*loss: (\S+)",
    r".*loss: (\S*)",
    r".*loss: (\d+(?:\.\d+)?)",
    r".* (.+)TFLOPs.*",
    r".*out of memory",
    "(?i).*error",
    "training done$",
    r".*done\s",
    r".*saved\Z",
    r".*(\w+)$",
    "[^ ]+ step",
    r"(?P<v>\d+) items",
    r".*é²",
    // `.*Q` shapes (src/logrules/pyre.rs): several starts of Q (greedy and
    // lazy pick different ones), a trailing `.*`, DOTALL, case-insensitive, a rest without a literal.
    r".*: (\S+).*",
    r".*?: (\S+)",
    r".*step.*",
    "(?s).*step (\\d+)",
    r"(?i).*LOSS: (\S+)",
    r".*(\d+) items",
];
const METRIC_PATTERNS: &[&str] = &[
    r"step (\d+)",
    r".*loss: (\S+)",
    r".*loss: (\S*)",
    r".*loss: (\d+(?:\.\d+)?)",
    r".* (.+)TFLOPs.*",
    r"(?P<v>\d+) items",
    r".*: (\S+).*",
    r".*?: (\S+)",
    r"(?i).*LOSS: (\S+)",
    r".* (\d+).*",
];
const STOP_PATTERNS: &[&str] = &["training done", r".*saved", r"step 5\b", "(?i).*ERROR"];
const VALUES: &[&str] =
    &["0.5", "2", "2.0", "2.9", "3", "3.7", "10", "1_0", "nan", "inf", "-1", "abc", "", "٣", "1e1", "+5"];
const OPERATORS: &[&str] = &["gt", "gteq", "lt", "lteq", "eq"];

fn gen_rule(r: &mut Rng, k: usize) -> Value {
    let mut rule = serde_json::Map::new();
    rule.insert("name".into(), json!(if k == 1 && r.chance(30) { "GPU Error".to_string() } else { format!("r{k}") }));
    let metric = r.chance(40);
    let pattern = if metric { *r.pick(METRIC_PATTERNS) } else { *r.pick(PATTERNS) };
    rule.insert("logPattern".into(), json!(pattern));
    if r.chance(40) {
        rule.insert("expectedStartCutOffInSeconds".into(), json!(r.below(7)));
    }
    if r.chance(50) {
        let f = 1 + r.below(5);
        rule.insert(
            "expectedRecurringFrequencyInSeconds".into(),
            if r.chance(20) { json!(f.to_string()) } else { json!(f) },
        );
    }
    if metric {
        let t = r.pick(&[json!(2), json!(2.9), json!(-1), json!(3), json!("3"), json!(0), json!(10)]).clone();
        rule.insert("metricThreshold".into(), t);
        rule.insert("operator".into(), json!(r.pick(OPERATORS)));
        if r.chance(60) {
            rule.insert("metricEvaluationDataPoints".into(), json!(1 + r.below(3)));
        }
    }
    if r.chance(25) {
        rule.insert("stopPattern".into(), json!(r.pick(STOP_PATTERNS)));
    }
    if r.chance(20) {
        rule.insert("faultOnMatch".into(), json!(r.chance(80)));
    }
    Value::Object(rule)
}

fn gen_text(r: &mut Rng, n: usize) -> String {
    let v = *r.pick(VALUES);
    match r.below(16) {
        0 => format!("step {n}"),
        1 => format!("  step {n}"),
        2 => format!("epoch 1 step {n} loss: {v}"),
        3 => format!("[default0]: Train Epoch: 1 [{n}/600] loss: {v}"),
        4 => format!("Training model, speed: {v} TFLOPs..."),
        5 => "RuntimeError: CUDA out of memory".into(),
        6 => "an Error happened".into(),
        7 => "training done".into(),
        8 => "checkpoint saved".into(),
        9 => format!("{v} items"),
        10 => String::new(),
        11 => "x step 5".into(),
        12 => format!("unicode é² {n}"),
        13 => "step 5".into(),
        _ => format!("noise {n} {v}"),
    }
}

/// One second is 64 steps: every time is exact both in integer nanoseconds and in the agent's
/// float seconds.
const STEP_NS: u64 = 15_625_000;

fn timestamp(ns: u64) -> String {
    // 2026-01-01T00:00:00Z + ns
    let (s, frac) = (ns / 1_000_000_000, ns % 1_000_000_000);
    let (h, m, sec) = (s / 3600, (s / 60) % 60, s % 60);
    assert!(h < 24, "cases stay within a day");
    format!("2026-01-01T{h:02}:{m:02}:{sec:02}.{frac:09}Z")
}

fn gen_log(r: &mut Rng) -> String {
    let lines = 5 + r.below(26);
    let mut at: u64 = 0;
    let mut log = String::new();
    for n in 0..lines {
        if n > 0 {
            // Whole seconds hit the timeouts' boundaries exactly (> is strict), 1/64 s just after.
            let gap_steps = *r.pick(&[0, 1, 32, 64, 128, 192, 193, 256, 320, 321, 448, 64 * 8]);
            at += gap_steps * STEP_NS;
        }
        let end = *r.pick(&["\n", "\n", "\n", "\r\n", "\r"]);
        log.push_str(&format!("{} {}{end}", timestamp(at), gen_text(r, n)));
    }
    if r.chance(20) {
        // A last line without a newline.
        log.push_str(&format!("{} step {lines}", timestamp(at + 64 * STEP_NS)));
    }
    log
}

#[test]
fn generated_cases_agree_with_the_agent_on_every_evaluation() {
    let src = agent_src();
    let dir = TestDir::new("log-rules-agent");
    let mut rng = Rng(0x5EED_1065);
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    const CASES: usize = 600;
    for id in 0..CASES {
        let rules: Vec<Value> = (0..1 + rng.below(4)).map(|k| gen_rule(&mut rng, k)).collect();
        let log = gen_log(&mut rng);
        let rules_path = dir.write(&format!("rules-{id}.json"), &Value::Array(rules.clone()).to_string());
        let log_path = dir.write(&format!("log-{id}.txt"), &log);
        let out = rankvisor()
            .args(["log-rules", "test"])
            .arg(&rules_path)
            .arg(&log_path)
            .args(["--timestamps", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "case {id}: log-rules test failed ({}): {}\nrules: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            Value::Array(rules.clone())
        );
        let records: Vec<Value> =
            String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let schedule: Vec<Value> = records.iter().map(|r| json!({"line": r["line"], "at_ns": r["at_ns"]})).collect();
        cases.push(json!({"id": id, "rules": rules, "log": log_path, "timestamps": true, "schedule": schedule}));
        ours.push((rules, log, records));
    }
    let batch = dir.write("batch.json", &json!({ "cases": cases }).to_string());
    let out = Command::new("python3")
        .arg(repo_file("tests/hyperpod/replay_log_agent.py"))
        .arg(&src)
        .arg(&batch)
        .output()
        .expect("python3");
    assert!(out.status.success(), "the agent's replay failed: {}", String::from_utf8_lossy(&out.stderr));
    let theirs: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(theirs.len(), CASES, "one result per case");
    let mut mismatches = Vec::new();
    let (mut evaluations, mut idle, mut fired, mut stopped) = (0, 0, 0, 0);
    for (id, ((rules, log, records), agent)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(agent["error"], Value::Null, "case {id}: {}", agent["error"]);
        let theirs = agent["records"].as_array().unwrap();
        assert_eq!(records.len(), theirs.len(), "case {id}: as many evaluations");
        for (k, (a, b)) in records.iter().zip(theirs).enumerate() {
            evaluations += 1;
            idle += usize::from(a["line"].is_null());
            let named_ours: Vec<Value> =
                a["named"].as_array().unwrap().iter().map(|n| json!([n["rule"], n["line"]])).collect();
            let same = a["state"] == b["state"]
                && a["rules"] == b["rules"]
                && Value::Array(named_ours) == b["named"]
                && a["stopped"] == b["stopped"];
            if !same {
                mismatches.push(format!(
                    "case {id}, evaluation {k} (line {}, at {} ns):\n  rankvisor: {a}\n  agent:     {b}\n  rules: {}\n  log: {log:?}",
                    a["line"],
                    a["at_ns"],
                    Value::Array(rules.clone())
                ));
            }
        }
        if let Some(last) = records.last() {
            fired += usize::from(last["state"] != "WAITING" && last["state"] != "HEALTHY");
            stopped += usize::from(last["stopped"] == true);
        }
    }
    eprintln!("{CASES} cases, {evaluations} evaluations ({idle} idle), {fired} ending SLOW/HANGING/FAULTED, {stopped} where the agent's loop stopped");
    assert!(
        mismatches.is_empty(),
        "{} evaluations differ; the first:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(5)].join("\n")
    );
    // The generator reached the corners, or this test proves less than it says.
    assert!(idle > 500 && fired > 100 && stopped > 0, "idle {idle}, fired {fired}, stopped {stopped}");
}

#[test]
fn word_digit_and_space_classes_are_pythons_on_every_assigned_character() {
    let src = agent_src(); // the same set-up step provides python3 for this check
    let _ = src;
    let script = r#"
import re, sys, unicodedata
for name, p in (("w", r"\w"), ("d", r"\d"), ("s", r"\s"), ("W", r"\W"), ("b", r"a\b")):
    rx = re.compile(p)
    chars = []
    for cp in range(0x30000):
        c = chr(cp)
        if unicodedata.category(c) in ("Cn", "Cs"):
            continue
        text = "a" + c if name == "b" else c
        if rx.match(text):
            chars.append(cp)
    print(name, unicodedata.unidata_version, ",".join(map(str, chars)))
"#;
    let out = Command::new("python3").args(["-c", script]).output().expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let assigned = Command::new("python3")
        .args(["-c", "import unicodedata\nprint(','.join(str(c) for c in range(0x30000) if unicodedata.category(chr(c)) not in ('Cn','Cs')))"])
        .output()
        .unwrap();
    let assigned: Vec<u32> =
        String::from_utf8(assigned.stdout).unwrap().trim().split(',').map(|s| s.parse().unwrap()).collect();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let mut parts = line.splitn(3, ' ');
        let (name, version, list) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap_or(""));
        let python: std::collections::HashSet<u32> =
            list.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect();
        let pattern = match name {
            "b" => r"a\b",
            n => &format!("\\{n}"),
        };
        let re = rankvisor_core::logrules::PyRegex::new(pattern).unwrap();
        let differ: Vec<String> = assigned
            .iter()
            .filter_map(|&cp| {
                let c = char::from_u32(cp)?;
                let text = if name == "b" { format!("a{c}") } else { c.to_string() };
                (re.is_match(&text) != python.contains(&cp)).then(|| format!("U+{cp:04X}"))
            })
            .collect();
        // \b is the crate's Unicode word boundary: docs/log-rules.md names where it differs.
        if name == "b" {
            eprintln!(
                "\\b differs from Python {version} on {} characters, e.g. {:?}",
                differ.len(),
                &differ[..differ.len().min(8)]
            );
            continue;
        }
        assert!(
            differ.is_empty(),
            "\\{name} differs from Python (Unicode {version}) on {} characters: {:?}",
            differ.len(),
            &differ[..differ.len().min(20)]
        );
    }
}

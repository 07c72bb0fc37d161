//! The rules of a job, read, validated and bounded: one entry for every source (a rules file at
//! PID 1 or in `log-rules test`, the agent API's `log_monitoring_configuration`), so the same
//! limits hold everywhere.
//!
//! The limits bound what a configuration costs before it is compiled: at most [`MAX_RULES`]
//! rules, a file of at most [`MAX_RULES_BYTES`], and compiled patterns within [`MAX_COMPILED`]
//! (each automaton's own heap as the engine counts it, plus its lazy DFA's cache at its bound:
//! a pattern whose automaton explodes is refused here rather than growing the process).

use super::budget::Budget;
pub use super::budget::MAX_COMPILED;
use super::rule::{rule_from_value, Rule, RulesError};
use crate::untrusted::escape;
use crate::untrusted::files::FileError;
use regex_automata::{meta, Input, PatternSet};
use serde_json::Value;
use std::collections::HashSet;
use std::path::Path;

/// The most rules one configuration may have.
pub const MAX_RULES: usize = 100;
/// The largest rules file read (1 MiB).
pub const MAX_RULES_BYTES: u64 = 1 << 20;

/// The validated rules, in configuration order.
#[derive(Debug, Clone)]
pub struct RuleSet {
    rules: Vec<Rule>,
    /// One automaton over every rule's `logPattern` screen (pattern `i` is rule `i`'s): one pass
    /// over a line names the rules that can match it, so the others are not asked. `None` when
    /// it did not fit the compile budget.
    screen: Option<meta::Regex>,
}

impl RuleSet {
    /// The rules, in configuration order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Into `candidates`, the rules whose `logPattern` can match `line` (every other rule's
    /// cannot); `false` when there is no screen and every rule is a candidate.
    pub fn screen(&self, line: &str, candidates: &mut PatternSet) -> bool {
        candidates.clear();
        let Some(screen) = &self.screen else { return false };
        screen.which_overlapping_matches(&Input::new(line), candidates);
        true
    }
}

/// Read the rules from a file's text: JSON when it starts with `[` or `{`, else the YAML subset.
pub fn parse_rules(text: &str) -> Result<RuleSet, RulesError> {
    if text.len() as u64 > MAX_RULES_BYTES {
        return Err(RulesError::Shape(format!(
            "{} bytes: larger than 1 MiB ({MAX_RULES_BYTES} bytes), the limit of a rules document",
            text.len()
        )));
    }
    let t = text.trim_start_matches('\u{FEFF}');
    let first = t.chars().find(|c| !c.is_whitespace());
    let value = if matches!(first, Some('[') | Some('{')) {
        serde_json::from_str(t).map_err(|e| RulesError::Syntax(format!("invalid JSON: {e}")))?
    } else {
        super::yaml::parse(t).map_err(RulesError::Syntax)?
    };
    rules_from_value(&value)
}

/// Read the rules from a parsed document: a list of rules, or an object whose
/// `logMonitoringConfiguration` is that list (as in a job's `runPolicy`). `/start`'s
/// `log_monitoring_configuration` is read with this too: the same errors (there a 422).
pub fn rules_from_value(value: &Value) -> Result<RuleSet, RulesError> {
    let list = match value {
        Value::Array(a) => a,
        Value::Object(o) => match o.get("logMonitoringConfiguration") {
            Some(Value::Array(a)) => a,
            _ => {
                return Err(RulesError::Shape(
                    "expected a list of rules, or an object whose logMonitoringConfiguration is that list".into(),
                ))
            }
        },
        _ => return Err(RulesError::Shape("expected a list of rules".into())),
    };
    if list.len() > MAX_RULES {
        return Err(RulesError::Shape(format!(
            "{} rules: more than {MAX_RULES}, the limit of one configuration",
            list.len()
        )));
    }
    let mut budget = Budget::new();
    let mut rules: Vec<Rule> = Vec::with_capacity(list.len());
    let mut names = HashSet::with_capacity(list.len());
    for (k, v) in list.iter().enumerate() {
        let rule = rule_from_value(k + 1, v, &mut budget)?;
        if !names.insert(rule.name.clone()) {
            return Err(RulesError::Field {
                index: k + 1,
                name: format!("\"{}\"", escape(&rule.name)),
                field: "name".into(),
                problem: "another rule has this name: names must be unique".into(),
            });
        }
        rules.push(rule);
    }
    let screens: Vec<_> = rules.iter().map(|r| r.log_pattern.screen()).collect();
    let screen = budget.screen(&screens);
    Ok(RuleSet { rules, screen })
}

/// Read and check the rules file at `path`: a regular file (opened without blocking, so a FIFO or
/// a device is refused rather than waited on), at most [`MAX_RULES_BYTES`], UTF-8. The error
/// names the file.
pub fn read_rules_file(path: &Path) -> Result<RuleSet, RulesError> {
    let shown = escape(&path.to_string_lossy()).into_owned();
    let bytes = crate::untrusted::files::read_head(path, MAX_RULES_BYTES + 1).map_err(|e| {
        let problem = match e {
            FileError::NotRegular { kind, .. } => format!("cannot read it: {kind}, expected a regular file"),
            FileError::Io { source, .. } => format!("cannot read it: {source}"),
        };
        RulesError::File(problem, shown.clone())
    })?;
    if bytes.len() as u64 > MAX_RULES_BYTES {
        return Err(RulesError::File(format!("larger than 1 MiB ({MAX_RULES_BYTES} bytes)"), shown));
    }
    let text = String::from_utf8(bytes).map_err(|_| RulesError::File("not UTF-8 text".into(), shown.clone()))?;
    parse_rules(&text)
}

#[cfg(test)]
mod tests;

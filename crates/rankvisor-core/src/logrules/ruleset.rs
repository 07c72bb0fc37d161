//! The rules of a job, compiled once: the rules themselves and one `RegexSet` of all their
//! patterns, so that a line is scanned once for every rule (each rule's own regex runs only to
//! take the value of a matching line's first group).

use super::rule::{Rule, RulesError};
use regex::RegexSet;

/// The validated rules, in configuration order, with their patterns compiled together.
#[derive(Debug, Clone)]
pub struct RuleSet {
    rules: Vec<Rule>,
    /// Every `logPattern` (index = rule), then every `stopPattern`.
    set: RegexSet,
    /// The set index of each rule's `stopPattern`.
    stops: Vec<Option<usize>>,
}

/// Which patterns matched one line (indices as in [`RuleSet`]).
#[derive(Debug)]
pub struct Scan(regex::SetMatches);

impl Scan {
    /// Whether rule `i`'s `logPattern` matched.
    pub fn log_match(&self, i: usize) -> bool {
        self.0.matched(i)
    }
}

impl RuleSet {
    /// Compile `rules` together.
    pub fn new(rules: Vec<Rule>) -> Result<Self, RulesError> {
        let mut patterns: Vec<&str> = rules.iter().map(|r| r.log_pattern.translated()).collect();
        let mut stops = Vec::with_capacity(rules.len());
        for r in &rules {
            stops.push(r.stop_pattern.as_ref().map(|p| {
                patterns.push(p.translated());
                patterns.len() - 1
            }));
        }
        let set = regex::RegexSetBuilder::new(&patterns)
            .size_limit(32 << 20)
            .dfa_size_limit(8 << 20)
            .build()
            .map_err(|e| RulesError::Shape(format!("the rules' patterns together are too large for the regex engine: {e}")))?;
        Ok(Self { rules, set, stops })
    }

    /// The rules, in configuration order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Scan `line` once for every pattern.
    pub fn scan(&self, line: &str) -> Scan {
        Scan(self.set.matches(line))
    }

    /// Whether rule `i`'s `stopPattern` matched in `scan`.
    pub fn stop_match(&self, scan: &Scan, i: usize) -> bool {
        self.stops[i].is_some_and(|k| scan.0.matched(k))
    }
}

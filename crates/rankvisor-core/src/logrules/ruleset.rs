//! The rules of a job, validated and ready for every attempt's evaluator.
//!
//! Each pattern is checked on its own, lazily (a stop pattern only when the agent would look at
//! it), and cheaply on the common line that matches nothing: a substring search for the text the
//! pattern requires (`PyRegex::required_text`) rules most lines out before any automaton runs. A
//! `RegexSet` of all patterns measured slower: its overlapping search scans the whole line for
//! every pattern's state at once.

use super::rule::Rule;

/// The validated rules, in configuration order.
#[derive(Debug, Clone)]
pub struct RuleSet {
    rules: Vec<Rule>,
}

impl RuleSet {
    /// The rules, checked (see `rule::rules_from_value`).
    pub(crate) fn new(rules: Vec<Rule>) -> Self {
        Self { rules }
    }

    /// The rules, in configuration order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

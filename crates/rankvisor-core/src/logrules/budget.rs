//! The compile budget of one rules configuration: its patterns are compiled one by one within
//! [`MAX_COMPILED`], so a pattern whose automaton explodes is refused before it grows the process.

use super::pyre::{PatternError, PyRegex, Refused, LAZY_DFA_CACHE, PATTERN_NFA_LIMIT};

/// The most memory one configuration's compiled patterns may take, caches counted at their bound
/// (64 MiB).
pub const MAX_COMPILED: usize = 64 << 20;
/// What is left of [`MAX_COMPILED`] while a configuration's patterns are compiled.
#[derive(Debug)]
pub(super) struct Budget {
    pub(super) left: usize,
}

impl Budget {
    /// The whole budget of one configuration.
    pub(super) fn new() -> Self {
        Self { left: MAX_COMPILED }
    }

    /// Compile `source`, within what is left; `Err` says why it was refused (the budget named).
    pub(super) fn compile(&mut self, source: &str) -> Result<PyRegex, String> {
        let over = || {
            format!(
                "the compiled patterns would take more than {} MiB, the limit of one configuration \
                 (simplify this pattern or use fewer rules)",
                MAX_COMPILED >> 20
            )
        };
        // Each automaton's cache is counted at its bound: two directions of the lazy DFA.
        let reserve = 2 * 2 * LAZY_DFA_CACHE;
        let limit = self.left.checked_sub(reserve).ok_or_else(over)?;
        let re = PyRegex::with_limit(source, limit).map_err(|e| match e {
            Refused::TooLarge(l) if l < PATTERN_NFA_LIMIT => over(),
            e => PatternError::from(e).to_string(),
        })?;
        let cost = re.memory_usage() + re.automata() * 2 * LAZY_DFA_CACHE;
        self.left = self.left.checked_sub(cost).ok_or_else(over)?;
        Ok(re)
    }
}

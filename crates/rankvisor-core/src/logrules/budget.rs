//! The compile budget of one rules configuration: its patterns are compiled one by one within
//! [`MAX_COMPILED`], so a pattern whose automaton explodes is refused before it grows the process.

use super::pyre::{PatternError, PyRegex, Refused, LAZY_DFA_CACHE, PATTERN_NFA_LIMIT};
use regex_automata::meta;
use regex_automata::MatchKind;
use regex_syntax::hir::Hir;

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

    /// One automaton over `screens` (pattern `i` is `screens[i]`), every match reported, within
    /// what is left; `None` when it would not fit (the rules are then each asked of every line).
    pub(super) fn screen(&mut self, screens: &[&Hir]) -> Option<meta::Regex> {
        // A set of rules has more lazy DFA states than one pattern: a larger cache, counted at
        // its bound, both directions.
        let cache = 4 * LAZY_DFA_CACHE;
        let limit = self.left.checked_sub(2 * cache)?.min(PATTERN_NFA_LIMIT);
        let re = meta::Builder::new()
            .configure(
                meta::Config::new().match_kind(MatchKind::All).nfa_size_limit(Some(limit)).hybrid_cache_capacity(cache),
            )
            .build_many_from_hir(screens)
            .ok()?;
        self.left = self.left.checked_sub(re.memory_usage() + 2 * cache)?;
        Some(re)
    }
}

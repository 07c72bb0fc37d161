//! Python `re` patterns, as the HyperPod agent compiles them, run by the `regex` crate.
//!
//! The pattern is parsed with Python's grammar and written out again in the `regex` crate's
//! syntax, construct by construct, only where both mean the same on a log line; everything else is
//! refused with the construct named (docs/log-rules.md has the list). Python's backtracking engine
//! and the crate's automata agree on leftmost-first matches and on what each group captures, so
//! `re.match(p, line).group(1)` is `captures(line)[1]` here.
//!
//! What the rewriting takes care of:
//! - `re.match` anchors at the start of the line: the whole pattern becomes `\A(?:...)`;
//! - `$` (Python: the end, or before a newline that ends the text) becomes `(?m:$)`, the same on
//!   a line whose only newline is its last character (the splitter's lines are such lines);
//! - `\w` is Python's `[\p{L}\p{N}_]` (the crate's has marks and connector punctuation), `\s`
//!   has U+001C..U+001F (Python's `str.isspace`), `\Z` is `\z`, `{,n}` is `{0,n}`;
//! - `[` inside a class is a literal in Python and a nested class in the crate, `&&`, `--` and
//!   `~~` are set operations there: class members are written one by one as `\x{..}`;
//! - group names are dropped (only the first group's value is used), after Python's checks.

//!
//! The crate's engines decide; this module only chooses how they are asked. A pattern `.*Q`
//! (`.` with or without DOTALL, greedy or lazy: the shape log rules mostly have) is also compiled
//! as `Q` alone, unanchored, whose literal prefilters (memchr, Teddy) skip most of a line:
//! - `.*Q` matches at the start iff Q matches at some start no later than the first `\n` (or
//!   anywhere, DOTALL), and an unanchored leftmost search finds Q's smallest start;
//! - Python's greedy `.*` tries the largest start first (the lazy `.*?` the smallest), so group 1
//!   is what Q captures, anchored, at the largest (smallest) start where it matches. The starts
//!   are found one search each, at most [`MAX_STARTS`] of them; beyond, `\A(?:.*Q)` answers.

use regex_automata::meta::{self, Regex};
use regex_automata::util::primitives::NonMaxUsize;
use regex_automata::{Anchored, Input};
use regex_syntax::hir::{Dot, Hir, HirKind, Look};

/// The starts of Q tried for a greedy `.*Q`'s group 1 before `\A(?:.*Q)` answers (bounds the
/// work on a line full of Q's matches). The answer is the bounded backtracker over the whole line
/// (about 30,000 instructions on a 100-byte line with 8 starts of ` (.+)TFLOPs`), a search from
/// the next start is a prefiltered search (a few hundred): 16 keeps a log line's words below it.
const MAX_STARTS: usize = 16;

/// The largest compiled pattern (the crate's NFA size limit), per automaton.
pub const PATTERN_NFA_LIMIT: usize = 1 << 20;
/// The lazy DFA's cache, per automaton and direction (forward, reverse), per thread evaluating.
pub const LAZY_DFA_CACHE: usize = 64 << 10;
/// The most states of a pattern's automaton (its Thompson NFA). Where the lazy DFA gives up
/// (its cache thrashes on a pattern like `[a-z]{1,6000}`), the crate falls back to an engine whose
/// work on a line grows with both the states and the line's length: at 2,048 states one line (at
/// most [`super::lines::LINE_CAP`] bytes) takes about a second at worst (release build), while
/// log-rule patterns have tens to a few hundred (the AWS examples under 100).
pub const MAX_STATES: usize = 2048;

/// A pattern with Python's meaning, compiled.
#[derive(Debug, Clone)]
pub struct PyRegex {
    source: String,
    /// `\A(?:P)`.
    anchored: Regex,
    groups: usize,
    /// P is `.*Q`: Q, unanchored.
    rest: Option<Rest>,
    /// What a line P matches has somewhere: Q for a `.*Q`, else `\A(?:P)` (see [`PyRegex::screen`]).
    screen: Hir,
}

/// The `Q` of a `.*Q` pattern.
#[derive(Debug, Clone)]
struct Rest {
    search: Regex,
    /// `.` without DOTALL: Q must start at or before the first `\n`.
    stops_at_newline: bool,
    /// `.*` (largest start first) rather than `.*?`.
    greedy: bool,
}

/// Why a pattern was refused: a Python syntax error, or a construct whose meaning differs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem} (at offset {offset} of the pattern)")]
pub struct PatternError {
    /// The character offset in the pattern where the problem starts.
    pub offset: usize,
    /// What is wrong, naming the construct.
    pub problem: String,
}

/// Why [`PyRegex::with_limit`] refused a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The pattern itself.
    Pattern(PatternError),
    /// An automaton would be over the limit it was given, in bytes.
    TooLarge(usize),
}

impl From<Refused> for PatternError {
    fn from(r: Refused) -> Self {
        match r {
            Refused::Pattern(e) => e,
            Refused::TooLarge(limit) => PatternError {
                offset: 0,
                problem: format!(
                    "too large: its automaton would take more than {limit} bytes, the limit of one pattern"
                ),
            },
        }
    }
}

impl PyRegex {
    /// Parse `source` as Python `re` syntax and compile its translation, each automaton within
    /// `nfa_limit` bytes (at most [`PATTERN_NFA_LIMIT`]).
    pub fn with_limit(source: &str, nfa_limit: usize) -> Result<Self, Refused> {
        let Translation { pattern, groups } = translate(source).map_err(Refused::Pattern)?;
        let unsupported = |e: &dyn std::fmt::Display| {
            Refused::Pattern(PatternError { offset: 0, problem: format!("unsupported by the regex engine: {e}") })
        };
        let too_large = |e: meta::BuildError| match e.size_limit() {
            Some(limit) => Refused::TooLarge(limit),
            None => unsupported(&e),
        };
        let hir = regex_syntax::ParserBuilder::new().build().parse(&pattern).map_err(|e| unsupported(&e))?;
        check_states(&hir, nfa_limit.min(PATTERN_NFA_LIMIT))?;
        let builder = |limit: usize| {
            let mut b = meta::Builder::new();
            b.configure(
                meta::Config::new()
                    .nfa_size_limit(Some(limit.min(PATTERN_NFA_LIMIT)))
                    .hybrid_cache_capacity(LAZY_DFA_CACHE),
            );
            b
        };
        let anchored = builder(nfa_limit).build_from_hir(&hir).map_err(too_large)?;
        let (rest, screen) = match dot_star_rest(&hir) {
            Some((q, stops_at_newline, greedy)) => {
                let left = nfa_limit.saturating_sub(anchored.memory_usage());
                let search = builder(left).build_from_hir(&q).map_err(too_large)?;
                (Some(Rest { search, stops_at_newline, greedy }), q)
            }
            None => (None, hir),
        };
        Ok(Self { source: source.to_string(), anchored, groups, rest, screen })
    }

    /// [`PyRegex::with_limit`] at [`PATTERN_NFA_LIMIT`].
    pub fn new(source: &str) -> Result<Self, PatternError> {
        Ok(Self::with_limit(source, PATTERN_NFA_LIMIT)?)
    }

    /// The pattern as the user wrote it.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The number of capturing groups, as Python's `groups()` counts them.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// The heap the compiled automata hold (their caches apart: at most [`LAZY_DFA_CACHE`]
    /// twice, per automaton, per thread evaluating).
    pub fn memory_usage(&self) -> usize {
        self.anchored.memory_usage() + self.rest.as_ref().map_or(0, |r| r.search.memory_usage())
    }

    /// The number of automata compiled (one, or two for a `.*Q`).
    pub fn automata(&self) -> usize {
        1 + usize::from(self.rest.is_some())
    }

    /// `re.match(pattern, text) is not None`.
    pub fn is_match(&self, text: &str) -> bool {
        match &self.rest {
            None => self.anchored.is_match(text),
            Some(rest) => rest.search.is_match(Input::new(text).earliest(true)) && rest.starts_in_time(text),
        }
    }

    /// A pattern, unanchored, that matches somewhere in every text this one matches (Q for a
    /// `.*Q`, else `\A(?:P)` itself): one automaton over every rule's screen tells, in one pass
    /// over a line, which rules can match it at all.
    pub fn screen(&self) -> &Hir {
        &self.screen
    }

    /// [`PyRegex::is_match`] for a `text` where [`PyRegex::screen`] is known to match: only a
    /// `.*Q` whose Q matched after a `\n` inside the text is asked again.
    pub fn is_match_screened(&self, text: &str) -> bool {
        self.rest.as_ref().is_none_or(|rest| rest.starts_in_time(text))
    }

    /// `re.match(pattern, text)`: `None` if no match, else what group 1 captured (`None` when the
    /// pattern has no group or group 1 took no part in the match).
    pub fn match_group1<'t>(&self, text: &'t str) -> Option<Option<&'t str>> {
        if self.groups == 0 {
            return self.is_match(text).then_some(None);
        }
        let Some(rest) = &self.rest else {
            return group1(&self.anchored, &Input::new(text), text);
        };
        let mut start = rest.first_start(text)?;
        if rest.greedy {
            let limit = rest.limit(text);
            let mut tries = 0;
            loop {
                let next = start + text[start..].chars().next().map_or(1, char::len_utf8);
                match rest.search.search(&Input::new(text).range(next..)) {
                    Some(m) if m.start() <= limit => start = m.start(),
                    _ => break,
                }
                tries += 1;
                if tries == MAX_STARTS {
                    return group1(&self.anchored, &Input::new(text), text);
                }
            }
        }
        group1(&rest.search, &Input::new(text).range(start..).anchored(Anchored::Yes), text)
    }
}

impl Rest {
    /// The last position where Q may start: the first `\n`, or the end.
    fn limit(&self, text: &str) -> usize {
        if self.stops_at_newline {
            memchr::memchr(b'\n', text.as_bytes()).unwrap_or(text.len())
        } else {
            text.len()
        }
    }

    /// Given that Q matches somewhere in `text`: whether it starts no later than the limit. On a
    /// line (a `\n` at most at its end) any match of Q does (Q never matches empty), so only
    /// a text with a `\n` inside is searched again.
    fn starts_in_time(&self, text: &str) -> bool {
        let line = !self.stops_at_newline || memchr::memchr(b'\n', text.as_bytes()).is_none_or(|i| i + 1 == text.len());
        line || self.first_start(text).is_some()
    }

    /// Q's smallest start no later than the limit: where `.*Q` lets it start, if anywhere.
    fn first_start(&self, text: &str) -> Option<usize> {
        let found = self.search.search(&Input::new(text))?;
        (found.start() <= self.limit(text)).then_some(found.start())
    }
}

/// Refuse a pattern whose automaton has more than [`MAX_STATES`] states (or is over `limit`
/// bytes: `Refused::TooLarge`).
fn check_states(hir: &Hir, limit: usize) -> Result<(), Refused> {
    use regex_automata::nfa::thompson;
    let nfa = thompson::Compiler::new()
        .configure(thompson::Config::new().nfa_size_limit(Some(limit)).shrink(false))
        .build_from_hir(hir)
        .map_err(|_| Refused::TooLarge(limit))?;
    let states = nfa.states().len();
    if states > MAX_STATES {
        return Err(Refused::Pattern(PatternError {
            offset: 0,
            problem: format!(
                "too complex: its automaton has {states} states, more than {MAX_STATES}, the limit that bounds \
                 the work on one line (a bounded repetition like {{1,6000}} is the usual cause)"
            ),
        }));
    }
    Ok(())
}

/// Group 1 of `re`'s match in `input`, if it matches.
fn group1<'t>(re: &Regex, input: &Input<'_>, text: &'t str) -> Option<Option<&'t str>> {
    let mut slots: [Option<NonMaxUsize>; 4] = [None; 4];
    re.search_slots(input, &mut slots)?;
    Some(slots[2].zip(slots[3]).map(|(s, e)| &text[s.get()..e.get()]))
}

/// `\A(?:.*Q)` where Q never matches the empty string: Q (less a trailing `X*`), whether `.`
/// stops at `\n`, whether `.*` is greedy.
fn dot_star_rest(hir: &Hir) -> Option<(Hir, bool, bool)> {
    let HirKind::Concat(items) = hir.kind() else { return None };
    let [start, lead, rest @ ..] = items.as_slice() else { return None };
    // A trailing repetition that may match nothing and captures nothing (the `.*` of
    // `.*Q.*`) never changes whether Q matches at a start nor what its groups capture there (it
    // always succeeds after the rest): it is dropped, so the search ends at Q's last literal and
    // the group is read by the one-pass DFA where Q is one-pass.
    let rest = match rest {
        [body @ .., last] if !body.is_empty() && optional_tail(last) => body,
        rest => rest,
    };
    let q = Hir::concat(rest.to_vec());
    if *start.kind() != HirKind::Look(Look::Start) || q.properties().minimum_len().is_none_or(|n| n == 0) {
        return None;
    }
    let HirKind::Repetition(rep) = lead.kind() else { return None };
    if rep.min != 0 || rep.max.is_some() {
        return None;
    }
    let stops_at_newline = if *rep.sub == Hir::dot(Dot::AnyCharExceptLF) {
        true
    } else if *rep.sub == Hir::dot(Dot::AnyChar) {
        false
    } else {
        return None;
    };
    Some((q, stops_at_newline, rep.greedy))
}

/// `X*` where X captures nothing: matches (at least) nothing wherever it is tried.
fn optional_tail(hir: &Hir) -> bool {
    matches!(hir.kind(), HirKind::Repetition(r) if r.min == 0 && r.max.is_none() && r.sub.properties().explicit_captures_len() == 0)
}

mod translate;

pub use translate::{translate, Translation};

#[cfg(test)]
mod tests;

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

/// A pattern with Python's meaning, compiled.
#[derive(Debug, Clone)]
pub struct PyRegex {
    source: String,
    regex: regex::Regex,
    groups: usize,
    /// Text every match contains (case-sensitive): a line without it cannot match, which a
    /// substring search tells faster than the automaton.
    required: Option<memchr::memmem::Finder<'static>>,
    /// The fast path of a `.*Q` pattern (`fast`), when it has that shape.
    fast: Option<fast::Fast>,
    /// Without `required`: text every match on an ASCII line contains up to ASCII case
    /// (`fast::folded_required`), lowercase.
    folded: Option<Box<[u8]>>,
    /// What the first occurrence of the searched text (`required` or `folded`) tells the fast
    /// path, when it is where its candidates start.
    hint: fast::Hint,
}

/// What a batch's search looks for ([`PyRegex::needle`]).
#[derive(Debug, Clone, Copy)]
pub enum Needle<'a> {
    /// This text, case-sensitive.
    Exact(&'a memchr::memmem::Finder<'static>),
    /// This lowercase text, up to ASCII case, in ASCII text.
    Folded(&'a [u8]),
}

impl Needle<'_> {
    /// The first position at or after `from` where the needle occurs in `hay`.
    pub fn find(self, hay: &[u8], from: usize) -> Option<usize> {
        match self {
            Self::Exact(f) => hay.get(from..).and_then(|h| f.find(h)).map(|p| from + p),
            Self::Folded(n) => fast::find_folded(hay, n, from),
        }
    }
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

impl PyRegex {
    /// Parse `source` as Python `re` syntax and compile its translation.
    pub fn new(source: &str) -> Result<Self, PatternError> {
        let Translation { pattern: translated, groups, required } = translate(source)?;
        let regex =
            regex::RegexBuilder::new(&translated).size_limit(4 << 20).dfa_size_limit(4 << 20).build().map_err(|e| {
                PatternError { offset: 0, problem: format!("too large or unsupported for the regex engine: {e}") }
            })?;
        let required = required.map(|r| memchr::memmem::Finder::new(r.as_bytes()).into_owned());
        let fast = fast::Fast::new(&translated);
        let folded = if required.is_none() { fast::folded_required(&translated) } else { None };
        let hint = fast.as_ref().map_or(fast::Hint::Nothing, |f| {
            f.hint_for(required.as_ref().map(memchr::memmem::Finder::needle), folded.as_deref())
        });
        Ok(Self { source: source.to_string(), regex, groups, required, fast, folded, hint })
    }

    /// The pattern as the user wrote it.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The translated pattern (anchored at the start), for a `RegexSet`.
    pub fn translated(&self) -> &str {
        self.regex.as_str()
    }

    /// The number of capturing groups, as Python's `groups()` counts them.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// `re.match(pattern, text) is not None`.
    pub fn is_match(&self, text: &str) -> bool {
        self.may_match(text) && self.is_match_known(text, fast::Known::default())
    }

    /// [`PyRegex::is_match`] on one line of a batch (a `\n` at most at its end), without the
    /// search for the required text: the batch's search `found` its needle
    /// ([`PyRegex::needle`]), or the pattern has none (`None`).
    #[inline]
    pub fn is_match_at(&self, line: &str, found: Option<Found>) -> bool {
        self.is_match_known(line, self.hint.known(found))
    }

    /// `re.match(pattern, text) is not None`, `known` of the text.
    fn is_match_known(&self, text: &str, known: fast::Known) -> bool {
        match &self.fast {
            Some(f) => f.is_match(text, known),
            None => self.regex.is_match(text),
        }
    }

    /// False when `text` lacks what every match contains (a substring search, much faster than
    /// the automaton).
    fn may_match(&self, text: &str) -> bool {
        let bytes = text.as_bytes();
        self.required.as_ref().is_none_or(|f| f.find(bytes).is_some())
            && self.folded.as_deref().is_none_or(|n| !bytes.is_ascii() || fast::contains_folded(bytes, n))
    }

    /// What to search a batch's text for: every match contains it (case-sensitive, or up to ASCII
    /// case when the text is `ascii`), so a line without it does not match; `None` when there is
    /// nothing to search for. Where it occurs in a line is the `found` of
    /// [`PyRegex::is_match_at`] and [`PyRegex::match_group1_at`].
    pub fn needle(&self, ascii: bool) -> Option<Needle<'_>> {
        match (&self.required, &self.folded) {
            (Some(f), _) => Some(Needle::Exact(f)),
            (None, Some(n)) if ascii => Some(Needle::Folded(n)),
            _ => None,
        }
    }

    /// The text every match contains, if the pattern has one (at least two characters).
    pub fn required_text(&self) -> Option<&[u8]> {
        self.required.as_ref().map(|f| f.needle())
    }

    /// `re.match(pattern, text)`: `None` if no match, else what group 1 captured (`None` when the
    /// pattern has no group or group 1 took no part in the match).
    pub fn match_group1<'t>(&self, text: &'t str) -> Option<Option<&'t str>> {
        if !self.may_match(text) {
            return None;
        }
        self.match_group1_known(text, fast::Known::default())
    }

    /// [`PyRegex::match_group1`] without the search for the required text (see
    /// [`PyRegex::is_match_at`]).
    pub fn match_group1_at<'t>(&self, line: &'t str, found: Option<Found>) -> Option<Option<&'t str>> {
        self.match_group1_known(line, self.hint.known(found))
    }

    /// `re.match(pattern, text)` and its group 1, `known` of the text.
    fn match_group1_known<'t>(&self, text: &'t str, known: fast::Known) -> Option<Option<&'t str>> {
        if self.groups == 0 {
            return self.is_match_known(text, known).then_some(None);
        }
        if let Some(Ok(group)) = self.fast.as_ref().map(|f| f.match_group1(text, known)) {
            return group;
        }
        let caps = self.regex.captures(text)?;
        Some(caps.get(1).map(|m| m.as_str()))
    }
}

mod fast;
mod translate;

pub use fast::Found;
pub use translate::{translate, Translation};

#[cfg(test)]
mod tests;

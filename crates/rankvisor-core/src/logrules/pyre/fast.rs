//! The fast path for the patterns log rules mostly are: `.*Q` (a leading `.*` under `re.match`),
//! decided exactly from the translated pattern's syntax tree, or not at all.
//!
//! Why it is exact (`.` without DOTALL takes anything but `\n`; with it, anything):
//! - `.*Q` matches at the start of the text iff Q matches at some position `p` no later than the
//!   first `\n` (or anywhere, DOTALL): an unanchored search for Q, whose leftmost match has the
//!   smallest start there is;
//! - a trailing repetition that may match nothing and captures nothing (`.*` at the end) never
//!   changes whether Q matches at `p` nor what Q's groups capture there (Python's backtracker
//!   takes Q's first success, and the repetition always succeeds after it): it is dropped;
//! - Python's greedy `.*` tries the largest `p` first (the lazy `.*?` the smallest), so group 1 is
//!   what Q captures, anchored, at the largest (smallest) `p` where it matches; when Q starts with a
//!   literal, only the literal's occurrences are candidates (a reverse, or forward, substring
//!   search) no later than the last occurrence of Q's longest literal, and Q anchored there sees
//!   the same text around it as in the whole line: no assertion can sit before Q's first character
//!   (nor after its last, when Q ends with a literal: the search then stops at the literal's last
//!   occurrence, where every match of Q ends).
//!
//! A pattern of another shape (an alternative at the top, the `.*` inside a group, a class other
//! than `.`) keeps the general path; so does a line where more than [`MAX_TRIES`] candidates fail.

use memchr::memmem::{Finder, FinderRev};
use regex::Regex;
use regex_syntax::hir::{Class, Hir, HirKind, Look};

/// Candidates tried before handing the line to the general path (bounds the work on a line full
/// of the literal's occurrences).
const MAX_TRIES: usize = 4;

/// A `.*Q` pattern's fast path.
#[derive(Debug, Clone)]
pub(super) struct Fast {
    /// The leading repetition is `.` without DOTALL: Q must start at or before the first `\n`.
    stops_at_newline: bool,
    /// `.*` (largest start first) rather than `.*?`.
    greedy: bool,
    /// Q's smallest match length.
    min_len: usize,
    /// Q, unanchored (`None` when Q is only its literal).
    search: Option<Regex>,
    /// Q's leading literal, when Q starts with one.
    literal: Option<Literal>,
    /// `\A(?:Q)`, run from a candidate start: for the groups when Q starts with a literal, for
    /// whether it matches when Q starts with `folded`.
    anchored: Option<Regex>,
    /// Q's leading run of case-insensitive ASCII (lowercase, three characters or more), when Q
    /// starts with one and has no leading literal: on an ASCII line Q can start only where it
    /// occurs.
    folded: Option<Box<[u8]>>,
    /// The ASCII bytes (a bit each) that may come right after `folded` in a match of Q, when what
    /// follows it matches at least one character: a candidate followed by another byte fails
    /// without the automaton.
    folded_next: Option<u128>,
    /// Q's longest literal at its top level: every match of Q contains it, so Q starts no later
    /// than its last occurrence.
    last: Option<FinderRev<'static>>,
    /// Q's final literal, when Q ends with one: every match of Q ends with it, so no later than
    /// its last occurrence, and nothing in Q looks past it (the anchored search stops there).
    tail: Option<(usize, FinderRev<'static>)>,
    /// The final literal is Q's longest (not its leading one): Q starts no later than its last
    /// occurrence (`last` is then `None`).
    tail_is_last: bool,
    /// Q after its leading literal, when it is a capture of a shape matched without an automaton.
    shape: Option<Shape>,
}

/// What follows Q's leading literal, when it is one of the common metric shapes; matched on
/// ASCII by hand, exactly as Python's backtracker would (anything else: [`Undecided`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// `(\d+)`, `(\d+(?:\.\d+)?)` or `(\d+(\.\d+)?)` (`fraction`), and nothing after it:
    /// greedy, the digits, then a point and digits if both are there.
    Number { fraction: bool },
    /// `(.+)` or `(.*)` (`min` 1 or 0), greedy, then Q's final literal: the group runs to the last
    /// occurrence of the literal (no newline in between, without DOTALL).
    UpTo { min: usize, dotall: bool },
}

#[derive(Debug, Clone)]
struct Literal {
    len: usize,
    fwd: Finder<'static>,
    rev: FinderRev<'static>,
}

/// What the occurrences of a pattern's needle (`PyRegex::needle`) are to its fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hint {
    /// Q's leading literal is the needle.
    Literal,
    /// Q's final literal is the needle (and not its leading one).
    Tail,
    /// Q's folded prefix is the needle (found up to case, on an ASCII line).
    Folded,
    /// Something else: of no use.
    Nothing,
}

impl Hint {
    /// What a batch's search `found` in one line tells the fast path.
    #[inline]
    pub(super) fn known(self, found: Option<Found>) -> Known {
        let none = Known { one_line: true, ..Known::default() };
        match self {
            Self::Literal => Known { literal: found, ..none },
            Self::Tail => Known { tail: found, ..none },
            Self::Folded => Known { folded: found, ..none },
            Self::Nothing => none,
        }
    }
}

/// Where a batch's search found a pattern's needle in one of its lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The first occurrence's byte.
    pub first: usize,
    /// It is the only occurrence (else there are more).
    pub once: bool,
}

/// What is known of a line before the fast path looks at it: where Q's leading literal, final
/// literal or folded prefix occurs, when a batch's search found it; that the text is one line (a
/// `\n` at most at its end).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Known {
    literal: Option<Found>,
    tail: Option<Found>,
    folded: Option<Found>,
    one_line: bool,
}

/// The fast path cannot decide this line: take the general one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Undecided;

impl Fast {
    /// The fast path for `translated` (the crate's syntax, anchored with `\A`), if it has the shape.
    pub(super) fn new(translated: &str) -> Option<Self> {
        let hir = regex_syntax::ParserBuilder::new().build().parse(translated).ok()?;
        let HirKind::Concat(items) = hir.kind() else { return None };
        let [start, lead, rest @ ..] = items.as_slice() else { return None };
        if !matches!(start.kind(), HirKind::Look(Look::Start)) {
            return None;
        }
        let HirKind::Repetition(rep) = lead.kind() else { return None };
        if rep.min != 0 || rep.max.is_some() {
            return None;
        }
        let stops_at_newline = !dot_dotall(rep.sub.as_ref())?;
        let mut q: Vec<Hir> = rest.to_vec();
        while q.last().is_some_and(|h| {
            matches!(h.kind(), HirKind::Repetition(r) if r.min == 0) && h.properties().explicit_captures_len() == 0
        }) {
            q.pop();
        }
        if q.is_empty() {
            return None;
        }
        let literal = match q[0].kind() {
            HirKind::Literal(lit) if std::str::from_utf8(&lit.0).is_ok() => Some(Literal {
                len: lit.0.len(),
                fwd: Finder::new(&lit.0).into_owned(),
                rev: FinderRev::new(&lit.0).into_owned(),
            }),
            _ => None,
        };
        let only_literal = q.len() == 1 && literal.is_some();
        let longest = q
            .iter()
            .filter_map(|h| match h.kind() {
                HirKind::Literal(lit) => Some(&lit.0),
                _ => None,
            })
            .max_by_key(|lit| lit.len())
            // When it is the leading literal, the candidates' own search stops at its last occurrence.
            .filter(|lit| literal.as_ref().is_none_or(|l| l.fwd.needle() != &lit[..]));
        let tail = match q.last().map(Hir::kind) {
            Some(HirKind::Literal(lit)) => Some((lit.0.len(), FinderRev::new(&lit.0).into_owned())),
            _ => None,
        };
        // When it is the final literal, the search for that one finds its last occurrence.
        let tail_is_last = longest.is_some_and(|lit| tail.as_ref().is_some_and(|(_, t)| t.needle() == &lit[..]));
        let last = longest.filter(|_| !tail_is_last).map(|lit| FinderRev::new(lit).into_owned());
        let shape = match (&literal, &tail) {
            (Some(_), _) => Shape::of(&q[1..], tail.is_some()),
            _ => None,
        };
        let q = Hir::concat(q);
        let min_len = q.properties().minimum_len()?;
        let build = |p: String| regex::RegexBuilder::new(&p).size_limit(4 << 20).dfa_size_limit(4 << 20).build().ok();
        let search = if only_literal { None } else { Some(build(q.to_string())?) };
        let q_items = items_of(&q);
        let (folded, folded_next) = match (&literal, folded_runs(&q_items).first()) {
            (None, Some((0, end, run))) if run.len() >= 3 && search.is_some() => {
                (Some(run.clone().into_boxed_slice()), q_items.get(*end).and_then(first_ascii))
            }
            _ => (None, None),
        };
        let anchored = match literal {
            Some(_) if q.properties().explicit_captures_len() > 0 => Some(build(format!(r"\A(?:{q})"))?),
            None if folded.is_some() => Some(build(format!(r"\A(?:{q})"))?),
            _ => None,
        };
        Some(Self {
            stops_at_newline,
            greedy: rep.greedy,
            min_len,
            search,
            literal,
            anchored,
            folded,
            folded_next,
            last,
            tail,
            tail_is_last,
            shape,
        })
    }

    /// What the first occurrence of the pattern's `required` (case-sensitive) or `folded` text
    /// tells this fast path ([`Hint`]).
    pub(super) fn hint_for(&self, required: Option<&[u8]>, folded: Option<&[u8]>) -> Hint {
        match (required, folded) {
            (Some(r), _) if self.literal.as_ref().is_some_and(|l| l.fwd.needle() == r) => Hint::Literal,
            (Some(r), _) if self.tail.as_ref().is_some_and(|(_, t)| t.needle() == r) => Hint::Tail,
            (None, Some(f)) if self.folded.as_deref() == Some(f) => Hint::Folded,
            _ => Hint::Nothing,
        }
    }

    /// The last position Q may start at.
    #[inline]
    fn limit(&self, text: &str, known: Known) -> usize {
        if known.one_line {
            // Its newline, if any, ends it.
            text.len() - usize::from(self.stops_at_newline && text.as_bytes().last() == Some(&b'\n'))
        } else if self.stops_at_newline {
            memchr::memchr(b'\n', text.as_bytes()).unwrap_or(text.len())
        } else {
            text.len()
        }
    }

    /// `re.match(pattern, text) is not None`; `known`: what a batch's search found.
    pub(super) fn is_match(&self, text: &str, known: Known) -> bool {
        let Some(search) = &self.search else {
            // Q is its literal: its first occurrence is the smallest start. Found in one line, it
            // starts before the newline that ends the line.
            if known.one_line && known.literal.is_some() {
                return true;
            }
            let limit = self.limit(text, known);
            return self.literal.as_ref().and_then(|l| l.fwd.find(text.as_bytes())).is_some_and(|p| p <= limit);
        };
        let limit = self.limit(text, known);
        if let (Some(needle), Some(anchored)) = (&self.folded, &self.anchored) {
            if known.folded.is_some() || text.is_ascii() {
                if let Ok(found) = self.folded_candidates(text, needle, anchored, limit, known.folded) {
                    return found;
                }
            }
        }
        if limit + 1 >= text.len() && self.min_len >= 1 {
            // Every start but the very end is allowed, and no match of Q starts there.
            return search.is_match(text);
        }
        search.find(text).is_some_and(|m| m.start() <= limit)
    }

    /// Whether Q matches, anchored, at an occurrence of its folded prefix no later than `limit`
    /// (`text` is ASCII, so Q can start nowhere else); `Undecided` after [`MAX_TRIES`] failures of
    /// the automaton (an occurrence followed by a byte Q cannot go on with fails without it).
    /// `found`: where a batch's search found the prefix (the first occurrence; whether there are
    /// more).
    fn folded_candidates(
        &self,
        text: &str,
        needle: &[u8],
        anchored: &Regex,
        limit: usize,
        found: Option<Found>,
    ) -> Result<bool, Undecided> {
        let bytes = text.as_bytes();
        let next_fits = |p: usize| {
            self.folded_next
                .is_none_or(|set| bytes.get(p + needle.len()).is_some_and(|&b| b < 128 && set >> b & 1 != 0))
        };
        let (mut from, mut tries) = (found.map_or(0, |f| f.first), 0);
        let next = |from: usize| match found {
            // The only occurrence: after it, none.
            Some(Found { first, once: true }) => Some(first).filter(|&f| f >= from),
            _ => find_folded(bytes, needle, from),
        };
        while let Some(p) = next(from).filter(|&p| p <= limit) {
            from = p + 1;
            if !next_fits(p) {
                continue;
            }
            if anchored.is_match(&text[p..]) {
                return Ok(true);
            }
            tries += 1;
            if tries == MAX_TRIES {
                return Err(Undecided);
            }
        }
        Ok(false)
    }

    /// `re.match(pattern, text)` and its group 1, as `PyRegex::match_group1`; `Undecided` when
    /// the general path must decide. `known`: what a batch's search found.
    pub(super) fn match_group1<'t>(&self, text: &'t str, known: Known) -> Result<Option<Option<&'t str>>, Undecided> {
        let (Some(lit), Some(anchored)) = (&self.literal, &self.anchored) else {
            // No literal to find the candidates by: the search still rules a non-matching line out.
            return if self.is_match(text, known) { Err(Undecided) } else { Ok(None) };
        };
        let bytes = text.as_bytes();
        if let (Some(Found { first, once: true }), Some(shape @ Shape::Number { .. }), None, None, true) =
            (known.literal, self.shape, &self.tail, &self.last, self.greedy)
        {
            // Q is its leading literal and a number, and the literal is in the line once: the
            // only candidate (what follows, for this shape, without the general bookkeeping).
            if first > self.limit(text, known) || !text.is_char_boundary(first) {
                return Ok(None);
            }
            return Ok(shape.at(bytes, first + lit.len, text.len(), &[])?.map(|(s, e)| Some(&text[s..e])));
        }
        // Q's matches end no later than this.
        let (end, tail_at) = match &self.tail {
            Some((len, f)) => match known.tail.filter(|t| t.once).map(|t| t.first).or_else(|| f.rfind(bytes)) {
                // A UTF-8 literal ends on a character; checked all the same.
                Some(p) if text.is_char_boundary(p + len) => (p + len, Some(p)),
                Some(p) => (text.len(), Some(p)),
                None => return Ok(None),
            },
            None => (text.len(), None),
        };
        let last_at = match (&self.last, tail_at) {
            (_, Some(p)) if self.tail_is_last => Some(p),
            (Some(l), _) => l.rfind(bytes),
            (None, _) => Some(text.len()),
        };
        let Some(limit) = last_at.map(|p| p.min(self.limit(text, known))) else {
            return Ok(None);
        };
        let mut locs = None;
        let mut try_at = |p: usize| -> Result<Option<Option<&'t str>>, Undecided> {
            // The literal is UTF-8, so it starts on a character; checked all the same.
            if p > end || !text.is_char_boundary(p) {
                return Ok(None);
            }
            if let Some(shape) = self.shape {
                let tail = self.tail.as_ref().map_or(&[][..], |(_, f)| f.needle());
                return Ok(shape.at(bytes, p + lit.len, end, tail)?.map(|(s, e)| Some(&text[s..e])));
            }
            let locs = locs.get_or_insert_with(|| anchored.capture_locations());
            if anchored.captures_read(locs, &text[p..end]).is_none() {
                return Ok(None);
            }
            Ok(Some(locs.get(1).map(|(s, e)| &text[p + s..p + e])))
        };
        let mut tries = 0;
        if self.greedy {
            let mut end = text.len().min(limit.saturating_add(lit.len));
            if let (Some(Shape::UpTo { min, .. }), Some(t)) = (self.shape, tail_at) {
                // The group runs to the final literal's last occurrence and takes at least `min`
                // characters: a literal ending later is no candidate.
                end = end.min(t.saturating_sub(min));
            }
            // The common case, one occurrence: two forward searches (vectorized) find it faster
            // than the reverse one; the first, a batch's search may have done (an occurrence
            // that does not end by `end` is the first of none that do). A literal of one byte
            // (a space: seldom alone in a line) is looked for from the end at once.
            match known.literal {
                Some(f) if f.first + lit.len > end => return Ok(None),
                Some(Found { first, once: true }) => return try_at(first),
                Some(_) => {}
                None if lit.len > 1 => {
                    if let Some(p) = lit.fwd.find(&bytes[..end]) {
                        if lit.fwd.find(&bytes[p + 1..end]).is_none() {
                            return try_at(p);
                        }
                    }
                }
                None => {}
            }
            while let Some(p) = lit.rev.rfind(&bytes[..end]) {
                if let Some(g) = try_at(p)? {
                    return Ok(Some(g));
                }
                tries += 1;
                if tries == MAX_TRIES {
                    return Err(Undecided);
                }
                end = p + lit.len - 1;
            }
        } else {
            let mut from = known.literal.map_or(0, |f| f.first);
            while let Some(p) = lit.fwd.find(&bytes[from..]).map(|i| from + i).filter(|&p| p <= limit) {
                if let Some(g) = try_at(p)? {
                    return Ok(Some(g));
                }
                tries += 1;
                if tries == MAX_TRIES {
                    return Err(Undecided);
                }
                from = p + 1;
            }
        }
        Ok(None)
    }
}

impl Shape {
    /// The shape of `rest` (Q after its leading literal; `tail`: Q ends with a literal), if it
    /// has one.
    fn of(rest: &[Hir], tail: bool) -> Option<Self> {
        let (group, after) = rest.split_first()?;
        let HirKind::Capture(cap) = group.kind() else { return None };
        if cap.index != 1 {
            return None;
        }
        match (after, tail) {
            ([], _) => {
                let (digits, fraction) = match cap.sub.kind() {
                    HirKind::Concat(items) => match items.as_slice() {
                        [digits, fraction] => (digits, Some(fraction)),
                        _ => return None,
                    },
                    _ => (&*cap.sub, None),
                };
                if !is_digits(digits) {
                    return None;
                }
                let Some(fraction) = fraction else { return Some(Self::Number { fraction: false }) };
                let HirKind::Repetition(opt) = fraction.kind() else { return None };
                let inner = match opt.sub.kind() {
                    HirKind::Capture(c) => &*c.sub,
                    _ => &*opt.sub,
                };
                let HirKind::Concat(items) = inner.kind() else { return None };
                let [point, digits] = items.as_slice() else { return None };
                let point_ok = matches!(point.kind(), HirKind::Literal(l) if &*l.0 == b".");
                (opt.min == 0 && opt.max == Some(1) && opt.greedy && point_ok && is_digits(digits))
                    .then_some(Self::Number { fraction: true })
            }
            ([_literal], true) => {
                let HirKind::Repetition(rep) = cap.sub.kind() else { return None };
                let dotall = dot_dotall(rep.sub.as_ref())?;
                (rep.min <= 1 && rep.max.is_none() && rep.greedy)
                    .then_some(Self::UpTo { min: rep.min as usize, dotall })
            }
            _ => None,
        }
    }

    /// The span of group 1 when the shape matches at `at` (just after Q's leading literal) in
    /// `text`, `None` when it does not; `end`: Q's matches end no later (with `UpTo`, the end of
    /// the last occurrence of the final literal, `tail`).
    fn at(self, text: &[u8], at: usize, end: usize, tail: &[u8]) -> Result<Option<(usize, usize)>, Undecided> {
        // Digits from `from`: where they stop; a byte that is not ASCII might be a digit too.
        let digits = |from: usize| -> Result<usize, Undecided> {
            // A plain loop: at opt-level "z" an iterator chain here is a call a byte.
            let mut end = from;
            while end < text.len() && text[end].is_ascii_digit() {
                end += 1;
            }
            match text.get(end) {
                Some(b) if !b.is_ascii() => Err(Undecided),
                _ => Ok(end),
            }
        };
        match self {
            Self::Number { fraction } => {
                let whole = digits(at)?;
                if whole == at {
                    return Ok(None);
                }
                if fraction && text.get(whole) == Some(&b'.') {
                    let part = digits(whole + 1)?;
                    if part > whole + 1 {
                        return Ok(Some((at, part)));
                    }
                }
                Ok(Some((at, whole)))
            }
            Self::UpTo { min, dotall } => {
                let stop = end.wrapping_sub(tail.len());
                if end < tail.len() || text.get(stop..end) != Some(tail) {
                    return Err(Undecided);
                }
                if stop < at + min {
                    return Ok(None);
                }
                if !dotall && memchr::memchr(b'\n', &text[at..stop]).is_some() {
                    return Err(Undecided);
                }
                Ok(Some((at, stop)))
            }
        }
    }
}

/// `\d+` (greedy), or another class that is the ASCII digits on ASCII.
fn is_digits(hir: &Hir) -> bool {
    let HirKind::Repetition(rep) = hir.kind() else { return false };
    let HirKind::Class(Class::Unicode(class)) = rep.sub.kind() else { return false };
    let ascii: Vec<(char, char)> =
        class.ranges().iter().filter(|r| r.start().is_ascii()).map(|r| (r.start(), r.end().min('\x7F'))).collect();
    rep.min == 1 && rep.max.is_none() && rep.greedy && ascii == [('0', '9')]
}

/// Whether `hir` is `.`: `Some(false)` without DOTALL (anything but `\n`), `Some(true)` with it
/// (anything); `None` for any other class or item.
fn dot_dotall(hir: &Hir) -> Option<bool> {
    let HirKind::Class(Class::Unicode(class)) = hir.kind() else { return None };
    let ranges: Vec<(char, char)> = class.ranges().iter().map(|r| (r.start(), r.end())).collect();
    match ranges.as_slice() {
        [('\0', '\t'), ('\u{B}', '\u{10FFFF}')] => Some(false),
        [('\0', '\u{10FFFF}')] => Some(true),
        _ => None,
    }
}

/// The items of a concatenation (one item otherwise).
fn items_of(hir: &Hir) -> Vec<Hir> {
    match hir.kind() {
        HirKind::Concat(items) => items.clone(),
        _ => vec![hir.clone()],
    }
}

/// Text every match contains, up to ASCII case, on a line that is all ASCII: the longest run of
/// top-level items that are ASCII literals or classes whose ASCII members are one character or a
/// letter's two cases (`(?i)loss` is `[Ll][Oo][Ssſ][Ssſ]`: on an ASCII line, `loss` in any case).
/// Lowercase; at least three characters.
pub(super) fn folded_required(translated: &str) -> Option<Box<[u8]>> {
    let hir = regex_syntax::ParserBuilder::new().build().parse(translated).ok()?;
    let HirKind::Concat(items) = hir.kind() else { return None };
    let best = folded_runs(items).into_iter().max_by_key(|(_, _, run)| run.len())?.2;
    (best.len() >= 3).then(|| best.into_boxed_slice())
}

/// The runs of `items` that are ASCII literals or classes of one ASCII character or a letter's two
/// cases (on ASCII), each with the index of its first item and the index after its last,
/// lowercase.
fn folded_runs(items: &[Hir]) -> Vec<(usize, usize, Vec<u8>)> {
    let mut runs: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    let mut open = false;
    for (i, item) in items.iter().enumerate() {
        let piece: Option<Vec<u8>> = match item.kind() {
            HirKind::Literal(lit) if lit.0.is_ascii() => Some(lit.0.to_ascii_lowercase()),
            HirKind::Class(class @ Class::Unicode(_)) => {
                let set = ascii_members(class);
                // The smallest member: a letter's upper case, when there are two.
                let first = set.trailing_zeros() as u8;
                let lower = first.to_ascii_lowercase();
                match set.count_ones() {
                    1 => Some(vec![lower]),
                    2 if first.is_ascii_uppercase() && set >> lower & 1 != 0 => Some(vec![lower]),
                    _ => None,
                }
            }
            _ => None,
        };
        match (piece, open, runs.last_mut()) {
            (Some(p), true, Some((_, end, run))) => {
                run.extend(p);
                *end = i + 1;
            }
            (Some(p), _, _) => {
                runs.push((i, i + 1, p));
                open = true;
            }
            (None, _, _) => open = false,
        }
    }
    runs
}

/// The ASCII bytes (a bit each) a match of `hir` on ASCII text can start with, when every match
/// has at least one character; `None` when it may be empty or its first character is not a
/// class, a literal or a repetition, group, concatenation or alternation of those.
fn first_ascii(hir: &Hir) -> Option<u128> {
    if hir.properties().minimum_len()? == 0 {
        return None;
    }
    match hir.kind() {
        // A literal whose first byte is not ASCII matches no ASCII text.
        HirKind::Literal(lit) => Some(lit.0.first().filter(|b| b.is_ascii()).map_or(0, |&b| 1u128 << b)),
        HirKind::Class(class) => Some(ascii_members(class)),
        HirKind::Repetition(rep) => first_ascii(&rep.sub),
        HirKind::Capture(cap) => first_ascii(&cap.sub),
        HirKind::Concat(items) => first_ascii(items.first()?),
        HirKind::Alternation(alts) => alts.iter().try_fold(0u128, |set, a| Some(set | first_ascii(a)?)),
        HirKind::Empty | HirKind::Look(_) => None,
    }
}

/// The ASCII characters `class` matches, a bit each.
fn ascii_members(class: &Class) -> u128 {
    let ranges: Vec<(u32, u32)> = match class {
        Class::Unicode(c) => c.ranges().iter().map(|r| (r.start() as u32, r.end() as u32)).collect(),
        Class::Bytes(c) => c.ranges().iter().map(|r| (u32::from(r.start()), u32::from(r.end()))).collect(),
    };
    ranges.into_iter().filter(|&(a, _)| a < 128).fold(0, |set, (a, b)| (a..=b.min(127)).fold(set, |s, c| s | 1 << c))
}

/// The first position at or after `from` where `needle` (lowercase ASCII) occurs in `hay` up to
/// ASCII case.
pub(crate) fn find_folded(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if needle.len() >= 2 {
        // SAFETY: SSE2 is part of every x86-64 processor (the target's baseline).
        return unsafe { find_folded_sse2(hay, needle, from) };
    }
    find_folded_bytewise(hay, needle, from)
}

/// [`find_folded`] sixteen positions at a time (SSE2, in every x86-64): a position is a candidate
/// when its byte and the byte `needle.len() - 1` after it are the needle's first and last up to
/// case, which one comparison of each byte with bit 5 set tells exactly for a letter (no other
/// byte has a letter's lowercase once bit 5 is set); the candidates' middle is compared then.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn find_folded_sse2(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    use std::arch::x86_64::{
        _mm_and_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    let last = needle.len() - 1;
    let (first, final_) = (needle[0], needle[last]);
    let bit5 = |b: u8| _mm_set1_epi8(if b.is_ascii_lowercase() { 0x20 } else { 0 });
    let (want_first, fold_first) = (_mm_set1_epi8(first as i8), bit5(first));
    let (want_final, fold_final) = (_mm_set1_epi8(final_ as i8), bit5(final_));
    let mut at = from;
    while at + last + 16 <= hay.len() {
        // SAFETY: both sixteen-byte loads end within `hay` (`at + last + 16 <= hay.len()`).
        let (a, b) = unsafe {
            (_mm_loadu_si128(hay.as_ptr().add(at).cast()), _mm_loadu_si128(hay.as_ptr().add(at + last).cast()))
        };
        let both = _mm_and_si128(
            _mm_cmpeq_epi8(_mm_or_si128(a, fold_first), want_first),
            _mm_cmpeq_epi8(_mm_or_si128(b, fold_final), want_final),
        );
        let mut mask = _mm_movemask_epi8(both) as u32;
        while mask != 0 {
            let p = at + mask.trailing_zeros() as usize;
            if hay[p + 1..p + last].eq_ignore_ascii_case(&needle[1..last]) {
                return Some(p);
            }
            mask &= mask - 1;
        }
        at += 16;
    }
    find_folded_bytewise(hay, needle, at)
}

/// [`find_folded`] one candidate first byte at a time (the end of the text, other machines).
fn find_folded_bytewise(hay: &[u8], needle: &[u8], mut from: usize) -> Option<usize> {
    let Some((&first, rest)) = needle.split_first() else { return Some(from) };
    while let Some(i) = memchr::memchr2(first, first.to_ascii_uppercase(), hay.get(from..)?) {
        let at = from + i;
        if hay.get(at + 1..at + 1 + rest.len()).is_some_and(|h| h.eq_ignore_ascii_case(rest)) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// `needle` (lowercase ASCII) occurs in `hay` up to ASCII case.
pub(super) fn contains_folded(hay: &[u8], needle: &[u8]) -> bool {
    find_folded(hay, needle, 0).is_some()
}

#[cfg(test)]
impl Fast {
    /// The shape after the leading literal, for the tests.
    pub(super) fn shape(&self) -> Option<Shape> {
        self.shape
    }

    /// The folded prefix, for the tests.
    pub(super) fn folded_prefix(&self) -> Option<&[u8]> {
        self.folded.as_deref()
    }

    /// What may follow the folded prefix, for the tests.
    pub(super) fn folded_next_of(&self) -> Option<u128> {
        self.folded_next
    }

    /// The search up to case one byte at a time, for the tests.
    pub(super) fn find_folded_bytewise_of(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
        find_folded_bytewise(hay, needle, from)
    }

    /// The candidate search on an ASCII line, for the tests.
    pub(super) fn folded_candidates_of(&self, text: &str) -> Result<bool, Undecided> {
        let (Some(needle), Some(anchored)) = (&self.folded, &self.anchored) else { return Err(Undecided) };
        self.folded_candidates(text, needle, anchored, self.limit(text, Known::default()), None)
    }
}

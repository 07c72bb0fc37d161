use super::fast;
use super::*;

fn m(p: &str, text: &str) -> bool {
    PyRegex::new(p).unwrap_or_else(|e| panic!("{p:?}: {e}")).is_match(text)
}

fn refused(p: &str) -> String {
    PyRegex::new(p).map(|_| ()).expect_err(p).problem
}

#[test]
fn match_is_anchored_at_the_start_only() {
    assert!(m("foo", "foobar\n"));
    assert!(!m("bar", "foobar\n"));
    assert!(m(".*bar", "foobar\n"));
    assert!(m("a|b", "b\n"), "the anchor covers every alternative");
}

#[test]
fn dollar_matches_before_the_final_newline_and_at_the_end() {
    assert!(m("foo$", "foo\n"));
    assert!(m("foo$", "foo"));
    assert!(!m("foo$", "foox\n"));
    assert!(m(r"foo\Z", "foo"));
    assert!(!m(r"foo\Z", "foo\n"));
    assert!(m(r"foo\s", "foo\n"), "the newline is part of the line, as Python reads it");
    assert!(!m("foo.", "foo\n"));
    assert!(m("(?s)foo.", "foo\n"));
}

#[test]
fn classes_have_pythons_unicode_meaning() {
    assert!(m(r"\w", "é"));
    assert!(m(r"\w", "²"), "No is a word character in Python");
    assert!(!m(r"\w", "\u{301}"), "a combining mark is not");
    assert!(!m(r"\w", "‿"), "nor connector punctuation other than _");
    assert!(m(r"\s", "\u{1C}"));
    assert!(!m(r"\S", "\u{1F}"));
    assert!(m(r"\d", "٣"));
    assert!(m(r"[\w]", "é") && m(r"[^\W]", "é") && !m(r"[^\w]", "é"));
    assert!(m(r"[\s]", "\u{1D}"));
    assert!(m("[[]", "["), "[ inside a class is a literal");
    assert!(m("[a&&b]", "&") && m("[a~~b]", "~") && m("[--z]", "-") && m("[]a]", "]") && m("[^]a]", "b"));
    assert!(m(r"[\b]", "\u{8}"));
    assert!(m("[a-]", "-") && m("[-a]", "-"));
}

#[test]
fn escapes_quantifiers_groups_and_flags() {
    assert!(m(r"\x41\u0042\U00000043\101\0", "ABCA\0"));
    assert!(m(r"\.\*\[\(", ".*[("));
    assert!(m("a{,2}b", "aab") && m("a{2}", "aa") && !m("a{2}", "a"));
    assert!(m("{a}", "{a}") && m("a{", "a{") && m("a{x}", "a{x}") && m("a{1,2", "a{1,2"));
    assert!(m("(?P<loss>[0-9.]+)x", "1.5x"));
    assert!(m("(?i)error", "ERROR") && m("(?i:e)RR", "eRR") && !m("(?i:e)RR", "err"));
    assert!(m("a(?#comment)b", "ab"));
    assert!(m("(?m)a$", "a\n") && m("(?-i:a)", "a"));
    let re = PyRegex::new(r".*loss: (\d+(\.\d+)?)").unwrap();
    assert_eq!(re.groups(), 2);
    assert_eq!(re.match_group1("step 3 loss: 2.50 lr\n"), Some(Some("2.50")));
    assert_eq!(re.match_group1("step\n"), None);
    let optional = PyRegex::new("(a)?b").unwrap();
    assert_eq!(optional.match_group1("b"), Some(None));
}

#[test]
fn constructs_that_differ_are_refused_by_name() {
    for (p, want) in [
        ("(?=a)", "lookahead"),
        ("(?!a)", "lookahead"),
        ("(?<=a)b", "lookbehind"),
        ("(?<!a)b", "lookbehind"),
        ("(a)\\1", "backreferences"),
        ("(?P<n>a)(?P=n)", "backreferences"),
        ("(?(1)a|b)", "conditional"),
        ("(?>a)", "atomic"),
        ("a*+", "possessive"),
        ("a{1,2}+", "possessive"),
        ("(?x)a", "verbose"),
        ("(?a)\\w", "ASCII"),
        ("(?<n>a)", "unknown extension ?<"),
        ("\\N{DIGIT ONE}", "named characters"),
        ("a(?i)b", "global flags not at the start"),
    ] {
        let e = refused(p);
        assert!(e.contains(want), "{p:?}: {e}");
    }
}

#[test]
fn python_syntax_errors_are_refused() {
    for (p, want) in [
        ("*a", "nothing to repeat"),
        ("^*", "nothing to repeat"),
        ("a**", "multiple repeat"),
        ("(a", "missing )"),
        ("a)", "unbalanced parenthesis"),
        ("[a", "unterminated character set"),
        ("[z-a]", "bad character range"),
        ("[\\d-z]", "bad character range"),
        ("\\q", "bad escape \\q"),
        ("\\z", "bad escape \\z"),
        ("\\p{L}", "bad escape \\p"),
        ("a\\", "bad escape (end of pattern)"),
        ("\\x4", "incomplete escape"),
        ("\\ud800", "surrogate"),
        ("\\777", "octal escape"),
        ("(?P<1a>x)", "bad character in group name"),
        ("(?P<n>a)(?P<n>b)", "redefinition"),
        ("(?)", "missing flag"),
        ("a{3,2}", "regex engine"),
    ] {
        let e = refused(p);
        assert!(e.contains(want), "{p:?}: {e}");
    }
}

#[test]
fn the_required_text_is_what_every_match_contains() {
    let req = |p: &str| translate(p).unwrap().required;
    assert_eq!(req(".*Train Epoch.*").as_deref(), Some("Train Epoch"));
    assert_eq!(req(r".*\[Epoch 0 Batch \d+.*").as_deref(), Some("[Epoch 0 Batch "));
    assert_eq!(req("abcd*ef").as_deref(), Some("abc"), "the quantified d is not required");
    assert_eq!(req(r".*training_loss_step (\d+)").as_deref(), Some("training_loss_step "));
    assert_eq!(req("(Train Epoch)"), None, "inside a group: not looked at");
    assert_eq!(req("ab|cd"), None, "an alternative at the top");
    assert_eq!(req("(?i).*error"), None, "case-insensitive");
    assert_eq!(req("a.b"), None, "one character is not worth a search");
    // A line without the text is ruled out before the automaton; with it, the automaton decides.
    let re = PyRegex::new(".*Train Epoch: (\\d+)").unwrap();
    assert_eq!(re.match_group1("x Train Epoch: 7\n"), Some(Some("7")));
    assert_eq!(re.match_group1("x Train Epoch: x\n"), None);
    assert_eq!(re.match_group1("x Train\n"), None);
}

/// The general path's answer (the whole pattern's automaton), for comparing the fast path with.
fn general<'t>(re: &PyRegex, text: &'t str) -> Option<Option<&'t str>> {
    let caps = re.regex.captures(text)?;
    Some(caps.get(1).map(|m| m.as_str()))
}

/// The fast path exists for `p` and agrees with the general path on every line.
fn agrees(p: &str, lines: &[&str]) {
    let re = PyRegex::new(p).unwrap();
    assert!(re.fast.is_some(), "{p:?} has a fast path");
    for l in lines {
        assert_eq!(re.is_match(l), re.regex.is_match(l), "{p:?} on {l:?}: is_match");
        assert_eq!(re.match_group1(l), general(&re, l), "{p:?} on {l:?}: group 1");
        // As a batch's search leaves it: the first occurrence of the needle, if any.
        // As a batch's search leaves a line (a newline only at its end).
        if l.find('\n').is_some_and(|i| i + 1 < l.len()) {
            continue;
        }
        let found = searched(&re, l);
        if found == Some(None) {
            assert!(!re.regex.is_match(l), "{p:?} on {l:?}: a line without the needle matched");
            continue;
        }
        let at = found.flatten();
        assert_eq!(re.is_match_at(l, at), re.regex.is_match(l), "{p:?} on {l:?}: is_match_at({at:?})");
        assert_eq!(re.match_group1_at(l, at), general(&re, l), "{p:?} on {l:?}: group 1 at {at:?}");
    }
}

/// What a batch's search finds in `line` for `re`: `None` when it has no needle, else where it
/// occurs, if it does.
fn searched(re: &PyRegex, line: &str) -> Option<Option<super::Found>> {
    let bytes = line.as_bytes();
    let needle = re.needle(line.is_ascii())?;
    Some(needle.find(bytes, 0).map(|first| super::Found { first, once: needle.find(bytes, first + 1).is_none() }))
}

#[test]
fn the_search_up_to_case_finds_what_a_byte_by_byte_one_does() {
    // Every offset around the sixteen-byte blocks, letters and the bytes one bit from them.
    let alphabet = b"lLoOsS_@`[{ \x80\xCC\xEC-";
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    for round in 0..5_000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let len = (seed % 70) as usize;
        let hay: Vec<u8> = (0..len).map(|k| alphabet[((seed >> (k % 50)) as usize + k * 7) % alphabet.len()]).collect();
        for needle in [&b"loss"[..], b"lo", b"l_s", b"@o", b"s{"] {
            let from = round % 5;
            let want = (from..len.saturating_sub(needle.len() - 1))
                .find(|&p| hay[p..p + needle.len()].eq_ignore_ascii_case(needle));
            assert_eq!(fast::find_folded(&hay, needle, from), want, "{hay:?} {needle:?} from {from}");
            assert_eq!(fast::Fast::find_folded_bytewise_of(&hay, needle, from), want, "{hay:?} {needle:?} from {from}");
        }
    }
}

const LINES: &[&str] = &[
    "a: 1 b: 2 c: 3\n",
    "a: 1 b: 2 c: x\n",
    "a: x b: 2 c: x\n",
    "no colon here\n",
    "ERROR: Loss: 3\n",
    "error: loss: nan\n",
    "a: 1\nb: 2\n",
    "a: 1 b: 2",
    ": \n",
    ":",
    "\n",
    "",
    "x: é² y: ٣\n",
    "step 12 step 34 step x\n",
    "loss: 1 TFLOPs 2 TFLOPs\n",
    "speed: 123 TFLOPs, mem 61.2 GiB                 \n",
    "a: 1 a: 2 a: 3 a: 4 a: 5 a: 6 a: 7 a: x\n",
];

#[test]
fn a_leading_dot_star_takes_the_fast_path_with_pythons_answers() {
    // Greedy: group 1 from the last occurrence where the rest matches; lazy: the first.
    let greedy = PyRegex::new(r".*: (\d+)").unwrap();
    assert_eq!(greedy.match_group1("a: 1 b: 2 c: x\n"), Some(Some("2")));
    let lazy = PyRegex::new(r".*?: (\d+)").unwrap();
    assert_eq!(lazy.match_group1("a: x b: 2 c: 3\n"), Some(Some("2")));
    assert_eq!(
        PyRegex::new(r".* (.+)TFLOPs.*").unwrap().match_group1("speed: 123 TFLOPs, mem  \n"),
        Some(Some("123 "))
    );
    // The rest must start before the first newline (without DOTALL), anywhere with it.
    assert!(!m(".*b: 2", "a: 1\nb: 2\n") && m("(?s).*b: 2", "a: 1\nb: 2\n"));
    assert!(m(".*\n", "abc\n") && !m(".*x$", "xy\n"));
    for p in [
        r".*: (\d+)",
        r".*: (\d+).*",
        r".*?: (\d+)",
        r".*?: (\d+).*?",
        r".*: (\S+)",
        r".*(\d+)",
        r".* (.+)TFLOPs.*",
        r"(?i).*loss: (\S+)",
        r"(?s).*: (\d+)",
        r"(?s).*?: (\d+)",
        r".*a: (\d)\b",
        r".*: ((\d)+)?",
        r".*: (x)?\d",
        ".*b: 2",
        ".*: 2.*",
        "(?i).*LOSS",
        ".*$",
        r".*\n",
        ".*x$",
        ".*step",
        ".*é²",
    ] {
        agrees(p, LINES);
    }
    // A line with more failing candidates than the fast path tries goes to the general path.
    let re = PyRegex::new(r".*a: (\d)").unwrap();
    assert_eq!(
        re.fast.as_ref().unwrap().match_group1("a: 1 a: x a: x a: x a: x a: x\n", Default::default()),
        Err(fast::Undecided)
    );
    assert_eq!(re.match_group1("a: 1 a: x a: x a: x a: x a: x\n"), Some(Some("1")));
    // Candidates after the last occurrence of the rest's longest literal are not tried.
    let tflops = PyRegex::new(r".* (.+)TFLOPs.*").unwrap();
    let padded = "speed: 123 TFLOPs, mem 61.2 GiB                 \n";
    assert_eq!(tflops.fast.as_ref().unwrap().match_group1(padded, Default::default()), Ok(Some(Some("123 "))));
}

#[test]
fn other_shapes_keep_the_general_path() {
    for p in
        ["step", "(.*)x", ".*a|b", "[^x]*y", ".+x", r"\s*x", "(?:.*)*x", ".{0,5}x", "a.*b", ".*", ".*.*", "(?i)x.*"]
    {
        let re = PyRegex::new(p).unwrap();
        assert!(re.fast.is_none(), "{p:?} has no fast path");
    }
    // A trailing repetition that captures is kept in the rest: group 1 is its.
    let re = PyRegex::new(r".*a(b*)").unwrap();
    assert_eq!(re.match_group1("ab abb\n"), Some(Some("bb")));
    agrees(r".*a(b*)", &["ab abb\n", "a\n", "xb\n"]);
}

#[test]
fn case_insensitive_text_rules_out_ascii_lines_only() {
    let folded = |p: &str| PyRegex::new(p).unwrap().folded.map(|b| String::from_utf8(b.into_vec()).unwrap());
    assert_eq!(folded("(?i).*loss[=: ]+nan").as_deref(), Some("loss"));
    assert_eq!(folded("(?i)x.*error: code").as_deref(), Some("error: code"));
    assert_eq!(folded("(?i).*ab"), None, "two characters are not worth it");
    assert_eq!(folded(".*Train Epoch"), None, "the case-sensitive required text does it");
    assert_eq!(folded("(?i)(loss)na"), None, "inside a group: not looked at");
    assert_eq!(folded("(?i)lo[sx]s"), None, "a class of two letters is no character");
    let nan = "(?i).*loss[=: ]+nan";
    assert!(m(nan, "step 3 LoSs: NaN\n") && m(nan, "step 3 loss=nan\n"));
    assert!(!m(nan, "step 3 loss 1.5\n") && !m(nan, "step 3 los: nan\n"));
    // Not ASCII: the automaton decides (Unicode case folding: ſ is an s).
    assert!(m(nan, "é loſs: nan\n") && m("(?i).*kelvin", "\u{212A}elvin\n"));
    assert!(!m(nan, "é loss: 1\n"));
    agrees(nan, &["LOSS: NAN\n", "loss = nan\n", "x\n", "é loſs: nan\n", "é\n", "lossnan\n"]);
    // The rest starts with case-insensitive text: on an ASCII line it is tried only where that
    // text occurs; more failing occurrences than the fast path tries go to the search.
    let re = PyRegex::new(nan).unwrap();
    assert_eq!(re.fast.as_ref().and_then(|f| f.folded_prefix()), Some(&b"loss"[..]));
    let many = "loss: 1 LOSS: 2 loss=3 loss 4 Loss: NaN\n";
    assert!(re.fast.as_ref().unwrap().folded_candidates_of(many).is_err());
    // An occurrence followed by a byte `[=: ]+nan` cannot start with is no try.
    let skipped = "loss_1 LOSS_2 loss_3 loss_4 loss_5 lossy Loss: NaN\n";
    assert_eq!(re.fast.as_ref().unwrap().folded_candidates_of(skipped), Ok(true));
    assert_eq!(re.fast.as_ref().unwrap().folded_candidates_of("loss_1 loss\n"), Ok(false));
    agrees(nan, &[many, skipped, "loss_1 loss: nan\n", "loss_1 loss: 1\n", "a\nloss: nan\n", "loss", "loss \n"]);
    assert!(PyRegex::new("(?i).*lo[sx]s: nan").unwrap().fast.unwrap().folded_prefix().is_none());
}

#[test]
fn what_may_follow_a_folded_prefix_is_known_from_the_syntax_or_not_at_all() {
    let next = |p: &str| PyRegex::new(p).unwrap().fast.unwrap().folded_next_of();
    let set = |bytes: &[u8]| bytes.iter().fold(0u128, |s, &b| s | 1 << b);
    assert_eq!(next("(?i).*loss[=: ]+nan"), Some(set(b"=: ")));
    assert_eq!(next("(?i).*loss(:|=) nan"), Some(set(b":=")));
    assert_eq!(next("(?i).*loss(?:x|y)+"), Some(set(b"xXyY")));
    // A rest that may match nothing, or starts with an assertion: no check.
    assert_eq!(next("(?i).*loss[=: ]*nan"), None);
    assert_eq!(next("(?i).*loss\\bnan"), None);
    assert_eq!(next("(?i).*loss(?:|x)"), None);
    // Not ASCII: nothing on an ASCII line goes on.
    assert_eq!(next("(?i).*lossé"), Some(0));
    agrees("(?i).*lossé", &["lossé\n", "loss e\n"]);
    agrees("(?i).*loss(?:x|y)+", &["lossx\n", "LOSSY\n", "loss_x lossz lossY\n", "loss\n"]);
}

#[test]
fn a_rest_ending_in_a_literal_is_searched_up_to_its_last_occurrence() {
    // The anchored search from a candidate stops after the last "TFLOPs": the same groups.
    for l in ["a 1 TFLOPs b 2 TFLOPs c\n", "a 1 TFLOPs\n", "a TFLOPs 1\n", "x 5 TFLOPsTFLOPs\n", " éTFLOPs\n"] {
        let re = PyRegex::new(r".* (.+)TFLOPs").unwrap();
        assert_eq!(re.match_group1(l), general(&re, l), "{l:?}");
    }
    assert_eq!(PyRegex::new(r".* (.+)TFLOPs").unwrap().match_group1("a 1 TFLOPs b 2 TFLOPs c\n"), Some(Some("2 ")));
    assert_eq!(PyRegex::new(r".*?: (.+)!").unwrap().match_group1("a: x! b: y!\n"), Some(Some("x! b: y")));
    agrees(r".*?: (.+)!", &["a: x! b: y!\n", "a: !\n", "a: x\n"]);
    // The final literal the longest: the start is bounded by its last occurrence; a longer one
    // in the middle bounds it instead.
    let lines = ["a 1 TFLOPs b 2 TFLOPs\n", " TFLOPs 1 TFLOPs\n", "TFLOPs 1\n", "a 1\nb 2 TFLOPs\n", "  TFLOPs\n"];
    agrees(r".* (.+)TFLOPs", &lines);
    agrees(
        r".* (.+) TFLOPs: (\d+)x",
        &["a 1 TFLOPs: 2x 3 TFLOPs: 4x\n", "a b TFLOPs: 1\n", " 1 TFLOPs: 9x TFLOPs: 8\n"],
    );
    agrees(r".*x(\d+) speed (.+)!", &["x1 speed a! x2 speed b!\n", "x1 speed !\n", "x speed a!\n"]);
}

/// The metric shapes matched without an automaton, with the patterns that have them.
const SHAPED: &[(&str, fast::Shape)] = &[
    (r".*training_loss_step (\d+(?:\.\d+)?).*", fast::Shape::Number { fraction: true }),
    (r".*'samples/sec': (\d+(\.\d+)?).*", fast::Shape::Number { fraction: true }),
    (r".*: (\d+)", fast::Shape::Number { fraction: false }),
    (r".*?: (\d+(?:\.\d+)?)", fast::Shape::Number { fraction: true }),
    (r".* (.+)TFLOPs.*", fast::Shape::UpTo { min: 1, dotall: false }),
    (r".*: (.*)TF", fast::Shape::UpTo { min: 0, dotall: false }),
    (r"(?s).* (.+)TF", fast::Shape::UpTo { min: 1, dotall: true }),
    (r".*?: (.+)TF", fast::Shape::UpTo { min: 1, dotall: false }),
];

#[test]
fn metric_shapes_are_recognized_from_the_syntax_tree_only() {
    for &(p, shape) in SHAPED {
        let re = PyRegex::new(p).unwrap();
        assert_eq!(re.fast.as_ref().and_then(|f| f.shape()), Some(shape), "{p:?}");
    }
    for p in [
        r".*: (\d+)x",
        r".*: (\d*)",
        r".*: (\d+?)",
        r".*: (\d+(?:\.\d*)?)",
        r".*: (\d+(?:,\d+)?)",
        r".*: ([0-9a-f]+)",
        r".*: (.+?)TF",
        r".*: (.+)",
        r".*: (.+)TF\d",
        r".*: (\w+)TF",
        r".*: (\d+)(\d)",
        r".*: ((\d+))",
    ] {
        let re = PyRegex::new(p).unwrap();
        assert_eq!(re.fast.as_ref().and_then(|f| f.shape()), None, "{p:?}");
    }
    let tp = PyRegex::new(r".*'samples/sec': (\d+(\.\d+)?).*").unwrap();
    assert_eq!(tp.match_group1("x 'samples/sec': 812.5 y\n"), Some(Some("812.5")));
    assert_eq!(tp.match_group1("x 'samples/sec': 812. y\n"), Some(Some("812")));
    assert_eq!(tp.match_group1("x 'samples/sec': 812.5.6\n"), Some(Some("812.5")));
    assert_eq!(tp.match_group1("x 'samples/sec': .5\n"), None);
    // Not ASCII after the digits: a Unicode digit may go on; the general path decides.
    let f = tp.fast.as_ref().unwrap();
    assert_eq!(f.match_group1("'samples/sec': 81٣\n", Default::default()), Err(fast::Undecided));
    assert_eq!(tp.match_group1("'samples/sec': 81٣\n"), Some(Some("81٣")));
    // A newline between the literal and the final literal: the general path decides.
    let up_to = PyRegex::new(r"(?s).* (.+)TF").unwrap();
    assert_eq!(up_to.match_group1("a b\nc TF\n"), general(&up_to, "a b\nc TF\n"));
}

/// Pieces of lines for the shapes' differential: the literals, digits (one not ASCII), points,
/// newlines.
const SHAPE_PIECES: &[&str] = &[
    "training_loss_step ",
    "'samples/sec': ",
    ": ",
    " ",
    "TFLOPs",
    "TF",
    "1",
    "23",
    ".",
    "4.5",
    "x",
    "é",
    "٣",
    "\n",
    "..",
    "0",
];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]
    /// The shapes give the general path's answer on every line: whether it matches, group 1.
    #[test]
    fn metric_shapes_agree_with_the_general_path(
        pieces in proptest::collection::vec(0..SHAPE_PIECES.len(), 0..14),
        newline: bool,
    ) {
        let mut line: String = pieces.iter().map(|&i| SHAPE_PIECES[i]).collect();
        if newline {
            line.push('\n');
        }
        static COMPILED: std::sync::OnceLock<Vec<PyRegex>> = std::sync::OnceLock::new();
        let compiled = COMPILED.get_or_init(|| SHAPED.iter().map(|(p, _)| PyRegex::new(p).unwrap()).collect());
        for re in compiled {
            let p = re.source();
            proptest::prop_assert_eq!(re.match_group1(&line), general(re, &line), "{:?} on {:?}", p, line);
            proptest::prop_assert_eq!(re.is_match(&line), re.regex.is_match(&line), "{:?} on {:?}", p, line);
            // As a batch line, with what the batch's search found (a line without the needle is
            // not shown to the pattern).
            let found = searched(re, &line);
            if line.find('\n').is_none_or(|i| i + 1 == line.len()) && found != Some(None) {
                let at = found.flatten();
                proptest::prop_assert_eq!(re.match_group1_at(&line, at), general(re, &line), "{:?} on {:?} at {:?}", p, line, at);
                proptest::prop_assert_eq!(re.is_match_at(&line, at), re.regex.is_match(&line), "{:?} on {:?} at {:?}", p, line, at);
            }
        }
    }
}

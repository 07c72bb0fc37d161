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
fn a_line_without_the_patterns_text_does_not_match() {
    let re = PyRegex::new(".*Train Epoch: (\\d+)").unwrap();
    assert_eq!(re.match_group1("x Train Epoch: 7\n"), Some(Some("7")));
    assert_eq!(re.match_group1("x Train Epoch: x\n"), None);
    assert_eq!(re.match_group1("x Train\n"), None);
}

/// The general path's answer (the whole pattern's automaton), for comparing the `.*Q` path with.
fn general<'t>(re: &PyRegex, text: &'t str) -> Option<Option<&'t str>> {
    group1(&re.anchored, &Input::new(text), text)
}

/// `p` is a `.*Q` whose Q never matches empty (else it is matched as a whole, and checked all
/// the same) and agrees with the general path on every line.
fn agrees(p: &str, lines: &[&str]) {
    let re = PyRegex::new(p).unwrap();
    let q = p.trim_start_matches("(?i)").trim_start_matches("(?s)").trim_start_matches(".*?").trim_start_matches(".*");
    let empty = ["$", ""].contains(&q);
    assert_eq!(re.rest.is_some(), !empty, "{p:?} is searched as .*Q");
    for l in lines {
        assert_eq!(re.is_match(l), re.anchored.is_match(l), "{p:?} on {l:?}: is_match");
        assert_eq!(re.match_group1(l), general(&re, l), "{p:?} on {l:?}: group 1");
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
    let re = PyRegex::new(r".*a: (\d)").unwrap();
    assert_eq!(re.match_group1("a: 1 a: x a: x a: x a: x a: x\n"), Some(Some("1")));
    // More starts of Q than are tried one by one: `\A(?:.*Q)` answers, the same.
    let many = "a: 1 a: 2 a: 3 a: 4 a: 5 a: 6 a: x\n";
    assert_eq!(re.match_group1(many), Some(Some("6")));
    assert_eq!(re.match_group1(many), general(&re, many));
    let tflops = PyRegex::new(r".* (.+)TFLOPs.*").unwrap();
    let padded = "speed: 123 TFLOPs, mem 61.2 GiB                 \n";
    assert_eq!(tflops.match_group1(padded), Some(Some("123 ")));
}

#[test]
fn other_shapes_keep_the_general_path() {
    for p in
        ["step", "(.*)x", ".*a|b", "[^x]*y", ".+x", r"\s*x", "(?:.*)*x", ".{0,5}x", "a.*b", ".*", ".*.*", "(?i)x.*"]
    {
        let re = PyRegex::new(p).unwrap();
        assert!(re.rest.is_none(), "{p:?} is not searched as .*Q");
    }
    // A trailing repetition that captures is kept in the rest: group 1 is its.
    let re = PyRegex::new(r".*a(b*)").unwrap();
    assert_eq!(re.match_group1("ab abb\n"), Some(Some("bb")));
    agrees(r".*a(b*)", &["ab abb\n", "a\n", "xb\n"]);
}

#[test]
fn case_insensitive_patterns_match_as_python_does() {
    let nan = "(?i).*loss[=: ]+nan";
    assert!(m(nan, "step 3 LoSs: NaN\n") && m(nan, "step 3 loss=nan\n"));
    assert!(!m(nan, "step 3 loss 1.5\n") && !m(nan, "step 3 los: nan\n"));
    // Not ASCII: the automaton decides (Unicode case folding: ſ is an s).
    assert!(m(nan, "é loſs: nan\n") && m("(?i).*kelvin", "\u{212A}elvin\n"));
    assert!(!m(nan, "é loss: 1\n"));
    agrees(nan, &["LOSS: NAN\n", "loss = nan\n", "x\n", "é loſs: nan\n", "é\n", "lossnan\n"]);
    let many = "loss: 1 LOSS: 2 loss=3 loss 4 Loss: NaN\n";
    let skipped = "loss_1 LOSS_2 loss_3 loss_4 loss_5 lossy Loss: NaN\n";
    agrees(nan, &[many, skipped, "loss_1 loss: nan\n", "loss_1 loss: 1\n", "a\nloss: nan\n", "loss", "loss \n"]);
    agrees("(?i).*lo[sx]s: nan", &["LOXS: NAN\n", "loss: nan\n", "los: nan\n"]);
}

#[test]
fn case_insensitive_rests_agree_with_the_general_path() {
    agrees("(?i).*loss(:|=) nan", &["LOSS: nan\n", "loss= NAN\n", "loss nan\n"]);
    agrees("(?i).*loss\\bnan", &["lossnan\n", "loss nan\n"]);
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

/// Metric patterns of the `.*Q` shape.
const SHAPED: &[&str] = &[
    r".*training_loss_step (\d+(?:\.\d+)?).*",
    r".*'samples/sec': (\d+(\.\d+)?).*",
    r".*: (\d+)",
    r".*?: (\d+(?:\.\d+)?)",
    r".* (.+)TFLOPs.*",
    r".*: (.*)TF",
    r"(?s).* (.+)TF",
    r".*?: (.+)TF",
];

#[test]
fn metric_patterns_give_the_general_paths_group() {
    for p in SHAPED {
        agrees(p, &["x: 12 TF\n", "a 'samples/sec': 3.5 training_loss_step 2.25\n", "x: 1\ny: 2 TF\n"]);
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
        agrees(p, &["a: 12x b: 3TF\n", "a: 1,5 b: ff\n", "a: \n"]);
    }
    let tp = PyRegex::new(r".*'samples/sec': (\d+(\.\d+)?).*").unwrap();
    assert_eq!(tp.match_group1("x 'samples/sec': 812.5 y\n"), Some(Some("812.5")));
    assert_eq!(tp.match_group1("x 'samples/sec': 812. y\n"), Some(Some("812")));
    assert_eq!(tp.match_group1("x 'samples/sec': 812.5.6\n"), Some(Some("812.5")));
    assert_eq!(tp.match_group1("x 'samples/sec': .5\n"), None);
    // Not ASCII after the digits: a Unicode digit goes on.
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
        let compiled = COMPILED.get_or_init(|| SHAPED.iter().map(|p| PyRegex::new(p).unwrap()).collect());
        for re in compiled {
            let p = re.source();
            proptest::prop_assert_eq!(re.match_group1(&line), general(re, &line), "{:?} on {:?}", p, line);
            proptest::prop_assert_eq!(re.is_match(&line), re.anchored.is_match(&line), "{:?} on {:?}", p, line);
        }
    }
}

/// Issue 34 (hostile input): a pattern whose automaton has thousands of states makes the crate's
/// fallback engine take minutes on one long line; it is refused at compile time, naming the count.
#[test]
fn a_pattern_with_too_many_states_is_refused_naming_them() {
    let e = refused(r"(?:loss|[a-z]{1,6000}|\s)*?loss (\d+)");
    assert!(e.starts_with("too complex: its automaton has 12050 states, more than 2048"), "{e}");
    // The AWS examples' shapes and a bounded repetition of a few hundred are far below.
    for p in [r".*training_loss_step (\d+(?:\.\d+)?).*", r".*[0-9a-f]{32}.*", r"(?:loss|[a-z]{1,600}|\s)*?loss (\d+)"] {
        PyRegex::new(p).unwrap_or_else(|e| panic!("{p}: {e}"));
    }
}

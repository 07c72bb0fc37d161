//! The core library's modules form no cycle: a module that names `crate::x` (outside its unit
//! tests and doc comments) depends on `x`, and following those dependencies never comes back.
//! docs/architecture.md lists the modules in that order.
//!
//! File by file, too: a file depends on the files its `crate::`, `super::` and `self::` paths
//! name (`use` groups expanded, the root's re-exports followed; `mod` declarations are the tree,
//! not a dependency), and no files of the dry run, the trainer or the binary import each other
//! round.
//!
//! And no function of any crate is longer than 80 lines (signature to closing brace, unit tests
//! left out): a longer one is split by concern into named pieces.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `crate::x` names in code: comments, and everything from a unit-test module on, left out.
fn dependencies(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or_default();
    let mut deps = BTreeSet::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (i, _) in line.match_indices("crate::") {
            let name: String = line[i + 7..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
            if modules.contains(&name) {
                deps.insert(name);
            }
        }
    }
    deps
}

/// The modules in a cycle, if any (depth-first search with colours).
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            return Some(path[i..].to_vec());
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, graph, done, path) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|m| visit(m, graph, &mut done, &mut Vec::new()))
}

#[test]
fn the_core_librarys_modules_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/rankvisor-core/src");
    let modules: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name() != Some("lib.rs".as_ref()))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for m in &modules {
        let mut files = Vec::new();
        let dir = src.join(m);
        if dir.is_dir() {
            sources(&dir, &mut files);
        }
        files.push(src.join(format!("{m}.rs")));
        for f in files.iter().filter(|f| f.is_file()) {
            let name = f.file_name().unwrap().to_string_lossy();
            if name == "tests.rs" || name.ends_with("_tests.rs") || name == "properties.rs" {
                continue;
            }
            let deps = dependencies(&std::fs::read_to_string(f).unwrap(), &modules);
            graph.entry(m.clone()).or_default().extend(deps.into_iter().filter(|d| d != m));
        }
    }
    assert!(graph.len() > 20, "read too few modules: {:?}", graph.keys());
    assert_eq!(cycle(&graph), None, "a cycle among rankvisor-core's modules");
    // The check can fail: the same graph with one edge back has a cycle.
    let mut back = graph.clone();
    back.entry("kube".into()).or_default().insert("health".into());
    assert!(cycle(&back).is_some(), "the control: health -> kube -> health is a cycle");
}

/// One crate's files as a module tree: a file's module path (`a/b.rs` and `a/b/mod.rs` are
/// `a::b`, the root file is the empty path) and its code, unit tests and comments left out.
struct CrateFiles {
    /// Module path -> (file, code).
    modules: BTreeMap<Vec<String>, (PathBuf, String)>,
}

impl CrateFiles {
    fn read(src: &Path) -> Self {
        let mut files = Vec::new();
        sources(src, &mut files);
        let mut modules = BTreeMap::new();
        for f in files {
            let rel = f.strip_prefix(src).unwrap();
            let mut path: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
            let last = path.pop().unwrap();
            let stem = last.trim_end_matches(".rs").to_string();
            let name = last.as_str();
            if name == "tests.rs"
                || name.ends_with("_tests.rs")
                || name == "properties.rs"
                || path.first().is_some_and(|d| d == "bin")
            {
                continue;
            }
            let is_root = path.is_empty() && (stem == "lib" || stem == "main");
            if is_root {
                // A library's root is the crate's; a binary beside it is a separate crate.
                if stem == "main" && src.join("lib.rs").exists() {
                    continue;
                }
            } else if stem != "mod" {
                path.push(stem);
            }
            let text = std::fs::read_to_string(&f).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or_default();
            let code: Vec<&str> = code.lines().filter(|l| !l.trim_start().starts_with("//")).collect();
            modules.insert(path, (rel.to_path_buf(), code.join("\n")));
        }
        Self { modules }
    }

    /// The module `path` names: its longest prefix that is a file of the crate; through the
    /// root's re-exports (`pub use a::b::Name;`) when it names an item of the root.
    fn resolve(&self, path: &[String]) -> Option<Vec<String>> {
        let found = (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| self.modules.contains_key(p))?;
        if found.is_empty() {
            if let Some(name) = path.first() {
                let root = &self.modules[&found].1;
                for tree in use_trees(root, "pub use ").into_iter().chain(use_trees(root, "pub(crate) use ")) {
                    if tree.last() == Some(name) && tree.len() > 1 {
                        return self.resolve(&tree).filter(|t| !t.is_empty());
                    }
                }
            }
        }
        Some(found)
    }

    /// Each file's dependencies: the files its `crate::`, `super::` and `self::` paths name.
    fn graph(&self) -> BTreeMap<String, BTreeSet<String>> {
        let name = |m: &Vec<String>| self.modules[m].0.display().to_string();
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (module, (_, code)) in &self.modules {
            let deps = graph.entry(name(module)).or_default();
            for (prefix, path) in paths(code) {
                let base: Option<Vec<String>> = match prefix {
                    Prefix::Crate => Some(Vec::new()),
                    // `super` of `a/b.rs` (a::b) is `a`; of `a/mod.rs` (a) it is the root.
                    Prefix::Super(k) => module.len().checked_sub(k).map(|n| module[..n].to_vec()),
                    Prefix::SelfMod => Some(module.clone()),
                };
                let Some(mut full) = base else { continue };
                full.extend(path);
                if let Some(target) = self.resolve(&full).filter(|t| t != module) {
                    deps.insert(name(&target));
                }
            }
        }
        graph
    }
}

#[derive(Debug, Clone, Copy)]
enum Prefix {
    Crate,
    Super(usize),
    SelfMod,
}

/// Every path in `code` that starts with `crate::`, `super::` (repeated) or `self::`, with `use`
/// groups (`a::{b, c::d}`) expanded: (prefix, the segments after it).
fn paths(code: &str) -> Vec<(Prefix, Vec<String>)> {
    let bytes = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(ident(bytes[i - 1]) || bytes[i - 1] == b'$' || bytes[i - 1] == b':');
        // A path starts at an ASCII byte: a byte inside a multi-byte character starts nothing.
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let rest = &code[i..];
        let prefix = if !starts_word {
            None
        } else if rest.starts_with("crate::") {
            Some((Prefix::Crate, 7))
        } else if rest.starts_with("self::") {
            Some((Prefix::SelfMod, 6))
        } else if rest.starts_with("super::") {
            let mut k = 0;
            let mut at = 0;
            while code[i + at..].starts_with("super::") {
                k += 1;
                at += 7;
            }
            Some((Prefix::Super(k), at))
        } else {
            None
        };
        match prefix {
            Some((p, len)) => {
                let mut trees = Vec::new();
                let end = tree(code, i + len, Vec::new(), &mut trees);
                out.extend(trees.into_iter().map(|t| (p, t)));
                i = end.max(i + 1);
            }
            None => i += 1,
        }
    }
    out
}

/// Parse one path tree at `at` (idents joined by `::`, perhaps ending in a `{...}` group) into
/// `out`, each leaf with `base` before it; returns where it ends.
fn tree(code: &str, mut at: usize, mut base: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let bytes = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    loop {
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        if at < bytes.len() && bytes[at] == b'{' {
            at += 1;
            loop {
                while at < bytes.len() && (bytes[at].is_ascii_whitespace() || bytes[at] == b',') {
                    at += 1;
                }
                if at >= bytes.len() || bytes[at] == b'}' {
                    return at + 1;
                }
                let next = tree(code, at, base.clone(), out);
                if next <= at {
                    return at + 1;
                }
                at = next;
                // Skip an `as name` to the group's next item.
                while at < bytes.len() && bytes[at] != b',' && bytes[at] != b'}' {
                    at += 1;
                }
            }
        }
        let start = at;
        while at < bytes.len() && ident(bytes[at]) {
            at += 1;
        }
        if at == start {
            out.push(base);
            return at;
        }
        base.push(code[start..at].to_string());
        if code[at..].starts_with("::") {
            at += 2;
        } else {
            out.push(base);
            return at;
        }
    }
}

/// The paths of the `use` items of `code` that start with `keyword` (say `pub use `), expanded.
fn use_trees(code: &str, keyword: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices(keyword) {
        if i > 0 && !code.as_bytes()[i - 1].is_ascii_whitespace() {
            continue;
        }
        tree(code, i + keyword.len(), Vec::new(), &mut out);
    }
    out
}

/// Every group of files that import each other round (strongly connected, more than one file).
fn tangles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for d in graph.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|k| (k, reach(k))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for (k, r) in &reached {
        if !r.contains(*k) || out.iter().any(|g| g.contains(k)) {
            continue;
        }
        out.push(r.iter().filter(|o| reached.get(o).is_some_and(|back| back.contains(*k))).cloned().collect());
    }
    out
}

/// The crates whose every file is checked: every crate of the workspace.
const FILE_LEVEL_CRATES: [&str; 4] =
    ["crates/rankvisor-core/src", "crates/rankvisor-dryrun/src", "crates/rankvisor-trainer/src", "src"];

#[test]
fn no_file_of_any_crate_is_in_an_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for krate in FILE_LEVEL_CRATES {
        let files = CrateFiles::read(&root.join(krate));
        let graph = files.graph();
        assert!(!graph.is_empty(), "{krate}: no file read");
        assert_eq!(tangles(&graph), Vec::<Vec<String>>::new(), "{krate}: files that import each other round");
    }
}

#[test]
fn the_file_level_graph_sees_use_groups_super_and_re_exports() {
    let paths = paths("use super::{a::B, c};\nuse crate::{d, e::{F, g::H}};\nlet x = super::super::i::J;\n");
    let flat: Vec<String> = paths.iter().map(|(p, s)| format!("{p:?} {}", s.join("::"))).collect();
    assert_eq!(
        flat,
        ["Super(1) a::B", "Super(1) c", "Crate d", "Crate e::F", "Crate e::g::H", "Super(2) i::J"],
        "{flat:?}"
    );
    // The dry run's own graph: a file the review names imports another.
    let files = CrateFiles::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/rankvisor-dryrun/src"));
    let graph = files.graph();
    let deps = |f: &str| graph.get(f).cloned().unwrap_or_default();
    assert!(deps("trainjob/admission.rs").contains("trainjob/mod.rs"), "{:?}", deps("trainjob/admission.rs"));
    assert!(deps("runner/event_loop.rs").contains("runner/run.rs"), "{:?}", deps("runner/event_loop.rs"));
    let mut back = graph.clone();
    back.entry("runner/run.rs".into()).or_default().insert("runner/event_loop.rs".into());
    assert!(cycle(&back).is_some(), "the control: event_loop -> run -> event_loop is a cycle");
}

/// `code` with comments and the insides of string and character literals blanked (newlines kept),
/// so braces and `fn` are found only in code.
fn code_only(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let (c, next) = (chars[i], chars.get(i + 1).copied());
        let starts_word = i == 0 || !ident(chars[i - 1]);
        let end = if c == '/' && next == Some('/') {
            chars[i..].iter().position(|c| *c == '\n').map_or(chars.len(), |n| i + n)
        } else if c == '/' && next == Some('*') {
            block_comment_end(&chars, i)
        } else if let Some((prefix, hashes)) = raw_string_start(&chars[i..]).filter(|_| starts_word) {
            // r"..", r#".."#, br#".."#: no escapes, ends at the quote and as many hashes.
            let close: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            let inside = i + prefix;
            (inside..chars.len()).find(|&k| chars[k..].starts_with(&close)).map_or(chars.len(), |k| k + close.len())
        } else if c == '"' {
            quoted_end(&chars, i, '"')
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal ('{', '\'', '\u{7b}'); a lifetime ('a) has no closing quote.
            quoted_end(&chars, i, '\'')
        } else {
            out.push(c);
            i += 1;
            continue;
        };
        // The comment or literal, blanked: its lines stay, nothing in it is code.
        out.extend(chars[i..end].iter().map(|c| if *c == '\n' { '\n' } else { ' ' }));
        i = end;
    }
    out
}

/// Just past the block comment (perhaps nested) that starts at `at`.
fn block_comment_end(chars: &[char], at: usize) -> usize {
    let (mut depth, mut i) = (0, at);
    while i < chars.len() {
        if chars[i..].starts_with(&['/', '*']) {
            depth += 1;
            i += 2;
        } else if chars[i..].starts_with(&['*', '/']) {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    chars.len()
}

/// Just past the string or character literal that starts with `quote` at `at` (escapes skipped).
fn quoted_end(chars: &[char], at: usize, quote: char) -> usize {
    let mut i = at + 1;
    while i < chars.len() && chars[i] != quote {
        i += if chars[i] == '\\' { 2 } else { 1 };
    }
    (i + 1).min(chars.len())
}

/// At a raw string (`r"`, `r#"`, `br##"`): the length of its opening and its number of hashes.
fn raw_string_start(chars: &[char]) -> Option<(usize, usize)> {
    let r = if chars.first() == Some(&'b') { 1 } else { 0 };
    if chars.get(r) != Some(&'r') {
        return None;
    }
    let hashes = chars[r + 1..].iter().take_while(|c| **c == '#').count();
    (chars.get(r + 1 + hashes) == Some(&'"')).then_some((r + 2 + hashes, hashes))
}

/// The index just past the brace that closes the one at `open` (or the end of `code`).
fn matching_brace(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, b) in code.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// `code` (already `code_only`) with every `#[cfg(test)] mod name { ... }` block blanked.
fn without_test_modules(code: &str) -> String {
    let mut bytes = code.as_bytes().to_vec();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]").map(|i| i + from) {
        from = at + 1;
        let rest = code[at + "#[cfg(test)]".len()..].trim_start();
        let rest = rest.strip_prefix("pub(crate)").or_else(|| rest.strip_prefix("pub")).unwrap_or(rest).trim_start();
        let Some(rest) = rest.strip_prefix("mod ") else { continue };
        let name_end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if !rest[name_end..].trim_start().starts_with('{') {
            continue;
        }
        let open = code.len() - rest[name_end..].trim_start().len();
        let end = matching_brace(code.as_bytes(), open);
        for b in &mut bytes[at..end] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
        from = end;
    }
    String::from_utf8(bytes).expect("only ASCII bytes were replaced, by ASCII")
}

/// The names of the modules `code` declares as unit-test files: `#[cfg(test)] mod name;`.
fn test_module_files(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("#[cfg(test)]") {
        let rest = code[at + "#[cfg(test)]".len()..].trim_start();
        let rest = rest.strip_prefix("pub(crate)").or_else(|| rest.strip_prefix("pub")).unwrap_or(rest).trim_start();
        let Some(rest) = rest.strip_prefix("mod ") else { continue };
        let name_end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if rest[name_end..].trim_start().starts_with(';') {
            out.push(rest[..name_end].to_string());
        }
    }
    out
}

/// Every function with a body in `code` (source text, unit-test modules included or not): its name
/// and its length in lines, from the line of `fn` to the line of its closing brace.
fn function_lengths(code: &str) -> Vec<(String, usize)> {
    let code = without_test_modules(&code_only(code));
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    for (at, _) in code.match_indices("fn ") {
        if at > 0 && (ident(bytes[at - 1]) || bytes[at - 1] == b'$') {
            continue;
        }
        let rest = code[at + 3..].trim_start();
        let name_len = rest.bytes().take_while(|b| ident(*b)).count();
        if name_len == 0 || rest.as_bytes()[0].is_ascii_digit() {
            continue;
        }
        let name = rest[..name_len].to_string();
        // The body's brace: the first `{` outside the signature's parentheses and brackets
        // (`[u8; 4]`); a `;` there first is a declaration without a body.
        let mut depth = 0i32;
        let mut open = None;
        for (i, b) in bytes.iter().enumerate().skip(code.len() - rest.len() + name_len) {
            match b {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b'{' if depth == 0 => {
                    open = Some(i);
                    break;
                }
                b';' if depth == 0 => break,
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let close = matching_brace(bytes, open);
        let lines = code[at..close].matches('\n').count() + 1;
        out.push((name, lines));
    }
    out
}

/// The longest a function may be, in lines.
const MAX_FUNCTION_LINES: usize = 80;

/// Functions that read better whole, with why: (file, function, reason). Keep it very short.
const LONG_FUNCTIONS_ALLOWED: [(&str, &str, &str); 0] = [];

/// Every non-test source file of `src`: unit-test files (`tests.rs`, files under a `tests/`
/// directory, and the files of `#[cfg(test)] mod name;` declarations) left out.
fn non_test_sources(src: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut test_files = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let stem = f.file_stem().unwrap().to_string_lossy();
        let dir = f.parent().unwrap();
        let dir = if ["mod", "lib", "main"].contains(&stem.as_ref()) { dir.to_path_buf() } else { dir.join(&*stem) };
        for name in test_module_files(&code_only(&text)) {
            test_files.insert(dir.join(format!("{name}.rs")));
            test_files.insert(dir.join(name));
        }
    }
    files.retain(|f| {
        let rel = f.strip_prefix(src).unwrap();
        f.file_name() != Some("tests.rs".as_ref())
            && !rel.iter().any(|c| c == "tests")
            && !test_files.iter().any(|t| f.starts_with(t))
    });
    files
}

#[test]
fn no_function_is_longer_than_80_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    let mut counted = 0;
    for krate in FILE_LEVEL_CRATES {
        for f in non_test_sources(&root.join(krate)) {
            let rel = f.strip_prefix(root).unwrap().display().to_string();
            for (name, lines) in function_lengths(&std::fs::read_to_string(&f).unwrap()) {
                counted += 1;
                let allowed = LONG_FUNCTIONS_ALLOWED.iter().any(|(file, func, _)| rel == *file && name == *func);
                if lines > MAX_FUNCTION_LINES && !allowed {
                    long.push(format!("{rel}: fn {name} is {lines} lines"));
                }
            }
        }
    }
    assert!(counted > 500, "counted too few functions: {counted}");
    assert!(long.is_empty(), "functions over {MAX_FUNCTION_LINES} lines (split them by concern):\n{}", long.join("\n"));
}

#[test]
fn the_function_counter_sees_a_long_function_past_braces_in_strings_and_comments() {
    // Ten lines, braces in a doc comment, strings, characters, a raw string, a nested block
    // comment and a string over two lines.
    let short = r##"/// fn not_code() {
fn short(a: [u8; 4]) -> u8 {
    let s = "}"; // }
    let c = '}';
    let q = '\'';
    let r = r#"}"#;
    /* { /* } */ { */
    let m = "{
    ";
    a[0]
}
"##;
    let body: String = (0..85).map(|i| format!("    let x{i} = {i};\n")).collect();
    // 90 lines: signature (3), brace, body, brace.
    let long = format!("pub(crate) async fn long<'a>(x: &'a str)\nwhere\n    'a: 'static,\n{{\n{body}}}\n");
    let declared = "trait T {\n    fn declared(&self);\n}\n";
    let unit_tests = format!("#[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{body}    }}\n}}\n");
    let code = [short, &long, declared, &unit_tests].join("\n");
    let found = function_lengths(&code);
    assert_eq!(found, [("short".to_string(), 10), ("long".to_string(), 90)], "{code}");
    let long: Vec<_> = found.iter().filter(|(_, n)| *n > MAX_FUNCTION_LINES).collect();
    assert_eq!(long, [&("long".to_string(), 90)], "the control: one function over the limit is reported");
    assert_eq!(test_module_files("#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod kubelet_tests {}\n"), ["tests"]);
}

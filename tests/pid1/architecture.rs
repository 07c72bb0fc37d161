//! The core library's modules form no cycle: a module that names `crate::x` (outside its unit
//! tests and doc comments) depends on `x`, and following those dependencies never comes back.
//! docs/architecture.md lists the modules in that order.
//!
//! File by file, too: a file depends on the files its `crate::`, `super::` and `self::` paths
//! name (`use` groups expanded, the root's re-exports followed; `mod` declarations are the tree,
//! not a dependency), and no files of the dry run, the trainer or the binary import each other
//! round.

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

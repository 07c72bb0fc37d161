//! The core library's modules form no cycle: a module that names `crate::x` (outside its unit
//! tests and doc comments) depends on `x`, and following those dependencies never comes back.
//! docs/architecture.md lists the modules in that order.

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

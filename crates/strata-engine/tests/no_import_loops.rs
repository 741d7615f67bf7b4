//! The engine's modules form no import loop (issue 13: "no import loop
//! larger than a file and its test module"): `core` and `state` sit below
//! the modules that work on them, services below `lib.rs`, which composes
//! them. A module's test modules (`*_tests.rs`, `#[cfg(test)]` blocks,
//! `testutil.rs`) are left out, as is the crate root: every module is
//! declared there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name → the modules its non-test code names as `crate::<module>`.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(&src).expect("src directory") {
        let p = e.expect("entry").path();
        let Some(stem) = p.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if p.extension().is_some_and(|x| x == "rs")
            && !stem.ends_with("_tests")
            && stem != "testutil"
            && stem != "lib"
        {
            files.insert(stem.to_string(), std::fs::read_to_string(&p).expect("read"));
        }
    }
    let names: BTreeSet<String> = files.keys().cloned().collect();
    let mut g = BTreeMap::new();
    for (m, text) in &files {
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let mut deps = BTreeSet::new();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (i, _) in line.match_indices("crate::") {
                let rest = &line[i + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                    .collect();
                if name != *m && names.contains(&name) {
                    deps.insert(name);
                }
            }
        }
        g.insert(m.clone(), deps);
    }
    g
}

/// A cycle through `from`, if any (depth-first, bounded by the module count).
fn cycle(
    g: &BTreeMap<String, BTreeSet<String>>,
    at: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(i) = path.iter().position(|p| p == at) {
        let mut c = path[i..].to_vec();
        c.push(at.to_string());
        return Some(c);
    }
    if done.contains(at) {
        return None;
    }
    path.push(at.to_string());
    for d in g.get(at).into_iter().flatten() {
        if let Some(c) = cycle(g, d, path, done) {
            return Some(c);
        }
    }
    path.pop();
    done.insert(at.to_string());
    None
}

#[test]
fn the_engine_modules_form_no_import_loop() {
    let g = graph();
    assert!(g.len() > 20, "modules found: {:?}", g.keys());
    assert!(
        g["core"].contains("state"),
        "the parser sees imports: {:?}",
        g["core"]
    );
    let mut done = BTreeSet::new();
    for m in g.keys() {
        if let Some(c) = cycle(&g, m, &mut Vec::new(), &mut done) {
            panic!("import loop: {}", c.join(" -> "));
        }
    }
}

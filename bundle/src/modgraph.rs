//! Reading a crate's module graph from its sources, for the architecture tests of every
//! crate in the workspace (this file is compiled into each crate's tests with
//! `#[path]`; it is no part of any library): the `.rs` files under `src/` with their
//! comments left out, the module paths they name (`crate::a::b`, `super::c`), and the
//! pairs of modules that use each other.
//!
//! Paths are found in the code with comments left out (a doc link up the stack is fine:
//! it documents, it does not depend).

use std::path::{Path, PathBuf};

/// The files of this graph's own machinery, never scanned.
const SKIPPED: &[&str] = &["architecture_tests.rs", "modgraph.rs"];

/// Every `.rs` file under `dir`, with its path relative to `src/`.
fn sources_under(dir: &Path, src: &Path, out: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            sources_under(&p, src, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(src).unwrap().to_path_buf();
            if SKIPPED.iter().any(|s| rel == Path::new(s)) {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            out.push((rel, code_only(&text)));
        }
    }
}

/// The `.rs` files of the crate whose `src/` is `src` (its own architecture tests and
/// this file left out), each with its path relative to `src/` and its code.
pub fn sources(src: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    sources_under(src, src, &mut out);
    assert!(out.len() > 20, "the sources were found");
    out
}

/// `text` without its comments (`//` to the end of the line; string literals are not
/// special-cased: a path written in a string is treated as code, which errs on the side
/// of a failing test).
pub fn code_only(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The path segments after each `prefix` in `code` (groups `{a, b::c}` one level deep);
/// a `prefix` that ends a longer name (`mycrate::`) is not one.
pub fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let segments = |s: &str| -> Vec<String> {
        s.split("::")
            .map_while(|seg| {
                let seg = seg.trim();
                let end = seg
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(seg.len());
                // the last segment may be followed by something else (`f()`, `;`)
                (end > 0).then(|| seg[..end].to_string())
            })
            .collect()
    };
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            found.extend(group[..end].split(',').map(segments));
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            found.push(segments(&rest[..end]));
        }
    }
    found
}

/// The first segment of each path after any of `prefixes` (`crate::linux::plan::X` ->
/// `linux`), prefix by prefix.
pub fn first_segments(code: &str, prefixes: &[&str]) -> Vec<String> {
    prefixes
        .iter()
        .flat_map(|p| paths_after(code, p))
        .filter_map(|p| p.into_iter().next())
        .collect()
}

/// The module path of a source file (`home/layer/diff.rs` -> `home::layer::diff`,
/// `home/mod.rs` -> `home`).
pub fn module_of(file: &Path) -> Vec<String> {
    let mut m: Vec<String> = file
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if m.last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        m.pop();
    }
    m
}

/// The pairs of modules of `sources` that use each other (`a <-> b`, sorted). A file's own
/// submodules (`home/layer.rs` and the files of `home/layer/`) are one part with it; a
/// folder module (`home/mod.rs`) is not one part with its children.
pub fn circles(sources: &[(PathBuf, String)]) -> Vec<String> {
    let modules: Vec<Vec<String>> = sources.iter().map(|(f, _)| module_of(f)).collect();
    // modules written as `x.rs` (their submodules are parts of them)
    let file_modules: Vec<Vec<String>> = sources
        .iter()
        .filter(|(f, _)| !f.ends_with("mod.rs"))
        .map(|(f, _)| module_of(f))
        .collect();
    let part = |m: &[String]| -> Vec<String> {
        let mut m = m.to_vec();
        while m.len() > 1 && file_modules.contains(&m[..m.len() - 1].to_vec()) {
            m.pop();
        }
        m
    };
    // the part of the longest known module that a path names
    let resolve = |path: &[String]| -> Option<Vec<String>> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| modules.contains(p))
            .map(|m| part(&m))
    };
    let mut uses: Vec<(Vec<String>, Vec<Vec<String>>)> = Vec::new();
    for ((_, code), own) in sources.iter().zip(&modules) {
        let mut used = Vec::new();
        for p in paths_after(code, "crate::") {
            used.extend(resolve(&p));
        }
        // `super` of `a::b` (a file `a/b.rs` or `a/b/mod.rs`) is `a`
        if let Some((_, parent)) = own.split_last() {
            for p in paths_after(code, "super::") {
                let mut full = parent.to_vec();
                full.extend(p);
                used.extend(resolve(&full));
            }
        }
        uses.push((part(own), used));
    }
    let related = |a: &[String], b: &[String]| a.starts_with(b) || b.starts_with(a);
    let mut bad = Vec::new();
    for (a, used_by_a) in &uses {
        for b in used_by_a {
            if related(a, b) || a > b {
                continue;
            }
            let b_uses_a = uses.iter().any(|(m, u)| m == b && u.iter().any(|x| x == a));
            if b_uses_a {
                bad.push(format!("{} <-> {}", a.join("::"), b.join("::")));
            }
        }
    }
    bad.sort();
    bad.dedup();
    bad
}

#[test]
fn the_scanner_sees_paths() {
    assert_eq!(
        paths_after(
            "use crate::{home::layer::Change, exit};\ncrate::a::b(x)",
            "crate::"
        ),
        vec![
            vec!["home".to_string(), "layer".into(), "Change".into()],
            vec!["exit".to_string()],
            vec!["a".to_string(), "b".into()],
        ]
    );
    assert_eq!(
        first_segments(
            "use crate::{exit, linux::plan};\nlet x = crate::cli::f(); // crate::home",
            &["crate::"]
        ),
        vec!["exit", "linux", "cli", "home"]
    );
    assert_eq!(
        first_segments(
            &code_only("x(); // crate::home\ny(mycrate::exec::run)"),
            &["crate::", "mycrate::"]
        ),
        vec!["exec"]
    );
    assert_eq!(
        first_segments(
            "use super::{mounts, plan::Isolation, sys};\nsuper::warm::x()",
            &["super::"]
        ),
        vec!["mounts", "plan", "sys", "warm"]
    );
    assert_eq!(
        module_of(Path::new("home/layer/diff.rs")),
        vec!["home", "layer", "diff"]
    );
    assert_eq!(module_of(Path::new("home/mod.rs")), vec!["home"]);
}

#[test]
fn the_circle_scanner_sees_a_circle() {
    let src = |f: &str, code: &str| (PathBuf::from(f), code.to_string());
    let two = [
        src("a.rs", "use crate::b::X;"),
        src("b.rs", "crate::a::f()"),
        src("c/mod.rs", "use super::a;"),
    ];
    assert_eq!(circles(&two), vec!["a <-> b"]);
    // a file's submodule is part of it; a folder module is not one with its children
    let parts = [
        src("a.rs", "use crate::a::inner::X;"),
        src("a/inner.rs", "use super::Y;"),
        src("c/mod.rs", "use crate::c::d::Z;"),
        src("c/d.rs", "use super::W;"),
    ];
    assert!(circles(&parts).is_empty());
}

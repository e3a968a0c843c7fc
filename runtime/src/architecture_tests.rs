//! The direction of the runtime's dependencies, checked on its sources: the command line
//! ([`crate::cli`]) uses the library, the library uses the executors, and nothing reaches
//! back up. Inside the Linux executor the modules form layers too (the prepared-root
//! holder over its warm spares over init over the building blocks).
//!
//! Paths are found in the code with comments left out (a doc link up the stack is fine:
//! it documents, it does not depend).

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, with its path relative to `src/`.
fn sources(dir: &Path, src: &Path, out: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            sources(&p, src, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            out.push((p.strip_prefix(src).unwrap().to_path_buf(), code_only(&text)));
        }
    }
}

/// `text` without its comments (`//` to the end of the line; string literals are not
/// special-cased: a path written in a string is treated as code, which errs on the side
/// of a failing test).
fn code_only(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn all_sources() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    sources(&src, &src, &mut out);
    assert!(out.len() > 20, "the sources were found");
    out
}

/// The top-level modules of the crate `code` names as `crate::X` (or `capsule_runtime::X`).
fn crate_modules(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for prefix in ["crate::", "capsule_runtime::"] {
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().last();
            rest = &rest[i + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                found.extend(group[..end].split(',').filter_map(first_segment));
            } else {
                found.extend(first_segment(rest));
            }
        }
    }
    found
}

/// The first path segment of `s` (`linux::plan::X` -> `linux`).
fn first_segment(s: &str) -> Option<String> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| s[..end].to_string())
}

/// The sibling modules `code` names as `super::X` (in `use super::{a, b::C}` groups too).
fn super_modules(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("super::") {
        rest = &rest[i + "super::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            found.extend(group[..end].split(',').filter_map(first_segment));
        } else {
            found.extend(first_segment(rest));
        }
    }
    found
}

/// `file` is in folder `dir` (relative to `src/`), or is `dir.rs`.
fn under(file: &Path, dir: &str) -> bool {
    file.starts_with(dir) || file == Path::new(&format!("{dir}.rs"))
}

#[test]
fn only_the_command_line_uses_the_command_line() {
    let mut bad = Vec::new();
    for (file, code) in all_sources() {
        if under(&file, "cli")
            || file == Path::new("main.rs")
            || file == Path::new("architecture_tests.rs")
        {
            continue;
        }
        if crate_modules(&code).iter().any(|m| m == "cli") || code.contains("super::cli") {
            bad.push(file.display().to_string());
        }
    }
    assert!(
        bad.is_empty(),
        "outside runtime/src/cli, these files use the command line (move what they need into the library): {bad:?}"
    );
}

/// The executors use the building blocks every layer shares (exit statuses, limits, the
/// refusal model they report into) and
/// nothing of the library above them: whatever they need is handed down in the plan and
/// the hooks.
#[test]
fn executors_never_reach_up() {
    const SHARED: &[&str] = &["exit", "limits", "refusals"];
    let mut bad = Vec::new();
    for (file, code) in all_sources() {
        let own = if under(&file, "linux") {
            "linux"
        } else if file == Path::new("macos.rs") {
            "macos"
        } else {
            continue;
        };
        for m in crate_modules(&code) {
            if m != own && !SHARED.contains(&m.as_str()) {
                bad.push(format!("{} uses crate::{m}", file.display()));
            }
        }
    }
    assert!(bad.is_empty(), "executors reaching up: {bad:#?}");
}

/// The library's lower parts (network, home layer, record, agent backends, isolation
/// report, settings) do not use the exec pipeline that puts them together.
#[test]
fn the_pipeline_is_the_top_of_the_library() {
    let mut bad = Vec::new();
    for (file, code) in all_sources() {
        if under(&file, "cli")
            || under(&file, "exec")
            || file == Path::new("main.rs")
            || file == Path::new("lib.rs")
            || file == Path::new("architecture_tests.rs")
        {
            continue;
        }
        if crate_modules(&code).iter().any(|m| m == "exec") {
            bad.push(file.display().to_string());
        }
    }
    assert!(
        bad.is_empty(),
        "below the exec pipeline, these use it: {bad:?}"
    );
}

/// Inside the Linux executor each module uses only modules of a lower layer: `mod.rs`
/// (the executor's entry) over the prepared-root holder, over its warm spares, over
/// init, over the building blocks. A module missing from the table fails the test: give
/// it its layer.
#[test]
fn linux_layers_point_down() {
    let layer = |m: &str| -> Option<u32> {
        Some(match m {
            "prepared" => 6,
            "warm" => 5,
            "init" => 4,
            "oci" | "notify" | "outcome" => 3,
            "mounts" | "observe" | "fusemask" | "diskguard" => 2,
            "plan" | "landlock" | "seccomp" | "cgroup" | "pty" | "activity" | "spawn" => 1,
            "sys" | "report" | "hooks" | "sockets" => 0,
            _ => return None,
        })
    };
    let mut bad = Vec::new();
    for (file, code) in all_sources() {
        let Ok(rel) = file.strip_prefix("linux") else {
            continue;
        };
        let Some(module) = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
        else {
            continue;
        };
        if module == "mod" {
            continue;
        }
        // a module's own tests (`linux/oci/tests.rs`) sit one level further down
        let nested = rel.components().count() > 1;
        let Some(own) = layer(&module) else {
            bad.push(format!("{}: linux::{module} has no layer", file.display()));
            continue;
        };
        let mut used = Vec::new();
        let mut rest = code.as_str();
        while let Some(i) = rest.find("crate::linux::") {
            rest = &rest[i + "crate::linux::".len()..];
            used.extend(first_segment(rest));
        }
        if !nested {
            used.extend(super_modules(&code));
        }
        for m in used {
            if m == module {
                continue;
            }
            match layer(&m) {
                Some(l) if l >= own => bad.push(format!(
                    "{}: linux::{module} (layer {own}) uses linux::{m} (layer {l})",
                    file.display()
                )),
                _ => {}
            }
        }
    }
    assert!(
        bad.is_empty(),
        "Linux executor layers pointing up: {bad:#?}"
    );
}

/// The checks see what they look for.
#[test]
fn the_scanners_find_paths() {
    assert_eq!(
        crate_modules("use crate::{exit, linux::plan};\nlet x = crate::cli::f(); // crate::home"),
        vec!["exit", "linux", "cli", "home"]
    );
    assert_eq!(
        crate_modules(&code_only(
            "x(); // crate::home\ny(capsule_runtime::exec::run)"
        )),
        vec!["exec"]
    );
    assert_eq!(
        super_modules("use super::{mounts, plan::Isolation, sys};\nsuper::warm::x()"),
        vec!["mounts", "plan", "sys", "warm"]
    );
}

/// The module path of a source file (`home/layer/diff.rs` -> `home::layer::diff`,
/// `home/mod.rs` -> `home`).
fn module_of(file: &Path) -> Vec<String> {
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

/// The path segments after each `prefix` in `code` (groups `{a, b::c}` one level deep).
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let segments = |s: &str| -> Vec<String> {
        s.split("::")
            .map_while(|seg| {
                let seg = seg.trim();
                let end = seg
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(seg.len());
                (end > 0 && end == seg.len())
                    .then(|| seg.to_string())
                    .or_else(|| {
                        // the last segment, followed by something else (`f()`, `;`)
                        (end > 0).then(|| seg[..end].to_string())
                    })
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

/// No two modules use each other: where two parts need each other, what they share is a
/// module of its own below both. A file's own submodules (`home/layer.rs` and the files
/// of `home/layer/`) are one part with it; a folder module (`home/mod.rs`) is not one
/// part with its children.
#[test]
fn no_two_modules_use_each_other() {
    let sources = all_sources();
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
    for ((file, code), own) in sources.iter().zip(&modules) {
        if file == Path::new("architecture_tests.rs") {
            continue;
        }
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
    assert!(
        bad.is_empty(),
        "modules that use each other (move what they share below both): {bad:#?}"
    );
}

#[test]
fn the_circle_scanner_sees_paths() {
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
        module_of(Path::new("home/layer/diff.rs")),
        vec!["home", "layer", "diff"]
    );
    assert_eq!(module_of(Path::new("home/mod.rs")), vec!["home"]);
}

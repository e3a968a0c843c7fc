//! Property tests of the spec parser ([`crate::spec::parse`]) and its path checks: any text
//! (arbitrary, or YAML-ish from spec fragments) is parsed without a panic and, when
//! refused, with a one-line error; a generated spec of a valid shape whose name and paths
//! are drawn from hostile pieces (`..`, `/`, `~`, NUL, symlink-ish and very long names)
//! parses exactly when its name is a plain folder name and every path it names stays
//! inside the workspace by a reference model, and then every step path it returns does. Cases per run: `PROPTEST_CASES` (defaults below;
//! `hack/fuzz.sh` runs more).

use crate::spec::{check_relative, parse, Action, Source};
use proptest::prelude::*;
use std::path::Path;

/// `PROPTEST_CASES` when set, else `cases`.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

const FILE: &str = "/x/capsule.yaml";

/// Pieces a YAML-ish spec is made of, so arbitrary joins reach deep into the parser.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "name: t\n",
            "source:\n",
            "  synthetic: true\n",
            "  steps:\n",
            "    - action: write\n",
            "    - action: git\n",
            "    - action: bare_remote\n",
            "      path: ",
            "      args: [",
            "      content: ",
            "sandbox:\n",
            "  limits: {memory: ",
            "  limits: {cpus: ",
            "  limits: {activity_timeout: ",
            "  publish: [",
            "  secrets: {T: [",
            "  writable: [",
            "  network: {allow: [",
            "verify:\n  probes:\n    - run: ",
            "  tree_digest: ",
            "network: live\n",
            "overlay: ",
            "repo: r\ncommit: ",
            "&a ",
            "*a",
            "<<: *a\n",
            "!!binary ",
            "? ",
            "- ",
            "{",
            "}",
            "[",
            "]",
            ", ",
            ": ",
            "\"",
            "'",
            "|\n",
            ">-\n",
            "\n",
            "  ",
            "\t",
            "#",
            "---\n",
            "...\n",
            "..",
            "/",
            "~",
            "\\0",
            "\\u202e",
            "1.5G",
            "99999999999999999999T",
            "0",
            "-1",
            "1e400",
            "0.001",
        ])
        .prop_map(str::to_string),
        "\\PC{0,6}",
    ]
}

/// One piece of a path: the hostile and the ordinary.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "a", "b c", "..", ".", "", "...", "..a", "a..", "~", "~root", ".git", "link",
            "-rf", "\\", "\\0", "\\n", "\\t", " ", "C:", "\\u202e",
        ])
        .prop_map(str::to_string),
        1 => (1usize..300).prop_map(|n| "x".repeat(n)),
        1 => "[a-z./]{1,8}",
    ]
}

/// A path as written in double quotes in the YAML (escapes are YAML's: `\0` is NUL).
fn yaml_path() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["", "", "", "/", "./", "~/", " ", "//"]),
        prop::collection::vec(piece(), 0..5),
        prop::sample::select(vec!["", "", "/", "/.", "/.."]),
    )
        .prop_map(|(lead, pieces, tail)| format!("{lead}{}{tail}", pieces.join("/")))
}

/// The YAML double-quoted scalar [`quoted`] makes of `s` decodes to (the escapes [`piece`]
/// uses; any other backslash is literal).
fn unescape(s: &str) -> String {
    s.replace("\\0", "\0")
        .replace("\\n", "\n")
        .replace("\\t", "\t")
        .replace("\\u202e", "\u{202e}")
}

/// A lone backslash is not a YAML escape: keep the generated text a valid scalar.
fn quoted(raw: &str) -> String {
    let mut out = String::new();
    let mut it = raw.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\\' if matches!(it.peek(), Some('0' | 'n' | 't' | 'u')) => out.push('\\'),
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    format!("\"{out}\"")
}

/// Reference model: a spec path stays inside the workspace when it is not blank, has no
/// NUL, is not absolute and no component is `..` (a `.` or empty one is harmless).
fn inside(p: &str) -> bool {
    !p.trim().is_empty()
        && !p.contains('\0')
        && !p.starts_with('/')
        && p.split('/').all(|c| c != "..")
}

/// What a generated step's path must satisfy after parsing, checked independently of the
/// parser's own check: relative, no `..` once normalized, no NUL.
fn normalized_inside(p: &str) -> bool {
    let path = Path::new(p);
    !p.is_empty()
        && !p.contains('\0')
        && !path.is_absolute()
        && path.components().all(|c| {
            matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        })
}

/// A generated step: its YAML and whether the model says its path is fine.
#[derive(Debug, Clone)]
struct GenStep {
    yaml: String,
    ok: bool,
}

fn step() -> impl Strategy<Value = GenStep> {
    (0u8..6, yaml_path()).prop_map(|(kind, raw)| {
        let q = quoted(&raw);
        let p = unescape(&raw);
        match kind {
            0 => GenStep {
                yaml: format!("    - {{action: write, path: {q}, content: \"x\"}}\n"),
                ok: inside(&p),
            },
            1 => GenStep {
                yaml: format!("    - {{action: mkdir, path: {q}}}\n"),
                ok: inside(&p),
            },
            2 => GenStep {
                yaml: format!("    - {{action: remove, path: {q}}}\n"),
                ok: inside(&p),
            },
            3 => GenStep {
                // a blank dir is no dir
                yaml: format!("    - {{action: git, args: [status], dir: {q}}}\n"),
                ok: p.trim().is_empty() || inside(&p),
            },
            4 => GenStep {
                // a blank path is the default `peers/<name>.git`
                yaml: format!("    - {{action: bare_remote, path: {q}}}\n"),
                ok: p.trim().is_empty() || inside(&p),
            },
            _ => GenStep {
                yaml: "    - {action: commit, message: m}\n".into(),
                ok: true,
            },
        }
    })
}

/// Every path of a parsed synthetic spec's steps.
fn step_paths(src: &Source) -> Vec<String> {
    let Source::Synthetic { steps, .. } = src else {
        return Vec::new();
    };
    steps
        .iter()
        .filter_map(|s| match &s.action {
            Action::Write { path, .. }
            | Action::Mkdir { path }
            | Action::Remove { path }
            | Action::BareRemote { path, .. } => Some(path.clone()),
            Action::Git { dir, .. } => dir.clone(),
            _ => None,
        })
        .collect()
}

proptest! {
    #![proptest_config(config(700))]

    #[test]
    fn parsing_any_text_never_panics(
        pieces in prop::collection::vec(fragment(), 0..24),
        raw in "\\PC{0,64}",
    ) {
        for text in [pieces.concat(), raw] {
            if let Err(e) = parse(&text, Path::new(FILE)) {
                let e = e.to_string();
                prop_assert!(!e.contains('\n') && !e.contains('\r'), "a multi-line error: {:?}", e);
            }
        }
    }

    #[test]
    fn step_paths_stay_inside_the_workspace(
        name in prop_oneof![
            4 => Just("t".to_string()),
            1 => prop::sample::select(vec![
                "..", ".", "a/b", " t ", "-x", "x\\0", "\\u202e", "", " ", "a.b_c-d", ".hidden",
                "~", "a\\nb", "\\\\",
            ]).prop_map(str::to_string),
            1 => (127usize..130).prop_map(|n| "x".repeat(n)),
        ],
        steps in prop::collection::vec(step(), 1..5),
        overlay in prop::option::of(yaml_path()),
        probe_dir in prop::option::of(yaml_path()),
        writable in prop::collection::vec(yaml_path(), 0..3),
    ) {
        let mut text = format!("name: {}\nsource:\n  synthetic: true\n  steps:\n", quoted(&name));
        // the name names folders: a plain file name of letters, digits, `-`, `_`, `.`
        let n = unescape(&name);
        let n = n.trim();
        let mut ok = !n.is_empty()
            && n.len() <= 128
            && n != "."
            && n != ".."
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        ok &= steps.iter().all(|s| s.ok);
        for s in &steps {
            text.push_str(&s.yaml);
        }
        if let Some(o) = &overlay {
            text.push_str(&format!("overlay: {}\n", quoted(o)));
            ok &= inside(&unescape(o));
        }
        if let Some(d) = &probe_dir {
            text.push_str(&format!("verify:\n  probes:\n    - {{run: \"true\", dir: {}}}\n", quoted(d)));
            ok &= inside(&unescape(d));
        }
        if !writable.is_empty() {
            text.push_str("sandbox:\n  writable:\n");
            for w in &writable {
                text.push_str(&format!("    - {}\n", quoted(w)));
                let w = unescape(w);
                // absolute and `~/` entries are host paths: no `..` anywhere
                ok &= if w.starts_with('/') || w.starts_with("~/") {
                    w.split('/').all(|c| c != "..")
                } else {
                    inside(&w)
                };
            }
        }
        match parse(&text, Path::new(FILE)) {
            Ok(spec) => {
                prop_assert!(ok, "accepted a name or path the model refuses:\n{}", text);
                prop_assert!(!spec.name.contains(['/', '\0']) && spec.name != ".." && spec.name != ".");
                let paths = step_paths(&spec.source);
                for p in &paths {
                    prop_assert!(normalized_inside(p), "step path {:?} escapes", p);
                    prop_assert!(check_relative(p).is_ok());
                }
                if let Some(o) = &spec.overlay {
                    prop_assert!(normalized_inside(o), "overlay {:?} escapes", o);
                }
            }
            Err(e) => {
                let e = e.to_string();
                prop_assert!(!ok, "refused a spec the model accepts: {}\n{}", e, text);
                prop_assert!(!e.contains('\n'), "a multi-line error: {:?}", e);
            }
        }
    }
}

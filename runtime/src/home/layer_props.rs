//! Property tests of the home layer's review: the unified diff `home diff` shows
//! ([`unified`]), applied to the old text by the small applier here, gives the new text,
//! whatever the lines (shared or not, blank, looking like diff syntax, no final newline);
//! and the walk of generated upper and real trees on /dev/shm ([`Layer::changes`]: names,
//! nesting, files, folders, symlinks in and out of home, FIFOs, whiteouts, opaque folders,
//! a hidden and an excluded path) reports exactly the changes a reference model of the
//! overlay conventions gives, never follows a symlink out of its tree (nothing of a decoy
//! tree beside home shows), refuses every symlink that points out of home, and its
//! diffs, applied to the real file, give the layer's file. Cases per run:
//! `PROPTEST_CASES` (defaults below; `hack/fuzz.sh` runs more).

use super::diff::unified;
use super::*;
use proptest::prelude::*;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

/// `PROPTEST_CASES` when set, else `cases`.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// Apply a unified diff (as [`unified`] writes it) to `old`.
fn apply_diff(old: &str, diff: &str) -> Result<String, String> {
    let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
    let lines: Vec<&str> = diff.split_inclusive('\n').collect();
    let mut out = String::new();
    let mut pos = 0;
    let mut in_hunk = false;
    for (i, line) in lines.iter().enumerate() {
        // a line of a file without a final newline is followed by this marker
        let no_eol = lines.get(i + 1).is_some_and(|n| n.starts_with('\\'));
        if !in_hunk && (line.starts_with("--- ") || line.starts_with("+++ ")) {
            continue;
        }
        if let Some(h) = line.strip_prefix("@@ -") {
            in_hunk = true;
            let old_range = h.split(' ').next().ok_or("bad hunk header")?;
            let (start, len) = match old_range.split_once(',') {
                Some((s, l)) => (s, l),
                None => (old_range, "1"),
            };
            let start: usize = start
                .parse()
                .map_err(|_| format!("bad hunk start {line:?}"))?;
            let len: usize = len
                .parse()
                .map_err(|_| format!("bad hunk length {line:?}"))?;
            let at = if len == 0 {
                start
            } else {
                start.saturating_sub(1)
            };
            if at < pos || at > old_lines.len() {
                return Err(format!("hunk at {at} out of order (at {pos})"));
            }
            out.extend(old_lines[pos..at].iter().copied());
            pos = at;
            continue;
        }
        if line.starts_with('\\') {
            continue;
        }
        let (op, rest) = line.split_at(line.len().min(1));
        let rest = if no_eol {
            rest.strip_suffix('\n').unwrap_or(rest)
        } else {
            rest
        };
        match op {
            " " | "-" => {
                if old_lines.get(pos) != Some(&rest) {
                    return Err(format!(
                        "line {pos} is {:?}, the diff says {rest:?}",
                        old_lines.get(pos)
                    ));
                }
                if op == " " {
                    out.push_str(rest);
                }
                pos += 1;
            }
            "+" => out.push_str(rest),
            _ => return Err(format!("unexpected diff line {line:?}")),
        }
    }
    out.extend(old_lines[pos.min(old_lines.len())..].iter().copied());
    Ok(out)
}

/// Texts from lines of a small alphabet, so that old and new share lines.
fn text() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(
            prop::sample::select(vec![
                "a",
                "b",
                "c",
                "",
                " ",
                "-a",
                "+b",
                " c",
                "@@ -1 +1 @@",
                "--- a/x",
                "+++ b/x",
                "\\ No newline at end of file",
                "tab\there",
                "cr\r",
                "\u{e9}t\u{e9}",
                "\u{1b}[2J",
            ]),
            0..12,
        ),
        any::<bool>(),
    )
        .prop_map(|(l, eol)| {
            let mut s = l.join("\n");
            if eol && !l.is_empty() {
                s.push('\n');
            }
            s
        })
}

/// Names in the generated trees (`secret` and `sub` exist only in the decoy tree).
const NAMES: &[&str] = &["a", "b", ".c", "x", "d e", "n\nl"];
/// File contents.
const CONTENTS: &[&str] = &[
    "",
    "one\n",
    "one\ntwo\n",
    "one\nTWO\n",
    "no newline",
    "bin\0ary",
];
/// Symlink targets (`TOP` is the folder holding home, upper and the decoy tree).
const TARGETS: &[&str] = &[
    "../outside",
    "../outside/secret",
    "TOP/outside",
    "TOP/home/a",
    "a",
    "b/../a",
    "../../..",
    ".",
    "..",
    "../home/a",
    "../../outside/sub",
];

#[derive(Debug, Clone)]
enum Node {
    File(usize, bool),
    Dir,
    Symlink(usize),
    Fifo,
    /// Upper only: a character device 0/0 or an empty file with the whiteout xattr.
    Whiteout(bool),
    /// Upper only: a folder with the opaque xattr.
    Opaque,
}

fn node(upper: bool) -> impl Strategy<Value = Node> {
    let common = prop_oneof![
        4 => (0..CONTENTS.len(), any::<bool>()).prop_map(|(c, x)| Node::File(c, x)),
        3 => Just(Node::Dir),
        2 => (0..TARGETS.len()).prop_map(Node::Symlink),
        1 => Just(Node::Fifo),
    ];
    if upper {
        prop_oneof![
            8 => common,
            1 => any::<bool>().prop_map(Node::Whiteout),
            1 => Just(Node::Opaque),
        ]
        .boxed()
    } else {
        common.boxed()
    }
}

fn entries(upper: bool) -> impl Strategy<Value = Vec<(Vec<&'static str>, Node)>> {
    prop::collection::vec(
        (
            prop::collection::vec(prop::sample::select(NAMES), 1..4),
            node(upper),
        ),
        0..10,
    )
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) -> bool {
    let (Ok(c), Ok(n)) = (CString::new(p.as_os_str().as_bytes()), CString::new(name)) else {
        return false;
    };
    // SAFETY: valid C strings and a valid buffer.
    unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        ) == 0
    }
}

/// The fixture: `<top>/{home,upper,outside}`; what of the overlay conventions took.
struct Fixture {
    _dir: tempfile::TempDir,
    top: PathBuf,
    home: PathBuf,
    upper: PathBuf,
    xattr_whiteouts: BTreeSet<PathBuf>,
    opaque: BTreeSet<PathBuf>,
}

fn build(
    home_entries: &[(Vec<&str>, Node)],
    upper_entries: &[(Vec<&str>, Node)],
) -> Result<Fixture, TestCaseError> {
    let dir = tempfile::tempdir_in("/dev/shm").map_err(fail)?;
    let top = std::fs::canonicalize(dir.path()).map_err(fail)?;
    let mut f = Fixture {
        home: top.join("home"),
        upper: top.join("upper"),
        top,
        _dir: dir,
        xattr_whiteouts: BTreeSet::new(),
        opaque: BTreeSet::new(),
    };
    for d in ["home", "upper", "outside/sub"] {
        std::fs::create_dir_all(f.top.join(d)).map_err(fail)?;
    }
    std::fs::write(f.top.join("outside/secret"), "SECRET\n").map_err(fail)?;
    std::fs::write(f.top.join("outside/sub/secret"), "SECRET\n").map_err(fail)?;
    for (root, list) in [
        (f.home.clone(), home_entries),
        (f.upper.clone(), upper_entries),
    ] {
        for (names, n) in list {
            let rel: PathBuf = names.iter().collect();
            let p = root.join(&rel);
            // parents as folders, never through a symlink the fixture made
            let mut q = root.clone();
            let mut ok = true;
            for c in &names[..names.len() - 1] {
                q.push(c);
                match std::fs::symlink_metadata(&q) {
                    Ok(m) if m.file_type().is_dir() => {}
                    Ok(_) => ok = false,
                    Err(_) => ok = std::fs::create_dir(&q).is_ok(),
                }
                if !ok {
                    break;
                }
            }
            if !ok || std::fs::symlink_metadata(&p).is_ok() {
                continue;
            }
            match n {
                Node::File(c, x) => {
                    std::fs::write(&p, CONTENTS[*c]).map_err(fail)?;
                    let mode = if *x { 0o755 } else { 0o644 };
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
                        .map_err(fail)?;
                }
                Node::Dir => std::fs::create_dir(&p).map_err(fail)?,
                Node::Symlink(t) => {
                    let t = TARGETS[*t].replace("TOP", &f.top.display().to_string());
                    std::os::unix::fs::symlink(t, &p).map_err(fail)?;
                }
                Node::Fifo => {
                    let c = CString::new(p.as_os_str().as_bytes()).map_err(fail)?;
                    // SAFETY: a valid C string.
                    unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
                }
                Node::Whiteout(dev) => {
                    let c = CString::new(p.as_os_str().as_bytes()).map_err(fail)?;
                    // SAFETY: a valid C string; a 0/0 character device is overlay's whiteout.
                    let made =
                        *dev && unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, 0) } == 0;
                    if !made {
                        std::fs::write(&p, "").map_err(fail)?;
                        if set_xattr(&p, "user.overlay.whiteout", b"y") {
                            f.xattr_whiteouts.insert(rel.clone());
                        }
                    }
                }
                Node::Opaque => {
                    std::fs::create_dir(&p).map_err(fail)?;
                    if set_xattr(&p, "user.overlay.opaque", b"y") {
                        f.opaque.insert(rel.clone());
                    }
                }
            }
        }
    }
    Ok(f)
}

fn entry_of(m: &std::fs::Metadata) -> EntryType {
    let t = m.file_type();
    if t.is_file() {
        EntryType::File
    } else if t.is_dir() {
        EntryType::Dir
    } else if t.is_symlink() {
        EntryType::Symlink
    } else {
        EntryType::Other
    }
}

type Expected = BTreeSet<(PathBuf, &'static str, &'static str)>;

fn kind_name(k: ChangeKind) -> &'static str {
    match k {
        ChangeKind::Added => "added",
        ChangeKind::Changed => "changed",
        ChangeKind::Removed => "removed",
    }
}

fn entry_name(e: EntryType) -> &'static str {
    match e {
        EntryType::File => "file",
        EntryType::Dir => "dir",
        EntryType::Symlink => "symlink",
        EntryType::Other => "other",
    }
}

/// Reference model of the walk: the changes of the upper folder `rel` (whose real
/// counterpart is a real folder when `real_dir`), by the overlay conventions.
fn model(f: &Fixture, rel: &Path, real_dir: bool, out: &mut Expected) -> std::io::Result<()> {
    let mut names: Vec<OsString> = std::fs::read_dir(f.upper.join(rel))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<_>>()?;
    names.sort();
    for name in &names {
        let path = rel.join(name);
        if path.starts_with("x") {
            continue;
        }
        let st = std::fs::symlink_metadata(f.upper.join(&path))?;
        let real = if real_dir {
            std::fs::symlink_metadata(f.home.join(&path)).ok()
        } else {
            None
        };
        let kind = if real.is_some() { "changed" } else { "added" };
        if path.starts_with(".c") {
            out.insert((path, kind, entry_name(entry_of(&st))));
            continue;
        }
        let t = st.file_type();
        let whiteout = (t.is_char_device() && st.rdev() == 0) || f.xattr_whiteouts.contains(&path);
        if whiteout {
            if let Some(r) = &real {
                out.insert((path, "removed", entry_name(entry_of(r))));
            }
            continue;
        }
        if t.is_file() {
            let same = real.as_ref().is_some_and(|r| {
                r.file_type().is_file()
                    && r.mode() & 0o777 == st.mode() & 0o777
                    && std::fs::read(f.home.join(&path)).ok()
                        == std::fs::read(f.upper.join(&path)).ok()
            });
            if !same {
                out.insert((path, kind, "file"));
            }
        } else if t.is_symlink() {
            let same = real.as_ref().is_some_and(|r| {
                r.file_type().is_symlink()
                    && std::fs::read_link(f.home.join(&path)).ok()
                        == std::fs::read_link(f.upper.join(&path)).ok()
            });
            if !same {
                out.insert((path, kind, "symlink"));
            }
        } else if t.is_dir() {
            let sub_real = real.as_ref().is_some_and(|r| r.file_type().is_dir());
            if !sub_real {
                out.insert((path.clone(), kind, "dir"));
            } else if f.opaque.contains(&path) {
                let keep: BTreeSet<OsString> = std::fs::read_dir(f.upper.join(&path))?
                    .map(|e| e.map(|e| e.file_name()))
                    .collect::<std::io::Result<_>>()?;
                for e in std::fs::read_dir(f.home.join(&path))? {
                    let n = e?.file_name();
                    if !keep.contains(&n) {
                        let r = std::fs::symlink_metadata(f.home.join(&path).join(&n))?;
                        out.insert((path.join(&n), "removed", entry_name(entry_of(&r))));
                    }
                }
            }
            model(f, &path, sub_real, out)?;
        } else {
            out.insert((path, kind, "other"));
        }
    }
    Ok(())
}

/// Found by `a_diff_applied_to_the_old_text_gives_the_new`: the diff library ended a line
/// at a lone `\r` and printed it without a newline, so the next line of the diff was glued
/// to it (`-cr\r+a`: an added line shown inside a removed one).
#[test]
fn regression_a_lone_cr_does_not_glue_diff_lines() {
    let d = unified(Path::new("x"), b"cr\r", b"a");
    assert_eq!(
        d,
        "--- a/~/x\n+++ b/~/x\n@@ -1 +1 @@\n-cr\r\n\\ No newline at end of file\n+a\n\\ No newline at end of file\n"
    );
    let d = unified(Path::new("x"), b"a\rb\nc\n", b"a\rB\nc\n");
    assert_eq!(
        d,
        "--- a/~/x\n+++ b/~/x\n@@ -1,2 +1,2 @@\n-a\rb\n+a\rB\n c\n"
    );
}

proptest! {
    #![proptest_config(config(10000))]

    #[test]
    fn a_diff_applied_to_the_old_text_gives_the_new(old in text(), new in text()) {
        let d = unified(Path::new("d e/n\nl"), old.as_bytes(), new.as_bytes());
        let got = apply_diff(&old, &d).map_err(|e| fail(format!("{e}\n{d}")))?;
        prop_assert_eq!(got, new, "diff:\n{}", d);
    }
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn the_walk_reports_the_models_changes_and_never_leaves_its_trees(
        home in entries(false),
        upper in entries(true),
    ) {
        let f = build(&home, &upper)?;
        let layer = Layer {
            home: f.home.clone(),
            upper: f.upper.clone(),
            excluded: vec![PathBuf::from("x")],
            hidden: vec![PathBuf::from(".c")],
        };
        let changes = layer.changes(&[], true).map_err(fail)?;
        let mut want = Expected::new();
        model(&f, Path::new(""), true, &mut want).map_err(fail)?;
        let got: Expected = changes
            .iter()
            .map(|c| (c.path.clone(), kind_name(c.kind), entry_name(c.entry)))
            .collect();
        prop_assert_eq!(&got, &want);
        for c in &changes {
            prop_assert!(
                c.path.components().all(|p| matches!(p, std::path::Component::Normal(n) if n != "secret" && n != "sub")),
                "{:?} is not a path of the trees", c.path
            );
            if c.path.starts_with(".c") {
                prop_assert!(c.refused.is_some(), "hidden {:?} not refused", c.path);
            }
            if let Some(t) = &c.target {
                let abs = f.home.join(c.path.parent().unwrap_or(Path::new(""))).join(t);
                let n = crate::home::reveal::normalize(&abs);
                let inside = n.starts_with(&f.home) && n != f.home;
                prop_assert!(inside || c.refused.is_some(), "{:?} -> {:?} points out and is not refused", c.path, t);
            }
            if let Some(d) = &c.diff {
                prop_assert!(!d.contains("SECRET"), "a diff of the decoy: {}", d);
                if c.entry == EntryType::File && c.kind != ChangeKind::Removed {
                    // the real file when there is one (never through a symlink or a FIFO)
                    let real = f.home.join(&c.path);
                    let old = match std::fs::symlink_metadata(&real) {
                        Ok(m) if c.kind == ChangeKind::Changed && m.file_type().is_file() => {
                            std::fs::read_to_string(&real).map_err(fail)?
                        }
                        _ => String::new(),
                    };
                    let new = std::fs::read_to_string(f.upper.join(&c.path)).map_err(fail)?;
                    let got = apply_diff(&old, d).map_err(|e| fail(format!("{e}\n{d}")))?;
                    prop_assert_eq!(got, new, "{:?}", c.path);
                }
            }
        }
    }
}

//! Property tests of the snapshot's readers of what the sandboxed command wrote in `.git`:
//! a capped read ([`read_at`]) returns a regular file whole exactly when it is within its
//! cap and refuses anything else (larger, a symlink, a FIFO, a folder); `.git/index`
//! files of any bytes, or written from entries with hostile paths (`..`, `/`, `.git`,
//! behind a symlinked folder) and then corrupted, are read without a panic and give only
//! workspace paths, never one through a symlink; HEAD and refs of generated names and
//! contents resolve only to an id written under `.git`, never to a decoy outside it; and
//! oversize files are refused without being read. Cases per run: `PROPTEST_CASES`
//! (defaults below; `hack/fuzz.sh` runs more).

use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

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

fn scratch() -> Result<tempfile::TempDir, TestCaseError> {
    tempfile::tempdir_in("/dev/shm").map_err(fail)
}

/// What a capped read is given.
#[derive(Debug, Clone)]
enum Kind {
    File(usize),
    Symlink,
    Fifo,
    Dir,
    Missing,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        6 => (0usize..80).prop_map(Kind::File),
        1 => Just(Kind::Symlink),
        1 => Just(Kind::Fifo),
        1 => Just(Kind::Dir),
        1 => Just(Kind::Missing),
    ]
}

/// A workspace `<top>/ws` with `.git/HEAD`, tracked-looking files `a`, `b/c`, a symlink
/// `l -> ../outside` and, outside it, `<top>/outside/secret` and decoy refs.
fn workspace(top: &Path) -> Result<PathBuf, TestCaseError> {
    let ws = top.join("ws");
    for d in ["ws/.git/refs/heads", "ws/b", "outside/refs/heads"] {
        std::fs::create_dir_all(top.join(d)).map_err(fail)?;
    }
    for (f, text) in [
        ("ws/.git/HEAD", "ref: refs/heads/main\n".to_string()),
        ("ws/a", "a".into()),
        ("ws/b/c", "c".into()),
        ("outside/secret", "secret".into()),
        ("outside/refs/heads/main", format!("{DECOY}\n")),
        ("ws/decoy", format!("{DECOY}\n")),
    ] {
        std::fs::write(top.join(f), text).map_err(fail)?;
    }
    std::os::unix::fs::symlink("../outside", ws.join("l")).map_err(fail)?;
    Ok(ws)
}

/// An object id found only outside `.git`.
const DECOY: &str = "dec0dec0dec0dec0dec0dec0dec0dec0dec0dec0";

/// Index entry paths: the workspace's own, and hostile ones.
fn index_path() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "a", "b/c", "b", "l/secret", "l", "../outside/secret", "/etc/passwd", ".git/HEAD",
            "b/.GIT/x", "./a", "a/", "", "b//c", "missing/x", "b/c/d", "decoy",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        1 => prop::collection::vec(prop::sample::select(vec![b'a', b'/', b'.', 0, b'l', 0xff]), 0..8),
    ]
}

/// The bytes of an index holding `paths` (as gix writes one, with a null checksum).
fn index_bytes(paths: &[Vec<u8>], modes: &[u8]) -> Vec<u8> {
    use gix::index::entry::{Flags, Mode, Stat};
    let mut state = gix::index::State::new(gix::hash::Kind::Sha1);
    for (i, p) in paths.iter().enumerate() {
        let mode = match modes.get(i).copied().unwrap_or(0) % 4 {
            0 => Mode::FILE,
            1 => Mode::FILE_EXECUTABLE,
            2 => Mode::SYMLINK,
            _ => Mode::COMMIT,
        };
        let id = gix::ObjectId::empty_blob(gix::hash::Kind::Sha1);
        state.dangerously_push_entry(Stat::default(), id, Flags::empty(), mode, p[..].into());
    }
    state.sort_entries();
    let mut out = Vec::new();
    let _ = state.write_to(&mut out, Default::default());
    out.extend_from_slice(&[0; 20]);
    out
}

/// A corruption of index bytes.
#[derive(Debug, Clone)]
enum Damage {
    Flip(prop::sample::Index, u8),
    Truncate(prop::sample::Index),
    Insert(prop::sample::Index, Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Damage::Flip(i, b)),
        any::<prop::sample::Index>().prop_map(Damage::Truncate),
        (
            any::<prop::sample::Index>(),
            prop::collection::vec(any::<u8>(), 1..8)
        )
            .prop_map(|(i, b)| Damage::Insert(i, b)),
    ]
}

fn apply(bytes: &mut Vec<u8>, d: &Damage) {
    match d {
        Damage::Flip(i, b) if !bytes.is_empty() => {
            let i = i.index(bytes.len());
            bytes[i] ^= b;
        }
        Damage::Truncate(i) => bytes.truncate(i.index(bytes.len() + 1)),
        Damage::Insert(i, b) => {
            let i = i.index(bytes.len() + 1);
            bytes.splice(i..i, b.iter().copied());
        }
        _ => {}
    }
}

/// A snapshot's path is a workspace path: relative, no empty, `.` or `..` component, no
/// NUL.
fn workspace_path(p: &str) -> bool {
    !p.contains('\0') && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Ref names as HEAD or a symbolic ref may write them.
fn ref_name() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            "refs/",
            "refs/",
            "refs/",
            "",
            "/",
            "../",
            "outside/refs/",
        ]),
        prop::collection::vec(
            prop::sample::select(vec![
                "heads",
                "main",
                "tags",
                "v1",
                "..",
                ".",
                "",
                "x.lock",
                "a@{1}",
                ".hidden",
                "a b",
                "a\\b",
                "HEAD",
                "decoy",
                "../../decoy",
                "../outside",
            ]),
            1..4,
        ),
    )
        .prop_map(|(lead, p)| format!("{lead}{}", p.join("/")))
}

/// What a ref file holds.
#[derive(Debug, Clone)]
enum RefText {
    Id(usize),
    Sym(String),
    Junk(String),
}

fn ref_text() -> impl Strategy<Value = RefText> {
    prop_oneof![
        3 => (0usize..4).prop_map(RefText::Id),
        2 => ref_name().prop_map(RefText::Sym),
        1 => "\\PC{0,12}".prop_map(RefText::Junk),
    ]
}

/// Object id number `i` written under `.git` (upper case sometimes: ids are read in any
/// case and given lower-case).
fn id(i: usize) -> String {
    let hex = format!("{:040x}", 0xa11_0000 + i);
    if i % 2 == 1 {
        hex.to_ascii_uppercase()
    } else {
        hex
    }
}

fn render(t: &RefText) -> String {
    match t {
        RefText::Id(i) => format!("{}\n", id(*i)),
        RefText::Sym(n) => format!("ref: {n}\n"),
        RefText::Junk(j) => j.clone(),
    }
}

proptest! {
    #![proptest_config(config(14000))]

    #[test]
    fn a_capped_read_gives_a_regular_file_within_its_cap_and_nothing_else(
        k in kind(),
        cap in 0u64..64,
    ) {
        let d = scratch()?;
        let p = d.path().join("f");
        let content: Vec<u8> = match &k {
            Kind::File(n) => (0..*n).map(|i| i as u8).collect(),
            _ => Vec::new(),
        };
        match &k {
            Kind::File(_) => std::fs::write(&p, &content).map_err(fail)?,
            Kind::Symlink => {
                std::fs::write(d.path().join("t"), b"target").map_err(fail)?;
                std::os::unix::fs::symlink("t", &p).map_err(fail)?;
            }
            Kind::Fifo => {
                let c = CString::new(p.as_os_str().as_bytes()).map_err(fail)?;
                // SAFETY: a valid C string.
                prop_assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
            }
            Kind::Dir => std::fs::create_dir(&p).map_err(fail)?,
            Kind::Missing => {}
        }
        let dir = DirStream::open_path(d.path()).map_err(fail)?;
        let got = read_at(&Ws(d.path()), dir.fd(), b"f", "f", cap);
        match (&k, got) {
            (Kind::File(n), Ok(Some(b))) => {
                prop_assert!(*n as u64 <= cap);
                prop_assert_eq!(b, content);
            }
            (Kind::File(n), Err(e)) => {
                prop_assert!(*n as u64 > cap, "{}", e);
                let want = format!("larger than {cap} bytes; not read");
                prop_assert!(e.ends_with(&want), "{}", e);
            }
            (Kind::Missing, Ok(None)) => {}
            (Kind::Symlink | Kind::Fifo | Kind::Dir, Err(e)) => {
                prop_assert!(e.contains("not followed") || e.contains("not a regular file"), "{}", e);
            }
            (k, g) => prop_assert!(false, "{:?} read as {:?}", k, g),
        }
    }
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn any_index_is_read_without_a_panic_and_gives_only_workspace_paths(
        paths in prop_oneof![
            // paths the snapshot accepts, so that the entries are looked at
            prop::collection::vec(
                prop::sample::select(vec!["a", "b/c", "b", "l/secret", "l/x/y", "l", "decoy", "missing/x", "b/c/d"])
                    .prop_map(|s| s.as_bytes().to_vec()),
                0..8,
            ),
            prop::collection::vec(index_path(), 0..8),
        ],
        modes in prop::collection::vec(any::<u8>(), 8),
        damage in prop::collection::vec(damage(), 0..3),
        raw in prop::option::weighted(0.15, prop::collection::vec(any::<u8>(), 0..96)),
    ) {
        let d = scratch()?;
        let ws = workspace(d.path())?;
        let bytes = match raw {
            // a header gix accepts, then anything
            Some(r) => [b"DIRC\0\0\0\x02".to_vec(), r].concat(),
            None => {
                let mut b = index_bytes(&paths, &modes);
                for x in &damage {
                    apply(&mut b, x);
                }
                b
            }
        };
        std::fs::write(ws.join(".git/index"), &bytes).map_err(fail)?;
        let Ok(s) = take(&ws, None, None) else { return Ok(()) };
        for (p, e) in &s.paths {
            prop_assert!(workspace_path(p), "snapshot path {:?}", p);
            prop_assert!(!p.split('/').any(|c| c.eq_ignore_ascii_case(".git")), "{:?}", p);
            if p.starts_with("l/") {
                // behind the symlink `l`: gone from the workspace, never looked at through it
                prop_assert_eq!(e.kind, "removed", "{:?}", p);
            }
        }
    }

    #[test]
    fn head_resolves_only_to_an_id_written_under_git(
        head in ref_text(),
        refs in prop::collection::vec((ref_name(), ref_text()), 0..5),
        packed in prop::collection::vec((0usize..4, ref_name()), 0..4),
    ) {
        let d = scratch()?;
        let ws = workspace(d.path())?;
        let git = ws.join(".git");
        for (name, text) in &refs {
            // only names that are plain paths below .git can be files there
            let Some(comps) = capsule_bundle::fsat::plain_components(Path::new(name)) else { continue };
            let Some((file, dirs)) = comps.split_last() else { continue };
            let dir = dirs.iter().fold(git.clone(), |p, c| p.join(c));
            if std::fs::create_dir_all(&dir).is_err() || dir.join(file).is_dir() {
                continue;
            }
            let _ = std::fs::write(dir.join(file), render(text));
        }
        let lines: String = packed.iter().map(|(i, n)| format!("{} {n}\n", id(*i))).collect();
        std::fs::write(git.join("packed-refs"), format!("# pack-refs with: peeled\n{lines}")).map_err(fail)?;
        // last: a ref may be named `HEAD` or `packed-refs`
        std::fs::write(git.join("HEAD"), render(&head)).map_err(fail)?;
        let written: BTreeSet<String> = (0..4).map(|i| id(i).to_ascii_lowercase()).collect();
        match take(&ws, None, None) {
            Ok(s) => {
                if let Some(h) = &s.head {
                    prop_assert!(written.contains(h), "HEAD resolved to {:?}", h);
                }
                // the simplest case has one answer
                if let RefText::Id(i) = head {
                    prop_assert_eq!(s.head, Some(id(i).to_ascii_lowercase()));
                }
            }
            Err(e) => prop_assert!(!e.contains('\n'), "{:?}", e),
        }
    }
}

/// Files over their cap are refused from their size, without being read: sparse files of
/// one byte more than each cap.
#[test]
fn oversize_files_are_refused_unread() {
    for (file, cap) in [
        ("index", INDEX_CAP),
        ("packed-refs", PACKED_REFS_CAP),
        ("HEAD", SMALL_CAP),
    ] {
        let d = tempfile::tempdir_in("/dev/shm").unwrap();
        let top = d.path();
        let ws = workspace(top).unwrap();
        std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/packed\n").unwrap();
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(ws.join(".git").join(file))
            .unwrap();
        f.set_len(cap + 1).unwrap();
        let t = std::time::Instant::now();
        let e = take(&ws, None, None).unwrap_err();
        assert!(
            e.ends_with(&format!(".git/{file}: larger than {cap} bytes; not read")),
            "{e}"
        );
        assert!(
            t.elapsed() < std::time::Duration::from_secs(2),
            "{file} was read"
        );
    }
}

//! The object cache of `open --source` (`capsule_bundle::objects::cache`): a second open of a
//! source reuses the packs verified by the first; a later commit adds a pack of only its
//! new objects; every workspace holds exactly what its commit reaches, as a real git
//! repository (fsck, log, blame, bisect); a cache entry that was tampered with is not
//! trusted; and no file a sandbox can write is shared between two capsules or with the
//! cache.

use capsule_e2e::git::{fixed_git as plain_git, fixed_git_out as git};
use capsule_e2e::*;
use serde_json::Value;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A commit in `src` that changes `f.txt` (one line more: `v<n>`) and adds `u<n>.txt`.
fn commit(src: &Path, n: usize) -> String {
    let text: String = (0..=n).map(|i| format!("v{i}\n")).collect();
    std::fs::write(src.join("f.txt"), text).unwrap();
    std::fs::write(src.join(format!("u{n}.txt")), format!("only in {n}\n")).unwrap();
    git(src, &["add", "-A"]);
    git(src, &["commit", "-q", "-m", &format!("version {n}")]);
    git(src, &["rev-parse", "HEAD"])
}

/// A checkout with `n` commits, packed.
fn history(src: &Path, n: usize) -> Vec<String> {
    std::fs::create_dir_all(src).unwrap();
    git(src, &["init", "-q", "--initial-branch=main"]);
    let v: Vec<String> = (0..n).map(|i| commit(src, i)).collect();
    git(src, &["repack", "-q", "-a", "-d"]);
    v
}

fn open(r: &Runner, root: &Path, src: &Path, name: &str) -> (Value, Output) {
    let o = run(r.capsule(root).env("RUST_LOG", "warn").args([
        "open",
        "--source",
        src.to_str().unwrap(),
        "--name",
        name,
        "--json",
    ]));
    assert_ok(&o, &format!("open --source as {name} ({})", r.label()));
    let j: Value = serde_json::from_str(stdout(&o).trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(&o)));
    (j, o)
}

fn ws_of(j: &Value) -> PathBuf {
    PathBuf::from(j["workspace"].as_str().unwrap())
}

/// The files of the cache's packs (all sources), sorted.
fn cache_packs(root: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for s in std::fs::read_dir(root.join("object-cache"))
        .unwrap()
        .flatten()
    {
        for f in std::fs::read_dir(s.path().join("packs")).unwrap().flatten() {
            v.push(f.path());
        }
    }
    v.sort();
    v
}

fn cache_records(root: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for s in std::fs::read_dir(root.join("object-cache"))
        .unwrap()
        .flatten()
    {
        for f in std::fs::read_dir(s.path().join("records"))
            .unwrap()
            .flatten()
        {
            v.push(f.path());
        }
    }
    v.sort();
    v
}

/// Every object id the repository at `ws` holds, sorted.
fn objects_of(ws: &Path) -> Vec<String> {
    let mut v: Vec<String> = git(
        ws,
        &[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname)",
        ],
    )
    .lines()
    .map(str::to_string)
    .collect();
    v.sort();
    v.dedup();
    v
}

/// What `commit` reaches in `src`, sorted.
fn reach(src: &Path, commit: &str) -> Vec<String> {
    let mut v: Vec<String> = git(src, &["rev-list", "--objects", commit])
        .lines()
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// A real checkout: fsck clean, history walked by log, blame and bisect.
fn assert_real_checkout(ws: &Path, commits: &[String]) {
    git(ws, &["fsck", "--strict", "--no-dangling"]);
    assert_eq!(git(ws, &["status", "--porcelain"]), "");
    assert_eq!(
        git(ws, &["rev-list", "--count", "HEAD"]),
        commits.len().to_string()
    );
    let blame = git(ws, &["blame", "--porcelain", "f.txt"]);
    assert!(
        blame.contains(&commits[0]),
        "blame reaches the first commit"
    );
    git(ws, &["bisect", "start", "HEAD", &commits[0]]);
    let b = git(ws, &["bisect", "run", "sh", "-c", "! grep -qx v2 f.txt"]);
    assert!(
        b.contains(&format!("{} is the first bad commit", commits[2])),
        "{b}"
    );
    git(ws, &["bisect", "reset"]);
}

fn sha(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

#[test]
fn a_second_open_reuses_the_cache_and_a_later_commit_adds_only_its_objects() {
    for r in runners() {
        let s = scratch();
        let src = s.path().join("src");
        let mut commits = history(&src, 5);
        r.own(s.path());
        let root = s.path().join("root");

        let (a, _) = open(&r, &root, &src, "a");
        let packs = cache_packs(&root);
        assert_eq!(packs.len(), 2, "one pack and its index: {packs:?}");
        let stamps: Vec<(u64, i64)> = packs
            .iter()
            .map(|p| {
                let m = std::fs::metadata(p).unwrap();
                (m.ino(), m.ctime_nsec())
            })
            .collect();
        let (b, _) = open(&r, &root, &src, "b");
        assert_eq!(cache_packs(&root), packs, "the second open adds nothing");
        for (p, st) in packs.iter().zip(&stamps) {
            let m = std::fs::metadata(p).unwrap();
            assert_eq!((m.ino(), m.ctime_nsec()), *st, "the cache is not rewritten");
            assert_eq!(m.mode() & 0o222, 0, "a cached pack is read-only");
        }
        assert_eq!(a["tree_digest"], b["tree_digest"], "the same tree digest");
        let wb = ws_of(&b);
        let v = run(r.capsule(&root).args(["verify", "b", "--json"]));
        let vj: Value = serde_json::from_str(stdout(&v).trim()).unwrap();
        assert_eq!(
            vj["actual_tree_digest"], b["tree_digest"],
            "the recorded digest is the files' digest"
        );
        assert_eq!(objects_of(&wb), reach(&src, commits.last().unwrap()));
        assert_real_checkout(&wb, &commits);

        // a later commit: a new pack of only what it adds
        commits.push(commit(&src, 5));
        // the source only: a chown of the cache would change its stamps
        r.own(&src);
        let (c, _) = open(&r, &root, &src, "c");
        let wc = ws_of(&c);
        let now = cache_packs(&root);
        assert_eq!(now.len(), 4, "one new pack: {now:?}");
        let new_pack = now
            .iter()
            .find(|p| !packs.contains(p) && p.extension().unwrap() == "pack")
            .unwrap();
        assert!(
            std::fs::metadata(new_pack).unwrap().len() < 1024,
            "the new pack holds only the new commit's few objects"
        );
        assert_eq!(objects_of(&wc), reach(&src, commits.last().unwrap()));
        assert_eq!(
            std::fs::read_dir(wc.join(".git/objects/pack"))
                .unwrap()
                .count(),
            4,
            "the old pack and the new one"
        );
        assert_real_checkout(&wc, &commits);

        // a branch off an older commit gets none of main's later objects
        git(&src, &["checkout", "-q", "-b", "side", &commits[3]]);
        std::fs::write(src.join("side.txt"), "side\n").unwrap();
        git(&src, &["add", "-A"]);
        git(&src, &["commit", "-q", "-m", "side"]);
        let side = git(&src, &["rev-parse", "HEAD"]);
        r.own(&src);
        let (d, _) = open(&r, &root, &src, "d");
        let wd = ws_of(&d);
        assert_eq!(objects_of(&wd), reach(&src, &side));
        for later in &commits[4..] {
            assert!(
                !objects_of(&wd).contains(later),
                "{later} (main only) is in the side branch's workspace"
            );
        }
        git(&wd, &["fsck", "--strict", "--no-dangling"]);
    }
}

#[test]
fn a_tampered_or_hostile_cache_entry_is_not_trusted() {
    let r = Runner::Current;
    let s = scratch();
    let src = s.path().join("src");
    let commits = history(&src, 4);
    let head = commits.last().unwrap().clone();
    let root = s.path().join("root");
    open(&r, &root, &src, "first");
    let want = reach(&src, &head);

    let pack_file = |root: &Path| {
        cache_packs(root)
            .into_iter()
            .find(|p| p.extension().unwrap() == "pack")
            .unwrap()
    };
    let reopen = |name: &str, what: &str| {
        let (j, o) = open(&r, &root, &src, name);
        assert!(
            stderr(&o).contains("not trusted"),
            "{what}: the open must say the cache entry is not trusted: {}",
            stderr(&o)
        );
        let ws = ws_of(&j);
        assert_eq!(objects_of(&ws), want, "{what}");
        git(&ws, &["fsck", "--strict", "--no-dangling"]);
        let (_, o) = open(&r, &root, &src, &format!("{name}-again"));
        assert!(
            !stderr(&o).contains("not trusted"),
            "{what}: the cache was filled anew: {}",
            stderr(&o)
        );
    };

    // a byte of the pack changed in place (made writable first, read-only again after)
    let p = pack_file(&root);
    let mut bytes = sha(&p);
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(&bytes[mid..mid + 1], mid as u64).unwrap();
    }
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o444)).unwrap();
    reopen("flipped", "a pack written in place");
    assert!(!p.exists(), "the tampered pack is removed");

    // the pack replaced by a file with the same bytes and mode (another inode)
    let p = pack_file(&root);
    let copy = p.with_extension("copy");
    std::fs::copy(&p, &copy).unwrap();
    std::fs::rename(&copy, &p).unwrap();
    reopen("replaced", "a pack replaced");

    // the pack replaced by a symlink to a good copy elsewhere
    let p = pack_file(&root);
    let elsewhere = s.path().join("elsewhere.pack");
    std::fs::copy(&p, &elsewhere).unwrap();
    std::fs::remove_file(&p).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &p).unwrap();
    reopen("symlinked", "a symlinked pack");

    // a record naming a pack outside the cache
    let rec = cache_records(&root)
        .into_iter()
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with(&head))
        .unwrap();
    let mut j: Value = serde_json::from_slice(&sha(&rec)).unwrap();
    let outside = s.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    j["packs"][0]["file"] = Value::String(format!("../../../outside/x.{}", "a"));
    std::fs::write(&rec, serde_json::to_vec(&j).unwrap()).unwrap();
    reopen("escaping", "a record naming a path outside");

    // a record that is not JSON
    let rec = cache_records(&root)
        .into_iter()
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with(&head))
        .unwrap();
    std::fs::write(&rec, b"{ not json").unwrap();
    reopen("garbled", "a garbled record");
}

#[test]
fn two_capsules_share_nothing_writable() {
    each_runner_open(|r, s, root, src| {
        let (a, _) = open(r, root, src, "a");
        let (b, _) = open(r, root, src, "b");
        let (wa, wb) = (ws_of(&a), ws_of(&b));
        // no file of either workspace's git dir is the same file as one of the other's or
        // of the cache, nor has another name
        let files = |d: &Path| -> Vec<(u64, u64, PathBuf)> {
            let mut v = Vec::new();
            let mut todo = vec![d.to_path_buf()];
            while let Some(d) = todo.pop() {
                for e in std::fs::read_dir(&d).unwrap().flatten() {
                    let m = std::fs::symlink_metadata(e.path()).unwrap();
                    if m.is_dir() {
                        todo.push(e.path());
                    } else {
                        assert_eq!(m.nlink(), 1, "{} has other names", e.path().display());
                        v.push((m.dev(), m.ino(), e.path()));
                    }
                }
            }
            v
        };
        let fa = files(&wa.join(".git"));
        let fb = files(&wb.join(".git"));
        let fc = files(&root.join("object-cache"));
        for (dev, ino, p) in &fa {
            for (d2, i2, q) in fb.iter().chain(&fc) {
                assert!(
                    (dev, ino) != (d2, i2),
                    "{} and {} are one file",
                    p.display(),
                    q.display()
                );
            }
        }
        // the sandbox of `a` rewrites its own pack: `b` and the cache stay as they were
        let before: Vec<Vec<u8>> = cache_packs(root).iter().map(|p| sha(p)).collect();
        let pb: Vec<(PathBuf, Vec<u8>)> = fb
            .iter()
            .filter(|(_, _, p)| p.to_str().unwrap().contains("objects/pack/"))
            .map(|(_, _, p)| (p.clone(), sha(p)))
            .collect();
        let o = run(r.capsule(root).args([
            "exec",
            "a",
            "--",
            "sh",
            "-c",
            "set -e; for p in .git/objects/pack/*; do chmod u+w \"$p\"; printf garbage | dd of=\"$p\" bs=1 seek=40 conv=notrunc 2>/dev/null; done; echo wrote",
        ]));
        assert_ok(&o, "the sandbox writes its own workspace's packs");
        assert!(stdout(&o).contains("wrote"), "{}", stdout(&o));
        assert!(
            git_fails(&wa, &["fsck", "--strict"]),
            "a's packs were written"
        );
        assert_eq!(
            cache_packs(root).iter().map(|p| sha(p)).collect::<Vec<_>>(),
            before,
            "the cache changed"
        );
        for (p, bytes) in &pb {
            assert_eq!(&sha(p), bytes, "{} changed", p.display());
        }
        git(&wb, &["fsck", "--strict", "--no-dangling"]);
        let (c, o) = open(r, root, src, "c");
        assert!(!stderr(&o).contains("not trusted"), "{}", stderr(&o));
        git(&ws_of(&c), &["fsck", "--strict", "--no-dangling"]);
        let _ = s;
    });
}

fn git_fails(dir: &Path, args: &[&str]) -> bool {
    !plain_git(dir).args(args).output().unwrap().status.success()
}

/// `f(runner, scratch, capsule root, source)` for each runner, with a small history.
fn each_runner_open(f: impl Fn(&Runner, &tempfile::TempDir, &Path, &Path)) {
    for r in runners() {
        let s = scratch();
        let src = s.path().join("src");
        history(&src, 3);
        r.own(s.path());
        let root = s.path().join("root");
        f(&r, &s, &root, &src);
    }
}

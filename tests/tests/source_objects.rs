//! Pinned repositories and `--source` checkouts give only their own objects: alternates
//! (`objects/info/alternates`) are never followed, so a repository someone prepared to
//! borrow objects from another one (a password store, another capsule's repository) cannot
//! pull those into a workspace; a pinned repo's `.git` file or symlinked object store that
//! leads elsewhere is refused; the workspace holds only what its commit reaches.

use capsule_e2e::git::{fixed_git as plain_git, fixed_git_out as git};
use capsule_e2e::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `git cat-file -e id` in `dir`: does its object store hold `id`?
fn has_object(dir: &Path, id: &str) -> bool {
    plain_git(dir)
        .args(["cat-file", "-e", id])
        .output()
        .unwrap()
        .status
        .success()
}

fn cap(root: &Path, args: &[&str]) -> std::process::Output {
    run(Runner::Current.capsule(root).args(args))
}

fn json_of(o: &std::process::Output) -> Value {
    serde_json::from_str(stdout(o).trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", stdout(o), stderr(o)))
}

/// Files under `dir`, recursively (empty folders do not count).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().unwrap().is_dir() {
                v.extend(files_under(&e.path()));
            } else {
                v.push(e.path());
            }
        }
    }
    v
}

struct Repos {
    s: tempfile::TempDir,
    /// The repository holding the secret (someone else's password store, say).
    secret: PathBuf,
    secret_commit: String,
    secret_blob: String,
    /// A repository borrowing the secret's objects through `objects/info/alternates`.
    borrower: PathBuf,
}

fn repos() -> Repos {
    let s = scratch();
    let secret = s.path().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    git(&secret, &["init", "-q", "--initial-branch=main"]);
    std::fs::write(secret.join("password.txt"), "TOP-SECRET-7731\n").unwrap();
    git(&secret, &["add", "-A"]);
    git(&secret, &["commit", "-q", "-m", "secret"]);
    let secret_commit = git(&secret, &["rev-parse", "HEAD"]);
    let secret_blob = git(&secret, &["rev-parse", "HEAD:password.txt"]);
    let borrower = s.path().join("borrower");
    git(
        s.path(),
        &[
            "clone",
            "-q",
            "--shared",
            secret.to_str().unwrap(),
            borrower.to_str().unwrap(),
        ],
    );
    assert!(borrower.join(".git/objects/info/alternates").is_file());
    assert!(has_object(&borrower, &secret_blob));
    Repos {
        s,
        secret,
        secret_commit,
        secret_blob,
        borrower,
    }
}

fn pinned_spec(dir: &Path, name: &str, repo: &Path, commit: &str) -> PathBuf {
    let spec = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &spec,
        format!(
            "name: {name}\nsource:\n  repo: {}\n  commit: {commit}\n",
            repo.display()
        ),
    )
    .unwrap();
    spec
}

/// A root commit in `repo` whose tree holds `files` plus, optionally, an entry naming
/// `extra_blob` (an object `repo` has only through its alternates).
fn own_commit(repo: &Path, files: &[(&str, &str)], extra_blob: Option<&str>) -> String {
    let mut tree = String::new();
    for (name, content) in files {
        let p = repo.join(format!(".tmp-{name}"));
        std::fs::write(&p, content).unwrap();
        let id = git(repo, &["hash-object", "-w", p.to_str().unwrap()]);
        std::fs::remove_file(&p).unwrap();
        tree.push_str(&format!("100644 blob {id}\t{name}\n"));
    }
    if let Some(b) = extra_blob {
        tree.push_str(&format!("100644 blob {b}\tborrowed.txt\n"));
    }
    let mut c = plain_git(repo);
    c.arg("mktree")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(tree.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_ok(&o, "mktree");
    let tree_id = stdout(&o).trim().to_string();
    git(repo, &["commit-tree", &tree_id, "-m", "own"])
}

fn assert_refused(o: &std::process::Output, root: &Path, what: &str, needs: &[&str]) {
    assert_eq!(o.status.code(), Some(1), "{what}: {}", stderr(o));
    let err = stderr(o);
    assert_eq!(err.trim().lines().count(), 1, "{what}: one line: {err}");
    for n in needs {
        assert!(err.contains(n), "{what}: {n:?} missing in: {err}");
    }
    let left = files_under(root);
    assert!(left.is_empty(), "{what}: left behind: {left:?}");
}

#[test]
fn a_pinned_commit_only_reachable_through_alternates_is_refused() {
    let r = repos();
    let root = r.s.path().join("root");
    let spec = pinned_spec(r.s.path(), "borrowed", &r.borrower, &r.secret_commit);
    let o = cap(&root, &["open", spec.to_str().unwrap()]);
    assert_refused(
        &o,
        &root,
        "commit in the alternate",
        &[
            &format!(
                "commit {} needs object {}",
                r.secret_commit, r.secret_commit
            ),
            "not in the repository's own object store (it has alternates, which are not followed)",
        ],
    );
}

#[test]
fn a_pinned_tree_naming_a_blob_only_in_the_alternate_is_refused() {
    let r = repos();
    let root = r.s.path().join("root");
    let c = own_commit(&r.borrower, &[("own.txt", "own\n")], Some(&r.secret_blob));
    let spec = pinned_spec(r.s.path(), "blob", &r.borrower, &c);
    let o = cap(&root, &["open", spec.to_str().unwrap()]);
    assert_refused(
        &o,
        &root,
        "blob in the alternate",
        &[
            &format!("commit {c} needs object {}", r.secret_blob),
            "it has alternates, which are not followed",
        ],
    );
}

#[test]
fn a_pinned_repo_with_alternates_gives_only_what_its_commit_reaches() {
    let r = repos();
    let root = r.s.path().join("root");
    let c = own_commit(&r.borrower, &[("own.txt", "own\n")], None);
    let spec = pinned_spec(r.s.path(), "own", &r.borrower, &c);
    let o = cap(&root, &["open", spec.to_str().unwrap(), "--json"]);
    assert_ok(&o, "open a commit the repository holds itself");
    let j = json_of(&o);
    assert_eq!(j["head"], c.as_str());
    let ws = PathBuf::from(j["workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(ws.join("own.txt")).unwrap(),
        "own\n"
    );
    // no shared object store, and none of the borrowed objects
    assert!(!ws.join(".git/objects/info/alternates").exists());
    assert!(has_object(&ws, &c));
    for id in [&r.secret_blob, &r.secret_commit] {
        assert!(!has_object(&ws, id), "{id} leaked into the workspace");
    }
    let cache = root.join("repo-cache").join(format!("{c}.git"));
    assert!(cache.is_dir(), "cache entry {}", cache.display());
    assert!(!cache.join("objects/info/alternates").exists());
    assert!(!has_object(&cache, &r.secret_blob), "leaked into the cache");
    let o = run(plain_git(&ws).args(["fsck", "--strict"]));
    assert_ok(&o, "fsck of the workspace");
    let secret_text = "TOP-SECRET-7731";
    for f in files_under(&root) {
        let data = std::fs::read(&f).unwrap();
        assert!(
            !data
                .windows(secret_text.len())
                .any(|w| w == secret_text.as_bytes()),
            "{} holds the secret",
            f.display()
        );
    }
    // the repository's own other objects (another branch) stay out too
    let other = own_commit(&r.borrower, &[("other.txt", "other branch\n")], None);
    assert!(!has_object(&ws, &other));
}

#[test]
fn a_pinned_repo_leading_elsewhere_is_refused() {
    let r = repos();
    let root = r.s.path().join("root");
    // a `.git` file pointing at another repository's git dir
    let gitfile = r.s.path().join("gitfile");
    std::fs::create_dir_all(&gitfile).unwrap();
    std::fs::write(
        gitfile.join(".git"),
        format!("gitdir: {}\n", r.secret.join(".git").display()),
    )
    .unwrap();
    let spec = pinned_spec(r.s.path(), "gitfile", &gitfile, &r.secret_commit);
    let o = cap(&root, &["open", spec.to_str().unwrap()]);
    assert_refused(&o, &root, "gitdir file", &["gitdir file or symlink"]);
    // a file:// URL (git's upload-pack would serve the alternates)
    let spec = pinned_spec(
        r.s.path(),
        "fileurl",
        Path::new(&format!("file://{}", r.borrower.display())),
        &r.secret_commit,
    );
    let o = cap(&root, &["open", spec.to_str().unwrap()]);
    assert_refused(&o, &root, "file:// URL", &["file:// URLs are not fetched"]);
    // a `.git` symlink to it
    let link = r.s.path().join("gitlink");
    std::fs::create_dir_all(&link).unwrap();
    std::os::unix::fs::symlink(r.secret.join(".git"), link.join(".git")).unwrap();
    let spec = pinned_spec(r.s.path(), "gitlink", &link, &r.secret_commit);
    let o = cap(&root, &["open", spec.to_str().unwrap()]);
    assert_refused(&o, &root, ".git symlink", &["gitdir file or symlink"]);
    // a repository whose object store is a symlink to the secret's
    let objlink = r.s.path().join("objlink");
    std::fs::create_dir_all(&objlink).unwrap();
    git(&objlink, &["init", "-q"]);
    std::fs::remove_dir_all(objlink.join(".git/objects")).unwrap();
    std::os::unix::fs::symlink(r.secret.join(".git/objects"), objlink.join(".git/objects"))
        .unwrap();
    let spec = pinned_spec(r.s.path(), "objlink", &objlink, &r.secret_commit);
    let o = cap(&root, &["open", spec.to_str().unwrap()]);
    assert_refused(&o, &root, "objects symlink", &["is a symlink"]);
    // a fan-out folder symlinked into the secret's store
    let fanlink = r.s.path().join("fanlink");
    std::fs::create_dir_all(&fanlink).unwrap();
    git(&fanlink, &["init", "-q"]);
    let fan = &r.secret_commit[..2];
    std::os::unix::fs::symlink(
        r.secret.join(".git/objects").join(fan),
        fanlink.join(".git/objects").join(fan),
    )
    .unwrap();
    let spec = pinned_spec(r.s.path(), "fanlink", &fanlink, &r.secret_commit);
    let o = cap(&root, &["open", spec.to_str().unwrap()]);
    assert_refused(
        &o,
        &root,
        "fan-out symlink",
        &["is a symlink", "not followed"],
    );
    // a linked worktree of another repository (its git dir has a commondir)
    let wt = r.s.path().join("wt");
    git(
        &r.secret,
        &["worktree", "add", "-q", "--detach", wt.to_str().unwrap()],
    );
    let spec = pinned_spec(r.s.path(), "wt", &wt, &r.secret_commit);
    let o = cap(&root, &["open", spec.to_str().unwrap()]);
    assert_refused(&o, &root, "linked worktree", &["gitdir file or symlink"]);
    let spec = pinned_spec(
        r.s.path(),
        "wtdir",
        &r.secret.join(".git/worktrees/wt"),
        &r.secret_commit,
    );
    let o = cap(&root, &["open", spec.to_str().unwrap()]);
    assert_refused(&o, &root, "worktree git dir", &["pinned repo"]);
}

#[test]
fn a_source_checkout_with_alternates_gives_only_its_own_objects() {
    let r = repos();
    let root = r.s.path().join("root");
    // HEAD only in the alternate: refused, nothing made
    let o = cap(
        &root,
        &[
            "open",
            "--source",
            r.borrower.to_str().unwrap(),
            "--name",
            "b",
        ],
    );
    assert_refused(
        &o,
        &root,
        "--source HEAD in the alternate",
        &["it has alternates, which are not followed"],
    );
    // HEAD on an own commit: opened, without the borrowed objects
    let c = own_commit(&r.borrower, &[("own.txt", "own\n")], None);
    git(&r.borrower, &["update-ref", "refs/heads/own", &c]);
    git(&r.borrower, &["checkout", "-q", "-f", "own"]);
    // two versions of a large file, packed (with a delta) without the borrowed objects
    let big: String = (0..3000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(r.borrower.join("big.txt"), &big).unwrap();
    git(&r.borrower, &["add", "big.txt"]);
    git(&r.borrower, &["commit", "-q", "-m", "big"]);
    std::fs::write(
        r.borrower.join("big.txt"),
        big.replace("line 1500\n", "changed\n"),
    )
    .unwrap();
    git(&r.borrower, &["commit", "-q", "-am", "big v2"]);
    git(&r.borrower, &["repack", "-q", "-a", "-d", "-l", "-f"]);
    let head = git(&r.borrower, &["rev-parse", "HEAD"]);
    let o = cap(
        &root,
        &[
            "open",
            "--source",
            r.borrower.to_str().unwrap(),
            "--name",
            "b",
            "--json",
        ],
    );
    assert_ok(&o, "open --source on an own commit");
    let j = json_of(&o);
    assert_eq!(j["head"], head.as_str());
    let ws = PathBuf::from(j["workspace"].as_str().unwrap());
    assert!(std::fs::read_to_string(ws.join("big.txt"))
        .unwrap()
        .contains("changed\n"));
    assert_eq!(git(&ws, &["rev-list", "--count", "HEAD"]), "3");
    assert_eq!(
        std::fs::read_to_string(ws.join("own.txt")).unwrap(),
        "own\n"
    );
    assert!(!ws.join(".git/objects/info/alternates").exists());
    for id in [&r.secret_blob, &r.secret_commit] {
        assert!(!has_object(&ws, id), "{id} leaked into the workspace");
    }
    assert_ok(&run(plain_git(&ws).args(["fsck", "--strict"])), "fsck");
}

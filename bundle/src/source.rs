//! Workspaces from existing repositories, without ever running git on them:
//!
//! - `--source PATH` ([`from_checkout`]): the operator's checkout (a main or linked
//!   worktree, on a branch or detached) is opened read-only with gix (isolated: no
//!   environment, no global/system config; gix runs no hooks, filters or fsmonitor). A
//!   fresh repository is created, the object files (packs and loose objects, plus those
//!   of alternates) are *copied* into it (no hardlinks, no alternates: nothing writable
//!   is shared), HEAD's branch ref is written, and the work tree is checked out by gix with
//!   the new repository's empty configuration, so no filter driver runs. Nothing in the
//!   source is written, locked or refreshed.
//! - pinned `repo` + `commit` ([`from_pinned`]): a content-addressed cache of bare
//!   repositories under `Layout::repo_cache_dir()/<commit>.git`; a second open of the same
//!   commit reads only the cache.

use crate::error::{Error, IoContext, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// What a checkout-based workspace was made from.
#[derive(Debug, Clone)]
pub struct Imported {
    pub commit: String,
    pub branch: Option<String>,
    /// Tree digest computed from the objects during checkout, when that is exact.
    pub tree_digest: Option<String>,
}

/// Object folders of a repository: its own and, one level deep, its alternates.
fn object_dirs(common_dir: &Path) -> Vec<PathBuf> {
    let own = common_dir.join("objects");
    let mut v = vec![own.clone()];
    if let Ok(text) = std::fs::read_to_string(own.join("info/alternates")) {
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let p = if Path::new(line).is_absolute() {
                PathBuf::from(line)
            } else {
                own.join(line)
            };
            if p.is_dir() {
                v.push(p);
            }
        }
    }
    v
}

/// Copy regular files of `src` objects folders (packs, loose objects, commit-graph) into
/// `dst_objects`. Never hardlinks; symlinks are skipped; existing files are kept.
fn copy_objects(srcs: &[PathBuf], dst_objects: &Path) -> Result<()> {
    for src in srcs {
        let rd = match std::fs::read_dir(src) {
            Ok(rd) => rd,
            Err(e) => return Err(Error::io(src, e)),
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(n) = name.to_str() else { continue };
            let Ok(ft) = e.file_type() else { continue };
            if !ft.is_dir() {
                continue;
            }
            let is_fanout = n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit());
            if !(is_fanout || n == "pack") {
                continue;
            }
            let dst = dst_objects.join(n);
            std::fs::create_dir_all(&dst).at(&dst)?;
            for f in std::fs::read_dir(e.path()).at(e.path())?.flatten() {
                let Ok(fft) = f.file_type() else { continue };
                if !fft.is_file() {
                    continue;
                }
                let fname = f.file_name();
                if n == "pack" {
                    let s = fname.to_string_lossy();
                    // temporary or lock files of a concurrent git are not ours to copy
                    if s.starts_with("tmp_") || s.ends_with(".lock") || s.ends_with(".keep") {
                        continue;
                    }
                }
                let to = dst.join(&fname);
                if to.exists() {
                    continue;
                }
                std::fs::copy(f.path(), &to).at(f.path())?;
            }
        }
    }
    Ok(())
}

/// Create an empty repository with a work tree at `dest` (isolated config).
fn init_repo(dest: &Path) -> Result<PathBuf> {
    gix::ThreadSafeRepository::init_opts(
        dest,
        gix::create::Kind::WithWorktree,
        gix::create::Options::default(),
        gix::open::Options::isolated(),
    )
    .map_err(|e| {
        Error::other(format!(
            "{}: cannot create a repository ({e})",
            dest.display()
        ))
    })?;
    Ok(dest.join(".git"))
}

/// Point HEAD at `commit`, on `branch` if given (ref file written directly), else detached.
fn set_head(git_dir: &Path, commit: &str, branch: Option<&str>) -> Result<()> {
    match branch {
        Some(b) => {
            if !crate::spec::valid_ref_name(b) {
                return Err(Error::other(format!("branch name {b:?} is not valid")));
            }
            let r = git_dir.join("refs/heads").join(b);
            if let Some(p) = r.parent() {
                std::fs::create_dir_all(p).at(p)?;
            }
            std::fs::write(&r, format!("{commit}\n")).at(&r)?;
            let h = git_dir.join("HEAD");
            std::fs::write(&h, format!("ref: refs/heads/{b}\n")).at(&h)
        }
        None => {
            let h = git_dir.join("HEAD");
            std::fs::write(&h, format!("{commit}\n")).at(&h)
        }
    }
}

/// Check out HEAD's tree into the (empty) work tree of the repository at `dest` with gix,
/// and write the index. Returns the tree digest when it could be computed from the
/// objects alongside the checkout (no `.gitattributes` that could convert content);
/// `None` means: compute it from the files.
fn checkout_head(dest: &Path) -> Result<Option<String>> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Error::other(format!("{}: checkout: {what}: {e}", dest.display()))
    };
    let repo =
        gix::open_opts(dest, gix::open::Options::isolated()).map_err(|e| fail("open", &e))?;
    let commit = repo.head_commit().map_err(|e| fail("HEAD", &e))?;
    let tree = commit.tree_id().map_err(|e| fail("tree", &e))?.detach();
    let mut index = repo.index_from_tree(&tree).map_err(|e| fail("index", &e))?;
    // the digest from the blobs, in a second thread while the files are written
    let entries: Vec<(Vec<u8>, gix::ObjectId)> = index
        .entries()
        .iter()
        .filter(|e| e.mode != gix::index::entry::Mode::COMMIT)
        .map(|e| (e.path(&index).to_vec(), e.id))
        .collect();
    let convertible = entries
        .iter()
        .any(|(p, _)| p == b".gitattributes" || p.ends_with(b"/.gitattributes"));
    let sync_repo = repo.clone().into_sync();
    let digest_thread = (!convertible).then(|| {
        std::thread::spawn(move || -> Option<String> {
            let repo = sync_repo.to_thread_local();
            crate::digest::digest_entries(entries.iter().map(|(p, id)| {
                let data = repo.find_blob(*id).ok().map(|b| b.data.clone());
                (p.as_slice(), data)
            }))
        })
    });
    let mut opts = repo
        .checkout_options(gix::worktree::stack::state::attributes::Source::IdMapping)
        .map_err(|e| fail("options", &e))?;
    opts.destination_is_initially_empty = true;
    let objects = repo
        .objects
        .clone()
        .into_arc()
        .map_err(|e| fail("objects", &e))?;
    let files = gix::progress::Discard;
    let bytes = gix::progress::Discard;
    let interrupt = AtomicBool::new(false);
    let outcome =
        gix::worktree::state::checkout(&mut index, dest, objects, &files, &bytes, &interrupt, opts)
            .map_err(|e| fail("write files", &e))?;
    let digest = digest_thread.and_then(|t| t.join().ok().flatten());
    if let Some(first) = outcome.errors.first() {
        return Err(fail(
            "write files",
            &format!("{} ({} errors)", first.path, outcome.errors.len()),
        ));
    }
    if !outcome.collisions.is_empty() {
        return Err(fail(
            "write files",
            &format!(
                "{} paths collide on this filesystem",
                outcome.collisions.len()
            ),
        ));
    }
    index
        .write(Default::default())
        .map_err(|e| fail("write index", &e))?;
    Ok(digest)
}

/// Make `dest` (an existing empty folder) a fresh clone of `source`'s HEAD.
pub fn from_checkout(source: &Path, dest: &Path) -> Result<Imported> {
    let src = gix::open_opts(source, gix::open::Options::isolated())
        .map_err(|e| Error::other(format!("{}: not a git checkout ({e})", source.display())))?;
    if src.workdir().is_none() {
        return Err(Error::other(format!(
            "{}: a bare repository has no checkout to copy; give a work tree",
            source.display()
        )));
    }
    let head = crate::gitinfo::head_of(&src, source)?;
    let common = src.common_dir().to_path_buf();
    let srcs = object_dirs(&common);
    let shallow = common.join("shallow");
    drop(src);
    let t0 = std::time::Instant::now();
    let git_dir = init_repo(dest)?;
    copy_objects(&srcs, &git_dir.join("objects"))?;
    tracing::debug!("--source: objects copied in {:?}", t0.elapsed());
    if std::fs::symlink_metadata(&shallow)
        .map(|m| m.is_file())
        .unwrap_or(false)
    {
        std::fs::copy(&shallow, git_dir.join("shallow")).at(&shallow)?;
    }
    set_head(&git_dir, &head.commit, head.branch.as_deref())?;
    let tree_digest = checkout_head(dest)?;
    tracing::debug!("--source: checked out at {:?}", t0.elapsed());
    Ok(Imported {
        commit: head.commit,
        branch: head.branch,
        tree_digest,
    })
}

/// The cache entry of `commit`.
pub fn cache_entry(cache_dir: &Path, commit: &str) -> PathBuf {
    cache_dir.join(format!("{commit}.git"))
}

/// Does the bare repository at `git_dir` hold `commit`?
fn has_commit(git_dir: &Path, commit: &str) -> bool {
    let Ok(repo) = gix::open_opts(git_dir, gix::open::Options::isolated()) else {
        return false;
    };
    let Ok(id) = gix::ObjectId::from_hex(commit.as_bytes()) else {
        return false;
    };
    let found = repo
        .find_object(id)
        .ok()
        .and_then(|o| o.try_into_commit().ok())
        .is_some();
    found
}

/// Fill the cache for `commit` from `repo` (a local path read with gix, or a URL fetched
/// with the hermetic git CLI), atomically. Returns whether the source was read.
pub fn ensure_cached(cache_dir: &Path, repo: &str, commit: &str, spec_dir: &Path) -> Result<bool> {
    let entry = cache_entry(cache_dir, commit);
    if has_commit(&entry, commit) {
        return Ok(false);
    }
    std::fs::create_dir_all(cache_dir).at(cache_dir)?;
    let tmp = tempfile::Builder::new()
        .prefix(".fill-")
        .tempdir_in(cache_dir)
        .at(cache_dir)?;
    let bare = tmp.path().join("repo.git");
    gix::ThreadSafeRepository::init_opts(
        &bare,
        gix::create::Kind::Bare,
        gix::create::Options::default(),
        gix::open::Options::isolated(),
    )
    .map_err(|e| Error::other(format!("{}: cannot create cache ({e})", bare.display())))?;
    let is_url = repo.contains("://") || (repo.contains('@') && repo.contains(':'));
    if is_url {
        let git = crate::git::Git::new("main")?;
        let mut c = git.command(&bare);
        c.args([
            "-c",
            "protocol.https.allow=always",
            "-c",
            "protocol.ssh.allow=always",
            "-c",
            "protocol.git.allow=always",
            "fetch",
            "--quiet",
            "--no-tags",
            repo,
            commit,
        ]);
        let out = c
            .output()
            .map_err(|e| Error::other(format!("cannot run git: {e}")))?;
        if !out.status.success() {
            return Err(Error::other(format!(
                "fetch {commit} from {repo}: {}",
                crate::git::one_line_failure(&out)
            )));
        }
    } else {
        let p = if Path::new(repo).is_absolute() {
            PathBuf::from(repo)
        } else {
            spec_dir.join(repo)
        };
        let src = gix::open_opts(&p, gix::open::Options::isolated()).map_err(|e| {
            Error::other(format!(
                "{}: pinned repo is not a git repository ({e})",
                p.display()
            ))
        })?;
        let srcs = object_dirs(src.common_dir());
        drop(src);
        copy_objects(&srcs, &bare.join("objects"))?;
    }
    if !has_commit(&bare, commit) {
        return Err(Error::other(format!(
            "pinned repo {repo} has no commit {commit}"
        )));
    }
    set_head(&bare, commit, Some("capsule-pinned"))?;
    match std::fs::rename(&bare, &entry) {
        Ok(()) => {}
        // another open filled it meanwhile
        Err(_) if has_commit(&entry, commit) => {}
        Err(e) => return Err(Error::io(&entry, e)),
    }
    Ok(true)
}

/// Make `dest` (an existing empty folder) a checkout of `commit` from the cache, on branch
/// `branch`.
pub fn from_pinned(cache_dir: &Path, commit: &str, branch: &str, dest: &Path) -> Result<Imported> {
    let entry = cache_entry(cache_dir, commit);
    let git_dir = init_repo(dest)?;
    copy_objects(&object_dirs(&entry), &git_dir.join("objects"))?;
    set_head(&git_dir, commit, Some(branch))?;
    let tree_digest = checkout_head(dest)?;
    Ok(Imported {
        commit: commit.to_string(),
        branch: Some(branch.to_string()),
        tree_digest,
    })
}

//! Workspaces from existing repositories, without ever running git on them:
//!
//! - `--source PATH` ([`from_checkout`]): the operator's checkout (a main or linked
//!   worktree, on a branch or detached) is opened read-only with gix (isolated: no
//!   environment, no global/system config; gix runs no hooks, filters or fsmonitor). A
//!   fresh repository is created, the objects HEAD reaches are *copied* into it from the
//!   checkout's own object store ([`crate::objects::own`]: alternates are never followed,
//!   nothing is hardlinked or shared; [`crate::objects::reachcopy`] reuses its pack
//!   entries as bytes), HEAD's branch ref is written, and the work tree is
//!   checked out by gix with the new repository's empty configuration, so no filter driver
//!   runs. A linked worktree's `gitdir:` file and `commondir` are followed to its main
//!   repository: the operator chose that checkout. Nothing in the source is written,
//!   locked or refreshed.
//! - pinned `repo` + `commit` ([`from_pinned`]): a content-addressed cache of bare
//!   repositories under `Layout::repo_cache_dir()/<commit>.git`, filled with exactly the
//!   objects the commit reaches from the named repository's own object store; a `.git`
//!   file, a `commondir` or alternates that lead out of the named repository are refused
//!   or not followed. A second open of the same commit reads only the cache.

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

/// The git directory of a spec's pinned `repo` path, which must hold its own repository:
/// `<path>/.git` as a real folder, or `<path>` itself when bare. A `.git` file or symlink
/// (`gitdir:` pointing elsewhere) and a `commondir` file (a linked worktree's git dir) lead
/// out of the named repository and are refused.
fn pinned_git_dir(p: &Path) -> Result<PathBuf> {
    let not_repo = |why: &str| {
        Error::other(format!(
            "{}: pinned repo is not a git repository ({why})",
            crate::escape::path(p)
        ))
    };
    let md = std::fs::metadata(p).map_err(|e| not_repo(&e.to_string()))?;
    if !md.is_dir() {
        return Err(not_repo("not a folder"));
    }
    let dotgit = p.join(".git");
    let git_dir = match std::fs::symlink_metadata(&dotgit) {
        Ok(m) if m.is_dir() => dotgit,
        Ok(_) => {
            return Err(Error::other(format!(
                "{}: is a gitdir file or symlink pointing elsewhere; a pinned repo must be a repository of its own (give its main checkout or a bare repository)",
                crate::escape::path(&dotgit)
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let bare = ["objects", "HEAD", "refs"]
                .iter()
                .all(|f| std::fs::symlink_metadata(p.join(f)).is_ok());
            if !bare {
                return Err(not_repo("no .git folder, and not a bare repository"));
            }
            p.to_path_buf()
        }
        Err(e) => return Err(not_repo(&e.to_string())),
    };
    if std::fs::symlink_metadata(git_dir.join("commondir")).is_ok() {
        return Err(Error::other(format!(
            "{}: has a commondir file (a linked worktree's git directory) pointing to another repository; a pinned repo must be a repository of its own",
            crate::escape::path(&git_dir)
        )));
    }
    Ok(git_dir)
}

/// Copy what `commit` reaches from the own object store of the git directory `src_git`
/// into the (fresh) git directory `dst_git`, and the `shallow` commits the walk met.
fn copy_commit(
    src_git_objects: &Path,
    follow_top: bool,
    shallow: &std::collections::HashSet<gix::ObjectId>,
    commit: &str,
    dst_git: &Path,
    what: &str,
) -> Result<()> {
    let id = gix::ObjectId::from_hex(commit.as_bytes())
        .map_err(|e| Error::other(format!("{what}: commit {commit:?}: {e}")))?;
    let own = crate::objects::own::OwnObjects::open(src_git_objects, follow_top)?;
    let copied = crate::objects::reachcopy::copy_reachable(
        &own,
        &id,
        shallow,
        &dst_git.join("objects"),
        what,
    )?;
    crate::objects::own::write_shallow(dst_git, &copied.shallow)?;
    tracing::debug!(
        "{what}: {} objects of {commit} copied ({} pack entries reused as bytes, {} of them deltas; {} deltas resolved)",
        copied.objects,
        copied.reused,
        copied.reused_deltas,
        copied.resolved
    );
    Ok(())
}

/// The objects `commit` reaches, from the object cache of the store `src_git_objects`
/// (filled from it first when the cache lacks them), copied into the fresh repository at
/// `dest` (its git directory `dst_git`, HEAD already at `commit`) with the `shallow`
/// commits, and checked out there. Returns the tree digest when it is known from the
/// objects (see [`checkout_tree`]).
///
/// The checkout does not wait for the copy into the workspace: it reads the cache's
/// packs ([`crate::objects::own::Finder`]) while a second thread copies them.
#[allow(clippy::too_many_arguments)]
fn import_and_checkout(
    cache_root: &Path,
    src_git_objects: &Path,
    follow_top: bool,
    shallow: &std::collections::HashSet<gix::ObjectId>,
    commit: &str,
    dest: &Path,
    dst_git: &Path,
    what: &str,
) -> Result<Option<String>> {
    let id = gix::ObjectId::from_hex(commit.as_bytes())
        .map_err(|e| Error::other(format!("{what}: commit {commit:?}: {e}")))?;
    let mut cache = crate::objects::cache::SourceCache::open(cache_root, src_git_objects)?;
    let pack_dir = dst_git.join("objects/pack");
    let t0 = std::time::Instant::now();
    // a first open fills the cache (walking and checking the history), then goes on as
    // a later one (a checkout that reads the source while the walk runs was measured
    // slower on this 2-CPU machine: 1.12x for cargo, 1.13x for tokio)
    let mut objs = match cache.cached(&id) {
        Some(o) => o,
        None => {
            let own = crate::objects::own::OwnObjects::open(src_git_objects, follow_top)?;
            let o = cache.fill(&id, &own, shallow, what)?;
            tracing::debug!(
                "{what}: {} objects of {commit} read into the object cache in {:?}",
                o.added,
                t0.elapsed()
            );
            o
        }
    };
    // the checkout reads the cache's packs (checked when they were written, their
    // stamps now) while they are copied into the workspace
    let store = objs.store(cache.dir())?;
    let tree = commit_tree(&store, &id, what)?;
    let stop = AtomicBool::new(false);
    let digest = std::thread::scope(|s| {
        let copy = s.spawn(|| -> Result<()> {
            objs.copy_into(&pack_dir)?;
            crate::objects::own::write_shallow(dst_git, &objs.shallow)
        });
        let digest = checkout_with(dest, &tree, &store, false, objs.tree_digest.clone(), &stop);
        let copied = copy
            .join()
            .unwrap_or_else(|_| Err(Error::other("the copying thread failed")));
        tracing::debug!(
            "{what}: objects of {commit} from the object cache {} (all cached), checked out in {:?}",
            cache.dir().display(),
            t0.elapsed()
        );
        copied.and(digest)
    });
    remember_digest(&cache, &mut objs, &id, &digest);
    digest
}

/// [`checkout_tree`] of `tree` into the repository at `dest`, reading `objects` (each
/// object hashed against its id when `verify`; the tree digest reads the same objects
/// again without).
fn checkout_with(
    dest: &Path,
    tree: &gix::ObjectId,
    objects: &crate::objects::own::OwnObjects,
    verify: bool,
    known_digest: Option<String>,
    stop: &AtomicBool,
) -> Result<Option<String>> {
    let repo = gix::open_opts(dest, gix::open::Options::isolated())
        .map_err(|e| Error::other(format!("{}: checkout: open: {e}", dest.display())))?;
    let find = |verify| crate::objects::own::Finder { objects, verify };
    checkout_tree(
        dest,
        &repo,
        tree,
        find(verify),
        find(false),
        known_digest,
        stop,
    )
}

/// The tree of `commit`, read from the own store (hashed against its id).
fn commit_tree(
    own: &crate::objects::own::OwnObjects,
    commit: &gix::ObjectId,
    what: &str,
) -> Result<gix::ObjectId> {
    use gix::objs::Find as _;
    let mut buf = Vec::new();
    let data = crate::objects::own::Finder {
        objects: own,
        verify: true,
    }
    .try_find(commit, &mut buf)
    .map_err(|e| Error::other(format!("{what}: commit {commit}: {e}")))?
    .ok_or_else(|| {
        let why = if own.has_alternates() {
            "it has alternates, which are not followed"
        } else {
            "the repository is incomplete"
        };
        Error::other(format!(
            "{what}: commit {commit} is not in the repository's own object store ({why})"
        ))
    })?;
    if data.kind != gix::objs::Kind::Commit {
        return Err(Error::other(format!(
            "{what}: {commit} is a {}, not a commit",
            data.kind
        )));
    }
    let c = gix::objs::CommitRef::from_bytes(data.data, gix::hash::Kind::Sha1)
        .map_err(|e| Error::other(format!("{what}: commit {commit} cannot be parsed: {e}")))?;
    Ok(c.tree())
}

/// Once the cache has recorded the objects, the digest of a checkout made from them, when
/// it was computed now.
fn remember_digest(
    cache: &crate::objects::cache::SourceCache,
    objs: &mut crate::objects::cache::Objects,
    id: &gix::ObjectId,
    digest: &Result<Option<String>>,
) {
    if let Err(e) = objs.settle() {
        // the open's own error (a full disk, say) is the one line the user needs
        if digest.is_ok() {
            tracing::warn!("{e}");
        } else {
            tracing::debug!("{e}");
        }
    }
    if let (None, Ok(Some(d))) = (&objs.tree_digest, digest) {
        if let Err(e) = cache.set_tree_digest(id, d) {
            tracing::debug!("object cache: the tree digest of {id} is not recorded: {e}");
        }
    }
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

/// Check out `tree` into the (empty) work tree of `repo` (at `dest`) with gix, reading
/// the objects from `objects`, and write the index. Returns the tree digest when it could
/// be computed from the objects alongside the checkout (no `.gitattributes` that could
/// convert content), or `known_digest`; `None` means: compute it from the files. Stops
/// early when `stop` is set (the caller then fails anyway).
fn checkout_tree<F>(
    dest: &Path,
    repo: &gix::Repository,
    tree: &gix::ObjectId,
    objects: F,
    digest_objects: F,
    known_digest: Option<String>,
    stop: &AtomicBool,
) -> Result<Option<String>>
where
    F: gix::objs::Find + Send + Clone,
{
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Error::other(format!("{}: checkout: {what}: {e}", dest.display()))
    };
    // the protections gix's own index_from_tree applies (NTFS always, the platform's)
    let protect = gix::validate::path::component::Options {
        protect_windows: cfg!(windows),
        protect_hfs: cfg!(target_os = "macos"),
        protect_ntfs: true,
    };
    let state =
        gix::index::State::from_tree(tree, &objects, protect).map_err(|e| fail("index", &e))?;
    let mut index = gix::index::File::from_state(state, repo.index_path());
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
    let mut opts = repo
        .checkout_options(gix::worktree::stack::state::attributes::Source::IdMapping)
        .map_err(|e| fail("options", &e))?;
    opts.destination_is_initially_empty = true;
    let _phase = crate::progress::phase(crate::progress::CHECKOUT, index.entries().len() as u64);
    let files = crate::progress::Counter(crate::progress::CHECKOUT);
    let bytes = gix::progress::Discard;
    let (outcome, digest) = std::thread::scope(|s| {
        let digest_thread = (!convertible && known_digest.is_none()).then(|| {
            let objects = digest_objects;
            s.spawn(move || -> Option<String> {
                let mut buf = Vec::new();
                crate::workspace::digest::digest_entries(entries.iter().map(|(p, id)| {
                    let data = objects
                        .try_find(id, &mut buf)
                        .ok()
                        .flatten()
                        .filter(|d| d.kind == gix::objs::Kind::Blob)
                        .map(|d| d.data.to_vec());
                    (p.as_slice(), data)
                }))
            })
        });
        let outcome = gix::worktree::state::checkout(
            &mut index,
            dest,
            objects.clone(),
            &files,
            &bytes,
            stop,
            opts,
        );
        let digest = match digest_thread {
            Some(t) => t.join().ok().flatten(),
            None if !convertible => known_digest,
            None => None,
        };
        (outcome, digest)
    });
    let outcome = outcome.map_err(|e| fail("write files", &e))?;
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(fail("write files", &"stopped"));
    }
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
/// Objects come through the object cache under `object_cache` ([`crate::objects::cache`]).
pub fn from_checkout(source: &Path, dest: &Path, object_cache: &Path) -> Result<Imported> {
    let src = gix::open_opts(source, gix::open::Options::isolated())
        .map_err(|e| Error::other(format!("{}: not a git checkout ({e})", source.display())))?;
    if src.workdir().is_none() {
        return Err(Error::other(format!(
            "{}: a bare repository has no checkout to copy; give a work tree",
            source.display()
        )));
    }
    let head = crate::git::info::head_of(&src, source)?;
    // the operator's checkout: its git dir and, for a linked worktree, the main
    // repository's common dir are followed (the operator chose it); alternates are not
    let common = src.common_dir().to_path_buf();
    let shallow = crate::objects::own::read_shallow(&common);
    drop(src);
    let t0 = std::time::Instant::now();
    let git_dir = init_repo(dest)?;
    set_head(&git_dir, &head.commit, head.branch.as_deref())?;
    let tree_digest = import_and_checkout(
        object_cache,
        &common.join("objects"),
        true,
        &shallow,
        &head.commit,
        dest,
        &git_dir,
        &format!("--source {}", source.display()),
    )?;
    tracing::debug!("--source: checked out at {:?}", t0.elapsed());
    Ok(Imported {
        commit: head.commit,
        branch: head.branch,
        tree_digest,
    })
}

/// A file in a cache entry saying it holds only what its commit reaches.
const CACHE_MARK: &str = "capsule-reachable-only";

/// The cache entry of `commit`.
pub fn cache_entry(cache_dir: &Path, commit: &str) -> PathBuf {
    cache_dir.join(format!("{commit}.git"))
}

/// Does the bare repository at `git_dir` hold `commit`?
fn has_commit(git_dir: &Path, commit: &str) -> bool {
    // entries filled before only reachable objects were copied are filled again
    if std::fs::symlink_metadata(git_dir.join(CACHE_MARK)).is_err() {
        return false;
    }
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
    if repo.to_ascii_lowercase().starts_with("file:") {
        // git would serve a local repository's alternates through upload-pack
        return Err(Error::other(format!(
            "{}: file:// URLs are not fetched; name a local repository by its path (its own objects are read, alternates are not followed)",
            crate::escape::name(repo.as_bytes())
        )));
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
        let git = crate::git::run::Git::new("main")?;
        let mut c = git.command(&bare);
        c.args([
            "-c",
            "protocol.https.allow=always",
            "-c",
            "protocol.ssh.allow=always",
            "-c",
            "protocol.git.allow=always",
            "-c",
            "protocol.file.allow=never",
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
                "fetch {commit} from {}: {}",
                crate::escape::name(repo.as_bytes()),
                crate::git::run::one_line_failure(&out)
            )));
        }
    } else {
        let p = if Path::new(repo).is_absolute() {
            PathBuf::from(repo)
        } else {
            spec_dir.join(repo)
        };
        let src_git = pinned_git_dir(&p)?;
        let shallow = crate::objects::own::read_shallow(&src_git);
        copy_commit(
            &src_git.join("objects"),
            false,
            &shallow,
            commit,
            &bare,
            &format!("pinned repo {}", crate::escape::path(&p)),
        )?;
    }
    std::fs::write(bare.join(CACHE_MARK), "").at(bare.join(CACHE_MARK))?;
    if !has_commit(&bare, commit) {
        return Err(Error::other(format!(
            "pinned repo {} has no commit {commit}",
            crate::escape::name(repo.as_bytes())
        )));
    }
    set_head(&bare, commit, Some("capsule-pinned"))?;
    if std::fs::symlink_metadata(&entry).is_ok() && !has_commit(&entry, commit) {
        // an entry from before only reachable objects were cached: replaced
        crate::rmtree::remove_dir_atomically(&entry)?;
    }
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
pub fn from_pinned(
    cache_dir: &Path,
    object_cache: &Path,
    commit: &str,
    branch: &str,
    dest: &Path,
) -> Result<Imported> {
    let entry = cache_entry(cache_dir, commit);
    let git_dir = init_repo(dest)?;
    let shallow = crate::objects::own::read_shallow(&entry);
    set_head(&git_dir, commit, Some(branch))?;
    let tree_digest = import_and_checkout(
        object_cache,
        &entry.join("objects"),
        false,
        &shallow,
        commit,
        dest,
        &git_dir,
        &format!("repository cache {}", entry.display()),
    )?;
    Ok(Imported {
        commit: commit.to_string(),
        branch: Some(branch.to_string()),
        tree_digest,
    })
}

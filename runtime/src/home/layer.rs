//! The home layer: inside the sandbox the home directory is an overlay whose lower layer is
//! the real home (read-only) and whose upper layer is `<bundle>/home/upper`; writes there
//! wait for review. This module reads that upper directory (`capsule home diff`), copies
//! reviewed changes to the real home (`apply`) and throws them away (`discard`).
//!
//! The upper directory was written by the sandboxed command, so nothing in it is trusted:
//! it is walked with directory descriptors and `O_NOFOLLOW` ([`super::fsat`]); symlinks
//! pointing outside home, device nodes other than overlay whiteouts, FIFOs and sockets are
//! refused; set-id bits are dropped; the real home is written the same way (no symlink on
//! the way is followed, files are replaced by rename of a new file).
//!
//! Overlay conventions understood: a whiteout is a character device 0/0 or a zero-size
//! file with the `trusted.overlay.whiteout` / `user.overlay.whiteout` xattr; an opaque
//! folder has `trusted.overlay.opaque` / `user.overlay.opaque` = `y` (a value `x` only
//! marks a folder holding xattr whiteouts).
//!
//! Bounded whatever the layer holds: content diffs read at most [`DIFF_LIMIT`] bytes of a
//! file, content digests stream, files over [`APPLY_LIMIT`] (a 1 TiB sparse file) are
//! refused without being read, walks deeper than [`MAX_DEPTH`] folders are an error (two
//! descriptors are held per level), and removal goes through [`capsule_bundle::rmtree`].
//! What `apply` copies is bound to what `home diff` showed: [`super::review`].

use super::baseline::{self, Baseline};
pub use super::change::{Change, ChangeKind, EntryType};
use capsule_bundle::fsat;
use serde::Serialize;
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Text files up to this size get a content diff.
pub const DIFF_LIMIT: u64 = 1 << 20;
/// Time a content diff may take before it settles for a coarser one.
const DIFF_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);
/// Files larger than this are refused (never read: copy such a file yourself).
pub const APPLY_LIMIT: u64 = 256 << 20;
/// Deepest folder of the layer walked.
pub const MAX_DEPTH: usize = 256;

/// Paths of a capsule's home layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerPaths {
    /// `<bundle>/home/upper`: the overlay's upper directory.
    pub upper: PathBuf,
    /// `<bundle>/home/work`: the overlay's work directory (same filesystem as upper).
    pub work: PathBuf,
}

/// The layer directories of a bundle.
pub fn layer_paths(bundle_dir: &Path) -> LayerPaths {
    let home = bundle_dir.join(capsule_bundle::layout::bundle_files::HOME);
    LayerPaths {
        upper: home.join("upper"),
        work: home.join("work"),
    }
}

/// Errors of home-layer operations.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error("{what} {}: {source}", esc(path))]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: not a path under the home directory (use ~/x, x, or an absolute path under home; no `..`)")]
    BadPath(String),
    #[error("refused {}: {}", .0.iter().map(|(p, _)| format!("~/{}", esc(p))).collect::<Vec<_>>().join(", "), .0.first().map(|(_, w)| w.as_str()).unwrap_or(""))]
    Refused(Vec<(PathBuf, String)>),
    #[error("the real file moved on since the task started: {}; review it, then use --force to overwrite", .0.iter().map(|(p, w)| format!("~/{} ({w})", esc(p))).collect::<Vec<_>>().join(", "))]
    MovedOn(Vec<(PathBuf, String)>),
    #[error("~/{}: no change in the home layer", esc(.0))]
    NoChange(PathBuf),
    #[error(
        "~/{}: inside ~/{}, which the task replaced as a whole; discard ~/{}",
        esc(path),
        esc(dir),
        esc(dir)
    )]
    InsideOpaque { path: PathBuf, dir: PathBuf },
    #[error("the home layer was not reviewed: run `capsule home diff` on this capsule, read it, then apply")]
    NotReviewed,
    #[error("the last review is not {0}: run `capsule home diff` again, read it, then apply with its token")]
    OtherReview(String),
    #[error("changed since the last review, or not part of it: {}; run `capsule home diff` again, read it, then apply", .0.iter().map(|p| format!("~/{}", esc(p))).collect::<Vec<_>>().join(", "))]
    Unreviewed(Vec<PathBuf>),
    #[error("~/{}: the layer's copy changed while it was applied (not the reviewed bytes); nothing of it was written; review again", esc(.0))]
    ChangedWhileApplying(PathBuf),
    #[error("{}: more than {MAX_DEPTH} folders deep; discard it", esc(.0))]
    TooDeep(PathBuf),
}

fn esc(p: &Path) -> String {
    capsule_bundle::escape::path(p)
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> LayerError {
    let path = path.to_path_buf();
    move |source| LayerError::Io { what, path, source }
}

/// A home layer to review: the real home, its upper directory, and paths kept out of the
/// review (package caches, the capsule root: relative to home) or refused (hidden paths).
#[derive(Debug, Clone)]
pub struct Layer {
    pub home: PathBuf,
    pub upper: PathBuf,
    /// Relative paths not reviewed (package caches, capsule root).
    pub excluded: Vec<PathBuf>,
    /// Relative paths the task must not change (hidden: credentials, logins).
    pub hidden: Vec<PathBuf>,
}

/// Turn a path given on the command line into one relative to home.
pub fn home_relative(home: &Path, arg: &str) -> Result<PathBuf, LayerError> {
    let bad = || LayerError::BadPath(arg.to_string());
    let rel = if let Some(r) = arg.strip_prefix("~/") {
        PathBuf::from(r)
    } else if arg == "~" {
        return Err(bad());
    } else if Path::new(arg).is_absolute() {
        Path::new(arg)
            .strip_prefix(home)
            .map_err(|_| bad())?
            .to_path_buf()
    } else {
        PathBuf::from(arg)
    };
    let comps = fsat::plain_components(&rel).ok_or_else(bad)?;
    if comps.is_empty() {
        return Err(bad());
    }
    Ok(comps.iter().collect())
}

fn entry_type(st: &libc::stat) -> EntryType {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => EntryType::File,
        libc::S_IFDIR => EntryType::Dir,
        libc::S_IFLNK => EntryType::Symlink,
        _ => EntryType::Other,
    }
}

fn xattr_flag(fd: &impl AsRawFd, what: &str) -> Option<Vec<u8>> {
    fsat::get_xattr(fd.as_raw_fd(), &format!("trusted.overlay.{what}"))
        .or_else(|| fsat::get_xattr(fd.as_raw_fd(), &format!("user.overlay.{what}")))
}

/// Is upper entry `name` (stat `st`) a whiteout?
fn is_whiteout(dir: &OwnedFd, name: &OsStr, st: &libc::stat) -> bool {
    if fsat::is_type(st, libc::S_IFCHR) && st.st_rdev == 0 {
        return true;
    }
    if fsat::is_type(st, libc::S_IFREG) && st.st_size == 0 {
        if let Ok(f) = fsat::open_file_at(dir, name) {
            return xattr_flag(&f, "whiteout").is_some();
        }
    }
    false
}

fn is_opaque(dir: &OwnedFd) -> bool {
    xattr_flag(dir, "opaque").is_some_and(|v| v == b"y")
}

/// Does symlink `target` at relative location `rel` stay inside home?
fn symlink_inside(home: &Path, rel: &Path, target: &Path) -> bool {
    let abs = if target.is_absolute() {
        target.to_path_buf()
    } else {
        home.join(rel.parent().unwrap_or(Path::new("")))
            .join(target)
    };
    super::reveal::normalize(&abs).starts_with(home) && super::reveal::normalize(&abs) != home
}

fn read_limited(f: std::fs::File, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut v = Vec::new();
    f.take(limit + 1).read_to_end(&mut v)?;
    Ok((v.len() as u64 <= limit).then_some(v))
}

fn is_text(b: &[u8]) -> bool {
    !b.contains(&0) && std::str::from_utf8(b).is_ok()
}

fn same_content(a: std::fs::File, b: std::fs::File) -> std::io::Result<bool> {
    let (mut a, mut b) = (std::io::BufReader::new(a), std::io::BufReader::new(b));
    let mut x = [0u8; 8192];
    let mut y = [0u8; 8192];
    loop {
        let n = a.read(&mut x)?;
        if n == 0 {
            return Ok(b.read(&mut y)? == 0);
        }
        let mut got = 0;
        while got < n {
            let m = b.read(&mut y[got..n])?;
            if m == 0 {
                return Ok(false);
            }
            got += m;
        }
        if x[..n] != y[..n] {
            return Ok(false);
        }
    }
}

/// Why a walk of the layer stopped.
enum WalkError {
    Io(std::io::Error),
    TooDeep(PathBuf),
}

impl From<std::io::Error> for WalkError {
    fn from(e: std::io::Error) -> Self {
        WalkError::Io(e)
    }
}

/// Why an entry of the layer its owner may not read (a task's `chmod 000`) is refused.
const UNREADABLE: &str = "not readable (its mode denies it); discard it";

fn denied(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EACCES)
}

/// sha256 (hex) of what `f` holds, streamed; more than `limit` bytes is an error.
fn sha256_of(f: std::fs::File, limit: u64) -> std::io::Result<String> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let n = std::io::copy(&mut f.take(limit + 1), &mut h)?;
    if n > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "grew past the limit while read",
        ));
    }
    Ok(hex::encode(h.finalize()))
}

/// Copy `src` to `dst`, hashing what is written; the sha256 (hex) of the bytes written.
fn copy_hashed(src: &mut std::fs::File, dst: &mut std::fs::File) -> std::io::Result<String> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = src.read(&mut buf)?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if total > APPLY_LIMIT {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "grew past the limit while copied",
            ));
        }
        h.update(&buf[..n]);
        dst.write_all(&buf[..n])?;
    }
    Ok(hex::encode(h.finalize()))
}

mod apply;
mod diff;
pub use apply::Applied;

/// Make the layer directories of a bundle (0700) and, the first time, record the home
/// baseline. Called by the runtime before a task runs, before the overlay is mounted.
/// `skip` are relative paths left out of the baseline (caches, hidden paths, capsule root).
pub fn prepare(bundle_dir: &Path, home: &Path, skip: &[PathBuf]) -> Result<LayerPaths, LayerError> {
    prepare_with(bundle_dir, home, || skip.to_vec())
}

/// [`prepare`], with the paths left out of the baseline computed only when the baseline is
/// recorded (the first time).
pub fn prepare_with(
    bundle_dir: &Path,
    home: &Path,
    skip: impl FnOnce() -> Vec<PathBuf>,
) -> Result<LayerPaths, LayerError> {
    use std::os::unix::fs::DirBuilderExt;
    let paths = layer_paths(bundle_dir);
    for d in [&paths.upper, &paths.work] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(d)
            .map_err(io("creating", d))?;
    }
    let bfile = bundle_dir.join(baseline::BASELINE_FILE);
    if !bfile.exists() {
        let started = baseline::fs_clock(bundle_dir).map_err(io("writing in", bundle_dir))?;
        let b = baseline::record(home, &skip(), started).map_err(io("reading", home))?;
        b.save(bundle_dir).map_err(io("writing", &bfile))?;
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::diff::unified;
    use super::*;

    #[test]
    fn home_relative_forms() {
        let h = Path::new("/home/u");
        assert_eq!(
            home_relative(h, "~/.zshrc").unwrap(),
            PathBuf::from(".zshrc")
        );
        assert_eq!(
            home_relative(h, ".config/git").unwrap(),
            PathBuf::from(".config/git")
        );
        assert_eq!(home_relative(h, "/home/u/.x").unwrap(), PathBuf::from(".x"));
        for bad in ["~", "/etc/passwd", "../x", "a/../../b", "", "/home/u"] {
            assert!(home_relative(h, bad).is_err(), "{bad}");
        }
    }

    /// The bytes copied are the bytes hashed: a layer file that no longer has the
    /// reviewed sha256 when it is copied never takes the real file's name.
    #[test]
    fn apply_writes_only_the_reviewed_bytes() {
        let t = tempfile::tempdir_in("/dev/shm").unwrap();
        let home = t.path().join("home");
        let upper = t.path().join("upper");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&upper).unwrap();
        std::fs::write(home.join(".a"), "old\n").unwrap();
        std::fs::write(upper.join(".a"), "reviewed\n").unwrap();
        let layer = Layer {
            home: home.clone(),
            upper: upper.clone(),
            excluded: vec![],
            hidden: vec![],
        };
        let changes = layer.changes(&[], false).unwrap();
        assert_eq!(changes.len(), 1);
        // the layer's copy changes between the review (and the checks) and the copy
        std::fs::write(upper.join(".a"), "swapped!\n").unwrap();
        let home_fd = fsat::open_dir(&home).unwrap();
        let upper_fd = fsat::open_dir(&upper).unwrap();
        let e = layer
            .apply_one(&home_fd, &upper_fd, &changes[0])
            .unwrap_err();
        assert!(matches!(e, LayerError::ChangedWhileApplying(_)), "{e}");
        assert_eq!(std::fs::read_to_string(home.join(".a")).unwrap(), "old\n");
        assert_eq!(fsat::list(&home_fd).unwrap(), [OsString::from(".a")]);
        // the reviewed bytes again: applied
        std::fs::write(upper.join(".a"), "reviewed\n").unwrap();
        layer.apply_one(&home_fd, &upper_fd, &changes[0]).unwrap();
        assert_eq!(
            std::fs::read_to_string(home.join(".a")).unwrap(),
            "reviewed\n"
        );
    }

    /// Two texts at the diff limit with no line in common: a diff in bounded time.
    #[test]
    fn a_large_diff_is_bounded_in_time() {
        let a: String = (0..(DIFF_LIMIT as usize / 16))
            .map(|i| format!("a{i:013}\n"))
            .collect();
        let b: String = (0..(DIFF_LIMIT as usize / 16))
            .map(|i| format!("b{i:013}\n"))
            .collect();
        let t = std::time::Instant::now();
        let d = unified(Path::new("x"), a.as_bytes(), b.as_bytes());
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            t.elapsed()
        );
        assert!(d.contains("-a0000000000000") && d.contains("+b0000000000000"));
    }

    /// A layer deeper than the walk goes is a clear error, not a crash or a descriptor
    /// per level.
    #[test]
    fn a_too_deep_layer_is_an_error() {
        let t = tempfile::tempdir_in("/dev/shm").unwrap();
        let home = t.path().join("home");
        let mut deep = t.path().join("upper");
        for _ in 0..=MAX_DEPTH + 1 {
            deep.push("d");
        }
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&deep).unwrap();
        let layer = Layer {
            home,
            upper: t.path().join("upper"),
            excluded: vec![],
            hidden: vec![],
        };
        let e = layer.changes(&[], true).unwrap_err();
        assert!(matches!(e, LayerError::TooDeep(_)), "{e}");
        layer.discard(&[]).unwrap();
        assert!(layer.changes(&[], true).unwrap().is_empty());
    }

    #[test]
    fn symlink_escape_rule() {
        let h = Path::new("/home/u");
        assert!(symlink_inside(h, Path::new(".config/a"), Path::new("b")));
        assert!(symlink_inside(
            h,
            Path::new(".config/a"),
            Path::new("../.zshrc")
        ));
        assert!(symlink_inside(h, Path::new("a"), Path::new("/home/u/x")));
        assert!(!symlink_inside(h, Path::new("a"), Path::new("/etc/passwd")));
        assert!(!symlink_inside(
            h,
            Path::new(".config/a"),
            Path::new("../../../etc")
        ));
        assert!(!symlink_inside(h, Path::new("a"), Path::new("..")));
    }
}

#[cfg(test)]
#[path = "layer_props.rs"]
mod props;

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

/// Added, changed or removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Changed,
    Removed,
}

/// What the entry is (in the layer; for a removal, what the real entry is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryType {
    File,
    Dir,
    Symlink,
    Other,
}

/// One change in the home layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Relative to the home directory.
    #[serde(serialize_with = "capsule_bundle::escape::serialize_path")]
    pub path: PathBuf,
    pub kind: ChangeKind,
    pub entry: EntryType,
    /// Permission bits of the new entry (set-id bits dropped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// Symlink target.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "capsule_bundle::escape::serialize_opt_path"
    )]
    pub target: Option<PathBuf>,
    /// Why this change can never be applied (unsafe content).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Why applying it lets its content run as the person (git configuration, a shell
    /// startup file, a program on PATH, ...: [`super::hostrun`]); added and changed
    /// entries only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_as_you: Option<&'static str>,
    /// Unified diff for text files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// The file is binary or too large for a content diff.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub binary: bool,
    /// sha256 of a file's new content (what `apply` will write).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
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

struct Walk<'a> {
    layer: &'a Layer,
    with_diff: bool,
    out: Vec<Change>,
}

impl Layer {
    /// The changes in the layer (all of them; `filter` keeps those under the given relative
    /// paths). `with_diff` adds unified content diffs for text files.
    pub fn changes(&self, filter: &[PathBuf], with_diff: bool) -> Result<Vec<Change>, LayerError> {
        let upper = match fsat::open_dir(&self.upper) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("reading", &self.upper)(e)),
        };
        let real = fsat::open_dir(&self.home).map_err(io("reading", &self.home))?;
        let mut w = Walk {
            layer: self,
            with_diff,
            out: Vec::new(),
        };
        w.dir(&upper, Some(&real), Path::new(""), filter, 0)
            .map_err(|e| match e {
                WalkError::Io(e) => io("reading", &self.upper)(e),
                WalkError::TooDeep(p) => LayerError::TooDeep(self.upper.join(p)),
            })?;
        Ok(w.out)
    }

    fn is_excluded(&self, rel: &Path) -> bool {
        self.excluded.iter().any(|e| rel.starts_with(e))
    }
    fn hidden_reason(&self, rel: &Path) -> Option<String> {
        self.hidden
            .iter()
            .find(|h| rel.starts_with(h))
            .map(|h| format!("~/{} is hidden from tasks", esc(h)))
    }
}

/// Does `rel` pass `filter` (it lies under a filter path, or a filter path lies under it)?
fn wanted(filter: &[PathBuf], rel: &Path) -> bool {
    filter.is_empty()
        || filter
            .iter()
            .any(|f| rel.starts_with(f) || f.starts_with(rel))
}
fn selected(filter: &[PathBuf], rel: &Path) -> bool {
    filter.is_empty() || filter.iter().any(|f| rel.starts_with(f))
}

impl Walk<'_> {
    fn push(&mut self, filter: &[PathBuf], c: Change) {
        if selected(filter, &c.path) {
            self.out.push(c);
        }
    }

    fn dir(
        &mut self,
        upper: &OwnedFd,
        real: Option<&OwnedFd>,
        rel: &Path,
        filter: &[PathBuf],
        depth: usize,
    ) -> Result<(), WalkError> {
        if depth > MAX_DEPTH {
            return Err(WalkError::TooDeep(rel.to_path_buf()));
        }
        for name in fsat::list(upper)? {
            let path = rel.join(&name);
            if self.layer.is_excluded(&path) || !wanted(filter, &path) {
                continue;
            }
            let Some(st) = fsat::stat_at(upper, &name)? else {
                continue;
            };
            let real_st = match real {
                Some(r) => fsat::stat_at(r, &name)?,
                None => None,
            };
            let base = |kind, entry| Change {
                path: path.clone(),
                kind,
                entry,
                mode: None,
                target: None,
                refused: None,
                runs_as_you: match kind {
                    ChangeKind::Removed => None,
                    _ => super::hostrun::runs_as_you(&path),
                },
                diff: None,
                binary: false,
                sha256: None,
            };
            let add_or_change = if real_st.is_some() {
                ChangeKind::Changed
            } else {
                ChangeKind::Added
            };
            if let Some(why) = self.layer.hidden_reason(&path) {
                let mut c = base(add_or_change, entry_type(&st));
                c.refused = Some(why);
                // reported even when a path below it was asked for
                self.out.push(c);
                continue;
            }
            if is_whiteout(upper, &name, &st) {
                if let Some(rs) = real_st {
                    self.removed(real, &name, &path, &rs, filter);
                }
                continue;
            }
            match st.st_mode & libc::S_IFMT {
                libc::S_IFREG => {
                    match self.file(upper, real, &name, &path, &st, real_st.as_ref(), filter) {
                        Err(e) if denied(&e) => {
                            let mut c = base(add_or_change, EntryType::File);
                            c.refused = Some(UNREADABLE.into());
                            self.push(filter, c);
                        }
                        r => r?,
                    }
                }
                libc::S_IFLNK => {
                    let target = fsat::read_link_at(upper, &name)?;
                    if let (Some(r), Some(rs)) = (real, real_st.as_ref()) {
                        if fsat::is_type(rs, libc::S_IFLNK)
                            && fsat::read_link_at(r, &name)? == target
                        {
                            continue;
                        }
                    }
                    let mut c = base(add_or_change, EntryType::Symlink);
                    if !symlink_inside(&self.layer.home, &path, &target) {
                        c.refused = Some(format!(
                            "symlink to {} points outside the home directory",
                            esc(&target)
                        ));
                    }
                    c.target = Some(target);
                    self.push(filter, c);
                }
                libc::S_IFDIR => {
                    let sub = match fsat::open_dir_at(upper, &name) {
                        Ok(sub) => sub,
                        Err(e) if denied(&e) => {
                            let mut c = base(add_or_change, EntryType::Dir);
                            c.refused = Some(UNREADABLE.into());
                            self.push(filter, c);
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    };
                    let real_dir = match (real, real_st.as_ref()) {
                        (Some(r), Some(rs)) if fsat::is_type(rs, libc::S_IFDIR) => {
                            Some(fsat::open_dir_at(r, &name)?)
                        }
                        _ => None,
                    };
                    // a folder made only to hold a cache's mount point is not a change
                    let holds_excluded = self
                        .layer
                        .excluded
                        .iter()
                        .any(|e| e.starts_with(&path) && e != &path);
                    if real_dir.is_none() {
                        if !(holds_excluded && real_st.is_none()) {
                            let mut c = base(add_or_change, EntryType::Dir);
                            c.mode = Some(st.st_mode & 0o777);
                            self.push(filter, c);
                        }
                    } else if let Some(rd) = real_dir.as_ref().filter(|_| is_opaque(&sub)) {
                        // every real entry not in the layer was removed
                        let keep: BTreeSet<OsString> = fsat::list(&sub)?.into_iter().collect();
                        for n in fsat::list(rd)? {
                            let p = path.join(&n);
                            if keep.contains(&n)
                                || self.layer.is_excluded(&p)
                                || !wanted(filter, &p)
                            {
                                continue;
                            }
                            if let Some(rs) = fsat::stat_at(rd, &n)? {
                                self.removed(Some(rd), &n, &p, &rs, filter);
                            }
                        }
                    }
                    self.dir(&sub, real_dir.as_ref(), &path, filter, depth + 1)?;
                }
                _ => {
                    let mut c = base(add_or_change, EntryType::Other);
                    c.refused = Some(
                        if fsat::is_type(&st, libc::S_IFCHR) || fsat::is_type(&st, libc::S_IFBLK) {
                            "a device node".into()
                        } else {
                            "a FIFO or socket".into()
                        },
                    );
                    self.push(filter, c);
                }
            }
        }
        Ok(())
    }

    fn removed(
        &mut self,
        real: Option<&OwnedFd>,
        name: &OsStr,
        path: &Path,
        rs: &libc::stat,
        filter: &[PathBuf],
    ) {
        let mut c = Change {
            path: path.to_path_buf(),
            kind: ChangeKind::Removed,
            entry: entry_type(rs),
            mode: None,
            target: None,
            refused: self.layer.hidden_reason(path),
            runs_as_you: None,
            diff: None,
            binary: false,
            sha256: None,
        };
        if self.with_diff && fsat::is_type(rs, libc::S_IFREG) {
            if let Some(r) = real {
                let old = fsat::open_file_at(r, name)
                    .ok()
                    .and_then(|f| read_limited(f, DIFF_LIMIT).ok().flatten());
                match old {
                    Some(o) if is_text(&o) => c.diff = Some(unified(path, &o, b"")),
                    _ => c.binary = true,
                }
            }
        }
        self.push(filter, c);
    }

    #[allow(clippy::too_many_arguments)]
    fn file(
        &mut self,
        upper: &OwnedFd,
        real: Option<&OwnedFd>,
        name: &OsStr,
        path: &Path,
        st: &libc::stat,
        real_st: Option<&libc::stat>,
        filter: &[PathBuf],
    ) -> std::io::Result<()> {
        let mode = st.st_mode & 0o777;
        let real_file = match (real, real_st) {
            (Some(r), Some(rs)) if fsat::is_type(rs, libc::S_IFREG) => Some((r, rs)),
            _ => None,
        };
        if let Some((r, rs)) = real_file {
            if rs.st_mode & 0o777 == mode
                && rs.st_size == st.st_size
                && same_content(
                    fsat::open_file_at(upper, name)?,
                    fsat::open_file_at(r, name)?,
                )?
            {
                return Ok(()); // copied up without a change
            }
        }
        let mut c = Change {
            path: path.to_path_buf(),
            kind: if real_st.is_some() {
                ChangeKind::Changed
            } else {
                ChangeKind::Added
            },
            entry: EntryType::File,
            mode: Some(mode),
            target: None,
            refused: None,
            runs_as_you: super::hostrun::runs_as_you(path),
            diff: None,
            binary: false,
            sha256: None,
        };
        if st.st_size as u64 > APPLY_LIMIT {
            c.refused = Some(format!(
                "larger than {} MiB; not read (copy it yourself if you want it)",
                APPLY_LIMIT >> 20
            ));
            c.binary = true;
            self.push(filter, c);
            return Ok(());
        }
        c.sha256 = Some(sha256_of(fsat::open_file_at(upper, name)?, APPLY_LIMIT)?);
        if self.with_diff {
            let new = read_limited(fsat::open_file_at(upper, name)?, DIFF_LIMIT)?;
            let old = match real_file {
                Some((r, _)) => read_limited(fsat::open_file_at(r, name)?, DIFF_LIMIT)?,
                None => Some(Vec::new()),
            };
            match (old, new) {
                (Some(o), Some(n)) if is_text(&o) && is_text(&n) => {
                    if o != n {
                        c.diff = Some(unified(path, &o, &n));
                    }
                }
                _ => c.binary = true,
            }
        }
        self.push(filter, c);
        Ok(())
    }
}

fn unified(path: &Path, old: &[u8], new: &[u8]) -> String {
    use std::fmt::Write as _;
    let o = String::from_utf8_lossy(old);
    let n = String::from_utf8_lossy(new);
    // lines end at `\n` only, as `home diff` shows them (a `\r` is part of its line): the
    // diff library's own split also ends a line at a lone `\r`, and printed such a line
    // without a `\n`, gluing the next line of the diff onto it
    let ol: Vec<&str> = o.split_inclusive('\n').collect();
    let nl: Vec<&str> = n.split_inclusive('\n').collect();
    // two large texts with nothing in common cost the diff quadratic time: past the
    // deadline it gives a coarser (still correct) diff
    let d = similar::TextDiff::configure()
        .deadline(std::time::Instant::now() + DIFF_DEADLINE)
        .diff_slices(&ol, &nl);
    let mut udiff = d.unified_diff();
    udiff.context_radius(3);
    let mut out = String::new();
    for (i, hunk) in udiff.iter_hunks().enumerate() {
        if i == 0 {
            let _ = writeln!(out, "--- a/~/{}\n+++ b/~/{}", esc(path), esc(path));
        }
        let _ = writeln!(out, "{}", hunk.header());
        for c in hunk.iter_changes() {
            let _ = write!(out, "{}{}", c.tag(), c.value());
            if !c.value().ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
    }
    out
}

/// What `apply` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Applied {
    #[serde(serialize_with = "capsule_bundle::escape::serialize_paths")]
    pub applied: Vec<PathBuf>,
    /// Changes applied over a real file that moved on (`--force`).
    #[serde(serialize_with = "capsule_bundle::escape::serialize_paths")]
    pub forced: Vec<PathBuf>,
}

/// Parent components and name of a relative path.
fn split(rel: &Path) -> Result<(Vec<OsString>, OsString), LayerError> {
    let mut comps = fsat::plain_components(rel).ok_or_else(|| LayerError::BadPath(esc(rel)))?;
    let name = comps.pop().ok_or_else(|| LayerError::BadPath(esc(rel)))?;
    Ok((comps, name))
}

impl Layer {
    /// Copy the changes under `filter` (all when empty) to the real home directory.
    /// Refuses unsafe entries always, changes not in the last review (`home diff`; with
    /// `token`, only when the last review is that one, see [`super::review`]), and changes
    /// whose real file moved on since the baseline unless `force`. Nothing is written when
    /// anything is refused. The caller holds the exec lock ([`super::lock::exclusive`]).
    pub fn apply(
        &self,
        bundle_dir: &Path,
        filter: &[PathBuf],
        force: bool,
        token: Option<&str>,
    ) -> Result<Applied, LayerError> {
        let changes = self.changes(filter, false)?;
        for f in filter {
            if !changes.iter().any(|c| c.path.starts_with(f)) {
                return Err(LayerError::NoChange(f.clone()));
            }
        }
        let refused: Vec<_> = changes
            .iter()
            .filter_map(|c| c.refused.as_ref().map(|r| (c.path.clone(), r.clone())))
            .collect();
        if !refused.is_empty() {
            return Err(LayerError::Refused(refused));
        }
        if !changes.is_empty() {
            let review = super::review::Review::load(bundle_dir)
                .map_err(io("reading the review in", bundle_dir))?
                .ok_or(LayerError::NotReviewed)?;
            if let Some(t) = token {
                if !review.is(t) {
                    return Err(LayerError::OtherReview(capsule_bundle::escape::name(
                        t.as_bytes(),
                    )));
                }
            }
            let unreviewed: Vec<PathBuf> = review
                .unreviewed(&changes)
                .into_iter()
                .map(|c| c.path.clone())
                .collect();
            if !unreviewed.is_empty() {
                return Err(LayerError::Unreviewed(unreviewed));
            }
        }
        let home_fd = fsat::open_dir(&self.home).map_err(io("opening", &self.home))?;
        let upper_fd = fsat::open_dir(&self.upper).map_err(io("opening", &self.upper))?;
        let mut base = Baseline::load(bundle_dir)
            .map_err(io("reading", &bundle_dir.join(baseline::BASELINE_FILE)))?;
        let mut moved = Vec::new();
        if let Some(b) = &base {
            for c in &changes {
                let comps = fsat::plain_components(&c.path).unwrap_or_default();
                let now = baseline::current(&home_fd, &comps).map_err(|e| LayerError::Io {
                    what: "checking",
                    path: self.home.join(&c.path),
                    source: e,
                })?;
                if let Err(why) = b.moved_on(&c.path, now.as_ref()) {
                    moved.push((c.path.clone(), why));
                }
            }
        } else {
            tracing::warn!(
                "no home baseline in {}: cannot tell whether real files moved on",
                bundle_dir.display()
            );
        }
        if !moved.is_empty() && !force {
            return Err(LayerError::MovedOn(moved));
        }
        let mut done = Applied {
            forced: moved.into_iter().map(|(p, _)| p).collect(),
            ..Default::default()
        };
        // what a killed apply left in the folders this one writes into
        let mut swept = BTreeSet::new();
        for c in &changes {
            let Ok((parents, _)) = split(&c.path) else {
                continue;
            };
            if swept.insert(parents.clone()) {
                if let Ok(dir) = fsat::open_dir_path(&home_fd, &parents) {
                    super::applytmp::remove_stale(&dir);
                }
            }
        }
        for c in &changes {
            self.apply_one(&home_fd, &upper_fd, c)?;
            if let Some(b) = base.as_mut().filter(|_| c.path.to_str().is_some()) {
                let comps = fsat::plain_components(&c.path).unwrap_or_default();
                b.update(&c.path, baseline::current(&home_fd, &comps).ok().flatten());
            }
            done.applied.push(c.path.clone());
        }
        if let Some(b) = &base {
            b.save(bundle_dir)
                .map_err(io("writing", &bundle_dir.join(baseline::BASELINE_FILE)))?;
        }
        Ok(done)
    }

    fn apply_one(
        &self,
        home_fd: &OwnedFd,
        upper_fd: &OwnedFd,
        c: &Change,
    ) -> Result<(), LayerError> {
        let real_path = self.home.join(&c.path);
        let (parents, name) = split(&c.path)?;
        let err = |what: &'static str| io(what, &real_path);
        let parent = fsat::create_dir_path(home_fd, &parents, 0o755)
            .map_err(err("creating the folder of"))?;
        let tmp = super::applytmp::name();
        let _ = fsat::remove_at(&parent, &tmp);
        let real_st = fsat::stat_at(&parent, &name).map_err(err("checking"))?;
        let real_is_dir = real_st
            .as_ref()
            .is_some_and(|s| fsat::is_type(s, libc::S_IFDIR));
        match (c.kind, c.entry) {
            (ChangeKind::Removed, _) => {
                fsat::remove_at(&parent, &name).map_err(err("removing"))?;
            }
            (_, EntryType::Dir) => {
                if real_st.is_some() && !real_is_dir {
                    fsat::remove_at(&parent, &name).map_err(err("replacing"))?;
                }
                if !real_is_dir {
                    fsat::mkdir_at(&parent, &name, c.mode.unwrap_or(0o755))
                        .map_err(err("creating"))?;
                }
            }
            (_, EntryType::File) => {
                let up_dir = fsat::open_dir_path(upper_fd, &parents)
                    .map_err(err("reading the layer copy of"))?;
                let mut src =
                    fsat::open_file_at(&up_dir, &name).map_err(err("reading the layer copy of"))?;
                let mode = c.mode.unwrap_or(0o644) & 0o777;
                let mut dst = fsat::create_file_at(&parent, &tmp, 0o600).map_err(err("writing"))?;
                // the bytes written are the bytes hashed: they must be the reviewed ones
                let written = copy_hashed(&mut src, &mut dst).and_then(|sum| {
                    fsat::fchmod(dst.as_raw_fd(), mode)?;
                    dst.flush()?;
                    dst.sync_all()?;
                    Ok(sum)
                });
                match written {
                    Ok(sum) if Some(&sum) == c.sha256.as_ref() => {}
                    Ok(_) => {
                        let _ = fsat::remove_at(&parent, &tmp);
                        return Err(LayerError::ChangedWhileApplying(c.path.clone()));
                    }
                    Err(e) => {
                        let _ = fsat::remove_at(&parent, &tmp);
                        return Err(err("writing")(e));
                    }
                }
                if real_is_dir {
                    fsat::remove_at(&parent, &name).map_err(err("replacing"))?;
                }
                fsat::rename_at(&parent, &tmp, &name).map_err(err("writing"))?;
            }
            (_, EntryType::Symlink) => {
                let target = c.target.clone().unwrap_or_default();
                fsat::symlink_at(&target, &parent, &tmp).map_err(err("writing"))?;
                if real_is_dir {
                    fsat::remove_at(&parent, &name).map_err(err("replacing"))?;
                }
                fsat::rename_at(&parent, &tmp, &name).map_err(err("writing"))?;
            }
            (_, EntryType::Other) => {
                return Err(LayerError::Refused(vec![(
                    c.path.clone(),
                    "not a file, folder or symlink".into(),
                )]))
            }
        }
        Ok(())
    }

    /// Remove the changes under `filter` (all when empty) from the layer. Returns the
    /// relative paths removed from the upper directory.
    pub fn discard(&self, filter: &[PathBuf]) -> Result<Vec<PathBuf>, LayerError> {
        let upper_fd = match fsat::open_dir(&self.upper) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("opening", &self.upper)(e)),
        };
        let mut removed = Vec::new();
        if filter.is_empty() {
            for n in fsat::list(&upper_fd).map_err(io("reading", &self.upper))? {
                let p = PathBuf::from(&n);
                if self.is_excluded(&p) {
                    continue;
                }
                fsat::remove_at(&upper_fd, &n).map_err(io("removing", &self.upper.join(&n)))?;
                removed.push(p);
            }
            return Ok(removed);
        }
        // check every path first: nothing is removed when one is wrong
        let mut plan = Vec::new();
        for f in filter {
            let (parents, name) = split(f)?;
            let mut cur = fsat::dup(&upper_fd).map_err(io("opening", &self.upper))?;
            let mut so_far = PathBuf::new();
            for p in &parents {
                so_far.push(p);
                cur = match fsat::open_dir_at(&cur, p) {
                    Ok(d) => d,
                    Err(_) => return Err(LayerError::NoChange(f.clone())),
                };
                if is_opaque(&cur) {
                    return Err(LayerError::InsideOpaque {
                        path: f.clone(),
                        dir: so_far.clone(),
                    });
                }
            }
            match fsat::stat_at(&cur, &name) {
                Ok(Some(_)) => plan.push((cur, name, f.clone())),
                _ => return Err(LayerError::NoChange(f.clone())),
            }
        }
        for (dir, name, rel) in plan {
            fsat::remove_at(&dir, &name).map_err(io("removing", &self.upper.join(&rel)))?;
            removed.push(rel);
        }
        Ok(removed)
    }
}

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

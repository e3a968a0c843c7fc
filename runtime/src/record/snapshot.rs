//! Reading one workspace snapshot ([`take`]): HEAD, the tracked files whose stat differs
//! from the index, and the untracked files, read by capsule itself from a workspace the
//! sandboxed command has written. gix is used only to decode bytes read here (the index,
//! ignore patterns); no repository is opened, no configuration read, no object read.
//!
//! # What a snapshot holds
//!
//! - **HEAD**: `.git/HEAD` as written: `ref: refs/…` is looked up as the loose ref file,
//!   else as its line in `.git/packed-refs` (a symbolic ref is followed up to
//!   [`SYMREF_DEPTH`] times); a detached object id as is. Nothing is peeled and no object
//!   is read (HEAD on an annotated tag gives the tag's id). A ref name outside `refs/`, with
//!   `..`, an empty or dotted component is refused. An unborn branch gives no HEAD.
//! - **Tracked files**: `.git/index` decoded with `gix::index` (once for the snapshots
//!   before and after a command when its bytes are the same). Each entry's worktree path
//!   is `lstat`ed relative to directory descriptors opened with `O_NOFOLLOW|O_DIRECTORY`,
//!   so neither the file nor any parent directory is a symlink followed: a parent that is
//!   missing, not a directory or a symlink makes the entry **removed**, as does a missing
//!   file or a directory in its place (as in git). Another type (a symlink for a file, a
//!   file for a symlink, a FIFO…) or another executable bit is **changed**; so is a stat
//!   that differs from the entry's in size, mtime or ctime (seconds and nanoseconds), inode,
//!   uid or gid. There is no content hashing: a file whose stat changed counts as changed
//!   even if its bytes are equal (`touch`). That is deliberate: a sandboxed command cannot
//!   set a ctime back, so it cannot hide a change from the record by restoring mtime and
//!   size. Conflicted entries and intent-to-add entries are **changed**; a gitlink
//!   (submodule) is only looked at, not into (missing: removed, not a directory:
//!   changed); skip-worktree entries (sparse checkouts) are skipped. The
//!   assume-unchanged bit is not honoured (the command could set it). A split index
//!   (`core.splitIndex`) is not read: an error.
//! - **Untracked files**: the worktree is walked (without `.git`), every file or symlink
//!   that is in no index entry and not ignored is listed one by one as **added**; FIFOs,
//!   sockets and devices are skipped, symlinks are entries themselves and never followed.
//!   A directory holding a `.git` (a nested repository) is one entry, its own path, and is
//!   not walked. Ignore rules: `.git/info/exclude` and the `.gitignore` of every walked
//!   directory, with gitignore semantics (negation, `dir/` patterns, anchoring, `**`) from
//!   `gix::ignore`, fed from bytes read here; an ignored directory is not walked. Global
//!   and system excludes are not read (the repository is untrusted). A `.gitignore` that
//!   is not a regular file (a symlink, a FIFO…) is not read, as if absent (git ≥ 2.32
//!   does not follow a symlinked one either). Ignore rules are the command's to write, so
//!   they cannot hide themselves: an untracked `.gitignore` is listed even when ignored,
//!   and `.git/info/exclude` is reported as changed when its stat changed.
//!   In the snapshot after a command ([`take`] given the paths of the one before), an
//!   untracked file or symlink the snapshot before did not list is added without being
//!   `lstat`ed (its type is its directory entry's; it is added whatever its stat, and
//!   nothing compares that stat): an unpack of 50,000 files costs 50,000 fewer calls.
//!
//! Configuration is not read: the executable bit and symlinks are taken as meaningful
//! (`core.fileMode`, `core.symlinks` true), case as significant (`core.ignoreCase` false).
//!
//! # Never blocking, never trusting the workspace
//!
//! `.git` is first checked with [`guard::check_git_dir`] (a plain directory of the
//! workspace, no `commondir`, no symlinks, FIFOs or devices inside). Every file read is
//! opened with `O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC|O_NOCTTY`, checked with `fstat` to be a
//! regular file and read up to a cap (the index [`INDEX_CAP`], `packed-refs`
//! [`PACKED_REFS_CAP`], other files [`SMALL_CAP`]): over it, the snapshot is an error
//! (the record's `changes_error`). Nothing can block, so a snapshot runs on the calling
//! thread; the `lstat`s of a large index's entries are shared with a few threads of its
//! own, all joined before it returns. Walks deeper than [`MAX_DEPTH`] directories are an
//! error (one descriptor is held per level). Errors name the file and the cause and never quote what was read.
//! The system calls themselves are in the submodule `sys`.

use super::{Entry, Snapshot, Stat};
use capsule_bundle::git::guard;
use gix::bstr::ByteSlice;
use gix::index::entry::{Flags, Mode};
use std::collections::BTreeMap;
use std::io;
use std::ops::Range;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use sys::{dt_of, file_type, fstat, missing, open_dir_at, read_at, stat_at, AsFdRef, DirStream};

mod sys;

/// Largest `.git/index` read.
pub const INDEX_CAP: u64 = 256 << 20;
/// Largest `.git/packed-refs` read (many tags and remote branches).
pub const PACKED_REFS_CAP: u64 = 64 << 20;
/// Largest other file read: HEAD, a loose ref, `.gitignore`, `.git/info/exclude`.
pub const SMALL_CAP: u64 = 1 << 20;
/// Deepest directory walked, below the workspace.
pub const MAX_DEPTH: usize = 256;
/// Symbolic refs followed from HEAD.
pub const SYMREF_DEPTH: usize = 5;

/// The index a snapshot was taken against: its bytes and what they decode to.
pub struct Index {
    bytes: Vec<u8>,
    state: gix::index::State,
}

impl Index {
    /// The paths of its gitlink (submodule) entries.
    pub fn gitlinks(&self) -> Vec<std::path::PathBuf> {
        capsule_bundle::git::hostgit::gitlinks_of_state(&self.state)
    }
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Index({} bytes)", self.bytes.len())
    }
}

/// Take a snapshot of `workspace` (a git work tree), as the module documents. `prev`: the
/// index of an earlier snapshot, used again if the index's bytes have not changed;
/// `before`: the paths of the snapshot this one will be compared with, if any.
pub fn take(
    workspace: &Path,
    prev: Option<&Arc<Index>>,
    before: Option<&BTreeMap<String, Entry>>,
) -> Result<Snapshot, String> {
    guard::check_git_dir(workspace).map_err(|e| e.to_string())?;
    let ws = Ws(workspace);
    let root = DirStream::open_path(workspace).map_err(|e| ws.err("", e))?;
    let git = open_dir_at(root.fd(), b".git").map_err(|e| ws.err(".git", e))?;
    let git = git.as_fd_ref();
    let head = read_head(&ws, git)?;
    let read = read_index(&ws, git, prev)?;
    let index = &read.state;
    let mut paths = BTreeMap::new();
    tracked(&ws, root.fd(), index, &mut paths)?;
    let mut search = gix::ignore::Search::default();
    let info = match open_dir_at(git, b"info") {
        Ok(fd) => Some(fd),
        Err(e) if missing(&e) => None,
        Err(e) => return Err(ws.err(".git/info", e)),
    };
    let mut exclude_stat = None;
    if let Some(info) = info {
        exclude_stat = match stat_at(info.as_fd_ref(), b"exclude") {
            Ok(st) => Some(super::Stat::from_raw(&st)),
            Err(e) if missing(&e) => None,
            Err(e) => return Err(ws.err(".git/info/exclude", e)),
        };
        let exclude = read_at(
            &ws,
            info.as_fd_ref(),
            b"exclude",
            ".git/info/exclude",
            SMALL_CAP,
        )?;
        if let Some(bytes) = exclude {
            search.patterns.push(patterns(&bytes, b""));
        }
    }
    let mut walk = Walk {
        ws: &ws,
        index,
        search,
        paths: &mut paths,
        before,
    };
    walk.dir(&root, &mut Vec::new(), 0, 0..index.entries().len())?;
    Ok(Snapshot {
        head,
        paths,
        exclude: exclude_stat,
        index: Some(read),
    })
}

/// The workspace, for messages naming its files.
struct Ws<'a>(&'a Path);

impl Ws<'_> {
    fn err(&self, rel: &str, e: io::Error) -> String {
        format!("{}: {e}", self.0.join(rel).display())
    }
    fn msg(&self, rel: &str, what: &str) -> String {
        format!("{}: {what}", self.0.join(rel).display())
    }
}

/// A workspace path as the record names it: as is when UTF-8, else in the escaped form
/// of [`capsule_bundle::escape::name`] (JSON cannot carry other bytes; two names never
/// collapse into one, as lossy decoding would make them).
fn path_string(rel: &[u8]) -> String {
    match std::str::from_utf8(rel) {
        Ok(s) => s.to_string(),
        Err(_) => capsule_bundle::escape::name(rel),
    }
}

// ---- HEAD ----

fn read_head(ws: &Ws, git: BorrowedFd) -> Result<Option<String>, String> {
    let Some(mut content) = read_at(ws, git, b"HEAD", ".git/HEAD", SMALL_CAP)? else {
        return Err(ws.msg(".git/HEAD", "missing; not a git repository"));
    };
    let mut what = ".git/HEAD".to_string();
    for _ in 0..=SYMREF_DEPTH {
        let line = content.lines().next().unwrap_or_default().trim();
        if let Some(name) = line.strip_prefix(b"ref:") {
            let name = name.trim_start();
            if !valid_ref_name(name) {
                return Err(ws.msg(&what, "names an invalid ref; not read"));
            }
            let name = name.to_str_lossy().into_owned();
            match read_loose_ref(ws, git, &name)? {
                Some(next) => {
                    content = next;
                    what = format!(".git/{name}");
                }
                None => return packed_ref(ws, git, &name),
            }
        } else if is_object_id(line) {
            return Ok(Some(line.to_ascii_lowercase().to_str_lossy().into_owned()));
        } else {
            return Err(ws.msg(&what, "neither a ref nor an object id; not read"));
        }
    }
    Err(ws.msg(".git/HEAD", "symbolic refs nested too deep; not read"))
}

fn is_object_id(s: &[u8]) -> bool {
    matches!(s.len(), 40 | 64) && s.iter().all(u8::is_ascii_hexdigit)
}

/// A ref name capsule reads: under `refs/`, no empty, dotted or `.lock` component, no
/// `..`, `@{`, control characters, spaces or glob characters.
fn valid_ref_name(name: &[u8]) -> bool {
    name.starts_with(b"refs/")
        && name
            .split(|b| *b == b'/')
            .all(|c| !c.is_empty() && c[0] != b'.' && !c.ends_with(b".lock"))
        && !name.windows(2).any(|w| w == b".." || w == b"@{")
        && name
            .iter()
            .all(|&b| b > b' ' && b != 0x7f && !b"\\:?*[~^".contains(&b))
}

/// The loose ref file `.git/<name>`, or `None` when there is none.
fn read_loose_ref(ws: &Ws, git: BorrowedFd, name: &str) -> Result<Option<Vec<u8>>, String> {
    let rel = format!(".git/{name}");
    let comps: Vec<&[u8]> = name.as_bytes().split(|b| *b == b'/').collect();
    let Some((file, dirs)) = comps.split_last() else {
        return Ok(None);
    };
    let mut held: Option<OwnedFd> = None;
    for d in dirs {
        let parent = held.as_ref().map_or(git, |f| f.as_fd_ref());
        match open_dir_at(parent, d) {
            Ok(fd) => held = Some(fd),
            Err(e) if missing(&e) => return Ok(None),
            Err(e) => return Err(ws.err(&rel, e)),
        }
    }
    let parent = held.as_ref().map_or(git, |f| f.as_fd_ref());
    read_at(ws, parent, file, &rel, SMALL_CAP)
}

/// `name`'s id in `.git/packed-refs`, or `None` (an unborn branch).
fn packed_ref(ws: &Ws, git: BorrowedFd, name: &str) -> Result<Option<String>, String> {
    let Some(packed) = read_at(ws, git, b"packed-refs", ".git/packed-refs", PACKED_REFS_CAP)?
    else {
        return Ok(None);
    };
    for line in packed.lines() {
        if let Some((id, rest)) = line.split_once_str(b" ") {
            if rest.trim_end() == name.as_bytes() && is_object_id(id) {
                return Ok(Some(id.to_ascii_lowercase().to_str_lossy().into_owned()));
            }
        }
    }
    Ok(None)
}

// ---- the index ----

/// `.git/index`, decoded (`prev` again when it holds the same bytes).
fn read_index(ws: &Ws, git: BorrowedFd, prev: Option<&Arc<Index>>) -> Result<Arc<Index>, String> {
    let kind = gix::hash::Kind::Sha1;
    let Some(bytes) = read_at(ws, git, b"index", ".git/index", INDEX_CAP)? else {
        let state = gix::index::State::new(kind);
        let bytes = Vec::new();
        return Ok(Arc::new(Index { bytes, state }));
    };
    if let Some(prev) = prev.filter(|p| !bytes.is_empty() && p.bytes == bytes) {
        return Ok(Arc::clone(prev));
    }
    let opts = gix::index::decode::Options {
        thread_limit: Some(1),
        alloc_limit_bytes: Some(4 * INDEX_CAP as usize),
        ..Default::default()
    };
    let (state, _) =
        gix::index::State::from_bytes(&bytes, std::time::UNIX_EPOCH.into(), kind, opts)
            .map_err(|e| ws.msg(".git/index", &format!("not a readable index ({e})")))?;
    if state.link().is_some() {
        return Err(ws.msg(".git/index", "a split index (core.splitIndex); not read"));
    }
    Ok(Arc::new(Index { bytes, state }))
}

/// A path of the index capsule looks at: relative, no empty, `.` or `..` component, no
/// `.git` component, no NUL.
fn valid_index_path(path: &[u8]) -> bool {
    !path.contains(&0)
        && path
            .split(|b| *b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b".." && !c.eq_ignore_ascii_case(b".git"))
}

/// Indexes at least this large are `lstat`ed by several threads ([`TRACKED_THREADS`]);
/// in unit tests every index of two entries or more, so that their snapshots take that
/// path (and must agree with gix's status).
const TRACKED_PARALLEL: usize = if cfg!(test) { 2 } else { 16_384 };
/// At most this many threads `lstat` the tracked files.
const TRACKED_THREADS: usize = 4;

/// The tracked files whose worktree differs from the index, with their stat. A large
/// index is split in runs of entries (never inside one path's stages), one thread each
/// (scoped: all joined here); the first error in index order is the one returned.
fn tracked(
    ws: &Ws,
    root: BorrowedFd,
    index: &gix::index::State,
    paths: &mut BTreeMap<String, Entry>,
) -> Result<(), String> {
    let entries = index.entries();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(TRACKED_THREADS);
    if entries.len() < TRACKED_PARALLEL || threads < 2 {
        return tracked_run(ws, root, index, 0..entries.len(), paths);
    }
    let mut bounds = vec![0];
    for k in 1..threads {
        let mut b = entries.len() * k / threads;
        while b < entries.len() && entries[b].path(index) == entries[b - 1].path(index) {
            b += 1;
        }
        bounds.push(b.max(*bounds.last().unwrap_or(&0)));
    }
    bounds.push(entries.len());
    let runs: Vec<Result<BTreeMap<String, Entry>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = bounds
            .windows(2)
            .map(|w| {
                let range = w[0]..w[1];
                s.spawn(move || {
                    let mut part = BTreeMap::new();
                    tracked_run(ws, root, index, range, &mut part).map(|()| part)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ws.msg(".git/index", "a thread reading it failed")))
            })
            .collect()
    });
    for run in runs {
        paths.append(&mut run?);
    }
    Ok(())
}

/// [`tracked`] of the entries in `range`, on this thread.
fn tracked_run(
    ws: &Ws,
    root: BorrowedFd,
    index: &gix::index::State,
    range: Range<usize>,
    paths: &mut BTreeMap<String, Entry>,
) -> Result<(), String> {
    let entries = &index.entries()[..range.end];
    let mut dirs = Dirs {
        root,
        open: Vec::new(),
    };
    let mut i = range.start;
    while i < entries.len() {
        let e = &entries[i];
        let path = e.path(index);
        i += 1;
        let conflict = e.stage_raw() != 0;
        if conflict {
            // one entry per path, whichever stages it has
            while i < entries.len() && entries[i].path(index) == path {
                i += 1;
            }
        } else if e.mode == Mode::DIR || e.flags.contains(Flags::SKIP_WORKTREE) {
            continue;
        }
        if !valid_index_path(path) {
            return Err(ws.msg(".git/index", "holds an invalid path; not read"));
        }
        let (dir, name) = match path.rfind_byte(b'/') {
            Some(p) => (&path[..p], &path[p + 1..]),
            None => (&path[..0], path),
        };
        let rel = path.to_str_lossy();
        let st = match dirs.get(ws, dir)? {
            None => None,
            Some(fd) => match stat_at(fd, name) {
                Ok(st) => Some(st),
                Err(e) if missing(&e) => None,
                Err(e) => return Err(ws.err(&rel, e)),
            },
        };
        // a path gone from the worktree (or behind a symlink, never looked through) is
        // removed, whether or not its entry is a conflict
        let kind = match &st {
            None => Some("removed"),
            _ if conflict => Some("changed"),
            Some(st) => differs(e, st),
        };
        if let Some(kind) = kind {
            let stat = st.as_ref().map(Stat::from_raw);
            paths.insert(path_string(path), Entry { kind, stat });
        }
    }
    Ok(())
}

/// How the worktree file `st` differs from its index entry `e`, if it does.
fn differs(e: &gix::index::Entry, st: &libc::stat) -> Option<&'static str> {
    let is = |t: libc::mode_t| file_type(st) == t;
    if e.mode == Mode::COMMIT {
        // a submodule: there or not, never looked into
        return (!is(libc::S_IFDIR)).then_some("changed");
    }
    if is(libc::S_IFDIR) {
        return Some("removed");
    }
    if e.flags.contains(Flags::INTENT_TO_ADD) {
        return Some("changed");
    }
    let executable = st.st_mode & 0o100 != 0;
    let same_type = match e.mode {
        Mode::SYMLINK => is(libc::S_IFLNK),
        Mode::FILE => is(libc::S_IFREG) && !executable,
        Mode::FILE_EXECUTABLE => is(libc::S_IFREG) && executable,
        _ => false,
    };
    if !same_type {
        return Some("changed");
    }
    // the index keeps the low 32 bits of each field
    let s = &e.stat;
    let same = u64::from(s.size) == (st.st_size as u64 & 0xffff_ffff)
        && s.mtime.secs == st.st_mtime as u32
        && s.mtime.nsecs == st.st_mtime_nsec as u32
        && s.ctime.secs == st.st_ctime as u32
        && s.ctime.nsecs == st.st_ctime_nsec as u32
        && s.ino == st.st_ino as u32
        && s.uid == st.st_uid
        && s.gid == st.st_gid;
    (!same).then_some("changed")
}

/// The directories of the index entry being looked at, opened from the workspace down
/// without following symlinks; kept open while the next entries share them.
struct Dirs<'a> {
    root: BorrowedFd<'a>,
    /// One per component: its name, and its descriptor (`None`: missing, not a directory
    /// or a symlink, and so everything below).
    open: Vec<(Vec<u8>, Option<OwnedFd>)>,
}

impl Dirs<'_> {
    /// The directory `dir` (slash-separated, empty for the workspace), or `None` when it or
    /// a parent is missing, not a directory or a symlink.
    fn get(&mut self, ws: &Ws, dir: &[u8]) -> Result<Option<BorrowedFd<'_>>, String> {
        let comps: Vec<&[u8]> = if dir.is_empty() {
            Vec::new()
        } else {
            dir.split(|b| *b == b'/').collect()
        };
        let keep = self
            .open
            .iter()
            .zip(&comps)
            .take_while(|((open, _), c)| open.as_slice() == **c)
            .count();
        self.open.truncate(keep);
        for (n, c) in comps.iter().enumerate().skip(keep) {
            let parent = match self.open.last() {
                None => Some(self.root),
                Some((_, fd)) => fd.as_ref().map(|f| f.as_fd_ref()),
            };
            let fd = match parent.map(|p| open_dir_at(p, c)) {
                None => None,
                Some(Ok(fd)) => Some(fd),
                Some(Err(e)) if missing(&e) => None,
                Some(Err(e)) => {
                    let rel = comps[..=n].join(&b'/');
                    return Err(ws.err(&rel.to_str_lossy(), e));
                }
            };
            self.open.push((c.to_vec(), fd));
        }
        Ok(match self.open.last() {
            None => Some(self.root),
            Some((_, fd)) => fd.as_ref().map(|f| f.as_fd_ref()),
        })
    }
}

// ---- untracked files ----

/// The walk for untracked files.
struct Walk<'a> {
    ws: &'a Ws<'a>,
    index: &'a gix::index::State,
    /// `.git/info/exclude`, then the `.gitignore` of each directory being walked
    search: gix::ignore::Search,
    paths: &'a mut BTreeMap<String, Entry>,
    /// The paths of the snapshot before, when this is the one after.
    before: Option<&'a BTreeMap<String, Entry>>,
}

impl Walk<'_> {
    /// The index entries in `under` (a range of entries) whose paths start with `prefix`:
    /// found by bisection, as entries are sorted by path.
    fn below(&self, under: Range<usize>, prefix: &[u8]) -> Range<usize> {
        let (index, entries) = (self.index, &self.index.entries()[under.clone()]);
        let lo = entries.partition_point(|e| e.path(index).as_bytes() < prefix);
        let n = entries[lo..].partition_point(|e| e.path(index).starts_with(prefix));
        under.start + lo..under.start + lo + n
    }

    /// Is `rel` an entry of the index among those in `under`? Its position, if so.
    fn tracked(&self, under: &Range<usize>, rel: &[u8]) -> Option<usize> {
        let index = self.index;
        self.index.entries()[under.clone()]
            .binary_search_by(|e| e.path(index).as_bytes().cmp(rel))
            .ok()
            .map(|i| under.start + i)
    }

    /// Walk `dir`, at `rel` (empty for the workspace, else ending with `/`); `under`: the
    /// index entries below it (membership is looked up among those only).
    fn dir(
        &mut self,
        dir: &DirStream,
        rel: &mut Vec<u8>,
        depth: usize,
        under: Range<usize>,
    ) -> Result<(), String> {
        let names = dir
            .list()
            .map_err(|e| self.ws.err(&rel.to_str_lossy(), e))?;
        if !rel.is_empty() && names.iter().any(|(n, _)| n == b".git") {
            // a nested repository: one entry, unless the index tracks something inside
            let path = &rel[..rel.len() - 1];
            if self.index.prefixed_entries_range(rel.as_bstr()).is_none()
                && !self.ignored(path, true)
            {
                let st = fstat(dir.fd()).map_err(|e| self.ws.err(&path.to_str_lossy(), e))?;
                self.added(path, &st);
            }
            return Ok(());
        }
        let mut pushed = false;
        if let Some((_, t)) = names.iter().find(|(n, _)| n == b".gitignore") {
            let regular = match *t {
                libc::DT_REG => true,
                libc::DT_UNKNOWN => {
                    stat_at(dir.fd(), b".gitignore").is_ok_and(|st| file_type(&st) == libc::S_IFREG)
                }
                _ => false,
            };
            if regular {
                let what = format!("{}.gitignore", rel.to_str_lossy());
                if let Some(bytes) = read_at(self.ws, dir.fd(), b".gitignore", &what, SMALL_CAP)? {
                    self.search.patterns.push(patterns(&bytes, rel));
                    pushed = true;
                }
            }
        }
        let mut result = Ok(());
        for (name, t) in &names {
            if rel.is_empty() && name == b".git" {
                continue;
            }
            let len = rel.len();
            rel.extend_from_slice(name);
            result = self.entry(dir, name, *t, rel, depth, &under);
            rel.truncate(len);
            if result.is_err() {
                break;
            }
        }
        if pushed {
            self.search.patterns.pop();
        }
        result
    }

    /// One entry `name` of `dir`, at `rel`, of directory entry type `t`.
    fn entry(
        &mut self,
        dir: &DirStream,
        name: &[u8],
        t: u8,
        rel: &mut Vec<u8>,
        depth: usize,
        under: &Range<usize>,
    ) -> Result<(), String> {
        let typed = t != libc::DT_UNKNOWN;
        let t = if t == libc::DT_UNKNOWN {
            match stat_at(dir.fd(), name) {
                Ok(st) => dt_of(&st),
                Err(e) if missing(&e) => return Ok(()),
                Err(e) => return Err(self.ws.err(&rel.to_str_lossy(), e)),
            }
        } else {
            t
        };
        match t {
            libc::DT_DIR => {
                if let Some(i) = self.tracked(under, rel) {
                    // a submodule, or a sparse directory: not walked
                    if matches!(self.index.entry(i).mode, Mode::COMMIT | Mode::DIR) {
                        return Ok(());
                    }
                }
                if self.ignored(rel, true) {
                    return Ok(());
                }
                if depth >= MAX_DEPTH {
                    return Err(self.ws.msg(
                        &rel.to_str_lossy(),
                        &format!("more than {MAX_DEPTH} directories deep; not walked"),
                    ));
                }
                let sub = match DirStream::open_at(dir.fd(), name) {
                    Ok(sub) => sub,
                    Err(e) if missing(&e) => return Ok(()),
                    Err(e) => return Err(self.ws.err(&rel.to_str_lossy(), e)),
                };
                rel.push(b'/');
                let below = self.below(under.clone(), rel);
                self.dir(&sub, rel, depth + 1, below)
            }
            libc::DT_REG | libc::DT_LNK => {
                // a `.gitignore` is never hidden by ignore rules (its own, say `*`): new rules
                // that would hide what the command added show up themselves
                if self.tracked(under, rel).is_some()
                    || (self.ignored(rel, false) && name != b".gitignore")
                {
                    return Ok(());
                }
                if typed {
                    if let Some(before) = self.before {
                        let path = path_string(rel);
                        if !before.contains_key(&path) {
                            // new: added whatever its stat, which nothing compares
                            self.paths.insert(
                                path,
                                Entry {
                                    kind: "added",
                                    stat: None,
                                },
                            );
                            return Ok(());
                        }
                    }
                }
                let st = match stat_at(dir.fd(), name) {
                    Ok(st) => st,
                    Err(e) if missing(&e) => return Ok(()),
                    Err(e) => return Err(self.ws.err(&rel.to_str_lossy(), e)),
                };
                if matches!(dt_of(&st), libc::DT_REG | libc::DT_LNK) {
                    self.added(rel, &st);
                }
                Ok(())
            }
            // FIFOs, sockets, devices: not files git could add
            _ => Ok(()),
        }
    }

    fn ignored(&self, rel: &[u8], is_dir: bool) -> bool {
        self.search
            .pattern_matching_relative_path(
                rel.as_bstr(),
                Some(is_dir),
                gix::glob::pattern::Case::Sensitive,
            )
            .is_some_and(|m| !m.pattern.is_negative())
    }

    fn added(&mut self, rel: &[u8], st: &libc::stat) {
        self.paths.insert(
            path_string(rel),
            Entry {
                kind: "added",
                stat: Some(Stat::from_raw(st)),
            },
        );
    }
}

/// The ignore patterns of `bytes`, for paths below `base` (empty, or ending with `/`).
fn patterns(
    bytes: &[u8],
    base: &[u8],
) -> gix::glob::search::pattern::List<gix::ignore::search::Ignore> {
    use gix::glob::search::Pattern;
    let parse = gix::ignore::search::Ignore::default();
    gix::glob::search::pattern::List {
        patterns: parse.bytes_to_patterns(bytes, Path::new("")),
        source: None,
        base: (!base.is_empty()).then(|| base.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by `hack/fuzz.sh 10` (a corrupted index whose entry became a conflict): a
    /// conflicted entry behind a symlinked folder was reported "changed", as if the path
    /// were there; it is not looked at through the symlink, so it is "removed".
    #[test]
    fn a_conflicted_entry_behind_a_symlink_is_removed() {
        use gix::index::entry::{Flags, Mode, Stage, Stat};
        let d = tempfile::tempdir_in("/dev/shm").unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir_all(ws.join(".git/refs/heads")).unwrap();
        std::fs::create_dir_all(d.path().join("outside")).unwrap();
        std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(d.path().join("outside/secret"), "secret").unwrap();
        std::os::unix::fs::symlink("../outside", ws.join("l")).unwrap();
        let mut state = gix::index::State::new(gix::hash::Kind::Sha1);
        let id = gix::ObjectId::empty_blob(gix::hash::Kind::Sha1);
        for stage in [Stage::Base, Stage::Ours] {
            let flags = Flags::from_stage(stage);
            state.dangerously_push_entry(Stat::default(), id, flags, Mode::FILE, "l/secret".into());
        }
        state.sort_entries();
        let mut bytes = Vec::new();
        state.write_to(&mut bytes, Default::default()).unwrap();
        bytes.extend_from_slice(&[0; 20]);
        std::fs::write(ws.join(".git/index"), &bytes).unwrap();
        let s = take(&ws, None, None).unwrap();
        assert_eq!(s.paths["l/secret"].kind, "removed", "{:?}", s.paths);
    }

    #[test]
    fn ref_names_and_index_paths_are_checked() {
        for ok in ["refs/heads/main", "refs/heads/a/b-c_d.e", "refs/tags/v1"] {
            assert!(valid_ref_name(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "HEAD",
            "/etc/passwd",
            "refs/../x",
            "refs/heads/../../x",
            "refs//x",
            "refs/heads/.x",
            "refs/heads/x.lock",
            "refs/heads/",
            "refs/heads/a b",
            "refs/heads/a\\b",
            "refs/heads/x@{1}",
        ] {
            assert!(!valid_ref_name(bad.as_bytes()), "{bad}");
        }
        for ok in ["a", "a/b", ".gitignore", "a/.github/x", "..a"] {
            assert!(valid_index_path(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "",
            "/a",
            "a/",
            "../a",
            "a/../b",
            "./a",
            ".git/config",
            "a/.GIT/x",
            "a\0b",
        ] {
            assert!(!valid_index_path(bad.as_bytes()), "{bad}");
        }
    }
}

#[cfg(test)]
#[path = "snapshot_props.rs"]
mod props;

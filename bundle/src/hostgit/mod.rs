//! Keeping the operator's own git on the host safe in a workspace that a sandboxed task
//! (or a spec's steps) has written: [`guard_workspace`] checks every git dir of the
//! workspace, without running git and without following anything, and moves what would
//! make the operator's next `git status`, `git log -p`, `git commit` or `git fetch
//! <workspace>` run the task's code or reach outside the workspace into a quarantine in
//! the bundle, restoring a safe version where git needs one.
//!
//! # What is checked, per git dir
//!
//! The git dirs are the workspace's `.git`, its submodules' (`.git/modules/**`), its
//! linked worktrees' admin dirs (`.git/worktrees/*`), every submodule checkout the index
//! names (a gitlink) whose `.git` is a directory or a `gitdir:` file, and local
//! repositories inside the workspace that a kept remote or submodule URL names (Kitsoki's
//! `bare_remote`), now or at the last check. In each:
//!
//! - `config` and `config.worktree`: reduced to an allowlist ([`config`]); the original
//!   goes to the quarantine and the reduced one takes its place. A config that is not a
//!   regular file (a symlink, a FIFO) is quarantined and not replaced.
//! - `hooks/`: every entry but a regular `*.sample` file or a regular file without an
//!   executable bit is quarantined (git runs only exact hook names, and only executable
//!   ones); a `hooks` that is not a directory is quarantined whole.
//! - `commondir`: quarantined, except in a linked worktree's admin dir, where it must say
//!   `../..` (else it is quarantined and `../..` written).
//! - `objects/info/alternates`: quarantined when a line leads outside the workspace.
//! - a linked worktree's `gitdir` must name a `.git` inside the workspace (else the
//!   admin dir is quarantined whole: `git worktree remove` would delete where it points),
//!   and the `.git` file there must point back at the admin dir (else it is quarantined).
//!
//! The workspace's own `.git` must be a directory: a `gitdir:` file or a symlink (say, to
//! the operator's real repository) is quarantined and replaced by [`PLACEHOLDER`], a
//! `.git` file naming a path that cannot exist, so the operator's git there fails with
//! "not a git repository" instead of acting on another repository or a parent folder's.
//!
//! `info/attributes` and `.gitattributes` are left alone: attributes only name drivers,
//! and the drivers (`filter.*`, `diff.*.textconv`, `merge.*.driver`) are config keys no
//! workspace config keeps.
//!
//! # Cost
//!
//! After a full check, the stat (device, inode, mode, size, mtime, ctime) of every path
//! it looked at is written to `bundles/<name>/git-guard.stamp`. The next call compares
//! the stats of those paths (and the gitlinks) first: when nothing changed it reads
//! nothing more. ctime cannot be set back by a task, so a rewrite that keeps mtime and
//! size is still seen.

pub mod config;
mod fsat;
pub mod paths;

use fsat::{Dir, Kind, Quarantine, Stat};
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The `.git` file written where the workspace's `.git` was not a directory.
pub const PLACEHOLDER: &[u8] =
    b"gitdir: /dev/null/capsule-quarantined-this-git-dir-see-the-bundle-quarantine\n";

/// The stamp file in the bundle.
pub const STAMP_FILE: &str = "git-guard.stamp";

/// Git dirs nested deeper than this (submodules of submodules...) are not followed.
const MAX_NESTING: usize = 8;
/// Most git dirs checked in one workspace.
const MAX_GIT_DIRS: usize = 512;

/// One offending entry and what was done with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// The path relative to the workspace, escaped (`{:?}`-style, without quotes).
    pub path: String,
    /// What was found (for a config: the keys dropped, never their values).
    pub found: String,
    /// `quarantined`, `quarantined, reduced config written`, `quarantined, placeholder
    /// written`, `rewritten`, or what could not be done.
    pub action: String,
}

/// What [`guard_workspace`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GuardReport {
    /// False: nothing changed since the last check, nothing was read.
    pub checked: bool,
    pub findings: Vec<Finding>,
    /// Where the quarantined entries are, when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<PathBuf>,
    /// Problems checking (an unreadable file, a quarantine that could not be made).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

impl GuardReport {
    /// Anything worth telling (a finding or an error)?
    pub fn is_notable(&self) -> bool {
        !self.findings.is_empty() || !self.errors.is_empty()
    }

    /// One line for stderr (names escaped), or `None` when there is nothing to say.
    pub fn summary_line(&self) -> Option<String> {
        if !self.is_notable() {
            return None;
        }
        let mut parts: Vec<String> = self
            .findings
            .iter()
            .map(|f| format!("{} ({}: {})", f.path, f.found, f.action))
            .collect();
        parts.extend(self.errors.iter().map(|e| format!("error: {e}")));
        let whre = self
            .quarantine
            .as_ref()
            .map(|q| format!("; moved to {}", esc(q.as_os_str())))
            .unwrap_or_default();
        Some(format!(
            "capsule: git guard: the workspace's git would have run the task's code or reached outside on the host: {}{whre}",
            parts.join("; ")
        ))
    }
}

fn esc(s: &OsStr) -> String {
    let s = s.to_string_lossy();
    let d = format!("{s:?}");
    d[1..d.len() - 1].to_string()
}

fn rel_esc(p: &Path) -> String {
    esc(p.as_os_str())
}

/// Check the git dirs of `workspace` as the module documents; offending entries go to
/// `bundle_dir/quarantine/<time>-<pid>/`. `gitlinks`: the paths (relative to the
/// workspace) of the index's gitlink entries when the caller has decoded the index
/// already (the exec record's snapshot); `None`: read `.git/index` here.
///
/// Call it after every sandboxed exec and after a capsule's materialization. It never
/// fails: what it could not do is in [`GuardReport::errors`].
pub fn guard_workspace(
    workspace: &Path,
    bundle_dir: &Path,
    gitlinks: Option<&[PathBuf]>,
) -> GuardReport {
    let read;
    let gitlinks = match gitlinks {
        Some(g) => g,
        None => {
            read = index_gitlinks(workspace);
            &read
        }
    };
    let stamp_path = bundle_dir.join(STAMP_FILE);
    let old = std::fs::read(&stamp_path).unwrap_or_default();
    if stamp_matches(&old, workspace, gitlinks) {
        return GuardReport::default();
    }
    let roots = paths::Roots::new(workspace);
    // repositories found through URLs last time stay checked when no URL names them now
    let known: Vec<PathBuf> = stamp_repos(&old)
        .into_iter()
        .map(|r| roots.canonical.join(r))
        .collect();
    let mut g = Guard {
        ws: roots.canonical.clone(),
        roots,
        q: Quarantine::new(bundle_dir),
        report: GuardReport {
            checked: true,
            ..Default::default()
        },
        watch: BTreeSet::new(),
        visited: BTreeSet::new(),
        pending_repos: known,
    };
    match Dir::open_path(&g.ws.clone()) {
        Ok(root) => g.run(&root, gitlinks),
        Err(e) => g
            .report
            .errors
            .push(format!("{}: {e}", workspace.display())),
    }
    if g.q.used() {
        g.report.quarantine = Some(g.q.root.clone());
    }
    if g.report.errors.is_empty() {
        let stamp = make_stamp(workspace, &g.watch, gitlinks);
        let tmp = bundle_dir.join(format!("{STAMP_FILE}.{}", std::process::id()));
        if std::fs::write(&tmp, &stamp)
            .and_then(|_| std::fs::rename(&tmp, &stamp_path))
            .is_err()
        {
            let _ = std::fs::remove_file(&tmp);
        }
    } else {
        // check everything again next time
        let _ = std::fs::remove_file(&stamp_path);
    }
    g.report
}

/// The gitlink (submodule) paths of `workspace/.git/index`, read without following
/// anything; none when it cannot be read.
pub fn index_gitlinks(workspace: &Path) -> Vec<PathBuf> {
    let Ok(root) = Dir::open_path(workspace) else {
        return Vec::new();
    };
    let Ok(git) = root.open_dir(OsStr::new(".git")) else {
        return Vec::new();
    };
    // the index may be large: read it with its own cap
    let Ok(Some(bytes)) = read_index(&git) else {
        return Vec::new();
    };
    gitlinks_of(&bytes)
}

/// Largest `.git/index` read for its gitlinks.
const INDEX_CAP: u64 = 256 << 20;

fn read_index(git: &Dir) -> std::io::Result<Option<Vec<u8>>> {
    git.read_capped(OsStr::new("index"), INDEX_CAP)
}

/// The gitlink paths of an index's bytes.
pub fn gitlinks_of(index: &[u8]) -> Vec<PathBuf> {
    let opts = gix::index::decode::Options::default();
    let Ok((state, _)) = gix::index::State::from_bytes(
        index,
        std::time::UNIX_EPOCH.into(),
        gix::hash::Kind::Sha1,
        opts,
    ) else {
        return Vec::new();
    };
    gitlinks_of_state(&state)
}

/// The gitlink paths of a decoded index.
pub fn gitlinks_of_state(state: &gix::index::State) -> Vec<PathBuf> {
    state
        .entries()
        .iter()
        .filter(|e| e.mode == gix::index::entry::Mode::COMMIT)
        .map(|e| PathBuf::from(OsStr::from_bytes(e.path(state))))
        .collect()
}

/// What the stamp says about one path.
fn stamp_line(out: &mut Vec<u8>, rel: &Path, st: &Stat, ident_only: bool) {
    out.extend_from_slice(hex(rel.as_os_str().as_bytes()).as_bytes());
    let line = if ident_only {
        format!(" {} {} {:o}\n", st.dev, st.ino, st.mode)
    } else {
        format!(
            " {} {} {:o} {} {}.{} {}.{}\n",
            st.dev, st.ino, st.mode, st.size, st.mtime.0, st.mtime.1, st.ctime.0, st.ctime.1
        )
    };
    out.extend_from_slice(line.as_bytes());
}

fn hex(b: &[u8]) -> String {
    if b.is_empty() {
        return "-".into();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A path the stamp watches: relative path, and whether only its identity counts (a git
/// dir, whose own mtime changes with every commit).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Watch {
    rel: PathBuf,
    ident_only: bool,
    /// A repository found through a URL (a bare remote): checked again by the next full
    /// check even when no config names it any more.
    repo: bool,
}

fn make_stamp(ws: &Path, watch: &BTreeSet<Watch>, gitlinks: &[PathBuf]) -> Vec<u8> {
    let mut out = b"capsule-git-guard 1\n".to_vec();
    let mut links: Vec<&PathBuf> = gitlinks.iter().collect();
    links.sort();
    for l in links {
        out.extend_from_slice(b"gitlink ");
        out.extend_from_slice(hex(l.as_os_str().as_bytes()).as_bytes());
        out.push(b'\n');
    }
    for w in watch {
        let st = fsat::lstat_path(&ws.join(&w.rel));
        out.push(match (w.repo, w.ident_only) {
            (true, _) => b'r',
            (false, true) => b'i',
            (false, false) => b'f',
        });
        out.push(b' ');
        stamp_line(&mut out, &w.rel, &st, w.ident_only);
    }
    out
}

fn unhex(s: &[u8]) -> Option<Vec<u8>> {
    if s == b"-" {
        return Some(Vec::new());
    }
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks(2)
        .map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok())
        .collect()
}

/// The repositories found through URLs that the stamp `old` names.
fn stamp_repos(old: &[u8]) -> Vec<PathBuf> {
    old.split(|b| *b == b'\n')
        .filter_map(|l| l.strip_prefix(b"r "))
        .filter_map(|l| l.split(|b| *b == b' ').next())
        .filter_map(unhex)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(OsStr::from_bytes(&p)))
        .collect()
}

/// Does the stamp `old` still describe `ws` (every watched path's stat, the gitlinks)?
fn stamp_matches(old: &[u8], ws: &Path, gitlinks: &[PathBuf]) -> bool {
    let mut lines = old.split(|b| *b == b'\n');
    if lines.next() != Some(b"capsule-git-guard 1") {
        return false;
    }
    let mut links: Vec<&PathBuf> = gitlinks.iter().collect();
    links.sort();
    let mut links = links.into_iter();
    let mut fresh = Vec::with_capacity(old.len());
    let mut saw_entries = false;
    for line in lines {
        if line.is_empty() {
            continue;
        }
        if let Some(l) = line.strip_prefix(b"gitlink ") {
            if saw_entries {
                return false;
            }
            let Some(p) = unhex(l) else { return false };
            if links.next().map(|x| x.as_os_str().as_bytes()) != Some(p.as_slice()) {
                return false;
            }
            continue;
        }
        saw_entries = true;
        let (ident_only, rest) = match line.split_first() {
            Some((b'i' | b'r', r)) => (true, r),
            Some((b'f', r)) => (false, r),
            _ => return false,
        };
        let rest = rest.strip_prefix(b" ").unwrap_or(rest);
        let Some(sp) = rest.iter().position(|b| *b == b' ') else {
            return false;
        };
        let Some(rel) = unhex(&rest[..sp]) else {
            return false;
        };
        let rel = PathBuf::from(OsStr::from_bytes(&rel));
        let st = fsat::lstat_path(&ws.join(&rel));
        fresh.clear();
        stamp_line(&mut fresh, &rel, &st, ident_only);
        if fresh.strip_suffix(b"\n").unwrap_or(&fresh) != rest {
            return false;
        }
    }
    links.next().is_none() && saw_entries
}

/// Which kind of git dir is checked (what `commondir` may say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GitDirKind {
    /// A repository of its own (the workspace's `.git`, a submodule's, a bare remote):
    /// no `commondir`.
    Own,
    /// A linked worktree's admin dir: `commondir` is `../..`.
    Linked,
}

struct Guard {
    /// The workspace's canonical path.
    ws: PathBuf,
    roots: paths::Roots,
    q: Quarantine,
    report: GuardReport,
    watch: BTreeSet<Watch>,
    visited: BTreeSet<PathBuf>,
    pending_repos: Vec<PathBuf>,
}

impl Guard {
    fn watch(&mut self, rel: &Path, ident_only: bool) {
        self.watch.insert(Watch {
            rel: rel.to_path_buf(),
            ident_only,
            repo: false,
        });
    }

    fn found(&mut self, rel: &Path, found: impl Into<String>, action: impl Into<String>) {
        self.report.findings.push(Finding {
            path: rel_esc(rel),
            found: found.into(),
            action: action.into(),
        });
    }

    fn error(&mut self, rel: &Path, e: impl std::fmt::Display) {
        self.report.errors.push(format!("{}: {e}", rel_esc(rel)));
    }

    /// Quarantine `name` of `dir` (at `rel`); true when it is gone.
    fn quarantine(&mut self, dir: &Dir, name: &OsStr, rel: &Path) -> bool {
        match self.q.take(dir, name, rel) {
            Ok(_) => true,
            Err(e) => {
                self.error(rel, format!("cannot quarantine it: {e}"));
                false
            }
        }
    }

    fn run(&mut self, root: &Dir, gitlinks: &[PathBuf]) {
        let dotgit = OsStr::new(".git");
        let rel = PathBuf::from(".git");
        self.watch(&rel, true);
        match root.lstat(dotgit).kind() {
            Kind::Dir => self.git_dir(root, &rel, GitDirKind::Own, 0),
            Kind::Missing => {}
            Kind::File if root.read(dotgit).ok().flatten().as_deref() == Some(PLACEHOLDER) => {}
            k => {
                let what = match k {
                    Kind::File => "a .git file (points git at another repository)",
                    Kind::Symlink => "a .git symlink (points git at another repository)",
                    _ => "a .git that is neither a directory nor a file",
                };
                if self.quarantine(root, dotgit, &rel) {
                    let action = match root.replace(dotgit, PLACEHOLDER) {
                        Ok(()) => "quarantined, placeholder written (git there now fails)",
                        Err(_) => "quarantined",
                    };
                    self.found(&rel, what, action);
                }
            }
        }
        for link in gitlinks {
            self.gitlink(root, link);
        }
        while let Some(abs) = self.pending_repos.pop() {
            let Ok(rel) = abs.strip_prefix(&self.ws).map(Path::to_path_buf) else {
                continue;
            };
            if rel.as_os_str().is_empty() || self.visited.contains(&rel) {
                continue;
            }
            // watched even when missing or not (yet) a repository: one made later is seen
            self.watch.insert(Watch {
                rel: rel.clone(),
                ident_only: true,
                repo: true,
            });
            self.watch(&rel.join("HEAD"), true);
            self.watch(&rel.join(".git"), true);
            let Some((parent, name)) = split(&rel) else {
                continue;
            };
            let Ok(pd) = root.open_rel(&parent) else {
                continue;
            };
            if pd.lstat(name).kind() != Kind::Dir {
                continue;
            }
            let Ok(d) = pd.open_dir(name) else { continue };
            // a repository: HEAD and objects (a bare one, or a work tree's `.git`)
            if d.lstat(OsStr::new("HEAD")).kind() == Kind::File {
                self.git_dir(root, &rel, GitDirKind::Own, 1);
            } else if d.lstat(OsStr::new(".git")).kind() == Kind::Dir {
                self.git_dir(root, &rel.join(".git"), GitDirKind::Own, 1);
            }
        }
    }

    /// A submodule checkout the index names: its `.git`.
    fn gitlink(&mut self, root: &Dir, link: &Path) {
        if link
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return;
        }
        let dotgit = OsStr::new(".git");
        let rel = link.join(".git");
        // watched even when missing: one made later is seen
        self.watch(&rel, true);
        let Ok(d) = root.open_rel(link) else {
            // missing, or a symlink on the way: git does not look into it either way
            return;
        };
        match d.lstat(dotgit).kind() {
            Kind::Missing => {}
            Kind::Dir => self.git_dir(root, &rel, GitDirKind::Own, 1),
            Kind::File => {
                self.watch(&rel, false);
                let target = d.read(dotgit).ok().flatten().and_then(|b| gitdir_line(&b));
                let abs_dir = self.ws.join(link);
                let inside = target
                    .as_ref()
                    .map(|t| paths::local_inside(&self.roots, &abs_dir, t));
                match inside {
                    Some(paths::Inside::Yes(abs)) => {
                        if let Ok(r) = abs.strip_prefix(&self.ws) {
                            let r = r.to_path_buf();
                            if !r.as_os_str().is_empty()
                                && !self.visited.contains(&r)
                                && root.open_rel(&r).is_ok()
                            {
                                self.watch(&r, true);
                                self.git_dir(root, &r, GitDirKind::Own, 1);
                            }
                        }
                    }
                    _ => {
                        if self.quarantine(&d, dotgit, &rel) {
                            self.found(
                                &rel,
                                "a submodule's .git file pointing outside the workspace",
                                "quarantined",
                            );
                        }
                    }
                }
            }
            _ => {
                if self.quarantine(&d, dotgit, &rel) {
                    self.found(
                        &rel,
                        "a submodule's .git symlink or special file",
                        "quarantined",
                    );
                }
            }
        }
    }

    /// Check the git dir at `rel` (a directory reached without symlinks).
    fn git_dir(&mut self, root: &Dir, rel: &Path, kind: GitDirKind, nesting: usize) {
        if self.visited.contains(rel) {
            return;
        }
        if self.visited.len() >= MAX_GIT_DIRS {
            return self.error(
                rel,
                format!("more than {MAX_GIT_DIRS} git dirs; not checked"),
            );
        }
        self.visited.insert(rel.to_path_buf());
        let d = match root.open_rel(rel) {
            Ok(d) => d,
            Err(e) => return self.error(rel, e),
        };
        let abs = self.ws.join(rel);
        // commondir
        let cd = OsStr::new("commondir");
        let cd_rel = rel.join("commondir");
        self.watch(&cd_rel, false);
        let st = d.lstat(cd);
        if st.kind() != Kind::Missing {
            let ok = kind == GitDirKind::Linked
                && st.kind() == Kind::File
                && d.read(cd)
                    .ok()
                    .flatten()
                    .is_some_and(|b| matches!(b.trim_ascii_end(), b"../.." | b"../../"));
            if !ok && self.quarantine(&d, cd, &cd_rel) {
                let action = if kind == GitDirKind::Linked {
                    match d.replace(cd, b"../..\n") {
                        Ok(()) => "quarantined, ../.. written",
                        Err(_) => "quarantined",
                    }
                } else {
                    "quarantined"
                };
                self.found(
                    &cd_rel,
                    "a commondir pointing git at another repository",
                    action,
                );
            }
        }
        for name in ["config", "config.worktree"] {
            self.config(&d, rel, &abs, OsStr::new(name));
        }
        if kind == GitDirKind::Linked {
            return;
        }
        self.hooks(&d, rel);
        self.alternates(&d, rel, &abs);
        self.worktrees(root, &d, rel);
        if nesting < MAX_NESTING {
            self.modules(root, &d, rel, &rel.join("modules"), nesting, 0);
        }
    }

    fn config(&mut self, d: &Dir, rel: &Path, abs: &Path, name: &OsStr) {
        let frel = rel.join(name);
        self.watch(&frel, false);
        match d.lstat(name).kind() {
            Kind::Missing => {}
            Kind::File => {
                let bytes = match d.read(name) {
                    Ok(Some(b)) => b,
                    Ok(None) => return,
                    Err(e) => {
                        // too large or not what lstat said: not git's to read either
                        if self.quarantine(d, name, &frel) {
                            self.found(
                                &frel,
                                format!("a config that cannot be read ({e})"),
                                "quarantined",
                            );
                        }
                        return;
                    }
                };
                let s = config::sanitize(&bytes, &self.roots, abs);
                self.pending_repos.extend(s.local_repos.iter().cloned());
                if s.dropped.is_empty() {
                    return;
                }
                let keys: Vec<String> = s
                    .dropped
                    .iter()
                    .map(|k| format!("{} ({})", k.key, k.why))
                    .collect();
                if self.quarantine(d, name, &frel) {
                    let action = match d.replace(name, &s.bytes) {
                        Ok(()) => "quarantined, reduced config written",
                        Err(e) => {
                            self.error(&frel, format!("cannot write the reduced config: {e}"));
                            "quarantined"
                        }
                    };
                    self.found(&frel, format!("config keys {}", keys.join(", ")), action);
                }
            }
            _ => {
                if self.quarantine(d, name, &frel) {
                    self.found(
                        &frel,
                        "a config that is a symlink, directory or special file",
                        "quarantined",
                    );
                }
            }
        }
    }

    fn hooks(&mut self, d: &Dir, rel: &Path) {
        let name = OsStr::new("hooks");
        let hrel = rel.join("hooks");
        self.watch(&hrel, false);
        match d.lstat(name).kind() {
            Kind::Missing => {}
            Kind::Dir => {
                let h = match d.open_dir(name) {
                    Ok(h) => h,
                    Err(e) => return self.error(&hrel, e),
                };
                let names = match h.names() {
                    Ok(n) => n,
                    Err(e) => return self.error(&hrel, e),
                };
                for n in names {
                    let erel = hrel.join(&n);
                    // git runs a hook only under its exact name and only when executable:
                    // `*.sample` files and non-executable files (gix's `docs.url`) stay
                    let st = h.lstat(&n);
                    let sample = n.as_bytes().ends_with(b".sample");
                    if st.kind() == Kind::File && (sample || st.mode & 0o111 == 0) {
                        // a later `chmod +x` changes no directory: watch the file itself
                        // (a sample never runs, whatever its mode)
                        if !sample {
                            self.watch(&erel, false);
                        }
                        continue;
                    }
                    if self.quarantine(&h, &n, &erel) {
                        self.found(
                            &erel,
                            "a hook (git would run it on the host)",
                            "quarantined",
                        );
                    }
                }
            }
            _ => {
                if self.quarantine(d, name, &hrel) {
                    self.found(&hrel, "hooks that are not a directory", "quarantined");
                }
            }
        }
    }

    fn alternates(&mut self, d: &Dir, rel: &Path, abs: &Path) {
        let arel = rel.join("objects/info/alternates");
        self.watch(&arel, false);
        self.watch(&rel.join("objects/info"), true);
        self.watch(&rel.join("objects"), true);
        let Ok(info) = d.open_rel(Path::new("objects/info")) else {
            return;
        };
        let name = OsStr::new("alternates");
        if info.lstat(name).kind() == Kind::Missing {
            return;
        }
        let objects = abs.join("objects");
        let ok = match info.read(name) {
            Ok(Some(b)) => b.split(|c| *c == b'\n').all(|l| {
                let l = l.trim_ascii();
                l.is_empty()
                    || l.starts_with(b"#")
                    || matches!(
                        paths::local_inside(&self.roots, &objects, Path::new(OsStr::from_bytes(l))),
                        paths::Inside::Yes(_)
                    )
            }),
            Ok(None) => true,
            Err(_) => false,
        };
        if !ok && self.quarantine(&info, name, &arel) {
            self.found(
                &arel,
                "alternates outside the workspace (git would read objects there)",
                "quarantined",
            );
        }
    }

    fn worktrees(&mut self, root: &Dir, d: &Dir, rel: &Path) {
        let name = OsStr::new("worktrees");
        let wrel = rel.join("worktrees");
        self.watch(&wrel, false);
        match d.lstat(name).kind() {
            Kind::Missing => {}
            Kind::Dir => {
                let w = match d.open_dir(name) {
                    Ok(w) => w,
                    Err(e) => return self.error(&wrel, e),
                };
                let names = match w.names() {
                    Ok(n) => n,
                    Err(e) => return self.error(&wrel, e),
                };
                for n in names {
                    self.admin(root, &w, &wrel, &n);
                }
            }
            _ => {
                if self.quarantine(d, name, &wrel) {
                    self.found(&wrel, "worktrees that are not a directory", "quarantined");
                }
            }
        }
    }

    /// A linked worktree's admin dir `wrel/name`.
    fn admin(&mut self, root: &Dir, w: &Dir, wrel: &Path, name: &OsStr) {
        let arel = wrel.join(name);
        self.watch(&arel, true);
        match w.lstat(name).kind() {
            Kind::Dir => {}
            _ => {
                if self.quarantine(w, name, &arel) {
                    self.found(
                        &arel,
                        "a linked worktree entry that is not a directory",
                        "quarantined",
                    );
                }
                return;
            }
        }
        let a = match w.open_dir(name) {
            Ok(a) => a,
            Err(e) => return self.error(&arel, e),
        };
        let abs_admin = self.ws.join(&arel);
        let grel = arel.join("gitdir");
        self.watch(&grel, false);
        let gitdir = OsStr::new("gitdir");
        let target = match a.lstat(gitdir).kind() {
            Kind::Missing => None,
            Kind::File => match a.read(gitdir) {
                Ok(Some(b)) => Some(Some(PathBuf::from(OsStr::from_bytes(b.trim_ascii_end())))),
                _ => Some(None),
            },
            _ => Some(None),
        };
        let inside = match &target {
            None => None,
            Some(None) => Some(None),
            Some(Some(t)) => Some(match paths::local_inside(&self.roots, &abs_admin, t) {
                paths::Inside::Yes(p) if p.file_name() == Some(OsStr::new(".git")) => Some(p),
                _ => None,
            }),
        };
        if let Some(None) = inside {
            if self.quarantine(w, name, &arel) {
                self.found(
                    &arel,
                    "a linked worktree whose gitdir points outside the workspace (git worktree remove would delete there)",
                    "quarantined",
                );
            }
            return;
        }
        // the admin dir is a git dir of its own kind
        self.git_dir(root, &arel, GitDirKind::Linked, 1);
        // the linked worktree's `.git` file must point back here
        if let Some(Some(dotgit_abs)) = inside {
            self.linked_dotgit(root, &dotgit_abs, &abs_admin);
        }
    }

    fn linked_dotgit(&mut self, root: &Dir, dotgit_abs: &Path, abs_admin: &Path) {
        let Ok(rel) = dotgit_abs.strip_prefix(&self.ws).map(Path::to_path_buf) else {
            return;
        };
        let Some((parent, name)) = split(&rel) else {
            return;
        };
        self.watch(&rel, true);
        let Ok(p) = root.open_rel(&parent) else {
            return;
        };
        match p.lstat(name).kind() {
            Kind::Missing => {}
            Kind::File => {
                self.watch(&rel, false);
                let abs_parent = self.ws.join(&parent);
                let back = p
                    .read(name)
                    .ok()
                    .flatten()
                    .and_then(|b| gitdir_line(&b))
                    .map(|t| self.roots.rebase(&paths::normalize(&abs_parent.join(t))));
                if back.as_deref() != Some(abs_admin) && self.quarantine(&p, name, &rel) {
                    self.found(
                        &rel,
                        "a linked worktree's .git file pointing elsewhere",
                        "quarantined",
                    );
                }
            }
            Kind::Dir => {
                self.git_dir(root, &rel, GitDirKind::Own, 1);
            }
            _ => {
                if self.quarantine(&p, name, &rel) {
                    self.found(
                        &rel,
                        "a linked worktree's .git symlink or special file",
                        "quarantined",
                    );
                }
            }
        }
    }

    /// Submodule git dirs below `mrel` (names may hold `/`: a directory without `HEAD` is
    /// walked further).
    fn modules(
        &mut self,
        root: &Dir,
        d: &Dir,
        grel: &Path,
        mrel: &Path,
        nesting: usize,
        depth: usize,
    ) {
        let Ok(sub) = mrel.strip_prefix(grel) else {
            return;
        };
        self.watch(mrel, false);
        let m = match d.open_rel(sub) {
            Ok(m) => m,
            Err(_) => {
                if depth == 0 {
                    let name = OsStr::new("modules");
                    let k = d.lstat(name).kind();
                    if k != Kind::Missing && k != Kind::Dir && self.quarantine(d, name, mrel) {
                        self.found(mrel, "modules that are not a directory", "quarantined");
                    }
                }
                return;
            }
        };
        if depth > MAX_NESTING {
            return self.error(mrel, "submodule git dirs nested too deep; not checked");
        }
        let Ok(names) = m.names() else { return };
        for n in names {
            let erel = mrel.join(&n);
            match m.lstat(&n).kind() {
                Kind::Dir => {}
                _ => continue,
            }
            let Ok(e) = m.open_dir(&n) else { continue };
            if e.lstat(OsStr::new("HEAD")).kind() == Kind::File {
                self.watch(&erel, true);
                self.git_dir(root, &erel, GitDirKind::Own, nesting + 1);
            } else {
                self.modules(root, d, grel, &erel, nesting, depth + 1);
            }
        }
    }
}

/// `(parent, name)` of a relative path.
fn split(rel: &Path) -> Option<(PathBuf, &OsStr)> {
    let name = rel.file_name()?;
    let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
    Some((parent, name))
}

/// The path of a `gitdir: <path>` file.
fn gitdir_line(b: &[u8]) -> Option<PathBuf> {
    let line = b.split(|c| *c == b'\n').next()?;
    let p = line.strip_prefix(b"gitdir:")?.trim_ascii();
    if p.is_empty() {
        return None;
    }
    Some(PathBuf::from(OsStr::from_bytes(p)))
}

#[cfg(test)]
mod tests;

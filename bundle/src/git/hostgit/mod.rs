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
mod stamp;
mod walk;

use fsat::{Dir, Quarantine};
use stamp::{make_stamp, stamp_matches, stamp_repos};
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use walk::Guard;

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
    crate::escape::os(s)
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

#[cfg(test)]
mod tests;

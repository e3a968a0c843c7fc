//! Exec records: one JSON line per `capsule exec`, appended to the capsule's
//! `events.jsonl` in its bundle (outside the workspace, hidden from the sandbox) and printed
//! by `exec --json`; plus the workspace changes a command made, computed with gix.
//!
//! Changes come from two `gix status` snapshots (index vs worktree, untracked included)
//! taken before and after the command: a path whose status or stat changed in between was
//! touched by the command. gix is opened isolated and with every `filter.*` section
//! ignored, submodules skipped: nothing of the repository's configuration (filters,
//! fsmonitor, hooks), which the sandboxed command can write, runs on the host.

use capsule_bundle::gitguard;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Status of one path relative to the index, with its worktree stat.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: &'static str,
    stat: Option<(u64, i64, i64, u32, u64)>,
}

/// A snapshot of the workspace's dirty paths.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    head: Option<String>,
    paths: BTreeMap<String, Entry>,
}

/// Files the command added, changed or removed (workspace-relative).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
    /// HEAD moved (e.g. a commit inside): (before, after).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<(Option<String>, Option<String>)>,
}

fn stat_of(path: &Path) -> Option<(u64, i64, i64, u32, u64)> {
    let md = std::fs::symlink_metadata(path).ok()?;
    Some((md.size(), md.mtime(), md.mtime_nsec(), md.mode(), md.ino()))
}

/// Open `workspace`'s repository for snapshots: isolated, every `filter.*` section ignored.
/// Its `.git` must be the workspace's own plain directory ([`gitguard::check_git_dir`]);
/// a read that blocks on a FIFO, pipe or terminal the command planted is given up.
pub fn open_repo(workspace: &Path) -> Result<gix::Repository, String> {
    let ws = workspace.to_path_buf();
    gitguard::guarded("opening the workspace's repository", move || {
        gitguard::check_git_dir(&ws).map_err(|e| e.to_string())?;
        let opts = gix::open::Options::isolated().filter_config_section(|_| false);
        gix::open_opts(&ws, opts)
            .map_err(|e| format!("{}: not a git repository ({e})", ws.display()))
    })
    .map_err(|e| e.to_string())?
}

/// Open `workspace`'s repository as [`open_repo`] does and take the first snapshot, in one
/// guarded read (one thread, one check of `.git`): the snapshot before the command is on
/// the path to its start.
pub fn open_and_snapshot(workspace: &Path) -> Result<(gix::Repository, Snapshot), String> {
    let ws = workspace.to_path_buf();
    gitguard::guarded("reading the workspace's repository", move || {
        let git = gitguard::check_git_dir(&ws).map_err(|e| e.to_string())?;
        let opts = gix::open::Options::isolated().filter_config_section(|_| false);
        let repo = gix::open_opts(&ws, opts)
            .map_err(|e| format!("{}: not a git repository ({e})", ws.display()))?;
        if repo.git_dir() != git || repo.common_dir() != git {
            return Err(format!(
                "{}: the repository is not the workspace's own .git; not read",
                ws.display()
            ));
        }
        let snap = snapshot_now(&repo, &ws)?;
        Ok((repo, snap))
    })
    .map_err(|e| e.to_string())?
}

/// Take a snapshot of `workspace` (a git work tree). Errors are plain messages.
pub fn snapshot(workspace: &Path) -> Result<Snapshot, String> {
    snapshot_of(&open_repo(workspace)?, workspace)
}

/// Take a snapshot with an already opened repository (re-reads the index if it changed).
/// The workspace's `.git` is checked again (the command may have replaced it since the
/// open), and the read runs [`gitguard::guarded`].
pub fn snapshot_of(repo: &gix::Repository, workspace: &Path) -> Result<Snapshot, String> {
    let (repo, ws) = (repo.clone(), workspace.to_path_buf());
    gitguard::guarded("computing the workspace's changes", move || {
        let git = gitguard::check_git_dir(&ws).map_err(|e| e.to_string())?;
        if repo.git_dir() != git || repo.common_dir() != git {
            return Err(format!(
                "{}: the repository is not the workspace's own .git; not read",
                ws.display()
            ));
        }
        snapshot_now(&repo, &ws)
    })
    .map_err(|e| e.to_string())?
}

fn snapshot_now(repo: &gix::Repository, workspace: &Path) -> Result<Snapshot, String> {
    let head = repo.head_id().ok().map(|id| id.to_string());
    let status = repo
        .status(gix::progress::Discard)
        .map_err(|e| format!("gix status: {e}"))?
        .index_worktree_submodules(None)
        // small workspaces are the common case: threads cost more than they save
        .index_worktree_options_mut(|o| o.thread_limit = Some(1))
        .untracked_files(gix::status::UntrackedFiles::Files);
    let iter = status
        .into_index_worktree_iter(Vec::new())
        .map_err(|e| format!("gix status: {e}"))?;
    let mut paths = BTreeMap::new();
    for item in iter {
        let item = item.map_err(|e| format!("gix status: {e}"))?;
        let Some(summary) = item.summary() else {
            continue;
        };
        use gix::status::index_worktree::iter::Summary as S;
        let kind = match summary {
            S::Added => "added",
            S::Removed => "removed",
            S::Modified | S::TypeChange | S::Conflict | S::IntentToAdd => "changed",
            S::Renamed | S::Copied => "added",
        };
        let rel = item.rela_path().to_string();
        let stat = stat_of(&workspace.join(&rel));
        paths.insert(rel, Entry { kind, stat });
    }
    Ok(Snapshot { head, paths })
}

/// What changed between two snapshots of the same workspace.
pub fn diff(before: &Snapshot, after: &Snapshot, workspace: &Path) -> Changes {
    let mut c = Changes::default();
    for (p, a) in &after.paths {
        match before.paths.get(p) {
            Some(b) if b == a => {}
            Some(_) if a.kind == "removed" => c.removed.push(p.clone()),
            Some(_) => c.changed.push(p.clone()),
            None => match a.kind {
                "added" => c.added.push(p.clone()),
                "removed" => c.removed.push(p.clone()),
                _ => c.changed.push(p.clone()),
            },
        }
    }
    for p in before.paths.keys() {
        if !after.paths.contains_key(p) {
            // clean again: reverted, committed, or removed when it was untracked
            if before.paths[p].kind == "added" && stat_of(&workspace.join(p)).is_none() {
                c.removed.push(p.clone());
            } else {
                c.changed.push(p.clone());
            }
        }
    }
    if before.head != after.head {
        c.head = Some((before.head.clone(), after.head.clone()));
    }
    c
}

/// The record of one exec.
#[derive(Debug, Clone, Serialize)]
pub struct ExecRecord {
    pub event: &'static str,
    pub version: u32,
    pub capsule: String,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// RFC 3339 UTC.
    pub started_at: String,
    pub requested: serde_json::Value,
    pub applied: Option<serde_json::Value>,
    /// Weaker than full isolation, in plain words (empty: none).
    pub degradation: Vec<String>,
    pub exit_status: u8,
    pub termination: Option<serde_json::Value>,
    /// Why nothing ran, or why the command could not start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: f64,
    pub changes: Option<Changes>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes_error: Option<String>,
}

impl ExecRecord {
    /// Append as one line to `events` (created if missing).
    pub fn append(&self, events: &Path) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(events)?;
        // one write: concurrent execs append whole lines
        f.write_all(&line)
    }
}

/// Current time as RFC 3339 UTC (seconds).
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

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
        open_checked(&ws)
    })
    .map_err(|e| e.to_string())?
}

/// Open `workspace`'s repository as [`open_repo`] does and take the first snapshot, in one
/// guarded read (one thread, one check of `.git`): the snapshot before the command is on
/// the path to its start.
pub fn open_and_snapshot(workspace: &Path) -> Result<(gix::Repository, Snapshot), String> {
    start_snapshot(workspace).wait()
}

/// A guarded read started on its reading thread ([`start_snapshot`],
/// [`start_snapshot_after`]); the caller does other work meanwhile and then waits.
pub struct Reading<T>(Result<gitguard::Pending<Result<T, String>>, String>);

impl<T> Reading<T> {
    /// What the read gave (the reading thread has been joined), or why not.
    pub fn wait(self) -> Result<T, String> {
        self.0?.wait().map_err(|e| e.to_string())?
    }
}

/// [`open_and_snapshot`], running.
pub type Snapshotting = Reading<(gix::Repository, Snapshot)>;

/// Start [`open_and_snapshot`] without waiting for it.
pub fn start_snapshot(workspace: &Path) -> Snapshotting {
    let ws = workspace.to_path_buf();
    let started = gitguard::start("reading the workspace's repository", move || {
        let repo = open_checked(&ws)?;
        let snap = snapshot_now(&repo, &ws)?;
        Ok((repo, snap))
    });
    Reading(started.map_err(|e| e.to_string()))
}

/// The snapshot after the command, started without waiting for it: [`snapshot_of`] with
/// the repository opened for the one before, else [`snapshot`] (opening it now).
pub fn start_snapshot_after(repo: Option<gix::Repository>, workspace: &Path) -> Reading<Snapshot> {
    let ws = workspace.to_path_buf();
    let started = match repo {
        Some(repo) => gitguard::start("computing the workspace's changes", move || {
            let git = gitguard::check_git_dir(&ws).map_err(|e| e.to_string())?;
            if repo.git_dir() != git || repo.common_dir() != git {
                return Err(format!(
                    "{}: the repository is not the workspace's own .git; not read",
                    ws.display()
                ));
            }
            snapshot_now(&repo, &ws)
        }),
        None => gitguard::start("reading the workspace's repository", move || {
            snapshot_now(&open_checked(&ws)?, &ws)
        }),
    };
    Reading(started.map_err(|e| e.to_string()))
}

/// The workspace's repository: its `.git` checked ([`gitguard::check_git_dir`]), opened
/// isolated with every `filter.*` section ignored, and the one gix found there.
fn open_checked(ws: &Path) -> Result<gix::Repository, String> {
    let git = gitguard::check_git_dir(ws).map_err(|e| e.to_string())?;
    let opts = gix::open::Options::isolated().filter_config_section(|_| false);
    let repo = gix::open_opts(ws, opts)
        .map_err(|e| format!("{}: not a git repository ({e})", ws.display()))?;
    if repo.git_dir() != git || repo.common_dir() != git {
        return Err(format!(
            "{}: the repository is not the workspace's own .git; not read",
            ws.display()
        ));
    }
    Ok(repo)
}

/// Take a snapshot of `workspace` (a git work tree). Errors are plain messages.
pub fn snapshot(workspace: &Path) -> Result<Snapshot, String> {
    start_snapshot_after(None, workspace).wait()
}

/// Take a snapshot with an already opened repository (re-reads the index if it changed).
/// The workspace's `.git` is checked again (the command may have replaced it since the
/// open), and the read runs [`gitguard::guarded`].
pub fn snapshot_of(repo: &gix::Repository, workspace: &Path) -> Result<Snapshot, String> {
    start_snapshot_after(Some(repo.clone()), workspace).wait()
}

fn snapshot_now(repo: &gix::Repository, workspace: &Path) -> Result<Snapshot, String> {
    let head = repo.head_id().ok().map(|id| id.to_string());
    let mut paths = BTreeMap::new();
    for (rel, kind) in dirty_paths(repo).map_err(|e| format!("gix status: {e}"))? {
        let stat = stat_of(&workspace.join(&rel));
        paths.insert(rel, Entry { kind, stat });
    }
    Ok(Snapshot { head, paths })
}

/// The paths `gix status` reports between the index and the worktree (untracked files
/// listed one by one, submodules ignored, no rename tracking), with what happened to each.
///
/// This is what `repo.status()…into_index_worktree_iter()` computes, but run on this thread:
/// gix runs the directory walk and the modification check on threads of their own plus a
/// producer thread (three thread starts per snapshot, ~1 ms on a loaded machine for a
/// one-file workspace). The set-up mirrors gix's `Repository::index_worktree_status`.
fn dirty_paths(repo: &gix::Repository) -> gix::Result<Vec<(String, &'static str)>> {
    use gix::dir::walk::EmissionMode;
    use gix::status::plumbing::index_as_worktree::{self, Change, EntryStatus};
    use gix::worktree::stack::state::{attributes, ignore};
    use gix::worktree::stack::State;
    use std::sync::atomic::{AtomicBool, Ordering};

    let Some(workdir) = repo.workdir() else {
        return Err(gix::Error::from_error(std::io::Error::other(
            "a working tree is required",
        )));
    };
    let index = repo.index_or_empty()?;
    let index: &gix::index::State = &index;
    let interrupt = AtomicBool::new(false);
    let dirwalk = repo
        .dirwalk_options()?
        .emit_untracked(EmissionMode::Matching);
    let attrs_and_excludes = repo.attributes(
        index,
        attributes::Source::WorktreeThenIdMapping,
        ignore::Source::WorktreeThenIdMappingIfNotSkipped,
        None,
    )?;
    let pathspec = repo.pathspec(
        // false in gix's default dirwalk options (the walk starts at the root, not at cwd)
        false,
        None::<&str>,
        true,
        index,
        attributes::Source::WorktreeThenIdMapping,
    )?;
    let cwd = repo.current_dir();
    let git_dir_realpath =
        gix::path::realpath_opts(repo.git_dir(), cwd, gix::path::realpath::MAX_SYMLINKS)?;
    let fs = repo.filesystem_options()?;
    let icase = fs.ignore_case.then(|| index.prepare_icase_backing());
    let mut cache = gix::diff::resource_cache(
        repo,
        gix::diff::blob::pipeline::Mode::ToGit,
        attrs_and_excludes.detach(),
        gix::diff::blob::pipeline::WorktreeRoots {
            old_root: None,
            new_root: Some(workdir.to_owned()),
        },
    )?;
    // the directory walk needs the ignore files, the modification check the attributes
    let mut excludes = match cache.attr_stack.state() {
        State::AttributesAndIgnoreStack { .. } | State::IgnoreStack(_) => {
            Some(cache.attr_stack.clone())
        }
        State::CreateDirectoryAndAttributesStack { .. } | State::AttributesStack(_) => None,
    };
    if let Some(stack) = excludes.as_mut() {
        let state = stack.state_mut();
        if let State::AttributesAndIgnoreStack { ignore, .. } = state {
            *state = State::IgnoreStack(std::mem::take(ignore));
        }
    }
    let state = cache.attr_stack.state_mut();
    if let State::AttributesAndIgnoreStack { attributes, .. } = state {
        *state = State::AttributesStack(std::mem::take(attributes));
    }
    let objects = repo
        .objects
        .clone()
        .into_arc()
        .map_err(gix::Error::from_error)?;

    let mut out = Vec::new();
    let mut untracked = Untracked(&mut out);
    let mut search = pathspec.search().clone();
    gix::dir::walk(
        workdir,
        gix::dir::walk::Context {
            should_interrupt: Some(&interrupt),
            git_dir_realpath: &git_dir_realpath,
            current_dir: cwd,
            index,
            ignore_case_index_lookup: icase.as_ref(),
            pathspec: &mut search,
            // only asked for when a pattern has attributes: there are no patterns
            pathspec_attributes: &mut |_, _, _, _| false,
            excludes: excludes.as_mut(),
            objects: &objects,
            explicit_traversal_root: Some(workdir),
        },
        dirwalk.into(),
        &mut untracked,
    )?;
    let mut tracked = Tracked(&mut out);
    gix::status::plumbing::index_as_worktree(
        index,
        workdir,
        &mut tracked,
        index_as_worktree::traits::FastEq,
        NoSubmodules,
        objects,
        &mut gix::progress::Discard,
        index_as_worktree::Context {
            pathspec: pathspec.search().clone(),
            stack: cache.attr_stack.clone(),
            filter: cache.filter.worktree_filter.clone(),
            should_interrupt: &interrupt,
        },
        index_as_worktree::Options {
            fs,
            thread_limit: Some(1),
            stat: repo.stat_options()?,
            // only used on Windows
            fscache: false,
        },
    )?;
    debug_assert!(!interrupt.load(Ordering::Relaxed));
    return Ok(out);

    /// Untracked files of the directory walk (never of an untrackable kind, as in gix).
    struct Untracked<'a>(&'a mut Vec<(String, &'static str)>);
    impl gix::dir::walk::Delegate for Untracked<'_> {
        fn emit(
            &mut self,
            entry: gix::dir::EntryRef<'_>,
            _collapsed: Option<gix::dir::entry::Status>,
        ) -> gix::dir::walk::Action {
            if entry.disk_kind != Some(gix::dir::entry::Kind::Untrackable)
                && matches!(entry.status, gix::dir::entry::Status::Untracked)
            {
                self.0.push((entry.rela_path.to_string(), "added"));
            }
            std::ops::ControlFlow::Continue(())
        }
    }

    /// Tracked files that differ from the index.
    struct Tracked<'a>(&'a mut Vec<(String, &'static str)>);
    impl<'index> index_as_worktree::VisitEntry<'index> for Tracked<'_> {
        type ContentChange = ();
        type SubmoduleStatus = ();
        fn visit_entry(
            &mut self,
            _entries: &'index [gix::index::Entry],
            _entry: &'index gix::index::Entry,
            _entry_index: usize,
            rela_path: &'index gix::bstr::BStr,
            status: EntryStatus<(), ()>,
        ) {
            let kind = match status {
                EntryStatus::NeedsUpdate(_) => return,
                EntryStatus::Change(Change::Removed) => "removed",
                EntryStatus::Conflict { .. }
                | EntryStatus::IntentToAdd
                | EntryStatus::Change(_) => "changed",
            };
            self.0.push((rela_path.to_string(), kind));
        }
    }

    /// Submodules are not looked into (gix's `Submodule::Given { ignore: All }`).
    #[derive(Clone)]
    struct NoSubmodules;
    impl index_as_worktree::traits::SubmoduleStatus for NoSubmodules {
        type Output = ();
        fn status(
            &mut self,
            _entry: &gix::index::Entry,
            _rela_path: &gix::bstr::BStr,
        ) -> gix::Result<Option<()>> {
            Ok(None)
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {:?}", out);
    }

    /// What the snapshot computed before [`dirty_paths`]: gix's own status iterator.
    fn reference(repo: &gix::Repository) -> Vec<(String, &'static str)> {
        use gix::status::index_worktree::iter::Summary as S;
        let status = repo
            .status(gix::progress::Discard)
            .unwrap()
            .index_worktree_submodules(None)
            .index_worktree_options_mut(|o| o.thread_limit = Some(1))
            .untracked_files(gix::status::UntrackedFiles::Files);
        let mut out = Vec::new();
        for item in status.into_index_worktree_iter(Vec::new()).unwrap() {
            let item = item.unwrap();
            let Some(summary) = item.summary() else {
                continue;
            };
            let kind = match summary {
                S::Added | S::Renamed | S::Copied => "added",
                S::Removed => "removed",
                S::Modified | S::TypeChange | S::Conflict | S::IntentToAdd => "changed",
            };
            out.push((item.rela_path().to_string(), kind));
        }
        out.sort();
        out
    }

    fn serial(repo: &gix::Repository) -> Vec<(String, &'static str)> {
        let mut v = dirty_paths(repo).unwrap();
        v.sort();
        v
    }

    #[test]
    fn dirty_paths_match_gix_status() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path();
        let w = |p: &str, text: &str| {
            let p = ws.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        git(ws, &["init", "-q", "-b", "main"]);
        w(".gitignore", "*.log\nbuild/\n");
        for f in ["a", "b", "same", "dir/c", "dir/deep/d", "gone/e", "t"] {
            w(f, f);
        }
        git(ws, &["add", "-A"]);
        git(ws, &["commit", "-q", "-m", "first"]);
        let open = || {
            let opts = gix::open::Options::isolated().filter_config_section(|_| false);
            gix::open_opts(ws, opts).unwrap()
        };
        // clean: nothing
        assert_eq!(serial(&open()), Vec::new());
        assert_eq!(reference(&open()), Vec::new());

        w("a", "changed a");
        w("same", "SAME"); // same size, new content
        std::fs::remove_file(ws.join("b")).unwrap();
        std::fs::remove_dir_all(ws.join("gone")).unwrap();
        std::fs::remove_file(ws.join("t")).unwrap();
        std::os::unix::fs::symlink("a", ws.join("t")).unwrap(); // type change
        w("new.txt", "n");
        w("newdir/x", "x");
        w("newdir/sub/y", "y");
        w("x.log", "ignored");
        w("build/out", "ignored");
        std::fs::create_dir_all(ws.join("empty")).unwrap();
        w("staged", "s");
        git(ws, &["add", "staged"]);
        w("staged", "s, then changed");
        w("intent", "i");
        git(ws, &["add", "-N", "intent"]);
        let nested = ws.join("nested");
        std::fs::create_dir_all(&nested).unwrap();
        git(&nested, &["init", "-q"]);
        w("nested/f", "f");
        let got = serial(&open());
        assert_eq!(got, reference(&open()));
        let has = |p: &str, k: &str| got.iter().any(|(a, b)| a == p && *b == k);
        assert!(has("a", "changed") && has("same", "changed"), "{got:?}");
        assert!(has("b", "removed") && has("gone/e", "removed"), "{got:?}");
        assert!(has("t", "changed") && has("staged", "changed"), "{got:?}");
        assert!(
            has("new.txt", "added") && has("newdir/sub/y", "added"),
            "{got:?}"
        );
        assert!(!got
            .iter()
            .any(|(p, _)| p.ends_with(".log") || p.starts_with("build")));

        // and the whole snapshot, before and after a change
        let repo = open();
        let before = snapshot_now(&repo, ws).unwrap();
        w("dir/c", "C!");
        w("later", "l");
        let after = snapshot_now(&repo, ws).unwrap();
        let c = diff(&before, &after, ws);
        assert_eq!(c.added, vec!["later".to_string()]);
        assert_eq!(c.changed, vec!["dir/c".to_string()]);
        // the guarded reads give the same snapshot, with or without an opened repository
        let (repo, first) = open_and_snapshot(ws).unwrap();
        for s in [snapshot(ws).unwrap(), snapshot_of(&repo, ws).unwrap()] {
            assert_eq!(diff(&first, &s, ws), Changes::default());
            assert_eq!(s.paths, after.paths);
        }
    }
}

//! Exec records: one JSON line per `capsule exec`, appended to the capsule's
//! `events.jsonl` in its bundle (outside the workspace, hidden from the sandbox) and printed
//! by `exec --json`; plus the workspace changes a command made.
//!
//! Changes come from two snapshots ([`snapshot()`]) taken before and after the command: the
//! paths that differ from the index (tracked files whose stat or type differ, removed
//! ones, untracked files), each with its worktree stat. A path whose status or stat
//! changed in between was touched by the command ([`diff`]). Snapshots are read by capsule
//! itself, never by git and never through gix's repository machinery: nothing of the
//! repository's configuration (filters, fsmonitor, hooks), which the sandboxed command can
//! write, runs or is read on the host; what they hold and how they read an untrusted
//! workspace without blocking is the `record::snapshot` module's to say.

pub mod append;
pub mod rotate;
mod snapshot;

use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Status of one path relative to the index, with its worktree stat.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: &'static str,
    stat: Option<Stat>,
}

/// The worktree stat of a path in a snapshot (`lstat`): what a command cannot change
/// without the snapshot after it seeing so (it cannot set a ctime back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    size: libc::off_t,
    mtime: (libc::time_t, i64),
    ctime: (libc::time_t, i64),
    mode: libc::mode_t,
    ino: libc::ino_t,
    uid: libc::uid_t,
    gid: libc::gid_t,
}

impl Stat {
    fn from_raw(st: &libc::stat) -> Self {
        Stat {
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
            mode: st.st_mode,
            ino: st.st_ino,
            uid: st.st_uid,
            gid: st.st_gid,
        }
    }
}

/// A snapshot of the workspace's dirty paths.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    head: Option<String>,
    paths: BTreeMap<String, Entry>,
    /// `.git/info/exclude` (ignore rules the command can write, outside any walk).
    exclude: Option<Stat>,
    /// The index it was taken against, for the next snapshot ([`snapshot_after`]).
    index: Option<std::sync::Arc<snapshot::Index>>,
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
    /// Paths left out of a list to keep the record bounded ([`ExecRecord::line`]): per
    /// list, where (after how many of its entries) and how many.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub omitted: BTreeMap<&'static str, Omitted>,
}

/// Entries left out of a list, between its first and its last ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Omitted {
    /// After this many of the list's entries.
    pub after: usize,
    pub count: usize,
}

/// `v` cut to its first and last entries, `keep` of them in all (half each); what was
/// left out, if anything.
fn keep_ends<T>(v: &mut Vec<T>, keep: usize) -> Option<Omitted> {
    if v.len() <= keep {
        return None;
    }
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let count = v.len() - keep;
    v.drain(head..v.len() - tail);
    Some(Omitted { after: head, count })
}

/// Does `rel` exist in `workspace`, found without following a symlink on the way (a
/// parent replaced by a symlink to `~/.ssh` must not make the record say what is there)?
fn exists(workspace: &Path, rel: &str) -> bool {
    use capsule_bundle::fsat;
    let Some(mut comps) = fsat::plain_components(Path::new(rel)) else {
        return false;
    };
    let Some(name) = comps.pop() else {
        return false;
    };
    fsat::open_dir(workspace)
        .and_then(|root| fsat::open_dir_path(&root, &comps))
        .and_then(|dir| fsat::stat_at(&dir, &name))
        .is_ok_and(|st| st.is_some())
}

/// Take a snapshot of `workspace` (a git work tree) on this thread, as [`snapshot`]
/// documents: it reads nothing that can block. Errors are plain messages.
pub fn snapshot(workspace: &Path) -> Result<Snapshot, String> {
    snapshot::take(workspace, None, None)
}

/// [`snapshot`] of `workspace` after `before` (if there is one): the index is decoded
/// again only when its bytes differ from the one `before` was taken against.
pub fn snapshot_after(before: Option<&Snapshot>, workspace: &Path) -> Result<Snapshot, String> {
    snapshot::take(
        workspace,
        before.and_then(|b| b.index.as_ref()),
        before.map(|b| &b.paths),
    )
}

impl Snapshot {
    /// The gitlink (submodule) paths of the index this snapshot was taken against.
    pub fn gitlinks(&self) -> Option<Vec<PathBuf>> {
        self.index.as_ref().map(|i| i.gitlinks())
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
            if before.paths[p].kind == "added" && !exists(workspace, p) {
                c.removed.push(p.clone());
            } else {
                c.changed.push(p.clone());
            }
        }
    }
    // new ignore rules in .git/info/exclude could hide what the command added: the
    // change of the rules is a change of its own
    if before.exclude != after.exclude {
        c.changed.push(EXCLUDE.into());
    }
    if before.head != after.head {
        c.head = Some((before.head.clone(), after.head.clone()));
    }
    c
}

/// The repository's own ignore file, reported when a command changes it.
const EXCLUDE: &str = ".git/info/exclude";

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
    /// What the git guard found in the workspace's git dirs after the command and moved to
    /// the quarantine ([`capsule_bundle::git::hostgit::GuardReport`]); only when it found
    /// something or could not check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_guard: Option<serde_json::Value>,
    /// The resource limits in force and what enforced each (rlimits, cgroups), when any
    /// was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<serde_json::Value>,
    /// Limits the command reached, one line each as said on stderr (`killed: memory limit
    /// 64 MiB reached`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub limits_reached: Vec<String>,
    /// What the sandbox refused the command, one entry per distinct refusal with its count
    /// ([`crate::refusals`]).
    pub refusals: Vec<crate::refusals::Refusal>,
    /// Refusals past the bound of distinct ones, counted only.
    #[serde(skip_serializing_if = "is_zero")]
    pub refusals_dropped: u64,
    /// Where those were: after this many of `refusals` (the first are kept, and the
    /// latest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusals_dropped_after: Option<usize>,
    /// Arguments left out of `argv` to keep the record bounded (after, count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv_omitted: Option<Omitted>,
    /// Kinds of refusal this exec could not list, and why
    /// ([`crate::refusals::listing`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refusals_not_listed: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Room kept for an exec's record at the end of `events.jsonl`, made before the command
/// starts: a task that fills the disk cannot take the space its record needs.
pub const RECORD_ROOM: u64 = 256 << 10;

/// The size of an exec record assumed when deciding, before it is written, whether the
/// log must rotate first (records are ~1-10 KiB; the cap is a bound, not a size).
const RECORD_LINE_GUESS: usize = 16 << 10;

/// `events` (created if missing) opened for appending, with [`RECORD_ROOM`] bytes past
/// its end allocated now without changing its size (`fallocate` with
/// `FALLOC_FL_KEEP_SIZE`: a later append writes into blocks it already has, so a full
/// disk does not refuse it). Where the filesystem cannot allocate ahead, the file is
/// opened all the same.
///
/// The log is rotated first if it is near its cap (see [`rotate`]), so the room is made in
/// the file the record will go to. Should another exec rotate it while this one runs, the
/// record lands in `events.jsonl.1`, which readers read too.
pub fn reserve_room(events: &Path) -> std::io::Result<std::fs::File> {
    if let Err(e) = rotate::make_room(events, RECORD_LINE_GUESS, rotate::EVENTS_MAX) {
        tracing::warn!("cannot rotate {}: {e}", events.display());
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(events)?;
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: lseek and fallocate on our own descriptor.
        unsafe {
            let end = libc::lseek(f.as_raw_fd(), 0, libc::SEEK_END);
            if end >= 0 {
                libc::fallocate(
                    f.as_raw_fd(),
                    libc::FALLOC_FL_KEEP_SIZE,
                    end,
                    RECORD_ROOM as libc::off_t,
                );
            }
        }
    }
    Ok(f)
}

impl ExecRecord {
    /// Append as one line to `events` (created if missing; rotated past its cap, see
    /// [`rotate`]).
    pub fn append(&self, events: &Path) -> std::io::Result<()> {
        let line = self.line()?;
        if let Err(e) = rotate::make_room(events, line.len(), rotate::EVENTS_MAX) {
            tracing::warn!("cannot rotate {}: {e}", events.display());
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(events)?;
        // one write: concurrent execs append whole lines; a full disk leaves no torn one
        append::append_whole(&f, &line)
    }

    /// Append as one line to `f`, `events.jsonl` opened for appending (see
    /// [`reserve_room`]).
    pub fn append_into(&self, f: &std::fs::File) -> std::io::Result<()> {
        // one write: concurrent execs append whole lines; a full disk leaves no torn one
        append::append_whole(f, &self.line()?)
    }

    fn line(&self) -> std::io::Result<Vec<u8>> {
        let mut line = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        if line.len() >= MAX_LINE {
            // one exec that changed or was refused many paths: the lists are cut to their
            // first and last entries, more each round, until the line fits
            let mut r = self.clone();
            let mut keep = 4096;
            while line.len() >= MAX_LINE {
                r.bound(keep);
                line = serde_json::to_vec(&r).map_err(std::io::Error::other)?;
                if keep == 0 {
                    break;
                }
                keep /= 4;
            }
        }
        line.push(b'\n');
        Ok(line)
    }

    /// Cut every list of the record to `keep` entries (its first and its last), each
    /// string to [`MAX_FIELD`] bytes, saying what was left out.
    fn bound(&mut self, keep: usize) {
        let cut = |s: &mut String| {
            if s.len() > MAX_FIELD {
                let mut end = MAX_FIELD;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                s.truncate(end);
                s.push('…');
            }
        };
        if let Some(c) = self.changes.as_mut() {
            for (name, list) in [
                ("added", &mut c.added),
                ("changed", &mut c.changed),
                ("removed", &mut c.removed),
            ] {
                list.iter_mut().for_each(cut);
                if let Some(o) = keep_ends(list, keep) {
                    let e = c.omitted.entry(name).or_default();
                    e.after = o.after;
                    e.count += o.count;
                }
            }
        }
        let first = self.refusals_dropped_after.unwrap_or(self.refusals.len());
        let cut_out = self.refusals.len();
        if let Some(o) = keep_ends(&mut self.refusals, keep.min(crate::refusals::MAX_DISTINCT)) {
            // (each left out was refused at least once)
            let _ = cut_out;
            self.refusals_dropped += o.count as u64;
            self.refusals_dropped_after = Some(o.after.min(first));
        }
        for r in &mut self.refusals {
            cut(&mut r.target);
            cut(&mut r.program);
        }
        self.argv.iter_mut().for_each(cut);
        if let Some(o) = keep_ends(&mut self.argv, keep.max(2)) {
            let prev = self.argv_omitted.map_or(0, |p| p.count);
            self.argv_omitted = Some(Omitted {
                after: o.after,
                count: prev + o.count,
            });
        }
        self.limits_reached.iter_mut().for_each(cut);
        self.degradation.iter_mut().for_each(cut);
        if let Some(e) = self.error.as_mut() {
            cut(e);
        }
        if let Some(e) = self.changes_error.as_mut() {
            cut(e);
        }
    }
}

/// The longest record line written ([`RECORD_ROOM`]: the room taken for it before the
/// command starts): one exec cannot push `events.jsonl` past its cap, nor its record past
/// the room kept for it on a full disk.
pub const MAX_LINE: usize = RECORD_ROOM as usize;
/// The longest string of a record cut down to fit ([`MAX_LINE`]).
const MAX_FIELD: usize = 4096;

/// Current time as RFC 3339 UTC (seconds).
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One exec that changed 100k paths and was refused 200 long ones: its record line
    /// fits the room kept for it, with the first and the last paths and the counts of
    /// what was left out.
    #[test]
    fn a_huge_record_is_cut_to_its_first_and_last_entries() {
        let paths: Vec<String> = (0..100_000).map(|i| format!("src/gen/{i:06}.rs")).collect();
        let refusal = |i: usize| crate::refusals::Refusal {
            kind: crate::refusals::Kind::Write,
            target: format!("/etc/{i:04}/{}", "x".repeat(500)),
            program: "sh".into(),
            pid: None,
            count: 3,
            grant: Some("y".repeat(900)),
            reason: None,
            header: None,
        };
        let rec = ExecRecord {
            event: "exec",
            version: 1,
            capsule: "g".into(),
            argv: (0..10_000).map(|i| format!("arg{i}")).collect(),
            cwd: "/w".into(),
            started_at: "t".into(),
            requested: serde_json::json!({}),
            applied: None,
            degradation: vec![],
            exit_status: 0,
            termination: None,
            error: None,
            duration_ms: 1.0,
            changes: Some(Changes {
                added: paths.clone(),
                changed: paths[..50_000].to_vec(),
                removed: vec!["gone".into()],
                head: None,
                omitted: BTreeMap::new(),
            }),
            changes_error: None,
            git_guard: None,
            limits: None,
            limits_reached: vec![],
            refusals: (0..256).map(refusal).collect(),
            refusals_dropped: 7,
            refusals_dropped_after: Some(128),
            argv_omitted: None,
            refusals_not_listed: vec![],
        };
        let line = rec.line().unwrap();
        assert!(line.len() <= MAX_LINE, "{}", line.len());
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        let added = v["changes"]["added"].as_array().unwrap();
        assert_eq!(added[0], "src/gen/000000.rs");
        assert_eq!(added.last().unwrap(), "src/gen/099999.rs");
        let o = &v["changes"]["omitted"]["added"];
        assert_eq!(
            o["count"].as_u64().unwrap() as usize + added.len(),
            100_000,
            "{o}"
        );
        assert_eq!(
            o["after"].as_u64().unwrap() as usize,
            added.len().div_ceil(2)
        );
        assert_eq!(v["changes"]["removed"], serde_json::json!(["gone"]));
        let refusals = v["refusals"].as_array().unwrap();
        assert!(refusals[0]["target"]
            .as_str()
            .unwrap()
            .starts_with("/etc/0000/"));
        assert!(refusals.last().unwrap()["target"]
            .as_str()
            .unwrap()
            .starts_with("/etc/0255/"));
        assert_eq!(
            v["refusals_dropped"].as_u64().unwrap() as usize,
            7 + 256 - refusals.len()
        );
        assert_eq!(v["argv"][0], "arg0");
        assert_eq!(v["argv"].as_array().unwrap().last().unwrap(), "arg9999");
        // a small one is as it was
        let mut small = rec.clone();
        small.changes = None;
        small.argv = vec!["true".into()];
        small.refusals.truncate(2);
        let l = small.line().unwrap();
        assert!(!String::from_utf8_lossy(&l).contains("omitted"));
    }
    use std::process::Command;
    use std::time::Duration;

    pub(super) fn git(dir: &Path, args: &[&str]) {
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

    fn open(ws: &Path) -> gix::Repository {
        let opts = gix::open::Options::isolated().filter_config_section(|_| false);
        gix::open_opts(ws, opts).unwrap()
    }

    /// What the snapshot computed before it was capsule's own: gix's status iterator.
    fn reference(ws: &Path) -> Vec<(String, &'static str)> {
        use gix::status::index_worktree::iter::Summary as S;
        let repo = open(ws);
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

    /// The paths of a snapshot of `ws`, with their kind.
    pub(super) fn ours(ws: &Path) -> Vec<(String, &'static str)> {
        let s = snapshot(ws).unwrap();
        s.paths.iter().map(|(p, e)| (p.clone(), e.kind)).collect()
    }

    pub(super) fn tmp() -> tempfile::TempDir {
        tempfile::tempdir_in("/dev/shm").unwrap()
    }

    pub(super) fn write(ws: &Path, p: &str, text: &str) {
        let p = ws.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// A repository in `ws` with `files` committed (each holding its own name).
    pub(super) fn repo_with(ws: &Path, files: &[&str]) {
        git(ws, &["init", "-q", "-b", "main"]);
        for f in files {
            write(ws, f, f);
        }
        git(ws, &["add", "-A"]);
        git(ws, &["commit", "-q", "-m", "first"]);
    }

    /// `f()` on a thread, failing the test when it takes more than a few seconds (it
    /// blocked); the thread is left behind then.
    pub(super) fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the snapshot blocked")
    }

    #[test]
    fn snapshot_matches_gix_status() {
        let d = tmp();
        let ws = d.path();
        let w = |p: &str, text: &str| write(ws, p, text);
        git(ws, &["init", "-q", "-b", "main"]);
        w(".gitignore", "*.log\nbuild/\n");
        for f in [
            "a",
            "b",
            "same",
            "touched",
            "x",
            "dir/c",
            "dir/deep/d",
            "gone/e",
            "t",
        ] {
            w(f, f);
        }
        git(ws, &["add", "-A"]);
        git(ws, &["commit", "-q", "-m", "first"]);
        // clean: nothing
        assert_eq!(ours(ws), Vec::new());
        assert_eq!(reference(ws), Vec::new());

        w("a", "changed a");
        w("same", "SAME"); // same size, new content
        w("touched", "touched"); // same bytes, new stat
        {
            use std::os::unix::fs::PermissionsExt;
            let p = std::fs::Permissions::from_mode(0o755);
            std::fs::set_permissions(ws.join("x"), p).unwrap(); // executable now
        }
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
        let got = ours(ws);
        // the one documented difference: a stat-only change is a change (no hashing)
        let mut expected = reference(ws);
        assert!(
            !expected.iter().any(|(p, _)| p == "touched"),
            "{expected:?}"
        );
        expected.push(("touched".into(), "changed"));
        expected.sort();
        assert_eq!(got, expected);
        let has = |p: &str, k: &str| got.iter().any(|(a, b)| a == p && *b == k);
        assert!(has("a", "changed") && has("same", "changed"), "{got:?}");
        assert!(has("b", "removed") && has("gone/e", "removed"), "{got:?}");
        assert!(has("t", "changed") && has("staged", "changed"), "{got:?}");
        assert!(
            has("nested", "added") && has("intent", "changed"),
            "{got:?}"
        );
        assert!(has("x", "changed"), "{got:?}");
        assert!(
            has("new.txt", "added") && has("newdir/sub/y", "added"),
            "{got:?}"
        );
        assert!(!got
            .iter()
            .any(|(p, _)| p.ends_with(".log") || p.starts_with("build")));

        // and the whole snapshot, before and after a change
        let before = snapshot(ws).unwrap();
        assert_eq!(before.head, open(ws).head_id().ok().map(|i| i.to_string()));
        w("dir/c", "C!");
        w("later", "l");
        let after = snapshot_after(Some(&before), ws).unwrap();
        let c = diff(&before, &after, ws);
        assert_eq!(c.added, vec!["later".to_string()]);
        assert_eq!(c.changed, vec!["dir/c".to_string()]);
        assert_eq!(c.head, None);
        // the same index bytes: decoded once; other bytes: decoded again
        let (b, a) = (
            before.index.as_ref().unwrap(),
            after.index.as_ref().unwrap(),
        );
        assert!(std::sync::Arc::ptr_eq(b, a));
        // the same paths as a snapshot of its own, without the stat of the new untracked
        // one (nothing compares it)
        let kinds = |s: &Snapshot| -> Vec<(String, &'static str)> {
            s.paths.iter().map(|(p, e)| (p.clone(), e.kind)).collect()
        };
        let alone = snapshot(ws).unwrap();
        assert_eq!(kinds(&after), kinds(&alone));
        assert!(after.paths["later"].stat.is_none() && alone.paths["later"].stat.is_some());
        assert_eq!(after.paths["dir/c"], alone.paths["dir/c"]);
        // an untracked file of the snapshot before is still compared by its stat
        let again = snapshot_after(Some(&alone), ws).unwrap();
        assert_eq!(diff(&alone, &again, ws), Changes::default());
        w("later", "l2");
        let c = diff(&alone, &snapshot_after(Some(&alone), ws).unwrap(), ws);
        assert_eq!(c.changed, vec!["later".to_string()]);
        assert!(c.added.is_empty(), "{c:?}");
        git(ws, &["add", "later", "dir/c"]);
        let staged = snapshot_after(Some(&after), ws).unwrap();
        assert!(!std::sync::Arc::ptr_eq(a, staged.index.as_ref().unwrap()));
        assert_eq!(staged.paths, snapshot(ws).unwrap().paths);
        let c = diff(&after, &staged, ws);
        assert_eq!(c.changed, vec!["dir/c".to_string(), "later".to_string()]);
    }

    /// A merge conflict: its path once, changed.
    #[test]
    fn conflicts_are_changes() {
        let d = tmp();
        let ws = d.path();
        repo_with(ws, &["a", "b"]);
        git(ws, &["checkout", "-q", "-b", "other"]);
        write(ws, "a", "other");
        git(ws, &["commit", "-q", "-am", "other"]);
        git(ws, &["checkout", "-q", "main"]);
        write(ws, "a", "main");
        git(ws, &["commit", "-q", "-am", "main"]);
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "merge",
                "-q",
                "other",
            ])
            .current_dir(ws)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(!out.status.success(), "a conflict: {out:?}");
        let got = ours(ws);
        assert_eq!(got, [("a".to_string(), "changed")]);
        assert_eq!(got, reference(ws));
    }

    /// A submodule (a gitlink) is looked at, not into.
    #[test]
    fn submodules_are_looked_at_not_into() {
        let d = tmp();
        let ws = d.path();
        repo_with(ws, &["a"]);
        std::fs::create_dir(ws.join("sub")).unwrap();
        repo_with(&ws.join("sub"), &["f"]);
        git(ws, &["add", "sub"]);
        git(ws, &["commit", "-q", "-m", "sub"]);
        assert_eq!(ours(ws), Vec::new());
        write(ws, "sub/f", "changed");
        write(ws, "sub/new", "new");
        assert_eq!(ours(ws), Vec::new());
        assert_eq!(reference(ws), Vec::new());
        std::fs::remove_dir_all(ws.join("sub")).unwrap();
        let got = ours(ws);
        assert_eq!(got, [("sub".to_string(), "removed")]);
        assert_eq!(got, reference(ws));
    }

    /// Negation, directory-only patterns, anchoring, `**`, a sub-folder's `.gitignore`
    /// and `.git/info/exclude`: what gix's own status ignores.
    #[test]
    fn ignore_rules_follow_gitignore_semantics() {
        let d = tmp();
        let ws = d.path();
        repo_with(ws, &["tracked.log"]);
        write(
            ws,
            ".gitignore",
            "*.log\n!keep.log\n/top.txt\nout/\n**/gen/*.o\n",
        );
        write(ws, "sub/.gitignore", "!sub.log\nlocal\n");
        write(ws, ".git/info/exclude", "excluded*\n");
        for f in [
            "x.log",
            "keep.log",
            "sub/keep.log",
            "sub/sub.log",
            "sub/x.log",
            "top.txt",
            "sub/top.txt",
            "out/f",
            "sub/out/f",
            "out2",
            "a/b/gen/x.o",
            "gen/y.o",
            "gen/y.c",
            "sub/local",
            "local",
            "excluded.txt",
            "sub/excluded2",
        ] {
            write(ws, f, "x");
        }
        let got = ours(ws);
        assert_eq!(got, reference(ws));
        let added: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            added,
            [
                ".gitignore",
                "gen/y.c",
                "keep.log",
                "local",
                "out2",
                "sub/.gitignore",
                "sub/keep.log",
                "sub/sub.log",
                "sub/top.txt",
            ]
        );
    }

    /// A tracked file whose bytes are written again unchanged (or only touched) is
    /// changed, even when its mtime is set back: the ctime moved.
    #[test]
    fn touching_a_tracked_file_is_a_change() {
        let d = tmp();
        let ws = d.path();
        repo_with(ws, &["a", "b"]);
        let before = snapshot(ws).unwrap();
        assert!(before.paths.is_empty(), "{:?}", before.paths);
        let f = std::fs::File::options()
            .write(true)
            .open(ws.join("a"))
            .unwrap();
        let mtime = f.metadata().unwrap().modified().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        // same bytes, mtime set back to what it was
        std::fs::write(ws.join("a"), "a").unwrap();
        f.set_modified(mtime).unwrap();
        assert_eq!(
            std::fs::metadata(ws.join("a")).unwrap().modified().unwrap(),
            mtime
        );
        let after = snapshot(ws).unwrap();
        let c = diff(&before, &after, ws);
        assert_eq!(c.changed, vec!["a".to_string()]);
        assert!(c.added.is_empty() && c.removed.is_empty(), "{c:?}");
    }

    /// Ignore rules are the command's to write: rules that would hide what it added show
    /// up themselves, a self-ignoring `.gitignore` and a changed `.git/info/exclude` alike.
    #[test]
    fn ignore_rules_cannot_hide_themselves() {
        let d = tmp();
        let ws = d.path();
        repo_with(ws, &["a"]);
        let before = snapshot(ws).unwrap();
        std::fs::create_dir(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/.gitignore"), "*\n").unwrap();
        std::fs::write(ws.join("sub/loot"), "x").unwrap();
        let info = ws.join(".git/info");
        std::fs::create_dir_all(&info).unwrap();
        let mut rules = std::fs::read_to_string(info.join("exclude")).unwrap_or_default();
        rules.push_str("\nstash\n");
        std::fs::write(info.join("exclude"), rules).unwrap();
        std::fs::write(ws.join("stash"), "x").unwrap();
        let c = diff(&before, &snapshot(ws).unwrap(), ws);
        // the hidden files themselves stay ignored, as in git status
        assert_eq!(c.added, vec!["sub/.gitignore".to_string()], "{c:?}");
        assert_eq!(c.changed, vec![".git/info/exclude".to_string()], "{c:?}");
        // untouched rules are no change
        let again = snapshot(ws).unwrap();
        assert_eq!(diff(&again, &snapshot(ws).unwrap(), ws), Changes::default());
    }

    /// A directory of tracked files replaced by a symlink to a copy elsewhere with the
    /// very same stat (the directory moved out): followed, the files would look clean.
    #[test]
    fn tracked_files_behind_a_symlinked_directory_are_removed() {
        let d = tmp();
        let ws = d.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        repo_with(&ws, &["dir/f", "dir/g", "top"]);
        let elsewhere = d.path().join("elsewhere");
        std::fs::rename(ws.join("dir"), &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, ws.join("dir")).unwrap();
        let got = ours(&ws);
        assert_eq!(
            got,
            [
                ("dir".to_string(), "added"),
                ("dir/f".to_string(), "removed"),
                ("dir/g".to_string(), "removed"),
            ]
        );
        assert_eq!(got, reference(&ws));
    }

    /// Untracked files of an earlier exec under a folder the command replaced by a
    /// symlink to a host folder: removed, whether or not the host folder holds the same
    /// names (the record is no oracle for what it holds).
    #[test]
    fn untracked_files_behind_a_symlinked_parent_are_removed() {
        let d = tmp();
        let ws = d.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        repo_with(&ws, &["top"]);
        write(&ws, "sub/passwd", "x");
        write(&ws, "sub/no-such-file", "x");
        let outside = d.path().join("outside");
        write(&outside, "passwd", "host");
        let before = snapshot(&ws).unwrap();
        std::fs::remove_dir_all(ws.join("sub")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("sub")).unwrap();
        let c = diff(&before, &snapshot(&ws).unwrap(), &ws);
        assert_eq!(
            c.removed,
            ["sub/no-such-file".to_string(), "sub/passwd".to_string()],
            "{c:?}"
        );
        assert_eq!(c.added, ["sub".to_string()], "{c:?}");
        assert!(c.changed.is_empty(), "{c:?}");
    }

    /// A symlinked `.gitignore` is not read: its patterns do not apply.
    #[test]
    fn a_symlinked_gitignore_is_not_followed() {
        let d = tmp();
        let ws = d.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        repo_with(&ws, &["a"]);
        write(d.path(), "patterns", "*.txt\n");
        std::os::unix::fs::symlink(d.path().join("patterns"), ws.join(".gitignore")).unwrap();
        write(&ws, "x.txt", "x");
        assert_eq!(
            ours(&ws),
            [
                (".gitignore".to_string(), "added"),
                ("x.txt".to_string(), "added")
            ]
        );
    }

    /// FIFOs where a snapshot reads (a `.gitignore`, `.git/info/exclude`, `.git/index`,
    /// `.git/HEAD`): no writer will ever come, and the snapshot must not wait for one.
    #[test]
    fn fifos_never_block_a_snapshot() {
        fn mkfifo(p: &Path) {
            let _ = std::fs::remove_file(p);
            let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        }
        let d = tmp();
        let ws = d.path().to_path_buf();
        repo_with(&ws, &["sub/a"]);
        write(&ws, "sub/new", "n");
        mkfifo(&ws.join("sub/.gitignore"));
        mkfifo(&ws.join("fifo"));
        let w = ws.clone();
        // the FIFO is neither read nor listed (not a file git could add)
        assert_eq!(
            bounded(move || ours(&w)),
            [("sub/new".to_string(), "added")]
        );
        for p in [".git/info/exclude", ".git/index", ".git/HEAD"] {
            mkfifo(&ws.join(p));
            let w = ws.clone();
            let e = bounded(move || snapshot(&w).map(|_| ())).unwrap_err();
            assert!(e.contains("FIFO"), "{p}: {e}");
            std::fs::remove_file(ws.join(p)).unwrap();
        }
    }

    /// An ignored directory is not walked: one nested deeper than a walk goes is no error
    /// when ignored, and is one when not.
    #[test]
    fn ignored_directories_are_not_walked() {
        let d = tmp();
        let ws = d.path();
        repo_with(ws, &["a"]);
        let mut deep = ws.join("big");
        for _ in 0..=snapshot::MAX_DEPTH {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("f"), "f").unwrap();
        let e = snapshot(ws).unwrap_err();
        assert!(e.contains("directories deep"), "{e}");
        write(ws, ".gitignore", "big/\n");
        assert_eq!(ours(ws), [(".gitignore".to_string(), "added")]);
    }

    /// HEAD: a branch (loose, then packed), detached, unborn; ref names outside `refs/`
    /// are refused.
    #[test]
    fn head_is_read_without_gix() {
        let d = tmp();
        let ws = d.path();
        git(ws, &["init", "-q", "-b", "main"]);
        assert_eq!(snapshot(ws).unwrap().head, None);
        repo_with(ws, &["a"]);
        let id = open(ws).head_id().unwrap().to_string();
        let head = || snapshot(ws).unwrap().head;
        assert_eq!(head(), Some(id.clone()));
        git(ws, &["pack-refs", "--all"]);
        assert!(!ws.join(".git/refs/heads/main").exists());
        assert_eq!(head(), Some(id.clone()));
        git(ws, &["checkout", "-q", "--detach"]);
        assert_eq!(head(), Some(id.clone()));
        for bad in ["ref: refs/../../x", "ref: /etc/passwd", "ref: HEAD", "junk"] {
            std::fs::write(ws.join(".git/HEAD"), format!("{bad}\n")).unwrap();
            let e = snapshot(ws).unwrap_err();
            assert!(
                e.contains(".git/HEAD") && !e.contains("passwd"),
                "{bad}: {e}"
            );
        }
    }

    /// Files over their cap are an error, not read.
    #[test]
    fn oversized_ignore_files_are_an_error() {
        let d = tmp();
        let ws = d.path();
        repo_with(ws, &["a"]);
        let big = "x\n".repeat(snapshot::SMALL_CAP as usize / 2 + 1);
        write(ws, "sub/.gitignore", &big);
        let e = snapshot(ws).unwrap_err();
        assert!(
            e.contains("sub/.gitignore") && e.contains("larger than"),
            "{e}"
        );
    }
}

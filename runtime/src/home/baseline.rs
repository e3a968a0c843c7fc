//! The home baseline: what the real home directory looked like when a capsule's home layer
//! was first mounted (`<bundle>/home.baseline.json`, written by the runtime, never
//! reachable from the sandbox). `capsule home apply` compares against it to refuse a change
//! whose real file moved on since the task started.
//!
//! Recording every file of a home directory would take seconds, so the baseline holds:
//! - `started_ns`: the filesystem clock at the first mount (the mtime of a file written
//!   then), so any real file whose ctime is later has changed since;
//! - a bounded breadth-first listing of the home (top folders first; caches, hidden paths
//!   and the capsule root skipped) with size, mtime, ctime, mode and, for small files,
//!   sha256 — enough to see that a file recorded then was deleted or replaced, and that a
//!   file absent from a fully listed folder was created since.

use capsule_bundle::fsat;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// File name of the baseline in the bundle directory.
pub const BASELINE_FILE: &str = "home.baseline.json";
/// At most this many entries are recorded.
const BUDGET: usize = 5000;
/// Folders deeper than this are not listed.
const MAX_DEPTH: usize = 3;
/// Files up to this size get a sha256.
const HASH_LIMIT: u64 = 256 * 1024;

/// One recorded real entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: String,
    pub size: u64,
    pub mode: u32,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// The baseline record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Baseline {
    pub version: u32,
    pub home: PathBuf,
    pub started_ns: i128,
    /// Relative path -> entry.
    pub entries: BTreeMap<PathBuf, Entry>,
    /// Folders (relative; `""` = home) whose every entry is in `entries`.
    pub listed: BTreeSet<PathBuf>,
}

fn kind_of(st: &libc::stat) -> &'static str {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => "file",
        libc::S_IFDIR => "dir",
        libc::S_IFLNK => "symlink",
        _ => "other",
    }
}

/// Record the entry `name` in `dir` (its stat `st`).
pub fn entry_of(dir: &OwnedFd, name: &std::ffi::OsStr, st: &libc::stat) -> Entry {
    let sha256 = if fsat::is_type(st, libc::S_IFREG) && (st.st_size as u64) <= HASH_LIMIT {
        fsat::open_file_at(dir, name)
            .ok()
            .and_then(|f| sha_file(f).ok())
    } else {
        None
    };
    Entry {
        kind: kind_of(st).into(),
        size: st.st_size as u64,
        mode: st.st_mode & 0o7777,
        mtime_ns: fsat::mtime_ns(st),
        ctime_ns: fsat::ctime_ns(st),
        sha256,
    }
}

fn sha_file(mut f: std::fs::File) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = [0u8; 16384];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Take the baseline of `home`, skipping `skip` (relative paths: caches, hidden paths, the
/// capsule root). `started_ns` is the filesystem clock now, taken from `clock_file` (a file
/// just written).
pub fn record(home: &Path, skip: &[PathBuf], started_ns: i128) -> std::io::Result<Baseline> {
    let root = fsat::open_dir(home)?;
    let mut b = Baseline {
        version: 1,
        home: home.to_path_buf(),
        started_ns,
        ..Default::default()
    };
    let mut queue: VecDeque<(PathBuf, OwnedFd, usize)> =
        VecDeque::from([(PathBuf::new(), root, 0)]);
    while let Some((rel, fd, depth)) = queue.pop_front() {
        let names = match fsat::list(&fd) {
            Ok(n) => n,
            Err(_) => continue,
        };
        if b.entries.len() + names.len() > BUDGET {
            continue; // not listed completely: changes below rely on ctime only
        }
        let mut complete = true;
        for name in names {
            let p = rel.join(&name);
            if skip.iter().any(|s| p.starts_with(s)) {
                continue;
            }
            let Ok(Some(st)) = fsat::stat_at(&fd, &name) else {
                complete = false;
                continue;
            };
            b.entries.insert(p.clone(), entry_of(&fd, &name, &st));
            if fsat::is_type(&st, libc::S_IFDIR) && depth + 1 < MAX_DEPTH {
                if let Ok(sub) = fsat::open_dir_at(&fd, &name) {
                    queue.push_back((p, sub, depth + 1));
                }
            }
        }
        if complete {
            b.listed.insert(rel);
        }
    }
    Ok(b)
}

/// The filesystem's clock now, read as the mtime of a file written in `dir`.
pub fn fs_clock(dir: &Path) -> std::io::Result<i128> {
    let p = dir.join(format!(".clock.{}", std::process::id()));
    let f = std::fs::File::create(&p)?;
    let st = fsat::fstat(f.as_raw_fd());
    drop(f);
    let _ = std::fs::remove_file(&p);
    Ok(fsat::mtime_ns(&st?))
}

impl Baseline {
    pub fn load(bundle_dir: &Path) -> std::io::Result<Option<Self>> {
        match std::fs::read(bundle_dir.join(BASELINE_FILE)) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Save atomically.
    pub fn save(&self, bundle_dir: &Path) -> std::io::Result<()> {
        let p = bundle_dir.join(BASELINE_FILE);
        let tmp = bundle_dir.join(format!("{BASELINE_FILE}.tmp{}", std::process::id()));
        std::fs::write(
            &tmp,
            serde_json::to_vec(self).map_err(std::io::Error::other)?,
        )?;
        std::fs::rename(&tmp, &p)
    }

    /// Did the real entry at `rel` (its current state `now`, `None` = absent) move on
    /// since the baseline? `Err` carries the reason in words.
    pub fn moved_on(&self, rel: &Path, now: Option<&Entry>) -> Result<(), String> {
        if let Some(then) = self.entries.get(rel) {
            let Some(now) = now else {
                return Err("deleted since the task started".into());
            };
            let same = then.kind == now.kind
                && then.mode == now.mode
                && then.size == now.size
                && match (&then.sha256, &now.sha256) {
                    (Some(a), Some(b)) => a == b,
                    _ => then.mtime_ns == now.mtime_ns && then.ctime_ns == now.ctime_ns,
                };
            // a folder's own times change with its entries; its children are checked
            if same || (then.kind == "dir" && now.kind == "dir") {
                return Ok(());
            }
            return Err("changed since the task started".into());
        }
        let parent = rel.parent().unwrap_or(Path::new(""));
        if self.listed.contains(parent) {
            return match now {
                Some(_) => Err("created since the task started".into()),
                None => Ok(()),
            };
        }
        match now {
            Some(n) if n.kind != "dir" && n.ctime_ns >= self.started_ns => {
                Err("changed since the task started".into())
            }
            _ => Ok(()),
        }
    }

    /// Record the current state of `rel` after `home apply` wrote it.
    pub fn update(&mut self, rel: &Path, now: Option<Entry>) {
        match now {
            Some(e) => {
                self.entries.insert(rel.to_path_buf(), e);
            }
            None => {
                self.entries.remove(rel);
            }
        }
    }
}

/// Current state of `rel` under the home directory `home_fd` (no symlink followed on the
/// way); `Err` when a parent folder is a symlink or unreadable.
pub fn current(home_fd: &OwnedFd, rel: &[OsString]) -> std::io::Result<Option<Entry>> {
    let Some((name, parents)) = rel.split_last() else {
        return Ok(None);
    };
    let dir = match fsat::open_dir_path(home_fd, parents) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // a parent that is a file or a symlink: nothing at this path inside home
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR) | Some(libc::ELOOP)) => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    Ok(fsat::stat_at(&dir, name)?.map(|st| entry_of(&dir, name, &st)))
}

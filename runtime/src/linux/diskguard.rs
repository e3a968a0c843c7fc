//! The disk guard: no filesystem can be given a quota without privileges, so capsule's
//! supervisor keeps a reserve free on every host filesystem the task can write (the
//! workspace, the capsule's tmp, the home layer, caches, any writable path): when free
//! space on one falls below its reserve, the whole tree is killed before the disk is full,
//! and the exec says which filesystem and how to allow more.
//!
//! The check is one `statvfs` per filesystem, made from the supervisor's own poll loop
//! ([`Guard::due`] gives the loop its next wake-up, [`Guard::check`] looks), at an interval
//! adapted to the headroom: the time the task would need to write the headroom at
//! [`FAST_WRITES`] (a second with 4 GiB left, a millisecond near the reserve). The first
//! look is [`FIRST_LOOK`] after the command starts, so that a short command costs nothing.
//! Inodes are watched as blocks are (a filesystem full of empty files is full:
//! [`Reserve::inodes`]), and so is every filesystem mounted below a writable path (a
//! writable bind is recursive: its submounts are writable too; found in
//! `/proc/self/mountinfo`). A filesystem of the exec's own (`--tmp-size`'s tmpfs) is
//! bounded already and not watched.
//!
//! A poll cannot stop one large allocation, so no single call may take more than the
//! headroom either:
//! - [`budget`]: the least headroom (free space above the reserve) of those filesystems
//!   when the exec starts is the command's `RLIMIT_FSIZE` (or `--file-size`, if lower):
//!   no file can grow past it, by one `write`, `truncate`, `copy_file_range`, `sendfile`
//!   or a mapping's pages (a mapping cannot grow a file);
//! - [`Budget`]: the calls that allocate without growing a file (`fallocate` with
//!   `FALLOC_FL_KEEP_SIZE`) or allocate much in one go (`fallocate`, `copy_file_range`)
//!   are sent by the seccomp filter to capsule's supervisor, which refuses one (`ENOSPC`)
//!   that would take its filesystem below the reserve, counting what it let through in
//!   the last moments (a call the poll has not seen yet);
//! - the poll stops what many calls add up to.

use super::plan::{ExecPlan, Isolation, MountStep};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The write rate the interval assumes: faster than most disks, about a tmpfs's.
pub const FAST_WRITES: u64 = 4 << 30;
/// When the first look is made, after the command is released.
pub const FIRST_LOOK: Duration = Duration::from_millis(2);
const MIN_INTERVAL: Duration = Duration::from_millis(1);
const MAX_INTERVAL: Duration = Duration::from_secs(1);
/// How far ahead of the task's writing the guard stops it: the next look (1 ms near the
/// reserve, later on a loaded machine) and the kill's way through the tree, which lets
/// a write in flight finish (measured here: ~9 MiB written at tmpfs speed after the kill
/// was sent). 10 ms was not enough on a loaded 2-CPU machine (the whole test suite
/// running): the supervisor's next look came late and the reserve lost 3 MiB.
const LOOKAHEAD: Duration = Duration::from_millis(50);

/// How much to keep free on each filesystem (settings.json's `disk_reserve`).
pub use crate::limits::DiskReserve as Reserve;

/// How fast the inode interval assumes files are made (a tight loop on a tmpfs).
const FAST_CREATES: u64 = 1_000_000;

/// One watched filesystem.
#[derive(Debug)]
struct Fs {
    /// A path on it the task can write (the first found), for `statvfs` and messages.
    path: PathBuf,
    dev: u64,
    /// Bytes to keep free (0: not known yet).
    reserve: u64,
    /// Inodes to keep free (0: none, or the filesystem has no fixed number).
    ireserve: u64,
    /// The last look: when, and the free bytes and inodes then.
    last: Option<(Instant, u64, u64)>,
}

/// Why the guard stopped the tree (or refused a call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach {
    pub path: PathBuf,
    /// Free bytes (inodes, when `inodes`).
    pub free: u64,
    /// The reserve, in bytes (inodes, when `inodes`).
    pub reserve: u64,
    /// The filesystem ran out of inodes, not of blocks.
    pub inodes: bool,
}

impl Breach {
    /// The one line capsule says, and the record's `limits_reached` holds.
    pub fn message(&self) -> String {
        let path = capsule_bundle::escape::name(self.path.as_os_str().as_bytes());
        if self.inodes {
            return format!(
                "killed: free inodes on the filesystem of {path} fell to {}, at the disk reserve of {} inodes at the rate files were made (the disk guard stopped the whole tree before the filesystem was full)",
                self.free, self.reserve
            );
        }
        format!(
            "killed: free space on the filesystem of {path} fell to {}, at the disk reserve of {} at the rate it was written (the disk guard stopped the whole tree before the disk was full)",
            crate::limits::show_size(self.free),
            crate::limits::show_size(self.reserve)
        )
    }
}

/// The guard of one exec.
#[derive(Debug)]
pub struct Guard {
    reserve: Reserve,
    fs: Vec<Fs>,
    paths: Vec<PathBuf>,
    next: Instant,
}

impl Guard {
    /// The guard of `plan`'s writable host filesystems with `reserve` (`None`: off). The
    /// filesystems are found at the first look, not here.
    pub fn new(plan: &ExecPlan, reserve: Reserve, started: Instant) -> Option<Guard> {
        Guard::of_paths(writable_host_paths(plan), reserve, started)
    }

    /// The guard of the filesystems of `paths` (host paths the task can write) with
    /// `reserve` (`None`: off, or no path); found at the first look.
    pub fn of_paths(paths: Vec<PathBuf>, reserve: Reserve, started: Instant) -> Option<Guard> {
        if reserve == Reserve::Off || paths.is_empty() {
            return None;
        }
        Some(Guard {
            reserve,
            fs: Vec::new(),
            paths,
            next: started + FIRST_LOOK,
        })
    }

    /// Look now, whenever the next look was due: `Some` when a filesystem is below its
    /// reserve already.
    pub fn look_now(&mut self) -> Option<Breach> {
        let now = Instant::now();
        self.next = now;
        self.check(now)
    }

    /// When the supervisor should look next.
    pub fn due(&self) -> Instant {
        self.next
    }

    /// Look at every filesystem if it is time: `Some` when one is below its reserve.
    pub fn check(&mut self, now: Instant) -> Option<Breach> {
        if now < self.next {
            return None;
        }
        if self.fs.is_empty() {
            self.find_filesystems();
        }
        let mut wait = MAX_INTERVAL;
        for f in &mut self.fs {
            let Some(st) = statvfs(&f.path) else {
                continue;
            };
            if f.reserve == 0 {
                f.reserve = self.reserve.bytes(st.size);
                f.ireserve = self.reserve.inodes(st.files);
            }
            // what the task writes until the tree is dead (the next look and the kill),
            // at the rate it wrote since the last look: counted as written already, so
            // that the reserve is still free when the writing stops
            let ahead = |before: u64, now_free: u64, dt: u128| {
                let rate = before.saturating_sub(now_free) as u128 * 1_000_000 / dt;
                (rate * LOOKAHEAD.as_micros() / 1_000_000).min(u64::MAX as u128) as u64
            };
            let (a, ai) = f.last.map_or((0, 0), |(t, before, ibefore)| {
                let dt = now.saturating_duration_since(t).as_micros().max(1);
                (ahead(before, st.free, dt), ahead(ibefore, st.ifree, dt))
            });
            f.last = Some((now, st.free, st.ifree));
            if st.free.saturating_sub(a) < f.reserve {
                return Some(Breach {
                    path: f.path.clone(),
                    free: st.free,
                    reserve: f.reserve,
                    inodes: false,
                });
            }
            if f.ireserve > 0 && st.ifree.saturating_sub(ai) < f.ireserve {
                return Some(Breach {
                    path: f.path.clone(),
                    free: st.ifree,
                    reserve: f.ireserve,
                    inodes: true,
                });
            }
            wait = wait.min(interval(st.free.saturating_sub(a) - f.reserve));
            if f.ireserve > 0 {
                wait = wait.min(interval_inodes(st.ifree.saturating_sub(ai) - f.ireserve));
            }
        }
        self.next = now + wait;
        None
    }

    /// The least headroom (free bytes above the reserve) seen at the last look, `None`
    /// before the first.
    pub fn headroom(&self) -> Option<u64> {
        self.fs
            .iter()
            .filter_map(|f| f.last.map(|(_, free, _)| free.saturating_sub(f.reserve)))
            .min()
    }

    fn find_filesystems(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let mut paths = self.paths.clone();
        paths.extend(submounts(&self.paths));
        for p in &paths {
            let Ok(m) = std::fs::metadata(p) else {
                continue;
            };
            if !self.fs.iter().any(|f| f.dev == m.dev()) {
                self.fs.push(Fs {
                    path: p.clone(),
                    dev: m.dev(),
                    reserve: 0,
                    ireserve: 0,
                    last: None,
                });
            }
        }
    }
}

/// The wait before the next look with `headroom` bytes above the reserve.
pub fn interval(headroom: u64) -> Duration {
    let us = (headroom as u128 * 1_000_000 / FAST_WRITES as u128).min(u64::MAX as u128) as u64;
    Duration::from_micros(us).clamp(MIN_INTERVAL, MAX_INTERVAL)
}

/// The wait before the next look with `headroom` inodes above the reserve.
pub fn interval_inodes(headroom: u64) -> Duration {
    let us = (headroom as u128 * 1_000_000 / FAST_CREATES as u128).min(u64::MAX as u128) as u64;
    Duration::from_micros(us).clamp(MIN_INTERVAL, MAX_INTERVAL)
}

/// What a look at a filesystem sees.
#[derive(Debug, Clone, Copy)]
struct Look {
    /// Its size and free bytes (for unprivileged users).
    size: u64,
    free: u64,
    /// Its inodes and free inodes (0 and 0 where it has no fixed number).
    files: u64,
    ifree: u64,
}

fn look(st: &nix::sys::statvfs::Statvfs) -> Look {
    let frag = st.fragment_size() as u64;
    Look {
        size: (st.blocks() as u64).saturating_mul(frag),
        free: (st.blocks_available() as u64).saturating_mul(frag),
        files: st.files() as u64,
        ifree: st.files_available() as u64,
    }
}

/// A look at the filesystem of `p`.
fn statvfs(p: &Path) -> Option<Look> {
    nix::sys::statvfs::statvfs(p).ok().map(|s| look(&s))
}

/// The mount points below any of `paths` (strictly), from this process's
/// `/proc/self/mountinfo`, read-write ones only: a recursive bind of a path makes them
/// writable too. At most 4 MiB of the table is read.
pub fn submounts(paths: &[PathBuf]) -> Vec<PathBuf> {
    use std::io::Read;
    let mut text = Vec::new();
    if let Ok(f) = std::fs::File::open("/proc/self/mountinfo") {
        let _ = f.take(4 << 20).read_to_end(&mut text);
    }
    mounts_below(&String::from_utf8_lossy(&text), paths)
}

/// [`submounts`] of a mount table `table` (mountinfo's format).
fn mounts_below(table: &str, paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for line in table.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        // id parent major:minor root mount-point options ...
        let (Some(point), Some(opts)) = (f.get(4), f.get(5)) else {
            continue;
        };
        if !opts.split(',').any(|o| o == "rw") {
            continue;
        }
        let point = PathBuf::from(unescape(point));
        if paths.iter().any(|p| point != *p && point.starts_with(p)) && !out.contains(&point) {
            out.push(point);
        }
    }
    out
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(s: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c));
        if b[i] == b'\\' && octal {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    std::ffi::OsString::from_vec(out)
}

/// The disk guard's budget of `plan` now: the least free space above the reserve of the
/// filesystems its command can write (those below its writable paths included), to be
/// its `RLIMIT_FSIZE`: no single file can grow past what the filesystems can spare.
/// `None` when the guard is off or no filesystem is found.
pub fn budget(plan: &ExecPlan) -> Option<u64> {
    if plan.disk_reserve == Reserve::Off {
        return None;
    }
    let mut paths = writable_host_paths(plan);
    paths.extend(submounts(&paths));
    budget_of(&paths, plan.disk_reserve)
}

/// [`budget`] of the filesystems of `paths` with `reserve`.
pub fn budget_of(paths: &[PathBuf], reserve: Reserve) -> Option<u64> {
    paths
        .iter()
        .filter_map(|p| statvfs(p))
        .map(|l| l.free.saturating_sub(reserve.bytes(l.size)))
        .min()
}

/// How long a call the supervisor let through is counted as not yet seen by a look.
const GRANTED_FOR: Duration = Duration::from_millis(250);

/// The check of the calls that allocate much at once (`fallocate`, `copy_file_range`),
/// made by capsule's seccomp supervisor before the kernel runs them: one that would take
/// the filesystem it writes below the reserve is refused.
#[derive(Debug)]
pub struct Budget {
    reserve: Reserve,
    /// What was let through lately: (when, filesystem id, bytes).
    granted: std::sync::Mutex<Vec<(Instant, u64, u64)>>,
}

impl Budget {
    /// The check with `reserve` (`None`: off).
    pub fn new(reserve: Reserve) -> Option<Budget> {
        (reserve != Reserve::Off).then(|| Budget {
            reserve,
            granted: std::sync::Mutex::default(),
        })
    }

    /// May `bytes` more be allocated on the filesystem of `fd` (a descriptor of the file
    /// the call writes)? `Err` with what it would breach; an allowed call is counted for
    /// [`GRANTED_FOR`].
    pub fn allow(&self, fd: std::os::fd::BorrowedFd<'_>, bytes: u64) -> Result<(), Breach> {
        let Ok(st) = nix::sys::statvfs::fstatvfs(fd) else {
            return Ok(());
        };
        let l = look(&st);
        let id = st.filesystem_id() as u64;
        let reserve = self.reserve.bytes(l.size);
        let now = Instant::now();
        let mut g = match self.granted.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        g.retain(|(t, _, _)| now.saturating_duration_since(*t) < GRANTED_FOR);
        let pending: u64 = g
            .iter()
            .filter(|(_, f, _)| *f == id)
            .map(|(_, _, b)| *b)
            .sum();
        let headroom = l.free.saturating_sub(pending).saturating_sub(reserve);
        if bytes > headroom {
            return Err(Breach {
                path: PathBuf::new(),
                free: l.free.saturating_sub(pending),
                reserve,
                inodes: false,
            });
        }
        g.push((now, id, bytes));
        Ok(())
    }
}

/// The host paths `plan`'s command can write: writable binds, the upper folders of
/// overlays and the home view, and without a mount namespace the policy's own.
pub fn writable_host_paths(plan: &ExecPlan) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for m in &plan.mounts {
        match m {
            MountStep::Bind { src, rw: true, .. } => v.push(src.clone()),
            MountStep::Overlay { upper, .. } => v.push(upper.clone()),
            MountStep::HomeView(h) => v.push(h.upper.clone()),
            _ => {}
        }
    }
    if plan.isolation != Isolation::Full {
        let p = &plan.policy;
        v.push(p.workspace.clone());
        v.push(p.tmp_dir.clone());
        v.extend(p.writable.iter().cloned());
        v.extend(p.home_layer.iter().cloned());
        v.extend(p.cache_dir.iter().cloned());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mounts_below_a_writable_path() {
        let table = "22 1 0:21 / / rw,relatime - ext4 /dev/vda rw\n\
                     30 22 0:40 / /work/ws rw - ext4 /dev/vdb rw\n\
                     31 30 0:41 / /work/ws/sub\\040dir rw,nosuid - tmpfs tmpfs rw\n\
                     32 30 0:42 / /work/ws/ro ro - tmpfs tmpfs rw\n\
                     33 22 0:43 / /work/wsx rw - tmpfs tmpfs rw\n";
        let got = mounts_below(table, &[PathBuf::from("/work/ws")]);
        assert_eq!(got, [PathBuf::from("/work/ws/sub dir")]);
        assert!(mounts_below(table, &[PathBuf::from("/nowhere")]).is_empty());
    }

    #[test]
    fn inodes_are_kept_too() {
        let r = Reserve::default();
        assert_eq!(r.inodes(10_000), 500);
        assert_eq!(r.inodes(100 << 20), (2 << 30) / (16 << 10));
        assert_eq!(Reserve::Off.inodes(1000), 0);
        assert_eq!(interval_inodes(1_000_000), Duration::from_secs(1));
        assert_eq!(interval_inodes(0), MIN_INTERVAL);
    }

    #[test]
    fn the_interval_follows_the_headroom() {
        assert_eq!(interval(0), MIN_INTERVAL);
        assert_eq!(interval(4 << 30), Duration::from_secs(1));
        assert_eq!(interval(u64::MAX), MAX_INTERVAL);
        let mid = interval(400 << 20);
        assert!(mid > Duration::from_millis(90) && mid < Duration::from_millis(110));
    }
}

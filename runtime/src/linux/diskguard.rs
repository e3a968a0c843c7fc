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
//! A filesystem of the exec's own (`--tmp-size`'s tmpfs) is bounded already and not
//! watched.

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

/// One watched filesystem.
#[derive(Debug)]
struct Fs {
    /// A path on it the task can write (the first found), for `statvfs` and messages.
    path: PathBuf,
    dev: u64,
    /// Bytes to keep free (0: not known yet).
    reserve: u64,
    /// The last look: when, and the free bytes then.
    last: Option<(Instant, u64)>,
}

/// Why the guard stopped the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach {
    pub path: PathBuf,
    pub free: u64,
    pub reserve: u64,
}

impl Breach {
    /// The one line capsule says, and the record's `limits_reached` holds.
    pub fn message(&self) -> String {
        format!(
            "killed: free space on the filesystem of {} fell to {}, at the disk reserve of {} at the rate it was written (the disk guard stopped the whole tree before the disk was full)",
            capsule_bundle::escape::name(self.path.as_os_str().as_bytes()),
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
        let mut headroom = u64::MAX;
        for f in &mut self.fs {
            let Some((size, free)) = statvfs(&f.path) else {
                continue;
            };
            if f.reserve == 0 {
                f.reserve = self.reserve.bytes(size);
            }
            // what the task writes until the tree is dead (the next look and the kill),
            // at the rate it wrote since the last look: counted as written already, so
            // that the reserve is still free when the writing stops
            let ahead = f.last.map_or(0, |(t, before)| {
                let dt = now.saturating_duration_since(t).as_micros().max(1);
                let rate = before.saturating_sub(free) as u128 * 1_000_000 / dt;
                (rate * LOOKAHEAD.as_micros() / 1_000_000).min(u64::MAX as u128) as u64
            });
            f.last = Some((now, free));
            if free.saturating_sub(ahead) < f.reserve {
                return Some(Breach {
                    path: f.path.clone(),
                    free,
                    reserve: f.reserve,
                });
            }
            headroom = headroom.min(free.saturating_sub(ahead).saturating_sub(f.reserve));
        }
        self.next = now + interval(headroom);
        None
    }

    fn find_filesystems(&mut self) {
        use std::os::unix::fs::MetadataExt;
        for p in &self.paths {
            let Ok(m) = std::fs::metadata(p) else {
                continue;
            };
            if !self.fs.iter().any(|f| f.dev == m.dev()) {
                self.fs.push(Fs {
                    path: p.clone(),
                    dev: m.dev(),
                    reserve: 0,
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

/// `(size, free for unprivileged users)` of the filesystem of `p`, in bytes.
fn statvfs(p: &Path) -> Option<(u64, u64)> {
    let st = nix::sys::statvfs::statvfs(p).ok()?;
    let frag = st.fragment_size() as u64;
    Some((
        (st.blocks() as u64).saturating_mul(frag),
        (st.blocks_available() as u64).saturating_mul(frag),
    ))
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
    fn the_interval_follows_the_headroom() {
        assert_eq!(interval(0), MIN_INTERVAL);
        assert_eq!(interval(4 << 30), Duration::from_secs(1));
        assert_eq!(interval(u64::MAX), MAX_INTERVAL);
        let mid = interval(400 << 20);
        assert!(mid > Duration::from_millis(90) && mid < Duration::from_millis(110));
    }
}

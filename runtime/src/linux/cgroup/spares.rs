//! The cgroups of warm spares: a prepared root's spares wait in groups of their own, so
//! that an exec with limits takes its spare's groups by rename instead of moving a
//! process into a cgroup on its path (a move waits for an RCU grace period).

use super::{apply, bases, claim, enter, Group, Version};
use crate::limits::Limits;
use std::io;
use std::path::{Path, PathBuf};

/// The groups a prepared root's warm spares wait in, so that an exec with limits finds its
/// init in a group already and only writes its limits there: moving a process into a
/// cgroup waits for an RCU grace period (~8-12 ms measured here, cgroup v1), which is
/// done by the holder when it makes a spare, not by the exec. The folders are opened
/// before the holder enters its own root (where the host's cgroup folders are not) and
/// used through `/proc/self/fd`.
pub struct SpareCgroups {
    dirs: Vec<std::os::fd::OwnedFd>,
}

/// A spare's group name in every folder: `warm-<random>`.
fn warm_name() -> String {
    let mut b = [0u8; 8];
    // SAFETY: getrandom into a buffer of ours.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    format!("warm-{}", hex::encode(b))
}

impl SpareCgroups {
    /// The folders of `limits`' cgroups, opened; `None` when there are none or one cannot
    /// be made (the exec then makes its own groups, or is refused, as without spares).
    pub fn open(limits: &Limits) -> Option<SpareCgroups> {
        let bases = bases(limits).ok()?;
        if bases.is_empty() {
            return None;
        }
        let dirs = bases
            .iter()
            .map(|b| {
                nix::fcntl::open(
                    &b.dir,
                    nix::fcntl::OFlag::O_PATH
                        | nix::fcntl::OFlag::O_DIRECTORY
                        | nix::fcntl::OFlag::O_CLOEXEC,
                    nix::sys::stat::Mode::empty(),
                )
                .ok()
            })
            .collect::<Option<Vec<_>>>()?;
        Some(SpareCgroups { dirs })
    }

    /// The descriptors to keep open.
    pub fn fds(&self) -> Vec<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.dirs.iter().map(|d| d.as_raw_fd()).collect()
    }

    fn paths(&self, name: &str) -> Vec<PathBuf> {
        self.fds()
            .iter()
            .map(|fd| Path::new("/proc/self/fd").join(fd.to_string()).join(name))
            .collect()
    }

    /// Move process `pid` (of the caller's pid namespace) into a group of its own in
    /// every folder (a spare group reused, or a new one); its name, or `None` when that
    /// failed (what was made is removed).
    pub fn place(&self, pid: libc::pid_t) -> Option<String> {
        let name = warm_name();
        let mut made = Vec::new();
        for base in self.paths("") {
            let ok = claim(&base, &name, false)
                .and_then(|dir| {
                    made.push(dir.clone());
                    std::fs::write(dir.join("cgroup.procs"), pid.to_string())
                })
                .is_ok();
            if !ok {
                self.remove(&name);
                return None;
            }
        }
        Some(name)
    }

    /// Remove the (empty) groups `name`; one that holds a process stays.
    pub fn remove(&self, name: &str) {
        for d in self.paths(name) {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// This exec's groups (`files`: their `cgroup.procs`) for the warm spare `pid`: when the
/// spare waits in a group of its own next to one of them ([`SpareCgroups`]), that group
/// becomes this exec's (the two are swapped by rename: this exec's, still empty, goes
/// back to the spares) and gets this exec's `limits`; otherwise the spare is moved into
/// this exec's group.
pub fn enter_warm(files: &[PathBuf], pid: libc::pid_t, limits: &Limits) -> io::Result<()> {
    let theirs = super::read_proc(&format!("/proc/{pid}/cgroup"));
    let warm: Vec<&str> = theirs
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .filter(|n| n.starts_with("warm-"))
        .collect();
    for f in files {
        let Some(dir) = f.parent() else { continue };
        let adopted = warm.iter().find_map(|n| {
            let w = dir.with_file_name(n);
            if !w.is_dir() {
                return None;
            }
            let aside = dir.with_file_name(format!("spare-{}-{n}", std::process::id()));
            std::fs::rename(dir, &aside).ok()?;
            if std::fs::rename(&w, dir).is_err() {
                let _ = std::fs::rename(&aside, dir);
                return None;
            }
            Some(())
        });
        if adopted.is_none() {
            enter(std::slice::from_ref(f), pid)?;
            continue;
        }
        let version = if dir.join("cgroup.controllers").exists() {
            Version::V2
        } else {
            Version::V1
        };
        // the controllers of this group that this exec limits
        let has = |f: &str| dir.join(f).exists();
        let controllers: Vec<&'static str> = [
            (
                "memory",
                limits.memory.is_some() && (has("memory.max") || has("memory.limit_in_bytes")),
            ),
            ("pids", limits.pids.is_some() && has("pids.max")),
            (
                "cpu",
                limits.cpus_milli.is_some() && (has("cpu.max") || has("cpu.cfs_quota_us")),
            ),
        ]
        .into_iter()
        .filter_map(|(c, on)| on.then_some(c))
        .collect();
        let g = Group {
            version,
            controllers,
            dir: dir.to_path_buf(),
            before: Vec::new(),
        };
        apply(limits, &g).map_err(|e| io::Error::other(e.to_string()))?;
    }
    Ok(())
}

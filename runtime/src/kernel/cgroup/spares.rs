//! The cgroups of warm spares: a prepared root's spares wait in groups of their own, so
//! that an exec with limits runs in its spare's groups as they are instead of moving a
//! process into a cgroup on its path.

use super::{apply, bases, claim, enter, event_count, group_at, Group};
use crate::limits::Limits;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The groups a prepared root's warm spares wait in, so that an exec with limits finds its
/// init in a group already and writes nothing there: the spare moved itself in as it
/// started (see [`SpareCgroups::prepare`] and [`move_self_file`], the way that takes no
/// global lock), not the exec nor the holder. The folders are opened before the holder
/// enters its own root (where the host's cgroup folders are not) and used through
/// `/proc/self/fd`.
pub struct SpareCgroups {
    dirs: Vec<std::os::fd::OwnedFd>,
    /// The same folders by their paths on the host, for the execs the spares serve.
    host: Vec<PathBuf>,
    /// The limits of the prepared root's execs, written into each spare's groups before
    /// the spare moves in.
    limits: Limits,
}

/// A spare's group name in every folder: `warm-<random>-<tag of its limits>`.
fn warm_name(limits: &Limits) -> String {
    let mut b = [0u8; 8];
    // SAFETY: getrandom into a buffer of ours.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    format!("warm-{}-{}", hex::encode(b), limits_tag(limits))
}

/// A short digest of the cgroup limits in `limits` (memory, processes, CPU), the last part
/// of a spare group's name: an exec whose limits give the same tag finds them written in
/// its spare's groups already and writes nothing.
pub(super) fn limits_tag(limits: &Limits) -> String {
    use sha2::{Digest, Sha256};
    let key = format!(
        "m{:?} p{:?} c{:?}",
        limits.memory, limits.pids, limits.cpus_milli
    );
    hex::encode(&Sha256::digest(key.as_bytes())[..4])
}

impl SpareCgroups {
    /// The folders of `limits`' cgroups, opened; `Ok(None)` when there are none, an error
    /// (why, in one line) when one cannot be made or opened (the exec then makes its own
    /// groups, or is refused, as without spares; capsule's own defaults are then not
    /// enforced, and the holder tells each exec why).
    pub fn open(limits: &Limits) -> Result<Option<SpareCgroups>, String> {
        let bases = bases(limits).map_err(|e| e.to_string())?;
        if bases.is_empty() {
            return Ok(None);
        }
        if let Some(b) = bases
            .iter()
            .find(|b| nix::unistd::access(&b.dir, nix::unistd::AccessFlags::W_OK).is_err())
        {
            return Err(format!(
                "{} cannot be enforced here: cannot make a cgroup in {}",
                super::flag_of(b.controllers[0]),
                b.dir.display()
            ));
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
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| "cannot open the cgroup folders of the spares".to_string())?;
        Ok(Some(SpareCgroups {
            dirs,
            host: bases.into_iter().map(|b| b.dir).collect(),
            limits: *limits,
        }))
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

    /// Groups of their own for a spare about to be made, in every folder (a spare group
    /// reused, or a new one): their name, the files the spare moves itself in by
    /// (`write("0")`, see [`move_self_file`]), opened for writing, while its holder goes on
    /// serving, and the groups as the exec it serves sees them (by their host paths);
    /// `None` when that failed (what was made is removed).
    pub fn prepare(&self) -> Option<(String, Vec<std::os::fd::OwnedFd>, Vec<Group>)> {
        let name = warm_name(&self.limits);
        let mut files = Vec::new();
        let mut groups = Vec::new();
        for (base, host) in self.paths("").into_iter().zip(&self.host) {
            let opened = claim(&base, &name, false).and_then(|dir| {
                // the execs' limits, in place before the spare moves in: the exec that
                // takes the spare writes nothing (its limits give the name's tag)
                let group = group_at(&dir, &self.limits);
                apply(&self.limits, &group).map_err(|e| io::Error::other(e.to_string()))?;
                groups.push(Group {
                    dir: host.join(&name),
                    adopted: true,
                    ..group.clone()
                });
                // a fresh change time: an exec's sweep leaves a spare group younger than a
                // minute alone (its spare may not have moved in yet); a renamed group keeps
                // its old one otherwise
                if let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) {
                    // SAFETY: a valid C string; null times mean now.
                    unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), std::ptr::null(), 0) };
                }
                open_move_self(&dir, group.version)
            });
            match opened {
                Ok(f) => files.push(std::os::fd::OwnedFd::from(f)),
                Err(_) => {
                    self.remove(&name);
                    return None;
                }
            }
        }
        Some((name, files, groups))
    }

    /// The groups `name` of a spare that has ended, after the exec it served is done (a
    /// spare ends only after its capsule): each one where no limit was reached goes back
    /// to the spares (`spare-h<random>`, for the next spare or exec to claim),
    /// the others are removed (a spare's counters must be those of a new group). Off every
    /// exec's path: the exec only reads what its command reached.
    pub fn hand_on(&self, name: &str, groups: &[Group]) {
        for ((d, g), base) in self.paths(name).iter().zip(groups).zip(self.paths("")) {
            let clean = g
                .controllers
                .iter()
                .all(|c| event_count(g.version, d, c).unwrap_or(0) == 0);
            // (the holder is pid 1 of its own pid namespace: a random name, not its pid)
            let mut b = [0u8; 8];
            // SAFETY: getrandom into a buffer of ours.
            unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
            let spare = base.join(format!("spare-h{}", hex::encode(b)));
            if !(clean && std::fs::rename(d, spare).is_ok()) {
                let _ = std::fs::remove_dir(d);
            }
        }
    }

    /// Remove the (empty) groups `name`; one that holds a process stays.
    pub fn remove(&self, name: &str) {
        for d in self.paths(name) {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// The file of a group that a single-threaded process moves itself in by, writing `0`.
/// On cgroup v1 it is `tasks`: a thread that moves itself there is the one case in which
/// the kernel does not take its global lock of every thread group
/// (`cgroup_threadgroup_rwsem`, whose write side waits for an RCU grace period while every
/// `fork` and `exit` on the machine waits for it: measured here, a move by `cgroup.procs`
/// took a median 5.3 ms and made the next exec wait, by `tasks` 0.04 ms). A spare is
/// single-threaded when it moves, so moving the thread moves the process. On cgroup v2,
/// where `cgroup.threads` works only in threaded groups, it is `cgroup.procs`.
pub(crate) fn move_self_file(version: super::Version) -> &'static str {
    match version {
        super::Version::V1 => "tasks",
        super::Version::V2 => "cgroup.procs",
    }
}

/// The [`move_self_file`] of the group at `dir`, opened for writing (never through a link).
pub(crate) fn open_move_self(dir: &Path, version: super::Version) -> io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(dir.join(move_self_file(version)))
}

/// This exec's groups (`files`: their `cgroup.procs`) for the warm spare `pid`: when the
/// spare waits in a group of its own next to one of them ([`SpareCgroups`]), this exec
/// runs in that group as it is, with this exec's `limits` (written only when its name's
/// tag says they are not there already); otherwise the spare is moved into this exec's
/// group. Returns the group each of `files` stands for now. Nothing is renamed on the
/// way: a cgroup rename waits for `cgroup_mutex`, which the kernel holds while it moves
/// another spare into its groups (an RCU grace period, up to ~20 ms measured here).
pub fn enter_warm(
    files: &[PathBuf],
    pid: libc::pid_t,
    limits: &Limits,
) -> io::Result<Vec<PathBuf>> {
    let theirs = super::read_proc(&format!("/proc/{pid}/cgroup"));
    let warm: Vec<&str> = theirs
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .filter(|n| n.starts_with("warm-"))
        .collect();
    let tag = format!("-{}", limits_tag(limits));
    let mut used = Vec::with_capacity(files.len());
    for f in files {
        let Some(dir) = f.parent() else { continue };
        let adopted = warm
            .iter()
            .map(|n| dir.with_file_name(n))
            .find(|w| w.is_dir());
        match adopted {
            Some(w) => {
                let tagged = w
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(&tag));
                if !tagged {
                    apply(limits, &group_at(&w, limits))
                        .map_err(|e| io::Error::other(e.to_string()))?;
                }
                used.push(w);
            }
            None => {
                enter(std::slice::from_ref(f), pid, limits)?;
                used.push(dir.to_path_buf());
            }
        }
    }
    Ok(used)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_tells_limits_apart_and_ends_the_spare_name() {
        let l = |memory, pids, cpus_milli| Limits {
            memory,
            pids,
            cpus_milli,
            ..Limits::default()
        };
        let a = l(Some(64 << 20), Some(64), None);
        assert_eq!(limits_tag(&a), limits_tag(&a));
        for b in [
            l(Some(65 << 20), Some(64), None),
            l(Some(64 << 20), Some(65), None),
            l(Some(64 << 20), Some(64), Some(1500)),
            l(None, Some(64), None),
        ] {
            assert_ne!(limits_tag(&a), limits_tag(&b), "{b:?}");
        }
        // the rlimits are the command's own, not the groups': the same tag
        let mut c = a;
        c.fds = Some(100);
        assert_eq!(limits_tag(&a), limits_tag(&c));
        assert!(warm_name(&a).ends_with(&format!("-{}", limits_tag(&a))));
        assert!(warm_name(&a).starts_with("warm-"));
    }
}

//! A container's cgroups (capsule-runc's): one directory per v1 hierarchy mounted on
//! this host (or the one v2 directory on a unified host) at the path its plan gives,
//! made directly in cgroupfs (no systemd unit is created), the limits written
//! ([`super::resources`]) before its init runs, processes moved in, their pids read,
//! frozen and thawed, sub-cgroups of `exec --cgroup`, and their removal at `delete`.

use super::resources::{self, Limits};
use super::{hierarchies, unified, Hierarchy};
use std::path::{Path, PathBuf};

/// What [`setup`] makes: the container's cgroups as its plan decided them.
#[derive(Debug, Clone)]
pub struct Setup<'a> {
    /// The path relative to each hierarchy's root.
    pub rel: &'a Path,
    /// The hierarchies to make it in.
    pub hierarchies: &'a [Hierarchy],
    /// The limits to write.
    pub limits: &'a Limits,
    /// The devices cgroup's lines (`devices.allow`/`devices.deny`, the line).
    pub devices: &'a [(&'static str, String)],
    /// The container may run without its cgroups when the runtime may not make them
    /// (rootless).
    pub optional: bool,
}

/// The container's directories, made, with its limits written. None (and the reason,
/// for the log) when it may run without them and the runtime may not make them
/// (rootless).
pub fn setup(plan: &Setup<'_>) -> Result<(Vec<PathBuf>, Option<String>), String> {
    let rel = plan.rel;
    let mut dirs = Vec::new();
    for h in plan.hierarchies {
        let dir = h.mount.join(rel);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            let denied = e.kind() == std::io::ErrorKind::PermissionDenied
                || e.raw_os_error() == Some(libc::EROFS);
            if plan.optional && denied {
                remove(&dirs);
                return Ok((
                    Vec::new(),
                    Some(format!("making the cgroup {}: {e}", dir.display())),
                ));
            }
            remove(&dirs);
            return Err(format!(
                "making the cgroup {}: {e}{}",
                dir.display(),
                if denied && !plan.optional {
                    " (a rootless runtime may not; the bundle's linux.resources need it)"
                } else {
                    ""
                }
            ));
        }
        if h.controllers.iter().any(|c| c == "cpuset") {
            // a new cpuset group is empty until given cpus and mems: its parent's
            for f in ["cpuset.cpus", "cpuset.mems"] {
                inherit(&h.mount, rel, f);
            }
        }
        dirs.push(dir.clone());
        if let Err(e) = write_limits(h, &dir, plan.limits, plan.devices) {
            remove(&dirs);
            return Err(e);
        }
    }
    Ok((dirs, None))
}

fn inherit(mount: &Path, rel: &Path, file: &str) {
    let mut cur = mount.to_path_buf();
    let mut value = std::fs::read_to_string(mount.join(file)).unwrap_or_default();
    for c in rel.components() {
        cur.push(c);
        let f = cur.join(file);
        let here = std::fs::read_to_string(&f).unwrap_or_default();
        if here.trim().is_empty() {
            let _ = std::fs::write(&f, value.trim());
        } else {
            value = here;
        }
    }
}

fn write(dir: &Path, file: &str, value: &str, field: &str) -> Result<(), String> {
    std::fs::write(dir.join(file), value).map_err(|e| {
        format!(
            "linux.resources.{field}: writing {value:?} to {}: {e}",
            dir.join(file).display()
        )
    })
}

/// The hierarchy of one of the container's directories (by its mount), and whether it
/// is the v2 one.
fn dir_kind<'a>(h: &'a Hierarchy) -> resources::Dir<'a> {
    resources::Dir {
        controllers: &h.controllers,
        v2: h.controllers.is_empty() && unified(),
    }
}

fn write_limits(
    h: &Hierarchy,
    dir: &Path,
    l: &Limits,
    devices: &[(&'static str, String)],
) -> Result<(), String> {
    resources::apply(&dir_kind(h), &mut resources::Real(dir), l)
        .map_err(|e| format!("{e} (in {})", dir.display()))?;
    if h.controllers.iter().any(|x| x == "devices") {
        for (file, line) in devices {
            write(dir, file, line, "devices")?;
        }
    }
    Ok(())
}

/// `update`: write `l` into each of the container's directories (the device rules are
/// not changed).
pub fn update(dirs: &[PathBuf], l: &Limits) -> Result<(), String> {
    let hs = hierarchies();
    for d in dirs {
        let Some(h) = hs.iter().find(|h| d.starts_with(&h.mount)) else {
            continue;
        };
        resources::apply(&dir_kind(h), &mut resources::Real(d), l)
            .map_err(|e| format!("{e} (in {})", d.display()))?;
    }
    Ok(())
}

/// The devices every container gets, after its bundle's rules (as runc allows them:
/// null zero full random urandom tty console ptmx, pts; `mknod` of any).
pub const DEFAULT_DEVICES: &[&str] = &[
    "c 1:3 rwm",
    "c 1:5 rwm",
    "c 1:7 rwm",
    "c 1:8 rwm",
    "c 1:9 rwm",
    "c 5:0 rwm",
    "c 5:1 rwm",
    "c 5:2 rwm",
    "c 136:* rwm",
    "c *:* m",
    "b *:* m",
];

/// Move `pid` into each directory.
pub fn enter(dirs: &[PathBuf], pid: libc::pid_t) -> Result<(), String> {
    for d in dirs {
        let procs = d.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string()).map_err(|e| {
            format!(
                "adding pid {pid} to cgroups: {}: {}",
                procs.display(),
                crate::kernel::sys::os_error(&e)
            )
        })?;
    }
    Ok(())
}

/// The directories a process of `exec --cgroup SUB...` joins: for each of the
/// container's directories, the sub-cgroup given for its hierarchy's controllers
/// (`CONTROLLERS:PATH`, controllers comma-separated) or for all (`PATH` alone, the only
/// one then), as runc reads them; a path that leaves the container's cgroup or a
/// controller this host does not have is refused. A missing sub-cgroup fails at
/// [`enter`] (they are the container's to make).
pub fn sub_cgroups(dirs: &[PathBuf], subs: &[String]) -> Result<Vec<PathBuf>, String> {
    if subs.is_empty() {
        return Ok(dirs.to_vec());
    }
    let mut map: Vec<(Option<&str>, &str)> = Vec::new();
    for c in subs {
        let parts: Vec<&str> = c.splitn(3, ':').collect();
        match parts[..] {
            [path] if subs.len() == 1 => map.push((None, path)),
            [_] => {
                return Err(format!(
                    "invalid --cgroup argument: {c} (missing <controller>: prefix)"
                ))
            }
            [ctrls, path] => map.extend(ctrls.split(',').map(|k| (Some(k), path))),
            _ => return Err(format!("invalid --cgroup argument: {c}")),
        }
    }
    let hs = hierarchies();
    for (k, _) in &map {
        if let Some(k) = k {
            if !hs.iter().any(|h| h.controllers.iter().any(|c| c == k)) {
                return Err(format!("--cgroup: unknown controller {k:?}"));
            }
        }
    }
    let mut out = Vec::new();
    for d in dirs {
        let ctrls = hs
            .iter()
            .find(|h| d.starts_with(&h.mount))
            .map(|h| h.controllers.clone())
            .unwrap_or_default();
        let sub = map
            .iter()
            .find(|(k, _)| match k {
                None => true,
                Some(k) => ctrls.iter().any(|c| c == k),
            })
            .map(|(_, p)| *p);
        let Some(sub) = sub else {
            out.push(d.clone());
            continue;
        };
        // lexically, as Go's filepath.Join cleans it
        let mut joined = d.clone();
        for c in Path::new(sub).components() {
            match c {
                std::path::Component::Normal(n) => joined.push(n),
                std::path::Component::ParentDir => {
                    joined.pop();
                }
                _ => {}
            }
        }
        if !joined.starts_with(d) {
            return Err(format!("--cgroup: {sub} is not a sub cgroup path"));
        }
        out.push(joined);
    }
    Ok(out)
}

/// The pids in the container's cgroup (its first directory).
pub fn pids(dirs: &[PathBuf]) -> Vec<libc::pid_t> {
    let Some(d) = dirs.iter().find(|d| d.join("cgroup.procs").exists()) else {
        return Vec::new();
    };
    std::fs::read_to_string(d.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The pids in the container's cgroup and every cgroup below it (its first
/// directory): what `ps`, `kill --all` and `delete` reach.
pub fn all_pids(dirs: &[PathBuf]) -> Vec<libc::pid_t> {
    let Some(d) = dirs.iter().find(|d| d.join("cgroup.procs").exists()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut todo = vec![d.clone()];
    while let Some(d) = todo.pop() {
        out.extend(
            std::fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse::<libc::pid_t>().ok()),
        );
        if let Ok(rd) = std::fs::read_dir(&d) {
            // cgroupfs holds no symlinks: directories are the sub-cgroups
            todo.extend(
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The freezer's directory, if the container has one.
pub fn freezer(dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter()
        .find(|d| d.join("freezer.state").exists() || d.join("cgroup.freeze").exists())
        .cloned()
}

/// Freeze or thaw.
pub fn freeze(dirs: &[PathBuf], frozen: bool) -> Result<(), String> {
    let d = freezer(dirs).ok_or("this container has no freezer cgroup: pause is not possible")?;
    let (file, v) = if d.join("freezer.state").exists() {
        ("freezer.state", if frozen { "FROZEN" } else { "THAWED" })
    } else {
        ("cgroup.freeze", if frozen { "1" } else { "0" })
    };
    std::fs::write(d.join(file), v)
        .map_err(|e| format!("writing {v} to {}: {e}", d.join(file).display()))?;
    if frozen && file == "freezer.state" {
        for _ in 0..1000 {
            let s = std::fs::read_to_string(d.join(file)).unwrap_or_default();
            if s.trim() == "FROZEN" {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    Ok(())
}

pub fn is_frozen(dirs: &[PathBuf]) -> bool {
    freezer(dirs).is_some_and(|d| {
        let s = std::fs::read_to_string(d.join("freezer.state"))
            .or_else(|_| std::fs::read_to_string(d.join("cgroup.freeze")))
            .unwrap_or_default();
        matches!(s.trim(), "FROZEN" | "1")
    })
}

/// Remove the directories (empty by now) and the cgroups made below them; a few tries
/// each while the kernel lets go.
pub fn remove(dirs: &[PathBuf]) {
    let roots: Vec<PathBuf> = hierarchies().into_iter().map(|h| h.mount).collect();
    for d in dirs {
        if roots.contains(d) {
            // a container in a hierarchy's root (cgroupsPath "/") removes nothing
            continue;
        }
        // deepest first: a cgroup is removed only once its children are
        let mut all = vec![d.clone()];
        let mut i = 0;
        while i < all.len() {
            if let Ok(rd) = std::fs::read_dir(&all[i]) {
                all.extend(
                    rd.flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
            i += 1;
        }
        for d in all.iter().rev() {
            for _ in 0..50 {
                match std::fs::remove_dir(d) {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(std::time::Duration::from_millis(2))
                    }
                    _ => break,
                }
            }
        }
    }
}

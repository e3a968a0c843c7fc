//! The container's cgroups as its plan has them ([`crate::plan::container::CgroupPlan`]:
//! the path, with `--systemd-cgroup`'s `slice:prefix:name` expanded, and the limits): one
//! directory per v1 hierarchy mounted on this host (or the one v2 directory on a unified
//! host), made directly in cgroupfs (no systemd unit is created), the limits written
//! before the container's init runs, the init moved in, and their removal at `delete`.
//! The host's layout ([`unified`], [`hierarchies`]) is a fact the plan is made from.

use super::spec::{DeviceRule, Resources};
use crate::plan::container::CgroupPlan;
pub use crate::plan::container::Hierarchy;
pub use resources::Limits;
use std::path::{Path, PathBuf};

mod resources;

/// Is this host's `/sys/fs/cgroup` the unified (v2) hierarchy?
pub fn unified() -> bool {
    // SAFETY: statfs into a zeroed struct.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        libc::statfs(c"/sys/fs/cgroup".as_ptr(), &mut s) == 0 && s.f_type == 0x6367_7270
    }
}

/// The v1 hierarchies mounted here (from mountinfo), or the v2 root.
pub fn hierarchies() -> Vec<Hierarchy> {
    if unified() {
        return vec![Hierarchy {
            mount: "/sys/fs/cgroup".into(),
            controllers: vec![],
        }];
    }
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out = Vec::new();
    for line in info.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mut r = right.split_whitespace();
        if r.next() != Some("cgroup") {
            continue;
        }
        let opts = r.nth(1).unwrap_or("");
        let mount = left.split_whitespace().nth(4).unwrap_or("");
        let controllers: Vec<String> = opts
            .split(',')
            .filter(|o| {
                *o != "rw"
                    && *o != "ro"
                    && !o.starts_with("release_agent")
                    && *o != "clone_children"
                    && *o != "noprefix"
            })
            .map(String::from)
            .collect();
        if !mount.is_empty() {
            out.push(Hierarchy {
                mount: mount.into(),
                controllers,
            });
        }
    }
    out
}

/// The container's directories of `plan`, made, with its resources written. None (and
/// the reason, for the log) when the plan lets the container run without them and the
/// runtime may not make them (rootless).
pub fn setup(plan: &CgroupPlan) -> Result<(Vec<PathBuf>, Option<String>), String> {
    let rel = &plan.rel;
    let mut dirs = Vec::new();
    for h in &plan.hierarchies {
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
        write_resources(h, &dir, &plan.resources)?;
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

/// config.json's `linux.resources` as the limits to write (an absent value: none).
pub fn limits_of(r: &Resources) -> Limits {
    let m = r.memory.clone().unwrap_or_default();
    let c = r.cpu.clone().unwrap_or_default();
    Limits {
        memory: m.limit.unwrap_or(0),
        memory_reservation: m.reservation.unwrap_or(0),
        memory_swap: m.swap.unwrap_or(0),
        cpu_shares: c.shares.unwrap_or(0),
        cpu_quota: c.quota.unwrap_or(0),
        cpu_period: c.period.unwrap_or(0),
        cpu_rt_runtime: 0,
        cpu_rt_period: 0,
        cpuset_cpus: c.cpus.unwrap_or_default(),
        cpuset_mems: c.mems.unwrap_or_default(),
        // a pids limit of 0 in config.json is none
        pids: r
            .pids
            .as_ref()
            .map_or(0, |p| if p.limit > 0 { p.limit } else { -1 }),
    }
}

/// The hierarchy of one of the container's directories (by its mount), and whether it
/// is the v2 one.
fn dir_kind<'a>(h: &'a Hierarchy) -> resources::Dir<'a> {
    resources::Dir {
        controllers: &h.controllers,
        v2: h.controllers.is_empty() && unified(),
    }
}

fn write_resources(h: &Hierarchy, dir: &Path, r: &Resources) -> Result<(), String> {
    resources::apply(&dir_kind(h), &mut resources::Real(dir), &limits_of(r))
        .map_err(|e| format!("{e} (in {})", dir.display()))?;
    if h.controllers.iter().any(|x| x == "devices") && !r.devices.is_empty() {
        for rule in device_rules(&r.devices) {
            let (file, line) = rule;
            write(dir, file, &line, "devices")?;
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

/// The devices cgroup's lines: the bundle's rules, then the devices every container gets
/// (as runc allows them: null zero full random urandom tty console ptmx, pts).
pub fn device_rules(rules: &[DeviceRule]) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for r in rules {
        let file = if r.allow {
            "devices.allow"
        } else {
            "devices.deny"
        };
        let t = r.typ.as_deref().unwrap_or("a");
        let n = |v: Option<i64>| {
            v.filter(|v| *v >= 0)
                .map_or("*".to_string(), |v| v.to_string())
        };
        let access = r.access.as_deref().unwrap_or("rwm");
        if t == "a" {
            out.push((file, "a".to_string()));
        } else {
            out.push((file, format!("{t} {}:{} {access}", n(r.major), n(r.minor))));
        }
    }
    for d in [
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
    ] {
        out.push(("devices.allow", d.to_string()));
    }
    out
}

/// Move `pid` into each directory.
pub fn enter(dirs: &[PathBuf], pid: libc::pid_t) -> Result<(), String> {
    for d in dirs {
        let procs = d.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string()).map_err(|e| {
            format!(
                "adding pid {pid} to cgroups: {}: {}",
                procs.display(),
                super::os_error(&e)
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

/// The cgroup of this process in hierarchy `h` (from `/proc/self/cgroup`), relative to
/// the hierarchy's root.
pub fn own_path(h: &Hierarchy) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let want: Vec<&str> = h.controllers.iter().map(String::as_str).collect();
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
        let mut have: Vec<&str> = ctl.split(',').filter(|c| !c.is_empty()).collect();
        let mut w = want.clone();
        have.sort_unstable();
        w.sort_unstable();
        (have == w).then(|| PathBuf::from(path.trim_start_matches('/')))
    })
}

/// A container run without cgroups of its own (rootless): its `cgroup` mounts show the
/// cgroups it is in, the runtime's (as runc's), instead of the ones not made.
pub fn without_own(plan: &mut crate::plan::container::ContainerPlan) {
    use crate::plan::container::MountKind;
    let (rel, hs) = (plan.cgroup.rel.clone(), plan.cgroup.hierarchies.clone());
    for m in &mut plan.mounts {
        let MountKind::CgroupV1 { binds, .. } = &mut m.kind else {
            continue;
        };
        for (host, _) in binds.iter_mut() {
            for h in &hs {
                let at = Path::new("/oldroot").join(h.mount.strip_prefix("/").unwrap_or(&h.mount));
                if *host == at.join(&rel) {
                    if let Some(own) = own_path(h) {
                        *host = at.join(own);
                    }
                }
            }
        }
    }
}

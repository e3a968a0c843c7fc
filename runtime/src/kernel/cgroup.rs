//! Control groups, for both front ends: the host's layout read once ([`hierarchy`]),
//! the limits of an OCI bundle written as runc writes them ([`resources`]), a
//! container's groups ([`container`], capsule-runc's), and here the groups of
//! `capsule exec --memory SIZE --pids N --cpus N`.
//!
//! `capsule exec`'s groups: one cgroup per exec, made
//! before the sandbox's init exists and entered by it before the command is forked, so
//! that the command and everything it starts are held by the limits from their first
//! instruction; removed when the exec is over.
//!
//! Where the cgroup goes, per controller:
//! - **cgroup v1** (a hierarchy per controller, e.g. `/sys/fs/cgroup/memory`): under the
//!   caller's own cgroup of that hierarchy (`/proc/self/cgroup`), in `capsule/`; so every
//!   limit the caller is held by still holds. Needs write access there: root, or an
//!   operator who was given the folder.
//! - **cgroup v2** (one unified hierarchy with the controller enabled): in `capsule/` next
//!   to the caller's own cgroup (a process may sit only in a leaf, so not under it): the
//!   parent must enable the controller for its children and be writable by the caller, as
//!   systemd's user manager makes a user's delegated subtree; as root in the root cgroup,
//!   in the root itself.
//!
//! A cgroup that cannot be made is an error ([`CgroupError`]): the caller decides whether
//! the exec may run without the limit (only with weaker isolation accepted) or nothing
//! runs. An exec served by a warm spare runs in the spare's own groups, named
//! `warm-<random>-<tag of their limits>` ([`SpareCgroups`]), as they are. Otherwise the
//! per-exec cgroup is `exec-<capsule's pid>`, removed when the exec is done if
//! it is empty by then; a warm spare's init lingers in it until capsule has exited, so
//! those (empty) groups are removed by the next exec with limits ([`claim`]). Making a
//! memory cgroup costs ~0.5 ms: each exec with limits leaves its groups as spares for the
//! next one, renamed when it is done ([`ExecCgroups::make_spares`]).

use crate::limits::{show_size, Limits};
use hierarchy::read_proc;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};

pub mod container;
pub mod hierarchy;
pub mod resources;
mod spares;
pub use hierarchy::{hierarchies, own_path, unified, Hierarchy};
pub use spares::{enter_warm, SpareCgroups};
#[cfg(test)]
mod v2_tests;

/// A limit asked for could not be enforced.
#[derive(Debug, thiserror::Error)]
#[error("{flag} cannot be enforced here: {why}")]
pub struct CgroupError {
    pub flag: &'static str,
    pub why: String,
}

/// The kind of hierarchy a cgroup is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Version {
    V1,
    V2,
}

/// One exec's cgroup in one hierarchy.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Group {
    pub version: Version,
    /// Controllers this group enforces here (`memory`, `pids`).
    pub controllers: Vec<&'static str>,
    pub dir: PathBuf,
    /// A warm spare's own group, taken as it is: its holder hands it on (or removes it)
    /// once the spare has ended, so this exec neither renames nor removes it.
    #[serde(skip)]
    pub adopted: bool,
    /// The group's event counters when this exec claimed it (`oom_kill`, pids' `max`):
    /// a group is used again by later execs, and what this one reached is the difference.
    #[serde(skip)]
    pub before: Vec<(&'static str, u64)>,
}

impl Group {
    /// [`Group::before`] of `c` (0: none).
    fn seen(&self, c: &str) -> u64 {
        self.before
            .iter()
            .find(|(k, _)| *k == c)
            .map_or(0, |(_, n)| *n)
    }
}

/// The event counter of controller `c` in group `dir`: OOM kills for `memory`, refused
/// forks for `pids` (`None` for others, or unreadable).
fn event_count(version: Version, dir: &Path, c: &str) -> Option<u64> {
    let (file, key) = match (version, c) {
        (Version::V1, "memory") => ("memory.oom_control", "oom_kill"),
        (Version::V2, "memory") => ("memory.events", "oom_kill"),
        (_, "pids") => ("pids.events", "max"),
        _ => return None,
    };
    Some(counter(&dir.join(file), key))
}

/// The cgroups of capsule's own default limits as the executor found them
/// ([`crate::linux::ExecPlan::cgroups_found_here`]): the groups the sandbox ran in, or why
/// there were none (the exec then ran without those limits).
#[derive(Debug, Clone, Default)]
pub struct Found {
    pub groups: Vec<Group>,
    pub not_enforced: Option<String>,
}

/// A warm spare's own `groups`, made fit for `limits`: written where the group's name does
/// not carry their tag (its holder made them for other values; see
/// [`spares::limits_tag`]), else nothing at all.
pub fn fit(groups: &[Group], limits: &Limits) -> io::Result<()> {
    let tag = format!("-{}", spares::limits_tag(limits));
    for g in groups {
        let tagged = g
            .dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(&tag));
        if !tagged {
            apply(limits, g).map_err(|e| io::Error::other(e.to_string()))?;
        }
    }
    Ok(())
}

/// The cgroups of one exec (one per v1 hierarchy, or one v2 group); removed on drop.
#[derive(Debug, Default)]
pub struct ExecCgroups {
    pub groups: Vec<Group>,
    limits: Limits,
}

/// The mount points of the cgroup hierarchies: (v1 controller or `""` for v2, mount dir).
fn mounts() -> Vec<(String, PathBuf)> {
    parse_mounts(&read_proc("/proc/self/mountinfo"))
}

/// The controllers an exec's limits are held by.
const LIMITED: &[&str] = &["memory", "pids", "cpu"];

/// [`mounts`] from the text of a `mountinfo` ([`hierarchy::parse_hierarchies`]).
fn parse_mounts(text: &str) -> Vec<(String, PathBuf)> {
    let mut v = Vec::new();
    for h in hierarchy::parse_hierarchies(text) {
        if h.controllers.is_empty() {
            v.push((String::new(), h.mount));
            continue;
        }
        for c in h
            .controllers
            .iter()
            .filter(|c| LIMITED.contains(&c.as_str()))
        {
            v.push((c.clone(), h.mount.clone()));
        }
    }
    v
}

/// This process's cgroup path per v1 controller (`memory`, `pids`) and for v2 (`""`).
fn own_paths() -> Vec<(String, String)> {
    parse_own(&read_proc("/proc/self/cgroup"))
}

/// [`own_paths`] from the text of a `/proc/<pid>/cgroup` ([`hierarchy::parse_own`]).
fn parse_own(text: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for (ctrls, path) in hierarchy::parse_own(text) {
        if ctrls.is_empty() {
            v.push((String::new(), path.to_string()));
        }
        for c in ctrls.into_iter().filter(|c| LIMITED.contains(c)) {
            v.push((c.to_string(), path.to_string()));
        }
    }
    v
}

/// `mount` joined with the cgroup path `p` (absolute within the hierarchy).
fn under(mount: &Path, p: &str) -> PathBuf {
    mount.join(p.trim_start_matches('/'))
}

/// Make `dir` (its parent exists); an existing one is fine.
fn mkdir(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// This exec's group `name` in `base`: a spare made ahead of time by an earlier exec
/// ([`ExecCgroups::make_spares`]), renamed (making a memory cgroup costs ~0.5 ms; a
/// rename is one system call and atomic, so two execs never take the same spare), else a
/// new one. On the way, removes the `exec-<pid>` groups whose capsule is gone (empty ones
/// only: the kernel refuses to remove a group with processes).
fn claim(base: &Path, name: &str, sweep: bool) -> io::Result<PathBuf> {
    let dir = base.join(name);
    let mut spares = Vec::new();
    let mut warm = Vec::new();
    if let Ok(d) = std::fs::read_dir(base) {
        for e in d.flatten() {
            let n = e.file_name();
            let Some(n) = n.to_str() else { continue };
            if n.starts_with("spare-") {
                spares.push(e.path());
            } else if !sweep {
                continue;
            } else if n.starts_with("warm-") {
                // a spare's group is made before the spare moves itself in: only one that
                // has been there a while can be a dead holder's
                let old = e.metadata().ok().and_then(|m| {
                    use std::os::unix::fs::MetadataExt;
                    let age = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .ok()?
                        .as_secs() as i64
                        - m.ctime();
                    Some(age > 60)
                });
                if old == Some(true) {
                    warm.push(e.path());
                }
            } else if let Some(pid) = n.strip_prefix("exec-").and_then(|p| p.parse::<i32>().ok()) {
                // SAFETY: signal 0 only checks for existence.
                if unsafe { libc::kill(pid, 0) } != 0 {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
    }
    for s in spares {
        if std::fs::rename(&s, &dir).is_ok() {
            return Ok(dir);
        }
    }
    // none left: the slow way, and a sweep of the spares' groups of holders that ended
    // without removing them (a group with a process in it stays)
    for w in warm {
        let _ = std::fs::remove_dir(w);
    }
    mkdir(&dir)?;
    Ok(dir)
}

pub(crate) fn flag_of(controller: &str) -> &'static str {
    match controller {
        "memory" => "--memory",
        "cpu" => "--cpus",
        _ => "--pids",
    }
}

/// Write `c`'s limit into `g`.
fn set(limits: &Limits, g: &Group, c: &str) -> Result<(), CgroupError> {
    let quota = |m: u64| (m * CPU_PERIOD_US / 1000).max(1000);
    let (file, value) = match (g.version, c) {
        (Version::V1, "memory") => (
            "memory.limit_in_bytes",
            limits.memory.map(|v| v.to_string()),
        ),
        (Version::V2, "memory") => ("memory.max", limits.memory.map(|v| v.to_string())),
        (Version::V1, "cpu") => (
            "cpu.cfs_quota_us",
            limits.cpus_milli.map(|m| quota(m).to_string()),
        ),
        (Version::V2, "cpu") => (
            "cpu.max",
            limits
                .cpus_milli
                .map(|m| format!("{} {CPU_PERIOD_US}", quota(m))),
        ),
        (_, _) => ("pids.max", limits.pids.map(|v| v.to_string())),
    };
    let Some(v) = value else { return Ok(()) };
    if (g.version, c) == (Version::V1, "cpu") {
        // the period first: the quota is a share of it
        std::fs::write(g.dir.join("cpu.cfs_period_us"), CPU_PERIOD_US.to_string()).map_err(
            |e| CgroupError {
                flag: "--cpus",
                why: format!(
                    "cannot set {} ({e})",
                    g.dir.join("cpu.cfs_period_us").display()
                ),
            },
        )?;
    }
    if (g.version, c) == (Version::V1, "memory") {
        // a group used before has its last exec's memory+swap limit, and v1 refuses a
        // memory limit above it: unlimited first
        let sw = g.dir.join("memory.memsw.limit_in_bytes");
        if sw.exists() {
            let _ = std::fs::write(&sw, "-1");
        }
    }
    let r = std::fs::write(g.dir.join(file), &v).and_then(|_| {
        // no swap beyond the limit either (the file exists only with swap accounting)
        match (g.version, c) {
            (Version::V1, "memory") => {
                let sw = g.dir.join("memory.memsw.limit_in_bytes");
                if sw.exists() {
                    std::fs::write(sw, &v)?;
                }
            }
            (Version::V2, "memory") => {
                let sw = g.dir.join("memory.swap.max");
                if sw.exists() {
                    std::fs::write(sw, "0")?;
                }
            }
            _ => {}
        }
        Ok(())
    });
    r.map_err(|e| CgroupError {
        flag: flag_of(c),
        why: format!("cannot set {} ({e})", g.dir.join(file).display()),
    })
}
/// Write `limits` into `g`: each of its controllers' limit, and (v2, one group for all)
/// no limit for the others, which a group used before may hold.
fn apply(limits: &Limits, g: &Group) -> Result<(), CgroupError> {
    for c in &g.controllers {
        set(limits, g, c)?;
    }
    if g.version == Version::V2 {
        for (c, file) in [
            ("memory", "memory.max"),
            ("pids", "pids.max"),
            ("cpu", "cpu.max"),
        ] {
            if !g.controllers.contains(&c) {
                let _ = std::fs::write(g.dir.join(file), "max");
            }
        }
    }
    Ok(())
}

/// The CFS period the `--cpus` quota is a share of (100 ms, the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

/// Where the groups of one exec are claimed: a `capsule/` folder of one hierarchy and
/// the controllers it gives.
#[derive(Debug, Clone)]
pub struct Base {
    pub version: Version,
    pub controllers: Vec<&'static str>,
    pub dir: PathBuf,
}

/// The `capsule/` folders enforcing `limits`' cgroup limits (none asked: none, nothing
/// read), made if missing; an error when one cannot be.
pub fn bases(limits: &Limits) -> Result<Vec<Base>, CgroupError> {
    let wanted: Vec<&'static str> = [
        ("memory", limits.memory),
        ("pids", limits.pids),
        ("cpu", limits.cpus_milli),
    ]
    .into_iter()
    .filter(|(_, v)| v.is_some())
    .map(|(c, _)| c)
    .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    bases_in(&wanted, &mounts(), &own_paths())
}

/// [`bases`] of the controllers `wanted`, given the cgroup mounts ([`mounts`]) and this
/// process's own groups ([`own_paths`]).
fn bases_in(
    wanted: &[&'static str],
    mounts: &[(String, PathBuf)],
    own: &[(String, String)],
) -> Result<Vec<Base>, CgroupError> {
    let mut v = Vec::new();
    let mut missing = Vec::new();
    // v1 first: a controller bound to a v1 hierarchy is not available in v2
    for c in wanted {
        let m = mounts.iter().find(|(k, _)| k == c);
        let p = own.iter().find(|(k, _)| k == c);
        match (m, p) {
            (Some((_, mount)), Some((_, path))) => {
                let base = under(mount, path).join("capsule");
                mkdir(&base).map_err(|e| CgroupError {
                    flag: flag_of(c),
                    why: format!("cannot make a cgroup in {} ({e})", base.display()),
                })?;
                v.push(Base {
                    version: Version::V1,
                    controllers: vec![c],
                    dir: base,
                });
            }
            _ => missing.push(*c),
        }
    }
    if !missing.is_empty() {
        v.push(v2_base(mounts, own, &missing)?);
    }
    Ok(v)
}

/// The v2 folder of the controllers `wanted` (see the module docs for where), made.
fn v2_base(
    mounts: &[(String, PathBuf)],
    own: &[(String, String)],
    wanted: &[&'static str],
) -> Result<Base, CgroupError> {
    let refuse = |why: String| CgroupError {
        flag: flag_of(wanted[0]),
        why,
    };
    let mount = mounts
        .iter()
        .find(|(k, _)| k.is_empty())
        .map(|(_, m)| m)
        .ok_or_else(|| refuse("no cgroup hierarchy has its controller".into()))?;
    let path = own
        .iter()
        .find(|(k, _)| k.is_empty())
        .map(|(_, p)| p.as_str())
        .unwrap_or("/");
    let mine = under(mount, path);
    // a process sits in a leaf: the group goes next to ours, or in the root
    let parent = if path == "/" {
        mine.clone()
    } else {
        mine.parent().map(Path::to_path_buf).unwrap_or(mine.clone())
    };
    let ctrls = std::fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
    let lacking: Vec<&str> = wanted
        .iter()
        .filter(|c| !ctrls.split_whitespace().any(|x| x == **c))
        .copied()
        .collect();
    if !lacking.is_empty() {
        let avail = std::fs::read_to_string(parent.join("cgroup.controllers")).unwrap_or_default();
        let why = if lacking
            .iter()
            .all(|c| avail.split_whitespace().any(|x| x == *c))
        {
            format!(
                "the {} controller is not delegated to {} (cgroup v2; it is not enabled for its children)",
                lacking.join(" and "),
                parent.display()
            )
        } else {
            format!(
                "no cgroup hierarchy of this machine gives this process the {} controller",
                lacking.join(" and ")
            )
        };
        return Err(CgroupError {
            flag: flag_of(lacking[0]),
            why,
        });
    }
    let base = parent.join("capsule");
    let made = mkdir(&base).and_then(|_| {
        let on: Vec<String> = wanted.iter().map(|c| format!("+{c}")).collect();
        std::fs::write(base.join("cgroup.subtree_control"), on.join(" "))
    });
    match made {
        Ok(()) => Ok(Base {
            version: Version::V2,
            controllers: wanted.to_vec(),
            dir: base,
        }),
        Err(e) => Err(refuse(format!(
            "cannot make a cgroup in {} ({e})",
            base.display()
        ))),
    }
}

impl ExecCgroups {
    /// The cgroups enforcing `limits`' `memory`, `pids` and `cpu` for this exec (none
    /// asked: no cgroup, nothing read), named `exec-<pid>` in each hierarchy's `capsule/`
    /// folder, which must be writable (else an error, and nothing is left behind). The
    /// groups themselves are made only when the exec needs them ([`enter`]): an exec
    /// whose warm spare waits in groups of its own takes those instead ([`enter_warm`]),
    /// and making a memory cgroup costs the kernel ~1-2 ms (and removing it as much).
    pub fn create(limits: &Limits) -> Result<ExecCgroups, CgroupError> {
        let mut me = ExecCgroups {
            groups: Vec::new(),
            limits: *limits,
        };
        let name = format!("exec-{}", std::process::id());
        for base in bases(limits)? {
            if let Err(e) = nix::unistd::access(&base.dir, nix::unistd::AccessFlags::W_OK) {
                return Err(CgroupError {
                    flag: flag_of(base.controllers[0]),
                    why: format!("cannot make a cgroup in {} ({e})", base.dir.display()),
                });
            }
            me.groups.push(Group {
                version: base.version,
                controllers: base.controllers,
                dir: base.dir.join(&name),
                adopted: false,
                before: Vec::new(),
            });
        }
        Ok(me)
    }

    /// Make the groups now (claimed as [`enter`] does) with their limits: for checking
    /// that they can be made ([`probe`]).
    fn make_now(&self) -> Result<(), CgroupError> {
        for g in &self.groups {
            ensure(&g.dir, &self.limits).map_err(|e| CgroupError {
                flag: flag_of(g.controllers[0]),
                why: format!("cannot make a cgroup in {} ({e})", g.dir.display()),
            })?;
        }
        Ok(())
    }

    /// Leave this exec's groups for the next exec (or a prepared root's next spare) to
    /// claim ([`claim`]): each one where no limit was reached is renamed `spare-<pid>`
    /// now (a spare's counters must be those of a new group, so one where a limit was
    /// reached stays, for `Drop` or a later exec's sweep to remove); its limits are
    /// whatever its claimer writes. Making and removing a memory cgroup costs the kernel
    /// ~1-2 ms of CPU each, a rename costs nothing, so an exec with limits makes no cgroup
    /// while spares are left. A warm spare's init may still be in it for a moment (it
    /// lingers until capsule has exited): a claimer does not mind, its own process moves
    /// in beside it. Call when this exec is done, just before capsule exits. Nothing when
    /// this exec used no cgroup.
    pub fn make_spares(mut self) {
        let spare = |g: &Group| {
            g.dir
                .with_file_name(format!("spare-{}", std::process::id()))
        };
        self.groups.retain(|g| {
            let reuse = g
                .controllers
                .iter()
                .all(|k| event_count(g.version, &g.dir, k).unwrap_or(0) <= g.seen(k));
            // a warm spare's group is its holder's to hand on; the others are kept for
            // `Drop` unless they went back to the spares
            !g.adopted && !(reuse && std::fs::rename(&g.dir, spare(g)).is_ok())
        });
    }

    /// The groups the exec ran in instead of its own (`dirs`, one per group, as
    /// [`crate::linux::ExecOutcome::cgroup_dirs`] gives them: a warm spare's): what it
    /// reached is read there, and they are what [`Self::make_spares`] hands on.
    pub fn ran_in(&mut self, dirs: &[PathBuf]) {
        if dirs.len() == self.groups.len() {
            for (g, d) in self.groups.iter_mut().zip(dirs) {
                g.adopted = g.dir != *d;
                g.dir = d.clone();
            }
        }
    }

    /// The groups of an exec whose cgroups were found by the executor itself (capsule's
    /// own default limits: a warm spare's groups, `adopted`, or groups it made), given as
    /// `groups`, holding `limits`.
    pub fn found(groups: Vec<Group>, limits: &Limits) -> ExecCgroups {
        ExecCgroups {
            groups,
            limits: *limits,
        }
    }

    /// The `cgroup.procs` files init (or a warm spare) is written into.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.groups
            .iter()
            .map(|g| g.dir.join("cgroup.procs"))
            .collect()
    }

    /// Which limits were reached, in one line each (`killed: memory limit 64 MiB
    /// reached`; `pids limit 64 reached: 436 process creations refused`).
    pub fn reached(&self) -> Vec<String> {
        let mut v = Vec::new();
        for g in &self.groups {
            for c in &g.controllers {
                match *c {
                    "memory" => {
                        let kills = event_count(g.version, &g.dir, c)
                            .unwrap_or(0)
                            .saturating_sub(g.seen(c));
                        if kills > 0 {
                            if let Some(m) = self.limits.memory {
                                v.push(format!("killed: memory limit {} reached", show_size(m)));
                            }
                        }
                    }
                    _ => {
                        let refused = event_count(g.version, &g.dir, "pids")
                            .unwrap_or(0)
                            .saturating_sub(g.seen("pids"));
                        if refused > 0 {
                            if let Some(n) = self.limits.pids {
                                v.push(format!(
                                    "pids limit {n} reached: {refused} process creations refused"
                                ));
                            }
                        }
                    }
                }
            }
        }
        v
    }

    /// For the record: where each limit is enforced.
    pub fn record(&self) -> serde_json::Value {
        serde_json::to_value(&self.groups).unwrap_or_default()
    }
}

/// Can this process enforce `--memory` and `--pids` here? For each: `Ok(where)` (the
/// hierarchy and folder a group is made in) or why not. Makes a group and removes it
/// again: the only honest test of write access (`capsule isolation`, never on exec).
pub fn probe() -> Vec<(&'static str, Result<String, String>)> {
    let one = |limits: Limits, name: &'static str| {
        let r = ExecCgroups::create(&limits)
            .and_then(|c| c.make_now().map(|_| c))
            .map(|c| {
                c.groups
                    .iter()
                    .map(|g| {
                        let v = match g.version {
                            Version::V1 => "cgroup v1",
                            Version::V2 => "cgroup v2",
                        };
                        let base = g.dir.parent().unwrap_or(&g.dir);
                        format!("{v}, {}", base.display())
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            });
        (name, r.map_err(|e| e.why))
    };
    vec![
        one(
            Limits {
                memory: Some(i64::MAX as u64 & !0xfff),
                ..Limits::default()
            },
            "--memory",
        ),
        one(
            Limits {
                pids: Some(4_194_304),
                ..Limits::default()
            },
            "--pids",
        ),
        one(
            Limits {
                cpus_milli: Some(1_000_000),
                ..Limits::default()
            },
            "--cpus",
        ),
    ]
}

/// The value of `key` in a flat-keyed cgroup file (`key value` lines); 0 if absent.
fn counter(file: &Path, key: &str) -> u64 {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

impl Drop for ExecCgroups {
    fn drop(&mut self) {
        // one try: init may still be on its way out (a warm spare lingers until capsule
        // has exited), and then the next exec's sweep removes the empty group
        for g in self.groups.iter().filter(|g| !g.adopted) {
            let _ = std::fs::remove_dir(&g.dir);
        }
    }
}

/// Move process `pid` into every group of `files` (their `cgroup.procs`), each made
/// first if it is not there yet ([`ensure`]) and given `limits`. Moving another process
/// takes the kernel's global lock of every thread group (an RCU grace period on cgroup
/// v1): only for a warm spare that waits in no group of its own.
pub fn enter(files: &[PathBuf], pid: libc::pid_t, limits: &Limits) -> io::Result<()> {
    for f in files {
        if let Some(dir) = f.parent() {
            ensure(dir, limits)?;
        }
        std::fs::write(f, pid.to_string())
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", f.display())))?;
    }
    Ok(())
}

/// The groups of `files` (their `cgroup.procs`) made when missing and given `limits`, and
/// for each the file a single-threaded process moves itself in by
/// ([`spares::move_self_file`]), opened for writing: the sandbox's init writes `0` to each
/// before it forks anything (see [`move_self`]), so that no global lock is taken on cgroup
/// v1 and capsule waits for no RCU grace period (a move of init by its pid took ~14 ms
/// of every exec that built its root, here).
pub fn open_self_moves(files: &[PathBuf], limits: &Limits) -> io::Result<Vec<OwnedFd>> {
    let mut out = Vec::new();
    for f in files {
        let Some(dir) = f.parent() else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        ensure(dir, limits)?;
        let version = group_at(dir, limits).version;
        let opened = spares::open_move_self(dir, version).map_err(|e| {
            let file = dir.join(spares::move_self_file(version));
            io::Error::new(e.kind(), format!("{}: {e}", file.display()))
        })?;
        out.push(OwnedFd::from(opened));
    }
    Ok(out)
}

/// Move the calling process, single-threaded, into the groups of `files`
/// ([`open_self_moves`]), and close them.
pub fn move_self(files: &[RawFd]) -> io::Result<()> {
    for fd in files {
        super::sys::write_all(*fd, b"0")?;
        super::sys::close(*fd);
    }
    Ok(())
}

/// The group `dir` made when missing (a spare group of an earlier exec renamed, or a new
/// one: see [`claim`]), then given `limits`.
pub(crate) fn ensure(dir: &Path, limits: &Limits) -> io::Result<()> {
    let (Some(base), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str())) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    if std::fs::symlink_metadata(dir).is_err() {
        claim(base, name, true)?;
    }
    apply(limits, &group_at(dir, limits)).map_err(|e| io::Error::other(e.to_string()))
}

/// The group at `dir` as this exec uses it: its hierarchy's version and the controllers
/// of it that `limits` limits.
pub(crate) fn group_at(dir: &Path, limits: &Limits) -> Group {
    let version = if dir.join("cgroup.controllers").exists() {
        Version::V2
    } else {
        Version::V1
    };
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
    Group {
        version,
        controllers,
        dir: dir.to_path_buf(),
        adopted: false,
        before: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_escapes_are_read() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("memory.events");
        std::fs::write(&f, "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n").unwrap();
        assert_eq!(counter(&f, "oom_kill"), 2);
        assert_eq!(counter(&f, "max"), 3);
        assert_eq!(counter(&f, "nothing"), 0);
        assert_eq!(hierarchy::unescape("/sys/fs/a\\040b"), "/sys/fs/a b");
        assert_eq!(hierarchy::unescape("/plain"), "/plain");
    }
}

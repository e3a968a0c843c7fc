//! The container's plan, made in one place: [`container`] turns a bundle's config.json
//! (read into [`config::Spec`], the closed list of fields capsule-runc enforces), the
//! call (`create`'s id, bundle, `--systemd-cgroup`, `--console-socket`: [`Create`]) and a
//! snapshot of the host ([`ContainerFacts`], gathered before by the modules that own each
//! fact: the kernel's Landlock ABI, the cgroup layout, the machine's default limits,
//! AppArmor, capsule-runc's own settings) into the [`ContainerPlan`] capsule-runc's
//! `create` executes: the namespaces to make and to join, the id mappings, the cgroup and
//! its limits (capsule's defaults where the bundle sets none), the mount steps, the
//! devices, the masked and read-only paths, the hooks, the process (user, capabilities,
//! rlimits, environment, working directory) and its confinement (the Landlock writable
//! set derived from the mounts, the compiled seccomp program, the refusal observer's
//! writable set). What cannot be honoured is [`Refused`], naming the field. `exec` plans
//! its process the same way ([`process`], [`confinement`]).
//!
//! It is a pure function: no system call, nothing read or made; the same input gives the
//! same plan. Resolving the rootfs, opening the namespaces to join, every mount and write
//! are the front end's (`crate::ociruntime`), which runs the plan's steps in order.
//!
//! Why not [`crate::linux::ExecPlan`]: an exec's plan is a capsule's policy over the
//! host's own root (system directories bound read-only, the home as a view, masks), and
//! its `MountStep`s are host paths bound at host paths. A container's mounts are the
//! bundle's: any filesystem type with its flags, data and propagation, non-recursive
//! binds, destinations resolved inside a hostile rootfs. So the mount steps are this
//! module's own ([`Mount`]); what fits is shared: the Landlock input is a
//! [`SandboxPolicy`] (built by the same `crate::kernel::landlock` as an exec's) and the
//! default limits are [`crate::limits::Limits`] (`crate::limits::machine_defaults`).

pub mod config;
pub mod disk;
pub mod seccomp;

use crate::kernel::cgroup::resources::Limits;
use capsule_bundle::policy::{NetworkMode, NetworkPolicy, SandboxPolicy};
use config::{check, propagation, DeviceRule, Hooks, IdMapping, Resources, Spec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A value of config.json (or of the call) that cannot be honoured: one line, starting
/// with the field it names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Refused {
    /// The field the refusal names (`linux.resources.unified`, `process.terminal`).
    pub fn field(&self) -> &str {
        let end = self.0.find([' ', ':']).unwrap_or(self.0.len());
        &self.0[..end]
    }
}

impl From<String> for Refused {
    fn from(s: String) -> Refused {
        Refused(s)
    }
}

/// One cgroup hierarchy of the host (the kernel stack reads them).
pub use crate::kernel::cgroup::Hierarchy;

/// What of the host a container's plan depends on (see the module docs), gathered
/// before it by the modules that own each part (`crate::ociruntime`'s `facts::gather`).
#[derive(Debug, Clone, Default)]
pub struct ContainerFacts {
    /// The kernel's Landlock ABI (`crate::kernel::landlock::abi_version`; 0: none).
    pub landlock_abi: u32,
    /// `/sys/fs/cgroup` is the unified (v2) hierarchy.
    pub cgroup_unified: bool,
    /// The cgroup hierarchies mounted on this host (v1), or the v2 root.
    pub hierarchies: Vec<Hierarchy>,
    /// capsule's own limits of this machine (`crate::limits::machine_defaults`); `None`
    /// when capsule-runc's settings leave them out.
    pub default_limits: Option<crate::limits::Limits>,
    /// AppArmor is enabled on this host.
    pub apparmor: bool,
    /// capsule-runc's own settings (its environment).
    pub settings: Settings,
    /// `CAPSULE_OCI_DISK_RESERVE` of capsule-runc's environment ([`disk`]).
    pub disk_reserve: Option<String>,
    /// The runtime runs rootless: as a user other than root, or as root of a user
    /// namespace (rootless Podman's).
    pub rootless: bool,
}

/// capsule-runc's additions to what a bundle asks, each on unless its environment turns
/// it off (`CAPSULE_OCI_LANDLOCK=0`, `CAPSULE_OCI_OBSERVE=0`; the default limits:
/// `CAPSULE_OCI_DEFAULTS=0`, see [`ContainerFacts::default_limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub landlock: bool,
    pub observe: bool,
    /// capsule's own limits and disk reserve where the bundle sets none.
    pub defaults: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            landlock: true,
            observe: true,
            defaults: true,
        }
    }
}

/// The `create` call the plan is for.
#[derive(Debug, Clone)]
pub struct Create<'a> {
    pub id: &'a str,
    /// The bundle's folder (canonical).
    pub bundle: &'a Path,
    pub systemd_cgroup: bool,
    /// A `--console-socket` was given.
    pub console_socket: bool,
}

/// Everything `create` does, decided (see the module docs).
#[derive(Debug, Clone)]
pub struct ContainerPlan {
    /// The rootfs on the host, as config.json names it (relative to the bundle); the
    /// front end resolves it once.
    pub rootfs: PathBuf,
    pub root_readonly: bool,
    pub namespaces: Namespaces,
    pub uid_mappings: Vec<IdMapping>,
    pub gid_mappings: Vec<IdMapping>,
    /// The host ids of the container's root (who opens `exec.fifo`): the ids mapped to 0
    /// with a new user namespace, else 0.
    pub root_ids: (u32, u32),
    pub cgroup: CgroupPlan,
    /// The bundle's mounts, in order.
    pub mounts: Vec<Mount>,
    /// The device nodes, the defaults every container gets first.
    pub devices: Vec<DeviceNode>,
    /// Device nodes are the host's, bound (no `mknod` in a user namespace, the
    /// container's or the one a rootless runtime runs in).
    pub bind_devices: bool,
    /// A terminal: `/dev/console` is made for it.
    pub console: bool,
    pub masked_paths: Vec<PathBuf>,
    pub readonly_paths: Vec<PathBuf>,
    /// `linux.rootfsPropagation` as mount flags.
    pub rootfs_propagation: Option<libc::c_ulong>,
    pub hostname: Option<String>,
    pub domainname: Option<String>,
    /// A new network namespace: its loopback is brought up (as runc does; Podman's
    /// `--network none` counts on it).
    pub loopback_up: bool,
    /// `linux.sysctl`: (key, file under `/proc/sys`, value).
    pub sysctl: Vec<(String, String, String)>,
    pub hooks: Option<Hooks>,
    pub annotations: BTreeMap<String, String>,
    pub process: ProcessPlan,
    pub confine: Confinement,
    /// The writable set the refusal observer judges writes by; `None`: no observer
    /// (capsule-runc's settings leave it out, or the bundle has no seccomp filter: the
    /// observer's is one, and an unconfined container gets none).
    pub observe: Option<Watch>,
    /// What the disk guard keeps free and watches.
    pub disk: disk::DiskPlan,
}

/// The namespaces: new ones by clone flags, given ones joined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Namespaces {
    /// Clone flags of the new namespaces.
    pub new: libc::c_int,
    /// The namespaces to join, a user namespace first.
    pub join: Vec<Join>,
    /// The container has a user namespace (new or joined).
    pub userns: bool,
}

/// A namespace to join: its kind (config.json's name), clone flag and path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Join {
    pub typ: String,
    pub flag: libc::c_int,
    pub path: PathBuf,
}

/// The container's cgroups.
#[derive(Debug, Clone)]
pub struct CgroupPlan {
    /// The path relative to each hierarchy's root.
    pub rel: PathBuf,
    /// The hierarchies to make it in.
    pub hierarchies: Vec<Hierarchy>,
    /// The limits to write: the bundle's, with capsule's defaults where it sets none.
    pub resources: Resources,
    /// What capsule's defaults added (`memory=…`, `pids=…`).
    pub defaults: Vec<String>,
    /// The container may run without its cgroups when the runtime may not make them:
    /// a rootless runtime (as runc) whose bundle asks no limit of its own (the devices
    /// rules aside: a user namespace holds no device of the host's). Then capsule's
    /// defaults are not applied, and `create` says so in the log.
    pub optional: bool,
}

impl CgroupPlan {
    /// The limits to write, as the kernel stack takes them.
    pub fn limits(&self) -> Limits {
        limits_of(&self.resources)
    }

    /// The devices cgroup's lines.
    pub fn device_lines(&self) -> Vec<(&'static str, String)> {
        device_rules(&self.resources.devices)
    }
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
    for d in crate::kernel::cgroup::container::DEFAULT_DEVICES {
        out.push(("devices.allow", d.to_string()));
    }
    out
}

/// A container run without cgroups of its own (rootless): its `cgroup` mounts show the
/// cgroups it is in, the runtime's (as runc's, `own_path` of each hierarchy), instead of
/// the ones not made.
pub fn without_own(plan: &mut ContainerPlan, own_path: impl Fn(&Hierarchy) -> Option<PathBuf>) {
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

/// The mount steps and device nodes of a container's root, as the kernel stack takes
/// them.
pub use crate::kernel::mount::container::{DeviceNode, Mount, MountKind};

/// The devices every container gets (runtime spec: default devices), then the bundle's.
pub const DEFAULT_DEVICES: &[(&str, u32, u32)] = &[
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

/// A container process (the init's, or one `exec` runs), decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessPlan {
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub cwd: String,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub umask: Option<u32>,
    pub caps: CapSets,
    pub no_new_privs: bool,
    /// (resource, config.json's name, soft, hard).
    pub rlimits: Vec<(libc::__rlimit_resource_t, String, u64, u64)>,
    pub oom_score_adj: Option<i32>,
    /// The AppArmor profile to run it under.
    pub apparmor: Option<String>,
    pub terminal: bool,
    /// (height, width).
    pub console_size: Option<(u16, u16)>,
    /// `process.env` has no `HOME` (or an empty one): it is the user's home in the
    /// container's `/etc/passwd`, `/` when the user is not there (as runc sets it).
    pub home_from_passwd: bool,
}

/// The capability sets, as bit masks (the kernel stack takes them as they are).
pub use crate::kernel::caps::CapSets;

/// What confines every process of the container beyond its mounts.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// capsule's Landlock layer: the policy its ruleset is built from (the container may
    /// write only where its mounts are writable, and `/dev`); `None`: off, or the kernel
    /// has no Landlock.
    pub landlock: Option<SandboxPolicy>,
    /// The bundle's seccomp filter, compiled.
    pub seccomp: Option<seccomp::Program>,
}

/// A writable set as lists: writable roots and read-only ones inside them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watch {
    pub writable: Vec<PathBuf>,
    pub read_only: Vec<PathBuf>,
}

/// The plan of `create` (see the module docs). No system call.
pub fn container(
    spec: &Spec,
    call: &Create<'_>,
    f: &ContainerFacts,
) -> Result<ContainerPlan, Refused> {
    check(spec)?;
    let l = spec.linux.clone().unwrap_or_default();
    let p = spec
        .process
        .as_ref()
        .ok_or_else(|| Refused("process: missing".into()))?;
    let root = spec
        .root
        .as_ref()
        .ok_or_else(|| Refused("root: missing".into()))?;
    if p.terminal && !call.console_socket {
        return Err(Refused(
            "process.terminal is true but no --console-socket was given".into(),
        ));
    }
    let rootfs = if root.path.is_absolute() {
        root.path.clone()
    } else {
        call.bundle.join(&root.path)
    };
    let namespaces = namespaces(&l.namespaces);
    let host = |m: &[IdMapping]| {
        m.iter()
            .find(|m| m.container_id == 0)
            .map(|m| m.host_id)
            .unwrap_or(0)
    };
    let rel = relative_path(l.cgroups_path.as_deref(), call.id, call.systemd_cgroup)?;
    let cgroup = cgroup_plan(rel, l.resources.as_ref(), f)?;
    let mounts = spec
        .mounts
        .iter()
        .enumerate()
        .map(|(i, m)| mount(i, m, &cgroup.rel, f))
        .collect();
    let mut devices: Vec<DeviceNode> = DEFAULT_DEVICES
        .iter()
        .map(|(n, major, minor)| DeviceNode {
            what: format!("creating /dev/{n}"),
            path: Path::new("/dev").join(n),
            typ: "c".into(),
            major: *major,
            minor: *minor,
            mode: 0o666,
            owner: None,
        })
        .collect();
    for (i, d) in l.devices.iter().enumerate() {
        devices.push(DeviceNode {
            what: format!("linux.devices[{i}] ({})", d.path.display()),
            path: d.path.clone(),
            typ: d.typ.clone(),
            major: d.major as u32,
            minor: d.minor as u32,
            mode: d.file_mode.unwrap_or(0o666),
            owner: d.uid.zip(d.gid).or(d.uid.map(|u| (u, 0))),
        });
    }
    let sysctl = l
        .sysctl
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                format!("/proc/sys/{}", k.replace('.', "/")),
                v.clone(),
            )
        })
        .collect();
    // the observer stacks a seccomp filter of its own: only on a container the bundle
    // confines with seccomp already (Docker's `seccomp=unconfined`, Podman's and
    // crictl's `unconfined` get no filter of capsule's, as under runc)
    let bundle_seccomp = l.seccomp.is_some();
    let observe = (f.settings.observe && bundle_seccomp).then(|| watch(spec));
    Ok(ContainerPlan {
        rootfs,
        root_readonly: root.readonly,
        root_ids: (host(&l.uid_mappings), host(&l.gid_mappings)),
        uid_mappings: l.uid_mappings.clone(),
        gid_mappings: l.gid_mappings.clone(),
        // no mknod in a user namespace, the container's or the runtime's own (rootless)
        bind_devices: namespaces.userns || f.rootless,
        loopback_up: namespaces.new & libc::CLONE_NEWNET != 0,
        namespaces,
        cgroup,
        mounts,
        devices,
        console: p.terminal,
        masked_paths: l.masked_paths.clone(),
        readonly_paths: l.readonly_paths.clone(),
        rootfs_propagation: l.rootfs_propagation.as_deref().and_then(propagation),
        hostname: spec.hostname.clone(),
        domainname: spec.domainname.clone(),
        sysctl,
        hooks: spec.hooks.clone(),
        annotations: spec.annotations.clone(),
        process: process(p, f)?,
        confine: confinement(spec, f)?,
        observe,
        disk: disk::disk(spec, f)?,
    })
}

/// New namespaces by flag, given ones to join (a user namespace first).
fn namespaces(list: &[config::Namespace]) -> Namespaces {
    let mut ns = Namespaces::default();
    for n in list {
        let flag = config::NAMESPACES
            .iter()
            .find(|(k, _)| *k == n.typ)
            .map(|(_, f)| *f)
            .unwrap_or(0);
        match &n.path {
            None => ns.new |= flag,
            Some(path) => ns.join.push(Join {
                typ: n.typ.clone(),
                flag,
                path: path.clone(),
            }),
        }
    }
    ns.join.sort_by_key(|j| j.flag != libc::CLONE_NEWUSER);
    ns.userns =
        ns.new & libc::CLONE_NEWUSER != 0 || ns.join.iter().any(|j| j.flag == libc::CLONE_NEWUSER);
    ns
}

/// The cgroup path (relative to each hierarchy's root) of `cgroups_path` for container
/// `id`. `--systemd-cgroup` paths (`slice:prefix:name`) are expanded the way systemd
/// names them.
pub fn relative_path(
    cgroups_path: Option<&str>,
    id: &str,
    systemd: bool,
) -> Result<PathBuf, Refused> {
    let p = cgroups_path.unwrap_or("");
    let rel = if systemd {
        // slice:prefix:name
        let parts: Vec<&str> = if p.is_empty() {
            vec!["system.slice", "capsule", id]
        } else {
            p.split(':').collect()
        };
        if parts.len() != 3 {
            return Err(Refused(format!(
                "linux.cgroupsPath {p:?}: --systemd-cgroup expects slice:prefix:name"
            )));
        }
        let slice = if parts[0].is_empty() {
            "system.slice"
        } else {
            parts[0]
        };
        let mut path = PathBuf::new();
        if slice != "-.slice" {
            // a-b-c.slice lives in a.slice/a-b.slice/a-b-c.slice
            let stem = slice
                .strip_suffix(".slice")
                .ok_or_else(|| Refused(format!("linux.cgroupsPath: {slice:?} is not a slice")))?;
            let mut acc = String::new();
            for part in stem.split('-') {
                if !acc.is_empty() {
                    acc.push('-');
                }
                acc.push_str(part);
                path.push(format!("{acc}.slice"));
            }
        }
        path.push(format!("{}-{}.scope", parts[1], parts[2]));
        path
    } else if p.is_empty() {
        PathBuf::from("capsule-runc").join(id)
    } else {
        PathBuf::from(p.trim_start_matches('/'))
    };
    if rel
        .components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(Refused(format!(
            "linux.cgroupsPath {p:?}: must not climb out of the hierarchy"
        )));
    }
    Ok(rel)
}

/// The cgroup's limits: capsule's own ([`ContainerFacts::default_limits`]: memory,
/// processes) where the bundle's `linux.resources` sets none (an explicit value, `-1`
/// for no limit included, stands), on the controllers this host has; what the host
/// cannot hold refused.
fn cgroup_plan(
    rel: PathBuf,
    asked: Option<&Resources>,
    f: &ContainerFacts,
) -> Result<CgroupPlan, Refused> {
    let has = |c: &str| {
        f.hierarchies.iter().any(|h| {
            h.controllers.iter().any(|x| x == c) || (h.controllers.is_empty() && f.cgroup_unified)
        })
    };
    let mut r = asked.cloned().unwrap_or_default();
    let asks_limits = r.memory.is_some()
        || r.cpu.is_some()
        || r.pids.is_some()
        || r.block_io
            .as_ref()
            .is_some_and(|b| b.weight.is_some_and(|w| w != 0))
        || !r.hugepage_limits.is_empty()
        || !r.unified.is_empty();
    let mut defaults = Vec::new();
    if let Some(own) = &f.default_limits {
        if let Some(m) = own.memory.filter(|_| has("memory")) {
            let mem = r.memory.get_or_insert_with(Default::default);
            if mem.limit.is_none() {
                mem.limit = Some(m as i64);
                defaults.push(format!("memory={m}"));
            }
        }
        if let Some(n) = own.pids.filter(|_| has("pids")) {
            if r.pids.is_none() {
                r.pids = Some(config::Pids { limit: n as i64 });
                defaults.push(format!("pids={n}"));
            }
        }
    }
    if !r.unified.is_empty() {
        // the unified files are not written by this version, v2 host or not
        return Err(Refused("linux.resources.unified: not supported".into()));
    }
    if r.memory.as_ref().is_some_and(|m| m.limit.is_some()) && !has("memory") {
        return Err(Refused(
            "linux.resources.memory: no memory controller on this host".into(),
        ));
    }
    Ok(CgroupPlan {
        rel,
        hierarchies: f.hierarchies.clone(),
        resources: r,
        defaults,
        optional: f.rootless && !asks_limits,
    })
}

/// Flags set, flags cleared and the filesystem's data of a mount's options (propagation
/// options are the mount's `propagation`).
pub fn options(opts: &[String]) -> (libc::c_ulong, libc::c_ulong, String) {
    let (mut set, mut clear, mut data) = (0, 0, Vec::new());
    for o in opts {
        match config::mount_flag(o) {
            Some((true, f)) => set |= f,
            Some((false, f)) => clear |= f,
            None if propagation(o).is_some() || o == "tmpcopyup" => {}
            None => data.push(o.as_str()),
        }
    }
    (set, clear, data.join(","))
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// Mount `i` of config.json as a step.
fn mount(i: usize, m: &config::Mount, cgroup_rel: &Path, f: &ContainerFacts) -> Mount {
    let typ = m.typ.as_deref().unwrap_or("");
    let what = format!(
        "mounts[{i}] ({} at {})",
        if typ.is_empty() { "bind" } else { typ },
        m.destination.display()
    );
    let (set, _clear, data) = options(&m.options);
    let bind = set & libc::MS_BIND != 0 || typ == "bind";
    let ro = m.options.iter().any(|o| o == "ro");
    let kind = if typ == "cgroup" && !bind {
        if f.cgroup_unified {
            MountKind::Cgroup2 { ro }
        } else {
            let binds = f
                .hierarchies
                .iter()
                .filter_map(|h| {
                    let name = h.mount.file_name()?;
                    let host = Path::new("/oldroot")
                        .join(h.mount.strip_prefix("/").unwrap_or(&h.mount))
                        .join(cgroup_rel);
                    Some((host, m.destination.join(name)))
                })
                .collect();
            MountKind::CgroupV1 { ro, binds }
        }
    } else if bind {
        let mut attrs = 0;
        for (flag, attr) in [
            (libc::MS_RDONLY, MOUNT_ATTR_RDONLY),
            (libc::MS_NOSUID, MOUNT_ATTR_NOSUID),
            (libc::MS_NODEV, MOUNT_ATTR_NODEV),
            (libc::MS_NOEXEC, MOUNT_ATTR_NOEXEC),
        ] {
            if set & flag != 0 {
                attrs |= attr;
            }
        }
        MountKind::Bind {
            src: m.source.clone().unwrap_or_default(),
            recursive: set & libc::MS_REC != 0,
            attrs,
        }
    } else {
        MountKind::Fs {
            typ: typ.to_string(),
            src: m.source.clone().unwrap_or_else(|| PathBuf::from(typ)),
            flags: set & !libc::MS_REC,
            data,
            copy_up: m.options.iter().any(|o| o == "tmpcopyup"),
        }
    };
    Mount {
        what,
        dst: m.destination.clone(),
        kind,
        propagation: m.options.iter().filter_map(|o| propagation(o)).collect(),
    }
}

fn caps_mask(set: &str, names: &[String]) -> Result<u64, Refused> {
    let mut m = 0u64;
    for n in names {
        let c = n.parse::<caps::Capability>().map_err(|_| {
            Refused(format!(
                "process.capabilities.{set}: unknown capability {n:?}"
            ))
        })?;
        m |= 1u64 << c.index();
    }
    Ok(m)
}

/// The plan of a container process `p` (the init's, or one `exec` runs).
pub fn process(p: &config::Process, f: &ContainerFacts) -> Result<ProcessPlan, Refused> {
    if p.args.is_empty() {
        return Err(Refused("process.args: empty (no command to run)".into()));
    }
    let c = p.capabilities.clone().unwrap_or_default();
    let inheritable = caps_mask("inheritable", &c.inheritable)?;
    let permitted = caps_mask("permitted", &c.permitted)?;
    let caps = CapSets {
        bounding: caps_mask("bounding", &c.bounding)?,
        effective: caps_mask("effective", &c.effective)?,
        permitted,
        inheritable,
        // as runc: an ambient capability is raised only where the kernel allows it, when
        // it is inheritable and permitted as well (runc's default spec lists ambient
        // capabilities without inheritable ones, and runs them without)
        ambient: caps_mask("ambient", &c.ambient)? & inheritable & permitted,
    };
    let mut rlimits = Vec::new();
    for r in &p.rlimits {
        let res = config::rlimit_resource(&r.typ)
            .ok_or_else(|| Refused(format!("process.rlimits: unknown type {:?}", r.typ)))?;
        rlimits.push((res, r.typ.clone(), r.soft, r.hard));
    }
    let apparmor = p.apparmor_profile.clone().filter(|s| !s.is_empty());
    if let Some(profile) = &apparmor {
        if !f.apparmor {
            return Err(Refused(format!(
                "process.apparmorProfile {profile:?}: AppArmor is not enabled on this host"
            )));
        }
    }
    Ok(ProcessPlan {
        args: p.args.clone(),
        env: p.env.clone(),
        cwd: p.cwd.clone(),
        uid: p.user.uid,
        gid: p.user.gid,
        groups: p.user.additional_gids.clone(),
        umask: p.user.umask,
        caps,
        no_new_privs: p.no_new_privileges,
        rlimits,
        oom_score_adj: p.oom_score_adj,
        apparmor,
        terminal: p.terminal,
        console_size: p.console_size.as_ref().map(|s| (s.height, s.width)),
        home_from_passwd: !p
            .env
            .iter()
            .any(|e| e.strip_prefix("HOME=").is_some_and(|h| !h.is_empty())),
    })
}

/// The paths the container may write, as its mounts allow: the root unless
/// `root.readonly`, every mount not read-only but sysfs and cgroup ones.
pub fn writable_set(spec: &Spec) -> Vec<PathBuf> {
    let mut w = Vec::new();
    if !spec.root.as_ref().is_some_and(|r| r.readonly) {
        w.push(PathBuf::from("/"));
    }
    for m in &spec.mounts {
        let ro = m.options.iter().any(|o| o == "ro");
        let typ = m.typ.as_deref().unwrap_or("bind");
        if !ro && !matches!(typ, "sysfs" | "cgroup" | "cgroup2") {
            w.push(m.destination.clone());
        }
    }
    w
}

/// The writable set the refusal observer judges writes by: the writable mounts (and
/// `/dev`), the read-only ones and `linux.readonlyPaths` inside them.
pub fn watch(spec: &Spec) -> Watch {
    let mut writable = writable_set(spec);
    writable.push("/dev".into());
    let mut read_only: Vec<PathBuf> = spec
        .mounts
        .iter()
        .filter(|m| {
            m.options.iter().any(|o| o == "ro")
                || matches!(m.typ.as_deref(), Some("sysfs" | "cgroup" | "cgroup2"))
        })
        .map(|m| m.destination.clone())
        .collect();
    if let Some(l) = &spec.linux {
        read_only.extend(l.readonly_paths.iter().cloned());
    }
    Watch {
        writable,
        read_only,
    }
}

/// The Landlock input of a container: the container may write only where its mounts
/// are writable (the root when `root.readonly` is false, read-write mounts), and `/dev`
/// (its terminal and shared memory; devices are the devices cgroup's), and read
/// everywhere. `None` where capsule-runc's settings leave Landlock out or the kernel
/// has none.
pub fn landlock_policy(spec: &Spec, f: &ContainerFacts) -> Option<SandboxPolicy> {
    if !f.settings.landlock || f.landlock_abi == 0 {
        return None;
    }
    let mut w = writable_set(spec);
    w.push("/dev".into());
    let (workspace, read_only) = match w.first() {
        Some(p) => (p.clone(), vec![]),
        None => (PathBuf::from("/"), vec![PathBuf::from("/")]),
    };
    Some(SandboxPolicy {
        version: 1,
        capsule_name: "oci".into(),
        workspace: workspace.clone(),
        read_only,
        tmp_dir: workspace,
        home: None,
        home_layer: None,
        cache_dir: None,
        writable: w.iter().skip(1).cloned().collect(),
        hidden: vec![],
        revealed: vec![],
        pass_env: vec![],
        devices: vec![],
        network: NetworkPolicy {
            mode: NetworkMode::Open,
            ..Default::default()
        },
    })
}

/// The confinement of every process of the container: capsule's Landlock layer and the
/// bundle's seccomp filter, compiled.
pub fn confinement(spec: &Spec, f: &ContainerFacts) -> Result<Confinement, Refused> {
    let seccomp = match spec.linux.as_ref().and_then(|l| l.seccomp.as_ref()) {
        Some(s) => Some(seccomp::compile(s)?),
        None => None,
    };
    Ok(Confinement {
        landlock: landlock_policy(spec, f),
        seccomp,
    })
}

#[cfg(test)]
mod tests;

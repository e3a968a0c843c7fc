//! The OCI rendering of an [`ExecPlan`]: the `config.json` (OCI runtime spec, via
//! `oci-spec`) that a plain OCI runtime (runc, crun) runs, made from the very plan the
//! Linux executor runs, so the two cannot drift.
//!
//! Every [`MountStep`] becomes an OCI mount in plan order (binds, tmpfs, overlays of the
//! home layer and caches, a fresh proc, a minimal `/dev` whose default device nodes the
//! runtime provides), a mask becomes a `linux.maskedPaths` entry (or, when later steps
//! mount inside it, an in-order tmpfs sealed by `linux.readonlyPaths`), a seal a
//! `readonlyPaths` entry, and the plan's symlinks at the top of the root become entries
//! of the bundle's `rootfs/` ([`Rendered::links`]). `linux.seccomp` is rendered from
//! [`seccomp::rules`], the table capsule's own filter is built from; the foreign-ABI
//! refusal is the architecture list (native only: libseccomp answers calls of any other
//! architecture, i386 and x32 included, with its bad-architecture action, a kill).
//! No capability in any set, `noNewPrivileges`, one id mapping (the caller's own uid and
//! gid as the container's 0, which is what works rootless under runc and crun), the network namespace when the plan has one, the
//! caller's resource limits, and no cgroup path.
//!
//! What OCI cannot express goes in annotations under [`ANNOTATION_PREFIX`]: a plain OCI
//! runtime does not enforce them ([`NOT_ENFORCED`]).

use super::plan::{ExecPlan, Isolation, MountStep};
use crate::kernel::seccomp::{self, ArgCond};
use oci_spec::runtime::{
    Arch, Capabilities, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxIdMappingBuilder,
    LinuxNamespaceBuilder, LinuxNamespaceType, LinuxSeccompAction, LinuxSeccompArgBuilder,
    LinuxSeccompBuilder, LinuxSeccompOperator, LinuxSyscall, LinuxSyscallBuilder, Mount,
    MountBuilder, PosixRlimitBuilder, PosixRlimitType, ProcessBuilder, RootBuilder, Spec,
    UserBuilder,
};
use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// OCI runtime spec version rendered.
/// 1.1.0, not 1.2.0: crun 1.8 (Debian 12) refuses specs of any version it does not know,
/// and nothing rendered here is newer than 1.1.
pub const OCI_VERSION: &str = "1.1.0";

/// Prefix of every annotation capsule writes.
pub const ANNOTATION_PREFIX: &str = "dev.capsule.";

/// What `capsule exec` enforces and a plain OCI runtime does not, in plain words.
pub const NOT_ENFORCED: &[&str] = &[
    "Landlock file-system and network rules (the second wall behind the mounts)",
    "the network allowlist proxy (allowlist mode runs with loopback only)",
    "the home layer's review (writes to the home land in its upper dir, unreviewed)",
    "the home's default deny (what the view would not show is masked as of the export, not absent; what is made later is visible)",
    "the exec record (events.jsonl: what ran, what changed in the workspace)",
    "the guard of the operator's git after the command",
];

/// A rendered plan: the spec, and what the bundle's root directory must hold.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub spec: Spec,
    /// Symlinks `(target, path in the root)` to create in `rootfs/` (e.g. `/bin` ->
    /// `usr/bin` on merged-/usr systems).
    pub links: Vec<(PathBuf, PathBuf)>,
    /// Empty directories to create in `rootfs/`.
    pub dirs: Vec<PathBuf>,
}

/// Why a plan cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("config.json: only full isolation (namespaces) renders as an OCI bundle")]
    NotFull,
    #[error("config.json: {what}: {err}")]
    Build { what: String, err: String },
    #[error("config.json: path {0} cannot be passed as a mount option")]
    UnsafePath(String),
}

fn build_err(what: impl Into<String>) -> impl FnOnce(oci_spec::OciSpecError) -> OciError {
    let what = what.into();
    move |e| OciError::Build {
        what,
        err: e.to_string(),
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// `p` is `root` or below it (plan paths are absolute and normalized).
fn within(p: &Path, root: &Path) -> bool {
    p.starts_with(root)
}

fn mount(typ: &str, src: &Path, dst: &Path, options: &[&str]) -> Result<Mount, OciError> {
    MountBuilder::default()
        .destination(dst.to_path_buf())
        .typ(typ)
        .source(src.to_path_buf())
        .options(options.iter().map(|o| o.to_string()).collect::<Vec<_>>())
        .build()
        .map_err(build_err(format!("mount {}", dst.display())))
}

/// The OCI mounts, masked and read-only paths, and root entries of `steps`.
#[derive(Debug, Default)]
struct Mounts {
    mounts: Vec<Mount>,
    masked: Vec<String>,
    readonly: Vec<String>,
    links: Vec<(PathBuf, PathBuf)>,
    dirs: Vec<PathBuf>,
}

fn push_unique(v: &mut Vec<String>, x: String) {
    if !v.contains(&x) {
        v.push(x);
    }
}

fn render_mounts(steps: &[MountStep]) -> Result<Mounts, OciError> {
    let mut m = Mounts::default();
    for (i, step) in steps.iter().enumerate() {
        match step {
            MountStep::Bind {
                src,
                dst,
                rw,
                optional,
            } => {
                let md = std::fs::metadata(src);
                if md.is_err() && *optional {
                    continue;
                }
                // (a missing required source: the runtime reports it, naming it)
                // recursively read-only for a directory; crun 1.8 cannot apply `rro` to a
                // file, which has no submounts anyway
                let ro = if md.is_ok_and(|m| m.is_dir()) {
                    "rro"
                } else {
                    "ro"
                };
                // device nodes keep their dev semantics, as in the executor's /dev
                let dev = within(dst, Path::new("/dev")) && !within(dst, Path::new("/dev/shm"));
                let mut opts = vec!["rbind", if *rw { "rw" } else { ro }, "nosuid"];
                if !dev {
                    opts.push("nodev");
                }
                m.mounts.push(mount("bind", src, dst, &opts)?);
            }
            MountStep::Tmpfs { dst, mode } => {
                let mode = format!("mode={mode:o}");
                m.mounts.push(mount(
                    "tmpfs",
                    Path::new("tmpfs"),
                    dst,
                    &["nosuid", "nodev", &mode],
                )?);
            }
            // an OCI bind names a host source, so each path gets a tmpfs of that size of
            // its own (`capsule exec`: one for both)
            MountStep::TaskTmp { size, dsts } => {
                let size = format!("size={size}");
                for dst in dsts {
                    m.mounts.push(mount(
                        "tmpfs",
                        Path::new("tmpfs"),
                        dst,
                        &["nosuid", "nodev", "mode=1777", &size],
                    )?);
                }
            }
            MountStep::Overlay {
                lower,
                upper,
                work,
                dst,
            } => {
                for p in lower.iter().chain([upper, work]) {
                    if !super::plan::option_safe(p) {
                        return Err(OciError::UnsafePath(s(p)));
                    }
                }
                let lower: Vec<String> = lower.iter().map(|l| s(l)).collect();
                let lowerdir = format!("lowerdir={}", lower.join(":"));
                let upperdir = format!("upperdir={}", s(upper));
                let workdir = format!("workdir={}", s(work));
                m.mounts.push(mount(
                    "overlay",
                    Path::new("overlay"),
                    dst,
                    &[
                        "nosuid",
                        "nodev",
                        &lowerdir,
                        &upperdir,
                        &workdir,
                        "userxattr",
                    ],
                )?);
            }
            MountStep::Proc { dst } => {
                m.mounts.push(mount(
                    "proc",
                    Path::new("proc"),
                    dst,
                    &["nosuid", "noexec", "nodev"],
                )?);
                for r in crate::kernel::mount::PROC_READ_ONLY {
                    push_unique(&mut m.readonly, s(&dst.join(r)));
                }
                for k in crate::kernel::mount::PROC_MASKED {
                    push_unique(&mut m.masked, s(&dst.join(k)));
                }
            }
            MountStep::Dev { dst, extra } => {
                // the runtime makes the default nodes (null zero full random urandom tty),
                // /dev/ptmx and the fd links; a devpts without gid= works rootless
                m.mounts.push(mount(
                    "tmpfs",
                    Path::new("tmpfs"),
                    dst,
                    &["nosuid", "strictatime", "mode=755", "size=65536k"],
                )?);
                m.mounts.push(mount(
                    "devpts",
                    Path::new("devpts"),
                    &dst.join("pts"),
                    &[
                        "nosuid",
                        "noexec",
                        "newinstance",
                        "ptmxmode=0666",
                        "mode=0620",
                    ],
                )?);
                m.mounts.push(mount(
                    "tmpfs",
                    Path::new("shm"),
                    &dst.join("shm"),
                    &["nosuid", "nodev", "mode=1777"],
                )?);
                for name in extra {
                    let ok = !name.is_empty()
                        && !name.starts_with('/')
                        && name
                            .split('/')
                            .all(|c| !c.is_empty() && c != "." && c != "..");
                    let src = Path::new("/dev").join(name);
                    if !ok || std::fs::metadata(&src).map_or(true, |md| md.is_dir()) {
                        continue;
                    }
                    m.mounts
                        .push(mount("bind", &src, &dst.join(name), &["rbind", "nosuid"])?);
                }
            }
            MountStep::Mask { dst, carve_outs } => {
                let Ok(md) = std::fs::symlink_metadata(dst) else {
                    // missing: nothing to hide, unless deeper steps mount inside it
                    if *carve_outs {
                        m.mounts.push(mount(
                            "tmpfs",
                            Path::new("tmpfs"),
                            dst,
                            &["nosuid", "nodev", "mode=755"],
                        )?);
                        push_unique(&mut m.readonly, s(dst));
                    }
                    continue;
                };
                if md.file_type().is_symlink() {
                    // its target is a policy path of its own (policy paths are canonical)
                    continue;
                }
                let later_inside = steps[i + 1..]
                    .iter()
                    .filter(|x| !matches!(x, MountStep::ReadOnly { .. }))
                    .any(|x| within(x.dst(), dst));
                if !carve_outs && !later_inside {
                    push_unique(&mut m.masked, s(dst));
                } else if md.is_dir() {
                    // in order, so the deeper steps mount on top of it; sealed read-only
                    m.mounts.push(mount(
                        "tmpfs",
                        Path::new("tmpfs"),
                        dst,
                        &["nosuid", "nodev", "mode=755"],
                    )?);
                    push_unique(&mut m.readonly, s(dst));
                } else {
                    m.mounts.push(mount(
                        "bind",
                        Path::new("/dev/null"),
                        dst,
                        &["bind", "ro", "nosuid", "nodev", "noexec"],
                    )?);
                }
            }
            MountStep::HomeView(v) => {
                // an OCI runtime cannot build the view: the whole home under the layer,
                // with what the view would not show (as of now) masked
                for p in [&v.src, &v.upper, &v.work] {
                    if !super::plan::option_safe(p) {
                        return Err(OciError::UnsafePath(s(p)));
                    }
                }
                let lowerdir = format!("lowerdir={}", s(&v.src));
                let upperdir = format!("upperdir={}", s(&v.upper));
                let workdir = format!("workdir={}", s(&v.work));
                m.mounts.push(mount(
                    "overlay",
                    Path::new("overlay"),
                    &v.dst,
                    &[
                        "nosuid",
                        "nodev",
                        &lowerdir,
                        &upperdir,
                        &workdir,
                        "userxattr",
                    ],
                )?);
                for p in super::plan::view::not_shown_now(v) {
                    push_unique(&mut m.masked, s(&p));
                }
            }
            MountStep::ReadOnly { dst } => push_unique(&mut m.readonly, s(dst)),
            MountStep::Symlink { target, dst } => m.links.push((target.clone(), dst.clone())),
            MountStep::Dir { dst } => m.dirs.push(dst.clone()),
        }
    }
    Ok(m)
}

/// OCI architecture of the native one.
fn native_arch() -> Arch {
    if cfg!(target_arch = "aarch64") {
        Arch::ScmpArchAarch64
    } else {
        Arch::ScmpArchX86_64
    }
}

/// Aligned blocks `(mask, value)` of 32-bit values covering `lo..=hi`: `x` is in the range
/// iff `x & mask == value` for one of them.
fn blocks(mut lo: u64, hi: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    while lo <= hi {
        let mut size = 1u64;
        while lo.is_multiple_of(size * 2) && lo + size * 2 - 1 <= hi && size * 2 <= 1 << 32 {
            size *= 2;
        }
        out.push((0xffff_ffff & !(size - 1), lo));
        if lo + size > hi {
            break;
        }
        lo += size;
    }
    out
}

/// `linux.seccomp`: capsule's own refusals ([`seccomp::rules`]) as OCI syscall rules.
/// Conditions compare the low 32 bits of an argument as the filter does (a masked
/// compare, since libseccomp compares all 64); "none of these values" becomes the
/// aligned blocks of the values in between, one rule each (runc adds several conditions
/// on one argument as alternatives, not together).
pub fn seccomp_syscalls() -> Result<Vec<LinuxSyscall>, OciError> {
    let mut out = Vec::new();
    let errno_rule = |names: Vec<String>, errno: i32, args| {
        let mut b = LinuxSyscallBuilder::default()
            .names(names)
            .action(LinuxSeccompAction::ScmpActErrno)
            .errno_ret(errno as u32);
        if let Some(a) = args {
            b = b.args::<Vec<oci_spec::runtime::LinuxSeccompArg>>(a);
        }
        b.build().map_err(build_err("seccomp rule"))
    };
    let masked = |arg: u8, mask: u64, value: u64| {
        LinuxSeccompArgBuilder::default()
            .index(arg as usize)
            .value(mask)
            .value_two(value)
            .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
            .build()
            .map_err(build_err("seccomp argument"))
    };
    let rules = seccomp::rules();
    for errno in [libc::EPERM, libc::ENOSYS] {
        let always: Vec<String> = rules
            .iter()
            .filter(|r| r.errno == errno && r.when.is_empty())
            .map(|r| r.name.to_string())
            .collect();
        if !always.is_empty() {
            out.push(errno_rule(always, errno, None)?);
        }
    }
    for r in rules.iter().filter(|r| !r.when.is_empty()) {
        for conj in &r.when {
            match conj.as_slice() {
                [ArgCond::NoneOf { arg, values }] => {
                    let mut allowed: Vec<u64> = values.iter().map(|v| v & 0xffff_ffff).collect();
                    allowed.sort_unstable();
                    allowed.dedup();
                    let mut lo = 0u64;
                    for v in allowed.iter().copied().chain([1 << 32]) {
                        if v > lo {
                            for (mask, value) in blocks(lo, v - 1) {
                                out.push(errno_rule(
                                    vec![r.name.to_string()],
                                    r.errno,
                                    Some(vec![masked(*arg, mask, value)?]),
                                )?);
                            }
                        }
                        lo = v + 1;
                    }
                }
                conds => {
                    let mut args = Vec::new();
                    for c in conds {
                        args.push(match *c {
                            ArgCond::MaskedEq { arg, mask, value } => {
                                masked(arg, mask & 0xffff_ffff, value & 0xffff_ffff)?
                            }
                            ArgCond::Eq { arg, value } => {
                                masked(arg, 0xffff_ffff, value & 0xffff_ffff)?
                            }
                            ArgCond::NoneOf { .. } => {
                                return Err(OciError::Build {
                                    what: format!("seccomp rule of {}", r.name),
                                    err: "\"none of\" combined with other conditions".into(),
                                })
                            }
                        });
                    }
                    out.push(errno_rule(vec![r.name.to_string()], r.errno, Some(args))?);
                }
            }
        }
    }
    Ok(out)
}

fn rlimit_types() -> [PosixRlimitType; 16] {
    use oci_spec::runtime::PosixRlimitType::*;
    // the order of `rlimit::current`
    [
        RlimitCpu,
        RlimitFsize,
        RlimitData,
        RlimitStack,
        RlimitCore,
        RlimitRss,
        RlimitNproc,
        RlimitNofile,
        RlimitMemlock,
        RlimitAs,
        RlimitLocks,
        RlimitSigpending,
        RlimitMsgqueue,
        RlimitNice,
        RlimitRtprio,
        RlimitRttime,
    ]
}

/// `r` with the exec's `--memory` (swap included, as in the executor), `--pids` and
/// `--cpus` (a CFS quota per 100 ms); `None` without any (nothing to change: the runtime
/// then needs no cgroup it may write, as rootless runc without a delegated one).
fn resources(
    mut r: oci_spec::runtime::LinuxResources,
    l: &crate::limits::Limits,
) -> Result<Option<oci_spec::runtime::LinuxResources>, OciError> {
    use oci_spec::runtime::{LinuxCpu, LinuxMemory, LinuxPidsBuilder};
    if !l.needs_cgroup() {
        return Ok(None);
    }
    if let Some(m) = l.memory {
        let mut mem = LinuxMemory::default();
        let m = i64::try_from(m).unwrap_or(i64::MAX);
        mem.set_limit(Some(m));
        mem.set_swap(Some(m));
        r.set_memory(Some(mem));
    }
    if let Some(n) = l.pids {
        r.set_pids(Some(
            LinuxPidsBuilder::default()
                .limit(i64::try_from(n).unwrap_or(i64::MAX))
                .build()
                .map_err(build_err("pids"))?,
        ));
    }
    if let Some(c) = l.cpus_milli {
        let mut cpu = LinuxCpu::default();
        let period = 100_000u64;
        cpu.set_period(Some(period));
        cpu.set_quota(Some(((c * period / 1000).max(1000)) as i64));
        r.set_cpu(Some(cpu));
    }
    Ok(Some(r))
}

/// Render `plan` (full isolation) as an OCI spec whose root is `root_path` (relative to
/// the bundle, read-only), for a caller of `uid`/`gid`: one mapping, the caller's own ids
/// as the container's 0 (runc requires the container's root to be mapped, and a caller
/// without privileges can map only its own ids), and the process runs as that 0, with no
/// capability (root runs as itself, as under `capsule exec`). `annotations` are
/// added under [`ANNOTATION_PREFIX`] (keys given without it).
pub fn render(
    plan: &ExecPlan,
    uid: u32,
    gid: u32,
    root_path: &Path,
    terminal: bool,
    annotations: &[(&str, String)],
) -> Result<Rendered, OciError> {
    if plan.isolation != Isolation::Full {
        return Err(OciError::NotFull);
    }
    let m = render_mounts(&plan.mounts)?;
    let mut spec = Spec::default();
    spec.set_version(OCI_VERSION.to_string());
    spec.set_hostname(Some(plan.hostname.clone()));
    spec.set_root(Some(
        RootBuilder::default()
            .path(root_path.to_path_buf())
            .readonly(true)
            .build()
            .map_err(build_err("root"))?,
    ));
    let none = Capabilities::new();
    let caps = LinuxCapabilitiesBuilder::default()
        .bounding(none.clone())
        .effective(none.clone())
        .inheritable(none.clone())
        .permitted(none.clone())
        .ambient(none)
        .build()
        .map_err(build_err("capabilities"))?;
    // the caller's, and the exec's own `--fds`/`--file-size` (never above the caller's
    // hard limit, as in the executor)
    let own = |typ: PosixRlimitType| match typ {
        PosixRlimitType::RlimitNofile => plan.limits.fds,
        PosixRlimitType::RlimitFsize => plan.limits.file_size,
        _ => None,
    };
    let rlimits = crate::kernel::rlimit::current()
        .into_iter()
        .zip(rlimit_types())
        .map(|((soft, hard), typ)| {
            let (soft, hard) = match own(typ) {
                Some(v) => (v.min(hard), v.min(hard)),
                None => (soft, hard),
            };
            PosixRlimitBuilder::default()
                .typ(typ)
                .soft(soft)
                .hard(hard)
                .build()
                .map_err(build_err("rlimit"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let env: Vec<String> = plan
        .env
        .iter()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            String::from_utf8_lossy(&kv).into_owned()
        })
        .collect();
    spec.set_process(Some(
        ProcessBuilder::default()
            .terminal(terminal)
            .user(
                UserBuilder::default()
                    .uid(0u32)
                    .gid(0u32)
                    .build()
                    .map_err(build_err("user"))?,
            )
            .args(
                plan.argv
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect::<Vec<_>>(),
            )
            .env(env)
            .cwd(plan.cwd.clone())
            .capabilities(caps)
            .no_new_privileges(true)
            .rlimits(rlimits)
            .build()
            .map_err(build_err("process"))?,
    ));
    spec.set_mounts(Some(m.mounts));

    let mut ns_types = vec![
        LinuxNamespaceType::Pid,
        LinuxNamespaceType::Mount,
        LinuxNamespaceType::Ipc,
        LinuxNamespaceType::Uts,
        LinuxNamespaceType::User,
    ];
    if plan.new_netns {
        ns_types.push(LinuxNamespaceType::Network);
    }
    let namespaces = ns_types
        .into_iter()
        .map(|t| {
            LinuxNamespaceBuilder::default()
                .typ(t)
                .build()
                .map_err(build_err("namespace"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let map = |id: u32| {
        LinuxIdMappingBuilder::default()
            .container_id(0u32)
            .host_id(id)
            .size(1u32)
            .build()
            .map_err(build_err("id mapping"))
    };
    let seccomp = LinuxSeccompBuilder::default()
        .default_action(LinuxSeccompAction::ScmpActAllow)
        .architectures(vec![native_arch()])
        .syscalls(seccomp_syscalls()?)
        .build()
        .map_err(build_err("seccomp"))?;
    let mut linux = LinuxBuilder::default()
        .namespaces(namespaces)
        .uid_mappings(vec![map(uid)?])
        .gid_mappings(vec![map(gid)?])
        .masked_paths(m.masked)
        .readonly_paths(m.readonly)
        .seccomp(seccomp)
        .build()
        .map_err(build_err("linux"))?;
    if let Some(r) = resources(linux.resources().clone().unwrap_or_default(), &plan.limits)? {
        linux.set_resources(Some(r));
    }
    spec.set_linux(Some(linux));
    spec.set_hooks(None);
    let mut ann: HashMap<String, String> = annotations
        .iter()
        .map(|(k, v)| (format!("{ANNOTATION_PREFIX}{k}"), v.clone()))
        .collect();
    ann.insert(
        format!("{ANNOTATION_PREFIX}not-enforced"),
        NOT_ENFORCED.join("; "),
    );
    ann.insert(
        format!("{ANNOTATION_PREFIX}landlock.writable"),
        serde_json::to_string(&plan.policy.writable).unwrap_or_default(),
    );
    ann.insert(
        format!("{ANNOTATION_PREFIX}network"),
        plan.policy.network.mode.as_str().to_string(),
    );
    if !plan.policy.network.allow.is_empty() {
        ann.insert(
            format!("{ANNOTATION_PREFIX}network.allow"),
            serde_json::to_string(&plan.policy.network.allow).unwrap_or_default(),
        );
    }
    if let Some(d) = plan.activity_timeout {
        ann.insert(
            format!("{ANNOTATION_PREFIX}limits.activity-timeout"),
            humantime::format_duration(d).to_string(),
        );
    }
    if let Some(o) = plan.mounts.iter().find_map(|s| match s {
        MountStep::Overlay { upper, dst, .. } if Some(dst) == plan.policy.home.as_ref() => {
            Some(upper)
        }
        MountStep::HomeView(v) => Some(&v.upper),
        _ => None,
    }) {
        ann.insert(format!("{ANNOTATION_PREFIX}home-layer.upper"), s(o));
    }
    spec.set_annotations(Some(ann));
    Ok(Rendered {
        spec,
        links: m.links,
        dirs: m.dirs,
    })
}

#[cfg(test)]
mod tests;

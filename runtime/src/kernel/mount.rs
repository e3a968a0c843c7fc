//! Mounts and the root switch, the way bubblewrap does them, for both front ends:
//! inside the new mount namespace a tmpfs becomes the root with the host's root reachable
//! under `/oldroot` ([`enter_setup_root`]); the new root is assembled under `/newroot`
//! from the primitives here (binds, tmpfs, overlays, a fresh proc with its knobs
//! read-only and internals masked, a minimal `/dev`); then the host root is detached and
//! `/newroot` becomes `/` ([`finish_root_as`]). `capsule exec`'s mount plan is carried
//! out with them by `crate::linux::mounts`; an OCI bundle's root, resolved inside its
//! hostile rootfs, by [`container`]. Runs in the sandbox's init before anything is
//! forked; nothing of it exists outside the namespace.

pub mod container;
pub mod copyup;

use super::sys::{self, Kind};
use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A failed setup step: what was being done (`mounting a fresh proc at /proc`,
/// `mounts[2] (tmpfs at /run)`), and the system error.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {error}")]
pub struct StepError {
    pub step: String,
    pub error: io::Error,
}

pub type R<T> = Result<T, StepError>;

pub fn ctx<T>(r: io::Result<T>, step: impl FnOnce() -> String) -> R<T> {
    r.map_err(|error| StepError {
        step: step(),
        error,
    })
}

pub fn cstr(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `prefix` + absolute `p` as a C string.
pub fn under(prefix: &str, p: &Path) -> io::Result<CString> {
    let mut v = prefix.as_bytes().to_vec();
    let b = p.as_os_str().as_bytes();
    if !b.starts_with(b"/") {
        v.push(b'/');
    }
    v.extend_from_slice(b);
    cstr(&v)
}

pub const OLD: &str = "/oldroot";
pub const NEW: &str = "/newroot";
pub const MASK_DIR: &str = "/mask-dir";
pub const MASK_FILE: &str = "/mask-file";

pub fn c(s: &str) -> CString {
    // constant strings without NUL bytes
    CString::new(s).unwrap_or_default()
}

/// `mkdir -p` of `path` (absolute, in the current root).
pub fn mkdir_p(path: &[u8]) -> io::Result<()> {
    let mut i = 1;
    while i <= path.len() {
        if i == path.len() || path[i] == b'/' {
            let part = cstr(&path[..i])?;
            if sys::kind(&part) == Kind::Missing {
                sys::mkdir(&part, 0o755)?;
            }
        }
        i += 1;
    }
    Ok(())
}

/// Make sure a mount point of the right kind exists at `dst`.
pub fn mount_point(dst: &CString, dir: bool) -> io::Result<()> {
    let b = dst.as_bytes();
    match sys::kind(dst) {
        Kind::Missing => {
            if dir {
                mkdir_p(b)
            } else {
                if let Some(slash) = b.iter().rposition(|&x| x == b'/') {
                    if slash > 0 {
                        mkdir_p(&b[..slash])?;
                    }
                }
                sys::touch(dst, 0o644)
            }
        }
        Kind::Symlink => Err(io::Error::from_raw_os_error(libc::ELOOP)),
        _ => Ok(()),
    }
}

/// Recursive bind of `src` at `dst` (both already prefixed), read-only unless `rw`.
pub fn bind(src: &CString, dst: &CString, rw: bool) -> io::Result<()> {
    sys::mount(
        Some(src),
        dst,
        None,
        libc::MS_BIND | libc::MS_REC | libc::MS_SILENT,
        None,
    )?;
    let attrs = if rw {
        sys::MOUNT_ATTR_NOSUID
    } else {
        sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID
    };
    sys::mount_setattr(dst, attrs, true)
}

/// Mask `dst` with a mask source (`MASK_DIR` or `MASK_FILE`): one non-recursive bind. The
/// sources are sealed read-only and nosuid in [`enter_setup_root`] and have no submounts;
/// a bind mount copies its source mount's flags, so no `mount_setattr` per mask (200
/// hidden paths: 200 syscalls less).
pub fn mask_bind(src: &CString, dst: &CString) -> io::Result<()> {
    sys::mount(Some(src), dst, None, libc::MS_BIND | libc::MS_SILENT, None)
}

pub fn tmpfs(dst: &CString, mode: u32) -> io::Result<()> {
    tmpfs_sized(dst, mode, 64 << 20)
}

pub fn tmpfs_sized(dst: &CString, mode: u32, size: u64) -> io::Result<()> {
    let data = cstr(format!("mode={mode:o},size={size}").as_bytes())?;
    sys::mount(
        Some(&c("tmpfs")),
        dst,
        Some(&c("tmpfs")),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_SILENT,
        Some(&data),
    )
}

/// An overlay at `dst` of `lower` (top first) under `upper` with `work` (paths as the
/// setup root sees them), with user-namespace xattrs.
pub fn overlay(dst: &CStr, lower: &[CString], upper: &CStr, work: &CStr) -> io::Result<()> {
    let mut data = b"lowerdir=".to_vec();
    for (i, l) in lower.iter().enumerate() {
        if i > 0 {
            data.push(b':');
        }
        data.extend_from_slice(l.as_bytes());
    }
    data.extend_from_slice(b",upperdir=");
    data.extend_from_slice(upper.to_bytes());
    data.extend_from_slice(b",workdir=");
    data.extend_from_slice(work.to_bytes());
    data.extend_from_slice(b",userxattr");
    let data = cstr(&data)?;
    sys::mount(
        Some(&c("overlay")),
        dst,
        Some(&c("overlay")),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&data),
    )
}

/// Step 1: private propagation, a tmpfs root, the host root under `/oldroot`, an empty
/// `/newroot`, and the shared empty directory and file used to mask hidden paths.
pub fn enter_setup_root() -> R<()> {
    ctx(
        sys::mount(None, &c("/"), None, libc::MS_REC | libc::MS_PRIVATE, None),
        || "making mounts private".into(),
    )?;
    // /tmp is only a place to put the setup tmpfs; once pivoted, the host's /tmp is
    // reachable under /oldroot/tmp as before.
    let base = c("/tmp");
    ctx(tmpfs(&base, 0o755), || "mounting the setup tmpfs".into())?;
    ctx(sys::mkdir(&c("/tmp/oldroot"), 0o755), || {
        "mkdir oldroot".into()
    })?;
    ctx(sys::pivot_root(&base, &c("/tmp/oldroot")), || {
        "pivot_root into the setup tmpfs".into()
    })?;
    ctx(sys::chdir(&c("/")), || "chdir /".into())?;
    let nr = c(NEW);
    ctx(sys::mkdir(&nr, 0o755), || "mkdir newroot".into())?;
    ctx(tmpfs(&nr, 0o755), || "mounting the new root".into())?;
    let md = c(MASK_DIR);
    let mf = c(MASK_FILE);
    ctx(sys::mkdir(&md, 0o555), || "mkdir mask dir".into())?;
    ctx(sys::touch(&mf, 0o444), || "creating mask file".into())?;
    for m in [&md, &mf] {
        ctx(bind(m, m, false), || "sealing the mask sources".into())?;
    }
    Ok(())
}

/// The links of a minimal `/dev`: (name, target).
pub const DEV_LINKS: &[(&str, &str)] = &[
    ("ptmx", "pts/ptmx"),
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];

/// A fresh tmpfs of `size` bytes at the first of `dsts` (under `prefix`), bound at the
/// others: one filesystem, so one size for all of them.
pub fn task_tmp(prefix: &str, size: u64, dsts: &[std::path::PathBuf]) -> R<()> {
    let what = || format!("a tmpfs of {size} bytes at the capsule's tmp");
    let Some((first, rest)) = dsts.split_first() else {
        return Ok(());
    };
    let f = ctx(under(prefix, first), what)?;
    ctx(mount_point(&f, true), what)?;
    ctx(tmpfs_sized(&f, 0o1777, size), what)?;
    for d in rest {
        let p = ctx(under(prefix, d), what)?;
        ctx(mount_point(&p, true), what)?;
        ctx(
            sys::mount(Some(&f), &p, None, libc::MS_BIND | libc::MS_SILENT, None),
            what,
        )?;
    }
    Ok(())
}

/// Entries of the sandbox's `/proc` made read-only (kernel knobs).
pub const PROC_READ_ONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus", "fs"];

/// Entries of the sandbox's `/proc` masked (kernel internals).
pub const PROC_MASKED: &[&str] = &[
    "kcore",
    "keys",
    "key-users",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "kallsyms",
    "acpi",
    "scsi",
    "asound",
];

/// Where masks inside `/proc` come from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum MaskSource {
    /// The sealed empty directory and file of the setup root ([`enter_setup_root`]).
    SetupRoot,
    /// None at hand (in a prepared root, [`exec_mounts`]): `/dev/null` for files, an
    /// empty read-only tmpfs for directories.
    Here,
}

/// A fresh proc of the calling process's pid namespace at `prefix` + `dst`, with kernel
/// knobs read-only and kernel internals masked.
pub fn proc_fs(prefix: &str, dst: &Path, masks: MaskSource) -> R<()> {
    let what = || format!("mounting a fresh proc at {}", dst.display());
    let d = ctx(under(prefix, dst), what)?;
    ctx(mount_point(&d, true), what)?;
    ctx(
        sys::mount(
            Some(&c("proc")),
            &d,
            Some(&c("proc")),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        ),
        what,
    )?;
    // Root runs mapped to itself: sysctls and sysrq check only file modes, so these must
    // be read-only mounts. Kernel internals are masked (as container runtimes do).
    for ro in PROC_READ_ONLY {
        let p = ctx(under(prefix, &dst.join(ro)), what)?;
        if sys::kind(&p) == Kind::Missing {
            continue;
        }
        ctx(bind(&p, &p, false), || {
            format!("making /proc/{ro} read-only")
        })?;
    }
    for m in PROC_MASKED {
        let p = ctx(under(prefix, &dst.join(m)), what)?;
        let step = || format!("masking /proc/{m}");
        match (sys::kind(&p), masks) {
            (Kind::Missing, _) => continue,
            (Kind::Dir, MaskSource::SetupRoot) => ctx(mask_bind(&c(MASK_DIR), &p), step)?,
            (_, MaskSource::SetupRoot) => ctx(mask_bind(&c(MASK_FILE), &p), step)?,
            (Kind::Dir, MaskSource::Here) => ctx(
                sys::mount(
                    Some(&c("tmpfs")),
                    &p,
                    Some(&c("tmpfs")),
                    libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    Some(&c("mode=555,size=4k")),
                ),
                step,
            )?,
            (_, MaskSource::Here) => {
                ctx(mask_bind(&c("/dev/null"), &p), step)?;
                ctx(sys::mount_setattr(&p, sys::MOUNT_ATTR_RDONLY, false), step)?;
            }
        }
    }
    Ok(())
}

pub fn devpts(at: &CString) -> io::Result<()> {
    sys::mount(
        Some(&c("devpts")),
        at,
        Some(&c("devpts")),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some(&c("newinstance,ptmxmode=0666,mode=620")),
    )
}

/// Device names the sandbox always gets.
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

pub fn dev(dst: &Path, extra: &[String]) -> R<()> {
    let what = || format!("building {}", dst.display());
    let d = ctx(under(NEW, dst), what)?;
    ctx(mount_point(&d, true), what)?;
    ctx(tmpfs(&d, 0o755), what)?;
    let extra_ok = extra.iter().filter(|n| {
        !n.is_empty()
            && !n.starts_with('/')
            && n.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
    });
    for name in DEVICES.iter().copied().chain(extra_ok.map(|s| s.as_str())) {
        let src = ctx(under(OLD, &Path::new("/dev").join(name)), what)?;
        let k = sys::kind_follow(&src);
        if k == Kind::Missing || k == Kind::Dir {
            continue;
        }
        let p = ctx(under(NEW, &dst.join(name)), what)?;
        ctx(mount_point(&p, false), what)?;
        // device binds keep dev semantics (no MOUNT_ATTR_NODEV); nosuid, not read-only
        ctx(
            sys::mount(Some(&src), &p, None, libc::MS_BIND | libc::MS_SILENT, None),
            || format!("binding /dev/{name}"),
        )?;
        ctx(
            sys::mount_setattr(&p, sys::MOUNT_ATTR_NOSUID, false),
            || format!("binding /dev/{name}"),
        )?;
    }
    let pts = ctx(under(NEW, &dst.join("pts")), what)?;
    ctx(sys::mkdir(&pts, 0o755), what)?;
    ctx(devpts(&pts), || "mounting a private devpts".into())?;
    let shm = ctx(under(NEW, &dst.join("shm")), what)?;
    ctx(sys::mkdir(&shm, 0o1777), what)?;
    ctx(tmpfs(&shm, 0o1777), || "mounting /dev/shm".into())?;
    for (link, target) in DEV_LINKS {
        let p = ctx(under(NEW, &dst.join(link)), what)?;
        ctx(sys::symlink(&c(target), &p), what)?;
    }
    Ok(())
}

/// Seal `/dev`'s own tmpfs read-only (its shm and pts stay writable).
pub fn seal_dev(dst: &Path) -> R<()> {
    let d = ctx(under(NEW, dst), || "sealing /dev".into())?;
    ctx(
        sys::mount_setattr(&d, sys::MOUNT_ATTR_RDONLY, false),
        || "sealing /dev".into(),
    )
}

/// Step 3: detach the host root and make `/newroot` the root, read-only at its top.
pub fn finish_root() -> R<()> {
    finish_root_as(true)
}

/// [`finish_root`], the top of the new root read-only or not (an OCI bundle's
/// `root.readonly` decides, `crate::ociruntime`).
pub fn finish_root_as(read_only: bool) -> R<()> {
    ctx(sys::umount2(&c(OLD), libc::MNT_DETACH), || {
        "detaching the host root".into()
    })?;
    ctx(sys::chdir(&c(NEW)), || "chdir newroot".into())?;
    let dot = c(".");
    ctx(sys::pivot_root(&dot, &dot), || {
        "pivot_root into the new root".into()
    })?;
    ctx(sys::umount2(&dot, libc::MNT_DETACH), || {
        "detaching the setup root".into()
    })?;
    ctx(sys::chdir(&c("/")), || "chdir /".into())?;
    if read_only {
        ctx(
            sys::mount_setattr(&c("/"), sys::MOUNT_ATTR_RDONLY, false),
            || "making / read-only".into(),
        )?;
    }
    Ok(())
}

/// For error messages: a path as UTF-8 (lossy).
pub fn show(p: &OsStr) -> String {
    p.to_string_lossy().into_owned()
}

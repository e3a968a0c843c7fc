//! An OCI container's root, as its plan has it ([`Root`], from
//! `crate::plan::container::ContainerPlan`), in the one order of its steps: the bundle's
//! rootfs bound over capsule's setup root ([`super::enter_setup_root`], the same first
//! step as `capsule exec`'s), the mount steps in order, the devices, the terminal, the
//! sysctls (before `/proc/sys` can be made read-only), the masked and read-only paths,
//! then the switch with pivot_root ([`super::finish_root_as`]) and the root's
//! propagation. Nothing is decided here: each step is the plan's.
//!
//! The rootfs is hostile input: every destination is resolved inside it with
//! `openat2(RESOLVE_IN_ROOT)` (a symlink in the image cannot lead a mount out of it, as
//! runc's CVE-2021-30465 did), missing directories are made there one component at a
//! time, and the mount goes onto the descriptor (`/proc/self/fd/N` of the host's proc,
//! reachable as `/oldroot/proc`).

use super::{self as mounts, StepError};
use crate::kernel::checked;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// One mount of config.json: where (`dst`, in the rootfs), what, then its propagation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The step's name in errors: `mounts[i] (TYPE at DST)`.
    pub what: String,
    pub dst: PathBuf,
    pub kind: MountKind,
    /// Propagation flags applied after, in order.
    pub propagation: Vec<libc::c_ulong>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountKind {
    /// The host's `src` bound (with its submounts when `recursive`), then the
    /// `MOUNT_ATTR_*` bits `attrs` set on it (recursively when `recursive`).
    Bind {
        src: PathBuf,
        recursive: bool,
        attrs: u64,
    },
    /// A filesystem of type `typ` from `src` with `flags` and `data`; a `sysfs` the kernel
    /// refuses (a network namespace not ours, rootless) is the host's, bound. `copy_up`
    /// (`tmpcopyup`, a tmpfs's): what the image had at the mount point is copied into it.
    Fs {
        typ: String,
        src: PathBuf,
        flags: libc::c_ulong,
        data: String,
        copy_up: bool,
    },
    /// `cgroup2` of the unified host (read-only when `ro`).
    Cgroup2 { ro: bool },
    /// On a v1 host: a tmpfs with, for each hierarchy, the container's own directory
    /// (host path, under the old root) bound at its name (read-only when `ro`), as runc
    /// does without a cgroup namespace.
    CgroupV1 {
        ro: bool,
        binds: Vec<(PathBuf, PathBuf)>,
    },
}

/// A device node of the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNode {
    /// The step's name in errors.
    pub what: String,
    pub path: PathBuf,
    pub typ: String,
    pub major: u32,
    pub minor: u32,
    pub mode: u32,
    pub owner: Option<(u32, u32)>,
}

/// A container's root as its plan decided it ([`build`]).
#[derive(Debug, Clone, Copy)]
pub struct Root<'a> {
    /// The rootfs, the host path resolved.
    pub rootfs: &'a Path,
    pub mounts: &'a [Mount],
    pub devices: &'a [DeviceNode],
    /// With a user namespace: the host's devices bound (no `mknod` there).
    pub bind_devices: bool,
    /// A terminal is the container's: `/dev/console` made for it.
    pub console: bool,
    /// `(key, path under /proc/sys, value)`.
    pub sysctl: &'a [(String, String, String)],
    pub masked_paths: &'a [PathBuf],
    pub readonly_paths: &'a [PathBuf],
    /// The top of the root read-only.
    pub read_only: bool,
    /// The root's propagation, set after the switch.
    pub propagation: Option<libc::c_ulong>,
}

type R<T> = Result<T, StepError>;

fn err<T>(step: impl Into<String>, e: io::Error) -> R<T> {
    Err(StepError {
        step: step.into(),
        error: e,
    })
}

fn cs(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn last() -> io::Error {
    io::Error::last_os_error()
}

/// `openat2(root, path, flags, RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS)`.
fn open_in(root: RawFd, path: &[u8], flags: u64) -> io::Result<OwnedFd> {
    checked::openat2(root, &cs(path)?, flags, libc::RESOLVE_IN_ROOT)
}

/// The host-proc path of a descriptor, to mount on or from.
fn fd_path(fd: RawFd) -> io::Result<CString> {
    cs(format!("/oldroot/proc/self/fd/{fd}").as_bytes())
}

/// Resolve `dst` in the root `root`, making what is missing: directories on the way, the
/// last one a directory (`dir`) or an empty file. Returns an `O_PATH` descriptor.
fn make_in(root: RawFd, dst: &Path, dir: bool) -> io::Result<OwnedFd> {
    let comps: Vec<&[u8]> = dst
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.as_bytes()),
            _ => None,
        })
        .collect();
    if dst.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: dup of a valid descriptor.
    let mut cur = unsafe { OwnedFd::from_raw_fd(libc::fcntl(root, libc::F_DUPFD_CLOEXEC, 3)) };
    let mut sofar: Vec<u8> = b"/".to_vec();
    for (i, c) in comps.iter().enumerate() {
        let is_last = i + 1 == comps.len();
        if sofar.len() > 1 {
            sofar.push(b'/');
        }
        sofar.extend_from_slice(c);
        match open_in(root, &sofar, libc::O_PATH as u64) {
            Ok(fd) => cur = fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                // make it in the parent we resolved (never through a link)
                let name = cs(c)?;
                let parent = open_in(
                    root,
                    &sofar[..sofar.len() - c.len()],
                    (libc::O_PATH | libc::O_DIRECTORY) as u64,
                )?;
                // SAFETY: mkdirat/mknodat relative to a directory descriptor of ours.
                let rc = unsafe {
                    if is_last && !dir {
                        libc::mknodat(parent.as_raw_fd(), name.as_ptr(), libc::S_IFREG | 0o644, 0)
                    } else {
                        libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), 0o755)
                    }
                };
                if rc < 0 && last().raw_os_error() != Some(libc::EEXIST) {
                    return Err(last());
                }
                cur = open_in(root, &sofar, libc::O_PATH as u64)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(cur)
}

fn is_dir(fd: RawFd) -> bool {
    // SAFETY: fstat into a zeroed struct.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR
    }
}

fn mount(
    src: Option<&CString>,
    dst: &CString,
    fstype: Option<&CString>,
    flags: libc::c_ulong,
    data: Option<&CString>,
) -> io::Result<()> {
    // SAFETY: C strings or null.
    let rc = unsafe {
        libc::mount(
            src.map_or(std::ptr::null(), |s| s.as_ptr()),
            dst.as_ptr(),
            fstype.map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.map_or(std::ptr::null(), |d| d.as_ptr() as *const libc::c_void),
        )
    };
    if rc < 0 {
        Err(last())
    } else {
        Ok(())
    }
}

/// A mount's propagation flags, applied to what is now at its destination.
fn propagate(root: RawFd, m: &Mount) -> io::Result<()> {
    for f in &m.propagation {
        let d = open_in(root, m.dst.as_os_str().as_bytes(), libc::O_PATH as u64)?;
        mount(None, &fd_path(d.as_raw_fd())?, None, *f, None)?;
    }
    Ok(())
}

/// A mount's destination, resolved in the rootfs (`fd`), lies in a procfs or sysfs only
/// when it is named there: a link of the image's cannot send a mount into `/proc/sys` or
/// onto `/proc/sysrq-trigger`.
fn landing(fd: RawFd, dst: &Path) -> io::Result<()> {
    if checked::on_procfs_or_sysfs(fd)? && !(dst.starts_with("/proc") || dst.starts_with("/sys")) {
        return Err(io::Error::other(
            "it leads into procfs or sysfs through a link in the rootfs: refused",
        ));
    }
    Ok(())
}

/// The directory `parent` of the rootfs (made if missing), checked not to lie in a
/// procfs or sysfs (a link of the image's at `/dev` leading into `/proc`).
fn dir_in(root: RawFd, parent: &Path) -> io::Result<OwnedFd> {
    let fd = make_in(root, parent, true)?;
    if !is_dir(fd.as_raw_fd()) {
        return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
    }
    if checked::on_procfs_or_sysfs(fd.as_raw_fd())? {
        return Err(io::Error::other(format!(
            "{} leads into procfs or sysfs through a link in the rootfs: refused",
            parent.display()
        )));
    }
    Ok(fd)
}

/// `lstat` of `name` in `dir`, `None` when missing.
fn lstat_at(dir: RawFd, name: &CString) -> io::Result<Option<libc::stat>> {
    // SAFETY: fstatat into a zeroed struct, relative to our descriptor, no link followed.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) < 0 {
            let e = last();
            if e.raw_os_error() == Some(libc::ENOENT) {
                return Ok(None);
            }
            return Err(e);
        }
        Ok(Some(st))
    }
}

/// Take away what the image left at `name` in `dir` (a link is removed, never followed;
/// a file or an empty directory too), so that the runtime's own entry can be made there.
fn clear(dir: RawFd, name: &CString) -> io::Result<()> {
    let Some(st) = lstat_at(dir, name)? else {
        return Ok(());
    };
    let flags = if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        libc::AT_REMOVEDIR
    } else {
        0
    };
    // SAFETY: unlinkat relative to our descriptor (it never follows a link).
    if unsafe { libc::unlinkat(dir, name.as_ptr(), flags) } < 0 {
        return Err(last());
    }
    Ok(())
}

/// `dst`'s last component, when the image made it a link, removed (a mount destination
/// of the runtime's in `/dev`).
fn unlink_link(root: RawFd, dst: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (dst.parent(), dst.file_name()) else {
        return Ok(());
    };
    let dir = dir_in(root, parent)?;
    let name = cs(name.as_bytes())?;
    match lstat_at(dir.as_raw_fd(), &name)? {
        Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => clear(dir.as_raw_fd(), &name),
        _ => Ok(()),
    }
}

/// `name` in `dir` opened as `O_PATH` without following a link.
fn path_at(dir: RawFd, name: &CString) -> io::Result<OwnedFd> {
    // SAFETY: openat relative to our descriptor.
    let fd = unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(last());
    }
    // SAFETY: a new descriptor of ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A new empty file `name` in `dir` (whatever was there taken away first), to mount
/// onto: `O_PATH`, checked to be the regular file just made.
fn fresh_file(dir: RawFd, name: &CString, mode: u32) -> io::Result<OwnedFd> {
    clear(dir, name)?;
    // SAFETY: mknodat relative to our descriptor; it never follows a link.
    if unsafe { libc::mknodat(dir, name.as_ptr(), libc::S_IFREG | mode, 0) } < 0 {
        return Err(last());
    }
    let fd = path_at(dir, name)?;
    if checked::stat(fd.as_raw_fd())?.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(io::Error::other("not the file just made"));
    }
    Ok(fd)
}

/// One mount step at its place in the root `root` (`/newroot`).
fn apply(root: RawFd, m: &Mount) -> R<()> {
    let what = || m.what.clone();
    if m.dst.starts_with("/dev") && m.dst != Path::new("/dev") {
        // the runtime's mounts in /dev (shm, pts, mqueue...) land there, not where a link
        // of the image's points
        unlink_link(root, &m.dst).or_else(|e| err(what(), e))?;
    }
    match &m.kind {
        MountKind::Cgroup2 { ro } => cgroup2(root, &m.dst, *ro).or_else(|e| err(what(), e)),
        MountKind::CgroupV1 { ro, binds } => {
            cgroup_v1(root, &m.dst, *ro, binds).or_else(|e| err(what(), e))
        }
        MountKind::Bind {
            src,
            recursive,
            attrs,
        } => {
            let s = mounts::under(mounts::OLD, src).or_else(|e| err(what(), e))?;
            // SAFETY: open of a host path as O_PATH (the host's own, not the image's).
            let sfd = unsafe { libc::open(s.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
            if sfd < 0 {
                return err(format!("{}: source {}", what(), src.display()), last());
            }
            // SAFETY: ours.
            let sfd = unsafe { OwnedFd::from_raw_fd(sfd) };
            let d = make_in(root, &m.dst, is_dir(sfd.as_raw_fd())).or_else(|e| err(what(), e))?;
            landing(d.as_raw_fd(), &m.dst).or_else(|e| err(what(), e))?;
            let (sp, dp) = (
                fd_path(sfd.as_raw_fd()).or_else(|e| err(what(), e))?,
                fd_path(d.as_raw_fd()).or_else(|e| err(what(), e))?,
            );
            let rec = if *recursive { libc::MS_REC } else { 0 };
            mount(Some(&sp), &dp, None, libc::MS_BIND | rec, None).or_else(|e| err(what(), e))?;
            if *attrs != 0 {
                // the new mount, as it is now at the destination (reopened: the old
                // descriptor names what was under it)
                let d2 = open_in(root, m.dst.as_os_str().as_bytes(), libc::O_PATH as u64)
                    .or_else(|e| err(what(), e))?;
                let dp2 = fd_path(d2.as_raw_fd()).or_else(|e| err(what(), e))?;
                crate::kernel::sys::mount_setattr(&dp2, *attrs, *recursive)
                    .or_else(|e| err(what(), e))?;
            }
            Ok(())
        }
        MountKind::Fs {
            typ,
            src,
            flags,
            data,
            copy_up,
        } => {
            let d = make_in(root, &m.dst, true).or_else(|e| err(what(), e))?;
            landing(d.as_raw_fd(), &m.dst).or_else(|e| err(what(), e))?;
            // tmpcopyup: the image's folder, as it is before the tmpfs covers it
            let under = if *copy_up && is_dir(d.as_raw_fd()) {
                Some(
                    open_in(
                        root,
                        m.dst.as_os_str().as_bytes(),
                        (libc::O_RDONLY | libc::O_DIRECTORY) as u64,
                    )
                    .or_else(|e| err(what(), e))?,
                )
            } else {
                None
            };
            let dp = fd_path(d.as_raw_fd()).or_else(|e| err(what(), e))?;
            let src = cs(src.as_os_str().as_bytes()).or_else(|e| err(what(), e))?;
            let t = cs(typ.as_bytes()).or_else(|e| err(what(), e))?;
            let dat = (!data.is_empty())
                .then(|| cs(data.as_bytes()))
                .transpose()
                .or_else(|e| err(what(), e))?;
            let r = mount(Some(&src), &dp, Some(&t), *flags, dat.as_ref());
            match r {
                // sysfs in a network namespace that is not ours to show (rootless): bind the host's
                Err(e) if typ == "sysfs" && e.raw_os_error() == Some(libc::EPERM) => {
                    let s = cs(b"/oldroot/sys").or_else(|e| err(what(), e))?;
                    mount(Some(&s), &dp, None, libc::MS_BIND | libc::MS_REC, None)
                        .or_else(|e| err(what(), e))?;
                    Ok(())
                }
                Err(e) => err(what(), e),
                Ok(()) => match under {
                    Some(under) => {
                        let top = open_in(
                            root,
                            m.dst.as_os_str().as_bytes(),
                            (libc::O_RDONLY | libc::O_DIRECTORY) as u64,
                        )
                        .or_else(|e| err(what(), e))?;
                        super::copyup::copy(under.as_raw_fd(), top.as_raw_fd())
                            .or_else(|e| err(format!("{} (tmpcopyup)", what()), e))
                    }
                    None => Ok(()),
                },
            }
        }
    }
}

/// A `cgroup` mount on a unified host: the container's `cgroup2`.
fn cgroup2(root: RawFd, dst: &Path, ro: bool) -> io::Result<()> {
    let d = make_in(root, dst, true)?;
    let dp = fd_path(d.as_raw_fd())?;
    let t = cs(b"cgroup2")?;
    mount(
        Some(&t),
        &dp,
        Some(&t),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | if ro { libc::MS_RDONLY } else { 0 },
        None,
    )
}

/// A `cgroup` mount on a v1 host: a tmpfs with each of `binds` (the container's own
/// directory of a hierarchy, at its name) bound (read-only when the mount is).
fn cgroup_v1(root: RawFd, dst: &Path, ro: bool, binds: &[(PathBuf, PathBuf)]) -> io::Result<()> {
    let d = make_in(root, dst, true)?;
    let dp = fd_path(d.as_raw_fd())?;
    let t = cs(b"tmpfs")?;
    mount(
        Some(&t),
        &dp,
        Some(&t),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some(&cs(b"mode=755")?),
    )?;
    for (host, sub) in binds {
        let df = make_in(root, sub, true)?;
        let s = cs(host.as_os_str().as_bytes())?;
        let dp2 = fd_path(df.as_raw_fd())?;
        mount(Some(&s), &dp2, None, libc::MS_BIND, None)?;
        if ro {
            seal(root, sub, false)?;
        }
    }
    if ro {
        let again = open_in(root, dst.as_os_str().as_bytes(), libc::O_PATH as u64)?;
        crate::kernel::sys::mount_setattr(
            &fd_path(again.as_raw_fd())?,
            crate::kernel::sys::MOUNT_ATTR_RDONLY,
            false,
        )?;
    }
    Ok(())
}

/// One device node at `path`: whatever the image has there (a link to a host file or a
/// procfs file, a file) is taken away, never followed, and the device made in its place:
/// `mknod` in the parent directory resolved in the rootfs, or (in a user namespace, where
/// `mknod` is refused) an empty file made there with the host's device bound onto it by
/// descriptor. What was made is checked to be that device before its owner and mode are
/// set through the descriptor.
#[allow(clippy::too_many_arguments)]
fn device(
    root: RawFd,
    path: &Path,
    typ: &str,
    major: u32,
    minor: u32,
    mode: u32,
    owner: Option<(u32, u32)>,
    userns: bool,
) -> io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    let dir = dir_in(root, parent)?;
    let name = cs(path.file_name().map(|n| n.as_bytes()).unwrap_or(b""))?;
    let kind = match typ {
        "b" => libc::S_IFBLK,
        "p" => libc::S_IFIFO,
        _ => libc::S_IFCHR,
    };
    let numbers_match = |st: &libc::stat| {
        st.st_mode & libc::S_IFMT == kind
            && (kind == libc::S_IFIFO || st.st_rdev == libc::makedev(major, minor))
    };
    if userns {
        // no mknod in a user namespace: the host's device, bound
        let host = Path::new("/oldroot").join(path.strip_prefix("/").unwrap_or(path));
        let h = cs(host.as_os_str().as_bytes())?;
        // SAFETY: open of a host path as O_PATH (the host's own /dev, not the image's).
        let src = unsafe { libc::open(h.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if src < 0 {
            return Err(last());
        }
        // SAFETY: a new descriptor of ours.
        let src = unsafe { OwnedFd::from_raw_fd(src) };
        if !numbers_match(&checked::stat(src.as_raw_fd())?) {
            return Err(io::Error::other(format!(
                "the host's {} is not that device",
                path.display()
            )));
        }
        let t = fresh_file(dir.as_raw_fd(), &name, 0o600)?;
        return mount(
            Some(&fd_path(src.as_raw_fd())?),
            &fd_path(t.as_raw_fd())?,
            None,
            libc::MS_BIND,
            None,
        );
    }
    clear(dir.as_raw_fd(), &name)?;
    // SAFETY: mknodat relative to our descriptor (it never follows a link).
    if unsafe {
        libc::mknodat(
            dir.as_raw_fd(),
            name.as_ptr(),
            kind | (mode & 0o7777),
            libc::makedev(major, minor),
        )
    } < 0
    {
        return Err(last());
    }
    let fd = path_at(dir.as_raw_fd(), &name)?;
    if !numbers_match(&checked::stat(fd.as_raw_fd())?) {
        return Err(io::Error::other("not the device just made"));
    }
    // SAFETY: fchownat of our O_PATH descriptor itself (AT_EMPTY_PATH).
    if let Some((u, g)) = owner {
        if unsafe { libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), u, g, libc::AT_EMPTY_PATH) } < 0 {
            return Err(last());
        }
    }
    // mknod honours the umask: the mode as asked, set on the inode the descriptor holds
    let p = fd_path(fd.as_raw_fd())?;
    // SAFETY: chmod of our descriptor's magic link (the inode just made).
    unsafe { libc::chmod(p.as_ptr(), mode & 0o7777) };
    Ok(())
}

fn devices(root: RawFd, list: &[DeviceNode], userns: bool) -> R<()> {
    for d in list {
        // /dev/ptmx is the link to the devpts's own below, as runc makes it
        if d.path == Path::new("/dev/ptmx") {
            continue;
        }
        device(
            root, &d.path, &d.typ, d.major, d.minor, d.mode, d.owner, userns,
        )
        .or_else(|e| err(d.what.clone(), e))?;
    }
    // the links every container has, in place of whatever the image has at their names
    let dev = dir_in(root, Path::new("/dev")).or_else(|e| err("opening /dev", e))?;
    for (link, target) in mounts::DEV_LINKS.iter().chain(&[("core", "/proc/kcore")]) {
        let (l, t) = (
            cs(link.as_bytes()).unwrap_or_default(),
            cs(target.as_bytes()).unwrap_or_default(),
        );
        let made = clear(dev.as_raw_fd(), &l).and_then(|()| {
            // SAFETY: symlinkat relative to our descriptor.
            if unsafe { libc::symlinkat(t.as_ptr(), dev.as_raw_fd(), l.as_ptr()) } < 0 {
                return Err(last());
            }
            Ok(())
        });
        made.or_else(|e| err(format!("making /dev/{link}"), e))?;
    }
    Ok(())
}

/// The container's terminal: a pair on its own devpts's `ptmx` (`/dev/pts/ptmx`,
/// resolved in the rootfs without a link and checked to be one), the slave by
/// `TIOCGPTPEER`, and bound onto a fresh `/dev/console` by descriptor (never through a
/// link the image left there). Returns (master, slave).
fn console(root: RawFd) -> io::Result<(OwnedFd, OwnedFd)> {
    let ptmx = checked::open_ptmx(root, c"/dev/pts/ptmx", libc::RESOLVE_IN_ROOT)?;
    let (master, slave) = checked::pty_pair(ptmx)?;
    let dev = dir_in(root, Path::new("/dev"))?;
    let target = fresh_file(dev.as_raw_fd(), &cs(b"console")?, 0o600)?;
    mount(
        Some(&fd_path(slave.as_raw_fd())?),
        &fd_path(target.as_raw_fd())?,
        None,
        libc::MS_BIND,
        None,
    )?;
    Ok((master, slave))
}

/// `linux.sysctl`: each value written to its file of the container's procfs (at `/proc`
/// in the rootfs, checked to be a procfs's root: a file of the image's is refused, not
/// written), without crossing a mount or a link (a bind over `/proc/sys/...` cannot
/// turn it into a write elsewhere).
fn sysctls(root: RawFd, list: &[(String, String, String)]) -> R<()> {
    if list.is_empty() {
        return Ok(());
    }
    let proc = checked::proc_root(root, c"/proc", libc::RESOLVE_IN_ROOT)
        .or_else(|e| err("linux.sysctl: the container's /proc", e))?;
    for (k, path, v) in list {
        let rel = path.strip_prefix("/proc/").unwrap_or(path);
        checked::proc_write(proc.as_raw_fd(), rel, v.as_bytes())
            .or_else(|e| err(format!("linux.sysctl {k}"), e))?;
    }
    Ok(())
}

/// `linux.maskedPaths`: an empty read-only tmpfs over a directory, `/dev/null` over
/// anything else; missing paths are nothing to hide.
fn mask(root: RawFd, p: &Path) -> io::Result<()> {
    let fd = match open_in(root, p.as_os_str().as_bytes(), libc::O_PATH as u64) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    let dp = fd_path(fd.as_raw_fd())?;
    if is_dir(fd.as_raw_fd()) {
        let t = cs(b"tmpfs")?;
        mount(
            Some(&t),
            &dp,
            Some(&t),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some(&cs(b"size=0,mode=555")?),
        )
    } else {
        // the host's /dev/null (never the image's), checked to be it
        let null = checked::openat2(libc::AT_FDCWD, c"/oldroot/dev/null", libc::O_PATH as u64, 0)?;
        if !checked::is_char_device(&checked::stat(null.as_raw_fd())?, 1, 3) {
            return Err(io::Error::other(
                "the host's /dev/null is not the null device",
            ));
        }
        mount(
            Some(&fd_path(null.as_raw_fd())?),
            &dp,
            None,
            libc::MS_BIND,
            None,
        )
    }
}

/// `linux.readonlyPaths`: bound onto itself, read-only (with what is below it).
fn read_only(root: RawFd, p: &Path) -> io::Result<()> {
    let fd = match open_in(root, p.as_os_str().as_bytes(), libc::O_PATH as u64) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    let dp = fd_path(fd.as_raw_fd())?;
    mount(Some(&dp), &dp, None, libc::MS_BIND | libc::MS_REC, None)?;
    seal(root, p, true)
}

/// The mount now at `p` (reopened: an older descriptor names what was under it) made
/// read-only, `nosuid`, `nodev`, `noexec` (and what is below it, when `recursive`).
fn seal(root: RawFd, p: &Path, recursive: bool) -> io::Result<()> {
    let again = open_in(root, p.as_os_str().as_bytes(), libc::O_PATH as u64)?;
    crate::kernel::sys::mount_setattr(
        &fd_path(again.as_raw_fd())?,
        crate::kernel::sys::MOUNT_ATTR_RDONLY
            | crate::kernel::sys::MOUNT_ATTR_NOSUID
            | crate::kernel::sys::MOUNT_ATTR_NODEV
            | 0x8, // MOUNT_ATTR_NOEXEC
        recursive,
    )
}

/// Build the whole root and switch to it; runs in the container's init, in its new mount
/// namespace, before anything is forked. Returns the terminal's (master, slave) when the
/// root has one.
pub fn build(plan: &Root<'_>) -> R<Option<(OwnedFd, OwnedFd)>> {
    let rootfs = plan.rootfs;
    mounts::enter_setup_root()?;
    let s = mounts::under(mounts::OLD, rootfs).or_else(|e| err("the rootfs", e))?;
    let n = cs(mounts::NEW.as_bytes()).unwrap_or_default();
    mount(Some(&s), &n, None, libc::MS_BIND | libc::MS_REC, None)
        .or_else(|e| err(format!("binding the rootfs {}", rootfs.display()), e))?;
    // SAFETY: open of the new root we just mounted.
    let rfd = unsafe {
        libc::open(
            n.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if rfd < 0 {
        return err("opening the new root", last());
    }
    // SAFETY: ours.
    let root = unsafe { OwnedFd::from_raw_fd(rfd) };
    for (i, m) in plan.mounts.iter().enumerate() {
        apply(root.as_raw_fd(), m)?;
        propagate(root.as_raw_fd(), m)
            .or_else(|e| err(format!("mounts[{i}].options (propagation)"), e))?;
    }
    devices(root.as_raw_fd(), plan.devices, plan.bind_devices)?;
    let terminal = if plan.console {
        Some(console(root.as_raw_fd()).or_else(|e| err("the terminal: /dev/console", e))?)
    } else {
        None
    };
    // before the read-only and masked paths, as runc writes them
    sysctls(root.as_raw_fd(), plan.sysctl)?;
    for p in plan.masked_paths {
        mask(root.as_raw_fd(), p)
            .or_else(|e| err(format!("linux.maskedPaths: {}", p.display()), e))?;
    }
    for p in plan.readonly_paths {
        read_only(root.as_raw_fd(), p)
            .or_else(|e| err(format!("linux.readonlyPaths: {}", p.display()), e))?;
    }
    drop(root);
    mounts::finish_root_as(plan.read_only)?;
    if let Some(f) = plan.propagation {
        mount(None, &cs(b"/").unwrap_or_default(), None, f, None)
            .or_else(|e| err("linux.rootfsPropagation", e))?;
    }
    Ok(terminal)
}

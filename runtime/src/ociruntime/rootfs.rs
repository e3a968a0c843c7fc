//! The container's root, as its plan has it ([`crate::plan::container::ContainerPlan`]):
//! the bundle's rootfs bound over capsule's setup root (`linux::mounts::enter_setup_root`,
//! the same first step as `capsule exec`'s), the mount steps in order, the devices, the
//! masked and read-only paths, then the switch with pivot_root
//! (`linux::mounts::finish_root_as`). Nothing is decided here: each step is the plan's.
//!
//! The rootfs is hostile input: every destination is resolved inside it with
//! `openat2(RESOLVE_IN_ROOT)` (a symlink in the image cannot lead a mount out of it, as
//! runc's CVE-2021-30465 did), missing directories are made there one component at a
//! time, and the mount goes onto the descriptor (`/proc/self/fd/N` of the host's proc,
//! reachable as `/oldroot/proc`).

use crate::linux::mounts::{self, StepError};
use crate::plan::container::{ContainerPlan, DeviceNode, Mount, MountKind};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

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

/// `openat2(dirfd, path, O_PATH, RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS)`.
fn open_in(root: RawFd, path: &[u8], flags: u64) -> io::Result<OwnedFd> {
    let p = cs(path)?;
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: flags | libc::O_CLOEXEC as u64,
        mode: 0,
        resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: a valid open_how of its own size and a C string.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root,
            p.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(last());
    }
    // SAFETY: a new descriptor of ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
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

/// One mount step at its place in the root `root` (`/newroot`).
fn apply(root: RawFd, m: &Mount) -> R<()> {
    let what = || m.what.clone();
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
    let host = Path::new("/oldroot").join(path.strip_prefix("/").unwrap_or(path));
    if userns {
        // no mknod in a user namespace: the host's device, bound
        let s = cs(host.as_os_str().as_bytes())?;
        let d = make_in(root, path, false)?;
        return mount(
            Some(&s),
            &fd_path(d.as_raw_fd())?,
            None,
            libc::MS_BIND,
            None,
        );
    }
    let parent = path.parent().unwrap_or(Path::new("/"));
    let pfd = make_in(root, parent, true)?;
    let name = cs(path.file_name().map(|n| n.as_bytes()).unwrap_or(b""))?;
    let kind = match typ {
        "b" => libc::S_IFBLK,
        "p" => libc::S_IFIFO,
        _ => libc::S_IFCHR,
    };
    // reopen the parent as a real directory descriptor for mknodat
    let dirfd = open_in(
        root,
        parent.as_os_str().as_bytes(),
        (libc::O_RDONLY | libc::O_DIRECTORY) as u64,
    )?;
    drop(pfd);
    // SAFETY: calls on descriptors of ours.
    unsafe {
        libc::unlinkat(dirfd.as_raw_fd(), name.as_ptr(), 0);
        if libc::mknodat(
            dirfd.as_raw_fd(),
            name.as_ptr(),
            kind | (mode & 0o7777),
            libc::makedev(major, minor),
        ) < 0
        {
            return Err(last());
        }
        if let Some((u, g)) = owner {
            if libc::fchownat(
                dirfd.as_raw_fd(),
                name.as_ptr(),
                u,
                g,
                libc::AT_SYMLINK_NOFOLLOW,
            ) < 0
            {
                return Err(last());
            }
        }
        // mknod honours the umask: the mode as asked
        libc::fchmodat(dirfd.as_raw_fd(), name.as_ptr(), mode & 0o7777, 0);
    }
    Ok(())
}

fn devices(root: RawFd, list: &[DeviceNode], userns: bool, terminal: bool) -> R<()> {
    for d in list {
        device(
            root, &d.path, &d.typ, d.major, d.minor, d.mode, d.owner, userns,
        )
        .or_else(|e| err(d.what.clone(), e))?;
    }
    // the links every container has
    let dev = open_in(root, b"/dev", (libc::O_RDONLY | libc::O_DIRECTORY) as u64)
        .or_else(|e| err("opening /dev", e))?;
    for (link, target) in mounts::DEV_LINKS.iter().chain(&[("core", "/proc/kcore")]) {
        let (l, t) = (
            cs(link.as_bytes()).unwrap_or_default(),
            cs(target.as_bytes()).unwrap_or_default(),
        );
        // SAFETY: symlinkat relative to our descriptor; an existing entry stays.
        unsafe { libc::symlinkat(t.as_ptr(), dev.as_raw_fd(), l.as_ptr()) };
    }
    if terminal {
        make_in(root, Path::new("/dev/console"), false)
            .or_else(|e| err("creating /dev/console", e))?;
    }
    Ok(())
}

/// One `linux.sysctl` value written to `path` (`/proc/sys/...`) of the container's
/// `/proc`, which must be a proc mount by now (a file of the image is refused, not
/// written).
fn sysctl(root: RawFd, path: &str, value: &str) -> io::Result<()> {
    let fd = open_in(root, path.as_bytes(), libc::O_WRONLY as u64)?;
    // SAFETY: fstatfs into a zeroed struct, on our descriptor.
    let proc = unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        libc::fstatfs(fd.as_raw_fd(), &mut s) == 0 && s.f_type == libc::PROC_SUPER_MAGIC
    };
    if !proc {
        return Err(io::Error::other(format!(
            "{path} is not in a proc mount of the container"
        )));
    }
    let mut f = std::fs::File::from(fd);
    io::Write::write_all(&mut f, value.as_bytes())
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
        mount(
            Some(&cs(b"/oldroot/dev/null")?),
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

/// Build the whole root of `plan` and switch to it. `rootfs` is the host path (the
/// plan's, resolved); runs in the container's init, in its new mount namespace, before
/// anything is forked.
pub fn build(plan: &ContainerPlan, rootfs: &Path) -> R<()> {
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
    devices(
        root.as_raw_fd(),
        &plan.devices,
        plan.bind_devices,
        plan.console,
    )?;
    // before the masked and read-only paths: `/proc/sys` is one of them
    for (k, path, v) in &plan.sysctl {
        sysctl(root.as_raw_fd(), path, v).or_else(|e| err(format!("linux.sysctl {k}"), e))?;
    }
    for p in &plan.masked_paths {
        mask(root.as_raw_fd(), p)
            .or_else(|e| err(format!("linux.maskedPaths: {}", p.display()), e))?;
    }
    for p in &plan.readonly_paths {
        read_only(root.as_raw_fd(), p)
            .or_else(|e| err(format!("linux.readonlyPaths: {}", p.display()), e))?;
    }
    drop(root);
    mounts::finish_root_as(plan.root_readonly)?;
    if let Some(f) = plan.rootfs_propagation {
        mount(None, &cs(b"/").unwrap_or_default(), None, f, None)
            .or_else(|e| err("linux.rootfsPropagation", e))?;
    }
    Ok(())
}

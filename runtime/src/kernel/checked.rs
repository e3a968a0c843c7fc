//! Opening what a hostile tree names without following its links, and checking that what
//! was opened is what it must be, before capsule writes to it, mounts onto it or hands it
//! to a command: a container's rootfs (its image) and a running container's `/dev` and
//! `/proc` can hold a symlink, a bind or a file of the wrong kind where a device or a
//! procfs file should be. What runc does since its 2025 fixes (CVE-2025-31133, the masked
//! paths' `/dev/null`; CVE-2025-52565, `/dev/console`; CVE-2025-52881, procfs writes):
//!
//! - paths are resolved with `openat2` (`RESOLVE_NO_SYMLINKS` or `RESOLVE_IN_ROOT`,
//!   never a magic link), and what is opened is checked with `fstat`/`fstatfs`;
//! - a pseudo-terminal's master comes from a devpts's own `ptmx` (inode 2, device 5:2,
//!   on a devpts: [`open_ptmx`]) and its slave by `TIOCGPTPEER` (no path);
//! - a procfs file is written only through a procfs root (inode 1) without crossing a
//!   mount or a link ([`proc_write`]), so a bind or symlink over `/proc/sys/...` cannot
//!   turn a sysctl into a write to `/proc/sysrq-trigger`.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub const PROC_SUPER_MAGIC: i64 = 0x9fa0;
pub const SYSFS_MAGIC: i64 = 0x6265_6572;
pub const DEVPTS_SUPER_MAGIC: i64 = 0x1cd1;
/// The inode of a procfs's root.
const PROC_ROOT_INO: u64 = 1;

/// `openat2(dirfd, path, flags | O_CLOEXEC, resolve | RESOLVE_NO_MAGICLINKS)`. Where
/// `openat2` answers `ENOSYS` (under capsule's own seccomp filter, which refuses it so
/// that libc falls back) and no link may be followed, the path is walked one component
/// at a time with `O_NOFOLLOW` instead: the same answer, without `openat2`.
pub fn openat2(dirfd: RawFd, path: &CStr, flags: u64, resolve: u64) -> io::Result<OwnedFd> {
    match openat2_call(dirfd, path, flags, resolve) {
        Err(e)
            if e.raw_os_error() == Some(libc::ENOSYS)
                && resolve & libc::RESOLVE_NO_SYMLINKS != 0
                && resolve & libc::RESOLVE_NO_XDEV == 0 =>
        {
            walk_nofollow(dirfd, path, flags, resolve & libc::RESOLVE_IN_ROOT != 0)
        }
        r => r,
    }
}

/// `path` opened from `dirfd` (an absolute one from `/`, or from `dirfd` when `in_root`)
/// one component at a time, none of them followed if a link; `..` is refused.
fn walk_nofollow(dirfd: RawFd, path: &CStr, flags: u64, in_root: bool) -> io::Result<OwnedFd> {
    let bytes = path.to_bytes();
    let comps: Vec<&[u8]> = bytes
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect();
    if comps.iter().any(|c| *c == b"..") {
        return Err(io::Error::from_raw_os_error(libc::EXDEV));
    }
    let start: &CStr = if bytes.starts_with(b"/") && !in_root {
        c"/"
    } else {
        c"."
    };
    let open = |at: RawFd, name: &CStr, fl: libc::c_int| -> io::Result<OwnedFd> {
        // SAFETY: openat relative to a descriptor of ours (or AT_FDCWD).
        let fd = unsafe { libc::openat(at, name.as_ptr(), fl | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor of ours.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let mut cur = open(
        if start == c"/" { libc::AT_FDCWD } else { dirfd },
        start,
        libc::O_PATH | libc::O_DIRECTORY,
    )?;
    for (i, c) in comps.iter().enumerate() {
        let name = CString::new(*c).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let fl = if i + 1 == comps.len() {
            flags as libc::c_int | libc::O_NOFOLLOW
        } else {
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW
        };
        cur = open(cur.as_raw_fd(), &name, fl)?;
    }
    Ok(cur)
}

fn openat2_call(dirfd: RawFd, path: &CStr, flags: u64, resolve: u64) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: flags | libc::O_CLOEXEC as u64,
        mode: 0,
        resolve: resolve | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: a valid open_how of its own size and a C string.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor of ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `fstat` of `fd` (an `O_PATH` descriptor too).
pub fn stat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: fstat into a zeroed struct.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st)
    }
}

/// The magic number of the filesystem `fd` is on (an `O_PATH` descriptor too).
pub fn fs_magic(fd: RawFd) -> io::Result<i64> {
    // SAFETY: fstatfs into a zeroed struct.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::fstatfs(fd, &mut st) < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st.f_type as i64)
    }
}

/// Is `fd` on a procfs or a sysfs (where a device or a mount target never belongs)?
pub fn on_procfs_or_sysfs(fd: RawFd) -> io::Result<bool> {
    Ok(matches!(fs_magic(fd)?, PROC_SUPER_MAGIC | SYSFS_MAGIC))
}

fn invalid(what: String) -> io::Error {
    io::Error::other(what)
}

/// Is `st` the character device `major:minor`?
pub fn is_char_device(st: &libc::stat, major: u32, minor: u32) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == libc::makedev(major, minor)
}

/// `fd` is a devpts's `ptmx`: inode 2, character device 5:2, on a devpts.
pub fn check_ptmx(fd: RawFd) -> io::Result<()> {
    let magic = fs_magic(fd)?;
    if magic != DEVPTS_SUPER_MAGIC {
        return Err(invalid(format!(
            "ptmx is not on a devpts (filesystem magic {magic:#x})"
        )));
    }
    let st = stat(fd)?;
    if st.st_ino != 2 || !is_char_device(&st, 5, 2) {
        return Err(invalid(format!(
            "ptmx is not a devpts's ptmx (inode {}, mode {:o})",
            st.st_ino, st.st_mode
        )));
    }
    Ok(())
}

/// A devpts's `ptmx` at `path` (resolved from `dirfd` with `resolve`, never through a
/// link), opened for reading and writing: looked at first (`O_PATH`: opening a hostile
/// inode could block or act), checked ([`check_ptmx`]), then opened and checked to be
/// the same inode.
pub fn open_ptmx(dirfd: RawFd, path: &CStr, resolve: u64) -> io::Result<OwnedFd> {
    let resolve = resolve | libc::RESOLVE_NO_SYMLINKS;
    let look = openat2(
        dirfd,
        path,
        (libc::O_PATH | libc::O_NOFOLLOW) as u64,
        resolve,
    )?;
    check_ptmx(look.as_raw_fd())?;
    let seen = stat(look.as_raw_fd())?;
    let fd = openat2(
        dirfd,
        path,
        (libc::O_RDWR | libc::O_NOCTTY | libc::O_NOFOLLOW) as u64,
        resolve,
    )?;
    check_ptmx(fd.as_raw_fd())?;
    let now = stat(fd.as_raw_fd())?;
    if (now.st_dev, now.st_ino) != (seen.st_dev, seen.st_ino) {
        return Err(invalid("ptmx changed while it was opened".into()));
    }
    Ok(fd)
}

/// A pseudo-terminal pair on the checked `ptmx` (see [`open_ptmx`]): (master, slave),
/// close-on-exec; the slave by `TIOCGPTPEER`, without a path lookup.
pub fn pty_pair(ptmx: OwnedFd) -> io::Result<(OwnedFd, OwnedFd)> {
    let unlock: libc::c_int = 0;
    // SAFETY: ioctls on our own descriptor.
    unsafe {
        if libc::ioctl(ptmx.as_raw_fd(), libc::TIOCSPTLCK, &unlock) < 0 {
            return Err(io::Error::last_os_error());
        }
        // TIOCGPTPEER
        let slave = libc::ioctl(
            ptmx.as_raw_fd(),
            0x5441,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if slave < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((ptmx, OwnedFd::from_raw_fd(slave)))
    }
}

/// The root of a procfs at `proc` (resolved from `dirfd` with `resolve`), checked: a
/// procfs, and its root (not a directory inside one bound there).
pub fn proc_root(dirfd: RawFd, proc: &CStr, resolve: u64) -> io::Result<OwnedFd> {
    let fd = openat2(
        dirfd,
        proc,
        (libc::O_PATH | libc::O_DIRECTORY) as u64,
        resolve,
    )?;
    let magic = fs_magic(fd.as_raw_fd())?;
    let st = stat(fd.as_raw_fd())?;
    if magic != PROC_SUPER_MAGIC || st.st_ino != PROC_ROOT_INO {
        return Err(invalid(format!(
            "{} is not the root of a procfs",
            proc.to_string_lossy()
        )));
    }
    Ok(fd)
}

/// Write `data` to the file `rel` of the procfs whose root is `root` ([`proc_root`]):
/// resolved beneath it without a link (`self` is one: name the pid) and without crossing
/// a mount, checked to be on a procfs.
pub fn proc_write(root: RawFd, rel: &str, data: &[u8]) -> io::Result<()> {
    let p = CString::new(rel).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fd = openat2(
        root,
        &p,
        (libc::O_WRONLY | libc::O_NOCTTY | libc::O_NOFOLLOW) as u64,
        libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_XDEV,
    )?;
    if fs_magic(fd.as_raw_fd())? != PROC_SUPER_MAGIC {
        return Err(invalid(format!("/proc/{rel} is not on a procfs")));
    }
    let mut f = std::fs::File::from(fd);
    std::io::Write::write_all(&mut f, data)
}

/// [`proc_write`] of the current root's `/proc` (after the switch to a container's root).
pub fn proc_write_here(rel: &str, data: &[u8]) -> io::Result<()> {
    let root = proc_root(libc::AT_FDCWD, c"/proc", libc::RESOLVE_NO_SYMLINKS)?;
    proc_write(root.as_raw_fd(), rel, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_procfs_root_and_its_files() {
        let root = proc_root(libc::AT_FDCWD, c"/proc", libc::RESOLVE_NO_SYMLINKS).unwrap();
        // a directory inside a procfs is not its root
        assert!(proc_root(libc::AT_FDCWD, c"/proc/sys", libc::RESOLVE_NO_SYMLINKS).is_err());
        // something else entirely
        assert!(proc_root(libc::AT_FDCWD, c"/dev", libc::RESOLVE_NO_SYMLINKS).is_err());
        // `self` is a link: refused, the pid's own directory is not
        let me = std::process::id();
        let own = std::fs::read_to_string("/proc/self/oom_score_adj").unwrap();
        assert!(proc_write(root.as_raw_fd(), "self/oom_score_adj", own.as_bytes()).is_err());
        proc_write(
            root.as_raw_fd(),
            &format!("{me}/oom_score_adj"),
            own.as_bytes(),
        )
        .unwrap();
        // no way out of it
        assert!(proc_write(root.as_raw_fd(), "../etc/hostname", b"x").is_err());
    }

    #[test]
    fn a_ptmx_is_checked() {
        let Ok(fd) = open_ptmx(libc::AT_FDCWD, c"/dev/pts/ptmx", 0) else {
            eprintln!("skipped: no /dev/pts/ptmx to open here");
            return;
        };
        let (m, s) = pty_pair(fd).unwrap();
        assert!(m.as_raw_fd() >= 0 && s.as_raw_fd() >= 0);
        // /dev/null is no ptmx; a symlink is not followed
        let null = openat2(libc::AT_FDCWD, c"/dev/null", libc::O_PATH as u64, 0).unwrap();
        assert!(check_ptmx(null.as_raw_fd()).is_err());
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/pts/ptmx", d.path().join("ptmx")).unwrap();
        let p = CString::new(d.path().join("ptmx").to_str().unwrap()).unwrap();
        // (opened as the link itself, which is no ptmx)
        assert!(open_ptmx(libc::AT_FDCWD, &p, 0).is_err());
        // the walk used where openat2 is refused: the same answers
        let w = walk_nofollow(libc::AT_FDCWD, c"/dev/pts/ptmx", libc::O_PATH as u64, false);
        check_ptmx(w.unwrap().as_raw_fd()).unwrap();
        std::os::unix::fs::symlink("/dev/pts", d.path().join("pts")).unwrap();
        let via = CString::new(d.path().join("pts/ptmx").to_str().unwrap()).unwrap();
        assert!(walk_nofollow(libc::AT_FDCWD, &via, libc::O_PATH as u64, false).is_err());
        assert!(walk_nofollow(libc::AT_FDCWD, c"/dev/../dev/null", 0, false).is_err());
    }
}

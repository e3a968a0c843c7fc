//! Thin wrappers over the Linux system calls the executor needs, with `errno` kept.
//!
//! Everything here is called in the sandbox's setup processes (after `clone`), so each
//! wrapper is a direct system call that returns `std::io::Error` and allocates nothing
//! beyond what its caller already prepared.

use std::ffi::CStr;
use std::io;
use std::os::fd::RawFd;

pub(super) fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

pub(super) fn check_int(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A system call's error as runc (Go) words it: `no such file or directory` (the text
/// capsule-runc's messages carry, where the shim and its tools look for it).
pub fn os_error(e: &std::io::Error) -> String {
    let Some(code) = e.raw_os_error() else {
        return e.to_string();
    };
    let text = std::io::Error::from_raw_os_error(code).to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    let mut c = text.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => text.to_string(),
    }
}

/// `MOUNT_ATTR_*` bits of `mount_setattr(2)`.
pub const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
pub const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
pub const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Set mount attributes on the mount at `path` (and, with `recursive`, every mount below
/// it). Unlike a `MS_REMOUNT`, this leaves the locked flags of inherited mounts alone.
pub fn mount_setattr(path: &CStr, set: u64, recursive: bool) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 } | libc::AT_NO_AUTOMOUNT;
    // SAFETY: valid C string and a properly sized struct.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

/// `mount(2)`.
pub fn mount(
    src: Option<&CStr>,
    dst: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let p = |c: Option<&CStr>| c.map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: all pointers are valid C strings or null.
    check_int(unsafe {
        libc::mount(
            p(src),
            dst.as_ptr(),
            p(fstype),
            flags,
            p(data) as *const libc::c_void,
        )
    })
    .map(drop)
}

/// `umount2(2)`.
pub fn umount2(path: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: valid C string.
    check_int(unsafe { libc::umount2(path.as_ptr(), flags) }).map(drop)
}

/// `pivot_root(2)`.
pub fn pivot_root(new_root: &CStr, put_old: &CStr) -> io::Result<()> {
    // SAFETY: valid C strings.
    check(unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) })
        .map(drop)
}

/// `chdir(2)`.
pub fn chdir(path: &CStr) -> io::Result<()> {
    // SAFETY: valid C string.
    check_int(unsafe { libc::chdir(path.as_ptr()) }).map(drop)
}

/// `mkdir(2)`; an existing entry is not an error.
pub fn mkdir(path: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: valid C string.
    if unsafe { libc::mkdir(path.as_ptr(), mode) } < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e);
        }
    }
    Ok(())
}

/// Create an empty regular file if nothing exists at `path`.
pub fn touch(path: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: valid C string.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened.
    unsafe { libc::close(fd) };
    Ok(())
}

/// `symlink(2)`.
pub fn symlink(target: &CStr, path: &CStr) -> io::Result<()> {
    // SAFETY: valid C strings.
    check_int(unsafe { libc::symlink(target.as_ptr(), path.as_ptr()) }).map(drop)
}

/// What is at a path (the walkers' kind: a FIFO, socket or device is `Special`).
pub use capsule_bundle::fsat::Kind;

/// `lstat(2)` reduced to a [`Kind`].
pub fn kind(path: &CStr) -> Kind {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out-pointer.
    if unsafe { libc::lstat(path.as_ptr(), &mut st) } < 0 {
        return Kind::Missing;
    }
    Kind::of_mode(st.st_mode)
}

/// `stat(2)` (following symlinks) reduced to a [`Kind`].
pub fn kind_follow(path: &CStr) -> Kind {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out-pointer.
    if unsafe { libc::stat(path.as_ptr(), &mut st) } < 0 {
        return Kind::Missing;
    }
    Kind::of_mode(st.st_mode)
}

/// Mark every descriptor from `first` up close-on-exec (`close_range(2)`).
pub fn cloexec_from(first: u32) -> io::Result<()> {
    // SAFETY: plain syscall.
    check(unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    })
    .map(drop)
}

/// Let `fd` pass through `execve` (clear its close-on-exec flag).
pub fn keep_across_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor number; a closed one fails with EBADF.
    check_int(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }).map(drop)
}

/// Is `fd` an open descriptor of this process?
pub fn is_open(fd: RawFd) -> bool {
    // SAFETY: fcntl F_GETFD on a descriptor number.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// The pid (in our pid namespace) of the process of `pidfd` (its `fdinfo`).
pub fn pidfd_pid(pidfd: RawFd) -> io::Result<libc::pid_t> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{pidfd}"))?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse::<libc::pid_t>().ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| io::Error::other("the process of the pidfd is gone or not visible"))
}

/// `prctl(2)` with integer arguments.
pub fn prctl(op: libc::c_int, a: libc::c_ulong, b: libc::c_ulong) -> io::Result<()> {
    // SAFETY: integer-only prctl options.
    check_int(unsafe { libc::prctl(op, a, b, 0 as libc::c_ulong, 0 as libc::c_ulong) }).map(drop)
}

/// `write(2)` of the whole buffer (retrying on EINTR and short writes).
pub fn write_all(fd: RawFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::write(fd, buf.as_ptr() as *const libc::c_void, buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// `read(2)` retrying on EINTR; returns the number of bytes read (0 at end of file).
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(n as usize);
    }
}

/// A pipe with both ends close-on-exec: (read, write).
pub fn pipe() -> io::Result<(RawFd, RawFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is a valid out-array of two ints.
    check_int(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    Ok((fds[0], fds[1]))
}

/// [`pipe`], its ends owned: (read, write).
pub fn pipe_owned() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let (r, w) = pipe()?;
    // SAFETY: two new descriptors of ours.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(r),
            std::os::fd::OwnedFd::from_raw_fd(w),
        )
    })
}

/// `close(2)`, ignoring errors.
pub fn close(fd: RawFd) {
    if fd >= 0 {
        // SAFETY: closing a descriptor we own.
        unsafe { libc::close(fd) };
    }
}

/// `sendmsg(2)` of `bytes` (not empty) with `fds` attached (`SCM_RIGHTS`); bytes sent.
pub fn send_fds(sock: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let cmsg = [ControlMessage::ScmRights(fds)];
    let iov = [io::IoSlice::new(bytes)];
    sendmsg::<()>(sock, &iov, &cmsg, MsgFlags::empty(), None).map_err(io::Error::from)
}

/// `recvmsg(2)` of up to `buf.len()` bytes and the descriptors that came with them (made
/// close-on-exec, owned by the caller); `(0, [])` at end of file.
pub fn recv_fds(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<std::os::fd::OwnedFd>)> {
    recv_fds_into(sock, buf, &mut nix::cmsg_space!([RawFd; 8]))
}

/// [`recv_fds`] with room for as many descriptors as `cmsg` (`nix::cmsg_space!`) holds.
pub fn recv_fds_into(
    sock: RawFd,
    buf: &mut [u8],
    cmsg: &mut [u8],
) -> io::Result<(usize, Vec<std::os::fd::OwnedFd>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(sock, &mut iov, Some(cmsg), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(io::Error::from)?;
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(v) = c {
            // SAFETY: descriptors just received are ours to own.
            fds.extend(v.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
        }
    }
    Ok((msg.bytes, fds))
}

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Bring the loopback interface of the current network namespace up.
pub fn loopback_up() -> io::Result<()> {
    // SAFETY: plain socket call.
    let fd = check_int(unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    })?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: req is a valid ifreq-sized buffer.
    let r = (|| {
        check_int(unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req as *mut IfReq) })?;
        req.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        // SAFETY: as above.
        check_int(unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS, &req as *const IfReq) })?;
        Ok(())
    })();
    close(fd);
    r
}

/// `setdomainname(2)`.
pub fn setdomainname(name: &[u8]) -> io::Result<()> {
    // SAFETY: buffer valid for its length.
    check_int(unsafe { libc::setdomainname(name.as_ptr() as *const libc::c_char, name.len()) })
        .map(drop)
}

/// `sethostname(2)`.
pub fn sethostname(name: &[u8]) -> io::Result<()> {
    // SAFETY: buffer valid for its length.
    check_int(unsafe { libc::sethostname(name.as_ptr() as *const libc::c_char, name.len()) })
        .map(drop)
}

/// `path` resolved to its canonical absolute form, like `std::fs::canonicalize` but in three
/// system calls (an `O_PATH` open, `readlink` of its `/proc/self/fd` entry, close) instead
/// of one `readlink` per component: `capsule exec --hide` ×200 spent ~1 ms in realpath.
/// Falls back to `std::fs::canonicalize` when /proc cannot answer.
pub fn canonicalize(path: &std::path::Path) -> io::Result<std::path::PathBuf> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: open with a valid C string; the result is checked.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    match std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())) {
        Ok(p) if p.is_absolute() && !p.as_os_str().as_bytes().ends_with(b" (deleted)") => Ok(p),
        _ => std::fs::canonicalize(path),
    }
}

/// [`canonicalize`] of many paths, cheaper when many share a parent (200 `--hide` flags
/// in one folder): each parent is resolved once, and an entry that is no symbolic link is
/// its parent's canonical path joined with its name (one `lstat`, or none when the parent
/// is listed); anything else (a link, `.`/`..`, a missing entry) goes through
/// [`canonicalize`] on its own.
pub fn canonicalize_many(paths: &[std::path::PathBuf]) -> Vec<io::Result<std::path::PathBuf>> {
    use std::collections::HashMap;
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;
    let listings = Listings::for_paths(paths.iter().map(PathBuf::as_path));
    // keyed by bytes: hashing a Path goes component by component
    let mut parents: HashMap<&[u8], Option<PathBuf>> = HashMap::new();
    paths
        .iter()
        .map(|p| {
            let Some((parent, name)) = split_name(p) else {
                return canonicalize(p);
            };
            let canon_parent = parents
                .entry(parent.as_os_str().as_bytes())
                .or_insert_with(|| canonicalize(parent).ok());
            let not_link = match listings.entry(parent, name) {
                Some(Some((_, _, t))) => t != libc::S_IFLNK,
                Some(None) => false, // not there: canonicalize says why
                None => std::fs::symlink_metadata(p).is_ok_and(|m| !m.file_type().is_symlink()),
            };
            match canon_parent {
                Some(cp) if not_link => Ok(cp.join(std::ffi::OsStr::from_bytes(name))),
                _ => canonicalize(p),
            }
        })
        .collect()
}

/// `p`'s parent and final name, from its bytes (no walk over its components), when the
/// final component is a plain name: not `.`, `..` or empty (a trailing `/`), and `p` has a
/// parent part. `/a/b` gives (`/a`, `b`), `/a` gives (`/`, `a`).
pub fn split_name(p: &std::path::Path) -> Option<(&std::path::Path, &[u8])> {
    use std::os::unix::ffi::OsStrExt;
    let b = p.as_os_str().as_bytes();
    let i = b.iter().rposition(|c| *c == b'/')?;
    let name = &b[i + 1..];
    if name.is_empty() || name == b"." || name == b".." {
        return None;
    }
    let parent = if i == 0 { &b[..1] } else { &b[..i] };
    Some((
        std::path::Path::new(std::ffi::OsStr::from_bytes(parent)),
        name,
    ))
}

/// Directory listings of the parents that many paths share (at least [`Listings::MANY`]):
/// one `getdents` instead of an `lstat` per entry. Entries give the device of the folder,
/// the inode number and the file type `readdir` reports.
pub struct Listings {
    /// By the folder's path bytes as [`split_name`] gives them.
    dirs: std::collections::HashMap<Vec<u8>, Option<std::rc::Rc<Listing>>>,
}

type Listing = (u64, std::collections::HashMap<Vec<u8>, (u64, libc::mode_t)>);

impl Listings {
    /// Parents with fewer paths than this are not listed (an `lstat` each is cheaper).
    pub const MANY: usize = 8;

    /// List the parents of `paths` that at least [`Self::MANY`] of them share.
    pub fn for_paths<'a>(paths: impl Iterator<Item = &'a std::path::Path>) -> Listings {
        use std::collections::HashMap;
        use std::os::unix::ffi::OsStrExt;
        let mut count: HashMap<&[u8], (&std::path::Path, usize)> = HashMap::new();
        for p in paths {
            if let Some((parent, _)) = split_name(p) {
                count
                    .entry(parent.as_os_str().as_bytes())
                    .or_insert((parent, 0))
                    .1 += 1;
            }
        }
        let dirs = count
            .into_iter()
            .filter(|(_, (_, n))| *n >= Self::MANY)
            .map(|(k, (d, _))| (k.to_vec(), listed(k, d)))
            .collect();
        Listings { dirs }
    }

    /// `None`: `parent` was not listed. `Some(None)`: listed, no entry `name` (or its type
    /// unknown). `Some(Some((dev, ino, type)))`: the entry (`type` as `S_IF*`).
    pub fn entry(
        &self,
        parent: &std::path::Path,
        name: &[u8],
    ) -> Option<Option<(u64, u64, libc::mode_t)>> {
        use std::os::unix::ffi::OsStrExt;
        let (dev, entries) = &**self.dirs.get(parent.as_os_str().as_bytes())?.as_ref()?;
        Some(entries.get(name).map(|(ino, t)| (*dev, *ino, *t)))
    }
}

/// [`list`] of `dir` (path bytes `key`), listed again only when the last listing is
/// older than [`LISTING_REUSE`]: an exec resolves its hidden paths and fingerprints them
/// a fraction of a millisecond apart, both with the folder's entries as they are now.
fn listed(key: &[u8], dir: &std::path::Path) -> Option<std::rc::Rc<Listing>> {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::rc::Rc;
    use std::time::Instant;
    type Memo = HashMap<Vec<u8>, (Instant, Option<Rc<Listing>>)>;
    thread_local! {
        static LISTED: RefCell<Memo> = RefCell::default();
    }
    LISTED.with(|l| {
        let mut l = l.borrow_mut();
        match l.get(key) {
            Some((at, v)) if at.elapsed() < LISTING_REUSE => v.clone(),
            _ => {
                let v = list(dir).map(Rc::new);
                l.insert(key.to_vec(), (Instant::now(), v.clone()));
                v
            }
        }
    })
}

/// How long a listing is reused by [`listed`].
const LISTING_REUSE: std::time::Duration = std::time::Duration::from_millis(50);

fn list(dir: &std::path::Path) -> Option<Listing> {
    use nix::dir::{Dir, Type};
    use nix::fcntl::OFlag;
    use std::os::fd::AsRawFd;
    let mut d = Dir::open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()?;
    // SAFETY: fstat into a zeroed stat of a descriptor we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(d.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    let mut entries = std::collections::HashMap::new();
    for e in d.iter() {
        let e = e.ok()?;
        let t = match e.file_type() {
            Some(Type::Directory) => libc::S_IFDIR,
            Some(Type::File) => libc::S_IFREG,
            Some(Type::Symlink) => libc::S_IFLNK,
            Some(Type::Socket) => libc::S_IFSOCK,
            Some(Type::Fifo) => libc::S_IFIFO,
            Some(Type::CharacterDevice) => libc::S_IFCHR,
            Some(Type::BlockDevice) => libc::S_IFBLK,
            // unknown type: the caller looks at the entry itself
            None => continue,
        };
        entries.insert(e.file_name().to_bytes().to_vec(), (e.ino(), t));
    }
    Some((st.st_dev as u64, entries))
}

#[cfg(test)]
mod canonicalize_tests {
    #[test]
    fn split_name_is_parent_and_file_name() {
        use std::path::Path;
        for p in ["/a/b", "/a", "/a//b", "a/b", "/a/./b", "/a/b.c"] {
            let p = Path::new(p);
            let (parent, name) = super::split_name(p).unwrap();
            assert_eq!(name, p.file_name().unwrap().as_encoded_bytes(), "{p:?}");
            // the same folder (a trailing `/` of a doubled one aside)
            assert_eq!(
                std::fs::canonicalize(parent).ok(),
                std::fs::canonicalize(p.parent().unwrap()).ok()
            );
        }
        for p in ["/", "a", "/a/", "/a/.", "/a/..", ""] {
            assert_eq!(super::split_name(Path::new(p)), None, "{p:?}");
        }
    }

    #[test]
    fn many_siblings_same_answers_as_std() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("many");
        std::fs::create_dir_all(d.path().join("elsewhere")).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let mut paths = Vec::new();
        for i in 0..12 {
            std::fs::create_dir(dir.join(format!("d{i}"))).unwrap();
            paths.push(dir.join(format!("d{i}")));
        }
        std::os::unix::fs::symlink(d.path().join("elsewhere"), dir.join("link")).unwrap();
        paths.push(dir.join("link"));
        paths.push(dir.join("missing"));
        paths.push(dir.join("link/../many/d1"));
        paths.push(dir.join("d2/"));
        paths.push(dir.join("d3/."));
        paths.push(dir.join("d4/.."));
        paths.push(d.path().join("many//d5"));
        let got = super::canonicalize_many(&paths);
        for (p, g) in paths.iter().zip(got) {
            match std::fs::canonicalize(p) {
                Ok(want) => assert_eq!(g.unwrap(), want, "{}", p.display()),
                Err(_) => assert!(g.is_err(), "{}", p.display()),
            }
        }
    }

    #[test]
    fn same_answers_as_std() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real/dir");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::write(real.join("f"), "x").unwrap();
        std::os::unix::fs::symlink(d.path().join("real"), d.path().join("link")).unwrap();
        std::os::unix::fs::symlink("link/dir/f", d.path().join("rel")).unwrap();
        for p in [
            d.path().join("real/dir"),
            d.path().join("link/dir/f"),
            d.path().join("link/./dir/../dir"),
            d.path().join("rel"),
        ] {
            assert_eq!(
                super::canonicalize(&p).unwrap(),
                std::fs::canonicalize(&p).unwrap(),
                "{}",
                p.display()
            );
            assert_eq!(
                super::canonicalize_many(std::slice::from_ref(&p))[0]
                    .as_ref()
                    .unwrap(),
                &std::fs::canonicalize(&p).unwrap(),
                "{}",
                p.display()
            );
        }
        assert!(super::canonicalize(&d.path().join("missing")).is_err());
        assert!(super::canonicalize(&d.path().join("real/dir/f/x")).is_err());
    }
}

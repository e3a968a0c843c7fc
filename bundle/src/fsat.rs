//! Reading and changing trees that someone else wrote (a workspace, an overlay folder, a
//! home layer's upper directory, a repository's `.git`) through directory descriptors:
//! every name is resolved with an `*at()` call relative to a descriptor already open, a
//! symbolic link is never followed (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`), and a file is
//! opened for reading with `O_NONBLOCK` so a planted FIFO never blocks the host. Paths are
//! walked one plain component at a time ([`plain_components`], [`open_dir_path`]), so a
//! tree cannot redirect a read or a write outside the directory it was opened from.
//!
//! The `*_c` functions take a raw descriptor and a ready C string for loops that already
//! hold both; the others take an [`OwnedFd`] and an [`OsStr`] name.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// `name` as a C string (an error when it holds a NUL byte).
pub fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))
}

/// A libc return value: negative is the last OS error.
pub fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// What `lstat` says is at a name, in the terms the walkers need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Missing,
    Dir,
    File,
    Symlink,
    /// A FIFO, socket or device.
    Special,
}

impl Kind {
    /// The kind of an `st_mode` (0, as for a missing entry, is [`Kind::Missing`]).
    // mode_t is u16 on macOS
    #[allow(clippy::unnecessary_cast)]
    pub fn of_mode(mode: u32) -> Kind {
        match mode & libc::S_IFMT as u32 {
            0 => Kind::Missing,
            m if m == libc::S_IFDIR as u32 => Kind::Dir,
            m if m == libc::S_IFREG as u32 => Kind::File,
            m if m == libc::S_IFLNK as u32 => Kind::Symlink,
            _ => Kind::Special,
        }
    }
}

/// A single path component: no `/`, not `.` or `..`, not empty.
pub fn is_plain_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    !b.is_empty() && b != b"." && b != b".." && !b.contains(&b'/')
}

/// The components of a relative path without `.`/`..`/root, or `None` when it has any.
pub fn plain_components(rel: &Path) -> Option<Vec<OsString>> {
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) if is_plain_name(n) => out.push(n.to_os_string()),
            _ => return None,
        }
    }
    Some(out)
}

/// The flags a directory is opened with: read-only, a directory, never a symlink.
pub const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// `open(path, flags, mode)` of a trusted path, with exactly the caller's `flags`.
pub fn open_path(path: &Path, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    let c = cstr(path.as_os_str())?;
    // SAFETY: a valid C string; the result is checked.
    let fd = check(unsafe { libc::open(c.as_ptr(), flags, mode as libc::c_uint) })?;
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(dir, name, flags, mode)` with exactly the caller's `flags` (add `O_NOFOLLOW`
/// and `O_CLOEXEC` yourself, or use [`open_at`]).
pub fn open_at_c(dir: RawFd, name: &CStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: a valid descriptor and C string; the result is checked.
    let fd = check(unsafe { libc::openat(dir, name.as_ptr(), flags, mode as libc::c_uint) })?;
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC)`.
pub fn open_at(dir: &OwnedFd, name: &OsStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    open_at_c(
        dir.as_raw_fd(),
        &c,
        flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        0,
    )
}

/// Open an absolute directory (following symlinks in the path itself: it is trusted).
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    open_path(path, DIR_FLAGS, 0)
}

/// Open directory `name` inside `dir` without following a symlink.
pub fn open_dir_at(dir: &OwnedFd, name: &OsStr) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    open_at_c(dir.as_raw_fd(), &c, DIR_FLAGS, 0)
}

/// Walk `rel` (plain components only) from `dir`, no symlink followed.
pub fn open_dir_path(dir: &OwnedFd, rel: &[OsString]) -> io::Result<OwnedFd> {
    let mut cur = dup(dir)?;
    for c in rel {
        cur = open_dir_at(&cur, c)?;
    }
    Ok(cur)
}

/// Walk `rel` from `dir`, creating missing directories with `mode`.
pub fn create_dir_path(dir: &OwnedFd, rel: &[OsString], mode: u32) -> io::Result<OwnedFd> {
    let mut cur = dup(dir)?;
    for c in rel {
        cur = match open_dir_at(&cur, c) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                mkdir_at(&cur, c, mode)?;
                open_dir_at(&cur, c)?
            }
            Err(e) => return Err(e),
        };
    }
    Ok(cur)
}

pub fn dup(fd: &OwnedFd) -> io::Result<OwnedFd> {
    fd.try_clone()
}

/// `lstat` of `name` in `dir`; `Ok(None)` when it does not exist.
pub fn stat_at_c(dir: RawFd, name: &CStr) -> io::Result<Option<libc::stat>> {
    // SAFETY: a zeroed stat is a valid out buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, C string and buffer.
    if unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENOENT) {
            Ok(None)
        } else {
            Err(e)
        };
    }
    Ok(Some(st))
}

/// `lstat` of `name` in `dir`; `Ok(None)` when it does not exist.
pub fn stat_at(dir: &OwnedFd, name: &OsStr) -> io::Result<Option<libc::stat>> {
    let c = cstr(name)?;
    stat_at_c(dir.as_raw_fd(), &c)
}

/// `fstat` of an open descriptor.
pub fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: zeroed stat is a valid out buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and buffer.
    check(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

/// Names in `dir` (without `.` and `..`), in directory order. The listing reads a
/// duplicate of `dir` from the start, so `dir` itself stays usable.
pub fn list_unsorted(dir: &OwnedFd) -> io::Result<Vec<OsString>> {
    let raw = dir.try_clone()?.into_raw_fd();
    // SAFETY: raw is an owned directory descriptor; fdopendir takes it.
    let d = unsafe { libc::fdopendir(raw) };
    if d.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed: raw is still ours.
        unsafe { libc::close(raw) };
        return Err(e);
    }
    // SAFETY: d is a valid DIR*; the dup shares its offset with `dir`.
    unsafe { libc::rewinddir(d) };
    let mut out = Vec::new();
    loop {
        // SAFETY: d is valid; NULL at the end.
        let ent = unsafe { libc::readdir(d) };
        if ent.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated.
        let b = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) }.to_bytes();
        if b != b"." && b != b".." {
            out.push(OsString::from_vec(b.to_vec()));
        }
    }
    // SAFETY: closed once.
    unsafe { libc::closedir(d) };
    Ok(out)
}

/// Names in `dir` (without `.` and `..`), sorted.
pub fn list(dir: &OwnedFd) -> io::Result<Vec<OsString>> {
    let mut out = list_unsorted(dir)?;
    out.sort();
    Ok(out)
}

/// Open regular file `name` in `dir` for reading: no symlink followed, never blocking on a
/// FIFO, and checked to be a regular file after opening.
pub fn open_file_at(dir: &OwnedFd, name: &OsStr) -> io::Result<File> {
    let f = File::from(open_at(
        dir,
        name,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
    )?);
    let st = fstat(f.as_raw_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    Ok(f)
}

/// Target of symlink `name` in `dir`.
pub fn read_link_at_c(dir: RawFd, name: &CStr) -> io::Result<PathBuf> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: valid fd, C string and buffer of the given length.
    let n = unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(PathBuf::from(OsString::from_vec(buf)))
}

/// Target of symlink `name` in `dir`.
pub fn read_link_at(dir: &OwnedFd, name: &OsStr) -> io::Result<PathBuf> {
    let c = cstr(name)?;
    read_link_at_c(dir.as_raw_fd(), &c)
}

pub fn mkdir_at(dir: &OwnedFd, name: &OsStr, mode: u32) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: valid fd and C string.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) })?;
    Ok(())
}

/// Create a new file `name` in `dir` (must not exist; never through a symlink).
pub fn create_file_at(dir: &OwnedFd, name: &OsStr, mode: u32) -> io::Result<File> {
    let c = cstr(name)?;
    let fd = open_at_c(
        dir.as_raw_fd(),
        &c,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        mode,
    )?;
    Ok(File::from(fd))
}

pub fn symlink_at(target: &Path, dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let t = cstr(target.as_os_str())?;
    let c = cstr(name)?;
    // SAFETY: valid C strings and fd.
    check(unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), c.as_ptr()) })?;
    Ok(())
}

/// `renameat(from_dir, from, to_dir, to)`.
pub fn rename_at_c(from_dir: RawFd, from: &CStr, to_dir: RawFd, to: &CStr) -> io::Result<()> {
    // SAFETY: valid fds and C strings.
    check(unsafe { libc::renameat(from_dir, from.as_ptr(), to_dir, to.as_ptr()) })?;
    Ok(())
}

/// Rename `from` to `to`, both in `dir`.
pub fn rename_at(dir: &OwnedFd, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let f = cstr(from)?;
    let t = cstr(to)?;
    rename_at_c(dir.as_raw_fd(), &f, dir.as_raw_fd(), &t)
}

/// `unlinkat(dir, name, flags)` (`AT_REMOVEDIR` for an empty directory).
pub fn unlink_at_c(dir: RawFd, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: valid fd and C string.
    check(unsafe { libc::unlinkat(dir, name.as_ptr(), flags) }).map(|_| ())
}

/// Set permission bits of an open descriptor.
pub fn fchmod(fd: RawFd, mode: u32) -> io::Result<()> {
    // SAFETY: valid fd.
    check(unsafe { libc::fchmod(fd, mode as libc::mode_t) })?;
    Ok(())
}

/// An extended attribute of an open descriptor (`None` when absent or unsupported).
#[cfg(target_os = "linux")]
pub fn get_xattr(fd: RawFd, name: &str) -> Option<Vec<u8>> {
    let c = CString::new(name).ok()?;
    let mut buf = vec![0u8; 256];
    // SAFETY: valid fd, C string and buffer.
    let n = unsafe { libc::fgetxattr(fd, c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return None;
    }
    buf.truncate(n as usize);
    Some(buf)
}

#[cfg(not(target_os = "linux"))]
pub fn get_xattr(_fd: RawFd, _name: &str) -> Option<Vec<u8>> {
    None
}

/// Is the file type of `st` the given `S_IF*` kind?
pub fn is_type(st: &libc::stat, kind: libc::mode_t) -> bool {
    st.st_mode & libc::S_IFMT == kind
}

/// Modification time in nanoseconds.
pub fn mtime_ns(st: &libc::stat) -> i128 {
    st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128
}

/// Status-change time in nanoseconds.
pub fn ctime_ns(st: &libc::stat) -> i128 {
    st.st_ctime as i128 * 1_000_000_000 + st.st_ctime_nsec as i128
}

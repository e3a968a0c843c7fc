//! Directory-descriptor file operations that never follow a symbolic link: every path is
//! walked one component at a time with `openat(O_NOFOLLOW)`, so a tree written by a
//! sandboxed command (the home layer's upper directory) cannot redirect a read or a write
//! outside the directory it was opened from.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
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

const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// Open an absolute directory (following symlinks in the path itself: it is trusted).
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let c = cstr(path.as_os_str())?;
    // SAFETY: valid C string; the fd returned is owned.
    let fd = check(unsafe { libc::open(c.as_ptr(), DIR_FLAGS) })?;
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Open directory `name` inside `dir` without following a symlink.
pub fn open_dir_at(dir: &OwnedFd, name: &OsStr) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: valid fd and C string.
    let fd = check(unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), DIR_FLAGS) })?;
    // SAFETY: fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
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
pub fn stat_at(dir: &OwnedFd, name: &OsStr) -> io::Result<Option<libc::stat>> {
    let c = cstr(name)?;
    // SAFETY: zeroed stat is a valid out buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, C string and buffer.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::NotFound {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(st))
}

/// `fstat` of an open descriptor.
pub fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: zeroed stat is a valid out buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and buffer.
    check(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

/// Names in `dir` (without `.` and `..`), sorted.
pub fn list(dir: &OwnedFd) -> io::Result<Vec<OsString>> {
    let mut out = capsule_bundle::rmtree::list(dir)?;
    out.sort();
    Ok(out)
}

/// Open regular file `name` in `dir` for reading: no symlink followed, never blocking on a
/// FIFO, and checked to be a regular file after opening.
pub fn open_file_at(dir: &OwnedFd, name: &OsStr) -> io::Result<File> {
    let c = cstr(name)?;
    // SAFETY: valid fd and C string.
    let fd = check(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    })?;
    // SAFETY: fresh descriptor.
    let f = unsafe { File::from_raw_fd(fd) };
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
pub fn read_link_at(dir: &OwnedFd, name: &OsStr) -> io::Result<PathBuf> {
    let c = cstr(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: valid fd, C string and buffer of the given length.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(PathBuf::from(OsString::from_vec(buf)))
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
    // SAFETY: valid fd and C string.
    let fd = check(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    // SAFETY: fresh descriptor.
    Ok(unsafe { File::from_raw_fd(fd) })
}

pub fn symlink_at(target: &Path, dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let t = cstr(target.as_os_str())?;
    let c = cstr(name)?;
    // SAFETY: valid C strings and fd.
    check(unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), c.as_ptr()) })?;
    Ok(())
}

pub fn rename_at(dir: &OwnedFd, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let f = cstr(from)?;
    let t = cstr(to)?;
    // SAFETY: valid fds and C strings.
    check(unsafe { libc::renameat(dir.as_raw_fd(), f.as_ptr(), dir.as_raw_fd(), t.as_ptr()) })?;
    Ok(())
}

/// Remove `name` from `dir`: a file, symlink, device node, or a whole directory tree
/// (walked without following symlinks, iteratively, with bounded descriptors, folders
/// made writable first: [`capsule_bundle::rmtree`]). Missing is fine.
pub fn remove_at(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    capsule_bundle::rmtree::remove_at(dir, name)
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

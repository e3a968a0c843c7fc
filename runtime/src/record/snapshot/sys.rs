//! The system calls a snapshot makes on the workspace: `openat`/`fstatat` relative to
//! directory descriptors, never following a symlink and never blocking, capped reads of
//! regular files ([`read_at`]) and directory listings ([`DirStream`]).

use super::Ws;
use capsule_bundle::fsat;
use std::ffi::{CStr, CString};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub(super) fn missing(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
    )
}

pub(super) fn dt_of(st: &libc::stat) -> u8 {
    match file_type(st) {
        libc::S_IFDIR => libc::DT_DIR,
        libc::S_IFREG => libc::DT_REG,
        libc::S_IFLNK => libc::DT_LNK,
        _ => libc::DT_FIFO,
    }
}

pub(super) fn file_type(st: &libc::stat) -> libc::mode_t {
    st.st_mode & libc::S_IFMT
}

pub(super) trait AsFdRef {
    fn as_fd_ref(&self) -> BorrowedFd<'_>;
}

impl AsFdRef for OwnedFd {
    fn as_fd_ref(&self) -> BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(self)
    }
}

fn c_name(name: &[u8]) -> io::Result<CString> {
    CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a name"))
}

/// `openat(dir, name)` never following a symlink, never becoming a controlling terminal.
fn open_at(dir: BorrowedFd, name: &[u8], flags: libc::c_int) -> io::Result<OwnedFd> {
    let n = c_name(name)?;
    let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;
    fsat::open_at_c(dir.as_raw_fd(), &n, flags, 0)
}

/// The directory `name` of `dir`, not through a symlink.
pub(super) fn open_dir_at(dir: BorrowedFd, name: &[u8]) -> io::Result<OwnedFd> {
    open_at(dir, name, libc::O_RDONLY | libc::O_DIRECTORY)
}

/// `lstat` of `name` in `dir`.
pub(super) fn stat_at(dir: BorrowedFd, name: &[u8]) -> io::Result<libc::stat> {
    let n = c_name(name)?;
    fsat::stat_at_c(dir.as_raw_fd(), &n)?.ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

pub(super) fn fstat(fd: BorrowedFd) -> io::Result<libc::stat> {
    fsat::fstat(fd.as_raw_fd())
}

/// The regular file `name` of `dir` (`rel` in messages), at most `cap` bytes, or `None`
/// when there is none. A symlink, a FIFO, anything but a regular file, or one over the
/// cap, is an error; nothing blocks (`O_NONBLOCK`).
pub(super) fn read_at(
    ws: &Ws,
    dir: BorrowedFd,
    name: &[u8],
    rel: &str,
    cap: u64,
) -> Result<Option<Vec<u8>>, String> {
    let fd = match open_at(dir, name, libc::O_RDONLY) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(ws.msg(rel, "a symlink; not followed"))
        }
        Err(e) => return Err(ws.err(rel, e)),
    };
    let file = std::fs::File::from(fd);
    let md = file.metadata().map_err(|e| ws.err(rel, e))?;
    if !md.file_type().is_file() {
        return Err(ws.msg(rel, "not a regular file; not read"));
    }
    if md.len() > cap {
        return Err(ws.msg(rel, &format!("larger than {cap} bytes; not read")));
    }
    let mut buf = Vec::with_capacity(md.len() as usize);
    file.take(cap + 1)
        .read_to_end(&mut buf)
        .map_err(|e| ws.err(rel, e))?;
    if buf.len() as u64 > cap {
        return Err(ws.msg(rel, &format!("larger than {cap} bytes; not read")));
    }
    Ok(Some(buf))
}

/// An open directory being listed (`fdopendir`); its descriptor serves the `*at` calls.
pub(super) struct DirStream(std::ptr::NonNull<libc::DIR>);

impl DirStream {
    /// The workspace itself (the one path capsule chose: followed if it is a symlink).
    pub(super) fn open_path(path: &Path) -> io::Result<Self> {
        let p = c_name(path.as_os_str().as_bytes())?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NONBLOCK;
        // SAFETY: a valid C string; the result is checked.
        let fd = unsafe { libc::open(p.as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor owned here.
        Self::from_fd(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// The directory `name` of `dir`, not through a symlink.
    pub(super) fn open_at(dir: BorrowedFd, name: &[u8]) -> io::Result<Self> {
        Self::from_fd(open_dir_at(dir, name)?)
    }

    fn from_fd(fd: OwnedFd) -> io::Result<Self> {
        use std::os::fd::IntoRawFd;
        let raw = fd.into_raw_fd();
        // SAFETY: `raw` is an open directory descriptor; the stream owns it from here.
        match std::ptr::NonNull::new(unsafe { libc::fdopendir(raw) }) {
            Some(d) => Ok(Self(d)),
            None => {
                let e = io::Error::last_os_error();
                // SAFETY: fdopendir failed, so `raw` is still ours.
                unsafe { libc::close(raw) };
                Err(e)
            }
        }
    }

    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the stream is open; its descriptor lives as long as it does.
        unsafe { BorrowedFd::borrow_raw(libc::dirfd(self.0.as_ptr())) }
    }

    /// The names in the directory (without `.` and `..`) with their `d_type`.
    pub(super) fn list(&self) -> io::Result<Vec<(Vec<u8>, u8)>> {
        let mut out = Vec::new();
        loop {
            clear_errno();
            // SAFETY: the stream is open and used by this thread only.
            let ent = unsafe { libc::readdir(self.0.as_ptr()) };
            if ent.is_null() {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(0) | None => Ok(out),
                    Some(_) => Err(e),
                };
            }
            // SAFETY: readdir returned an entry, valid until the next call on the stream.
            let (name, t) = unsafe { (CStr::from_ptr((*ent).d_name.as_ptr()), (*ent).d_type) };
            let name = name.to_bytes();
            if name != b"." && name != b".." {
                out.push((name.to_vec(), t));
            }
        }
    }
}

impl Drop for DirStream {
    fn drop(&mut self) {
        // SAFETY: the stream is open and closed once, here.
        unsafe { libc::closedir(self.0.as_ptr()) };
    }
}

fn clear_errno() {
    // SAFETY: the calling thread's errno.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    unsafe {
        *libc::__errno_location() = 0
    };
    // SAFETY: the calling thread's errno.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    unsafe {
        *libc::__error() = 0
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::snapshot::SMALL_CAP;

    #[test]
    fn reads_refuse_fifos_and_symlinks_without_blocking() {
        let d = tempfile::tempdir_in("/dev/shm").unwrap();
        let fifo = d.path().join("fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        std::fs::write(d.path().join("target"), "secret").unwrap();
        std::os::unix::fs::symlink(d.path().join("target"), d.path().join("link")).unwrap();
        let ws = Ws(d.path());
        let (tx, rx) = std::sync::mpsc::channel();
        let path = d.path().to_path_buf();
        std::thread::spawn(move || {
            let ws = Ws(Path::new("/ws"));
            let dir = DirStream::open_path(&path).unwrap();
            let _ = tx.send(read_at(&ws, dir.fd(), b"fifo", "fifo", SMALL_CAP));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("blocked on a FIFO");
        assert_eq!(got.unwrap_err(), "/ws/fifo: not a regular file; not read");
        let dir = DirStream::open_path(d.path()).unwrap();
        let e = read_at(&ws, dir.fd(), b"link", "link", SMALL_CAP).unwrap_err();
        assert!(e.ends_with("link: a symlink; not followed"), "{e}");
        assert_eq!(read_at(&ws, dir.fd(), b"none", "none", SMALL_CAP), Ok(None));
        let e = read_at(&ws, dir.fd(), b"target", "target", 3).unwrap_err();
        assert!(e.ends_with("target: larger than 3 bytes; not read"), "{e}");
        assert_eq!(
            read_at(&ws, dir.fd(), b"target", "target", 6),
            Ok(Some(b"secret".to_vec()))
        );
    }
}

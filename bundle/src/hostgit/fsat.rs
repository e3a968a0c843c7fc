//! The few file operations the guard makes in a workspace, through directory descriptors
//! opened with `O_NOFOLLOW` ([`Dir`]): nothing is followed out of the workspace, a FIFO is
//! never opened blocking, every read is capped; and the quarantine in the bundle
//! ([`Quarantine`]), where offending entries are moved (renamed, or copied then removed
//! when the bundle is on another filesystem).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Largest file read (a config, a `gitdir`, alternates).
pub const READ_CAP: u64 = 1 << 20;
/// Largest file copied into the quarantine across filesystems, and most entries copied.
const COPY_CAP: u64 = 64 << 20;
const COPY_ENTRIES: usize = 10_000;
const COPY_DEPTH: usize = 32;

/// What `lstat` says, in the terms the guard needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Missing,
    Dir,
    File,
    Symlink,
    /// A FIFO, socket or device.
    Special,
}

/// The stat fields the guard compares between runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub size: i64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Stat {
    // mode_t is u16 on macOS
    #[allow(clippy::unnecessary_cast)]
    pub fn kind(&self) -> Kind {
        match self.mode & libc::S_IFMT as u32 {
            0 => Kind::Missing,
            m if m == libc::S_IFDIR as u32 => Kind::Dir,
            m if m == libc::S_IFREG as u32 => Kind::File,
            m if m == libc::S_IFLNK as u32 => Kind::Symlink,
            _ => Kind::Special,
        }
    }
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

#[allow(clippy::unnecessary_cast)]
fn from_raw(st: &libc::stat) -> Stat {
    Stat {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        mode: st.st_mode as u32,
        size: st.st_size as i64,
        mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
    }
}

/// `lstat` of a path (the fast path's comparison; a missing path gives mode 0).
pub fn lstat_path(p: &Path) -> Stat {
    let Ok(c) = cstr(p.as_os_str()) else {
        return Stat::default();
    };
    // SAFETY: an all-zero stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a stat buffer of the right type.
    if unsafe { libc::lstat(c.as_ptr(), &mut st) } != 0 {
        return Stat::default();
    }
    from_raw(&st)
}

/// A directory of the workspace, opened without following a symlink.
pub struct Dir {
    fd: OwnedFd,
}

impl Dir {
    /// Open `path` (a trusted path: the workspace itself).
    pub fn open_path(path: &Path) -> io::Result<Dir> {
        let c = cstr(path.as_os_str())?;
        // SAFETY: a valid C string; the result is checked.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor we just opened and own.
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The directory `name` in this one (never through a symlink).
    pub fn open_dir(&self, name: &OsStr) -> io::Result<Dir> {
        let c = cstr(name)?;
        // SAFETY: a valid directory descriptor and C string; the result is checked.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor we just opened and own.
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Walk down `rel` (components, none `..`), each opened without following a symlink.
    pub fn open_rel(&self, rel: &Path) -> io::Result<Dir> {
        let mut d: Option<Dir> = None;
        for c in rel.components() {
            let std::path::Component::Normal(n) = c else {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            };
            let next = d.as_ref().unwrap_or(self).open_dir(n)?;
            d = Some(next);
        }
        match d {
            Some(d) => Ok(d),
            None => self.open_dir(OsStr::new(".")),
        }
    }

    pub fn lstat(&self, name: &OsStr) -> Stat {
        let Ok(c) = cstr(name) else {
            return Stat::default();
        };
        // SAFETY: an all-zero stat is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor, C string and stat buffer.
        let rc = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Stat::default();
        }
        from_raw(&st)
    }

    /// The bytes of the regular file `name` (up to [`READ_CAP`]), `None` when it is
    /// missing; an error when it is not a regular file or too large.
    pub fn read(&self, name: &OsStr) -> io::Result<Option<Vec<u8>>> {
        self.read_capped(name, READ_CAP)
    }

    /// [`Dir::read`] with another cap.
    pub fn read_capped(&self, name: &OsStr, cap: u64) -> io::Result<Option<Vec<u8>>> {
        let c = cstr(name)?;
        // SAFETY: a valid descriptor and C string; the result is checked.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY
                    | libc::O_NOFOLLOW
                    | libc::O_NONBLOCK
                    | libc::O_CLOEXEC
                    | libc::O_NOCTTY,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOENT) {
                return Ok(None);
            }
            return Err(e);
        }
        // SAFETY: a descriptor we just opened and own.
        let f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let md = f.metadata()?;
        if !md.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        if md.len() > cap {
            return Err(io::Error::other("larger than the guard reads"));
        }
        let mut buf = Vec::with_capacity(md.len() as usize);
        use std::io::Read;
        f.take(cap + 1).read_to_end(&mut buf)?;
        if buf.len() as u64 > cap {
            return Err(io::Error::other("larger than the guard reads"));
        }
        Ok(Some(buf))
    }

    /// The names in this directory (without `.` and `..`).
    pub fn names(&self) -> io::Result<Vec<std::ffi::OsString>> {
        let d = self.open_dir(OsStr::new("."))?;
        let raw = d.fd.as_raw_fd();
        std::mem::forget(d);
        // SAFETY: fdopendir takes over the descriptor (closed by closedir).
        let dir = unsafe { libc::fdopendir(raw) };
        if dir.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: the descriptor is still ours when fdopendir failed.
            unsafe { libc::close(raw) };
            return Err(e);
        }
        let mut out = Vec::new();
        loop {
            // SAFETY: a valid DIR stream.
            let ent = unsafe { libc::readdir(dir) };
            if ent.is_null() {
                break;
            }
            // SAFETY: readdir returned a valid entry with a NUL-terminated name.
            let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) };
            let b = name.to_bytes();
            if b != b"." && b != b".." {
                out.push(OsStr::from_bytes(b).to_os_string());
            }
        }
        // SAFETY: a valid DIR stream, closed once.
        unsafe { libc::closedir(dir) };
        out.sort();
        Ok(out)
    }

    /// Write `bytes` as the new `name` (mode 0644): a new file beside it, renamed over it.
    pub fn replace(&self, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
        let mut tmp = name.to_os_string();
        tmp.push(format!(".capsule-guard-{}", std::process::id()));
        let ct = cstr(&tmp)?;
        let cn = cstr(name)?;
        // SAFETY: a valid descriptor and C string; the result is checked.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                ct.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o644 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor we just opened and own.
        let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        use std::io::Write;
        let written = f.write_all(bytes).and_then(|_| f.sync_all());
        drop(f);
        // SAFETY: valid descriptors and C strings.
        let rc = written.and_then(|_| {
            if unsafe {
                libc::renameat(
                    self.fd.as_raw_fd(),
                    ct.as_ptr(),
                    self.fd.as_raw_fd(),
                    cn.as_ptr(),
                )
            } != 0
            {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        });
        if rc.is_err() {
            // SAFETY: a valid descriptor and C string.
            unsafe { libc::unlinkat(self.fd.as_raw_fd(), ct.as_ptr(), 0) };
        }
        rc
    }
}

/// Where offending entries go: `bundles/<name>/quarantine/<time>-<pid>/`, made when the
/// first entry arrives; each entry keeps its path relative to the workspace.
pub struct Quarantine {
    pub root: PathBuf,
    used: bool,
}

impl Quarantine {
    pub fn new(bundle_dir: &Path) -> Quarantine {
        let t = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
            .to_string()
            .replace(':', "");
        Quarantine {
            root: bundle_dir
                .join("quarantine")
                .join(format!("{t}-{}", std::process::id())),
            used: false,
        }
    }

    /// Was anything moved here?
    pub fn used(&self) -> bool {
        self.used
    }

    /// Move `name` of `from` (at `rel` in the workspace) into the quarantine.
    pub fn take(&mut self, from: &Dir, name: &OsStr, rel: &Path) -> io::Result<PathBuf> {
        let dst = self.root.join(rel);
        let parent = dst.parent().unwrap_or(&self.root).to_path_buf();
        std::fs::create_dir_all(&parent)?;
        self.used = true;
        let to = Dir::open_path(&parent)?;
        let leaf = dst.file_name().unwrap_or(name).to_os_string();
        let cs = cstr(name)?;
        let cd = cstr(&leaf)?;
        // SAFETY: valid descriptors and C strings.
        let rc = unsafe {
            libc::renameat(
                from.fd.as_raw_fd(),
                cs.as_ptr(),
                to.fd.as_raw_fd(),
                cd.as_ptr(),
            )
        };
        if rc == 0 {
            return Ok(dst);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EXDEV) {
            return Err(e);
        }
        let mut budget = COPY_ENTRIES;
        copy_out(from, name, &to, &leaf, 0, &mut budget)?;
        remove(from, name, 0)?;
        Ok(dst)
    }
}

/// Copy `name` of `from` to `leaf` of `to` (files, symlinks as links, directories; FIFOs,
/// sockets and devices are left out).
fn copy_out(
    from: &Dir,
    name: &OsStr,
    to: &Dir,
    leaf: &OsStr,
    depth: usize,
    budget: &mut usize,
) -> io::Result<()> {
    if depth > COPY_DEPTH || *budget == 0 {
        return Err(io::Error::other("too deep or too many entries to copy"));
    }
    *budget -= 1;
    let cl = cstr(leaf)?;
    match from.lstat(name).kind() {
        Kind::File => {
            let cs = cstr(name)?;
            // SAFETY: a valid descriptor and C string; the result is checked.
            let fd = unsafe {
                libc::openat(
                    from.fd.as_raw_fd(),
                    cs.as_ptr(),
                    libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a descriptor we just opened and own.
            let src = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
            // SAFETY: a valid descriptor and C string; the result is checked.
            let out = unsafe {
                libc::openat(
                    to.fd.as_raw_fd(),
                    cl.as_ptr(),
                    libc::O_WRONLY
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC,
                    0o600 as libc::c_uint,
                )
            };
            if out < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a descriptor we just opened and own.
            let mut dst = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(out) });
            use std::io::Read;
            io::copy(&mut src.take(COPY_CAP), &mut dst)?;
            Ok(())
        }
        Kind::Symlink => {
            let cs = cstr(name)?;
            let mut buf = vec![0u8; 4096];
            // SAFETY: a valid descriptor, C string and buffer of that length.
            let n = unsafe {
                libc::readlinkat(
                    from.fd.as_raw_fd(),
                    cs.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            buf.truncate(n as usize);
            let target =
                CString::new(buf).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            // SAFETY: valid C strings and descriptor.
            if unsafe { libc::symlinkat(target.as_ptr(), to.fd.as_raw_fd(), cl.as_ptr()) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }
        Kind::Dir => {
            // SAFETY: a valid descriptor and C string.
            if unsafe { libc::mkdirat(to.fd.as_raw_fd(), cl.as_ptr(), 0o700) } != 0 {
                return Err(io::Error::last_os_error());
            }
            let sub = from.open_dir(name)?;
            let dst = to.open_dir(leaf)?;
            for n in sub.names()? {
                copy_out(&sub, &n, &dst, &n, depth + 1, budget)?;
            }
            Ok(())
        }
        Kind::Special | Kind::Missing => Ok(()),
    }
}

/// Remove `name` of `dir` (a directory with everything in it).
fn remove(dir: &Dir, name: &OsStr, depth: usize) -> io::Result<()> {
    let c = cstr(name)?;
    if dir.lstat(name).kind() == Kind::Dir {
        if depth > COPY_DEPTH {
            return Err(io::Error::other("too deep to remove"));
        }
        let sub = dir.open_dir(name)?;
        for n in sub.names()? {
            remove(&sub, &n, depth + 1)?;
        }
        // SAFETY: a valid descriptor and C string.
        if unsafe { libc::unlinkat(dir.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) } != 0 {
            return Err(io::Error::last_os_error());
        }
        return Ok(());
    }
    // SAFETY: a valid descriptor and C string.
    if unsafe { libc::unlinkat(dir.fd.as_raw_fd(), c.as_ptr(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

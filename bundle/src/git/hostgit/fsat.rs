//! The few file operations the guard makes in a workspace, through directory descriptors
//! opened with `O_NOFOLLOW` ([`Dir`]): nothing is followed out of the workspace, a FIFO is
//! never opened blocking, every read is capped; and the quarantine in the bundle
//! ([`Quarantine`]), where offending entries are moved (renamed, or copied then removed
//! when the bundle is on another filesystem).

use crate::fsat;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Largest file read (a config, a `gitdir`, alternates).
pub const READ_CAP: u64 = 1 << 20;
/// Largest file copied into the quarantine across filesystems, and most entries copied.
const COPY_CAP: u64 = 64 << 20;
const COPY_ENTRIES: usize = 10_000;
const COPY_DEPTH: usize = 32;

pub use crate::fsat::Kind;

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
    pub fn kind(&self) -> Kind {
        Kind::of_mode(self.mode)
    }
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
    let Ok(c) = fsat::cstr(p.as_os_str()) else {
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
        Ok(Dir {
            fd: fsat::open_dir(path)?,
        })
    }

    /// The directory `name` in this one (never through a symlink).
    pub fn open_dir(&self, name: &OsStr) -> io::Result<Dir> {
        Ok(Dir {
            fd: fsat::open_dir_at(&self.fd, name)?,
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
        match fsat::stat_at(&self.fd, name) {
            Ok(Some(st)) => from_raw(&st),
            _ => Stat::default(),
        }
    }

    /// The bytes of the regular file `name` (up to [`READ_CAP`]), `None` when it is
    /// missing; an error when it is not a regular file or too large.
    pub fn read(&self, name: &OsStr) -> io::Result<Option<Vec<u8>>> {
        self.read_capped(name, READ_CAP)
    }

    /// [`Dir::read`] with another cap.
    pub fn read_capped(&self, name: &OsStr, cap: u64) -> io::Result<Option<Vec<u8>>> {
        let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
        let f = match fsat::open_at(&self.fd, name, flags) {
            Ok(fd) => std::fs::File::from(fd),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e),
        };
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

    /// The names in this directory (without `.` and `..`), sorted.
    pub fn names(&self) -> io::Result<Vec<std::ffi::OsString>> {
        fsat::list(&self.fd)
    }

    /// Write `bytes` as the new `name` (mode 0644): a new file beside it, renamed over it.
    pub fn replace(&self, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
        let mut tmp = name.to_os_string();
        tmp.push(format!(".capsule-guard-{}", std::process::id()));
        let mut f = fsat::create_file_at(&self.fd, &tmp, 0o644)?;
        use std::io::Write;
        let written = f.write_all(bytes).and_then(|_| f.sync_all());
        drop(f);
        let rc = written.and_then(|_| fsat::rename_at(&self.fd, &tmp, name));
        if rc.is_err() {
            let _ = fsat::cstr(&tmp).map(|ct| fsat::unlink_at_c(self.fd.as_raw_fd(), &ct, 0));
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
        let cs = fsat::cstr(name)?;
        let cd = fsat::cstr(&leaf)?;
        let Err(e) = fsat::rename_at_c(from.fd.as_raw_fd(), &cs, to.fd.as_raw_fd(), &cd) else {
            return Ok(dst);
        };
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
    match from.lstat(name).kind() {
        Kind::File => {
            let flags = libc::O_RDONLY | libc::O_NONBLOCK;
            let src = std::fs::File::from(fsat::open_at(&from.fd, name, flags)?);
            let mut dst = fsat::create_file_at(&to.fd, leaf, 0o600)?;
            use std::io::Read;
            io::copy(&mut src.take(COPY_CAP), &mut dst)?;
            Ok(())
        }
        Kind::Symlink => {
            let target = fsat::read_link_at(&from.fd, name)?;
            fsat::symlink_at(&target, &to.fd, leaf)
        }
        Kind::Dir => {
            fsat::mkdir_at(&to.fd, leaf, 0o700)?;
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
    let c = fsat::cstr(name)?;
    if dir.lstat(name).kind() == Kind::Dir {
        if depth > COPY_DEPTH {
            return Err(io::Error::other("too deep to remove"));
        }
        let sub = dir.open_dir(name)?;
        for n in sub.names()? {
            remove(&sub, &n, depth + 1)?;
        }
        return fsat::unlink_at_c(dir.fd.as_raw_fd(), &c, libc::AT_REMOVEDIR);
    }
    fsat::unlink_at_c(dir.fd.as_raw_fd(), &c, 0)
}

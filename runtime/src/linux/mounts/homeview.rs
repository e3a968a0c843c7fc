//! Building the home's view ([`crate::linux::plan::view::HomeView`]) while the root is
//! set up, in the setup root (see [`super`]):
//!
//! 1. a directory of the setup root (`/home-view`, gone with it) gets a copy of each file
//!    entry and an empty folder or file for each folder entry and each point;
//! 2. the layer's upper dir is made ready for each folder entry: its subfolder is walked
//!    one component at a time without following anything (`openat` with `O_NOFOLLOW`)
//!    and made when missing; an entry the layer removed or replaced (a whiteout, a file,
//!    a symlink, an opaque folder on the way) is left as the layer has it;
//! 3. the home becomes an overlay of the upper dir over that directory: nothing of the
//!    real home is in it, so what is not an entry does not exist (ENOENT), however and
//!    whenever it was made on the host;
//! 4. each folder entry becomes an overlay of the real folder under the upper's
//!    subfolder, both the upper and the place named through descriptors opened without
//!    following anything (`/proc/self/fd/N`), so a task of another exec replacing a layer
//!    folder by a symlink meanwhile cannot point either elsewhere; a
//!    folder reached through a symlink is bound read-only instead.
//!
//! Writes anywhere in the home land in the upper dir where a plain overlay of the whole
//! home would have put them, so the layer's review is unchanged.

use crate::kernel::mount::{bind, cstr, ctx, mkdir_p, mount_point, overlay, under, NEW, OLD, R};
use crate::kernel::sys::{self, Kind};
use crate::linux::plan::view::{self, EntryKind, HomeView};
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The view's directory in the setup root.
const VIEW: &str = "/home-view";

/// The whiteout layers of the folder entries, in the setup root: one folder each, named
/// like the entry's work dir.
const ABSENT: &str = "/home-view-absent";

/// Step of the plan: build the view of `v` (see the module docs).
pub(super) fn apply(v: &HomeView) -> R<()> {
    let what = |s: &str| {
        let s = s.to_string();
        let dst = v.dst.clone();
        move || format!("the home's view at {}: {s}", dst.display())
    };
    // 1. the view's directory
    ctx(
        sys::mkdir(&cstr(VIEW.as_bytes()).unwrap_or_default(), 0o755),
        what("mkdir"),
    )?;
    for e in &v.entries {
        let at = ctx(under(VIEW, &Path::new("/").join(&e.rel)), what("entry"))?;
        match e.kind {
            EntryKind::Dir | EntryKind::LinkedDir => ctx(mkdir_p(at.as_bytes()), what("entry"))?,
            EntryKind::File => {
                let src = ctx(under(OLD, &e.src), what("entry"))?;
                if let Err(err) = copy_file(&src, &at) {
                    // gone meanwhile, or grown too large: absent, as if not listed
                    tracing::warn!("{}: not shown in the home: {err}", e.src.display());
                }
            }
        }
    }
    for p in &v.points {
        let at = ctx(under(VIEW, &Path::new("/").join(&p.rel)), what("place"))?;
        let dir = match &p.src {
            None => true,
            Some(src) => match sys::kind_follow(&ctx(under(OLD, src), what("place"))?) {
                Kind::Missing => continue,
                Kind::Dir => true,
                _ => false,
            },
        };
        if sys::kind(&at) == Kind::Missing {
            // a place inside a file entry cannot be: the step reports it later
            let _ = mount_point(&at, dir);
        }
    }
    // 2. the layer's subfolders of the folder entries
    let upper = ctx(
        under(OLD, &v.upper).and_then(|u| open_dir(None, &u)),
        what("upper dir"),
    )?;
    let mut dirs: Vec<(&view::Entry, OwnedFd)> = Vec::new();
    for e in v.entries.iter().filter(|e| e.kind == EntryKind::Dir) {
        match upper_subdir(&upper, &e.rel) {
            Ok(Some(fd)) => dirs.push((e, fd)),
            Ok(None) => {}
            Err(err) => {
                return ctx(Err(err), what(&format!("layer folder {}", e.rel.display())));
            }
        }
    }
    // the folders on the way to every entry and point exist in the layer too, so that no
    // write below them has to copy a folder up: execs of other plans mount other
    // overlays of the same upper dir at the same time, and a folder copied up by one of
    // them stays unwritable (ENOENT) for the others
    let parents = v
        .entries
        .iter()
        .map(|e| e.rel.parent())
        .chain(v.points.iter().map(|p| p.rel.parent()));
    for rel in parents.flatten().filter(|r| !r.as_os_str().is_empty()) {
        ctx(
            walk(&upper, rel, true),
            what(&format!("layer folder {}", rel.display())),
        )?;
    }
    // 3. the home
    let home = ctx(under(NEW, &v.dst), what("home"))?;
    ctx(mount_point(&home, true), what("home"))?;
    let lower = ctx(cstr(VIEW.as_bytes()), what("home"))?;
    let up = ctx(under(OLD, &v.upper), what("home"))?;
    let work = ctx(under(OLD, &v.work), what("home"))?;
    ctx(overlay(&home, &[lower], &up, &work), what("overlay"))?;
    // 4. the folder entries
    for e in v.entries.iter().filter(|e| e.kind == EntryKind::LinkedDir) {
        let w = what(&e.rel.display().to_string());
        let dst = ctx(under(NEW, &v.dst.join(&e.rel)), &w)?;
        let src = ctx(under(OLD, &e.src), &w)?;
        if sys::kind(&src) == Kind::Dir {
            ctx(bind(&src, &dst, false), &w)?;
        }
    }
    let home_fd = ctx(open_dir(None, &home), what("home"))?;
    for (e, fd) in dirs {
        let w = what(&e.rel.display().to_string());
        // the place in the home, reached without following anything either (a task of
        // another exec may change the layer meanwhile): skipped when it is not a folder
        let Some(at) = ctx(walk(&home_fd, &e.rel, false), &w)? else {
            continue;
        };
        let dst = ctx(
            cstr(format!("{OLD}/proc/self/fd/{}", at.as_raw_fd()).as_bytes()),
            &w,
        )?;
        let lower = ctx(under(OLD, &e.src), &w)?;
        let up = ctx(
            cstr(format!("{OLD}/proc/self/fd/{}", fd.as_raw_fd()).as_bytes()),
            &w,
        )?;
        let work = ctx(under(OLD, &v.works.join(view::work_name(&e.rel))), &w)?;
        ctx(mkdir_p(work.as_bytes()), &w)?;
        // the paths of the entry kept absent: a layer of whiteouts between the layer's
        // folder and the real one, so that they are absent whatever the host makes there
        let mut lowers = Vec::with_capacity(2);
        if let Some(wh) = ctx(whiteouts(v, e), &w)? {
            lowers.push(wh);
        }
        lowers.push(lower);
        ctx(overlay(&dst, &lowers, &up, &work), &w)?;
    }
    Ok(())
}

/// The whiteout layer of the folder entry `e`: a folder of the setup root holding a
/// whiteout (the character device 0/0 overlayfs reads as "removed", which an unprivileged
/// user may make since Linux 5.8) at each of its paths [`HomeView::absent`] keeps out,
/// and the folders on the way; `None` when it has none.
fn whiteouts(v: &HomeView, e: &view::Entry) -> io::Result<Option<CString>> {
    let rels: Vec<&Path> = v
        .absent
        .iter()
        .filter_map(|a| a.strip_prefix(&e.rel).ok())
        .filter(|r| !r.as_os_str().is_empty())
        .collect();
    if rels.is_empty() {
        return Ok(None);
    }
    let dir = format!("{ABSENT}/{}", view::work_name(&e.rel));
    mkdir_p(dir.as_bytes())?;
    for r in rels {
        let at = under(&dir, &Path::new("/").join(r))?;
        if let Some(parent) = Path::new(std::ffi::OsStr::from_bytes(at.as_bytes())).parent() {
            mkdir_p(parent.as_os_str().as_bytes())?;
        }
        // SAFETY: a valid C string; mknod of a whiteout device in our own setup root.
        if unsafe { libc::mknod(at.as_ptr(), libc::S_IFCHR, 0) } != 0 {
            let err = io::Error::last_os_error();
            return Err(io::Error::new(
                err.kind(),
                format!(
                    "making the whiteout of {} (Linux 5.8 or later needed): {err}",
                    capsule_bundle::escape::path(r)
                ),
            ));
        }
    }
    Ok(Some(cstr(dir.as_bytes())?))
}

/// Copy the file `src` (no symlink followed) to a new file `dst`, mode kept (set-id bits
/// dropped), at most [`view::MAX_FILE`] bytes.
fn copy_file(src: &CString, dst: &CString) -> io::Result<()> {
    use std::ffi::OsStr;
    let src = Path::new(OsStr::from_bytes(src.as_bytes()));
    let dst = Path::new(OsStr::from_bytes(dst.as_bytes()));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(src)?;
    let md = f.metadata()?;
    if !md.is_file() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut buf = Vec::new();
    (&mut f).take(view::MAX_FILE + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > view::MAX_FILE {
        return Err(io::Error::from_raw_os_error(libc::EFBIG));
    }
    if let Some(parent) = dst.parent() {
        mkdir_p(parent.as_os_str().as_bytes())?;
    }
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dst)?;
    out.write_all(&buf)?;
    out.set_permissions(std::fs::Permissions::from_mode(md.mode() & 0o777))?;
    Ok(())
}

/// `openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW)`, or of an absolute path.
fn open_dir(dir: Option<&OwnedFd>, name: &CString) -> io::Result<OwnedFd> {
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let at = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: a valid descriptor (or AT_FDCWD) and C string.
    let fd = unsafe { libc::openat(at, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we own from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Is the folder `fd` opaque in the layer (its lower folders not shown)?
fn opaque(fd: &OwnedFd) -> bool {
    let Ok(p) = cstr(format!("{OLD}/proc/self/fd/{}", fd.as_raw_fd()).as_bytes()) else {
        return false;
    };
    let mut buf = [0u8; 4];
    for name in [c"trusted.overlay.opaque", c"user.overlay.opaque"] {
        // SAFETY: valid C strings and buffer.
        let n = unsafe {
            libc::getxattr(
                p.as_ptr(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n == 1 && buf[0] == b'y' {
            return true;
        }
    }
    false
}

/// The upper dir's folder at `rel` (made when missing, nothing followed), or `None` when
/// the layer has something else on the way (see the module docs).
fn upper_subdir(upper: &OwnedFd, rel: &Path) -> io::Result<Option<OwnedFd>> {
    walk(upper, rel, true)
}

/// The folder at `rel` below `base`, opened one component at a time without following
/// anything; with `make`, made when missing and refused (`None`) inside an opaque folder.
/// `None` when something else is on the way.
fn walk(base: &OwnedFd, rel: &Path, make: bool) -> io::Result<Option<OwnedFd>> {
    let upper = base;
    let mut cur: Option<OwnedFd> = None;
    for comp in rel.components() {
        let name = cstr(comp.as_os_str().as_bytes())?;
        let dir = cur.as_ref().unwrap_or(upper);
        let next = match open_dir(Some(dir), &name) {
            Ok(fd) => {
                if make && opaque(&fd) {
                    return Ok(None);
                }
                fd
            }
            Err(e) if make && e.raw_os_error() == Some(libc::ENOENT) => {
                // SAFETY: a valid descriptor and C string.
                if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) } < 0 {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(e);
                    }
                }
                match open_dir(Some(dir), &name) {
                    Ok(fd) => fd,
                    Err(_) => return Ok(None),
                }
            }
            // a whiteout, a file or a symlink the task made: the layer's own
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOTDIR | libc::ELOOP | libc::ENOENT)
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        cur = Some(next);
    }
    Ok(cur)
}

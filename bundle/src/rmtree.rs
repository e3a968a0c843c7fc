//! Removing a tree a sandboxed task wrote (a workspace, a bundle's home layer), whatever it
//! planted: symlinks (removed, never followed), FIFOs, sockets and device nodes (unlinked,
//! never opened), folders without write or search permission for their owner (given it
//! back first, as root needs no such thing but anyone else does), and trees thousands of
//! folders deep.
//!
//! The walk is iterative (no recursion, so no stack to exhaust) and holds at most
//! [`MAX_OPEN`] directory descriptors: a folder deeper than that is first renamed up into
//! the top folder being removed (`renameat` between two descriptors, no path resolved) and
//! removed from there, so depth costs neither descriptors nor stack.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// Directory descriptors held at once while removing a tree.
pub const MAX_OPEN: usize = 64;

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn lstat_at(dir: RawFd, name: &CStr) -> io::Result<Option<libc::stat>> {
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

/// Open folder `name` in `dir` (never through a symlink), giving its owner read, write
/// and search permission first when it lacks them.
fn open_removable(dir: RawFd, name: &CStr, st: &libc::stat) -> io::Result<OwnedFd> {
    let mode = st.st_mode & 0o7777;
    if mode & 0o700 != 0o700 {
        // SAFETY: valid fd and C string; AT_SYMLINK_NOFOLLOW refuses a symlink swapped in
        unsafe {
            libc::fchmodat(dir, name.as_ptr(), mode | 0o700, libc::AT_SYMLINK_NOFOLLOW);
        }
    }
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: valid fd and C string.
    let fd = check(unsafe { libc::openat(dir, name.as_ptr(), flags) })?;
    // SAFETY: a fresh descriptor owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The names in `dir` (without `.` and `..`).
pub fn list(dir: &OwnedFd) -> io::Result<Vec<OsString>> {
    let fd = dir.try_clone()?;
    let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
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

fn unlink(dir: RawFd, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: valid fd and C string.
    check(unsafe { libc::unlinkat(dir, name.as_ptr(), flags) }).map(|_| ())
}

/// Remove `name` from the folder `parent`: a file, symlink, FIFO, socket or device node,
/// or a whole tree (see the module docs). Missing is fine.
pub fn remove_at(parent: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let c = cstr(name)?;
    let Some(st) = lstat_at(parent.as_raw_fd(), &c)? else {
        return Ok(());
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return unlink(parent.as_raw_fd(), &c, 0);
    }
    let top = open_removable(parent.as_raw_fd(), &c, &st)?;
    let names = list(&top)?;
    // each level: its descriptor, its name in the level above, the names left to remove
    let mut stack: Vec<(OwnedFd, CString, Vec<OsString>)> = vec![(top, c, names)];
    let mut moved = 0u64;
    while let Some(level) = stack.last_mut() {
        let dir = level.0.as_raw_fd();
        let Some(n) = level.2.pop() else {
            let (fd, name, _) = stack.pop().expect("a level");
            drop(fd);
            let up = stack.last().map_or(parent.as_raw_fd(), |l| l.0.as_raw_fd());
            unlink(up, &name, libc::AT_REMOVEDIR)?;
            continue;
        };
        let cn = cstr(&n)?;
        let Some(st) = lstat_at(dir, &cn)? else {
            continue;
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            unlink(dir, &cn, 0)?;
            continue;
        }
        if unlink(dir, &cn, libc::AT_REMOVEDIR).is_ok() {
            continue; // it was empty
        }
        if stack.len() >= MAX_OPEN {
            // too deep to hold another descriptor: move the folder up into the top one
            let top = stack[0].0.as_raw_fd();
            loop {
                moved += 1;
                let to = cstr(OsStr::new(&format!(".capsule-rm-{moved}")))?;
                // SAFETY: valid fds and C strings.
                let r = unsafe { libc::renameat(dir, cn.as_ptr(), top, to.as_ptr()) };
                if r == 0 {
                    stack[0].2.push(OsString::from_vec(to.into_bytes()));
                    break;
                }
                let e = io::Error::last_os_error();
                if !matches!(e.raw_os_error(), Some(libc::EEXIST | libc::ENOTEMPTY)) {
                    return Err(e);
                }
            }
            continue;
        }
        let sub = open_removable(dir, &cn, &st)?;
        let names = list(&sub)?;
        stack.push((sub, cn, names));
    }
    Ok(())
}

/// [`remove_at`] of an absolute path's last component, from its parent folder (whose own
/// path is trusted).
pub fn remove_path(path: &std::path::Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    let c = cstr(parent.as_os_str())?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: a valid C string.
    let fd = check(unsafe { libc::open(c.as_ptr(), flags) })?;
    // SAFETY: a fresh descriptor owned here.
    let parent = unsafe { OwnedFd::from_raw_fd(fd) };
    remove_at(&parent, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mkdir_chain(root: &std::path::Path, depth: usize) {
        let mut fd = std::fs::File::open(root).unwrap();
        let d = CString::new("d").unwrap();
        for _ in 0..depth {
            // SAFETY: test: valid fd and C string
            unsafe {
                assert_eq!(libc::mkdirat(fd.as_raw_fd(), d.as_ptr(), 0o755), 0);
                let n = libc::openat(
                    fd.as_raw_fd(),
                    d.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY,
                );
                assert!(n >= 0);
                fd = std::fs::File::from_raw_fd(n);
            }
        }
        std::fs::write(
            "/proc/self/fd/".to_string() + &fd.as_raw_fd().to_string() + "/f",
            "x",
        )
        .unwrap();
    }

    #[test]
    fn removes_deep_read_only_and_special_trees() {
        let t = tempfile::tempdir_in("/dev/shm").unwrap();
        let root = t.path().join("tree");
        std::fs::create_dir(&root).unwrap();
        mkdir_chain(&root, 5000);
        std::fs::create_dir_all(root.join("ro/inner")).unwrap();
        std::fs::write(root.join("ro/inner/f"), "x").unwrap();
        std::fs::set_permissions(
            root.join("ro/inner"),
            std::fs::Permissions::from_mode(0o500),
        )
        .unwrap();
        std::fs::set_permissions(root.join("ro"), std::fs::Permissions::from_mode(0o000)).unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "keep").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let fifo = CString::new(root.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: test
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let _sock = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();
        remove_path(&root).unwrap();
        assert!(!root.exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("keep")).unwrap(),
            "keep"
        );
        // missing is fine
        remove_path(&root).unwrap();
    }
}

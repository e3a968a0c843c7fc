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

use crate::error::{Error, IoContext, Result};
use crate::fsat;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;

/// Directory descriptors held at once while removing a tree.
pub const MAX_OPEN: usize = 64;

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
    fsat::open_at_c(dir, name, fsat::DIR_FLAGS, 0)
}

/// Remove `name` from the folder `parent`: a file, symlink, FIFO, socket or device node,
/// or a whole tree (see the module docs). Missing is fine.
pub fn remove_at(parent: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let c = fsat::cstr(name)?;
    let Some(st) = fsat::stat_at_c(parent.as_raw_fd(), &c)? else {
        return Ok(());
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return fsat::unlink_at_c(parent.as_raw_fd(), &c, 0);
    }
    let top = open_removable(parent.as_raw_fd(), &c, &st)?;
    let names = fsat::list_unsorted(&top)?;
    // each level: its descriptor, its name in the level above, the names left to remove
    let mut stack: Vec<(OwnedFd, CString, Vec<OsString>)> = vec![(top, c, names)];
    let mut moved = 0u64;
    while let Some(level) = stack.last_mut() {
        let dir = level.0.as_raw_fd();
        let Some(n) = level.2.pop() else {
            // the level is empty: close it, then remove it from the level above
            let Some((fd, name, _)) = stack.pop() else {
                break;
            };
            drop(fd);
            let up = stack.last().map_or(parent.as_raw_fd(), |l| l.0.as_raw_fd());
            fsat::unlink_at_c(up, &name, libc::AT_REMOVEDIR)?;
            continue;
        };
        let cn = fsat::cstr(&n)?;
        let Some(st) = fsat::stat_at_c(dir, &cn)? else {
            continue;
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            fsat::unlink_at_c(dir, &cn, 0)?;
            continue;
        }
        if fsat::unlink_at_c(dir, &cn, libc::AT_REMOVEDIR).is_ok() {
            continue; // it was empty
        }
        if stack.len() >= MAX_OPEN {
            // too deep to hold another descriptor: move the folder up into the top one
            let top = stack[0].0.as_raw_fd();
            loop {
                moved += 1;
                let to = fsat::cstr(OsStr::new(&format!(".capsule-rm-{moved}")))?;
                let Err(e) = fsat::rename_at_c(dir, &cn, top, &to) else {
                    stack[0].2.push(OsString::from_vec(to.into_bytes()));
                    break;
                };
                if !matches!(e.raw_os_error(), Some(libc::EEXIST | libc::ENOTEMPTY)) {
                    return Err(e);
                }
            }
            continue;
        }
        let sub = open_removable(dir, &cn, &st)?;
        let names = fsat::list_unsorted(&sub)?;
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
    let parent = fsat::open_path(
        parent,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    )?;
    remove_at(&parent, name)
}

/// Rename `dir` to a hidden sibling, then remove it, so a half-removed directory never
/// carries the original name ([`remove_path`]: no symlink followed).
pub(crate) fn remove_dir_atomically(dir: &std::path::Path) -> Result<()> {
    let parent = dir
        .parent()
        .ok_or_else(|| Error::other(format!("{}: has no parent", dir.display())))?;
    let base = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tomb = parent.join(format!(".closing-{base}-{}", std::process::id()));
    match std::fs::rename(dir, &tomb) {
        // whatever a task planted: folders without permissions for their owner (the
        // overlay's work/work is mode 000), trees thousands deep, FIFOs, symlinks
        Ok(()) => remove_path(&tomb).at(&tomb),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(dir, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
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

//! The `tmpcopyup` mount option (Podman's and crun's): a tmpfs mounted over a directory
//! of the image starts with a copy of what the directory held, so that `--tmpfs /run` or
//! `--read-only`'s tmpfs over `/tmp` keep the image's files there.
//!
//! The directory is the image's, hostile input: the copy goes from a descriptor of the
//! directory as it was before the mount (still reachable under the tmpfs) to a
//! descriptor of the new mount, every step relative to those descriptors and never
//! through a link (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`; links are copied as links),
//! regular files opened without blocking, sockets and devices left out (a device node
//! would be the image's way to hand the container a device its cgroup did not list),
//! at most [`MAX_DEPTH`] levels and [`MAX_ENTRIES`] entries. What the copy writes lands
//! in the tmpfs, bounded by its size and by the container's memory cgroup.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Levels of folders copied below the mount point.
pub const MAX_DEPTH: usize = 64;
/// Entries copied in all.
pub const MAX_ENTRIES: usize = 100_000;

fn last() -> io::Error {
    io::Error::last_os_error()
}

fn openat(dir: RawFd, name: &CStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    // SAFETY: openat relative to a descriptor of ours with a C string.
    let fd = unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(last());
    }
    // SAFETY: a new descriptor of ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn stat_at(dir: RawFd, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: fstatat into a zeroed struct, without following a link.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) < 0 {
            return Err(last());
        }
        Ok(st)
    }
}

/// The names in directory `dir` (but `.` and `..`).
fn names(dir: RawFd) -> io::Result<Vec<CString>> {
    // SAFETY: dup of a valid descriptor (the listing consumes its own).
    let dup = unsafe { libc::fcntl(dir, libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(last());
    }
    // SAFETY: a new descriptor of ours.
    let fd = unsafe { OwnedFd::from_raw_fd(dup) };
    let mut d = nix::dir::Dir::from_fd(fd).map_err(io::Error::from)?;
    let mut out = Vec::new();
    for e in d.iter() {
        let e = e.map_err(io::Error::from)?;
        let n = e.file_name();
        if n != c"." && n != c".." {
            out.push(n.to_owned());
        }
    }
    Ok(out)
}

/// Owner, mode and times of `name` in `dir` as `st` has them (no link followed; the
/// mode not for a link, which has none of its own).
fn same_attrs(dir: RawFd, name: &CStr, st: &libc::stat) {
    let times = [
        libc::timespec {
            tv_sec: st.st_atime,
            tv_nsec: st.st_atime_nsec,
        },
        libc::timespec {
            tv_sec: st.st_mtime,
            tv_nsec: st.st_mtime_nsec,
        },
    ];
    // SAFETY: *at calls relative to a descriptor of ours.
    unsafe {
        libc::fchownat(
            dir,
            name.as_ptr(),
            st.st_uid,
            st.st_gid,
            libc::AT_SYMLINK_NOFOLLOW,
        );
        if st.st_mode & libc::S_IFMT != libc::S_IFLNK {
            libc::fchmodat(dir, name.as_ptr(), st.st_mode & 0o7777, 0);
        }
        libc::utimensat(
            dir,
            name.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        );
    }
}

/// Copy what directory `from` holds into the empty directory `to` (see the module docs);
/// `to` takes `from`'s owner and mode.
pub fn copy(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: fstat into a zeroed struct.
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(from, &mut st) < 0 {
            return Err(last());
        }
        st
    };
    // SAFETY: fchown/fchmod of our descriptor of the new mount.
    unsafe {
        libc::fchown(to, st.st_uid, st.st_gid);
        libc::fchmod(to, st.st_mode & 0o7777);
    }
    let mut left = MAX_ENTRIES;
    copy_dir(from, to, 0, &mut left)
}

fn copy_dir(from: RawFd, to: RawFd, depth: usize, left: &mut usize) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other(format!(
            "more than {MAX_DEPTH} levels of folders to copy"
        )));
    }
    for name in names(from)? {
        if *left == 0 {
            return Err(io::Error::other(format!(
                "more than {MAX_ENTRIES} entries to copy"
            )));
        }
        *left -= 1;
        let st = match stat_at(from, &name) {
            Ok(st) => st,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                // SAFETY: mkdirat relative to our descriptor.
                if unsafe { libc::mkdirat(to, name.as_ptr(), 0o700) } < 0 {
                    return Err(last());
                }
                let src = openat(from, &name, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
                let dst = openat(to, &name, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
                copy_dir(src.as_raw_fd(), dst.as_raw_fd(), depth + 1, left)?;
            }
            libc::S_IFREG => {
                let src = openat(from, &name, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
                let dst = openat(
                    to,
                    &name,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                    0o600,
                )?;
                io::copy(&mut std::fs::File::from(src), &mut std::fs::File::from(dst))?;
            }
            libc::S_IFLNK => {
                let mut buf = vec![0u8; libc::PATH_MAX as usize];
                // SAFETY: readlinkat into a buffer of its length.
                let n = unsafe {
                    libc::readlinkat(
                        from,
                        name.as_ptr(),
                        buf.as_mut_ptr() as *mut libc::c_char,
                        buf.len(),
                    )
                };
                if n < 0 {
                    return Err(last());
                }
                buf.truncate(n as usize);
                let target =
                    CString::new(buf).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
                // SAFETY: symlinkat relative to our descriptor (the link is made, never followed).
                if unsafe { libc::symlinkat(target.as_ptr(), to, name.as_ptr()) } < 0 {
                    return Err(last());
                }
            }
            libc::S_IFIFO => {
                // SAFETY: mknodat of a fifo relative to our descriptor.
                if unsafe { libc::mknodat(to, name.as_ptr(), libc::S_IFIFO | 0o600, 0) } < 0 {
                    return Err(last());
                }
            }
            // sockets, character and block devices: not copied
            _ => continue,
        }
        same_attrs(to, &name, &st);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn open_dir(p: &std::path::Path) -> OwnedFd {
        std::fs::File::open(p).unwrap().into()
    }

    #[test]
    fn the_tree_is_copied_links_as_links() {
        let t = tempfile::tempdir_in("/dev/shm").unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        std::fs::create_dir_all(a.join("sub/deeper")).unwrap();
        std::fs::create_dir(&b).unwrap();
        std::fs::write(a.join("sub/deeper/f"), "data").unwrap();
        std::fs::set_permissions(a.join("sub"), std::fs::Permissions::from_mode(0o751)).unwrap();
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o1777)).unwrap();
        // a link out of the tree is copied as a link, never followed
        std::os::unix::fs::symlink("/etc/shadow", a.join("out")).unwrap();
        copy(open_dir(&a).as_raw_fd(), open_dir(&b).as_raw_fd()).unwrap();
        assert_eq!(std::fs::read(b.join("sub/deeper/f")).unwrap(), b"data");
        assert_eq!(
            std::fs::read_link(b.join("out")).unwrap(),
            std::path::Path::new("/etc/shadow")
        );
        let m = |p: &std::path::Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(m(&b.join("sub")), 0o751);
        assert_eq!(m(&b), 0o1777);
    }

    #[test]
    fn a_tree_too_deep_is_an_error_not_a_hang() {
        let t = tempfile::tempdir_in("/dev/shm").unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        let mut deep = a.clone();
        for _ in 0..MAX_DEPTH + 2 {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir(&b).unwrap();
        let e = copy(open_dir(&a).as_raw_fd(), open_dir(&b).as_raw_fd()).unwrap_err();
        assert!(e.to_string().contains("levels"), "{e}");
    }
}

//! The host's unix sockets by path, kept out of the sandbox. A pathname socket is reached
//! by `connect(2)` whatever the mount's flags (read-only does not stop it) and Landlock
//! has no right for it before ABI 9 (from ABI 9 on, `crate::kernel::landlock` grants it in the
//! writable paths only), so every socket of the host that the sandbox would see is masked
//! like a hidden path ([`super::plan::mount_plan`] adds one hide rule each).
//!
//! Which sockets: every pathname socket bound in the host's network namespace, as the
//! kernel lists them in `/proc/net/unix` (one read of one small file per exec, whatever
//! the size of the visible tree: a walk of `/usr` alone takes a second). Because the list
//! is read for every plan, it is part of the plan's digest and so of the prepared root's
//! fingerprint: a socket a host service binds after a holder or spare was prepared gives
//! another fingerprint, hence a root with that socket masked too; a socket removed and
//! bound again at the same path is another inode, which the fingerprint sees as well.
//!
//! Kept: sockets in the task's own places (the capsule's `/tmp` and `/var/tmp` are not the
//! host's and are never masked), and a socket the task binds inside the sandbox (its
//! network namespace is its own, so its sockets are never in the host's list). Abstract
//! sockets need nothing here: they belong to a network namespace, and the sandbox has its
//! own (unless the network is `open`).
//!
//! A socket bound in another network namespace (a container's) onto a host path the
//! sandbox shows, or bound by a relative path, is not in that list: a prepared root's
//! holder also walks the service folders (`/var`, `/opt`, `/srv`, `/etc`: [`scan`]) when
//! it is made and masks the sockets it finds there. That walk is not repeated per exec
//! (one of `/usr` alone takes a second), so such a socket bound after the holder was made
//! stays reachable until the next holder.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// The pathname sockets listed in `text` (the format of `/proc/net/unix`): absolute
/// paths only (abstract sockets start with `@`; relative paths name nothing we can find),
/// sorted, without duplicates.
pub fn parse_proc_net_unix(text: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = text
        .lines()
        .skip(1)
        .filter_map(|l| {
            // Num RefCount Protocol Flags Type St Inode Path: the path is the 8th field,
            // and may contain spaces
            let mut rest = l.trim_start();
            for _ in 0..7 {
                let (_, r) = rest.split_once(' ')?;
                rest = r.trim_start();
            }
            rest.starts_with('/').then(|| PathBuf::from(rest))
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The host's pathname sockets for which `shown` is true (a path the sandbox would show),
/// each as the canonical path of a socket file that exists now (a listed path whose file
/// was removed or replaced by something else is left out). `shown` is asked first, so
/// only candidates are resolved.
pub fn host_sockets(shown: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    // in a few large reads (the kernel makes the list as it is read)
    let mut buf = Vec::with_capacity(64 << 10);
    let _ = std::fs::File::open("/proc/net/unix")
        .and_then(|mut f| std::io::Read::read_to_end(&mut f, &mut buf));
    let text = String::from_utf8_lossy(&buf);
    let mut v: Vec<PathBuf> = parse_proc_net_unix(&text)
        .into_iter()
        .filter(|p| shown(p))
        .filter_map(|p| std::fs::canonicalize(&p).ok())
        .filter(|p| {
            shown(p) && std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket())
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The service folders [`scan`] walks (where services keep their sockets; `/usr` and the
/// home are left to the kernel's list).
pub const SCANNED: &[&str] = &["/var", "/opt", "/srv", "/etc"];

/// Socket files below `roots`, found by walking them without following a symlink or
/// crossing into a folder for which `skip` is true, looking at at most `budget` folders.
pub fn scan(roots: &[&Path], skip: &dyn Fn(&Path) -> bool, budget: usize) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo: Vec<PathBuf> = roots.iter().map(|r| r.to_path_buf()).collect();
    let mut seen = 0;
    while let Some(d) = todo.pop() {
        if seen == budget {
            break;
        }
        seen += 1;
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            // the type from the listing (no stat); most entries are plain files
            let Ok(t) = e.file_type() else { continue };
            if !(t.is_socket() || t.is_dir()) {
                continue;
            }
            let p = e.path();
            if skip(&p) {
                continue;
            }
            if t.is_socket() {
                found.push(p);
            } else if t.is_dir() {
                todo.push(p);
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pathname_sockets_are_read_from_the_kernels_list() {
        let text = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20001 /run/dbus/system_bus_socket\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20002 @/tmp/.X11-unix/X0\n\
            0000000000000000: 00000003 00000000 00000000 0001 03 20003\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20004 /var/lib/x/a b.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20005 relative.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20006 /run/dbus/system_bus_socket\n";
        assert_eq!(
            parse_proc_net_unix(text),
            [
                PathBuf::from("/run/dbus/system_bus_socket"),
                PathBuf::from("/var/lib/x/a b.sock"),
            ]
        );
    }

    #[test]
    fn the_walk_finds_sockets_and_skips_what_it_is_told() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("hidden")).unwrap();
        let _a = std::os::unix::net::UnixListener::bind(root.join("a/b/s.sock")).unwrap();
        let _h = std::os::unix::net::UnixListener::bind(root.join("hidden/h.sock")).unwrap();
        std::os::unix::fs::symlink("/run", root.join("a/run")).unwrap();
        let hidden = root.join("hidden");
        let got = scan(&[root], &|p| p == hidden, 100);
        assert_eq!(got, [root.join("a/b/s.sock")]);
        assert!(scan(&[root], &|_| false, 1).is_empty());
    }

    #[test]
    fn only_existing_socket_files_that_would_be_shown_are_kept() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let s = root.join("live.sock");
        let _l = std::os::unix::net::UnixListener::bind(&s).unwrap();
        let shown_all = host_sockets(|p| p.starts_with(&root));
        assert_eq!(shown_all, std::slice::from_ref(&s));
        assert!(host_sockets(|p| p.starts_with("/nowhere")).is_empty());
        // replaced by a regular file: nothing to mask
        std::fs::remove_file(&s).unwrap();
        std::fs::write(&s, "").unwrap();
        assert!(host_sockets(|p| p.starts_with(&root)).is_empty());
    }
}

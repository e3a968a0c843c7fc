//! The exec lock of a capsule: every `capsule exec` holds a shared lock on
//! `<bundle>/exec.lock` while its command runs; `capsule home apply|discard` take it
//! exclusively, without waiting, so the home layer never changes under a review being
//! applied, nor while a task still writes to it.
//!
//! The lock is a POSIX record lock (`fcntl(F_SETLK)`): it belongs to the process that took
//! it, so neither the sandbox's processes nor a prepared root's holder (forked from an
//! exec) inherit it, and it goes away when the process ends, however it ends. On the exec
//! path it costs one `open` and one `fcntl`.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// The lock file in a bundle.
pub const EXEC_LOCK: &str = "exec.lock";

fn open(bundle_dir: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(bundle_dir.join(EXEC_LOCK))
}

fn whole_file(kind: libc::c_int) -> libc::flock {
    // SAFETY: a zeroed flock is valid; whole file (start 0, len 0).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl
}

/// `fcntl(cmd)` with a whole-file lock of `kind`; the lock description after the call.
fn fcntl_lock(f: &File, cmd: libc::c_int, kind: libc::c_int) -> std::io::Result<libc::flock> {
    let mut fl = whole_file(kind);
    loop {
        // SAFETY: valid fd and flock.
        if unsafe { libc::fcntl(f.as_raw_fd(), cmd, &mut fl) } == 0 {
            return Ok(fl);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn lock(f: &File, kind: libc::c_int) -> std::io::Result<()> {
    fcntl_lock(f, libc::F_SETLK, kind).map(|_| ())
}

/// Held by an exec while its command runs (see the module docs); waits for an apply or a
/// discard running right now to end first. `None` when the lock cannot be taken (a
/// read-only bundle, say): the exec runs all the same, and a later `home apply` cannot
/// see it.
pub fn exec_shared(bundle_dir: &Path) -> Option<File> {
    let f = open(bundle_dir).ok()?;
    match fcntl_lock(&f, libc::F_SETLKW, libc::F_RDLCK) {
        Ok(_) => Some(f),
        Err(e) => {
            tracing::debug!("exec lock not taken: {e}");
            None
        }
    }
}

/// Why the exclusive lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "a `capsule exec` of this capsule is still running; wait for it to end, then review again"
    )]
    Running,
    #[error("locking {path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Taken by `home apply|discard`: fails at once while any exec holds the shared lock.
pub fn exclusive(bundle_dir: &Path) -> Result<File, LockError> {
    let io = |source| LockError::Io {
        path: bundle_dir.join(EXEC_LOCK),
        source,
    };
    let f = open(bundle_dir).map_err(io)?;
    match lock(&f, libc::F_WRLCK) {
        Ok(()) => Ok(f),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
            Err(LockError::Running)
        }
        Err(e) => Err(io(e)),
    }
}

/// Is an exec of the capsule running right now? (Asks, `F_GETLK`: takes no lock, so it
/// never delays an exec starting meanwhile.)
pub fn exec_running(bundle_dir: &Path) -> bool {
    let Ok(f) = open(bundle_dir) else {
        return false;
    };
    fcntl_lock(&f, libc::F_GETLK, libc::F_WRLCK)
        .is_ok_and(|fl| fl.l_type != libc::F_UNLCK as libc::c_short)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_holder_in_another_process_blocks_exclusive() {
        let t = tempfile::tempdir_in("/dev/shm").unwrap();
        let d = t.path();
        assert!(!exec_running(d));
        // POSIX locks never conflict within one process: take it in a child
        let (r, w) = nix::unistd::pipe().unwrap();
        let (r2, w2) = nix::unistd::pipe().unwrap();
        let f = open(d).unwrap();
        // SAFETY: test; the child only makes syscalls (no allocation) and exits
        match unsafe { libc::fork() } {
            0 => {
                let _ = lock(&f, libc::F_RDLCK);
                let _ = nix::unistd::write(&w, b"x");
                let mut b = [0u8; 1];
                let _ = nix::unistd::read(&r2, &mut b);
                unsafe { libc::_exit(0) };
            }
            pid => {
                let mut b = [0u8; 1];
                nix::unistd::read(&r, &mut b).unwrap();
                assert!(matches!(exclusive(d), Err(LockError::Running)));
                assert!(exec_running(d));
                nix::unistd::write(&w2, b"x").unwrap();
                let mut st = 0;
                unsafe { libc::waitpid(pid, &mut st, 0) };
                assert!(exclusive(d).is_ok());
            }
        }
    }
}

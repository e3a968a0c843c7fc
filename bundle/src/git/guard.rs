//! Reading on the host a repository that a sandboxed command could have written (a
//! capsule's workspace): [`check_git_dir`] refuses a `.git` that points git elsewhere or
//! holds symlinks or special files, and [`guarded`] gives up on a read that blocks on a
//! FIFO, a pipe or a terminal.
//!
//! gix follows symlinks and opens files blocking. Unchecked, a `.git/packed-refs`
//! symlinked to a host file the sandbox cannot read puts that file's first line into
//! gix's error message (and so into the exec record); a `gitdir:` file or a `commondir`
//! makes the host read another capsule's repository into this capsule's record; and a
//! FIFO where git reads a file (`HEAD`, `config`, a `.gitignore` in any folder) blocks
//! the host process forever, since no writer is left once the sandbox has ended.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

/// `workspace/.git`, checked: a real directory of the workspace (not a symlink, not a
/// `gitdir:` file), without a `commondir`, holding only directories and regular files
/// (the loose-object and pack folders are not walked: they are many and read only as
/// objects).
pub fn check_git_dir(workspace: &Path) -> Result<PathBuf> {
    let git = workspace.join(".git");
    let md = std::fs::symlink_metadata(&git).map_err(|e| Error::io(&git, e))?;
    if !md.is_dir() {
        return Err(Error::other(format!(
            "{}: not a directory (a .git file or symlink points git at another repository); not read",
            git.display()
        )));
    }
    if std::fs::symlink_metadata(git.join("commondir")).is_ok() {
        return Err(Error::other(format!(
            "{}: has a commondir file (it points git at another repository); not read",
            git.display()
        )));
    }
    walk(&git, &git, 0)?;
    Ok(git)
}

/// Deepest folder of `.git` walked (refs and logs nest a few levels; a task can nest
/// thousands).
pub const MAX_DEPTH: usize = 64;

fn walk(git: &Path, dir: &Path, depth: usize) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(Error::other(format!(
            "{}: more than {MAX_DEPTH} folders deep in the git directory; not read",
            crate::escape::path(dir)
        )));
    }
    let objects = git.join("objects");
    for ent in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let ent = ent.map_err(|e| Error::io(dir, e))?;
        let path = ent.path();
        // DirEntry::file_type does not follow symlinks
        let ft = ent.file_type().map_err(|e| Error::io(&path, e))?;
        if ft.is_dir() {
            let name = ent.file_name();
            let name = name.as_encoded_bytes();
            let store = dir == objects
                && (name == b"pack" || (name.len() == 2 && name.iter().all(u8::is_ascii_hexdigit)));
            if !store {
                walk(git, &path, depth + 1)?;
            }
        } else if !ft.is_file() {
            let what = if ft.is_symlink() {
                "a symlink"
            } else {
                "a FIFO, socket or device"
            };
            return Err(Error::other(format!(
                "{}: {what} in the git directory (git would follow or block on it); not read",
                path.display()
            )));
        }
    }
    Ok(())
}

/// How often [`guarded`] looks at its threads, and for how many looks in a row one may
/// wait on a FIFO, pipe or terminal before the read is given up.
const POLL: Duration = Duration::from_millis(20);
const STUCK_POLLS: u32 = 10;

/// Run `f` (a read of an untrusted repository) on a thread of its own and return what it
/// returns; give up with an error when a thread started meanwhile keeps waiting to open a
/// FIFO or to read a pipe or a terminal (seen in `/proc/self/task/*/wchan`). A thread that
/// was given up on stays blocked until the process exits; its result is dropped.
pub fn guarded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    start(what, f)?.wait()
}

/// A [`guarded`] read started by [`start`]: the caller does other work meanwhile, then
/// [`Pending::wait`]s for the result (with the same giving up).
pub struct Pending<T> {
    what: String,
    before: Vec<u32>,
    rx: std::sync::mpsc::Receiver<T>,
    thread: std::thread::JoinHandle<()>,
}

/// Start `f` as [`guarded`] does, without waiting for it.
pub fn start<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<Pending<T>> {
    let before = tasks();
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("capsule-git-read".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| Error::other(format!("{what}: cannot start a thread: {e}")))?;
    Ok(Pending {
        what: what.to_owned(),
        before,
        rx,
        thread,
    })
}

impl<T> Pending<T> {
    /// The result of the read, or an error when it failed or was given up. With a result,
    /// the reading thread has been joined (the kernel lets its task go within
    /// microseconds: a sandbox may be started single-threaded next).
    pub fn wait(self) -> Result<T> {
        let what = self.what;
        let mut stuck = 0;
        loop {
            match self.rx.recv_timeout(POLL) {
                Ok(v) => {
                    // it has sent its result: only its return is left
                    let _ = self.thread.join();
                    return Ok(v);
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Error::other(format!("{what}: the reading thread failed")))
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            let blocked = tasks()
                .into_iter()
                .filter(|t| !self.before.contains(t))
                .any(waits_on_fifo_pipe_or_tty);
            stuck = if blocked { stuck + 1 } else { 0 };
            if stuck >= STUCK_POLLS {
                return Err(Error::other(format!(
                    "{what}: given up: git blocked on a FIFO, pipe or terminal in the repository (one a command could have planted)"
                )));
            }
        }
    }
}

fn tasks() -> Vec<u32> {
    std::fs::read_dir("/proc/self/task")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn waits_on_fifo_pipe_or_tty(tid: u32) -> bool {
    let w = std::fs::read_to_string(format!("/proc/self/task/{tid}/wchan")).unwrap_or_default();
    // names differ between kernels: wait_for_partner (opening a FIFO), pipe_read,
    // anon_pipe_read, pipe_wait (reading one), n_tty_read / wait_woken (a terminal)
    w == "wait_for_partner"
        || w == "wait_woken"
        || w.contains("pipe")
        || w.contains("fifo")
        || w.contains("tty")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let g = d.path().join(".git");
        std::fs::create_dir_all(g.join("refs/heads")).unwrap();
        std::fs::create_dir_all(g.join("objects/ab")).unwrap();
        std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        d
    }

    #[test]
    fn a_deep_git_dir_is_refused() {
        let d = repo();
        let mut deep = d.path().join(".git/refs/heads");
        for _ in 0..=MAX_DEPTH {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        let e = check_git_dir(d.path()).unwrap_err().to_string();
        assert!(e.contains("folders deep"), "{e}");
    }

    #[test]
    fn a_plain_git_dir_passes() {
        let d = repo();
        // loose objects are not walked
        std::os::unix::fs::symlink("/etc/hostname", d.path().join(".git/objects/ab/cd")).unwrap();
        assert_eq!(check_git_dir(d.path()).unwrap(), d.path().join(".git"));
    }

    #[test]
    fn redirects_symlinks_and_fifos_are_refused() {
        let d = repo();
        std::os::unix::fs::symlink("/etc/hostname", d.path().join(".git/packed-refs")).unwrap();
        let e = check_git_dir(d.path()).unwrap_err().to_string();
        assert!(e.contains("packed-refs: a symlink"), "{e}");

        let d = repo();
        let fifo = std::ffi::CString::new(
            d.path()
                .join(".git/refs/heads/main")
                .as_os_str()
                .as_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: mkfifo on a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let e = check_git_dir(d.path()).unwrap_err().to_string();
        assert!(e.contains("FIFO"), "{e}");

        let d = repo();
        std::fs::write(d.path().join(".git/commondir"), "/elsewhere\n").unwrap();
        assert!(check_git_dir(d.path()).is_err());

        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(".git"), "gitdir: /elsewhere\n").unwrap();
        assert!(check_git_dir(d.path()).is_err());
    }

    #[test]
    fn a_read_blocked_on_a_fifo_is_given_up() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("fifo");
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo on a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let t = std::time::Instant::now();
        let r = guarded("test", move || std::fs::read(&p));
        assert!(r.is_err());
        assert!(t.elapsed() < Duration::from_secs(10));
        assert_eq!(guarded("test", || 7).unwrap(), 7);
        let pending = start("test", || 8).unwrap();
        assert_eq!(pending.wait().unwrap(), 8);
    }
}

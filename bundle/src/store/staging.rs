//! The staging folders of an open in progress, and the removal of those an open left when
//! it was killed.
//!
//! An open builds the bundle in `bundles/.open-<name>-<suffix>/` and the workspace in
//! `<workspace parent>/.capsule-open-<name>-<suffix>/`, then renames both into place. The
//! staging bundle carries `open.lock`, a POSIX record lock (`fcntl(F_SETLK)`) held by the
//! opening process until both renames are done, and `staging-workspace`, the staging
//! workspace's path, written before that folder is made. The lock goes away however the
//! process ends (SIGKILL included) and is never inherited by the build sandbox's
//! processes, so a later `open`, `list` or `close` tells a dead open from a live one by
//! asking for the lock ([`reap`]): a dead one's two folders are removed (with
//! [`crate::rmtree`], never following a link); a live one is left alone.
//!
//! Both files stay in the bundle across its rename, until the workspace is in place too:
//! a bundle in `bundles/<name>/` whose `open.lock` nobody holds and whose staging
//! workspace still exists is half an open, and is removed the same way.
//!
//! `close` renames what it removes to `.closing-<name>-<pid>` first; such a folder whose
//! process is gone is removed too.

use crate::error::{Error, IoContext, Result};
use crate::layout::Layout;
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The lock file in a staging bundle.
pub const OPEN_LOCK: &str = "open.lock";
/// The file in a staging bundle naming its staging workspace.
pub const STAGED_WORKSPACE: &str = "staging-workspace";
/// Prefix of a staging bundle's folder name.
pub const BUNDLE_PREFIX: &str = ".open-";
/// Prefix of a staging workspace's folder name.
pub const WORKSPACE_PREFIX: &str = ".capsule-open-";
/// Prefix of what `close` is removing.
pub const CLOSING_PREFIX: &str = ".closing-";
/// A staging bundle without a lock file (the open was killed between making the folder
/// and its lock) is taken as dead once it is this old.
const NO_LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

fn lock_desc(kind: libc::c_int) -> libc::flock {
    // SAFETY: a zeroed flock is valid; whole file (start 0, len 0).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl
}

/// Take the whole-file write lock of `f` without waiting; `Ok(false)` when another
/// process holds it.
fn try_lock(f: &File) -> std::io::Result<bool> {
    let fl = lock_desc(libc::F_WRLCK);
    loop {
        // SAFETY: valid fd and flock.
        if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &fl) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN | libc::EACCES) => return Ok(false),
            _ => return Err(e),
        }
    }
}

fn open_lock(dir: &Path, create: bool) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(create)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir.join(OPEN_LOCK))
}

/// The two staging folders of one open, removed when dropped unless [`Staging::finish`]
/// was called.
#[derive(Debug)]
pub struct Staging {
    bundle: PathBuf,
    workspace: PathBuf,
    /// Where the bundle is now (its staging path, or its final one once renamed).
    bundle_now: PathBuf,
    workspace_moved: bool,
    _lock: File,
}

impl Staging {
    /// Make the staging bundle in `bundles` (locked) and the staging workspace in
    /// `ws_parent`, for capsule `name`.
    pub fn begin(bundles: &Path, ws_parent: &Path, name: &str) -> Result<Staging> {
        let b = tempfile::Builder::new()
            .prefix(&format!("{BUNDLE_PREFIX}{name}-"))
            .tempdir_in(bundles)
            .at(bundles)?
            .keep();
        let lock = match open_lock(&b, true).and_then(|f| try_lock(&f).map(|ok| (f, ok))) {
            Ok((f, true)) => f,
            Ok((_, false)) => {
                let _ = crate::rmtree::remove_path(&b);
                return Err(Error::other(format!(
                    "{}: locked by another process",
                    b.display()
                )));
            }
            Err(e) => {
                let _ = crate::rmtree::remove_path(&b);
                return Err(Error::io(b.join(OPEN_LOCK), e));
            }
        };
        let suffix = b
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(BUNDLE_PREFIX))
            .unwrap_or(name)
            .to_string();
        let ws = ws_parent.join(format!("{WORKSPACE_PREFIX}{suffix}"));
        let mut st = Staging {
            bundle: b.clone(),
            workspace: ws.clone(),
            bundle_now: b.clone(),
            workspace_moved: true, // nothing to remove until it is made
            _lock: lock,
        };
        let marker = b.join(STAGED_WORKSPACE);
        std::fs::write(&marker, ws.as_os_str().as_bytes()).at(&marker)?;
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(&ws).at(&ws)?;
        }
        st.workspace_moved = false;
        Ok(st)
    }

    /// The staging bundle folder.
    pub fn bundle(&self) -> &Path {
        &self.bundle
    }

    /// The staging workspace folder.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The bundle was renamed to `to`.
    pub fn bundle_moved(&mut self, to: &Path) {
        self.bundle_now = to.to_path_buf();
    }

    /// Both folders are in place (the bundle at `bundle_final`): drop the staging files
    /// from the bundle; the lock goes with `self`.
    pub fn finish(mut self) {
        self.workspace_moved = true;
        let _ = std::fs::remove_file(self.bundle_now.join(STAGED_WORKSPACE));
        let _ = std::fs::remove_file(self.bundle_now.join(OPEN_LOCK));
        self.bundle_now = PathBuf::new();
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.workspace_moved {
            let _ = crate::rmtree::remove_path(&self.workspace);
        }
        if !self.bundle_now.as_os_str().is_empty() {
            let _ = crate::rmtree::remove_path(&self.bundle_now);
        }
    }
}

/// One leftover [`reap`] removed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Reaped {
    /// The folder removed.
    pub path: PathBuf,
    /// What it was: `open` (a killed open's staging folder or half-placed bundle) or
    /// `close` (what a killed close was removing).
    pub left_by: &'static str,
}

/// Is `bundle_dir`'s open dead? `None`: it is live (or cannot be told yet).
fn dead_open(bundle_dir: &Path) -> Option<()> {
    match open_lock(bundle_dir, false) {
        Ok(f) => match try_lock(&f) {
            Ok(true) => Some(()),
            _ => None,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let md = std::fs::symlink_metadata(bundle_dir).ok()?;
            let age = md.modified().ok()?.elapsed().ok()?;
            (age > NO_LOCK_GRACE).then_some(())
        }
        Err(_) => None,
    }
}

/// The staging workspace a staging bundle names, if it names one of ours: an absolute
/// path whose folder name is `.capsule-open-<name>-...`.
fn staged_workspace(bundle_dir: &Path, name: &str) -> Option<PathBuf> {
    let marker = bundle_dir.join(STAGED_WORKSPACE);
    let md = std::fs::symlink_metadata(&marker).ok()?;
    if !md.is_file() || md.len() > 4096 {
        return None;
    }
    let raw = std::fs::read(&marker).ok()?;
    let p = PathBuf::from(OsStr::from_bytes(&raw));
    let base = p.file_name()?.to_str()?;
    let ok = p.is_absolute()
        && base.starts_with(&format!("{WORKSPACE_PREFIX}{name}-"))
        && !p
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir));
    ok.then_some(p)
}

fn remove(path: &Path, left_by: &'static str, out: &mut Vec<Reaped>) {
    match crate::rmtree::remove_path(path) {
        Ok(()) => out.push(Reaped {
            path: path.to_path_buf(),
            left_by,
        }),
        Err(e) => tracing::debug!("leftover {} not removed: {e}", path.display()),
    }
}

/// A `.closing-<name>-<pid>` folder whose process is gone.
fn dead_closing(file_name: &str) -> bool {
    let Some(pid) = file_name
        .rsplit('-')
        .next()
        .and_then(|p| p.parse::<libc::pid_t>().ok())
    else {
        return false;
    };
    process_gone(pid)
}

/// Whether process `pid` is gone (not this process, nor any that exists, whoever's):
/// what a leftover named after its maker's pid is judged by.
pub fn process_gone(pid: libc::pid_t) -> bool {
    if pid <= 0 || pid == std::process::id() as libc::pid_t {
        return false;
    }
    // SAFETY: signal 0 only asks whether the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

fn names_in(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    v.sort();
    v
}

/// Remove what killed opens and closes left under the capsule root (see the module
/// docs): staging bundles and workspaces, half-placed bundles, `.closing-*` folders.
/// Live opens and closes are left alone. Best effort: what cannot be removed stays for
/// the next call.
pub fn reap(layout: &Layout) -> Vec<Reaped> {
    let mut out = Vec::new();
    let bundles = layout.bundles_dir();
    for n in names_in(&bundles) {
        let dir = bundles.join(&n);
        if let Some(rest) = n.strip_prefix(BUNDLE_PREFIX) {
            if dead_open(&dir).is_none() {
                continue;
            }
            // the name before the random suffix
            let name = rest.rsplit_once('-').map_or(rest, |(a, _)| a);
            if let Some(ws) = staged_workspace(&dir, name) {
                if std::fs::symlink_metadata(&ws).is_ok() {
                    remove(&ws, "open", &mut out);
                }
            }
            remove(&dir, "open", &mut out);
        } else if n.starts_with(CLOSING_PREFIX) {
            if dead_closing(&n) {
                remove(&dir, "close", &mut out);
            }
        } else if !n.starts_with('.') {
            reap_placed(&dir, &n, &mut out);
        }
    }
    let ws_dir = layout.workspaces_dir();
    for n in names_in(&ws_dir) {
        if n.starts_with(CLOSING_PREFIX) && dead_closing(&n) {
            remove(&ws_dir.join(&n), "close", &mut out);
        }
    }
    out
}

/// A bundle in its final place whose open was killed before it ended: half an open when
/// its staging workspace is still there (or its workspace is not), else a capsule whose
/// staging files only need dropping.
fn reap_placed(dir: &Path, name: &str, out: &mut Vec<Reaped>) {
    if std::fs::symlink_metadata(dir.join(OPEN_LOCK)).is_err() || dead_open(dir).is_none() {
        return;
    }
    let staged = staged_workspace(dir, name);
    let staged_there = staged
        .as_ref()
        .is_some_and(|w| std::fs::symlink_metadata(w).is_ok());
    let placed = crate::store::record::read_record(dir).is_ok_and(|r| {
        std::fs::symlink_metadata(r.workspace.join(crate::workspace::manifest::SENTINEL))
            .is_ok_and(|m| m.is_file())
    });
    if staged_there || !placed {
        if let Some(w) = staged.filter(|_| staged_there) {
            remove(&w, "open", out);
        }
        remove(dir, "open", out);
    } else {
        let _ = std::fs::remove_file(dir.join(STAGED_WORKSPACE));
        let _ = std::fs::remove_file(dir.join(OPEN_LOCK));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> (tempfile::TempDir, Layout) {
        let t = tempfile::tempdir_in("/dev/shm").unwrap();
        let l = Layout::new(t.path());
        std::fs::create_dir_all(l.bundles_dir()).unwrap();
        std::fs::create_dir_all(l.workspaces_dir()).unwrap();
        (t, l)
    }

    /// Run `f` in a child process that is then killed with SIGKILL.
    fn in_killed_child(f: impl FnOnce()) {
        let (r, w) = std::io::pipe().unwrap();
        // SAFETY: test; the child runs `f`, says so, and waits to be killed
        match unsafe { libc::fork() } {
            0 => {
                f();
                use std::io::Write;
                let mut w = w;
                let _ = w.write_all(b"x");
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
            }
            pid => {
                drop(w);
                let mut b = [0u8; 1];
                use std::io::Read;
                let mut r = r;
                r.read_exact(&mut b).unwrap();
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    let mut st = 0;
                    libc::waitpid(pid, &mut st, 0);
                }
            }
        }
    }

    #[test]
    fn a_killed_opens_staging_is_reaped_and_no_link_followed() {
        let (t, l) = layout();
        let (b, w) = (l.bundles_dir(), l.workspaces_dir());
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "keep").unwrap();
        in_killed_child(|| {
            let st = Staging::begin(&b, &w, "x").unwrap();
            std::fs::write(st.workspace().join("f"), "x").unwrap();
            std::os::unix::fs::symlink(&outside, st.workspace().join("link")).unwrap();
            std::os::unix::fs::symlink(&outside, st.bundle().join("link")).unwrap();
            std::mem::forget(st);
        });
        assert_eq!(names_in(&b).len(), 1);
        assert_eq!(names_in(&w).len(), 1);
        let reaped = reap(&l);
        assert_eq!(reaped.len(), 2, "{reaped:?}");
        assert!(names_in(&b).is_empty(), "{:?}", names_in(&b));
        assert!(names_in(&w).is_empty(), "{:?}", names_in(&w));
        assert_eq!(
            std::fs::read_to_string(outside.join("keep")).unwrap(),
            "keep"
        );
    }

    #[test]
    fn a_half_placed_bundle_is_reaped_a_finished_one_kept() {
        let (_t, l) = layout();
        let (b, w) = (l.bundles_dir(), l.workspaces_dir());
        let fin = b.join("half");
        in_killed_child(|| {
            let mut st = Staging::begin(&b, &w, "half").unwrap();
            std::fs::rename(st.bundle(), &fin).unwrap();
            st.bundle_moved(&fin);
            std::mem::forget(st);
        });
        let done = b.join("done");
        let fin2 = done.clone();
        in_killed_child(|| {
            let mut st = Staging::begin(&b, &w, "done").unwrap();
            std::fs::rename(st.bundle(), &fin2).unwrap();
            st.bundle_moved(&fin2);
            std::fs::rename(st.workspace(), st.workspace().with_file_name("done")).unwrap();
            st.finish();
        });
        let r = reap(&l);
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(!fin.exists());
        assert!(done.exists());
        assert_eq!(names_in(&w), vec!["done".to_string()]);
    }

    #[test]
    fn a_live_open_in_another_process_is_left_alone_until_killed() {
        let (_t, l) = layout();
        let (b, w) = (l.bundles_dir(), l.workspaces_dir());
        let (r, wp) = std::io::pipe().unwrap();
        // SAFETY: test; the child holds a staging until it is killed
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            use std::io::Write;
            let st = Staging::begin(&b, &w, "live").unwrap();
            let mut wp = wp;
            let _ = wp.write_all(b"x");
            std::mem::forget(st);
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
        drop(wp);
        use std::io::Read;
        let mut c = [0u8; 1];
        let mut r = r;
        r.read_exact(&mut c).unwrap();
        let live = reap(&l);
        let (nb, nw) = (names_in(&b).len(), names_in(&w).len());
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            let mut st = 0;
            libc::waitpid(pid, &mut st, 0);
        }
        assert!(live.is_empty(), "{live:?}");
        assert_eq!((nb, nw), (1, 1));
        assert_eq!(reap(&l).len(), 2);
        assert!(names_in(&b).is_empty());
        assert!(names_in(&w).is_empty());
    }

    #[test]
    fn a_killed_close_tomb_is_reaped() {
        let (_t, l) = layout();
        // a pid that does not exist: beyond pid_max
        let tomb = l.workspaces_dir().join(".closing-x-2147483000");
        std::fs::create_dir_all(tomb.join("a/b")).unwrap();
        let live = l.bundles_dir().join(format!(
            ".closing-y-{}",
            std::os::unix::process::parent_id()
        ));
        std::fs::create_dir_all(&live).unwrap();
        let r = reap(&l);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(!tomb.exists());
        assert!(live.exists());
    }
}

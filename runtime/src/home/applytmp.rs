//! The temporary files `home apply` writes a file's new version into before it renames it
//! over the real one (`.capsule-apply.<pid>.tmp`, next to it), and the removal of those
//! an apply left when it was killed: one whose process is gone is removed by the next
//! apply that writes into the same folder; one of a live process (another apply, into
//! the same home) is left alone.

use capsule_bundle::fsat;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

const PREFIX: &str = ".capsule-apply.";
const SUFFIX: &str = ".tmp";

/// The temporary name of this process.
pub fn name() -> OsString {
    OsString::from(format!("{PREFIX}{}{SUFFIX}", std::process::id()))
}

/// The pid in a temporary name, when `name` is one.
fn pid_of(name: &OsStr) -> Option<libc::pid_t> {
    let s = std::str::from_utf8(name.as_bytes()).ok()?;
    let digits = s.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|p| *p > 0)
}

/// Remove from `dir` the temporary files of applies whose process is gone (files and
/// symlinks only, never a folder; unlinked by name, nothing followed). Best effort.
pub fn remove_stale(dir: &OwnedFd) {
    let Ok(names) = fsat::list_unsorted(dir) else {
        return;
    };
    for n in names {
        let Some(pid) = pid_of(&n) else { continue };
        if !capsule_bundle::store::staging::process_gone(pid) {
            continue;
        }
        if let Ok(c) = fsat::cstr(&n) {
            let _ = fsat::unlink_at_c(dir.as_raw_fd(), &c, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_pids() {
        assert_eq!(pid_of(&name()), Some(std::process::id() as libc::pid_t));
        for bad in [
            ".capsule-apply..tmp",
            ".capsule-apply.12x.tmp",
            ".capsule-apply.-1.tmp",
            ".capsule-apply.0.tmp",
            "capsule-apply.12.tmp",
            ".capsule-apply.12.tmp.x",
            ".zshrc",
        ] {
            assert_eq!(pid_of(OsStr::new(bad)), None, "{bad}");
        }
    }

    #[test]
    fn removes_only_the_dead_ones_files() {
        let d = tempfile::tempdir().unwrap();
        // a process that is surely gone: a child that already ended and was reaped
        let dead = std::process::Command::new("true")
            .spawn()
            .and_then(|mut c| c.wait().map(|_| c.id()))
            .unwrap();
        let dead_name = format!(".capsule-apply.{dead}.tmp");
        let dead_dir = ".capsule-apply.999999999.tmp";
        std::fs::write(d.path().join(&dead_name), "x").unwrap();
        std::fs::write(d.path().join(name()), "mine").unwrap();
        std::fs::write(d.path().join(".capsule-apply.1.tmp"), "init is alive").unwrap();
        std::fs::create_dir(d.path().join(dead_dir)).unwrap();
        remove_stale(&fsat::open_dir(d.path()).unwrap());
        assert!(!d.path().join(&dead_name).exists());
        assert!(d.path().join(name()).exists());
        assert!(d.path().join(".capsule-apply.1.tmp").exists());
        assert!(
            d.path().join(dead_dir).is_dir(),
            "a folder is never removed"
        );
    }
}

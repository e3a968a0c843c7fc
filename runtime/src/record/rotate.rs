//! Keeping a capsule's logs (`events.jsonl`, `refusals.jsonl`) bounded across execs: before
//! an append would take a log past its cap, the log is renamed to `NAME.1` (replacing the
//! older `NAME.1`) and the append starts a new one. A capsule keeps at most two files of
//! each log: the cap twice, plus the one append that rotated. Readers read `NAME.1`, then
//! `NAME` ([`files`]).
//!
//! Concurrent execs of one capsule rotate once: the one that rotates holds an exclusive
//! `flock` on the file and renames it only if the name still points at that file.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The cap of `events.jsonl` (exec records of ~1-10 KiB: thousands of execs per file).
pub const EVENTS_MAX: u64 = 8 << 20;
/// The cap of `refusals.jsonl`.
pub const REFUSALS_MAX: u64 = 4 << 20;

/// Where `path` goes when rotated: `NAME.1` next to it.
pub fn rotated(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".1");
    PathBuf::from(s)
}

/// The files of the log at `path`, oldest first (they may not exist).
pub fn files(path: &Path) -> [PathBuf; 2] {
    [rotated(path), path.to_path_buf()]
}

/// Before appending `incoming` bytes to `path`: rotate it if it holds something and the
/// append would take it past `max`. A missing log, or anything but a regular file there,
/// is left to the append to deal with.
pub fn make_room(path: &Path, incoming: usize, max: u64) -> std::io::Result<()> {
    let over = |len: u64| len > 0 && len.saturating_add(incoming as u64) > max;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() && over(m.len()) => {}
        _ => return Ok(()),
    }
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    lock(&f)?;
    let held = f.metadata()?;
    let named = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    // another exec rotated it while this one waited: its new file is the one named now
    if held.ino() != named.ino() || held.dev() != named.dev() || !over(held.len()) {
        return Ok(());
    }
    std::fs::rename(path, rotated(path))
    // the lock goes with `f`
}

fn lock(f: &File) -> std::io::Result<()> {
    loop {
        // SAFETY: a valid descriptor; flock takes no pointers.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_past_the_cap_and_keeps_two_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("events.jsonl");
        make_room(&p, 10, 100).unwrap();
        assert!(!rotated(&p).exists(), "nothing to rotate");
        for i in 0..50 {
            let line = format!("{{\"n\":{i:05}}}\n");
            make_room(&p, line.len(), 100).unwrap();
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&p)
                .unwrap();
            crate::record::append::append_whole(&f, line.as_bytes()).unwrap();
        }
        let cur = std::fs::read_to_string(&p).unwrap();
        let old = std::fs::read_to_string(rotated(&p)).unwrap();
        assert!(cur.len() <= 100 && old.len() <= 100, "{cur:?} {old:?}");
        // the newest lines, in order, across both
        let all: Vec<&str> = old.lines().chain(cur.lines()).collect();
        assert_eq!(all.last(), Some(&"{\"n\":00049}"));
        let n: Vec<u32> = all.iter().map(|l| l[5..10].parse().unwrap()).collect();
        assert!(n.windows(2).all(|w| w[1] == w[0] + 1), "{n:?}");
        assert_eq!(files(&p)[0], d.path().join("events.jsonl.1"));
    }

    #[test]
    fn one_append_larger_than_the_cap_still_goes_in_alone() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log");
        std::fs::write(&p, "a\n").unwrap();
        make_room(&p, 500, 100).unwrap();
        assert!(!p.exists() && rotated(&p).exists());
        // a symlink is not followed or moved
        std::os::unix::fs::symlink(d.path().join("elsewhere"), &p).unwrap();
        make_room(&p, 500, 100).unwrap();
        assert!(p.symlink_metadata().unwrap().file_type().is_symlink());
    }
}

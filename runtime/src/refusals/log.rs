//! The capsule's `refusals.jsonl` (in its bundle directory): one JSON line per distinct
//! refusal of an exec, with the times it was first and last seen and the exec it belongs
//! to, appended when the exec ends:
//!
//! ```json
//! {"time":"2026-12-01T12:00:00.123Z","last":"2026-12-01T12:00:01.456Z","exec":"2026-12-01T12:00:00Z",
//!  "kind":"syscall","target":"keyctl","program":"keyctl","pid":2,"count":1}
//! ```
//!
//! The allowlist proxy run on its own (`capsule proxy --refusal-log`) writes lines of
//! the same shape as it refuses (`crate::net::refusal`). The lines of one exec are written
//! with a single `write` on a file opened with `O_APPEND`, so concurrent execs of one
//! capsule do not interleave. The file is capsule's own (the sandbox never sees the
//! bundle); reading it is still bounded ([`MAX_READ`]).
//!
//! Bounded: one exec appends at most [`MAX_APPEND`] bytes (its first distinct refusals;
//! the rest are counted on stderr), and the log is rotated to `refusals.jsonl.1` past
//! [`crate::record::rotate::REFUSALS_MAX`]; [`read`] reads both.

use super::Refusal;
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::SystemTime;

/// At most this much of the log's end is read.
pub const MAX_READ: u64 = 64 << 20;

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// When it was first seen (RFC 3339, milliseconds, UTC).
    pub time: String,
    /// When it was last seen, when repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
    /// The `started_at` of the exec it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<String>,
    #[serde(flatten)]
    pub refusal: Refusal,
}

pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

impl Line {
    pub fn new(refusal: Refusal, first: SystemTime, last: SystemTime, exec: &str) -> Line {
        Line {
            time: rfc3339(first),
            last: (refusal.count > 1).then(|| rfc3339(last)),
            exec: (!exec.is_empty()).then(|| exec.to_string()),
            refusal,
        }
    }
}

/// What one exec appends at most: the lines past it are left out (and counted).
pub const MAX_APPEND: usize = 256 << 10;

/// Append `lines` to `path` (created mode 0600; a symlink there is refused) in one write,
/// at most [`MAX_APPEND`] bytes of them; the log is rotated past its cap first
/// ([`crate::record::rotate`]). Returns how many lines were left out.
pub fn append(path: &Path, lines: &[Line]) -> std::io::Result<usize> {
    let mut buf = Vec::new();
    let mut left_out = 0;
    for l in lines {
        let mut one = serde_json::to_vec(l).map_err(std::io::Error::other)?;
        one.push(b'\n');
        if buf.len() + one.len() > MAX_APPEND {
            left_out += 1;
            continue;
        }
        buf.extend_from_slice(&one);
    }
    use crate::record::rotate;
    if let Err(e) = rotate::make_room(path, buf.len(), rotate::REFUSALS_MAX) {
        tracing::warn!("cannot rotate {}: {e}", path.display());
    }
    let f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    // whole lines or none: a full disk leaves no torn line
    crate::record::append::append_whole(&f, &buf)?;
    Ok(left_out)
}

/// The lines of the log at `path` (its rotated file, then `path`) first seen at or after
/// `since` (all when `None`); lines that do not parse are skipped. A missing log has none.
pub fn read(path: &Path, since: Option<SystemTime>) -> std::io::Result<Vec<Line>> {
    let mut lines = Vec::new();
    for p in crate::record::rotate::files(path) {
        lines.extend(read_one(&p, since)?);
    }
    Ok(lines)
}

fn read_one(path: &Path, since: Option<SystemTime>) -> std::io::Result<Vec<Line>> {
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let skip = meta.len().saturating_sub(MAX_READ);
    f.seek(SeekFrom::Start(skip))?;
    let mut bytes = Vec::new();
    f.take(MAX_READ).read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes);
    Ok(text
        .lines()
        .skip(usize::from(skip > 0))
        .filter_map(|l| serde_json::from_str::<Line>(l).ok())
        .filter(|l| match since {
            None => true,
            Some(s) => humantime::parse_rfc3339_weak(&l.time)
                .or_else(|_| humantime::parse_rfc3339(&l.time))
                .is_ok_and(|t| t >= s),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::super::Kind;
    use super::*;
    use std::io::Write;

    fn r(target: &str, count: u64) -> Refusal {
        Refusal {
            kind: Kind::Syscall,
            target: target.into(),
            program: "sh".into(),
            pid: Some(3),
            count,
            grant: None,
            reason: None,
            header: None,
        }
    }

    #[test]
    fn appends_and_reads_since() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("refusals.jsonl");
        let old = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let now = SystemTime::now();
        append(&p, &[Line::new(r("keyctl", 1), old, old, "x")]).unwrap();
        append(&p, &[Line::new(r("bpf", 5), now, now, "y")]).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"not json\n")
            .unwrap();
        let all = read(&p, None).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].last, None);
        assert!(all[1].last.is_some());
        let recent = read(&p, Some(now - std::time::Duration::from_secs(60))).unwrap();
        assert_eq!(recent.len(), 1);
        assert_eq!(recent[0].refusal.target, "bpf");
        assert_eq!(recent[0].refusal.count, 5);
        assert!(read(&d.path().join("none"), None).unwrap().is_empty());
    }

    #[test]
    fn refuses_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("refusals.jsonl");
        std::os::unix::fs::symlink(d.path().join("elsewhere"), &p).unwrap();
        assert!(append(&p, &[]).is_err());
        assert!(!d.path().join("elsewhere").exists());
    }
}

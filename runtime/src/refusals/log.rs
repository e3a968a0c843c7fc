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
    /// How many refusals of the same exec were left out just before this line (the
    /// first ones of an exec are kept, and the last; those between are counted here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted_before: Option<u64>,
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
            omitted_before: None,
        }
    }
}

/// What one exec appends at most: the lines past it are left out (and counted).
pub const MAX_APPEND: usize = 256 << 10;

/// Append `lines` to `path` (created mode 0600; a symlink there is refused) in one write,
/// at most [`MAX_APPEND`] bytes of them: the first lines and the last, half of it each,
/// the first of the last saying how many refusals were left out between
/// (`omitted_before`); the log is rotated past its cap first ([`crate::record::rotate`]).
/// Returns how many lines were left out.
pub fn append(path: &Path, lines: &[Line]) -> std::io::Result<usize> {
    let enc = |l: &Line| -> std::io::Result<Vec<u8>> {
        let mut one = serde_json::to_vec(l).map_err(std::io::Error::other)?;
        one.push(b'\n');
        Ok(one)
    };
    let encoded = lines.iter().map(enc).collect::<std::io::Result<Vec<_>>>()?;
    let total: usize = encoded.iter().map(Vec::len).sum();
    let mut buf = Vec::new();
    let mut left_out = 0;
    if total <= MAX_APPEND {
        encoded.iter().for_each(|e| buf.extend_from_slice(e));
    } else {
        let half = MAX_APPEND / 2;
        let mut head = 0;
        let mut used = 0;
        while head < encoded.len() && used + encoded[head].len() <= half {
            used += encoded[head].len();
            head += 1;
        }
        // the tail, from the end, in the other half (less room for the count it carries)
        let mut tail = encoded.len();
        let mut tused = 0;
        while tail > head && tused + encoded[tail - 1].len() + 48 <= half {
            tused += encoded[tail - 1].len();
            tail -= 1;
        }
        left_out = tail - head;
        let omitted: u64 = lines[head..tail]
            .iter()
            .map(|l| l.refusal.count + l.omitted_before.unwrap_or(0))
            .sum();
        encoded[..head]
            .iter()
            .for_each(|e| buf.extend_from_slice(e));
        if let Some(first) = lines.get(tail) {
            let mut f = first.clone();
            f.omitted_before = Some(f.omitted_before.unwrap_or(0) + omitted);
            buf.extend_from_slice(&enc(&f)?);
            encoded[tail + 1..]
                .iter()
                .for_each(|e| buf.extend_from_slice(e));
        }
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
    fn a_flood_keeps_the_first_and_the_last_lines_and_counts_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("refusals.jsonl");
        let now = SystemTime::now();
        let lines: Vec<Line> = (0..20_000)
            .map(|i| {
                Line::new(
                    r(&format!("/w/{i:06}/{}", "x".repeat(100)), 2),
                    now,
                    now,
                    "e",
                )
            })
            .collect();
        let left_out = append(&p, &lines).unwrap();
        assert!(left_out > 0);
        let size = std::fs::metadata(&p).unwrap().len();
        assert!(size <= MAX_APPEND as u64, "{size}");
        let got = read(&p, None).unwrap();
        assert_eq!(got.len() + left_out, lines.len());
        assert_eq!(got[0].refusal.target, lines[0].refusal.target);
        assert_eq!(
            got.last().unwrap().refusal.target,
            lines.last().unwrap().refusal.target
        );
        let marked: Vec<&Line> = got.iter().filter(|l| l.omitted_before.is_some()).collect();
        assert_eq!(marked.len(), 1);
        assert_eq!(marked[0].omitted_before, Some(2 * left_out as u64));
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

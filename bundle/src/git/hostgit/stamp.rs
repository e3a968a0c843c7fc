//! The guard's memory between runs: `bundles/<name>/git-guard.stamp` lists every path
//! the last full check looked at with its stat (device, inode, mode; for files and
//! watched directories also size, mtime and ctime), the gitlinks it was given, and the
//! repositories it found through URLs. [`stamp_matches`] re-stats those paths: when all
//! agree, nothing changed that the check would look at.

use super::fsat::{self, Stat};
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What the stamp says about one path.
fn stamp_line(out: &mut Vec<u8>, rel: &Path, st: &Stat, ident_only: bool) {
    out.extend_from_slice(hex(rel.as_os_str().as_bytes()).as_bytes());
    let line = if ident_only {
        format!(" {} {} {:o}\n", st.dev, st.ino, st.mode)
    } else {
        format!(
            " {} {} {:o} {} {}.{} {}.{}\n",
            st.dev, st.ino, st.mode, st.size, st.mtime.0, st.mtime.1, st.ctime.0, st.ctime.1
        )
    };
    out.extend_from_slice(line.as_bytes());
}

fn hex(b: &[u8]) -> String {
    if b.is_empty() {
        return "-".into();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A path the stamp watches: relative path, and whether only its identity counts (a git
/// dir, whose own mtime changes with every commit).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Watch {
    pub rel: PathBuf,
    pub ident_only: bool,
    /// A repository found through a URL (a bare remote): checked again by the next full
    /// check even when no config names it any more.
    pub repo: bool,
}

pub(super) fn make_stamp(ws: &Path, watch: &BTreeSet<Watch>, gitlinks: &[PathBuf]) -> Vec<u8> {
    let mut out = b"capsule-git-guard 1\n".to_vec();
    let mut links: Vec<&PathBuf> = gitlinks.iter().collect();
    links.sort();
    for l in links {
        out.extend_from_slice(b"gitlink ");
        out.extend_from_slice(hex(l.as_os_str().as_bytes()).as_bytes());
        out.push(b'\n');
    }
    for w in watch {
        let st = fsat::lstat_path(&ws.join(&w.rel));
        out.push(match (w.repo, w.ident_only) {
            (true, _) => b'r',
            (false, true) => b'i',
            (false, false) => b'f',
        });
        out.push(b' ');
        stamp_line(&mut out, &w.rel, &st, w.ident_only);
    }
    out
}

fn unhex(s: &[u8]) -> Option<Vec<u8>> {
    if s == b"-" {
        return Some(Vec::new());
    }
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks(2)
        .map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok())
        .collect()
}

/// The repositories found through URLs that the stamp `old` names.
pub(super) fn stamp_repos(old: &[u8]) -> Vec<PathBuf> {
    old.split(|b| *b == b'\n')
        .filter_map(|l| l.strip_prefix(b"r "))
        .filter_map(|l| l.split(|b| *b == b' ').next())
        .filter_map(unhex)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(OsStr::from_bytes(&p)))
        .collect()
}

/// Does the stamp `old` still describe `ws` (every watched path's stat, the gitlinks)?
pub(super) fn stamp_matches(old: &[u8], ws: &Path, gitlinks: &[PathBuf]) -> bool {
    let mut lines = old.split(|b| *b == b'\n');
    if lines.next() != Some(b"capsule-git-guard 1") {
        return false;
    }
    let mut links: Vec<&PathBuf> = gitlinks.iter().collect();
    links.sort();
    let mut links = links.into_iter();
    let mut fresh = Vec::with_capacity(old.len());
    let mut saw_entries = false;
    for line in lines {
        if line.is_empty() {
            continue;
        }
        if let Some(l) = line.strip_prefix(b"gitlink ") {
            if saw_entries {
                return false;
            }
            let Some(p) = unhex(l) else { return false };
            if links.next().map(|x| x.as_os_str().as_bytes()) != Some(p.as_slice()) {
                return false;
            }
            continue;
        }
        saw_entries = true;
        let (ident_only, rest) = match line.split_first() {
            Some((b'i' | b'r', r)) => (true, r),
            Some((b'f', r)) => (false, r),
            _ => return false,
        };
        let rest = rest.strip_prefix(b" ").unwrap_or(rest);
        let Some(sp) = rest.iter().position(|b| *b == b' ') else {
            return false;
        };
        let Some(rel) = unhex(&rest[..sp]) else {
            return false;
        };
        let rel = PathBuf::from(OsStr::from_bytes(&rel));
        let st = fsat::lstat_path(&ws.join(&rel));
        fresh.clear();
        stamp_line(&mut fresh, &rel, &st, ident_only);
        if fresh.strip_suffix(b"\n").unwrap_or(&fresh) != rest {
            return false;
        }
    }
    links.next().is_none() && saw_entries
}

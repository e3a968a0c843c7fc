//! The tree digest of a workspace, as Kitsoki computes it.
//!
//! Walk the workspace, skipping directories named `.git`, `.worktrees` and `peers` and
//! the files `capsule-manifest.json`, `.kitsoki-capsule` and `.git`, at any depth; sort
//! the slash-separated relative paths bytewise; sha256 over, for each file, its path
//! bytes, one zero byte, its length as 8-byte big-endian, and its content. The result is
//! lower-case hex without a prefix (a spec may write it with `sha256:`).
//!
//! Symbolic links are never followed (following one could read outside the workspace or
//! block on a FIFO): a symlink counts as a file whose content is its target path, as git
//! stores it. Other non-regular files (FIFOs, sockets, devices) are skipped.

use crate::error::{Error, IoContext, Result};
use crate::manifest::{MANIFEST, SENTINEL};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Directory names skipped at any depth.
pub const SKIP_DIRS: &[&str] = &[".git", ".worktrees", "peers"];
/// File names skipped at any depth.
pub const SKIP_FILES: &[&str] = &[MANIFEST, SENTINEL, ".git"];

enum Kind {
    File,
    Link,
}

/// The tree digest of `root` (lower-case hex).
///
/// Files are read in parallel in batches (reading dominates for large trees) and hashed
/// in order.
pub fn tree_digest(root: &Path) -> Result<String> {
    let mut files: Vec<(Vec<u8>, Kind)> = Vec::new();
    walk(root, &[], &mut files)?;
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let mut h = Sha256::new();
    const BATCH: usize = 512;
    for batch in files.chunks(BATCH) {
        let mut contents: Vec<Option<Result<Vec<u8>>>> = (0..batch.len()).map(|_| None).collect();
        if threads == 1 || batch.len() < 32 {
            for (slot, f) in contents.iter_mut().zip(batch) {
                *slot = Some(read_entry(root, f));
            }
        } else {
            let per = batch.len().div_ceil(threads);
            std::thread::scope(|sc| {
                for (slots, fs) in contents.chunks_mut(per).zip(batch.chunks(per)) {
                    sc.spawn(move || {
                        for (slot, f) in slots.iter_mut().zip(fs) {
                            *slot = Some(read_entry(root, f));
                        }
                    });
                }
            });
        }
        for ((rel, _), data) in batch.iter().zip(contents) {
            let data = data.ok_or_else(|| Error::other("tree digest: a file was not read"))??;
            h.update(rel);
            h.update([0u8]);
            h.update((data.len() as u64).to_be_bytes());
            h.update(&data);
        }
    }
    Ok(hex::encode(h.finalize()))
}

/// The digest over `(path, content)` pairs already in bytewise path order (e.g. the
/// entries of a fresh index), applying the same skip rules. `None` if a content is missing.
pub fn digest_entries<'a>(
    entries: impl Iterator<Item = (&'a [u8], Option<Vec<u8>>)>,
) -> Option<String> {
    let mut h = Sha256::new();
    for (path, data) in entries {
        let comps: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
        let (last, dirs) = comps.split_last()?;
        if dirs
            .iter()
            .any(|d| SKIP_DIRS.iter().any(|s| s.as_bytes() == *d))
            || SKIP_FILES.iter().any(|s| s.as_bytes() == *last)
        {
            continue;
        }
        let data = data?;
        h.update(path);
        h.update([0u8]);
        h.update((data.len() as u64).to_be_bytes());
        h.update(&data);
    }
    Some(hex::encode(h.finalize()))
}

fn read_entry(root: &Path, (rel, kind): &(Vec<u8>, Kind)) -> Result<Vec<u8>> {
    let path = root.join(std::ffi::OsStr::from_bytes(rel));
    match kind {
        Kind::Link => {
            let t = std::fs::read_link(&path).at(&path)?;
            Ok(t.as_os_str().as_bytes().to_vec())
        }
        Kind::File => {
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)
                .at(&path)?;
            let md = f.metadata().at(&path)?;
            if !md.is_file() {
                return Err(Error::other(format!(
                    "{}: changed type while computing the tree digest",
                    path.display()
                )));
            }
            let mut buf = Vec::with_capacity(md.len() as usize);
            f.read_to_end(&mut buf).at(&path)?;
            Ok(buf)
        }
    }
}

fn walk(dir: &Path, prefix: &[u8], out: &mut Vec<(Vec<u8>, Kind)>) -> Result<()> {
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let name = entry.file_name();
        let name_b = name.as_bytes();
        let ft = entry.file_type().at(entry.path())?;
        let mut rel = prefix.to_vec();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name_b);
        if ft.is_dir() {
            if SKIP_DIRS.iter().any(|s| s.as_bytes() == name_b) {
                continue;
            }
            walk(&entry.path(), &rel, out)?;
        } else if SKIP_FILES.iter().any(|s| s.as_bytes() == name_b) {
            continue;
        } else if ft.is_symlink() {
            out.push((rel, Kind::Link));
        } else if ft.is_file() {
            out.push((rel, Kind::File));
        }
    }
    Ok(())
}

/// Does `expected` (from a spec, optionally `sha256:`-prefixed) name `actual`?
pub fn matches(expected: &str, actual: &str) -> bool {
    let e = expected.trim();
    let e = e.strip_prefix("sha256:").unwrap_or(e);
    e.eq_ignore_ascii_case(actual)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_value_and_skips() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::write(r.join("a.txt"), "a\n").unwrap();
        std::fs::create_dir_all(r.join("d/peers")).unwrap();
        std::fs::write(r.join("d/peers/x"), "ignored").unwrap();
        std::fs::create_dir_all(r.join(".git")).unwrap();
        std::fs::write(r.join(".git/HEAD"), "ignored").unwrap();
        std::fs::write(r.join("d/.git"), "gitdir: x").unwrap();
        std::fs::write(r.join(MANIFEST), "{}").unwrap();
        std::fs::write(r.join("d/b"), "").unwrap();
        let d = tree_digest(r).unwrap();
        // independent: sha256 over "a.txt\0" len(2) "a\n" "d/b\0" len(0)
        let mut h = Sha256::new();
        h.update(b"a.txt\0");
        h.update(2u64.to_be_bytes());
        h.update(b"a\n");
        h.update(b"d/b\0");
        h.update(0u64.to_be_bytes());
        assert_eq!(d, hex::encode(h.finalize()));
        assert!(matches(&format!("sha256:{d}"), &d));
        assert!(!matches("sha256:00", &d));
    }
}

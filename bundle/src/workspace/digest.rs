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
//!
//! The workspace was written by a sandboxed task, so the digest bounds what it costs:
//! files up to [`INLINE_LIMIT`] are read whole (in parallel), larger ones are streamed into
//! the hash, one at a time; a file larger than [`MAX_FILE`] (a 1 TiB sparse file) or a tree
//! deeper than [`MAX_DEPTH`] folders is an error naming it, never read or walked.

use crate::error::{Error, IoContext, Result};
use crate::workspace::manifest::{MANIFEST, SENTINEL};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Directory names skipped at any depth.
pub const SKIP_DIRS: &[&str] = &[".git", ".worktrees", "peers"];
/// File names skipped at any depth.
pub const SKIP_FILES: &[&str] = &[MANIFEST, SENTINEL, ".git"];

/// Largest file digested; larger ones make the digest an error.
pub const MAX_FILE: u64 = 4 << 30;
/// Files up to this size are read into memory whole (in parallel); larger ones streamed.
pub const INLINE_LIMIT: u64 = 1 << 20;
/// Deepest folder walked below the workspace.
pub const MAX_DEPTH: usize = 256;

/// What [`read_entry`] read: the bytes, or a regular file to stream (too large to hold).
enum Data {
    Bytes(Vec<u8>),
    Large,
}

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
    walk(root, &[], &mut files, 0)?;
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let _phase = crate::progress::phase(crate::progress::HASHING, files.len() as u64);
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let mut h = Sha256::new();
    const BATCH: usize = 512;
    for batch in files.chunks(BATCH) {
        let mut contents: Vec<Option<Result<Data>>> = (0..batch.len()).map(|_| None).collect();
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
            match data {
                Data::Bytes(data) => {
                    h.update((data.len() as u64).to_be_bytes());
                    h.update(&data);
                }
                Data::Large => stream(root, rel, &mut h)?,
            }
        }
        crate::progress::inc(crate::progress::HASHING, batch.len());
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

/// Open regular file `path` (no symlink followed, never blocking), with its size;
/// larger than [`MAX_FILE`] is an error.
fn open_file(path: &Path) -> Result<(std::fs::File, u64)> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .at(path)?;
    let md = f.metadata().at(path)?;
    if !md.is_file() {
        return Err(Error::other(format!(
            "{}: changed type while computing the tree digest",
            crate::escape::path(path)
        )));
    }
    if md.len() > MAX_FILE {
        return Err(Error::other(format!(
            "{}: larger than {} GiB; not read for the tree digest",
            crate::escape::path(path),
            MAX_FILE >> 30
        )));
    }
    Ok((f, md.len()))
}

fn read_entry(root: &Path, (rel, kind): &(Vec<u8>, Kind)) -> Result<Data> {
    let path = root.join(std::ffi::OsStr::from_bytes(rel));
    match kind {
        Kind::Link => {
            let t = std::fs::read_link(&path).at(&path)?;
            Ok(Data::Bytes(t.as_os_str().as_bytes().to_vec()))
        }
        Kind::File => {
            let (f, len) = open_file(&path)?;
            if len > INLINE_LIMIT {
                return Ok(Data::Large);
            }
            let mut buf = Vec::with_capacity(len as usize);
            f.take(INLINE_LIMIT + 1).read_to_end(&mut buf).at(&path)?;
            if buf.len() as u64 > INLINE_LIMIT {
                return Ok(Data::Large); // it grew: stream it
            }
            Ok(Data::Bytes(buf))
        }
    }
}

/// Hash the length and content of a large file, streaming: the length is the one
/// `fstat` gave, and a file that is then shorter or longer is an error.
fn stream(root: &Path, rel: &[u8], h: &mut Sha256) -> Result<()> {
    let path = root.join(std::ffi::OsStr::from_bytes(rel));
    let (f, len) = open_file(&path)?;
    h.update(len.to_be_bytes());
    let mut r = f.take(len + 1);
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0u64;
    loop {
        let n = r.read(&mut buf).at(&path)?;
        if n == 0 {
            break;
        }
        got += n as u64;
        if got > len {
            break;
        }
        h.update(&buf[..n]);
    }
    if got != len {
        return Err(Error::other(format!(
            "{}: changed size while computing the tree digest",
            crate::escape::path(&path)
        )));
    }
    Ok(())
}

fn walk(dir: &Path, prefix: &[u8], out: &mut Vec<(Vec<u8>, Kind)>, depth: usize) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(Error::other(format!(
            "{}: more than {MAX_DEPTH} folders deep; not walked for the tree digest",
            crate::escape::path(dir)
        )));
    }
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
            walk(&entry.path(), &rel, out, depth + 1)?;
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

    /// A file over the inline limit is streamed and digests the same as if read whole; a
    /// 1 TiB sparse file and a tree deeper than the cap are errors, at once.
    #[test]
    fn large_sparse_and_deep_trees_are_bounded() {
        let t = tempfile::tempdir_in("/dev/shm").unwrap();
        let r = t.path();
        let big: Vec<u8> = (0..(INLINE_LIMIT as usize * 3 + 7))
            .map(|i| i as u8)
            .collect();
        std::fs::write(r.join("big"), &big).unwrap();
        let mut h = Sha256::new();
        h.update(b"big\0");
        h.update((big.len() as u64).to_be_bytes());
        h.update(&big);
        assert_eq!(tree_digest(r).unwrap(), hex::encode(h.finalize()));

        let f = std::fs::File::create(r.join("sparse")).unwrap();
        f.set_len(1 << 40).unwrap();
        let started = std::time::Instant::now();
        let e = tree_digest(r).unwrap_err().to_string();
        assert!(e.contains("sparse") && e.contains("larger than"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        std::fs::remove_file(r.join("sparse")).unwrap();

        let mut deep = r.join("deep");
        for _ in 0..=MAX_DEPTH + 1 {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        let e = tree_digest(r).unwrap_err().to_string();
        assert!(e.contains("folders deep"), "{e}");
    }
}

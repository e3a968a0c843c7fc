//! Copying exactly the objects one commit reaches out of a repository's own object store
//! ([`OwnObjects`]) into a fresh one, as one pack ([`PackWriter`]), reusing the source's
//! pack entries as bytes the way git's pack reuse does.
//!
//! **The walk** follows the commit's history, trees and blobs (submodule entries are not
//! followed; the commits of a `shallow` list end it). It decodes only what names other
//! objects: commits, trees and tags. A blob is not inflated: a pack index or the loose
//! folder naming it is enough. An object the own store does not hold fails the copy,
//! naming it.
//!
//! **The copy** writes loose objects whole (they are decoded anyway), then each pack's
//! reachable entries in the order they lie in that pack, so a delta's base comes before
//! it:
//! - a whole entry is copied as it is (header and compressed data);
//! - an `OFS_DELTA` whose base entry was copied too is copied with only its base distance
//!   encoded anew for the new pack's layout;
//! - a `REF_DELTA` whose base object is reachable is copied as it is;
//! - a delta whose base is not copied (an object the commit does not reach, or one found
//!   in another pack) is resolved and written whole: copying it would make the base
//!   necessary, and the base must not be copied.
//!
//! **What is checked.** Every decoded object (commits, trees, tags, loose objects,
//! resolved deltas) is hashed against its id. A reused entry's bytes are checked against
//! the CRC-32 its pack index records (index version 2) and are not re-hashed: a pack whose
//! index lies about an entry can give the workspace a corrupt object, never an object from
//! elsewhere, because every reused byte is read from the repository's own pack files,
//! opened by [`OwnObjects`] through no-follow descriptors. The number of objects written
//! is checked against the walk's.

use crate::error::{Error, Result};
use crate::objects::own::{DeltaCache, OwnObjects, PackedAt};
use crate::objects::packwrite::PackWriter;
use gix::hash::ObjectId;
use gix::objs::Kind;
use gix::odb::pack::data::entry::Header;
use std::collections::HashSet;
use std::path::Path;

const HASH: gix::hash::Kind = gix::hash::Kind::Sha1;

/// What [`copy_reachable`] copied.
#[derive(Debug, Clone, Default)]
pub struct Copied {
    pub objects: usize,
    /// Commits of the `shallow` list the walk met (their parents were not needed).
    pub shallow: Vec<ObjectId>,
    /// Pack entries copied as bytes (whole objects and deltas).
    pub reused: usize,
    /// Of those, deltas.
    pub reused_deltas: usize,
    /// Deltas resolved and written whole because their base is not copied.
    pub resolved: usize,
}

/// A pack entry that cannot be reused as it lies.
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    #[error(
        "object {id}: its pack entry at offset {offset} is not where the pack index says ({why})"
    )]
    Bounds {
        id: ObjectId,
        offset: u64,
        why: &'static str,
    },
    #[error("object {id}: its pack entry at offset {offset} does not match the CRC-32 the pack index records")]
    Crc { id: ObjectId, offset: u64 },
    #[error("object {id}: its pack entry at offset {offset} cannot be read: {cause}")]
    Header {
        id: ObjectId,
        offset: u64,
        cause: String,
    },
    #[error("{written} objects were written where the walk found {walked}")]
    Count { written: usize, walked: usize },
}

impl From<EntryError> for Error {
    fn from(e: EntryError) -> Self {
        Error::other(e.to_string())
    }
}

/// Copy every object `commit` reaches (history, trees, blobs; not submodules; not past a
/// commit in `shallow`) from `src` into the object store `dst_objects` as one pack.
/// `what` names the repository in errors.
pub fn copy_reachable(
    src: &OwnObjects,
    commit: &ObjectId,
    shallow: &HashSet<ObjectId>,
    dst_objects: &Path,
    what: &str,
) -> Result<Copied> {
    copy_reachable_except(src, commit, shallow, dst_objects, what, &mut Nothing)
}

/// What the destination already has elsewhere (other packs), so the walk neither copies
/// it nor walks past it: everything an object reaches must be had along with it.
pub trait Have {
    /// Whether `id` (a commit when `commit`) and all it reaches are had already.
    fn has(&mut self, id: &ObjectId, commit: bool) -> bool;
}

/// Nothing is had: everything is copied.
pub struct Nothing;

impl Have for Nothing {
    fn has(&mut self, _: &ObjectId, _: bool) -> bool {
        false
    }
}

/// [`copy_reachable`] of what `have` does not have (the new pack may be empty: then no
/// pack is written and `objects` is 0).
pub fn copy_reachable_except(
    src: &OwnObjects,
    commit: &ObjectId,
    shallow: &HashSet<ObjectId>,
    dst_objects: &Path,
    what: &str,
    have: &mut dyn Have,
) -> Result<Copied> {
    let mut dst = PackWriter::new(dst_objects)?;
    let mut copied = Copied::default();
    let mut walk = walk(src, commit, shallow, &mut dst, what, &mut copied, have)?;
    copy_packed(src, &mut walk, &mut dst, &mut copied)
        .map_err(|e| Error::other(format!("{what}: {e}")))?;
    copied.objects = dst.finish()?;
    let walked = walk.seen.len() - walk.had.len();
    if copied.objects != walked {
        return Err(EntryError::Count {
            written: copied.objects,
            walked,
        }
        .into());
    }
    Ok(copied)
}

/// What the walk found: every reachable id met, where the packed ones lie, and which of
/// them the destination had already (not copied, not walked past).
struct Walk {
    seen: gix::hashtable::HashSet<ObjectId>,
    had: gix::hashtable::HashSet<ObjectId>,
    packed: Vec<(PackedAt, ObjectId)>,
    cache: DeltaCache,
}

/// Walk what `commit` reaches, writing loose objects to `dst` as they are met.
fn walk(
    src: &OwnObjects,
    commit: &ObjectId,
    shallow: &HashSet<ObjectId>,
    dst: &mut PackWriter,
    what: &str,
    copied: &mut Copied,
    have: &mut dyn Have,
) -> Result<Walk> {
    let mut w = Walk {
        seen: gix::hashtable::HashSet::default(),
        had: gix::hashtable::HashSet::default(),
        packed: Vec::new(),
        cache: DeltaCache::default(),
    };
    let mut todo: Vec<(ObjectId, Option<Kind>)> = vec![(*commit, Some(Kind::Commit))];
    let mut buf = Vec::new();
    while let Some((id, want)) = todo.pop() {
        if !w.seen.insert(id) {
            continue;
        }
        if have.has(&id, want == Some(Kind::Commit)) {
            w.had.insert(id);
            continue;
        }
        crate::progress::inc(crate::progress::READING, 1);
        let mismatch = |kind: Kind, w: Kind| {
            Error::other(format!(
                "{what}: object {id} is a {kind}, where commit {commit} needs a {w}"
            ))
        };
        let (kind, loose) = if let Some(at) = src.locate_packed(&id) {
            w.packed.push((at, id));
            if want == Some(Kind::Blob) {
                // not inflated; the type of a whole entry is checked, that of a delta is
                // not (a wrong one gives a broken object in the workspace, nothing more)
                let entry = src.pack(&at).pack.entry(at.offset).map_err(|e| {
                    Error::other(format!(
                        "{what}: {}",
                        EntryError::Header {
                            id,
                            offset: at.offset,
                            cause: e.to_string()
                        }
                    ))
                })?;
                match entry.header.as_kind() {
                    Some(k) if k != Kind::Blob => return Err(mismatch(k, Kind::Blob)),
                    _ => continue,
                }
            }
            (src.decode_packed(&id, &at, &mut buf, &mut w.cache)?, false)
        } else if let Some(kind) = src.read_loose(&id, &mut buf)? {
            (kind, true)
        } else {
            let why = if src.has_alternates() {
                "it has alternates, which are not followed"
            } else {
                "the repository is incomplete"
            };
            return Err(Error::other(format!(
                "{what}: commit {commit} needs object {id} that is not in the repository's own object store ({why})"
            )));
        };
        if let Some(w) = want.filter(|w| *w != kind) {
            return Err(mismatch(kind, w));
        }
        if loose {
            dst.add(id, kind, &buf)?;
        }
        let bad = |e: &dyn std::fmt::Display| {
            Error::other(format!(
                "{what}: object {id} ({kind}) cannot be parsed: {e}"
            ))
        };
        match kind {
            Kind::Commit => {
                let c = gix::objs::CommitRef::from_bytes(&buf, HASH).map_err(|e| bad(&e))?;
                todo.push((c.tree(), Some(Kind::Tree)));
                if shallow.contains(&id) {
                    copied.shallow.push(id);
                } else {
                    todo.extend(c.parents().map(|p| (p, Some(Kind::Commit))));
                }
            }
            Kind::Tree => {
                let t = gix::objs::TreeRef::from_bytes(&buf, HASH).map_err(|e| bad(&e))?;
                for e in &t.entries {
                    if e.mode.is_commit() {
                        continue; // a submodule: its commit lives in another repository
                    }
                    let k = if e.mode.is_tree() {
                        Kind::Tree
                    } else {
                        Kind::Blob
                    };
                    todo.push((e.oid.to_owned(), Some(k)));
                }
            }
            Kind::Tag => {
                let t = gix::objs::TagRef::from_bytes(&buf, HASH).map_err(|e| bad(&e))?;
                todo.push((t.target(), None));
            }
            Kind::Blob => {}
        }
    }
    Ok(w)
}

/// The length of a pack entry's type-and-size header at the start of `entry`.
fn type_size_len(entry: &[u8]) -> Option<usize> {
    entry.iter().position(|b| b & 0x80 == 0).map(|p| p + 1)
}

/// Copy the packed objects of `walk` into `dst`, each pack's in the order they lie there.
fn copy_packed(
    src: &OwnObjects,
    walk: &mut Walk,
    dst: &mut PackWriter,
    copied: &mut Copied,
) -> Result<()> {
    let mut packed = std::mem::take(&mut walk.packed);
    packed.sort_unstable();
    let mut buf = Vec::new();
    for group in packed.chunk_by(|a, b| a.0.pack == b.0.pack) {
        let b = src.pack(&group[0].0);
        // where each entry ends: where the next begins, or the trailer
        let ends = b.index.sorted_offsets();
        let pack_end = b.pack.pack_end() as u64;
        // for each entry of the group (sorted by source offset): its offset in the new pack
        let mut placed: Vec<u64> = Vec::with_capacity(group.len());
        for (at, id) in group {
            let bounds = |why| EntryError::Bounds {
                id: *id,
                offset: at.offset,
                why,
            };
            let end = match ends.binary_search(&at.offset) {
                Ok(i) => ends.get(i + 1).copied().unwrap_or(pack_end),
                Err(_) => return Err(bounds("not among the index's offsets").into()),
            };
            let bytes = b
                .pack
                .entry_slice(at.offset..end)
                .filter(|s| !s.is_empty() && end <= pack_end)
                .ok_or_else(|| bounds("outside the pack"))?;
            let crc = crc32fast::hash(bytes);
            if b.index.crc32_at_index(at.index).is_some_and(|c| c != crc) {
                return Err(EntryError::Crc {
                    id: *id,
                    offset: at.offset,
                }
                .into());
            }
            let entry = b.pack.entry(at.offset).map_err(|e| EntryError::Header {
                id: *id,
                offset: at.offset,
                cause: e.to_string(),
            })?;
            let header_len = entry.header_size();
            if header_len >= bytes.len() {
                return Err(bounds("shorter than its header").into());
            }
            let new_offset = dst.offset();
            let reuse = match entry.header {
                Header::Commit | Header::Tree | Header::Blob | Header::Tag => {
                    dst.add_raw(*id, bytes, crc)?;
                    true
                }
                Header::RefDelta { base_id }
                    if walk.seen.contains(&base_id) && !walk.had.contains(&base_id) =>
                {
                    dst.add_raw(*id, bytes, crc)?;
                    copied.reused_deltas += 1;
                    true
                }
                Header::OfsDelta { base_distance } => {
                    let base = entry
                        .checked_base_pack_offset(base_distance)
                        .and_then(|o| group.binary_search_by_key(&o, |(a, _)| a.offset).ok())
                        .and_then(|i| placed.get(i).copied());
                    let type_size = type_size_len(bytes).filter(|n| *n < header_len);
                    match (base, type_size) {
                        (Some(base), Some(n)) => {
                            dst.add_ofs_delta(*id, &bytes[..n], base, &bytes[header_len..])?;
                            copied.reused_deltas += 1;
                            true
                        }
                        _ => false,
                    }
                }
                Header::RefDelta { .. } => false,
            };
            if reuse {
                copied.reused += 1;
            } else {
                // the base is not copied: the object is written whole
                let kind = src.decode_packed(id, at, &mut buf, &mut walk.cache)?;
                dst.add(*id, kind, &buf)?;
                copied.resolved += 1;
            }
            placed.push(new_offset);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let o = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }

    /// A repository whose `f.txt` grows by 20 lines in each of `versions` commits (and a
    /// file per commit), packed with deltas (`OFS_DELTA` or `REF_DELTA`); its commits,
    /// oldest first.
    fn growing_repo(dir: &Path, versions: usize, ofs: bool) -> Vec<String> {
        std::fs::create_dir_all(dir).unwrap();
        git(dir, &["init", "-q", "-b", "main"]);
        let mut commits = Vec::new();
        for v in 0..versions {
            let text: String = (0..300 + 20 * v)
                .map(|i| format!("line {i} of a file that grows version by version\n"))
                .collect();
            std::fs::write(dir.join("f.txt"), text).unwrap();
            std::fs::write(dir.join(format!("u{v}.txt")), format!("only in {v}\n")).unwrap();
            git(dir, &["add", "-A"]);
            git(dir, &["commit", "-q", "-m", &format!("version {v}")]);
            commits.push(git(dir, &["rev-parse", "HEAD"]).trim().to_string());
        }
        let ofs = format!("repack.useDeltaBaseOffset={ofs}");
        git(
            dir,
            &[
                "-c",
                &ofs,
                "repack",
                "-q",
                "-adf",
                "--depth=50",
                "--window=50",
            ],
        );
        commits
    }

    /// `git verify-pack -v` of the one pack of `git_dir`: object id -> delta base id.
    fn delta_bases(git_dir: &Path) -> HashMap<String, String> {
        let packs = git_dir.join("objects/pack");
        let idx: Vec<PathBuf> = std::fs::read_dir(&packs)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "idx"))
            .collect();
        assert_eq!(idx.len(), 1, "{idx:?}");
        git(&packs, &["verify-pack", "-v", idx[0].to_str().unwrap()])
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 7).then(|| (f[0].to_string(), f[6].to_string()))
            })
            .collect()
    }

    fn sorted_lines(s: &str) -> Vec<String> {
        let mut v: Vec<String> = s
            .lines()
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect();
        v.sort();
        v
    }

    /// Copy `commit` of `src` into a fresh bare repository; check it with `git fsck
    /// --strict` and that it holds exactly what `commit` reaches.
    fn copy_and_check(src: &Path, commit: &str, dst: &Path) -> Copied {
        git(
            dst.parent().unwrap(),
            &["init", "-q", "--bare", dst.to_str().unwrap()],
        );
        let own = OwnObjects::open(&src.join(".git/objects"), false).unwrap();
        let id = ObjectId::from_hex(commit.as_bytes()).unwrap();
        let copied =
            copy_reachable(&own, &id, &HashSet::new(), &dst.join("objects"), "test").unwrap();
        git(dst, &["update-ref", "refs/heads/main", commit]);
        git(dst, &["fsck", "--strict", "--full", "--no-dangling"]);
        let want = sorted_lines(&git(src, &["rev-list", "--objects", commit]));
        let have = sorted_lines(&git(
            dst,
            &[
                "cat-file",
                "--batch-all-objects",
                "--batch-check=%(objectname)",
            ],
        ));
        assert_eq!(have, want, "the copy holds exactly what the commit reaches");
        assert_eq!(copied.objects, want.len());
        copied
    }

    #[test]
    fn reused_delta_chains_round_trip() {
        for ofs in [true, false] {
            let t = tempfile::Builder::new().tempdir_in("/dev/shm").unwrap();
            let src = t.path().join("src");
            let commits = growing_repo(&src, 8, ofs);
            let head = commits.last().unwrap();
            assert!(
                delta_bases(&src.join(".git")).len() >= 5,
                "the fixture has deltas"
            );
            let dst = t.path().join("dst.git");
            let c = copy_and_check(&src, head, &dst);
            assert_eq!(c.resolved, 0, "every base is reachable ({ofs})");
            assert!(c.reused_deltas >= 5, "deltas are reused ({ofs}): {c:?}");
            assert_eq!(c.reused, c.objects);
            assert_eq!(
                delta_bases(&dst).len(),
                c.reused_deltas,
                "the copy keeps the deltas ({ofs})"
            );
        }
    }

    #[test]
    fn shared_delta_chains_decode_to_the_objects() {
        // every version of f.txt is a delta on another: decoded through one store, newest
        // first and then oldest first, each is hashed against its id and is what git reads
        let t = tempfile::Builder::new().tempdir_in("/dev/shm").unwrap();
        let src = t.path().join("src");
        let commits = growing_repo(&src, 12, true);
        assert!(delta_bases(&src.join(".git")).len() >= 10);
        let blobs: Vec<String> = commits
            .iter()
            .map(|c| {
                git(&src, &["rev-parse", &format!("{c}:f.txt")])
                    .trim()
                    .to_string()
            })
            .collect();
        let own = OwnObjects::open(&src.join(".git/objects"), false).unwrap();
        let find = crate::objects::own::Finder {
            objects: &own,
            verify: true,
        };
        let mut buf = Vec::new();
        for b in blobs.iter().rev().chain(blobs.iter()) {
            use gix::objs::Find as _;
            let id = ObjectId::from_hex(b.as_bytes()).unwrap();
            let d = find.try_find(&id, &mut buf).unwrap().unwrap();
            assert_eq!(d.kind, Kind::Blob);
            assert_eq!(
                d.data,
                git(&src, &["cat-file", "blob", b]).as_bytes(),
                "{b}"
            );
        }
    }

    #[test]
    fn a_delta_on_an_unreachable_base_is_resolved() {
        for ofs in [true, false] {
            a_delta_on_an_unreachable_base_is_resolved_with(ofs);
        }
    }

    fn a_delta_on_an_unreachable_base_is_resolved_with(ofs: bool) {
        let t = tempfile::Builder::new().tempdir_in("/dev/shm").unwrap();
        let src = t.path().join("src");
        let commits = growing_repo(&src, 8, ofs);
        // the 4th version is the copied commit; the later ones are not reachable from it
        let commit = &commits[3];
        let blob = |c: &str| {
            git(&src, &["rev-parse", &format!("{c}:f.txt")])
                .trim()
                .to_string()
        };
        let bases = delta_bases(&src.join(".git"));
        let base = bases
            .get(&blob(commit))
            .expect("the copied commit's f.txt is a delta");
        let later: Vec<String> = commits[4..].iter().map(|c| blob(c)).collect();
        assert!(
            later.contains(base),
            "its base is a later version, which the commit does not reach"
        );
        let dst = t.path().join("dst.git");
        let c = copy_and_check(&src, commit, &dst);
        eprintln!("{ofs}: {c:?}");
        assert!(c.resolved >= 1, "{c:?}");
        assert!(c.reused_deltas >= 1, "older versions stay deltas: {c:?}");
        for b in later.iter().chain([base]) {
            let o = Command::new("git")
                .arg("-C")
                .arg(&dst)
                .args(["cat-file", "-e", b])
                .output()
                .unwrap();
            assert!(!o.status.success(), "{b} must not be in the copy");
        }
    }

    #[test]
    fn a_pack_entry_not_matching_its_crc_is_refused() {
        let t = tempfile::Builder::new().tempdir_in("/dev/shm").unwrap();
        let src = t.path().join("src");
        let commits = growing_repo(&src, 3, true);
        let head = commits.last().unwrap();
        let blob = git(&src, &["rev-parse", &format!("{head}:u2.txt")]);
        let packs = src.join(".git/objects/pack");
        let pack = std::fs::read_dir(&packs)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "pack"))
            .unwrap();
        let idx = pack.with_extension("idx");
        let line = git(&packs, &["verify-pack", "-v", idx.to_str().unwrap()])
            .lines()
            .find(|l| l.starts_with(blob.trim()))
            .unwrap()
            .to_string();
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(2)
            .take(3)
            .map(|n| n.parse().unwrap())
            .collect();
        // a byte in the middle of the blob's compressed data
        let at = (f[2] + f[1] / 2) as usize;
        let mut bytes = std::fs::read(&pack).unwrap();
        bytes[at] ^= 0x55;
        std::fs::remove_file(&pack).unwrap();
        std::fs::write(&pack, bytes).unwrap();
        let dst = t.path().join("dst.git");
        git(t.path(), &["init", "-q", "--bare", dst.to_str().unwrap()]);
        let own = OwnObjects::open(&src.join(".git/objects"), false).unwrap();
        let id = ObjectId::from_hex(head.as_bytes()).unwrap();
        let e = copy_reachable(&own, &id, &HashSet::new(), &dst.join("objects"), "test")
            .unwrap_err()
            .to_string();
        assert!(e.contains(blob.trim()) && e.contains("CRC-32"), "{e}");
    }
}

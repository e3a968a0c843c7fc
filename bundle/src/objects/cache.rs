//! A per-source cache of verified objects, outside every sandbox: what makes a second
//! open of a source cost little more than its checkout.
//!
//! **What it holds.** For one source (an object store: the operator's checkout, or a
//! pinned repository's cache entry), under `Layout::object_cache_dir()/<key>/` (`key`
//! names the store's canonical path and inode): `packs/<sum>.<token>.{pack,idx}`, packs
//! written once by [`crate::objects::reachcopy`] from the source's own objects (so checked as that
//! copy checks them: every decoded object hashed, every reused entry against its CRC) and
//! then never written again (mode 0444), and `records/<commit>.json`, one per commit
//! opened: the packs whose union is *exactly* what the commit reaches, their stamps, the
//! `shallow` commits and the tree digest of the commit's checkout when it was computed
//! from its objects.
//!
//! **A later commit** of the same source walks its history only down to commits that have
//! a record (and objects those records' packs hold): a new pack holds only the objects
//! not had, and the new record lists the older packs plus the new one. A record's packs
//! are only ever those of commits the new commit reaches, so a workspace never gets an
//! object its commit does not reach. At most [`MAX_PACKS`] packs make a record: a walk
//! that would need more goes on past that record instead.
//!
//! **Trust.** The cache lies under the capsule root, which every sandbox has hidden. A
//! pack is used only when the file opened (no symlink followed) is a regular, read-only
//! file whose device, inode, size, mtime and ctime are what its record says (a write, a
//! `chmod`, a truncate or a replacement changes the ctime or the inode; only root can set
//! a ctime back) and whose trailer is its checksum. Anything else makes the record
//! untrusted: it and the offending files are removed, and the objects are read from the
//! source again. Someone who can rewrite the records as the operator can rewrite the
//! operator's files as well; that is not what this defends against.
//!
//! **Nothing is shared with a workspace.** Packs reach a workspace as reflinks (`FICLONE`,
//! copy-on-write: a write there changes only that copy) where the filesystem has them,
//! else as copies; never as hard links, which a sandbox could `chmod` and write (Landlock
//! does not govern `chmod`, and a weaker isolation has no read-only mounts), so one
//! capsule would reach into the cache and every later capsule.

use crate::error::{Error, IoContext, Result};
use crate::objects::own::OwnObjects;
use crate::objects::reachcopy::Have;
use gix::hash::ObjectId;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

const VERSION: u32 = 1;
/// Most packs one record lists.
pub const MAX_PACKS: usize = 8;
/// Largest record read.
const MAX_RECORD: u64 = 1 << 20;
/// `_IOW(0x94, 9, int)`: clone a whole file (reflink).
const FICLONE: libc::c_ulong = 0x4004_9409;

/// What identifies a file that must not have changed since it was recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

impl Stamp {
    fn of(st: &libc::stat) -> Stamp {
        Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime_ns: crate::fsat::mtime_ns(st) as i64,
            ctime_ns: crate::fsat::ctime_ns(st) as i64,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct PackRef {
    /// `<sum>.<token>`: the files are `packs/<file>.pack` and `.idx`.
    file: String,
    /// The pack's checksum (hex), its name in a workspace.
    sum: String,
    pack: Stamp,
    idx: Stamp,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    version: u32,
    commit: String,
    packs: Vec<PackRef>,
    shallow: Vec<String>,
    tree_digest: Option<String>,
}

/// A pack of the cache, open, its stamps checked.
struct OpenPack {
    r: PackRef,
    pack: File,
    idx: File,
}

/// The objects of one commit, from the cache.
pub struct Objects {
    packs: Vec<OpenPack>,
    /// The `shallow` commits of the commit's history.
    pub shallow: Vec<ObjectId>,
    /// The tree digest of the commit's checkout, when computed from its objects before.
    pub tree_digest: Option<String>,
    /// Whether the commit had a record (nothing was read from the source).
    pub hit: bool,
    /// Objects read from the source and added to the cache.
    pub added: usize,
    /// Making the new pack durable, then recording it (see [`Objects::settle`]).
    pending: Option<std::thread::JoinHandle<Result<()>>>,
}

/// The cache of one source.
pub struct SourceCache {
    dir: PathBuf,
    packs_fd: OwnedFd,
    records_fd: OwnedFd,
    tmp: PathBuf,
    records: HashSet<ObjectId>,
}

fn fd_path(fd: &impl AsRawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn mkdir_private(p: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(p, e)),
    }
}

fn valid_sum(s: &str) -> bool {
    s.len() == 40
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn valid_file(r: &PackRef) -> bool {
    valid_name(&r.file, &r.sum)
}

fn valid_name(file: &str, want_sum: &str) -> bool {
    match file.split_once('.') {
        Some((sum, token)) => {
            sum == want_sum
                && valid_sum(sum)
                && !token.is_empty()
                && token.len() <= 32
                && token.bytes().all(|b| b.is_ascii_alphanumeric())
        }
        None => false,
    }
}

impl SourceCache {
    /// The cache of the object store `objects` (an existing folder) under `cache_root`.
    pub fn open(cache_root: &Path, objects: &Path) -> Result<SourceCache> {
        use sha2::Digest as _;
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::MetadataExt;
        let canon = std::fs::canonicalize(objects).at(objects)?;
        let md = std::fs::metadata(&canon).at(&canon)?;
        let mut h = sha2::Sha256::new();
        h.update(canon.as_os_str().as_bytes());
        h.update([0]);
        h.update(md.dev().to_be_bytes());
        h.update(md.ino().to_be_bytes());
        let key = hex::encode(&h.finalize()[..16]);
        if let Some(parent) = cache_root.parent() {
            std::fs::create_dir_all(parent).at(parent)?;
        }
        mkdir_private(cache_root)?;
        let dir = cache_root.join(key);
        mkdir_private(&dir)?;
        for sub in ["packs", "records", "tmp"] {
            mkdir_private(&dir.join(sub))?;
        }
        let dirfd = crate::fsat::open_path(
            &dir,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0,
        )
        .at(&dir)?;
        let packs_fd = crate::fsat::open_dir_at(&dirfd, OsStr::new("packs")).at(&dir)?;
        let records_fd = crate::fsat::open_dir_at(&dirfd, OsStr::new("records")).at(&dir)?;
        let mut records = HashSet::new();
        for n in crate::fsat::list_unsorted(&records_fd).at(&dir)? {
            if let Some(id) = n
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .filter(|h| valid_sum(h))
                .and_then(|h| ObjectId::from_hex(h.as_bytes()).ok())
            {
                records.insert(id);
            }
        }
        Ok(SourceCache {
            tmp: dir.join("tmp"),
            dir,
            packs_fd,
            records_fd,
            records,
        })
    }

    /// Where this source's cache lies.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The objects `commit` reaches, when it has a trusted record (nothing is read from
    /// the source).
    pub fn cached(&self, commit: &ObjectId) -> Option<Objects> {
        if !self.records.contains(commit) {
            return None;
        }
        let (rec, packs) = self.load(commit)?;
        Some(Objects {
            packs,
            shallow: parse_ids(&rec.shallow),
            tree_digest: rec.tree_digest.clone(),
            hit: true,
            added: 0,
            pending: None,
        })
    }

    /// The objects `commit` reaches, read from the source `own` down to what the cache
    /// has, and recorded.
    pub fn fill(
        &mut self,
        commit: &ObjectId,
        own: &OwnObjects,
        shallow: &HashSet<ObjectId>,
        what: &str,
    ) -> Result<Objects> {
        let _phase = crate::progress::phase(crate::progress::READING, 0);
        let fill = tempfile::Builder::new()
            .prefix("fill-")
            .tempdir_in(&self.tmp)
            .at(&self.tmp)?;
        let objects = fill.path().join("objects");
        let mut have = CacheHave {
            cache: self,
            packs: Vec::new(),
            indexes: Vec::new(),
            shallow: HashSet::new(),
        };
        let copied = crate::objects::reachcopy::copy_reachable_except(
            own, commit, shallow, &objects, what, &mut have,
        )?;
        let CacheHave {
            mut packs,
            shallow: mut had_shallow,
            ..
        } = have;
        tracing::debug!(
            "{what}: {} objects of {commit} read from the source ({} reused as bytes, {} deltas resolved), {} packs of the cache reused",
            copied.objects,
            copied.reused,
            copied.resolved,
            packs.len()
        );
        if copied.objects > 0 {
            let token = fill
                .path()
                .file_name()
                .and_then(|n| n.to_str())
                .map(|n| n.trim_start_matches("fill-"))
                .unwrap_or("")
                .chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .collect::<String>();
            packs.push(self.adopt(&objects.join("pack"), &token)?);
        }
        had_shallow.extend(copied.shallow.iter().copied());
        let mut shallow_v: Vec<ObjectId> = had_shallow.into_iter().collect();
        shallow_v.sort();
        let rec = Record {
            version: VERSION,
            commit: commit.to_string(),
            packs: packs.iter().map(|p| p.r.clone()).collect(),
            shallow: shallow_v.iter().map(|c| c.to_string()).collect(),
            tree_digest: None,
        };
        // the new pack is made durable before its record names it, while the workspace
        // is checked out
        let new_files: Vec<File> = match (copied.objects > 0, packs.last()) {
            (true, Some(p)) => vec![
                p.idx.try_clone().at(&self.dir)?,
                p.pack.try_clone().at(&self.dir)?,
            ],
            _ => Vec::new(),
        };
        let records_dir = self.dir.join("records");
        let packs_dir = self.dir.join("packs");
        let pending = std::thread::Builder::new()
            .name("objcache-sync".into())
            .spawn(move || -> Result<()> {
                for f in &new_files {
                    f.sync_all().at(&packs_dir)?;
                }
                if !new_files.is_empty() {
                    File::open(&packs_dir)
                        .and_then(|d| d.sync_all())
                        .at(&packs_dir)?;
                }
                write_record(&records_dir, &rec)
            })
            .at(&self.dir)?;
        self.records.insert(*commit);
        Ok(Objects {
            pending: Some(pending),
            packs,
            shallow: shallow_v,
            tree_digest: None,
            hit: false,
            added: copied.objects,
        })
    }

    /// Record the tree digest of `commit`'s checkout, computed from its objects.
    pub fn set_tree_digest(&self, commit: &ObjectId, digest: &str) -> Result<()> {
        let Some(mut rec) = self.read_record(commit) else {
            return Ok(());
        };
        rec.tree_digest = Some(digest.to_string());
        self.write_record(&rec)
    }

    /// Move the one pack a fill wrote in `pack_dir` into `packs/`, read-only, durably;
    /// opened again from there and stamped.
    fn adopt(&self, pack_dir: &Path, token: &str) -> Result<OpenPack> {
        let mut sum = None;
        for e in std::fs::read_dir(pack_dir).at(pack_dir)?.flatten() {
            let n = e.file_name();
            if let Some(s) = n
                .to_str()
                .and_then(|n| n.strip_prefix("pack-"))
                .and_then(|n| n.strip_suffix(".pack"))
            {
                sum = Some(s.to_string());
            }
        }
        let sum = sum.ok_or_else(|| {
            Error::other(format!("{}: the new pack is missing", pack_dir.display()))
        })?;
        let file = format!("{sum}.{token}");
        if !valid_name(&file, &sum) {
            return Err(Error::other(format!("{file}: not a cache pack name")));
        }
        // the index first: a pack without its index is never looked at
        for ext in ["idx", "pack"] {
            let from = pack_dir.join(format!("pack-{sum}.{ext}"));
            let f = File::open(&from).at(&from)?;
            crate::fsat::fchmod(f.as_raw_fd(), 0o444).at(&from)?;
            let to = self.dir.join("packs").join(format!("{file}.{ext}"));
            std::fs::rename(&from, &to).at(&to)?;
        }
        let pack = self.open_pack_file(&file, "pack")?;
        let idx = self.open_pack_file(&file, "idx")?;
        let pst = crate::fsat::fstat(pack.as_raw_fd()).at(&self.dir)?;
        let ist = crate::fsat::fstat(idx.as_raw_fd()).at(&self.dir)?;
        Ok(OpenPack {
            r: PackRef {
                file,
                sum,
                pack: Stamp::of(&pst),
                idx: Stamp::of(&ist),
            },
            pack,
            idx,
        })
    }

    fn open_pack_file(&self, file: &str, ext: &str) -> Result<File> {
        let name = format!("{file}.{ext}");
        crate::fsat::open_at(&self.packs_fd, OsStr::new(&name), libc::O_RDONLY)
            .map(File::from)
            .map_err(|e| Error::other(format!("{}/packs/{name}: {e}", self.dir.display())))
    }

    fn read_record(&self, commit: &ObjectId) -> Option<Record> {
        use std::io::Read as _;
        let name = format!("{commit}.json");
        let f = crate::fsat::open_at(&self.records_fd, OsStr::new(&name), libc::O_RDONLY).ok()?;
        let st = crate::fsat::fstat(f.as_raw_fd()).ok()?;
        if !crate::fsat::is_type(&st, libc::S_IFREG) || st.st_size as u64 > MAX_RECORD {
            return None;
        }
        let mut data = Vec::new();
        File::from(f).take(MAX_RECORD).read_to_end(&mut data).ok()?;
        serde_json::from_slice(&data).ok()
    }

    fn write_record(&self, rec: &Record) -> Result<()> {
        write_record(&self.dir.join("records"), rec)
    }

    /// The record of `commit` and its packs, if it is trusted; an untrusted one is
    /// removed (with its offending files), saying why.
    fn load(&self, commit: &ObjectId) -> Option<(Record, Vec<OpenPack>)> {
        match self.check(commit) {
            Ok(v) => Some(v),
            Err((why, bad)) => {
                tracing::warn!(
                    "object cache {}: the record of {commit} is not trusted ({why}); its objects are read from the source again",
                    self.dir.display()
                );
                let name = format!("{commit}.json");
                let _ = crate::rmtree::remove_at(&self.records_fd, OsStr::new(&name));
                for f in bad {
                    let _ = crate::rmtree::remove_at(&self.packs_fd, OsStr::new(&f));
                }
                None
            }
        }
    }

    fn check(
        &self,
        commit: &ObjectId,
    ) -> std::result::Result<(Record, Vec<OpenPack>), (String, Vec<String>)> {
        let rec = self
            .read_record(commit)
            .ok_or_else(|| ("unreadable".to_string(), Vec::new()))?;
        if rec.version != VERSION || rec.commit != commit.to_string() {
            return Err(("not a record of this commit".into(), Vec::new()));
        }
        if rec.packs.len() > MAX_PACKS || !rec.shallow.iter().all(|s| valid_sum(s)) {
            return Err(("malformed".into(), Vec::new()));
        }
        if rec
            .tree_digest
            .as_ref()
            .is_some_and(|d| d.len() != 64 || !d.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(("malformed tree digest".into(), Vec::new()));
        }
        let mut packs = Vec::new();
        for r in &rec.packs {
            if !valid_file(r) {
                return Err((format!("bad pack name {:?}", r.file), Vec::new()));
            }
            let open =
                |ext: &str, want: &Stamp| -> std::result::Result<File, (String, Vec<String>)> {
                    let name = format!("{}.{ext}", r.file);
                    let bad = |why: String| (format!("{name}: {why}"), vec![name.clone()]);
                    let f = self
                        .open_pack_file(&r.file, ext)
                        .map_err(|e| bad(e.to_string()))?;
                    let st = crate::fsat::fstat(f.as_raw_fd()).map_err(|e| bad(e.to_string()))?;
                    if !crate::fsat::is_type(&st, libc::S_IFREG) {
                        return Err(bad("not a regular file".into()));
                    }
                    if st.st_mode & 0o222 != 0 {
                        return Err(bad("writable".into()));
                    }
                    if Stamp::of(&st) != *want {
                        return Err(bad("changed since it was written".into()));
                    }
                    Ok(f)
                };
            let pack = open("pack", &r.pack)?;
            let idx = open("idx", &r.idx)?;
            // the pack's trailer is its checksum, its name
            let mut trailer = [0u8; 20];
            let ok = r.pack.size >= 32
                && std::os::unix::fs::FileExt::read_exact_at(&pack, &mut trailer, r.pack.size - 20)
                    .is_ok()
                && hex::encode(trailer) == r.sum;
            if !ok {
                return Err((
                    format!("{}.pack: its trailer is not its checksum", r.file),
                    vec![format!("{}.pack", r.file), format!("{}.idx", r.file)],
                ));
            }
            packs.push(OpenPack {
                r: r.clone(),
                pack,
                idx,
            });
        }
        Ok((rec, packs))
    }
}

/// Write `rec` into the records folder `dir`, atomically.
fn write_record(dir: &Path, rec: &Record) -> Result<()> {
    let data = serde_json::to_vec_pretty(rec).map_err(|e| Error::other(format!("record: {e}")))?;
    let tmp = tempfile::Builder::new()
        .prefix(".rec-")
        .tempfile_in(dir)
        .at(dir)?;
    std::fs::write(tmp.path(), data).at(tmp.path())?;
    let to = dir.join(format!("{}.json", rec.commit));
    tmp.persist(&to).map_err(|e| Error::io(&to, e.error))?;
    Ok(())
}

fn parse_ids(v: &[String]) -> Vec<ObjectId> {
    v.iter()
        .filter_map(|s| ObjectId::from_hex(s.as_bytes()).ok())
        .collect()
}

/// The walk's view of what the cache has: the packs of the records of commits it met.
struct CacheHave<'a> {
    cache: &'a SourceCache,
    packs: Vec<OpenPack>,
    indexes: Vec<gix::odb::pack::index::File>,
    shallow: HashSet<ObjectId>,
}

impl Have for CacheHave<'_> {
    fn has(&mut self, id: &ObjectId, commit: bool) -> bool {
        if self.indexes.iter().any(|i| i.lookup(id).is_some()) {
            return true;
        }
        if !commit || !self.cache.records.contains(id) {
            return false;
        }
        let Some((rec, packs)) = self.cache.load(id) else {
            return false;
        };
        let new: Vec<OpenPack> = packs
            .into_iter()
            .filter(|p| !self.packs.iter().any(|q| q.r.file == p.r.file))
            .collect();
        // one more pack for the new objects
        if self.packs.len() + new.len() + 1 > MAX_PACKS {
            return false;
        }
        let mut indexes = Vec::new();
        for p in &new {
            match gix::odb::pack::index::File::at(fd_path(&p.idx), gix::hash::Kind::Sha1) {
                Ok(i) => indexes.push(i),
                Err(e) => {
                    tracing::warn!("object cache: {}.idx: {e}; not used", p.r.file);
                    return false;
                }
            }
        }
        self.indexes.extend(indexes);
        self.packs.extend(new);
        self.shallow.extend(parse_ids(&rec.shallow));
        true
    }
}

impl Objects {
    /// Wait until a new pack is durable and recorded. A failure there only costs the next
    /// open a walk, so it is not an error of this open: it is returned for the caller to
    /// log (or not, when the open failed anyway and said why).
    pub fn settle(&mut self) -> std::result::Result<(), String> {
        match self.pending.take().map(|t| t.join()) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(format!("object cache: not recorded: {e}")),
            Some(Err(_)) => Err("object cache: not recorded (the recording thread failed)".into()),
        }
    }

    /// The packs as an object store (for a checkout that reads them while they are
    /// copied); `dir` names it in errors.
    pub fn store(&self, dir: &Path) -> Result<OwnObjects> {
        let mut fds = Vec::new();
        for p in &self.packs {
            let idx = p.idx.try_clone().at(dir)?;
            let pack = p.pack.try_clone().at(dir)?;
            fds.push((OwnedFd::from(idx), OwnedFd::from(pack)));
        }
        OwnObjects::from_packs(dir, fds)
    }

    /// Copy (reflink where the filesystem can) the packs into `pack_dir`, a fresh
    /// repository's `objects/pack`, as `pack-<sum>.pack`/`.idx`, read-only.
    pub fn copy_into(&self, pack_dir: &Path) -> Result<()> {
        let _phase = crate::progress::phase(crate::progress::COPYING, self.packs.len() as u64);
        std::fs::create_dir_all(pack_dir).at(pack_dir)?;
        let mut done: HashSet<&str> = HashSet::new();
        for p in &self.packs {
            if !done.insert(&p.r.sum) {
                continue;
            }
            for (src, ext, want) in [(&p.idx, "idx", &p.r.idx), (&p.pack, "pack", &p.r.pack)] {
                let to = pack_dir.join(format!("pack-{}.{ext}", p.r.sum));
                let dst = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .custom_flags_nofollow()
                    .open(&to)
                    .at(&to)?;
                clone_or_copy(src, &dst).at(&to)?;
                // what was copied is what was checked
                let st = crate::fsat::fstat(src.as_raw_fd()).at(&to)?;
                if Stamp::of(&st) != *want {
                    return Err(Error::other(format!(
                        "{}: the cached pack changed while it was copied; open again",
                        to.display()
                    )));
                }
            }
            crate::progress::inc(crate::progress::COPYING, 1);
        }
        Ok(())
    }
}

trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for std::fs::OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o444)
    }
}

/// `dst` (empty) becomes a copy of `src`: a reflink where the filesystem has them, else
/// the bytes (`copy_file_range` where it can).
fn clone_or_copy(src: &File, dst: &File) -> std::io::Result<()> {
    // SAFETY: two valid descriptors
    if unsafe { libc::ioctl(dst.as_raw_fd(), FICLONE as _, src.as_raw_fd()) } == 0 {
        return Ok(());
    }
    let mut s = src.try_clone()?;
    use std::io::Seek as _;
    s.seek(std::io::SeekFrom::Start(0))?;
    let mut d = dst;
    std::io::copy(&mut s, &mut d)?;
    Ok(())
}

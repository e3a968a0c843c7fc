//! A repository's *own* object store, read without ever leaving it.
//!
//! A repository someone else prepared (a spec's pinned `repo`) or the operator's checkout
//! (`--source`) may borrow objects from elsewhere: `objects/info/alternates` and
//! `objects/info/http-alternates` name other object stores (a password store, another
//! capsule's repository) that the operator can read. [`OwnObjects`] reads only the loose
//! objects and packs under the given `objects` folder and never looks at `info/`; every
//! file is opened through directory descriptors with `O_NOFOLLOW`, so a symlinked fan-out
//! folder, pack or loose object is refused rather than followed. Every object it decodes
//! is checked against its id; the raw bytes of pack entries ([`OwnObjects::pack`]) come
//! only from those pack files.
//!
//! [`crate::objects::reachcopy`] copies what one commit reaches out of it.

use crate::error::{Error, Result};
use gix::hash::ObjectId;
use gix::objs::Kind;
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

const HASH: gix::hash::Kind = gix::hash::Kind::Sha1;

/// zlib cannot expand more than about 1032:1; a loose object's header claiming more than
/// that over its file size is corrupt (and must not make us allocate it).
const MAX_INFLATE_RATIO: usize = 1100;

/// Decoded pack entries kept to resolve delta chains (bytes).
const CACHE_BYTES: usize = 64 << 20;

/// The loose objects and packs of one `objects` folder, alternates never followed.
pub struct OwnObjects {
    /// For messages.
    dir: PathBuf,
    dirfd: OwnedFd,
    /// Whether `info/alternates` or `info/http-alternates` exists (for messages only).
    has_alternates: bool,
    packs: Vec<gix::odb::pack::Bundle>,
    /// Which fan-out folders (`objects/00` .. `objects/ff`) exist: a missing one is not
    /// asked for each object.
    fanout: [bool; 256],
    /// Descriptors the packs were mapped through (kept open: their `/proc/self/fd` paths
    /// name the packs).
    _pack_fds: Vec<OwnedFd>,
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC)`.
fn open_at(dir: &OwnedFd, name: &str, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    crate::fsat::open_at(dir, std::ffi::OsStr::new(name), flags)
}

/// A path naming the open file `fd` (for APIs that take paths).
fn fd_path(fd: &OwnedFd) -> PathBuf {
    #[cfg(target_os = "linux")]
    let base = "/proc/self/fd";
    #[cfg(not(target_os = "linux"))]
    let base = "/dev/fd";
    PathBuf::from(format!("{base}/{}", fd.as_raw_fd()))
}

fn is_regular(fd: &OwnedFd) -> bool {
    // SAFETY: fstat on a valid descriptor into a zeroed struct
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    unsafe {
        libc::fstat(fd.as_raw_fd(), &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFREG
    }
}

fn symlink_refused(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR))
}

impl OwnObjects {
    /// Open the object store `objects` (of a repository's git directory). With
    /// `follow_top` the folder itself may be reached through a symlink (the operator's own
    /// checkout); everything below it never is.
    pub fn open(objects: &Path, follow_top: bool) -> Result<Self> {
        if objects.as_os_str().as_encoded_bytes().contains(&0) {
            return Err(Error::other(format!(
                "{}: bad path",
                crate::escape::path(objects)
            )));
        }
        let nofollow = if follow_top { 0 } else { libc::O_NOFOLLOW };
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | nofollow;
        let dirfd = crate::fsat::open_path(objects, flags, 0).map_err(|e| {
            Error::other(if symlink_refused(&e) {
                format!(
                    "{}: is a symlink or not a folder; an object store outside the repository is not followed",
                    crate::escape::path(objects)
                )
            } else {
                format!("{}: {e}", crate::escape::path(objects))
            })
        })?;
        let has_alternates = ["info/alternates", "info/http-alternates"]
            .iter()
            .any(|f| std::fs::symlink_metadata(objects.join(f)).is_ok());
        let mut me = OwnObjects {
            dir: objects.to_path_buf(),
            dirfd,
            has_alternates,
            packs: Vec::new(),
            fanout: [false; 256],
            _pack_fds: Vec::new(),
        };
        for e in std::fs::read_dir(fd_path(&me.dirfd))
            .map_err(|e| Error::other(format!("{}: {e}", crate::escape::path(objects))))?
            .flatten()
        {
            let n = e.file_name();
            if let Some(b) = n
                .to_str()
                .filter(|n| n.len() == 2)
                .and_then(|n| u8::from_str_radix(n, 16).ok())
            {
                me.fanout[b as usize] = true;
            }
        }
        me.open_packs()?;
        Ok(me)
    }

    fn open_packs(&mut self) -> Result<()> {
        let packdir = match open_at(&self.dirfd, "pack", libc::O_RDONLY | libc::O_DIRECTORY) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if symlink_refused(&e) => {
                return Err(Error::other(format!(
                    "{}/pack: is a symlink or not a folder; not followed",
                    crate::escape::path(&self.dir)
                )))
            }
            Err(e) => {
                return Err(Error::other(format!(
                    "{}/pack: {e}",
                    crate::escape::path(&self.dir)
                )))
            }
        };
        let mut names: Vec<String> = std::fs::read_dir(fd_path(&packdir))
            .map_err(|e| Error::other(format!("{}/pack: {e}", crate::escape::path(&self.dir))))?
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with("pack-") && n.ends_with(".idx"))
            .collect();
        names.sort();
        for idx_name in names {
            let pack_name = format!("{}.pack", idx_name.trim_end_matches(".idx"));
            let open = |n: &str| -> Result<Option<OwnedFd>> {
                match open_at(&packdir, n, libc::O_RDONLY) {
                    Ok(fd) if is_regular(&fd) => Ok(Some(fd)),
                    Ok(_) => Ok(None),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) if symlink_refused(&e) => Err(Error::other(format!(
                        "{}/pack/{n}: is a symlink; not followed",
                        crate::escape::path(&self.dir)
                    ))),
                    Err(e) => Err(Error::other(format!(
                        "{}/pack/{n}: {e}",
                        crate::escape::path(&self.dir)
                    ))),
                }
            };
            let (Some(ifd), Some(pfd)) = (open(&idx_name)?, open(&pack_name)?) else {
                continue;
            };
            let bad = |e: &dyn std::fmt::Display| {
                Error::other(format!(
                    "{}/pack/{idx_name}: unreadable pack ({e})",
                    crate::escape::path(&self.dir)
                ))
            };
            let index =
                gix::odb::pack::index::File::at(fd_path(&ifd), HASH).map_err(|e| bad(&e))?;
            let mut pack =
                gix::odb::pack::data::File::at(fd_path(&pfd), HASH).map_err(|e| bad(&e))?;
            pack.id = self.packs.len() as u32;
            self.packs.push(gix::odb::pack::Bundle { pack, index });
            self._pack_fds.push(ifd);
            self._pack_fds.push(pfd);
        }
        Ok(())
    }

    /// Whether the store names alternates (which are not followed).
    /// A store of only the given packs (`(index, pack)` descriptors, already checked by
    /// the caller), no loose objects; `dir` (an existing folder) names it in errors.
    pub fn from_packs(dir: &Path, packs: Vec<(OwnedFd, OwnedFd)>) -> Result<Self> {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW;
        let dirfd = crate::fsat::open_path(dir, flags, 0)
            .map_err(|e| Error::other(format!("{}: {e}", crate::escape::path(dir))))?;
        let mut me = OwnObjects {
            dir: dir.to_path_buf(),
            dirfd,
            has_alternates: false,
            packs: Vec::new(),
            fanout: [false; 256],
            _pack_fds: Vec::new(),
        };
        for (ifd, pfd) in packs {
            let bad = |e: &dyn std::fmt::Display| {
                Error::other(format!(
                    "{}: unreadable pack ({e})",
                    crate::escape::path(dir)
                ))
            };
            let index =
                gix::odb::pack::index::File::at(fd_path(&ifd), HASH).map_err(|e| bad(&e))?;
            let mut pack =
                gix::odb::pack::data::File::at(fd_path(&pfd), HASH).map_err(|e| bad(&e))?;
            pack.id = me.packs.len() as u32;
            me.packs.push(gix::odb::pack::Bundle { pack, index });
            me._pack_fds.push(ifd);
            me._pack_fds.push(pfd);
        }
        Ok(me)
    }

    pub fn has_alternates(&self) -> bool {
        self.has_alternates
    }

    /// Where `id` lies in one of the packs, if a pack index names it.
    pub fn locate_packed(&self, id: &ObjectId) -> Option<PackedAt> {
        self.packs.iter().enumerate().find_map(|(i, b)| {
            b.index.lookup(id).map(|index| PackedAt {
                pack: i as u32,
                offset: b.index.pack_offset_at_index(index),
                index,
            })
        })
    }

    /// The pack (data and index) a [`PackedAt`] names.
    pub fn pack(&self, at: &PackedAt) -> &gix::odb::pack::Bundle {
        &self.packs[at.pack as usize]
    }

    /// Decode the packed object `id` at `at` (deltas resolved within its pack) into `out`,
    /// checked against `id`.
    pub fn decode_packed(
        &self,
        id: &ObjectId,
        at: &PackedAt,
        out: &mut Vec<u8>,
        cache: &mut DeltaCache,
    ) -> Result<Kind> {
        self.decode_packed_checked(id, at, out, cache, true)
    }

    /// [`OwnObjects::decode_packed`], hashed against `id` only when `verify`.
    fn decode_packed_checked(
        &self,
        id: &ObjectId,
        at: &PackedAt,
        out: &mut Vec<u8>,
        cache: &mut DeltaCache,
        verify: bool,
    ) -> Result<Kind> {
        // one inflate state per thread, reset for each stream (a fresh one per object
        // costs its allocation and tables every time)
        thread_local! {
            static INFLATE: std::cell::RefCell<gix::zlib::Inflate> =
                std::cell::RefCell::new(gix::zlib::Inflate::default());
        }
        let kind = INFLATE
            .with(|inflate| {
                let mut inflate = inflate.borrow_mut();
                self.pack(at)
                    .get_object_by_index(at.index, out, &mut inflate, cache)
                    .map(|(o, _)| o.kind)
            })
            .map_err(|e| {
                Error::other(format!(
                    "{}: reading {id} from a pack: {e}",
                    crate::escape::path(&self.dir)
                ))
            })?;
        if verify {
            self.check_id(id, kind, out)?;
        }
        Ok(kind)
    }

    /// Read the loose object `id` into `out`, checked against `id`; `None` if there is no
    /// such loose object.
    pub fn read_loose(&self, id: &ObjectId, out: &mut Vec<u8>) -> Result<Option<Kind>> {
        let Some(kind) = self.find_loose(id, out)? else {
            return Ok(None);
        };
        self.check_id(id, kind, out)?;
        Ok(Some(kind))
    }

    fn check_id(&self, id: &ObjectId, kind: Kind, data: &[u8]) -> Result<()> {
        let actual = gix::objs::compute_hash(HASH, kind, data)
            .map_err(|e| Error::other(format!("hashing {id}: {e}")))?;
        if actual != *id {
            return Err(Error::other(format!(
                "{}: object {id} is corrupt (its content hashes to {actual})",
                crate::escape::path(&self.dir)
            )));
        }
        Ok(())
    }

    fn find_loose(&self, id: &ObjectId, out: &mut Vec<u8>) -> Result<Option<Kind>> {
        if !self.fanout[id.as_slice()[0] as usize] {
            return Ok(None);
        }
        let hex = id.to_string();
        let (fan, rest) = hex.split_at(2);
        let shown = || self.dir.join(fan).join(rest);
        let fand = match open_at(&self.dirfd, fan, libc::O_RDONLY | libc::O_DIRECTORY) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if symlink_refused(&e) => {
                return Err(Error::other(format!(
                    "{}/{fan}: is a symlink or not a folder; not followed",
                    crate::escape::path(&self.dir)
                )))
            }
            Err(e) => {
                return Err(Error::other(format!(
                    "{}: {e}",
                    crate::escape::path(&self.dir.join(fan))
                )))
            }
        };
        let fd = match open_at(&fand, rest, libc::O_RDONLY) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if symlink_refused(&e) => {
                return Err(Error::other(format!(
                    "{}: is a symlink; not followed",
                    crate::escape::path(&shown())
                )))
            }
            Err(e) => {
                return Err(Error::other(format!(
                    "{}: {e}",
                    crate::escape::path(&shown())
                )))
            }
        };
        if !is_regular(&fd) {
            return Err(Error::other(format!(
                "{}: not a regular file",
                crate::escape::path(&shown())
            )));
        }
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut raw)
            .map_err(|e| Error::other(format!("{}: {e}", crate::escape::path(&shown()))))?;
        let corrupt = |why: &dyn std::fmt::Display| {
            Error::other(format!(
                "{}: corrupt loose object ({why})",
                crate::escape::path(&shown())
            ))
        };
        let mut inflate = gix::zlib::Inflate::default();
        let mut header = [0u8; 64];
        let (_, consumed_in, consumed_out) =
            inflate.prefix(&raw, &mut header).map_err(|e| corrupt(&e))?;
        let (kind, size, header_size) =
            gix::objs::decode::loose_header(&header[..consumed_out]).map_err(|e| corrupt(&e))?;
        let size = usize::try_from(size).map_err(|e| corrupt(&e))?;
        if size > raw.len().saturating_mul(MAX_INFLATE_RATIO) + 1024 {
            return Err(corrupt(&"its header claims more than the file can hold"));
        }
        let n = inflate
            .rest(
                &raw[consumed_in..],
                &header[..consumed_out],
                header_size,
                out,
                size,
            )
            .map_err(|e| corrupt(&e))?;
        if n != size || out.len() != size {
            return Err(corrupt(&format!("{n} bytes, the header says {size}")));
        }
        Ok(Some(kind))
    }
}

/// Where an object lies in one of the packs of an [`OwnObjects`]: ordered by pack, then
/// offset (the order the entries lie in).
/// The own store as an object database for gix (a checkout reads through it while the
/// same objects are being copied); alternates are not followed. With `verify`, every
/// object is hashed against its id, as [`OwnObjects::decode_packed`] and
/// [`OwnObjects::read_loose`] do; without, packed objects are only decoded (for packs
/// that were checked when they were written, or bytes read and hashed once already).
#[derive(Clone, Copy)]
pub struct Finder<'a> {
    pub objects: &'a OwnObjects,
    pub verify: bool,
}

impl gix::objs::Find for Finder<'_> {
    fn try_find<'b>(
        &self,
        id: &gix::hash::oid,
        buffer: &'b mut Vec<u8>,
    ) -> gix::error::Result<Option<gix::objs::Data<'b>>> {
        let id = id.to_owned();
        let o = self.objects;
        let kind = match o.locate_packed(&id) {
            Some(at) => o
                .decode_packed_checked(&id, &at, buffer, &mut DeltaCache::default(), self.verify)
                .map(Some),
            None => o.read_loose(&id, buffer),
        };
        match kind {
            Ok(Some(k)) => Ok(Some(gix::objs::Data::new(buffer, k, HASH))),
            Ok(None) => Ok(None),
            Err(e) => Err(gix::error::Error::from_error(e)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PackedAt {
    /// The pack's number in its [`OwnObjects`].
    pub pack: u32,
    /// The entry's offset in the pack.
    pub offset: u64,
    /// The object's number in the pack's index.
    pub index: u32,
}

/// Decoded pack entries by (pack, offset), so delta chains are not decoded again for
/// every object; emptied when it grows past [`CACHE_BYTES`]. One cache serves one
/// [`OwnObjects`] (its packs are numbered from 0).
#[derive(Default)]
pub struct DeltaCache {
    map: HashMap<(u32, u64), (Vec<u8>, Kind, usize)>,
    bytes: usize,
}

impl gix::odb::pack::cache::DecodeEntry for DeltaCache {
    fn put(&mut self, pack_id: u32, offset: u64, data: &[u8], kind: Kind, compressed_size: usize) {
        if data.len() > CACHE_BYTES / 4 {
            return;
        }
        if self.bytes + data.len() > CACHE_BYTES {
            self.map.clear();
            self.bytes = 0;
        }
        self.bytes += data.len();
        self.map
            .insert((pack_id, offset), (data.to_vec(), kind, compressed_size));
    }
    fn get(&mut self, pack_id: u32, offset: u64, out: &mut Vec<u8>) -> Option<(Kind, usize)> {
        let (d, k, c) = self.map.get(&(pack_id, offset))?;
        out.clear();
        out.extend_from_slice(d);
        Some((*k, *c))
    }
}

/// The commit ids of a repository's `shallow` file (missing: none).
pub fn read_shallow(git_dir: &Path) -> HashSet<ObjectId> {
    let p = git_dir.join("shallow");
    let Ok(md) = std::fs::symlink_metadata(&p) else {
        return HashSet::new();
    };
    if !md.is_file() {
        return HashSet::new();
    }
    std::fs::read_to_string(&p)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| ObjectId::from_hex(l.trim().as_bytes()).ok())
        .collect()
}

/// Write the `shallow` file of `git_dir` (nothing when `commits` is empty).
pub fn write_shallow(git_dir: &Path, commits: &[ObjectId]) -> Result<()> {
    if commits.is_empty() {
        return Ok(());
    }
    let mut v: Vec<String> = commits.iter().map(|c| c.to_string()).collect();
    v.sort();
    v.dedup();
    let p = git_dir.join("shallow");
    std::fs::write(&p, v.join("\n") + "\n").map_err(|e| Error::io(&p, e))
}

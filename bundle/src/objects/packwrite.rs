//! Writing a set of objects as one pack (version 2) with its index (version 2) into a
//! fresh repository's `objects/pack`: one file pair instead of a loose file per object, so
//! a large checkout's workspace is made quickly and git reads it as usual.
//!
//! Entries are either compressed here from whole objects ([`PackWriter::add`]) or copied
//! from another pack as they are ([`PackWriter::add_raw`]), an `OFS_DELTA` with its base
//! distance re-encoded for this pack's layout ([`PackWriter::add_ofs_delta`]). The index
//! records each entry's offset and the CRC-32 of its bytes as written.

use crate::error::{Error, IoContext, Result};
use gix::hash::ObjectId;
use gix::objs::Kind;
use gix::zlib::stream::deflate::{Compress, FlushCompress};
use gix::zlib::{Compression, Status};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A pack being written.
pub struct PackWriter {
    dir: PathBuf,
    tmp: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    offset: u64,
    entries: Vec<(ObjectId, u64, u32)>,
    comp: Compress,
    chunk: Vec<u8>,
    entry: Vec<u8>,
}

fn type_code(kind: Kind) -> u8 {
    match kind {
        Kind::Commit => 1,
        Kind::Tree => 2,
        Kind::Blob => 3,
        Kind::Tag => 4,
    }
}

/// The base distance of an `OFS_DELTA` entry as packs encode it (big-endian groups of
/// seven bits, each continued group biased by one), in the tail of `buf`.
fn encode_ofs_distance(mut n: u64, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len() - 1;
    buf[i] = (n & 0x7f) as u8;
    n >>= 7;
    while n != 0 {
        n -= 1;
        i -= 1;
        buf[i] = 0x80 | (n & 0x7f) as u8;
        n >>= 7;
    }
    &buf[i..]
}

impl PackWriter {
    /// Start a pack in `objects/pack` of a fresh repository.
    pub fn new(objects: &Path) -> Result<Self> {
        let dir = objects.join("pack");
        std::fs::create_dir_all(&dir).at(&dir)?;
        let tmp = dir.join("tmp_pack_capsule");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
            .at(&tmp)?;
        let mut file = std::io::BufWriter::with_capacity(1 << 20, f);
        // the object count is written by `finish`
        file.write_all(b"PACK\0\0\0\x02\0\0\0\0").at(&tmp)?;
        Ok(PackWriter {
            dir,
            tmp,
            file,
            offset: 12,
            entries: Vec::new(),
            comp: Compress::new(Compression::BEST_SPEED),
            chunk: vec![0; 64 << 10],
            entry: Vec::new(),
        })
    }

    /// Add one object, compressed whole (no delta).
    pub fn add(&mut self, id: ObjectId, kind: Kind, data: &[u8]) -> Result<()> {
        let e = &mut self.entry;
        e.clear();
        let mut size = data.len() as u64;
        let mut b = (type_code(kind) << 4) | (size & 0x0f) as u8;
        size >>= 4;
        while size != 0 {
            e.push(b | 0x80);
            b = (size & 0x7f) as u8;
            size >>= 7;
        }
        e.push(b);
        self.comp.reset();
        let mut input = data;
        loop {
            let before_in = self.comp.total_in();
            let before_out = self.comp.total_out();
            let st = self
                .comp
                .compress(input, &mut self.chunk, FlushCompress::Finish)
                .map_err(|x| Error::other(format!("compressing {id}: {x}")))?;
            let used = (self.comp.total_in() - before_in) as usize;
            let made = (self.comp.total_out() - before_out) as usize;
            e.extend_from_slice(&self.chunk[..made]);
            input = &input[used..];
            if st == Status::StreamEnd {
                break;
            }
            if used == 0 && made == 0 {
                return Err(Error::other(format!("compressing {id}: no progress")));
            }
        }
        self.file.write_all(e).at(&self.tmp)?;
        self.entries.push((id, self.offset, crc32fast::hash(e)));
        self.offset += e.len() as u64;
        Ok(())
    }

    /// Where the next entry will start.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Add one object as an entry copied from another pack unchanged: a whole object, or a
    /// `REF_DELTA` whose base is in this pack. `crc` is the CRC-32 of `entry`.
    pub fn add_raw(&mut self, id: ObjectId, entry: &[u8], crc: u32) -> Result<()> {
        self.file.write_all(entry).at(&self.tmp)?;
        self.entries.push((id, self.offset, crc));
        self.offset += entry.len() as u64;
        Ok(())
    }

    /// Add an `OFS_DELTA` entry of another pack whose base was written to this one at
    /// `base_offset`: its type-and-size header `type_size` and compressed delta `data` are
    /// copied, the base distance between them is encoded anew.
    pub fn add_ofs_delta(
        &mut self,
        id: ObjectId,
        type_size: &[u8],
        base_offset: u64,
        data: &[u8],
    ) -> Result<()> {
        let distance = self
            .offset
            .checked_sub(base_offset)
            .filter(|d| *d > 0)
            .ok_or_else(|| Error::other(format!("{id}: a delta base must come before it")))?;
        let mut buf = [0u8; 10];
        let dist = encode_ofs_distance(distance, &mut buf);
        let mut crc = crc32fast::Hasher::new();
        for part in [type_size, dist, data] {
            self.file.write_all(part).at(&self.tmp)?;
            crc.update(part);
        }
        self.entries.push((id, self.offset, crc.finalize()));
        self.offset += (type_size.len() + dist.len() + data.len()) as u64;
        Ok(())
    }

    /// Write the count and checksum, the index, and name both by the pack's checksum.
    pub fn finish(mut self) -> Result<usize> {
        let n = self.entries.len();
        if n == 0 {
            drop(self.file);
            return std::fs::remove_file(&self.tmp).at(&self.tmp).map(|_| 0);
        }
        let count = u32::try_from(n).map_err(|_| Error::other("too many objects for one pack"))?;
        let mut f = self
            .file
            .into_inner()
            .map_err(|e| Error::io(&self.tmp, e.into_error()))?;
        f.seek(SeekFrom::Start(8)).at(&self.tmp)?;
        f.write_all(&count.to_be_bytes()).at(&self.tmp)?;
        f.seek(SeekFrom::Start(0)).at(&self.tmp)?;
        let mut h = gix::hash::hasher(gix::hash::Kind::Sha1);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let r = f.read(&mut buf).at(&self.tmp)?;
            if r == 0 {
                break;
            }
            h.update(&buf[..r]);
        }
        let sum = h
            .try_finalize()
            .map_err(|e| Error::other(format!("pack checksum: {e}")))?;
        f.seek(SeekFrom::End(0)).at(&self.tmp)?;
        f.write_all(sum.as_slice()).at(&self.tmp)?;
        drop(f);

        // index version 2
        self.entries.sort_unstable_by_key(|e| e.0);
        let mut idx = Vec::with_capacity(1072 + n * 28);
        idx.extend_from_slice(b"\xfftOc\0\0\0\x02");
        let mut fan = [0u32; 256];
        for (id, _, _) in &self.entries {
            fan[id.as_slice()[0] as usize] += 1;
        }
        let mut acc = 0u32;
        for c in fan {
            acc += c;
            idx.extend_from_slice(&acc.to_be_bytes());
        }
        for (id, _, _) in &self.entries {
            idx.extend_from_slice(id.as_slice());
        }
        for (_, _, crc) in &self.entries {
            idx.extend_from_slice(&crc.to_be_bytes());
        }
        let mut large: Vec<u64> = Vec::new();
        for (_, off, _) in &self.entries {
            if *off < 0x8000_0000 {
                idx.extend_from_slice(&(*off as u32).to_be_bytes());
            } else {
                idx.extend_from_slice(&(0x8000_0000u32 | large.len() as u32).to_be_bytes());
                large.push(*off);
            }
        }
        for off in large {
            idx.extend_from_slice(&off.to_be_bytes());
        }
        idx.extend_from_slice(sum.as_slice());
        let mut h = gix::hash::hasher(gix::hash::Kind::Sha1);
        h.update(&idx);
        let isum = h
            .try_finalize()
            .map_err(|e| Error::other(format!("index checksum: {e}")))?;
        idx.extend_from_slice(isum.as_slice());
        let base = self.dir.join(format!("pack-{sum}"));
        let idx_path = base.with_extension("idx");
        std::fs::write(&idx_path, &idx).at(&idx_path)?;
        let pack_path = base.with_extension("pack");
        std::fs::rename(&self.tmp, &pack_path).at(&pack_path)?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// git's decoding of an `OFS_DELTA` base distance.
    fn decode_ofs_distance(b: &[u8]) -> (u64, usize) {
        let mut i = 0;
        let mut c = b[i];
        let mut n = (c & 0x7f) as u64;
        while c & 0x80 != 0 {
            i += 1;
            c = b[i];
            n = ((n + 1) << 7) | (c & 0x7f) as u64;
        }
        (n, i + 1)
    }

    #[test]
    fn ofs_distances_encode_as_git_reads_them() {
        let mut buf = [0u8; 10];
        assert_eq!(encode_ofs_distance(1, &mut buf), &[0x01]);
        assert_eq!(encode_ofs_distance(127, &mut buf), &[0x7f]);
        assert_eq!(encode_ofs_distance(128, &mut buf), &[0x80, 0x00]);
        for n in [1u64, 127, 128, 16_511, 16_512, 1 << 31, u64::MAX >> 1] {
            let e = encode_ofs_distance(n, &mut buf).to_vec();
            assert_eq!(decode_ofs_distance(&e), (n, e.len()), "{n}");
        }
    }

    #[test]
    fn a_written_pack_reads_back() {
        let t = tempfile::Builder::new().tempdir_in("/dev/shm").unwrap();
        let objects = t.path().join("objects");
        let big: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let blobs: Vec<(ObjectId, Vec<u8>)> = [b"hello\n".to_vec(), Vec::new(), big]
            .into_iter()
            .map(|d| {
                let id = gix::objs::compute_hash(gix::hash::Kind::Sha1, Kind::Blob, &d).unwrap();
                (id, d)
            })
            .collect();
        let mut w = PackWriter::new(&objects).unwrap();
        for (id, d) in &blobs {
            w.add(*id, Kind::Blob, d).unwrap();
        }
        assert_eq!(w.finish().unwrap(), 3);
        let own = crate::objects::own::OwnObjects::open(&objects, false).unwrap();
        let mut cache = crate::objects::own::DeltaCache::default();
        for (id, d) in &blobs {
            let at = own.locate_packed(id).expect("in the pack");
            let mut out = Vec::new();
            let k = own.decode_packed(id, &at, &mut out, &mut cache).unwrap();
            assert_eq!((k, &out), (Kind::Blob, d));
        }
        let missing = ObjectId::from_hex(b"0123456789012345678901234567890123456789").unwrap();
        assert!(own.locate_packed(&missing).is_none());
        assert!(own.read_loose(&missing, &mut Vec::new()).unwrap().is_none());
    }
}

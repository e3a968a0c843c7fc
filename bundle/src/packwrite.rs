//! Writing a set of objects as one pack (version 2, no deltas) with its index (version 2)
//! into a fresh repository's `objects/pack`: one file pair instead of a loose file per
//! object, so a large checkout's workspace is made quickly and git reads it as usual.

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

/// CRC-32 (IEEE), as pack index version 2 records per entry.
fn crc32(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let t = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        t
    });
    let mut c = !0u32;
    for &b in data {
        c = t[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
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
        self.entries.push((id, self.offset, crc32(e)));
        self.offset += e.len() as u64;
        Ok(())
    }

    /// Add one object as an entry copied from another pack (header and compressed data of
    /// a whole, not deltified, object).
    pub fn add_raw(&mut self, id: ObjectId, entry: &[u8]) -> Result<()> {
        self.file.write_all(entry).at(&self.tmp)?;
        self.entries.push((id, self.offset, crc32(entry)));
        self.offset += entry.len() as u64;
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
        self.entries.sort_by_key(|e| e.0);
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

    #[test]
    fn crc32_of_known_input() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn a_written_pack_reads_back_and_its_entries_copy_as_is() {
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
        let own = crate::ownobjects::OwnObjects::open(&objects, false).unwrap();
        let mut cache = crate::ownobjects::DeltaCache::default();
        let copy = t.path().join("copy");
        let mut w2 = PackWriter::new(&copy).unwrap();
        for (id, d) in &blobs {
            let mut out = Vec::new();
            let (k, raw) = own.find(id, &mut out, &mut cache).unwrap().unwrap();
            assert_eq!((k, &out), (Kind::Blob, d));
            let raw = raw.expect("a whole entry");
            w2.add_raw(*id, own.raw_entry(&raw).unwrap()).unwrap();
        }
        assert_eq!(w2.finish().unwrap(), 3);
        let again = crate::ownobjects::OwnObjects::open(&copy, false).unwrap();
        // a cache belongs to one store (entries are keyed by pack number and offset)
        let mut cache = crate::ownobjects::DeltaCache::default();
        for (id, d) in &blobs {
            let mut out = Vec::new();
            let (_, _) = again.find(id, &mut out, &mut cache).unwrap().unwrap();
            assert_eq!(&out, d);
        }
        let missing = ObjectId::from_hex(b"0123456789012345678901234567890123456789").unwrap();
        assert!(again
            .find(&missing, &mut Vec::new(), &mut cache)
            .unwrap()
            .is_none());
    }
}

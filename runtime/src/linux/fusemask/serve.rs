//! The server of one exec's watched masks ([`super`]): the FUSE protocol (`linux/fuse.h`,
//! 7.31) reduced to what an empty, read-only folder or file answers, each answer a
//! constant, and every lookup, listing and open recorded as a refused read in the exec's
//! [`Collector`].
//!
//! Answers, as the plain mask below gives them: the root's attributes (mode 0555 folder
//! or 0444 file, the sandbox's uid and gid, tmpfs's sizes, the time the server started), lookups
//! `ENOENT`, listings `.` and `..`, reads end of file, extended attributes none, and
//! `ENOSYS` for anything else (the mount is read-only: the kernel refuses writes before
//! asking).
//!
//! Why not `fuser` (the project's chosen FUSE crate; its API checked on docs.rs for the
//! current release and in its main branch): its server is a `Session`, which fits the
//! descriptor part (`Session::from_fd` wraps a connection another process mounted) but
//! nothing else of how these connections are served:
//! - a session is served only by a loop of its own, `spawn()` (a thread per session, so
//!   up to [`super::MAX_WATCHED`] threads per exec) or the blocking `run()`/`mount2` of
//!   older releases, which reads until the connection ends and retries at once on
//!   `EAGAIN` (a busy loop on these non-blocking descriptors). There is no public call
//!   that handles one request the caller read, and the protocol's types and framing
//!   (its `ll` module) are private, so they cannot be used alone. Here every connection
//!   is one more descriptor in the seccomp supervisor's `poll`, answered by its one
//!   thread between notifications ([`Masks::answer`]);
//! - its handshake expects `INIT` as the first request and fails the session on
//!   anything else; here `INIT` is answered in the sandbox, by the process that mounted
//!   the connection, before the descriptor is sent ([`answer_init`]: a warm spare's masks
//!   are ready before an exec claims the spare), so the first request the supervisor sees
//!   is a lookup;
//! - it reads into a 16 MiB buffer per session (its largest write request), 512 MiB of
//!   buffers for 32 masks, where an empty read-only tree needs 16 KiB.
//!
//! What is left by hand is small and fixed: a dozen requests, each answered by a
//! constant. Moving to fuser would take an upstream change first (a session that accepts
//! a connection whose `INIT` was answered, and a public "dispatch this request" on a
//! caller-owned descriptor); with it, the framing and answers here (about 300 lines) would
//! become a `Filesystem` implementation of the same answers, and the supervisor's loop and
//! the mounting in [`super`] would stay as they are.

use crate::refusals::{path_target as show, Collector, Event, Kind};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

const LOOKUP: u32 = 1;
const FORGET: u32 = 2;
const GETATTR: u32 = 3;
const OPEN: u32 = 14;
const READ: u32 = 15;
const STATFS: u32 = 17;
const RELEASE: u32 = 18;
const GETXATTR: u32 = 22;
const LISTXATTR: u32 = 23;
const FLUSH: u32 = 25;
const INIT: u32 = 26;
const OPENDIR: u32 = 27;
const READDIR: u32 = 28;
const RELEASEDIR: u32 = 29;
const INTERRUPT: u32 = 36;
const BATCH_FORGET: u32 = 42;

/// `struct fuse_in_header`.
const IN_HEADER: usize = 40;
/// What a read of `/dev/fuse` must have room for: the kernel refuses buffers smaller
/// than 8 KiB or than a write request (`max_write` is 4 KiB here, and nothing writes).
const BUFFER: usize = 16 * 1024;
/// How long the kernel may keep the root's attributes.
const ATTR_VALID_S: u64 = 24 * 3600;

/// One watched mask: its connection, the hidden path it stands for, and its kind.
struct Conn {
    fd: OwnedFd,
    path: PathBuf,
    dir: bool,
}

/// An exec's watched masks (from a [`super::MESSAGE`] on the listener's channel).
pub struct Masks {
    conns: Vec<Conn>,
    /// The sandbox's `/proc`: programs are named from `<pid>/comm` there (FUSE gives
    /// pids of the sandbox's pid namespace).
    proc: OwnedFd,
    uid: u32,
    gid: u32,
    /// The roots' times: when the server started.
    time: (u64, u32),
    buf: Vec<u8>,
}

impl Masks {
    /// From a message's bytes and descriptors (`/proc` first, then one connection per
    /// entry), with `watched`, the plan's paths the entries index. `None` when the message
    /// does not match (its descriptors are closed: the connections abort).
    pub fn from_message(body: &[u8], fds: Vec<OwnedFd>, watched: &[PathBuf]) -> Option<Masks> {
        let rest = body.strip_prefix(&[super::MESSAGE])?;
        if rest.len() < 8 || (rest.len() - 8) % 3 != 0 || fds.len() != 1 + (rest.len() - 8) / 3 {
            return None;
        }
        let u32_at =
            |i: usize| u32::from_le_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
        let (uid, gid) = (u32_at(0), u32_at(4));
        let mut fds = fds.into_iter();
        let proc = fds.next()?;
        let mut conns = Vec::new();
        for (e, fd) in rest[8..].chunks_exact(3).zip(fds) {
            let i = u16::from_le_bytes([e[0], e[1]]) as usize;
            let path = watched.get(i)?.clone();
            // SAFETY: fcntl on a descriptor we own.
            unsafe {
                let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
                if fl < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                    return None;
                }
            }
            conns.push(Conn {
                fd,
                path,
                dir: e[2] != 0,
            });
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Some(Masks {
            conns,
            proc,
            uid,
            gid,
            time: (now.as_secs(), now.subsec_nanos()),
            buf: Vec::new(),
        })
    }

    /// The connections' descriptors, in order (for `poll`).
    pub fn fds(&self) -> Vec<RawFd> {
        self.conns.iter().map(|c| c.fd.as_raw_fd()).collect()
    }

    /// The hidden paths served (reads in them are listed here, not by the supervisor).
    pub fn paths(&self) -> Vec<PathBuf> {
        self.conns.iter().map(|c| c.path.clone()).collect()
    }

    /// Answer what waits on connection `i`. False when the connection is gone (the
    /// sandbox's mount ended): poll it no more.
    pub fn answer(&mut self, i: usize, refusals: &Collector) -> bool {
        if self.buf.len() < BUFFER {
            self.buf = vec![0u8; BUFFER];
        }
        loop {
            let Some(c) = self.conns.get(i) else {
                return false;
            };
            let n = match crate::kernel::sys::read(c.fd.as_raw_fd(), &mut self.buf) {
                Ok(n) => n,
                Err(e) => {
                    return match e.raw_os_error() {
                        // nothing (more) to answer now; a request the task gave up on
                        Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ENOENT) => true,
                        _ => false,
                    };
                }
            };
            if n < IN_HEADER {
                return n != 0;
            }
            self.one(i, n, refusals);
        }
    }

    /// Answer the request of `n` bytes in the buffer, from connection `i`.
    fn one(&mut self, i: usize, n: usize, refusals: &Collector) {
        let b = &self.buf[..n];
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        // the kernel's length, within what was read (never below the header)
        let len = (u32_at(0) as usize).clamp(IN_HEADER, n);
        let (op, unique, pid) = (u32_at(4), u64_at(8), u32_at(32));
        let body = &b[IN_HEADER..len];
        let c = &self.conns[i];
        let (fd, dir) = (c.fd.as_raw_fd(), c.dir);
        let mut event: Option<(PathBuf, &'static str)> = None;
        let reply: Option<Result<Vec<u8>, i32>> = match op {
            INIT => Some(Ok(init_out(body))),
            LOOKUP => {
                let name = body.split(|&x| x == 0).next().unwrap_or_default();
                if !name.is_empty() {
                    event = Some((
                        c.path.join(std::ffi::OsStr::from_bytes(name)),
                        "a hidden path",
                    ));
                }
                Some(Err(libc::ENOENT))
            }
            GETATTR => {
                let mut o = Vec::with_capacity(104);
                o.extend_from_slice(&ATTR_VALID_S.to_le_bytes());
                o.extend_from_slice(&[0u8; 8]); // attr_valid_nsec, dummy
                o.extend_from_slice(&self.attr(dir));
                Some(Ok(o))
            }
            OPENDIR | OPEN => {
                event = Some((
                    c.path.clone(),
                    if op == OPENDIR {
                        "listing a hidden folder"
                    } else {
                        "a hidden path"
                    },
                ));
                let mut o = 1u64.to_le_bytes().to_vec(); // fh
                o.extend_from_slice(&[0u8; 8]); // open_flags, backing_id
                Some(Ok(o))
            }
            READDIR if dir => {
                let offset = if body.len() >= 16 {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(&body[8..16]);
                    u64::from_le_bytes(a)
                } else {
                    0
                };
                let mut o = Vec::new();
                for (off, name) in [(1u64, &b"."[..]), (2, b"..")] {
                    if offset < off {
                        o.extend_from_slice(&1u64.to_le_bytes()); // ino
                        o.extend_from_slice(&off.to_le_bytes());
                        o.extend_from_slice(&(name.len() as u32).to_le_bytes());
                        o.extend_from_slice(&(libc::DT_DIR as u32).to_le_bytes());
                        o.extend_from_slice(name);
                        o.resize(o.len().div_ceil(8) * 8, 0);
                    }
                }
                Some(Ok(o))
            }
            READ => Some(Ok(Vec::new())),
            RELEASE | RELEASEDIR | FLUSH => Some(Ok(Vec::new())),
            STATFS => {
                let mut o = Vec::with_capacity(80);
                o.extend_from_slice(&[0u8; 40]); // blocks, bfree, bavail, files, ffree
                o.extend_from_slice(&4096u32.to_le_bytes()); // bsize
                o.extend_from_slice(&255u32.to_le_bytes()); // namelen
                o.extend_from_slice(&4096u32.to_le_bytes()); // frsize
                o.resize(80, 0);
                Some(Ok(o))
            }
            GETXATTR => Some(Err(libc::ENODATA)),
            LISTXATTR => {
                let size = if body.len() >= 4 {
                    u32::from_le_bytes([body[0], body[1], body[2], body[3]])
                } else {
                    0
                };
                // the size of an empty list, or the empty list
                Some(Ok(if size == 0 { vec![0u8; 8] } else { Vec::new() }))
            }
            FORGET | BATCH_FORGET | INTERRUPT => None,
            _ => Some(Err(libc::ENOSYS)),
        };
        // who asked is read while it waits for the answer (it may be gone right after)
        let event = event.map(|(target, reason)| (show(&target), reason, self.comm(pid)));
        if let Some(r) = reply {
            respond(fd, unique, r);
        }
        if let Some((target, reason, program)) = event {
            // a connect to a socket in the mask is listed as that connect already
            if refusals.knows(Kind::Connect, &target, &program) {
                return;
            }
            let known = refusals.knows(Kind::Read, &target, &program);
            refusals.add(Event {
                kind: Kind::Read,
                target,
                program,
                pid: (!known && pid != 0).then_some(pid as i32),
                grant: Some(format!("--reveal {}", show(&c.path))),
                reason: Some(reason.into()),
                header: None,
            });
        }
    }

    /// `struct fuse_attr` of a root.
    fn attr(&self, dir: bool) -> Vec<u8> {
        let mut a = Vec::with_capacity(88);
        a.extend_from_slice(&1u64.to_le_bytes()); // ino
                                                  // size as tmpfs gives an empty folder (two entries) or file; no blocks
        a.extend_from_slice(&(if dir { 40u64 } else { 0 }).to_le_bytes());
        a.extend_from_slice(&0u64.to_le_bytes());
        for _ in 0..3 {
            a.extend_from_slice(&self.time.0.to_le_bytes());
        }
        for _ in 0..3 {
            a.extend_from_slice(&self.time.1.to_le_bytes());
        }
        let mode = if dir {
            libc::S_IFDIR | 0o555
        } else {
            libc::S_IFREG | 0o444
        };
        for v in [
            mode,
            if dir { 2 } else { 1 },
            self.uid,
            self.gid,
            0,
            4096,
            0,
        ] {
            a.extend_from_slice(&v.to_le_bytes());
        }
        a
    }

    /// The `comm` of the sandbox's `pid` (empty when unknown). For the report only: the
    /// pid may have been reused since it asked.
    fn comm(&self, pid: u32) -> String {
        if pid == 0 {
            return String::new();
        }
        let Ok(rel) = std::ffi::CString::new(format!("{pid}/comm")) else {
            return String::new();
        };
        // SAFETY: openat(2) below a descriptor we own, with a valid C string.
        let fd = unsafe {
            libc::openat(
                self.proc.as_raw_fd(),
                rel.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            )
        };
        if fd < 0 {
            return String::new();
        }
        let mut b = [0u8; 64];
        let n = crate::kernel::sys::read(fd, &mut b).unwrap_or(0);
        crate::kernel::sys::close(fd);
        let b = &b[..n];
        String::from_utf8_lossy(b.strip_suffix(b"\n").unwrap_or(b)).into_owned()
    }
}

/// `struct fuse_init_out` for an `INIT` request's `body`: protocol 7.31, no optional
/// feature, writes of at most 4 KiB (none come: the mount is read-only).
fn init_out(body: &[u8]) -> Vec<u8> {
    let readahead = if body.len() >= 12 {
        u32::from_le_bytes([body[8], body[9], body[10], body[11]])
    } else {
        0
    };
    let mut o = Vec::with_capacity(64);
    for v in [7u32, 31, readahead, 0] {
        o.extend_from_slice(&v.to_le_bytes());
    }
    o.extend_from_slice(&16u16.to_le_bytes()); // max_background
    o.extend_from_slice(&12u16.to_le_bytes()); // congestion_threshold
    o.extend_from_slice(&4096u32.to_le_bytes()); // max_write
    o.extend_from_slice(&1u32.to_le_bytes()); // time_gran
    o.resize(64, 0);
    o
}

/// Answer the `INIT` request a new mount queued on `fd` (by the process that mounted it,
/// right after, so that capsule has one round trip less on the exec's way). Returns
/// whether it was answered; if not, the server answers it as any request.
pub(super) fn answer_init(fd: RawFd) -> bool {
    let mut b = [0u8; 8192 + 256];
    // SAFETY: fcntl and a nonblocking read of our own descriptor into our buffer.
    let n = unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return false;
        }
        let n = libc::read(fd, b.as_mut_ptr().cast(), b.len());
        libc::fcntl(fd, libc::F_SETFL, fl);
        n
    };
    if n < IN_HEADER as isize {
        return false;
    }
    let b = &b[..n as usize];
    let op = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let mut u = [0u8; 8];
    u.copy_from_slice(&b[8..16]);
    if op != INIT {
        // never left unanswered (the kernel sends INIT first: not seen)
        respond(fd, u64::from_le_bytes(u), Err(libc::ENOSYS));
        return false;
    }
    respond(fd, u64::from_le_bytes(u), Ok(init_out(&b[IN_HEADER..])));
    true
}

/// Write the answer to request `unique`: its bytes, or an errno. A request the task gave
/// up on meanwhile (`ENOENT`) needs none.
fn respond(fd: RawFd, unique: u64, r: Result<Vec<u8>, i32>) {
    let (error, body) = match r {
        Ok(b) => (0i32, b),
        Err(e) => (-e, Vec::new()),
    };
    let mut m = Vec::with_capacity(16 + body.len());
    m.extend_from_slice(&((16 + body.len()) as u32).to_le_bytes());
    m.extend_from_slice(&error.to_le_bytes());
    m.extend_from_slice(&unique.to_le_bytes());
    m.extend_from_slice(&body);
    if let Err(e) = crate::kernel::sys::write_all(fd, &m) {
        if e.raw_os_error() != Some(libc::ENOENT) {
            tracing::debug!("watched masks: answering: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_root_is_an_empty_read_only_folder() {
        let proc = std::fs::File::open("/proc").unwrap();
        let m = Masks {
            conns: Vec::new(),
            proc: proc.into(),
            uid: 7,
            gid: 8,
            time: (100, 5),
            buf: Vec::new(),
        };
        let a = m.attr(true);
        assert_eq!(a.len(), 88);
        let at = |o: usize| u32::from_le_bytes([a[o], a[o + 1], a[o + 2], a[o + 3]]);
        assert_eq!(at(60), libc::S_IFDIR | 0o555);
        assert_eq!((at(64), at(68), at(72)), (2, 7, 8));
        assert_eq!(m.attr(false).len(), 88);
        let a = m.attr(false);
        assert_eq!(
            u32::from_le_bytes([a[60], a[61], a[62], a[63]]),
            libc::S_IFREG | 0o444
        );
    }

    #[test]
    fn a_message_that_does_not_match_is_refused() {
        let w = vec![PathBuf::from("/h/.ssh")];
        let f = || -> OwnedFd { std::fs::File::open("/proc").unwrap().into() };
        assert!(Masks::from_message(b"F", vec![f()], &w).is_none());
        let mut ok = vec![super::super::MESSAGE];
        ok.extend_from_slice(&[0; 8]);
        ok.extend_from_slice(&[5, 0, 1]); // index 5: not in the plan
        assert!(Masks::from_message(&ok, vec![f(), f()], &w).is_none());
        let n = ok.len();
        ok[n - 3] = 0;
        assert!(
            Masks::from_message(&ok, vec![f()], &w).is_none(),
            "one fd short"
        );
        let m = Masks::from_message(&ok, vec![f(), f()], &w).unwrap();
        assert_eq!(m.paths(), w);
    }
}

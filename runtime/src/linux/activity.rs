//! The activity watch of `--activity-timeout`: the command's output is relayed by the
//! supervisor so that it can tell when the command last wrote something.
//!
//! With inherited stdio, [`Relay::start`] puts two pipes in place of capsule's own fd 1
//! and 2 just before the sandbox's init is cloned (or a warm spare is sent the exec), and
//! [`Relay::give_back`] puts capsule's own back right after: the command holds the pipes'
//! write ends, the supervisor ([`super::supervise::supervise`]) their read ends, and copies what comes
//! to capsule's stdout and stderr unchanged, noting the time. With `-t` the terminal's
//! relay is the watch (no pipe). Without `--activity-timeout` none of this exists: the
//! command writes to capsule's descriptors directly.
//!
//! A consumer that stops reading capsule's output stalls the copy as it would stall the
//! command itself; the command then counts as silent.

use crate::kernel::sys;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// When the command last wrote, and the limit.
pub(crate) struct Watch {
    pub limit: Duration,
    pub last: Instant,
}

impl Watch {
    pub fn new(limit: Duration) -> Self {
        Watch {
            limit,
            last: Instant::now(),
        }
    }

    /// When the command counts as silent, unless it writes before.
    pub fn deadline(&self) -> Instant {
        self.last + self.limit
    }
}

/// The pipes between the command's stdout/stderr and capsule's.
pub(crate) struct Relay {
    /// (read end, capsule's own descriptor it is copied to: a duplicate of fd 1 or 2)
    pipes: Vec<(RawFd, RawFd)>,
    /// capsule's fd 1 and 2 are the pipes' write ends (until [`Relay::give_back`]).
    swapped: bool,
}

impl Relay {
    /// Swap capsule's fd 1 and 2 for the write ends of two new pipes (the sandbox inherits
    /// them). Call just before the clone; [`Relay::give_back`] right after.
    pub fn start() -> io::Result<Relay> {
        let mut r = Relay {
            pipes: Vec::new(),
            swapped: false,
        };
        let mut writers = Vec::new();
        for fd in [1, 2] {
            let (rd, wr) = sys::pipe()?;
            // SAFETY: fcntl on a descriptor of ours.
            let own = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            if own < 0 {
                let e = io::Error::last_os_error();
                sys::close(rd);
                sys::close(wr);
                return Err(e);
            }
            // SAFETY: fcntl on a descriptor of ours.
            unsafe {
                let fl = libc::fcntl(rd, libc::F_GETFL);
                libc::fcntl(rd, libc::F_SETFL, fl | libc::O_NONBLOCK);
            }
            r.pipes.push((rd, own));
            writers.push(wr);
        }
        r.swapped = true;
        for (fd, wr) in [1, 2].into_iter().zip(writers) {
            // SAFETY: dup2 onto our own standard descriptor (not CLOEXEC: inherited).
            let rc = unsafe { libc::dup2(wr, fd) };
            sys::close(wr);
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(r)
    }

    /// Put capsule's own fd 1 and 2 back (closing its copies of the pipes' write ends:
    /// the command's are then the only ones).
    pub fn give_back(&mut self) {
        if !self.swapped {
            return;
        }
        self.swapped = false;
        for ((_, own), fd) in self.pipes.iter().zip([1, 2]) {
            // SAFETY: dup2 of our own descriptors.
            unsafe { libc::dup2(*own, fd) };
        }
    }

    /// Poll entries of the pipes still open.
    pub fn pollfds(&self) -> Vec<libc::pollfd> {
        self.pipes
            .iter()
            .map(|(rd, _)| libc::pollfd {
                fd: *rd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect()
    }

    /// Copy what is ready (the entries of [`Relay::pollfds`], polled); true if the
    /// command wrote something.
    pub fn pump(&mut self, fds: &[libc::pollfd]) -> bool {
        let mut wrote = false;
        let mut buf = [0u8; 65536];
        for (i, f) in fds.iter().enumerate() {
            if f.revents == 0 || f.fd < 0 {
                continue;
            }
            let (rd, own) = self.pipes[i];
            match sys::read(rd, &mut buf) {
                Ok(0) => self.close(i),
                Ok(n) => {
                    wrote = true;
                    let _ = sys::write_all(own, &buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => self.close(i),
            }
        }
        wrote
    }

    /// Copy what the pipes hold now (the command has ended), without waiting.
    pub fn drain(&mut self) {
        let mut buf = [0u8; 65536];
        for i in 0..self.pipes.len() {
            loop {
                let (rd, own) = self.pipes[i];
                if rd < 0 {
                    break;
                }
                match sys::read(rd, &mut buf) {
                    Ok(n) if n > 0 => {
                        let _ = sys::write_all(own, &buf[..n]);
                    }
                    _ => break,
                }
            }
        }
    }

    fn close(&mut self, i: usize) {
        sys::close(self.pipes[i].0);
        self.pipes[i].0 = -1;
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.give_back();
        for (rd, own) in &self.pipes {
            sys::close(*rd);
            sys::close(*own);
        }
    }
}

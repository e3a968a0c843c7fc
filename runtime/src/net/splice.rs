//! Zero-copy tunnels on Linux: `splice(2)` through a pipe moves a tunnel's bytes socket to
//! socket inside the kernel, instead of copying each byte into the proxy and back out.
//! Async (tokio readiness), for the proxy's tunnels.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Bytes moved per `splice` call (also the pipe size asked for).
const CHUNK: usize = 256 * 1024;

/// A pipe (read end, write end), close-on-exec, optionally non-blocking, enlarged to
/// [`CHUNK`] when the system allows.
fn pipe(nonblocking: bool) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    let flags = libc::O_CLOEXEC | if nonblocking { libc::O_NONBLOCK } else { 0 };
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // A larger pipe means fewer round trips; refused beyond the user's pipe quota: fine.
    // SAFETY: F_SETPIPE_SZ on a pipe we own.
    unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, CHUNK as libc::c_int) };
    Ok((r, w))
}

fn splice(from: RawFd, to: RawFd, len: usize, nonblocking: bool) -> io::Result<usize> {
    let flags = libc::SPLICE_F_MOVE
        | if nonblocking {
            libc::SPLICE_F_NONBLOCK
        } else {
            0
        };
    // SAFETY: plain syscall on descriptors the caller keeps open; null offsets (streams).
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            flags,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn shutdown_write(fd: RawFd) {
    // SAFETY: shutdown on a socket descriptor the caller keeps open.
    unsafe { libc::shutdown(fd, libc::SHUT_WR) };
}

/// A tokio socket the async pump can drive: its descriptor and its readiness.
pub trait SpliceStream: AsRawFd + Send + Sync {
    fn wait(
        &self,
        interest: tokio::io::Interest,
    ) -> impl std::future::Future<Output = io::Result<()>> + Send;
    fn try_op<R>(
        &self,
        interest: tokio::io::Interest,
        f: impl FnOnce() -> io::Result<R>,
    ) -> io::Result<R>;
}

macro_rules! splice_stream {
    ($t:ty) => {
        impl SpliceStream for $t {
            async fn wait(&self, interest: tokio::io::Interest) -> io::Result<()> {
                self.ready(interest).await.map(|_| ())
            }
            fn try_op<R>(
                &self,
                interest: tokio::io::Interest,
                f: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                self.try_io(interest, f)
            }
        }
    };
}
splice_stream!(tokio::net::TcpStream);
splice_stream!(tokio::net::UnixStream);

/// Async: move everything `from` sends to `to`, then shut `to`'s write side.
pub async fn pump<A: SpliceStream, B: SpliceStream>(from: &A, to: &B) -> io::Result<u64> {
    use tokio::io::Interest;
    let (pr, pw) = pipe(true)?;
    let (src, dst) = (from.as_raw_fd(), to.as_raw_fd());
    let mut total = 0u64;
    loop {
        let n = match from.try_op(Interest::READABLE, || {
            splice(src, pw.as_raw_fd(), CHUNK, true)
        }) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                from.wait(Interest::READABLE).await?;
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let mut left = n;
        while left > 0 {
            match to.try_op(Interest::WRITABLE, || {
                splice(pr.as_raw_fd(), dst, left, true)
            }) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    to.wait(Interest::WRITABLE).await?
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        total += n as u64;
    }
    shutdown_write(dst);
    Ok(total)
}

/// Both directions at once, until both ends have finished sending (or one fails).
pub async fn tunnel<A: SpliceStream, B: SpliceStream>(a: &A, b: &B) -> io::Result<(u64, u64)> {
    tokio::try_join!(pump(a, b), pump(b, a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn tunnels_both_ways_across_socket_kinds() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (ua, ub) = tokio::net::UnixStream::pair().unwrap();
        let mut tcp_client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (tcp_server, _) = l.accept().await.unwrap();
        // tunnel: tcp_server <-> ua ; ends: tcp_client and ub
        let t = tokio::spawn(async move { tunnel(&tcp_server, &ua).await });
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let expect = big.clone();
        let mut ub = ub;
        let w = tokio::spawn(async move {
            tcp_client.write_all(&big).await.unwrap();
            tcp_client.shutdown().await.unwrap();
            let mut back = Vec::new();
            tcp_client.read_to_end(&mut back).await.unwrap();
            back
        });
        let mut got = Vec::new();
        ub.read_to_end(&mut got).await.unwrap();
        assert_eq!(got.len(), expect.len());
        assert!(got == expect);
        ub.write_all(b"reply").await.unwrap();
        ub.shutdown().await.unwrap();
        assert_eq!(w.await.unwrap(), b"reply");
        let (ab, ba) = t.await.unwrap().unwrap();
        assert_eq!((ab, ba), (3_000_000, 5));
    }
}

//! Zero-copy tunnels on Linux: `splice(2)` through a pipe moves a tunnel's bytes socket to
//! socket inside the kernel, instead of copying each byte into the proxy and back out.
//! Async (tokio readiness), for the proxy's tunnels.
//!
//! Pipe size: a bigger pipe moves more per call and lets the kernel build bigger segments:
//! on a 2-CPU loopback the proxy spends ~0.31 CPU-s per GiB with 256 KiB pipes and ~0.23
//! with 1 MiB (`hack/bench-proxy.sh`). But a pipe's size is charged to its user's pipe
//! quota (`fs.pipe-user-pages-soft`, 64 MiB by default), which the proxy shares with the
//! sandboxed command (same uid): past it, every new pipe of that user gets one page. So a
//! direction starts with the default pipe (64 KiB) and grows to [`BIG_PIPE`] only once it
//! has carried [`GROW_AFTER`] bytes (a bulk transfer), and only while fewer than
//! [`MAX_BIG_PIPES`] big pipes exist in this process: at most 32 MiB of quota, half of the
//! default, however many tunnels are open.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The size a bulk direction's pipe grows to.
pub const BIG_PIPE: usize = 1024 * 1024;
/// Bytes a direction carries in the default pipe before it may grow.
pub const GROW_AFTER: u64 = 4 * 1024 * 1024;
/// Big pipes at once in this process.
pub const MAX_BIG_PIPES: usize = 32;
/// Bytes asked of one `splice` call at most with the default pipe.
const DEFAULT_CHUNK: usize = 64 * 1024;

static BIG_PIPES: AtomicUsize = AtomicUsize::new(0);

/// A pipe (read end, write end), close-on-exec, non-blocking; returns its buffer size
/// with the ends and gives back its share of the big-pipe budget when dropped.
struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    size: usize,
    big: bool,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: F_GETPIPE_SZ on a pipe we own.
        let size = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_GETPIPE_SZ) };
        let size = if size > 0 {
            size as usize
        } else {
            DEFAULT_CHUNK
        };
        Ok(Pipe {
            r,
            w,
            size: size.min(DEFAULT_CHUNK),
            big: false,
        })
    }

    /// Grow to [`BIG_PIPE`] if the budget allows (call only while the pipe is empty).
    /// Refused (the user's quota, `fs.pipe-max-size`): stays as it is.
    fn grow(&mut self) {
        if self.big
            || BIG_PIPES
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < MAX_BIG_PIPES).then_some(n + 1)
                })
                .is_err()
        {
            return;
        }
        self.big = true;
        // SAFETY: F_SETPIPE_SZ on a pipe we own.
        let got = unsafe {
            libc::fcntl(
                self.w.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                BIG_PIPE as libc::c_int,
            )
        };
        if got > 0 {
            self.size = got as usize;
        }
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        if self.big {
            BIG_PIPES.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Big pipes in use now (for tests).
pub fn big_pipes() -> usize {
    BIG_PIPES.load(Ordering::Acquire)
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
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

/// When a tunnel last moved bytes, in milliseconds since it started.
struct Activity {
    start: std::time::Instant,
    last_ms: std::sync::atomic::AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: std::time::Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
    fn touch(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }
    fn idle_for(&self) -> std::time::Duration {
        let last = std::time::Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }
}

/// Async: move everything `from` sends to `to`, then shut `to`'s write side.
pub async fn pump<A: SpliceStream, B: SpliceStream>(from: &A, to: &B) -> io::Result<u64> {
    pump_noting(from, to, &Activity::new()).await
}

async fn pump_noting<A: SpliceStream, B: SpliceStream>(
    from: &A,
    to: &B,
    activity: &Activity,
) -> io::Result<u64> {
    use tokio::io::Interest;
    let mut pipe = Pipe::new()?;
    let (src, dst) = (from.as_raw_fd(), to.as_raw_fd());
    let mut total = 0u64;
    loop {
        if total >= GROW_AFTER {
            pipe.grow();
        }
        let (pr, pw, size) = (pipe.r.as_raw_fd(), pipe.w.as_raw_fd(), pipe.size);
        let n = match from.try_op(Interest::READABLE, || splice(src, pw, size)) {
            Ok(0) => break,
            Ok(n) => {
                activity.touch();
                n
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                from.wait(Interest::READABLE).await?;
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let mut left = n;
        while left > 0 {
            match to.try_op(Interest::WRITABLE, || splice(pr, dst, left)) {
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

/// Both directions at once, until both ends have finished sending (or one fails), or
/// until no byte has moved either way for `idle` (an error of kind `TimedOut`; the caller
/// then drops, and so closes, both sockets).
pub async fn tunnel<A: SpliceStream, B: SpliceStream>(
    a: &A,
    b: &B,
    idle: Option<std::time::Duration>,
) -> io::Result<(u64, u64)> {
    let activity = Activity::new();
    let both =
        async { tokio::try_join!(pump_noting(a, b, &activity), pump_noting(b, a, &activity)) };
    let Some(limit) = idle else {
        return both.await;
    };
    tokio::pin!(both);
    loop {
        let quiet = activity.idle_for();
        if quiet >= limit {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("tunnel idle for {} s", limit.as_secs()),
            ));
        }
        tokio::select! {
            r = &mut both => return r,
            _ = tokio::time::sleep(limit - quiet) => {}
        }
    }
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
        let t = tokio::spawn(async move { tunnel(&tcp_server, &ua, None).await });
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

    /// A bulk direction grows its pipe; big pipes are capped per process and given back.
    /// (One test for both: the budget is process-wide.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bulk_grows_the_pipe_within_the_budget() {
        let (a, mut a2) = tokio::net::UnixStream::pair().unwrap();
        let (b, mut b2) = tokio::net::UnixStream::pair().unwrap();
        let n = (GROW_AFTER * 3) as usize;
        let big: Vec<u8> = (0..n as u32).map(|i| (i % 253) as u8).collect();
        let expect = big.clone();
        let t = tokio::spawn(async move { pump(&a, &b).await });
        let w = tokio::spawn(async move {
            a2.write_all(&big).await.unwrap();
            a2.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        b2.read_to_end(&mut got).await.unwrap();
        w.await.unwrap();
        assert!(got == expect);
        assert_eq!(t.await.unwrap().unwrap(), n as u64);
        assert_eq!(big_pipes(), 0, "budget given back");

        let mut pipes: Vec<Pipe> = (0..MAX_BIG_PIPES + 5)
            .map(|_| Pipe::new().unwrap())
            .collect();
        for p in &mut pipes {
            p.grow();
        }
        assert_eq!(pipes.iter().filter(|p| p.big).count(), MAX_BIG_PIPES);
        assert_eq!(big_pipes(), MAX_BIG_PIPES);
        assert!(pipes
            .iter()
            .filter(|p| !p.big)
            .all(|p| p.size <= DEFAULT_CHUNK));
        drop(pipes);
        assert_eq!(big_pipes(), 0);
    }

    #[tokio::test]
    async fn an_idle_tunnel_is_closed_and_a_busy_one_is_not() {
        let (a, mut a2) = tokio::net::UnixStream::pair().unwrap();
        let (b, mut b2) = tokio::net::UnixStream::pair().unwrap();
        let idle = std::time::Duration::from_secs(2);
        let t = tokio::spawn(async move { tunnel(&a, &b, Some(idle)).await });
        // busy: a byte every 100 ms for 1.5 idle periods, each arrives
        for i in 0..30u8 {
            a2.write_all(&[i]).await.unwrap();
            let mut x = [0u8; 1];
            b2.read_exact(&mut x).await.unwrap();
            assert_eq!(x[0], i);
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(!t.is_finished(), "a busy tunnel was closed");
        // then quiet: the tunnel ends with TimedOut and both ends see the close
        let e = tokio::time::timeout(std::time::Duration::from_secs(30), t)
            .await
            .expect("idle tunnel not closed")
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let mut rest = Vec::new();
        b2.read_to_end(&mut rest).await.unwrap();
        a2.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }
}

//! A `connect` carried out for the task, on its own socket, to another address: how the
//! seccomp supervisor ([`super::notify`]) sends a connection the command makes to a remote
//! address to the proxy's relay inside the sandbox instead ([`super::hooks::Connects`]).
//!
//! The supervisor takes a copy of the task's socket (`pidfd_getfd`, after checking that
//! the notification is still pending, so the pid still names the task), binds it to
//! loopback when the task has not bound it (so its address is known before it connects),
//! says where it was meant to go, connects it to the relay and answers the task's call
//! with the result: `0`, `EINPROGRESS` for a non-blocking socket (the task then waits for
//! it as for any connect), or the error. The kernel never runs the task's own call.
//!
//! Nothing here is a wall: the sandbox's network namespace has loopback only, so a task
//! that races the supervisor (rewriting the address, closing or replacing the descriptor)
//! can at worst reach its own loopback or fail its own connect. What the proxy lets out
//! is decided by the proxy.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// How long the supervisor waits for the task's socket to connect to the relay (on
/// loopback: at once, unless the relay's queue is full).
const CONNECT_WAIT_MS: i32 = 10_000;

/// What became of a redirected connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Not carried out (not a TCP socket, an IPv6-only socket, the task gone...): the
    /// kernel runs the task's call.
    Continue,
    /// Carried out: answer the task's call with this errno (`0`: connected).
    Answer(i32),
}

fn owned(fd: libc::c_long) -> Option<OwnedFd> {
    // SAFETY: a descriptor the kernel just made for us.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn int_opt(fd: RawFd, level: libc::c_int, name: libc::c_int) -> Option<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `addr` as a `sockaddr_in`/`sockaddr_in6` of `family` (an IPv4 address given to an
/// IPv6 socket as its mapped form).
fn sockaddr(addr: SocketAddr, family: i32) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    if family == libc::AF_INET6 {
        let ip = match addr.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        let sin6 = libc::sockaddr_in6 {
            sin6_family: libc::AF_INET6 as libc::sa_family_t,
            sin6_port: addr.port().to_be(),
            sin6_flowinfo: 0,
            sin6_addr: libc::in6_addr {
                s6_addr: ip.octets(),
            },
            sin6_scope_id: 0,
        };
        // SAFETY: sockaddr_storage is larger than sockaddr_in6 and suitably aligned.
        unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
        (
            ss,
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
        )
    } else {
        let IpAddr::V4(v4) = addr.ip().to_canonical() else {
            return (ss, 0);
        };
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(v4.octets()),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
        unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
        (
            ss,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    }
}

/// The local address of socket `fd` (IPv4-mapped addresses as IPv4).
fn local_addr(fd: RawFd) -> Option<SocketAddr> {
    // SAFETY: sockaddr_storage is plain data.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getsockname writes at most `len` bytes into `ss`.
    if unsafe {
        libc::getsockname(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    } != 0
    {
        return None;
    }
    match ss.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in.
            let sin: libc::sockaddr_in =
                unsafe { std::ptr::read((&ss as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6.
            let sin6: libc::sockaddr_in6 =
                unsafe { std::ptr::read((&ss as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr).to_canonical();
            Some(SocketAddr::new(ip, u16::from_be(sin6.sin6_port)))
        }
        _ => None,
    }
}

/// Connect socket `fd` to `to` (as `family`), waiting at most [`CONNECT_WAIT_MS`] when the
/// socket blocks: the errno the task's own call would have given (`0`: connected).
fn connect_bounded(fd: RawFd, to: SocketAddr, family: i32) -> i32 {
    let (ss, len) = sockaddr(to, family);
    if len == 0 {
        return libc::EAFNOSUPPORT;
    }
    // SAFETY: fcntl on a descriptor we own.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return errno();
    }
    let blocking = flags & libc::O_NONBLOCK == 0;
    // the file status flags are the task's too: a blocking socket is made non-blocking
    // only while the supervisor waits (bounded), and given back as it was
    // SAFETY: as above.
    if blocking && unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } != 0 {
        return errno();
    }
    // SAFETY: `ss` holds a sockaddr of `len` bytes.
    let r = unsafe { libc::connect(fd, (&ss as *const libc::sockaddr_storage).cast(), len) };
    let mut e = if r == 0 { 0 } else { errno() };
    if blocking && e == libc::EINPROGRESS {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one pollfd of ours.
        e = match unsafe { libc::poll(&mut p, 1, CONNECT_WAIT_MS) } {
            1 => int_opt(fd, libc::SOL_SOCKET, libc::SO_ERROR).unwrap_or(libc::EIO),
            0 => libc::ETIMEDOUT,
            _ => errno(),
        };
        if e == 0 {
            // once more, as a blocking connect leaves it: connected, not connecting (a
            // later connect then says EISCONN)
            // SAFETY: as above.
            unsafe { libc::connect(fd, (&ss as *const libc::sockaddr_storage).cast(), len) };
        }
    }
    if blocking {
        // SAFETY: as above.
        unsafe { libc::fcntl(fd, libc::F_SETFL, flags) };
    }
    e
}

/// Carry out a `connect` of task `pid` on its descriptor `fd` to `to` (inside the
/// sandbox) instead of where it asked; `valid` says whether the notification is still
/// pending (checked once the task's pidfd is open), `tell` is given the socket's local
/// address (inside) before it connects. A socket that is connecting or connected already
/// is only connected again (the kernel then answers `EALREADY` or `EISCONN`), untold.
pub fn connect(
    pid: u32,
    fd: i32,
    to: SocketAddr,
    valid: impl FnOnce() -> bool,
    tell: impl FnOnce(SocketAddr),
) -> Outcome {
    let Some(pidfd) = task_pidfd(pid) else {
        return Outcome::Continue;
    };
    if !valid() {
        return Outcome::Continue;
    }
    // SAFETY: as above.
    let Some(sock) =
        owned(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) })
    else {
        return Outcome::Continue;
    };
    let s = sock.as_raw_fd();
    let family = int_opt(s, libc::SOL_SOCKET, libc::SO_DOMAIN);
    if int_opt(s, libc::SOL_SOCKET, libc::SO_TYPE) != Some(libc::SOCK_STREAM)
        || int_opt(s, libc::SOL_SOCKET, libc::SO_PROTOCOL) != Some(libc::IPPROTO_TCP)
        || !matches!(family, Some(libc::AF_INET | libc::AF_INET6))
    {
        return Outcome::Continue;
    }
    let family = family.unwrap_or(libc::AF_INET);
    if family == libc::AF_INET6 && int_opt(s, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) != Some(0) {
        // an IPv6-only socket cannot reach the relay's IPv4 loopback address
        return Outcome::Continue;
    }
    // a fresh socket (TCP_CLOSE) is bound and told; one on its way already is not
    const TCP_CLOSE: u8 = 7;
    let fresh = tcp_state(s) == Some(TCP_CLOSE);
    if fresh {
        let mut local = match local_addr(s) {
            Some(l) => l,
            None => return Outcome::Continue,
        };
        if local.port() == 0 {
            let (ss, len) = sockaddr(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0), family);
            // SAFETY: `ss` holds a sockaddr of `len` bytes.
            if unsafe { libc::bind(s, (&ss as *const libc::sockaddr_storage).cast(), len) } != 0 {
                return Outcome::Answer(errno());
            }
            local = match local_addr(s) {
                Some(l) => l,
                None => return Outcome::Continue,
            };
        }
        if local.ip().is_unspecified() {
            // bound to a port on every address: the connection comes from loopback
            local.set_ip(IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        tell(local);
    }
    Outcome::Answer(connect_bounded(s, to, family))
}

/// A pidfd of the task `tid` (the thread that made the call): of that thread itself
/// (`PIDFD_THREAD`, Linux 6.9), else of its thread group's leader, whose descriptor table
/// the thread shares (read from `/proc/<tid>/status`).
fn task_pidfd(tid: u32) -> Option<OwnedFd> {
    const PIDFD_THREAD: libc::c_long = libc::O_EXCL as libc::c_long;
    // SAFETY: plain syscalls; every descriptor returned is owned at once.
    if let Some(fd) =
        owned(unsafe { libc::syscall(libc::SYS_pidfd_open, tid as libc::pid_t, PIDFD_THREAD) })
    {
        return Some(fd);
    }
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let tgid: libc::pid_t = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: as above.
    owned(unsafe { libc::syscall(libc::SYS_pidfd_open, tgid, 0) })
}

/// The TCP state of socket `fd` (`TCP_INFO`'s first byte).
fn tcp_state(fd: RawFd) -> Option<u8> {
    // SAFETY: tcp_info is plain data.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (r == 0 && len >= 1).then_some(info.tcpi_state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// The "task" is this process (its own pid, its own descriptor): a blocking socket and
    /// a non-blocking one are both connected to the listener in place of an address
    /// nobody listens on, told from the address they were bound to.
    #[test]
    fn connects_the_tasks_own_socket_elsewhere() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        let pid = std::process::id();
        for (nonblocking, family) in [
            (false, libc::AF_INET),
            (true, libc::AF_INET),
            (false, libc::AF_INET6),
        ] {
            // SAFETY: a new socket, owned at once.
            let raw = unsafe {
                libc::socket(
                    family,
                    libc::SOCK_STREAM
                        | libc::SOCK_CLOEXEC
                        | if nonblocking { libc::SOCK_NONBLOCK } else { 0 },
                    0,
                )
            };
            let sock = owned(raw as libc::c_long).unwrap();
            let mut told = None;
            let r = connect(pid, sock.as_raw_fd(), to, || true, |a| told = Some(a));
            let (mut peer, from) = l.accept().unwrap();
            assert_eq!(told, Some(from), "{family} {nonblocking}");
            if nonblocking {
                assert!(
                    matches!(r, Outcome::Answer(0) | Outcome::Answer(libc::EINPROGRESS)),
                    "{r:?}"
                );
            } else {
                assert_eq!(r, Outcome::Answer(0));
            }
            // still the task's socket, flags as they were
            // SAFETY: fcntl on our descriptor.
            let fl = unsafe { libc::fcntl(sock.as_raw_fd(), libc::F_GETFL) };
            assert_eq!(fl & libc::O_NONBLOCK != 0, nonblocking);
            let mut s = TcpStream::from(sock);
            s.set_nonblocking(false).unwrap();
            s.write_all(b"hi").unwrap();
            let mut b = [0u8; 2];
            peer.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"hi");
            // connected already: connected again, untold
            let mut again = false;
            let r = connect(pid, s.as_raw_fd(), to, || true, |_| again = true);
            if nonblocking {
                // the task's own check of a connect it began without blocking
                assert!(
                    matches!(r, Outcome::Answer(0) | Outcome::Answer(libc::EISCONN)),
                    "{r:?}"
                );
            } else {
                assert_eq!(r, Outcome::Answer(libc::EISCONN), "{family}");
            }
            assert!(!again);
        }
    }

    /// The call made by a thread that is not its process's first (the pid a seccomp
    /// notification gives is the thread's).
    #[test]
    fn a_threads_call_is_carried_out_too() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        let c = std::net::TcpStream::connect(to).unwrap();
        drop(c);
        let _ = l.accept().unwrap();
        // SAFETY: a new socket, owned at once.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        let sock = owned(raw as libc::c_long).unwrap();
        let fd = sock.as_raw_fd();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            // SAFETY: gettid cannot fail.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = done_rx.recv();
        });
        let live = rx.recv().unwrap();
        assert_ne!(live, std::process::id());
        let mut told = None;
        assert_eq!(
            connect(live, fd, to, || true, |a| told = Some(a)),
            Outcome::Answer(0)
        );
        assert!(told.is_some());
        let _ = l.accept().unwrap();
        done_tx.send(()).unwrap();
        h.join().unwrap();
    }

    #[test]
    fn what_is_not_a_tcp_socket_goes_on() {
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let pid = std::process::id();
        assert_eq!(
            connect(pid, u.as_raw_fd(), to, || true, |_| panic!()),
            Outcome::Continue
        );
        // no such descriptor
        assert_eq!(
            connect(pid, 100_000, to, || true, |_| panic!()),
            Outcome::Continue
        );
        // the notification gone: nothing is done
        let t = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(t.local_addr().unwrap()).unwrap();
        assert_eq!(
            connect(pid, c.as_raw_fd(), to, || false, |_| panic!()),
            Outcome::Continue
        );
    }
}

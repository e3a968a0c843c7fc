//! Handing accepted client sockets from the relay inside the sandbox to the host proxy:
//! a `SOCK_SEQPACKET` socketpair (the *channel*) made on the host before the sandbox is
//! cloned; the relay's end is inherited by the sandbox's init (no socket file, no mount),
//! the proxy keeps the other. For each client the relay accepts on the sandbox's loopback
//! it sends one message: one byte and the client socket (`SCM_RIGHTS`). The proxy then
//! reads and writes that socket itself, so no byte of a tunnel passes through the relay.
//!
//! Before any client, init sends one socket of another kind the same way (byte `d`): a
//! `NETLINK_SOCK_DIAG` socket of the sandbox's namespace, which the proxy keeps (the first
//! only, checked) to find who made a connection it refuses (the `owner` module); and (byte
//! `n`) the UDP socket it bound to `127.0.0.1:53` there, on which the proxy answers the
//! sandbox's name queries (the `dns` module; the first only, checked by [`check_dns`]).
//!
//! The channel's other end is in the sandbox, so whatever arrives on it is untrusted. The
//! proxy accepts exactly one descriptor per message (more are dropped by the kernel, which
//! closes them), receives it close-on-exec, and keeps it only if [`check_client`] finds a
//! connected TCP stream socket (`SO_TYPE` stream, `SO_DOMAIN` inet/inet6, `SO_PROTOCOL`
//! TCP, not listening, with a peer). Everything else (files, pipes, unix, UDP, raw, netlink
//! or listening sockets) is closed unused. A kept socket is only ever read, written, shut
//! down and closed, as a client connection always was; setting it non-blocking changes the
//! sandbox's own open file description, nothing on the host.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Why a descriptor passed by the relay was not taken as a client.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PassedFdError {
    #[error("passed descriptor is not a socket ({0})")]
    NotSocket(String),
    #[error("passed socket is not a stream socket (SO_TYPE {0})")]
    NotStream(i32),
    #[error("passed socket is not an IPv4/IPv6 socket (SO_DOMAIN {0})")]
    NotInet(i32),
    #[error("passed socket is not TCP (SO_PROTOCOL {0})")]
    NotTcp(i32),
    #[error("passed socket is a listening socket")]
    Listening,
    #[error("passed socket is not connected ({0})")]
    NotConnected(String),
    #[error("passed socket cannot be made non-blocking ({0})")]
    Nonblocking(String),
}

/// The channel: (proxy end, relay end), both close-on-exec.
pub fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded: both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Send `client` over `chan` (blocking; waits while the proxy's queue is full).
pub fn send(chan: BorrowedFd<'_>, client: BorrowedFd<'_>) -> io::Result<()> {
    send_tagged(chan, client, CLIENT)
}

/// The byte of a message carrying a client.
const CLIENT: u8 = b'c';
/// The byte of init's first message: a socket to look up the sandbox's sockets with
/// (`NETLINK_SOCK_DIAG`, the `owner` module).
const DIAG: u8 = b'd';

/// Send init's socket diagnostics socket over `chan` (first, before any client).
pub fn send_diag(chan: BorrowedFd<'_>, diag: BorrowedFd<'_>) -> io::Result<()> {
    send_tagged(chan, diag, DIAG)
}

/// The byte of init's message carrying the name server's socket.
const DNS: u8 = b'n';

/// Send the name server's UDP socket over `chan` (before any client).
pub fn send_dns(chan: BorrowedFd<'_>, sock: BorrowedFd<'_>) -> io::Result<()> {
    send_tagged(chan, sock, DNS)
}

/// Where the name server listens inside the sandbox.
pub const DNS_ADDR: std::net::SocketAddr = std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    53,
));

/// Bind the name server's socket (in the sandbox's network namespace: init, which may
/// bind port 53 there).
pub fn bind_dns() -> io::Result<std::net::UdpSocket> {
    std::net::UdpSocket::bind(DNS_ADDR)
}

/// Take `fd` as the name server's socket only if it is a UDP socket bound to
/// [`DNS_ADDR`]; returns it non-blocking.
pub fn check_dns(fd: OwnedFd) -> Result<std::net::UdpSocket, PassedFdError> {
    let b = fd.as_fd();
    let ty = int_opt(b, libc::SOL_SOCKET, libc::SO_TYPE)
        .map_err(|e| PassedFdError::NotSocket(e.to_string()))?;
    if ty != libc::SOCK_DGRAM {
        return Err(PassedFdError::NotStream(ty));
    }
    let proto = int_opt(b, libc::SOL_SOCKET, libc::SO_PROTOCOL)
        .map_err(|e| PassedFdError::NotSocket(e.to_string()))?;
    if proto != libc::IPPROTO_UDP {
        return Err(PassedFdError::NotTcp(proto));
    }
    let s = std::net::UdpSocket::from(fd);
    match s.local_addr() {
        Ok(a) if a == DNS_ADDR => {}
        other => {
            return Err(PassedFdError::NotConnected(format!(
                "a name server's socket bound to {other:?}, not {DNS_ADDR}"
            )))
        }
    }
    s.set_nonblocking(true)
        .map_err(|e| PassedFdError::Nonblocking(e.to_string()))?;
    Ok(s)
}

fn send_tagged(chan: BorrowedFd<'_>, fd: BorrowedFd<'_>, tag: u8) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds = [fd.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let tag = [tag];
    let iov = [io::IoSlice::new(&tag)];
    loop {
        match sendmsg::<()>(chan.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// One message read from the channel.
#[derive(Debug)]
pub enum Received {
    /// The relay's end is closed.
    Closed,
    /// A descriptor (not yet checked: see [`check_client`]).
    Fd(OwnedFd),
    /// A descriptor sent as init's diagnostics socket (not yet checked either:
    /// `owner::is_diag_socket`).
    Diag(OwnedFd),
    /// A descriptor sent as the name server's socket (not yet checked: [`check_dns`]).
    Dns(OwnedFd),
    /// A message without a descriptor (or with its descriptors cut off): ignored.
    Nothing,
}

/// Read one message from the channel without blocking (`WouldBlock` when there is none).
/// Every descriptor that arrives is owned at once, so none can leak.
pub fn recv(chan: BorrowedFd<'_>) -> io::Result<Received> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = loop {
        match recvmsg::<()>(
            chan.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => break m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let mut fds: Vec<OwnedFd> = Vec::new();
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: the kernel just installed these descriptors for us; nothing
                // else owns them.
                fds.extend(
                    raw.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
    }
    let bytes = msg.bytes;
    let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
    // (a zero-length message without a descriptor reads the same: the relay never sends
    // one, so a sender that does only ends its own channel)
    if bytes == 0 && fds.is_empty() {
        return Ok(Received::Closed);
    }
    if truncated || fds.len() != 1 {
        // dropping `fds` closes whatever came
        tracing::warn!(
            "proxy: the relay sent a message with {} descriptor(s){}; ignored",
            fds.len(),
            if truncated { " (cut off)" } else { "" }
        );
        return Ok(Received::Nothing);
    }
    Ok(match fds.pop() {
        Some(fd) if byte[0] == DIAG => Received::Diag(fd),
        Some(fd) if byte[0] == DNS => Received::Dns(fd),
        Some(fd) => Received::Fd(fd),
        None => Received::Nothing,
    })
}

pub(super) fn int_opt(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`, a c_int we own.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// Take `fd` as a client connection only if it is a connected TCP socket (see the module
/// docs); returns it as a non-blocking std stream, with its peer's address.
pub fn check_client(
    fd: OwnedFd,
) -> Result<(std::net::TcpStream, std::net::SocketAddr), PassedFdError> {
    let b = fd.as_fd();
    let ty = int_opt(b, libc::SOL_SOCKET, libc::SO_TYPE)
        .map_err(|e| PassedFdError::NotSocket(e.to_string()))?;
    if ty != libc::SOCK_STREAM {
        return Err(PassedFdError::NotStream(ty));
    }
    let domain = int_opt(b, libc::SOL_SOCKET, libc::SO_DOMAIN)
        .map_err(|e| PassedFdError::NotSocket(e.to_string()))?;
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(PassedFdError::NotInet(domain));
    }
    let proto = int_opt(b, libc::SOL_SOCKET, libc::SO_PROTOCOL)
        .map_err(|e| PassedFdError::NotSocket(e.to_string()))?;
    if proto != libc::IPPROTO_TCP {
        return Err(PassedFdError::NotTcp(proto));
    }
    let listening = int_opt(b, libc::SOL_SOCKET, libc::SO_ACCEPTCONN)
        .map_err(|e| PassedFdError::NotSocket(e.to_string()))?;
    if listening != 0 {
        return Err(PassedFdError::Listening);
    }
    let s = std::net::TcpStream::from(fd);
    let peer = s
        .peer_addr()
        .map_err(|e| PassedFdError::NotConnected(e.to_string()))?;
    s.set_nonblocking(true)
        .map_err(|e| PassedFdError::Nonblocking(e.to_string()))?;
    Ok((s, peer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream, UdpSocket};
    use std::os::unix::net::UnixStream;

    fn pass(fd: BorrowedFd<'_>) -> Result<std::net::TcpStream, PassedFdError> {
        let (p, r) = channel().unwrap();
        send(r.as_fd(), fd).unwrap();
        match recv(p.as_fd()).unwrap() {
            Received::Fd(f) => check_client(f).map(|(s, _)| s),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_connected_tcp_socket_is_taken_and_works() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (accepted, _) = l.accept().unwrap();
        let got = pass(accepted.as_fd()).unwrap();
        drop(accepted);
        got.set_nonblocking(false).unwrap();
        (&got).write_all(b"via fd").unwrap();
        let mut b = [0u8; 6];
        c.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"via fd");
        // received close-on-exec
        // SAFETY: F_GETFD on a descriptor we own.
        let flags = unsafe { libc::fcntl(got.as_raw_fd(), libc::F_GETFD) };
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
    }

    #[test]
    fn everything_else_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(pass(l.as_fd()).unwrap_err(), PassedFdError::Listening);
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(matches!(
            pass(u.as_fd()).unwrap_err(),
            PassedFdError::NotStream(_)
        ));
        let (a, _b) = UnixStream::pair().unwrap();
        assert!(matches!(
            pass(a.as_fd()).unwrap_err(),
            PassedFdError::NotInet(_)
        ));
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(matches!(
            pass(f.as_fd()).unwrap_err(),
            PassedFdError::NotSocket(_)
        ));
        let (pr, _pw) = nix::unistd::pipe().unwrap();
        assert!(matches!(
            pass(pr.as_fd()).unwrap_err(),
            PassedFdError::NotSocket(_)
        ));
        // a TCP socket that was never connected
        // SAFETY: plain socket(2); the descriptor is owned at once.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        assert!(raw >= 0);
        // SAFETY: just created, owned by nobody else.
        let unconnected = unsafe { OwnedFd::from_raw_fd(raw) };
        assert!(matches!(
            pass(unconnected.as_fd()).unwrap_err(),
            PassedFdError::NotConnected(_)
        ));
    }

    #[test]
    fn messages_without_exactly_one_fd_are_ignored_and_close_is_seen() {
        let (p, r) = channel().unwrap();
        // no descriptor
        nix::sys::socket::send(r.as_raw_fd(), b"x", nix::sys::socket::MsgFlags::empty()).unwrap();
        assert!(matches!(recv(p.as_fd()).unwrap(), Received::Nothing));
        // two descriptors in one message: neither is kept (both closed)
        let (a, _a2) = UnixStream::pair().unwrap();
        let (b, _b2) = UnixStream::pair().unwrap();
        let fds = [a.as_raw_fd(), b.as_raw_fd()];
        let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
        nix::sys::socket::sendmsg::<()>(
            r.as_raw_fd(),
            &[io::IoSlice::new(b"c")],
            &cmsg,
            nix::sys::socket::MsgFlags::empty(),
            None,
        )
        .unwrap();
        assert!(matches!(recv(p.as_fd()).unwrap(), Received::Nothing));
        // nothing queued: would block
        assert_eq!(
            recv(p.as_fd()).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        drop(r);
        assert!(matches!(recv(p.as_fd()).unwrap(), Received::Closed));
    }
}

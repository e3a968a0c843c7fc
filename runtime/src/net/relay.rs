//! The relay inside the sandbox: listens on `127.0.0.1:<port>` in the sandbox's network
//! namespace and hands every accepted connection, as a descriptor, to the host-side proxy
//! over the [channel](super::handoff) it inherited from `capsule`. It decides nothing and
//! carries no bytes: the proxy reads and writes the client socket itself.
//!
//! Plain std, one thread, no tokio: it runs in the sandbox's init process after `fork`,
//! where no runtime exists. [`bind`] first (so the port is listening before the command
//! starts), then [`serve_blocking`] — or [`spawn`], which does both and serves on a thread.
//! When the proxy cannot take a connection (its end is gone) the relay answers `502` itself.
//! [`spawn_all`] listens on several addresses (the proxy port and the allow-listed host
//! services reached at their own address), one thread each, all handing over on one
//! channel: the proxy tells them apart by the socket's local address.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::thread;

const STACK: usize = 64 * 1024;

/// Bind the relay's listening socket (its queue holds a burst: [`super::listen`]).
pub fn bind(listen: SocketAddr) -> io::Result<TcpListener> {
    super::listen::tcp(listen)
}

/// Bind `listen` now, then serve on a background thread, handing connections to the proxy
/// over `channel` (the relay's end). Returns the bound address (useful with port 0).
pub fn spawn(listen: SocketAddr, channel: OwnedFd) -> io::Result<SocketAddr> {
    let l = bind(listen)?;
    let addr = l.local_addr()?;
    // the relay's thread never takes a signal meant for the process (init forwards them)
    let old = block_all_signals();
    let r = thread::Builder::new()
        .name("capsule-relay".into())
        .stack_size(STACK)
        .spawn(move || {
            if let Err(e) = serve_blocking(l, channel) {
                tracing::warn!("relay stopped: {e}");
            }
        });
    restore_signals(&old);
    r?;
    Ok(addr)
}

/// [`spawn`] for every address of `listens`, all bound before any thread starts (a
/// failure binds nothing more and names the address), handing over on one `channel`.
pub fn spawn_all(listens: &[SocketAddr], channel: OwnedFd) -> io::Result<Vec<SocketAddr>> {
    let mut bound = Vec::with_capacity(listens.len());
    for a in listens {
        let l = bind(*a).map_err(|e| io::Error::new(e.kind(), format!("{a}: {e}")))?;
        bound.push(l);
    }
    let channel = std::sync::Arc::new(channel);
    let mut addrs = Vec::with_capacity(bound.len());
    let old = block_all_signals();
    let mut result = Ok(());
    for l in bound {
        addrs.push(l.local_addr()?);
        let ch = channel.clone();
        let r = thread::Builder::new()
            .name("capsule-relay".into())
            .stack_size(STACK)
            .spawn(move || {
                if let Err(e) = serve_blocking(l, ch) {
                    tracing::warn!("relay stopped: {e}");
                }
            });
        if let Err(e) = r {
            result = Err(e);
            break;
        }
    }
    restore_signals(&old);
    result.map(|_| addrs)
}

pub(super) fn block_all_signals() -> libc::sigset_t {
    // SAFETY: plain signal-mask calls on sets we own.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        old
    }
}

pub(super) fn restore_signals(old: &libc::sigset_t) {
    // SAFETY: restoring a mask pthread_sigmask gave us.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
}

/// Accept connections on `listener` and hand each to the proxy over `channel`.
pub fn serve_blocking(listener: TcpListener, channel: impl AsFd) -> io::Result<()> {
    let mut consecutive_errors = 0u32;
    loop {
        let client = match listener.accept() {
            Ok((c, _)) => {
                consecutive_errors = 0;
                c
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                consecutive_errors += 1;
                if consecutive_errors > 1000 {
                    return Err(e);
                }
                thread::sleep(std::time::Duration::from_millis(20));
                continue;
            }
        };
        // our copy closes when `client` drops; the proxy holds its own
        if let Err(e) = super::handoff::send(channel.as_fd(), client.as_fd()) {
            unreachable_proxy(&client, &e);
        }
    }
}

/// Say why in HTTP terms: the client is an HTTP proxy client.
fn unreachable_proxy(client: &TcpStream, e: &io::Error) {
    let body = format!("capsule relay: the network proxy is not reachable: {e}\n");
    let _ = client.set_write_timeout(Some(std::time::Duration::from_secs(1)));
    let _ = (&*client).write_all(&super::http::simple_response(502, "Bad Gateway", &body));
}

#[cfg(test)]
mod tests {
    use super::super::handoff::{self, Received};
    use super::*;
    use std::io::Read;
    use std::net::Shutdown;

    #[test]
    fn hands_the_client_socket_itself_to_the_proxy_end() {
        let (proxy_end, relay_end) = handoff::channel().unwrap();
        let addr = spawn("127.0.0.1:0".parse().unwrap(), relay_end).unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"hello relay").unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        // the proxy side: wait for the descriptor, then talk to the client directly
        let fd = loop {
            match handoff::recv(proxy_end.as_fd()) {
                Ok(Received::Fd(fd)) => break fd,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    thread::sleep(std::time::Duration::from_millis(5))
                }
                other => panic!("{other:?}"),
            }
        };
        let (s, peer) = handoff::check_client(fd).unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        s.set_nonblocking(false).unwrap();
        assert_eq!(s.peer_addr().unwrap(), c.local_addr().unwrap());
        let mut got = Vec::new();
        (&s).read_to_end(&mut got).unwrap();
        got.reverse();
        (&s).write_all(&got).unwrap();
        drop(s);
        let mut back = String::new();
        c.read_to_string(&mut back).unwrap();
        assert_eq!(back, "yaler olleh");
    }

    #[test]
    fn missing_proxy_is_a_502() {
        let (proxy_end, relay_end) = handoff::channel().unwrap();
        drop(proxy_end);
        let addr = spawn("127.0.0.1:0".parse().unwrap(), relay_end).unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        let mut back = String::new();
        c.read_to_string(&mut back).unwrap();
        assert!(back.starts_with("HTTP/1.1 502"), "{back}");
    }
}

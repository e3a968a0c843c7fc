//! Loopback TCP listeners sized for bursts. std (and tokio's `bind`, which goes through
//! it) listens with a backlog of 128; a task that opens a few hundred connections at once
//! (a parallel build fetching its dependencies, a test suite) overflows that queue, and
//! the kernel then drops connections or, once SYN cookies are involved, resets them.
//! [`tcp`] listens with [`BACKLOG`] instead (capped by `net.core.somaxconn`).

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;

/// Connections waiting to be accepted, at most.
pub const BACKLOG: libc::c_int = 4096;

/// Bind and listen on `addr` (as std does: `SO_REUSEADDR`, close-on-exec) with a backlog
/// of [`BACKLOG`].
pub fn tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    // listen(2) again on a listening socket only sets its backlog (Linux and the BSDs)
    // SAFETY: a valid socket descriptor we own.
    if unsafe { libc::listen(l.as_raw_fd(), BACKLOG) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_larger_than_std_backlog_waits_in_the_queue() {
        let l = tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        // nothing accepts yet: 300 connections are all queued, none refused or dropped
        // (std's backlog of 128 drops the 130th SYN: that connect times out)
        let mut conns = Vec::new();
        for k in 0..300 {
            match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                Ok(c) => conns.push(c),
                Err(e) => panic!("connection {k}: {e}"),
            }
        }
        l.set_nonblocking(true).unwrap();
        let mut accepted = 0;
        while l.accept().is_ok() {
            accepted += 1;
        }
        assert_eq!(accepted, 300, "queued connections lost");
    }
}

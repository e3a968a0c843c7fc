//! The relay inside the sandbox: listens on `127.0.0.1:<port>` in the sandbox's network
//! namespace and carries each connection, byte for byte, to the host-side proxy's unix
//! socket (bind-mounted into the sandbox). It decides nothing; the proxy does.
//!
//! Plain std threads, no tokio: it runs in the sandbox's init process after `fork`, where
//! no runtime exists. [`bind`] first (so the port is listening before the command starts),
//! then [`serve_blocking`] — or [`spawn`], which does both and serves on a thread.

#[cfg(not(target_os = "linux"))]
use std::io::Read;
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::thread;

#[cfg(not(target_os = "linux"))]
const BUF: usize = 64 * 1024;
const STACK: usize = 64 * 1024;

/// Bind the relay's listening socket.
pub fn bind(listen: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(listen)
}

/// Bind `listen` and serve forever (until accepting fails for good).
pub fn run_blocking(listen: SocketAddr, unix_path: &Path) -> io::Result<()> {
    serve_blocking(bind(listen)?, unix_path)
}

/// Bind `listen` now, then serve on a background thread. Returns the bound address
/// (useful with port 0).
pub fn spawn(listen: SocketAddr, unix_path: &Path) -> io::Result<SocketAddr> {
    let l = bind(listen)?;
    let addr = l.local_addr()?;
    let path = unix_path.to_path_buf();
    // the relay's threads never take a signal meant for the process (init forwards them)
    let old = block_all_signals();
    let r = thread::Builder::new()
        .name("capsule-relay".into())
        .spawn(move || {
            if let Err(e) = serve_blocking(l, &path) {
                tracing::warn!("relay stopped: {e}");
            }
        });
    restore_signals(&old);
    r?;
    Ok(addr)
}

fn block_all_signals() -> libc::sigset_t {
    // SAFETY: plain signal-mask calls on sets we own.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        old
    }
}

fn restore_signals(old: &libc::sigset_t) {
    // SAFETY: restoring a mask pthread_sigmask gave us.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
}

/// Serve connections accepted on `listener`, each on its own pair of threads.
pub fn serve_blocking(listener: TcpListener, unix_path: &Path) -> io::Result<()> {
    let path: PathBuf = unix_path.to_path_buf();
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
        let path = path.clone();
        let r = thread::Builder::new()
            .name("capsule-relay-conn".into())
            .stack_size(STACK)
            .spawn(move || relay_one(client, &path));
        if let Err(e) = r {
            tracing::warn!("relay: cannot start a thread: {e}");
        }
    }
}

fn relay_one(client: TcpStream, path: &Path) {
    let _ = client.set_nodelay(true);
    let upstream = match super::host::connect_unix(path) {
        Ok(u) => u,
        Err(e) => {
            // Say why in HTTP terms: the client is an HTTP proxy client.
            let body = format!("capsule relay: the network proxy is not reachable: {e}\n");
            let _ = (&client).write_all(&super::http::simple_response(502, "Bad Gateway", &body));
            return;
        }
    };
    let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let back = thread::Builder::new()
        .name("capsule-relay-back".into())
        .stack_size(STACK)
        .spawn(move || {
            if pump(&u2, &c2).is_err() {
                let _ = c2.shutdown(Shutdown::Both);
                let _ = u2.shutdown(Shutdown::Both);
            }
        });
    if pump(&client, &upstream).is_err() {
        let _ = client.shutdown(Shutdown::Both);
        let _ = upstream.shutdown(Shutdown::Both);
    }
    if let Ok(h) = back {
        let _ = h.join();
    }
}

/// Move everything `from` sends to `to`, then shut `to`'s write side: `splice` on Linux.
#[cfg(target_os = "linux")]
fn pump(from: &impl std::os::fd::AsRawFd, to: &impl std::os::fd::AsRawFd) -> io::Result<u64> {
    super::splice::pump_blocking(from, to)
}

/// Move everything `from` sends to `to`, then shut `to`'s write side.
#[cfg(not(target_os = "linux"))]
fn pump<F, T>(mut from: F, mut to: T) -> io::Result<u64>
where
    F: Read,
    T: Write + ShutdownWrite,
{
    let mut buf = vec![0u8; BUF];
    let mut total = 0;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        total += n as u64;
    }
    to.shutdown_write();
    Ok(total)
}

#[cfg(not(target_os = "linux"))]
trait ShutdownWrite {
    fn shutdown_write(&self);
}
#[cfg(not(target_os = "linux"))]
impl ShutdownWrite for &TcpStream {
    fn shutdown_write(&self) {
        let _ = TcpStream::shutdown(self, Shutdown::Write);
    }
}
#[cfg(not(target_os = "linux"))]
impl ShutdownWrite for &std::os::unix::net::UnixStream {
    fn shutdown_write(&self) {
        let _ = std::os::unix::net::UnixStream::shutdown(self, Shutdown::Write);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixListener;

    #[test]
    fn relays_both_directions_and_half_close() {
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("p.sock");
        let ul = UnixListener::bind(&sock).unwrap();
        // upstream: read everything, answer with it reversed
        let server = thread::spawn(move || {
            let (mut s, _) = ul.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got.reverse();
            s.write_all(&got).unwrap();
        });
        let addr = spawn("127.0.0.1:0".parse().unwrap(), &sock).unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"hello relay").unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut back = String::new();
        c.read_to_string(&mut back).unwrap();
        assert_eq!(back, "yaler olleh");
        server.join().unwrap();
    }

    #[test]
    fn missing_proxy_is_a_502() {
        let d = tempfile::tempdir().unwrap();
        let addr = spawn("127.0.0.1:0".parse().unwrap(), &d.path().join("none.sock")).unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        let mut back = String::new();
        c.read_to_string(&mut back).unwrap();
        assert!(back.starts_with("HTTP/1.1 502"), "{back}");
    }
}

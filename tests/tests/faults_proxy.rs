//! The allowlist proxy under slow clients (`capsule proxy`, the proxy `capsule exec` runs
//! in allowlist mode, on its own), as root and as the unprivileged user: while some
//! clients dribble their request head a byte a second, all the others get their CONNECT
//! tunnel to an allowed loopback server and a round trip through it, within a generous
//! bound. Loopback only.
//!
//! Size: 400 clients of which 40 are slow (a burst past the 128 connections std's listen
//! queue holds); `CAPSULE_FAULT_LONG=1` (set by `hack/faults.sh`) runs 1,000 of which 100
//! are slow.

use capsule_e2e::faults::long;
use capsule_e2e::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// All fast clients must be done within this long (generous: the machine may be busy).
const FAST_BOUND: Duration = Duration::from_secs(10);

/// Threads with small stacks (there are many).
fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new()
        .stack_size(128 << 10)
        .spawn(f)
        .expect("spawn thread")
}

/// A listener on 127.0.0.1 with a backlog for a burst of clients (std's is 128).
fn listen_loopback() -> TcpListener {
    use std::os::fd::FromRawFd;
    // SAFETY: a new socket, bound and listening, handed to std which then owns it.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket");
        let mut a: libc::sockaddr_in = std::mem::zeroed();
        a.sin_family = libc::AF_INET as libc::sa_family_t;
        a.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let r = libc::bind(
            fd,
            &a as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(r, 0, "bind 127.0.0.1:0");
        assert_eq!(libc::listen(fd, 4096), 0, "listen");
        TcpListener::from_raw_fd(fd)
    }
}

/// An echo server on 127.0.0.1; its port.
fn echo_server() -> u16 {
    let l = listen_loopback();
    let port = l.local_addr().unwrap().port();
    spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            spawn(move || {
                let mut buf = [0u8; 256];
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 || c.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// `capsule proxy` as `r`, allowing only the echo server; killed on drop.
struct ProxyProc(std::process::Child);

impl Drop for ProxyProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_proxy(r: &Runner, root: &std::path::Path, allow_port: u16) -> (ProxyProc, String) {
    let mut c = r.capsule(root);
    c.args(["proxy", "--listen", "127.0.0.1:0", "--allow"])
        .arg(format!("127.0.0.1:{allow_port}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().expect("spawn capsule proxy");
    let out = child.stdout.take().unwrap();
    let p = ProxyProc(child);
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .expect("proxy's first line");
    // "listening on tcp 127.0.0.1:PORT"
    let addr = line
        .trim()
        .strip_prefix("listening on tcp ")
        .unwrap_or_else(|| panic!("proxy said: {line}"))
        .to_string();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    (p, addr)
}

/// Raise this process's descriptor limit to its hard limit (each client holds two).
fn raise_fd_limit() {
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        let mut l: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// One fast client: a CONNECT to the echo server through the proxy, and a round trip.
fn fast_client(proxy: &str, port: u16, i: usize) -> Result<(), String> {
    let mut s = TcpStream::connect(proxy).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    s.set_write_timeout(Some(Duration::from_secs(30))).ok();
    write!(
        s,
        "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .map_err(|e| format!("send CONNECT: {e}"))?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            Ok(_) => return Err(format!("closed after {:?}", String::from_utf8_lossy(&head))),
            Err(e) => return Err(format!("reading the answer: {e}")),
        }
        if head.len() > 4096 {
            return Err("answer head too long".into());
        }
    }
    let head = String::from_utf8_lossy(&head);
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("answer: {}", head.lines().next().unwrap_or("")));
    }
    let msg = format!("ping {i}\n");
    s.write_all(msg.as_bytes())
        .map_err(|e| format!("send through the tunnel: {e}"))?;
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back)
        .map_err(|e| format!("read through the tunnel: {e}"))?;
    if back != msg.as_bytes() {
        return Err(format!("echo: {:?}", String::from_utf8_lossy(&back)));
    }
    Ok(())
}

#[test]
fn slow_clients_do_not_hold_up_the_others() {
    let (clients, slow) = if long() { (1000, 100) } else { (400, 40) };
    raise_fd_limit();
    let port = echo_server();
    for r in runners() {
        let label = r.label().to_string();
        let t = scratch();
        r.own(t.path());
        let (_proxy, addr) = start_proxy(&r, &t.path().join("root"), port);
        // the slow ones connect first and send their CONNECT a byte a second
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let slow_threads: Vec<_> = (0..slow)
            .map(|_| {
                let (addr, stop, tx) = (addr.clone(), stop.clone(), tx.clone());
                spawn(move || {
                    let s = TcpStream::connect(&addr);
                    let _ = tx.send(s.is_ok());
                    let Ok(mut s) = s else { return };
                    let head = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n");
                    for b in head.bytes() {
                        if stop.load(Ordering::Relaxed) || s.write_all(&[b]).is_err() {
                            return;
                        }
                        for _ in 0..10 {
                            if stop.load(Ordering::Relaxed) {
                                return;
                            }
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                })
            })
            .collect();
        let connected = (0..slow).filter(|_| rx.recv().unwrap_or(false)).count();
        assert_eq!(connected, slow, "[{label}] slow clients could not connect");
        // then all the others at once
        let start = Instant::now();
        let fast: Vec<_> = (0..clients - slow)
            .map(|i| {
                let addr = addr.clone();
                spawn(move || (fast_client(&addr, port, i), start.elapsed()))
            })
            .collect();
        let results: Vec<_> = fast.into_iter().map(|h| h.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        let failed: Vec<_> = results
            .iter()
            .enumerate()
            .filter_map(|(i, (r, _))| r.as_ref().err().map(|e| format!("client {i}: {e}")))
            .collect();
        let slowest = results.iter().map(|(_, d)| *d).max().unwrap_or_default();
        eprintln!(
            "[{label}] {} fast clients beside {slow} slow ones: slowest done after {slowest:?}",
            clients - slow
        );
        assert!(
            failed.is_empty(),
            "[{label}] {} failed: {:?}",
            failed.len(),
            &failed[..failed.len().min(10)]
        );
        assert!(
            slowest < FAST_BOUND,
            "[{label}] fast clients took {slowest:?} beside {slow} slow ones"
        );
        for h in slow_threads {
            let _ = h.join();
        }
    }
}

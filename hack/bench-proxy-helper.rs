//! Client and servers for hack/bench-proxy.sh (std only; built with `rustc -O`).
//!
//!   bench-proxy-helper data-server            print port; per connection: read an 8-byte
//!                                             big-endian count N; if N == 0 read until EOF
//!                                             (upload) and answer the byte count, else send
//!                                             N bytes (download)
//!   bench-proxy-helper http-server            print port; answer each request with a tiny 200
//!   bench-proxy-helper throughput ADDR BYTES up|down [PROXY]
//!                                             one transfer (direct, or CONNECT via PROXY);
//!                                             prints MiB/s
//!   bench-proxy-helper latency ADDR N [PROXY] N sequential GETs, new connection each
//!                                             (absolute-form via PROXY); prints the median
//!                                             and p99 in microseconds; PROXY `env`: the
//!                                             proxy of $HTTP_PROXY, with its credentials
//!                                             (inside srt, whose proxy wants them)
//!
//!   bench-proxy-helper splice-relay           print port; a minimal CONNECT relay that moves
//!                                             bytes with splice(2) through a pipe each way:
//!                                             the kernel's floor for a second connection
//!                                             (no policy, no parsing beyond CONNECT)
//!
//! Every address is a loopback address given by the script.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Instant;

const CHUNK: usize = 1 << 20;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["data-server"] => data_server(),
        ["http-server"] => http_server(),
        ["splice-relay"] => splice_relay(),
        ["throughput", addr, bytes, dir, rest @ ..] => {
            let n: u64 = bytes.parse().expect("BYTES");
            throughput(addr, n, *dir == "up", rest.first().copied())
        }
        ["latency", addr, n, rest @ ..] => latency(addr, n.parse().expect("N"), rest.first().copied()),
        _ => {
            eprintln!("usage: see the top of hack/bench-proxy-helper.rs");
            std::process::exit(2)
        }
    }
}

fn listen() -> TcpListener {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    println!("{}", l.local_addr().expect("local addr").port());
    std::io::stdout().flush().ok();
    l
}

fn data_server() {
    let l = listen();
    for s in l.incoming() {
        let Ok(mut s) = s else { continue };
        std::thread::spawn(move || {
            let _ = s.set_nodelay(true);
            let mut hdr = [0u8; 8];
            if s.read_exact(&mut hdr).is_err() {
                return;
            }
            let n = u64::from_be_bytes(hdr);
            let mut buf = vec![0u8; CHUNK];
            if n == 0 {
                let mut total = 0u64;
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => total += k as u64,
                    }
                }
                let _ = s.write_all(&total.to_be_bytes());
            } else {
                let mut left = n;
                while left > 0 {
                    let k = left.min(CHUNK as u64) as usize;
                    if s.write_all(&buf[..k]).is_err() {
                        return;
                    }
                    left -= k as u64;
                }
            }
            let _ = s.shutdown(Shutdown::Write);
        });
    }
}

fn http_server() {
    let l = listen();
    for s in l.incoming() {
        let Ok(mut s) = s else { continue };
        std::thread::spawn(move || {
            let _ = s.set_nodelay(true);
            let mut buf = [0u8; 8192];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(k) => got.extend_from_slice(&buf[..k]),
                }
            }
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
            );
            let _ = s.shutdown(Shutdown::Write);
            let _ = s.read(&mut buf);
        });
    }
}

/// Connect to `addr`, through `proxy` with CONNECT when given.
fn open(addr: &str, proxy: Option<&str>) -> TcpStream {
    let Some(p) = proxy else {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).ok();
        return s;
    };
    let mut s = TcpStream::connect(p).expect("connect proxy");
    s.set_nodelay(true).ok();
    s.write_all(format!("CONNECT {addr} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .expect("send CONNECT");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).expect("read CONNECT answer") == 0 {
            panic!("proxy closed during CONNECT");
        }
        head.push(b[0]);
    }
    let line = String::from_utf8_lossy(&head);
    assert!(line.starts_with("HTTP/1.1 200"), "CONNECT refused: {line}");
    s
}

fn throughput(addr: &str, n: u64, up: bool, proxy: Option<&str>) {
    let mut s = open(addr, proxy);
    let mut buf = vec![0x5au8; CHUNK];
    let t = Instant::now();
    if up {
        s.write_all(&0u64.to_be_bytes()).expect("send");
        let mut left = n;
        while left > 0 {
            let k = left.min(CHUNK as u64) as usize;
            s.write_all(&buf[..k]).expect("send data");
            left -= k as u64;
        }
        s.shutdown(Shutdown::Write).expect("shutdown");
        let mut ack = [0u8; 8];
        s.read_exact(&mut ack).expect("read ack");
        assert_eq!(u64::from_be_bytes(ack), n, "server counted a different size");
    } else {
        s.write_all(&n.to_be_bytes()).expect("send");
        let mut total = 0u64;
        loop {
            match s.read(&mut buf).expect("read data") {
                0 => break,
                k => total += k as u64,
            }
        }
        assert_eq!(total, n, "received a different size");
    }
    let secs = t.elapsed().as_secs_f64();
    println!("{:.1}", n as f64 / secs / (1024.0 * 1024.0));
}

/// `http://[USER:PASS@]HOST:PORT[/]` of $HTTP_PROXY: the address and a Basic credential.
fn env_proxy() -> (String, Option<String>) {
    let v = std::env::var("HTTP_PROXY").or_else(|_| std::env::var("http_proxy")).expect("HTTP_PROXY");
    let rest = v.strip_prefix("http://").unwrap_or(&v).trim_end_matches('/');
    let (cred, host) = match rest.rsplit_once('@') {
        Some((c, h)) => (Some(c), h),
        None => (None, rest),
    };
    let host = host.replace("localhost", "127.0.0.1");
    let cred = cred.map(|c| {
        // percent-decoded, then base64
        let b = c.as_bytes();
        let mut raw = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' && i + 2 < b.len() {
                raw.push(u8::from_str_radix(&c[i + 1..i + 3], 16).expect("percent escape"));
                i += 3;
            } else {
                raw.push(b[i]);
                i += 1;
            }
        }
        const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for ch in raw.chunks(3) {
            let n = (ch[0] as u32) << 16 | (*ch.get(1).unwrap_or(&0) as u32) << 8 | *ch.get(2).unwrap_or(&0) as u32;
            for k in 0..4 {
                out.push(if k <= ch.len() { T[(n >> (18 - 6 * k) & 63) as usize] as char } else { '=' });
            }
        }
        out
    });
    (host, cred)
}

fn latency(addr: &str, n: usize, proxy: Option<&str>) {
    let mut times = Vec::with_capacity(n);
    let mut buf = Vec::with_capacity(1024);
    let from_env = (proxy == Some("env")).then(env_proxy);
    for _ in 0..n {
        let t = Instant::now();
        let (mut s, req) = match (proxy, &from_env) {
            (_, Some((p, cred))) => (
                TcpStream::connect(p.as_str()).expect("connect proxy"),
                format!(
                    "GET http://{addr}/ HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{}\r\n",
                    cred.as_ref().map(|c| format!("Proxy-Authorization: Basic {c}\r\n")).unwrap_or_default()
                ),
            ),
            (Some(p), None) => (
                TcpStream::connect(p).expect("connect proxy"),
                format!("GET http://{addr}/ HTTP/1.1\r\nHost: {addr}\r\n\r\n"),
            ),
            (None, None) => (
                TcpStream::connect(addr).expect("connect"),
                format!("GET / HTTP/1.1\r\nHost: {addr}\r\n\r\n"),
            ),
        };
        s.set_nodelay(true).ok();
        s.write_all(req.as_bytes()).expect("send request");
        buf.clear();
        s.read_to_end(&mut buf).expect("read response");
        assert!(buf.starts_with(b"HTTP/1.1 200") && buf.ends_with(b"ok"), "bad response: {}", String::from_utf8_lossy(&buf));
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    let med = times[n / 2];
    let p99 = times[(n * 99 / 100).min(n - 1)];
    println!("{med:.0} {p99:.0}");
}

extern "C" {
    fn splice(fd_in: i32, off_in: *mut i64, fd_out: i32, off_out: *mut i64, len: usize, flags: u32) -> isize;
    fn pipe2(fds: *mut i32, flags: i32) -> i32;
    fn close(fd: i32) -> i32;
}

/// Move bytes from `a` to `b` with splice(2) until EOF, then shut `b`'s write side.
fn pump(a: &TcpStream, b: &TcpStream) {
    use std::os::fd::AsRawFd;
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `p`.
    if unsafe { pipe2(p.as_mut_ptr(), 0o2000000) } != 0 {
        return;
    }
    const MOVE: u32 = 1;
    loop {
        // SAFETY: plain splice calls on descriptors we own.
        let n = unsafe { splice(a.as_raw_fd(), std::ptr::null_mut(), p[1], std::ptr::null_mut(), 1 << 20, MOVE) };
        if n <= 0 {
            break;
        }
        let mut left = n;
        while left > 0 {
            // SAFETY: as above.
            let m = unsafe { splice(p[0], std::ptr::null_mut(), b.as_raw_fd(), std::ptr::null_mut(), left as usize, MOVE) };
            if m <= 0 {
                left = -1;
                break;
            }
            left -= m;
        }
        if left < 0 {
            break;
        }
    }
    let _ = b.shutdown(Shutdown::Write);
    // SAFETY: closing the pipe we made.
    unsafe {
        close(p[0]);
        close(p[1]);
    }
}

fn splice_relay() {
    let l = listen();
    for s in l.incoming() {
        let Ok(mut c) = s else { continue };
        std::thread::spawn(move || {
            let _ = c.set_nodelay(true);
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match c.read(&mut b) {
                    Ok(1) => head.push(b[0]),
                    _ => return,
                }
            }
            let line = String::from_utf8_lossy(&head);
            let Some(target) = line.split_whitespace().nth(1) else { return };
            let Ok(u) = TcpStream::connect(target) else { return };
            let _ = u.set_nodelay(true);
            if c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").is_err() {
                return;
            }
            let (c2, u2) = (c.try_clone().expect("dup"), u.try_clone().expect("dup"));
            let t = std::thread::spawn(move || pump(&c2, &u2));
            pump(&u, &c);
            let _ = t.join();
        });
    }
}

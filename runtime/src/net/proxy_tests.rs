//! Tests of the proxy against servers these tests start on 127.0.0.1 (and nothing else:
//! names resolve through the test resolver table, and addresses that must be refused are
//! only ever passed to [`Proxy::check`], which never connects).

use super::allowlist::{Allowlist, Host};
use super::proxy::{Limits, Proxy, ProxyConfig, Verdict};
use super::refusal::{self, RefusalLog};
use super::resolve::Resolver;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const T: Duration = Duration::from_secs(30);

/// A test server on 127.0.0.1 counting its connections.
struct Server {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

/// Echo server: sends back whatever it reads.
async fn echo_server() -> Server {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            h.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    Server { addr, hits }
}

/// HTTP server: answers every request with its own request head as the body.
async fn http_server() -> Server {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            h.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let Ok((head, _)) = super::http::read_head(&mut s, 65536).await else {
                    return;
                };
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    head.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
                let _ = s.write_all(&head).await;
                let _ = s.shutdown().await;
            });
        }
    });
    Server { addr, hits }
}

fn config(allow: &[&str], resolve: &str, log: Option<&Path>) -> ProxyConfig {
    ProxyConfig {
        allowlist: Allowlist::parse(allow).unwrap(),
        resolver: Resolver::parse_table(resolve).unwrap(),
        refusal_log: log.map(|p| RefusalLog::open(p).unwrap()),
        refusals: None,
        limits: Limits::default(),
        secrets: None,
        direct: None,
    }
}

async fn start(cfg: ProxyConfig) -> (Proxy, SocketAddr) {
    let proxy = Proxy::new(cfg);
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let p = proxy.clone();
    tokio::spawn(async move { p.serve_tcp(l, std::future::pending()).await });
    (proxy, addr)
}

/// Send `req` to the proxy and read until it closes.
async fn exchange(proxy: SocketAddr, req: &str) -> String {
    tokio::time::timeout(T, async {
        let mut s = TcpStream::connect(proxy).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .expect("proxy exchange timed out")
}

/// CONNECT through the proxy, then send `msg` and read it back; returns the proxy's
/// status line, and the echo (empty when refused).
async fn connect_echo(proxy: SocketAddr, target: &str, msg: &[u8]) -> (String, Vec<u8>) {
    tokio::time::timeout(T, async {
        let mut s = TcpStream::connect(proxy).await.unwrap();
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let (head, rest) = super::http::read_head(&mut s, 65536).await.unwrap();
        let status = String::from_utf8_lossy(&head)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        if !status.contains(" 200 ") {
            return (status, Vec::new());
        }
        assert!(rest.is_empty());
        s.write_all(msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).await.unwrap();
        (status, back)
    })
    .await
    .expect("CONNECT timed out")
}

/// A SOCKS5 address field for `host` (IPv4, IPv6 or a name).
fn socks_addr(host: &str) -> Vec<u8> {
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => [&[1u8][..], &a.octets()].concat(),
        Ok(std::net::IpAddr::V6(a)) => [&[4u8][..], &a.octets()].concat(),
        Err(_) => [&[3u8, host.len() as u8][..], host.as_bytes()].concat(),
    }
}

/// SOCKS5 CONNECT through the proxy (no authentication), then send `msg` and read it back;
/// returns the reply code and the echo (empty unless the reply is 0).
async fn socks_echo(proxy: SocketAddr, host: &str, port: u16, msg: &[u8]) -> (u8, Vec<u8>) {
    tokio::time::timeout(T, async {
        let mut s = TcpStream::connect(proxy).await.unwrap();
        s.write_all(&[5, 1, 0]).await.unwrap();
        let mut m = [0u8; 2];
        s.read_exact(&mut m).await.unwrap();
        assert_eq!(m, [5, 0], "method");
        let mut req = vec![5, 1, 0];
        req.extend(socks_addr(host));
        req.extend(port.to_be_bytes());
        s.write_all(&req).await.unwrap();
        let mut r = [0u8; 10];
        s.read_exact(&mut r).await.unwrap();
        assert_eq!((r[0], r[2], r[3]), (5, 0, 1), "reply {r:?}");
        assert_eq!(&r[4..], &[0; 6], "bound address is 0.0.0.0:0");
        if r[1] != 0 {
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
            assert!(rest.is_empty(), "bytes after a failure reply");
            return (r[1], Vec::new());
        }
        s.write_all(msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).await.unwrap();
        (0, back)
    })
    .await
    .expect("SOCKS5 CONNECT timed out")
}

#[tokio::test]
async fn socks5_connect_is_judged_like_http_connect() {
    let echo = echo_server().await;
    let other = echo_server().await;
    let port = echo.addr.port();
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("refusals.jsonl");
    let table = "local.test=127.0.0.1,named.test=127.0.0.1";
    let lit = format!("127.0.0.1:{port}");
    let (_, p) = start(config(
        &[&lit, "local.test", "named.test"],
        table,
        Some(&log),
    ))
    .await;
    // listed literal address
    assert_eq!(
        socks_echo(p, "127.0.0.1", port, b"v4").await,
        (0, b"v4".to_vec())
    );
    // a name that resolves to the listed literal address (and port)
    assert_eq!(
        socks_echo(p, "local.test", port, b"nm").await,
        (0, b"nm".to_vec())
    );
    assert_eq!(echo.hits.load(Ordering::SeqCst), 2);
    // not listed (another port of the same address): 0x02, logged, never connected
    assert_eq!(
        socks_echo(p, "127.0.0.1", other.addr.port(), b"x").await.0,
        2
    );
    // listed by name, resolving to loopback on a port the literal entry does not cover
    assert_eq!(
        socks_echo(p, "named.test", other.addr.port(), b"x").await.0,
        2
    );
    // an IPv6 literal not listed
    assert_eq!(socks_echo(p, "::1", port, b"x").await.0, 2);
    // a listed name that does not resolve: host unreachable
    let (_, q) = start(config(&["nowhere.test"], "", None)).await;
    assert_eq!(socks_echo(q, "nowhere.test", 80, b"x").await.0, 4);
    assert_eq!(
        other.hits.load(Ordering::SeqCst),
        0,
        "refused yet connected"
    );
    let got = refusal::read(&log).unwrap();
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0].host, "127.0.0.1");
    assert_eq!(got[0].port, other.addr.port());
    assert!(
        got[0].reason.contains("port") || got[0].reason.contains("allowlist"),
        "{:?}",
        got[0]
    );
    assert_eq!(got[1].host, "named.test");
    assert!(got[1].reason.contains("loopback"), "{:?}", got[1]);
    assert_eq!(got[2].host, "[::1]");
}

#[tokio::test]
async fn socks5_connection_refused_and_bad_greetings() {
    // a listed address where nothing listens: 0x05
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = l.local_addr().unwrap();
    drop(l);
    let (_, p) = start(config(&[&dead.to_string()], "", None)).await;
    assert_eq!(socks_echo(p, "127.0.0.1", dead.port(), b"x").await.0, 5);
    // greetings and requests the proxy refuses: answered, closed, and it keeps serving
    for (bytes, answer) in [
        (&b"\x05\x01\x02"[..], &[5u8, 0xff][..]),
        (
            b"\x05\x01\x00\x05\x02\x00\x01\x7f\x00\x00\x01\x00\x50",
            &[5, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0],
        ),
        (
            b"\x05\x01\x00\x05\x01\x00\x09",
            &[5, 0, 5, 8, 0, 1, 0, 0, 0, 0, 0, 0],
        ),
        (
            b"\x05\x01\x00\x05\x01\x00\x03\x00\x00\x50",
            &[5, 0, 5, 1, 0, 1, 0, 0, 0, 0, 0, 0],
        ),
        (b"\x05", &[]),
    ] {
        let back = exchange_bytes(p, bytes).await;
        assert_eq!(back, answer, "{bytes:?}");
    }
    assert_eq!(socks_echo(p, "127.0.0.1", dead.port(), b"x").await.0, 5);
}

/// Send `bytes`, half-close, and read until the proxy closes.
async fn exchange_bytes(proxy: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    tokio::time::timeout(T, async {
        let mut s = TcpStream::connect(proxy).await.unwrap();
        s.write_all(bytes).await.unwrap();
        s.shutdown().await.unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        out
    })
    .await
    .expect("proxy exchange timed out")
}

#[tokio::test]
async fn connect_to_listed_literal_address() {
    let echo = echo_server().await;
    let (_, p) = start(config(&["127.0.0.1"], "", None)).await;
    let (status, back) = connect_echo(p, &echo.addr.to_string(), b"ping through the tunnel").await;
    assert_eq!(status, "HTTP/1.1 200 Connection established");
    assert_eq!(back, b"ping through the tunnel");
    assert_eq!(echo.hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn plain_http_is_forwarded_in_origin_form() {
    let srv = http_server().await;
    let (_, p) = start(config(&[&srv.addr.to_string()], "", None)).await;
    let resp = exchange(
        p,
        &format!(
            "GET http://{}/some/path?q=1 HTTP/1.1\r\nHost: spoofed.test\r\nProxy-Authorization: Basic c2VjcmV0\r\n\
             Proxy-Connection: Keep-Alive\r\nUser-Agent: t\r\n\r\n",
            srv.addr
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    let body = resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    assert!(
        body.starts_with("GET /some/path?q=1 HTTP/1.1\r\n"),
        "{body}"
    );
    assert!(body.contains(&format!("Host: {}\r\n", srv.addr)), "{body}");
    assert!(body.contains("User-Agent: t\r\n"), "{body}");
    assert!(body.contains("Connection: close\r\n"), "{body}");
    assert!(!body.contains("spoofed"), "{body}");
    assert!(!body.to_ascii_lowercase().contains("proxy-"), "{body}");
}

#[tokio::test]
async fn unlisted_destination_is_refused_and_logged() {
    let srv = http_server().await;
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("refusals.jsonl");
    let (_, p) = start(config(&["other.test"], "", Some(&log))).await;
    let resp = exchange(p, &format!("GET http://{}/ HTTP/1.1\r\n\r\n", srv.addr)).await;
    assert!(resp.starts_with("HTTP/1.1 403 Forbidden"), "{resp}");
    assert!(resp.contains("not on the allowlist"), "{resp}");
    let (status, _) = connect_echo(p, &srv.addr.to_string(), b"x").await;
    assert!(status.contains(" 403 "), "{status}");
    assert_eq!(srv.hits.load(Ordering::SeqCst), 0, "refused yet connected");
    let got = refusal::read(&log).unwrap();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].host, "127.0.0.1");
    assert_eq!(got[0].port, srv.addr.port());
    assert_eq!(got[0].reason, "not on the allowlist");
}

#[tokio::test]
async fn name_resolving_to_loopback_needs_the_literal_address() {
    let srv = http_server().await;
    let port = srv.addr.port();
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("refusals.jsonl");
    let table = "local.test=127.0.0.1";
    // listed by name only: refused, nothing connects
    let (_, p) = start(config(&["local.test"], table, Some(&log))).await;
    let resp = exchange(
        p,
        &format!("GET http://local.test:{port}/ HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(resp.contains("127.0.0.1, a loopback address"), "{resp}");
    let (status, _) = connect_echo(p, &format!("local.test:{port}"), b"x").await;
    assert!(status.contains(" 403 "), "{status}");
    assert_eq!(srv.hits.load(Ordering::SeqCst), 0);
    let got = refusal::read(&log).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].host, "local.test");
    assert!(got[0].reason.contains("loopback"), "{:?}", got[0]);

    // the literal address listed too (on this port): allowed
    let lit = format!("127.0.0.1:{port}");
    let (_, p) = start(config(&["local.test", &lit], table, None)).await;
    let resp = exchange(
        p,
        &format!("GET http://local.test:{port}/x HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains(&format!("Host: local.test:{port}")), "{resp}");
    assert_eq!(srv.hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn connect_to_a_denied_port_is_refused() {
    let allowed = echo_server().await;
    let other = echo_server().await;
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("refusals.jsonl");
    let (_, p) = start(config(&[&allowed.addr.to_string()], "", Some(&log))).await;
    let (status, _) = connect_echo(p, &other.addr.to_string(), b"x").await;
    assert!(status.starts_with("HTTP/1.1 403"), "{status}");
    assert_eq!(other.hits.load(Ordering::SeqCst), 0);
    let (status, back) = connect_echo(p, &allowed.addr.to_string(), b"ok").await;
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(back, b"ok");
    let got = refusal::read(&log).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].port, other.addr.port());
    assert!(got[0].reason.contains("port"), "{:?}", got[0]);
}

#[tokio::test]
async fn wildcard_table_through_the_proxy() {
    let echo = echo_server().await;
    let port = echo.addr.port();
    let names = [
        ("a.example.test", true),
        ("deep.a.example.test", true),
        ("example.test", false),
        ("evil-example.test", false),
        ("example.test.evil.test", false),
    ];
    let table: Vec<String> = names
        .iter()
        .map(|(n, _)| format!("{n}=127.0.0.1"))
        .collect();
    let (_, p) = start(config(
        &["*.example.test", "127.0.0.1"],
        &table.join(","),
        None,
    ))
    .await;
    for (name, want) in names {
        let (status, back) = connect_echo(p, &format!("{name}:{port}"), b"hi").await;
        assert_eq!(status.contains(" 200 "), want, "{name}: {status}");
        if want {
            assert_eq!(back, b"hi");
        }
    }
    assert_eq!(echo.hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn special_addresses_are_refused_without_connecting() {
    // `check` decides without connecting, so these addresses are never contacted.
    let table = "meta.test=169.254.169.254,priv.test=10.1.2.3,mapped.test=::ffff:127.0.0.1,\
                 cgnat.test=100.64.0.9,ula.test=fd00:ec2::254,ll.test=fe80::1,mc.test=224.0.0.1,\
                 mixed.test=10.0.0.7,mixed.test=127.0.0.1,pub.test=93.184.216.34";
    let proxy = Proxy::new(config(
        &["*.test", "169.254.169.254:81", "[::1]:80"],
        table,
        None,
    ));
    for (name, want) in [
        ("meta.test", "cloud metadata"),
        ("priv.test", "private"),
        ("mapped.test", "loopback"),
        ("cgnat.test", "carrier-grade"),
        ("ula.test", "cloud metadata"),
        ("ll.test", "link-local"),
        ("mc.test", "multicast"),
    ] {
        match proxy.check(&Host::parse(name).unwrap(), 80).await {
            Verdict::Refuse(r) => assert!(r.contains(want), "{name}: {r}"),
            v => panic!("{name}: {v:?}"),
        }
    }
    // literal addresses not listed (or listed on another port) are refused by the list
    for lit in ["169.254.169.254", "10.0.0.1", "[::ffff:169.254.169.254]"] {
        let v = proxy.check(&Host::parse(lit).unwrap(), 80).await;
        assert!(matches!(v, Verdict::Refuse(_)), "{lit}: {v:?}");
    }
    // the literal metadata address listed on port 81 is allowed there, and only there
    assert_eq!(
        proxy
            .check(&Host::parse("169.254.169.254").unwrap(), 81)
            .await,
        Verdict::Allow(vec!["169.254.169.254:81".parse().unwrap()])
    );
    assert_eq!(
        proxy.check(&Host::parse("meta.test").unwrap(), 81).await,
        Verdict::Allow(vec!["169.254.169.254:81".parse().unwrap()])
    );
    // one bad answer among several: only the checked, allowed address is used
    let proxy = Proxy::new(config(&["mixed.test", "127.0.0.1"], table, None));
    assert_eq!(
        proxy.check(&Host::parse("mixed.test").unwrap(), 80).await,
        Verdict::Allow(vec!["127.0.0.1:80".parse().unwrap()])
    );
    // an ordinary public address is allowed when its name is listed (not contacted here)
    let proxy = Proxy::new(config(&["pub.test"], table, None));
    assert!(matches!(
        proxy.check(&Host::parse("pub.test").unwrap(), 443).await,
        Verdict::Allow(_)
    ));
    // a name outside the test table does not resolve (no real DNS in tests)
    let proxy = Proxy::new(config(&["*.invalid"], table, None));
    assert!(matches!(
        proxy
            .check(&Host::parse("nowhere.invalid").unwrap(), 80)
            .await,
        Verdict::Unresolved(_)
    ));
}

#[tokio::test]
async fn bad_requests_get_4xx() {
    let (_, p) = start(config(&["127.0.0.1"], "", None)).await;
    let r = exchange(p, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    let r = exchange(p, "GET https://127.0.0.1/ HTTP/1.1\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    let r = exchange(p, "CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    let huge = format!(
        "GET http://127.0.0.1/ HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(40_000)
    );
    let r = exchange(p, &huge).await;
    assert!(r.starts_with("HTTP/1.1 431"), "{r}");
}

#[tokio::test]
async fn head_timeout_is_enforced() {
    let mut cfg = config(&["127.0.0.1"], "", None);
    cfg.limits.head_timeout = Duration::from_millis(200);
    let (_, p) = start(cfg).await;
    let r = exchange(p, "GET http://127.0.0.1/ HTTP/1.1\r\n").await;
    assert!(r.starts_with("HTTP/1.1 408"), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_connects() {
    // this process is the clients, the proxy and the server at once
    super::proxy::ensure_fd_budget(&Limits::default());
    let echo = echo_server().await;
    let (_, p) = start(config(&["127.0.0.1"], "", None)).await;
    two_hundred_clients(p, &echo, "client").await;
}

/// 200 concurrent CONNECTs through the relay: every client socket crosses the handoff
/// channel (a short queue: the relay waits while it is full) and all complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_connects_through_the_relay() {
    super::proxy::ensure_fd_budget(&Limits::default());
    let echo = echo_server().await;
    let proxy = Proxy::new(config(&["127.0.0.1"], "", None));
    let (proxy_end, relay_end) = super::handoff::channel().unwrap();
    let relay = super::relay::spawn("127.0.0.1:0".parse().unwrap(), relay_end).unwrap();
    tokio::spawn(async move { proxy.serve_handoff(proxy_end, std::future::pending()).await });
    two_hundred_clients(relay, &echo, "relayed").await;
}

/// 200 concurrent CONNECTs to `echo` through the proxy at `via`, each echoing its own
/// message; all must complete within 60 s and reach the server.
async fn two_hundred_clients(via: std::net::SocketAddr, echo: &Server, tag: &'static str) {
    let target = echo.addr.to_string();
    let all = async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..200u32 {
            let target = target.clone();
            set.spawn(async move {
                let msg = format!("{tag} {i} ").repeat(100);
                let (status, back) = connect_echo(via, &target, msg.as_bytes()).await;
                assert!(status.contains(" 200 "), "{i}: {status}");
                assert_eq!(back, msg.as_bytes());
            });
        }
        let mut done = 0;
        while let Some(r) = set.join_next().await {
            r.unwrap();
            done += 1;
        }
        done
    };
    let done = tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .unwrap_or_else(|_| panic!("200 concurrent CONNECTs ({tag}) did not finish in 60 s"));
    assert_eq!(done, 200);
    assert_eq!(echo.hits.load(Ordering::SeqCst), 200);
}

/// Whatever arrives on the channel that is not a connected TCP socket is closed unused,
/// and the proxy goes on serving the next client.
#[tokio::test]
async fn handoff_survives_junk_descriptors() {
    use std::os::fd::{AsFd, AsRawFd};
    let echo = echo_server().await;
    let proxy = Proxy::new(config(&["127.0.0.1"], "", None));
    let (proxy_end, sender) = super::handoff::channel().unwrap();
    let served =
        tokio::spawn(async move { proxy.serve_handoff(proxy_end, std::future::pending()).await });
    let (pr, _pw) = nix::unistd::pipe().unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (ua, ub) = std::os::unix::net::UnixStream::pair().unwrap();
    let listening = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    for fd in [pr.as_fd(), udp.as_fd(), ua.as_fd(), listening.as_fd()] {
        super::handoff::send(sender.as_fd(), fd).unwrap();
    }
    // a message without a descriptor
    nix::sys::socket::send(
        sender.as_raw_fd(),
        b"x",
        nix::sys::socket::MsgFlags::empty(),
    )
    .unwrap();
    // the unix socket was not served: its peer sees nothing but the close
    drop(ua);
    let mut ub = tokio::net::UnixStream::from_std({
        ub.set_nonblocking(true).unwrap();
        ub
    })
    .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(T, ub.read_to_end(&mut got))
        .await
        .expect("the passed unix socket stayed open")
        .unwrap();
    assert!(got.is_empty(), "{got:?}");
    // a real client after the junk is served
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (accepted, _) = l.accept().unwrap();
    super::handoff::send(sender.as_fd(), accepted.as_fd()).unwrap();
    drop(accepted);
    client.set_nonblocking(true).unwrap();
    let mut client = TcpStream::from_std(client).unwrap();
    let target = echo.addr.to_string();
    client
        .write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (head, _) = tokio::time::timeout(T, super::http::read_head(&mut client, 65536))
        .await
        .unwrap()
        .unwrap();
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    client.write_all(b"after junk").await.unwrap();
    let mut back = [0u8; 10];
    client.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"after junk");
    assert_eq!(echo.hits.load(Ordering::SeqCst), 1);
    // the relay's end closes: the proxy stops taking clients
    drop(sender);
    tokio::time::timeout(T, served)
        .await
        .expect("serve_handoff did not end with the channel")
        .unwrap();
}

/// The whole allowlist path minus the sandbox: relay (TCP) hands the client socket over
/// the channel -> host proxy thread -> loopback server, driven by the real curl in both
/// proxy modes.
#[test]
fn relay_and_host_proxy_with_curl() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let srv = rt.block_on(http_server());
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("refusals.jsonl");
    let cfg = config(&[&srv.addr.to_string()], "", Some(&log));
    let (hp, relay_end) = super::host::HostProxy::new(cfg).unwrap();
    let running = hp.start().unwrap();
    let relay = super::relay::spawn("127.0.0.1:0".parse().unwrap(), relay_end).unwrap();
    let curl = |extra: &[&str], url: &str| {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"])
            .args(extra)
            .arg(url)
            .env_clear()
            .env("http_proxy", format!("http://{relay}"))
            .env("HTTPS_PROXY", format!("http://{relay}"))
            .output()
            .expect("run curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let url = format!("http://{}/via-relay", srv.addr);
    let out = curl(&[], &url);
    assert!(out.ends_with("\n200"), "{out}");
    assert!(out.contains("GET /via-relay HTTP/1.1"), "{out}");
    // CONNECT tunnel (curl --proxytunnel)
    let out = curl(&["-p"], &url);
    assert!(out.ends_with("\n200"), "{out}");
    // a refused destination: 403 with the reason
    let other = rt.block_on(http_server());
    let out = curl(&[], &format!("http://{}/", other.addr));
    assert!(out.ends_with("\n403"), "{out}");
    assert!(out.contains("capsule: refused"), "{out}");
    assert_eq!(other.hits.load(Ordering::SeqCst), 0);
    // SOCKS5 on the same port, the way the sandbox's ALL_PROXY names it
    let out = curl(&["--socks5-hostname", &relay.to_string()], &url);
    assert!(out.ends_with("\n200"), "{out}");
    assert!(out.contains("GET /via-relay HTTP/1.1"), "{out}");
    let out = curl(
        &["--socks5-hostname", &relay.to_string()],
        &format!("http://{}/", other.addr),
    );
    assert!(out.ends_with("\n000"), "{out}");
    assert_eq!(other.hits.load(Ordering::SeqCst), 0);
    running.stop();
    assert_eq!(refusal::read(&log).unwrap().len(), 2);
    // the proxy is gone: the relay says so
    let out = curl(&[], &url);
    assert!(out.ends_with("\n502"), "{out}");
}

#[test]
fn fd_budget_is_raised_within_the_hard_limit() {
    let limits = Limits::default();
    let got = super::proxy::ensure_fd_budget(&limits);
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit we own.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) }, 0);
    assert_eq!(got, rl.rlim_cur);
    let want = limits.max_connections as u64 * super::proxy::FDS_PER_CLIENT + 64;
    assert!(got >= want.min(rl.rlim_max), "{got} {rl:?}");
    assert!(rl.rlim_cur <= rl.rlim_max);
}

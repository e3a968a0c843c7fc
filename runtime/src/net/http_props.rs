//! Property tests of the proxy's HTTP request head: reading it with its size bound
//! ([`super::http::read_head_after`]) splits any byte stream exactly where a reference
//! model says and never returns more than the bound; parsing any bytes
//! ([`super::http::parse_head`], [`super::http::target`], [`super::http::rewrite_origin`])
//! never panics; generated valid `CONNECT` lines and absolute-form requests parse to the
//! generated host and port, and their forwarded form carries no `Proxy-*` or hop-by-hop
//! header; and the destination the parser returns gets from the allowlist exactly the
//! answer the allowlist's reference model gives on the generated names, while hostile
//! authorities (userinfo, fragments, escapes, unbracketed IPv6) are never allowed where
//! the model refuses. Cases per run: `PROPTEST_CASES` (defaults below; `hack/fuzz.sh` runs
//! more).

use super::allowlist::{Allowlist, Host};
use super::allowlist_props::{labels, model};
use super::http::{parse_head, read_head_after, rewrite_origin, target, HeadError, Target};
use proptest::prelude::*;

/// `PROPTEST_CASES` when set, else `cases`.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a test runtime")
        .block_on(f)
}

/// Pieces of request heads, so that arbitrary joins are often nearly valid.
fn fragment() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            "GET ",
            "CONNECT ",
            "POST ",
            "get ",
            "http://",
            "HTTP://",
            "https://",
            "ftp://",
            "a.test",
            "[::1]",
            "[",
            "]",
            "127.0.0.1",
            ":",
            ":80",
            ":0",
            ":65536",
            ":+1",
            "@",
            "#",
            "?",
            "/",
            "%2e",
            "\\",
            " HTTP/1.1",
            " HTTP/1.0",
            " HTTP/2",
            "\r\n",
            "\n",
            "\r",
            "\r\n\r\n",
            "Host: x",
            "Proxy-Authorization: y",
            "Connection: a, b",
            " ",
            "\t",
            "\0",
            "\x7f",
            "\u{e9}",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 0..6),
    ]
}

/// A generated host as sent and what the parser must make of it.
#[derive(Debug, Clone)]
enum GenHost {
    /// Labels, sent joined with `.`, in the case given, maybe with a trailing dot.
    Name(Vec<String>, bool),
    V4([u8; 4]),
    V6([u8; 16]),
}

impl GenHost {
    fn sent(&self) -> String {
        match self {
            GenHost::Name(l, dot) => format!("{}{}", l.join("."), if *dot { "." } else { "" }),
            GenHost::V4(a) => std::net::Ipv4Addr::from(*a).to_string(),
            GenHost::V6(a) => format!("[{}]", std::net::Ipv6Addr::from(*a)),
        }
    }
    fn expected(&self) -> Host {
        match self {
            GenHost::Name(l, _) => Host::Name(l.join(".").to_ascii_lowercase()),
            GenHost::V4(a) => Host::Ip(std::net::IpAddr::from(*a)),
            GenHost::V6(a) => Host::Ip(std::net::IpAddr::from(*a).to_canonical()),
        }
    }
}

fn gen_host() -> impl Strategy<Value = GenHost> {
    prop_oneof![
        3 => (labels(), any::<bool>()).prop_map(|(l, d)| GenHost::Name(l, d)),
        1 => any::<[u8; 4]>().prop_map(GenHost::V4),
        1 => any::<[u8; 16]>().prop_map(GenHost::V6),
    ]
}

fn header() -> impl Strategy<Value = (String, String)> {
    (
        prop::sample::select(vec![
            "Host",
            "Proxy-Authorization",
            "Proxy-Connection",
            "Connection",
            "Keep-Alive",
            "TE",
            "Upgrade",
            "X-Secret",
            "Accept",
            "Content-Length",
            "x-a",
        ]),
        "[ -~]{0,12}",
    )
        .prop_map(|(n, v)| (n.to_string(), v.trim().to_string()))
}

/// Reference model of the allowlist on a request host written as `host` (an authority
/// without the port): only a plain name of labels (letters, digits, `-`, `_`), one
/// trailing dot at most, is a name the model knows; anything else it refuses (literal
/// addresses are not in the generated lists).
fn model_on_text(wild: bool, entry: &[String], eport: Option<u16>, host: &str, port: u16) -> bool {
    let h = host.strip_suffix('.').unwrap_or(host);
    let labels: Vec<String> = h.split('.').map(str::to_string).collect();
    let plain = labels.iter().all(|l| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    plain && model(wild, entry, eport, &labels, port)
}

/// The reference model on an authority as sent (`host[:port]`; for an absolute URI
/// (`uri`) it ends at the first `/`, `?` or `#`, as RFC 3986 reads it): userinfo is refused,
/// an empty port is the default one, a port is 1-65535 in digits.
fn model_on_authority(
    wild: bool,
    entry: &[String],
    eport: Option<u16>,
    auth: &str,
    uri: bool,
    default_port: u16,
) -> bool {
    let auth = if uri {
        auth.split(['/', '?', '#']).next().unwrap_or("")
    } else {
        auth
    };
    if auth.contains('@') {
        return false;
    }
    let (h, port) = match auth.rsplit_once(':') {
        Some((h, "")) => (h, default_port),
        Some((h, p)) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => (h, n),
            _ => return false,
        },
        None => (auth, default_port),
    };
    model_on_text(wild, entry, eport, h, port)
}

proptest! {
    #![proptest_config(config(5500))]

    #[test]
    fn parsing_any_bytes_never_panics(
        pieces in prop::collection::vec(fragment(), 0..20),
        raw in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        for mut bytes in [pieces.concat(), raw] {
            for _ in 0..2 {
                if let Ok(h) = parse_head(&bytes) {
                    if let Ok(Target::Http { authority, path, .. }) = target(&h) {
                        let out = rewrite_origin(&h, &authority, &path);
                        prop_assert!(parse_head(&out).is_ok(), "the forwarded head does not parse");
                    }
                }
                bytes.extend_from_slice(b"\r\n\r\n");
            }
        }
    }

    #[test]
    fn reading_a_head_splits_where_the_model_says(
        pieces in prop::collection::vec(fragment(), 0..12),
        split in any::<prop::sample::Index>(),
        max in 0usize..96,
    ) {
        let bytes = pieces.concat();
        let at = split.index(bytes.len() + 1);
        let (start, stream) = bytes.split_at(at);
        let mut stream = stream;
        let got = block_on(read_head_after(&mut stream, max, start.to_vec()));
        let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
        match (end, got) {
            (Some(e), Ok((head, rest))) => {
                prop_assert!(e <= max && head.len() <= max);
                prop_assert_eq!(&head[..], &bytes[..e]);
                // what followed the head: read along with it, or still unread
                prop_assert_eq!([&rest[..], stream].concat(), &bytes[e..]);
            }
            (Some(e), Err(HeadError::TooLarge(m))) => prop_assert!(e > max && m == max),
            (None, Err(HeadError::TooLarge(m))) => prop_assert!(bytes.len() > max && m == max),
            (None, Err(HeadError::Closed)) => prop_assert!(bytes.len() <= max),
            (e, g) => prop_assert!(false, "end {:?}, read {:?}", e, g.map(|(h, _)| h.len())),
        }
    }

}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn generated_requests_parse_to_their_host_and_port(
        connect in any::<bool>(),
        method in prop::sample::select(vec!["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]),
        host in gen_host(),
        port in prop::option::of(1u16..),
        path in "(/[a-zA-Z0-9._~%-]{0,6}){0,3}(\\?[a-z=&]{0,6})?(#[a-z]{0,4})?",
        headers in prop::collection::vec(header(), 0..6),
        version in prop::sample::select(vec!["HTTP/1.1", "HTTP/1.0"]),
    ) {
        let h = host.sent();
        let (line, want_port) = if connect {
            let p = port.unwrap_or(443);
            (format!("CONNECT {h}:{p} {version}\r\n"), p)
        } else {
            let auth = match port { Some(p) => format!("{h}:{p}"), None => h.clone() };
            (format!("{method} http://{auth}{path} {version}\r\n"), port.unwrap_or(80))
        };
        let mut text = line;
        for (n, v) in &headers {
            text.push_str(&format!("{n}: {v}\r\n"));
        }
        text.push_str("\r\n");
        let head = parse_head(text.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}: {text:?}")))?;
        prop_assert_eq!(head.headers.len(), headers.len());
        let t = target(&head).map_err(|e| TestCaseError::fail(format!("{e}: {text:?}")))?;
        let (got_host, got_port) = t.host_port();
        prop_assert_eq!(got_host, &host.expected(), "{:?}", text);
        prop_assert_eq!(got_port, want_port);
        match t {
            Target::Connect { .. } => prop_assert!(connect),
            Target::Http { authority, path: origin, .. } => {
                prop_assert!(!connect);
                let want_path = path.split('#').next().unwrap_or("");
                let want_path = if want_path.starts_with('/') { want_path.to_string() } else { format!("/{want_path}") };
                prop_assert_eq!(&origin, &want_path);
                let out = rewrite_origin(&head, &authority, &origin);
                let fwd = parse_head(&out).map_err(TestCaseError::fail)?;
                prop_assert_eq!(&fwd.target, &want_path);
                prop_assert_eq!(&fwd.method, method);
                let hosts: Vec<_> = fwd.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case("host")).collect();
                prop_assert_eq!(hosts.len(), 1);
                prop_assert_eq!(&hosts[0].1, &authority.as_bytes().to_vec());
                for (n, _) in &fwd.headers {
                    let n = n.to_ascii_lowercase();
                    prop_assert!(!n.starts_with("proxy-") && !["keep-alive", "te", "upgrade"].contains(&n.as_str()), "{} forwarded", n);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(config(8000))]

    #[test]
    fn the_parsed_destination_gets_the_reference_models_answer(
        wild in any::<bool>(),
        entry in labels(),
        eport in prop::option::of(prop::sample::select(vec![80u16, 443])),
        host in labels(),
        hdot in any::<bool>(),
        port in prop::option::of(prop::sample::select(vec![80u16, 443])),
        connect in any::<bool>(),
        junk in prop::option::of(prop::sample::select(vec![
            "@", "u@", ":80@", "#@", "%2e", "\\", "\\@", ":", "::1", "[", "]", ".", "..", "*",
            "%00", "?", "/", ":0", ":08", ":+80", ":65536", " ",
        ])),
        junk_at in any::<prop::sample::Index>(),
    ) {
        let e = format!("{}{}{}", if wild { "*." } else { "" }, entry.join("."),
            eport.map(|p| format!(":{p}")).unwrap_or_default());
        let list = Allowlist::parse([e.as_str()]).map_err(|x| TestCaseError::fail(x.to_string()))?;
        let mut h = format!("{}{}", host.join("."), if hdot { "." } else { "" });
        if let Some(j) = junk {
            let mut at = junk_at.index(h.len() + 1);
            while !h.is_char_boundary(at) {
                at -= 1;
            }
            h.insert_str(at, j);
        }
        let auth = match (connect, port) {
            (true, p) => format!("{h}:{}", p.unwrap_or(443)),
            (false, Some(p)) => format!("{h}:{p}"),
            (false, None) => h.clone(),
        };
        let text = if connect {
            format!("CONNECT {auth} HTTP/1.1\r\n\r\n")
        } else {
            format!("GET http://{auth}/p HTTP/1.1\r\n\r\n")
        };
        let want_port = port.unwrap_or(if connect { 443 } else { 80 });
        let decided = parse_head(text.as_bytes())
            .and_then(|head| target(&head))
            .map(|t| {
                let (host, port) = t.host_port();
                (host.clone(), port, list.allows(host, port))
            });
        match decided {
            Ok((got, got_port, allowed)) => {
                let modelled = if junk.is_none() {
                    model_on_text(wild, &entry, eport, &h, want_port)
                } else {
                    model_on_authority(wild, &entry, eport, &auth, !connect, if connect { 443 } else { 80 })
                };
                if junk.is_none() {
                    // a clean request: its destination is the generated one, and the
                    // decision is the model's
                    prop_assert_eq!(got, Host::Name(host.join(".").to_ascii_lowercase()));
                    prop_assert_eq!(got_port, want_port);
                    prop_assert_eq!(allowed, modelled, "{:?}", text);
                } else {
                    // never allowed where the model refuses
                    prop_assert!(!allowed || modelled, "{:?} allowed as {}:{}", text, got, got_port);
                }
            }
            Err(_) => prop_assert!(junk.is_some(), "a clean request refused: {:?}", text),
        }
    }
}

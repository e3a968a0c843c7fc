//! The HTTP/1.x request head as the proxy sees it: reading it with a size bound, parsing it
//! strictly, finding the destination (`CONNECT host:port` or an absolute-form
//! `http://host[:port]/path` URI), and rewriting a forwarded request to origin form.
//!
//! Parsing is deliberately strict: CRLF line ends only, no obs-fold continuation lines, no
//! control characters in values, token-only methods and header names. Anything else is a
//! `400 Bad Request`.

use super::allowlist::Host;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Why no request head could be read.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error("request head larger than {0} bytes")]
    TooLarge(usize),
    #[error("connection closed before a complete request head")]
    Closed,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Read up to and including the blank line ending the head. Returns the head (with its
/// final CRLFCRLF) and whatever bytes followed it in the same reads.
pub async fn read_head<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<(Vec<u8>, Vec<u8>), HeadError> {
    read_head_after(r, max, Vec::new()).await
}

/// [`read_head`] for a head whose first bytes, `start`, were already read.
pub async fn read_head_after<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
    mut buf: Vec<u8>,
) -> Result<(Vec<u8>, Vec<u8>), HeadError> {
    let mut chunk = [0u8; 4096];
    // where the end of the head may start in what has not been searched yet
    let mut from = 0;
    loop {
        if let Some(i) = find(&buf[from..], b"\r\n\r\n") {
            let end = from + i + 4;
            if end > max {
                return Err(HeadError::TooLarge(max));
            }
            let rest = buf.split_off(end);
            return Ok((buf, rest));
        }
        if buf.len() > max {
            return Err(HeadError::TooLarge(max));
        }
        from = buf.len().saturating_sub(3);
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    pub target: String,
    /// `"HTTP/1.0"` or `"HTTP/1.1"`.
    pub version: String,
    /// Header names as sent, values with surrounding whitespace trimmed.
    pub headers: Vec<(String, Vec<u8>)>,
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Parse a head returned by [`read_head`].
pub fn parse_head(head: &[u8]) -> Result<RequestHead, String> {
    if !head.ends_with(b"\r\n\r\n") {
        return Err("request head does not end with a blank line".into());
    }
    // every line then ends in `\r`: keep the last line's CR, drop its LF and the blank line
    let head = &head[..head.len() - 3];
    let mut lines = head.split(|&b| b == b'\n').map(|l| {
        l.strip_suffix(b"\r")
            .ok_or("bare LF in request head (CRLF required)")
    });
    let request_line = lines.next().ok_or("empty request")??;
    let parts: Vec<&[u8]> = request_line.split(|&b| b == b' ').collect();
    let [method, target, version] = parts[..] else {
        return Err("malformed request line (want `METHOD TARGET HTTP/1.1`)".into());
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err("malformed method".into());
    }
    if target.is_empty() || !target.iter().all(|&b| (0x21..0x7f).contains(&b)) {
        return Err("malformed request target".into());
    }
    if version != b"HTTP/1.1" && version != b"HTTP/1.0" {
        return Err("only HTTP/1.0 and HTTP/1.1 are supported".into());
    }
    let mut headers = Vec::new();
    for line in lines {
        let line = line?;
        if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
            return Err("obsolete line folding in headers is not accepted".into());
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or("header line without `:`")?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err("malformed header name".into());
        }
        if value
            .iter()
            .any(|&b| b == b'\r' || b == 0 || b == 0x7f || (b < 0x20 && b != b'\t'))
        {
            return Err("control character in a header value".into());
        }
        let value = value.trim_ascii();
        headers.push((String::from_utf8_lossy(name).into_owned(), value.to_vec()));
    }
    Ok(RequestHead {
        method: String::from_utf8_lossy(method).into_owned(),
        target: String::from_utf8_lossy(target).into_owned(),
        version: String::from_utf8_lossy(version).into_owned(),
        headers,
    })
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `CONNECT host:port`: a tunnel.
    Connect { host: Host, port: u16 },
    /// An absolute-form `http://` request, forwarded in origin form.
    Http {
        host: Host,
        port: u16,
        /// The authority as it goes into the `Host` header (`host` or `host:port`).
        authority: String,
        /// Origin form: `/path?query` (never empty; fragment dropped).
        path: String,
    },
}

impl Target {
    pub fn host_port(&self) -> (&Host, u16) {
        match self {
            Target::Connect { host, port } | Target::Http { host, port, .. } => (host, *port),
        }
    }
}

/// Split `host[:port]` / `[v6][:port]` into a host and an optional port.
pub(crate) fn split_authority(auth: &str) -> Result<(Host, Option<u16>), String> {
    if auth.contains('@') {
        return Err("credentials in the request target are not accepted".into());
    }
    let (host, port) = if auth.starts_with('[') {
        let close = auth.find(']').ok_or("unterminated `[` in host")?;
        let (h, after) = auth.split_at(close + 1);
        match after {
            "" => (h, None),
            p => (
                h,
                Some(p.strip_prefix(':').ok_or("junk after `]` in host")?),
            ),
        }
    } else {
        match auth.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (auth, None),
        }
    };
    let port = match port {
        None | Some("") => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return Err(format!("`{p}` is not a port")),
        },
    };
    if !host.starts_with('[') && host.contains(':') {
        return Err("IPv6 hosts must be in brackets".into());
    }
    Ok((Host::parse(host)?, port))
}

/// The destination of a request head.
pub fn target(head: &RequestHead) -> Result<Target, String> {
    if head.method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_authority(&head.target)?;
        let port = port.ok_or("CONNECT needs `host:port`")?;
        return Ok(Target::Connect { host, port });
    }
    let t = &head.target;
    let scheme_end = t
        .find("://")
        .ok_or("not a proxy request: send an absolute URI (`GET http://host/path`) or CONNECT")?;
    let scheme = &t[..scheme_end];
    if scheme.eq_ignore_ascii_case("https") {
        return Err("https:// must go through CONNECT, not plain forwarding".into());
    }
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(format!(
            "unsupported scheme `{scheme}` (http only; CONNECT for tunnels)"
        ));
    }
    let rest = &t[scheme_end + 3..];
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..auth_end];
    let (host, port) = split_authority(authority)?;
    let mut path = rest[auth_end..].to_string();
    if let Some(i) = path.find('#') {
        path.truncate(i);
    }
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    let authority = match port {
        Some(p) if p != 80 => format!("{host}:{p}"),
        _ => host.to_string(),
    };
    Ok(Target::Http {
        host,
        port: port.unwrap_or(80),
        authority,
        path,
    })
}

/// Headers that belong to one connection and are never forwarded (RFC 9110 §7.6.1),
/// besides every `Proxy-*` header and any header the `Connection` header names.
/// `Transfer-Encoding` is kept: the body is forwarded byte for byte, as framed.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "host",
];

/// The head to send upstream for an [`Target::Http`] request: origin-form target, `Host`
/// set to the URI's authority, hop-by-hop and `Proxy-*` headers removed, and
/// `Connection: close` (one request per upstream connection).
pub fn rewrite_origin(head: &RequestHead, authority: &str, path: &str) -> Vec<u8> {
    let named: Vec<String> = head
        .headers
        .iter()
        .filter(|(n, _)| {
            n.eq_ignore_ascii_case("connection") || n.eq_ignore_ascii_case("proxy-connection")
        })
        .flat_map(|(_, v)| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(format!("{} {} {}\r\n", head.method, path, head.version).as_bytes());
    out.extend_from_slice(format!("Host: {authority}\r\n").as_bytes());
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str())
            || lower.starts_with("proxy-")
            || named.contains(&lower)
        {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// A complete, closing response with a plain-text body.
pub fn simple_response(status: u16, reason: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(s: &str) -> RequestHead {
        parse_head(s.as_bytes()).unwrap()
    }

    #[tokio::test]
    async fn reads_head_and_leftover() {
        let data = b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\nBODY".to_vec();
        let (h, rest) = read_head(&mut &data[..], 1024).await.unwrap();
        assert!(h.ends_with(b"\r\n\r\n"));
        assert_eq!(rest, b"BODY");
        let big = vec![b'a'; 5000];
        assert!(matches!(
            read_head(&mut &big[..], 1024).await,
            Err(HeadError::TooLarge(1024))
        ));
        assert!(matches!(
            read_head(&mut &b"GET / HTTP/1.1\r\n"[..], 1024).await,
            Err(HeadError::Closed)
        ));
        // a head already read in part, its end split across the start and the stream
        let start = b"GET http://a.test/ HTTP/1.1\r\nHost: a\r\n\r".to_vec();
        let (h, rest) = read_head_after(&mut &b"\nX"[..], 1024, start)
            .await
            .unwrap();
        assert!(h.ends_with(b"a\r\n\r\n"));
        assert_eq!(rest, b"X");
        // or wholly in the start: nothing more is read
        let start = b"GET http://a.test/ HTTP/1.1\r\n\r\nY".to_vec();
        let (_, rest) = read_head_after(&mut &b""[..], 1024, start).await.unwrap();
        assert_eq!(rest, b"Y");
    }

    #[test]
    fn strict_parsing() {
        assert!(parse_head(b"GET http://a/ HTTP/1.1\nHost: a\r\n\r\n").is_err());
        assert!(parse_head(b"GET http://a/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n").is_err());
        assert!(parse_head(b"GET http://a/ HTTP/2\r\n\r\n").is_err());
        assert!(parse_head(b"GET  http://a/ HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_head(b"GET http://a/ HTTP/1.1\r\nBad Name: x\r\n\r\n").is_err());
        assert!(parse_head(b"GET http://a/ HTTP/1.1\r\nX: a\x00b\r\n\r\n").is_err());
        let h = head("CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\nX:  v  \r\n\r\n");
        assert_eq!(h.method, "CONNECT");
        assert_eq!(h.headers[1], ("X".to_string(), b"v".to_vec()));
    }

    #[test]
    fn targets() {
        let t = target(&head("CONNECT Example.COM.:443 HTTP/1.1\r\n\r\n")).unwrap();
        assert_eq!(
            t,
            Target::Connect {
                host: Host::Name("example.com".into()),
                port: 443
            }
        );
        let t = target(&head("CONNECT [::1]:8080 HTTP/1.1\r\n\r\n")).unwrap();
        assert_eq!(t.host_port().1, 8080);
        assert!(target(&head("CONNECT a.test HTTP/1.1\r\n\r\n")).is_err());
        assert!(target(&head("CONNECT ::1:80 HTTP/1.1\r\n\r\n")).is_err());
        assert!(target(&head("CONNECT u@a.test:80 HTTP/1.1\r\n\r\n")).is_err());
        assert!(target(&head("CONNECT a.test:0 HTTP/1.1\r\n\r\n")).is_err());
        assert!(target(&head("CONNECT a.test:+80 HTTP/1.1\r\n\r\n")).is_err());

        let t = target(&head(
            "GET http://127.0.0.1:8080/x?y=1#frag HTTP/1.1\r\n\r\n",
        ))
        .unwrap();
        assert_eq!(
            t,
            Target::Http {
                host: Host::Ip("127.0.0.1".parse().unwrap()),
                port: 8080,
                authority: "127.0.0.1:8080".into(),
                path: "/x?y=1".into()
            }
        );
        let t = target(&head("GET HTTP://a.test?q HTTP/1.1\r\n\r\n")).unwrap();
        assert_eq!(
            t,
            Target::Http {
                host: Host::Name("a.test".into()),
                port: 80,
                authority: "a.test".into(),
                path: "/?q".into()
            }
        );
        assert!(target(&head("GET / HTTP/1.1\r\n\r\n")).is_err());
        assert!(target(&head("GET https://a.test/ HTTP/1.1\r\n\r\n")).is_err());
        assert!(target(&head("GET ftp://a.test/ HTTP/1.1\r\n\r\n")).is_err());
        assert!(target(&head("GET http://u:p@a.test/ HTTP/1.1\r\n\r\n")).is_err());
    }

    #[test]
    fn rewrite_strips_hop_by_hop() {
        let h = head(
            "POST http://a.test:81/p HTTP/1.1\r\nHost: evil.test\r\nProxy-Authorization: Basic x\r\n\
             Proxy-Connection: keep-alive\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\n\
             Keep-Alive: 5\r\nTE: trailers\r\nUpgrade: h2c\r\nContent-Length: 4\r\nAccept: */*\r\n\r\n",
        );
        let Target::Http {
            authority, path, ..
        } = target(&h).unwrap()
        else {
            panic!()
        };
        let out = String::from_utf8(rewrite_origin(&h, &authority, &path)).unwrap();
        assert_eq!(
            out,
            "POST /p HTTP/1.1\r\nHost: a.test:81\r\nContent-Length: 4\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }
}

//! The request path to a host a secret is for: every request on the connection is read
//! (head and body framing), its placeholders replaced ([`Secrets::substitute`]), and
//! written upstream; responses come back scrubbed of the values ([`super::responses`]).
//!
//! The requests are rewritten so that what comes back can be scrubbed: they ask for no
//! content coding (`Accept-Encoding: identity`, no `TE`), and for no part of a
//! resource (`Range`, `If-Range` dropped: pieces of one response could otherwise carry
//! a value past the scrubbing in slices).
//!
//! This is what a client gets after `CONNECT` (or SOCKS5) to such a host: TLS terminated
//! by the proxy ([`super::tls`]) when the client starts a handshake, else plain HTTP in
//! the tunnel. Requests are HTTP/1.x, each framed by `Content-Length` or chunked
//! `Transfer-Encoding` (both, or another coding, is refused: a request smuggled past the
//! framing would skip substitution and the checks). A request whose `Host` (or absolute
//! URI) names another host than the connection's is not substituted: its placeholder is a
//! leak, so a shared front end (a CDN) cannot be asked to route the value elsewhere.
//! After an `Upgrade` request the connection's bytes are copied as they are.

use super::allowlist::Host;
use super::http::{self, RequestHead};
use super::refusal::RefusalLog;
use super::responses::{self, Asked};
use super::secrets::Secrets;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::mpsc::UnboundedSender;

/// The destination a connection's requests go to.
pub struct Site<'a> {
    pub host: &'a Host,
    pub port: u16,
    pub secrets: &'a Secrets,
    pub log: Option<&'a RefusalLog>,
    /// The exec's list of refusals (under `capsule exec`).
    pub refusals: Option<&'a std::sync::Arc<crate::refusals::Collector>>,
    /// Who is behind the connection (refusals name its program).
    pub who: Option<&'a super::refusal::Who>,
    pub max_head: usize,
    pub idle: Option<Duration>,
}

/// A stream that first yields `prefix` (bytes already read from `inner`).
pub struct Prefixed<S> {
    prefix: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    pub fn new(prefix: Vec<u8>, inner: S) -> Self {
        Prefixed {
            prefix,
            pos: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.pos < self.prefix.len() {
            let n = (self.prefix.len() - self.pos).min(buf.remaining());
            let start = self.pos;
            buf.put_slice(&self.prefix[start..start + n]);
            self.pos += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Buffered input from the client.
struct Input<R> {
    r: R,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Input<R> {
    async fn fill(&mut self) -> std::io::Result<usize> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.r.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// One line (CRLF-terminated, at most `max` bytes), without its CRLF.
    async fn line(&mut self, max: usize) -> Result<Vec<u8>, End> {
        let mut from = 0;
        loop {
            if let Some(i) = self.buf[from..].windows(2).position(|w| w == b"\r\n") {
                let end = from + i;
                let line = self.buf[..end].to_vec();
                self.buf.drain(..end + 2);
                return Ok(line);
            }
            if self.buf.len() > max {
                return Err(End::Bad("chunk line too long".into()));
            }
            from = self.buf.len().saturating_sub(1);
            if self.fill().await.map_err(|_| End::Closed)? == 0 {
                return Err(End::Bad("connection closed inside a request body".into()));
            }
        }
    }

    /// Copy exactly `n` bytes to `w`.
    async fn copy<W: AsyncWrite + Unpin>(&mut self, mut n: u64, w: &mut W) -> Result<(), End> {
        while n > 0 {
            if self.buf.is_empty() && self.fill().await.map_err(|_| End::Closed)? == 0 {
                return Err(End::Bad("connection closed inside a request body".into()));
            }
            let k = (self.buf.len() as u64).min(n) as usize;
            w.write_all(&self.buf[..k]).await.map_err(|_| End::Closed)?;
            self.buf.drain(..k);
            n -= k as u64;
        }
        Ok(())
    }
}

/// Why the request loop stopped.
enum End {
    /// The client is done (or the connection failed): close normally.
    Closed,
    /// After an `Upgrade`: copy the rest as is.
    Upgraded,
    /// A malformed request: `400`.
    Bad(String),
    /// A placeholder for another host: `403`.
    Refused(String),
}

/// How a request's body is framed.
enum Body {
    None,
    Length(u64),
    Chunked,
}

fn header<'a>(h: &'a RequestHead, name: &str) -> Vec<&'a [u8]> {
    h.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
        .collect()
}

fn body_of(h: &RequestHead) -> Result<Body, String> {
    let te = header(h, "transfer-encoding");
    let cl = header(h, "content-length");
    if !te.is_empty() {
        if !cl.is_empty() {
            return Err("both Transfer-Encoding and Content-Length".into());
        }
        if te.len() != 1 || !te[0].eq_ignore_ascii_case(b"chunked") {
            return Err("a Transfer-Encoding other than `chunked`".into());
        }
        return Ok(Body::Chunked);
    }
    match cl.as_slice() {
        [] => Ok(Body::None),
        [v] if !v.is_empty() && v.iter().all(u8::is_ascii_digit) && v.len() < 19 => {
            Ok(Body::Length(
                std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0),
            ))
        }
        _ => Err("a malformed or repeated Content-Length".into()),
    }
}

/// Does the request (its `Host` header, or an absolute-form target) name `site`?
fn names_site(h: &RequestHead, host: &Host, port: u16) -> bool {
    let authority = if h.target.contains("://") {
        match http::target(h) {
            Ok(http::Target::Http { authority, .. }) => Some(authority),
            _ => return false,
        }
    } else {
        match header(h, "host").as_slice() {
            [] => None,
            [v] => Some(String::from_utf8_lossy(v).into_owned()),
            _ => return false,
        }
    };
    let Some(a) = authority else {
        return true;
    };
    match http::split_authority(&a) {
        Ok((h2, p2)) => &h2 == host && p2.unwrap_or(port) == port,
        Err(_) => false,
    }
}

/// Request headers dropped on the way to a secret's host (what the response is scrubbed
/// for depends on it: see the module's comment); `Accept-Encoding: identity` is added.
const DROPPED: [&str; 4] = ["accept-encoding", "te", "range", "if-range"];

/// Ask for a response the scrubbing can read whole.
fn plain_response(h: &mut RequestHead) {
    h.headers
        .retain(|(n, _)| !DROPPED.iter().any(|d| n.eq_ignore_ascii_case(d)));
    h.headers
        .push(("Accept-Encoding".to_string(), b"identity".to_vec()));
}

fn serialize(h: &RequestHead) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(format!("{} {} {}\r\n", h.method, h.target, h.version).as_bytes());
    for (n, v) in &h.headers {
        out.extend_from_slice(n.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Read requests from `input`, substitute, write them to `up`, until the client is done;
/// what each implies for its response goes to `asked` first.
async fn requests<R, W>(
    input: &mut Input<R>,
    up: &mut W,
    site: &Site<'_>,
    asked: &UnboundedSender<Asked>,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        if input.buf.is_empty() {
            match input.fill().await {
                Ok(0) | Err(_) => return End::Closed,
                Ok(_) => {}
            }
        }
        let start = std::mem::take(&mut input.buf);
        let (head_bytes, rest) =
            match http::read_head_after(&mut input.r, site.max_head, start).await {
                Ok(h) => h,
                Err(http::HeadError::TooLarge(n)) => {
                    return End::Bad(format!("request head larger than {n} bytes"))
                }
                Err(_) => return End::Closed,
            };
        input.buf = rest;
        let mut head = match http::parse_head(&head_bytes) {
            Ok(h) => h,
            Err(e) => return End::Bad(e),
        };
        let body = match body_of(&head) {
            Ok(b) => b,
            Err(e) => return End::Bad(format!("refusing a request with {e}")),
        };
        let leak = if names_site(&head, site.host, site.port) {
            site.secrets
                .substitute(&mut head, site.host, site.port)
                .err()
        } else {
            // another authority on this connection: nothing is for it
            site.secrets
                .placeholder_in(&head_bytes)
                .map(|s| super::secrets::Leak {
                    secret: s.to_string(),
                    header: "Host".into(),
                })
        };
        if let Some(leak) = leak {
            let host = site.host.to_string();
            super::refusal::report_leak(site.log, site.refusals, &host, site.port, &leak, site.who)
                .await;
            tracing::info!(%host, port = site.port, secret = %leak.secret, header = %leak.header, "proxy: placeholder refused");
            return End::Refused(format!("capsule: refused: {leak}\n"));
        }
        let upgrade = !header(&head, "upgrade").is_empty();
        plain_response(&mut head);
        let _ = asked.send(Asked {
            head_only: head.method.eq_ignore_ascii_case("HEAD"),
            http10: head.version == "HTTP/1.0",
        });
        if up.write_all(&serialize(&head)).await.is_err() {
            return End::Closed;
        }
        let r = match body {
            Body::None => Ok(()),
            Body::Length(n) => input.copy(n, up).await,
            Body::Chunked => chunked(input, up).await,
        };
        if let Err(e) = r {
            return e;
        }
        if upgrade {
            return End::Upgraded;
        }
    }
}

/// Copy one chunked body (chunks, the last chunk, trailers) as framed.
async fn chunked<R, W>(input: &mut Input<R>, up: &mut W) -> Result<(), End>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let line = input.line(4096).await?;
        let size = line
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        let n = std::str::from_utf8(size)
            .ok()
            .filter(|s| !s.is_empty() && s.len() <= 15 && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or_else(|| End::Bad("a malformed chunk size".into()))?;
        let mut l = line;
        l.extend_from_slice(b"\r\n");
        up.write_all(&l).await.map_err(|_| End::Closed)?;
        if n == 0 {
            // trailers, then the blank line
            loop {
                let t = input.line(8192).await?;
                let mut t2 = t.clone();
                t2.extend_from_slice(b"\r\n");
                up.write_all(&t2).await.map_err(|_| End::Closed)?;
                if t.is_empty() {
                    return Ok(());
                }
            }
        }
        input.copy(n + 2, up).await?;
    }
}

/// Serve one client connection to `site` over `upstream` (both already connected, TLS
/// or not): requests substituted on the way up, responses scrubbed on the way down.
pub async fn serve<C, U>(client: C, upstream: U, site: Site<'_>)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (cr, mut cw) = tokio::io::split(client);
    let (mut ur, mut uw) = tokio::io::split(upstream);
    let mut input = Input {
        r: cr,
        buf: Vec::new(),
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let end = {
        let d = responses::Down {
            site: super::refusal::target(&site.host.to_string(), site.port),
            scrub: site.secrets.scrubber(),
            idle: site.idle,
        };
        let down = responses::serve(&mut ur, &mut cw, &mut rx, d);
        tokio::pin!(down);
        let mut up = Box::pin(requests(&mut input, &mut uw, &site, &tx));
        let end = tokio::select! {
            e = &mut up => e,
            _ = &mut down => return,
        };
        drop(up);
        // no request follows: a response nobody asked for ends the responses
        drop(tx);
        match end {
            End::Closed => {
                let _ = uw.shutdown().await;
                let _ = (&mut down).await;
                return;
            }
            End::Upgraded => {
                let pending = std::mem::take(&mut input.buf);
                if !pending.is_empty() && uw.write_all(&pending).await.is_err() {
                    return;
                }
                let upc = copy_idle(&mut input.r, &mut uw, site.idle);
                let _ = tokio::join!(upc, &mut down);
                return;
            }
            e => e,
        }
    };
    let (status, reason, body) = match end {
        End::Bad(m) => (
            400,
            "Bad Request",
            format!("capsule proxy: bad request: {m}\n"),
        ),
        End::Refused(m) => (403, "Forbidden", m),
        End::Closed | End::Upgraded => return,
    };
    let _ = cw
        .write_all(&http::simple_response(status, reason, &body))
        .await;
    let _ = cw.shutdown().await;
}

/// Copy `r` to `w` until end of file, an error, or `idle` without a byte; then shut `w`.
async fn copy_idle<R, W>(r: &mut R, w: &mut W, idle: Option<Duration>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let read = r.read(&mut buf);
        let n = match idle {
            Some(d) => match tokio::time::timeout(d, read).await {
                Ok(r) => r,
                Err(_) => break,
            },
            None => read.await,
        };
        match n {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if w.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = w.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(s: &str) -> RequestHead {
        http::parse_head(s.as_bytes()).unwrap()
    }

    #[test]
    fn site_names() {
        let h = Host::parse("api.test").unwrap();
        assert!(names_site(
            &head("GET / HTTP/1.1\r\nHost: api.test\r\n\r\n"),
            &h,
            443
        ));
        assert!(names_site(
            &head("GET / HTTP/1.1\r\nHost: API.test:443\r\n\r\n"),
            &h,
            443
        ));
        assert!(names_site(&head("GET / HTTP/1.0\r\n\r\n"), &h, 443));
        assert!(!names_site(
            &head("GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"),
            &h,
            443
        ));
        assert!(!names_site(
            &head("GET / HTTP/1.1\r\nHost: api.test:8443\r\n\r\n"),
            &h,
            443
        ));
        assert!(!names_site(
            &head("GET / HTTP/1.1\r\nHost: api.test\r\nHost: evil.test\r\n\r\n"),
            &h,
            443
        ));
        assert!(!names_site(
            &head("GET http://evil.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n"),
            &h,
            80
        ));
        let ip = Host::parse("127.0.0.1").unwrap();
        assert!(names_site(
            &head("GET / HTTP/1.1\r\nHost: 127.0.0.1:8443\r\n\r\n"),
            &ip,
            8443
        ));
        let v6 = Host::parse("::1").unwrap();
        assert!(names_site(
            &head("GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n"),
            &v6,
            443
        ));
    }

    #[test]
    fn framing() {
        assert!(matches!(
            body_of(&head("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n")),
            Ok(Body::Length(5))
        ));
        assert!(matches!(
            body_of(&head(
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            )),
            Ok(Body::Chunked)
        ));
        assert!(body_of(&head(
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
        ))
        .is_err());
        assert!(body_of(&head(
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
        ))
        .is_err());
        assert!(body_of(&head(
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"
        ))
        .is_err());
        assert!(body_of(&head("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n")).is_err());
    }
}

//! The response path from a host a secret is for: every response on the connection is
//! read (head and body framing), each secret's value in it replaced with the secret's
//! placeholder ([`super::scrub`]), and written to the client. A response never carries a
//! value into the sandbox, whichever way the server reflects the request (headers echoed
//! into the body, an error page quoting it, a header of its own).
//!
//! - Heads are scrubbed whole (status line, header names and values), bodies as a
//!   stream, split anywhere: across reads, chunks and TLS records.
//! - A body whose `Content-Length` is at most [`WHOLE`] is read whole, scrubbed and sent
//!   with its length set again; a longer one, and a chunked one, is sent chunked (to an
//!   HTTP/1.0 client: delimited by closing the connection); one delimited by the
//!   server's close stays so. Trailers are scrubbed as heads are.
//! - The requests ask for no content coding (`Accept-Encoding: identity`, see
//!   [`super::intercept`]): a response that still comes compressed (a
//!   `Content-Encoding` or a `Transfer-Encoding` other than `chunked`) cannot be read
//!   for values and is refused, `502` with the reason, instead of being passed on.
//! - After `101 Switching Protocols` the rest of the connection is scrubbed as one
//!   stream.
//!
//! Responses follow requests in order: [`super::intercept`] sends what each request
//! implies for its response ([`Asked`]: a `HEAD` has no body, an HTTP/1.0 client takes
//! no chunks) before it sends the request on.

use super::http;
use super::scrub::{Scrubber, Stream};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::UnboundedReceiver;

/// Largest response head accepted (`502` beyond).
pub const MAX_HEAD: usize = 64 * 1024;

/// A body of at most this `Content-Length` is scrubbed whole and keeps a `Content-Length`.
pub const WHOLE: u64 = 256 * 1024;

/// What a request implies for its response.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked {
    /// A `HEAD` request: the response has no body, whatever its head says.
    pub head_only: bool,
    /// The client spoke HTTP/1.0: no chunked framing for it.
    pub http10: bool,
}

/// Where the responses come from and how they are scrubbed.
pub struct Down<'a> {
    /// `host:port`, for messages.
    pub site: String,
    pub scrub: &'a Scrubber,
    pub idle: Option<Duration>,
}

/// Why the response loop stopped early.
enum Fail {
    /// The server closed, timed out or the client went away: stop.
    Closed,
    /// Cannot be passed on, known before its head was written: `502` with this reason.
    Refuse(String),
}

/// Buffered input from the server.
struct Up<'r, R> {
    r: &'r mut R,
    buf: Vec<u8>,
    idle: Option<Duration>,
}

impl<R: AsyncRead + Unpin> Up<'_, R> {
    /// Read more (`Ok(0)`: end of file).
    async fn fill(&mut self) -> std::io::Result<usize> {
        self.buf.reserve(64 * 1024);
        let read = self.r.read_buf(&mut self.buf);
        match self.idle {
            Some(d) => tokio::time::timeout(d, read)
                .await
                .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into())),
            None => read.await,
        }
    }

    /// The next head (through its blank line), at most `max` bytes.
    async fn head(&mut self, max: usize) -> Result<Vec<u8>, Fail> {
        let mut from = 0;
        loop {
            if let Some(i) = find(&self.buf[from..], b"\r\n\r\n") {
                let end = from + i + 4;
                if end > max {
                    break;
                }
                let rest = self.buf.split_off(end);
                return Ok(std::mem::replace(&mut self.buf, rest));
            }
            if self.buf.len() > max {
                break;
            }
            from = self.buf.len().saturating_sub(3);
            if self.fill().await.map_err(|_| Fail::Closed)? == 0 {
                return Err(Fail::Closed);
            }
        }
        Err(Fail::Refuse(format!(
            "a response head larger than {max} bytes"
        )))
    }

    /// One line (without its CRLF), at most `max` bytes.
    async fn line(&mut self, max: usize) -> Result<Vec<u8>, Fail> {
        let mut from = 0;
        loop {
            if let Some(i) = find(&self.buf[from..], b"\r\n") {
                let end = from + i;
                let line = self.buf[..end].to_vec();
                self.buf.drain(..end + 2);
                return Ok(line);
            }
            if self.buf.len() > max {
                return Err(Fail::Closed);
            }
            from = self.buf.len().saturating_sub(1);
            if self.fill().await.map_err(|_| Fail::Closed)? == 0 {
                return Err(Fail::Closed);
            }
        }
    }

    /// Up to `max` bytes of what is buffered, reading if nothing is (`None`: end of file).
    async fn some(&mut self, max: u64) -> Result<Option<Vec<u8>>, Fail> {
        if self.buf.is_empty() && self.fill().await.map_err(|_| Fail::Closed)? == 0 {
            return Ok(None);
        }
        if (self.buf.len() as u64) <= max {
            return Ok(Some(std::mem::take(&mut self.buf)));
        }
        let rest = self.buf.split_off(max as usize);
        Ok(Some(std::mem::replace(&mut self.buf, rest)))
    }

    /// How much of at most `max` bytes is buffered, reading if nothing is (0: end of
    /// file); the caller reads `buf[..n]` and [`Up::consume`]s it, so the buffer is kept.
    async fn avail(&mut self, max: u64) -> Result<usize, Fail> {
        if self.buf.is_empty() && self.fill().await.map_err(|_| Fail::Closed)? == 0 {
            return Ok(0);
        }
        Ok((self.buf.len() as u64).min(max) as usize)
    }

    fn consume(&mut self, n: usize) {
        if n == self.buf.len() {
            self.buf.clear();
        } else {
            self.buf.drain(..n);
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A response head, already scrubbed.
#[derive(Debug)]
struct Head {
    line: Vec<u8>,
    status: u16,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Head {
    fn parse(raw: &[u8]) -> Result<Head, String> {
        let raw = raw.strip_suffix(b"\r\n\r\n").unwrap_or(raw);
        let mut lines = raw
            .split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
        let line = lines.next().unwrap_or_default().to_vec();
        let status = (line.starts_with(b"HTTP/1.") && line.len() >= 12 && line[8] == b' ')
            .then(|| std::str::from_utf8(&line[9..12]).ok()?.parse::<u16>().ok())
            .flatten()
            .filter(|s| (100..1000).contains(s))
            .ok_or("a malformed status line")?;
        let mut headers = Vec::new();
        for l in lines {
            if l.starts_with(b" ") || l.starts_with(b"\t") {
                return Err("a folded header line".into());
            }
            let colon = l
                .iter()
                .position(|&b| b == b':')
                .ok_or("a header line without `:`")?;
            let name = &l[..colon];
            if name.is_empty() || name.iter().any(|b| b.is_ascii_whitespace()) {
                return Err("a malformed header name".into());
            }
            headers.push((name.to_vec(), l[colon + 1..].trim_ascii().to_vec()));
        }
        Ok(Head {
            line,
            status,
            headers,
        })
    }

    fn get<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v.as_slice())
    }

    /// The comma-separated tokens of every `name` header, lower-cased.
    fn tokens(&self, name: &str) -> Vec<String> {
        self.get(name)
            .flat_map(|v| {
                String::from_utf8_lossy(v)
                    .split(',')
                    .map(|t| t.trim().to_ascii_lowercase())
                    .filter(|t| !t.is_empty())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn remove(&mut self, name: &str) {
        self.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case(name.as_bytes()));
    }

    fn set(&mut self, name: &str, value: &str) {
        self.remove(name);
        self.headers
            .push((name.as_bytes().to_vec(), value.as_bytes().to_vec()));
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(&self.line);
        out.extend_from_slice(b"\r\n");
        for (n, v) in &self.headers {
            out.extend_from_slice(n);
            out.extend_from_slice(b": ");
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out
    }
}

/// How a response's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    None,
    Length(u64),
    Chunked,
    /// Until the server closes.
    Close,
}

fn framing(h: &Head, asked: Asked) -> Result<Frame, String> {
    if asked.head_only || h.status == 204 || h.status == 304 || h.status < 200 {
        return Ok(Frame::None);
    }
    let te = h.tokens("transfer-encoding");
    if !te.is_empty() {
        if te != ["chunked"] {
            return Err(format!(
                "Transfer-Encoding `{}`, which the proxy cannot read for secrets",
                te.join(", ")
            ));
        }
        return Ok(Frame::Chunked);
    }
    let cl = h.tokens("content-length");
    match cl.first() {
        None => Ok(Frame::Close),
        Some(v)
            if cl.iter().all(|c| c == v)
                && v.len() < 19
                && v.bytes().all(|b| b.is_ascii_digit()) =>
        {
            Ok(Frame::Length(v.parse().unwrap_or(0)))
        }
        Some(_) => Err("a malformed or conflicting Content-Length".into()),
    }
}

/// Scrub and pass on the responses read from `up` to `client` until either side is done.
/// A response refused before its head went out is answered `502` and ends the connection.
pub async fn serve<R, W>(
    up: &mut R,
    client: &mut W,
    asked: &mut UnboundedReceiver<Asked>,
    d: Down<'_>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut up = Up {
        r: up,
        buf: Vec::new(),
        idle: d.idle,
    };
    match responses(&mut up, client, asked, &d).await {
        Ok(()) | Err(Fail::Closed) => {}
        Err(Fail::Refuse(why)) => {
            tracing::info!(site = %d.site, "proxy: response refused: {why}");
            let body = format!(
                "capsule proxy: refused the response of {}: {why} (responses from a secret's host are scrubbed of its value; ask for an uncompressed response)\n",
                d.site
            );
            let _ = client
                .write_all(&http::simple_response(502, "Bad Gateway", &body))
                .await;
        }
    }
    let _ = client.shutdown().await;
}

async fn responses<R, W>(
    up: &mut Up<'_, R>,
    client: &mut W,
    asked: &mut UnboundedReceiver<Asked>,
    d: &Down<'_>,
) -> Result<(), Fail>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let sc = d.scrub;
    let mut interim: Option<Asked> = None;
    loop {
        if up.buf.is_empty() && up.fill().await.map_err(|_| Fail::Closed)? == 0 {
            return Ok(());
        }
        let raw = up.head(MAX_HEAD).await?;
        let (raw, _) = sc.all(&raw);
        let mut head = Head::parse(&raw)
            .map_err(|e| Fail::Refuse(format!("a malformed response head: {e}")))?;
        let a = match interim.take() {
            Some(a) => a,
            None => asked.recv().await.unwrap_or_default(),
        };
        if head.status == 101 {
            send(client, &head.bytes()).await?;
            return close_delimited(up, client, sc.stream()).await;
        }
        if head.status < 200 {
            // an interim response: the final one for the same request follows
            send(client, &head.bytes()).await?;
            interim = Some(a);
            continue;
        }
        let frame = framing(&head, a).map_err(Fail::Refuse)?;
        let coded: Vec<String> = head
            .tokens("content-encoding")
            .into_iter()
            .filter(|c| c != "identity")
            .collect();
        if !coded.is_empty() && !matches!(frame, Frame::None | Frame::Length(0)) {
            return Err(Fail::Refuse(format!(
                "it is compressed (Content-Encoding `{}`), which the proxy cannot read for secrets",
                coded.join(", ")
            )));
        }
        match frame {
            Frame::None => send(client, &head.bytes()).await?,
            Frame::Length(n) if n <= WHOLE => {
                let mut body = Vec::with_capacity(n as usize);
                while (body.len() as u64) < n {
                    match up.some(n - body.len() as u64).await? {
                        Some(b) => body.extend_from_slice(&b),
                        None => return Err(Fail::Closed),
                    }
                }
                let (body, k) = sc.all(&body);
                if k > 0 {
                    head.set("Content-Length", &body.len().to_string());
                }
                let mut out = head.bytes();
                out.extend_from_slice(&body);
                send(client, &out).await?;
            }
            Frame::Length(_) | Frame::Chunked => {
                let chunks = !a.http10;
                head.remove("Content-Length");
                head.remove("Transfer-Encoding");
                if chunks {
                    head.set("Transfer-Encoding", "chunked");
                } else {
                    head.set("Connection", "close");
                }
                send(client, &head.bytes()).await?;
                body(up, client, frame, chunks, sc).await?;
                if !chunks {
                    return Ok(());
                }
            }
            Frame::Close => {
                send(client, &head.bytes()).await?;
                return close_delimited(up, client, sc.stream()).await;
            }
        }
    }
}

async fn send<W: AsyncWrite + Unpin>(client: &mut W, bytes: &[u8]) -> Result<(), Fail> {
    client.write_all(bytes).await.map_err(|_| Fail::Closed)
}

/// Write `data` as one chunk (nothing if empty) or as it is.
fn framed(out: &mut Vec<u8>, data: &[u8], chunks: bool) {
    if data.is_empty() {
        return;
    }
    if chunks {
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    } else {
        out.extend_from_slice(data);
    }
}

/// Scrub `data` into `out`, as one chunk if `chunks` (none when nothing comes out yet).
/// The chunk's size is written with a fixed width (leading zeros are valid), so the
/// scrubbed bytes go straight into `out`, without a copy in between.
fn pass(st: &mut Stream<'_>, data: &[u8], out: &mut Vec<u8>, chunks: bool) {
    if !chunks {
        return st.feed(data, out);
    }
    let at = out.len();
    out.extend_from_slice(b"00000000\r\n");
    st.feed(data, out);
    let n = out.len() - at - 10;
    if n == 0 {
        return out.truncate(at);
    }
    // a piece is one read of the server's (well under 4 GiB)
    out[at..at + 8].copy_from_slice(format!("{n:08x}").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Scrub the next piece of at most `left` bytes of the body into `out`; its length.
async fn piece<R: AsyncRead + Unpin>(
    up: &mut Up<'_, R>,
    left: u64,
    st: &mut Stream<'_>,
    out: &mut Vec<u8>,
    chunks: bool,
) -> Result<u64, Fail> {
    let n = up.avail(left).await?;
    if n == 0 {
        return Err(Fail::Closed);
    }
    pass(st, &up.buf[..n], out, chunks);
    up.consume(n);
    Ok(n as u64)
}

/// Pass on one body framed by a length or chunks, scrubbed, as chunks or as it is.
async fn body<R, W>(
    up: &mut Up<'_, R>,
    client: &mut W,
    frame: Frame,
    chunks: bool,
    sc: &Scrubber,
) -> Result<(), Fail>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut st = sc.stream();
    let mut out = Vec::new();
    match frame {
        Frame::Length(mut left) => {
            while left > 0 {
                left -= piece(up, left, &mut st, &mut out, chunks).await?;
                send(client, &out).await?;
                out.clear();
            }
        }
        Frame::Chunked => loop {
            let line = up.line(4096).await?;
            let size = line
                .split(|&b| b == b';')
                .next()
                .unwrap_or_default()
                .trim_ascii();
            let mut left = std::str::from_utf8(size)
                .ok()
                .filter(|s| !s.is_empty() && s.len() <= 15)
                .and_then(|s| u64::from_str_radix(s, 16).ok())
                .ok_or(Fail::Closed)?;
            if left == 0 {
                break;
            }
            while left > 0 {
                left -= piece(up, left, &mut st, &mut out, chunks).await?;
            }
            if !up.line(2).await?.is_empty() {
                return Err(Fail::Closed);
            }
            if !out.is_empty() {
                send(client, &out).await?;
                out.clear();
            }
        },
        Frame::None | Frame::Close => {}
    }
    let mut piece = Vec::new();
    st.finish(&mut piece);
    framed(&mut out, &piece, chunks);
    let mut trailers = Vec::new();
    if frame == Frame::Chunked {
        loop {
            let t = up.line(8192).await?;
            if t.is_empty() {
                break;
            }
            trailers.extend_from_slice(&t);
            trailers.extend_from_slice(b"\r\n");
            if trailers.len() > MAX_HEAD {
                return Err(Fail::Closed);
            }
        }
    }
    if chunks {
        out.extend_from_slice(b"0\r\n");
        out.extend_from_slice(&sc.all(&trailers).0);
        out.extend_from_slice(b"\r\n");
    }
    send(client, &out).await
}

/// Pass on everything until the server closes, scrubbed as one stream.
async fn close_delimited<R, W>(
    up: &mut Up<'_, R>,
    client: &mut W,
    mut st: Stream<'_>,
) -> Result<(), Fail>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut out = Vec::new();
    loop {
        let n = up.avail(u64::MAX).await?;
        if n == 0 {
            break;
        }
        out.clear();
        st.feed(&up.buf[..n], &mut out);
        up.consume(n);
        send(client, &out).await?;
    }
    out.clear();
    st.finish(&mut out);
    send(client, &out).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const PH: &str = "capsule-secret-ph";
    const V: &str = "sk-real-value";

    /// The client's view of `server` (what a server sent, read by the proxy in pieces of
    /// `cut` bytes) for requests `asked`.
    async fn through(server: &[u8], cut: usize, asked: &[Asked]) -> Vec<u8> {
        let sc = Scrubber::new([(V.as_bytes(), PH)]);
        let (mut srv, mut up) = tokio::io::duplex(cut);
        let (mut cl, mut client) = tokio::io::duplex(1 << 20);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for a in asked {
            tx.send(*a).unwrap();
        }
        drop(tx);
        let server = server.to_vec();
        let w = tokio::spawn(async move {
            for c in server.chunks(cut) {
                srv.write_all(c).await.unwrap();
            }
        });
        let d = Down {
            site: "127.0.0.1:1".into(),
            scrub: &sc,
            idle: None,
        };
        let run = serve(&mut up, &mut client, &mut rx, d);
        let mut got = Vec::new();
        let (_, r) = tokio::join!(run, async {
            let r = cl.read_to_end(&mut got).await;
            r
        });
        r.unwrap();
        w.await.unwrap();
        got
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    #[test]
    fn a_length_body_is_scrubbed_and_relengthed() {
        let body = format!("auth=Bearer {V} again={V}\n");
        let resp = format!(
            "HTTP/1.1 200 OK\r\nX-Echo: {V}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        for cut in [1, 3, 7, 64, 4096] {
            let got = text(&rt().block_on(through(resp.as_bytes(), cut, &[Asked::default()])));
            let want_body = format!("auth=Bearer {PH} again={PH}\n");
            assert!(!got.contains(V), "{got}");
            assert!(got.contains(&format!("X-Echo: {PH}\r\n")), "{got}");
            assert!(
                got.contains(&format!("Content-Length: {}\r\n", want_body.len())),
                "{got}"
            );
            assert!(got.ends_with(&format!("\r\n\r\n{want_body}")), "{got}");
        }
    }

    #[test]
    fn chunked_split_values_and_trailers() {
        // the value cut across two chunks, a trailer carrying it
        let resp = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nx sk-r\r\n9;ext=1\r\neal-value\r\n0\r\nX-T: {V}\r\n\r\n"
        );
        for cut in [1, 5, 4096] {
            let got = text(&rt().block_on(through(resp.as_bytes(), cut, &[Asked::default()])));
            assert!(!got.contains(V), "{got}");
            let body = got.split_once("\r\n\r\n").unwrap().1;
            let dechunked = dechunk(body);
            assert_eq!(dechunked, format!("x {PH}"), "{got}");
            assert!(body.ends_with(&format!("0\r\nX-T: {PH}\r\n\r\n")), "{got}");
        }
    }

    fn dechunk(mut s: &str) -> String {
        let mut out = String::new();
        loop {
            let (size, rest) = s.split_once("\r\n").unwrap();
            let n = usize::from_str_radix(size, 16).unwrap();
            if n == 0 {
                return out;
            }
            out.push_str(&rest[..n]);
            s = &rest[n + 2..];
        }
    }

    #[test]
    fn a_long_length_body_goes_chunked_or_close_delimited() {
        let mut body = vec![b'.'; WHOLE as usize + 10];
        body[1000..1000 + V.len()].copy_from_slice(V.as_bytes());
        let n = body.len() - V.len();
        body[n..].copy_from_slice(V.as_bytes());
        let mut resp =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        resp.extend_from_slice(&body);
        let got = text(&rt().block_on(through(&resp, 8192, &[Asked::default()])));
        assert!(!got.contains(V));
        assert!(got.contains("Transfer-Encoding: chunked\r\n") && !got.contains("Content-Length"));
        let d = dechunk(got.split_once("\r\n\r\n").unwrap().1);
        assert_eq!(d.len(), body.len() + 2 * (PH.len() - V.len()));
        assert!(d.ends_with(PH));
        // HTTP/1.0: no chunks, the connection closes
        let a = Asked {
            http10: true,
            ..Default::default()
        };
        let got = text(&rt().block_on(through(&resp, 8192, &[a])));
        assert!(got.contains("Connection: close\r\n") && !got.contains("chunked"));
        assert_eq!(got.split_once("\r\n\r\n").unwrap().1.len(), d.len());
    }

    #[test]
    fn compressed_is_refused_and_head_has_no_body() {
        let resp = "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nabcd";
        let got = text(&rt().block_on(through(resp.as_bytes(), 4096, &[Asked::default()])));
        assert!(got.starts_with("HTTP/1.1 502 "), "{got}");
        assert!(
            got.contains("compressed (Content-Encoding `gzip`)"),
            "{got}"
        );
        let resp = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        let got = text(&rt().block_on(through(resp.as_bytes(), 4096, &[Asked::default()])));
        assert!(got.contains("Transfer-Encoding `gzip, chunked`"), "{got}");
        // a HEAD's response: the length is the GET's, no body follows; then the next one
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 40\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{V}",
            V.len()
        );
        let head = Asked {
            head_only: true,
            ..Default::default()
        };
        let got = text(&rt().block_on(through(resp.as_bytes(), 4096, &[head, Asked::default()])));
        assert!(
            got.contains(
                "Content-Length: 40\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"
            ),
            "{got}"
        );
        assert!(
            got.ends_with(&format!("Content-Length: {}\r\n\r\n{PH}", PH.len())),
            "{got}"
        );
    }

    #[test]
    fn close_delimited_and_upgraded_streams() {
        let resp = format!("HTTP/1.0 200 OK\r\n\r\nhello {V} bye sk-real");
        let got = text(&rt().block_on(through(resp.as_bytes(), 3, &[Asked::default()])));
        assert_eq!(
            got,
            format!("HTTP/1.0 200 OK\r\n\r\nhello {PH} bye sk-real")
        );
        let resp =
            format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x01\x0d{V}");
        let got = text(&rt().block_on(through(resp.as_bytes(), 2, &[Asked::default()])));
        assert!(got.ends_with(PH) && !got.contains(V), "{got}");
    }
}

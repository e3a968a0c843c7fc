//! Serving a connection the command made directly, which the seccomp supervisor sent to
//! the relay ([`crate::net::direct`]): the host is decided from where it was meant to go
//! and from what the client sends first (the TLS server name of its ClientHello, or the
//! `Host` of its first HTTP request), then the same checks, refusals, secrets and tunnels
//! as a `CONNECT` to that host.
//!
//! | the command dialled | the client sends first | the host |
//! |---|---|---|
//! | a synthetic address (a name) | a ClientHello or request naming the same host, or nothing of the kind | the name |
//! | a synthetic address (a name) | a server name or `Host` naming another host | refused: a server name that does not match |
//! | an address the allowlist names literally | anything | that address |
//! | another address | a ClientHello with a server name, or a request with a `Host` | that name (the proxy connects where it resolves, never to the address dialled) |
//! | another address | neither | refused: no host named |
//!
//! A client that sends nothing within [`FIRST_BYTES_WAIT`] (a protocol where the server
//! speaks first: SSH, SMTP) to a host known already is connected as it is. A refusal is
//! answered in the client's protocol: a TLS `access_denied` alert, an HTTP `403` with the
//! reason, or a close, and listed with the program the supervisor saw make it.

use super::super::allowlist::Host;
use super::super::direct::Redirected;
use super::super::http;
use super::super::refusal::Who;
use super::super::sni::{self, Peek};
use super::{reply, Conn, Proxy, Verdict};
use std::net::IpAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a client is given to send its first bytes when the host is known already.
pub const FIRST_BYTES_WAIT: Duration = Duration::from_millis(250);

/// A TLS alert record: fatal, `access_denied`.
const TLS_ACCESS_DENIED: [u8; 7] = [21, 3, 3, 0, 2, 2, 49];

/// What the first bytes said.
enum First {
    /// Nothing in time (or a protocol that is neither TLS nor HTTP).
    Silent,
    /// A ClientHello, with its server name.
    Tls(Option<String>),
    /// An HTTP request head, with the name of its `Host`.
    Http(Option<String>),
}

impl Proxy {
    /// Serve a connection the command made to `r.dst` directly (see the module docs).
    pub(super) async fn handle_direct<S: Conn>(&self, mut client: S, r: Redirected) {
        let limits = &self.inner.cfg.limits;
        let port = r.dst.port();
        let ip = r.dst.ip().to_canonical();
        let who = Who::known(r.program.clone(), r.pid);
        // the host known before any byte: a name, or a literal address the list names
        let known = match &r.name {
            Some(n) => Some(Host::Name(n.clone())),
            None => {
                let h = Host::Ip(ip);
                self.inner.cfg.allowlist.allows(&h, port).then_some(h)
            }
        };
        let mut buf = Vec::with_capacity(4096);
        let first = match self
            .first_bytes(&mut client, &mut buf, known.is_some())
            .await
        {
            Ok(f) => f,
            Err(why) => {
                // allowing the address would let it through unread; for a host known
                // already, no flag would
                let grantable = known.is_none();
                let host = known.clone().unwrap_or(Host::Ip(ip));
                return self
                    .refuse_direct(client, &host, port, &why, &who, None, grantable)
                    .await;
            }
        };
        let named = match &first {
            First::Tls(n) | First::Http(n) => n.clone(),
            First::Silent => None,
        };
        let host = match (known, named) {
            (Some(Host::Name(k)), Some(n)) if k != n => {
                let why = format!(
                    "the {} names {n}, not {k}, the host the connection was made to",
                    if matches!(first, First::Tls(_)) {
                        "TLS server name"
                    } else {
                        "request's Host"
                    }
                );
                let host = Host::Name(k);
                return self
                    .refuse_direct(client, &host, port, &why, &who, Some(&first), false)
                    .await;
            }
            (Some(k), _) => k,
            (None, Some(n)) => Host::Name(n),
            (None, None) => {
                let host = Host::Ip(ip);
                let why = "a connection to an address that names no host (no TLS server name, no HTTP Host)";
                return self
                    .refuse_direct(client, &host, port, why, &who, Some(&first), true)
                    .await;
            }
        };
        let addrs = match self.check(&host, port).await {
            Verdict::Allow(a) => a,
            Verdict::Refuse(reason) => {
                return self
                    .refuse_direct(client, &host, port, &reason, &who, Some(&first), true)
                    .await
            }
            Verdict::Unresolved(msg) => {
                tracing::debug!("proxy (direct): {msg}");
                return answer(&mut client, &first, 502, &format!("capsule proxy: {msg}\n")).await;
            }
        };
        let mut upstream = match self.connect_any(&addrs).await {
            Ok(s) => s,
            Err(e) => {
                let body = format!(
                    "capsule proxy: cannot connect to {host}:{port}: {}\n",
                    e.msg
                );
                return answer(&mut client, &first, 502, &body).await;
            }
        };
        tracing::debug!(%host, port, dst = %r.dst, "proxy connected (direct)");
        if let Some(sc) = self.secrets_for(&host, port).cloned() {
            let site = self.site(&sc, &host, port, Some(&who));
            return self.intercept(&sc, client, buf, upstream, site).await;
        }
        if !buf.is_empty() && upstream.write_all(&buf).await.is_err() {
            return;
        }
        client
            .tunnel(upstream, limits.buffer, limits.idle_timeout)
            .await;
    }

    /// Read what the client sends first into `buf`: a whole ClientHello, or a whole HTTP
    /// request head, or nothing (within [`FIRST_BYTES_WAIT`] when the host is `known`,
    /// else within the head timeout). `Err`: why it is refused.
    async fn first_bytes<S: Conn>(
        &self,
        client: &mut S,
        buf: &mut Vec<u8>,
        known: bool,
    ) -> Result<First, String> {
        let limits = &self.inner.cfg.limits;
        let start = tokio::time::Instant::now();
        let deadline = start + limits.head_timeout;
        let first_wait = if known {
            start + FIRST_BYTES_WAIT
        } else {
            deadline
        };
        let mut chunk = vec![0u8; 4096];
        loop {
            let until = if buf.is_empty() { first_wait } else { deadline };
            let n = match tokio::time::timeout_at(until, client.read(&mut chunk)).await {
                Ok(Ok(n)) => n,
                Ok(Err(e)) => return Err(format!("the client's connection failed: {e}")),
                Err(_) if buf.is_empty() && known => return Ok(First::Silent),
                Err(_) => return Err("timed out waiting for the client's first bytes".into()),
            };
            if n == 0 {
                if buf.is_empty() && known {
                    return Ok(First::Silent);
                }
                return Err("the client closed before naming a host".into());
            }
            buf.extend_from_slice(&chunk[..n]);
            match sni::peek(buf) {
                Peek::NeedMore if buf.len() < sni::MAX_HELLO => continue,
                Peek::NeedMore => return Err("a ClientHello longer than the bound".into()),
                Peek::Hello(name) => return Ok(First::Tls(name)),
                Peek::Malformed(why) => return Err(format!("TLS: {why}")),
                Peek::NotTls => {}
            }
            if !looks_like_http(buf) {
                return if known {
                    Ok(First::Silent)
                } else {
                    Err(
                        "a connection to an address that names no host (neither TLS nor HTTP)"
                            .into(),
                    )
                };
            }
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = http::parse_head(&buf[..end + 4])
                    .map_err(|e| format!("a malformed request: {e}"))?;
                return Ok(First::Http(host_name(&head)?));
            }
            if buf.len() > limits.max_head {
                return Err(format!(
                    "a request head larger than {} bytes",
                    limits.max_head
                ));
            }
        }
    }

    /// Refuse a direct connection to `host:port`: listed (program from the supervisor,
    /// with `--allow-host host:port` as the grant when `grantable`: not for a client that
    /// named another host than it connected to), answered in the client's protocol.
    #[allow(clippy::too_many_arguments)]
    async fn refuse_direct<S: Conn>(
        &self,
        mut client: S,
        host: &Host,
        port: u16,
        reason: &str,
        who: &Who,
        first: Option<&First>,
        grantable: bool,
    ) {
        if grantable {
            self.refuse_log(host, port, reason, Some(who)).await;
        } else {
            self.refuse_log_granting(host, port, reason, Some(who), None)
                .await;
        }
        let body = format!("capsule: refused {host}:{port}: {reason}\n");
        match first {
            Some(f) => answer(&mut client, f, 403, &body).await,
            None => {
                let _ = client.shutdown().await;
            }
        }
    }
}

/// Answer a client whose first bytes were `first`: an HTTP response, a TLS alert, or a
/// close.
async fn answer<S: Conn>(client: &mut S, first: &First, status: u16, body: &str) {
    match first {
        First::Http(_) => {
            let reason = if status == 403 {
                "Forbidden"
            } else {
                "Bad Gateway"
            };
            reply(client, status, reason, body).await
        }
        First::Tls(_) => {
            let _ = client.write_all(&TLS_ACCESS_DENIED).await;
            let _ = client.shutdown().await;
        }
        First::Silent => {
            let _ = client.shutdown().await;
        }
    }
}

/// Do the first bytes start like an HTTP request (a method, then a space)?
fn looks_like_http(b: &[u8]) -> bool {
    let method = b.iter().take_while(|c| c.is_ascii_uppercase()).count();
    (1..=16).contains(&method) && b.get(method).is_none_or(|c| *c == b' ')
}

/// The name of a request's `Host` (its port aside; the connection's port counts), `None`
/// without one; an address or a malformed one is refused.
fn host_name(head: &http::RequestHead) -> Result<Option<String>, String> {
    let hosts: Vec<&Vec<u8>> = head
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map(|(_, v)| v)
        .collect();
    let v = match hosts.as_slice() {
        [] => return Ok(None),
        [v] => String::from_utf8_lossy(v).into_owned(),
        _ => return Err("a request with two Host headers".into()),
    };
    match http::split_authority(&v) {
        Ok((Host::Name(n), _)) => Ok(Some(n)),
        Ok((Host::Ip(IpAddr::V4(_) | IpAddr::V6(_)), _)) => Ok(None),
        Err(e) => Err(format!("a malformed Host: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_http_from_the_rest() {
        assert!(looks_like_http(b"GET / HTTP/1.1\r\n"));
        assert!(looks_like_http(b"POST"));
        assert!(!looks_like_http(b"SSH-2.0-OpenSSH\r\n"));
        assert!(!looks_like_http(b"\x00\x00\x00\x08"));
        assert!(!looks_like_http(b""));
    }

    #[test]
    fn the_host_of_a_request() {
        let h = |raw: &str| host_name(&http::parse_head(raw.as_bytes()).unwrap());
        assert_eq!(
            h("GET / HTTP/1.1\r\nHost: API.test:8080\r\n\r\n"),
            Ok(Some("api.test".into()))
        );
        assert_eq!(h("GET / HTTP/1.1\r\n\r\n"), Ok(None));
        assert_eq!(h("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), Ok(None));
        assert!(h("GET / HTTP/1.1\r\nHost: a.test\r\nhost: b.test\r\n\r\n").is_err());
    }
}

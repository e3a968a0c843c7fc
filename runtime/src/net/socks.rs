//! SOCKS5 (RFC 1928) on the proxy's own port, told apart from HTTP by the first byte (`5`;
//! an HTTP request starts with a method's letter). Only what the allowlist can judge:
//! method `0x00` (no authentication), command `CONNECT`, addresses IPv4, IPv6 or a domain
//! name (`socks5h://`: the proxy resolves it, as for HTTP `CONNECT`). The destination goes
//! through the very same [`Proxy::check`](super::proxy::Proxy::check) as `CONNECT`, and
//! refusals are logged the same way.
//!
//! Replies (RFC 1928 §6): `0x02` refused by the allowlist or the address rules, `0x04` the
//! name does not resolve or the host does not answer (in time), `0x05` connection refused, `0x03`
//! network unreachable, `0x07` a command other than `CONNECT`, `0x08` an unknown address
//! type, `0x01` anything malformed; a greeting without method `0x00` gets `0xFF` (no
//! acceptable method). Every reply but success closes the connection. The success reply
//! names `0.0.0.0:0` as the bound address: the host-side address of the tunnel is none of
//! the sandbox's business, and `CONNECT` clients do not use it.

use super::allowlist::Host;
use std::io;
use std::net::IpAddr;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The protocol version byte, also the first byte of every SOCKS5 greeting.
pub const VERSION: u8 = 5;

/// Reply codes (RFC 1928 §6).
pub mod rep {
    pub const SUCCEEDED: u8 = 0x00;
    pub const GENERAL_FAILURE: u8 = 0x01;
    pub const NOT_ALLOWED: u8 = 0x02;
    pub const NETWORK_UNREACHABLE: u8 = 0x03;
    pub const HOST_UNREACHABLE: u8 = 0x04;
    pub const CONNECTION_REFUSED: u8 = 0x05;
    pub const TTL_EXPIRED: u8 = 0x06;
    pub const COMMAND_NOT_SUPPORTED: u8 = 0x07;
    pub const ADDRESS_TYPE_NOT_SUPPORTED: u8 = 0x08;
}

const NO_AUTH: u8 = 0x00;
const NO_ACCEPTABLE_METHOD: u8 = 0xFF;
const CMD_CONNECT: u8 = 0x01;
const ATYP_V4: u8 = 0x01;
const ATYP_DOMAIN: u8 = 0x03;
const ATYP_V6: u8 = 0x04;

/// Why a SOCKS5 negotiation ended without a destination.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SocksError {
    /// Answered already (method refusal) or the client is gone: just close.
    #[error("{0}")]
    Closed(String),
    /// Answer with this reply code, then close.
    #[error("{1} (reply {0:#04x})")]
    Reply(u8, String),
}

/// Bytes already read from the client, then the client itself.
pub struct Input<'a, S> {
    pre: &'a [u8],
    pub stream: &'a mut S,
}

impl<'a, S: AsyncRead + Unpin> Input<'a, S> {
    pub fn new(pre: &'a [u8], stream: &'a mut S) -> Self {
        Input { pre, stream }
    }

    async fn read_exact(&mut self, out: &mut [u8]) -> io::Result<()> {
        let k = out.len().min(self.pre.len());
        out[..k].copy_from_slice(&self.pre[..k]);
        self.pre = &self.pre[k..];
        if k < out.len() {
            self.stream.read_exact(&mut out[k..]).await?;
        }
        Ok(())
    }

    async fn byte(&mut self) -> io::Result<u8> {
        let mut b = [0u8; 1];
        self.read_exact(&mut b).await?;
        Ok(b[0])
    }

    /// What the client sent beyond the request (sent on upstream before the tunnel).
    pub fn rest(&self) -> &'a [u8] {
        self.pre
    }
}

fn gone(e: io::Error) -> SocksError {
    SocksError::Closed(format!("client gone during the SOCKS5 negotiation: {e}"))
}

fn malformed(what: &str) -> SocksError {
    SocksError::Reply(rep::GENERAL_FAILURE, format!("malformed SOCKS5 {what}"))
}

/// A reply: `code`, bound address `0.0.0.0:0`.
pub fn reply(code: u8) -> [u8; 10] {
    [VERSION, code, 0, ATYP_V4, 0, 0, 0, 0, 0, 0]
}

/// Read the greeting and the request; answer the greeting. Returns the destination of a
/// well-formed `CONNECT`. The caller answers the request (see [`reply`]).
pub async fn negotiate<S>(input: &mut Input<'_, S>) -> Result<(Host, u16), SocksError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // greeting: VER NMETHODS METHODS...
    if input.byte().await.map_err(gone)? != VERSION {
        return Err(SocksError::Closed("not a SOCKS5 greeting".into()));
    }
    let n = input.byte().await.map_err(gone)? as usize;
    let mut methods = [0u8; 255];
    input.read_exact(&mut methods[..n]).await.map_err(gone)?;
    if n == 0 || !methods[..n].contains(&NO_AUTH) {
        let _ = input
            .stream
            .write_all(&[VERSION, NO_ACCEPTABLE_METHOD])
            .await;
        return Err(SocksError::Closed(
            "SOCKS5 client offers no method the proxy accepts (only 0x00, no authentication)"
                .into(),
        ));
    }
    input
        .stream
        .write_all(&[VERSION, NO_AUTH])
        .await
        .map_err(gone)?;
    // request: VER CMD RSV ATYP DST.ADDR DST.PORT
    let mut h = [0u8; 4];
    input.read_exact(&mut h).await.map_err(gone)?;
    let [ver, cmd, rsv, atyp] = h;
    if ver != VERSION || rsv != 0 {
        return Err(malformed("request header"));
    }
    // the address is read before judging the command, so the reply comes after the
    // whole request (clients read it only then)
    let host = match atyp {
        ATYP_V4 => {
            let mut a = [0u8; 4];
            input.read_exact(&mut a).await.map_err(gone)?;
            Host::Ip(IpAddr::from(a).to_canonical())
        }
        ATYP_V6 => {
            let mut a = [0u8; 16];
            input.read_exact(&mut a).await.map_err(gone)?;
            Host::Ip(IpAddr::from(a).to_canonical())
        }
        ATYP_DOMAIN => {
            let len = input.byte().await.map_err(gone)? as usize;
            let mut name = [0u8; 255];
            input.read_exact(&mut name[..len]).await.map_err(gone)?;
            if len == 0 {
                return Err(malformed("domain name (empty)"));
            }
            let name = std::str::from_utf8(&name[..len])
                .map_err(|_| malformed("domain name (not text)"))?;
            if name.contains(':') || name.contains('[') {
                return Err(malformed("domain name (an address in the name field)"));
            }
            Host::parse(name).map_err(|e| malformed(&format!("domain name ({e})")))?
        }
        other => {
            return Err(SocksError::Reply(
                rep::ADDRESS_TYPE_NOT_SUPPORTED,
                format!("SOCKS5 address type {other:#04x} is not supported"),
            ))
        }
    };
    let mut p = [0u8; 2];
    input.read_exact(&mut p).await.map_err(gone)?;
    let port = u16::from_be_bytes(p);
    if cmd != CMD_CONNECT {
        return Err(SocksError::Reply(
            rep::COMMAND_NOT_SUPPORTED,
            format!("SOCKS5 command {cmd:#04x} is not supported (CONNECT only)"),
        ));
    }
    if port == 0 {
        return Err(malformed("request (port 0)"));
    }
    Ok((host, port))
}

/// The reply for a failed connect to an allowed destination.
pub fn connect_failure(kind: Option<io::ErrorKind>, timed_out: bool) -> u8 {
    if timed_out {
        return rep::HOST_UNREACHABLE;
    }
    match kind {
        Some(io::ErrorKind::ConnectionRefused) => rep::CONNECTION_REFUSED,
        Some(io::ErrorKind::NetworkUnreachable) => rep::NETWORK_UNREACHABLE,
        Some(io::ErrorKind::HostUnreachable) => rep::HOST_UNREACHABLE,
        Some(io::ErrorKind::TimedOut) => rep::HOST_UNREACHABLE,
        _ => rep::GENERAL_FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run a negotiation on `bytes` (as sent by a client that then closes); returns the
    /// outcome and everything the proxy wrote back.
    async fn run(bytes: &[u8]) -> (Result<(Host, u16), SocksError>, Vec<u8>, Vec<u8>) {
        let (mut client, mut server) = tokio::io::duplex(4096);
        client.write_all(bytes).await.unwrap();
        client.shutdown().await.unwrap();
        // the first byte arrives already read, as in the proxy
        let mut first = [0u8; 1];
        let got = server.read(&mut first).await.unwrap();
        let (outcome, rest) = {
            let mut input = Input::new(&first[..got], &mut server);
            let o = negotiate(&mut input).await;
            (o, input.rest().to_vec())
        };
        drop(server);
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.unwrap();
        (outcome, back, rest)
    }

    #[tokio::test]
    async fn connect_requests_of_every_address_type() {
        let (o, back, _) = run(b"\x05\x01\x00\x05\x01\x00\x01\x7f\x00\x00\x01\x1f\x90").await;
        assert_eq!(o, Ok((Host::parse("127.0.0.1").unwrap(), 8080)));
        assert_eq!(back, [5, 0]);
        let mut v6 = b"\x05\x02\x02\x00\x05\x01\x00\x04".to_vec();
        v6.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        v6.extend_from_slice(&443u16.to_be_bytes());
        let (o, _, _) = run(&v6).await;
        assert_eq!(o, Ok((Host::parse("::1").unwrap(), 443)));
        let (o, _, _) = run(b"\x05\x01\x00\x05\x01\x00\x03\x0bExample.COM\x00\x50").await;
        assert_eq!(o, Ok((Host::Name("example.com".into()), 80)));
        // a v4-mapped v6 address is the v4 address (the allowlist sees one form)
        let mut mapped = b"\x05\x01\x00\x05\x01\x00\x04".to_vec();
        mapped.extend_from_slice(
            &"::ffff:10.0.0.1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        mapped.extend_from_slice(&[0, 22]);
        let (o, _, _) = run(&mapped).await;
        assert_eq!(o, Ok((Host::parse("10.0.0.1").unwrap(), 22)));
    }

    #[tokio::test]
    async fn malformed_and_unsupported_requests_get_their_replies() {
        // no acceptable method: 0xFF, closed
        let (o, back, _) = run(b"\x05\x01\x02").await;
        assert!(matches!(o, Err(SocksError::Closed(_))), "{o:?}");
        assert_eq!(back, [5, 0xFF]);
        // zero methods
        let (o, back, _) = run(b"\x05\x00").await;
        assert!(matches!(o, Err(SocksError::Closed(_))));
        assert_eq!(back, [5, 0xFF]);
        // BIND and UDP ASSOCIATE: command not supported
        for cmd in [2u8, 3, 9] {
            let req = [5, 1, 0, 5, cmd, 0, 1, 127, 0, 0, 1, 0, 80];
            let (o, _, _) = run(&req).await;
            assert_eq!(
                o.unwrap_err(),
                SocksError::Reply(
                    rep::COMMAND_NOT_SUPPORTED,
                    format!("SOCKS5 command {cmd:#04x} is not supported (CONNECT only)")
                )
            );
        }
        // unknown address type
        let (o, _, _) = run(b"\x05\x01\x00\x05\x01\x00\x02\x00\x00").await;
        assert!(matches!(
            o,
            Err(SocksError::Reply(rep::ADDRESS_TYPE_NOT_SUPPORTED, _))
        ));
        // wrong version in the request, non-zero reserved byte, port 0
        for req in [
            &b"\x05\x01\x00\x04\x01\x00\x01\x7f\x00\x00\x01\x00\x50"[..],
            &b"\x05\x01\x00\x05\x01\x01\x01\x7f\x00\x00\x01\x00\x50"[..],
            &b"\x05\x01\x00\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x00"[..],
        ] {
            let (o, _, _) = run(req).await;
            assert!(
                matches!(o, Err(SocksError::Reply(rep::GENERAL_FAILURE, _))),
                "{req:?}: {o:?}"
            );
        }
        // bad domain names: empty, not UTF-8, an address in brackets, a bad label
        for name in [&b""[..], b"\xff\xfe", b"[::1]", b"a..b", b"a b"] {
            let mut req = b"\x05\x01\x00\x05\x01\x00\x03".to_vec();
            req.push(name.len() as u8);
            req.extend_from_slice(name);
            req.extend_from_slice(&[0, 80]);
            let (o, _, _) = run(&req).await;
            assert!(
                matches!(o, Err(SocksError::Reply(rep::GENERAL_FAILURE, _))),
                "{name:?}: {o:?}"
            );
        }
    }

    #[tokio::test]
    async fn truncated_input_never_panics() {
        let full = b"\x05\x02\x00\x01\x05\x01\x00\x03\x09localhost\x00\x50";
        for cut in 1..full.len() {
            let (o, _, _) = run(&full[..cut]).await;
            assert!(
                matches!(o, Err(SocksError::Closed(_))),
                "cut at {cut}: {o:?}"
            );
        }
        let (o, _, _) = run(full).await;
        assert_eq!(o, Ok((Host::Name("localhost".into()), 80)));
        // arbitrary bytes after the version byte: an answer or a close, never a panic
        let mut seed = 0x1234_5678u32;
        for _ in 0..300 {
            let mut v = vec![5u8];
            for _ in 0..(seed % 40) {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                v.push((seed >> 16) as u8);
            }
            let _ = run(&v).await;
        }
    }

    #[tokio::test]
    async fn bytes_after_the_request_are_kept() {
        // everything arrived in the first read: the request is parsed from it, and what
        // follows is left for upstream
        let (mut client, mut server) = tokio::io::duplex(64);
        let first = b"\x05\x01\x00\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50GET /";
        let mut input = Input::new(first, &mut server);
        assert!(negotiate(&mut input).await.is_ok());
        assert_eq!(input.rest(), b"GET /");
        drop(server);
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, [5, 0]);
    }

    #[test]
    fn replies() {
        assert_eq!(reply(rep::NOT_ALLOWED), [5, 2, 0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            connect_failure(Some(io::ErrorKind::ConnectionRefused), false),
            rep::CONNECTION_REFUSED
        );
        assert_eq!(connect_failure(None, true), rep::HOST_UNREACHABLE);
    }
}

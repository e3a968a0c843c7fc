//! The server name a TLS client asks for (SNI), read from the first bytes of a connection
//! the command made directly ([`super::direct`]), before any byte goes on: the proxy
//! checks it against the host the connection was made to, or takes the host from it when
//! the command dialled an address.
//!
//! The bytes are hostile input, read strictly and boundedly: a handshake record
//! (content type 22) holding a ClientHello (handshake type 1), possibly spread over
//! several records (at most [`MAX_HELLO`] bytes), its fields walked by their lengths; the
//! `server_name` extension (type 0) must hold one `host_name` that the allowlist would
//! accept as a name. Anything else is [`Peek::Malformed`], never a guess.

/// The largest ClientHello read (a post-quantum key share makes it ~2 KB).
pub const MAX_HELLO: usize = 64 * 1024;

/// What the first bytes of a connection are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peek {
    /// Not a TLS handshake record.
    NotTls,
    /// The start of a ClientHello: read more.
    NeedMore,
    /// A whole ClientHello, asking for this name (lowercase, no trailing dot) or none.
    Hello(Option<String>),
    /// A TLS record that is not a well-formed ClientHello, or a name no allowlist entry
    /// could name.
    Malformed(String),
}

fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]) as usize)
}

/// Read what `buf` (the first bytes of a connection) is.
pub fn peek(buf: &[u8]) -> Peek {
    match buf.first() {
        None => return Peek::NeedMore,
        Some(22) => {}
        Some(_) => return Peek::NotTls,
    }
    // the handshake messages, from as many records as there are
    let mut hs = Vec::new();
    let mut at = 0;
    loop {
        if buf.len() < at + 5 {
            return Peek::NeedMore;
        }
        if buf[at] != 22 {
            return Peek::Malformed("a ClientHello cut by a record of another kind".into());
        }
        if buf[at + 1] != 3 {
            return Peek::Malformed("not a TLS record version".into());
        }
        let len = u16_at(buf, at + 3).unwrap_or(0);
        if len == 0 || len > (1 << 14) {
            return Peek::Malformed(format!("a handshake record of {len} bytes"));
        }
        let Some(fragment) = buf.get(at + 5..at + 5 + len) else {
            return Peek::NeedMore;
        };
        hs.extend_from_slice(fragment);
        at += 5 + len;
        if hs.len() >= 4 {
            if hs[0] != 1 {
                return Peek::Malformed(format!(
                    "handshake type {} first, not a ClientHello",
                    hs[0]
                ));
            }
            let hello_len = u32::from_be_bytes([0, hs[1], hs[2], hs[3]]) as usize;
            if hello_len + 4 > MAX_HELLO {
                return Peek::Malformed(format!("a ClientHello of {hello_len} bytes"));
            }
            if hs.len() >= hello_len + 4 {
                return hello(&hs[4..4 + hello_len]);
            }
        }
        if at >= MAX_HELLO {
            return Peek::Malformed("a ClientHello longer than the bound".into());
        }
    }
}

/// The server name of a whole ClientHello body.
fn hello(b: &[u8]) -> Peek {
    let bad = |what: &str| Peek::Malformed(format!("a ClientHello with {what}"));
    // version (2), random (32)
    let mut at = 34;
    let Some(&sid) = b.get(at) else {
        return bad("no session id");
    };
    at += 1 + sid as usize;
    let Some(suites) = u16_at(b, at) else {
        return bad("no cipher suites");
    };
    at += 2 + suites;
    let Some(&comp) = b.get(at) else {
        return bad("no compression methods");
    };
    at += 1 + comp as usize;
    if at == b.len() {
        // no extensions at all (TLS 1.2 and older may omit them)
        return Peek::Hello(None);
    }
    let Some(ext_len) = u16_at(b, at) else {
        return bad("a cut extensions length");
    };
    at += 2;
    let Some(exts) = b.get(at..at + ext_len) else {
        return bad("extensions longer than the message");
    };
    if at + ext_len != b.len() {
        return bad("bytes after its extensions");
    }
    let mut e = 0;
    let mut name = None;
    while e < exts.len() {
        let (Some(ty), Some(len)) = (u16_at(exts, e), u16_at(exts, e + 2)) else {
            return bad("a cut extension header");
        };
        let Some(data) = exts.get(e + 4..e + 4 + len) else {
            return bad("an extension longer than the extensions");
        };
        e += 4 + len;
        if ty != 0 {
            continue;
        }
        if name.is_some() {
            return bad("two server_name extensions");
        }
        name = Some(match server_name(data) {
            Ok(n) => n,
            Err(why) => return bad(&why),
        });
    }
    Peek::Hello(name)
}

/// The one `host_name` of a `server_name` extension's data.
fn server_name(d: &[u8]) -> Result<String, String> {
    let list = u16_at(d, 0).ok_or("a cut server_name list")?;
    if list + 2 != d.len() {
        return Err("a server_name list of the wrong length".into());
    }
    if d.get(2) != Some(&0) {
        return Err("a server name that is not a host_name".into());
    }
    let len = u16_at(d, 3).ok_or("a cut server name")?;
    if 5 + len != d.len() {
        return Err("more than one server name".into());
    }
    let raw = &d[5..];
    let s = std::str::from_utf8(raw).map_err(|_| "a server name that is not text".to_string())?;
    let n = super::allowlist::normalize_name(s)
        .map_err(|e| format!("a server name no allowlist entry could name ({e})"))?;
    if s.strip_suffix('.').unwrap_or(s).len() != n.len() {
        return Err("a server name no allowlist entry could name".into());
    }
    Ok(n)
}

/// A ClientHello record asking for `name` (tests, benchmarks): TLS 1.2, one cipher suite,
/// the server_name extension only.
#[cfg(test)]
pub(crate) fn client_hello(name: Option<&str>) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7u8; 32]);
    body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
    let mut exts = Vec::new();
    if let Some(n) = name {
        let n = n.as_bytes();
        exts.extend_from_slice(&[0, 0]);
        exts.extend_from_slice(&((n.len() + 5) as u16).to_be_bytes());
        exts.extend_from_slice(&((n.len() + 3) as u16).to_be_bytes());
        exts.push(0);
        exts.extend_from_slice(&(n.len() as u16).to_be_bytes());
        exts.extend_from_slice(n);
    }
    // another extension after it (supported_versions)
    exts.extend_from_slice(&[0, 43, 0, 3, 2, 3, 4]);
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut hs = vec![1, 0];
    hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
    hs.extend_from_slice(&body);
    let mut rec = vec![22, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_name_whole_or_in_pieces() {
        let r = client_hello(Some("API.test."));
        assert_eq!(peek(&r), Peek::Hello(Some("api.test".into())));
        for cut in 0..r.len() {
            assert_eq!(peek(&r[..cut]), Peek::NeedMore, "cut at {cut}");
        }
        assert_eq!(peek(&client_hello(None)), Peek::Hello(None));
        // the same handshake spread over two records
        let hs = &r[5..];
        let (a, b) = hs.split_at(10);
        let mut two = vec![22, 3, 1, 0, a.len() as u8];
        two.extend_from_slice(a);
        two.extend_from_slice(&[22, 3, 1]);
        two.extend_from_slice(&(b.len() as u16).to_be_bytes());
        two.extend_from_slice(b);
        assert_eq!(peek(&two), Peek::Hello(Some("api.test".into())));
    }

    #[test]
    fn everything_else_is_said_plainly() {
        assert_eq!(peek(b"GET / HTTP/1.1\r\n"), Peek::NotTls);
        assert_eq!(peek(&[]), Peek::NeedMore);
        assert!(matches!(
            peek(&client_hello(Some("a b.test"))),
            Peek::Malformed(_)
        ));
        assert!(matches!(
            peek(&client_hello(Some("a.test/x"))),
            Peek::Malformed(_)
        ));
        let mut r = client_hello(Some("a.test"));
        r[5] = 2; // a ServerHello
        assert!(matches!(peek(&r), Peek::Malformed(_)));
        let mut r = client_hello(Some("a.test"));
        r[1] = 9;
        assert!(matches!(peek(&r), Peek::Malformed(_)));
        // an alert record
        assert_eq!(peek(&[21, 3, 3, 0, 2, 2, 40]), Peek::NotTls);
    }
}

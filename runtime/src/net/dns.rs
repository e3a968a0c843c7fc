//! The name server inside the sandbox (allowlist mode): it answers every `A` query with a
//! synthetic address ([`super::fakeip`]) and nothing else, so that a program resolving a
//! name itself (Node, Java, Go, glibc's `getaddrinfo`) gets an address to connect to, and
//! the connection, sent to the proxy ([`super::direct`]), is checked by that name. Nothing
//! is ever asked of a real name server: what a name resolves to is the proxy's business,
//! on the host.
//!
//! It reads queries from a UDP socket that the sandbox's init bound to `127.0.0.1:53` in
//! the sandbox's network namespace and handed to the proxy (`/etc/resolv.conf` inside
//! names it: [`RESOLV_CONF`]). Every datagram is hostile input, parsed strictly
//! ([`parse_query`]): one question, no compression in it, a name of at most 255 bytes made
//! of labels the allowlist accepts (letters, digits, `-`, `_`). Answers:
//!
//! | question | answer |
//! |---|---|
//! | `A` (or `ANY`) of `localhost` or `*.localhost` | `127.0.0.1` |
//! | `A` (or `ANY`) of another name | its synthetic address, TTL [`TTL`] |
//! | any other type (`AAAA`, `HTTPS`, `MX`...) | no records (the name exists) |
//! | another class, opcode, or a name the allowlist would not accept | `REFUSED` |
//! | a malformed query with a readable header | `FORMERR` |
//! | not even a header, or a response | nothing |

use super::fakeip::FakeIps;
use std::net::Ipv4Addr;

/// `/etc/resolv.conf` inside: the name server above, and nothing of the host's.
pub const RESOLV_CONF: &str =
    "# capsule: names are answered inside, by the proxy's name server\nnameserver 127.0.0.1\n";

/// Time to live of an answer, in seconds (an address stays a name's for the exec's life).
pub const TTL: u32 = 60;

/// Largest query read (a query is a few dozen bytes; EDNS may announce 4096).
pub const MAX_QUERY: usize = 1024;

const TYPE_A: u16 = 1;
const TYPE_ANY: u16 = 255;
const CLASS_IN: u16 = 1;
const RCODE_FORMERR: u16 = 1;
const RCODE_REFUSED: u16 = 5;

/// A query, as far as the answer needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    /// The query's flags (opcode, RD).
    pub flags: u16,
    /// The name asked, lowercase, no trailing dot; `None` when its labels are not a name
    /// the allowlist accepts.
    pub name: Option<String>,
    pub qtype: u16,
    pub qclass: u16,
    /// The question as sent (echoed in the answer).
    pub question: Vec<u8>,
}

/// Why a datagram is not a query that can be answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryError {
    /// Not answered at all (too short for a header, or a response).
    Ignore,
    /// Answered `FORMERR` (id and flags known).
    Malformed { id: u16, flags: u16 },
}

/// Parse one datagram as a query.
pub fn parse_query(b: &[u8]) -> Result<Query, QueryError> {
    if b.len() < 12 {
        return Err(QueryError::Ignore);
    }
    let id = u16::from_be_bytes([b[0], b[1]]);
    let flags = u16::from_be_bytes([b[2], b[3]]);
    if flags & 0x8000 != 0 {
        return Err(QueryError::Ignore);
    }
    let bad = QueryError::Malformed { id, flags };
    let qdcount = u16::from_be_bytes([b[4], b[5]]);
    if qdcount != 1 {
        return Err(bad);
    }
    let mut at = 12;
    let mut labels: Vec<&[u8]> = Vec::new();
    let mut wire_len = 0usize;
    loop {
        let len = *b.get(at).ok_or(bad.clone())? as usize;
        at += 1;
        wire_len += 1 + len;
        if len == 0 {
            break;
        }
        // a pointer (0xC0) or a reserved label type
        if len > 63 || wire_len > 255 {
            return Err(bad);
        }
        labels.push(b.get(at..at + len).ok_or(bad.clone())?);
        at += len;
    }
    let tail = b.get(at..at + 4).ok_or(bad)?;
    let qtype = u16::from_be_bytes([tail[0], tail[1]]);
    let qclass = u16::from_be_bytes([tail[2], tail[3]]);
    let name = if labels.is_empty() {
        None
    } else {
        let joined = labels
            .iter()
            .map(|l| String::from_utf8_lossy(l))
            .collect::<Vec<_>>()
            .join(".");
        super::allowlist::normalize_name(&joined)
            .ok()
            // each label exactly as it came: a `.` inside one would be two labels
            .filter(|n| n.len() == joined.len())
    };
    Ok(Query {
        id,
        flags,
        name,
        qtype,
        qclass,
        question: b[12..at + 4].to_vec(),
    })
}

/// The header of an answer to a query with `id` and `flags`: QR, AA, RA set; opcode and RD
/// kept; `rcode`; one question, `answers` answers.
fn header(id: u16, flags: u16, rcode: u16, question: bool, answers: u16) -> Vec<u8> {
    let flags = 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | (rcode & 0xf);
    let mut h = Vec::with_capacity(12);
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&flags.to_be_bytes());
    h.extend_from_slice(&(question as u16).to_be_bytes());
    h.extend_from_slice(&answers.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 0]);
    h
}

/// The answer to `q`, with the synthetic addresses of `names`.
pub fn answer(q: &Query, names: &FakeIps) -> Vec<u8> {
    let opcode = (q.flags >> 11) & 0xf;
    let Some(name) = q
        .name
        .as_deref()
        .filter(|_| opcode == 0 && q.qclass == CLASS_IN)
    else {
        let mut out = header(q.id, q.flags, RCODE_REFUSED, true, 0);
        out.extend_from_slice(&q.question);
        return out;
    };
    let addr = (q.qtype == TYPE_A || q.qtype == TYPE_ANY).then(|| {
        if name == "localhost" || name.ends_with(".localhost") {
            Ipv4Addr::LOCALHOST
        } else {
            names.address(name)
        }
    });
    let mut out = header(q.id, q.flags, 0, true, addr.is_some() as u16);
    out.extend_from_slice(&q.question);
    if let Some(a) = addr {
        // the name by a pointer to the question's (offset 12)
        out.extend_from_slice(&[0xc0, 12]);
        out.extend_from_slice(&TYPE_A.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&TTL.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&a.octets());
    }
    out
}

/// What to send back for datagram `b`, if anything.
pub fn respond(b: &[u8], names: &FakeIps) -> Option<Vec<u8>> {
    match parse_query(b) {
        Ok(q) => Some(answer(&q, names)),
        Err(QueryError::Malformed { id, flags }) => {
            Some(header(id, flags, RCODE_FORMERR, false, 0))
        }
        Err(QueryError::Ignore) => None,
    }
}

/// Answer the queries arriving on `sock` until it fails (the sandbox is gone) or the task
/// is dropped.
pub async fn serve(sock: tokio::net::UdpSocket, names: std::sync::Arc<FakeIps>) {
    let mut buf = vec![0u8; MAX_QUERY];
    loop {
        let (n, from) = match sock.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return tracing::debug!("name server: {e}"),
        };
        if let Some(out) = respond(&buf[..n], &names) {
            let _ = sock.send_to(&out, from).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query as glibc sends it: id, RD, one question, and an EDNS OPT record.
    pub(super) fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
        let mut q = Vec::new();
        q.extend_from_slice(&id.to_be_bytes());
        q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1]);
        for l in name.split('.') {
            q.push(l.len() as u8);
            q.extend_from_slice(l.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&CLASS_IN.to_be_bytes());
        // OPT: root name, type 41, udp size 1232, no options
        q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
        q
    }

    fn rcode(a: &[u8]) -> u16 {
        u16::from_be_bytes([a[2], a[3]]) & 0xf
    }

    fn ancount(a: &[u8]) -> u16 {
        u16::from_be_bytes([a[6], a[7]])
    }

    #[test]
    fn a_names_get_synthetic_addresses() {
        let names = FakeIps::new();
        let a = respond(&query(0x1234, "API.test", TYPE_A), &names).unwrap();
        assert_eq!(&a[..2], &[0x12, 0x34]);
        assert_eq!(a[2] & 0x80, 0x80, "a response");
        assert_eq!(a[2] & 0x01, 0x01, "RD kept");
        assert_eq!(rcode(&a), 0);
        assert_eq!(ancount(&a), 1);
        let ip = Ipv4Addr::new(
            a[a.len() - 4],
            a[a.len() - 3],
            a[a.len() - 2],
            a[a.len() - 1],
        );
        assert_eq!(names.name(ip).as_deref(), Some("api.test"));
        // the question echoed as asked (its case too)
        assert!(a.windows(3).any(|w| w == b"API"));
        // AAAA: the name exists, no records
        let b = respond(&query(7, "api.test", 28), &names).unwrap();
        assert_eq!((rcode(&b), ancount(&b)), (0, 0));
        // localhost
        let l = respond(&query(8, "x.localhost", TYPE_A), &names).unwrap();
        assert_eq!(&l[l.len() - 4..], &[127, 0, 0, 1]);
    }

    #[test]
    fn bad_queries_are_refused_or_formerr_or_ignored() {
        let names = FakeIps::new();
        // a label with a character no allowlist entry has
        let r = respond(&query(1, "a b.test", TYPE_A), &names).unwrap();
        assert_eq!(rcode(&r), RCODE_REFUSED);
        // class CH
        let mut q = query(2, "version.bind", 16);
        let at = q.len() - 13;
        q[at] = 0;
        q[at + 1] = 3;
        assert_eq!(rcode(&respond(&q, &names).unwrap()), RCODE_REFUSED);
        // a compression pointer in the question
        let mut q = query(3, "a.test", TYPE_A);
        q[12] = 0xc0;
        assert_eq!(rcode(&respond(&q, &names).unwrap()), RCODE_FORMERR);
        // cut short
        let q = query(4, "a.test", TYPE_A);
        assert_eq!(rcode(&respond(&q[..16], &names).unwrap()), RCODE_FORMERR);
        // two questions
        let mut q = query(5, "a.test", TYPE_A);
        q[5] = 2;
        assert_eq!(rcode(&respond(&q, &names).unwrap()), RCODE_FORMERR);
        // a response, or no header: nothing
        let mut q = query(6, "a.test", TYPE_A);
        q[2] |= 0x80;
        assert_eq!(respond(&q, &names), None);
        assert_eq!(respond(&[1, 2, 3], &names), None);
        // nothing was given an address
        assert_eq!(names.name(Ipv4Addr::new(198, 18, 0, 1)), None);
    }
}

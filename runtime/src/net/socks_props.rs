//! Property tests of the proxy's SOCKS5 negotiation ([`super::socks::negotiate`]): on any
//! bytes, split anywhere between what the proxy already read and the stream, it ends
//! without a panic and answers nothing but a method reply; a generated greeting and
//! request (methods, IPv4, IPv6 or a domain name in any case, port, bytes after it) give
//! exactly the generated destination, leave the bytes after the request for the tunnel,
//! and that destination gets from the allowlist exactly the answer of its reference
//! model. Cases per run: `PROPTEST_CASES` (defaults below; `hack/fuzz.sh` runs more).

use super::allowlist::{Allowlist, Host};
use super::allowlist_props::{labels, model};
use super::socks::{negotiate, rep, Input, SocksError};
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `PROPTEST_CASES` when set, else `cases`.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

/// What a negotiation gave: the outcome, what the proxy wrote back, the bytes after the
/// request.
type Negotiated = (Result<(Host, u16), SocksError>, Vec<u8>, Vec<u8>);

/// Run a negotiation: `pre` already read by the proxy, `stream` sent by a client that then
/// closes. The outcome, what the proxy wrote back, and the bytes after the request (the
/// rest of `pre`, then what was left unread in the stream).
fn run(pre: &[u8], stream: &[u8]) -> Negotiated {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a test runtime");
    rt.block_on(async {
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        client.write_all(stream).await.expect("write to the duplex");
        client.shutdown().await.expect("shut the duplex down");
        let (outcome, mut after) = {
            let mut input = Input::new(pre, &mut server);
            let o = negotiate(&mut input).await;
            (o, input.rest().to_vec())
        };
        let mut unread = Vec::new();
        server
            .read_to_end(&mut unread)
            .await
            .expect("read the rest");
        after.extend_from_slice(&unread);
        drop(server);
        let mut back = Vec::new();
        client
            .read_to_end(&mut back)
            .await
            .expect("read the replies");
        (outcome, back, after)
    })
}

fn fragment() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            &[5u8][..],
            &[5, 1, 0],
            &[5, 0],
            &[5, 255],
            &[5, 1, 0, 1],
            &[5, 1, 0, 3],
            &[5, 1, 0, 4],
            &[5, 2, 0, 3],
            &[1, 2, 3, 4],
            &[0, 80],
            &[0, 0],
            &[3],
            &[255],
            &[0],
            b"a.test",
            b":",
            b"[::1]",
            &[0xc3, 0x28],
        ])
        .prop_map(<[u8]>::to_vec),
        prop::collection::vec(any::<u8>(), 0..8),
    ]
}

/// The address of a generated request, as sent and as the parser must give it.
#[derive(Debug, Clone)]
enum Dest {
    V4([u8; 4]),
    V6([u8; 16]),
    /// Labels (sent in the case given, maybe with a trailing dot).
    Name(Vec<String>, bool),
}

fn dest() -> impl Strategy<Value = Dest> {
    prop_oneof![
        1 => any::<[u8; 4]>().prop_map(Dest::V4),
        1 => any::<[u8; 16]>().prop_map(Dest::V6),
        3 => (labels(), any::<bool>()).prop_map(|(l, d)| Dest::Name(l, d)),
    ]
}

impl Dest {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Dest::V4(a) => {
                out.push(1);
                out.extend_from_slice(a);
            }
            Dest::V6(a) => {
                out.push(4);
                out.extend_from_slice(a);
            }
            Dest::Name(l, dot) => {
                let n = format!("{}{}", l.join("."), if *dot { "." } else { "" });
                out.push(3);
                out.push(n.len() as u8);
                out.extend_from_slice(n.as_bytes());
            }
        }
    }
    fn expected(&self) -> Host {
        match self {
            Dest::V4(a) => Host::Ip(std::net::IpAddr::from(*a)),
            Dest::V6(a) => Host::Ip(std::net::IpAddr::from(*a).to_canonical()),
            Dest::Name(l, _) => Host::Name(l.join(".").to_ascii_lowercase()),
        }
    }
}

proptest! {
    #![proptest_config(config(6000))]

    #[test]
    fn negotiating_on_any_bytes_never_panics(
        pieces in prop::collection::vec(fragment(), 0..12),
        split in any::<prop::sample::Index>(),
    ) {
        let mut bytes = pieces.concat();
        if bytes.is_empty() {
            bytes.push(5);
        }
        // the proxy reads at least the first byte before it knows this is SOCKS5
        let at = split.index(bytes.len()).max(1);
        let (outcome, back, _) = run(&bytes[..at], &bytes[at..]);
        prop_assert!(
            back.is_empty() || back == [5, 0] || back == [5, 0xff],
            "the negotiation wrote {:?}",
            back
        );
        if outcome.is_ok() {
            prop_assert_eq!(back, vec![5, 0]);
        }
    }

    #[test]
    fn generated_requests_give_their_destination_and_the_models_answer(
        methods in prop::collection::vec(any::<u8>(), 0..6),
        no_auth_at in any::<prop::sample::Index>(),
        cmd in prop::sample::select(vec![1u8, 1, 1, 2, 3]),
        dest in dest(),
        port in 1u16..,
        after in prop::collection::vec(any::<u8>(), 0..8),
        split in any::<prop::sample::Index>(),
        wild in any::<bool>(),
        entry in labels(),
        eport in prop::option::of(prop::sample::select(vec![80u16, 443])),
    ) {
        let mut methods = methods;
        methods.insert(no_auth_at.index(methods.len() + 1), 0);
        let mut bytes = vec![5, methods.len() as u8];
        bytes.extend_from_slice(&methods);
        bytes.extend_from_slice(&[5, cmd, 0]);
        dest.encode(&mut bytes);
        bytes.extend_from_slice(&port.to_be_bytes());
        bytes.extend_from_slice(&after);
        let at = split.index(bytes.len()).max(1);
        let (outcome, back, rest) = run(&bytes[..at], &bytes[at..]);
        prop_assert_eq!(back, vec![5, 0]);
        if cmd != 1 {
            prop_assert!(matches!(outcome, Err(SocksError::Reply(rep::COMMAND_NOT_SUPPORTED, _))), "{:?}", outcome);
            return Ok(());
        }
        let (host, got_port) = outcome.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&host, &dest.expected());
        prop_assert_eq!(got_port, port);
        prop_assert_eq!(rest, after, "the bytes after the request are not the tunnel's");
        let e = format!("{}{}{}", if wild { "*." } else { "" }, entry.join("."),
            eport.map(|p| format!(":{p}")).unwrap_or_default());
        let list = Allowlist::parse([e.as_str()]).map_err(|x| TestCaseError::fail(x.to_string()))?;
        let want = match &dest {
            Dest::Name(l, _) => model(wild, &entry, eport, l, port),
            // name entries never allow a literal address
            _ => false,
        };
        prop_assert_eq!(list.allows(&host, got_port), want);
    }
}

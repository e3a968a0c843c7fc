//! Property tests of the sandbox's name server ([`super::dns`]): on any bytes it answers
//! without a panic, and only with a response (QR set) of the query's id, never longer
//! than the query plus one address record; a generated query for any name the allowlist
//! accepts, in any case, of type `A`, gets exactly one address, the name's synthetic one,
//! its question echoed byte for byte. Cases per run: `PROPTEST_CASES` (defaults below;
//! `hack/fuzz.sh` runs more).

use super::allowlist_props::labels;
use super::dns::respond;
use super::fakeip::FakeIps;
use proptest::prelude::*;

/// `PROPTEST_CASES` when set, else `cases`.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

/// The wire form of a query for `labels` of type `qtype`, class IN, with `tail` after it.
fn wire(id: u16, labels: &[String], qtype: u16, tail: &[u8]) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for l in labels {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    q.extend_from_slice(tail);
    q
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn any_bytes_get_a_response_of_their_id_or_nothing(
        b in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let names = FakeIps::new();
        if let Some(out) = respond(&b, &names) {
            prop_assert!(out.len() >= 12);
            prop_assert_eq!(&out[..2], &b[..2]);
            prop_assert_eq!(out[2] & 0x80, 0x80);
            prop_assert!(out.len() <= b.len().max(12) + 16);
        }
    }

    #[test]
    fn a_query_for_a_name_gets_its_synthetic_address(
        id in any::<u16>(),
        labels in labels(),
        upper in prop::collection::vec(any::<bool>(), 0..64),
        tail in prop::collection::vec(any::<u8>(), 0..20),
    ) {
        let names = FakeIps::new();
        // the same name in any case
        let cased: Vec<String> = labels
            .iter()
            .enumerate()
            .map(|(i, l)| if upper.get(i).copied().unwrap_or(false) { l.to_ascii_uppercase() } else { l.clone() })
            .collect();
        let q = wire(id, &cased, 1, &tail);
        let out = respond(&q, &names).expect("an answer");
        let name = labels.join(".").to_ascii_lowercase();
        let question = &q[12..q.len() - tail.len()];
        prop_assert_eq!(&out[12..12 + question.len()], question);
        if name == "localhost" || name.ends_with(".localhost") {
            prop_assert_eq!(&out[out.len() - 4..], &[127, 0, 0, 1]);
        } else {
            prop_assert_eq!(u16::from_be_bytes([out[6], out[7]]), 1);
            let ip = std::net::Ipv4Addr::new(out[out.len() - 4], out[out.len() - 3], out[out.len() - 2], out[out.len() - 1]);
            prop_assert_eq!(names.name(ip), Some(name));
        }
    }
}

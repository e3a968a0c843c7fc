//! Property tests of the server-name reader ([`super::sni::peek`]): on any bytes (after a
//! handshake record's first byte, or not) it ends without a panic; a generated ClientHello
//! for any name the allowlist accepts, in any case, gives that name, and every prefix of
//! it asks for more. Cases per run: `PROPTEST_CASES` (defaults below; `hack/fuzz.sh` runs
//! more).

use super::allowlist_props::labels;
use super::sni::{client_hello, peek, Peek};
use proptest::prelude::*;

/// `PROPTEST_CASES` when set, else `cases`.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn any_bytes_are_read_without_a_panic(
        tls in any::<bool>(),
        b in prop::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut v = b;
        if tls {
            v.insert(0, 22);
            if v.len() > 2 {
                v[1] = 3;
            }
        }
        let _ = peek(&v);
    }

    #[test]
    fn a_generated_hello_gives_its_name(
        labels in labels(),
        upper in any::<bool>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let name = labels.join(".");
        let sent = if upper { name.to_ascii_uppercase() } else { name.clone() };
        let r = client_hello(Some(&sent));
        prop_assert_eq!(peek(&r), Peek::Hello(Some(name.to_ascii_lowercase())));
        let at = cut.index(r.len());
        prop_assert_eq!(peek(&r[..at]), Peek::NeedMore);
    }
}

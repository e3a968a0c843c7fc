//! Property tests of the allowlist: parsing never panics on any text, and a decision on
//! generated names and entries equals a simple label-by-label reference model. Cases per
//! run: `PROPTEST_CASES` (default 256; `hack/fuzz.sh` runs more).

use super::allowlist::{Allowlist, Entry, Host};
use proptest::prelude::*;

/// Labels from a small alphabet, so that generated hosts and entries often meet.
fn label() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "ab", "Ab", "x-y", "com", "evil", "b-a", "0"])
        .prop_map(str::to_string)
}

pub(super) fn labels() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(label(), 1..4)
}

/// Reference model: names compare label by label, case-insensitively; `*.s` needs at
/// least one label before all of `s`'s labels; a port, when given, must be equal.
pub(super) fn model(
    wild: bool,
    entry: &[String],
    eport: Option<u16>,
    host: &[String],
    port: u16,
) -> bool {
    if eport.is_some_and(|p| p != port) {
        return false;
    }
    let low = |v: &[String]| v.iter().map(|l| l.to_ascii_lowercase()).collect::<Vec<_>>();
    let (e, h) = (low(entry), low(host));
    if wild {
        h.len() > e.len() && h[h.len() - e.len()..] == e[..]
    } else {
        h == e
    }
}

proptest! {
    #[test]
    fn parsing_any_text_never_panics(s in "\\PC{0,40}") {
        let _ = Entry::parse(&s);
        let _ = Host::parse(&s);
        let _ = Allowlist::parse([s.as_str()]);
    }

    #[test]
    fn decision_equals_the_reference_model(
        wild in any::<bool>(),
        entry in labels(),
        eport in prop::option::of(prop::sample::select(vec![80u16, 443])),
        edot in any::<bool>(),
        host in labels(),
        hdot in any::<bool>(),
        port in prop::sample::select(vec![80u16, 443]),
    ) {
        let mut e = format!("{}{}{}", if wild { "*." } else { "" }, entry.join("."), if edot { "." } else { "" });
        if let Some(p) = eport {
            e = format!("{e}:{p}");
        }
        let h = format!("{}{}", host.join("."), if hdot { "." } else { "" });
        let list = Allowlist::parse([e.as_str()]).map_err(|x| TestCaseError::fail(x.to_string()))?;
        let host_p = Host::parse(&h).map_err(TestCaseError::fail)?;
        prop_assert_eq!(
            list.allows(&host_p, port),
            model(wild, &entry, eport, &host, port),
            "entry {} host {} port {}", e, h, port
        );
    }
}

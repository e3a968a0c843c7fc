//! Taking secrets' values out of bytes coming back from their hosts: every occurrence of
//! a value (and of the forms a server reflecting a request shows it in) is replaced with
//! that secret's placeholder, so a response never carries a value into the sandbox and
//! a task that sends back what it got sends the placeholder again.
//!
//! What is caught, for each secret:
//! - the value as the proxy sent it (in a header);
//! - its percent-encoding, as the proxy sends it in a request target (upper-case hex)
//!   and in lower-case hex, as other encoders write it (what a server echoing its URL
//!   shows);
//! - its JSON string escaping (with `/` escaped or not), when that differs from the
//!   value (`"`, `\` or `/` in it).
//!
//! Not caught: any other transform a server could apply (base64, a hash, a slice or a
//! reversal of the value, a compression the proxy did not see framed as one): the
//! proxy only ever sends the value as is or percent-encoded, so reflecting it otherwise
//! takes a server that computes on its requests.
//!
//! [`Stream`] scrubs a byte stream cut at arbitrary places (reads, chunks): it holds back
//! only a tail that could be the start of a value (never more than the longest form
//! minus one byte), so a stream of events is not delayed when it does not end in one.

use aho_corasick::{AhoCorasick, MatchKind};

/// The replacements for one exec's secrets (none for most).
#[derive(Debug, Default)]
pub struct Scrubber {
    /// The forms of the values, leftmost-first; `None` when there are no secrets.
    ac: Option<AhoCorasick>,
    /// Per pattern of `ac`: the bytes it becomes (its secret's placeholder).
    to: Vec<Vec<u8>>,
    /// The patterns, to tell what a held-back tail could still become.
    patterns: Vec<Vec<u8>>,
}

/// `v` percent-encoded: RFC 3986 unreserved bytes as they are, others `%XX`.
pub fn percent_encode(v: &[u8], upper: bool) -> String {
    let mut s = String::with_capacity(v.len());
    for &b in v {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            s.push(b as char);
        } else if upper {
            s.push_str(&format!("%{b:02X}"));
        } else {
            s.push_str(&format!("%{b:02x}"));
        }
    }
    s
}

/// `v` escaped as inside a JSON string; `/` too if `slash` (as some encoders write it).
fn json_escape(v: &[u8], slash: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    for &b in v {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' if slash => out.extend_from_slice(b"\\/"),
            _ => out.push(b),
        }
    }
    out
}

/// The forms of `value` that are looked for.
fn forms(value: &[u8]) -> Vec<Vec<u8>> {
    vec![
        value.to_vec(),
        percent_encode(value, true).into_bytes(),
        percent_encode(value, false).into_bytes(),
        json_escape(value, false),
        json_escape(value, true),
    ]
}

impl Scrubber {
    /// A scrubber replacing each `(value, placeholder)`'s value forms with the placeholder.
    /// A form holding another form is left out: replacing the shorter one already breaks
    /// every occurrence of the longer, and it keeps [`Stream`]'s hold-back exact.
    pub fn new<'a>(secrets: impl IntoIterator<Item = (&'a [u8], &'a str)>) -> Scrubber {
        let mut pats: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for (value, placeholder) in secrets {
            if value.is_empty() {
                continue;
            }
            for f in forms(value) {
                if !pats.iter().any(|(p, _)| *p == f) {
                    pats.push((f, placeholder.as_bytes().to_vec()));
                }
            }
        }
        let kept: Vec<(Vec<u8>, Vec<u8>)> = pats
            .iter()
            .filter(|(p, _)| {
                !pats
                    .iter()
                    .any(|(q, _)| q.len() < p.len() && contains(p, q))
            })
            .cloned()
            .collect();
        if kept.is_empty() {
            return Scrubber::default();
        }
        let patterns: Vec<Vec<u8>> = kept.iter().map(|(p, _)| p.clone()).collect();
        let ac = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostFirst)
            .build(&patterns)
            .expect("a few literal patterns of at most 24 KiB build");
        Scrubber {
            ac: Some(ac),
            to: kept.into_iter().map(|(_, t)| t).collect(),
            patterns,
        }
    }

    /// Is there nothing to replace?
    pub fn is_empty(&self) -> bool {
        self.ac.is_none()
    }

    /// `bytes` with every form of a value replaced; and how many were.
    pub fn all(&self, bytes: &[u8]) -> (Vec<u8>, usize) {
        let mut out = Vec::with_capacity(bytes.len());
        let (end, n) = self.replace(bytes, &mut out);
        out.extend_from_slice(&bytes[end..]);
        (out, n)
    }

    /// A stream scrubbed piece by piece.
    pub fn stream(&self) -> Stream<'_> {
        Stream {
            s: self,
            held: Vec::new(),
            found: 0,
        }
    }

    /// Append `buf` to `out` with every complete match replaced, up to the end of the
    /// last match; returns that end (what follows is not yet written) and the count.
    fn replace(&self, buf: &[u8], out: &mut Vec<u8>) -> (usize, usize) {
        let Some(ac) = &self.ac else {
            return (0, 0);
        };
        let mut at = 0;
        let mut n = 0;
        for m in ac.find_iter(buf) {
            out.extend_from_slice(&buf[at..m.start()]);
            out.extend_from_slice(&self.to[m.pattern().as_usize()]);
            at = m.end();
            n += 1;
        }
        (at, n)
    }

    /// Where, at or after `from`, the tail of `buf` could be the start of a form: the
    /// earliest position whose rest is a proper prefix of some pattern (`buf.len()` if
    /// none).
    fn hold_from(&self, buf: &[u8], from: usize) -> usize {
        let longest = self.patterns.iter().map(Vec::len).max().unwrap_or(1);
        let start = from.max(buf.len().saturating_sub(longest - 1));
        let tail = &buf[start..];
        (0..tail.len())
            .find(|&i| {
                let rest = &tail[i..];
                self.patterns
                    .iter()
                    .any(|p| p.len() > rest.len() && p.starts_with(rest))
            })
            .map_or(buf.len(), |i| start + i)
    }
}

/// One scrubbed stream (a response body, an upgraded connection).
pub struct Stream<'a> {
    s: &'a Scrubber,
    /// Bytes that could be the start of a value, not written yet.
    held: Vec<u8>,
    found: usize,
}

impl Stream<'_> {
    /// Scrub `input` (the next bytes of the stream) into `out`, holding back a tail that
    /// could be the start of a value.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.s.is_empty() {
            out.extend_from_slice(input);
            return;
        }
        let joined;
        let buf: &[u8] = if self.held.is_empty() {
            input
        } else {
            let mut j = std::mem::take(&mut self.held);
            j.extend_from_slice(input);
            joined = j;
            &joined
        };
        let (at, n) = self.s.replace(buf, out);
        self.found += n;
        let hold = self.s.hold_from(buf, at);
        out.extend_from_slice(&buf[at..hold]);
        self.held = buf[hold..].to_vec();
    }

    /// The end of the stream: what was held back (it is no value's start after all).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.held);
    }

    /// How many values were replaced so far.
    pub fn found(&self) -> usize {
        self.found
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PH: &str = "capsule-secret-0123";

    fn s(value: &str) -> Scrubber {
        Scrubber::new([(value.as_bytes(), PH)])
    }

    fn streamed(sc: &Scrubber, pieces: &[&[u8]]) -> Vec<u8> {
        let mut st = sc.stream();
        let mut out = Vec::new();
        for p in pieces {
            st.feed(p, &mut out);
        }
        st.finish(&mut out);
        out
    }

    #[test]
    fn replaces_the_value_and_its_forms() {
        let sc = s("sk a/b\"c");
        let body = br#"raw=sk a/b"c pct=sk%20a%2Fb%22c low=sk%20a%2fb%22c json="sk a\/b\"c" json2="sk a/b\"c""#;
        let (out, n) = sc.all(body);
        assert_eq!(n, 5, "{}", String::from_utf8_lossy(&out));
        let t = String::from_utf8(out).unwrap();
        assert_eq!(
            t,
            format!("raw={PH} pct={PH} low={PH} json=\"{PH}\" json2=\"{PH}\"")
        );
    }

    #[test]
    fn a_plain_token_is_one_pattern() {
        let sc = s("sk-123_abc");
        assert_eq!(sc.patterns.len(), 1);
        assert!(Scrubber::new([]).is_empty());
        assert_eq!(Scrubber::new([]).all(b"abc").0, b"abc");
    }

    #[test]
    fn split_anywhere() {
        let sc = s("sk-real-value");
        let body = b"x sk-real-value y sk-real-valu sk-real-value";
        let want = format!("x {PH} y sk-real-valu {PH}").into_bytes();
        for i in 0..body.len() {
            for j in i..body.len() {
                let got = streamed(&sc, &[&body[..i], &body[i..j], &body[j..]]);
                assert_eq!(got, want, "cut at {i},{j}");
            }
        }
        // one byte at a time
        let pieces: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(streamed(&sc, &pieces), want);
    }

    #[test]
    fn holds_back_only_a_possible_start() {
        let sc = s("sk-real-value");
        let mut st = sc.stream();
        let mut out = Vec::new();
        st.feed(b"data: 1\n\n", &mut out);
        assert_eq!(out, b"data: 1\n\n", "nothing held: no value starts there");
        out.clear();
        st.feed(b"data: sk-re", &mut out);
        assert_eq!(out, b"data: ");
        out.clear();
        st.feed(b"al-value\n", &mut out);
        assert_eq!(out, format!("{PH}\n").as_bytes());
        assert_eq!(st.found(), 1);
    }

    proptest! {
        #[test]
        fn streamed_is_all(
            body in proptest::collection::vec(prop_oneof![
                Just(b"sk-v".to_vec()), Just(b"sk-".to_vec()), Just(b"s".to_vec()),
                Just(b"sk%2F".to_vec()), Just(b"k".to_vec()), Just(b"sk-v/1".to_vec()),
                Just(b"-".to_vec()), Just(b"/".to_vec()),
            ], 0..24),
            cuts in proptest::collection::vec(0usize..64, 0..6),
        ) {
            let sc = s("sk-v/1");
            let body: Vec<u8> = body.concat();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(body.len())).collect();
            cuts.sort();
            let mut pieces = Vec::new();
            let mut at = 0;
            for c in cuts { pieces.push(&body[at..c]); at = c; }
            pieces.push(&body[at..]);
            let got = streamed(&sc, &pieces);
            prop_assert_eq!(&got, &sc.all(&body).0);
            prop_assert!(!contains(&got, b"sk-v/1") && !contains(&got, b"sk-v%2F1"));
        }
    }
}

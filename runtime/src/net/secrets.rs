//! Secrets kept outside the sandbox: the command's environment has a random placeholder
//! for each secret, and the proxy puts the real value in, in place of the placeholder,
//! only in requests to the hosts that secret is for.
//!
//! - A secret is named by `--secret NAME=HOST[:PORT][,...]` or the spec's
//!   `sandbox.network.secrets: {NAME: [HOST, ...]}` (an accepted grant); its value comes
//!   from capsule's own environment variable `NAME` or `--secret-file NAME=PATH`.
//! - The placeholder is random per exec (never derived from the value), so it tells
//!   nothing about the value, and one seen anywhere else is known to be a placeholder.
//! - [`Secrets::substitute`] rewrites one request head: every header value and the
//!   request target (URL and query). A placeholder in a request to a host the secret is
//!   not for is a [`Leak`]: the request is refused (403) and recorded with the host and
//!   the header's name, never a value.
//! - Responses from a secret's hosts come back with every value replaced by its
//!   placeholder ([`Secrets::scrubber`], [`super::scrub`]).
//! - The value lives in this process only: [`Secret`]'s `Debug` redacts it, and no error
//!   of this module quotes it.

use super::allowlist::{Allowlist, Entry, Host};
use super::http::RequestHead;
use super::scrub::{percent_encode, Scrubber};
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Longest secret value accepted (a header line must stay well inside the proxy's bound).
pub const MAX_VALUE: usize = 8 * 1024;

/// What can be wrong with a secret's definition or value. Never carries the value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("--secret {0:?}: want NAME=HOST[:PORT][,HOST[:PORT]...]")]
    Syntax(String),
    #[error("--secret-file {0:?}: want NAME=PATH")]
    FileSyntax(String),
    #[error(
        "secret `{0}`: not a variable name (letters, digits and `_`, not starting with a digit)"
    )]
    Name(String),
    #[error("secret `{name}`: {reason}")]
    Bad { name: String, reason: String },
}

/// Is `n` a plain environment variable name?
pub fn valid_name(n: &str) -> bool {
    let mut b = n.bytes();
    matches!(b.next(), Some(c) if c == b'_' || c.is_ascii_alphabetic())
        && b.all(|c| c == b'_' || c.is_ascii_alphanumeric())
}

/// Parse `NAME=HOST[:PORT][,HOST[:PORT]...]` (the value of `--secret`).
pub fn parse_flag(s: &str) -> Result<(String, Vec<String>), SecretError> {
    let (name, hosts) = s
        .split_once('=')
        .ok_or_else(|| SecretError::Syntax(s.to_string()))?;
    if !valid_name(name) {
        return Err(SecretError::Name(name.to_string()));
    }
    let hosts: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(String::from)
        .collect();
    if hosts.is_empty() {
        return Err(SecretError::Syntax(s.to_string()));
    }
    for h in &hosts {
        Entry::parse(h).map_err(|e| SecretError::Bad {
            name: name.to_string(),
            reason: e.to_string(),
        })?;
    }
    Ok((name.to_string(), hosts))
}

/// Parse `NAME=PATH` (the value of `--secret-file`).
pub fn parse_file_flag(s: &str) -> Result<(String, PathBuf), SecretError> {
    let (name, path) = s
        .split_once('=')
        .filter(|(_, p)| !p.is_empty())
        .ok_or_else(|| SecretError::FileSyntax(s.to_string()))?;
    if !valid_name(name) {
        return Err(SecretError::Name(name.to_string()));
    }
    Ok((name.to_string(), PathBuf::from(path)))
}

/// Add the `--secret NAME=HOST,...` flags to an exec's network policy: each name with
/// its hosts, and the hosts to the allowlist (which the flags start if the capsule has
/// none, as `--allow-host` does).
pub fn add_to_policy(
    net: &mut capsule_bundle::policy::NetworkPolicy,
    flags: &[String],
) -> Result<(), SecretError> {
    use capsule_bundle::policy::NetworkMode;
    for f in flags {
        let (name, hosts) = parse_flag(f)?;
        if net.mode != NetworkMode::Allowlist {
            net.mode = NetworkMode::Allowlist;
            net.allow.clear();
        }
        for h in &hosts {
            if !net.allow.contains(h) {
                net.allow.push(h.clone());
            }
        }
        let e = net.secrets.entry(name).or_default();
        for h in hosts {
            if !e.contains(&h) {
                e.push(h);
            }
        }
    }
    Ok(())
}

/// One secret of an exec.
pub struct Secret {
    name: String,
    placeholder: String,
    value: Vec<u8>,
    hosts: Allowlist,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("value", &"<redacted>")
            .finish()
    }
}

impl Secret {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn placeholder(&self) -> &str {
        &self.placeholder
    }
    pub fn hosts(&self) -> &Allowlist {
        &self.hosts
    }
}

/// A placeholder seen in a request to a host its secret is not for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    /// The secret's name.
    pub secret: String,
    /// Where it was: a header's name, or `request target`.
    pub header: String,
}

impl fmt::Display for Leak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the placeholder of secret {} in {} of a request to a host it is not for (exfiltration attempt)",
            self.secret,
            if self.header == TARGET {
                TARGET.to_string()
            } else {
                format!("header `{}`", self.header)
            }
        )
    }
}

/// [`Leak::header`] for the request line's target.
pub const TARGET: &str = "request target";

/// The secrets of one exec (empty for most).
#[derive(Debug, Default)]
pub struct Secrets {
    list: Vec<Secret>,
    /// Takes the values out of what their hosts answer.
    scrub: Scrubber,
}

/// 20 random bytes as hex: the per-exec part of a placeholder.
fn random_hex() -> Result<String, String> {
    let mut b = [0u8; 20];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(hex::encode(b))
}

/// Read a secret's value from `path` (one trailing newline dropped). The error never
/// quotes the file's content.
fn read_file(name: &str, path: &Path) -> Result<Vec<u8>, SecretError> {
    let bad = |reason: String| SecretError::Bad {
        name: name.to_string(),
        reason,
    };
    let f = std::fs::File::open(path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    let mut v = Vec::new();
    f.take(MAX_VALUE as u64 + 2)
        .read_to_end(&mut v)
        .map_err(|e| bad(format!("{}: {e}", path.display())))?;
    if v.ends_with(b"\n") {
        v.pop();
        if v.ends_with(b"\r") {
            v.pop();
        }
    }
    Ok(v)
}

impl Secrets {
    /// The secrets named by `defs` (name -> host entries), with values from `files` (by
    /// name) or else `env(name)`. A secret without a value, or with a value that could
    /// not go into a header as is (empty, control characters, too long), is an error.
    pub fn load(
        defs: &BTreeMap<String, Vec<String>>,
        files: &[(String, PathBuf)],
        env: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Secrets, SecretError> {
        let mut list = Vec::new();
        for (f, _) in files {
            if !defs.contains_key(f) {
                return Err(SecretError::Bad {
                    name: f.clone(),
                    reason: "--secret-file names a secret no --secret (or spec) defines".into(),
                });
            }
        }
        for (name, hosts) in defs {
            if !valid_name(name) {
                return Err(SecretError::Name(name.clone()));
            }
            let bad = |reason: &str| SecretError::Bad {
                name: name.clone(),
                reason: reason.to_string(),
            };
            let hosts = Allowlist::parse(hosts).map_err(|e| bad(&e.to_string()))?;
            let value = match files.iter().rev().find(|(n, _)| n == name) {
                Some((_, p)) => read_file(name, p)?,
                None => {
                    use std::os::unix::ffi::OsStringExt;
                    env(name)
                        .ok_or_else(|| {
                            bad("no value: set it in capsule's environment or give --secret-file NAME=PATH")
                        })?
                        .into_vec()
                }
            };
            if value.is_empty() {
                return Err(bad("the value is empty"));
            }
            if value.len() > MAX_VALUE {
                return Err(bad("the value is longer than 8 KiB"));
            }
            if value.iter().any(|&b| b < 0x20 || b == 0x7f) {
                return Err(bad(
                    "the value has control characters (a header value cannot carry them)",
                ));
            }
            let placeholder = format!("capsule-secret-{}", random_hex().map_err(|e| bad(&e))?);
            list.push(Secret {
                name: name.clone(),
                placeholder,
                value,
                hosts,
            });
        }
        let scrub = Scrubber::new(
            list.iter()
                .map(|s| (s.value.as_slice(), s.placeholder.as_str())),
        );
        Ok(Secrets { list, scrub })
    }

    /// What replaces the values (and their reflected forms) with their placeholders in
    /// responses ([`super::scrub`]).
    pub fn scrubber(&self) -> &Scrubber {
        &self.scrub
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Secret> {
        self.list.iter()
    }

    /// The command's environment: each name set to its placeholder.
    pub fn env(&self) -> Vec<(String, String)> {
        self.list
            .iter()
            .map(|s| (s.name.clone(), s.placeholder.clone()))
            .collect()
    }

    /// Is some secret for `host:port` (so its requests are read, and HTTPS terminated)?
    pub fn for_host(&self, host: &Host, port: u16) -> bool {
        self.list.iter().any(|s| s.hosts.allows(host, port))
    }

    /// Put each secret's value in place of its placeholder in `head`'s header values and
    /// request target, for a request going to `host:port`. A placeholder of a secret
    /// that is not for `host:port` is a [`Leak`] (and nothing is replaced). Returns how
    /// many placeholders were replaced.
    pub fn substitute(
        &self,
        head: &mut RequestHead,
        host: &Host,
        port: u16,
    ) -> Result<usize, Leak> {
        if self.list.is_empty() {
            return Ok(0);
        }
        let mut n = 0;
        for s in &self.list {
            let ph = s.placeholder.as_bytes();
            let allowed = s.hosts.allows(host, port);
            let leak = |header: &str| Leak {
                secret: s.name.clone(),
                header: header.to_string(),
            };
            if find(head.target.as_bytes(), ph).is_some() {
                if !allowed {
                    return Err(leak(TARGET));
                }
                let enc = percent_encode(&s.value, true);
                n += head.target.matches(&s.placeholder).count();
                head.target = head.target.replace(&s.placeholder, &enc);
            }
            for (name, value) in head.headers.iter_mut() {
                if find(value, ph).is_none() {
                    continue;
                }
                if !allowed {
                    return Err(leak(name));
                }
                let (v, k) = replace_all(value, ph, &s.value);
                *value = v;
                n += k;
            }
        }
        Ok(n)
    }

    /// Does `bytes` hold some placeholder? Returns that secret's name.
    pub fn placeholder_in(&self, bytes: &[u8]) -> Option<&str> {
        self.list
            .iter()
            .find(|s| find(bytes, s.placeholder.as_bytes()).is_some())
            .map(|s| s.name.as_str())
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

fn replace_all(hay: &[u8], needle: &[u8], with: &[u8]) -> (Vec<u8>, usize) {
    let mut out = Vec::with_capacity(hay.len() + with.len());
    let mut i = 0;
    let mut n = 0;
    while let Some(j) = find(&hay[i..], needle) {
        out.extend_from_slice(&hay[i..i + j]);
        out.extend_from_slice(with);
        i += j + needle.len();
        n += 1;
    }
    out.extend_from_slice(&hay[i..]);
    (out, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::http::parse_head;
    use std::ffi::OsString;

    fn secrets(defs: &[(&str, &[&str])], env: &[(&str, &str)]) -> Secrets {
        let defs: BTreeMap<String, Vec<String>> = defs
            .iter()
            .map(|(n, h)| (n.to_string(), h.iter().map(|s| s.to_string()).collect()))
            .collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        Secrets::load(&defs, &[], |n| {
            env.iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| OsString::from(v))
        })
        .unwrap()
    }

    fn name(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    #[test]
    fn flags() {
        assert_eq!(
            parse_flag("TOKEN=api.test:443,*.x.test").unwrap(),
            (
                "TOKEN".into(),
                vec!["api.test:443".into(), "*.x.test".into()]
            )
        );
        assert!(parse_flag("TOKEN").is_err());
        assert!(parse_flag("TOKEN=").is_err());
        assert!(parse_flag("1X=a.test").is_err());
        assert!(parse_flag("T=http://a.test/").is_err());
        assert_eq!(
            parse_file_flag("T=/run/t").unwrap(),
            ("T".into(), PathBuf::from("/run/t"))
        );
        assert!(parse_file_flag("T=").is_err());
    }

    #[test]
    fn placeholders_are_random_and_not_the_value() {
        let a = secrets(&[("T", &["a.test"])], &[("T", "sk-value")]);
        let b = secrets(&[("T", &["a.test"])], &[("T", "sk-value")]);
        let (pa, pb) = (&a.env()[0].1, &b.env()[0].1);
        assert_ne!(pa, pb);
        assert!(!pa.contains("sk-value"));
        assert!(!format!("{a:?}").contains("sk-value"));
    }

    #[test]
    fn values_checked_without_quoting_them() {
        let defs: BTreeMap<String, Vec<String>> = [("T".to_string(), vec!["a.test".to_string()])]
            .into_iter()
            .collect();
        for bad in ["", "a\r\nX-Injected: 1", "a\0b"] {
            let e = Secrets::load(&defs, &[], |_| Some(bad.into())).unwrap_err();
            assert!(!bad.is_empty() && !e.to_string().contains(bad) || bad.is_empty());
        }
        let e = Secrets::load(&defs, &[], |_| None).unwrap_err();
        assert!(e.to_string().contains("no value"), "{e}");
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t");
        std::fs::write(&p, "from-file\n").unwrap();
        let s = Secrets::load(&defs, &[("T".into(), p)], |_| Some("env".into())).unwrap();
        assert_eq!(s.list[0].value, b"from-file");
    }

    #[test]
    fn substitutes_for_its_hosts_only() {
        let s = secrets(
            &[("T", &["api.test:443"]), ("Q", &["q.test"])],
            &[("T", "sk-1"), ("Q", "a b/c")],
        );
        let t = s.env()[1].1.clone();
        let q = s.env()[0].1.clone();
        assert_eq!(s.env()[1].0, "T");
        let raw = format!(
            "GET /v1?key={q}&k2={q} HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {t}\r\nx-api-key: {t}\r\n\r\n"
        );
        // T's host: T replaced; Q is not for api.test: a leak, in the target
        let mut h = parse_head(raw.as_bytes()).unwrap();
        assert_eq!(
            s.substitute(&mut h, &name("api.test"), 443),
            Err(Leak {
                secret: "Q".into(),
                header: TARGET.into()
            })
        );
        let raw2 =
            format!("GET /v1 HTTP/1.1\r\nAuthorization: Bearer {t}\r\nx-api-key: {t}\r\n\r\n");
        let mut h = parse_head(raw2.as_bytes()).unwrap();
        assert_eq!(s.substitute(&mut h, &name("api.test"), 443), Ok(2));
        assert_eq!(h.headers[0].1, b"Bearer sk-1");
        assert_eq!(h.headers[1].1, b"sk-1");
        // another port of that host, another host: refused, naming the header
        for (host, port) in [("api.test", 80), ("evil.test", 443)] {
            let mut h = parse_head(raw2.as_bytes()).unwrap();
            let e = s.substitute(&mut h, &name(host), port).unwrap_err();
            assert_eq!(e.header, "Authorization");
            assert!(!e.to_string().contains("sk-1"));
        }
        // the query, percent-encoded
        let raw3 = format!("GET /v1?key={q} HTTP/1.1\r\n\r\n");
        let mut h = parse_head(raw3.as_bytes()).unwrap();
        assert_eq!(s.substitute(&mut h, &name("q.test"), 80), Ok(1));
        assert_eq!(h.target, "/v1?key=a%20b%2Fc");
        // no placeholder: nothing to do
        let mut h = parse_head(b"GET / HTTP/1.1\r\nA: b\r\n\r\n").unwrap();
        assert_eq!(s.substitute(&mut h, &name("evil.test"), 80), Ok(0));
        assert_eq!(s.placeholder_in(raw2.as_bytes()), Some("T"));
        assert!(s.for_host(&name("api.test"), 443));
        assert!(!s.for_host(&name("api.test"), 80));
    }
}

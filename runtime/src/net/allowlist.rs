//! The network allowlist: parsing entries and deciding whether a request's host and port
//! are named by the list.
//!
//! Entry syntax (from `sandbox.network.allow` in a spec, or `--allow-host` on exec):
//!
//! | entry | allows |
//! |---|---|
//! | `example.com` | exactly `example.com`, any port |
//! | `example.com:443` | exactly `example.com`, port 443 only |
//! | `*.example.com` | `a.example.com`, `a.b.example.com`; never `example.com`, `evil-example.com` or `example.com.evil.io` |
//! | `127.0.0.1`, `127.0.0.1:8080` | that literal IPv4 address (also permits it when it is loopback/private) |
//! | `::1`, `[::1]`, `[::1]:8080` | that literal IPv6 address |
//!
//! Names compare case-insensitively and a trailing dot is ignored (`Example.COM.` is
//! `example.com`). A name entry never matches a literal address in a request and vice
//! versa: an address is allowed by an address entry only. Whether an entry's *resolved*
//! addresses may be contacted is decided separately (see [`super::addr`]): a name that
//! resolves to loopback, private or metadata addresses is refused unless the list also
//! names that literal address.

use std::fmt;
use std::net::IpAddr;

/// A bad allowlist entry.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("allowlist entry `{entry}`: {reason}")]
pub struct EntryError {
    pub entry: String,
    pub reason: String,
}

/// The host part of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// An exact, normalized (lowercase, no trailing dot) name.
    Name(String),
    /// `*.suffix`: any name with at least one label before `.suffix` (stored without `*.`).
    Suffix(String),
    /// A literal address (IPv4-mapped IPv6 stored as IPv4).
    Ip(IpAddr),
}

/// One allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub host: HostPattern,
    /// `None`: any port.
    pub port: Option<u16>,
}

/// The host of a request: a normalized name or a literal address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            Host::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
        }
    }
}

impl Host {
    /// Parse a request host: a DNS name, a dotted IPv4 address, or an IPv6 address with or
    /// without brackets. Names are lowercased and lose one trailing dot.
    pub fn parse(s: &str) -> Result<Host, String> {
        if let Some(inner) = s.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| "unterminated `[`".to_string())?;
            return inner
                .parse::<std::net::Ipv6Addr>()
                .map(|a| Host::Ip(IpAddr::V6(a).to_canonical()))
                .map_err(|_| format!("`{inner}` is not an IPv6 address"));
        }
        if let Ok(a) = s.parse::<IpAddr>() {
            return Ok(Host::Ip(a.to_canonical()));
        }
        normalize_name(s).map(Host::Name)
    }
}

/// Lowercase `s`, drop one trailing dot, and check it is a plausible DNS name: labels of
/// 1..=63 characters from `[a-z0-9_-]`, 253 characters at most.
pub fn normalize_name(s: &str) -> Result<String, String> {
    let s = s.strip_suffix('.').unwrap_or(s);
    if s.is_empty() {
        return Err("empty host name".into());
    }
    if s.len() > 253 {
        return Err("host name longer than 253 characters".into());
    }
    for label in s.split('.') {
        if label.is_empty() {
            return Err(format!("host name `{s}` has an empty label"));
        }
        if label.len() > 63 {
            return Err(format!(
                "host name `{s}` has a label longer than 63 characters"
            ));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Err(format!("host name `{s}` contains `{c}`"));
        }
    }
    Ok(s.to_ascii_lowercase())
}

fn err(entry: &str, reason: impl Into<String>) -> EntryError {
    EntryError {
        entry: entry.to_string(),
        reason: reason.into(),
    }
}

fn parse_port(entry: &str, p: &str) -> Result<u16, EntryError> {
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(err(entry, format!("`{p}` is not a port (1-65535)"))),
        Ok(n) => Ok(n),
    }
}

impl Entry {
    /// Parse one entry (see the module documentation for the syntax).
    pub fn parse(entry: &str) -> Result<Entry, EntryError> {
        let s = entry.trim();
        if s.is_empty() {
            return Err(err(entry, "empty entry"));
        }
        if s.contains("://") || s.contains('/') {
            return Err(err(
                entry,
                "give a host (`example.com`, `*.example.com`, `host:443`), not a URL",
            ));
        }
        // [v6] or [v6]:port
        if let Some(rest) = s.strip_prefix('[') {
            let (addr, after) = rest
                .split_once(']')
                .ok_or_else(|| err(entry, "unterminated `[`"))?;
            let ip: std::net::Ipv6Addr = addr
                .parse()
                .map_err(|_| err(entry, format!("`{addr}` is not an IPv6 address")))?;
            let port = match after {
                "" => None,
                p => Some(parse_port(
                    entry,
                    p.strip_prefix(':')
                        .ok_or_else(|| err(entry, "expected `:PORT` after `]`"))?,
                )?),
            };
            return Self::ip(entry, IpAddr::V6(ip), port);
        }
        // bare IPv6 (no port possible)
        if s.matches(':').count() > 1 {
            let ip: std::net::Ipv6Addr = s.parse().map_err(|_| {
                err(
                    entry,
                    "not an IPv6 address (write `[ADDR]:PORT` for an address with a port)",
                )
            })?;
            return Self::ip(entry, IpAddr::V6(ip), None);
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(parse_port(entry, p)?)),
            None => (s, None),
        };
        if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
            return Self::ip(entry, IpAddr::V4(ip), port);
        }
        if host == "*" || host == "*." {
            return Err(err(
                entry,
                "`*` would allow every host: use --open-network for an unrestricted network",
            ));
        }
        let (suffix, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        if name.contains('*') {
            return Err(err(
                entry,
                "`*` is only allowed as the whole first label (`*.example.com`)",
            ));
        }
        let name = normalize_name(name).map_err(|r| err(entry, r))?;
        let host = if suffix {
            HostPattern::Suffix(name)
        } else {
            HostPattern::Name(name)
        };
        Ok(Entry { host, port })
    }

    fn ip(entry: &str, ip: IpAddr, port: Option<u16>) -> Result<Entry, EntryError> {
        let ip = ip.to_canonical();
        let bad = match ip {
            IpAddr::V4(a) => a.is_unspecified() || a.is_multicast() || a.is_broadcast(),
            IpAddr::V6(a) => a.is_unspecified() || a.is_multicast(),
        };
        if bad {
            return Err(err(
                entry,
                format!(
                    "{ip} is an unspecified, multicast or broadcast address, not a destination"
                ),
            ));
        }
        Ok(Entry {
            host: HostPattern::Ip(ip),
            port,
        })
    }

    /// Does this entry name `host` on `port`?
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.host, host) {
            (HostPattern::Name(n), Host::Name(h)) => n == h,
            (HostPattern::Suffix(suf), Host::Name(h)) => h
                .strip_suffix(suf.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostPattern::Ip(a), Host::Ip(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Name(n) => f.write_str(n)?,
            HostPattern::Suffix(s) => write!(f, "*.{s}")?,
            HostPattern::Ip(IpAddr::V6(a)) => write!(f, "[{a}]")?,
            HostPattern::Ip(IpAddr::V4(a)) => write!(f, "{a}")?,
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// A parsed allowlist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<Entry>,
}

impl Allowlist {
    /// Parse every entry; the first bad one is the error.
    pub fn parse<I, S>(entries: I) -> Result<Allowlist, EntryError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let entries = entries
            .into_iter()
            .map(|e| Entry::parse(e.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Allowlist { entries })
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Does some entry name `host` on `port`?
    pub fn allows(&self, host: &Host, port: u16) -> bool {
        self.entries.iter().any(|e| e.matches(host, port))
    }

    /// Does some entry name `host`, on whatever port? (For a clearer refusal reason.)
    pub fn names_host(&self, host: &Host) -> bool {
        self.entries.iter().any(|e| {
            Entry {
                host: e.host.clone(),
                port: None,
            }
            .matches(host, 0)
        })
    }

    /// The loopback addresses with a port that the list names literally
    /// (`127.0.0.1:4873`, `[::1]:8080`): host services the sandbox reaches at that same
    /// address, through a relay listening there inside (see `super::relay`). Without a
    /// port an entry names no one listener, so it has none.
    pub fn loopback_services(&self) -> Vec<std::net::SocketAddr> {
        let mut v: Vec<std::net::SocketAddr> = self
            .entries
            .iter()
            .filter_map(|e| match (&e.host, e.port) {
                (HostPattern::Ip(ip), Some(port)) if ip.is_loopback() => {
                    Some(std::net::SocketAddr::new(*ip, port))
                }
                _ => None,
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Does some entry name the literal address `ip` on `port`? (This is what permits a
    /// loopback, private or host address.)
    pub fn names_literal(&self, ip: IpAddr, port: u16) -> bool {
        self.allows(&Host::Ip(ip.to_canonical()), port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(list: &[&str], host: &str, port: u16) -> bool {
        let l = Allowlist::parse(list).unwrap();
        l.allows(&Host::parse(host).unwrap(), port)
    }

    #[test]
    fn loopback_services_need_a_literal_loopback_address_and_port() {
        let l = Allowlist::parse([
            "127.0.0.1:4873",
            "[::1]:8080",
            "127.0.0.1",
            "10.0.0.1:80",
            "localhost:3000",
            "127.0.0.1:4873",
        ])
        .unwrap();
        let got: Vec<String> = l
            .loopback_services()
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(got, vec!["127.0.0.1:4873", "[::1]:8080"]);
    }

    #[test]
    fn wildcard_table() {
        let l = ["*.example.com"];
        for (host, want) in [
            ("a.example.com", true),
            ("A.Example.COM", true),
            ("a.example.com.", true),
            ("a.b.example.com", true),
            ("example.com", false),
            ("example.com.", false),
            ("evil-example.com", false),
            ("a.evil-example.com", false),
            ("example.com.evil.io", false),
            ("a.example.com.evil.io", false),
            ("aexample.com", false),
            (".example.com", false),
            ("example.org", false),
            ("127.0.0.1", false),
        ] {
            let got = Host::parse(host)
                .map(|h| Allowlist::parse(l).unwrap().allows(&h, 443))
                .unwrap_or(false);
            assert_eq!(got, want, "*.example.com vs {host}");
        }
    }

    #[test]
    fn exact_names_and_ports() {
        assert!(allows(&["example.com"], "example.com", 80));
        assert!(allows(&["example.com"], "EXAMPLE.com.", 8443));
        assert!(allows(&["Example.Com."], "example.com", 1));
        assert!(!allows(&["example.com"], "a.example.com", 80));
        assert!(!allows(&["example.com"], "example.co", 80));
        assert!(allows(&["example.com:443"], "example.com", 443));
        assert!(!allows(&["example.com:443"], "example.com", 80));
        assert!(allows(&["*.example.com:443"], "x.example.com", 443));
        assert!(!allows(&["*.example.com:443"], "x.example.com", 22));
        assert!(allows(&["a.test:80", "a.test:81"], "a.test", 81));
        let l = Allowlist::parse(["a.test:80"]).unwrap();
        assert!(l.names_host(&Host::parse("a.test").unwrap()));
        assert!(!l.names_host(&Host::parse("b.test").unwrap()));
    }

    #[test]
    fn literal_addresses() {
        assert!(allows(&["127.0.0.1"], "127.0.0.1", 9));
        assert!(allows(&["127.0.0.1:8080"], "127.0.0.1", 8080));
        assert!(!allows(&["127.0.0.1:8080"], "127.0.0.1", 8081));
        assert!(!allows(&["127.0.0.1"], "127.0.0.2", 80));
        assert!(allows(&["[::1]:8080"], "[::1]", 8080));
        assert!(allows(&["::1"], "::1", 1));
        assert!(allows(&["[::1]"], "[0:0:0:0:0:0:0:1]", 1));
        // IPv4-mapped IPv6 is the IPv4 address
        assert!(allows(&["127.0.0.1"], "[::ffff:127.0.0.1]", 1));
        assert!(allows(&["[::ffff:10.0.0.1]"], "10.0.0.1", 1));
        // names never match addresses and addresses never match names
        assert!(!allows(&["localhost"], "127.0.0.1", 80));
        assert!(!allows(&["127.0.0.1"], "localhost", 80));
    }

    #[test]
    fn bad_entries() {
        for bad in [
            "",
            "*",
            "*.",
            "a.*.com",
            "*a.com",
            "http://example.com",
            "example.com/path",
            "example.com:0",
            "example.com:65536",
            "example.com:x",
            "exa mple.com",
            "a..b",
            "[::1",
            "[::1]x",
            "[nope]",
            "1:2:3",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "[::]",
            "ff02::1",
        ] {
            assert!(Entry::parse(bad).is_err(), "`{bad}` should be rejected");
        }
        let e = Entry::parse("example.com:99999").unwrap_err();
        assert!(e.to_string().contains("example.com:99999"), "{e}");
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "example.com",
            "*.example.com:443",
            "127.0.0.1:80",
            "[::1]:8080",
        ] {
            assert_eq!(Entry::parse(s).unwrap().to_string(), s);
        }
    }
}

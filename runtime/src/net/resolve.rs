//! Name resolution for the proxy: the system resolver (`getaddrinfo` through tokio), or —
//! for tests only — a fixed table given by [`TEST_RESOLVE_ENV`].
//!
//! **Test-only override.** `CAPSULE_PROXY_TEST_RESOLVE=name=ADDR[,name=ADDR...]` (a name may
//! repeat to give several addresses, e.g. `a.test=127.0.0.1,a.test=::1`; an address with a
//! port, `a.test=127.0.0.1:8443` or `a.test=[::1]:8443`, stands for the name on every
//! port, so that a test server on a port of its own plays a real host's `:443`) replaces
//! the system resolver entirely: names not in the table do not resolve, so a test never looks up
//! a real internet name. It only changes what names resolve to; every resolved address is
//! still checked (loopback, private, metadata... are refused unless the allowlist names the
//! literal address), so it cannot widen what the proxy lets through. It is read by the
//! `capsule` process that runs the proxy (the host side), never from inside a sandbox.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// Environment variable holding the test resolver table (see the module documentation).
pub const TEST_RESOLVE_ENV: &str = "CAPSULE_PROXY_TEST_RESOLVE";

/// How the proxy turns names into addresses.
#[derive(Debug, Clone, Default)]
pub enum Resolver {
    /// The system resolver.
    #[default]
    System,
    /// A fixed table (tests only): names not in it do not resolve; an address with a
    /// port is reached on that port whatever port was asked.
    Table(HashMap<String, Vec<(IpAddr, Option<u16>)>>),
}

impl Resolver {
    /// The resolver the environment asks for: the [`TEST_RESOLVE_ENV`] table when set,
    /// else the system resolver.
    pub fn from_env() -> Result<Resolver, String> {
        match std::env::var(TEST_RESOLVE_ENV) {
            Ok(v) if !v.trim().is_empty() => {
                Self::parse_table(&v).map_err(|e| format!("{TEST_RESOLVE_ENV}: {e}"))
            }
            _ => Ok(Resolver::System),
        }
    }

    /// Parse `name=ADDR[:PORT][,name=ADDR[:PORT]...]` into a [`Resolver::Table`].
    pub fn parse_table(spec: &str) -> Result<Resolver, String> {
        let mut map: HashMap<String, Vec<(IpAddr, Option<u16>)>> = HashMap::new();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, addr) = item
                .split_once('=')
                .ok_or_else(|| format!("`{item}`: expected NAME=ADDRESS"))?;
            let name = super::allowlist::normalize_name(name.trim())
                .map_err(|e| format!("`{item}`: {e}"))?;
            let addr = addr.trim();
            if let Ok(sa) = addr.parse::<SocketAddr>() {
                map.entry(name)
                    .or_default()
                    .push((sa.ip(), Some(sa.port())));
                continue;
            }
            let addr = addr
                .strip_prefix('[')
                .and_then(|a| a.strip_suffix(']'))
                .unwrap_or(addr);
            let ip: IpAddr = addr
                .parse()
                .map_err(|_| format!("`{item}`: `{addr}` is not an IP address"))?;
            map.entry(name).or_default().push((ip, None));
        }
        Ok(Resolver::Table(map))
    }

    /// Resolve `name` (already normalized) for `port`. The order of the answer is the
    /// resolver's; the proxy checks every address before using any.
    pub async fn resolve(&self, name: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        match self {
            Resolver::System => Ok(tokio::net::lookup_host((name, port)).await?.collect()),
            Resolver::Table(map) => match map.get(name) {
                Some(ips) => Ok(ips
                    .iter()
                    .map(|(ip, p)| SocketAddr::new(*ip, p.unwrap_or(port)))
                    .collect()),
                None => Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("`{name}` is not in the test resolver table ({TEST_RESOLVE_ENV})"),
                )),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn table_resolves_only_its_names() {
        let r = Resolver::parse_table("a.test=127.0.0.1, A.Test.=[::1],b.test=10.0.0.1").unwrap();
        let got = r.resolve("a.test", 80).await.unwrap();
        assert_eq!(
            got,
            vec![
                "127.0.0.1:80".parse::<SocketAddr>().unwrap(),
                "[::1]:80".parse().unwrap()
            ]
        );
        assert!(r.resolve("example.com", 80).await.is_err());
        let r = Resolver::parse_table("a.test=127.0.0.1:8443,b.test=[::1]:9").unwrap();
        assert_eq!(
            r.resolve("a.test", 443).await.unwrap(),
            vec!["127.0.0.1:8443".parse::<SocketAddr>().unwrap()]
        );
        assert_eq!(
            r.resolve("b.test", 443).await.unwrap(),
            vec!["[::1]:9".parse::<SocketAddr>().unwrap()]
        );
    }

    #[test]
    fn bad_tables() {
        assert!(Resolver::parse_table("a.test").is_err());
        assert!(Resolver::parse_table("a.test=nope").is_err());
        assert!(Resolver::parse_table("bad name=127.0.0.1").is_err());
    }
}

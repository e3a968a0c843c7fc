//! Network modes: choosing a capsule's network for one exec ([`plan`]), the allowlist proxy
//! on the host side ([`proxy`], [`host`]), the relay inside the sandbox ([`relay`]) that
//! hands each client socket to it ([`handoff`]), the connections of programs that ignore
//! the proxy ([`direct`], [`dns`], [`fakeip`], [`sni`]), what the sandbox trusts
//! ([`trust`], [`pkcs12`]) and the settings tools read ([`tools`]), the refusal log
//! ([`refusal`]) and who made a refused connection ([`owner`]);
//! [`listen`]: loopback listeners whose queue holds a burst of clients.
//!
//! | mode | how | the task sees |
//! |---|---|---|
//! | `none` (default) | own network namespace, loopback up | only its own loopback |
//! | off (`--no-network`) | own network namespace, loopback left down | no TCP/IP at all, not even loopback |
//! | allowlist (`network: live` + allow list, `--allow-host`) | own namespace + relay on [`RELAY_ADDR`] handing each connection to the host proxy; a name server inside and its direct connects sent to the proxy too ([`direct`]) | the allow-listed hosts, through `HTTP(S)_PROXY` or not |
//! | open (`--open-network`, `network: live` without a list) | the host's network namespace | everything (said on stderr, recorded) |
//! | replay | refused until a deployment supplies a replay network | — |

pub mod addr;
pub mod allowlist;
pub mod direct;
pub mod dns;
#[cfg(target_os = "linux")]
pub mod exec;
pub mod fakeip;
#[cfg(target_os = "linux")]
pub mod handoff;
pub mod host;
pub mod http;
pub mod intercept;
pub mod listen;
#[cfg(target_os = "linux")]
pub mod owner;
pub mod pkcs12;
pub mod proxy;
#[cfg(target_os = "linux")]
pub mod publish;
pub mod refusal;
#[cfg(target_os = "linux")]
pub mod relay;
pub mod resolve;
pub mod responses;
pub mod scrub;
pub mod secrets;
pub mod sni;
pub mod socks;
#[cfg(target_os = "linux")]
pub mod splice;
pub mod tls;
pub mod tools;
pub mod trust;

#[cfg(test)]
mod allowlist_props;
#[cfg(test)]
mod dns_props;
#[cfg(test)]
mod http_props;
#[cfg(test)]
mod proxy_tests;
#[cfg(test)]
mod sni_props;
#[cfg(test)]
mod socks_props;

use allowlist::Allowlist;
use capsule_bundle::policy::{NetworkMode, NetworkPolicy};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

/// Where the relay listens inside the sandbox's network namespace.
pub const RELAY_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 3128));

/// The network flags of one `capsule exec`.
#[derive(Debug, Clone, Default)]
pub struct NetFlags {
    /// `--no-network`
    pub no_network: bool,
    /// `--open-network`
    pub open_network: bool,
    /// `--allow-host HOST[:PORT]` (repeatable)
    pub allow_hosts: Vec<String>,
}

/// The network one exec gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetPlan {
    /// Own namespace, loopback up (`none`).
    Loopback,
    /// Own namespace, loopback down: no TCP/IP even on loopback (`--no-network`).
    Off,
    /// Own namespace; out only through the proxy, for these hosts.
    Allowlist(Allowlist),
    /// The host's network, unrestricted.
    Open,
}

impl NetPlan {
    /// The policy-model name of this plan (as recorded).
    pub fn mode(&self) -> NetworkMode {
        match self {
            NetPlan::Loopback => NetworkMode::None,
            NetPlan::Off => NetworkMode::Off,
            NetPlan::Allowlist(_) => NetworkMode::Allowlist,
            NetPlan::Open => NetworkMode::Open,
        }
    }
    /// Does the sandbox get a network namespace of its own?
    pub fn own_namespace(&self) -> bool {
        !matches!(self, NetPlan::Open)
    }
    /// Should loopback be brought up inside the namespace?
    pub fn loopback_up(&self) -> bool {
        matches!(self, NetPlan::Loopback | NetPlan::Allowlist(_))
    }
}

/// Why no network plan could be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("network mode `replay` needs a supervised replay network supplied by the deployment, and none is configured; refusing to run with a different network (run with --no-network or --allow-host HOST to choose another network explicitly)")]
    ReplayUnavailable,
    #[error("{0} cannot be combined with {1}")]
    Conflict(&'static str, &'static str),
    #[error(transparent)]
    Entry(#[from] allowlist::EntryError),
}

/// Choose the network of one exec: the exec's flags, else the capsule's policy.
/// `--allow-host` adds to the capsule's own allowlist (or starts one).
pub fn plan(policy: &NetworkPolicy, flags: &NetFlags) -> Result<NetPlan, PlanError> {
    let allow = !flags.allow_hosts.is_empty();
    if flags.no_network && flags.open_network {
        return Err(PlanError::Conflict("--no-network", "--open-network"));
    }
    if flags.no_network && allow {
        return Err(PlanError::Conflict("--no-network", "--allow-host"));
    }
    if flags.open_network && allow {
        return Err(PlanError::Conflict("--open-network", "--allow-host"));
    }
    if flags.no_network {
        return Ok(NetPlan::Off);
    }
    if flags.open_network {
        return Ok(NetPlan::Open);
    }
    if allow {
        let mut entries: Vec<&str> = Vec::new();
        if policy.mode == NetworkMode::Allowlist {
            entries.extend(policy.allow.iter().map(String::as_str));
        }
        entries.extend(flags.allow_hosts.iter().map(String::as_str));
        return Ok(NetPlan::Allowlist(Allowlist::parse(entries)?));
    }
    Ok(match policy.mode {
        NetworkMode::None => NetPlan::Loopback,
        NetworkMode::Off => NetPlan::Off,
        NetworkMode::Allowlist => NetPlan::Allowlist(Allowlist::parse(&policy.allow)?),
        NetworkMode::Open => NetPlan::Open,
        NetworkMode::Replay => return Err(PlanError::ReplayUnavailable),
    })
}

/// The environment a command gets in allowlist mode: `HTTP_PROXY` and `HTTPS_PROXY`
/// pointing at the relay as an HTTP proxy, `ALL_PROXY` at the same port as SOCKS5 with
/// names resolved by the proxy (`socks5h://`: the proxy answers both, see [`socks`]), and
/// `NO_PROXY` for the task's own loopback; each also in lowercase (curl reads `http_proxy`
/// only in lowercase; most tools read both).
pub fn proxy_env(relay: SocketAddr) -> Vec<(String, String)> {
    let url = format!("http://{relay}");
    let socks = format!("socks5h://{relay}");
    let no_proxy = "localhost,127.0.0.1,::1".to_string();
    let mut v = Vec::new();
    for (k, val) in [
        ("HTTP_PROXY", &url),
        ("HTTPS_PROXY", &url),
        ("ALL_PROXY", &socks),
        ("NO_PROXY", &no_proxy),
    ] {
        v.push((k.to_string(), val.clone()));
        v.push((k.to_ascii_lowercase(), val.clone()));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pol(mode: NetworkMode, allow: &[&str]) -> NetworkPolicy {
        NetworkPolicy {
            mode,
            allow: allow.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn plans() {
        let none = NetFlags::default();
        assert_eq!(
            plan(&pol(NetworkMode::None, &[]), &none),
            Ok(NetPlan::Loopback)
        );
        assert_eq!(plan(&pol(NetworkMode::Open, &[]), &none), Ok(NetPlan::Open));
        assert_eq!(
            plan(&pol(NetworkMode::Replay, &[]), &none),
            Err(PlanError::ReplayUnavailable)
        );
        let off = NetFlags {
            no_network: true,
            ..Default::default()
        };
        assert_eq!(plan(&pol(NetworkMode::Open, &[]), &off), Ok(NetPlan::Off));
        assert_eq!(plan(&pol(NetworkMode::Replay, &[]), &off), Ok(NetPlan::Off));
        let add = NetFlags {
            allow_hosts: vec!["b.test:443".into()],
            ..Default::default()
        };
        let Ok(NetPlan::Allowlist(l)) = plan(&pol(NetworkMode::Allowlist, &["a.test"]), &add)
        else {
            panic!()
        };
        assert_eq!(l.entries().len(), 2);
        let Ok(NetPlan::Allowlist(l)) = plan(&pol(NetworkMode::None, &["ignored"]), &add) else {
            panic!()
        };
        assert_eq!(l.entries().len(), 1);
        let bad = NetFlags {
            allow_hosts: vec!["http://x".into()],
            ..Default::default()
        };
        assert!(matches!(
            plan(&pol(NetworkMode::None, &[]), &bad),
            Err(PlanError::Entry(_))
        ));
        let both = NetFlags {
            no_network: true,
            open_network: true,
            ..Default::default()
        };
        assert!(matches!(
            plan(&pol(NetworkMode::None, &[]), &both),
            Err(PlanError::Conflict(..))
        ));
    }

    #[test]
    fn env_names_the_relay() {
        let env = proxy_env(RELAY_ADDR);
        assert!(env.contains(&("https_proxy".into(), "http://127.0.0.1:3128".into())));
        assert!(env.contains(&("ALL_PROXY".into(), "socks5h://127.0.0.1:3128".into())));
        assert!(env.contains(&("NO_PROXY".into(), "localhost,127.0.0.1,::1".into())));
        assert_eq!(env.len(), 8);
    }
}

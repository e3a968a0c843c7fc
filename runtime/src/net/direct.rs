//! Connections the command makes directly, ignoring the proxy variables (Node's `fetch`
//! before Node 24, Java's `HttpClient`, a Go transport with `Proxy: nil`, anything that
//! dials an address itself), in allowlist mode: they reach the proxy all the same, and
//! are allowed or refused by host.
//!
//! 1. Names resolve inside: the sandbox's name server ([`super::dns`]) gives each name a
//!    synthetic address ([`super::fakeip`]).
//! 2. The command's `connect` to an address off loopback is seen by the seccomp supervisor,
//!    which asks [`Direct`] (the exec's [`Connects`]): a synthetic address stands for its
//!    name, refused at once (`ECONNREFUSED`, and the refusal listed with the program and
//!    the grant) when the allowlist does not name it; anything else is sent to the relay:
//!    the supervisor connects the task's own socket there ([`crate::linux::redirect`]),
//!    having told [`Direct`] where it was meant to go ([`Connects::redirecting`]).
//! 3. The proxy, handed the connection by the relay, finds it here by the task's address
//!    ([`Direct::take`]) and serves it as a direct connection (`Proxy::handle_direct`): the
//!    host is the name of the synthetic address, checked against the TLS server name or
//!    the HTTP `Host` the client sends; for an address the command chose itself, the
//!    server name or `Host` is the host (and the proxy connects to what that name
//!    resolves to, never to the address the command chose), unless the allowlist names
//!    that literal address. Then the same checks, secrets and tunnels as a `CONNECT`.

use super::allowlist::{Allowlist, Host};
use super::fakeip::FakeIps;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

/// Connections announced and not yet taken by the proxy, at most (the oldest are dropped:
/// a connect that never reached the relay leaves one behind).
const MAX_PENDING: usize = 4096;

/// Where a direct connection was meant to go, and who made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirected {
    /// The address the command connected to.
    pub dst: SocketAddr,
    /// The name that address stands for (a synthetic address), if it does.
    pub name: Option<String>,
    /// The program (its `comm`) and its pid in the sandbox.
    pub program: String,
    pub pid: Option<i32>,
}

/// The direct connections of one exec (allowlist mode).
#[derive(Debug)]
pub struct Direct {
    names: Arc<FakeIps>,
    allowlist: Allowlist,
    relay: SocketAddr,
    pending: Mutex<VecDeque<(SocketAddr, Redirected)>>,
}

impl Direct {
    /// The direct connections of an exec allowing `allowlist`, sent to the relay at
    /// `relay` (inside).
    pub fn new(names: Arc<FakeIps>, allowlist: Allowlist, relay: SocketAddr) -> Direct {
        Direct {
            names,
            allowlist,
            relay,
            pending: Mutex::default(),
        }
    }

    /// The names and their synthetic addresses (what the name server answers).
    pub fn names(&self) -> &Arc<FakeIps> {
        &self.names
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(SocketAddr, Redirected)>> {
        match self.pending.lock() {
            Ok(p) => p,
            Err(p) => p.into_inner(),
        }
    }

    /// The connection from `peer` (the task's end, inside), if the supervisor sent it here.
    pub fn take(&self, peer: SocketAddr) -> Option<Redirected> {
        let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        let mut p = self.lock();
        let i = p.iter().position(|(a, _)| *a == peer)?;
        p.remove(i).map(|(_, r)| r)
    }

    /// The host a connection to `dst` names before any byte: the name of a synthetic
    /// address, or the address itself.
    pub fn host_of(&self, dst: SocketAddr) -> Host {
        let ip = dst.ip().to_canonical();
        match ip {
            IpAddr::V4(v4) => self.names.name(v4).map(Host::Name),
            IpAddr::V6(_) => None,
        }
        .unwrap_or(Host::Ip(ip))
    }

    /// Why a connect to `dst` is refused before anything is sent, if it is: a synthetic
    /// address whose name the allowlist does not name (on that port), or one that names
    /// nothing (any more).
    pub fn refusal(&self, dst: SocketAddr) -> Option<(Host, String)> {
        let port = dst.port();
        let host = self.host_of(dst);
        match &host {
            Host::Name(_) if !self.allowlist.allows(&host, port) => {
                let reason = if self.allowlist.names_host(&host) {
                    format!("port {port} is not allowed for {host} by the allowlist")
                } else {
                    "not on the allowlist".to_string()
                };
                Some((host, reason))
            }
            Host::Ip(IpAddr::V4(v4)) if super::fakeip::in_range(*v4) => Some((
                host,
                "an address of the sandbox's name server that names nothing (any more)".to_string(),
            )),
            _ => None,
        }
    }
}

#[cfg(target_os = "linux")]
impl crate::linux::Connects for Direct {
    fn route(&self, dst: SocketAddr) -> crate::linux::Route {
        use crate::linux::Route;
        match self.refusal(dst) {
            Some((host, reason)) => {
                let target = super::refusal::target(&host.to_string(), dst.port());
                let grant =
                    matches!(host, Host::Name(_)).then(|| crate::refusals::connect_grant(&target));
                Route::Refuse {
                    errno: libc::ECONNREFUSED,
                    event: crate::refusals::Event {
                        kind: crate::refusals::Kind::Connect,
                        target,
                        program: String::new(),
                        pid: None,
                        grant,
                        reason: Some(reason),
                        header: None,
                    },
                }
            }
            None => Route::To(self.relay),
        }
    }

    fn redirecting(&self, local: SocketAddr, dst: SocketAddr, program: &str, pid: Option<i32>) {
        let name = match self.host_of(dst) {
            Host::Name(n) => Some(n),
            Host::Ip(_) => None,
        };
        let local = SocketAddr::new(local.ip().to_canonical(), local.port());
        let mut p = self.lock();
        // a port given again: the older connection is gone
        p.retain(|(a, _)| *a != local);
        if p.len() >= MAX_PENDING {
            p.pop_front();
        }
        p.push_back((
            local,
            Redirected {
                dst,
                name,
                program: program.to_string(),
                pid,
            },
        ));
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::linux::{Connects, Route};

    fn direct() -> Direct {
        let allow = Allowlist::parse(["api.test:443", "any.test", "192.0.2.7:22"]).unwrap();
        Direct::new(
            Arc::new(FakeIps::new()),
            allow,
            "127.0.0.1:3128".parse().unwrap(),
        )
    }

    #[test]
    fn routes_by_the_name_of_a_synthetic_address() {
        let d = direct();
        let api = d.names().address("api.test");
        let evil = d.names().address("evil.test");
        let any = d.names().address("any.test");
        let relay: SocketAddr = "127.0.0.1:3128".parse().unwrap();
        let to = |ip: std::net::Ipv4Addr, port: u16| d.route(SocketAddr::new(ip.into(), port));
        assert!(matches!(to(api, 443), Route::To(a) if a == relay));
        assert!(matches!(to(any, 8080), Route::To(_)));
        let Route::Refuse { errno, event } = to(evil, 443) else {
            panic!()
        };
        assert_eq!(errno, libc::ECONNREFUSED);
        assert_eq!(event.target, "evil.test:443");
        assert_eq!(event.grant.as_deref(), Some("--allow-host evil.test:443"));
        assert_eq!(event.reason.as_deref(), Some("not on the allowlist"));
        let Route::Refuse { event, .. } = to(api, 80) else {
            panic!()
        };
        assert_eq!(
            event.reason.as_deref(),
            Some("port 80 is not allowed for api.test by the allowlist")
        );
        // a synthetic address that names nothing
        assert!(matches!(
            to(std::net::Ipv4Addr::new(198, 18, 7, 7), 443),
            Route::Refuse { .. }
        ));
        // an address the command chose: the proxy decides by what the client sends
        assert!(matches!(
            to(std::net::Ipv4Addr::new(93, 184, 216, 34), 443),
            Route::To(_)
        ));
    }

    #[test]
    fn the_proxy_finds_what_the_supervisor_announced_once() {
        let d = direct();
        let api = d.names().address("api.test");
        let local: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let dst = SocketAddr::new(api.into(), 443);
        d.redirecting(local, dst, "node", Some(7));
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:40000".parse().unwrap();
        let r = d.take(mapped).unwrap();
        assert_eq!(r.name.as_deref(), Some("api.test"));
        assert_eq!((r.program.as_str(), r.pid, r.dst), ("node", Some(7), dst));
        assert_eq!(d.take(local), None);
        // bounded
        for p in 0..(MAX_PENDING as u16 + 10) {
            d.redirecting(SocketAddr::new(local.ip(), p), dst, "x", None);
        }
        assert_eq!(d.lock().len(), MAX_PENDING);
        assert!(d.take(SocketAddr::new(local.ip(), 0)).is_none());
        assert!(d
            .take(SocketAddr::new(local.ip(), MAX_PENDING as u16 + 9))
            .is_some());
    }
}

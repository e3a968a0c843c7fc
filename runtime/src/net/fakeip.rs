//! Synthetic addresses for names (fake IP): the name server inside the sandbox
//! ([`super::dns`]) answers every name with an address of its own from [`RANGE`], and the
//! proxy, handed a connection to that address, knows which name the command dialled
//! ([`super::direct`]). The sandbox's network namespace has loopback only, so these
//! addresses lead nowhere by themselves: they are names in disguise.
//!
//! The range is `198.18.0.0/15`, set aside for benchmarks (RFC 2544) and never routed on
//! the internet; the first and last addresses are skipped. Each name gets one address for
//! the exec's life; when all are taken (131,070 names), the oldest is given again, so the
//! table stays bounded (a command that asks that many names can at worst confuse its own
//! oldest connections, which the proxy still checks by name).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Mutex;

/// The synthetic addresses: `198.18.0.0/15`.
pub const RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 0, 0), 15);

const FIRST: u32 = u32::from_be_bytes([198, 18, 0, 1]);
const COUNT: u32 = (1 << (32 - RANGE.1)) - 2;

/// Is `ip` in [`RANGE`]?
pub fn in_range(ip: Ipv4Addr) -> bool {
    u32::from(ip) >> (32 - RANGE.1) == u32::from(RANGE.0) >> (32 - RANGE.1)
}

/// The names of one exec and their addresses.
#[derive(Debug, Default)]
pub struct FakeIps {
    inner: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    by_name: HashMap<String, u32>,
    /// Offset from [`FIRST`] -> name.
    by_index: HashMap<u32, String>,
    next: u32,
}

impl FakeIps {
    pub fn new() -> FakeIps {
        FakeIps::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        match self.inner.lock() {
            Ok(t) => t,
            Err(p) => p.into_inner(),
        }
    }

    /// The address of `name` (a normalized name: lowercase, no trailing dot), given now if
    /// it has none yet.
    pub fn address(&self, name: &str) -> Ipv4Addr {
        self.address_within(name, COUNT)
    }

    fn address_within(&self, name: &str, count: u32) -> Ipv4Addr {
        let mut t = self.lock();
        if let Some(&i) = t.by_name.get(name) {
            return Ipv4Addr::from(FIRST + i);
        }
        let i = t.next;
        t.next = (t.next + 1) % count;
        if let Some(old) = t.by_index.insert(i, name.to_string()) {
            t.by_name.remove(&old);
        }
        t.by_name.insert(name.to_string(), i);
        Ipv4Addr::from(FIRST + i)
    }

    /// The name `ip` stands for, if it is one of ours.
    pub fn name(&self, ip: Ipv4Addr) -> Option<String> {
        if !in_range(ip) {
            return None;
        }
        let i = u32::from(ip).checked_sub(FIRST)?;
        self.lock().by_index.get(&i).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_per_name_and_back() {
        let f = FakeIps::new();
        let a = f.address("api.test");
        let b = f.address("pkgs.test");
        assert_ne!(a, b);
        assert_eq!(f.address("api.test"), a);
        assert_eq!(a, Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(f.name(a).as_deref(), Some("api.test"));
        assert_eq!(f.name(b).as_deref(), Some("pkgs.test"));
        assert_eq!(f.name(Ipv4Addr::new(198, 18, 9, 9)), None);
        assert_eq!(f.name(Ipv4Addr::new(93, 184, 216, 34)), None);
        assert!(in_range(Ipv4Addr::new(198, 19, 255, 254)));
        assert!(!in_range(Ipv4Addr::new(198, 20, 0, 0)));
        assert!(!in_range(Ipv4Addr::new(198, 17, 255, 255)));
    }

    #[test]
    fn the_oldest_is_given_again_when_all_are_taken() {
        let f = FakeIps::new();
        let a = f.address_within("a.test", 2);
        let b = f.address_within("b.test", 2);
        let c = f.address_within("c.test", 2);
        assert_eq!(c, a);
        assert_eq!(f.name(a).as_deref(), Some("c.test"));
        assert_eq!(f.name(b).as_deref(), Some("b.test"));
        // a.test lost its address: it gets a new one
        let a2 = f.address_within("a.test", 2);
        assert_eq!(a2, b);
        assert_eq!(f.name(b).as_deref(), Some("a.test"));
    }
}

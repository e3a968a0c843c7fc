//! Which destination addresses the proxy refuses unless the allowlist names them literally:
//! loopback, link-local, private (RFC 1918, ULA), CGNAT, multicast, unspecified, broadcast,
//! reserved and documentation ranges, cloud metadata endpoints, the same in IPv4-mapped,
//! IPv4-compatible, NAT64 and 6to4 IPv6 forms, and the host's own addresses.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why an address is not a public destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Unspecified,
    Loopback,
    Private,
    SharedCgnat,
    LinkLocal,
    CloudMetadata,
    Multicast,
    Broadcast,
    Reserved,
    Documentation,
    HostOwn,
}

impl Class {
    pub fn describe(self) -> &'static str {
        match self {
            Class::Unspecified => "an unspecified address",
            Class::Loopback => "a loopback address",
            Class::Private => "a private-network address",
            Class::SharedCgnat => "a carrier-grade NAT (shared) address",
            Class::LinkLocal => "a link-local address",
            Class::CloudMetadata => "a cloud metadata endpoint",
            Class::Multicast => "a multicast address",
            Class::Broadcast => "the broadcast address",
            Class::Reserved => "a reserved address",
            Class::Documentation => "a documentation/benchmark address",
            Class::HostOwn => "one of this host's own addresses",
        }
    }
}

/// The special class of an IPv4 address, or `None` for an ordinary public address.
pub fn classify_v4(a: Ipv4Addr) -> Option<Class> {
    let o = a.octets();
    let c = match o {
        [169, 254, 169, 254] => Class::CloudMetadata,
        [100, 100, 100, 200] => Class::CloudMetadata, // Alibaba Cloud
        [0, ..] => Class::Unspecified,                // 0.0.0.0/8 "this network"
        [127, ..] => Class::Loopback,
        [10, ..] => Class::Private,
        [172, b, ..] if (16..32).contains(&b) => Class::Private,
        [192, 168, ..] => Class::Private,
        [100, b, ..] if (64..128).contains(&b) => Class::SharedCgnat,
        [169, 254, ..] => Class::LinkLocal,
        [192, 0, 0, _] => Class::Reserved, // IETF protocol assignments
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => Class::Documentation,
        [198, b, ..] if b == 18 || b == 19 => Class::Documentation, // benchmarking
        [192, 88, 99, _] => Class::Reserved,                        // 6to4 relay anycast
        [255, 255, 255, 255] => Class::Broadcast,
        [b, ..] if (224..240).contains(&b) => Class::Multicast,
        [b, ..] if b >= 240 => Class::Reserved,
        _ => return None,
    };
    Some(c)
}

/// The special class of an IPv6 address (looking through embedded IPv4 forms), or `None`.
pub fn classify_v6(a: Ipv6Addr) -> Option<Class> {
    if a == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        return Some(Class::CloudMetadata); // AWS IMDS over IPv6
    }
    if a.is_unspecified() {
        return Some(Class::Unspecified);
    }
    if a.is_loopback() {
        return Some(Class::Loopback);
    }
    let s = a.segments();
    // IPv4-mapped ::ffff:a.b.c.d and IPv4-compatible ::a.b.c.d
    if let Some(v4) = a.to_ipv4() {
        return Some(classify_v4(v4).unwrap_or(Class::Reserved));
    }
    // NAT64 well-known prefix 64:ff9b::/96 and local-use 64:ff9b:1::/48
    if s[0] == 0x64 && s[1] == 0xff9b {
        let v4 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
        if s[2..6] == [0, 0, 0, 0] {
            return classify_v4(v4);
        }
        if s[2] == 1 {
            return Some(Class::Private);
        }
    }
    // 6to4 2002:V4ADDR::/48
    if s[0] == 0x2002 {
        let v4 = Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
        if let Some(c) = classify_v4(v4) {
            return Some(c);
        }
    }
    let c = match s[0] {
        x if x & 0xfe00 == 0xfc00 => Class::Private, // fc00::/7 ULA
        x if x & 0xffc0 == 0xfe80 => Class::LinkLocal, // fe80::/10
        x if x & 0xffc0 == 0xfec0 => Class::Private, // fec0::/10 site-local (deprecated)
        x if x & 0xff00 == 0xff00 => Class::Multicast,
        0x2001 if s[1] == 0x0db8 => Class::Documentation,
        0x3fff if s[1] < 0x1000 => Class::Documentation, // 3fff::/20
        0x0100 if s[1..4] == [0, 0, 0] => Class::Reserved, // discard-only 100::/64
        0x2001 if s[1] < 0x0200 => Class::Reserved, // 2001::/23 IETF protocol assignments (Teredo, ...)
        _ => return None,
    };
    Some(c)
}

/// The special class of `ip`, or `None` for an ordinary public address.
pub fn classify(ip: IpAddr) -> Option<Class> {
    match ip {
        IpAddr::V4(a) => classify_v4(a),
        IpAddr::V6(a) => classify_v6(a),
    }
}

/// The host's own interface addresses (`getifaddrs`), cached for a few seconds.
pub struct HostAddrs {
    cache: Mutex<Option<(Instant, HashSet<IpAddr>)>>,
    ttl: Duration,
}

impl Default for HostAddrs {
    fn default() -> Self {
        Self::new(Duration::from_secs(5))
    }
}

impl HostAddrs {
    pub fn new(ttl: Duration) -> Self {
        Self {
            cache: Mutex::new(None),
            ttl,
        }
    }

    /// Is `ip` one of this host's own addresses? When the interface list cannot be read
    /// the last list read is used (with a warning); the class checks of [`classify`]
    /// still refuse loopback and private addresses regardless.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        let mut guard = match self.cache.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let fresh = guard.as_ref().is_some_and(|(t, _)| t.elapsed() < self.ttl);
        if !fresh {
            match interface_addrs() {
                Ok(set) => *guard = Some((Instant::now(), set)),
                Err(e) => tracing::warn!("cannot list this host's addresses: {e}"),
            }
        }
        guard.as_ref().is_some_and(|(_, set)| set.contains(&ip))
    }
}

/// Every address configured on this host's interfaces (in the caller's network namespace).
pub fn interface_addrs() -> std::io::Result<HashSet<IpAddr>> {
    let mut out = HashSet::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says which struct it is.
            let fam = unsafe { (*ifa.ifa_addr).sa_family } as i32;
            if fam == libc::AF_INET {
                // SAFETY: family AF_INET means a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.insert(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))));
            } else if fam == libc::AF_INET6 {
                // SAFETY: family AF_INET6 means a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                out.insert(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)).to_canonical());
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed exactly once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Option<Class> {
        classify(s.parse().unwrap())
    }

    #[test]
    fn special_v4() {
        assert_eq!(c("127.0.0.1"), Some(Class::Loopback));
        assert_eq!(c("127.255.0.9"), Some(Class::Loopback));
        assert_eq!(c("10.1.2.3"), Some(Class::Private));
        assert_eq!(c("172.16.0.1"), Some(Class::Private));
        assert_eq!(c("172.31.255.255"), Some(Class::Private));
        assert_eq!(c("172.32.0.1"), None);
        assert_eq!(c("192.168.1.1"), Some(Class::Private));
        assert_eq!(c("100.64.0.1"), Some(Class::SharedCgnat));
        assert_eq!(c("100.127.255.255"), Some(Class::SharedCgnat));
        assert_eq!(c("100.128.0.1"), None);
        assert_eq!(c("169.254.169.254"), Some(Class::CloudMetadata));
        assert_eq!(c("169.254.1.1"), Some(Class::LinkLocal));
        assert_eq!(c("0.0.0.0"), Some(Class::Unspecified));
        assert_eq!(c("0.1.2.3"), Some(Class::Unspecified));
        assert_eq!(c("224.0.0.1"), Some(Class::Multicast));
        assert_eq!(c("239.255.255.250"), Some(Class::Multicast));
        assert_eq!(c("255.255.255.255"), Some(Class::Broadcast));
        assert_eq!(c("240.0.0.1"), Some(Class::Reserved));
        assert_eq!(c("192.0.2.1"), Some(Class::Documentation));
        assert_eq!(c("8.8.8.8"), None);
        assert_eq!(c("1.1.1.1"), None);
        assert_eq!(c("93.184.216.34"), None);
    }

    #[test]
    fn special_v6_and_embedded_v4() {
        assert_eq!(c("::1"), Some(Class::Loopback));
        assert_eq!(c("::"), Some(Class::Unspecified));
        assert_eq!(c("fe80::1"), Some(Class::LinkLocal));
        assert_eq!(c("febf::1"), Some(Class::LinkLocal));
        assert_eq!(c("fc00::1"), Some(Class::Private));
        assert_eq!(c("fdff::1"), Some(Class::Private));
        assert_eq!(c("fd00:ec2::254"), Some(Class::CloudMetadata));
        assert_eq!(c("ff02::1"), Some(Class::Multicast));
        assert_eq!(c("2001:db8::1"), Some(Class::Documentation));
        // IPv4-mapped and -compatible forms of special IPv4 addresses
        assert_eq!(c("::ffff:127.0.0.1"), Some(Class::Loopback));
        assert_eq!(c("::ffff:169.254.169.254"), Some(Class::CloudMetadata));
        assert_eq!(c("::ffff:10.0.0.1"), Some(Class::Private));
        assert_eq!(c("::127.0.0.1"), Some(Class::Loopback));
        assert_eq!(c("::8.8.8.8"), Some(Class::Reserved)); // deprecated compatible form
        assert_eq!(c("::ffff:8.8.8.8"), Some(Class::Reserved));
        // NAT64 and 6to4 embeddings
        assert_eq!(c("64:ff9b::7f00:1"), Some(Class::Loopback));
        assert_eq!(c("64:ff9b::a9fe:a9fe"), Some(Class::CloudMetadata));
        assert_eq!(c("64:ff9b::808:808"), None);
        assert_eq!(c("2002:7f00:1::1"), Some(Class::Loopback));
        assert_eq!(c("2002:c0a8:101::1"), Some(Class::Private));
        assert_eq!(c("2606:4700::1111"), None);
        assert_eq!(c("2a00:1450:4001::1"), None);
    }

    #[test]
    fn host_addresses_include_loopback() {
        let set = interface_addrs().unwrap();
        assert!(set.contains(&"127.0.0.1".parse().unwrap()), "{set:?}");
        let h = HostAddrs::default();
        assert!(h.contains("127.0.0.1".parse().unwrap()));
        assert!(!h.contains("192.0.2.77".parse().unwrap()));
    }
}

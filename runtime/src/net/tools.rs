//! The settings tools that ignore `HTTP(S)_PROXY` read their proxy from, set in allowlist
//! mode only (what the capsule allows): Node's built-in `fetch` and `https` module take the
//! proxy variables only with `NODE_USE_ENV_PROXY=1` (Node 22.21 and 24 on; older Nodes
//! ignore it, and reach allowed hosts through the redirection of direct connections), and
//! the JDK reads its proxy and trust store from system properties, given to every JVM by
//! `JAVA_TOOL_OPTIONS`. The variables naming the trust file are [`super::trust::TRUST_ENV`].

use std::net::SocketAddr;
use std::path::Path;

/// The variables of this module: `NODE_USE_ENV_PROXY` and `JAVA_TOOL_OPTIONS` for the proxy
/// at `relay`, with `java_trust` (inside) as the JDK's trust store when the proxy
/// terminates TLS. `java_before`: a `JAVA_TOOL_OPTIONS` the command already has, kept after
/// ours (a later `-D` wins: the command's own settings stay its own).
pub fn env(
    relay: SocketAddr,
    java_trust: Option<&Path>,
    java_before: Option<&str>,
) -> Vec<(String, String)> {
    let mut java = java_options(relay, java_trust);
    if let Some(b) = java_before.filter(|b| !b.trim().is_empty()) {
        java.push(' ');
        java.push_str(b);
    }
    vec![
        ("NODE_USE_ENV_PROXY".to_string(), "1".to_string()),
        ("JAVA_TOOL_OPTIONS".to_string(), java),
    ]
}

/// The JDK's proxy (`http.proxyHost`... for plain HTTP and `CONNECT`, the sandbox's own
/// loopback direct) and trust store.
fn java_options(relay: SocketAddr, trust: Option<&Path>) -> String {
    let (h, p) = (relay.ip(), relay.port());
    let mut s = format!(
        "-Dhttp.proxyHost={h} -Dhttp.proxyPort={p} -Dhttps.proxyHost={h} -Dhttps.proxyPort={p} -Dhttp.nonProxyHosts=localhost|127.*|[::1]"
    );
    if let Some(t) = trust {
        s.push_str(&format!(
            " -Djavax.net.ssl.trustStore={} -Djavax.net.ssl.trustStoreType=PKCS12",
            t.display()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_and_node_settings() {
        let relay: SocketAddr = "127.0.0.1:3128".parse().unwrap();
        let e = env(relay, None, None);
        assert_eq!(e[0], ("NODE_USE_ENV_PROXY".into(), "1".into()));
        assert_eq!(
            e[1].1,
            "-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=3128 -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=3128 -Dhttp.nonProxyHosts=localhost|127.*|[::1]"
        );
        let e = env(
            relay,
            Some(Path::new("/etc/ssl/certs/java/cacerts")),
            Some("-Xmx1g"),
        );
        assert!(e[1].1.ends_with(
            " -Djavax.net.ssl.trustStore=/etc/ssl/certs/java/cacerts -Djavax.net.ssl.trustStoreType=PKCS12 -Xmx1g"
        ));
    }
}

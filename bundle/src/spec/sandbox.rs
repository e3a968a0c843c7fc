//! The spec's `sandbox:` block ([`SandboxSpec`]): the paths, variables, devices, network
//! allowlist, limits, secrets and published ports a spec asks for, as written, and their
//! lexical checks (what they mean on a host is decided elsewhere).

use super::check_relative;
use serde::Deserialize;

/// Our `sandbox:` block, unresolved (paths as written).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SandboxSpec {
    /// Extra writable paths: relative ones inside the workspace, absolute or `~/` on the host.
    #[serde(default)]
    pub writable: Vec<String>,
    /// Extra hidden paths (same forms).
    #[serde(default)]
    pub hidden: Vec<String>,
    /// Read-only carve-outs inside hidden paths (absolute or `~/`).
    #[serde(default)]
    pub reveal: Vec<String>,
    /// Names of host environment variables to pass through.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// Extra devices by name (the runtime decides what a name means).
    #[serde(default)]
    pub devices: Vec<String>,
    #[serde(default)]
    pub network: SandboxNetwork,
    /// Resource limits of every exec (`memory`, `pids`, `cpus`, `fds`, `file_size`,
    /// `tmp_size`, `activity_timeout`): not grants; they only ever lower the operator's
    /// own defaults (see [`crate::policy::limits`]).
    #[serde(
        default,
        skip_serializing_if = "crate::policy::limits::LimitValues::is_empty"
    )]
    pub limits: crate::policy::limits::LimitValues,
    /// Secrets kept outside the sandbox: variable name -> the hosts (allowlist entries)
    /// its value goes to. Needs `network: live`; each is a grant.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub secrets: std::collections::BTreeMap<String, Vec<String>>,
    /// Ports of the sandbox's loopback published on the host's loopback while an exec
    /// runs (`[HOST_PORT:]PORT`); each is a grant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub publish: Vec<String>,
}

/// `sandbox.network`.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SandboxNetwork {
    /// Allowlist entries: `host`, `*.suffix`, a literal IP, each with an optional `:port`.
    #[serde(default)]
    pub allow: Vec<String>,
}

/// Check a parsed `sandbox:` block (names, forms and bounds; not the host).
pub(super) fn check_sandbox(s: &SandboxSpec) -> std::result::Result<(), String> {
    s.limits.check()?;
    for (i, p) in s.publish.iter().enumerate() {
        let port = |x: &str| {
            !x.is_empty()
                && x.len() <= 5
                && x.bytes().all(|b| b.is_ascii_digit())
                && x.parse::<u16>().is_ok()
        };
        let ok = match p.split_once(':') {
            Some((h, q)) => port(h) && port(q) && q != "0",
            None => port(p) && p != "0",
        };
        if !ok {
            return Err(format!("publish[{i}] {p:?}: want [HOST_PORT:]PORT"));
        }
    }
    for (n, hosts) in &s.secrets {
        let name_ok = !n.is_empty()
            && !n.as_bytes()[0].is_ascii_digit()
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !name_ok {
            return Err(format!(
                "secrets: {n:?} is not an environment variable name"
            ));
        }
        if hosts.is_empty() {
            return Err(format!("secrets.{n}: list the hosts its value goes to"));
        }
        if let Some(h) = hosts
            .iter()
            .find(|h| h.trim().is_empty() || h.contains('/') || h.contains(','))
        {
            return Err(format!(
                "secrets.{n}: {h:?} is not a host (HOST or HOST:PORT, no scheme or path)"
            ));
        }
    }
    for (what, list) in [("writable", &s.writable), ("hidden", &s.hidden)] {
        for (i, p) in list.iter().enumerate() {
            if !(p.starts_with('/') || p.starts_with("~/")) {
                check_relative(p).map_err(|m| format!("{what}[{i}] {p:?}: {m}"))?;
            } else if p.split('/').any(|c| c == "..") {
                return Err(format!("{what}[{i}] {p:?}: `..` is not allowed"));
            }
        }
    }
    for (i, p) in s.reveal.iter().enumerate() {
        if !(p.starts_with('/') || p.starts_with("~/")) || p.split('/').any(|c| c == "..") {
            return Err(format!(
                "reveal[{i}] {p:?}: must be an absolute or ~/ path without `..`"
            ));
        }
    }
    for (i, n) in s.pass_env.iter().enumerate() {
        let ok = !n.is_empty()
            && !n.as_bytes()[0].is_ascii_digit()
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(format!(
                "pass_env[{i}] {n:?} is not an environment variable name"
            ));
        }
    }
    for (i, d) in s.devices.iter().enumerate() {
        if d.is_empty()
            || !d
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_/".contains(&b))
            || d.contains("..")
        {
            return Err(format!("devices[{i}] {d:?} is not a device name"));
        }
    }
    for (i, a) in s.network.allow.iter().enumerate() {
        let ok = !a.is_empty()
            && !a.contains("://")
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.*:[]".contains(&b));
        if !ok {
            return Err(format!(
                "network.allow[{i}] {a:?} must be a host, *.suffix or IP with an optional :port"
            ));
        }
    }
    Ok(())
}

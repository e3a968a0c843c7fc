//! Grants: what a capsule's policy allows beyond the defaults, and the operator's
//! acceptance of them.
//!
//! A spec is written by someone else, so it cannot grant itself access: what its
//! `sandbox:` block or `network: live` asks beyond the defaults (a `reveal`, a
//! `pass_env` outside [`crate::policy::DEFAULT_ENV`], a `writable` path outside the
//! workspace, a device, an open network, an allowlisted network) is a [`Grant`], and
//! `open` refuses a spec with grants unless the operator accepts them ([`Acceptance`]).
//! Tightening (`hidden`, `network: none`) and writable paths inside the workspace are
//! not grants; neither is `network: replay` (it needs a replay network the deployment
//! supplies and never reaches the host's network by itself).
//!
//! Grants are computed from the resolved [`SandboxPolicy`] by [`of_policy`], the same
//! function at open and at every load ([`crate::store::load`]): a policy whose grants
//! are not all in the bundle's recorded acceptance ([`Accepted`]) is refused, so
//! editing `policy.json` (and its digest in `bundle.json`) does not add access. The
//! read-only carve-outs `open` adds by itself for tools (the workspace's `.git`, `PATH`
//! and SDK folders under a hidden path) are recorded separately in `bundle.json`
//! ([`crate::store::record::BundleRecord::tool_reveals`]) and are not grants.

use crate::policy::{is_default_env, NetworkMode, SandboxPolicy};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One access a policy gives beyond the defaults.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Grant {
    /// A read-only carve-out inside a hidden path (`sandbox.reveal`).
    Reveal(PathBuf),
    /// A writable host path outside the workspace (`sandbox.writable`).
    Writable(PathBuf),
    /// A host environment variable outside the default set (`sandbox.pass_env`).
    PassEnv(String),
    /// A device (`sandbox.devices`).
    Device(String),
    /// The host's network, unrestricted (`network: live` without an allowlist).
    NetworkOpen,
    /// One allowlisted destination (`network: live` with `sandbox.network.allow`).
    NetworkAllow(String),
    /// A secret (`sandbox.secrets`): `NAME -> host, host`; the value, taken from your
    /// environment at exec, goes to those hosts.
    Secret(String),
    /// A port of the sandbox published on the host's loopback (`sandbox.publish`).
    Publish(String),
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Grant::Reveal(p) => write!(f, "reveal {} (read-only)", escape_path(p)),
            Grant::Writable(p) => {
                write!(f, "writable {} (outside the workspace)", escape_path(p))
            }
            Grant::PassEnv(n) => write!(f, "pass_env {}", escape(n)),
            Grant::Device(d) => write!(f, "device {}", escape(d)),
            Grant::NetworkOpen => f.write_str("network open (the host's network, unrestricted)"),
            Grant::NetworkAllow(h) => write!(f, "network to {} (allowlist)", escape(h)),
            Grant::Publish(p) => write!(
                f,
                "publish {} (a server inside, on this computer's loopback)",
                escape(p)
            ),
            Grant::Secret(s) => write!(
                f,
                "secret {} (its value from your environment goes to those hosts)",
                escape(s)
            ),
        }
    }
}

/// The grants of `policy`, sorted and without duplicates. `tool_reveals` are the
/// carve-outs `open` added for tools; they are not grants.
pub fn of_policy(policy: &SandboxPolicy, tool_reveals: &[PathBuf]) -> Vec<Grant> {
    let mut v = Vec::new();
    for r in &policy.revealed {
        // the workspace is readable anyway (its `.git` is revealed for tools)
        if !tool_reveals.contains(r) && !inside(r, &policy.workspace) {
            v.push(Grant::Reveal(r.clone()));
        }
    }
    for w in &policy.writable {
        if !inside(w, &policy.workspace) {
            v.push(Grant::Writable(w.clone()));
        }
    }
    for n in &policy.pass_env {
        if !is_default_env(n) {
            v.push(Grant::PassEnv(n.clone()));
        }
    }
    for d in &policy.devices {
        v.push(Grant::Device(d.clone()));
    }
    match policy.network.mode {
        NetworkMode::Open => v.push(Grant::NetworkOpen),
        NetworkMode::Allowlist => {
            for a in &policy.network.allow {
                v.push(Grant::NetworkAllow(a.clone()));
            }
        }
        NetworkMode::None | NetworkMode::Off | NetworkMode::Replay => {}
    }
    for p in &policy.network.publish {
        v.push(Grant::Publish(p.clone()));
    }
    for (name, hosts) in &policy.network.secrets {
        v.push(Grant::Secret(format!("{name} -> {}", hosts.join(", "))));
    }
    v.sort();
    v.dedup();
    v
}

/// Lexically inside `dir` (both absolute and normalized, as the policy holds them).
fn inside(p: &Path, dir: &Path) -> bool {
    p.starts_with(dir)
        && !p
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// `sha256:<hex>` of a sorted grant list: what `--accept-grants=<digest>` names.
pub fn digest(grants: &[Grant]) -> String {
    use sha2::{Digest, Sha256};
    let json = serde_json::to_vec(grants).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(&json)))
}

/// The grants as one line, `, `-separated, spec-controlled text escaped.
pub fn list_line(grants: &[Grant]) -> String {
    grants
        .iter()
        .map(|g| g.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the operator said about a spec's grants on `open`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Acceptance {
    /// Nothing: a spec with grants is refused.
    #[default]
    None,
    /// `--accept-grants`: whatever the spec asks (after the operator reviewed the list).
    All,
    /// `--accept-grants=sha256:...`: exactly the grant list with this digest, so a spec
    /// changed after review does not slip a new grant through.
    Digest(String),
}

impl Acceptance {
    /// Parse the value of `--accept-grants` (`None`: the flag without a value).
    pub fn from_flag(value: Option<&str>) -> Result<Self, String> {
        match value {
            None | Some("") | Some("all") => Ok(Acceptance::All),
            Some(d) => {
                let hex = d.strip_prefix("sha256:").unwrap_or(d);
                if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    Ok(Acceptance::Digest(format!(
                        "sha256:{}",
                        hex.to_ascii_lowercase()
                    )))
                } else {
                    Err(format!(
                        "--accept-grants={}: give nothing (accept the listed grants) or the sha256:<64 hex> digest `capsule open` printed",
                        escape(d)
                    ))
                }
            }
        }
    }
}

/// The acceptance recorded in `bundle.json`: the exact grants accepted and their digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    /// The grants accepted, sorted (what the policy may give beyond the defaults).
    pub grants: Vec<Grant>,
    /// [`digest`] of `grants`.
    pub digest: String,
    /// How: `none` (there was nothing to accept), `all` (`--accept-grants`) or `digest`
    /// (`--accept-grants=<digest>`).
    pub by: String,
}

/// Why the grants of an open were not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Grants asked and the operator accepted none.
    NotAccepted { grants: Vec<Grant>, digest: String },
    /// The operator accepted a different list (the spec changed since it was reviewed).
    DigestMismatch {
        grants: Vec<Grant>,
        digest: String,
        accepted: String,
    },
}

/// Decide an open: the grants the policy gives, against what the operator accepted.
pub fn decide(grants: Vec<Grant>, acceptance: &Acceptance) -> Result<Accepted, Refusal> {
    let d = digest(&grants);
    if grants.is_empty() {
        return Ok(Accepted {
            grants,
            digest: d,
            by: "none".into(),
        });
    }
    match acceptance {
        Acceptance::None => Err(Refusal::NotAccepted { grants, digest: d }),
        Acceptance::All => Ok(Accepted {
            grants,
            digest: d,
            by: "all".into(),
        }),
        Acceptance::Digest(want) if *want == d => Ok(Accepted {
            grants,
            digest: d,
            by: "digest".into(),
        }),
        Acceptance::Digest(want) => Err(Refusal::DigestMismatch {
            grants,
            digest: d,
            accepted: want.clone(),
        }),
    }
}

impl Refusal {
    /// The one-line message for the spec (or checkout) `what`.
    pub fn message(&self, what: &Path) -> String {
        match self {
            Refusal::NotAccepted { grants, digest } => format!(
                "{} asks for access beyond the defaults: {}; nothing was opened. Review them, then open with --accept-grants to accept them knowingly (or --accept-grants={digest} to accept exactly this list)",
                escape_path(what),
                list_line(grants)
            ),
            Refusal::DigestMismatch {
                grants,
                digest,
                accepted,
            } => format!(
                "{} asks for access beyond the defaults that differs from the list you accepted ({accepted}): now {} ({digest}); nothing was opened. Review them, then open with --accept-grants={digest} to accept this list knowingly",
                escape_path(what),
                list_line(grants)
            ),
        }
    }
}

/// Spec text escaped for a terminal: the shared rule of [`crate::escape::name`].
fn escape(s: &str) -> String {
    crate::escape::name(s.as_bytes())
}

/// A path escaped like [`escape`]: [`crate::escape::path`].
fn escape_path(p: &Path) -> String {
    crate::escape::path(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::NetworkPolicy;

    fn pol() -> SandboxPolicy {
        SandboxPolicy {
            version: 1,
            capsule_name: "c".into(),
            workspace: "/r/workspaces/c".into(),
            read_only: vec![],
            tmp_dir: "/r/bundles/c/tmp".into(),
            home: Some("/home/u".into()),
            home_layer: None,
            cache_dir: None,
            writable: vec![],
            hidden: vec![],
            revealed: vec![],
            pass_env: vec![],
            devices: vec![],
            network: NetworkPolicy::default(),
        }
    }

    #[test]
    fn defaults_and_tightening_are_no_grants() {
        let mut p = pol();
        assert!(of_policy(&p, &[]).is_empty());
        p.writable.push("/r/workspaces/c/build-out".into());
        p.pass_env.push("TERM".into());
        p.pass_env.push("LC_ALL".into());
        p.revealed.push("/r/workspaces/c/.git".into());
        p.network.mode = NetworkMode::Replay;
        assert!(of_policy(&p, &["/r/workspaces/c/.git".into()]).is_empty());
        p.network.mode = NetworkMode::Off;
        assert!(of_policy(&p, &["/r/workspaces/c/.git".into()]).is_empty());
    }

    #[test]
    fn each_kind_is_a_grant() {
        let mut p = pol();
        p.revealed.push("/home/u/.aws".into());
        p.writable.push("/srv/out".into());
        p.writable.push("/r/workspaces/c/../../x".into());
        p.pass_env.push("GITHUB_TOKEN".into());
        p.devices.push("fuse".into());
        p.network.mode = NetworkMode::Open;
        let g = of_policy(&p, &[]);
        assert_eq!(
            g,
            vec![
                Grant::Reveal("/home/u/.aws".into()),
                Grant::Writable("/r/workspaces/c/../../x".into()),
                Grant::Writable("/srv/out".into()),
                Grant::PassEnv("GITHUB_TOKEN".into()),
                Grant::Device("fuse".into()),
                Grant::NetworkOpen,
            ]
        );
        p.network.mode = NetworkMode::Allowlist;
        p.network.allow = vec!["b.example".into(), "a.example:443".into()];
        let g = of_policy(&p, &[]);
        assert!(g.contains(&Grant::NetworkAllow("a.example:443".into())));
        assert!(!g.contains(&Grant::NetworkOpen));
    }

    #[test]
    fn acceptance_by_digest_is_exact() {
        let g = vec![Grant::PassEnv("TOKEN".into())];
        let d = digest(&g);
        assert!(matches!(
            decide(g.clone(), &Acceptance::None),
            Err(Refusal::NotAccepted { .. })
        ));
        assert_eq!(decide(g.clone(), &Acceptance::All).unwrap().by, "all");
        assert_eq!(
            decide(g.clone(), &Acceptance::Digest(d.clone()))
                .unwrap()
                .grants,
            g
        );
        let more = vec![Grant::NetworkOpen, Grant::PassEnv("TOKEN".into())];
        assert!(matches!(
            decide(more, &Acceptance::Digest(d)),
            Err(Refusal::DigestMismatch { .. })
        ));
        assert_eq!(decide(vec![], &Acceptance::None).unwrap().by, "none");
        assert!(Acceptance::from_flag(Some("nope")).is_err());
        assert_eq!(Acceptance::from_flag(None).unwrap(), Acceptance::All);
    }

    #[test]
    fn messages_escape_spec_text() {
        let g = vec![Grant::Reveal("/tmp/\x1b[2J\u{202e}x".into())];
        let r = decide(g, &Acceptance::None).unwrap_err();
        let m = r.message(Path::new("/s/capsule.yaml"));
        assert!(!m.contains('\x1b') && !m.contains('\u{202e}'), "{m}");
        assert!(m.contains("\\x1b[2J\\u{202e}x"), "{m}");
        assert!(m.contains("--accept-grants"), "{m}");
        assert!(!m.contains('\n'));
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"/a/\xff\n"));
        assert_eq!(escape_path(p), "/a/\\xff\\n");
    }
}

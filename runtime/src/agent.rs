//! Coding-agent backends (`codex`, `claude`): each one's own login paths, API hosts and
//! default environment, and un-hiding a backend's own login in an exec's policy (every
//! other agent's login stays hidden); its keys made secrets for its API hosts
//! ([`keys_as_secrets`]). Used by the exec pipeline (`--agent-login`) and by
//! `capsule agent launch`.

use capsule_bundle::policy::{HiddenReason, SandboxPolicy, HOME_AGENT_LOGINS};
use std::path::PathBuf;

/// A coding agent's CLI that capsule knows how to launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Codex,
    Claude,
}

impl Backend {
    /// The backend's command name.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Codex => "codex",
            Backend::Claude => "claude",
        }
    }

    /// The backend's own login, configuration and transcripts, relative to home.
    pub fn login_paths(self) -> &'static [&'static str] {
        match self {
            // auth.json, config.toml, sessions/, log/, history.jsonl
            Backend::Codex => &[".codex"],
            // .claude/ (.credentials.json, settings, projects/ transcripts), .claude.json
            // (account, per-project state) and its backup, XDG config
            Backend::Claude => &[
                ".claude",
                ".claude.json",
                ".claude.json.backup",
                ".config/claude",
            ],
        }
    }

    /// The hosts the backend needs (HTTPS only), allowed by default.
    ///
    /// - claude: `api.anthropic.com` (the model API), `console.anthropic.com` (OAuth token
    ///   refresh of a Claude account login). Telemetry and error reporting (statsig,
    ///   sentry) are left out, and `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` is set so
    ///   the CLI does not try.
    /// - codex: `api.openai.com` (API key), `chatgpt.com` (the backend of a ChatGPT
    ///   login), `auth.openai.com` (its token refresh).
    pub fn default_hosts(self) -> &'static [&'static str] {
        match self {
            Backend::Claude => &["api.anthropic.com:443", "console.anthropic.com:443"],
            Backend::Codex => &[
                "api.openai.com:443",
                "chatgpt.com:443",
                "auth.openai.com:443",
            ],
        }
    }

    /// Environment set for the backend when the operator has not set it (name, value).
    pub fn default_env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Backend::Claude => &[("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")],
            Backend::Codex => &[],
        }
    }
}

const ALL: [Backend; 2] = [Backend::Codex, Backend::Claude];

/// Every agent login path (relative to home) that is not `b`'s own.
pub fn other_logins(b: Backend) -> Vec<&'static str> {
    let own = b.login_paths();
    let mut v: Vec<&'static str> = HOME_AGENT_LOGINS
        .iter()
        .copied()
        .chain(ALL.iter().flat_map(|o| o.login_paths().iter().copied()))
        .filter(|p| !own.contains(p))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Un-hide `b`'s own login paths in `p` (only those hidden as agent logins; a path the
/// spec or `--hide` hid stays hidden), and drop read-only reveals below them (they are
/// seen through the home layer instead, writable into the layer).
pub fn unhide_login(p: &mut SandboxPolicy, b: Backend) {
    let Some(home) = p.home.clone() else { return };
    let own: Vec<PathBuf> = b.login_paths().iter().map(|r| home.join(r)).collect();
    p.hidden
        .retain(|h| !(h.reason == HiddenReason::AgentLogins && own.contains(&h.path)));
    p.revealed.retain(|r| !own.iter().any(|o| r.starts_with(o)));
}

impl Backend {
    /// The backend's keys and tokens: kept outside the sandbox as secrets.
    pub fn secret_names(self) -> &'static [&'static str] {
        match self {
            Backend::Claude => &[
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "CLAUDE_CODE_OAUTH_TOKEN",
            ],
            Backend::Codex => &["OPENAI_API_KEY", "CODEX_API_KEY"],
        }
    }

    /// The variable naming another API endpoint (a gateway, a local fake).
    pub fn base_url_var(self) -> &'static str {
        match self {
            Backend::Claude => "ANTHROPIC_BASE_URL",
            Backend::Codex => "OPENAI_BASE_URL",
        }
    }
}

/// The allowlist entry (`host:port`) of an `http(s)://` base URL; `None` for anything
/// else (another scheme, credentials in it, no host).
pub fn base_url_host(url: &str) -> Option<String> {
    let (scheme, rest) = url.trim().split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    let auth = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if auth.is_empty() || auth.contains('@') || auth.contains(char::is_whitespace) {
        return None;
    }
    let has_port = match auth.rfind(':') {
        Some(i) => !auth[i..].contains(']'),
        None => false,
    };
    Some(if has_port {
        auth.to_string()
    } else {
        format!("{auth}:{default_port}")
    })
}

/// With the allowlist in force (`allow_hosts` holds the backend's API hosts): the host of
/// the backend's base URL (`get(var)`) joins `allow_hosts`, and each of the backend's keys
/// in `env_names` leaves it to become a secret `NAME=<API hosts>` (returned): the CLI sees
/// a placeholder, and the proxy puts the value in on the way to those hosts only.
pub fn keys_as_secrets(
    b: Backend,
    env_names: &mut Vec<String>,
    allow_hosts: &mut Vec<String>,
    get: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    if allow_hosts.is_empty() {
        return Vec::new();
    }
    let mut hosts: Vec<String> = b.default_hosts().iter().map(|h| h.to_string()).collect();
    if let Some(h) = get(b.base_url_var()).as_deref().and_then(base_url_host) {
        if !hosts.contains(&h) {
            hosts.push(h.clone());
        }
        if !allow_hosts.contains(&h) {
            allow_hosts.push(h);
        }
    }
    let mut flags = Vec::new();
    env_names.retain(|n| {
        let key = b.secret_names().contains(&n.as_str());
        if key {
            flags.push(format!("{n}={}", hosts.join(",")));
        }
        !key
    });
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_secrets_for_the_api_hosts() {
        assert_eq!(
            base_url_host("https://gw.test/v1").as_deref(),
            Some("gw.test:443")
        );
        assert_eq!(
            base_url_host("http://127.0.0.1:4000").as_deref(),
            Some("127.0.0.1:4000")
        );
        assert_eq!(base_url_host("http://[::1]/x").as_deref(), Some("[::1]:80"));
        assert_eq!(
            base_url_host("http://[::1]:81").as_deref(),
            Some("[::1]:81")
        );
        assert_eq!(base_url_host("https://u:p@gw.test/"), None);
        assert_eq!(base_url_host("file:///x"), None);
        let mut names = vec!["ANTHROPIC_API_KEY".to_string(), "TERM".to_string()];
        let mut allow = vec!["api.anthropic.com:443".to_string()];
        let f = keys_as_secrets(Backend::Claude, &mut names, &mut allow, |n| {
            (n == "ANTHROPIC_BASE_URL").then(|| "http://127.0.0.1:4000/".to_string())
        });
        assert_eq!(names, vec!["TERM".to_string()]);
        assert_eq!(
            f,
            vec![
                "ANTHROPIC_API_KEY=api.anthropic.com:443,console.anthropic.com:443,127.0.0.1:4000"
                    .to_string()
            ]
        );
        assert!(allow.contains(&"127.0.0.1:4000".to_string()));
        // no allowlist (open network, or none): passed as before
        let mut names = vec!["OPENAI_API_KEY".to_string()];
        assert!(keys_as_secrets(Backend::Codex, &mut names, &mut Vec::new(), |_| None).is_empty());
        assert_eq!(names.len(), 1);
    }
}

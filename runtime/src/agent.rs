//! Coding-agent backends (`codex`, `claude`): each one's own login paths, API hosts and
//! default environment, and un-hiding a backend's own login in an exec's policy (every
//! other agent's login stays hidden). Used by the exec pipeline (`--agent-login`) and by
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

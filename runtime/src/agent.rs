//! Coding-agent backends as data: a [`Profile`] says how to find an agent CLI's binary,
//! its own login and state paths (relative to home), its API hosts, the environment
//! variables it reads, the arguments that turn its own sandbox off and those that make it
//! run without a terminal, and its model and effort flags, and which of its variables are keys, kept outside the sandbox as
//! secrets for its API hosts ([`keys_as_secrets`]). Used by the exec pipeline
//! (`--agent-login`: [`unhide_login`]) and by `capsule agent launch`.
//!
//! Built-in profiles ([`builtin`]): claude, codex, copilot, gemini, opencode. The operator
//! adds their own to the tool's settings (`agent_profiles` in `$CAPSULE_ROOT/settings.json`,
//! `capsule agent profile add`); a profile is validated when added and when used
//! ([`Profile::validate`]), and may not take a built-in's name.
//!
//! A profile decides only what its own agent gets: its login paths are un-hidden only
//! where capsule hid them as agent logins (a profile naming `~/.ssh` un-hides nothing),
//! and every other profile's login paths, and the default list of agent logins, stay
//! hidden from it ([`other_logins`]).

use capsule_bundle::policy::{HiddenReason, SandboxPolicy, HOME_AGENT_LOGINS};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One agent CLI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The name `agent launch --backend NAME` takes.
    pub name: String,
    /// The executable looked up on `PATH` (a plain name).
    pub binary: String,
    /// Where it comes from (e.g. its npm package), for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    /// Its own login, configuration and transcripts, relative to home.
    #[serde(default)]
    pub login_paths: Vec<String>,
    /// The hosts it needs, `HOST[:PORT]`, allowed through the proxy by default.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Variables passed into the sandbox by name when set.
    #[serde(default)]
    pub env: Vec<String>,
    /// Name prefixes of further variables passed by name when set.
    #[serde(default)]
    pub env_prefixes: Vec<String>,
    /// Variables set for it when the operator has not set them.
    #[serde(default)]
    pub default_env: BTreeMap<String, String>,
    /// Its keys and tokens: under the allowlist, each one set is kept outside the sandbox
    /// as a secret for [`Profile::hosts`] (the command sees a placeholder).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// The variable naming another API endpoint (a gateway, a local fake): its host is
    /// allow-listed and the secrets go there too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url_env: Option<String>,
    /// Arguments right after the binary that turn its own sandbox off (capsule's sandbox
    /// refuses nested user namespaces; capsule is the sandbox).
    #[serde(default)]
    pub sandbox_off: Vec<String>,
    /// Arguments for a run without `--interactive` (before the caller's).
    #[serde(default)]
    pub batch: Vec<String>,
    /// The flag before `--model M`'s value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_flag: Option<String>,
    /// The arguments of `--effort E` (`{}` is E), if it has one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effort_args: Vec<String>,
    /// The values `--effort` accepts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub efforts: Vec<String>,
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// The built-in profiles.
pub fn builtin() -> Vec<Profile> {
    vec![
        Profile {
            name: "claude".into(),
            binary: "claude".into(),
            package: Some("@anthropic-ai/claude-code".into()),
            // .claude/ (.credentials.json, settings, projects/ transcripts), .claude.json
            // (account, per-project state) and its backup, XDG config
            login_paths: s(&[
                ".claude",
                ".claude.json",
                ".claude.json.backup",
                ".config/claude",
            ]),
            // the model API; OAuth token refresh of a Claude account login. Telemetry and
            // error reporting are left out, and the CLI is told not to try.
            hosts: s(&["api.anthropic.com:443", "console.anthropic.com:443"]),
            env: s(&[
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "ANTHROPIC_BASE_URL",
                "ANTHROPIC_MODEL",
                "CLAUDE_CONFIG_DIR",
                "CLAUDE_CODE_USE_BEDROCK",
                "CLAUDE_CODE_USE_VERTEX",
                "DISABLE_TELEMETRY",
                "DISABLE_AUTOUPDATER",
            ]),
            env_prefixes: s(&["ANTHROPIC_", "CLAUDE_CODE_"]),
            default_env: [(
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            )]
            .into(),
            secrets: s(&[
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "CLAUDE_CODE_OAUTH_TOKEN",
            ]),
            base_url_env: Some("ANTHROPIC_BASE_URL".into()),
            sandbox_off: vec![],
            batch: s(&["-p"]),
            model_flag: Some("--model".into()),
            effort_args: vec![],
            efforts: vec![],
        },
        Profile {
            name: "codex".into(),
            binary: "codex".into(),
            package: Some("@openai/codex".into()),
            // auth.json, config.toml, sessions/, log/, history.jsonl
            login_paths: s(&[".codex"]),
            // the API (a key), the backend of a ChatGPT login, its token refresh
            hosts: s(&[
                "api.openai.com:443",
                "chatgpt.com:443",
                "auth.openai.com:443",
            ]),
            env: s(&[
                "OPENAI_API_KEY",
                "CODEX_API_KEY",
                "OPENAI_BASE_URL",
                "OPENAI_ORG_ID",
                "OPENAI_PROJECT",
                "CODEX_HOME",
            ]),
            env_prefixes: s(&["OPENAI_", "CODEX_"]),
            default_env: BTreeMap::new(),
            // its own sandbox (bwrap, Landlock) needs nested user namespaces
            secrets: s(&["OPENAI_API_KEY", "CODEX_API_KEY"]),
            base_url_env: Some("OPENAI_BASE_URL".into()),
            sandbox_off: s(&["-c", "sandbox_mode=\"danger-full-access\""]),
            batch: s(&["exec"]),
            model_flag: Some("-m".into()),
            effort_args: s(&["-c", "model_reasoning_effort=\"{}\""]),
            efforts: s(&["minimal", "low", "medium", "high", "xhigh"]),
        },
        Profile {
            name: "copilot".into(),
            binary: "copilot".into(),
            package: Some("@github/copilot".into()),
            login_paths: s(&[".copilot", ".config/github-copilot"]),
            hosts: s(&[
                "api.githubcopilot.com:443",
                "api.individual.githubcopilot.com:443",
                "api.business.githubcopilot.com:443",
                "api.enterprise.githubcopilot.com:443",
                "api.github.com:443",
                "github.com:443",
            ]),
            env: s(&["GH_TOKEN", "GITHUB_TOKEN", "GH_HOST"]),
            env_prefixes: s(&["COPILOT_"]),
            default_env: BTreeMap::new(),
            secrets: s(&["GH_TOKEN", "GITHUB_TOKEN"]),
            base_url_env: None,
            sandbox_off: vec![],
            batch: s(&["-p"]),
            model_flag: Some("--model".into()),
            effort_args: vec![],
            efforts: vec![],
        },
        Profile {
            name: "gemini".into(),
            binary: "gemini".into(),
            package: Some("@google/gemini-cli".into()),
            login_paths: s(&[".gemini"]),
            hosts: s(&[
                "generativelanguage.googleapis.com:443",
                "cloudcode-pa.googleapis.com:443",
                "oauth2.googleapis.com:443",
            ]),
            env: s(&[
                "GEMINI_API_KEY",
                "GOOGLE_API_KEY",
                "GOOGLE_CLOUD_PROJECT",
                "GOOGLE_CLOUD_LOCATION",
                "GOOGLE_GENAI_USE_VERTEXAI",
            ]),
            env_prefixes: s(&["GEMINI_"]),
            // its own sandbox (docker, podman, sandbox-exec) stays off
            default_env: [("GEMINI_SANDBOX".into(), "false".into())].into(),
            secrets: s(&["GEMINI_API_KEY", "GOOGLE_API_KEY"]),
            base_url_env: None,
            sandbox_off: vec![],
            batch: s(&["-p"]),
            model_flag: Some("-m".into()),
            effort_args: vec![],
            efforts: vec![],
        },
        Profile {
            name: "opencode".into(),
            binary: "opencode".into(),
            package: Some("opencode-ai".into()),
            login_paths: s(&[".local/share/opencode", ".config/opencode"]),
            // its model catalogue and the two providers most people log in to
            hosts: s(&[
                "models.dev:443",
                "opencode.ai:443",
                "api.anthropic.com:443",
                "api.openai.com:443",
            ]),
            env: s(&["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]),
            env_prefixes: s(&["OPENCODE_"]),
            default_env: BTreeMap::new(),
            secrets: s(&[]),
            base_url_env: None,
            sandbox_off: vec![],
            batch: s(&["run"]),
            model_flag: Some("-m".into()),
            effort_args: vec![],
            efforts: vec![],
        },
    ]
}

/// A profile that cannot be used, with the reason.
#[derive(Debug, thiserror::Error)]
#[error("agent profile {name:?}: {why}")]
pub struct ProfileError {
    pub name: String,
    pub why: String,
}

fn plain_word(w: &str) -> bool {
    !w.is_empty()
        && w.len() <= 64
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !w.starts_with(['-', '.'])
}

fn var_name(n: &str) -> bool {
    !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !n.as_bytes()[0].is_ascii_digit()
}

impl Profile {
    /// Check every field (names, relative login paths, hosts, variable names).
    pub fn validate(&self) -> Result<(), ProfileError> {
        let err = |why: String| ProfileError {
            name: self.name.clone(),
            why,
        };
        if !plain_word(&self.name) {
            return Err(err(
                "a name is letters, digits, '-', '_' or '.' (not first), at most 64".into(),
            ));
        }
        if !plain_word(&self.binary) {
            return Err(err(format!(
                "binary {:?}: give the executable's name, found on PATH (no '/')",
                self.binary
            )));
        }
        for p in &self.login_paths {
            let path = std::path::Path::new(p);
            let ok = !p.is_empty()
                && path
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)));
            if !ok {
                return Err(err(format!(
                    "login path {p:?}: give a path relative to home, without '..'"
                )));
            }
        }
        for h in &self.hosts {
            if h.is_empty() || h.contains(|c: char| c.is_whitespace() || c == '/' || c == '@') {
                return Err(err(format!(
                    "host {h:?}: give HOST or HOST:PORT (no scheme, no path)"
                )));
            }
        }
        for n in self
            .env
            .iter()
            .chain(self.default_env.keys())
            .chain(&self.env_prefixes)
            .chain(&self.secrets)
            .chain(self.base_url_env.iter())
        {
            if !var_name(n) {
                return Err(err(format!("variable {n:?}: not a variable name")));
            }
        }
        let all_args = self
            .sandbox_off
            .iter()
            .chain(&self.batch)
            .chain(&self.effort_args)
            .chain(self.model_flag.iter());
        for a in all_args {
            if a.contains('\0') || a.is_empty() {
                return Err(err(format!("argument {a:?}: empty or with a NUL byte")));
            }
        }
        if self.efforts.is_empty() != self.effort_args.is_empty() {
            return Err(err("effort_args and efforts go together".into()));
        }
        Ok(())
    }
}

/// Every profile: the built-ins, then the operator's (`settings`).
pub fn all(operators: &[Profile]) -> Vec<Profile> {
    let mut v = builtin();
    v.extend(operators.iter().cloned());
    v
}

/// The profile named `name` among the built-ins and `operators`.
pub fn find(name: &str, operators: &[Profile]) -> Option<Profile> {
    all(operators).into_iter().find(|p| p.name == name)
}

/// Every agent login path (relative to home) that is not `own`'s: the default list of
/// agent logins and every profile's.
pub fn other_logins(own: &Profile, all: &[Profile]) -> Vec<String> {
    let mut v: Vec<String> = HOME_AGENT_LOGINS
        .iter()
        .map(|s| s.to_string())
        .chain(all.iter().flat_map(|p| p.login_paths.iter().cloned()))
        .filter(|p| !own.login_paths.contains(p))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Un-hide `b`'s own login paths in `p` (only those hidden as agent logins; a path the
/// spec or `--hide` hid, or a credential, stays hidden), and drop read-only reveals below
/// them (they are seen through the home layer instead, writable into the layer).
pub fn unhide_login(p: &mut SandboxPolicy, b: &Profile) {
    let Some(home) = p.home.clone() else { return };
    let own: Vec<PathBuf> = b.login_paths.iter().map(|r| home.join(r)).collect();
    p.hidden
        .retain(|h| !(h.reason == HiddenReason::AgentLogins && own.contains(&h.path)));
    p.revealed.retain(|r| !own.iter().any(|o| r.starts_with(o)));
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
    b: &Profile,
    env_names: &mut Vec<String>,
    allow_hosts: &mut Vec<String>,
    get: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    if allow_hosts.is_empty() {
        return Vec::new();
    }
    let mut hosts: Vec<String> = b.hosts.clone();
    if let Some(h) = b
        .base_url_env
        .as_deref()
        .and_then(&get)
        .as_deref()
        .and_then(base_url_host)
    {
        if !hosts.contains(&h) {
            hosts.push(h.clone());
        }
        if !allow_hosts.contains(&h) {
            allow_hosts.push(h);
        }
    }
    let mut flags = Vec::new();
    env_names.retain(|n| {
        let key = b.secrets.contains(n);
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
    fn builtins_are_valid_and_distinct() {
        let b = builtin();
        let names: Vec<&str> = b.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["claude", "codex", "copilot", "gemini", "opencode"]);
        for p in &b {
            p.validate().unwrap();
            // every exec hides them, not only agent launches of another agent
            for l in &p.login_paths {
                assert!(HOME_AGENT_LOGINS.contains(&l.as_str()), "{}: {l}", p.name);
            }
        }
    }

    #[test]
    fn validation_refuses_what_could_escape() {
        let ok = find("claude", &[]).unwrap();
        let bad = |f: &dyn Fn(&mut Profile)| {
            let mut p = ok.clone();
            f(&mut p);
            p.validate().is_err()
        };
        assert!(bad(&|p| p.name = "../x".into()));
        assert!(bad(&|p| p.name = "-x".into()));
        assert!(bad(&|p| p.binary = "/bin/sh".into()));
        assert!(bad(&|p| p.login_paths = vec!["../.ssh".into()]));
        assert!(bad(&|p| p.login_paths = vec!["/etc".into()]));
        assert!(bad(&|p| p.hosts = vec!["https://x".into()]));
        assert!(bad(&|p| p.env = vec!["A=B".into()]));
        assert!(bad(&|p| p.effort_args = vec!["{}".into()]));
        assert!(!bad(&|p| p.login_paths = vec![".config/x".into()]));
    }

    #[test]
    fn other_logins_cover_every_profile_but_its_own() {
        let mine = Profile {
            name: "mine".into(),
            binary: "mine".into(),
            login_paths: vec![".mine".into()],
            ..find("claude", &[]).unwrap()
        };
        let all = all(std::slice::from_ref(&mine));
        let o = other_logins(&find("codex", &[]).unwrap(), &all);
        assert!(o.contains(&".mine".into()) && o.contains(&".claude".into()));
        assert!(o.contains(&".copilot".into()) && !o.contains(&".codex".into()));
        let o = other_logins(&mine, &all);
        assert!(!o.contains(&".mine".into()) && o.contains(&".codex".into()));
    }

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
        let f = keys_as_secrets(&find("claude", &[]).unwrap(), &mut names, &mut allow, |n| {
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
        assert!(keys_as_secrets(
            &find("codex", &[]).unwrap(),
            &mut names,
            &mut Vec::new(),
            |_| None
        )
        .is_empty());
        assert_eq!(names.len(), 1);
    }
}

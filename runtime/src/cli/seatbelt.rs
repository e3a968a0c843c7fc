//! `capsule seatbelt <capsule> [--json]`: print the macOS Seatbelt profile generated for a
//! capsule and its parameters, so a person on a Mac can read it and try it with
//! `sandbox-exec -f`. Works on any OS; the profile is the rendering of the capsule's macOS
//! plan ([`crate::plan::seatbelt`]) and has passed its round trip and linter before it is
//! printed.

use crate::exit::{CliError, CliResult};
use crate::plan::seatbelt::{self, SeatbeltRequest};
use capsule_bundle::layout::{capsule_root, Layout};
use capsule_bundle::policy::{NetworkMode, SandboxPolicy};
use capsule_bundle::store;
use capsule_seatbelt::{CheckError, HostResolver, ModelResolver, Nonce, Resolver};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Print the macOS Seatbelt profile for a capsule.
///
/// The profile goes to stdout; the `sandbox-exec` command line with its parameters
/// (`-D NAME=VALUE`, every path is a parameter) goes to stderr, so
/// `capsule seatbelt demo > demo.sb` gives a file to try on a Mac. With --json, one JSON
/// object holds the profile, the parameters and the task environment.
#[derive(Debug, Args)]
pub struct SeatbeltArgs {
    /// The capsule: a name (`capsule list`) or a workspace path.
    #[arg(required_unless_present = "policy", conflicts_with = "policy")]
    pub capsule: Option<String>,
    /// Render from this policy.json instead of an open capsule.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Network mode to render: none, off, allowlist, open (default: the capsule's).
    #[arg(long, value_name = "MODE")]
    pub network: Option<String>,
    /// Port of capsule's allowlist proxy on loopback (needed for --network allowlist).
    #[arg(long, value_name = "PORT")]
    pub proxy_port: Option<u16>,
    /// Allow the keychain service (com.apple.SecurityServer).
    #[arg(long)]
    pub keychain: bool,
    /// The refusal nonce (default: a fresh random one).
    #[arg(long)]
    pub nonce: Option<String>,
    /// The task's TMPDIR (default: the capsule's tmp folder).
    #[arg(long, value_name = "DIR")]
    pub tmpdir: Option<PathBuf>,
    /// Print one JSON object instead of the profile text.
    #[arg(long)]
    pub json: bool,
}

fn fail(msg: impl Into<String>) -> CliError {
    CliError::failure(msg)
}

fn parse_mode(s: &str) -> Result<NetworkMode, CliError> {
    match s {
        "none" => Ok(NetworkMode::None),
        "off" => Ok(NetworkMode::Off),
        "allowlist" => Ok(NetworkMode::Allowlist),
        "open" => Ok(NetworkMode::Open),
        other => Err(CliError::new(
            crate::exit::USAGE,
            format!("--network {other:?}: use none, off, allowlist or open"),
        )),
    }
}

fn load_policy(a: &SeatbeltArgs) -> Result<SandboxPolicy, CliError> {
    if let Some(file) = &a.policy {
        let text =
            std::fs::read_to_string(file).map_err(|e| fail(format!("{}: {e}", file.display())))?;
        return serde_json::from_str(&text).map_err(|e| {
            fail(format!(
                "{}: line {}, column {}: {e}",
                file.display(),
                e.line(),
                e.column()
            ))
        });
    }
    let reference = a.capsule.as_deref().unwrap_or_default();
    let root = capsule_root()
        .ok_or_else(|| fail("cannot find the capsule root: set CAPSULE_ROOT or HOME"))?;
    let layout = Layout::new(root);
    let cap = store::resolve(&layout, reference)
        .map_err(|e| fail(format!("capsule {reference:?}: {e}")))?;
    // the policy an exec with no flags resolves (the hidden paths of now), as on Linux
    Ok(crate::exec::with_current_hidden(&cap, &layout))
}

/// Quote for a POSIX shell.
fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-=+:,@".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

pub fn seatbelt(a: SeatbeltArgs) -> CliResult {
    let policy = load_policy(&a)?;
    let nonce = match &a.nonce {
        Some(n) => Nonce::parse(n)
            .map_err(|e| CliError::new(crate::exit::USAGE, format!("--nonce: {e}")))?,
        None => Nonce::random().map_err(|e| fail(format!("cannot make a nonce: {e}")))?,
    };
    let req = SeatbeltRequest {
        policy: &policy,
        nonce,
        network: a.network.as_deref().map(parse_mode).transpose()?,
        proxy_port: a.proxy_port,
        allow_keychain: a.keychain,
        tmpdir: a.tmpdir.clone(),
        env: std::env::vars_os().collect(),
    };
    // On a Mac the real file system; elsewhere a model of macOS's /tmp, /var, /etc links.
    let host = HostResolver;
    let model = ModelResolver::macos();
    let resolver: &dyn Resolver = if cfg!(target_os = "macos") {
        &host
    } else {
        &model
    };
    let facts = seatbelt::gather(&req, resolver);
    let planned = seatbelt::plan(&req, &facts).map_err(CheckError::from);
    let (plan, g) = planned
        .and_then(|p| seatbelt::render(&p).map(|g| (p, g)))
        .map_err(|e| {
            let hint = match e {
                CheckError::Gen(capsule_seatbelt::GenError::NoProxyPort) => {
                    " (pass --proxy-port PORT, or --network none|off|open)"
                }
                _ => "",
            };
            fail(format!(
                "seatbelt profile for {:?}: {e}{hint}",
                policy.capsule_name
            ))
        })?;
    let env = &plan.task_env;
    if a.json {
        let v = serde_json::json!({
            "capsule": policy.capsule_name,
            "network": plan.policy.network.mode.as_str(),
            "nonce": req.nonce.as_str(),
            "profile": g.text,
            "params": g.params,
            "define_args": g.define_args(),
            "env": env.iter().map(|(k, v)| serde_json::json!([k, v])).collect::<Vec<_>>(),
            "resolved_on": if cfg!(target_os = "macos") { "host" } else { "macos-model" },
        });
        crate::cli::print_json(&v);
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", g.text);
    let defines: Vec<String> = g
        .params
        .iter()
        .map(|(k, v)| format!("-D {}", sh_quote(&format!("{k}={v}"))))
        .collect();
    let envs: Vec<String> = env
        .iter()
        .map(|(k, v)| sh_quote(&format!("{k}={v}")))
        .collect();
    eprintln!(
        "# try it on a Mac (save the profile above as profile.sb):\n# env {} /usr/bin/sandbox-exec -f profile.sb {} -- /bin/sh",
        envs.join(" "),
        defines.join(" ")
    );
    if !cfg!(target_os = "macos") {
        eprintln!("# note: not on a Mac: paths were resolved with a model of macOS's /tmp, /var and /etc symlinks");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::sh_quote;

    #[test]
    fn shell_quoting() {
        assert_eq!(sh_quote("A=/x/y"), "A=/x/y");
        assert_eq!(sh_quote("A=/x y"), "'A=/x y'");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
    }
}

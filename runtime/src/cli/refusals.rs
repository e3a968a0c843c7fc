//! `capsule refusals <capsule> [--json] [--since WHEN]`: what the sandbox refused the
//! capsule's commands, across execs, from its `refusals.jsonl` ([`crate::refusals::log`]).

use crate::exit::{CliError, CliResult};
use capsule_bundle::layout::{bundle_files, capsule_root, Layout};
use capsule_bundle::store;
use clap::Args;
use std::process::ExitCode;
use std::time::SystemTime;

/// List what the sandbox refused a capsule's commands (reads of hidden paths, writes
/// outside the writable paths, refused syscalls, connects), with the grant that would
/// allow each.
#[derive(Debug, Args)]
pub struct RefusalsArgs {
    /// The capsule: a name (`capsule list`) or a workspace path.
    pub capsule: String,
    /// Only refusals first seen since WHEN: an RFC 3339 time (`2026-12-01T12:00:00Z`) or
    /// a duration back from now (`1h`, `30m`).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Print a JSON array (one object per line of the log).
    #[arg(long)]
    pub json: bool,
}

fn since(s: &str) -> Result<SystemTime, CliError> {
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(t);
    }
    let d = crate::limits::parse_duration(s).map_err(|_| {
        CliError::new(
            crate::exit::USAGE,
            format!(
                "--since {}: neither an RFC 3339 time nor a duration (1h, 30m)",
                capsule_bundle::escape::name(s.as_bytes())
            ),
        )
    })?;
    Ok(SystemTime::now()
        .checked_sub(d)
        .unwrap_or(SystemTime::UNIX_EPOCH))
}

pub fn refusals(a: RefusalsArgs) -> CliResult {
    let since = a.since.as_deref().map(since).transpose()?;
    let root = capsule_root()
        .ok_or_else(|| CliError::failure("no capsule root: set CAPSULE_ROOT or HOME"))?;
    let layout = Layout::new(root);
    let cap = store::resolve(&layout, &a.capsule).map_err(|e| CliError::failure(e.to_string()))?;
    let path = cap.bundle_file(bundle_files::REFUSALS);
    let lines = crate::refusals::log::read(&path, since)
        .map_err(|e| CliError::failure(format!("reading {}: {e}", path.display())))?;
    if a.json {
        crate::cli::print_json(&serde_json::to_value(&lines).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    if lines.is_empty() {
        println!("no refusals recorded");
    }
    for l in &lines {
        println!("{}  {}", l.time, l.refusal.line());
    }
    Ok(ExitCode::SUCCESS)
}

//! `capsule __materialize` (hidden): the entry the build sandbox runs ([`crate::exec::build`]):
//! it reads the steps, applies them to the workspace and prints the outcome as one JSON
//! line. It refuses to run outside the build sandbox.

use crate::exec::build::{ENTRY, ENTRY_GUARD};
use crate::exit::{CliError, CliResult};
use capsule_bundle::workspace::materialize::{StepFailure, Steps};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Largest steps file the entry reads (a spec is at most 4 MiB).
const MAX_JOB: u64 = 64 << 20;

/// `capsule __materialize` (internal; run inside the build sandbox only).
#[derive(Debug, Args)]
pub struct MaterializeArgs {
    /// The steps as JSON ([`Steps`]).
    #[arg(long)]
    pub steps: PathBuf,
    /// The workspace to build (an existing empty folder).
    #[arg(long)]
    pub workspace: PathBuf,
}

/// The entry inside the build sandbox: apply the steps, print the outcome as one JSON line
/// (`null` on success); exit 0 when they all applied, 1 otherwise.
pub fn materialize_entry(a: MaterializeArgs) -> CliResult {
    if std::env::var_os(ENTRY_GUARD).as_deref() != Some(std::ffi::OsStr::new("1")) {
        return Err(CliError::new(
            crate::exit::USAGE,
            format!("capsule {ENTRY} is internal: it runs a spec's steps inside capsule's build sandbox only (use `capsule open`)"),
        ));
    }
    let t0 = std::time::Instant::now();
    let outcome = read_steps(&a.steps).and_then(|job| {
        capsule_bundle::workspace::materialize::apply_steps_inside_sandbox(&job, &a.workspace)
    });
    tracing::debug!("steps applied in {:?}", t0.elapsed());
    let outcome = outcome.map_err(|mut f| {
        if let StepFailure::Init { msg } | StepFailure::Step { msg, .. } = &mut f {
            if msg.starts_with("cannot run git") {
                msg.push_str(" (in the build sandbox, which hides your home: install git in a system folder such as /usr/bin)");
            }
        }
        f
    });
    let line = match &outcome {
        Ok(()) => "null".to_string(),
        Err(f) => serde_json::to_string(f).unwrap_or_else(|_| "null".into()),
    };
    println!("{line}");
    Ok(if outcome.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::exit::FAILURE)
    })
}

fn read_steps(p: &Path) -> Result<Steps, StepFailure> {
    use std::io::Read;
    let runner = |msg: String| StepFailure::Runner { msg };
    let f = std::fs::File::open(p).map_err(|e| runner(format!("{}: {e}", p.display())))?;
    let mut text = Vec::new();
    f.take(MAX_JOB)
        .read_to_end(&mut text)
        .map_err(|e| runner(format!("{}: {e}", p.display())))?;
    serde_json::from_slice(&text).map_err(|e| runner(format!("{}: {e}", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_refuses_to_run_outside_the_sandbox() {
        // the guard variable is only set in the build sandbox's environment
        if std::env::var_os(ENTRY_GUARD).is_some() {
            return;
        }
        let e = materialize_entry(MaterializeArgs {
            steps: "/nonexistent".into(),
            workspace: "/nonexistent".into(),
        })
        .unwrap_err();
        assert!(e.message.contains("internal"), "{}", e.message);
    }
}

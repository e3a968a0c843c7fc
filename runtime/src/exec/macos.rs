//! The exec pipeline on macOS ([`run`]): the capsule, the gate, the policy
//! ([`super::resolve_policy`]), then the Seatbelt executor ([`crate::macos::run`]) and the
//! git guard. Options the macOS executor does not have yet are refused, never ignored.

use super::{resolve_policy, Exec, Finished};
use crate::exit::{self, CliError};
use crate::macos::{clean_env, exit_status, MacExec, LOG, SANDBOX_EXEC};
use capsule_bundle::layout::{capsule_root, Layout};
use capsule_bundle::policy::NetworkMode;
use capsule_bundle::store;
use std::path::Path;

/// [`Exec::run`] on macOS. No exec record is kept there yet ([`Finished::record`] is
/// `None`).
pub fn run(x: Exec) -> Result<Finished, CliError> {
    let Exec {
        capsule,
        command,
        options: a,
    } = x;
    let fail = |m: String| CliError::failure(m);
    if a.no_sandbox {
        return Err(fail("--no-sandbox is not available on macOS".into()));
    }
    if a.timeout.is_some() {
        return Err(fail(
            "--timeout and --json are not available on macOS yet".into(),
        ));
    }
    if a.activity_timeout.is_some() || !a.limits.is_empty() {
        // a limit asked for and not enforced: nothing runs
        return Err(CliError::new(
            exit::SANDBOX_FAILED,
            "--activity-timeout, --fds, --file-size, --memory, --pids and --cpus are not enforced on macOS yet; nothing ran",
        ));
    }
    let root =
        capsule_root().ok_or_else(|| fail("no capsule root: set CAPSULE_ROOT or HOME".into()))?;
    let layout = Layout::new(root);
    let cap = store::resolve(&layout, &capsule).map_err(|e| fail(e.to_string()))?;
    let caller = std::env::current_dir().ok();
    let cwd = match &caller {
        Some(c) if c.starts_with(&cap.workspace) => c.clone(),
        _ => cap.workspace.clone(),
    };
    super::gate::exec_gate(caller.as_deref(), &cap.workspace, &cwd)?;
    let policy = resolve_policy(&a, &cap, &layout)?;
    if policy.network.mode == NetworkMode::Allowlist {
        return Err(CliError::new(
            exit::SANDBOX_FAILED,
            "network allowlist on macOS needs capsule's proxy, which the macOS executor does not start yet; nothing ran (use --no-network or --open-network)",
        ));
    }
    let sandbox_exec = Path::new(SANDBOX_EXEC);
    let x = MacExec {
        policy: &policy,
        bundle_dir: &cap.bundle_dir,
        proxy_port: None,
        allow_keychain: false,
        env: clean_env(std::env::vars_os(), &policy.pass_env),
        cwd: &cwd,
        command: &command,
        sandbox_exec,
        log: Some(Path::new(LOG)),
    };
    let result = crate::macos::run(&x);
    // the operator's own git in the workspace must not run what the command planted
    let guard = capsule_bundle::hostgit::guard_workspace(&cap.workspace, &cap.bundle_dir, None);
    if let Some(line) = guard.summary_line() {
        eprintln!("{line}");
    }
    match result {
        Ok(st) => Ok(Finished {
            record: None,
            exit_status: exit_status(st),
            error: None,
        }),
        Err(e) => Err(CliError::new(
            exit::SANDBOX_FAILED,
            format!("{e}; nothing ran"),
        )),
    }
}

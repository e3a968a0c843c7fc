//! The exec pipeline on macOS ([`run`]): the capsule, the gate, the policy
//! ([`super::resolve_policy`]), the host's paths and the macOS plan made of them
//! ([`crate::plan::seatbelt`]) and its profile, then the Seatbelt executor
//! ([`crate::macos::run`]) and the git guard. Options the macOS executor does not have yet are refused, never ignored.

use super::{resolve_policy, Exec, Finished};
use crate::exit::{self, CliError};
use crate::macos::{clean_env, exit_status, MacError, MacExec, LOG, SANDBOX_EXEC};
use crate::plan::seatbelt::{self, SeatbeltPlan, SeatbeltRequest};
use capsule_bundle::layout::{capsule_root, Layout};
use capsule_bundle::policy::{NetworkMode, SandboxPolicy};
use capsule_bundle::store;
use capsule_seatbelt::{CheckError, Generated, HostResolver, Nonce, Resolver};
use std::ffi::OsString;
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
    let env = clean_env(std::env::vars_os(), &policy.pass_env);
    let result = planned(&policy, env, &HostResolver).and_then(|(plan, profile)| {
        crate::macos::run(&MacExec {
            profile: &profile,
            nonce: &plan.nonce,
            task_tmpdir: &plan.task_tmpdir,
            env: &plan.env,
            bundle_dir: &cap.bundle_dir,
            cwd: &cwd,
            command: &command,
            sandbox_exec: Path::new(SANDBOX_EXEC),
            log: Some(Path::new(LOG)),
        })
    });
    // the operator's own git in the workspace must not run what the command planted
    let guard =
        capsule_bundle::git::hostgit::guard_workspace(&cap.workspace, &cap.bundle_dir, None);
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

/// The exec's macOS plan and its profile: a fresh nonce, which names the task's own
/// TMPDIR in the capsule's tmp folder; the host's paths (`r`), then the plan
/// ([`seatbelt::plan`], pure) and its rendering.
fn planned(
    policy: &SandboxPolicy,
    env: Vec<(OsString, OsString)>,
    r: &dyn Resolver,
) -> Result<(SeatbeltPlan, Generated), MacError> {
    let nonce = Nonce::random().map_err(MacError::Nonce)?;
    let req = SeatbeltRequest {
        policy,
        tmpdir: Some(policy.tmp_dir.join(format!("task-{}", nonce.as_str()))),
        nonce,
        network: None,
        proxy_port: None,
        allow_keychain: false,
        env,
    };
    let facts = seatbelt::gather(&req, r);
    let plan = seatbelt::plan(&req, &facts).map_err(CheckError::from)?;
    let profile = seatbelt::render(&plan)?;
    Ok((plan, profile))
}

#[cfg(test)]
mod tests;

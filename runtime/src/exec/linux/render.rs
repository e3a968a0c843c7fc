//! The plan an exec would run now, for the renderings that show or export it
//! ([`plan_now`], [`plan_preview`]): the host facts and the plan made as for an exec with
//! no flags, never on the exec path.

use super::limits::{limits_now, own_defaults};
use crate::exec::{fail, with_current_hidden};
use crate::exit::CliError;
use crate::linux::{plan, ExecPlan, Isolation, Stdio};
use crate::plan::{Gather, ResolvedPolicy};
use crate::settings::Settings;
use capsule_bundle::layout::Layout;
use capsule_bundle::store;
use std::ffi::OsString;

/// The plan an exec of `argv` in `cap` would run now at full isolation, with no flags:
/// the policy with the hidden paths of now, the clean environment, the home layer,
/// caches, revealed projects and devices (the host facts gathered as for an exec, which
/// prepares the home layer as an exec does; [`crate::plan`]), and the spec's network
/// mode (the allowlist proxy is the executor's: without it, loopback only). For `capsule
/// export` (whose bundle mounts the home layer), never on the exec path.
pub fn plan_now(
    cap: &store::OpenCapsule,
    layout: &Layout,
    argv: Vec<OsString>,
) -> Result<ExecPlan, CliError> {
    plan_for_rendering(cap, layout, argv, true)
}

/// [`plan_now`] without its side effects: nothing is created or written (the home
/// layer and cache folders are named where an exec would make them). For showing what
/// an exec enforces (`capsule inspect`).
pub fn plan_preview(
    cap: &store::OpenCapsule,
    layout: &Layout,
    argv: Vec<OsString>,
) -> Result<ExecPlan, CliError> {
    plan_for_rendering(cap, layout, argv, false)
}

/// [`plan_now`] (`make`) or [`plan_preview`].
fn plan_for_rendering(
    cap: &store::OpenCapsule,
    layout: &Layout,
    argv: Vec<OsString>,
    make: bool,
) -> Result<ExecPlan, CliError> {
    let settings = Settings::load(&layout.settings_file()).map_err(|e| fail(e.to_string()))?;
    let policy = with_current_hidden(cap, layout);
    // the limits of an exec with no flags: the operator's defaults and the spec's, and
    // capsule's own where this user can enforce them, as an exec does (a runtime that
    // cannot apply a bundle's resources refuses it)
    let (mut limits, activity_timeout) = limits_now(&settings, &cap.record.limits)?;
    let own = own_defaults(&mut limits, &settings);
    if own.needs_cgroup() {
        for (flag, r) in crate::kernel::cgroup::probe() {
            if r.is_err() {
                match flag {
                    "--memory" if own.memory.is_some() => limits.memory = None,
                    "--pids" if own.pids.is_some() => {
                        limits.pids = None;
                        limits.nproc = own.pids;
                    }
                    _ => {}
                }
            }
        }
    }
    let resolved = ResolvedPolicy {
        policy: &policy,
        isolation: Isolation::Full,
        landlock_best_effort: false,
        argv,
        env: plan::clean_env(std::env::vars_os(), &policy.pass_env),
        cwd: cap.workspace.clone(),
        workspace: cap.workspace.clone(),
        stdio: Stdio::Inherit,
        timeout: None,
        activity_timeout,
        limits,
        cgroups_found_here: false,
        disk_reserve: Default::default(),
        list_reads: false,
        list_writes: true,
        prepared: None,
        login: Vec::new(),
    };
    let facts = crate::plan::gather(
        &resolved,
        Gather {
            cap,
            settings: &settings,
            capsule_root: &layout.root,
            gpu: true,
            make,
            cgroup_procs: Vec::new(),
        },
    )
    .map_err(|e| fail(e.to_string()))?;
    Ok(crate::plan::plan(&resolved, &facts))
}

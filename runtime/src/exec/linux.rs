//! The exec pipeline on Linux ([`run`]): gate, policy, network, isolation level, cgroups,
//! the host facts and the plan made of them ([`crate::plan`]), [`crate::linux::run`] with the record's hooks, the
//! workspace snapshots, the git guard and the exec record. Also the other entries into
//! the Linux executor: probes ([`run_probe`]) and the plan renderings take
//! ([`plan_now`], [`plan_preview`]).
//!
//! Parts: `limits` (the limits of an exec and capsule's own defaults), `probe` (a spec's
//! probe in the sandbox), `render` (the plan an exec would run, for the renderings).

use super::{fail, resolve_policy, Exec, ExecOptions, Finished};
use crate::exit::{self, CliError};
use crate::isolation;
use crate::linux::{self, plan, ExecError, Hooks, Isolation, Stdio};
use crate::plan::{FactsError, Gather, ResolvedPolicy};
use crate::record::{self, ExecRecord};
use crate::settings::Settings;
use capsule_bundle::layout::{bundle_files, capsule_root, Layout};
use capsule_bundle::policy::SandboxPolicy;
use capsule_bundle::store;
use std::cell::RefCell;
use std::ffi::OsString;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

mod limits;
mod probe;
mod render;

use limits::{defaults_unheld, said_as_default, tmp_size_degraded, with_default_limits};
pub use probe::run_probe;
pub use render::{plan_now, plan_preview};

/// [`Exec::run`] on Linux.
pub fn run(x: Exec) -> Result<Finished, CliError> {
    let Exec {
        capsule,
        command,
        options: mut a,
    } = x;
    let started = Instant::now();
    let started_at = record::now_rfc3339();
    let root = capsule_root().ok_or_else(|| fail("no capsule root: set CAPSULE_ROOT or HOME"))?;
    let layout = Layout::new(root);
    let cap = store::resolve(&layout, &capsule).map_err(|e| fail(e.to_string()))?;
    tracing::debug!("resolved capsule: {:?}", started.elapsed());
    let caller_cwd = std::env::current_dir().ok();
    let cwd = plan::sandbox_cwd(&cap.workspace, caller_cwd.as_deref());

    // the launch-policy gate first: a denial starts nothing
    super::gate::exec_gate(caller_cwd.as_deref(), &cap.workspace, &cwd)?;
    tracing::debug!("gate decided: {:?}", started.elapsed());

    let policy = resolve_policy(&a, &cap, &layout)?;
    // what the sandbox refuses this exec, listed (see `crate::refusals`)
    let refusals = std::sync::Arc::new(crate::refusals::Collector::new(a.refusals));
    // the network of this exec: refuses replay, binds the allowlist proxy
    let net = crate::net::exec::ExecNet::prepare(
        &policy.network,
        &cap.bundle_dir,
        &a.secret_files,
        refusals.clone(),
    )
    .map_err(|e| {
        if e.is_usage() {
            fail(e.to_string())
        } else {
            CliError::new(exit::SANDBOX_FAILED, format!("{e}; nothing ran"))
        }
    })?;
    let settings = Settings::load(&layout.settings_file()).map_err(|e| fail(e.to_string()))?;
    let own = with_default_limits(&mut a, &settings, &cap.record.limits)?;
    let disk_reserve = match &settings.disk_reserve {
        Some(r) => linux::diskguard::Reserve::parse(r)
            .map_err(|e| fail(format!("{}: {e}", layout.settings_file().display())))?,
        None => linux::diskguard::Reserve::default(),
    };
    let events = cap.bundle_file(bundle_files::EVENTS);
    let argv: Vec<String> = command
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let mut degradation = Vec::new();
    let requested = serde_json::json!({
        // the digest `store::load` checked cap.policy against
        "policy_digest": cap.record.policy_digest,
        "effective_policy_digest": policy.digest(),
        "network": policy.network.mode.as_str(),
        "net": net.record(),
        "allow_write": policy.writable,
        "hide": a.hide,
        "reveal": a.reveal,
        "pass_env": policy.pass_env,
        "agent_login": a.agent_login.as_ref().map(|b| b.name.as_str()),
        "env": a.env.iter().map(|(k, _)| k.to_string_lossy()).collect::<Vec<_>>(),
        "read_only_workspace": a.read_only_workspace,
        "no_sandbox": a.no_sandbox,
        "tty": a.tty,
        "timeout_ms": a.timeout.map(|t| t.as_millis() as u64),
        "activity_timeout_ms": a.activity_timeout.map(|t| t.as_millis() as u64),
        // what the flags, settings and spec asked for (capsule's own defaults are in the
        // record's `limits`)
        "limits": crate::limits::Limits {
            memory: a.limits.memory.filter(|_| own.memory.is_none()),
            pids: a.limits.pids.filter(|_| own.pids.is_none()),
            ..a.limits
        },
    });
    let mut rec = ExecRecord {
        event: "exec",
        version: 1,
        capsule: cap.name.clone(),
        argv,
        cwd: cwd.clone(),
        started_at,
        requested,
        applied: None,
        degradation: Vec::new(),
        exit_status: exit::SANDBOX_FAILED,
        termination: None,
        error: None,
        duration_ms: 0.0,
        changes: None,
        changes_error: None,
        git_guard: None,
        limits: None,
        limits_reached: Vec::new(),
        refusals: Vec::new(),
        refusals_dropped: 0,
        refusals_not_listed: Vec::new(),
    };

    let mut landlock_best_effort = false;
    let mut isolation = if a.no_sandbox {
        eprintln!(
            "capsule: WARNING: --no-sandbox: running \"{}\" WITHOUT ANY ISOLATION: it can read, write and reach everything you can",
            capsule_bundle::escape::name(rec.argv.join(" ").as_bytes())
        );
        degradation.push("no sandbox at all (--no-sandbox)".to_string());
        Isolation::None
    } else if crate::kernel::landlock::abi_version() < isolation::FULL_LANDLOCK_ABI {
        let (i, best_effort) = weaker_or_refuse(&settings, &mut degradation, true)?;
        landlock_best_effort = best_effort;
        i
    } else {
        Isolation::Full
    };

    // the workspace snapshot the record compares against: taken when the command is
    // released (`before_release`, while init builds the sandbox), on this thread (it
    // reads nothing that can block; the threads it may start are joined before it
    // returns; see `record`). Taken on a
    // thread started here instead, overlapping the gate and the plan, exec was no
    // faster (median 5.70 vs 5.64 ms, one-file workspace, warm spare)
    let before: Rc<RefCell<Option<Result<record::Snapshot, String>>>> = Rc::default();
    // the stderr relay's pipe is in place before the clone, its thread starts after it
    // (in `before_release`): the executor must clone while single-threaded
    let watch = Rc::new(RefCell::new(crate::home::display::Watch::start(!a.tty)));
    let snapshot_hooks = || {
        let slot = before.clone();
        let ws = cap.workspace.clone();
        let watch = watch.clone();
        Hooks {
            refusals: Some(refusals.clone()),
            before_release: Some(Box::new(move || {
                watch.borrow_mut().spawn_relay();
                let t = Instant::now();
                *slot.borrow_mut() = Some(record::snapshot(&ws));
                tracing::debug!("snapshot before: took {:?}", t.elapsed());
            })),
            ..Hooks::default()
        }
    };
    // memory and processes: this exec's cgroups, made now; one that cannot be made
    // refuses the exec unless weaker isolation was accepted (then it is recorded), or
    // unless it is capsule's own default, which is then not enforced (and recorded).
    // With only capsule's defaults to hold, the executor finds their groups itself: a
    // warm spare waits in them already, and nothing is read or written here
    let mut limits = a.limits;
    let asked = crate::limits::Limits {
        memory: limits.memory.filter(|_| own.memory.is_none()),
        pids: limits.pids.filter(|_| own.pids.is_none()),
        ..limits
    };
    let found_here = !asked.needs_cgroup() && own.needs_cgroup();
    let mut defaults_not_enforced: Vec<String> = Vec::new();
    let t_cg = Instant::now();
    let made = if found_here {
        Ok(crate::kernel::cgroup::ExecCgroups::default())
    } else {
        loop {
            let made = crate::kernel::cgroup::ExecCgroups::create(&limits);
            let default = match &made {
                Err(e) if e.flag == "--memory" && own.memory.is_some() => &mut limits.memory,
                Err(e) if e.flag == "--pids" && own.pids.is_some() => &mut limits.pids,
                _ => break made,
            };
            if default.take().is_none() {
                break made;
            }
            if let Err(e) = made {
                let one = crate::limits::Limits {
                    memory: own.memory.filter(|_| e.flag == "--memory"),
                    pids: own.pids.filter(|_| e.flag == "--pids"),
                    ..Default::default()
                };
                defaults_not_enforced.push(defaults_unheld(&one, &e.to_string()));
            }
        }
    };
    // the plan carries only what is held (processes by RLIMIT_NPROC where their cgroup
    // cannot be made)
    if own.pids.is_some() && limits.pids.is_none() {
        limits.nproc = own.pids;
    }
    a.limits.memory = a.limits.memory.filter(|_| limits.memory.is_some());
    a.limits.pids = a.limits.pids.filter(|_| limits.pids.is_some());
    a.limits.nproc = limits.nproc;
    let mut cgroups = match made {
        Ok(c) => c,
        Err(e) if settings.accept_weaker => {
            eprintln!("capsule: warning: {e}; running without it (weaker isolation accepted)");
            degradation.push(format!("{e}; not enforced"));
            match e.flag {
                "--memory" => limits.memory = None,
                "--cpus" => limits.cpus_milli = None,
                _ => limits.pids = None,
            }
            // the other one may still be enforceable
            crate::kernel::cgroup::ExecCgroups::create(&limits).unwrap_or_else(|e| {
                degradation.push(format!("{e}; not enforced"));
                limits.memory = None;
                limits.pids = None;
                limits.cpus_milli = None;
                crate::kernel::cgroup::ExecCgroups::default()
            })
        }
        Err(e) => {
            return Err(CliError::new(
                exit::SANDBOX_FAILED,
                format!("{e}; nothing ran. To run without the limits it cannot enforce, accept weaker isolation knowingly: `capsule isolation --accept-weaker on`"),
            ))
        }
    };
    tracing::debug!("cgroups made: took {:?}", t_cg.elapsed());
    let limits_record = |limits: &crate::limits::Limits,
                         cgroups: &crate::kernel::cgroup::ExecCgroups,
                         not_enforced: &[String]| {
        serde_json::json!({
            "in_force": limits,
            "rlimits": limits.rlimits().map(|(_, f, v)| (f, v)).collect::<Vec<_>>(),
            "cgroups": cgroups.record(),
            // which of those are capsule's own defaults, and the ones not enforced here
            "capsule_defaults": crate::limits::Limits {
                memory: own.memory.filter(|_| limits.memory == own.memory),
                pids: own.pids.filter(|_| limits.pids == own.pids),
                nproc: limits.nproc,
                ..Default::default()
            },
            "capsule_defaults_not_enforced": not_enforced,
        })
    };
    if !limits.is_empty() || a.limits.needs_cgroup() || !defaults_not_enforced.is_empty() {
        rec.limits = Some(limits_record(&limits, &cgroups, &defaults_not_enforced));
    }
    tracing::debug!("plan: inputs ready: {:?}", started.elapsed());
    // the agent login paths this exec un-hid, shown in the home's view
    let login: Vec<String> = a
        .agent_login
        .iter()
        .flat_map(|b| b.login_paths.iter().cloned())
        .collect();
    let resolved = |isolation, landlock_best_effort| {
        resolved_policy(
            &a,
            &command,
            &policy,
            &cwd,
            &cap,
            (isolation, landlock_best_effort),
            &login,
            (found_here, disk_reserve),
        )
    };
    // the host as the plan needs it (the home layer, caches and the filtered ~/.npmrc
    // made in the bundle), gathered once: a retry at weaker isolation plans from it too
    let facts = crate::plan::gather(
        &resolved(isolation, landlock_best_effort),
        Gather {
            cap: &cap,
            settings: &settings,
            capsule_root: &layout.root,
            gpu: !a.no_gpu,
            make: true,
            cgroup_procs: cgroups.procs_files(),
        },
    )
    .map_err(|e| match e {
        FactsError::Device(_) => fail(e.to_string()),
        _ => CliError::new(exit::SANDBOX_FAILED, format!("{e}; nothing ran")),
    })?;
    tracing::debug!("plan: host facts gathered: {:?}", started.elapsed());
    let mut plan = crate::plan::plan(&resolved(isolation, landlock_best_effort), &facts);
    tmp_size_degraded(&a, isolation, &mut degradation);
    net.apply(&mut plan);
    tracing::debug!("plan ready: {:?}", started.elapsed());
    // held while the command runs: `home apply|discard` refuse meanwhile
    let _exec_lock = crate::home::lock::exec_shared(&cap.bundle_dir);
    // the record's room, taken before the command can fill the disk
    let events_file = record::reserve_room(&events);
    // no single file may take the disk below the reserve (the poll bounds the sum): the
    // headroom after capsule's own room was taken
    plan.limits.disk_budget = linux::diskguard::budget(&plan);
    limits.disk_budget = plan.limits.disk_budget;
    if limits.disk_budget.is_some() {
        rec.limits = Some(limits_record(&limits, &cgroups, &defaults_not_enforced));
        if !crate::kernel::seccomp::continue_supported() {
            rec.degradation.push("the disk guard: fallocate and copy_file_range are not checked before they run on this kernel (no seccomp notification that can continue a call); files are bounded by RLIMIT_FSIZE and the poll".into());
        }
    }
    let mut result = linux::run(&plan, net.hooks(snapshot_hooks(), plan.isolation));
    tracing::debug!("command ended: {:?}", started.elapsed());
    if let Err(ExecError::Namespaces(msg)) = &result {
        // full isolation is refused here: only what the operator accepted may follow
        tracing::info!("namespaces refused: {msg}");
        (isolation, landlock_best_effort) = weaker_or_refuse(&settings, &mut degradation, false)?;
        plan = crate::plan::plan(&resolved(isolation, landlock_best_effort), &facts);
        tmp_size_degraded(&a, isolation, &mut degradation);
        net.apply(&mut plan);
        plan.limits.disk_budget = linux::diskguard::budget(&plan);
        result = linux::run(&plan, net.hooks(snapshot_hooks(), plan.isolation));
    }
    // the snapshot after the command
    let after = {
        let before = before.borrow();
        let before = before.as_ref().and_then(|b| b.as_ref().ok());
        record::snapshot_after(before, &cap.workspace)
    };
    tracing::debug!("snapshot after: {:?}", started.elapsed());
    // the operator's own git in the workspace must not run what the command planted
    rec.git_guard = guard_git(&cap, after.as_ref().ok());
    tracing::debug!("git guard: {:?}", started.elapsed());
    let needs_display = match Rc::try_unwrap(watch) {
        Ok(w) => w.into_inner().finish(),
        Err(_) => false,
    };
    tracing::debug!("stderr relay finished: {:?}", started.elapsed());
    if isolation == Isolation::Weaker {
        eprintln!(
            "capsule: warning: weaker isolation (Landlock + seccomp, no namespaces): {}",
            degradation.join("; ")
        );
    } else if landlock_best_effort {
        eprintln!(
            "capsule: warning: weaker isolation (namespaces + seccomp, Landlock only as far as this kernel allows): {}",
            degradation.join("; ")
        );
    }
    net.finish();
    degradation.extend(net.degradation());
    refusals.say_after();
    rec.refusals = refusals.refusals();
    rec.refusals_dropped = refusals.dropped();
    if isolation != Isolation::None {
        rec.refusals_not_listed = crate::refusals::listing::kinds(
            isolation == Isolation::Full,
            crate::kernel::seccomp::continue_supported(),
            a.list_reads,
            linux::fusemask::usable(),
        )
        .into_iter()
        .chain(a.no_list_writes.then(crate::refusals::listing::writes_off))
        .filter(|k| !k.listed)
        .map(|k| format!("{}: {}", k.kind, k.how))
        .collect();
    }
    let log = cap.bundle_file(bundle_files::REFUSALS);
    if let Err(e) = refusals.append_to(&log, &rec.started_at) {
        eprintln!("capsule: cannot append to {}: {e}", log.display());
    }
    rec.degradation = degradation;

    if let (true, Ok(o)) = (found_here, &result) {
        // capsule's defaults: the groups the executor found (or why none)
        cgroups = crate::kernel::cgroup::ExecCgroups::found(o.found.groups.clone(), &limits);
        if let Some(why) = &o.found.not_enforced {
            limits.memory = None;
            limits.pids = None;
            limits.nproc = own.pids;
            defaults_not_enforced.push(defaults_unheld(&own, why));
        }
        rec.limits = Some(limits_record(&limits, &cgroups, &defaults_not_enforced));
    }
    for m in &defaults_not_enforced {
        rec.degradation.push(format!("{m}; not enforced"));
    }
    if let Ok(o) = &result {
        // a warm spare's own groups, taken as they are: what it reached is read there
        if !o.cgroup_dirs.is_empty() {
            cgroups.ran_in(&o.cgroup_dirs);
            if let Some(l) = rec.limits.as_mut() {
                l["cgroups"] = cgroups.record();
            }
        }
    }
    let code = match &result {
        Ok(o) => {
            rec.applied = serde_json::to_value(&o.applied).ok();
            rec.termination = serde_json::to_value(o.termination).ok();
            let killed = match (o.termination, a.activity_timeout) {
                (linux::Termination::ActivityTimeout, Some(d)) => {
                    Some(crate::limits::silent_for(d))
                }
                (linux::Termination::Signaled(s), _) => crate::limits::killed_by(&limits, s),
                _ => None,
            };
            rec.limits_reached.extend(killed);
            if let Some(b) = &o.disk_reserve_reached {
                rec.limits_reached.push(b.message());
                // and a refusal, with the grant that allows more
                refusals.add(crate::refusals::Event {
                    kind: crate::refusals::Kind::Write,
                    target: crate::refusals::path_target(&b.path),
                    program: String::new(),
                    pid: None,
                    grant: Some(
                        "a smaller \"disk_reserve\" in $CAPSULE_ROOT/settings.json (\"1G\", \"1%\"; \"off\": no guard)"
                            .into(),
                    ),
                    reason: Some(if b.inodes {
                        format!(
                            "the filesystem's free inodes fell below the disk reserve of {} inodes",
                            b.reserve
                        )
                    } else {
                        format!(
                            "the filesystem's free space fell below the disk reserve of {}",
                            crate::limits::show_size(b.reserve)
                        )
                    }),
                    header: None,
                });
                rec.refusals = refusals.refusals();
            }
            rec.limits_reached.extend(
                cgroups
                    .reached()
                    .into_iter()
                    .map(|m| said_as_default(m, &own, &limits)),
            );
            for m in &rec.limits_reached {
                eprintln!("capsule: {m}");
            }
            o.termination.exit_status()
        }
        Err(e) => {
            rec.error = Some(e.to_string());
            match e {
                ExecError::NotFound { .. } => exit::NOT_FOUND,
                ExecError::NotExecutable { .. } => exit::NOT_EXECUTABLE,
                ExecError::Setup(_) | ExecError::Namespaces(_) => exit::SANDBOX_FAILED,
            }
        }
    };
    rec.exit_status = code;
    if a.no_list_writes && code != 0 && a.refusals != crate::refusals::Say::Quiet {
        // it may have failed on a write the sandbox refused: say that it would not show
        eprintln!(
            "capsule: refused writes are not listed in this exec (--no-list-writes): a write outside the writable paths failed unexplained (EACCES, EROFS); run it again without --no-list-writes to see them"
        );
    }
    if needs_display && code != 0 {
        use crate::home::display;
        let what = rec
            .argv
            .first()
            .map(String::as_str)
            .unwrap_or("the command");
        let what = capsule_bundle::escape::name(what.as_bytes());
        eprintln!("capsule: {what} {}", display::NEEDS_DISPLAY);
        if let Err(e) = display::record(&events, &cap.name, &rec.argv, code) {
            tracing::warn!(
                "cannot record the display event in {}: {e}",
                events.display()
            );
        }
    }
    tracing::debug!("record prepared: {:?}", started.elapsed());
    let before = before
        .borrow_mut()
        .take()
        .unwrap_or_else(|| Err("the command did not start".into()));
    match (before, after) {
        (Ok(b), Ok(after)) => rec.changes = Some(record::diff(&b, &after, &cap.workspace)),
        (Err(e), _) | (_, Err(e)) => rec.changes_error = Some(e),
    }
    tracing::debug!("changes computed: {:?}", started.elapsed());
    rec.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    let appended = match &events_file {
        Ok(f) => rec.append_into(f),
        Err(_) => rec.append(&events),
    };
    let mut code = code;
    if let Err(e) = appended {
        // the command ran and its record is lost: the status says so (the command's own
        // is on stderr)
        eprintln!(
            "capsule: cannot append the exec record to {}: {e}; the command's exit status was {code} (exit {})",
            events.display(),
            exit::RECORD_LOST
        );
        code = exit::RECORD_LOST;
    }
    // the next exec's cgroups, made now that this one is done (none without limits)
    cgroups.make_spares();
    Ok(Finished {
        record: Some(rec),
        exit_status: code,
        error: result.err().map(|e| e.to_string()),
    })
}

/// Check the workspace's git dirs for the operator's host git
/// ([`capsule_bundle::git::hostgit::guard_workspace`]) with the gitlinks of the snapshot
/// after the command; say on stderr what was quarantined. Returns the record's
/// `git_guard` (only when something was found or could not be checked).
fn guard_git(
    cap: &store::OpenCapsule,
    after: Option<&record::Snapshot>,
) -> Option<serde_json::Value> {
    let t = Instant::now();
    let links = after.and_then(|s| s.gitlinks());
    let report = capsule_bundle::git::hostgit::guard_workspace(
        &cap.workspace,
        &cap.bundle_dir,
        links.as_deref(),
    );
    tracing::debug!(
        "git guard: took {:?} (full check: {})",
        t.elapsed(),
        report.checked
    );
    let line = report.summary_line()?;
    eprintln!("{line}");
    serde_json::to_value(&report).ok()
}

/// What the executor runs at for an isolation decision: `(isolation, landlock_best_effort)`.
/// Weaker isolation keeps the namespaces whenever they are available (`namespaces_ok`:
/// false once the kernel refused them), so "weaker" then means only the Landlock layer is
/// missing or partial; without namespaces it is Landlock + seccomp.
pub fn isolation_for(level: &isolation::IsolationLevel, namespaces_ok: bool) -> (Isolation, bool) {
    use isolation::IsolationLevel;
    match level {
        IsolationLevel::Full => (Isolation::Full, false),
        IsolationLevel::Weaker(d) if d.namespaces && namespaces_ok => (Isolation::Full, true),
        IsolationLevel::Weaker(_) => (Isolation::Weaker, false),
    }
}

/// Weaker isolation if the operator accepted it and the machine allows it (keeping the
/// namespaces when they work and `namespaces_ok`: then only Landlock is weaker; see
/// [`isolation_for`]); else the refusal that says what is missing and how to
/// accept. Returns the isolation and whether Landlock is best effort.
pub fn weaker_or_refuse(
    settings: &Settings,
    degradation: &mut Vec<String>,
    namespaces_ok: bool,
) -> Result<(Isolation, bool), CliError> {
    let report = isolation::probe();
    match isolation::decide(&report, settings) {
        Ok(level) => {
            if let isolation::IsolationLevel::Weaker(d) = &level {
                degradation.extend(d.missing.iter().cloned());
            }
            Ok(isolation_for(&level, namespaces_ok))
        }
        Err(m) => Err(CliError::new(exit::SANDBOX_FAILED, m.message)),
    }
}

/// The exec `a` of `command` as the plan takes it: `policy` (resolved for this exec),
/// the clean environment with the exec's own variables, at `isolation` (and whether
/// Landlock is best effort), `login` the agent login paths it un-hid.
fn resolved_policy<'p>(
    a: &ExecOptions,
    command: &[OsString],
    policy: &'p SandboxPolicy,
    cwd: &Path,
    cap: &store::OpenCapsule,
    (isolation, landlock_best_effort): (Isolation, bool),
    login: &[String],
    (cgroups_found_here, disk_reserve): (bool, crate::limits::DiskReserve),
) -> ResolvedPolicy<'p> {
    let mut env = plan::clean_env(std::env::vars_os(), &policy.pass_env);
    super::set_env(&mut env, &a.env);
    ResolvedPolicy {
        policy,
        isolation,
        landlock_best_effort,
        argv: command.to_vec(),
        env,
        cwd: cwd.to_path_buf(),
        workspace: cap.workspace.clone(),
        stdio: if a.tty { Stdio::Tty } else { Stdio::Inherit },
        timeout: a.timeout,
        activity_timeout: a.activity_timeout,
        limits: a.limits,
        cgroups_found_here,
        disk_reserve,
        list_reads: a.list_reads,
        list_writes: !a.no_list_writes,
        // the root is prepared once per capsule and policy, and joined by each exec
        prepared: Some(crate::linux::prepared::dir(&cap.bundle_dir)),
        login: login.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `decide` on a machine with these walls, weaker accepted, then the executor mapping.
    fn mapped(ns: bool, abi: u32, namespaces_ok: bool) -> (Isolation, bool) {
        use crate::isolation::*;
        let report = test_support::report(ns, abi, true);
        let settings = crate::settings::Settings {
            accept_weaker: true,
            ..Default::default()
        };
        let level = decide(&report, &settings).expect("weaker accepted");
        isolation_for(&level, namespaces_ok)
    }

    #[test]
    fn weaker_keeps_namespaces_when_only_landlock_is_missing() {
        // everything there: full, Landlock required
        assert_eq!(mapped(true, 7, true), (Isolation::Full, false));
        // namespaces but Landlock too old (ABI 2) or absent: namespaces kept, Landlock
        // best effort
        assert_eq!(mapped(true, 2, true), (Isolation::Full, true));
        assert_eq!(mapped(true, 0, true), (Isolation::Full, true));
        // no namespaces: Landlock + seccomp, Landlock required
        assert_eq!(mapped(false, 7, true), (Isolation::Weaker, false));
        assert_eq!(mapped(false, 2, true), (Isolation::Weaker, false));
        // namespaces reported available but refused when cloning: no namespaces
        assert_eq!(mapped(true, 2, false), (Isolation::Weaker, false));
    }
}

//! The exec plan, made in one place: [`plan`] turns the resolved policy of one exec
//! ([`ResolvedPolicy`]: the capsule's policy with this exec's choices, decided by
//! `crate::exec`) and a snapshot of the host ([`HostFacts`], gathered before by
//! [`facts::gather`]) into the [`ExecPlan`] the Linux executor runs and the renderings
//! show (`capsule export`'s OCI bundle, `capsule inspect`). It is a pure function: no
//! system call, nothing read or made; the same input gives the same plan.
//!
//! What it puts together, in order:
//! - the mount plan of the policy ([`crate::linux::plan::mount_plan_from`]: system dirs,
//!   `/dev` with the devices, `/proc`, the capsule's `/tmp`, the home read-only, every
//!   policy path by depth, seals), `/tmp` bounded for `--tmp-size`;
//! - no display: `DISPLAY`, `WAYLAND_DISPLAY`, `WAYLAND_SOCKET`, `XAUTHORITY` are removed;
//! - the home becomes a view of only what development tools need, written through the
//!   home layer ([`crate::home::view`], [`crate::home::layer`]), mounted right after the
//!   home's own read-only bind and before every deeper step, so hidden paths inside its
//!   entries are still masked on top of it;
//! - each package cache becomes an overlay over the person's cache (or the capsule's own
//!   directory when the person has none), right after the home view;
//! - `~/.npmrc` (hidden: it holds auth tokens) is shown as a filtered copy without its
//!   auth lines, read-only, so npm still finds its registry settings;
//! - the folders opened with `capsule reveal add` for the capsule's source folder are
//!   bound read-only twice: at their own path, and at the path the source's relative
//!   references reach from the workspace (`<workspace>/../shared`), so `../shared` works
//!   from the copy exactly as from the source folder;
//! - the hidden credentials of the home as masks capsule watches, where it can
//!   ([`crate::linux::fusemask`]), and the view's points and absent paths; a mask below
//!   the home that the view leaves absent anyway is dropped.
//!
//! The plan's policy (the Landlock input) gets the home and the caches as writable roots
//! and the revealed views as readable, under full isolation only: without namespaces
//! there is no overlay, and the real home must stay read-only. The network of the exec
//! (`crate::net::exec::ExecNet::apply`) is added to the plan by the pipeline after it.
//!
//! The macOS plan, which the Seatbelt rendering translates, is [`seatbelt`]'s.

pub mod container;
pub mod facts;
pub mod seatbelt;

pub use facts::{gather, FactsError, Gather, HomeFacts, HostFacts, Reveals};

use crate::home::devices::DEFAULT_DEVICES;
use crate::home::{reveal, view};
use crate::linux::plan::{mount_plan_from, with_tmp_size, MountStep};
use crate::linux::{fusemask, ExecPlan, Isolation, Stdio};
use capsule_bundle::policy::SandboxPolicy;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Environment variables that would point a program at a display server.
pub const DISPLAY_ENV: &[&str] = &["DISPLAY", "WAYLAND_DISPLAY", "WAYLAND_SOCKET", "XAUTHORITY"];

/// One exec as decided before its plan: the capsule's policy resolved for it (the hidden
/// paths of now, its flags; `crate::exec::resolve_policy`) and what the exec asked for.
#[derive(Debug, Clone)]
pub struct ResolvedPolicy<'a> {
    pub policy: &'a SandboxPolicy,
    pub isolation: Isolation,
    /// Landlock as far as the kernel allows (weaker isolation accepted).
    pub landlock_best_effort: bool,
    pub argv: Vec<OsString>,
    /// The command's clean environment with the exec's own variables
    /// ([`crate::linux::plan::clean_env`]).
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
    /// The capsule's workspace.
    pub workspace: PathBuf,
    pub stdio: Stdio,
    pub timeout: Option<Duration>,
    pub activity_timeout: Option<Duration>,
    pub limits: crate::limits::Limits,
    /// The cgroup limits are capsule's own defaults: the executor finds their groups
    /// itself (see [`ExecPlan::cgroups_found_here`]).
    pub cgroups_found_here: bool,
    /// What the disk guard keeps free on every host filesystem the command can write.
    pub disk_reserve: crate::limits::DiskReserve,
    pub list_reads: bool,
    /// List refused writes (false: `exec --no-list-writes`; see [`ExecPlan::list_writes`]).
    pub list_writes: bool,
    /// Where the capsule's prepared roots live (`None`: built for this exec alone).
    pub prepared: Option<PathBuf>,
    /// The agent login paths (relative to the home) this exec un-hid, shown in the view.
    pub login: Vec<String>,
}

/// The plan of the exec `r` on the host `f` describes (see the module docs). No system
/// call: unit-testable with made-up facts.
pub fn plan(r: &ResolvedPolicy, f: &HostFacts) -> ExecPlan {
    let full = r.isolation == Isolation::Full;
    let policy = r.policy;
    let mut env = r.env.clone();
    if !full {
        // no mount namespace: the capsule's tmp is where it is
        for (k, v) in env.iter_mut() {
            if k == "TMPDIR" {
                *v = policy.tmp_dir.clone().into_os_string();
            }
        }
    }
    env.retain(|(k, _)| !DISPLAY_ENV.iter().any(|d| k.as_os_str() == *d));
    let devices: Vec<String> = f
        .devices
        .iter()
        .filter(|n| !DEFAULT_DEVICES.iter().any(|d| Path::new(d) == n.as_path()))
        .map(|n| n.display().to_string())
        .collect();
    let mounts = if full {
        mount_plan_from(policy, &devices, &f.system)
    } else {
        Vec::new()
    };
    let mut plan = ExecPlan {
        stdio: r.stdio,
        timeout: r.timeout,
        activity_timeout: r.activity_timeout,
        limits: r.limits,
        list_reads: r.list_reads,
        list_writes: r.list_writes,
        prepared: r.prepared.clone(),
        landlock_best_effort: r.landlock_best_effort,
        cgroup_procs: f.cgroup_procs.clone(),
        cgroups_found_here: r.cgroups_found_here,
        disk_reserve: r.disk_reserve,
        ..ExecPlan::with_mounts(
            policy,
            r.isolation,
            r.argv.clone(),
            env,
            r.cwd.clone(),
            mounts,
        )
    };
    if let Some(size) = r.limits.tmp_size {
        with_tmp_size(&mut plan.mounts, &policy.tmp_dir, size);
    }
    plan.policy.devices = devices;
    if !full {
        return plan;
    }
    let view_at = f.home.as_ref().map(|h| with_home(&mut plan, h));
    if let Some(rv) = &f.reveals {
        with_reveals(&mut plan, rv, &r.workspace);
    }
    if let (Some(i), Some(h)) = (view_at, &f.home) {
        finish_view(&mut plan, i, h, &r.login);
    }
    plan
}

/// Index before the trailing `ReadOnly` seals of a plan.
fn before_seals(steps: &[MountStep]) -> usize {
    let mut i = steps.len();
    while i > 0 && matches!(steps[i - 1], MountStep::ReadOnly { .. }) {
        i -= 1;
    }
    i
}

/// Where the home view goes: right after a bind of the home itself, else before the
/// first step strictly below home, else before the seals.
fn home_position(steps: &[MountStep], home: &Path) -> usize {
    if let Some(i) = steps
        .iter()
        .position(|s| matches!(s, MountStep::Bind { dst, .. } if dst == home))
    {
        return i + 1;
    }
    steps
        .iter()
        .position(|s| {
            let d = s.dst();
            d.starts_with(home) && d != home
        })
        .unwrap_or_else(|| before_seals(steps))
}

/// The home view, the caches after it and `~/.npmrc`'s filtered copy; returns where the
/// view is in the plan's mounts.
fn with_home(plan: &mut ExecPlan, h: &HomeFacts) -> usize {
    let home = &h.home;
    let mut at = home_position(&plan.mounts, home);
    let view_at = at;
    plan.mounts.insert(
        at,
        MountStep::HomeView(view::HomeView {
            entries: h.entries.clone(),
            points: Vec::new(),
            absent: Vec::new(),
            src: home.clone(),
            dst: home.clone(),
            upper: h.layer.upper.clone(),
            works: view::works_dir(&h.layer.work),
            work: h.layer.work.clone(),
        }),
    );
    at += 1;
    plan.policy.writable.push(home.clone());
    for c in &h.caches {
        // a cache inside a hidden path stays hidden (its mask comes later anyway)
        let step = match &c.lower {
            Some(lower) => MountStep::Overlay {
                lower: vec![lower.clone()],
                upper: c.upper.clone(),
                work: c.work.clone(),
                dst: c.target.clone(),
            },
            None => MountStep::Bind {
                src: c.upper.clone(),
                dst: c.target.clone(),
                rw: true,
                optional: false,
            },
        };
        plan.mounts.insert(at, step);
        at += 1;
        plan.policy.writable.push(c.target.clone());
    }
    if let Some(copy) = &h.npmrc {
        let at = before_seals(&plan.mounts);
        plan.mounts.insert(
            at,
            MountStep::Bind {
                src: copy.clone(),
                dst: home.join(".npmrc"),
                rw: false,
                optional: false,
            },
        );
    }
    view_at
}

/// The view of `revealed` (canonical) seen from `workspace` through the same relative
/// path as from `source`: `source/../shared` -> `workspace/../shared`.
pub fn mapped_path(revealed: &Path, source: &Path, workspace: &Path) -> PathBuf {
    let rel = reveal::relative_to(revealed, source);
    reveal::normalize(&workspace.join(rel))
}

/// Each revealed folder read-only at its own path and at its place next to the workspace
/// (when that lies in the capsule root, outside the bundles and the workspace).
fn with_reveals(plan: &mut ExecPlan, rv: &Reveals, workspace: &Path) {
    let root = &rv.root;
    for r in &rv.folders {
        let mapped = mapped_path(r, &rv.source, workspace);
        let at = before_seals(&plan.mounts);
        let mut steps = vec![MountStep::Bind {
            src: r.clone(),
            dst: r.clone(),
            rw: false,
            optional: true,
        }];
        plan.policy.revealed.push(r.clone());
        let overlaps_ws = mapped.starts_with(workspace) || workspace.starts_with(&mapped);
        if mapped != *r
            && !overlaps_ws
            && mapped.starts_with(root)
            && !mapped.starts_with(root.join("bundles"))
        {
            steps.push(MountStep::Bind {
                src: r.clone(),
                dst: mapped.clone(),
                rw: false,
                optional: true,
            });
            plan.policy.revealed.push(mapped);
        } else if mapped != *r {
            tracing::warn!(
                "revealed folder {}: its place next to the workspace ({}) is not inside the capsule root; only its own path is shown",
                r.display(),
                mapped.display()
            );
        }
        for (i, s) in steps.into_iter().enumerate() {
            plan.mounts.insert(at + i, s);
        }
    }
}

/// The watched masks, and the view at `i`'s points and absent paths: every later step
/// below the home gets its place in the view; a mask below the home that no entry or
/// place of the view shows has nothing to hide (the view leaves it absent): dropped, so
/// that hundreds of hidden paths in the home cost the plan, its digest and the prepared
/// root's fingerprint nothing.
fn finish_view(plan: &mut ExecPlan, i: usize, h: &HomeFacts, login: &[String]) {
    let login: Vec<&str> = login.iter().map(String::as_str).collect();
    // the hidden credentials the host has are shown as masks capsule watches, where it
    // can: a read of one is then listed by name
    plan.watched = fusemask::select(&plan.policy, &h.home, &plan.mounts, &h.credentials);
    for w in &plan.watched {
        let masked = plan
            .mounts
            .iter()
            .any(|s| matches!(s, MountStep::Mask { dst, carve_outs: false } if dst == w));
        if !masked {
            let at = before_seals(&plan.mounts);
            plan.mounts.insert(
                at,
                MountStep::Mask {
                    dst: w.clone(),
                    carve_outs: false,
                },
            );
        }
    }
    let (head, later) = plan.mounts.split_at_mut(i + 1);
    if let Some(MountStep::HomeView(v)) = head.last_mut() {
        v.points = view::points(&v.dst, &v.entries, later, &plan.watched);
        v.absent = view::absent(v, later, &plan.policy, &login, &plan.watched);
        let v = v.clone();
        // a path the facts did not look at counts as held: its mask is kept
        let mut in_upper = |rel: &Path| h.in_upper.get(rel.as_os_str()).copied().unwrap_or(true);
        let mut k = 0;
        let watched = &plan.watched;
        plan.mounts.retain(|s| {
            k += 1;
            k <= i + 1 || !view::leaves_absent(&v, s, watched, &mut in_upper)
        });
    }
}

#[cfg(test)]
mod tests;

//! Wiring the task's own environment into an exec's plan ([`crate::linux::ExecPlan`]):
//!
//! - the home directory becomes a view of only what development tools need, written
//!   through the home layer (upper/work in the bundle, see [`super::layer`] and
//!   [`super::view`]), mounted right after the home's own read-only bind and before every
//!   deeper step, so hidden paths inside its entries are still masked on top of it;
//! - each package cache becomes an overlay over the person's cache (or the capsule's own
//!   directory when the person has none), right after the home overlay;
//! - the folders opened with `capsule reveal add` for the capsule's source folder are bound
//!   read-only twice: at their own path, and at the path the source's relative references
//!   reach from the workspace (`<workspace>/../shared`), so `../shared` works from the copy
//!   exactly as from the source folder;
//! - `/dev` gets the GPU's nodes (unless `--no-gpu`) and the validated `sandbox.devices`;
//! - no display: `DISPLAY`, `WAYLAND_DISPLAY`, `WAYLAND_SOCKET`, `XAUTHORITY` are removed;
//! - `~/.npmrc` (hidden: it holds auth tokens) is shown as a filtered copy without its auth
//!   lines, read-only, so npm still finds its registry settings.
//!
//! The plan's policy (the Landlock input) gets the home and the caches as writable roots and
//! the revealed views as readable, under full isolation only: without namespaces there is no
//! overlay, and the real home must stay read-only.

use super::{caches, devices, layer, reveal, view};
use crate::linux::plan::{option_safe, MountStep};
use crate::linux::sys::canonicalize;
use crate::linux::{ExecPlan, Isolation};
use crate::settings::Settings;
use capsule_bundle::store::OpenCapsule;
use std::path::{Path, PathBuf};

/// Why the environment could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// A refused or unusable `sandbox.devices` entry (bad input).
    #[error(transparent)]
    Device(#[from] devices::DeviceError),
    /// The layer or caches could not be made.
    #[error("{0}")]
    Setup(String),
}

/// Environment variables that would point a program at a display server.
pub const DISPLAY_ENV: &[&str] = &["DISPLAY", "WAYLAND_DISPLAY", "WAYLAND_SOCKET", "XAUTHORITY"];

/// Index before the trailing `ReadOnly` seals of a plan.
fn before_seals(steps: &[MountStep]) -> usize {
    let mut i = steps.len();
    while i > 0 && matches!(steps[i - 1], MountStep::ReadOnly { .. }) {
        i -= 1;
    }
    i
}

/// Where the home overlay goes: right after a bind of the home itself, else before the
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

fn safe(p: &Path) -> Result<(), EnvError> {
    if option_safe(p) {
        Ok(())
    } else {
        Err(EnvError::Setup(format!(
            "{}: contains ',', ':' or '\\', which overlay mount options cannot carry; move the capsule root or home",
            p.display()
        )))
    }
}

/// The view of `revealed` (canonical) seen from `workspace` through the same relative
/// path as from `source`: `source/../shared` -> `workspace/../shared`.
pub fn mapped_path(revealed: &Path, source: &Path, workspace: &Path) -> PathBuf {
    let rel = reveal::relative_to(revealed, source);
    reveal::normalize(&workspace.join(rel))
}

/// What [`extend`] added, for the exec record and `inspect`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct EnvReport {
    pub home_layer: Option<PathBuf>,
    pub caches: Vec<String>,
    pub revealed: Vec<(PathBuf, PathBuf)>,
    pub devices: Vec<String>,
}

/// Add the task's environment to `plan` (see the module docs), making what it needs in
/// the bundle: the home layer's folders and baseline, the cache folders, the filtered
/// `~/.npmrc`. `login`: the agent login paths (relative to home) this exec un-hid, shown
/// in the home's view.
pub fn extend(
    plan: &mut ExecPlan,
    cap: &OpenCapsule,
    settings: &Settings,
    gpu: bool,
    capsule_root: &Path,
    login: &[&str],
) -> Result<EnvReport, EnvError> {
    wire(plan, cap, settings, gpu, capsule_root, true, login)
}

/// The same plan as [`extend`] gives, but nothing is created or written: for showing
/// what an exec would enforce (`capsule inspect`). The home layer and cache folders are
/// named where an exec would make them.
pub fn describe(
    plan: &mut ExecPlan,
    cap: &OpenCapsule,
    settings: &Settings,
    gpu: bool,
    capsule_root: &Path,
) -> Result<EnvReport, EnvError> {
    wire(plan, cap, settings, gpu, capsule_root, false, &[])
}

/// [`extend`] (`make`) or [`describe`].
fn wire(
    plan: &mut ExecPlan,
    cap: &OpenCapsule,
    settings: &Settings,
    gpu: bool,
    capsule_root: &Path,
    make: bool,
    login: &[&str],
) -> Result<EnvReport, EnvError> {
    let t0 = std::time::Instant::now();
    let mut report = EnvReport::default();
    plan.env
        .retain(|(k, _)| !DISPLAY_ENV.iter().any(|d| k.as_os_str() == *d));
    // devices: refuse bad spec entries whatever the isolation
    let dev_root = Path::new("/dev");
    let names = devices::device_plan(&cap.policy.devices, gpu, dev_root)?;
    let extra: Vec<String> = names
        .iter()
        .filter(|n| {
            !devices::DEFAULT_DEVICES
                .iter()
                .any(|d| Path::new(d) == n.as_path())
        })
        .map(|n| n.display().to_string())
        .collect();
    report.devices = extra.clone();
    plan.policy.devices = extra.clone();
    for s in plan.mounts.iter_mut() {
        if let MountStep::Dev { extra: e, .. } = s {
            *e = extra.clone();
        }
    }
    if plan.isolation != Isolation::Full {
        return Ok(report);
    }
    tracing::trace!("task env: devices: {:?}", t0.elapsed());
    let setup = |e: String| EnvError::Setup(e);
    let root = canonicalize(capsule_root).unwrap_or_else(|_| capsule_root.to_path_buf());

    let mut view_at = None;
    if let Some(home) = cap.policy.home.clone().filter(|h| h.is_dir()) {
        let cache_dirs = caches::host_cache_dirs(&home);
        // what the baseline leaves out, needed only the first time (when it is recorded);
        // layer_for answers Some here (the policy has a home)
        let skip = || {
            super::layer_for(&cap.bundle_dir, &cap.policy, Some(&root))
                .map(|lay| lay.excluded.into_iter().chain(lay.hidden).collect())
                .unwrap_or_default()
        };
        let paths = if make {
            layer::prepare_with(&cap.bundle_dir, &home, skip).map_err(|e| setup(e.to_string()))?
        } else {
            layer::layer_paths(&cap.bundle_dir)
        };
        for p in [&home, &paths.upper, &paths.work] {
            safe(p)?;
        }
        let mut at = home_position(&plan.mounts, &home);
        view_at = Some(at);
        plan.mounts.insert(
            at,
            MountStep::HomeView(view::HomeView {
                entries: view::entries(&home, &plan.policy, &plan.env, login),
                points: Vec::new(),
                absent: Vec::new(),
                src: home.clone(),
                dst: home.clone(),
                upper: paths.upper.clone(),
                works: view::works_dir(&paths.work),
                work: paths.work.clone(),
            }),
        );
        at += 1;
        plan.policy.writable.push(home.clone());
        report.home_layer = Some(paths.upper);
        tracing::trace!("task env: home view: {:?}", t0.elapsed());

        let layers = if make {
            caches::prepare(&cap.bundle_dir, &cache_dirs)
        } else {
            Ok(caches::describe(&cap.bundle_dir, &cache_dirs))
        };
        let layers = layers.map_err(|e| {
            setup(format!(
                "package caches in {}: {e}",
                cap.bundle_dir.display()
            ))
        })?;
        for c in layers {
            // a cache inside a hidden path stays hidden (its mask comes later anyway)
            safe(&c.upper)?;
            safe(&c.work)?;
            let step = match &c.lower {
                Some(lower) => {
                    safe(lower)?;
                    MountStep::Overlay {
                        lower: vec![lower.clone()],
                        upper: c.upper.clone(),
                        work: c.work.clone(),
                        dst: c.target.clone(),
                    }
                }
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
            report.caches.push(c.tool.to_string());
        }
        tracing::trace!("task env: caches: {:?}", t0.elapsed());

        // npm reads registry settings from ~/.npmrc, which is hidden for its auth lines:
        // show a copy without them, read-only, over the mask
        let npmrc = home.join(".npmrc");
        if let Ok(text) = std::fs::read_to_string(&npmrc) {
            let copy = cap.bundle_dir.join("npmrc.filtered");
            if make {
                std::fs::write(&copy, caches::filtered_npmrc(&text))
                    .map_err(|e| setup(format!("{}: {e}", copy.display())))?;
            }
            let at = before_seals(&plan.mounts);
            plan.mounts.insert(
                at,
                MountStep::Bind {
                    src: copy,
                    dst: npmrc,
                    rw: false,
                    optional: false,
                },
            );
        }
    }

    if let Some(source) = &cap.record.source {
        let source = canonicalize(source).unwrap_or_else(|_| source.clone());
        for r in reveal::opened_for(settings, &source) {
            let Ok(r) = canonicalize(&r) else {
                tracing::warn!("revealed folder {} is gone; skipped", r.display());
                continue;
            };
            let mapped = mapped_path(&r, &source, &cap.workspace);
            let at = before_seals(&plan.mounts);
            let mut steps = vec![MountStep::Bind {
                src: r.clone(),
                dst: r.clone(),
                rw: false,
                optional: true,
            }];
            plan.policy.revealed.push(r.clone());
            let overlaps_ws =
                mapped.starts_with(&cap.workspace) || cap.workspace.starts_with(&mapped);
            if mapped != r
                && !overlaps_ws
                && mapped.starts_with(&root)
                && !mapped.starts_with(root.join("bundles"))
            {
                steps.push(MountStep::Bind {
                    src: r.clone(),
                    dst: mapped.clone(),
                    rw: false,
                    optional: true,
                });
                plan.policy.revealed.push(mapped.clone());
            } else if mapped != r {
                tracing::warn!(
                    "revealed folder {}: its place next to the workspace ({}) is not inside the capsule root; only its own path is shown",
                    r.display(),
                    mapped.display()
                );
            }
            for (i, s) in steps.into_iter().enumerate() {
                plan.mounts.insert(at + i, s);
            }
            report.revealed.push((r, mapped));
        }
    }
    tracing::trace!("task env: npmrc, reveals: {:?}", t0.elapsed());
    // every later step below the home gets its place in the view; a mask below the home
    // that no entry or place of the view shows has nothing to hide (the view leaves it
    // absent): dropped, so that hundreds of hidden paths in the home cost the plan, its
    // digest and the prepared root's fingerprint nothing
    if let Some(i) = view_at {
        // the hidden credentials the host has are shown as masks capsule watches, where it
        // can (see `crate::linux::fusemask`): a read of one is then listed by name
        if let Some(MountStep::HomeView(v)) = plan.mounts.get(i) {
            let home = v.dst.clone();
            plan.watched = crate::linux::fusemask::watched(&plan.policy, &home, &plan.mounts);
        }
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
            v.absent = view::absent(v, later, &plan.policy, login, &plan.watched);
            let v = v.clone();
            let mut seen = std::collections::HashMap::new();
            let mut in_upper = |rel: &Path| view::held_in(&v.upper, rel, &mut seen);
            let mut k = 0;
            let watched = &plan.watched;
            plan.mounts.retain(|s| {
                k += 1;
                k <= i + 1 || !view::leaves_absent(&v, s, watched, &mut in_upper)
            });
        }
    }
    tracing::trace!("task env: points: {:?}", t0.elapsed());
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_paths() {
        let ws = Path::new("/root/.local/share/capsule/workspaces/app");
        assert_eq!(
            mapped_path(Path::new("/src/shared"), Path::new("/src/app"), ws),
            PathBuf::from("/root/.local/share/capsule/workspaces/shared")
        );
        assert_eq!(
            mapped_path(Path::new("/src/libs/x"), Path::new("/src/app"), ws),
            PathBuf::from("/root/.local/share/capsule/workspaces/libs/x")
        );
    }

    #[test]
    fn home_overlay_goes_before_deeper_steps() {
        let home = Path::new("/root");
        let steps = vec![
            MountStep::Bind {
                src: "/usr".into(),
                dst: "/usr".into(),
                rw: false,
                optional: true,
            },
            MountStep::Bind {
                src: "/root".into(),
                dst: "/root".into(),
                rw: false,
                optional: true,
            },
            MountStep::Mask {
                dst: "/root/.ssh".into(),
                carve_outs: false,
            },
            MountStep::ReadOnly { dst: "/x".into() },
        ];
        assert_eq!(home_position(&steps, home), 2);
        assert_eq!(home_position(&steps[2..], home), 0);
        assert_eq!(before_seals(&steps), 3);
    }
}

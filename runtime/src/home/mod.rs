//! The task's own environment: the home layer and its review, package caches of
//! the capsule's own, projects revealed next to the source folder, and devices.
//!
//! - [`reveal`]: folders a source folder's manifests name, and which are opened.
//! - [`layer`]: the home layer (an overlayfs upper directory) — review, apply, discard;
//!   [`change`]: one change of it, as diff shows it and the review binds it;
//!   [`hostrun`]: which of its paths make programs run as the person once applied;
//!   [`review`]: binding an apply to what `home diff` showed; [`lock`]: the exec lock that
//!   keeps apply and discard from running while an exec does; [`applytmp`]: apply's
//!   temporary files, and those a killed apply left.
//! - [`caches`]: per-tool package caches as overlays over the person's caches.
//! - [`devices`]: the device allowlist and validation of `sandbox.devices`.
//! - [`view`]: the home as a command sees it: only what development tools need.
//! - all of the above are put into an exec's plan by `crate::plan`; [`display`]: telling
//!   a command that failed for want of a display.

pub mod applytmp;
pub mod baseline;
pub mod caches;
pub mod change;
pub mod devices;
#[cfg(target_os = "linux")]
pub mod display;
pub mod hostrun;
pub mod layer;
pub mod lock;
pub mod reveal;
pub mod review;
#[cfg(target_os = "linux")]
pub mod view;

use capsule_bundle::policy::{SandboxPolicy, HOME_AGENT_LOGINS, HOME_CREDENTIALS};
use std::path::{Path, PathBuf};

/// The home layer of a capsule, from its bundle directory and resolved policy: the
/// excluded paths are the package caches, the capsule root, the workspace and the
/// capsule's tmp when they lie in home; the refused ones are the hidden paths in home and
/// every credential or agent-login path. `None` when the policy knows no home directory.
pub fn layer_for(
    bundle_dir: &Path,
    policy: &SandboxPolicy,
    capsule_root: Option<&Path>,
) -> Option<layer::Layer> {
    let home = policy.home.clone()?;
    let rel = |p: &Path| {
        p.strip_prefix(&home)
            .ok()
            .map(Path::to_path_buf)
            .filter(|r| !r.as_os_str().is_empty())
    };
    let mut excluded: Vec<PathBuf> = caches::host_cache_dirs(&home)
        .iter()
        .filter_map(|c| rel(&c.host))
        .collect();
    for p in [
        capsule_root,
        Some(policy.workspace.as_path()),
        Some(policy.tmp_dir.as_path()),
        Some(bundle_dir),
    ]
    .into_iter()
    .flatten()
    {
        excluded.extend(rel(p));
    }
    let mut hidden: Vec<PathBuf> = HOME_CREDENTIALS
        .iter()
        .chain(HOME_AGENT_LOGINS)
        .map(PathBuf::from)
        .collect();
    hidden.extend(policy.hidden.iter().filter_map(|h| rel(&h.path)));
    hidden.retain(|h| !excluded.iter().any(|e| h.starts_with(e)));
    hidden.sort();
    hidden.dedup();
    Some(layer::Layer {
        upper: layer::layer_paths(bundle_dir).upper,
        home,
        excluded,
        hidden,
    })
}

//! The host facts an exec's plan is made from ([`HostFacts`]), each gathered once by the
//! module that owns it, before the plan is made and with no call back into the plan: the
//! system directories, `/var/tmp`, the workspace's git dir and the host's sockets
//! ([`crate::linux::plan::SystemFacts`]), the devices ([`crate::home::devices`]), the
//! home's listing ([`crate::home::view::entries`]), the home layer
//! ([`crate::home::layer`]) and what its upper dir holds, the package caches and
//! `~/.npmrc` ([`crate::home::caches`]), the credentials the host has for watched masks
//! ([`crate::linux::fusemask::present`]), the revealed folders ([`crate::home::reveal`])
//! and this exec's cgroups ([`crate::kernel::cgroup`]).
//!
//! Gathering an exec's facts ([`gather`], `make`) also makes what the plan mounts in the
//! bundle (the home layer's folders and baseline, the cache folders, the filtered
//! `~/.npmrc`); for a rendering that only shows the plan (`capsule inspect`) nothing is
//! made and the folders are named where an exec would make them.

use super::ResolvedPolicy;
use crate::home::view::{self, Entry, Held};
use crate::home::{caches, devices, layer, reveal};
use crate::kernel::sys::canonicalize;
use crate::linux::plan::{option_safe, SystemFacts};
use crate::linux::{fusemask, Isolation};
use crate::settings::Settings;
use capsule_bundle::store::OpenCapsule;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Everything of the host an exec's plan depends on (see the module docs). A plan made
/// from it ([`super::plan`]) makes no system call.
#[derive(Debug, Clone, Default)]
pub struct HostFacts {
    /// The host's system directories, `/var/tmp`, the workspace's git dir, whether capsule
    /// runs as root, the sockets the sandbox would show (at full isolation only).
    pub system: SystemFacts,
    /// The device names (relative to `/dev`) the command gets
    /// ([`devices::device_plan`]).
    pub devices: Vec<PathBuf>,
    /// The home as the plan shows it (at full isolation, with a home folder).
    pub home: Option<HomeFacts>,
    /// The folders revealed for the capsule's source folder (at full isolation).
    pub reveals: Option<Reveals>,
    /// The `cgroup.procs` files of this exec's cgroups.
    pub cgroup_procs: Vec<PathBuf>,
}

/// The home of the plan: its folder, what its view shows, the layer and caches the plan
/// mounts over it.
#[derive(Debug, Clone)]
pub struct HomeFacts {
    /// The home folder (canonical, the policy's).
    pub home: PathBuf,
    /// The entries of its view ([`view::entries`]: what tools need, as the host has it).
    pub entries: Vec<Entry>,
    /// The home layer's upper and work folders.
    pub layer: layer::LayerPaths,
    /// The package caches, each an overlay (or the capsule's own folder).
    pub caches: Vec<caches::CacheLayer>,
    /// The filtered copy of `~/.npmrc`, when the host has one.
    pub npmrc: Option<PathBuf>,
    /// The hidden credentials below the home the host has, where masks can be watched
    /// ([`fusemask::present`]).
    pub credentials: Vec<PathBuf>,
    /// For each path below the home that the plan may mask (relative to the home, as
    /// bytes: a lookup hashes them once instead of parsing components): does the layer's
    /// upper dir hold it ([`view::held_in`])?
    pub in_upper: HashMap<OsString, bool>,
}

/// The folders `capsule reveal add` opened for the capsule's source folder.
#[derive(Debug, Clone)]
pub struct Reveals {
    /// The capsule's source folder (canonical).
    pub source: PathBuf,
    /// The capsule root (canonical where it exists).
    pub root: PathBuf,
    /// The revealed folders that still exist (canonical), in the settings' order.
    pub folders: Vec<PathBuf>,
}

/// Why the facts could not be gathered.
#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    /// A refused or unusable `sandbox.devices` entry (bad input).
    #[error(transparent)]
    Device(#[from] devices::DeviceError),
    /// The layer or caches could not be made, or a path cannot be mounted.
    #[error("{0}")]
    Setup(String),
}

/// What [`gather`] needs beyond the exec's policy.
pub struct Gather<'a> {
    pub cap: &'a OpenCapsule,
    pub settings: &'a Settings,
    /// The capsule root.
    pub capsule_root: &'a Path,
    /// The GPU's device nodes too (not `--no-gpu`).
    pub gpu: bool,
    /// Make what the plan mounts (an exec), or only name it (a rendering).
    pub make: bool,
    pub cgroup_procs: Vec<PathBuf>,
}

fn safe(p: &Path) -> Result<(), FactsError> {
    if option_safe(p) {
        Ok(())
    } else {
        Err(FactsError::Setup(format!(
            "{}: contains ',', ':' or '\\', which overlay mount options cannot carry; move the capsule root or home",
            p.display()
        )))
    }
}

/// The host facts of the exec `r` (see the module docs), each from the module that owns
/// it; only the devices below weaker isolation (no mount namespace: nothing else is
/// planned).
pub fn gather(r: &ResolvedPolicy, g: Gather<'_>) -> Result<HostFacts, FactsError> {
    let t0 = std::time::Instant::now();
    let cap = g.cap;
    // devices: refuse bad spec entries whatever the isolation
    let devices = devices::device_plan(&cap.policy.devices, g.gpu, Path::new("/dev"))?;
    let mut facts = HostFacts {
        devices,
        cgroup_procs: g.cgroup_procs,
        ..HostFacts::default()
    };
    if r.isolation != Isolation::Full {
        return Ok(facts);
    }
    facts.system = SystemFacts::gather(r.policy);
    tracing::trace!("facts: system, devices: {:?}", t0.elapsed());
    let setup = FactsError::Setup;
    let root = canonicalize(g.capsule_root).unwrap_or_else(|_| g.capsule_root.to_path_buf());
    if let Some(home) = r.policy.home.clone().filter(|h| h.is_dir()) {
        let cache_dirs = caches::host_cache_dirs(&home);
        // what the baseline leaves out, needed only the first time (when it is recorded);
        // layer_for answers Some here (the policy has a home)
        let skip = || {
            crate::home::layer_for(&cap.bundle_dir, &cap.policy, Some(&root))
                .map(|lay| lay.excluded.into_iter().chain(lay.hidden).collect())
                .unwrap_or_default()
        };
        let paths = if g.make {
            layer::prepare_with(&cap.bundle_dir, &home, skip).map_err(|e| setup(e.to_string()))?
        } else {
            layer::layer_paths(&cap.bundle_dir)
        };
        for p in [&home, &paths.upper, &paths.work] {
            safe(p)?;
        }
        let login: Vec<&str> = r.login.iter().map(String::as_str).collect();
        let entries = view::entries(&home, r.policy, &r.env, &login);
        tracing::trace!("facts: home view: {:?}", t0.elapsed());
        let layers = if g.make {
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
        for c in &layers {
            safe(&c.upper)?;
            safe(&c.work)?;
            if let Some(lower) = &c.lower {
                safe(lower)?;
            }
        }
        tracing::trace!("facts: caches: {:?}", t0.elapsed());
        // npm reads registry settings from ~/.npmrc, which is hidden for its auth lines:
        // the plan shows a copy without them
        let npmrc = match std::fs::read_to_string(home.join(".npmrc")) {
            Ok(text) => {
                let copy = cap.bundle_dir.join("npmrc.filtered");
                if g.make {
                    std::fs::write(&copy, caches::filtered_npmrc(&text))
                        .map_err(|e| setup(format!("{}: {e}", copy.display())))?;
                }
                Some(copy)
            }
            Err(_) => None,
        };
        let credentials = fusemask::present(r.policy, &home);
        // the masks below the home the plan may drop: the hidden paths and the host's
        // sockets there (one `lstat` per folder of the upper dir on the way)
        let mut seen: HashMap<PathBuf, Held> = HashMap::new();
        let mut in_upper: HashMap<OsString, bool> = HashMap::new();
        let masked = r
            .policy
            .hidden
            .iter()
            .map(|h| &h.path)
            .chain(&facts.system.sockets);
        let hb = home.as_os_str().as_bytes();
        for p in masked {
            // below the home, on the bytes of canonical paths (no component parsing)
            let b = p.as_os_str().as_bytes();
            if b.len() > hb.len() + 1 && b.starts_with(hb) && b[hb.len()] == b'/' {
                let rel = OsStr::from_bytes(&b[hb.len() + 1..]);
                if !in_upper.contains_key(rel) {
                    let held = view::held_in(&paths.upper, Path::new(rel), &mut seen);
                    in_upper.insert(rel.to_os_string(), held);
                }
            }
        }
        tracing::trace!("facts: npmrc, credentials, upper: {:?}", t0.elapsed());
        facts.home = Some(HomeFacts {
            home,
            entries,
            layer: paths,
            caches: layers,
            npmrc,
            credentials,
            in_upper,
        });
    }
    if let Some(source) = &cap.record.source {
        let source = canonicalize(source).unwrap_or_else(|_| source.clone());
        let mut folders = Vec::new();
        for r in reveal::opened_for(g.settings, &source) {
            match canonicalize(&r) {
                Ok(c) => folders.push(c),
                Err(_) => tracing::warn!("revealed folder {} is gone; skipped", r.display()),
            }
        }
        facts.reveals = Some(Reveals {
            source,
            root,
            folders,
        });
    }
    tracing::trace!("facts: reveals: {:?}", t0.elapsed());
    Ok(facts)
}

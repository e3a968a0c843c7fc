//! The store of open capsules under a capsule root: finding one by name or path
//! ([`resolve`]), listing them ([`list`]) and closing them ([`close`]). Opening lives in
//! [`crate::open`].
//!
//! What the runtime trusts is only what lives in the bundle directory
//! (`Layout::bundle_dir(name)`, outside the workspace): `bundle.json` ([`BundleRecord`])
//! and `policy.json` ([`SandboxPolicy`]), read by [`record`]. Nothing is read back from
//! the workspace to decide policy; the workspace's manifest is for identification by
//! humans and Kitsoki.
//!
//! ```no_run
//! use capsule_bundle::{layout::Layout, store};
//! let layout = Layout::new("/tmp/capsule-root");
//! let cap = store::resolve(&layout, "clean-repo")?; // or a workspace path
//! println!("{} at {} (bundle {})", cap.name, cap.workspace.display(), cap.bundle_dir.display());
//! let policy = &cap.policy; // the resolved SandboxPolicy from policy.json
//! # Ok::<(), capsule_bundle::Error>(())
//! ```

#[cfg(test)]
mod props;
pub mod record;
pub mod staging;

use crate::error::{Error, Result};
use crate::layout::{bundle_files, valid_name, Layout};
use crate::policy::grants::Grant;
use crate::policy::SandboxPolicy;
use crate::store::record::{read_policy, read_record, BundleRecord};
use crate::workspace::manifest::SENTINEL;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// An open capsule, loaded from its bundle.
#[derive(Debug, Clone)]
pub struct OpenCapsule {
    pub name: String,
    /// Canonical workspace path.
    pub workspace: PathBuf,
    /// The bundle directory (`config.json`, `policy.json`, `bundle.json`, `tmp/`, ...).
    pub bundle_dir: PathBuf,
    /// The resolved policy from `policy.json`.
    pub policy: SandboxPolicy,
    pub record: BundleRecord,
}

impl OpenCapsule {
    /// Path of a file in the bundle (see [`bundle_files`]).
    pub fn bundle_file(&self, name: &str) -> PathBuf {
        self.bundle_dir.join(name)
    }
}

/// The capsule root, canonical if it exists.
fn canonical_root(layout: &Layout) -> PathBuf {
    std::fs::canonicalize(&layout.root).unwrap_or_else(|_| layout.root.clone())
}

/// Load the open capsule called `name`, checking that its record and policy agree.
pub fn load(layout: &Layout, name: &str) -> Result<OpenCapsule> {
    if !valid_name(name) {
        return Err(Error::other(format!(
            "{name:?} is not a valid capsule name (letters, digits, '-', '_', '.')"
        )));
    }
    let bundle_dir = Layout::new(canonical_root(layout)).bundle_dir(name);
    let record = read_record(&bundle_dir)?;
    let policy = read_policy(&bundle_dir)?;
    let rec_file = bundle_dir.join(bundle_files::RECORD);
    if record.name != name || policy.capsule_name != name {
        return Err(Error::other(format!(
            "{}: names the capsule {:?}, but its bundle directory is {name:?}",
            rec_file.display(),
            record.name
        )));
    }
    if policy.workspace != record.workspace {
        return Err(Error::other(format!(
            "{}: policy workspace {} differs from the record's {}",
            bundle_dir.join(bundle_files::POLICY).display(),
            policy.workspace.display(),
            record.workspace.display()
        )));
    }
    if policy.digest() != record.policy_digest {
        return Err(Error::other(format!(
            "{}: policy digest does not match {} (the bundle was changed after open)",
            bundle_dir.join(bundle_files::POLICY).display(),
            rec_file.display()
        )));
    }
    let policy = accepted_only(policy, &record, &bundle_dir)?;
    Ok(OpenCapsule {
        name: name.to_string(),
        workspace: record.workspace.clone(),
        bundle_dir,
        policy,
        record,
    })
}

/// The policy with only the grants the record says were accepted. A record with an
/// acceptance whose policy gives more is refused (the bundle was changed after open);
/// a record from before acceptance was recorded loads with its grants dropped (none
/// was ever accepted).
fn accepted_only(
    mut policy: SandboxPolicy,
    record: &BundleRecord,
    bundle_dir: &Path,
) -> Result<SandboxPolicy> {
    let given = crate::policy::grants::of_policy(&policy, &record.tool_reveals);
    let accepted: &[Grant] = record.grants.as_ref().map_or(&[], |a| &a.grants);
    let extra: Vec<Grant> = given
        .into_iter()
        .filter(|g| !accepted.contains(g))
        .collect();
    if extra.is_empty() {
        return Ok(policy);
    }
    if record.grants.is_some() {
        return Err(Error::other(format!(
            "{}: gives {} which {} does not record as accepted (the bundle was changed after open); close it and open the spec again",
            bundle_dir.join(bundle_files::POLICY).display(),
            crate::policy::grants::list_line(&extra),
            bundle_dir.join(bundle_files::RECORD).display()
        )));
    }
    for g in &extra {
        match g {
            Grant::Reveal(p) => policy.revealed.retain(|r| r != p),
            Grant::Writable(p) => policy.writable.retain(|w| w != p),
            Grant::PassEnv(n) => policy.pass_env.retain(|x| x != n),
            Grant::Device(d) => policy.devices.retain(|x| x != d),
            Grant::NetworkOpen | Grant::NetworkAllow(_) | Grant::Secret(_) | Grant::Publish(_) => {
                policy.network = crate::policy::NetworkPolicy::default()
            }
        }
    }
    tracing::warn!(
        "{}: opened before grants were recorded; not applying {}",
        bundle_dir.display(),
        crate::policy::grants::list_line(&extra)
    );
    Ok(policy)
}

/// Find an open capsule by `reference`: a capsule name, a workspace path (or a path
/// inside a workspace: the deepest enclosing workspace wins), or a bundle directory.
/// A path is canonicalized once and compared against the records in the bundles.
pub fn resolve(layout: &Layout, reference: &str) -> Result<OpenCapsule> {
    let looks_like_path = reference.contains('/') || reference == "." || reference == "..";
    if !looks_like_path && valid_name(reference) {
        let dir = layout.bundle_dir(reference);
        if dir.join(bundle_files::RECORD).is_file() {
            return load(layout, reference);
        }
    }
    let canon = match std::fs::canonicalize(reference) {
        Ok(p) => p,
        Err(_) => return Err(Error::NotFound(reference.to_string())),
    };
    let root = canonical_root(layout);
    let bundles = Layout::new(&root).bundles_dir();
    if let Ok(rel) = canon.strip_prefix(&bundles) {
        if let Some(first) = rel.components().next() {
            let name = first.as_os_str().to_string_lossy().into_owned();
            return load(layout, &name);
        }
    }
    let mut best: Option<(usize, OpenCapsule)> = None;
    for entry in list(layout)? {
        if let Ok(cap) = entry.capsule {
            if canon.starts_with(&cap.workspace) {
                let depth = cap.workspace.components().count();
                if best.as_ref().is_none_or(|(d, _)| depth > *d) {
                    best = Some((depth, cap));
                }
            }
        }
    }
    best.map(|(_, c)| c)
        .ok_or_else(|| Error::NotFound(reference.to_string()))
}

/// One entry of [`list`]: a bundle directory and what loading it gave.
#[derive(Debug)]
pub struct Listed {
    pub name: String,
    pub capsule: Result<OpenCapsule>,
}

/// All bundles under the capsule root, sorted by name. Half-made directories of an
/// open in progress (names starting with `.`) are skipped.
pub fn list(layout: &Layout) -> Result<Vec<Listed>> {
    let dir = Layout::new(canonical_root(layout)).bundles_dir();
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.') && valid_name(n))
        .collect();
    names.sort();
    Ok(names
        .into_iter()
        .map(|name| Listed {
            capsule: load(layout, &name),
            name,
        })
        .collect())
}

/// What [`close`] did.
#[derive(Debug, Clone, Serialize)]
pub struct Closed {
    pub name: String,
    pub workspace: PathBuf,
    pub bundle_dir: PathBuf,
    /// `false` when the workspace was already gone or (with `force`) left in place
    /// because it had no sentinel.
    pub workspace_removed: bool,
}

/// Close the capsule `reference` names: remove its workspace and its bundle.
///
/// Refuses a workspace directory without the sentinel (it may not be a capsule at all);
/// with `force` the bundle is still removed and the directory left alone. Refuses a
/// workspace whose HEAD or tree digest changed since the open unless `force`.
pub fn close(layout: &Layout, reference: &str, force: bool) -> Result<Closed> {
    let cap = resolve(layout, reference)?;
    let ws = &cap.workspace;
    let mut workspace_removed = false;
    match std::fs::symlink_metadata(ws) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(ws, e)),
        Ok(md) if !md.is_dir() => {
            return Err(Error::other(format!(
                "refusing to close {}: it is not a directory (no capsule workspace there)",
                ws.display()
            )))
        }
        Ok(_) => {
            let sentinel_ok = std::fs::symlink_metadata(ws.join(SENTINEL))
                .map(|m| m.is_file())
                .unwrap_or(false);
            if !sentinel_ok {
                if !force {
                    return Err(Error::other(format!(
                        "refusing to close {}: it has no {SENTINEL} sentinel, so it may not be a capsule; remove it yourself, or pass --force to drop only the bundle",
                        ws.display()
                    )));
                }
            } else {
                if !force {
                    if let Some(why) = changed_since_open(&cap) {
                        return Err(Error::other(format!(
                            "refusing to close {}: {why} since it was opened; pass --force to discard that work",
                            cap.name
                        )));
                    }
                }
                crate::rmtree::remove_dir_atomically(ws)?;
                workspace_removed = true;
            }
        }
    }
    crate::rmtree::remove_dir_atomically(&cap.bundle_dir)?;
    // and what killed opens and closes left (best effort)
    crate::store::staging::reap(layout);
    Ok(Closed {
        name: cap.name,
        workspace: cap.workspace,
        bundle_dir: cap.bundle_dir,
        workspace_removed,
    })
}

/// Why the workspace differs from the open, if it does (HEAD or tree digest).
pub fn changed_since_open(cap: &OpenCapsule) -> Option<String> {
    // the workspace's git directory was writable from the sandbox: a FIFO planted as HEAD
    // or a ref must not block close forever
    let ws = cap.workspace.clone();
    let head = crate::git::guard::guarded("reading the workspace's HEAD", move || {
        crate::git::info::head(&ws)
    })
    .ok()
    .and_then(|h| h.ok())
    .map(|h| h.commit);
    if head.is_some() && head != cap.record.head {
        return Some("HEAD moved".into());
    }
    match crate::workspace::digest::tree_digest(&cap.workspace) {
        Ok(d) if d == cap.record.tree_digest => None,
        Ok(_) => Some("files changed".into()),
        Err(e) => Some(format!("its files cannot be read ({e})")),
    }
}

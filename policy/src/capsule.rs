//! Capsule identification for the gate: the nearest ancestor of a directory (or the directory
//! itself) that holds both the sentinel `.kitsoki-capsule` and a `capsule-manifest.json` that
//! parses as a JSON object with a string `capsule_name`.
//!
//! This is identification only, as Kitsoki does it: the manifest is read leniently (unknown
//! fields are fine) and nothing in it grants anything. Both files must be regular files (not
//! symlinks). A sentinel without a valid manifest does not make a capsule; the search then
//! continues upwards, so a directory inside an outer capsule still belongs to that capsule.

use capsule_bundle::workspace::manifest::{MANIFEST, SENTINEL};
use serde::Serialize;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Manifests larger than this are not capsules (identification must stay cheap).
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// The capsule a working directory belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CapsuleInfo {
    /// `capsule_name` from the manifest.
    pub name: String,
    /// The capsule's workspace root (the directory holding the sentinel and manifest).
    pub root: PathBuf,
    /// `spec_path` from the manifest, when it records one.
    pub spec_path: Option<String>,
}

/// The nearest capsule containing `dir` (canonical), if any.
pub fn find(dir: &Path) -> Option<CapsuleInfo> {
    dir.ancestors().find_map(at)
}

/// Is `dir` itself a capsule root?
pub fn at(dir: &Path) -> Option<CapsuleInfo> {
    if !is_regular_file(&dir.join(SENTINEL)) {
        return None;
    }
    let manifest = dir.join(MANIFEST);
    if !is_regular_file(&manifest) {
        return None;
    }
    let file = std::fs::File::open(&manifest).ok()?;
    let mut text = Vec::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut text)
        .ok()?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let obj = value.as_object()?;
    let name = obj.get("capsule_name")?.as_str()?;
    if name.is_empty() {
        return None;
    }
    let spec_path = obj
        .get("spec_path")
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    Some(CapsuleInfo {
        name: name.to_owned(),
        root: dir.to_path_buf(),
        spec_path,
    })
}

fn is_regular_file(p: &Path) -> bool {
    std::fs::symlink_metadata(p)
        .map(|m| m.file_type().is_file())
        .unwrap_or(false)
}

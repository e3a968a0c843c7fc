//! The two files of a bundle directory the runtime trusts, as types and as read from
//! disk: `bundle.json` ([`BundleRecord`], [`read_record`]) and `policy.json`
//! ([`read_policy`]). A parse error names the file, its line and column, and quotes
//! nothing raw. Finding and closing capsules is [`crate::store`]'s, reaping killed opens
//! [`crate::store::staging`]'s; both read the records through here.

use crate::error::{Error, IoContext, Result};
use crate::layout::bundle_files;
use crate::policy::grants::Accepted;
use crate::policy::SandboxPolicy;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Format version of `bundle.json` (2: with [`BundleRecord::grants`] and
/// [`BundleRecord::tool_reveals`]; version 1 records still load, see [`crate::store::load`]).
pub const RECORD_VERSION: u32 = 2;

/// `bundle.json`: the pointer record of an open capsule, written by `open`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BundleRecord {
    pub version: u32,
    /// The capsule name (also the bundle directory's name).
    pub name: String,
    /// Canonical path of the workspace.
    pub workspace: PathBuf,
    /// Canonical path of the spec it was opened from (`None` for `--source`).
    #[serde(default)]
    pub spec_path: Option<PathBuf>,
    /// Canonical path of the operator's checkout for `--source` capsules.
    #[serde(default)]
    pub source: Option<PathBuf>,
    /// RFC 3339 UTC time of the open.
    pub opened_at: String,
    /// `sha256:<hex>` of `policy.json`'s policy ([`SandboxPolicy::digest`]).
    pub policy_digest: String,
    /// The spec's network mode as written (`none`, `replay`, `live`).
    pub network: String,
    /// HEAD commit id right after the open.
    #[serde(default)]
    pub head: Option<String>,
    /// Branch checked out right after the open (`None`: detached).
    #[serde(default)]
    pub branch: Option<String>,
    /// Tree digest (lower-case hex, no prefix) right after the open.
    pub tree_digest: String,
    /// The grants the operator accepted at open (what the policy may give beyond the
    /// defaults, see [`crate::policy::grants`]); `None` in records written before grants were
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants: Option<Accepted>,
    /// Read-only carve-outs `open` added by itself so tools under a hidden path keep
    /// working (`PATH` and SDK folders); not grants.
    #[serde(default)]
    pub tool_reveals: Vec<PathBuf>,
    /// The spec's `sandbox.limits` (no grant: an exec applies each only where it is lower
    /// than the operator's own default).
    #[serde(
        default,
        skip_serializing_if = "crate::policy::limits::LimitValues::is_empty"
    )]
    pub limits: crate::policy::limits::LimitValues,
}

/// Read and parse a JSON file of the bundle.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).at(path)?;
    serde_json::from_str(&text).map_err(|e| Error::Spec {
        file: path.to_path_buf(),
        line: e.line() as u64,
        column: e.column() as u64,
        // the message may quote the file's text (an unknown variant): one line, escaped
        msg: crate::escape::text_line(&e.to_string()),
    })
}

/// Load `policy.json` from a bundle directory.
pub fn read_policy(bundle_dir: &Path) -> Result<SandboxPolicy> {
    read_json(&bundle_dir.join(bundle_files::POLICY))
}

/// Load `bundle.json` from a bundle directory.
pub fn read_record(bundle_dir: &Path) -> Result<BundleRecord> {
    read_json(&bundle_dir.join(bundle_files::RECORD))
}

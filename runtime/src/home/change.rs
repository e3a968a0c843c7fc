//! One change of the home layer, as `capsule home diff` shows it and `apply` and the
//! review bind it: shared by the layer's walk ([`super::layer`]) and the review
//! ([`super::review`]), so neither imports the other for it.

use serde::Serialize;
use std::path::PathBuf;

/// Added, changed or removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Changed,
    Removed,
}

/// What the entry is (in the layer; for a removal, what the real entry is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryType {
    File,
    Dir,
    Symlink,
    Other,
}

/// One change in the home layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Relative to the home directory.
    #[serde(serialize_with = "capsule_bundle::escape::serialize_path")]
    pub path: PathBuf,
    pub kind: ChangeKind,
    pub entry: EntryType,
    /// Permission bits of the new entry (set-id bits dropped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// Symlink target.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "capsule_bundle::escape::serialize_opt_path"
    )]
    pub target: Option<PathBuf>,
    /// Why this change can never be applied (unsafe content).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Why applying it lets its content run as the person (git configuration, a shell
    /// startup file, a program on PATH, ...: [`super::hostrun`]); added and changed
    /// entries only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_as_you: Option<&'static str>,
    /// Unified diff for text files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// The file is binary or too large for a content diff.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub binary: bool,
    /// sha256 of a file's new content (what `apply` will write).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

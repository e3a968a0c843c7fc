//! Where capsule keeps things: the capsule root, each capsule's workspace and its
//! state directory (the bundle), and the tool's own settings.
//!
//! ```text
//! $CAPSULE_ROOT                      default: $XDG_DATA_HOME/capsule (Linux),
//!                                    ~/Library/Application Support/capsule (macOS)
//!   workspaces/<name>/               the workspace (unless `--dest` put it elsewhere)
//!   bundles/<name>/                  the bundle: never inside the workspace
//!     config.json                    OCI runtime spec
//!     policy.json                    resolved sandbox policy (absolute, canonical paths)
//!     bundle.json                    pointer record: name, workspace, spec path, digests
//!     events.jsonl                   exec records, one JSON line each
//!     refusals.jsonl                 network refusals
//!     tmp/                           the capsule's /tmp (shared by its execs)
//!     home/                          home layer (upper dir) for review
//!     cache/                         package caches of the capsule's own
//!   settings.json                    tool settings (accept-weaker, revealed projects)
//! ```
//!
//! The sandboxed command can write to none of these except `tmp/`, `home/` and `cache/`
//! (through the mounts the runtime makes); the runtime trusts only `policy.json`,
//! `bundle.json` and `config.json`, which it wrote itself.

use std::path::{Path, PathBuf};

/// Environment variable that overrides the capsule root.
pub const ROOT_ENV: &str = "CAPSULE_ROOT";

/// The capsule root: `$CAPSULE_ROOT`, else the platform's per-user data directory.
///
/// Returns `None` only when neither `CAPSULE_ROOT` nor `HOME` is set.
pub fn capsule_root() -> Option<PathBuf> {
    if let Some(r) = std::env::var_os(ROOT_ENV).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(r));
    }
    let home = std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    if cfg!(target_os = "macos") {
        return home.map(|h| h.join("Library/Application Support/capsule"));
    }
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        let x = PathBuf::from(x);
        if x.is_absolute() {
            return Some(x.join("capsule"));
        }
    }
    home.map(|h| h.join(".local/share/capsule"))
}

/// Paths of one capsule root.
#[derive(Debug, Clone)]
pub struct Layout {
    pub root: PathBuf,
}

impl Layout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
    /// Default directory for workspaces.
    pub fn workspaces_dir(&self) -> PathBuf {
        self.root.join("workspaces")
    }
    /// Directory holding all bundles.
    pub fn bundles_dir(&self) -> PathBuf {
        self.root.join("bundles")
    }
    /// The bundle (state) directory of capsule `name`.
    pub fn bundle_dir(&self, name: &str) -> PathBuf {
        self.bundles_dir().join(name)
    }
    /// The tool's own settings file.
    pub fn settings_file(&self) -> PathBuf {
        self.root.join("settings.json")
    }
    /// Content-addressed cache of bare repositories for pinned sources.
    pub fn repo_cache_dir(&self) -> PathBuf {
        self.root.join("repo-cache")
    }
    /// Per-source caches of verified objects (`crate::objects::cache`).
    pub fn object_cache_dir(&self) -> PathBuf {
        self.root.join("object-cache")
    }
}

/// Files inside a bundle directory.
pub mod bundle_files {
    pub const CONFIG: &str = "config.json";
    pub const POLICY: &str = "policy.json";
    pub const RECORD: &str = "bundle.json";
    pub const EVENTS: &str = "events.jsonl";
    pub const REFUSALS: &str = "refusals.jsonl";
    pub const TMP: &str = "tmp";
    pub const HOME: &str = "home";
    pub const CACHE: &str = "cache";
}

/// Is `name` a valid capsule name (a single safe path component)?
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `true` if `child` equals `parent` or lies under it, comparing whole components.
/// Both should already be absolute and canonical.
pub fn is_within(child: &Path, parent: &Path) -> bool {
    child.starts_with(parent)
}

//! The capsule sentinel (`.kitsoki-capsule`) and manifest (`capsule-manifest.json`), in
//! Kitsoki's format, plus our own fields under the `capsule` key.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Sentinel file at the workspace root: the capsule name and a newline.
pub const SENTINEL: &str = ".kitsoki-capsule";
/// Manifest file at the workspace root.
pub const MANIFEST: &str = "capsule-manifest.json";

/// Where the workspace came from.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ManifestSource {
    #[serde(default)]
    pub synthetic: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// HEAD commit id after materialization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// Checked-out branch, if any (None for detached HEAD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

/// A probe from the spec, recorded in the manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ManifestProbe {
    pub name: String,
    /// `run` as opened; `command` once `verify` wrote its results (Kitsoki's shape).
    #[serde(alias = "command")]
    pub run: String,
    #[serde(default = "default_expect")]
    pub expect: String,
}

fn default_expect() -> String {
    "zero".into()
}

/// Our own fields, under the manifest's `capsule` key.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CapsuleExtension {
    /// The bundle directory (outside the workspace).
    pub bundle: PathBuf,
    /// `sha256:<hex>` of the bundle's `policy.json`.
    pub policy_digest: String,
}

/// `capsule-manifest.json`. Unknown fields are tolerated when reading (Kitsoki may add some).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub capsule_name: String,
    #[serde(default)]
    pub spec_path: Option<String>,
    pub workspace: String,
    pub opened_at: String,
    #[serde(default)]
    pub source: ManifestSource,
    #[serde(default = "default_network")]
    pub network: String,
    #[serde(default)]
    pub tree_digest: Option<String>,
    #[serde(default)]
    pub environment: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub probes: Vec<ManifestProbe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capsule: Option<CapsuleExtension>,
}

fn default_network() -> String {
    "none".into()
}

impl Manifest {
    /// Read and parse a manifest. Used for *identification* only (the launch gate, `list`);
    /// the runtime never takes policy from it, since the sandboxed command can write the
    /// workspace's directory entries.
    ///
    /// The file may have been replaced by the command (under weaker isolation the manifest
    /// is writable): a symlink is not followed (it could point at a file the sandbox cannot
    /// read), a FIFO or device is not opened blocking or read, and at most 1 MiB is read.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = read_text(path)?;
        serde_json::from_str(&text).map_err(|e| {
            let msg = crate::escape::text_line(&e.to_string());
            format!("{}:{}:{}: {msg}", path.display(), e.line(), e.column())
        })
    }
}

/// What `capsule verify` measured, written back into the workspace's manifest as
/// `kitsoki capsule verify` does: `tree_digest` (hex) and `probes` (each `{name, command,
/// expect, exit_code, ok, output}`). The other fields are kept as they are.
///
/// The old manifest is read without following a symlink or blocking; the new one is
/// written to a fresh file in the workspace (`O_EXCL | O_NOFOLLOW`) and renamed over it,
/// so a symlink or hard link a task left there is replaced, never written through.
pub fn write_verified(
    workspace: &Path,
    tree_digest_hex: &str,
    probes: serde_json::Value,
) -> Result<(), String> {
    use crate::fsat;
    use std::ffi::OsStr;
    use std::io::Write;
    let path = workspace.join(MANIFEST);
    let shown = path.display();
    let mut v: serde_json::Value = serde_json::from_str(&read_text(&path)?).map_err(|e| {
        let msg = crate::escape::text_line(&e.to_string());
        format!("{shown}:{}:{}: {msg}", e.line(), e.column())
    })?;
    let Some(obj) = v.as_object_mut() else {
        return Err(format!("{shown}: not a JSON object"));
    };
    obj.insert("tree_digest".into(), tree_digest_hex.into());
    obj.insert("probes".into(), probes);
    let text = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())? + "\n";
    let dir = fsat::open_dir(workspace).map_err(|e| format!("{}: {e}", workspace.display()))?;
    let tmp = format!(".{MANIFEST}.verify-{}", std::process::id());
    let tmp = OsStr::new(&tmp);
    let unlink = |d: &std::os::fd::OwnedFd| {
        use std::os::fd::AsRawFd;
        if let Ok(c) = fsat::cstr(tmp) {
            let _ = fsat::unlink_at_c(d.as_raw_fd(), &c, 0);
        }
    };
    unlink(&dir);
    let written = fsat::create_file_at(&dir, tmp, 0o644).and_then(|mut f| {
        f.write_all(text.as_bytes())?;
        f.sync_all()
    });
    let renamed = written.and_then(|_| fsat::rename_at(&dir, tmp, OsStr::new(MANIFEST)));
    if let Err(e) = renamed {
        unlink(&dir);
        return Err(format!("writing {shown}: {e}"));
    }
    Ok(())
}

/// The manifest's text (see [`Manifest::read`] for what is refused).
fn read_text(path: &Path) -> Result<String, String> {
    {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        const MAX_BYTES: u64 = 1 << 20;
        let shown = path.display();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => format!("{shown}: a symlink (not followed)"),
                _ => format!("{shown}: {e}"),
            })?;
        let md = f.metadata().map_err(|e| format!("{shown}: {e}"))?;
        if !md.is_file() {
            return Err(format!("{shown}: not a regular file (not read)"));
        }
        let mut text = String::new();
        f.take(MAX_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| format!("{shown}: {e}"))?;
        if text.len() as u64 > MAX_BYTES {
            return Err(format!("{shown}: larger than {MAX_BYTES} bytes (not read)"));
        }
        Ok(text)
    }
}

//! The tool's own settings (`$CAPSULE_ROOT/settings.json`): knowing acceptance of weaker
//! isolation, the projects revealed per source folder, the operator's default limits and
//! agent profiles (and finding a profile by name among them and the built-in ones of
//! [`crate::agent`]). Never stored in a repository,
//! and not writable from inside a sandbox (the capsule root is hidden there).

use crate::agent::{self, Profile};
use crate::exit::CliError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Settings persisted across runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// `capsule isolation --accept-weaker on`: run with Landlock + seccomp only when
    /// namespaces are unavailable.
    #[serde(default)]
    pub accept_weaker: bool,
    /// Source folder (canonical) -> folders revealed read-only to its capsules (canonical).
    #[serde(default)]
    pub reveals: BTreeMap<PathBuf, Vec<PathBuf>>,
    /// The operator's default resource limits of `capsule exec`, for the flags an exec
    /// does not give (`{"memory": "8G", "pids": 4096, "cpus": 1.5, "fds": 4096,
    /// "file_size": "20G", "tmp_size": "4G", "activity_timeout": "10m"}`): enforced as if given, so one that
    /// cannot be enforced refuses the exec as a flag would.
    #[serde(default, skip_serializing_if = "DefaultLimits::is_empty")]
    pub limits: DefaultLimits,
    /// What the disk guard keeps free on every filesystem an exec can write
    /// (`crate::linux::diskguard`): `"5%,2G"` (the default: the smaller of the two),
    /// `"10%"`, `"1G"`, or `"off"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_reserve: Option<String>,
    /// The operator's own agent profiles (`capsule agent profile add`), beside the
    /// built-in ones ([`crate::agent`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_profiles: Vec<Profile>,
}

/// [`Settings::limits`]: each a number or a string, read as the flag's value is.
pub use capsule_bundle::policy::limits::LimitValues as DefaultLimits;

/// Errors reading or writing settings.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

impl Settings {
    /// Load settings from `path`; a missing file means defaults.
    pub fn load(path: &Path) -> Result<Self, SettingsError> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| SettingsError::Parse {
                path: path.to_path_buf(),
                line: e.line(),
                column: e.column(),
                message: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(SettingsError::Io {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Save atomically (write a temporary file next to it, then rename).
    pub fn save(&self, path: &Path) -> Result<(), SettingsError> {
        let io = |source| SettingsError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        remove_stale_tmp(path);
        let tmp = path.with_extension(format!("json.tmp{}", std::process::id()));
        let text = serde_json::to_string_pretty(self).map_err(|e| io(std::io::Error::other(e)))?;
        std::fs::write(&tmp, text + "\n").map_err(io)?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
    }
}

/// Remove the temporary files (`<settings>.tmp<pid>`) of saves whose process is gone: a
/// save killed between writing and renaming leaves one. Files only, nothing followed.
fn remove_stale_tmp(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!("{}.tmp", name.to_string_lossy());
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let n = e.file_name();
        let pid = n
            .to_str()
            .and_then(|n| n.strip_prefix(prefix.as_str()))
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse::<libc::pid_t>().ok());
        if pid.is_some_and(capsule_bundle::store::staging::process_gone)
            && e.file_type().is_ok_and(|t| !t.is_dir())
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The operator's profiles, from the tool's settings (none without a capsule root).
pub fn operator_profiles() -> Result<Vec<Profile>, CliError> {
    let Some(root) = capsule_bundle::layout::capsule_root() else {
        return Ok(Vec::new());
    };
    let file = capsule_bundle::layout::Layout::new(root).settings_file();
    Settings::load(&file)
        .map(|s| s.agent_profiles)
        .map_err(|e| CliError::failure(e.to_string()))
}

/// The profile named `name` (built-in or the operator's), validated.
pub fn find_profile(name: &str) -> Result<Profile, CliError> {
    let ops = operator_profiles()?;
    let p = agent::find(name, &ops).ok_or_else(|| {
        let names: Vec<String> = agent::all(&ops).into_iter().map(|p| p.name).collect();
        CliError::new(
            crate::exit::USAGE,
            format!(
                "{name:?}: no such agent profile (known: {}; add one with `capsule agent profile add`)",
                names.join(", ")
            ),
        )
    })?;
    p.validate()
        .map_err(|e| CliError::failure(format!("{e} (fix it in the tool's settings)")))?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_save_removes_what_a_killed_save_left() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("settings.json");
        let dead = std::process::Command::new("true")
            .spawn()
            .and_then(|mut c| c.wait().map(|_| c.id()))
            .unwrap();
        let left = d.path().join(format!("settings.json.tmp{dead}"));
        let live = d.path().join("settings.json.tmp1");
        std::fs::write(&left, "{ half").unwrap();
        std::fs::write(&live, "{ another save, running").unwrap();
        Settings::default().save(&p).unwrap();
        assert!(!left.exists(), "a dead save's temporary file is left");
        assert!(live.exists(), "a live process's temporary file was removed");
        assert_eq!(Settings::load(&p).unwrap(), Settings::default());
    }

    #[test]
    fn round_trip_and_missing_is_default() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("settings.json");
        assert_eq!(Settings::load(&p).unwrap(), Settings::default());
        let mut s = Settings {
            accept_weaker: true,
            ..Default::default()
        };
        s.reveals
            .insert("/src/app".into(), vec!["/src/shared".into()]);
        s.save(&p).unwrap();
        assert_eq!(Settings::load(&p).unwrap(), s);
        std::fs::write(&p, "{ bad").unwrap();
        let e = Settings::load(&p).unwrap_err().to_string();
        assert!(e.contains("settings.json:1:"), "{e}");
    }
}

//! Loading Kitsoki's configuration: `.kitsoki.yaml` (shared) and `.kitsoki.local.yaml`
//! (machine-local), their `agent_launch_policy` block (local overrides shared key by key) and
//! their `agent_user_delegation` block (parsed and path-resolved only).
//!
//! Discovery: walk up from the asking process's current directory to the first directory
//! holding either file. A directory that lies inside a capsule is skipped (its files are a
//! copy the sandboxed agent could have rewritten) and the walk continues above the capsule.
//! `--config FILE` names the shared file directly; when its name is `.kitsoki.yaml`, a
//! `.kitsoki.local.yaml` next to it is applied too, exactly as discovery would.
//!
//! Parsing: other top-level keys are ignored; inside `agent_launch_policy` an unknown key is
//! an error with file, line and column, as is malformed YAML anywhere in the file. Paths in
//! `protected_roots`, `allowed_roots`, `wrapper_bin` and `capsule_root` are resolved relative
//! to the file that declares them (and `~`), and made absolute and canonical when loaded.
//!
//! Defaults when the block is present: `enabled: true`, `require_capsule: false`,
//! `protected_roots: [<directory holding the config>]`, `allowed_roots: []`,
//! `protected_branches: [main, master, trunk, integration/*, staging/*]`.

use crate::paths;
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;
use std::path::{Path, PathBuf};

/// The shared configuration file.
pub const SHARED_FILE: &str = ".kitsoki.yaml";
/// The machine-local configuration file (not checked in).
pub const LOCAL_FILE: &str = ".kitsoki.local.yaml";
/// `protected_branches` when not configured.
pub const DEFAULT_PROTECTED_BRANCHES: [&str; 5] =
    ["main", "master", "trunk", "integration/*", "staging/*"];

/// A configuration file that cannot be used. Displays as one line:
/// `FILE:LINE:COLUMN: what is wrong`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        line: u64,
        column: u64,
        message: String,
    },
    #[error("{}: {message}", path.display())]
    Other { path: PathBuf, message: String },
}

/// The effective `agent_launch_policy` after merging and path resolution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EffectivePolicy {
    pub enabled: bool,
    pub require_capsule: bool,
    /// Absolute, canonical (as far as they exist).
    pub protected_roots: Vec<PathBuf>,
    /// Absolute, canonical (as far as they exist).
    pub allowed_roots: Vec<PathBuf>,
    pub protected_branches: Vec<String>,
}

/// `agent_user_delegation`: parsed and path-resolved; the gate does nothing with it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Delegation {
    pub enabled: Option<bool>,
    pub run_as_user: Option<String>,
    pub wrapper_bin: Option<PathBuf>,
    pub capsule_root: Option<PathBuf>,
}

/// What configuration was found and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedConfig {
    /// Files read, shared first.
    pub files: Vec<PathBuf>,
    /// Config files found inside capsules and skipped during discovery.
    pub ignored: Vec<PathBuf>,
    /// None when no file has an `agent_launch_policy` block.
    pub policy: Option<EffectivePolicy>,
    pub delegation: Option<Delegation>,
}

// ---- raw file model -------------------------------------------------------------------

type Entries = Option<Vec<Spanned<Option<String>>>>;

#[derive(Debug, Default, Deserialize)]
struct RawFile {
    #[serde(default, deserialize_with = "present")]
    agent_launch_policy: Option<RawPolicy>,
    #[serde(default, deserialize_with = "present")]
    agent_user_delegation: Option<RawDelegation>,
}

/// A block whose key is written is present, even with nothing under it (`agent_launch_policy:`
/// with every line commented out is YAML null): its defaults apply, the gate is not off.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Some(Option::<T>::deserialize(d)?.unwrap_or_default()))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    enabled: Option<bool>,
    require_capsule: Option<bool>,
    protected_roots: Entries,
    allowed_roots: Entries,
    protected_branches: Entries,
}

#[derive(Debug, Default, Deserialize)]
struct RawDelegation {
    enabled: Option<bool>,
    run_as_user: Option<String>,
    wrapper_bin: Option<Spanned<Option<String>>>,
    capsule_root: Option<Spanned<Option<String>>>,
}

/// One parsed file, with the directory its relative paths are resolved against.
struct Layer {
    path: PathBuf,
    dir: PathBuf,
    raw: RawFile,
}

// ---- discovery ------------------------------------------------------------------------

/// Find and load the configuration for a process whose current directory is `cwd`, or from
/// `explicit` (`--config FILE`, relative to `cwd`). `home` expands `~`.
pub fn load(
    cwd: &Path,
    explicit: Option<&Path>,
    home: Option<&Path>,
) -> Result<LoadedConfig, ConfigError> {
    let mut ignored = Vec::new();
    let (shared, local) = match explicit {
        Some(p) => {
            let abs = if p.is_absolute() {
                p.to_path_buf()
            } else {
                cwd.join(p)
            };
            let abs = std::fs::canonicalize(&abs).map_err(|source| ConfigError::Read {
                path: abs.clone(),
                source,
            })?;
            let local = (abs.file_name() == Some(SHARED_FILE.as_ref()))
                .then(|| abs.with_file_name(LOCAL_FILE))
                .filter(|l| l.is_file());
            (Some(abs), local)
        }
        None => {
            let start = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
            let mut found = (None, None);
            for dir in start.ancestors() {
                let s = dir.join(SHARED_FILE);
                let l = dir.join(LOCAL_FILE);
                let (has_s, has_l) = (s.is_file(), l.is_file());
                if !has_s && !has_l {
                    continue;
                }
                if let Some(c) = crate::capsule::find(dir) {
                    tracing::debug!(
                        "skipping configuration in {} (inside capsule {})",
                        dir.display(),
                        c.root.display()
                    );
                    ignored.extend([s, l].into_iter().filter(|p| p.is_file()));
                    continue;
                }
                found = (has_s.then_some(s), has_l.then_some(l));
                break;
            }
            found
        }
    };
    let mut layers = Vec::new();
    for path in [shared, local].into_iter().flatten() {
        layers.push(read_layer(&path)?);
    }
    let files = layers.iter().map(|l| l.path.clone()).collect();
    let mut cfg = merge(layers, home)?;
    cfg.files = files;
    cfg.ignored = ignored;
    Ok(cfg)
}

fn read_layer(path: &Path) -> Result<Layer, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let raw = parse(path, &text)?;
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    Ok(Layer {
        path: path.to_path_buf(),
        dir,
        raw,
    })
}

fn parse(path: &Path, text: &str) -> Result<RawFile, ConfigError> {
    if text.trim().is_empty() {
        return Ok(RawFile::default());
    }
    let raw: Option<RawFile> = serde_saphyr::from_str(text).map_err(|e| {
        let (line, column) = e
            .location()
            .map(|l| (l.line(), l.column()))
            .unwrap_or((0, 0));
        let mut message = e.without_snippet().to_string();
        // the location is already in front; drop the " at line N, column M" tail
        if let Some(i) = message.rfind(" at line ") {
            message.truncate(i);
        }
        ConfigError::Invalid {
            path: path.to_path_buf(),
            line,
            column,
            message,
        }
    })?;
    Ok(raw.unwrap_or_default())
}

// ---- merging and resolution -----------------------------------------------------------

/// Local (later) layers override earlier ones key by key; each value keeps the directory of
/// the file that declared it.
fn merge(layers: Vec<Layer>, home: Option<&Path>) -> Result<LoadedConfig, ConfigError> {
    let base_dir = layers
        .first()
        .map(|l| l.dir.clone())
        .unwrap_or_else(|| PathBuf::from("/"));
    let has_policy = layers.iter().any(|l| l.raw.agent_launch_policy.is_some());
    let has_delegation = layers.iter().any(|l| l.raw.agent_user_delegation.is_some());

    // last layer that sets a key wins
    fn pick<'a, T>(
        layers: &'a [Layer],
        f: impl Fn(&'a Layer) -> Option<&'a T>,
    ) -> Option<(&'a T, &'a Layer)> {
        layers.iter().rev().find_map(|l| f(l).map(|v| (v, l)))
    }

    let policy = if has_policy {
        let enabled = pick(&layers, |l| {
            l.raw
                .agent_launch_policy
                .as_ref()
                .and_then(|p| p.enabled.as_ref())
        });
        let require = pick(&layers, |l| {
            l.raw
                .agent_launch_policy
                .as_ref()
                .and_then(|p| p.require_capsule.as_ref())
        });
        let protected = pick(&layers, |l| {
            l.raw
                .agent_launch_policy
                .as_ref()
                .and_then(|p| p.protected_roots.as_ref())
        });
        let allowed = pick(&layers, |l| {
            l.raw
                .agent_launch_policy
                .as_ref()
                .and_then(|p| p.allowed_roots.as_ref())
        });
        let branches = pick(&layers, |l| {
            l.raw
                .agent_launch_policy
                .as_ref()
                .and_then(|p| p.protected_branches.as_ref())
        });
        let protected_roots = match protected {
            Some((entries, layer)) => resolve_entries(entries, layer, home)?,
            None => vec![paths::resolve_best_effort(&base_dir)],
        };
        let allowed_roots = match allowed {
            Some((entries, layer)) => resolve_entries(entries, layer, home)?,
            None => Vec::new(),
        };
        let protected_branches = match branches {
            Some((entries, layer)) => strings(entries, layer, "branch pattern")?,
            None => DEFAULT_PROTECTED_BRANCHES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        };
        Some(EffectivePolicy {
            enabled: enabled.map(|(v, _)| *v).unwrap_or(true),
            require_capsule: require.map(|(v, _)| *v).unwrap_or(false),
            protected_roots,
            allowed_roots,
            protected_branches,
        })
    } else {
        None
    };

    let delegation = if has_delegation {
        let enabled = pick(&layers, |l| {
            l.raw
                .agent_user_delegation
                .as_ref()
                .and_then(|d| d.enabled.as_ref())
        });
        let user = pick(&layers, |l| {
            l.raw
                .agent_user_delegation
                .as_ref()
                .and_then(|d| d.run_as_user.as_ref())
        });
        let wrapper = pick(&layers, |l| {
            l.raw
                .agent_user_delegation
                .as_ref()
                .and_then(|d| d.wrapper_bin.as_ref())
        });
        let root = pick(&layers, |l| {
            l.raw
                .agent_user_delegation
                .as_ref()
                .and_then(|d| d.capsule_root.as_ref())
        });
        Some(Delegation {
            enabled: enabled.map(|(v, _)| *v),
            run_as_user: user.map(|(v, _)| v.clone()),
            wrapper_bin: wrapper
                .map(|(e, l)| resolve_one(e, l, home, "wrapper_bin"))
                .transpose()?
                .flatten(),
            capsule_root: root
                .map(|(e, l)| resolve_one(e, l, home, "capsule_root"))
                .transpose()?
                .flatten(),
        })
    } else {
        None
    };

    Ok(LoadedConfig {
        files: Vec::new(),
        ignored: Vec::new(),
        policy,
        delegation,
    })
}

fn invalid(layer: &Layer, at: &Spanned<Option<String>>, message: String) -> ConfigError {
    ConfigError::Invalid {
        path: layer.path.clone(),
        line: at.referenced.line(),
        column: at.referenced.column(),
        message,
    }
}

fn resolve_entries(
    entries: &[Spanned<Option<String>>],
    layer: &Layer,
    home: Option<&Path>,
) -> Result<Vec<PathBuf>, ConfigError> {
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let Some(raw) = e.value.as_deref() else {
            return Err(invalid(
                layer,
                e,
                "empty entry (a bare `~` is YAML null; quote it as '~' for the home directory)"
                    .into(),
            ));
        };
        let p =
            paths::resolve_configured(raw, &layer.dir, home).map_err(|m| invalid(layer, e, m))?;
        out.push(p);
    }
    Ok(out)
}

fn resolve_one(
    e: &Spanned<Option<String>>,
    layer: &Layer,
    home: Option<&Path>,
    what: &str,
) -> Result<Option<PathBuf>, ConfigError> {
    match e.value.as_deref() {
        None => Ok(None),
        Some(raw) => paths::resolve_configured(raw, &layer.dir, home)
            .map(Some)
            .map_err(|m| invalid(layer, e, format!("{what}: {m}"))),
    }
}

fn strings(
    entries: &[Spanned<Option<String>>],
    layer: &Layer,
    what: &str,
) -> Result<Vec<String>, ConfigError> {
    entries
        .iter()
        .map(|e| match e.value.as_deref() {
            Some(s) if !s.is_empty() => Ok(s.to_owned()),
            _ => Err(invalid(layer, e, format!("empty {what}"))),
        })
        .collect()
}

#[cfg(test)]
#[path = "config_props.rs"]
mod props;

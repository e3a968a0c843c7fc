//! Projects a workspace builds from: the folders outside a source folder that its own
//! manifests name (`path = "../shared"` in Cargo.toml, `file:../ui` in package.json,
//! `<ProjectReference Include="..\Shared\Shared.csproj">` in a .csproj, `replace … => ../x`
//! in go.mod / go.work), and which of them the person opened (`capsule reveal add`).
//!
//! Everything here only *suggests*: nothing is opened by reading a manifest. Opened folders
//! are stored in the tool's settings ([`crate::settings::Settings::reveals`]), keyed by the
//! canonical source folder, never in the repository.
//!
//! Manifests are parsed in `manifests` with libraries made for them (cargo_toml,
//! serde_json, quick-xml); go.mod / go.work with a small tokenizer of their documented
//! grammar (<https://go.dev/ref/mod#go-mod-file-grammar>).

use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

mod manifests;
pub use manifests::{cargo_refs, dotnet_refs, go_refs, npm_refs, parse_manifest, PathRef};

/// Folders not searched for manifests (dependencies, build output, VCS data).
const SKIP_DIRS: &[&str] = &[
    ".git",
    "node_modules",
    "target",
    "bin",
    "obj",
    "vendor",
    "dist",
    "build",
    ".venv",
    "venv",
    "__pycache__",
    ".yarn",
    ".pnpm-store",
    ".gradle",
];
/// How deep below the source folder manifests are looked for.
const MAX_DEPTH: usize = 6;
/// At most this many directories are read (a guard against huge trees).
const MAX_DIRS: usize = 20_000;
/// Manifests larger than this are not parsed.
const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// Which kind of manifest named a folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ManifestKind {
    Cargo,
    Npm,
    Dotnet,
    GoMod,
    GoWork,
}

/// One mention of a path in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Mention {
    /// The manifest, relative to the source folder.
    pub manifest: PathBuf,
    pub kind: ManifestKind,
    /// Where in the manifest (`dependencies.shared`, `patch.crates-io.x`, `replace`…).
    pub field: String,
    /// The path exactly as written.
    pub written: String,
}

/// A folder outside the source folder that manifests name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Suggestion {
    /// Absolute path (canonical when it exists, else lexically normalized).
    pub path: PathBuf,
    /// The path relative to the source folder (`../shared`), for display.
    pub relative: String,
    pub exists: bool,
    /// Opened for this source folder's capsules (`capsule reveal add`).
    pub opened: bool,
    /// The manifests naming it; empty for a folder opened by hand that no manifest names.
    pub named_by: Vec<Mention>,
}

/// A manifest that could not be read or parsed (reported, never fatal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unreadable {
    pub manifest: PathBuf,
    pub error: String,
}

/// The result of scanning a source folder.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Scan {
    pub source: PathBuf,
    pub suggestions: Vec<Suggestion>,
    pub unreadable: Vec<Unreadable>,
}

/// Errors of reveal operations.
#[derive(Debug, thiserror::Error)]
pub enum RevealError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: not a directory; reveal opens folders")]
    NotADirectory(PathBuf),
    #[error("{path}: {why}; not revealed")]
    Refused { path: PathBuf, why: String },
    #[error("{path}: not revealed for source {source_dir} (see `capsule reveal list`)")]
    NotRevealed { path: PathBuf, source_dir: PathBuf },
}

/// The default source folder: the git work tree holding `cwd` (a folder with `.git`), or
/// `cwd` itself.
pub fn default_source(cwd: &Path) -> PathBuf {
    let mut cur = Some(cwd);
    while let Some(d) = cur {
        if std::fs::symlink_metadata(d.join(".git")).is_ok() {
            return d.to_path_buf();
        }
        cur = d.parent();
    }
    cwd.to_path_buf()
}

/// Lexically normalize an absolute path: drop `.`, resolve `..` against the preceding
/// component (never above `/`).
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => out.push(c.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if out.parent().is_some() {
                    out.pop();
                }
            }
            Component::Normal(n) => out.push(n),
        }
    }
    out
}

/// Canonical path when it exists, else the lexically normalized one (its existing prefix
/// canonicalized, so `..` through a symlinked parent still resolves as the OS would).
fn resolve(p: &Path) -> (PathBuf, bool) {
    if let Ok(c) = std::fs::canonicalize(p) {
        return (c, true);
    }
    let n = normalize(p);
    // canonicalize the longest existing prefix
    let mut prefix = n.clone();
    let mut rest = Vec::new();
    while !prefix.as_os_str().is_empty() {
        if let Ok(c) = std::fs::canonicalize(&prefix) {
            let mut out = c;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return (normalize(&out), false);
        }
        match (
            prefix.file_name().map(|f| f.to_os_string()),
            prefix.parent(),
        ) {
            (Some(f), Some(parent)) => {
                rest.push(f);
                prefix = parent.to_path_buf();
            }
            _ => break,
        }
    }
    (n, false)
}

/// `path` relative to `base` with `..` steps (both absolute, normalized).
pub fn relative_to(path: &Path, base: &Path) -> String {
    let p: Vec<_> = path.components().collect();
    let b: Vec<_> = base.components().collect();
    let common = p.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut parts: Vec<String> = Vec::new();
    for _ in common..b.len() {
        parts.push("..".into());
    }
    for c in &p[common..] {
        parts.push(c.as_os_str().to_string_lossy().into_owned());
    }
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

/// Scan `source` (canonical) for manifests and return the folders outside it they name,
/// merged with the folders opened in `opened` (canonical paths, from settings).
pub fn scan(source: &Path, opened: &[PathBuf]) -> Result<Scan, RevealError> {
    let mut by_path: BTreeMap<PathBuf, (bool, Vec<Mention>)> = BTreeMap::new();
    let mut unreadable = Vec::new();
    let mut manifests = Vec::new();
    find_manifests(source, &mut manifests).map_err(|e| RevealError::Io {
        path: source.to_path_buf(),
        source: e,
    })?;
    manifests.sort();
    for (file, kind) in manifests {
        let rel_manifest = file.strip_prefix(source).unwrap_or(&file).to_path_buf();
        let dir = file.parent().unwrap_or(source);
        let found = match read_manifest(&file) {
            Ok(text) => parse_manifest(kind, &file, &text),
            Err(e) => Err(e),
        };
        match found {
            Ok(refs) => {
                for r in refs {
                    let (path, exists) = resolve(&dir.join(&r.path));
                    if path.starts_with(source) {
                        continue;
                    }
                    by_path
                        .entry(path)
                        .or_insert((exists, Vec::new()))
                        .1
                        .push(Mention {
                            manifest: rel_manifest.clone(),
                            kind,
                            field: r.field,
                            written: r.written,
                        });
                }
            }
            Err(error) => unreadable.push(Unreadable {
                manifest: rel_manifest,
                error,
            }),
        }
    }
    for o in opened {
        by_path
            .entry(o.clone())
            .or_insert_with(|| (o.exists(), Vec::new()));
    }
    let suggestions = by_path
        .into_iter()
        .map(|(path, (exists, mut named_by))| {
            named_by.sort();
            named_by.dedup();
            Suggestion {
                relative: relative_to(&path, source),
                opened: opened.contains(&path),
                path,
                exists,
                named_by,
            }
        })
        .collect();
    Ok(Scan {
        source: source.to_path_buf(),
        suggestions,
        unreadable,
    })
}

fn read_manifest(file: &Path) -> Result<String, String> {
    let md = std::fs::metadata(file).map_err(|e| e.to_string())?;
    if md.len() > MAX_MANIFEST_BYTES {
        return Err(format!("larger than {MAX_MANIFEST_BYTES} bytes; not read"));
    }
    std::fs::read_to_string(file).map_err(|e| e.to_string())
}

fn manifest_kind(name: &str) -> Option<ManifestKind> {
    match name {
        "Cargo.toml" => Some(ManifestKind::Cargo),
        "package.json" => Some(ManifestKind::Npm),
        "go.mod" => Some(ManifestKind::GoMod),
        "go.work" => Some(ManifestKind::GoWork),
        n if n.ends_with(".csproj") || n.ends_with(".fsproj") || n.ends_with(".vbproj") => {
            Some(ManifestKind::Dotnet)
        }
        _ => None,
    }
}

/// Breadth-first walk (no symlinks followed) collecting manifests.
fn find_manifests(source: &Path, out: &mut Vec<(PathBuf, ManifestKind)>) -> std::io::Result<()> {
    let mut queue = std::collections::VecDeque::from([(source.to_path_buf(), 0usize)]);
    let mut dirs = 0usize;
    while let Some((dir, depth)) = queue.pop_front() {
        dirs += 1;
        if dirs > MAX_DIRS {
            tracing::warn!(
                "reveal: stopped after {MAX_DIRS} folders under {}",
                source.display()
            );
            break;
        }
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if depth == 0 => return Err(e),
            Err(e) => {
                tracing::debug!("reveal: skipping {}: {e}", dir.display());
                continue;
            }
        };
        for ent in rd.flatten() {
            let Ok(ft) = ent.file_type() else { continue };
            let name = ent.file_name();
            let name = name.to_string_lossy();
            if ft.is_dir() {
                if depth < MAX_DEPTH && !SKIP_DIRS.contains(&name.as_ref()) {
                    queue.push_back((ent.path(), depth + 1));
                }
            } else if ft.is_file() {
                if let Some(k) = manifest_kind(&name) {
                    out.push((ent.path(), k));
                }
            }
        }
    }
    Ok(())
}

/// Check that `dir` (canonical, a directory) may be revealed: not the root, not the home
/// directory or a folder holding it, not a credential or agent-login path or a folder
/// holding one, not inside the capsule root.
pub fn check_revealable(
    dir: &Path,
    home: Option<&Path>,
    capsule_root: Option<&Path>,
) -> Result<(), RevealError> {
    let refuse = |why: String| RevealError::Refused {
        path: dir.to_path_buf(),
        why,
    };
    if dir.parent().is_none() {
        return Err(refuse("the root folder".into()));
    }
    if let Some(root) = capsule_root {
        if dir.starts_with(root) || root.starts_with(dir) {
            return Err(refuse("holds capsule's own state".into()));
        }
    }
    if let Some(home) = home {
        if home.starts_with(dir) {
            return Err(refuse("the home folder or a folder holding it".into()));
        }
        use capsule_bundle::policy::{HOME_AGENT_LOGINS, HOME_CREDENTIALS};
        for rel in HOME_CREDENTIALS.iter().chain(HOME_AGENT_LOGINS) {
            let p = home.join(rel);
            if dir.starts_with(&p) || p.starts_with(dir) && p.exists() {
                return Err(refuse(format!(
                    "is or holds {} (credentials or logins)",
                    p.display()
                )));
            }
        }
    }
    Ok(())
}

/// Canonicalize a folder to reveal; it must exist and be a directory.
pub fn canonical_dir(dir: &Path) -> Result<PathBuf, RevealError> {
    let c = std::fs::canonicalize(dir).map_err(|e| RevealError::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    if !c.is_dir() {
        return Err(RevealError::NotADirectory(c));
    }
    Ok(c)
}

/// Folders opened for `source` (canonical) in `settings`.
pub fn opened_for(settings: &crate::settings::Settings, source: &Path) -> Vec<PathBuf> {
    settings.reveals.get(source).cloned().unwrap_or_default()
}

/// Record `dir` as opened for `source`; returns false when it already was.
pub fn add(settings: &mut crate::settings::Settings, source: &Path, dir: &Path) -> bool {
    let v = settings.reveals.entry(source.to_path_buf()).or_default();
    if v.iter().any(|p| p == dir) {
        return false;
    }
    v.push(dir.to_path_buf());
    v.sort();
    true
}

/// Remove `dir` from the folders opened for `source`.
pub fn remove(
    settings: &mut crate::settings::Settings,
    source: &Path,
    dir: &Path,
) -> Result<(), RevealError> {
    let not = || RevealError::NotRevealed {
        path: dir.to_path_buf(),
        source_dir: source.to_path_buf(),
    };
    let v = settings.reveals.get_mut(source).ok_or_else(not)?;
    let before = v.len();
    v.retain(|p| p != dir);
    if v.len() == before {
        return Err(not());
    }
    if v.is_empty() {
        settings.reveals.remove(source);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_and_relative() {
        assert_eq!(
            normalize(Path::new("/a/b/../c/./d")),
            PathBuf::from("/a/c/d")
        );
        assert_eq!(normalize(Path::new("/../a")), PathBuf::from("/a"));
        assert_eq!(
            relative_to(Path::new("/s/shared"), Path::new("/s/app")),
            "../shared"
        );
        assert_eq!(
            relative_to(Path::new("/x/y"), Path::new("/s/app")),
            "../../x/y"
        );
    }

    #[test]
    fn revealable_rules() {
        let home = Path::new("/home/u");
        assert!(check_revealable(Path::new("/"), Some(home), None).is_err());
        assert!(check_revealable(Path::new("/home"), Some(home), None).is_err());
        assert!(check_revealable(home, Some(home), None).is_err());
        assert!(check_revealable(Path::new("/home/u/.ssh/keys"), Some(home), None).is_err());
        assert!(check_revealable(
            Path::new("/home/u/root/x"),
            Some(home),
            Some(Path::new("/home/u/root"))
        )
        .is_err());
        assert!(check_revealable(Path::new("/home/u/src/shared"), Some(home), None).is_ok());
    }
}

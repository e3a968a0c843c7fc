//! Canonical paths as macOS's sandbox sees them. Seatbelt matches the resolved path of a
//! file, so a rule on `/tmp/x` never matches (`/tmp` is a symlink to `/private/tmp`); a
//! deny on a non-canonical spelling fails open. Every path goes through [`canonicalize`]
//! before it becomes a filter.
//!
//! Resolution is injectable ([`Resolver`]) so Linux tests can model macOS's symlinks with
//! [`ModelResolver::macos`]; the executor uses [`HostResolver`].

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// Resolves existing paths to their real path (all symlinks followed).
pub trait Resolver {
    /// The real path of `p` if it exists, `None` if it does not.
    fn real_path(&self, p: &Path) -> Option<PathBuf>;
}

/// The host's file system (`realpath(3)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct HostResolver;

impl Resolver for HostResolver {
    fn real_path(&self, p: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(p).ok()
    }
}

/// A modelled file system: a set of symlinks (absolute link -> absolute target) and
/// optionally the set of paths that exist (`None`: every path exists).
#[derive(Debug, Clone, Default)]
pub struct ModelResolver {
    pub links: Vec<(PathBuf, PathBuf)>,
    pub exists: Option<BTreeSet<PathBuf>>,
}

impl ModelResolver {
    /// macOS's top-level symlinks: `/tmp`, `/var`, `/etc` live under `/private`.
    pub fn macos() -> Self {
        ModelResolver {
            links: ["tmp", "var", "etc"]
                .iter()
                .map(|d| (Path::new("/").join(d), Path::new("/private").join(d)))
                .collect(),
            exists: None,
        }
    }
    fn resolve_links(&self, p: &Path) -> PathBuf {
        let mut cur = p.to_path_buf();
        for _ in 0..40 {
            let hit = self
                .links
                .iter()
                .filter(|(l, _)| cur.starts_with(l))
                .max_by_key(|(l, _)| l.components().count());
            match hit {
                Some((l, t)) => {
                    let rest = cur
                        .strip_prefix(l)
                        .map(Path::to_path_buf)
                        .unwrap_or_default();
                    cur = if rest.as_os_str().is_empty() {
                        t.clone()
                    } else {
                        t.join(rest)
                    };
                }
                None => return cur,
            }
        }
        cur
    }
}

impl Resolver for ModelResolver {
    fn real_path(&self, p: &Path) -> Option<PathBuf> {
        let r = self.resolve_links(p);
        match &self.exists {
            Some(set) if !set.contains(&r) && r != Path::new("/") => None,
            _ => Some(r),
        }
    }
}

/// Why a path cannot be used in a profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonError {
    #[error("{0:?} is not an absolute path")]
    NotAbsolute(PathBuf),
    #[error("{0:?} contains '..'")]
    DotDot(PathBuf),
    #[error("{0:?} is not valid UTF-8")]
    NotUtf8(PathBuf),
    #[error("{0:?} contains NUL")]
    Nul(PathBuf),
}

/// Lexical clean-up: absolute, `.` and empty components dropped, `..` refused.
pub fn lexical(p: &Path) -> Result<PathBuf, CanonError> {
    let s = p.to_str().ok_or_else(|| CanonError::NotUtf8(p.into()))?;
    if s.contains('\0') {
        return Err(CanonError::Nul(p.into()));
    }
    if !p.is_absolute() {
        return Err(CanonError::NotAbsolute(p.into()));
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => return Err(CanonError::DotDot(p.into())),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}

/// The canonical form of `p`: the real path of its nearest existing ancestor (itself if it
/// exists) followed by the rest, with no `..`, `//` or trailing `/`.
pub fn canonicalize(p: &Path, r: &dyn Resolver) -> Result<PathBuf, CanonError> {
    let clean = lexical(p)?;
    let comps: Vec<_> = clean.components().collect();
    for i in (1..=comps.len()).rev() {
        let prefix: PathBuf = comps[..i].iter().collect();
        if let Some(real) = r.real_path(&prefix) {
            let mut out = lexical(&real)?;
            for c in &comps[i..] {
                out.push(c);
            }
            return Ok(out);
        }
    }
    Ok(clean)
}

/// Is `s` in the canonical textual form a filter needs: absolute, no `.`/`..` components,
/// no `//`, no trailing `/` (except `/` itself), no NUL?
pub fn is_canonical_text(s: &str) -> bool {
    if s == "/" {
        return true;
    }
    s.starts_with('/')
        && !s.ends_with('/')
        && !s.contains("//")
        && !s.contains('\0')
        && s[1..].split('/').all(|c| c != "." && c != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macos_model() {
        let m = ModelResolver::macos();
        let c = |p: &str| canonicalize(Path::new(p), &m).unwrap();
        assert_eq!(c("/tmp"), Path::new("/private/tmp"));
        assert_eq!(
            c("/var/folders//x/./y/"),
            Path::new("/private/var/folders/x/y")
        );
        assert_eq!(c("/etc/hosts"), Path::new("/private/etc/hosts"));
        assert_eq!(c("/tmpx"), Path::new("/tmpx"));
        assert!(canonicalize(Path::new("/a/../b"), &m).is_err());
        assert!(canonicalize(Path::new("a/b"), &m).is_err());
    }

    #[test]
    fn nearest_existing_ancestor() {
        let m = ModelResolver {
            links: vec![("/Users/u/link".into(), "/Volumes/data/real".into())],
            exists: Some(
                [
                    "/Users",
                    "/Users/u",
                    "/Volumes",
                    "/Volumes/data",
                    "/Volumes/data/real",
                ]
                .iter()
                .map(PathBuf::from)
                .collect(),
            ),
        };
        let c = canonicalize(Path::new("/Users/u/link/new/deeper"), &m).unwrap();
        assert_eq!(c, Path::new("/Volumes/data/real/new/deeper"));
    }

    #[test]
    fn host_resolver_follows_symlinks_of_missing_tails() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, t.path().join("ln")).unwrap();
        let got = canonicalize(&t.path().join("ln/not/yet"), &HostResolver).unwrap();
        assert_eq!(got, std::fs::canonicalize(&real).unwrap().join("not/yet"));
    }

    #[test]
    fn canonical_text() {
        for ok in ["/", "/a", "/a/b c", "/a/.hidden"] {
            assert!(is_canonical_text(ok), "{ok}");
        }
        for bad in ["", "a", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/a/../b"] {
            assert!(!is_canonical_text(bad), "{bad}");
        }
    }
}

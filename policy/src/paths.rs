//! Path handling for the gate: `~` expansion, making configured paths absolute relative to the
//! file that declares them, resolving them to canonical form (symlinks and `..` as the kernel
//! sees them, even for paths that do not exist yet), and the whole-component "inside" test.

use std::path::{Component, Path, PathBuf};

/// True when `path` is `root` or lies below it. Compares whole path components, so
/// `/a/proj2` is not inside `/a/proj`. Both sides must already be canonical.
pub fn is_inside(path: &Path, root: &Path) -> bool {
    path.starts_with(root)
}

/// Expand a leading `~` (alone or followed by `/`) with `home`. `~user` forms are refused:
/// they would need a password-database lookup whose answer differs between machines.
pub fn expand_tilde(raw: &str, home: Option<&Path>) -> Result<PathBuf, String> {
    if raw == "~" || raw.starts_with("~/") {
        let home = home.ok_or_else(|| {
            format!("`{raw}` starts with `~` but HOME is not set; write an absolute path")
        })?;
        let rest = raw.strip_prefix('~').unwrap_or("").trim_start_matches('/');
        return Ok(if rest.is_empty() {
            home.to_path_buf()
        } else {
            home.join(rest)
        });
    }
    if raw.starts_with('~') {
        return Err(format!(
            "`{raw}`: only `~` and `~/…` are expanded (not `~user`); write an absolute path"
        ));
    }
    Ok(PathBuf::from(raw))
}

/// Lexically normalize an absolute path: drop `.`, let `..` remove the previous component
/// (never above `/`). Does not touch the file system.
pub fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    if out.as_os_str().is_empty() {
        out.push("/");
    }
    out
}

/// Resolve an absolute path to canonical form as far as it exists: the longest existing
/// prefix is canonicalized by the kernel (symlinks followed, `..` applied after them), and
/// the missing remainder is appended after lexical normalization. A configured root that
/// does not exist yet (say `/tmp/kitsoki-capsules`) still compares correctly against
/// canonical working directories.
pub fn resolve_best_effort(abs: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(abs) {
        return p;
    }
    let comps: Vec<Component<'_>> = abs.components().collect();
    // Try ever shorter prefixes; the first that canonicalizes anchors the rest.
    for cut in (1..comps.len()).rev() {
        let prefix: PathBuf = comps[..cut].iter().collect();
        if let Ok(base) = std::fs::canonicalize(&prefix) {
            let mut joined = base;
            for c in &comps[cut..] {
                joined.push(c.as_os_str());
            }
            return normalize_lexically(&joined);
        }
    }
    normalize_lexically(abs)
}

/// Make `raw` (as written in a config file) absolute: expand `~`, join relative paths to
/// `base` (the directory of the declaring file), then resolve with [`resolve_best_effort`].
pub fn resolve_configured(raw: &str, base: &Path, home: Option<&Path>) -> Result<PathBuf, String> {
    if raw.is_empty() {
        return Err("empty path".into());
    }
    let expanded = expand_tilde(raw, home)?;
    let abs = if expanded.is_absolute() {
        expanded
    } else {
        base.join(expanded)
    };
    Ok(resolve_best_effort(&abs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_compares_whole_components() {
        let cases = [
            ("/a/proj", "/a/proj", true),
            ("/a/proj/x", "/a/proj", true),
            ("/a/proj2", "/a/proj", false),
            ("/a/proj2/x", "/a/proj", false),
            ("/a", "/a/proj", false),
            ("/anything", "/", true),
        ];
        for (p, r, want) in cases {
            assert_eq!(is_inside(Path::new(p), Path::new(r)), want, "{p} in {r}");
        }
    }

    #[test]
    fn tilde_forms() {
        let home = Path::new("/home/u");
        assert_eq!(
            expand_tilde("~", Some(home)).unwrap(),
            PathBuf::from("/home/u")
        );
        assert_eq!(
            expand_tilde("~/x/y", Some(home)).unwrap(),
            PathBuf::from("/home/u/x/y")
        );
        assert_eq!(
            expand_tilde("a/~", Some(home)).unwrap(),
            PathBuf::from("a/~")
        );
        assert!(expand_tilde("~bob/x", Some(home)).is_err());
        assert!(expand_tilde("~/x", None).is_err());
    }

    #[test]
    fn lexical_normalization() {
        let cases = [
            ("/a/b/../c", "/a/c"),
            ("/a/./b/", "/a/b"),
            ("/../..", "/"),
            ("/a/b/../../..", "/"),
        ];
        for (i, want) in cases {
            assert_eq!(
                normalize_lexically(Path::new(i)),
                PathBuf::from(want),
                "{i}"
            );
        }
    }

    #[test]
    fn best_effort_resolves_existing_prefix_through_symlinks() {
        let d = tempfile::tempdir_in("/dev/shm").unwrap();
        let real = d.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        let canon = std::fs::canonicalize(&real).unwrap();
        // existing, through a symlink
        assert_eq!(resolve_best_effort(&d.path().join("link")), canon);
        // missing tail below a symlink, with `..` in the missing part
        assert_eq!(
            resolve_best_effort(&d.path().join("link/missing/../other")),
            canon.join("other")
        );
    }
}

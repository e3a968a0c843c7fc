//! Paths a repository's files name (a linked worktree's `gitdir`, `core.worktree`, a
//! local remote, alternates), judged without following them: [`local_inside`] normalizes
//! one lexically and then looks at each component below the workspace with `lstat`, so a
//! symlink on the way counts as leaving.

use std::path::{Component, Path, PathBuf};

/// Where a path leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inside {
    /// Inside the workspace (or the workspace itself), through no symlink: the normalized
    /// absolute path.
    Yes(PathBuf),
    /// Outside the workspace.
    Outside,
    /// Through a symlink inside the workspace (it could lead anywhere).
    Symlink,
}

/// `p` lexically normalized: `.` dropped, `..` taking away the component before it
/// (never above `/`).
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => out.push(c.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    out
}

/// The workspace as paths in git's files may name it: its canonical path (what git
/// writes, and where the guard works) and the path capsule was given, when that differs
/// (a capsule root reached through a symlink).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub canonical: PathBuf,
    pub given: Option<PathBuf>,
}

impl Roots {
    pub fn new(workspace: &Path) -> Roots {
        match std::fs::canonicalize(workspace) {
            Ok(c) if c != workspace => Roots {
                canonical: c,
                given: Some(workspace.to_path_buf()),
            },
            _ => Roots {
                canonical: workspace.to_path_buf(),
                given: None,
            },
        }
    }

    /// `p` (absolute, normalized) re-rooted on the canonical path when it lies under the
    /// given one.
    pub fn rebase(&self, p: &Path) -> PathBuf {
        match &self.given {
            Some(g) => match p.strip_prefix(g) {
                Ok(rel) => self.canonical.join(rel),
                Err(_) => p.to_path_buf(),
            },
            None => p.to_path_buf(),
        }
    }
}

/// Does `p` (relative to `base` when relative) lead inside the workspace, through no
/// symlink? Components that do not exist are fine (nothing to follow there yet). A path
/// inside is given back on the canonical root.
pub fn local_inside(ws: &Roots, base: &Path, p: &Path) -> Inside {
    let abs = ws.rebase(&normalize(&if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }));
    let Ok(rel) = abs.strip_prefix(&ws.canonical) else {
        return Inside::Outside;
    };
    let mut at = ws.canonical.clone();
    for c in rel.components() {
        at.push(c.as_os_str());
        match std::fs::symlink_metadata(&at) {
            Ok(md) if md.file_type().is_symlink() => return Inside::Symlink,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Inside::Yes(abs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_outside_and_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(d.path()).unwrap().join("ws");
        std::fs::create_dir_all(ws.join("a/b")).unwrap();
        std::os::unix::fs::symlink(&ws, d.path().join("alias")).unwrap();
        let roots = Roots::new(&d.path().join("alias"));
        assert_eq!(roots.canonical, ws);
        assert_eq!(
            local_inside(&roots, &ws, &d.path().join("alias/a")),
            Inside::Yes(ws.join("a"))
        );
        let roots = Roots::new(&ws);
        std::os::unix::fs::symlink("/etc", ws.join("link")).unwrap();
        let git = ws.join(".git");
        assert_eq!(
            local_inside(&roots, &git, Path::new("../a/b")),
            Inside::Yes(ws.join("a/b"))
        );
        assert_eq!(
            local_inside(&roots, &git, Path::new("../../x")),
            Inside::Outside
        );
        assert_eq!(
            local_inside(&roots, &git, Path::new("/etc")),
            Inside::Outside
        );
        assert_eq!(
            local_inside(&roots, &git, Path::new("../link/passwd")),
            Inside::Symlink
        );
        assert_eq!(
            local_inside(&roots, &ws, Path::new("not/yet")),
            Inside::Yes(ws.join("not/yet"))
        );
        assert_eq!(
            normalize(Path::new("/a/../../b/./c")),
            PathBuf::from("/b/c")
        );
    }
}

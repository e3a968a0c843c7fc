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

/// Does `p` (relative to `base` when relative) lead inside `workspace` (absolute,
/// canonical), through no symlink? Components that do not exist are fine (nothing to
/// follow there yet).
pub fn local_inside(workspace: &Path, base: &Path, p: &Path) -> Inside {
    let abs = normalize(&if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    });
    let Ok(rel) = abs.strip_prefix(workspace) else {
        return Inside::Outside;
    };
    let mut at = workspace.to_path_buf();
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
        let ws = d.path().join("ws");
        std::fs::create_dir_all(ws.join("a/b")).unwrap();
        std::os::unix::fs::symlink("/etc", ws.join("link")).unwrap();
        let git = ws.join(".git");
        assert_eq!(
            local_inside(&ws, &git, Path::new("../a/b")),
            Inside::Yes(ws.join("a/b"))
        );
        assert_eq!(
            local_inside(&ws, &git, Path::new("../../x")),
            Inside::Outside
        );
        assert_eq!(local_inside(&ws, &git, Path::new("/etc")), Inside::Outside);
        assert_eq!(
            local_inside(&ws, &git, Path::new("../link/passwd")),
            Inside::Symlink
        );
        assert_eq!(
            local_inside(&ws, &ws, Path::new("not/yet")),
            Inside::Yes(ws.join("not/yet"))
        );
        assert_eq!(
            normalize(Path::new("/a/../../b/./c")),
            PathBuf::from("/b/c")
        );
    }
}

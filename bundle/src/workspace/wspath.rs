//! Paths inside a tree someone else wrote, by name: joining a checked relative path under
//! its root without passing through a symlink ([`inside`]), `mkdir -p` that never follows
//! one ([`mkdirs`]), and writing a file there ([`write_file`]). The synthetic steps
//! ([`crate::workspace::materialize`]) and the overlay copy
//! ([`crate::workspace::overlay`]) both write through these.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

/// What a path may be at its last component.
#[derive(Clone, Copy, PartialEq)]
pub enum Last {
    /// A symlink there is an error (we would write or enter through it).
    NoSymlink,
    /// A symlink there is fine (it is removed, not followed).
    SymlinkOk,
}

/// Join `rel` (already lexically checked: relative, no `..`) under `root`, refusing any
/// existing component that is a symlink (and the last one unless `last` allows it) or a
/// non-directory in the middle.
pub fn inside(root: &Path, rel: &str, last: Last) -> std::result::Result<PathBuf, String> {
    crate::spec::check_relative(rel)?;
    let comps: Vec<_> = Path::new(rel)
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    let mut cur = root.to_path_buf();
    for (i, c) in comps.iter().enumerate() {
        cur.push(c.as_os_str());
        let is_last = i + 1 == comps.len();
        match std::fs::symlink_metadata(&cur) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => return Err(format!("{}: {e}", cur.display())),
            Ok(md) => {
                if md.file_type().is_symlink() && !(is_last && last == Last::SymlinkOk) {
                    let shown: PathBuf = comps[..=i].iter().map(|c| c.as_os_str()).collect();
                    return Err(format!(
                        "{} is a symlink; paths may not pass through symlinks (escapes the workspace)",
                        shown.display()
                    ));
                }
                if !is_last && !md.is_dir() {
                    let shown: PathBuf = comps[..=i].iter().map(|c| c.as_os_str()).collect();
                    return Err(format!("{} is not a directory", shown.display()));
                }
            }
        }
    }
    Ok(root.join(rel))
}

/// `mkdir -p` of `rel` under `root`, never following a symlink.
pub(crate) fn mkdirs(root: &Path, rel: &Path) -> std::result::Result<(), String> {
    let mut cur = root.to_path_buf();
    for c in rel.components() {
        if matches!(c, Component::CurDir) {
            continue;
        }
        cur.push(c.as_os_str());
        match std::fs::symlink_metadata(&cur) {
            Ok(md) if md.is_dir() && !md.file_type().is_symlink() => {}
            Ok(_) => return Err(format!("{} exists and is not a directory", cur.display())),
            Err(_) => {
                std::fs::create_dir(&cur).map_err(|e| format!("mkdir {}: {e}", cur.display()))?
            }
        }
    }
    Ok(())
}

/// Write `content` to `root/rel` (mode 0644 before umask, like Kitsoki), parents created.
pub(crate) fn write_file(
    root: &Path,
    rel: &str,
    content: &[u8],
    mode: u32,
) -> std::result::Result<(), String> {
    let path = inside(root, rel, Last::NoSymlink)?;
    if let Some(parent) = Path::new(rel).parent() {
        mkdirs(root, parent)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| format!("write {rel}: {e}"))?;
    f.write_all(content)
        .map_err(|e| format!("write {rel}: {e}"))?;
    Ok(())
}

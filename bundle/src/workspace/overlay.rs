//! Copying a spec's overlay folder into a workspace, on the host: files only, nothing
//! executed. The overlay is the spec author's (hostile input): it is read through
//! directory descriptors (`openat` with `O_NOFOLLOW`, `fstatat` without following), so a
//! symlink in it is copied as a link and never followed; a FIFO, socket or device is
//! refused with an error instead of blocking the copy; nesting is bounded. Every path
//! written stays inside the workspace ([`crate::workspace::wspath::inside`]).

use crate::error::{Error, IoContext, Result};
use crate::fsat;
use crate::spec::Spec;
use crate::workspace::wspath::{inside, mkdirs, write_file, Last};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Copy the spec's overlay folder (if any) into `root`.
pub(crate) fn apply(spec: &Spec, root: &Path) -> Result<()> {
    match &spec.overlay {
        Some(ov) => copy(spec, ov, root),
        None => Ok(()),
    }
}

/// Copy the overlay folder (relative to the spec's folder, which it may not leave) into
/// the workspace. Regular files keep their executable bit; symlinks are copied as links.
fn copy(spec: &Spec, rel: &str, root: &Path) -> Result<()> {
    let spec_dir = spec
        .path
        .parent()
        .ok_or_else(|| Error::other("spec has no folder"))?;
    let err = |msg: String| Error::SpecFile {
        file: spec.path.clone(),
        msg: format!("overlay {rel:?}: {msg}"),
    };
    let src = std::fs::canonicalize(spec_dir.join(rel)).map_err(|e| err(e.to_string()))?;
    let spec_dir_c = std::fs::canonicalize(spec_dir).at(spec_dir)?;
    if !src.starts_with(&spec_dir_c) {
        return Err(err("escapes the spec's folder (through a symlink)".into()));
    }
    if src.as_os_str().as_bytes().contains(&0) {
        return Err(err("NUL in path".into()));
    }
    let dir = fsat::open_path(&src, fsat::DIR_FLAGS, 0)
        .map_err(|e| err(format!("is not a directory ({e})")))?;
    copy_tree(&dir, root, Path::new(""), 0).map_err(err)
}

/// Deepest folder nesting an overlay may have.
const MAX_OVERLAY_DEPTH: usize = 64;

/// Copy the overlay tree open at `dir` (relative path `rel`) into `root`. The source is
/// read through directory descriptors (`openat` with `O_NOFOLLOW`, `fstatat` without
/// following): a symlink in it is copied as a link, never followed; a FIFO, socket or
/// device is refused (a FIFO would block the copy); nesting is bounded.
fn copy_tree(
    dir: &OwnedFd,
    root: &Path,
    rel: &Path,
    depth: usize,
) -> std::result::Result<(), String> {
    if depth > MAX_OVERLAY_DEPTH {
        return Err(format!(
            "{}: nested deeper than {MAX_OVERLAY_DEPTH} folders",
            rel.display()
        ));
    }
    let mut names = fsat::list_unsorted(dir).map_err(|e| format!("{}: {e}", shown(rel)))?;
    names.sort();
    for name in names {
        let r = rel.join(&name);
        let rs = r.to_string_lossy().into_owned();
        let c =
            std::ffi::CString::new(name.as_bytes()).map_err(|_| format!("{rs}: NUL in name"))?;
        let st = fsat::stat_at_c(dir.as_raw_fd(), &c)
            .and_then(|st| st.ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT)))
            .map_err(|er| format!("{rs}: {er}"))?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                let sub = fsat::open_at(dir, &name, libc::O_RDONLY | libc::O_DIRECTORY)
                    .map_err(|er| format!("{rs}: {er}"))?;
                inside(root, &rs, Last::NoSymlink)?;
                mkdirs(root, &r)?;
                copy_tree(&sub, root, &r, depth + 1)?;
            }
            libc::S_IFLNK => {
                let target = fsat::read_link_at_c(dir.as_raw_fd(), &c)
                    .map_err(|er| format!("{rs}: {er}"))?;
                let dst = inside(root, &rs, Last::SymlinkOk)?;
                if let Some(p) = r.parent() {
                    mkdirs(root, p)?;
                }
                let _ = std::fs::remove_file(&dst);
                std::os::unix::fs::symlink(&target, &dst).map_err(|er| format!("{rs}: {er}"))?;
            }
            libc::S_IFREG => {
                use std::io::Read;
                let fd = fsat::open_at(dir, &name, libc::O_RDONLY | libc::O_NONBLOCK)
                    .map_err(|er| format!("{rs}: {er}"))?;
                let mut f = std::fs::File::from(fd);
                let md = f.metadata().map_err(|er| format!("{rs}: {er}"))?;
                if !md.is_file() {
                    return Err(format!("{rs}: changed type while it was copied"));
                }
                let mode = if md.permissions().mode() & 0o111 != 0 {
                    0o755
                } else {
                    0o644
                };
                let mut data = Vec::with_capacity(md.len() as usize);
                f.read_to_end(&mut data)
                    .map_err(|er| format!("{rs}: {er}"))?;
                write_file(root, &rs, &data, mode)?;
                // write_file's mode applies only on create; set it for an overwritten file too
                let _ =
                    std::fs::set_permissions(root.join(&r), std::fs::Permissions::from_mode(mode));
            }
            _ => {
                return Err(format!(
                "{rs}: a FIFO, socket or device; an overlay holds only files, folders and symlinks"
            ))
            }
        }
    }
    Ok(())
}

fn shown(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        ".".into()
    } else {
        rel.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A spec in `dir` with an overlay folder `ov`, and an empty workspace.
    fn setup() -> (tempfile::TempDir, Spec, PathBuf) {
        let d = tempfile::Builder::new().tempdir_in("/dev/shm").unwrap();
        let spec_path = d.path().join("capsule.yaml");
        let text = "name: ov\nsource:\n  synthetic: true\n  overlay: ov\n  steps:\n    - {action: mkdir, path: x}\n";
        std::fs::write(&spec_path, text).unwrap();
        std::fs::create_dir_all(d.path().join("ov/sub")).unwrap();
        std::fs::write(d.path().join("ov/sub/a.txt"), "a\n").unwrap();
        let spec = crate::spec::parse(text, &spec_path).unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        (d, spec, ws)
    }

    #[test]
    fn overlay_copies_links_as_links_and_never_follows_them() {
        let (d, spec, ws) = setup();
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s\n").unwrap();
        // a symlinked folder in the overlay: copied as the link, its target not read
        std::os::unix::fs::symlink(&outside, d.path().join("ov/dirlink")).unwrap();
        apply(&spec, &ws).unwrap();
        assert_eq!(std::fs::read(ws.join("sub/a.txt")).unwrap(), b"a\n");
        let md = std::fs::symlink_metadata(ws.join("dirlink")).unwrap();
        assert!(md.file_type().is_symlink());
        assert_eq!(std::fs::read_link(ws.join("dirlink")).unwrap(), outside);
    }

    #[test]
    fn overlay_refuses_fifos_instead_of_blocking() {
        let (d, spec, ws) = setup();
        let fifo =
            std::ffi::CString::new(d.path().join("ov/sub/pipe").as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo on a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let e = apply(&spec, &ws).unwrap_err().to_string();
        assert!(e.contains("sub/pipe: a FIFO, socket or device"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }

    #[test]
    fn overlay_nesting_is_bounded() {
        let (d, spec, ws) = setup();
        let mut p = d.path().join("ov");
        for _ in 0..=MAX_OVERLAY_DEPTH + 1 {
            p.push("d");
        }
        std::fs::create_dir_all(&p).unwrap();
        let e = apply(&spec, &ws).unwrap_err().to_string();
        assert!(e.contains("nested deeper than"), "{e}");
    }
}

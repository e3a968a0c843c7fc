//! Looking at the paths a Landlock ruleset names: walking down from `/` without following
//! a symlink ([`open_nofollow`]), what an opened path is ([`kind`]), the targets of hidden
//! paths that are symlinks, and the normalized keys ([`key`], [`key_ancestors`]) the rule
//! builder compares paths by.

use super::LandlockError;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Absolute path -> normal components.
pub(super) fn components(p: &Path) -> Result<Vec<&OsStr>, LandlockError> {
    if !p.is_absolute() {
        return Err(LandlockError::NotAbsolute {
            path: p.to_path_buf(),
        });
    }
    Ok(p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect())
}

fn open_root(flags: OFlag) -> Result<OwnedFd, LandlockError> {
    nix::fcntl::open(
        "/",
        flags | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|source| LandlockError::Open {
        path: "/".into(),
        source,
    })
}

/// Open `path` by walking down from `/` without following any symlink. `Ok(None)` when it
/// does not exist (or a component is a symlink, whose target is governed by its own rules).
pub(super) fn open_nofollow(path: &Path, last: OFlag) -> Result<Option<OwnedFd>, LandlockError> {
    let comps = components(path)?;
    let mut fd = open_root(if comps.is_empty() {
        last
    } else {
        OFlag::O_PATH
    })?;
    for (i, c) in comps.iter().enumerate() {
        let is_last = i + 1 == comps.len();
        let flags = if is_last {
            last | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
        } else {
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
        };
        match openat(fd.as_fd(), *c, flags, Mode::empty()) {
            Ok(next) => fd = next,
            Err(nix::Error::ENOENT) | Err(nix::Error::ENOTDIR) | Err(nix::Error::ELOOP) => {
                return Ok(None)
            }
            Err(source) => {
                return Err(LandlockError::Open {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
    }
    Ok(Some(fd))
}

/// Canonical targets of those of `paths` that are symbolic links. Looks at the file types
/// its parent directories list (one `readdir` per parent with many hidden entries, instead
/// of one `lstat` per path), and `lstat`s only where the listing does not say.
pub(super) fn hidden_link_targets<'a>(paths: impl Iterator<Item = &'a Path>) -> Vec<PathBuf> {
    use std::collections::HashMap;
    let mut by_parent: HashMap<&Path, Vec<&OsStr>> = HashMap::new();
    for p in paths {
        if let (Some(parent), Some(name)) = (p.parent(), p.file_name()) {
            by_parent.entry(parent).or_default().push(name);
        }
    }
    let mut links: Vec<PathBuf> = Vec::new();
    let lstat_link = |p: &Path| {
        std::fs::symlink_metadata(p)
            .map(|m| m.file_type().is_symlink())
            .unwrap_or(false)
    };
    for (parent, names) in by_parent {
        if names.len() <= 4 {
            links.extend(
                names
                    .iter()
                    .map(|n| parent.join(n))
                    .filter(|p| lstat_link(p)),
            );
            continue;
        }
        let wanted: HashSet<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let Ok(mut d) = nix::dir::Dir::open(parent, flags, Mode::empty()) else {
            continue; // no parent: nothing there to follow
        };
        for e in d.iter().flatten() {
            let n = e.file_name().to_bytes();
            if !wanted.contains(n) {
                continue;
            }
            let p = parent.join(OsStr::from_bytes(n));
            let is_link = match e.file_type() {
                Some(t) => t == nix::dir::Type::Symlink,
                None => lstat_link(&p),
            };
            if is_link {
                links.push(p);
            }
        }
    }
    links
        .into_iter()
        .filter_map(|l| std::fs::canonicalize(l).ok())
        .collect()
}

/// Normalized bytes of an absolute path: `/` then the normal components joined by `/`.
pub(super) fn key(p: &Path) -> Vec<u8> {
    let mut k = Vec::with_capacity(p.as_os_str().len());
    for c in p.components() {
        if let Component::Normal(n) = c {
            k.push(b'/');
            k.extend_from_slice(n.as_bytes());
        }
    }
    if k.is_empty() {
        k.push(b'/');
    }
    k
}

/// Strict ancestors of a normalized key, nearest first, ending with `/`.
pub(super) fn key_ancestors(k: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut end = if k == b"/" { None } else { Some(k.len()) };
    std::iter::from_fn(move || {
        let e = end?;
        let cut = k[..e].iter().rposition(|&b| b == b'/')?;
        if cut == 0 {
            end = None;
            Some(&k[..1])
        } else {
            end = Some(cut);
            Some(&k[..cut])
        }
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Dir,
    File,
    Symlink,
}

pub(super) fn kind(fd: &OwnedFd, path: &Path) -> Result<Kind, LandlockError> {
    let st = fstat(fd.as_fd()).map_err(|source| LandlockError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let fmt = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    Ok(if fmt == SFlag::S_IFDIR {
        Kind::Dir
    } else if fmt == SFlag::S_IFLNK {
        Kind::Symlink
    } else {
        Kind::File
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_ancestors() {
        assert_eq!(key(Path::new("/")), b"/".to_vec());
        assert_eq!(key(Path::new("/a//b/")), b"/a/b".to_vec());
        let k = key(Path::new("/a/b/c"));
        let a: Vec<&[u8]> = key_ancestors(&k).collect();
        assert_eq!(a, vec![&b"/a/b"[..], &b"/a"[..], &b"/"[..]]);
        assert_eq!(key_ancestors(b"/").count(), 0);
        assert_eq!(key_ancestors(b"/a").collect::<Vec<_>>(), vec![&b"/"[..]]);
    }
}

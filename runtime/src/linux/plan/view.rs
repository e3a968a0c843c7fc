//! The home's view as a step of the mount plan ([`super::MountStep::HomeView`]): what the
//! executor builds (see `super::super::mounts::homeview`) and what the host decided (the
//! entries and points, see `crate::home::view`).

use super::within;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// File entries larger than this are left out of the view (they are copied into it).
pub const MAX_FILE: u64 = 8 << 20;

/// What an entry is on the host (after resolving a symlinked entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A folder: an overlay of it under the layer.
    Dir,
    /// A file: copied into the view (read-only underneath, copied up on write).
    File,
    /// A folder reached through a symlink (the entry or a parent of it is one, as with
    /// dotfiles kept in a repository): bound read-only, since a layer folder in the
    /// link's place would replace the link once applied.
    LinkedDir,
}

/// One visible entry of the home.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Entry {
    /// Relative to the home.
    pub rel: PathBuf,
    /// The host path shown there (canonical).
    pub src: PathBuf,
    pub kind: EntryKind,
}

/// A place a later step mounts on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Point {
    /// Relative to the home.
    pub rel: PathBuf,
    /// A bind's host source (its kind decides a folder or a file); `None`: a folder.
    pub src: Option<PathBuf>,
}

/// The view step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HomeView {
    /// The host home.
    pub src: PathBuf,
    /// Where the command sees it (the same path).
    pub dst: PathBuf,
    /// The home layer's upper and work dirs.
    pub upper: PathBuf,
    pub work: PathBuf,
    /// Work dirs of the folder entries' overlays: one each, named by [`work_name`].
    pub works: PathBuf,
    pub entries: Vec<Entry>,
    pub points: Vec<Point>,
    /// Paths inside folder entries (relative to the home) that the view keeps absent
    /// whatever the host has there, then or later: credentials and agent logins of the
    /// lists and the policy's hidden paths (e.g. `.cargo/credentials.toml`). Each folder
    /// entry's overlay gets a layer of whiteouts for them.
    pub absent: Vec<PathBuf>,
}

impl HomeView {
    /// Is `rel` (relative to the home) at or below one of [`Self::absent`]?
    pub fn keeps_absent(&self, rel: &Path) -> bool {
        self.absent.iter().any(|a| within(rel, a))
    }
}

/// The work dir name of a folder entry's overlay.
pub fn work_name(rel: &Path) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(rel.as_os_str().as_encoded_bytes());
    hex::encode(&d[..8])
}

/// Where the folder entries' work dirs live, next to the layer's work dir.
pub fn works_dir(work: &Path) -> PathBuf {
    work.with_file_name("views")
}

/// For a rendering that cannot build the view (an OCI `config.json`): the paths of the
/// home that exist now and lie on no way to an entry or a point, and those the view keeps
/// absent inside its entries ([`HomeView::absent`]), to mask instead.
pub fn not_shown_now(v: &HomeView) -> Vec<PathBuf> {
    let keep: Vec<&Path> = v
        .entries
        .iter()
        .map(|e| e.rel.as_path())
        .chain(v.points.iter().map(|p| p.rel.as_path()))
        .collect();
    let mut out = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(d) = dirs.pop() {
        let Ok(rd) = std::fs::read_dir(v.src.join(&d)) else {
            continue;
        };
        let mut names: Vec<OsString> = rd.filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
        names.sort();
        for n in names {
            let rel = d.join(&n);
            if keep.iter().any(|k| within(k, &rel) && *k != rel) {
                dirs.push(rel); // on the way to an entry: look inside
            } else if !keep.iter().any(|k| within(&rel, k)) || v.keeps_absent(&rel) {
                out.push(v.src.join(rel));
            } else if v.absent.iter().any(|a| within(a, &rel)) {
                dirs.push(rel); // a folder entry holding a path kept absent: look inside
            }
        }
    }
    out.sort();
    out
}

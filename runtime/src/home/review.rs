//! Binding `capsule home apply` to what `capsule home diff` showed. Each change shown gets
//! a digest over what it is (kind, type, path bytes, mode, symlink target, content
//! sha256); `home diff` saves the set in `<bundle>/home/review.json` (the bundle is never
//! reachable from the sandbox) and prints a review token, the sha256 over that set.
//! `home apply` computes the changes again and applies only when each one it is about to
//! apply is in the last review, byte for byte; given `--review TOKEN`, only when the last
//! review is that one. While copying, each file's bytes are hashed as they are written
//! and must give the reviewed sha256, or the copy is dropped before it takes the real
//! file's name.

use super::change::{Change, ChangeKind, EntryType};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The review file, in the bundle's `home` folder.
pub const REVIEW_FILE: &str = "review.json";
/// Shortest prefix of a token `--review` accepts.
pub const MIN_TOKEN: usize = 12;

/// The last review of a home layer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    pub version: u32,
    /// sha256 over the sorted change digests.
    pub token: String,
    /// The digest of each change shown.
    pub changes: BTreeSet<String>,
}

fn path_of(bundle_dir: &Path) -> PathBuf {
    bundle_dir
        .join(capsule_bundle::layout::bundle_files::HOME)
        .join(REVIEW_FILE)
}

/// The digest of one change (see the module docs).
pub fn change_digest(c: &Change) -> String {
    let mut h = Sha256::new();
    h.update(b"capsule-home-review-v1\0");
    h.update(match c.kind {
        ChangeKind::Added => b"added\0".as_slice(),
        ChangeKind::Changed => b"changed\0",
        ChangeKind::Removed => b"removed\0",
    });
    h.update(match c.entry {
        EntryType::File => b"file\0".as_slice(),
        EntryType::Dir => b"dir\0",
        EntryType::Symlink => b"symlink\0",
        EntryType::Other => b"other\0",
    });
    let bytes = |p: &Path| p.as_os_str().as_bytes().to_vec();
    h.update((c.path.as_os_str().len() as u64).to_be_bytes());
    h.update(bytes(&c.path));
    h.update(format!("{:?}\0", c.mode).as_bytes());
    match &c.target {
        Some(t) => {
            h.update((t.as_os_str().len() as u64).to_be_bytes());
            h.update(bytes(t));
        }
        None => h.update(b"-\0"),
    }
    h.update(c.sha256.as_deref().unwrap_or("-").as_bytes());
    hex::encode(h.finalize())
}

impl Review {
    /// The review of `changes`.
    pub fn of(changes: &[Change]) -> Review {
        let changes: BTreeSet<String> = changes.iter().map(change_digest).collect();
        let mut h = Sha256::new();
        for d in &changes {
            h.update(d.as_bytes());
            h.update(b"\n");
        }
        Review {
            version: 1,
            token: hex::encode(h.finalize()),
            changes,
        }
    }

    /// The short form printed to people.
    pub fn short_token(&self) -> &str {
        self.token.get(..16).unwrap_or(&self.token)
    }

    /// Save as the last review of the bundle's home layer.
    pub fn save(&self, bundle_dir: &Path) -> std::io::Result<()> {
        let p = path_of(bundle_dir);
        let tmp = p.with_extension("json.tmp");
        let text = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &p)
    }

    /// The last review, if there is one.
    pub fn load(bundle_dir: &Path) -> std::io::Result<Option<Review>> {
        match std::fs::read(path_of(bundle_dir)) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Forget the last review (after an apply or a discard changed the layer).
    pub fn clear(bundle_dir: &Path) {
        let _ = std::fs::remove_file(path_of(bundle_dir));
    }

    /// Does `token` (full, or a prefix of at least [`MIN_TOKEN`] hex digits) name this one?
    pub fn is(&self, token: &str) -> bool {
        let t = token
            .trim()
            .trim_start_matches("sha256:")
            .to_ascii_lowercase();
        t.len() >= MIN_TOKEN && self.token.starts_with(&t)
    }

    /// The changes of `changes` that are not in this review (new or different since).
    pub fn unreviewed<'a>(&self, changes: &'a [Change]) -> Vec<&'a Change> {
        changes
            .iter()
            .filter(|c| !self.changes.contains(&change_digest(c)))
            .collect()
    }
}

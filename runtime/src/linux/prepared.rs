//! Prepared roots: a capsule's sandbox root built once and joined by each exec.
//! (Work in progress; see the module's later commits.)

use std::path::{Path, PathBuf};

/// The directory of `bundle_dir` where its prepared roots' sockets live.
pub fn dir(bundle_dir: &Path) -> PathBuf {
    bundle_dir.join("prepared")
}

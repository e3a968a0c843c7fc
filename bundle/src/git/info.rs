//! Reading facts from a git repository without running git: HEAD's commit id and branch.
//! Uses gix with isolated options (no environment, no global or system configuration),
//! so nothing of the repository's configuration is executed.

use crate::error::{Error, Result};
use std::path::Path;

/// HEAD of a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Full hex commit id.
    pub commit: String,
    /// Short branch name, `None` when HEAD is detached.
    pub branch: Option<String>,
}

/// Open `dir` (a work tree or a git dir) read-only and isolated.
pub fn open_isolated(dir: &Path) -> Result<gix::Repository> {
    let opts = gix::open::Options::isolated();
    gix::open_opts(dir, opts)
        .map_err(|e| Error::other(format!("{}: not a git repository ({e})", dir.display())))
}

/// HEAD of the repository at `dir`.
pub fn head(dir: &Path) -> Result<Head> {
    let repo = open_isolated(dir)?;
    head_of(&repo, dir)
}

/// HEAD of an opened repository; `dir` is only used in messages.
pub fn head_of(repo: &gix::Repository, dir: &Path) -> Result<Head> {
    let id = repo.head_id().map_err(|e| {
        Error::other(format!(
            "{}: HEAD does not name a commit ({e})",
            dir.display()
        ))
    })?;
    let branch = repo
        .head_name()
        .map_err(|e| Error::other(format!("{}: cannot read HEAD ({e})", dir.display())))?
        .map(|n| n.shorten().to_string());
    Ok(Head {
        commit: id.detach().to_string(),
        branch,
    })
}

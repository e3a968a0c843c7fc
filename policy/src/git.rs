//! Git facts for the gate, read with gix and never by running `git`: the work-tree root, the
//! repository's common git directory, and what HEAD points to.
//!
//! The repository is opened with isolated permissions (no system, global or user config, no
//! environment overrides, no config includes). gix never executes anything while opening a
//! repository or reading HEAD: no hooks, no `core.fsmonitor`, no filters. Linked worktrees
//! (a `.git` file) report their own work tree as root and the main repository's git
//! directory as `git_dir`; bare repositories report the repository directory as root.

use serde::Serialize;
use std::path::{Path, PathBuf};

/// What HEAD points to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadState {
    /// A branch with at least one commit.
    Branch,
    /// A branch without commits yet (fresh `git init`, orphan branch).
    Unborn,
    /// A commit id: no branch, so never a protected one.
    Detached,
}

/// The repository a working directory belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GitInfo {
    /// The work tree root; for a bare repository the repository directory.
    pub root: PathBuf,
    /// The common git directory (shared by all linked worktrees): objects, refs, config.
    pub git_dir: PathBuf,
    /// Short branch name HEAD points to (`main`), None when detached.
    pub branch: Option<String>,
    /// What HEAD points to; None when HEAD could not be read (see `error`).
    pub head: Option<HeadState>,
    pub bare: bool,
    /// A linked worktree (`.git` is a file).
    pub linked_worktree: bool,
    /// Why HEAD or the repository could not be read, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Find the repository containing `dir` (canonical, absolute). Ok(None) when there is none.
///
/// The repository may be a capsule's workspace, written by a sandboxed command: a FIFO
/// planted as HEAD or config would block the read forever, so it runs
/// [`capsule_bundle::git::guard::guarded`]; a read given up on reports an error (HEAD
/// unknown: the branch guard fails closed).
pub fn probe(dir: &Path) -> Option<GitInfo> {
    let d = dir.to_path_buf();
    match capsule_bundle::git::guard::guarded("reading git facts", move || probe_now(&d)) {
        Ok(info) => info,
        Err(e) => Some(GitInfo {
            root: dir.to_path_buf(),
            git_dir: dir.to_path_buf(),
            branch: None,
            head: None,
            bare: false,
            linked_worktree: false,
            error: Some(e.to_string()),
        }),
    }
}

fn probe_now(dir: &Path) -> Option<GitInfo> {
    use gix::discover::repository::Path as RepoPath;
    let opts = gix::discover::upwards::Options {
        current_dir: Some(dir),
        ..Default::default()
    };
    let (found, trust) = match gix::discover::upwards_opts(dir, opts) {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!("no git repository above {}: {e}", dir.display());
            return None;
        }
    };
    let (open_at, root_guess, linked) = match &found {
        RepoPath::WorkTree(wd) => (wd.clone(), wd.clone(), false),
        RepoPath::LinkedWorkTree { work_dir, .. } => (work_dir.clone(), work_dir.clone(), true),
        RepoPath::Repository(gd) => (gd.clone(), gd.clone(), false),
    };
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (git_dir_guess, _) = found.clone().into_repository_and_work_tree_directories();
    let options = gix::open::Options::isolated().with(trust);
    let repo = match gix::open_opts(open_at, options) {
        Ok(r) => r,
        Err(e) => {
            return Some(GitInfo {
                root: canon(&root_guess),
                git_dir: canon(&git_dir_guess),
                branch: None,
                head: None,
                bare: false,
                linked_worktree: linked,
                error: Some(format!("cannot open the repository: {e}")),
            })
        }
    };
    let bare = repo.workdir().is_none();
    let root = canon(repo.workdir().unwrap_or_else(|| repo.git_dir()));
    let git_dir = canon(repo.common_dir());
    let mut info = GitInfo {
        root,
        git_dir,
        branch: None,
        head: None,
        bare,
        linked_worktree: linked,
        error: None,
    };
    match repo.head() {
        Ok(head) => {
            info.branch = head.referent_name().map(|n| {
                let full = n.as_bstr().to_string();
                full.strip_prefix("refs/heads/")
                    .map(str::to_owned)
                    .unwrap_or(full)
            });
            info.head = Some(if head.is_detached() {
                HeadState::Detached
            } else if head.is_unborn() {
                HeadState::Unborn
            } else {
                HeadState::Branch
            });
        }
        Err(e) => info.error = Some(format!("cannot read HEAD: {e}")),
    }
    Some(info)
}

//! The five checks and the decision record.
//!
//! When the gate is enabled, a launch is allowed only if all five hold, checked in order
//! (the record names the first that fails):
//!
//! 1. `working_dir` — the resolved working directory exists and is a directory;
//! 2. `allowed_roots` — if any are configured, the working directory is inside one;
//! 3. `protected_roots` — neither the working directory, nor its git work-tree root, nor the
//!    repository's common git directory is inside a protected root, unless the working
//!    directory is inside an allowed root that lies strictly inside that protected root (the
//!    allowed root "carves the workspace out"). An allowed root equal to or above a protected
//!    root carves nothing out of it;
//! 4. `protected_branches` — a git checkout that is not a capsule is not on a protected
//!    branch (detached HEAD: no branch, not protected; an unborn branch is the branch it
//!    names; a bare repository is judged by its HEAD too). Skipped inside a capsule. The
//!    checkout is the one the working directory belongs to, so a plain directory carved out
//!    of an operator's checkout that is on `main` is still denied here: only capsules (which
//!    carry their own throwaway repositories) may sit on a protected branch;
//! 5. `require_capsule` — if required, the working directory is inside an opened capsule.
//!
//! "Inside" compares whole components of canonical paths. The working directory is resolved
//! once: it is opened (following symlinks), its canonical path is taken and checked to be the
//! same directory as the opened handle, and every check runs on that path. Callers launch in
//! [`Decision::resolved_working_dir`] (or through [`Decision::working_dir_handle`]).
//!
//! The record carries paths, names and the policy lists; never environment values, tokens or
//! file contents.

use crate::capsule::{self, CapsuleInfo};
use crate::config::EffectivePolicy;
use crate::git::{self, GitInfo, HeadState};
use crate::{branch, paths};
use serde::Serialize;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The check that denied a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// 1: the working directory exists and is a directory.
    WorkingDir,
    /// 2: inside an allowed root.
    AllowedRoots,
    /// 3: not inside a protected root (unless carved out).
    ProtectedRoots,
    /// 4: not on a protected branch.
    ProtectedBranches,
    /// 5: inside a capsule.
    RequireCapsule,
}

impl Check {
    /// The check's number in the documented order.
    pub fn number(self) -> u8 {
        match self {
            Check::WorkingDir => 1,
            Check::AllowedRoots => 2,
            Check::ProtectedRoots => 3,
            Check::ProtectedBranches => 4,
            Check::RequireCapsule => 5,
        }
    }
}

/// Whether the gate applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateState {
    /// A policy block was found and is enabled: the five checks ran.
    Enabled,
    /// A policy block says `enabled: false`.
    Disabled,
    /// No configuration file, or none with an `agent_launch_policy` block.
    Off,
}

/// One decision of the gate. Serialize it (or call [`Decision::record_json`]) for the record.
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    /// What is being started: `agent.launch`, `capsule.exec`, …
    pub verb: String,
    /// The agent's name, when the caller gave one.
    pub agent: Option<String>,
    /// The working directory as the caller gave it.
    pub working_dir: PathBuf,
    /// The working directory resolved once (canonical). Launch here, nowhere else.
    pub resolved_working_dir: Option<PathBuf>,
    pub gate: GateState,
    /// Configuration files read (shared first).
    pub config_files: Vec<PathBuf>,
    /// Configuration files found inside a capsule and ignored.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignored_config_files: Vec<PathBuf>,
    /// The repository the working directory belongs to.
    pub git: Option<GitInfo>,
    /// The capsule the working directory belongs to (nearest, for nested capsules).
    pub capsule: Option<CapsuleInfo>,
    /// The protected root that matched (for a check-3 denial, or the one an allowed root
    /// carved the workspace out of).
    pub protected_root: Option<PathBuf>,
    /// The allowed root that contains the working directory.
    pub allowed_root: Option<PathBuf>,
    /// The protected branch pattern that matched.
    pub protected_branch: Option<String>,
    /// The effective policy lists (None when no policy block was found).
    pub policy: Option<EffectivePolicy>,
    pub allowed: bool,
    /// For a denial: the check that failed.
    pub failed_check: Option<Check>,
    /// A sentence a person understands: why it was allowed or denied, and what to do.
    pub reason: String,
    #[serde(skip)]
    handle: Option<Arc<File>>,
}

impl Decision {
    /// The decision as one line of JSON.
    pub fn record_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                "{{\"allowed\":{},\"error\":\"cannot serialize: {e}\"}}",
                self.allowed
            )
        })
    }

    /// An open handle on the resolved working directory (the same directory the checks ran
    /// on), for callers that want to `fchdir` rather than look the path up again.
    pub fn working_dir_handle(&self) -> Option<&File> {
        self.handle.as_deref()
    }
}

/// The working directory resolved once: an open handle and its canonical path, or why not.
fn resolve_working_dir(wd: &Path) -> Result<(Arc<File>, PathBuf), String> {
    let shown = wd.display();
    let md = std::fs::metadata(wd).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("working directory {shown} does not exist"),
        _ => format!("working directory {shown} cannot be examined: {e}"),
    })?;
    if !md.is_dir() {
        return Err(format!("working directory {shown} is not a directory"));
    }
    let handle =
        File::open(wd).map_err(|e| format!("working directory {shown} cannot be opened: {e}"))?;
    let hmd = handle
        .metadata()
        .map_err(|e| format!("working directory {shown} cannot be examined: {e}"))?;
    if !hmd.is_dir() {
        return Err(format!("working directory {shown} is not a directory"));
    }
    let canon = std::fs::canonicalize(wd)
        .map_err(|e| format!("working directory {shown} cannot be resolved: {e}"))?;
    let cmd = std::fs::metadata(&canon)
        .map_err(|e| format!("working directory {shown} cannot be resolved: {e}"))?;
    if (cmd.dev(), cmd.ino()) != (hmd.dev(), hmd.ino()) {
        return Err(format!(
            "working directory {shown} changed while it was being resolved; try again"
        ));
    }
    Ok((Arc::new(handle), canon))
}

/// Inputs of one decision.
pub(crate) struct Request<'a> {
    pub verb: &'a str,
    pub agent: Option<&'a str>,
    pub working_dir: &'a Path,
    pub gate: GateState,
    pub policy: Option<&'a EffectivePolicy>,
    pub config_files: &'a [PathBuf],
    pub ignored: &'a [PathBuf],
    pub off_reason: &'a str,
    /// Gather the facts (working directory, capsule, git) even when the gate does not
    /// apply, for the record.
    pub facts: bool,
}

pub(crate) fn decide(req: Request<'_>) -> Decision {
    let mut d = Decision {
        verb: req.verb.to_owned(),
        agent: req.agent.map(str::to_owned),
        working_dir: req.working_dir.to_path_buf(),
        resolved_working_dir: None,
        gate: req.gate,
        config_files: req.config_files.to_vec(),
        ignored_config_files: req.ignored.to_vec(),
        git: None,
        capsule: None,
        protected_root: None,
        allowed_root: None,
        protected_branch: None,
        policy: req.policy.cloned(),
        allowed: false,
        failed_check: None,
        reason: String::new(),
        handle: None,
    };
    if req.gate != GateState::Enabled && !req.facts {
        d.allowed = true;
        d.reason = req.off_reason.to_owned();
        return d;
    }
    let resolved = resolve_working_dir(req.working_dir);
    if let Ok((handle, canon)) = &resolved {
        d.handle = Some(handle.clone());
        d.resolved_working_dir = Some(canon.clone());
        d.capsule = capsule::find(canon);
        d.git = git::probe(canon);
    }
    let policy = match (req.gate, req.policy) {
        (GateState::Enabled, Some(p)) => p,
        _ => {
            d.allowed = true;
            d.reason = req.off_reason.to_owned();
            return d;
        }
    };
    let wd = match resolved {
        Ok((_, canon)) => canon,
        Err(msg) => return deny(d, Check::WorkingDir, msg),
    };
    let shown = wd.display().to_string();

    // 2: allowed roots
    let allowed_root = policy
        .allowed_roots
        .iter()
        .find(|a| paths::is_inside(&wd, a))
        .cloned();
    d.allowed_root = allowed_root.clone();
    if !policy.allowed_roots.is_empty() && allowed_root.is_none() {
        let list = join(&policy.allowed_roots);
        return deny(
            d,
            Check::AllowedRoots,
            format!(
                "{shown} is outside every allowed root ({list}); open a capsule under one of them and launch there"
            ),
        );
    }

    // 3: protected roots, with carve-outs
    for p in &policy.protected_roots {
        let carve = policy
            .allowed_roots
            .iter()
            .find(|a| paths::is_inside(&wd, a) && paths::is_inside(a, p) && a.as_path() != p);
        let what = if paths::is_inside(&wd, p) {
            Some(format!("{shown} is inside protected root {}", p.display()))
        } else if let Some(g) = d.git.as_ref().filter(|g| paths::is_inside(&g.root, p)) {
            Some(format!(
                "the git checkout of {shown} ({}) is inside protected root {}",
                g.root.display(),
                p.display()
            ))
        } else {
            d.git
                .as_ref()
                .filter(|g| paths::is_inside(&g.git_dir, p))
                .map(|g| {
                    format!(
                        "the git repository of {shown} ({}) is inside protected root {}",
                        g.git_dir.display(),
                        p.display()
                    )
                })
        };
        let Some(what) = what else { continue };
        if carve.is_some() {
            d.protected_root.get_or_insert_with(|| p.clone());
            continue;
        }
        d.protected_root = Some(p.clone());
        return deny(
            d,
            Check::ProtectedRoots,
            format!(
                "{what}; agents must not start in the operator's checkout: open a capsule (`capsule open`) under an allowed root and launch there"
            ),
        );
    }

    // 4: protected branches (real checkouts only; capsules may sit on main)
    if d.capsule.is_none() {
        if let Some(g) = d.git.clone() {
            if g.head.is_none() {
                let why = g
                    .error
                    .clone()
                    .unwrap_or_else(|| "HEAD is unreadable".into());
                return deny(
                    d,
                    Check::ProtectedBranches,
                    format!(
                        "cannot tell which branch the git checkout {} is on ({why}); the branch guard fails closed",
                        g.root.display()
                    ),
                );
            }
            if let (Some(b), Some(HeadState::Branch | HeadState::Unborn)) = (&g.branch, g.head) {
                if let Some(pat) = branch::first_match(&policy.protected_branches, b) {
                    d.protected_branch = Some(pat.to_owned());
                    let unborn = if g.head == Some(HeadState::Unborn) {
                        " (unborn)"
                    } else {
                        ""
                    };
                    return deny(
                        d,
                        Check::ProtectedBranches,
                        format!(
                            "{shown} is a git checkout ({}) on protected branch `{b}`{unborn} (pattern `{pat}`); switch it to a work branch or launch in a capsule",
                            g.root.display()
                        ),
                    );
                }
            }
        }
    }

    // 5: capsule required
    if policy.require_capsule && d.capsule.is_none() {
        return deny(
            d,
            Check::RequireCapsule,
            format!(
                "{shown} is not inside an opened capsule (no directory at or above it holds both .kitsoki-capsule and a valid capsule-manifest.json); open one with `capsule open` and launch inside it"
            ),
        );
    }

    d.allowed = true;
    d.reason = match &d.capsule {
        Some(c) => format!(
            "{shown} passes all five checks (capsule {} at {})",
            c.name,
            c.root.display()
        ),
        None => format!("{shown} passes all five checks"),
    };
    d
}

fn deny(mut d: Decision, check: Check, reason: String) -> Decision {
    d.allowed = false;
    d.failed_check = Some(check);
    d.reason = reason;
    d
}

fn join(v: &[PathBuf]) -> String {
    v.iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

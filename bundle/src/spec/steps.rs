//! The synthetic steps of a spec's `source.steps`: what each action does ([`Action`]),
//! its raw YAML shape, and the checks that turn one into a [`Step`] (every error names the
//! step, its line and the cause).

use super::{at, check_relative, valid_ref_name};
use crate::error::{Error, Result};
use serde::Deserialize;
use serde_saphyr::Spanned;
use std::path::Path;

/// One synthetic step (serializable: the runtime hands the parsed steps to the sandbox
/// that applies them, see [`crate::workspace::materialize::StepRunner`]).
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
pub struct Step {
    /// Index in `source.steps` (0-based, as Kitsoki reports it).
    pub index: usize,
    /// 1-based line of the step in the spec.
    pub line: Option<u64>,
    pub action: Action,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Write {
        path: String,
        content: String,
    },
    Mkdir {
        path: String,
    },
    Remove {
        path: String,
    },
    Commit {
        message: String,
        allow_empty: bool,
    },
    Checkout {
        branch: String,
        create: bool,
    },
    Branch {
        branch: String,
    },
    Git {
        args: Vec<String>,
        dir: Option<String>,
        allow_failure: bool,
    },
    BareRemote {
        name: String,
        path: String,
        branch: Option<String>,
    },
}

impl Action {
    pub fn name(&self) -> &'static str {
        match self {
            Action::Write { .. } => "write",
            Action::Mkdir { .. } => "mkdir",
            Action::Remove { .. } => "remove",
            Action::Commit { .. } => "commit",
            Action::Checkout { .. } => "checkout",
            Action::Branch { .. } => "branch",
            Action::Git { .. } => "git",
            Action::BareRemote { .. } => "bare_remote",
        }
    }
}

/// One step as written in YAML (checked by [`step`]).
#[derive(Deserialize, Default)]
pub(super) struct RawStep {
    #[serde(default)]
    action: Option<Spanned<String>>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    branch: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    dir: Option<String>,
    #[serde(default)]
    create: bool,
    #[serde(default)]
    allow_failure: bool,
    #[serde(default)]
    allow_empty: bool,
}

/// Check raw step `index` of `file` and turn it into a [`Step`].
pub(super) fn step(file: &Path, index: usize, s: Spanned<RawStep>) -> Result<Step> {
    let line = Some(s.referenced.line());
    let r = s.value;
    let action_name = r
        .action
        .as_ref()
        .map(|a| a.value.trim().to_string())
        .unwrap_or_default();
    let err = |msg: String| Error::Step {
        file: file.to_path_buf(),
        line,
        index,
        action: if action_name.is_empty() {
            "?".into()
        } else {
            action_name.clone()
        },
        msg,
    };
    let need = |v: Option<String>, what: &str| -> Result<String> {
        match v {
            Some(x) if !x.trim().is_empty() => Ok(x),
            _ => Err(err(format!("`{what}` is required"))),
        }
    };
    let rel = |v: String, what: &str| -> Result<String> {
        check_relative(&v).map_err(|m| err(format!("{what} {v:?}: {m}")))?;
        Ok(v)
    };
    let action = match action_name.as_str() {
        "write" => Action::Write {
            path: rel(need(r.path, "path")?, "path")?,
            content: r.content.unwrap_or_default(),
        },
        "mkdir" => Action::Mkdir {
            path: rel(need(r.path, "path")?, "path")?,
        },
        "remove" => Action::Remove {
            path: rel(need(r.path, "path")?, "path")?,
        },
        "commit" => Action::Commit {
            message: r
                .message
                .filter(|m| !m.trim().is_empty())
                .unwrap_or_else(|| "capsule commit".into()),
            allow_empty: r.allow_empty,
        },
        "checkout" => Action::Checkout {
            branch: need(r.branch, "branch")?,
            create: r.create,
        },
        "branch" => Action::Branch {
            branch: need(r.branch, "branch")?,
        },
        "git" => {
            let args = r.args.unwrap_or_default();
            if args.is_empty() {
                return Err(err("`args` is required".into()));
            }
            let dir = match r.dir.filter(|d| !d.trim().is_empty()) {
                Some(d) => Some(rel(d, "dir")?),
                None => None,
            };
            Action::Git {
                args,
                dir,
                allow_failure: r.allow_failure,
            }
        }
        "bare_remote" => {
            let name = r
                .name
                .filter(|n| !n.trim().is_empty())
                .unwrap_or_else(|| "origin".into());
            if !valid_ref_name(&name) {
                return Err(err(format!("remote name {name:?} is not valid")));
            }
            let path = match r.path.filter(|p| !p.trim().is_empty()) {
                Some(p) => rel(p, "path")?,
                None => format!("peers/{name}.git"),
            };
            Action::BareRemote {
                name,
                path,
                branch: r.branch.filter(|b| !b.trim().is_empty()),
            }
        }
        "" => return Err(err("`action` is required".into())),
        other => {
            let loc = r.action.as_ref().map(|a| a.referenced);
            let msg = format!(
                "unknown action {other:?} (known: write, mkdir, remove, commit, checkout, branch, git, bare_remote)"
            );
            return Err(match loc {
                Some(l) => at(file, &l, format!("source.steps[{index}] ({other}): {msg}")),
                None => err(msg),
            });
        }
    };
    Ok(Step {
        index,
        line,
        action,
    })
}

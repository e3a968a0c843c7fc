//! The capsule spec, `capsule.yaml`: Kitsoki's format, read unchanged, plus our optional
//! `sandbox:` block.
//!
//! ```yaml
//! name: clean-repo
//! source:
//!   synthetic: true           # or: repo: <url or path>, commit: <full id>
//!   default_branch: main      # default main
//!   overlay: files            # optional folder next to the spec, copied after the steps
//!   steps:                    # write mkdir remove commit checkout branch git bare_remote
//!     - action: write
//!       path: a.txt
//!       content: "a\n"
//!     - action: commit
//!       message: init
//! environment: { env: { KEY: value } }   # Kitsoki's block, recorded in the manifest
//! network: none               # none | replay | live
//! verify:
//!   tree_digest: sha256:...   # optional
//!   probes:
//!     - { name: clean, run: "git diff --quiet", expect: zero }   # zero | nonzero
//! scenario: { kind: git-flow }
//! sandbox:                    # ours; unknown keys here are errors with file:line:column
//!   writable: [build-out]     # relative: inside the workspace; absolute or ~/: host paths
//!   hidden: [secrets]
//!   reveal: [~/src/shared-lib]
//!   pass_env: [NPM_CONFIG_REGISTRY]
//!   devices: [fuse]
//!   network: { allow: [crates.io, "*.npmjs.org:443"] }
//! ```
//!
//! Top-level keys and keys inside Kitsoki's blocks that we do not use are accepted (Kitsoki
//! ignores unknown keys too). Every error names the file and the line and column, or the
//! step, and the cause.

use crate::error::{Error, Result};
use serde::Deserialize;
use serde_saphyr::Spanned;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Largest spec we read (a spec is a few KiB; this bounds memory on a wrong file).
pub const MAX_SPEC_BYTES: u64 = 4 << 20;

/// A parsed, validated spec.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Canonical path of the spec file.
    pub path: PathBuf,
    pub name: String,
    pub source: Source,
    /// Folder (relative to the spec's folder) copied into the workspace after the steps.
    pub overlay: Option<String>,
    pub environment: Environment,
    pub network: SpecNetwork,
    pub verify: Verify,
    pub scenario: Option<serde_json::Value>,
    pub sandbox: SandboxSpec,
}

/// Where the workspace comes from.
#[derive(Debug, Clone)]
pub enum Source {
    Synthetic {
        default_branch: String,
        steps: Vec<Step>,
    },
    Pinned {
        repo: String,
        commit: String,
        /// Branch the workspace checks the commit out on (default `main`).
        default_branch: String,
    },
}

/// One synthetic step (serializable: the runtime hands the parsed steps to the sandbox
/// that applies them, see [`crate::materialize::StepRunner`]).
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

/// The spec's network mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpecNetwork {
    #[default]
    None,
    Replay,
    Live,
}

impl SpecNetwork {
    pub fn as_str(self) -> &'static str {
        match self {
            SpecNetwork::None => "none",
            SpecNetwork::Replay => "replay",
            SpecNetwork::Live => "live",
        }
    }
}

/// Kitsoki's `environment:` block (recorded, not acted on here).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
pub struct Environment {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devcontainer: Option<bool>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub toolchain: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lockfiles: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// `verify:`.
#[derive(Debug, Clone, Default)]
pub struct Verify {
    pub tree_digest: Option<String>,
    pub probes: Vec<Probe>,
}

/// One probe: a shell command run in the workspace.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Probe {
    pub name: String,
    pub run: String,
    /// `true`: exit status 0 expected (`expect: zero`); `false`: non-zero.
    pub expect_zero: bool,
    /// Directory inside the workspace to run in (our extension; default the root).
    pub dir: Option<String>,
}

/// Our `sandbox:` block, unresolved (paths as written).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SandboxSpec {
    /// Extra writable paths: relative ones inside the workspace, absolute or `~/` on the host.
    #[serde(default)]
    pub writable: Vec<String>,
    /// Extra hidden paths (same forms).
    #[serde(default)]
    pub hidden: Vec<String>,
    /// Read-only carve-outs inside hidden paths (absolute or `~/`).
    #[serde(default)]
    pub reveal: Vec<String>,
    /// Names of host environment variables to pass through.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// Extra devices by name (the runtime decides what a name means).
    #[serde(default)]
    pub devices: Vec<String>,
    #[serde(default)]
    pub network: SandboxNetwork,
    /// Resource limits of every exec (`memory`, `pids`, `cpus`, `fds`, `file_size`,
    /// `tmp_size`, `activity_timeout`): not grants; they only ever lower the operator's
    /// own defaults (see [`crate::limits`]).
    #[serde(default, skip_serializing_if = "crate::limits::LimitValues::is_empty")]
    pub limits: crate::limits::LimitValues,
    /// Secrets kept outside the sandbox: variable name -> the hosts (allowlist entries)
    /// its value goes to. Needs `network: live`; each is a grant.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub secrets: std::collections::BTreeMap<String, Vec<String>>,
    /// Ports of the sandbox's loopback published on the host's loopback while an exec
    /// runs (`[HOST_PORT:]PORT`); each is a grant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub publish: Vec<String>,
}

/// `sandbox.network`.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SandboxNetwork {
    /// Allowlist entries: `host`, `*.suffix`, a literal IP, each with an optional `:port`.
    #[serde(default)]
    pub allow: Vec<String>,
}

// ---------------------------------------------------------------- raw YAML shapes

#[derive(Deserialize)]
struct RawSpec {
    #[serde(default)]
    name: Option<Spanned<String>>,
    #[serde(default)]
    source: Option<Spanned<RawSource>>,
    #[serde(default)]
    overlay: Option<Spanned<String>>,
    #[serde(default)]
    environment: Option<Environment>,
    #[serde(default)]
    network: Option<Spanned<String>>,
    #[serde(default)]
    verify: Option<RawVerify>,
    #[serde(default)]
    scenario: Option<serde_json::Value>,
    #[serde(default)]
    sandbox: Option<Spanned<SandboxSpec>>,
}

#[derive(Deserialize)]
struct RawSource {
    #[serde(default)]
    synthetic: bool,
    #[serde(default)]
    repo: Option<String>,
    #[serde(default)]
    commit: Option<String>,
    #[serde(default)]
    default_branch: Option<String>,
    #[serde(default)]
    overlay: Option<Spanned<String>>,
    #[serde(default)]
    steps: Vec<Spanned<RawStep>>,
}

#[derive(Deserialize, Default)]
struct RawStep {
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

#[derive(Deserialize)]
struct RawVerify {
    #[serde(default)]
    tree_digest: Option<Spanned<String>>,
    #[serde(default)]
    probes: Vec<Spanned<RawProbe>>,
}

#[derive(Deserialize)]
struct RawProbe {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    run: Option<String>,
    #[serde(default)]
    expect: Option<String>,
    #[serde(default)]
    dir: Option<String>,
}

// ---------------------------------------------------------------- finding and loading

/// Where a spec reference points: a `capsule.yaml` file, a folder holding one, or a name
/// looked up as `capsules/<name>/capsule.yaml` in the current folder and its parents.
pub fn find_spec(reference: &str) -> Result<PathBuf> {
    let p = Path::new(reference);
    if let Ok(md) = std::fs::metadata(p) {
        let file = if md.is_dir() {
            p.join("capsule.yaml")
        } else {
            p.to_path_buf()
        };
        return std::fs::canonicalize(&file).map_err(|e| Error::io(&file, e));
    }
    if reference.ends_with(".yaml") || reference.ends_with(".yml") || reference.contains('/') {
        return Err(Error::other(format!("{reference}: no such spec file")));
    }
    let mut dir = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    loop {
        let cand = dir.join("capsules").join(reference).join("capsule.yaml");
        if cand.is_file() {
            return std::fs::canonicalize(&cand).map_err(|e| Error::io(&cand, e));
        }
        if !dir.pop() {
            break;
        }
    }
    Err(Error::other(format!(
        "{reference}: no such spec file, folder, or capsules/{reference}/capsule.yaml here or in a parent folder"
    )))
}

/// Read and validate the spec at `path` (made canonical).
pub fn load(path: &Path) -> Result<Spec> {
    let path = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
    let md = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?;
    if md.len() > MAX_SPEC_BYTES {
        return Err(Error::SpecFile {
            file: path,
            msg: format!("larger than {MAX_SPEC_BYTES} bytes; not a capsule spec"),
        });
    }
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    parse(&text, &path)
}

/// One line describing a YAML error (the crate's messages may span lines).
fn yaml_error(file: &Path, e: &serde_saphyr::Error) -> Error {
    let inner = e.without_snippet();
    let msg = inner
        .to_string()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    match e.location() {
        Some(loc) if loc.line() > 0 => Error::Spec {
            file: file.to_path_buf(),
            line: loc.line(),
            column: loc.column(),
            msg: strip_location_suffix(&msg),
        },
        _ => Error::SpecFile {
            file: file.to_path_buf(),
            msg,
        },
    }
}

/// Drop a trailing " at line X column Y" the library may append (we print it in front).
fn strip_location_suffix(msg: &str) -> String {
    if let Some(i) = msg.rfind(" at line ") {
        if msg[i + 9..]
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_whitespace() || "column,".contains(c))
        {
            return msg[..i].to_string();
        }
    }
    msg.to_string()
}

fn at(file: &Path, loc: &serde_saphyr::Location, msg: impl Into<String>) -> Error {
    Error::Spec {
        file: file.to_path_buf(),
        line: loc.line(),
        column: loc.column(),
        msg: msg.into(),
    }
}

/// Parse spec text; `file` is used in messages and as the spec's path.
pub fn parse(text: &str, file: &Path) -> Result<Spec> {
    let raw: RawSpec = serde_saphyr::from_str(text).map_err(|e| yaml_error(file, &e))?;
    let name = match raw.name {
        Some(n) if !n.value.trim().is_empty() => {
            if !crate::layout::valid_name(n.value.trim()) {
                return Err(at(
                    file,
                    &n.referenced,
                    format!(
                        "name {:?} must be letters, digits, '-', '_' or '.' (it names folders)",
                        n.value
                    ),
                ));
            }
            n.value.trim().to_string()
        }
        _ => {
            return Err(Error::SpecFile {
                file: file.to_path_buf(),
                msg: "`name` is required".into(),
            })
        }
    };
    let network = match raw
        .network
        .as_ref()
        .map(|n| (n.value.trim(), &n.referenced))
    {
        None | Some(("", _)) | Some(("none", _)) => SpecNetwork::None,
        Some(("replay", _)) => SpecNetwork::Replay,
        Some(("live", _)) => SpecNetwork::Live,
        Some((other, loc)) => {
            return Err(at(
                file,
                loc,
                format!("network {other:?} must be one of none, replay, live"),
            ))
        }
    };
    let Some(source) = raw.source else {
        return Err(Error::SpecFile {
            file: file.to_path_buf(),
            msg: "`source` is required (synthetic steps, or repo + commit)".into(),
        });
    };
    let src_loc = source.referenced;
    let source_v = source.value;
    let overlay = match (raw.overlay, source_v.overlay) {
        (Some(a), Some(_)) => {
            return Err(at(
                file,
                &a.referenced,
                "overlay given both at the top level and under source; keep one",
            ))
        }
        (Some(o), None) | (None, Some(o)) => {
            check_relative(&o.value)
                .map_err(|m| at(file, &o.referenced, format!("overlay: {m}")))?;
            Some(o.value)
        }
        (None, None) => None,
    };
    let source = if source_v.synthetic {
        if source_v.repo.is_some() || source_v.commit.is_some() {
            return Err(at(
                file,
                &src_loc,
                "a synthetic source cannot also declare repo/commit",
            ));
        }
        if source_v.steps.is_empty() {
            return Err(at(file, &src_loc, "a synthetic source needs steps"));
        }
        let default_branch = source_v
            .default_branch
            .filter(|b| !b.trim().is_empty())
            .unwrap_or_else(|| "main".into());
        if !valid_ref_name(&default_branch) {
            return Err(at(
                file,
                &src_loc,
                format!("default_branch {default_branch:?} is not a valid branch name"),
            ));
        }
        let mut steps = Vec::new();
        for (index, s) in source_v.steps.into_iter().enumerate() {
            steps.push(step(file, index, s)?);
        }
        Source::Synthetic {
            default_branch,
            steps,
        }
    } else {
        match (source_v.repo, source_v.commit) {
            (Some(repo), Some(commit)) if !repo.trim().is_empty() => {
                let commit = commit.trim().to_ascii_lowercase();
                if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(at(
                        file,
                        &src_loc,
                        format!("commit {commit:?} must be a full 40-hex-digit commit id"),
                    ));
                }
                let default_branch = source_v
                    .default_branch
                    .filter(|b| !b.trim().is_empty())
                    .unwrap_or_else(|| "main".into());
                if !valid_ref_name(&default_branch) {
                    return Err(at(
                        file,
                        &src_loc,
                        format!("default_branch {default_branch:?} is not a valid branch name"),
                    ));
                }
                Source::Pinned {
                    repo: repo.trim().to_string(),
                    commit,
                    default_branch,
                }
            }
            _ => {
                return Err(at(
                    file,
                    &src_loc,
                    "source must be `synthetic: true` with steps, or declare repo and commit",
                ))
            }
        }
    };
    let mut verify = Verify::default();
    if let Some(v) = raw.verify {
        if let Some(d) = v.tree_digest {
            let t = d.value.trim();
            let hexpart = t.strip_prefix("sha256:").unwrap_or(t);
            if !t.is_empty() {
                if hexpart.len() != 64 || !hexpart.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(at(
                        file,
                        &d.referenced,
                        "verify.tree_digest must be 64 hex digits, optionally prefixed sha256:",
                    ));
                }
                verify.tree_digest = Some(t.to_string());
            }
        }
        for (i, p) in v.probes.into_iter().enumerate() {
            let loc = p.referenced;
            let p = p.value;
            let name = p
                .name
                .filter(|n| !n.trim().is_empty())
                .unwrap_or_else(|| format!("probe-{i}"));
            let Some(run) = p.run.filter(|r| !r.trim().is_empty()) else {
                return Err(at(
                    file,
                    &loc,
                    format!("verify.probes[{i}] ({name}): `run` is required"),
                ));
            };
            let expect_zero = match p.expect.as_deref().map(str::trim) {
                None | Some("") | Some("zero") => true,
                Some("nonzero") => false,
                Some(o) => {
                    return Err(at(
                        file,
                        &loc,
                        format!(
                            "verify.probes[{i}] ({name}): expect {o:?} must be zero or nonzero"
                        ),
                    ))
                }
            };
            if let Some(d) = &p.dir {
                check_relative(d).map_err(|m| {
                    at(file, &loc, format!("verify.probes[{i}] ({name}): dir: {m}"))
                })?;
            }
            verify.probes.push(Probe {
                name,
                run,
                expect_zero,
                dir: p.dir,
            });
        }
    }
    let sandbox = match raw.sandbox {
        Some(s) => {
            check_sandbox(&s.value)
                .map_err(|m| at(file, &s.referenced, format!("sandbox: {m}")))?;
            if !s.value.secrets.is_empty() && network != SpecNetwork::Live {
                let m = "sandbox: secrets need `network: live` (their hosts are reached through the allowlist proxy)";
                return Err(at(file, &s.referenced, m.to_string()));
            }
            s.value
        }
        None => SandboxSpec::default(),
    };
    Ok(Spec {
        path: file.to_path_buf(),
        name,
        source,
        overlay,
        environment: raw.environment.unwrap_or_default(),
        network,
        verify,
        scenario: raw.scenario,
        sandbox,
    })
}

fn step(file: &Path, index: usize, s: Spanned<RawStep>) -> Result<Step> {
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

/// A path written in a spec must be relative and stay inside the workspace lexically
/// (no `..`, not absolute, not empty). Symlinks are checked against the real tree when
/// the step runs.
pub fn check_relative(p: &str) -> std::result::Result<(), String> {
    if p.trim().is_empty() {
        return Err("empty path".into());
    }
    if p.contains('\0') {
        return Err("contains a NUL byte".into());
    }
    let path = Path::new(p);
    if path.is_absolute() {
        return Err("absolute path escapes the workspace".into());
    }
    for c in path.components() {
        match c {
            Component::ParentDir => return Err("`..` escapes the workspace".into()),
            Component::Prefix(_) | Component::RootDir => {
                return Err("absolute path escapes the workspace".into())
            }
            _ => {}
        }
    }
    Ok(())
}

/// A conservative branch/remote name check (what `git check-ref-format --branch` accepts,
/// minus exotic cases).
pub fn valid_ref_name(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with('-')
        && !n.starts_with('/')
        && !n.ends_with('/')
        && !n.ends_with(".lock")
        && !n.ends_with('.')
        && !n.contains("..")
        && !n.contains("//")
        && !n.contains("@{")
        && n.bytes()
            .all(|b| b > b' ' && b != 0x7f && !b"~^:?*[\\".contains(&b))
}

fn check_sandbox(s: &SandboxSpec) -> std::result::Result<(), String> {
    s.limits.check()?;
    for (i, p) in s.publish.iter().enumerate() {
        let port = |x: &str| {
            !x.is_empty()
                && x.len() <= 5
                && x.bytes().all(|b| b.is_ascii_digit())
                && x.parse::<u16>().is_ok()
        };
        let ok = match p.split_once(':') {
            Some((h, q)) => port(h) && port(q) && q != "0",
            None => port(p) && p != "0",
        };
        if !ok {
            return Err(format!("publish[{i}] {p:?}: want [HOST_PORT:]PORT"));
        }
    }
    for (n, hosts) in &s.secrets {
        let name_ok = !n.is_empty()
            && !n.as_bytes()[0].is_ascii_digit()
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !name_ok {
            return Err(format!(
                "secrets: {n:?} is not an environment variable name"
            ));
        }
        if hosts.is_empty() {
            return Err(format!("secrets.{n}: list the hosts its value goes to"));
        }
        if let Some(h) = hosts
            .iter()
            .find(|h| h.trim().is_empty() || h.contains('/') || h.contains(','))
        {
            return Err(format!(
                "secrets.{n}: {h:?} is not a host (HOST or HOST:PORT, no scheme or path)"
            ));
        }
    }
    for (what, list) in [("writable", &s.writable), ("hidden", &s.hidden)] {
        for (i, p) in list.iter().enumerate() {
            if !(p.starts_with('/') || p.starts_with("~/")) {
                check_relative(p).map_err(|m| format!("{what}[{i}] {p:?}: {m}"))?;
            } else if p.split('/').any(|c| c == "..") {
                return Err(format!("{what}[{i}] {p:?}: `..` is not allowed"));
            }
        }
    }
    for (i, p) in s.reveal.iter().enumerate() {
        if !(p.starts_with('/') || p.starts_with("~/")) || p.split('/').any(|c| c == "..") {
            return Err(format!(
                "reveal[{i}] {p:?}: must be an absolute or ~/ path without `..`"
            ));
        }
    }
    for (i, n) in s.pass_env.iter().enumerate() {
        let ok = !n.is_empty()
            && !n.as_bytes()[0].is_ascii_digit()
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(format!(
                "pass_env[{i}] {n:?} is not an environment variable name"
            ));
        }
    }
    for (i, d) in s.devices.iter().enumerate() {
        if d.is_empty()
            || !d
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_/".contains(&b))
            || d.contains("..")
        {
            return Err(format!("devices[{i}] {d:?} is not a device name"));
        }
    }
    for (i, a) in s.network.allow.iter().enumerate() {
        let ok = !a.is_empty()
            && !a.contains("://")
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.*:[]".contains(&b));
        if !ok {
            return Err(format!(
                "network.allow[{i}] {a:?} must be a host, *.suffix or IP with an optional :port"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Spec> {
        parse(text, Path::new("/x/capsule.yaml"))
    }

    #[test]
    fn kitsoki_library_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/kitsoki-capsules");
        let Ok(rd) = std::fs::read_dir(&dir) else {
            eprintln!("kitsoki capsules not found; skipped");
            return;
        };
        let mut n = 0;
        for e in rd {
            let f = e.unwrap().path().join("capsule.yaml");
            if f.is_file() {
                let s = load(&f).unwrap_or_else(|e| panic!("{e}"));
                assert!(matches!(s.source, Source::Synthetic { .. }));
                n += 1;
            }
        }
        assert_eq!(n, 14);
    }

    #[test]
    fn steps_and_defaults() {
        let s = p("name: t\nsource:\n  synthetic: true\n  steps:\n    - action: bare_remote\n    - {action: git, args: [status], allow_failure: true}\n").unwrap();
        let Source::Synthetic {
            default_branch,
            steps,
        } = s.source
        else {
            panic!()
        };
        assert_eq!(default_branch, "main");
        assert_eq!(
            steps[0].action,
            Action::BareRemote {
                name: "origin".into(),
                path: "peers/origin.git".into(),
                branch: None
            }
        );
        assert_eq!(steps[1].line, Some(6));
        assert_eq!(s.network, SpecNetwork::None);
    }

    #[test]
    fn errors_name_position() {
        let e = p("name: t\nsource:\n  synthetic: true\n  steps:\n    - action: frobnicate\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/x/capsule.yaml:5:15: source.steps[0] (frobnicate): unknown action"),
            "{e}"
        );
        assert!(e.contains("unknown action"), "{e}");
        let e = p("name: t\nsource:\n  synthetic: true\n  steps:\n    - action: write\n      path: ../up\n").unwrap_err().to_string();
        assert!(
            e.contains("source.steps[0] (write)") && e.contains("escapes"),
            "{e}"
        );
        let e = p("name: t\nsource:\n  synthetic: true\n  steps:\n    - action: write\n      path: /etc/x\n").unwrap_err().to_string();
        assert!(e.contains("absolute"), "{e}");
        let e = p("name: t\nsource: [\n").unwrap_err().to_string();
        assert!(e.starts_with("/x/capsule.yaml:"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let e = p("name: t\nsource:\n  synthetic: true\n  steps: [{action: commit}]\nsandbox:\n  writable: [a]\n  hiden: [b]\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/x/capsule.yaml:7:3:"), "{e}");
        assert!(e.contains("hiden"), "{e}");
        let e = p("name: t\nsource:\n  synthetic: true\n  steps: [{action: commit}]\nsandbox:\n  network: {allow: [a], deny: [b]}\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/x/capsule.yaml:6:"), "{e}");
        // secrets: names, hosts, and only with a live network
        let base = "name: t\nsource:\n  synthetic: true\n  steps: [{action: commit}]\n";
        let sp = p(&format!(
            "{base}network: live\nsandbox:\n  secrets: {{TOKEN: [api.test]}}\n"
        ))
        .unwrap();
        assert_eq!(sp.sandbox.secrets["TOKEN"], vec!["api.test".to_string()]);
        for (bad, why) in [
            (
                "network: none\nsandbox:\n  secrets: {TOKEN: [api.test]}\n",
                "network: live",
            ),
            (
                "network: live\nsandbox:\n  secrets: {1X: [api.test]}\n",
                "not an environment variable",
            ),
            (
                "network: live\nsandbox:\n  secrets: {T: []}\n",
                "list the hosts",
            ),
            (
                "network: live\nsandbox:\n  secrets: {T: [\"https://a/\"]}\n",
                "not a host",
            ),
        ] {
            let e = p(&format!("{base}{bad}")).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        // unknown top-level keys are accepted (Kitsoki ignores them too)
        p("name: t\nsource:\n  synthetic: true\n  steps: [{action: commit}]\nextra: 1\n").unwrap();
    }
}

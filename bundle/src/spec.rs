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
//!
//! Parts: `steps` (the synthetic steps and their checks), `sandbox` (our `sandbox:`
//! block and its checks); finding, loading and parsing the file are here.

use crate::error::{Error, Result};
use serde::Deserialize;
use serde_saphyr::Spanned;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

#[cfg(test)]
mod props;
mod sandbox;
mod steps;

use sandbox::check_sandbox;
pub use sandbox::{SandboxNetwork, SandboxSpec};
use steps::{step, RawStep};
pub use steps::{Action, Step};

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

//! Opening a capsule, atomically: the workspace and the bundle are built in temporary
//! folders next to their destinations and renamed into place; any failure removes both,
//! so no half-made capsule and no stray bundle stays behind.
//!
//! The bundle (`Layout::bundle_dir(name)`, outside the workspace) gets `policy.json`
//! (the resolved [`SandboxPolicy`]), `config.json` (OCI) and `bundle.json`
//! ([`BundleRecord`]); the workspace gets the sentinel and `capsule-manifest.json`,
//! both listed in `.git/info/exclude`.

use crate::error::{Error, IoContext, Result};
use crate::layout::{bundle_files, valid_name, Layout};
use crate::policy::grants::Acceptance;
use crate::policy::{
    default_hidden, HiddenInputs, HiddenPath, HiddenReason, NetworkMode, NetworkPolicy,
    SandboxPolicy, SDK_ENV,
};
use crate::spec::{Source, Spec, SpecNetwork};
use crate::store::record::{BundleRecord, RECORD_VERSION};
use crate::store::OpenCapsule;
use crate::workspace::manifest::{
    CapsuleExtension, Manifest, ManifestProbe, ManifestSource, MANIFEST, SENTINEL,
};
use crate::workspace::materialize::StepRunner;
use std::path::{Path, PathBuf};

/// What to open.
#[derive(Debug, Clone)]
pub enum OpenFrom {
    /// A `capsule.yaml` (already located with [`crate::spec::find_spec`]).
    Spec(PathBuf),
    /// The operator's checkout (`--source`).
    Checkout(PathBuf),
}

/// An open request.
#[derive(Debug, Clone)]
pub struct OpenRequest {
    pub from: OpenFrom,
    /// Capsule name (default: the spec's name, or the checkout folder's name).
    pub name: Option<String>,
    /// Workspace folder (default `<root>/workspaces/<name>`); must not exist or be empty.
    pub dest: Option<PathBuf>,
    /// What the operator accepts of the spec's grants (see [`crate::policy::grants`]); a spec
    /// with grants that are not accepted is refused before anything is made.
    pub accept: Acceptance,
}

/// What `open` reports besides the capsule.
#[derive(Debug, Clone)]
pub struct Opened {
    pub capsule: OpenCapsule,
    pub spec: Option<Spec>,
    /// For pinned sources: whether the repository was read (false: served from cache).
    pub read_source: Option<bool>,
    /// What the check of the new workspace's git dirs found (steps, an overlay or a
    /// pinned repository may have left what would run in the operator's own git): offenders
    /// are quarantined in the bundle, as after an exec ([`crate::git::hostgit`]).
    pub git_guard: crate::git::hostgit::GuardReport,
    /// The manifest written into the workspace (Kitsoki's `Manifest`).
    pub manifest: Manifest,
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// A name from a folder name: unsafe characters become `-`.
pub fn name_from_dir(dir: &Path) -> String {
    let base = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let s: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_start_matches('.').to_string();
    if s.is_empty() {
        "capsule".into()
    } else {
        s
    }
}

/// Canonical form of a path that may not exist yet: its parent canonical + its name.
fn canonical_future(p: &Path) -> Result<PathBuf> {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().at(".")?.join(p)
    };
    let name = abs
        .file_name()
        .ok_or_else(|| Error::other(format!("{}: needs a folder name", p.display())))?
        .to_owned();
    let parent = abs
        .parent()
        .ok_or_else(|| Error::other(format!("{}: has no parent folder", p.display())))?;
    std::fs::create_dir_all(parent).at(parent)?;
    Ok(std::fs::canonicalize(parent).at(parent)?.join(name))
}

/// Open a capsule. A synthetic spec's steps run through `steps` (the runtime passes its
/// build sandbox; see [`crate::workspace::materialize::StepRunner`]); everything else here only
/// copies and reads files.
pub fn open(layout: &Layout, req: &OpenRequest, steps: &dyn StepRunner) -> Result<Opened> {
    let (spec, source_dir) = match &req.from {
        OpenFrom::Spec(p) => (Some(crate::spec::load(p)?), None),
        OpenFrom::Checkout(p) => {
            let c = std::fs::canonicalize(p)
                .map_err(|e| Error::other(format!("--source {}: {e}", p.display())))?;
            if !c.is_dir() {
                return Err(Error::other(format!(
                    "--source {}: not a folder",
                    p.display()
                )));
            }
            (None, Some(c))
        }
    };
    let name = match (&req.name, &spec, &source_dir) {
        (Some(n), _, _) => n.clone(),
        (None, Some(s), _) => s.name.clone(),
        (None, None, Some(d)) => name_from_dir(d),
        _ => return Err(Error::other("no capsule name")),
    };
    if !valid_name(&name) {
        return Err(Error::other(format!(
            "capsule name {name:?} must be letters, digits, '-', '_' or '.'"
        )));
    }
    // the spec's grants, decided before anything is read or made; the final policy is
    // decided again below (same function, final paths)
    if let Some(s) = &spec {
        let ws_guess = match &req.dest {
            Some(d) => d.clone(),
            None => layout.workspaces_dir().join(&name),
        };
        let (p, tools) = resolve_policy(
            &name,
            &ws_guess,
            &layout.bundle_dir(&name),
            &layout.root,
            None,
            Some(s),
        )?;
        decide_grants(&p, &tools, &req.accept, &s.path)?;
    }
    std::fs::create_dir_all(&layout.root).at(&layout.root)?;
    let root_c = std::fs::canonicalize(&layout.root).at(&layout.root)?;
    let clayout = Layout::new(&root_c);
    let bundles = clayout.bundles_dir();
    std::fs::create_dir_all(&bundles).at(&bundles)?;
    let bundle_final = clayout.bundle_dir(&name);
    if std::fs::symlink_metadata(&bundle_final).is_ok() {
        return Err(Error::other(format!(
            "a capsule named {name:?} is already open (`capsule close {name}`, or pass --name)"
        )));
    }
    let dest = match &req.dest {
        Some(d) => d.clone(),
        None => {
            let w = clayout.workspaces_dir();
            std::fs::create_dir_all(&w).at(&w)?;
            w.join(&name)
        }
    };
    let ws_final = canonical_future(&dest)?;
    match std::fs::symlink_metadata(&ws_final) {
        Err(_) => {}
        Ok(md) if md.is_dir() && !md.file_type().is_symlink() => {
            let mut rd = std::fs::read_dir(&ws_final).at(&ws_final)?;
            if rd.next().is_some() {
                return Err(Error::other(format!(
                    "--dest {}: not empty; give an empty or new folder",
                    ws_final.display()
                )));
            }
        }
        Ok(_) => {
            return Err(Error::other(format!(
                "--dest {}: exists and is not a folder",
                ws_final.display()
            )))
        }
    }
    if let Some(src) = &source_dir {
        if ws_final.starts_with(src) {
            return Err(Error::other(format!(
                "--dest {} lies inside the source checkout {}; put it elsewhere",
                ws_final.display(),
                src.display()
            )));
        }
    }
    let ws_parent = ws_final
        .parent()
        .ok_or_else(|| Error::other("workspace has no parent"))?;

    // ---- build both in staging folders next to their destinations (what killed opens
    // left is removed first)
    for r in crate::store::staging::reap(&clayout) {
        tracing::debug!(
            "removed {} (left by a killed {})",
            r.path.display(),
            r.left_by
        );
    }
    let mut staging = crate::store::staging::Staging::begin(&bundles, ws_parent, &name)?;
    let (ws_buf, b_buf) = (
        staging.workspace().to_path_buf(),
        staging.bundle().to_path_buf(),
    );
    let ws = ws_buf.as_path();
    let t0 = std::time::Instant::now();

    let mut read_source = None;
    let mut known_digest: Option<String> = None;
    let (synthetic, repo_field, commit_field) = match (&spec, &source_dir) {
        (Some(s), _) => match &s.source {
            Source::Synthetic { .. } => {
                // the runner's private folder, in the staging bundle (outside the workspace)
                let scratch = b_buf.join(".steps");
                std::fs::create_dir(&scratch).at(&scratch)?;
                let r = crate::workspace::materialize::synthetic(s, ws, steps, &scratch);
                crate::workspace::materialize::remove_built(&scratch)?;
                r?;
                (true, None, None)
            }
            Source::Pinned {
                repo,
                commit,
                default_branch,
            } => {
                let spec_dir = s.path.parent().unwrap_or(Path::new("/"));
                let read = crate::workspace::source::ensure_cached(
                    &clayout.repo_cache_dir(),
                    repo,
                    commit,
                    spec_dir,
                )
                .map_err(|e| Error::SpecFile {
                    file: s.path.clone(),
                    msg: format!("source: {e}"),
                })?;
                read_source = Some(read);
                let imp = crate::workspace::source::from_pinned(
                    &clayout.repo_cache_dir(),
                    &clayout.object_cache_dir(),
                    commit,
                    default_branch,
                    ws,
                )?;
                if s.overlay.is_none() {
                    known_digest = imp.tree_digest;
                }
                crate::workspace::overlay::apply(s, ws)?;
                (false, Some(repo.clone()), Some(commit.clone()))
            }
        },
        (None, Some(src)) => {
            let imp =
                crate::workspace::source::from_checkout(src, ws, &clayout.object_cache_dir())?;
            known_digest = imp.tree_digest.clone();
            (false, Some(src.display().to_string()), Some(imp.commit))
        }
        _ => return Err(Error::other("nothing to open")),
    };
    tracing::debug!("open {name}: materialized in {:?}", t0.elapsed());
    if synthetic {
        // the steps wrote this tree: checked before the host reads or writes in it
        crate::workspace::materialize::check_staged(ws).map_err(|msg| Error::SpecFile {
            file: spec.as_ref().map(|s| s.path.clone()).unwrap_or_default(),
            msg: format!("source.steps left what capsule will not touch: {msg}"),
        })?;
    }
    crate::workspace::materialize::exclude_provenance(ws)?;
    if synthetic {
        // only git steps record absolute paths (remote URLs, worktree links)
        crate::workspace::materialize::rewrite_paths(ws, ws, &ws_final)?;
    }
    tracing::debug!("open {name}: paths rewritten at {:?}", t0.elapsed());

    let digest = match known_digest {
        Some(d) => d,
        None => crate::workspace::digest::tree_digest(ws)?,
    };
    tracing::debug!("open {name}: tree digest at {:?}", t0.elapsed());
    if let Some(s) = &spec {
        if let Some(want) = &s.verify.tree_digest {
            if !crate::workspace::digest::matches(want, &digest) {
                return Err(Error::SpecFile {
                    file: s.path.clone(),
                    msg: format!(
                        "verify.tree_digest: want {want}, the workspace has sha256:{digest}"
                    ),
                });
            }
        }
    }
    let head = if synthetic {
        // checked by check_staged above; a read that blocks anyway is given up
        let w = ws.to_path_buf();
        crate::git::guard::guarded("HEAD of the new workspace", move || {
            crate::git::info::head(&w).ok()
        })?
    } else {
        crate::git::info::head(ws).ok()
    };

    // ---- policy, config.json, bundle.json (with final paths)
    let (policy, tool_reveals) = resolve_policy(
        &name,
        &ws_final,
        &bundle_final,
        &root_c,
        source_dir.as_deref(),
        spec.as_ref(),
    )?;
    let what = spec
        .as_ref()
        .map(|s| s.path.clone())
        .or_else(|| source_dir.clone())
        .unwrap_or_default();
    let accepted = decide_grants(&policy, &tool_reveals, &req.accept, &what)?;
    let b = b_buf.as_path();
    for d in [bundle_files::TMP, bundle_files::HOME, bundle_files::CACHE] {
        std::fs::create_dir(b.join(d)).at(b.join(d))?;
    }
    let policy_json = serde_json::to_vec_pretty(&policy)
        .map_err(|e| Error::other(format!("policy.json: {e}")))?;
    std::fs::write(b.join(bundle_files::POLICY), policy_json).at(b.join(bundle_files::POLICY))?;
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let config = crate::policy::oci::render(&policy, uid, gid)?;
    crate::policy::oci::write(&config, &b.join(bundle_files::CONFIG))?;
    let record = BundleRecord {
        version: RECORD_VERSION,
        name: name.clone(),
        workspace: ws_final.clone(),
        spec_path: spec.as_ref().map(|s| s.path.clone()),
        source: source_dir.clone(),
        opened_at: now_rfc3339(),
        policy_digest: policy.digest(),
        network: spec
            .as_ref()
            .map(|s| s.network.as_str())
            .unwrap_or("none")
            .to_string(),
        head: head.as_ref().map(|h| h.commit.clone()),
        branch: head.as_ref().and_then(|h| h.branch.clone()),
        tree_digest: digest.clone(),
        grants: Some(accepted),
        tool_reveals,
        limits: spec
            .as_ref()
            .map(|s| s.sandbox.limits.clone())
            .unwrap_or_default(),
    };
    let rec_json = serde_json::to_vec_pretty(&record)
        .map_err(|e| Error::other(format!("bundle.json: {e}")))?;
    std::fs::write(b.join(bundle_files::RECORD), rec_json).at(b.join(bundle_files::RECORD))?;

    // ---- sentinel + manifest
    let manifest = Manifest {
        capsule_name: name.clone(),
        spec_path: spec.as_ref().map(|s| s.path.display().to_string()),
        workspace: ws_final.display().to_string(),
        opened_at: record.opened_at.clone(),
        source: ManifestSource {
            synthetic,
            repo: repo_field,
            commit: commit_field,
            head: record.head.clone(),
            branch: record.branch.clone(),
        },
        network: record.network.clone(),
        tree_digest: Some(digest),
        environment: spec
            .as_ref()
            .map(|s| {
                s.environment
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect()
            })
            .unwrap_or_default(),
        probes: spec
            .as_ref()
            .map(|s| {
                s.verify
                    .probes
                    .iter()
                    .map(|p| ManifestProbe {
                        name: p.name.clone(),
                        run: p.run.clone(),
                        expect: if p.expect_zero { "zero" } else { "nonzero" }.into(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        capsule: Some(CapsuleExtension {
            bundle: bundle_final.clone(),
            policy_digest: record.policy_digest.clone(),
        }),
    };
    write_reserved(&ws.join(SENTINEL), format!("{name}\n").as_bytes())?;
    let mjson =
        serde_json::to_vec_pretty(&manifest).map_err(|e| Error::other(format!("manifest: {e}")))?;
    let mut mjson = mjson;
    mjson.push(b'\n');
    write_reserved(&ws.join(MANIFEST), &mjson)?;

    // ---- rename into place: bundle first, then the workspace; undo the bundle on failure
    std::fs::rename(b, &bundle_final).map_err(|e| {
        Error::other(format!(
            "{}: cannot put the bundle in place ({e}); another open of {name:?} may have won",
            bundle_final.display()
        ))
    })?;
    // from here the staging's guard removes the bundle at its final place
    staging.bundle_moved(&bundle_final);
    if let Err(e) = std::fs::rename(ws, &ws_final) {
        return Err(Error::other(format!(
            "{}: cannot put the workspace in place ({e})",
            ws_final.display()
        )));
    }
    tracing::debug!("open {name}: in place at {:?}", t0.elapsed());
    staging.finish();
    // at the final paths (remote URLs and worktree links name them), before anyone's git
    // runs there; it also records the stamp that keeps the first exec's check cheap
    let git_guard = crate::git::hostgit::guard_workspace(&ws_final, &bundle_final, None);
    tracing::debug!("open {name}: git dirs checked at {:?}", t0.elapsed());
    let capsule = crate::store::load(layout, &name)?;
    Ok(Opened {
        capsule,
        spec,
        read_source,
        git_guard,
        manifest,
    })
}

/// Write one of capsule's own files into the staging workspace, without following (or
/// truncating first) whatever the steps or the overlay may have put at that name.
fn write_reserved(p: &Path, data: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let mut f = crate::workspace::materialize::open_regular(p, libc::O_WRONLY | libc::O_CREAT)?;
    f.set_len(0).at(p)?;
    f.write_all(data).at(p)
}

/// Expand `~/` with `home`; `None` if `~/` is used without a home.
fn expand(p: &str, home: Option<&Path>) -> Option<PathBuf> {
    if let Some(rest) = p.strip_prefix("~/") {
        home.map(|h| h.join(rest))
    } else {
        Some(PathBuf::from(p))
    }
}

/// The grants of `policy` against the operator's acceptance: what `bundle.json` records,
/// or the one-line refusal naming `what` (the spec).
fn decide_grants(
    policy: &SandboxPolicy,
    tool_reveals: &[PathBuf],
    accept: &Acceptance,
    what: &Path,
) -> Result<crate::policy::grants::Accepted> {
    let grants = crate::policy::grants::of_policy(policy, tool_reveals);
    crate::policy::grants::decide(grants, accept).map_err(|r| Error::other(r.message(what)))
}

/// The resolved sandbox policy of a capsule (absolute, canonical paths).
pub fn build_policy(
    name: &str,
    workspace: &Path,
    bundle_dir: &Path,
    capsule_root: &Path,
    source_dir: Option<&Path>,
    spec: Option<&Spec>,
) -> Result<SandboxPolicy> {
    resolve_policy(name, workspace, bundle_dir, capsule_root, source_dir, spec).map(|(p, _)| p)
}

/// [`build_policy`], and the read-only carve-outs it added for tools (not grants).
fn resolve_policy(
    name: &str,
    workspace: &Path,
    bundle_dir: &Path,
    capsule_root: &Path,
    source_dir: Option<&Path>,
    spec: Option<&Spec>,
) -> Result<(SandboxPolicy, Vec<PathBuf>)> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .and_then(|h| std::fs::canonicalize(h).ok());
    let mut hidden = default_hidden(&HiddenInputs {
        home: home.as_deref(),
        source_dir,
        capsule_root: Some(capsule_root),
    });
    let push_hidden = |p: PathBuf, reason: HiddenReason, hidden: &mut Vec<HiddenPath>| {
        if !hidden.iter().any(|h| h.path == p) {
            hidden.push(HiddenPath { path: p, reason });
        }
    };
    for sub in ["workspaces", "bundles"] {
        let p = capsule_root.join(sub);
        if p.exists() {
            push_hidden(p, HiddenReason::ToolState, &mut hidden);
        }
    }
    let sandbox = spec.map(|s| s.sandbox.clone()).unwrap_or_default();
    let file = spec.map(|s| s.path.clone()).unwrap_or_default();
    let serr = |msg: String| Error::SpecFile {
        file: file.clone(),
        msg: format!("sandbox: {msg}"),
    };
    let host_path = |p: &str, what: &str| -> Result<Option<PathBuf>> {
        if p.starts_with('/') || p.starts_with("~/") {
            let e = expand(p, home.as_deref())
                .ok_or_else(|| serr(format!("{what} {p:?}: HOME is not set")))?;
            Ok(std::fs::canonicalize(&e).ok())
        } else {
            // relative: inside the workspace (lexically checked by the parser)
            Ok(Some(workspace.join(p)))
        }
    };
    for h in &sandbox.hidden {
        if let Some(p) = host_path(h, "hidden")? {
            push_hidden(p, HiddenReason::Requested, &mut hidden);
        }
    }
    let mut writable = Vec::new();
    for w in &sandbox.writable {
        match host_path(w, "writable")? {
            Some(p) => {
                if !writable.contains(&p) {
                    writable.push(p)
                }
            }
            None => return Err(serr(format!("writable {w:?} does not exist"))),
        }
    }
    let mut policy = SandboxPolicy {
        version: 1,
        capsule_name: name.to_string(),
        workspace: workspace.to_path_buf(),
        read_only: vec![workspace.join(MANIFEST), workspace.join(SENTINEL)],
        tmp_dir: bundle_dir.join(bundle_files::TMP),
        home: home.clone(),
        home_layer: Some(bundle_dir.join(bundle_files::HOME)),
        cache_dir: Some(bundle_dir.join(bundle_files::CACHE)),
        writable,
        hidden,
        revealed: Vec::new(),
        pass_env: sandbox.pass_env.clone(),
        devices: sandbox.devices.clone(),
        network: network_policy(spec),
    };
    // reveals: the spec's, then what tools need when it lies under a hidden path
    let mut revealed: Vec<PathBuf> = Vec::new();
    for r in &sandbox.reveal {
        if let Some(p) = host_path(r, "reveal")? {
            revealed.push(p);
        }
    }
    let mut tools: Vec<PathBuf> = Vec::new();
    let mut candidates: Vec<PathBuf> = Vec::new();
    candidates.push(workspace.join(".git"));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    for v in SDK_ENV {
        if let Some(x) = std::env::var_os(v).filter(|x| !x.is_empty()) {
            candidates.push(PathBuf::from(x));
        }
    }
    for c in candidates {
        if !c.is_absolute() {
            continue;
        }
        let Ok(cc) = std::fs::canonicalize(&c) else {
            continue;
        };
        if policy.access(&cc) == crate::policy::Access::Hidden && !revealed.contains(&cc) {
            revealed.push(cc.clone());
            tools.push(cc);
        }
    }
    policy.revealed = revealed;
    Ok((policy, tools))
}

fn network_policy(spec: Option<&Spec>) -> NetworkPolicy {
    let Some(s) = spec else {
        return NetworkPolicy::default();
    };
    let mut p = network_mode(s);
    p.publish = s.sandbox.publish.clone();
    p
}

fn network_mode(s: &Spec) -> NetworkPolicy {
    match s.network {
        SpecNetwork::None => NetworkPolicy::default(),
        SpecNetwork::Replay => NetworkPolicy {
            mode: NetworkMode::Replay,
            ..Default::default()
        },
        SpecNetwork::Live
            if !s.sandbox.network.allow.is_empty() || !s.sandbox.secrets.is_empty() =>
        {
            // a secret's hosts are reached through the allowlist
            let mut allow = s.sandbox.network.allow.clone();
            for h in s.sandbox.secrets.values().flatten() {
                if !allow.contains(h) {
                    allow.push(h.clone());
                }
            }
            NetworkPolicy {
                mode: NetworkMode::Allowlist,
                allow,
                secrets: s.sandbox.secrets.clone(),
                ..Default::default()
            }
        }
        SpecNetwork::Live => NetworkPolicy {
            mode: NetworkMode::Open,
            ..Default::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_kitsoki_library() {
        let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/kitsoki-capsules");
        if !lib.is_dir() {
            eprintln!("kitsoki capsules not found; skipped");
            return;
        }
        let t = tempfile::Builder::new().tempdir_in("/dev/shm").unwrap();
        let layout = Layout::new(t.path().join("root"));
        let mut names: Vec<_> = std::fs::read_dir(&lib)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("capsule.yaml").is_file())
            .collect();
        names.sort();
        for d in names {
            let o = open(
                &layout,
                &OpenRequest {
                    from: OpenFrom::Spec(d.join("capsule.yaml")),
                    name: None,
                    dest: None,
                    accept: Acceptance::None,
                },
                &crate::workspace::materialize::InProcess,
            )
            .unwrap_or_else(|e| panic!("{}: {e}", d.display()));
            eprintln!(
                "{} head={:?} branch={:?} digest={}",
                o.capsule.name,
                o.capsule.record.head,
                o.capsule.record.branch,
                o.capsule.record.tree_digest
            );
            if o.capsule.name == "slidey-edit-kitsoki-pitch" {
                assert_eq!(
                    o.capsule.record.head.as_deref(),
                    Some("0ffa68881b5943e255c47ef190cf411acf851461")
                );
            }
        }
        assert_eq!(crate::store::list(&layout).unwrap().len(), 14);
    }
}

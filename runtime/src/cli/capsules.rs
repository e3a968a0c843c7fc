//! `capsule open / verify / close / list / inspect / demo`: the capsule life cycle on the
//! command line. The work is done by `capsule-bundle` (spec, materialization, bundle,
//! store); this module parses arguments and prints results for humans or, with `--json`,
//! as one JSON object. Opening, closing and listing are here; verifying and the probes
//! ([`run_probe`], the one place to swap probe execution into the sandbox) are
//! in the submodules `verify`, `inspect` and `demo`.

use crate::cli::print_json;
use crate::exit::{CliError, CliResult};
use capsule_bundle::layout::{bundle_files, Layout};
use capsule_bundle::open::{OpenFrom, OpenRequest};
use capsule_bundle::policy::grants::Acceptance;
use capsule_bundle::policy::{Access, HiddenReason, NetworkMode, SandboxPolicy};
use capsule_bundle::spec::{Probe, Spec};
use capsule_bundle::store::{self, OpenCapsule};
use capsule_bundle::workspace::manifest::{Manifest, MANIFEST};
use clap::Args;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

mod demo;
mod inspect;
mod verify;
pub use demo::{demo, DemoArgs, DEMO_SPEC};
pub use inspect::{inspect, policy_in_words, InspectArgs};
pub use verify::{run_probe, verify, verify_capsule, ProbeResult, Verification, VerifyArgs};

/// How long one probe may run before it is killed and counted as failed.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  capsule open ./capsules/clean-repo          # a spec folder\n  capsule open clean-repo                     # capsules/clean-repo/capsule.yaml here or above\n  capsule open --source ~/src/myproject       # a throwaway clone of your checkout's HEAD\n  capsule open ./my-spec --accept-grants      # after reviewing what it asks beyond the defaults\n  capsule open spec.yaml --dest /tmp/ws --json"
)]
pub struct OpenArgs {
    /// A capsule.yaml, a folder holding one, or a name under ./capsules/.
    #[arg(
        value_name = "SPEC",
        required_unless_present = "source",
        conflicts_with = "source"
    )]
    pub spec: Option<String>,
    /// Open a throwaway clone of this checkout's HEAD instead of a spec (the checkout is
    /// read with gix and left byte-for-byte unchanged).
    #[arg(long, value_name = "PATH")]
    pub source: Option<PathBuf>,
    /// Put the workspace here (a new or empty folder) instead of <capsule root>/workspaces/<name>.
    #[arg(long, value_name = "DIR")]
    pub dest: Option<PathBuf>,
    /// Capsule name (default: the spec's name, or the checkout folder's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Accept the access the spec asks beyond the defaults (reveal, pass_env, writable
    /// host paths, devices, network): without a value whatever `open` listed when it
    /// refused; with =sha256:<digest> exactly that list, so a spec changed since you
    /// reviewed it is refused again.
    #[arg(long, value_name = "DIGEST", num_args = 0..=1, require_equals = true)]
    pub accept_grants: Option<Option<String>>,
    /// Print one JSON object: name, workspace, bundle, head, branch, tree_digest, ...
    #[arg(long)]
    pub json: bool,
}

/// The operator's `--accept-grants`.
fn acceptance(flag: &Option<Option<String>>) -> Result<Acceptance, CliError> {
    match flag {
        None => Ok(Acceptance::None),
        Some(v) => {
            Acceptance::from_flag(v.as_deref()).map_err(|m| CliError::new(crate::exit::USAGE, m))
        }
    }
}

#[derive(Debug, Args)]
pub struct CloseArgs {
    /// The capsule's name or workspace path.
    #[arg(value_name = "WORKSPACE|NAME")]
    pub target: String,
    /// Close even if the workspace changed since it was opened; without the sentinel,
    /// remove only the bundle and leave the folder alone.
    #[arg(long)]
    pub force: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long)]
    pub json: bool,
}

fn layout() -> Result<Layout, CliError> {
    capsule_bundle::layout::capsule_root()
        .map(Layout::new)
        .ok_or_else(|| CliError::failure("no capsule root: set CAPSULE_ROOT (or HOME)"))
}

/// A name from a spec or a record, shown on a terminal ([`capsule_bundle::escape`]).
fn esc_name(s: &str) -> String {
    capsule_bundle::escape::name(s.as_bytes())
}
fn esc_path(p: &Path) -> String {
    capsule_bundle::escape::path(p)
}
/// A line of text (a spec's, a probe's output, a policy line).
fn esc_line(s: &str) -> String {
    capsule_bundle::escape::text_line(s)
}

fn fail(e: impl std::fmt::Display) -> CliError {
    CliError::failure(e.to_string())
}

fn short(id: &Option<String>) -> String {
    id.as_deref()
        .map(|s| s.chars().take(12).collect())
        .unwrap_or_else(|| "(none)".into())
}

fn capsule_json(c: &OpenCapsule) -> serde_json::Value {
    json!({
        "name": c.name,
        "workspace": c.workspace,
        "bundle": c.bundle_dir,
        "spec_path": c.record.spec_path,
        "source": c.record.source,
        "head": c.record.head,
        "branch": c.record.branch,
        "tree_digest": format!("sha256:{}", c.record.tree_digest),
        "network": c.record.network,
        "policy_digest": c.record.policy_digest,
        "opened_at": c.record.opened_at,
        "grants": grants_json(c),
    })
}

/// The `limits` of a rendered plan ([`enforced_now`]) in one line.
fn limits_in_words(plan: &serde_json::Value) -> String {
    let l = &plan["limits"];
    let size = |k: &str| l[k].as_u64().map(crate::limits::show_size);
    let mut v = Vec::new();
    if let Some(s) = size("memory") {
        v.push(format!("memory {s}"));
    }
    if let Some(n) = l["pids"].as_u64() {
        v.push(format!("pids {n}"));
    }
    if let Some(n) = l["nproc"].as_u64() {
        v.push(format!("processes {n} (RLIMIT_NPROC: no cgroup here)"));
    }
    if let Some(m) = l["cpus_milli"].as_u64() {
        v.push(format!("cpus {}", m as f64 / 1000.0));
    }
    if let Some(s) = size("tmp_size") {
        v.push(format!("/tmp and /var/tmp {s}"));
    }
    if let Some(n) = l["fds"].as_u64() {
        v.push(format!("fds {n}"));
    }
    if let Some(s) = size("file_size") {
        v.push(format!("file size {s}"));
    }
    if let Some(d) = plan["activity_timeout"].as_str() {
        v.push(format!("activity timeout {d}"));
    }
    if v.is_empty() {
        "none (your own limits hold)".into()
    } else {
        v.join(", ")
    }
}

/// `open --json`: Kitsoki's `Manifest` fields (`capsule_name`, `spec_path`, `workspace`,
/// `opened_at`, `source{synthetic, repo, commit, head, branch}`, `network`, `tree_digest`,
/// `environment`, `probes`) as `kitsoki capsule open --json` prints them, and ours. Where
/// both name a field, Kitsoki's shape wins (`source` is the object; the checkout we
/// opened from is `source_dir`), except `tree_digest`, ours as in `list` and `verify`
/// (`sha256:<hex>` of the same digest; Kitsoki's specs accept that form).
fn kitsoki_open_json(
    c: &OpenCapsule,
    m: &capsule_bundle::workspace::manifest::Manifest,
) -> serde_json::Value {
    let mut v = capsule_json(c);
    v["source_dir"] = json!(c.record.source);
    v["capsule_name"] = json!(m.capsule_name);
    v["source"] = json!(m.source);
    v["environment"] = json!(m.environment);
    v["probes"] = json!(m.probes);
    v
}

/// The grants a capsule's policy gives and how they were accepted.
fn grants_json(c: &OpenCapsule) -> serde_json::Value {
    match &c.record.grants {
        Some(a) => json!({
            "accepted": a.grants,
            "digest": a.digest,
            "by": a.by,
        }),
        None => json!({
            "accepted": [],
            "digest": null,
            "by": "not recorded (opened before grants were recorded: none is applied)",
        }),
    }
}

/// The grants in words, one line each (spec-controlled text escaped).
fn grants_in_words(c: &OpenCapsule) -> Vec<String> {
    match &c.record.grants {
        Some(a) if a.grants.is_empty() => vec!["none (nothing beyond the defaults)".into()],
        Some(a) => {
            let mut v: Vec<String> = a.grants.iter().map(|g| g.to_string()).collect();
            let by = if a.by == "digest" {
                "--accept-grants=<digest>"
            } else {
                "--accept-grants"
            };
            v.push(format!("accepted with {by}; digest {}", a.digest));
            v
        }
        None => vec!["not recorded (opened before grants were recorded): none is applied".into()],
    }
}

// ------------------------------------------------------------------ open

/// THE way the command line opens a capsule: a synthetic spec's steps run in the build
/// sandbox ([`crate::exec::build::SandboxedSteps`]), never on the host. Exit status 125
/// when that sandbox could not be set up (nothing ran, nothing is left behind).
pub fn open_sandboxed(
    layout: &Layout,
    req: &OpenRequest,
) -> Result<capsule_bundle::open::Opened, CliError> {
    let steps = crate::exec::build::SandboxedSteps::new(layout);
    capsule_bundle::open::open(layout, req, &steps).map_err(|e| {
        if steps.setup_failed() {
            CliError::new(crate::exit::SANDBOX_FAILED, e.to_string())
        } else {
            fail(e)
        }
    })
}

pub fn open(a: OpenArgs) -> CliResult {
    let layout = layout()?;
    let accept = acceptance(&a.accept_grants)?;
    let from = match (&a.spec, &a.source) {
        (_, Some(src)) => OpenFrom::Checkout(src.clone()),
        (Some(s), None) => OpenFrom::Spec(capsule_bundle::spec::find_spec(s).map_err(fail)?),
        (None, None) => {
            return Err(CliError::new(
                crate::exit::USAGE,
                "give a SPEC or --source PATH",
            ))
        }
    };
    let line = crate::cli::progress::Line::start(a.json);
    let opened = open_sandboxed(
        &layout,
        &OpenRequest {
            from,
            name: a.name.clone(),
            dest: a.dest.clone(),
            accept,
        },
    );
    drop(line);
    let opened = opened?;
    let c = &opened.capsule;
    if let Some(line) = opened.git_guard.summary_line() {
        eprintln!("{line}");
    }
    if a.json {
        let mut v = kitsoki_open_json(c, &opened.manifest);
        if let Some(r) = opened.read_source {
            v["read_source"] = json!(r);
        }
        if opened.git_guard.is_notable() {
            v["git_guard"] = json!(opened.git_guard);
        }
        print_json(&v);
    } else {
        println!("opened {}", esc_name(&c.name));
        println!("  workspace  {}", esc_path(&c.workspace));
        println!("  bundle     {}", esc_path(&c.bundle_dir));
        println!(
            "  HEAD       {} ({})",
            esc_name(&short(&c.record.head)),
            esc_name(c.record.branch.as_deref().unwrap_or("detached"))
        );
        println!("  digest     sha256:{}", c.record.tree_digest);
        println!("  network    {}", c.policy.network.mode.as_str());
        if let Some(a) = c.record.grants.as_ref().filter(|a| !a.grants.is_empty()) {
            println!(
                "  grants     accepted: {}",
                capsule_bundle::policy::grants::list_line(&a.grants)
            );
        }
        if opened.read_source == Some(false) {
            println!("  source     served from the repository cache");
        }
        println!(
            "next: capsule exec {n} -- <command>  |  capsule verify {n}  |  capsule inspect {n}  |  capsule close {n}",
            n = esc_name(&c.name)
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn close(a: CloseArgs) -> CliResult {
    let layout = layout()?;
    // the capsule's prepared roots go first: they hold its workspace mounted
    #[cfg(target_os = "linux")]
    if let Ok(cap) = store::resolve(&layout, &a.target) {
        crate::linux::prepared::stop_all(&crate::linux::prepared::dir(&cap.bundle_dir));
    }
    let c = store::close(&layout, &a.target, a.force).map_err(fail)?;
    if a.json {
        print_json(&serde_json::to_value(&c).unwrap_or_default());
    } else if c.workspace_removed {
        println!(
            "closed {}: removed {} and its bundle",
            esc_name(&c.name),
            esc_path(&c.workspace)
        );
    } else {
        println!(
            "closed {}: removed its bundle; {} was left in place",
            esc_name(&c.name),
            esc_path(&c.workspace)
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn list(a: ListArgs) -> CliResult {
    let layout = layout()?;
    // what killed opens and closes left: removed, and said
    let reaped = capsule_bundle::store::staging::reap(&layout);
    let entries = store::list(&layout).map_err(fail)?;
    if a.json {
        let v: Vec<_> = entries
            .iter()
            .map(|e| match &e.capsule {
                Ok(c) => capsule_json(c),
                Err(err) => json!({"name": e.name, "error": err.to_string()}),
            })
            .collect();
        print_json(&json!({ "capsules": v, "removed_leftovers": reaped }));
        return Ok(ExitCode::SUCCESS);
    }
    for r in &reaped {
        eprintln!(
            "capsule: removed {} (left by a killed `capsule {}`)",
            esc_path(&r.path),
            r.left_by
        );
    }
    if entries.is_empty() {
        println!("no open capsules (open one: capsule open <spec> | capsule open --source <checkout> | capsule demo)");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<32} {:<9} {:<13} {:<20} WORKSPACE",
        "NAME", "NETWORK", "HEAD", "OPENED"
    );
    for e in &entries {
        match &e.capsule {
            Ok(c) => println!(
                "{:<32} {:<9} {:<13} {:<20} {}",
                esc_name(&c.name),
                c.policy.network.mode.as_str(),
                esc_name(&short(&c.record.head)),
                esc_name(&c.record.opened_at),
                esc_path(&c.workspace)
            ),
            Err(err) => println!(
                "{:<32} (broken bundle: {})",
                esc_name(&e.name),
                esc_line(&err.to_string())
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Is `p` a capsule workspace by its sentinel? (identification only)
pub fn has_sentinel(p: &Path) -> bool {
    std::fs::symlink_metadata(p.join(capsule_bundle::workspace::manifest::SENTINEL))
        .map(|m| m.is_file())
        .unwrap_or(false)
}

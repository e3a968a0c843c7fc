//! `capsule open / verify / close / list / inspect / demo`: the capsule life cycle on the
//! command line. The work is done by `capsule-bundle` (spec, materialization, bundle,
//! store); this module parses arguments, runs probes ([`run_probe`], the one place to
//! swap probe execution into the sandbox) and prints results for humans or, with
//! `--json`, as one JSON object.

use crate::cli::print_json;
use crate::exit::{CliError, CliResult};
use capsule_bundle::grants::Acceptance;
use capsule_bundle::layout::{bundle_files, Layout};
use capsule_bundle::manifest::{Manifest, MANIFEST};
use capsule_bundle::open::{OpenFrom, OpenRequest};
use capsule_bundle::policy::{Access, HiddenReason, NetworkMode, SandboxPolicy};
use capsule_bundle::spec::{Probe, Spec};
use capsule_bundle::store::{self, OpenCapsule};
use clap::Args;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

/// The example spec `capsule demo` opens (shipped inside the binary).
pub const DEMO_SPEC: &str = include_str!("../../examples-spec/demo/capsule.yaml");

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

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// An open capsule (name or workspace path), or a spec to open temporarily and verify.
    #[arg(value_name = "SPEC|WORKSPACE|NAME")]
    pub target: String,
    /// For a spec: accept the access it asks beyond the defaults (as `capsule open`).
    #[arg(long, value_name = "DIGEST", num_args = 0..=1, require_equals = true)]
    pub accept_grants: Option<Option<String>>,
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

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The capsule's name, workspace path or bundle directory.
    #[arg(value_name = "WORKSPACE|NAME|BUNDLE")]
    pub target: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    #[arg(long)]
    pub json: bool,
    /// Keep the demo capsule open instead of closing it at the end.
    #[arg(long)]
    pub keep: bool,
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
fn kitsoki_open_json(c: &OpenCapsule, m: &capsule_bundle::manifest::Manifest) -> serde_json::Value {
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
                capsule_bundle::grants::list_line(&a.grants)
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

// ------------------------------------------------------------------ probes (swap point)

/// The outcome of one probe.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeResult {
    pub name: String,
    pub command: String,
    pub expect: &'static str,
    pub exit_code: i32,
    pub ok: bool,
    pub output: String,
}

/// Run one probe of `cap`.
///
/// THE place probe execution happens. For now: `sh -c <run>` in the workspace (or the
/// probe's `dir` inside it) with a minimal clean environment (PATH, an empty HOME, LANG,
/// Kitsoki's fixed git identity, no global/system git config), killed after
/// [`PROBE_TIMEOUT`]. On Linux it runs inside the capsule's sandbox (the executor of
/// `capsule exec`, with the capsule's own policy and network mode; HOME is an empty folder
/// in the capsule's tmp); elsewhere it is not sandboxed yet.
pub fn run_probe(cap: &OpenCapsule, probe: &Probe) -> ProbeResult {
    let expect = if probe.expect_zero { "zero" } else { "nonzero" };
    let mut res = ProbeResult {
        name: probe.name.clone(),
        command: probe.run.clone(),
        expect,
        exit_code: -1,
        ok: false,
        output: String::new(),
    };
    let cwd = match &probe.dir {
        Some(d) => match capsule_bundle::wspath::inside(
            &cap.workspace,
            d,
            capsule_bundle::wspath::Last::NoSymlink,
        ) {
            Ok(p) => p,
            Err(e) => {
                res.output = format!("probe dir: {e}");
                return res;
            }
        },
        None => cap.workspace.clone(),
    };
    let home = match tempfile::Builder::new()
        .prefix("capsule-probe-home-")
        .tempdir()
    {
        Ok(h) => h,
        Err(e) => {
            res.output = format!("cannot make a probe HOME: {e}");
            return res;
        }
    };
    let out_file = match tempfile::tempfile() {
        Ok(f) => f,
        Err(e) => {
            res.output = format!("cannot make an output file: {e}");
            return res;
        }
    };
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(&probe.run)
        .current_dir(&cwd)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home.path())
        .env("LANG", "C.UTF-8")
        .env("TZ", "UTC")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", capsule_bundle::git::IDENTITY_NAME)
        .env("GIT_AUTHOR_EMAIL", capsule_bundle::git::IDENTITY_EMAIL)
        .env("GIT_AUTHOR_DATE", capsule_bundle::git::FIXED_DATE)
        .env("GIT_COMMITTER_NAME", capsule_bundle::git::IDENTITY_NAME)
        .env("GIT_COMMITTER_EMAIL", capsule_bundle::git::IDENTITY_EMAIL)
        .env("GIT_COMMITTER_DATE", capsule_bundle::git::FIXED_DATE)
        .stdin(Stdio::null());
    match out_file.try_clone() {
        Ok(f2) => {
            cmd.stdout(Stdio::from(f2));
        }
        Err(_) => {
            cmd.stdout(Stdio::null());
        }
    }
    match out_file.try_clone() {
        Ok(f3) => {
            cmd.stderr(Stdio::from(f3));
        }
        Err(_) => {
            cmd.stderr(Stdio::null());
        }
    }
    // Linux: in the capsule's sandbox with its own policy and network mode
    #[cfg(target_os = "linux")]
    let status = {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::ExitStatusExt;
        let env = cmd
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_os_string(), v?.to_os_string())))
            .collect();
        match crate::exec::run_probe(
            cap,
            &probe.run,
            &cwd,
            env,
            PROBE_TIMEOUT,
            out_file.as_raw_fd(),
        ) {
            Ok(code) => code.map(|c| std::process::ExitStatus::from_raw((c & 0xff) << 8)),
            Err(e) => {
                res.output = format!("probe did not run: {e}");
                return res;
            }
        }
    };
    #[cfg(not(target_os = "linux"))]
    let status = {
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                res.output = format!("cannot run sh: {e}");
                return res;
            }
        };
        let start = std::time::Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if start.elapsed() > PROBE_TIMEOUT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break None,
            }
        }
    };
    use std::io::{Read, Seek};
    let mut f = out_file;
    let mut out = String::new();
    if f.seek(std::io::SeekFrom::Start(0)).is_ok() {
        let mut buf = Vec::new();
        let _ = f.take(64 * 1024).read_to_end(&mut buf);
        out = String::from_utf8_lossy(&buf).trim().to_string();
    }
    res.output = out;
    match status {
        Some(s) => {
            use std::os::unix::process::ExitStatusExt;
            res.exit_code = s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0));
            res.ok = (res.exit_code == 0) == probe.expect_zero;
        }
        None => {
            res.output = format!(
                "timed out after {}s; killed. {}",
                PROBE_TIMEOUT.as_secs(),
                res.output
            );
        }
    }
    res
}

// ------------------------------------------------------------------ verify

/// The result of verifying an open capsule.
#[derive(Debug, serde::Serialize)]
pub struct Verification {
    pub ok: bool,
    pub capsule_name: String,
    pub workspace: PathBuf,
    pub spec_path: Option<PathBuf>,
    pub expected_tree_digest: Option<String>,
    pub actual_tree_digest: String,
    pub probes: Vec<ProbeResult>,
    pub errors: Vec<String>,
}

/// Tree digest against the spec and every probe, for an open capsule.
pub fn verify_capsule(cap: &OpenCapsule) -> Result<Verification, CliError> {
    let spec: Option<Spec> = match &cap.record.spec_path {
        Some(p) => Some(capsule_bundle::spec::load(p).map_err(fail)?),
        None => None,
    };
    let actual = capsule_bundle::digest::tree_digest(&cap.workspace).map_err(fail)?;
    let mut v = Verification {
        ok: true,
        capsule_name: cap.name.clone(),
        workspace: cap.workspace.clone(),
        spec_path: cap.record.spec_path.clone(),
        expected_tree_digest: spec.as_ref().and_then(|s| s.verify.tree_digest.clone()),
        actual_tree_digest: format!("sha256:{actual}"),
        probes: Vec::new(),
        errors: Vec::new(),
    };
    if let Some(want) = &v.expected_tree_digest {
        if !capsule_bundle::digest::matches(want, &actual) {
            v.ok = false;
            v.errors.push(format!(
                "tree_digest mismatch: got sha256:{actual}, want {want}"
            ));
        }
    }
    if let Some(s) = &spec {
        capsule_bundle::progress::phase(
            capsule_bundle::progress::PROBES,
            s.verify.probes.len() as u64,
        );
        for p in &s.verify.probes {
            let r = run_probe(cap, p);
            capsule_bundle::progress::inc(1);
            if !r.ok {
                v.ok = false;
                v.errors.push(format!(
                    "probe {:?} failed: exit {} (expected {})",
                    r.name, r.exit_code, r.expect
                ));
            }
            v.probes.push(r);
        }
    }
    Ok(v)
}

fn print_verification(v: &Verification) {
    println!(
        "{} {}",
        if v.ok { "verified" } else { "FAILED" },
        esc_name(&v.capsule_name)
    );
    match &v.expected_tree_digest {
        Some(w) => println!(
            "  tree digest  {} (want {})",
            v.actual_tree_digest,
            esc_line(w)
        ),
        None => println!("  tree digest  {} (spec pins none)", v.actual_tree_digest),
    }
    for p in &v.probes {
        println!(
            "  probe {:<28} {}  exit {} (expect {})",
            esc_name(&p.name),
            if p.ok { "ok  " } else { "FAIL" },
            p.exit_code,
            p.expect
        );
        if !p.ok && !p.output.is_empty() {
            for l in p.output.split('\n').take(5) {
                println!("      | {}", esc_line(l));
            }
        }
    }
}

/// Verify an open capsule, or a spec opened in a temporary capsule root.
fn verify_target(
    layout: &Layout,
    target: &str,
    accept: Acceptance,
) -> Result<Verification, CliError> {
    Ok(match store::resolve(layout, target) {
        Ok(cap) => {
            let v = verify_capsule(&cap)?;
            // the results go into the manifest, as `kitsoki capsule verify` does (read-only
            // inside the sandbox: the probes cannot forge them)
            let probes = serde_json::to_value(&v.probes).unwrap_or_default();
            let hex = v.actual_tree_digest.trim_start_matches("sha256:");
            capsule_bundle::manifest::write_verified(&cap.workspace, hex, probes)
                .map_err(|e| fail(format!("verify {}: {e}", cap.name)))?;
            v
        }
        Err(capsule_bundle::Error::NotFound(_)) => {
            // not an open capsule: a spec, opened in a temporary capsule root
            let spec_path = capsule_bundle::spec::find_spec(target).map_err(|e| {
                fail(format!(
                    "{}: neither an open capsule nor a spec ({e})",
                    target
                ))
            })?;
            let tmp = tempfile::Builder::new()
                .prefix("capsule-verify-")
                .tempdir()
                .map_err(fail)?;
            let tl = Layout::new(tmp.path());
            let opened = open_sandboxed(
                &tl,
                &OpenRequest {
                    from: OpenFrom::Spec(spec_path),
                    name: None,
                    dest: None,
                    accept,
                },
            )?;
            let v = verify_capsule(&opened.capsule)?;
            let _ = store::close(&tl, &opened.capsule.name, true);
            v
        }
        Err(e) => return Err(fail(e)),
    })
}

pub fn verify(a: VerifyArgs) -> CliResult {
    let layout = layout()?;
    let accept = acceptance(&a.accept_grants)?;
    let line = crate::cli::progress::Line::start(a.json);
    let v = verify_target(&layout, &a.target, accept);
    drop(line);
    let v = v?;
    if a.json {
        print_json(&serde_json::to_value(&v).unwrap_or_default());
    } else {
        print_verification(&v);
    }
    if v.ok {
        Ok(ExitCode::SUCCESS)
    } else if a.json {
        Ok(ExitCode::from(crate::exit::FAILURE))
    } else {
        Err(fail(format!(
            "verify {}: {}",
            v.capsule_name,
            v.errors.join("; ")
        )))
    }
}

// ------------------------------------------------------------------ close / list

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
    let reaped = capsule_bundle::staging::reap(&layout);
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

// ------------------------------------------------------------------ inspect

fn reason_words(r: HiddenReason) -> &'static str {
    match r {
        HiddenReason::Credentials => "credentials",
        HiddenReason::NotListed => "not among what development tools need in the home",
        HiddenReason::PersonalFiles => "personal files",
        HiddenReason::SiblingProject => "a project next to the source",
        HiddenReason::ToolState => "capsule's own state and other capsules",
        HiddenReason::AgentLogins => "agent logins and transcripts",
        HiddenReason::Requested => "hidden by the spec",
    }
}

fn network_words(p: &SandboxPolicy) -> String {
    match p.network.mode {
        NetworkMode::None => "none: an own network namespace with loopback only".into(),
        NetworkMode::Off => "off: no network at all, not even loopback TCP".into(),
        NetworkMode::Allowlist => format!(
            "allowlist: only through capsule's proxy to {}",
            p.network.allow.join(", ")
        ),
        NetworkMode::Open => "open: the host's network, unrestricted".into(),
        NetworkMode::Replay => {
            "replay: needs a supervised replay network from the deployment".into()
        }
    }
}

/// The effective policy in plain words, one line each.
pub fn policy_in_words(p: &SandboxPolicy) -> Vec<String> {
    let mut v = Vec::new();
    v.push(format!("writable: the workspace {}", p.workspace.display()));
    v.push(format!(
        "writable: its /tmp (kept in {})",
        p.tmp_dir.display()
    ));
    for w in &p.writable {
        v.push(format!("writable: {} (asked for by the spec)", w.display()));
    }
    for r in &p.read_only {
        v.push(format!("read-only inside the workspace: {}", r.display()));
    }
    v.push("read-only: everything else on the system".into());
    if let Some(home) = &p.home {
        v.push(format!(
            "home {}: only what development tools need is there (toolchains, git's and shells' configuration, tool settings, PATH folders); the rest of it does not exist inside (full isolation)",
            home.display()
        ));
    }
    for h in &p.hidden {
        v.push(format!(
            "hidden: {} ({})",
            h.path.display(),
            reason_words(h.reason)
        ));
    }
    for r in &p.revealed {
        let why = if p.access(r) == Access::ReadOnly {
            "readable again inside a hidden folder"
        } else {
            "revealed"
        };
        v.push(format!("revealed: {} ({why})", r.display()));
    }
    if !p.pass_env.is_empty() {
        v.push(format!(
            "environment passed besides the defaults: {}",
            p.pass_env.join(", ")
        ));
    }
    if !p.devices.is_empty() {
        v.push(format!("devices: {}", p.devices.join(", ")));
    }
    v.push(format!("network: {}", network_words(p)));
    for (name, hosts) in &p.network.secrets {
        v.push(format!(
            "secret: {name} is a placeholder inside; its value (from the exec's environment) goes to {} only",
            hosts.join(", ")
        ));
    }
    for port in &p.network.publish {
        v.push(format!(
            "published while an exec runs: {port} (HOST_PORT:PORT) on this computer's 127.0.0.1 and [::1] only"
        ));
    }
    v
}

pub fn inspect(a: InspectArgs) -> CliResult {
    let layout = layout()?;
    let cap = store::resolve(&layout, &a.target).map_err(fail)?;
    let spec_text = cap
        .record
        .spec_path
        .as_ref()
        .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| format!("(cannot read: {e})")));
    let manifest = Manifest::read(&cap.workspace.join(MANIFEST));
    let config_path = cap.bundle_file(bundle_files::CONFIG);
    let config_check = capsule_bundle::oci::load_and_validate(&config_path);
    let config_json: serde_json::Value = std::fs::read_to_string(&config_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    // in words: the policy an exec with no flags resolves now (the plan's), not only the
    // stored one
    let words = policy_in_words(&crate::exec::with_current_hidden(&cap, &layout));
    let now = enforced_now(&cap, &layout);
    if a.json {
        print_json(&json!({
            "capsule": capsule_json(&cap),
            "spec_path": cap.record.spec_path,
            "spec": spec_text,
            "manifest": manifest.as_ref().ok(),
            "manifest_error": manifest.as_ref().err(),
            "policy": cap.policy,
            "policy_in_words": words,
            "spec_limits": cap.record.limits,
            "config": config_json,
            "config_valid": config_check.is_ok(),
            "config_error": config_check.as_ref().err().map(|e| e.to_string()),
            "config_is": "the open-time rendering of the policy; `plan` and `config_now` are what an exec enforces now",
            "plan": now.as_ref().ok().map(|n| &n.plan),
            "config_now": now.as_ref().ok().map(|n| &n.config),
            "oci_not_enforced": now.as_ref().ok().map(|_| crate::linux::oci::NOT_ENFORCED),
            "plan_error": now.as_ref().err(),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    println!("capsule {}", esc_name(&cap.name));
    println!("  workspace  {}", esc_path(&cap.workspace));
    println!("  bundle     {}", esc_path(&cap.bundle_dir));
    println!("  opened     {}", esc_name(&cap.record.opened_at));
    println!(
        "  HEAD       {} ({})",
        esc_name(&short(&cap.record.head)),
        esc_name(cap.record.branch.as_deref().unwrap_or("detached"))
    );
    if let Some(s) = &cap.record.source {
        println!("  source     {} (checkout, left untouched)", esc_path(s));
    }
    println!("\ngrants (access beyond the defaults, accepted at open):");
    for w in grants_in_words(&cap) {
        println!("  {w}");
    }
    println!("\nlimits of an exec without flags (the spec's may only lower your defaults):");
    match &now {
        Ok(n) => println!("  {}", esc_line(&limits_in_words(&n.plan))),
        Err(e) => println!("  unknown: {}", esc_line(e)),
    }
    println!(
        "\neffective policy (from {}, with the hidden paths of now):",
        esc_path(&cap.bundle_file(bundle_files::POLICY))
    );
    // paths and lines below come from the spec: escaped, never raw on the terminal
    for w in &words {
        println!("  {}", esc_line(w));
    }
    println!("\nspec:");
    match (&cap.record.spec_path, &spec_text) {
        (Some(p), Some(t)) => {
            println!("  {}", esc_path(p));
            for l in t.strip_suffix('\n').unwrap_or(t).split('\n') {
                println!("  | {}", esc_line(l));
            }
        }
        _ => println!("  (none: opened from a checkout)"),
    }
    println!(
        "\nmanifest ({}; informational, the runtime never trusts it):",
        esc_path(&cap.workspace.join(MANIFEST))
    );
    match &manifest {
        Ok(m) => {
            let t = serde_json::to_string_pretty(m).unwrap_or_default();
            for l in t.lines() {
                println!("  | {}", esc_line(l));
            }
        }
        Err(e) => println!("  (unreadable: {})", esc_line(e)),
    }
    match &now {
        Ok(n) => {
            println!("\nenforced now (the plan of an exec, rendered as OCI config.json; `capsule export` writes it):");
            println!(
                "  plan digest {} (an exec with no flags records it as applied.plan_digest)",
                esc_name(n.plan["digest"].as_str().unwrap_or("?"))
            );
            println!("  a plain OCI runtime (runc, crun) running it does NOT enforce:");
            for w in crate::linux::oci::NOT_ENFORCED {
                println!("    {w}");
            }
            let t = serde_json::to_string_pretty(&n.config).unwrap_or_default();
            for l in t.lines() {
                println!("  | {}", esc_line(l));
            }
        }
        Err(e) => println!("\nenforced now: cannot resolve the plan: {}", esc_line(e)),
    }
    println!(
        "\nconfig.json ({}; rendered from the policy at open, not what runs):",
        esc_path(&config_path)
    );
    match &config_check {
        Ok(_) => println!("  valid OCI runtime spec"),
        Err(e) => println!("  INVALID: {}", esc_line(&e.to_string())),
    }
    let t = serde_json::to_string_pretty(&config_json).unwrap_or_default();
    for l in t.lines() {
        println!("  | {}", esc_line(l));
    }
    Ok(ExitCode::SUCCESS)
}

/// What an exec of the capsule enforces now: its plan, in JSON, and the plan rendered as
/// OCI `config.json`.
struct EnforcedNow {
    plan: serde_json::Value,
    config: serde_json::Value,
}

#[cfg(target_os = "linux")]
fn enforced_now(cap: &OpenCapsule, layout: &Layout) -> Result<EnforcedNow, String> {
    use crate::linux::{oci, seccomp};
    let shell = std::env::var_os("SHELL").unwrap_or_else(|| "/bin/sh".into());
    let mut plan = crate::exec::plan_preview(cap, layout, vec![shell]).map_err(|e| e.message)?;
    // values passed through by name (tokens, keys) stay out of what inspect prints
    for (k, v) in plan.env.iter_mut() {
        let shown = k.to_str().is_some_and(|k| {
            matches!(
                k,
                "PATH" | "TMPDIR" | "HOME" | "USER" | "LOGNAME" | "LANG" | "TERM" | "SHELL"
            ) || k.starts_with("LC_")
        });
        if !shown {
            *v = "(value from the environment of the exec)".into();
        }
    }
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let rendered =
        oci::render(&plan, uid, gid, Path::new("rootfs"), false, &[]).map_err(|e| e.to_string())?;
    let seccomp: Vec<_> = seccomp::rules()
        .into_iter()
        .map(|r| {
            json!({
                "name": r.name,
                "errno": r.errno,
                "conditional": !r.when.is_empty(),
            })
        })
        .collect();
    let plan_json = json!({
        // what the exec record's `applied.plan_digest` says of an exec with no flags
        "digest": plan.digest(),
        "isolation": plan.isolation,
        "mounts": plan.mounts,
        "cwd": plan.cwd,
        // names only: values may carry what --pass-env passes
        "env": plan.env.iter().map(|(k, _)| k.to_string_lossy()).collect::<Vec<_>>(),
        "namespaces": {
            "user": true, "mount": true, "pid": true, "ipc": true, "uts": true,
            "network": plan.new_netns,
        },
        "hostname": plan.hostname,
        "capabilities": [],
        "no_new_privs": true,
        "id_mapping": {"uid": uid, "gid": gid, "size": 1},
        "seccomp": seccomp,
        "network": plan.policy.network.mode.as_str(),
        "network_allow": plan.policy.network.allow,
        // an exec with no flags: the operator's defaults, lowered by the spec's
        "limits": plan.limits,
        "activity_timeout": plan.activity_timeout.map(|d| humantime::format_duration(d).to_string()),
        "network_secrets": plan.policy.network.secrets,
        "network_publish": plan.policy.network.publish,
        "landlock": {
            "workspace": plan.policy.workspace,
            "writable": plan.policy.writable,
            "read_only": plan.policy.read_only,
            "hidden": plan.policy.hidden.iter().map(|h| &h.path).collect::<Vec<_>>(),
            "revealed": plan.policy.revealed,
        },
        "policy_digest": plan.policy.digest(),
    });
    Ok(EnforcedNow {
        plan: plan_json,
        config: serde_json::to_value(&rendered.spec).map_err(|e| e.to_string())?,
    })
}

#[cfg(not(target_os = "linux"))]
fn enforced_now(_: &OpenCapsule, _: &Layout) -> Result<EnforcedNow, String> {
    Err("the exec plan is resolved on Linux only in this build".into())
}

// ------------------------------------------------------------------ demo

/// One command the demo runs.
#[derive(Debug, serde::Serialize)]
struct DemoStep {
    command: String,
    exit_code: i32,
    output: String,
}

pub fn demo(a: DemoArgs) -> CliResult {
    let tmp = tempfile::Builder::new()
        .prefix("capsule-demo-")
        .tempdir()
        .map_err(fail)?;
    let spec_dir = tmp.path().join("spec");
    std::fs::create_dir_all(&spec_dir).map_err(fail)?;
    let spec_file = spec_dir.join("capsule.yaml");
    std::fs::write(&spec_file, DEMO_SPEC).map_err(fail)?;
    let root = tmp.path().join("root");
    let layout = Layout::new(&root);
    // A home of the demo's own, with a planted (fake) SSH key: the demo shows the key is
    // hidden without touching the person's real home.
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).map_err(fail)?;
    std::fs::write(home.join(".ssh/id_demo"), "FAKE-DEMO-KEY\n").map_err(fail)?;
    let home = home.canonicalize().map_err(fail)?;
    // SAFETY: single-threaded here; the policy of the capsule opened below is computed
    // from HOME, and the `capsule exec` children inherit it.
    unsafe { std::env::set_var("HOME", &home) };
    if !a.json {
        println!(
            "capsule demo: opening the example capsule in a temporary capsule root {}",
            root.display()
        );
        println!(
            "  (with a demo home {} holding a fake key in .ssh/)",
            home.display()
        );
    }
    let opened = open_sandboxed(
        &layout,
        &OpenRequest {
            from: OpenFrom::Spec(spec_file),
            name: None,
            dest: None,
            // the demo spec asks for nothing beyond the defaults: refuse if it ever does
            accept: Acceptance::None,
        },
    )?;
    let cap = &opened.capsule;
    if !a.json {
        println!("  opened {} at {}", cap.name, cap.workspace.display());
        println!(
            "  HEAD {} on {}",
            short(&cap.record.head),
            cap.record.branch.as_deref().unwrap_or("detached")
        );
    }
    // (what it shows, command, should the sandbox let it succeed?)
    let commands: [(&str, &str, bool); 7] = [
        ("work in the workspace", "git log --oneline && sh src/hello.sh", true),
        (
            "commit in the workspace",
            "git add notes.txt && git -c user.name=demo -c user.email=demo@capsule.invalid commit -qm notes && git log --oneline | head -1",
            true,
        ),
        ("write outside the workspace", "echo tampered > /etc/capsule-demo", false),
        ("tamper with the capsule's own record", "echo '{}' > capsule-manifest.json", false),
        ("read the (fake) SSH key in your home", "cat ~/.ssh/id_demo", false),
        ("see the host's processes", "test \"$(ls /proc | grep -c '^[0-9]')\" -gt 5", false),
        ("start a user namespace inside (seccomp)",
            "unshare --user true",
            false),
    ];
    let v = verify_capsule(cap)?;
    let mut unexpected = usize::from(!v.ok);
    if !a.json {
        println!();
        print_verification(&v);
    }
    let mut steps = Vec::new();
    for (what, c, should_work) in commands {
        let r = demo_exec(&root, tmp.path(), &cap.name, c, should_work)?;
        let verdict = match (r.exit_code == 0, should_work) {
            (true, true) => "works",
            (false, false) => "refused by the sandbox",
            (true, false) => "UNEXPECTEDLY ALLOWED",
            (false, true) => "UNEXPECTEDLY FAILED",
        };
        // `ok`: the exit status matched the expectation
        if !r.ok {
            unexpected += 1;
        }
        if !a.json {
            println!("\n# {what}: {verdict}");
            println!("$ {c}    (exit {})", r.exit_code);
            for l in r.output.lines().take(6) {
                println!("  {l}");
            }
        }
        steps.push(DemoStep {
            command: c.into(),
            exit_code: r.exit_code,
            output: r.output,
        });
    }
    if !a.json {
        println!("\nthe policy the sandbox enforced:");
        for w in policy_in_words(&cap.policy).iter().take(8) {
            println!("  {w}");
        }
        println!("\nnext: `capsule open <spec.yaml>` or `capsule open --source <checkout>`, then");
        println!("      `capsule exec <name> -- <command>`; see README.md.");
    }
    let closed = if a.keep {
        false
    } else {
        store::close(&layout, &cap.name, true).map_err(fail)?;
        true
    };
    if a.json {
        print_json(&json!({
            "capsule": capsule_json(cap),
            "commands": steps,
            "verify": v,
            "sandboxed": true,
            "unexpected": unexpected,
            "closed": closed,
        }));
    } else if closed {
        println!("\nclosed {}: workspace and bundle removed.", cap.name);
    } else {
        let kept = tmp.keep();
        println!(
            "\nkept {} (capsule root {}); close it with CAPSULE_ROOT={} capsule close {}",
            cap.name,
            kept.join("root").display(),
            kept.join("root").display(),
            cap.name
        );
    }
    if unexpected > 0 {
        return Err(CliError::failure(format!(
            "demo: {unexpected} command(s) did not behave as the sandbox promises (see above); check `capsule isolation`"
        )));
    }
    Ok(ExitCode::SUCCESS)
}

/// Run `sh -c cmd` in the demo capsule through the real `capsule exec` (this binary),
/// from a directory outside any Kitsoki project so no operator gate config applies.
fn demo_exec(
    root: &Path,
    cwd: &Path,
    name: &str,
    cmd: &str,
    should_work: bool,
) -> Result<ProbeResult, CliError> {
    let exe = std::env::current_exe().map_err(fail)?;
    let out = std::process::Command::new(exe)
        .args(["exec", name, "--", "sh", "-c", cmd])
        .env("CAPSULE_ROOT", root)
        .env_remove("CAPSULE_POLICY_CONFIG")
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(fail)?;
    let exit_code = out.status.code().unwrap_or(-1);
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(ProbeResult {
        name: cmd.into(),
        command: cmd.into(),
        expect: if should_work { "zero" } else { "nonzero" },
        exit_code,
        // a runtime failure (125) is never the refusal the demo wants to show
        ok: (exit_code == 0) == should_work && exit_code != i32::from(crate::exit::SANDBOX_FAILED),
        output,
    })
}

/// Is `p` a capsule workspace by its sentinel? (identification only)
pub fn has_sentinel(p: &Path) -> bool {
    std::fs::symlink_metadata(p.join(capsule_bundle::manifest::SENTINEL))
        .map(|m| m.is_file())
        .unwrap_or(false)
}

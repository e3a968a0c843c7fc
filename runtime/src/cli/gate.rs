//! `capsule policy check` and `capsule agent launch`: the launch-policy gate on the command
//! line (the gate itself lives in the `capsule-policy` crate).
//!
//! Both load the gate from the current directory (walking up to `.kitsoki.yaml` /
//! `.kitsoki.local.yaml`) or `--config FILE`, decide once, append the decision to the trace
//! sink (`--trace FILE`, else `$CAPSULE_TRACE`) and then act on the resolved working
//! directory only. A denial exits with status 3 (`exit::DENIED`).
//!
//! `agent launch` maps a backend to its command line:
//!
//! | backend | default | `--interactive` | `--model M` | `--effort E` |
//! |---|---|---|---|---|
//! | codex | `codex exec ARGS` | `codex ARGS` | `-m M` | `-c model_reasoning_effort="E"` (minimal, low, medium, high, xhigh) |
//! | claude | `claude -p ARGS` | `claude ARGS` | `--model M` | refused: the claude CLI has no effort flag |
//!
//! `--raw` passes the arguments after `--` unchanged (`codex ARGS`), and refuses `--model` /
//! `--effort`. Codex always gets `-c sandbox_mode="danger-full-access"` right after its
//! binary: its own sandbox needs nested user namespaces, which capsule's refuses (the plan
//! says so under `own_sandbox`); the mapping comes from the backend's agent profile
//! ([`crate::agent::Profile`]). Without `--dry-run` the backend runs inside the capsule's
//! sandbox through the library's exec pipeline ([`crate::exec::Exec`]), exactly as
//! `capsule exec <capsule> [-t] --agent-login B [--hide OTHER_LOGIN]… [--reveal PACKAGE]…
//! [--allow-host HOST]… [--pass-env NAME]… -- BINARY ARGS…` (the `runner` of `--dry-run`)
//! would run it, in the resolved working directory (entered through the gate's open
//! handle), with the terminal passed through, and `agent launch` exits with its status.
//! What those flags
//! carry (own login through the home layer, binary resolved once, API hosts) is decided in
//! [`agent`]. `CAPSULE_POLICY_CONFIG` is set to the configuration this gate used, so the
//! exec's own gate decides under the same file, and `CAPSULE_TRACE` when `--trace` was
//! given.

pub mod agent;
pub mod profile;

use crate::agent::Profile;
use crate::cli::print_json;
use crate::exit::{self, CliError, CliResult};
use capsule_bundle::layout::{capsule_root, Layout};
use capsule_policy::{append_trace, trace_path, Decision, Gate};
use clap::{Args, Subcommand};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Decide whether an agent may start in a directory; print the decision.
    ///
    /// Exit status 0 when allowed, 3 when denied, 1 when the configuration is unusable.
    /// Every decision is also appended to the trace file (`--trace FILE` or
    /// `$CAPSULE_TRACE`) as one `agent.launch.policy` JSON line.
    Check(CheckArgs),
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Launch a coding agent (codex, claude) in a capsule, after the launch-policy gate.
    ///
    /// `--dry-run` prints the plan as JSON (backend, binary, argv, working directory,
    /// environment names with values redacted, and the gate's decision). A denied launch
    /// exits with status 3 before any plan is printed or anything starts.
    ///
    /// Without `--dry-run` the backend runs inside the capsule's sandbox through
    /// `capsule exec`, in the resolved working directory, and `agent launch` exits with the
    /// backend's status. It sees its own login (~/.claude, ~/.claude.json / ~/.codex) through
    /// the capsule's home layer (its writes stay in the layer, never in your home), no other
    /// agent's login, its binary (found on PATH, resolved once; a package in a hidden sibling
    /// folder is revealed read-only), the environment variables it needs by name, and its
    /// API hosts (when exec has the network allowlist).
    #[command(after_help = "Examples:\n  \
        capsule agent launch --backend codex --working-dir WORKSPACE --dry-run -- \"fix the test\"\n  \
        capsule agent launch --backend codex --working-dir WORKSPACE --effort high -- \"fix the test\"\n  \
        capsule agent launch --backend claude --interactive --working-dir WORKSPACE --model opus")]
    Launch(LaunchArgs),
    /// The agent profiles: what capsule knows about each agent CLI (binary, own login
    /// paths, API hosts, variables, the flags that turn its own sandbox off). Built-in:
    /// claude, codex, copilot, gemini, opencode; the operator's own are kept in the tool's
    /// settings.
    #[command(subcommand)]
    Profile(profile::ProfileCommand),
}

/// Where the gate's configuration and trace come from.
#[derive(Debug, Args)]
pub struct GateArgs {
    /// Use this configuration file instead of searching upwards from the current directory
    /// for .kitsoki.yaml / .kitsoki.local.yaml. A `.kitsoki.yaml` named here still picks up
    /// the `.kitsoki.local.yaml` next to it.
    #[arg(long, value_name = "FILE", env = "CAPSULE_POLICY_CONFIG")]
    pub config: Option<PathBuf>,
    /// Append every decision to FILE as one `agent.launch.policy` JSON line
    /// (default: $CAPSULE_TRACE when set).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The directory the agent would start in.
    #[arg(long, value_name = "DIR")]
    pub working_dir: PathBuf,
    /// What would be started (recorded in the decision).
    #[arg(long, value_name = "VERB", default_value = "agent.launch")]
    pub verb: String,
    /// The agent's name (recorded in the decision).
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    #[command(flatten)]
    pub gate: GateArgs,
    /// Print the decision record as one line of JSON instead of sentences.
    #[arg(long)]
    pub json: bool,
}

/// Passed to every backend when set: terminal and locale.
const COMMON_ENV: &[&str] = &["TERM", "COLORTERM", "NO_COLOR", "LANG", "LC_ALL", "TZ"];

#[derive(Debug, Args)]
pub struct LaunchArgs {
    /// Which agent CLI to start: a profile (`capsule agent profile list`: claude, codex,
    /// copilot, gemini, opencode, and the operator's own).
    #[arg(long, value_name = "NAME")]
    pub backend: String,
    /// The directory the agent starts in (normally a capsule's workspace).
    #[arg(long, value_name = "DIR")]
    pub working_dir: PathBuf,
    /// Pass the arguments after `--` to the backend unchanged (no `exec`/`-p`, no mapping).
    #[arg(long)]
    pub raw: bool,
    /// Start the backend's interactive UI, with the terminal passed through.
    #[arg(long)]
    pub interactive: bool,
    /// Print the launch plan as JSON and start nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The model (the profile's model flag: codex `-m M`, claude `--model M`).
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// Reasoning effort, for profiles that have one (codex: minimal, low, medium, high,
    /// xhigh).
    #[arg(long, value_name = "E")]
    pub effort: Option<String>,
    /// Also pass this environment variable into the sandbox (repeatable).
    #[arg(long, value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Also let the backend reach HOST[:PORT] (repeatable; added to its default API hosts).
    #[arg(long, value_name = "HOST[:PORT]")]
    pub allow_host: Vec<String>,
    #[command(flatten)]
    pub gate: GateArgs,
    /// Arguments for the backend (the prompt, flags).
    #[arg(last = true, value_name = "BACKEND_ARGS")]
    pub backend_args: Vec<String>,
}

pub fn policy(cmd: PolicyCommand) -> CliResult {
    match cmd {
        PolicyCommand::Check(a) => check(a),
    }
}

pub fn agent(cmd: AgentCommand) -> CliResult {
    match cmd {
        AgentCommand::Launch(a) => launch(a),
        AgentCommand::Profile(c) => profile::run(c),
    }
}

/// Load the gate, decide, and append to the trace sink.
fn decide(
    gate_args: &GateArgs,
    verb: &str,
    agent: Option<&str>,
    wd: &Path,
) -> Result<Decision, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::failure(format!("cannot read the current directory: {e}")))?;
    let gate = Gate::load(&cwd, gate_args.config.as_deref())
        .map_err(|e| CliError::failure(format!("{e} (fix the file, or pass --config FILE)")))?;
    let decision = gate.decide(verb, agent, wd);
    tracing::debug!(record = %decision.record_json(), "launch-policy decision");
    if let Some(trace) = trace_path(gate_args.trace.as_deref()) {
        append_trace(&trace, &decision).map_err(|e| {
            CliError::failure(format!(
                "cannot append the decision to the trace file {}: {e}",
                trace.display()
            ))
        })?;
    }
    Ok(decision)
}

fn denial(d: &Decision) -> String {
    match d.failed_check {
        Some(c) => format!("check {} ({})", c.number(), check_name(c)),
        None => "denied".into(),
    }
}

fn check_name(c: capsule_policy::Check) -> &'static str {
    use capsule_policy::Check::*;
    match c {
        WorkingDir => "working_dir",
        AllowedRoots => "allowed_roots",
        ProtectedRoots => "protected_roots",
        ProtectedBranches => "protected_branches",
        RequireCapsule => "require_capsule",
    }
}

fn check(a: CheckArgs) -> CliResult {
    let d = decide(&a.gate, &a.verb, a.agent.as_deref(), &a.working_dir)?;
    if a.json {
        println!("{}", d.record_json());
    } else {
        print_human(&d);
    }
    Ok(if d.allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::DENIED)
    })
}

fn print_human(d: &Decision) {
    use capsule_bundle::escape;
    let wd = escape::path(d.resolved_working_dir.as_deref().unwrap_or(&d.working_dir));
    if d.allowed {
        println!("allowed: {} in {wd}", d.verb);
    } else {
        println!(
            "denied: {} in {wd} — {}",
            d.verb,
            escape::text_line(&denial(d).to_string())
        );
    }
    println!("  {}", escape::text_line(&d.reason));
    if !d.config_files.is_empty() {
        let files: Vec<String> = d.config_files.iter().map(|p| escape::path(p)).collect();
        println!("  config: {}", files.join(", "));
    }
    if let Some(g) = &d.git {
        let head = match (&g.branch, g.head) {
            (_, Some(capsule_policy::HeadState::Detached)) => "detached HEAD".to_string(),
            (Some(b), Some(capsule_policy::HeadState::Unborn)) => format!("branch {b} (unborn)"),
            (Some(b), _) => format!("branch {b}"),
            (None, _) => "HEAD unreadable".to_string(),
        };
        println!(
            "  git: {} ({})",
            escape::path(&g.root),
            escape::text_line(&head)
        );
    }
    if let Some(c) = &d.capsule {
        println!(
            "  capsule: {} at {}",
            escape::name(c.name.as_bytes()),
            escape::path(&c.root)
        );
    }
}

/// The backend's arguments (after the binary and its sandbox-off arguments), from its
/// profile: its batch arguments unless `--interactive`, its model and effort flags, then
/// the caller's.
fn backend_argv(a: &LaunchArgs, p: &Profile) -> Result<Vec<String>, CliError> {
    let usage = |m: String| CliError::new(exit::USAGE, m);
    if a.raw {
        if a.model.is_some() || a.effort.is_some() {
            return Err(usage(
                "--raw passes the backend arguments unchanged; put the model or effort flags after `--` instead of --model/--effort".into(),
            ));
        }
        return Ok(a.backend_args.clone());
    }
    let name = &p.name;
    let mut v = Vec::new();
    if !a.interactive {
        v.extend(p.batch.iter().cloned());
    }
    if let Some(m) = &a.model {
        let Some(flag) = &p.model_flag else {
            return Err(usage(format!(
                "--model: the {name} profile has no model flag; use --raw with flags {name} understands"
            )));
        };
        v.extend([flag.clone(), m.clone()]);
    }
    if let Some(e) = &a.effort {
        if p.efforts.is_empty() {
            return Err(usage(format!(
                "--effort: the {name} CLI has no effort flag; leave it out (or use --raw with flags {name} understands)"
            )));
        }
        if !p.efforts.contains(e) {
            return Err(usage(format!(
                "--effort {e}: {name} accepts {}",
                p.efforts.join(", ")
            )));
        }
        v.extend(p.effort_args.iter().map(|x| x.replace("{}", e)));
    }
    v.extend(a.backend_args.iter().cloned());
    Ok(v)
}

fn launch(a: LaunchArgs) -> CliResult {
    use capsule_bundle::policy::{HiddenPath, HiddenReason, NetworkMode};
    use capsule_bundle::store;

    // argument errors first: nothing is decided or recorded for a malformed command
    let settings = crate::settings::Settings::load(
        &capsule_root()
            .map(|r| Layout::new(r).settings_file())
            .unwrap_or_default(),
    )
    .map_err(|e| CliError::failure(e.to_string()))?;
    let profiles = crate::agent::all(&settings.agent_profiles);
    let Some(prof) = profiles.iter().find(|p| p.name == a.backend).cloned() else {
        let names: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
        return Err(CliError::new(
            exit::USAGE,
            format!(
                "--backend {:?}: no such agent profile (known: {}; add one with `capsule agent profile add`)",
                a.backend,
                names.join(", ")
            ),
        ));
    };
    prof.validate()
        .map_err(|e| CliError::failure(format!("{e} (fix it in the tool's settings)")))?;
    let backend = prof.name.as_str();
    let args = backend_argv(&a, &prof)?;
    for n in &a.pass_env {
        if n.is_empty() || n.contains('=') {
            return Err(CliError::new(
                exit::USAGE,
                format!("--pass-env {n:?}: give a variable name"),
            ));
        }
    }
    for h in &a.allow_host {
        if h.is_empty() || h.contains(|c: char| c.is_whitespace() || c == '/') {
            return Err(CliError::new(
                exit::USAGE,
                format!("--allow-host {h:?}: give HOST or HOST:PORT (no scheme, no path)"),
            ));
        }
    }
    let allowlist = agent::exec_has_allow_host();
    if !a.allow_host.is_empty() && !allowlist {
        return Err(CliError::new(
            exit::USAGE,
            "--allow-host: this build's `capsule exec` has no network allowlist yet".to_string(),
        ));
    }
    let d = decide(&a.gate, "agent.launch", Some(backend), &a.working_dir)?;
    if !d.allowed {
        return Err(CliError::new(
            exit::DENIED,
            format!(
                "launch denied by the launch policy, {}: {}",
                denial(&d),
                d.reason
            ),
        ));
    }
    let Some(wd) = d.resolved_working_dir.clone() else {
        // the gate is off and the directory does not resolve: nothing can start there
        return Err(CliError::failure(format!(
            "working directory {} cannot be used: it does not exist or is not a directory",
            a.working_dir.display()
        )));
    };
    // the capsule is the exec target; the working directory when the gate found none
    let target = d
        .capsule
        .as_ref()
        .map(|c| c.root.clone())
        .unwrap_or_else(|| wd.clone());
    // the capsule as `capsule exec` will load it (none: exec says why it cannot run)
    let cap = capsule_root()
        .map(Layout::new)
        .and_then(|l| store::resolve(&l, &target.to_string_lossy()).ok());
    let home = match &cap {
        Some(c) => c.policy.home.clone(),
        None => std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .and_then(|h| std::fs::canonicalize(h).ok()),
    };
    // its own login un-hidden, every other agent's hidden (existing or not)
    let own_login: Vec<PathBuf> = home
        .iter()
        .flat_map(|h| prof.login_paths.iter().map(move |r| h.join(r)))
        .collect();
    let hide: Vec<PathBuf> = home
        .iter()
        .flat_map(|h| {
            agent::other_logins(&prof, &profiles)
                .into_iter()
                .map(move |r| h.join(r))
        })
        .collect();
    let view_policy = cap.as_ref().map(|c| {
        let mut p = c.policy.clone();
        agent::unhide_login(&mut p, &prof);
        p.hidden.extend(hide.iter().map(|h| HiddenPath {
            path: h.clone(),
            reason: HiddenReason::AgentLogins,
        }));
        p
    });
    let upper = cap
        .as_ref()
        .map(|c| crate::home::layer::layer_paths(&c.bundle_dir).upper);
    let view = view_policy.as_ref().map(|p| agent::View {
        policy: p,
        upper: upper.as_deref(),
    });
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    let resolved =
        agent::resolve_binary(&prof.binary, &path_var, view.as_ref()).map_err(|e| match e {
            agent::ResolveError::NotFound(_) => CliError::new(exit::NOT_FOUND, e.to_string()),
            _ => CliError::failure(e.to_string()),
        })?;

    // names passed into the sandbox: those set here, values never printed
    let set_here = |n: &str| std::env::var_os(n).is_some();
    let defaults: Vec<(&str, &str)> = prof
        .default_env
        .iter()
        .filter(|(n, _)| !set_here(n))
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let prefixed = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| prof.env_prefixes.iter().any(|p| k.starts_with(p.as_str())));
    let mut env_names: Vec<String> = COMMON_ENV
        .iter()
        .map(|s| s.to_string())
        .chain(prof.env.iter().cloned())
        .chain(a.pass_env.iter().cloned())
        .chain(prefixed)
        .filter(|n| set_here(n))
        .chain(defaults.iter().map(|(n, _)| n.to_string()))
        .collect();
    env_names.sort();
    env_names.dedup();

    // network: the backend's API hosts, unless the capsule's spec chose open or no network
    let mode = cap.as_ref().map(|c| c.policy.network.mode);
    let mut allow_hosts: Vec<String> = match mode {
        Some(NetworkMode::Open | NetworkMode::Off | NetworkMode::Replay) => Vec::new(),
        _ => prof.hosts.clone(),
    };
    allow_hosts.extend(a.allow_host.iter().cloned());
    allow_hosts.dedup();
    let network_note = if allowlist || allow_hosts.is_empty() {
        None
    } else {
        Some(format!(
            "this build's `capsule exec` has no network allowlist yet: {backend} gets the capsule's network ({}) and cannot reach {}",
            mode.unwrap_or_default().as_str(),
            allow_hosts.join(", ")
        ))
    };
    if !allowlist {
        allow_hosts.clear();
    }
    let secrets = crate::agent::keys_as_secrets(&prof, &mut env_names, &mut allow_hosts, |n| {
        std::env::var(n).ok()
    });

    let mut argv = vec![resolved.binary.display().to_string()];
    let sandbox_off: Vec<String> = prof.sandbox_off.clone();
    argv.extend(sandbox_off.iter().cloned());
    argv.extend(args);
    let mut exec_args: Vec<String> = vec!["exec".into(), target.display().to_string()];
    if a.interactive {
        exec_args.push("-t".into());
    }
    exec_args.extend(["--agent-login".to_string(), backend.to_string()]);
    for h in &hide {
        exec_args.extend(["--hide".to_string(), h.display().to_string()]);
    }
    for r in &resolved.reveal {
        exec_args.extend(["--reveal".to_string(), r.display().to_string()]);
    }
    for h in &allow_hosts {
        exec_args.extend(["--allow-host".to_string(), h.clone()]);
    }
    for n in &env_names {
        exec_args.extend(["--pass-env".to_string(), n.clone()]);
    }
    for f in &secrets {
        exec_args.extend(["--secret".to_string(), f.clone()]);
    }
    exec_args.push("--".into());
    exec_args.extend(argv.iter().cloned());

    if a.dry_run {
        // a secret's name is set inside too (to its placeholder)
        let secret_names = secrets
            .iter()
            .filter_map(|f| f.split_once('=').map(|(n, _)| n));
        let environment: serde_json::Map<String, serde_json::Value> = env_names
            .iter()
            .map(String::as_str)
            .chain(secret_names)
            .map(|n| (n.to_string(), json!("<redacted>")))
            .collect();
        let mut runner = vec!["capsule".to_string()];
        runner.extend(exec_args.iter().cloned());
        // `runner` starts in `working_dir` (the resolved directory's handle)
        print_json(&json!({
            "backend": backend,
            "profile": prof,
            "binary": resolved.binary,
            "found_on_path": resolved.found,
            "interpreter": resolved.interpreter,
            "reveal": resolved.reveal,
            "argv": argv,
            "working_dir": wd,
            "interactive": a.interactive,
            "raw": a.raw,
            "environment": environment,
            "login": { "own": own_login, "hidden": hide },
            "own_sandbox": {
                "off": !sandbox_off.is_empty(),
                "args": sandbox_off,
                "why": "capsule's sandbox refuses nested user namespaces; capsule is the sandbox",
            },
            "network": {
                "allow_hosts": allow_hosts,
                "note": network_note,
            },
            "runner": runner,
            "launch_policy": d,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(n) = &network_note {
        eprintln!("capsule: note: {n}");
    }

    // the backend runs through the exec pipeline in this process, exactly as
    // `capsule exec` with `exec_args` runs it (the dry run shows that command line)
    for (n, v) in &defaults {
        // SAFETY: single-threaded here; the pipeline reads the environment after this.
        unsafe { std::env::set_var(n, v) };
    }
    if let Some(t) = trace_path(a.gate.trace.as_deref()) {
        // SAFETY: as above.
        unsafe { std::env::set_var(capsule_policy::TRACE_ENV, t) };
    }
    // the exec's own gate (verb capsule.exec) decides under the same configuration
    if let Some(cfg) = d.config_files.first() {
        // SAFETY: as above.
        unsafe { std::env::set_var(capsule_policy::CONFIG_ENV, cfg) };
    }
    // start in the directory the gate resolved, through its open handle (no second lookup)
    if let Some(dir) = d.working_dir_handle() {
        use std::os::fd::AsRawFd;
        // SAFETY: fchdir on a directory descriptor we hold open.
        if unsafe { libc::fchdir(dir.as_raw_fd()) } != 0 {
            return Err(CliError::new(
                exit::SANDBOX_FAILED,
                format!(
                    "cannot enter {}: {}",
                    wd.display(),
                    std::io::Error::last_os_error()
                ),
            ));
        }
    }
    let options = crate::exec::ExecOptions {
        tty: a.interactive,
        agent_login: Some(prof.clone()),
        hide,
        reveal: resolved.reveal.clone(),
        network: if allow_hosts.is_empty() {
            crate::exec::NetworkRequest::Spec
        } else {
            crate::exec::NetworkRequest::Allow(allow_hosts)
        },
        pass_env: env_names,
        secrets,
        ..Default::default()
    };
    let done = crate::exec::Exec::new(target.display().to_string())
        .command(argv.into_iter().map(Into::into).collect())
        .options(options)
        .run()?;
    match done.error {
        None => Ok(ExitCode::from(done.exit_status)),
        Some(e) => Err(CliError::new(done.exit_status, e)),
    }
}

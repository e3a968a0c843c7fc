//! One exec of a command in a capsule's sandbox, from request to record: the library API
//! every front end calls (`capsule exec`, probes, renderings; later others).
//!
//! The pipeline, in the order [`Exec::run`] goes through it:
//!
//! 1. **capsule**: the name or workspace path is resolved in the capsule store;
//! 2. **gate**: the launch-policy gate decides for the sandbox's working directory
//!    ([`gate::exec_gate`]); a denial starts nothing;
//! 3. **policy**: the capsule's stored policy, the hidden paths of now and this exec's
//!    [`ExecOptions`] ([`resolve_policy`]): the one place an exec's policy is decided, for
//!    every executor and every rendering;
//! 4. **plan**: the network of the exec (`crate::net::exec`), the isolation level (never a
//!    silent fallback), limits and cgroups, then the host facts gathered once and the
//!    plan made of them and the resolved policy by one pure function (`crate::plan`),
//!    turned into one executor description (the Linux [`crate::linux::ExecPlan`], the
//!    macOS `crate::macos::MacExec`);
//! 5. **executor**: `crate::linux::run` or `crate::macos::run`, handed that description
//!    and, on Linux, the hooks it calls at fixed points ([`crate::linux::Hooks`]);
//! 6. **record**: the workspace snapshots, the git guard and the exec record appended to
//!    the capsule's `events.jsonl` ([`crate::record::ExecRecord`]), returned in
//!    [`Finished`].
//!
//! Executors never reach back up into this module or the command line.
//!
//! ```no_run
//! use capsule_runtime::exec::{Exec, ExecOptions};
//! let done = Exec::new("myproject")
//!     .command(vec!["cargo".into(), "test".into()])
//!     .options(ExecOptions { tty: true, ..ExecOptions::default() })
//!     .run()?;
//! std::process::exit(done.exit_status.into());
//! # Ok::<(), capsule_runtime::exit::CliError>(())
//! ```

pub mod build;
pub mod gate;
#[cfg(target_os = "linux")]
mod linux;
// compiled in Linux test builds too, so the macOS hookup is type-checked
#[cfg(any(target_os = "macos", test))]
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
mod macos;

use crate::agent::Profile;
use crate::exit::CliError;
use crate::limits::Limits;
use crate::record::ExecRecord;
use capsule_bundle::layout::{bundle_files, Layout};
use capsule_bundle::policy::{HiddenPath, HiddenReason, NetworkMode, SandboxPolicy};
use capsule_bundle::store;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[cfg(target_os = "linux")]
pub use linux::{isolation_for, plan_now, plan_preview, run_probe, weaker_or_refuse};

/// The network an exec asks for, over the capsule's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NetworkRequest {
    /// The capsule's own network mode.
    #[default]
    Spec,
    /// No network at all: TCP refused even on the sandbox's own loopback.
    Off,
    /// The host's network, unrestricted.
    Open,
    /// Only these hosts (`example.com`, `*.example.com`, a literal address; optional
    /// `:PORT`), through the allowlist proxy; added to the capsule's own list when it has
    /// one.
    Allow(Vec<String>),
}

/// What one exec asks for beyond the capsule's stored policy. Paths are given as the
/// caller sees them (relative to its current directory); they are resolved when the exec
/// runs.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    /// Paths the command may write too (each must exist).
    pub allow_write: Vec<PathBuf>,
    /// Paths hidden from the command as well.
    pub hide: Vec<PathBuf>,
    /// Paths shown read-only although they are hidden by default.
    pub reveal: Vec<PathBuf>,
    /// Host environment variables passed through by name.
    pub pass_env: Vec<String>,
    /// Variables set by value over the clean environment (the allowlist proxy's still
    /// win); only their names are recorded.
    pub env: Vec<(OsString, OsString)>,
    /// The workspace (and its `.git`) read-only; `allow_write` paths in it stay writable.
    pub read_only_workspace: bool,
    /// This coding agent's own login and configuration, un-hidden (through the home layer).
    pub agent_login: Option<Profile>,
    /// The network of this exec.
    pub network: NetworkRequest,
    /// Run without any isolation (said on stderr and in the record).
    pub no_sandbox: bool,
    /// A new pseudo-terminal for the command.
    pub tty: bool,
    /// No GPU devices.
    pub no_gpu: bool,
    /// Kill the command (and everything it started) after this long.
    pub timeout: Option<Duration>,
    /// Kill the command when it has written nothing to stdout or stderr for this long.
    pub activity_timeout: Option<Duration>,
    /// Resource limits; those not given come from the operator's settings.
    pub limits: Limits,
    /// Secrets kept outside the sandbox: `NAME=HOST[:PORT][,...]` each (the command sees
    /// a placeholder; the proxy puts the value in for those hosts, which join the
    /// allowlist). See `crate::net::secrets`.
    pub secrets: Vec<String>,
    /// `NAME=PATH`: read that secret's value from PATH instead of the environment.
    pub secret_files: Vec<String>,
    /// Ports published on the host's loopback: `[HOST_PORT:]PORT` each.
    pub publish: Vec<String>,
    /// When refusals are said on stderr ([`crate::refusals::Say`]; they are in the record
    /// whatever this says).
    pub refusals: crate::refusals::Say,
    /// List reads of hidden paths too (every open goes through capsule: slower).
    pub list_reads: bool,
    /// Do not list refused writes: path calls with write intent then never go through
    /// capsule (no round trip each); Landlock and the mounts refuse them as ever, and the
    /// record's `refusals_not_listed` says writes were not listed.
    pub no_list_writes: bool,
}

/// One exec, built up and then [run](Exec::run).
#[derive(Debug, Clone)]
pub struct Exec {
    capsule: String,
    command: Vec<OsString>,
    options: ExecOptions,
}

/// How an exec that got as far as the executor ended.
#[derive(Debug)]
pub struct Finished {
    /// The exec record, as appended to the capsule's `events.jsonl` (`None`: this
    /// executor keeps no record yet).
    pub record: Option<ExecRecord>,
    /// The exit status to report: the command's own, 128+N for signal N, 124 on a
    /// timeout, 125/126/127 when the sandbox or the command could not start.
    pub exit_status: u8,
    /// Why the command did not run to its end when the executor says so (with
    /// `exit_status` 125, 126 or 127).
    pub error: Option<String>,
}

impl Exec {
    /// An exec in `capsule` (a name as `capsule list` shows it, or a workspace path).
    pub fn new(capsule: impl Into<String>) -> Self {
        Exec {
            capsule: capsule.into(),
            command: Vec::new(),
            options: ExecOptions::default(),
        }
    }

    /// The command and its arguments.
    pub fn command(mut self, argv: Vec<OsString>) -> Self {
        self.command = argv;
        self
    }

    /// What the exec asks for beyond the capsule's policy.
    pub fn options(mut self, options: ExecOptions) -> Self {
        self.options = options;
        self
    }

    /// Run it: gate, policy, plan, executor, record (see the module docs). Must be called
    /// while the process is single-threaded (the Linux executor clones). `Err` when
    /// nothing ran (a denial, a bad option, a sandbox that cannot be set up), with the
    /// exit status to report.
    pub fn run(self) -> Result<Finished, CliError> {
        imp::run(self)
    }
}

#[cfg(target_os = "linux")]
mod imp {
    pub use super::linux::run;
}

#[cfg(target_os = "macos")]
mod imp {
    pub use super::macos::run;
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
mod imp {
    use super::*;
    pub fn run(_: Exec) -> Result<Finished, CliError> {
        Err(CliError::failure(
            "capsule exec runs on Linux only in this build",
        ))
    }
}

fn fail(msg: impl Into<String>) -> CliError {
    CliError::failure(msg)
}

/// Canonical form of a user-given path (relative to the current directory).
fn canonical(flag: &str, p: &Path) -> Result<PathBuf, CliError> {
    canonicalize(p).map_err(|e| fail(format!("{flag} {}: {e}", p.display())))
}

/// `std::fs::canonicalize`, in fewer system calls on Linux (many `--hide` flags).
fn canonicalize(p: &Path) -> std::io::Result<PathBuf> {
    #[cfg(target_os = "linux")]
    return crate::kernel::sys::canonicalize(p);
    #[cfg(not(target_os = "linux"))]
    return std::fs::canonicalize(p);
}

/// Make the workspace read-only in `p`, its `.git` too (bound writable onto itself
/// otherwise); writable paths inside it stay writable (deeper rules win).
fn read_only_workspace(p: &mut SandboxPolicy) {
    let ws = p.workspace.clone();
    let git = ws.join(".git");
    for r in [ws, git] {
        if !p.read_only.contains(&r) {
            p.read_only.push(r);
        }
    }
}

/// Set `extra` over `env` (replacing a variable of the same name), keeping it sorted.
pub(crate) fn set_env(env: &mut Vec<(OsString, OsString)>, extra: &[(OsString, OsString)]) {
    if extra.is_empty() {
        return;
    }
    for (k, v) in extra {
        env.retain(|(x, _)| x != k);
        env.push((k.clone(), v.clone()));
    }
    env.sort();
}

/// Apply this exec's flags to the capsule's policy. Returns the policy and the notes on
/// what was requested.
fn effective_policy(
    a: &ExecOptions,
    base: &SandboxPolicy,
    layout: &Layout,
    bundle_dir: &Path,
) -> Result<SandboxPolicy, CliError> {
    let mut p = base.clone();
    if let Some(b) = &a.agent_login {
        crate::agent::unhide_login(&mut p, b);
    }
    let root = canonicalize(&layout.root).unwrap_or_else(|_| layout.root.clone());
    let own: Vec<PathBuf> = [bundle_files::TMP, bundle_files::HOME, bundle_files::CACHE]
        .iter()
        .map(|d| bundle_dir.join(d))
        .collect();
    for w in &a.allow_write {
        let c = canonical("--allow-write", w)?;
        // the capsule's own tmp, home layer and caches, and its workspace (its manifest
        // and sentinel stay read-only: deeper read-only rules win)
        let in_own = own.iter().any(|o| c.starts_with(o)) || c.starts_with(&p.workspace);
        if !in_own && (c.starts_with(&root) || root.starts_with(&c)) {
            return Err(fail(format!(
                "--allow-write {}: overlaps capsule's own state ({}); the command could rewrite its records",
                c.display(),
                root.display()
            )));
        }
        p.writable.push(c);
    }
    #[cfg(target_os = "linux")]
    let hidden = crate::kernel::sys::canonicalize_many(&a.hide);
    #[cfg(not(target_os = "linux"))]
    let hidden: Vec<std::io::Result<PathBuf>> = a.hide.iter().map(|h| canonicalize(h)).collect();
    for (h, c) in a.hide.iter().zip(hidden) {
        let path = match c {
            Ok(c) => c,
            Err(_) if h.is_absolute() => h.clone(),
            Err(e) => return Err(fail(format!("--hide {}: {e}", h.display()))),
        };
        p.hidden.push(HiddenPath {
            path,
            reason: HiddenReason::Requested,
        });
    }
    if a.read_only_workspace {
        read_only_workspace(&mut p);
    }
    for r in &a.reveal {
        let c = canonical("--reveal", r)?;
        if c.starts_with(&root) && !c.starts_with(&p.workspace) {
            return Err(fail(format!(
                "--reveal {}: capsule's own state stays hidden",
                c.display()
            )));
        }
        p.revealed.push(c);
    }
    for n in &a.pass_env {
        if n.is_empty() || n.contains('=') {
            return Err(fail(format!("--pass-env {n:?}: not a variable name")));
        }
        p.pass_env.push(n.clone());
    }
    match &a.network {
        NetworkRequest::Spec => {}
        NetworkRequest::Off => p.network.mode = NetworkMode::Off,
        NetworkRequest::Open => p.network.mode = NetworkMode::Open,
        NetworkRequest::Allow(hosts) if hosts.is_empty() => {}
        NetworkRequest::Allow(hosts) => {
            if p.network.mode != NetworkMode::Allowlist {
                p.network.allow.clear();
            }
            p.network.mode = NetworkMode::Allowlist;
            p.network.allow.extend(hosts.iter().cloned());
        }
    }
    crate::net::secrets::add_to_policy(&mut p.network, &a.secrets)
        .map_err(|e| fail(e.to_string()))?;
    p.network.publish.extend(a.publish.iter().cloned());
    Ok(p)
}

/// `cap`'s policy with the default hidden paths resolved again now: `open` lists only
/// the credential, personal, agent-login and sibling-project paths that existed then,
/// and one made since (a first `~/.ssh` key, `aws configure`, a project cloned next to
/// the source) must be hidden all the same. The base of every exec's policy and of every
/// rendering of it (the Linux plan, `config.json`, the Seatbelt profile).
pub fn with_current_hidden(cap: &store::OpenCapsule, layout: &Layout) -> SandboxPolicy {
    use capsule_bundle::policy::{default_hidden, HiddenInputs};
    let mut p = cap.policy.clone();
    let root = canonicalize(&layout.root).unwrap_or_else(|_| layout.root.clone());
    let now = default_hidden(&HiddenInputs {
        home: p.home.as_deref(),
        source_dir: cap.record.source.as_deref(),
        capsule_root: Some(&root),
    });
    for h in now {
        if !p.hidden.iter().any(|x| x.path == h.path) {
            p.hidden.push(h);
        }
    }
    p
}

/// The policy of one exec of `cap`: its stored policy with the hidden paths of now
/// ([`with_current_hidden`]) and this exec's flags applied. The one place an exec's
/// policy is decided, for both executors: the Linux plan and the Seatbelt profile are
/// made from what it returns.
pub fn resolve_policy(
    a: &ExecOptions,
    cap: &store::OpenCapsule,
    layout: &Layout,
) -> Result<SandboxPolicy, CliError> {
    effective_policy(
        a,
        &with_current_hidden(cap, layout),
        layout,
        &cap.bundle_dir,
    )
}

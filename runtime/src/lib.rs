//! `capsule-runtime` executes capsules: it runs a command in a capsule's sandbox, keeps
//! the exec record, and serves the `capsule` command line. Its dependencies point one
//! way, in three layers:
//!
//! ```text
//! cli          the `capsule` command line (src/main.rs): parses arguments, calls the
//!   │          library, prints, turns results into exit statuses
//!   ▼
//! library      exec      one exec, request to record: gate → policy → plan → executor → record;
//!   │                    also probes, plan renderings and the build sandbox of a spec's steps
//!   │          plan      the exec plan, one pure function of the resolved policy and the
//!   │                    host's facts (gathered each by the module that owns it)
//!   │          net       the network of an exec (allowlist proxy, relay, refusal log)
//!   │          home      the task's home layer, caches, reveals, devices; their review
//!   │          record    exec records and workspace snapshots
//!   │          agent     coding-agent backends (their logins, hosts, environment)
//!   │          isolation what this machine gives, and the operator's acceptance of less
//!   │          settings  the operator's tool settings
//!   ▼
//! executors    linux     namespaces, mounts, Landlock, seccomp, init; prepared roots
//!              macos     Seatbelt through `sandbox-exec`
//!
//! shared by all: exit (statuses and the error type), limits (resource limits), refusals
//!                (what the sandbox refused: the model, its list per exec, the log)
//! ```
//!
//! A layer uses only the layers below it (the architecture tests in the crate check the
//! sources): the executors get everything they need in the description they are handed
//! (the Linux [`linux::ExecPlan`] and [`linux::Hooks`], the macOS `macos::MacExec`) and
//! never call back up.
//!
//! The public API for front ends is [`exec`]:
//!
//! - [`exec::Exec`]`::new(capsule).command(argv).options(`[`exec::ExecOptions`]`).run()`
//!   runs one command and returns [`exec::Finished`] (the [`record::ExecRecord`] and the
//!   exit status), or the [`exit::CliError`] that says why nothing ran;
//! - [`exec::resolve_policy`] and [`exec::with_current_hidden`]: the policy an exec runs
//!   under, for renderings (`capsule seatbelt`, `inspect`);
//! - on Linux, [`exec::run_probe`] (a spec's probe in the sandbox), [`exec::plan_now`]
//!   and [`exec::plan_preview`] (the plan an exec would run, for `export` and for
//!   `inspect`, the latter without creating anything).

pub mod agent;
pub mod cli;
pub mod exec;
pub mod exit;
pub mod home;
pub mod isolation;
#[cfg(target_os = "linux")]
pub mod kernel;
pub mod limits;
#[cfg(target_os = "linux")]
pub mod linux;
// compiled in Linux test builds too, so its control flow is type-checked and tested
#[cfg(any(target_os = "macos", test))]
pub mod macos;
pub mod net;
#[cfg(target_os = "linux")]
pub mod ociruntime;
#[cfg(target_os = "linux")]
pub mod plan;
/// Elsewhere only the macOS plan ([`plan::seatbelt`]).
#[cfg(not(target_os = "linux"))]
pub mod plan {
    pub mod seatbelt;
}
pub mod record;
pub mod refusals;
pub mod settings;

#[cfg(test)]
mod architecture_tests;

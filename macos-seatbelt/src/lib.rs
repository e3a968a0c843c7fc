//! `capsule-seatbelt` owns macOS Seatbelt profiles: a typed SBPL model rendered from the
//! capsule's sandbox policy, plus a parser, linter and evaluator so all of it is tested on
//! Linux. The macOS executor (`capsule-runtime`, `macos.rs`) only runs what this crate
//! makes.
//!
//! - [`sbpl`]: the model (operations, filters, modifiers, rules) and rendering;
//! - [`canon`]: canonical macOS paths, with an injectable resolver;
//! - [`profile`]: the generator ([`generate`]) from a policy and [`ProfileInputs`];
//! - [`parse`]: reading SBPL text back into the model;
//! - [`lint`]: what a profile must never contain;
//! - [`eval`]: `decide(operation, target)` with SBPL's precedence;
//! - [`env`]: the task's environment (TMPDIR, HOME layer, caches);
//! - [`refusal`]: refusals from `log stream`, found by the profile's nonce.
//!
//! Everything here is checked on Linux only; whether macOS's `sandbox-exec` accepts the
//! text and enforces it as the evaluator predicts has not been run on a Mac.

pub mod canon;
pub mod env;
pub mod eval;
pub mod lint;
pub mod parse;
pub mod profile;
pub mod refusal;
pub mod sbpl;

pub use canon::{HostResolver, ModelResolver, Resolver};
pub use eval::{Decision, Evaluator, Target};
pub use profile::{effective_policy, generate, render, GenError, Generated, Nonce, ProfileInputs};

/// Generate, then check the result: the text parses back to the same model, the linter
/// finds nothing. Use this, not [`generate`], for anything that runs or is shown.
pub fn generate_checked(
    inp: &ProfileInputs<'_>,
    r: &dyn Resolver,
) -> Result<Generated, CheckError> {
    checked(generate(inp, r)?)
}

/// [`profile::render`] (a policy already decided, e.g. by the runtime's macOS plan),
/// then the same checks as [`generate_checked`].
pub fn render_checked(
    inp: &ProfileInputs<'_>,
    eff: capsule_bundle::policy::SandboxPolicy,
    task_tmp: std::path::PathBuf,
) -> Result<Generated, CheckError> {
    checked(profile::render(inp, eff, task_tmp)?)
}

/// The text parses back to the same model and the linter finds nothing.
fn checked(g: Generated) -> Result<Generated, CheckError> {
    let back = parse::parse(&g.text)?;
    if back != g.profile {
        return Err(CheckError::RoundTrip);
    }
    let findings = lint::lint(&g.profile, &g.params);
    if let Some(f) = findings.first() {
        return Err(CheckError::Lint(f.to_string(), findings.len()));
    }
    Ok(g)
}

/// A generated profile that failed its own checks (a bug in this crate, never the user's).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Gen(#[from] GenError),
    #[error("generated profile does not parse: {0}")]
    Parse(#[from] parse::ParseError),
    #[error("generated profile does not read back as generated")]
    RoundTrip,
    #[error("generated profile fails the linter: {0} ({1} finding(s))")]
    Lint(String, usize),
}

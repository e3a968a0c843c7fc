//! `capsule-policy` owns the launch-policy gate: Kitsoki's `agent_launch_policy` block in
//! `.kitsoki.yaml` / `.kitsoki.local.yaml`, the five checks, and the decision records.
//!
//! The gate answers one question before anything starts: may this agent start in this
//! working directory? It is fail-fast placement control, not a sandbox.
//!
//! ```no_run
//! use capsule_policy::{Gate, append_trace, trace_path};
//! use std::path::Path;
//!
//! let cwd = std::env::current_dir()?;
//! let gate = Gate::load(&cwd, None)?; // walks up from cwd for .kitsoki.yaml
//! let decision = gate.decide("capsule.exec", None, Path::new("/tmp/kitsoki-capsules/x"));
//! if let Some(trace) = trace_path(None) {
//!     append_trace(&trace, &decision)?; // one `agent.launch.policy` JSON line
//! }
//! if !decision.allowed {
//!     eprintln!("denied: {}", decision.reason); // exit with capsule's DENIED status
//! }
//! // launch in decision.resolved_working_dir (the path the checks ran on)
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Modules: [`config`] (finding, parsing, merging the files), [`decision`] (the checks and the
//! record), [`git`] (gix facts), [`capsule`] (capsule identification), [`branch`] (branch
//! patterns), [`paths`] (resolution and "inside"), [`trace`] (the trace sink).

pub mod branch;
pub mod capsule;
pub mod config;
pub mod decision;
pub mod git;
pub mod paths;
pub mod trace;

pub use capsule::CapsuleInfo;
pub use config::{ConfigError, Delegation, EffectivePolicy, LoadedConfig};
pub use decision::{Check, Decision, GateState};
pub use git::{GitInfo, HeadState};
pub use trace::{append_trace, trace_path, TRACE_ENV};

use std::path::{Path, PathBuf};

/// Environment variable naming the configuration file when no `--config` is given.
pub const CONFIG_ENV: &str = "CAPSULE_POLICY_CONFIG";

/// The loaded gate: configuration found for one asking process. Load it once per command and
/// call [`Gate::decide`] for each launch.
#[derive(Debug, Clone)]
pub struct Gate {
    /// Where the configuration came from and what it says.
    pub config: LoadedConfig,
    /// The directory discovery started from.
    pub searched_from: PathBuf,
}

impl Gate {
    /// Load the configuration for a process whose current directory is `cwd`: walk up from
    /// `cwd` to the first directory holding `.kitsoki.yaml` or `.kitsoki.local.yaml`, or use
    /// `config` (`--config FILE`, relative to `cwd`). `~` expands with `$HOME`.
    ///
    /// Errors (unreadable file, malformed YAML, unknown key inside `agent_launch_policy`,
    /// bad path entry) display as one line `FILE:LINE:COLUMN: cause`.
    ///
    /// Without `config`, the environment variable `CAPSULE_POLICY_CONFIG` (when set and not
    /// empty) names the file instead, exactly like `--config`; `capsule agent launch` sets it
    /// for the `capsule exec` it starts so both decide under the same configuration.
    pub fn load(cwd: &Path, config: Option<&Path>) -> Result<Gate, ConfigError> {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        let from_env = std::env::var_os(CONFIG_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let config = config.map(Path::to_path_buf).or(from_env);
        Self::load_with_home(cwd, config.as_deref(), home.as_deref())
    }

    /// [`Gate::load`] with an explicit home directory for `~` (tests, embedding).
    pub fn load_with_home(
        cwd: &Path,
        config: Option<&Path>,
        home: Option<&Path>,
    ) -> Result<Gate, ConfigError> {
        Ok(Gate {
            config: config::load(cwd, config, home)?,
            searched_from: cwd.to_path_buf(),
        })
    }

    /// Whether the five checks apply.
    pub fn state(&self) -> GateState {
        match &self.config.policy {
            Some(p) if p.enabled => GateState::Enabled,
            Some(_) => GateState::Disabled,
            None => GateState::Off,
        }
    }

    /// Decide whether `agent` may start `verb` (`agent.launch`, `capsule.exec`, …) in
    /// `working_dir` (relative paths are taken from the process's current directory). The
    /// directory is resolved once; launch in [`Decision::resolved_working_dir`].
    pub fn decide(&self, verb: &str, agent: Option<&str>, working_dir: &Path) -> Decision {
        self.decide_with(verb, agent, working_dir, true)
    }

    /// [`Gate::decide`] for a caller that keeps the decision to itself (no trace, no
    /// report): when the gate is off or disabled the launch is allowed whatever the facts,
    /// so the working directory, capsule and git facts, which only a record would show, are
    /// not gathered (the decision carries none of them). With the gate enabled this is
    /// exactly [`Gate::decide`].
    pub fn decide_unrecorded(
        &self,
        verb: &str,
        agent: Option<&str>,
        working_dir: &Path,
    ) -> Decision {
        self.decide_with(verb, agent, working_dir, false)
    }

    fn decide_with(
        &self,
        verb: &str,
        agent: Option<&str>,
        working_dir: &Path,
        facts: bool,
    ) -> Decision {
        let off_reason = match self.state() {
            GateState::Enabled => String::new(),
            GateState::Disabled => format!(
                "the launch-policy gate is disabled (enabled: false in {})",
                join(&self.config.files)
            ),
            GateState::Off if self.config.files.is_empty() => format!(
                "no .kitsoki.yaml or .kitsoki.local.yaml at or above {}: the launch-policy gate is off",
                self.searched_from.display()
            ),
            GateState::Off => format!(
                "no agent_launch_policy block in {}: the launch-policy gate is off",
                join(&self.config.files)
            ),
        };
        decision::decide(decision::Request {
            verb,
            agent,
            working_dir,
            gate: self.state(),
            policy: self.config.policy.as_ref(),
            config_files: &self.config.files,
            ignored: &self.config.ignored,
            off_reason: &off_reason,
            facts,
        })
    }
}

fn join(v: &[PathBuf]) -> String {
    v.iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" and ")
}

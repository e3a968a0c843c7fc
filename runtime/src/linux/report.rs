//! What an exec reports: why it could not run ([`ExecError`]), how the command ended
//! ([`Termination`]), the layers that were applied ([`Applied`], for the exec record),
//! and the messages init and the command's setup send on the report pipe (`Report`).

use serde::{Deserialize, Serialize};

/// Why a command could not be run (the sandbox was not set up, or `execve` failed).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("sandbox setup failed: {0}; nothing ran")]
    Setup(String),
    /// The kernel refused to create the namespaces (e.g. unprivileged user namespaces off).
    #[error("cannot create the sandbox's namespaces: {0}; nothing ran")]
    Namespaces(String),
    #[error("{command}: command not found in the sandbox")]
    NotFound { command: String },
    #[error("{command}: cannot execute: {error}")]
    NotExecutable { command: String, error: String },
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Termination {
    Exited(i32),
    Signaled(i32),
    TimedOut,
    /// Killed by `--activity-timeout`: no output for that long.
    ActivityTimeout,
    /// Killed by the disk guard: free space on a filesystem the task can write fell below
    /// the reserve ([`super::diskguard`]).
    DiskReserve,
}

impl Termination {
    /// The exit status `capsule exec` reports: the command's own, 128+N for signal N,
    /// 124 for a timeout.
    pub fn exit_status(self) -> u8 {
        match self {
            Termination::Exited(c) => (c & 0xff) as u8,
            Termination::Signaled(n) => (128 + n).clamp(0, 255) as u8,
            Termination::TimedOut | Termination::ActivityTimeout => crate::exit::TIMEOUT,
            // killed, as by the kernel's memory limit
            Termination::DiskReserve => 128 + libc::SIGKILL as u8,
        }
    }
}

/// What was applied, per layer, for the exec record.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Applied {
    pub isolation: String,
    pub namespaces: Vec<String>,
    pub landlock: serde_json::Value,
    pub seccomp: serde_json::Value,
    pub capabilities: String,
    pub no_new_privs: bool,
    /// How the root came to be: `prepared` (joined, `linux::prepared`), `built` (for this exec
    /// alone), `host` (no mount namespace).
    #[serde(default)]
    pub root: String,
    /// The digest of the plan that ran (`ExecPlan::digest`), as `capsule inspect`
    /// shows it for an exec with no flags.
    #[serde(default)]
    pub plan_digest: String,
}

/// Messages on the report pipe, one JSON line each.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub(crate) enum Report {
    SetupFailed {
        step: String,
    },
    Layers {
        applied: Applied,
    },
    ExecFailed {
        errno: i32,
        command: String,
    },
    Signaled {
        signal: i32,
    },
    /// Init's last word: the command ended with `code` (init's exit status to come) and
    /// every other process of the sandbox is dead and reaped. Init then exits; the
    /// teardown of its namespaces need not be waited for.
    Ended {
        code: i32,
    },
}

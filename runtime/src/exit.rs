//! Exit statuses of the `capsule` binary, and the error type every subcommand returns.
//!
//! | status | meaning |
//! |---|---|
//! | 0 | success (for `exec`: the command exited 0) |
//! | 1 | failure: bad input, a failed verify, a refused operation |
//! | 2 | usage error (bad flags) |
//! | 3 | denied by the launch-policy gate |
//! | 122 | `exec`: the command ran, but its exec record could not be written (a full disk) |
//! | 124 | `exec --timeout` or `--activity-timeout` expired; the command was killed |
//! | 125 | the sandbox could not be set up; nothing ran |
//! | 126 | the command was found but could not be executed |
//! | 127 | the command was not found |
//! | 128+N | the command was killed by signal N |
//!
//! Otherwise `exec` exits with the command's own status.

use std::fmt;
use std::process::ExitCode;

pub const FAILURE: u8 = 1;
pub const USAGE: u8 = 2;
pub const DENIED: u8 = 3;
/// `exec`: the command ran but its record was lost (stderr says how it ended).
pub const RECORD_LOST: u8 = 122;
pub const TIMEOUT: u8 = 124;
pub const SANDBOX_FAILED: u8 = 125;
pub const NOT_EXECUTABLE: u8 = 126;
pub const NOT_FOUND: u8 = 127;

/// An error that ends a subcommand: a one-line message and an exit status.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
    /// Bad input or a failed operation (status 1).
    pub fn failure(message: impl Into<String>) -> Self {
        Self::new(FAILURE, message)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// Result of a subcommand: the exit status on success.
pub type CliResult = Result<ExitCode, CliError>;

/// Print a one-line error on stderr and turn it into the process exit code.
pub fn report(err: &CliError) -> ExitCode {
    // one line: collapse any newline a lower layer let through; nothing a task or a spec
    // wrote and an error quotes reaches the terminal raw
    let msg = capsule_bundle::escape::text_line(&err.message.replace('\n', " "));
    eprintln!("capsule: {msg}");
    ExitCode::from(err.code)
}

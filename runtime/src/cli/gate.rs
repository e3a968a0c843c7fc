//! `capsule policy check` and `capsule agent launch`. (Issue 3: to be implemented.)
use crate::exit::{CliError, CliResult};
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Decide whether an agent may start in a directory.
    Check,
}
#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Launch an agent backend.
    Launch,
}

pub fn policy(_: PolicyCommand) -> CliResult {
    Err(CliError::failure("not implemented yet"))
}
pub fn agent(_: AgentCommand) -> CliResult {
    Err(CliError::failure("not implemented yet"))
}

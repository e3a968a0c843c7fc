//! `capsule home` and `capsule reveal`. (Issue 5: to be implemented.)
use crate::exit::{CliError, CliResult};
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum HomeCommand {
    /// What the task changed in the home directory.
    Diff,
}
#[derive(Debug, Subcommand)]
pub enum RevealCommand {
    /// Folders the source's manifests name.
    List,
}

pub fn home(_: HomeCommand) -> CliResult {
    Err(CliError::failure("not implemented yet"))
}
pub fn reveal(_: RevealCommand) -> CliResult {
    Err(CliError::failure("not implemented yet"))
}

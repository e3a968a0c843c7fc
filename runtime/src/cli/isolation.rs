//! `capsule isolation`. (Issue 4: to be implemented.)
use crate::exit::{CliError, CliResult};
use clap::Args;

#[derive(Debug, Args)]
pub struct IsolationArgs {}
pub fn isolation(_: IsolationArgs) -> CliResult {
    Err(CliError::failure("not implemented yet"))
}

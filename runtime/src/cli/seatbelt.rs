//! `capsule seatbelt`. (Issue 7: to be implemented.)
use crate::exit::{CliError, CliResult};
use clap::Args;

#[derive(Debug, Args)]
pub struct SeatbeltArgs {}
pub fn seatbelt(_: SeatbeltArgs) -> CliResult {
    Err(CliError::failure("not implemented yet"))
}

//! `capsule open / verify / close / list / inspect / demo`. (Issue 2: to be implemented.)
use crate::exit::{CliError, CliResult};
use clap::Args;

#[derive(Debug, Args)]
pub struct OpenArgs {}
#[derive(Debug, Args)]
pub struct VerifyArgs {}
#[derive(Debug, Args)]
pub struct CloseArgs {}
#[derive(Debug, Args)]
pub struct ListArgs {}
#[derive(Debug, Args)]
pub struct InspectArgs {}
#[derive(Debug, Args)]
pub struct DemoArgs {}

fn todo() -> CliResult {
    Err(CliError::failure("not implemented yet"))
}
pub fn open(_: OpenArgs) -> CliResult {
    todo()
}
pub fn verify(_: VerifyArgs) -> CliResult {
    todo()
}
pub fn close(_: CloseArgs) -> CliResult {
    todo()
}
pub fn list(_: ListArgs) -> CliResult {
    todo()
}
pub fn inspect(_: InspectArgs) -> CliResult {
    todo()
}
pub fn demo(_: DemoArgs) -> CliResult {
    todo()
}

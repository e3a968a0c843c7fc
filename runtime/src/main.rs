//! The `capsule` command line. See `capsule --help` and README.md.
use std::process::ExitCode;

fn main() -> ExitCode {
    capsule_runtime::cli::main()
}

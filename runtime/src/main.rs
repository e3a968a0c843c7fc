//! The `capsule` command line. See `capsule --help` and README.md.
use std::process::ExitCode;

fn main() -> ExitCode {
    // `capsule-runc` (a symlink to capsule): the OCI runtime command line
    #[cfg(target_os = "linux")]
    if std::env::args_os()
        .next()
        .is_some_and(|a| capsule_runtime::ociruntime::is_runc(&a))
    {
        return capsule_runtime::ociruntime::main();
    }
    capsule_runtime::cli::main()
}

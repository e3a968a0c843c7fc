//! `capsule completions SHELL` and `capsule man DIR`: the shell completion scripts and the
//! manual pages, generated from the command line's own clap definitions (clap_complete,
//! clap_mangen), so they can never disagree with `--help`.
//!
//! Both are made only when asked: nothing of this runs on any other command's path (a
//! plain `capsule exec` is parsed by a parser that knows only `exec`, see
//! [`super::parse`]). `man` is a hidden subcommand rather than a build step: a build
//! script cannot see the command line's definitions without compiling the runtime twice,
//! would run on every build, and leaves its output in cargo's `OUT_DIR`, where no install
//! step finds it; the binary itself always has the definitions it was built with, so
//! `hack/build-release.sh --install` asks the freshly built binary for its pages. Hidden
//! subcommands (internal entries, diagnostics, `man` itself) get neither a page nor a
//! completion.

use super::Cli;
use crate::exit::{CliError, CliResult};
use clap::{Args, CommandFactory};
use clap_complete::Shell;
use std::path::PathBuf;

#[derive(Debug, Args)]
#[command(after_help = "Install (user, per shell):
  capsule completions bash > ~/.local/share/bash-completion/completions/capsule
  capsule completions zsh  > ~/.local/share/zsh/site-functions/_capsule   # that folder in fpath before compinit
  capsule completions fish > ~/.config/fish/completions/capsule.fish
`hack/build-release.sh --install` installs all three, and the man pages.")]
pub struct CompletionsArgs {
    /// The shell to print a completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Folder to write the pages into (made if missing): capsule.1 and one
    /// capsule-<command>.1 per subcommand.
    pub dir: PathBuf,
}

/// The command line as users see it: without hidden subcommands, which the generators
/// would otherwise complete and document (clap_complete lists every subcommand).
fn visible() -> clap::Command {
    let full = Cli::command();
    let subs = full.get_subcommands().filter(|s| !s.is_hide_set()).cloned();
    let mut cmd = clap::Command::new("capsule")
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .subcommand_required(true)
        .subcommands(subs);
    if let Some(about) = full.get_about() {
        cmd = cmd.about(about.clone());
    }
    if let Some(long) = full.get_long_about() {
        cmd = cmd.long_about(long.clone());
    }
    cmd
}

pub fn completions(a: CompletionsArgs) -> CliResult {
    let mut cmd = visible();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "capsule", &mut out);
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(&out)
        .and_then(|()| stdout.flush())
        .map_err(|e| CliError::failure(format!("completions: writing to stdout: {e}")))?;
    Ok(std::process::ExitCode::SUCCESS)
}

pub fn man(a: ManArgs) -> CliResult {
    let dir = &a.dir;
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::failure(format!("man: making {}: {e}", dir.display())))?;
    clap_mangen::generate_to(visible(), dir).map_err(|e| {
        CliError::failure(format!("man: writing pages into {}: {e}", dir.display()))
    })?;
    println!("{}", dir.display());
    Ok(std::process::ExitCode::SUCCESS)
}

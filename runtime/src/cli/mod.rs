//! The `capsule` command line: the top-level parser and the dispatch to one module per
//! command group. Each module owns its arguments and its `run`.

use crate::exit::{self, CliResult};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub mod capsules;
pub mod exec;
mod exec_args;
mod exec_env;
pub mod export;
pub mod gate;
pub mod home;
pub mod isolation;
pub mod manuals;
pub mod materialize;
pub mod progress;
pub mod proxy;
pub mod refusals;
pub mod seatbelt;

/// capsule: a sandbox runtime for coding agents and CI.
///
/// Opens disposable workspaces ("capsules") from Kitsoki-compatible `capsule.yaml` specs or
/// from a local checkout, decides whether an agent may start in a directory (the launch-policy
/// gate), and runs every command of a task inside the operating system's sandbox.
///
/// Exit statuses: 0 success; 1 failure; 2 usage; 3 denied by the launch policy; 124 timeout;
/// 125 sandbox could not be set up (nothing ran); 126 not executable; 127 not found;
/// 128+N killed by signal N; otherwise the command's own status.
#[derive(Debug, Parser)]
#[command(name = "capsule", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// parsed once per process: the size of the exec variant costs nothing worth a box
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Open a capsule from a spec or a local checkout.
    Open(capsules::OpenArgs),
    /// Check a capsule's tree digest and run its probes.
    Verify(capsules::VerifyArgs),
    /// Close a capsule: remove its workspace and bundle.
    Close(capsules::CloseArgs),
    /// List open capsules.
    List(capsules::ListArgs),
    /// Show a capsule's spec, manifest, effective policy and config.json.
    Inspect(capsules::InspectArgs),
    /// Open an example capsule, run a few commands in it, and close it.
    Demo(capsules::DemoArgs),
    /// Run a command inside a capsule's sandbox.
    Exec(exec::ExecArgs),
    /// Write an OCI bundle of a capsule that runc or crun runs.
    Export(export::ExportArgs),
    /// Show what isolation this machine gives, and accept weaker isolation knowingly.
    Isolation(isolation::IsolationArgs),
    /// The launch-policy gate.
    #[command(subcommand)]
    Policy(gate::PolicyCommand),
    /// Launch a coding agent (codex, claude) in a capsule.
    #[command(subcommand)]
    Agent(gate::AgentCommand),
    /// Review the capsule's home layer.
    #[command(subcommand)]
    Home(home::HomeCommand),
    /// Projects next to the source that a workspace builds from.
    #[command(subcommand)]
    Reveal(home::RevealCommand),
    /// List what the sandbox refused a capsule's commands, and the grant for each.
    Refusals(refusals::RefusalsArgs),
    /// Print the macOS Seatbelt profile for a capsule.
    Seatbelt(seatbelt::SeatbeltArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(manuals::CompletionsArgs),
    /// Write the manual pages (capsule.1 and one per subcommand) into a folder.
    #[command(hide = true)]
    Man(manuals::ManArgs),
    /// Run the network allowlist proxy on its own (diagnostics, benchmarks).
    #[command(hide = true)]
    Proxy(proxy::ProxyArgs),
    /// Internal: apply a spec's steps inside the build sandbox (see `crate::exec::build`).
    #[command(name = "__materialize", hide = true)]
    Materialize(materialize::MaterializeArgs),
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    init_tracing();
    let cli = match parse(std::env::args_os().collect()) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // Output piped into `head` should end us quietly like any Unix tool, not panic. Only
    // `exec` and `agent` keep SIGPIPE ignored: they supervise a sandbox (and the proxy's
    // sockets) and must survive to write the exec record; the executor resets every signal
    // disposition in the sandboxed child.
    if !matches!(cli.command, Command::Exec(_) | Command::Agent(_)) {
        // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let exec = matches!(cli.command, Command::Exec(_));
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => exit::report(&e),
    };
    #[cfg(target_os = "linux")]
    if exec {
        // whoever waits for the exec learns of its end before the address space is gone
        crate::kernel::ns::exit_lightly();
    }
    code
}

/// The command line, parsed. `capsule exec …` runs once per sandboxed command, so its
/// start-up counts: it is parsed by a parser that knows only `exec` (building every
/// subcommand's arguments and help costs ~0.3 ms). Whatever that parser does not accept
/// as a plain exec (help, version, any error) goes through the full parser, which prints
/// the same messages as always; what it accepts, the full parser reads the same way.
fn parse(args: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
    if args.get(1).is_some_and(|a| a == "exec") {
        if let Some(exec) = exec_args::plain(&args) {
            return Ok(Cli {
                command: Command::Exec(exec),
            });
        }
        if let Ok(exec) = parse_exec(&args) {
            return Ok(Cli {
                command: Command::Exec(exec),
            });
        }
    }
    Cli::try_parse_from(args)
}

fn parse_exec(args: &[std::ffi::OsString]) -> Result<exec::ExecArgs, clap::Error> {
    use clap::{Args, FromArgMatches};
    let m = clap::Command::new("capsule")
        .subcommand(exec::ExecArgs::augment_args(clap::Command::new("exec")))
        .subcommand_required(true)
        .try_get_matches_from(args)?;
    match m.subcommand() {
        Some(("exec", sub)) => exec::ExecArgs::from_arg_matches(sub),
        _ => Err(clap::Error::new(clap::error::ErrorKind::InvalidSubcommand)),
    }
}

fn run(cli: Cli) -> CliResult {
    match cli.command {
        Command::Open(a) => capsules::open(a),
        Command::Verify(a) => capsules::verify(a),
        Command::Close(a) => capsules::close(a),
        Command::List(a) => capsules::list(a),
        Command::Inspect(a) => capsules::inspect(a),
        Command::Demo(a) => capsules::demo(a),
        Command::Exec(a) => exec::exec(a),
        Command::Export(a) => export::export(a),
        Command::Isolation(a) => isolation::isolation(a),
        Command::Policy(c) => gate::policy(c),
        Command::Agent(c) => gate::agent(c),
        Command::Home(c) => home::home(c),
        Command::Reveal(c) => home::reveal(c),
        Command::Refusals(a) => refusals::refusals(a),
        Command::Seatbelt(a) => seatbelt::seatbelt(a),
        Command::Completions(a) => manuals::completions(a),
        Command::Man(a) => manuals::man(a),
        Command::Proxy(a) => proxy::run(a),
        Command::Materialize(a) => materialize::materialize_entry(a),
    }
}

/// Diagnostics go to stderr through `tracing`, filtered by `RUST_LOG` (default: warnings).
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    match std::env::var_os("RUST_LOG") {
        // without RUST_LOG the filter is "warn" for every target; most runs print no
        // warning, so the printing subscriber is made at the first one (its span registry
        // and layers cost ~0.05 ms of every start)
        None => {
            let _ = tracing::subscriber::set_global_default(OnFirstWarning(Default::default()));
        }
        Some(_) => {
            let _ = fmt_subscriber()
                .with_env_filter(
                    EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| EnvFilter::new("warn")),
                )
                .try_init();
        }
    }
}

fn fmt_subscriber() -> tracing_subscriber::fmt::SubscriberBuilder<
    tracing_subscriber::fmt::format::DefaultFields,
    tracing_subscriber::fmt::format::Format,
    tracing_subscriber::filter::LevelFilter,
    fn() -> std::io::Stderr,
> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr as fn() -> std::io::Stderr)
        .with_target(false)
}

/// Warnings and errors, for every target, printed by the same `fmt` subscriber as with
/// `RUST_LOG=warn`, which is made when the first one is (or a span is) recorded.
struct OnFirstWarning(std::sync::OnceLock<Box<dyn tracing::Subscriber + Send + Sync>>);

impl OnFirstWarning {
    fn inner(&self) -> &(dyn tracing::Subscriber + Send + Sync) {
        self.0
            .get_or_init(|| {
                Box::new(
                    fmt_subscriber()
                        .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
                        .finish(),
                )
            })
            .as_ref()
    }
}

impl tracing::Subscriber for OnFirstWarning {
    fn register_callsite(
        &self,
        meta: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if self.enabled(meta) {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::WARN)
    }
    fn enabled(&self, meta: &tracing::Metadata<'_>) -> bool {
        *meta.level() <= tracing::Level::WARN
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        self.inner().new_span(span)
    }
    fn record(&self, span: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        self.inner().record(span, values)
    }
    fn record_follows_from(&self, span: &tracing::span::Id, follows: &tracing::span::Id) {
        self.inner().record_follows_from(span, follows)
    }
    fn event(&self, event: &tracing::Event<'_>) {
        self.inner().event(event)
    }
    fn enter(&self, span: &tracing::span::Id) {
        self.inner().enter(span)
    }
    fn exit(&self, span: &tracing::span::Id) {
        self.inner().exit(span)
    }
    fn clone_span(&self, id: &tracing::span::Id) -> tracing::span::Id {
        self.inner().clone_span(id)
    }
    fn try_close(&self, id: tracing::span::Id) -> bool {
        self.inner().try_close(id)
    }
}

/// Print `value` as one line of JSON on stdout.
/// A closed pipe (`capsule … --json | head`) is not worth a panic: the output is dropped.
pub fn print_json(value: &serde_json::Value) {
    use std::io::Write;
    let line = serde_json::to_string(value).unwrap_or_else(|_| "null".into());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

#[cfg(test)]
mod tests {
    use super::exec_args::tests::argv;
    use super::*;

    /// Whatever the exec-only parser accepts, the full parser reads the same way; what it
    /// refuses falls through to the full parser.
    #[test]
    fn the_exec_parser_agrees_with_the_full_one() {
        let mut accepted = 0;
        for line in [
            "exec bench -- /bin/true",
            "exec bench /bin/true",
            "exec bench /bin/echo --version -h x",
            "exec bench -- --version",
            "exec --json -t --no-gpu bench -- ls -la",
            "exec bench --allow-write /tmp --hide /a --hide /b --reveal /c -- sh -c x",
            "exec bench --pass-env FOO --pass-env BAR --timeout 5s -- true",
            "exec bench --no-network -- true",
            "exec bench --open-network -- true",
            "exec bench --allow-host example.com:443 --allow-host '*.x' -- true",
            "exec bench --no-sandbox -- true",
            "exec bench --agent-login claude -- true",
            "exec bench --agent-login nobody -- true",
            "exec bench --no-network --open-network -- true",
            "exec bench --no-sandbox --allow-host a -- true",
            "exec bench --timeout soon -- true",
            "exec bench",
            "exec",
            "exec --version",
            "exec -V",
            "exec bench --version",
            "exec --help",
            "exec bench -h",
            "exec bench --bogus -- true",
            "exec help",
            "exec -- bench true",
        ] {
            let args = argv(line);
            let full = Cli::try_parse_from(args.clone());
            match parse_exec(&args) {
                Ok(fast) => {
                    accepted += 1;
                    let full = full.unwrap_or_else(|e| panic!("{line}: full parser refused: {e}"));
                    assert_eq!(
                        format!("{:?}", Command::Exec(fast)),
                        format!("{:?}", full.command),
                        "{line}"
                    );
                }
                Err(_) => {
                    // the full parser decides (and prints) as always
                    assert_eq!(
                        format!("{:?}", parse(args).map(|c| c.command)),
                        format!("{:?}", full.map(|c| c.command)),
                        "{line}"
                    );
                }
            }
        }
        assert!(accepted >= 10, "the fast path is taken for plain execs");
    }

    /// Without RUST_LOG, warnings and errors pass and nothing else; the printing
    /// subscriber is made by the first warning, not before.
    #[test]
    fn the_warnings_subscriber_is_made_at_the_first_warning() {
        let d = tracing::Dispatch::new(OnFirstWarning(Default::default()));
        let made = |d: &tracing::Dispatch| {
            d.downcast_ref::<OnFirstWarning>()
                .is_some_and(|s| s.0.get().is_some())
        };
        tracing::dispatcher::with_default(&d, || {
            tracing::debug!("not shown");
            tracing::info!("not shown");
        });
        assert!(!made(&d));
        let levels = [
            (tracing::Level::TRACE, false),
            (tracing::Level::DEBUG, false),
            (tracing::Level::INFO, false),
            (tracing::Level::WARN, true),
            (tracing::Level::ERROR, true),
        ];
        for (level, shown) in levels {
            let meta = tracing::Metadata::new(
                "e",
                "t",
                level,
                None,
                None,
                None,
                tracing::field::FieldSet::new(&[], tracing::callsite::Identifier(&CALLSITE)),
                tracing::metadata::Kind::EVENT,
            );
            assert_eq!(d.enabled(&meta), shown, "{level}");
        }
        tracing::dispatcher::with_default(&d, || tracing::warn!("a test warning"));
        assert!(made(&d));
    }

    struct Callsite;
    static CALLSITE: Callsite = Callsite;
    impl tracing::callsite::Callsite for Callsite {
        fn set_interest(&self, _: tracing::subscriber::Interest) {}
        fn metadata(&self) -> &tracing::Metadata<'_> {
            unreachable!()
        }
    }
}

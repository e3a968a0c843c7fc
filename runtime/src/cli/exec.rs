//! `capsule exec <capsule> [options] -- CMD [ARGS…]`: its arguments, turned into the
//! library's [`ExecOptions`] for [`Exec::run`] (which owns the gate, the policy, the
//! executor and the record); the exec record printed with `--json`, and the exit status.

use crate::exec::{Exec, ExecOptions, NetworkRequest};
use crate::exit::{CliError, CliResult};
use clap::Args;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Run a command inside a capsule's sandbox.
///
/// The command sees the workspace read-write (its manifest and sentinel read-only), the
/// capsule's own /tmp, and the host's system folders read-only; credentials, personal
/// files, other projects and capsule's own state are hidden; it has its own processes,
/// network (loopback only) and no capabilities.
///
/// Exit status: the command's own; 128+N when killed by signal N (137 by the memory
/// limit); 124 when --timeout or --activity-timeout expired; 125 when the sandbox could
/// not be set up or a limit asked for cannot be enforced here (nothing ran); 126 when the
/// command could not be executed; 127 when it was not found; 3 when the launch policy
/// denied it.
#[derive(Debug, Args)]
#[command(trailing_var_arg = true)]
pub struct ExecArgs {
    /// The capsule: a name (`capsule list`) or a workspace path.
    pub capsule: String,
    /// Let the command write PATH too (repeatable; must exist).
    #[arg(long = "allow-write", value_name = "PATH")]
    pub allow_write: Vec<PathBuf>,
    /// Hide PATH from the command as well (repeatable).
    #[arg(long = "hide", value_name = "PATH")]
    pub hide: Vec<PathBuf>,
    /// Show PATH read-only although it is hidden by default (repeatable).
    #[arg(long = "reveal", value_name = "PATH")]
    pub reveal: Vec<PathBuf>,
    /// Pass the host's environment variable NAME through (repeatable).
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Set NAME=VALUE in the command's environment (repeatable; over the clean
    /// environment; the allowlist proxy's variables still win). The value is visible in
    /// `ps`: pass secrets with --env-file.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Read NAME=VALUE entries, each ended by a NUL byte, from FILE (`/dev/fd/N` for a
    /// pipe) and set them as --env does.
    #[arg(long = "env-file", value_name = "FILE")]
    pub env_file: Option<PathBuf>,
    /// The workspace is read-only for this command, its .git too; --allow-write paths in it
    /// stay writable.
    #[arg(long)]
    pub read_only_workspace: bool,
    /// Also write the exec record (one JSON line) to FILE (`/dev/fd/N` for a pipe).
    #[arg(long = "record-to", value_name = "FILE")]
    pub record_to: Option<PathBuf>,
    /// Un-hide this coding agent's own login and configuration (its profile's login
    /// paths; claude: ~/.claude, ~/.claude.json; codex: ~/.codex): read through the home
    /// layer, writes land in the layer, never in the real home. Other agents' logins stay
    /// hidden.
    #[arg(long = "agent-login", value_name = "AGENT")]
    pub agent_login: Option<String>,
    /// No network at all: TCP refused even on the sandbox's own loopback.
    #[arg(long, conflicts_with = "open_network")]
    pub no_network: bool,
    /// The host's network, unrestricted.
    #[arg(long)]
    pub open_network: bool,
    /// Let the command reach HOST only through capsule's allowlist proxy (`example.com`,
    /// `*.example.com`, a literal address; optional `:PORT`; repeatable; adds to the
    /// capsule's own list). Everything else is refused with 403 and logged.
    #[arg(long = "allow-host", value_name = "HOST[:PORT]", conflicts_with_all = ["no_network", "open_network", "no_sandbox"])]
    pub allow_host: Vec<String>,
    /// Keep the value of the variable NAME outside the sandbox: the command's NAME is a
    /// random placeholder, and capsule's proxy puts the value (from capsule's own
    /// environment, or --secret-file) in place of it in requests to these hosts only
    /// (headers and URL query; HTTPS terminated with the capsule's own CA). The hosts are
    /// added to the allowlist; the placeholder sent anywhere else is refused (403) and
    /// logged (repeatable).
    #[arg(long = "secret", value_name = "NAME=HOST[:PORT][,...]", conflicts_with_all = ["no_network", "open_network", "no_sandbox"])]
    pub secret: Vec<String>,
    /// Read the value of secret NAME from PATH instead of capsule's environment.
    #[arg(long = "secret-file", value_name = "NAME=PATH")]
    pub secret_file: Vec<String>,
    /// Publish the sandbox's 127.0.0.1:PORT on this computer's 127.0.0.1:HOST_PORT and
    /// [::1]:HOST_PORT (never another address) while the command runs (default HOST_PORT:
    /// PORT; 0: any free port; repeatable).
    #[arg(long = "publish", value_name = "[HOST_PORT:]PORT", conflicts_with_all = ["no_network", "open_network", "no_sandbox"])]
    pub publish: Vec<String>,
    /// Run WITHOUT ANY ISOLATION (said loudly on stderr and in the record).
    #[arg(long, conflicts_with_all = ["no_network", "open_network"])]
    pub no_sandbox: bool,
    /// Give the command a new pseudo-terminal of its own (for interactive programs).
    #[arg(short = 't', long = "tty")]
    pub tty: bool,
    /// No GPU devices (`/dev/nvidia*`, `/dev/dri/*`) for the command.
    #[arg(long)]
    pub no_gpu: bool,
    /// Kill the command (and everything it started) after DURATION (e.g. 30s, 5m).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// Kill the command (and everything it started) when it has written nothing to stdout
    /// or stderr for DURATION (e.g. 30s, 5m); `--timeout` stays the absolute limit.
    #[arg(long, value_name = "DURATION", value_parser = crate::limits::parse_duration)]
    pub activity_timeout: Option<Duration>,
    /// At most N open file descriptors per process (RLIMIT_NOFILE).
    #[arg(long, value_name = "N", value_parser = crate::limits::parse_count)]
    pub fds: Option<u64>,
    /// No file larger than SIZE (e.g. 512M, 2G) may be written (RLIMIT_FSIZE); a process
    /// that tries is killed.
    #[arg(long, value_name = "SIZE", value_parser = crate::limits::parse_size)]
    pub file_size: Option<u64>,
    /// At most SIZE (e.g. 512M, 2G) of memory for the command and everything it starts
    /// (a cgroup; swap included); past it the kernel kills one of them.
    #[arg(long, value_name = "SIZE", value_parser = crate::limits::parse_size)]
    pub memory: Option<u64>,
    /// At most N processes and threads at once for the command and everything it starts
    /// (a cgroup); more are refused (fork fails).
    #[arg(long, value_name = "N", value_parser = crate::limits::parse_count)]
    pub pids: Option<u64>,
    /// At most N CPUs of time (fractions allowed: 0.5, 1.5) for the command and everything
    /// it starts (a cgroup's CFS quota); past it they wait.
    #[arg(long, value_name = "N", value_parser = crate::limits::parse_cpus)]
    pub cpus: Option<u64>,
    /// When to say on stderr what the sandbox refused: `after` the command (one line per
    /// distinct refusal), or `live` as it happens (the default when stderr is a terminal,
    /// without `-t`).
    #[arg(long = "refusals", value_name = "WHEN", value_enum)]
    pub refusals: Option<RefusalsWhen>,
    /// Say nothing on stderr about refusals (the record and `capsule refusals` still list
    /// them).
    #[arg(long)]
    pub quiet_refusals: bool,
    /// List reads and listings of hidden paths too. Every open of the command then goes
    /// through capsule (a round trip each): slower for builds.
    #[arg(long)]
    pub list_reads: bool,
    /// Do NOT list the writes the sandbox refuses, for file-heavy work (unpacking, a
    /// checkout, an install): each path call with write intent then stays in the kernel
    /// instead of a round trip to capsule. The wall is the same (Landlock and the mounts
    /// refuse those writes as always); only the listing is lost: the command sees
    /// `EACCES`/`EROFS` unexplained, and the record's `refusals_not_listed` says writes
    /// were not listed.
    #[arg(long, conflicts_with = "list_reads")]
    pub no_list_writes: bool,
    /// At most SIZE (e.g. 1G) in the capsule's /tmp and /var/tmp together: they become one
    /// fresh in-memory tmpfs of the exec's own (not the bundle's tmp, kept between execs);
    /// past it writes fail (ENOSPC).
    #[arg(long, value_name = "SIZE", value_parser = crate::limits::parse_size)]
    pub tmp_size: Option<u64>,
    /// Print the exec record (one JSON line) on stdout when the command ends.
    #[arg(long)]
    pub json: bool,
    /// The command and its arguments (after `--`).
    #[arg(required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `--refusals WHEN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RefusalsWhen {
    After,
    Live,
}

impl ExecArgs {
    /// How this exec says its refusals on stderr.
    pub fn say_refusals(&self) -> crate::refusals::Say {
        use crate::refusals::Say;
        use std::io::IsTerminal;
        match (self.quiet_refusals, self.refusals) {
            (true, _) => Say::Quiet,
            (_, Some(RefusalsWhen::Live)) => Say::Live,
            (_, Some(RefusalsWhen::After)) => Say::After,
            // with -t the terminal is the command's (raw): the lines wait for its end
            (_, None) if !self.tty && std::io::stderr().is_terminal() => Say::Live,
            _ => Say::After,
        }
    }

    /// The resource limits asked for on the command line.
    pub fn limits(&self) -> crate::limits::Limits {
        crate::limits::Limits {
            fds: self.fds,
            file_size: self.file_size,
            memory: self.memory,
            pids: self.pids,
            cpus_milli: self.cpus,
            tmp_size: self.tmp_size,
            nproc: None,
            disk_budget: None,
        }
    }

    /// What this exec asks of the library (`--env-file` read, the agent profile found).
    pub fn options(&self) -> Result<ExecOptions, CliError> {
        let network = if self.no_network {
            NetworkRequest::Off
        } else if self.open_network {
            NetworkRequest::Open
        } else if !self.allow_host.is_empty() {
            NetworkRequest::Allow(self.allow_host.clone())
        } else {
            NetworkRequest::Spec
        };
        let agent_login = match &self.agent_login {
            None => None,
            Some(b) => Some(crate::settings::find_profile(b)?),
        };
        Ok(ExecOptions {
            allow_write: self.allow_write.clone(),
            hide: self.hide.clone(),
            reveal: self.reveal.clone(),
            pass_env: self.pass_env.clone(),
            env: super::exec_env::read(&self.env, self.env_file.as_deref())?,
            read_only_workspace: self.read_only_workspace,
            agent_login,
            network,
            no_sandbox: self.no_sandbox,
            tty: self.tty,
            no_gpu: self.no_gpu,
            timeout: self.timeout,
            activity_timeout: self.activity_timeout,
            limits: self.limits(),
            secrets: self.secret.clone(),
            secret_files: self.secret_file.clone(),
            publish: self.publish.clone(),
            refusals: self.say_refusals(),
            list_reads: self.list_reads,
            no_list_writes: self.no_list_writes,
        })
    }
}

/// `capsule exec`.
pub fn exec(a: ExecArgs) -> CliResult {
    #[cfg(target_os = "macos")]
    if a.json {
        return Err(CliError::failure(
            "--timeout and --json are not available on macOS yet",
        ));
    }
    let options = a.options()?;
    let done = Exec::new(a.capsule)
        .command(a.command)
        .options(options)
        .run()?;
    if a.json {
        if let Some(rec) = &done.record {
            super::print_json(&serde_json::to_value(rec).unwrap_or_default());
        }
    }
    if let (Some(f), Some(rec)) = (&a.record_to, &done.record) {
        super::exec_env::write_record(f, rec);
    }
    match done.error {
        None => Ok(ExitCode::from(done.exit_status)),
        Some(e) => Err(CliError::new(done.exit_status, e)),
    }
}

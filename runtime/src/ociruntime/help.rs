//! `-h`, `--help`, `help [COMMAND]` and `-v`/`version`, laid out as runc prints them
//! (urfave/cli's `NAME:` / `USAGE:` / `OPTIONS:` sections; the version's `commit:` and
//! `spec:` lines), since scripts and test suites written for runc read them; the words
//! are capsule-runc's own, and say what it does differently (checkpoints refused,
//! capsule's walls added; see `docs/oci.md`).

/// The operations, as `help` lists them (checkpoint and restore are refused, but their
/// help is there as runc's is).
pub const OPERATIONS: &[&str] = &[
    "checkpoint",
    "create",
    "delete",
    "events",
    "exec",
    "kill",
    "list",
    "pause",
    "ps",
    "restore",
    "resume",
    "run",
    "spec",
    "start",
    "state",
    "update",
    "features",
    "help",
];

/// The runtime spec version config.json files are read as.
pub const SPEC_VERSION: &str = "1.0.2-dev";

/// One operation's help: (usage line, operands, description, options).
struct Topic {
    usage: &'static str,
    operands: &'static str,
    description: &'static str,
    options: &'static [(&'static str, &'static str)],
}

const ID: &str = "<container-id>";

fn topic(op: &str) -> Option<Topic> {
    let t = |usage, operands, description, options| Topic {
        usage,
        operands,
        description,
        options,
    };
    Some(match op {
        "checkpoint" => t("checkpoint a running container (not supported by capsule-runc)", ID,
            "capsule-runc has no checkpoints: checkpoint and restore are refused.", &[]),
        "restore" => t("restore a container from a previous checkpoint (not supported by capsule-runc)", ID,
            "capsule-runc has no checkpoints: checkpoint and restore are refused.", &[]),
        "create" => t("create a container", ID,
            "Makes the container of the bundle's config.json and leaves its init waiting for\n`start`. A field of config.json capsule-runc cannot honour is refused, by name.",
            &[("--bundle value, -b value", "path to the root of the bundle directory, defaults to the current directory"),
              ("--console-socket value", "path to an AF_UNIX socket which receives the master end of the console's pseudoterminal"),
              ("--pid-file value", "file to write the init's process id to"),
              ("--no-pivot", "accepted; the root is always switched with pivot_root"),
              ("--no-new-keyring", "accepted; no session keyring is made"),
              ("--preserve-fds value", "pass N more file descriptors to the container (stdio + N)")]),
        "delete" => t("delete any resources held by the container often used with detached container", ID,
            "Removes a stopped (or, with --force, any) container's state and cgroups.",
            &[("--force, -f", "forcibly deletes the container if it is still running (SIGKILL)")]),
        "events" => t("display container events such as OOM notifications, cpu, memory, and IO usage statistics", ID,
            "Prints the container's statistics as JSON lines, once every interval, and its OOM\nevents, until the container is gone.",
            &[("--interval value", "set the stats collection interval (default: 5s)"),
              ("--stats", "display the container's stats then exit")]),
        "exec" => t("execute new process inside the container", "<container-id> <command> [command options]  || -p process.json <container-id>",
            "Runs another process in a running container, with the container's walls.",
            &[("--console-socket value", "path to an AF_UNIX socket which receives the master end of the console's pseudoterminal"),
              ("--cwd value", "current working directory in the container"),
              ("--env value, -e value", "set environment variables"),
              ("--tty, -t", "allocate a pseudo-TTY"),
              ("--user value, -u value", "UID (format: <uid>[:<gid>])"),
              ("--additional-gids value, -g value", "additional gids"),
              ("--process value, -p value", "path to the process.json"),
              ("--detach, -d", "detach from the container's process"),
              ("--pid-file value", "file to write the process id to"),
              ("--process-label value", "refused (no SELinux here)"),
              ("--apparmor value", "set the apparmor profile for the process"),
              ("--no-new-privs", "set the no new privileges value for the process"),
              ("--cap value, -c value", "add a capability to the bounding set for the process"),
              ("--preserve-fds value", "pass N more file descriptors to the process (stdio + N)"),
              ("--cgroup value", "run the process in an existing sub-cgroup; format [<controller>:]<cgroup>"),
              ("--ignore-paused", "allow exec in a paused container")]),
        "kill" => t("kill sends the specified signal (default: SIGTERM) to the container's init process", "<container-id> [signal]",
            "",
            &[("--all, -a", "send the signal to all processes in the container")]),
        "list" => t("lists containers started by capsule-runc with the given root", "",
            "Where the given root is specified via the global option \"--root\"\n(default: \"/run/capsule-runc\").",
            &[("--format value, -f value", "select one of: table or json (default: \"table\")"),
              ("--quiet, -q", "display only container IDs")]),
        "pause" => t("pause suspends all processes inside the container", ID,
            "Freezes the container's cgroup.", &[]),
        "ps" => t("ps displays the processes running inside a container", "<container-id> [ps options]",
            "Runs the host's ps (with its options, default -ef) and keeps the container's lines.",
            &[("--format value, -f value", "select one of: table or json (default: \"table\")")]),
        "resume" => t("resumes all processes that have been previously paused", ID,
            "Thaws the container's cgroup.", &[]),
        "run" => t("create and run a container", ID,
            "create then start; without --detach, waits for the container and exits with its status.",
            &[("--bundle value, -b value", "path to the root of the bundle directory, defaults to the current directory"),
              ("--console-socket value", "path to an AF_UNIX socket which receives the master end of the console's pseudoterminal"),
              ("--detach, -d", "detach from the container's process"),
              ("--keep", "do not delete the container after it exits"),
              ("--pid-file value", "file to write the init's process id to"),
              ("--no-subreaper", "accepted; changes nothing"),
              ("--no-pivot", "accepted; the root is always switched with pivot_root"),
              ("--no-new-keyring", "accepted; no session keyring is made"),
              ("--preserve-fds value", "pass N more file descriptors to the container (stdio + N)")]),
        "spec" => t("create a new specification file", "",
            "Writes runc's starter config.json into the bundle (never over one that is there);\nedit it before running it.",
            &[("--bundle value, -b value", "path to the root of the bundle directory"),
              ("--rootless", "generate a configuration for a rootless container")]),
        "start" => t("executes the user defined process in a created container", ID, "", &[]),
        "state" => t("output the state of a container", ID, "", &[]),
        "update" => t("update container resource constraints", ID,
            "Changes the limits of a running container's cgroups; a value not given is left as it is.",
            &[("--resources value, -r value", "path to a file of the resources to update (JSON, as linux.resources), or '-' for stdin; the other options are then ignored"),
              ("--blkio-weight value", "refused (no blkio weight here)"),
              ("--cpu-period value", "CPU CFS period (in usecs)"),
              ("--cpu-quota value", "CPU CFS quota (in usecs) in a period; -1: none"),
              ("--cpu-share value", "CPU shares (relative weight)"),
              ("--cpu-rt-period value", "CPU realtime period (in usecs)"),
              ("--cpu-rt-runtime value", "CPU realtime runtime (in usecs) in a period"),
              ("--cpuset-cpus value", "CPU(s) to use"),
              ("--cpuset-mems value", "memory node(s) to use"),
              ("--memory value", "memory limit (in bytes, or with a unit: 50M); -1: none"),
              ("--memory-reservation value", "memory reservation or soft limit"),
              ("--memory-swap value", "memory plus swap limit; -1: none"),
              ("--pids-limit value", "maximum number of pids; -1: none")]),
        "features" => t("show the enabled features", "", "", &[]),
        "help" | "h" => t("Shows a list of commands or help for one command", "[command]", "", &[]),
        _ => return None,
    })
}

/// The help of `op`, or the runtime's.
pub fn text(op: Option<&str>) -> Result<String, String> {
    let Some(op) = op else {
        return Ok(main_help());
    };
    let t = topic(op).ok_or_else(|| format!("No help topic for '{op}'"))?;
    let mut s = format!(
        "NAME:\n   capsule-runc {op} - {}\n\nUSAGE:\n   capsule-runc {op}",
        t.usage
    );
    if !t.options.is_empty() {
        s.push_str(" [command options]");
    }
    s.push(' ');
    s.push_str(t.operands);
    s.push('\n');
    if !t.description.is_empty() {
        s.push('\n');
        s.push_str(t.description);
        s.push('\n');
    }
    if !t.options.is_empty() {
        s.push_str("\nOPTIONS:\n");
        let w = t.options.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        for (n, u) in t.options {
            s.push_str(&format!("   {n:w$}  {u}\n"));
        }
    }
    Ok(s)
}

fn main_help() -> String {
    let mut s = String::from(
        "NAME:\n   capsule-runc - Open Container Initiative runtime, with capsule's walls\n\n\
capsule-runc is capsule as an OCI runtime: runc's command line, which containerd's\n\
shim drives, running the container of a bundle's config.json and adding capsule's\n\
walls (Landlock over the writable mounts, a refusal listing, default limits, a disk\n\
guard). A field of config.json it cannot honour is refused by name, never skipped.\n\n\
USAGE:\n   capsule-runc [global options] command [command options] [arguments...]\n\nVERSION:\n",
    );
    for l in version_lines() {
        s.push_str("   ");
        s.push_str(&l);
        s.push('\n');
    }
    s.push_str("\nCOMMANDS:\n");
    for op in OPERATIONS {
        if let Some(t) = topic(op) {
            let name = if *op == "help" { "help, h" } else { op };
            s.push_str(&format!("   {name:<11} {}\n", t.usage));
        }
    }
    s.push_str(
        "\nGLOBAL OPTIONS:\n\
   --debug             enable debug logging\n\
   --log value         set the log file to write capsule-runc logs to (default is '/dev/stderr')\n\
   --log-format value  set the log format ('text' (default), or 'json') (default: \"text\")\n\
   --root value        root directory for storage of container state (default: \"/run/capsule-runc\")\n\
   --criu value        accepted; capsule-runc has no checkpoints\n\
   --systemd-cgroup    expect cgroupsPath as \"slice:prefix:name\" (made directly in cgroupfs)\n\
   --rootless value    accepted; decided by the uid that runs capsule-runc\n\
   --help, -h          show help\n\
   --version, -v       print the version\n",
    );
    s
}

/// `version`: the lines runc prints (`… version X`, `commit:`, `spec:`), capsule's.
pub fn version_lines() -> Vec<String> {
    vec![
        format!("capsule-runc version {}", env!("CARGO_PKG_VERSION")),
        format!("commit: capsule {}", env!("CARGO_PKG_VERSION")),
        format!("spec: {SPEC_VERSION}"),
    ]
}

pub fn version() -> String {
    let mut s = version_lines().join("\n");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laid_out_as_runc_prints_it() {
        let m = text(None).unwrap();
        let lines: Vec<&str> = m.lines().collect();
        assert_eq!(lines[0], "NAME:");
        assert!(lines[1].contains("runc - Open Container Initiative runtime"));
        for op in OPERATIONS {
            let h = text(Some(op)).unwrap();
            let l: Vec<&str> = h.lines().collect();
            assert_eq!(l[0], "NAME:", "{op}");
            assert!(
                l[1].starts_with(&format!("   capsule-runc {op} - ")),
                "{op}: {}",
                l[1]
            );
            assert!(
                m.contains(&format!("\n   {op}")),
                "{op} missing from the command list"
            );
        }
        assert_eq!(text(Some("foo")).unwrap_err(), "No help topic for 'foo'");
        let v = version();
        let v: Vec<&str> = v.lines().collect();
        assert!(v[0].starts_with("capsule-runc version "));
        assert!(v[1].starts_with("commit: "));
        assert_eq!(v[2], "spec: 1.0.2-dev");
    }
}

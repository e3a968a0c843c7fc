//! The runc command line as containerd's `io.containerd.runc.v2` shim (through go-runc)
//! and the OCI runtime-tools drive it: global options, then one operation, its options and
//! its operands. Long options take `--name value` or `--name=value` (one dash works too,
//! as in runc's urfave/cli). Options runc has that change nothing here are accepted
//! and named in [`IGNORED`]; anything else is a usage error naming it.

use std::path::PathBuf;

/// Where state lives when `--root` is not given (runc's own default).
pub const DEFAULT_ROOT: &str = "/run/capsule-runc";

/// The options before the operation.
#[derive(Debug, Default, Clone)]
pub struct Global {
    pub root: Option<PathBuf>,
    pub log: Option<PathBuf>,
    pub log_json: bool,
    pub systemd_cgroup: bool,
    pub debug: bool,
}

impl Global {
    /// `--root`, else runc's default: `$XDG_RUNTIME_DIR/capsule-runc` for a user other
    /// than root, or for root of a user namespace whose `$USER` is not root (rootless
    /// Podman runs its runtime so, and gives no `--root`), else [`DEFAULT_ROOT`].
    pub fn root(&self) -> PathBuf {
        if let Some(r) = &self.root {
            return r.clone();
        }
        // SAFETY: geteuid cannot fail.
        let euid = unsafe { libc::geteuid() };
        let rootless = euid != 0
            || (super::facts::in_user_namespace()
                && std::env::var("USER").map_or(true, |u| u != "root"));
        default_root(rootless, std::env::var_os("XDG_RUNTIME_DIR").as_deref())
    }
}

/// The state root without `--root`, for a rootless runtime or not, with
/// `XDG_RUNTIME_DIR` `xdg`.
pub fn default_root(rootless: bool, xdg: Option<&std::ffi::OsStr>) -> PathBuf {
    match xdg.map(std::path::Path::new) {
        Some(x) if rootless && x.is_absolute() => x.join("capsule-runc"),
        _ => DEFAULT_ROOT.into(),
    }
}

/// One operation and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Create {
        id: String,
        bundle: PathBuf,
        pid_file: Option<PathBuf>,
        console_socket: Option<PathBuf>,
    },
    /// `run`: create then start, then wait (runtime-tools uses it; containerd does not).
    Run {
        id: String,
        bundle: PathBuf,
        pid_file: Option<PathBuf>,
        console_socket: Option<PathBuf>,
        detach: bool,
    },
    Start {
        id: String,
    },
    State {
        id: String,
    },
    Kill {
        id: String,
        signal: String,
        all: bool,
    },
    Delete {
        id: String,
        force: bool,
    },
    Exec {
        id: String,
        process: Option<PathBuf>,
        args: Vec<String>,
        detach: bool,
        pid_file: Option<PathBuf>,
        console_socket: Option<PathBuf>,
        tty: bool,
        cwd: Option<String>,
        env: Vec<String>,
    },
    Ps {
        id: String,
        json: bool,
    },
    Pause {
        id: String,
    },
    Resume {
        id: String,
    },
    List {
        json: bool,
    },
    Features,
    Version,
    Help,
}

/// Options accepted and without effect here, with the reason (see `docs/oci.md`).
pub const IGNORED: &[(&str, &str)] = &[
    ("--no-pivot", "the root is always switched with pivot_root from capsule's setup tmpfs, which works on any rootfs"),
    ("--no-new-keyring", "no session keyring is created in either case"),
    ("--no-subreaper", "capsule-runc exec --detach never waits"),
    ("--criu", "no checkpoints"),
    ("--rootless", "decided by the uid that runs capsule-runc"),
];

/// Flags that take a value, by operation (besides the ones parsed into [`Op`]).
const VALUE_FLAGS: &[&str] = &[
    "--root",
    "--log",
    "--log-format",
    "--bundle",
    "-b",
    "--pid-file",
    "--console-socket",
    "--process",
    "-p",
    "--format",
    "-f",
    "--cwd",
    "--env",
    "-e",
    "--preserve-fds",
    "--user",
    "-u",
    "--criu",
    "--rootless",
    "--process-label",
    "--apparmor",
    "--cap",
    "-c",
];

/// Usage errors: one line naming what is wrong.
pub fn parse(args: &[String]) -> Result<(Global, Op), String> {
    let mut g = Global::default();
    let mut i = 0;
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    let mut operands: Vec<String> = Vec::new();
    let mut op: Option<String> = None;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if op.is_some() && !operands.is_empty() && op.as_deref() == Some("exec") {
            // everything after the container id of `exec` is the command
            operands.push(a.clone());
            continue;
        }
        if a == "--" {
            operands.extend(args[i..].iter().cloned());
            break;
        }
        if a.starts_with('-') && a.len() > 1 {
            let norm = if a.starts_with("--") || a.len() == 2 {
                a.clone()
            } else {
                format!("-{a}")
            };
            let (name, inline) = match norm.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (norm, None),
            };
            // `-f` is delete's --force, ps's and list's --format
            let boolean = name == "-f" && op.as_deref() == Some("delete");
            let value = if VALUE_FLAGS.contains(&name.as_str()) && !boolean {
                match inline {
                    Some(v) => Some(v),
                    None => {
                        let v = args
                            .get(i)
                            .cloned()
                            .ok_or_else(|| format!("option {name} needs a value"))?;
                        i += 1;
                        Some(v)
                    }
                }
            } else {
                inline
            };
            if op.is_none() {
                match name.as_str() {
                    "--root" => g.root = value.map(PathBuf::from),
                    "--log" => g.log = value.map(PathBuf::from),
                    "--log-format" => {
                        g.log_json = match value.as_deref() {
                            Some("json") => true,
                            Some("text") => false,
                            v => {
                                return Err(format!(
                                    "--log-format: unknown format {v:?} (json or text)"
                                ))
                            }
                        }
                    }
                    "--systemd-cgroup" => g.systemd_cgroup = true,
                    "--debug" => g.debug = true,
                    "--version" | "-v" => return Ok((g, Op::Version)),
                    "--help" | "-h" => return Ok((g, Op::Help)),
                    "--criu" | "--rootless" => {}
                    _ => return Err(format!("unknown global option {name}")),
                }
            } else {
                flags.push((name, value));
            }
            continue;
        }
        if op.is_none() {
            op = Some(a.clone());
        } else {
            operands.push(a.clone());
        }
    }
    let Some(op) = op else {
        return Ok((g, Op::Help));
    };
    let known: &[&str] = match op.as_str() {
        "create" => &["--bundle", "-b", "--pid-file", "--console-socket", "--no-pivot", "--no-new-keyring", "--preserve-fds"],
        "run" => &["--bundle", "-b", "--pid-file", "--console-socket", "--no-pivot", "--no-new-keyring", "--preserve-fds", "--detach", "-d"],
        "start" | "pause" | "resume" | "state" => &[],
        "kill" => &["--all", "-a"],
        "delete" => &["--force", "-f"],
        "exec" => &["--process", "-p", "--detach", "-d", "--pid-file", "--console-socket", "--tty", "-t", "--cwd", "--env", "-e", "--no-subreaper", "--preserve-fds", "--user", "-u", "--process-label", "--apparmor", "--cap", "-c", "--no-new-privs"],
        "ps" => &["--format", "-f"],
        "list" => &["--format", "-f", "--quiet", "-q"],
        "features" | "version" | "help" => &[],
        other => return Err(format!("unknown operation {other:?} (create, start, state, kill, delete, exec, ps, pause, resume, run, list, features)")),
    };
    for (n, _) in &flags {
        if !known.contains(&n.as_str()) && n != "--help" && n != "-h" {
            return Err(format!("{op}: unknown option {n}"));
        }
    }
    let has = |names: &[&str]| flags.iter().any(|(n, _)| names.contains(&n.as_str()));
    let val = |names: &[&str]| {
        flags
            .iter()
            .rev()
            .find(|(n, _)| names.contains(&n.as_str()))
            .and_then(|(_, v)| v.clone())
    };
    for (n, v) in &flags {
        if n == "--preserve-fds" && v.as_deref().is_some_and(|v| v != "0") {
            return Err(format!(
                "{op}: --preserve-fds {} is not supported (only 0)",
                v.as_deref().unwrap_or("")
            ));
        }
        if matches!(
            n.as_str(),
            "--user" | "-u" | "--process-label" | "--apparmor" | "--cap" | "-c"
        ) {
            return Err(format!(
                "{op}: {n} is not supported: give the process in --process"
            ));
        }
    }
    let id = |operands: &[String]| -> Result<String, String> {
        let id = operands
            .first()
            .cloned()
            .ok_or_else(|| format!("{op}: the container id is missing"))?;
        valid_id(&id)?;
        Ok(id)
    };
    let bundle = val(&["--bundle", "-b"])
        .map(PathBuf::from)
        .unwrap_or_else(|| ".".into());
    Ok((
        g,
        match op.as_str() {
            "create" => Op::Create {
                id: id(&operands)?,
                bundle,
                pid_file: val(&["--pid-file"]).map(PathBuf::from),
                console_socket: val(&["--console-socket"]).map(PathBuf::from),
            },
            "run" => Op::Run {
                id: id(&operands)?,
                bundle,
                pid_file: val(&["--pid-file"]).map(PathBuf::from),
                console_socket: val(&["--console-socket"]).map(PathBuf::from),
                detach: has(&["--detach", "-d"]),
            },
            "start" => Op::Start { id: id(&operands)? },
            "state" => Op::State { id: id(&operands)? },
            "pause" => Op::Pause { id: id(&operands)? },
            "resume" => Op::Resume { id: id(&operands)? },
            "kill" => Op::Kill {
                id: id(&operands)?,
                signal: operands.get(1).cloned().unwrap_or_else(|| "SIGTERM".into()),
                all: has(&["--all", "-a"]),
            },
            "delete" => Op::Delete {
                id: id(&operands)?,
                force: has(&["--force", "-f"]),
            },
            "exec" => Op::Exec {
                id: id(&operands)?,
                process: val(&["--process", "-p"]).map(PathBuf::from),
                args: operands[1..].to_vec(),
                detach: has(&["--detach", "-d"]),
                pid_file: val(&["--pid-file"]).map(PathBuf::from),
                console_socket: val(&["--console-socket"]).map(PathBuf::from),
                tty: has(&["--tty", "-t"]),
                cwd: val(&["--cwd"]),
                env: flags
                    .iter()
                    .filter(|(n, _)| n == "--env" || n == "-e")
                    .filter_map(|(_, v)| v.clone())
                    .collect(),
            },
            "ps" => Op::Ps {
                id: id(&operands)?,
                json: val(&["--format", "-f"]).as_deref() == Some("json"),
            },
            "list" => Op::List {
                json: val(&["--format", "-f"]).as_deref() == Some("json"),
            },
            "features" => Op::Features,
            "version" => Op::Version,
            _ => Op::Help,
        },
    ))
}

/// A container id: what runc accepts (letters, digits, `_ + - .`), never a path.
pub fn valid_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 1024
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid container id {id:?} (letters, digits and _ + - . only)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn p(s: &str) -> Result<(Global, Op), String> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn what_the_shim_sends() {
        let (g, op) = p("--root /run/containerd/runc/default --log /b/log.json --log-format json --systemd-cgroup create --bundle /b --pid-file /b/init.pid --console-socket /tmp/s --no-pivot c1").unwrap();
        assert_eq!(
            g.root.as_deref(),
            Some(std::path::Path::new("/run/containerd/runc/default"))
        );
        assert!(g.log_json && g.systemd_cgroup);
        assert_eq!(
            op,
            Op::Create {
                id: "c1".into(),
                bundle: "/b".into(),
                pid_file: Some("/b/init.pid".into()),
                console_socket: Some("/tmp/s".into())
            }
        );
        let (_, op) = p("--root /r kill --all c1 9").unwrap();
        assert_eq!(
            op,
            Op::Kill {
                id: "c1".into(),
                signal: "9".into(),
                all: true
            }
        );
        let (_, op) = p("--root /r delete --force c1").unwrap();
        assert_eq!(
            op,
            Op::Delete {
                id: "c1".into(),
                force: true
            }
        );
        let (_, op) = p("delete -f c1").unwrap();
        assert_eq!(
            op,
            Op::Delete {
                id: "c1".into(),
                force: true
            }
        );
        let (_, op) =
            p("--root=/r exec --process /tmp/p.json --detach --pid-file /b/e.pid c1").unwrap();
        assert!(
            matches!(op, Op::Exec { detach: true, ref process, .. } if process.as_deref() == Some(std::path::Path::new("/tmp/p.json")))
        );
        let (_, op) = p("-root /r ps --format json c1").unwrap();
        assert_eq!(
            op,
            Op::Ps {
                id: "c1".into(),
                json: true
            }
        );
        let (_, op) = p("exec c1 sh -c true").unwrap();
        assert!(matches!(op, Op::Exec { ref args, .. } if args == &["sh", "-c", "true"]));
    }

    #[test]
    fn the_default_root_is_runcs() {
        let x = std::ffi::OsStr::new("/run/user/1000");
        assert_eq!(default_root(false, Some(x)), Path::new(DEFAULT_ROOT));
        assert_eq!(
            default_root(true, Some(x)),
            Path::new("/run/user/1000/capsule-runc")
        );
        assert_eq!(default_root(true, None), Path::new(DEFAULT_ROOT));
        assert_eq!(
            default_root(true, Some(std::ffi::OsStr::new("rel"))),
            Path::new(DEFAULT_ROOT)
        );
    }

    #[test]
    fn bad_input_is_named() {
        assert!(p("create --frobnicate c1")
            .unwrap_err()
            .contains("--frobnicate"));
        assert!(p("create ../x")
            .unwrap_err()
            .contains("invalid container id"));
        assert!(p("start").unwrap_err().contains("missing"));
        assert!(p("--log-format yaml state c").unwrap_err().contains("yaml"));
        assert!(p("frob c").unwrap_err().contains("frob"));
    }
}

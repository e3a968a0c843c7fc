//! The runc command line as containerd's `io.containerd.runc.v2` shim (through go-runc),
//! the OCI runtime-tools and runc's own integration suite drive it: global options, then
//! one operation, its options and its operands, parsed as runc's urfave/cli parses them
//! (`--name value` or `--name=value`, one dash works too; an operation's options may
//! follow its operands, except for `exec` and `ps`, whose words after the container id
//! are the command or `ps`'s own options). Options runc has that change nothing here are
//! accepted and named in [`IGNORED`]; anything else is a usage error naming it.

pub use super::exec::ExecOpts;
pub use super::update::UpdateOpts;
use std::path::PathBuf;
use std::time::Duration;

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
        preserve_fds: u32,
    },
    /// `run`: create then start, then wait (runtime-tools uses it; containerd does not).
    Run {
        id: String,
        bundle: PathBuf,
        pid_file: Option<PathBuf>,
        console_socket: Option<PathBuf>,
        preserve_fds: u32,
        detach: bool,
        keep: bool,
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
    Exec(ExecOpts),
    Ps {
        id: String,
        json: bool,
        /// `ps`'s own options (default `-ef`)
        args: Vec<String>,
    },
    Pause {
        id: String,
    },
    Resume {
        id: String,
    },
    List {
        json: bool,
        quiet: bool,
    },
    Spec {
        bundle: Option<PathBuf>,
        rootless: bool,
    },
    Update(UpdateOpts),
    Events {
        id: String,
        stats: bool,
        interval: Duration,
    },
    Features,
    Version,
    /// `-h`, `--help`, `help [COMMAND]`, `COMMAND -h`.
    Help(Option<String>),
}

/// Options accepted and without effect here, with the reason (see `docs/oci.md`).
pub const IGNORED: &[(&str, &str)] = &[
    ("--no-pivot", "the root is always switched with pivot_root from capsule's setup tmpfs, which works on any rootfs"),
    ("--no-new-keyring", "no session keyring is created in either case"),
    ("--no-subreaper", "capsule-runc run waits for its own child; exec --detach never waits"),
    ("--criu", "no checkpoints"),
    ("--rootless", "decided by the uid that runs capsule-runc"),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    Value,
}

/// An operation's options: every name (long and short) with its kind.
fn options(op: &str) -> Option<&'static [(&'static str, Kind)]> {
    use Kind::*;
    Some(match op {
        "create" => &[
            ("--bundle", Value),
            ("-b", Value),
            ("--pid-file", Value),
            ("--console-socket", Value),
            ("--no-pivot", Bool),
            ("--no-new-keyring", Bool),
            ("--preserve-fds", Value),
        ],
        "run" => &[
            ("--bundle", Value),
            ("-b", Value),
            ("--pid-file", Value),
            ("--console-socket", Value),
            ("--no-pivot", Bool),
            ("--no-new-keyring", Bool),
            ("--preserve-fds", Value),
            ("--detach", Bool),
            ("-d", Bool),
            ("--keep", Bool),
            ("--no-subreaper", Bool),
        ],
        "start" | "pause" | "resume" | "state" | "features" | "version" | "help" | "h" => &[],
        "checkpoint" | "restore" => &[],
        "kill" => &[("--all", Bool), ("-a", Bool)],
        "delete" => &[("--force", Bool), ("-f", Bool)],
        "exec" => &[
            ("--process", Value),
            ("-p", Value),
            ("--detach", Bool),
            ("-d", Bool),
            ("--pid-file", Value),
            ("--console-socket", Value),
            ("--tty", Bool),
            ("-t", Bool),
            ("--cwd", Value),
            ("--env", Value),
            ("-e", Value),
            ("--no-subreaper", Bool),
            ("--preserve-fds", Value),
            ("--user", Value),
            ("-u", Value),
            ("--additional-gids", Value),
            ("-g", Value),
            ("--process-label", Value),
            ("--apparmor", Value),
            ("--cap", Value),
            ("-c", Value),
            ("--no-new-privs", Bool),
            ("--cgroup", Value),
            ("--ignore-paused", Bool),
        ],
        "ps" => &[("--format", Value), ("-f", Value)],
        "list" => &[
            ("--format", Value),
            ("-f", Value),
            ("--quiet", Bool),
            ("-q", Bool),
        ],
        "spec" => &[("--bundle", Value), ("-b", Value), ("--rootless", Bool)],
        "update" => &[
            ("--resources", Value),
            ("-r", Value),
            ("--blkio-weight", Value),
            ("--cpu-period", Value),
            ("--cpu-quota", Value),
            ("--cpu-share", Value),
            ("--cpu-rt-period", Value),
            ("--cpu-rt-runtime", Value),
            ("--cpuset-cpus", Value),
            ("--cpuset-mems", Value),
            ("--kernel-memory", Value),
            ("--kernel-memory-tcp", Value),
            ("--memory", Value),
            ("--memory-reservation", Value),
            ("--memory-swap", Value),
            ("--pids-limit", Value),
            ("--l3-cache-schema", Value),
            ("--mem-bw-schema", Value),
        ],
        "events" => &[("--interval", Value), ("--stats", Bool)],
        _ => return None,
    })
}

/// Global options and their kinds.
const GLOBAL: &[(&str, Kind)] = &[
    ("--root", Kind::Value),
    ("--log", Kind::Value),
    ("--log-format", Kind::Value),
    ("--criu", Kind::Value),
    ("--rootless", Kind::Value),
    ("--systemd-cgroup", Kind::Bool),
    ("--debug", Kind::Bool),
    ("--help", Kind::Bool),
    ("-h", Kind::Bool),
    ("--version", Kind::Bool),
    ("-v", Kind::Bool),
];

/// `-x`, `--x`, `-name` (urfave/cli takes one dash too) as the table's name, and an
/// inline `=value`.
fn split_flag(a: &str) -> (String, Option<String>) {
    let norm = if a.starts_with("--") || a.len() == 2 {
        a.to_string()
    } else {
        format!("-{a}")
    };
    match norm.split_once('=') {
        Some((n, v)) => (n.to_string(), Some(v.to_string())),
        None => (norm, None),
    }
}

fn is_flag(a: &str) -> bool {
    a.starts_with('-') && a.len() > 1
}

/// What a boolean option's inline value says (`--detach=false`).
fn truth(name: &str, v: Option<&str>) -> Result<bool, String> {
    match v {
        None | Some("true") | Some("1") => Ok(true),
        Some("false") | Some("0") => Ok(false),
        Some(v) => Err(format!("invalid boolean value {v:?} for {name}")),
    }
}

/// Usage errors: one line naming what is wrong.
pub fn parse(args: &[String]) -> Result<(Global, Op), String> {
    let mut g = Global::default();
    let mut i = 0;
    // global options, up to the operation
    let op = loop {
        let Some(a) = args.get(i) else {
            return Ok((g, Op::Help(None)));
        };
        i += 1;
        if !is_flag(a) {
            break a.clone();
        }
        let (name, inline) = split_flag(a);
        let kind = GLOBAL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, k)| *k)
            .ok_or_else(|| format!("unknown global option {name}"))?;
        let value = match (kind, inline) {
            (Kind::Value, Some(v)) => Some(v),
            (Kind::Value, None) => {
                let v = args
                    .get(i)
                    .cloned()
                    .ok_or_else(|| format!("option {name} needs a value"))?;
                i += 1;
                Some(v)
            }
            (Kind::Bool, v) => v,
        };
        match name.as_str() {
            "--root" => g.root = value.map(PathBuf::from),
            "--log" => g.log = value.map(PathBuf::from),
            "--log-format" => {
                g.log_json = match value.as_deref() {
                    Some("json") => true,
                    Some("text") => false,
                    v => return Err(format!("--log-format: unknown format {v:?} (json or text)")),
                }
            }
            "--systemd-cgroup" => g.systemd_cgroup = truth(&name, value.as_deref())?,
            "--debug" => g.debug = truth(&name, value.as_deref())?,
            "--version" | "-v" => return Ok((g, Op::Version)),
            "--help" | "-h" => return Ok((g, Op::Help(None))),
            _ => {} // --criu, --rootless: see IGNORED
        }
    };
    let Some(table) = options(&op) else {
        if args[i..].iter().any(|a| a == "-h" || a == "--help") {
            return Err(format!("No help topic for '{op}'"));
        }
        return Err(format!(
            "unknown operation {op:?} (create, start, run, state, kill, delete, exec, ps, events, update, pause, resume, list, spec, features)"
        ));
    };
    // the operation's options and operands; for exec and ps the first operand (the
    // container id) ends the options
    let stops_at_operand = matches!(op.as_str(), "exec" | "ps");
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    let mut operands: Vec<String> = Vec::new();
    while let Some(a) = args.get(i) {
        i += 1;
        if stops_at_operand && !operands.is_empty() {
            operands.push(a.clone());
            continue;
        }
        if a == "--" {
            operands.extend(args[i..].iter().cloned());
            break;
        }
        if !is_flag(a) {
            operands.push(a.clone());
            continue;
        }
        let (name, inline) = split_flag(a);
        if name == "--help" || name == "-h" {
            return Ok((g, Op::Help(Some(op))));
        }
        let kind = table
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, k)| *k)
            .ok_or_else(|| format!("{op}: unknown option {name}"))?;
        let value = match (kind, inline) {
            (Kind::Value, Some(v)) => Some(v),
            (Kind::Value, None) => {
                let v = args
                    .get(i)
                    .cloned()
                    .ok_or_else(|| format!("{op}: option {name} needs a value"))?;
                i += 1;
                Some(v)
            }
            (Kind::Bool, v) => Some(truth(&name, v.as_deref())?.to_string()),
        };
        flags.push((name, value));
    }
    let get = |names: &[&str]| -> Option<String> {
        flags
            .iter()
            .rev()
            .find(|(n, _)| names.contains(&n.as_str()))
            .and_then(|(_, v)| v.clone())
    };
    let all = |names: &[&str]| -> Vec<String> {
        flags
            .iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
            .filter_map(|(_, v)| v.clone())
            .collect()
    };
    let has = |names: &[&str]| get(names).as_deref() == Some("true");
    let id = || -> Result<String, String> {
        let id = operands
            .first()
            .cloned()
            .ok_or_else(|| format!("{op}: the container id is missing"))?;
        valid_id(&id)?;
        Ok(id)
    };
    // runc checks the number of operands for most operations
    let at_most = |n: usize| -> Result<(), String> {
        if operands.len() > n {
            Err(format!(
                "{op}: unexpected argument {:?}",
                operands[n.min(operands.len() - 1)]
            ))
        } else {
            Ok(())
        }
    };
    let preserve_fds = || -> Result<u32, String> {
        get(&["--preserve-fds"])
            .map(|v| {
                v.parse::<u32>()
                    .map_err(|_| format!("{op}: --preserve-fds {v:?}: a number of descriptors"))
            })
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let bundle = get(&["--bundle", "-b"])
        .map(PathBuf::from)
        .unwrap_or_else(|| ".".into());
    let json_format = || -> Result<bool, String> {
        match get(&["--format", "-f"]).as_deref() {
            None | Some("table") => Ok(false),
            Some("json") => Ok(true),
            Some(f) => Err(format!("{op}: invalid format option {f:?} (table or json)")),
        }
    };
    let op = match op.as_str() {
        "create" => {
            at_most(1)?;
            Op::Create {
                id: id()?,
                bundle,
                pid_file: get(&["--pid-file"]).map(PathBuf::from),
                console_socket: get(&["--console-socket"]).map(PathBuf::from),
                preserve_fds: preserve_fds()?,
            }
        }
        "run" => {
            at_most(1)?;
            Op::Run {
                id: id()?,
                bundle,
                pid_file: get(&["--pid-file"]).map(PathBuf::from),
                console_socket: get(&["--console-socket"]).map(PathBuf::from),
                preserve_fds: preserve_fds()?,
                detach: has(&["--detach", "-d"]),
                keep: has(&["--keep"]),
            }
        }
        "start" => Op::Start { id: id()? },
        "state" => Op::State { id: id()? },
        "pause" => Op::Pause { id: id()? },
        "resume" => Op::Resume { id: id()? },
        "kill" => {
            at_most(2)?;
            Op::Kill {
                id: id()?,
                signal: operands.get(1).cloned().unwrap_or_else(|| "SIGTERM".into()),
                all: has(&["--all", "-a"]),
            }
        }
        "delete" => Op::Delete {
            id: id()?,
            force: has(&["--force", "-f"]),
        },
        "exec" => Op::Exec(ExecOpts {
            id: id()?,
            process: get(&["--process", "-p"]).map(PathBuf::from),
            args: operands[1..].to_vec(),
            detach: has(&["--detach", "-d"]),
            pid_file: get(&["--pid-file"]).map(PathBuf::from),
            console_socket: get(&["--console-socket"]).map(PathBuf::from),
            tty: has(&["--tty", "-t"]),
            cwd: get(&["--cwd"]),
            env: all(&["--env", "-e"]),
            user: get(&["--user", "-u"]).map(|u| parse_user(&u)).transpose()?,
            additional_gids: all(&["--additional-gids", "-g"])
                .iter()
                .map(|g| {
                    g.parse::<u32>()
                        .map_err(|_| format!("exec: --additional-gids {g:?}: a group id"))
                })
                .collect::<Result<_, _>>()?,
            caps: all(&["--cap", "-c"]),
            apparmor: get(&["--apparmor"]),
            process_label: get(&["--process-label"]),
            no_new_privs: get(&["--no-new-privs"]).map(|v| v == "true"),
            preserve_fds: preserve_fds()?,
            cgroups: all(&["--cgroup"]),
            ignore_paused: has(&["--ignore-paused"]),
        }),
        "ps" => Op::Ps {
            id: id()?,
            json: json_format()?,
            args: operands[1..].to_vec(),
        },
        "list" => {
            at_most(0)?;
            Op::List {
                json: json_format()?,
                quiet: has(&["--quiet", "-q"]),
            }
        }
        "spec" => {
            at_most(0)?;
            Op::Spec {
                bundle: get(&["--bundle", "-b"]).map(PathBuf::from),
                rootless: has(&["--rootless"]),
            }
        }
        "update" => {
            at_most(1)?;
            Op::Update(update_opts(id()?, &get)?)
        }
        "events" => {
            at_most(1)?;
            let interval = match get(&["--interval"]) {
                Some(v) => {
                    parse_duration(&v).map_err(|e| format!("events: --interval {v:?}: {e}"))?
                }
                None => Duration::from_secs(5),
            };
            if interval.is_zero() {
                return Err("events: duration interval must be greater than 0".into());
            }
            Op::Events {
                id: id()?,
                stats: has(&["--stats"]),
                interval,
            }
        }
        "features" => Op::Features,
        "version" => Op::Version,
        "help" | "h" => Op::Help(operands.first().cloned()),
        other => {
            return Err(format!(
                "{other}: not supported by capsule-runc (no checkpoints)"
            ))
        }
    };
    Ok((g, op))
}

/// `--user UID[:GID]` (numbers: capsule-runc reads no file of the image).
fn parse_user(u: &str) -> Result<(u32, Option<u32>), String> {
    let num = |s: &str, what: &str| {
        s.parse::<u32>()
            .map_err(|_| format!("exec: --user {u:?}: the {what} must be a number"))
    };
    Ok(match u.split_once(':') {
        Some((uid, gid)) => (num(uid, "uid")?, Some(num(gid, "gid")?)),
        None => (num(u, "uid")?, None),
    })
}

fn update_opts(id: String, get: &dyn Fn(&[&str]) -> Option<String>) -> Result<UpdateOpts, String> {
    let uint = |name: &str| -> Result<Option<u64>, String> {
        get(&[name])
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("update: invalid value for {name}: {v:?}"))
            })
            .transpose()
    };
    let int = |name: &str| -> Result<Option<i64>, String> {
        get(&[name])
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| format!("update: invalid value for {name}: {v:?}"))
            })
            .transpose()
    };
    let bytes = |name: &str| -> Result<Option<i64>, String> {
        get(&[name])
            .map(|v| {
                if v == "-1" {
                    Ok(-1)
                } else {
                    ram_in_bytes(&v)
                        .ok_or_else(|| format!("update: invalid value for {name}: {v:?}"))
                }
            })
            .transpose()
    };
    for obsolete in ["--kernel-memory", "--kernel-memory-tcp"] {
        if get(&[obsolete]).is_some() {
            return Err(format!(
                "update: {obsolete}: kernel memory limits are not supported (this kernel no longer sets them)"
            ));
        }
    }
    for rdt in ["--l3-cache-schema", "--mem-bw-schema"] {
        if get(&[rdt]).is_some() {
            return Err(format!("update: {rdt}: Intel RDT is not supported"));
        }
    }
    Ok(UpdateOpts {
        id,
        resources: get(&["--resources", "-r"]),
        memory: bytes("--memory")?,
        memory_reservation: bytes("--memory-reservation")?,
        memory_swap: bytes("--memory-swap")?,
        cpu_shares: uint("--cpu-share")?,
        cpu_quota: int("--cpu-quota")?,
        cpu_period: uint("--cpu-period")?,
        cpu_rt_runtime: int("--cpu-rt-runtime")?,
        cpu_rt_period: uint("--cpu-rt-period")?,
        cpuset_cpus: get(&["--cpuset-cpus"]),
        cpuset_mems: get(&["--cpuset-mems"]),
        pids_limit: int("--pids-limit")?,
        blkio_weight: get(&["--blkio-weight"])
            .map(|v| {
                v.parse::<u16>()
                    .map_err(|_| format!("update: invalid value for --blkio-weight: {v:?}"))
            })
            .transpose()?,
    })
}

/// A size as docker's `RAMInBytes` reads it: a number, optionally with a binary unit
/// (`b`, `k`, `m`, `g`, `t`, `p`, with an optional `b`/`ib`; `50M` is 50 MiB).
pub fn ram_in_bytes(s: &str) -> Option<i64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().ok()?;
    let unit = unit.trim().to_ascii_lowercase();
    let shift = match unit.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        "p" | "pb" | "pib" => 50,
        _ => return None,
    };
    let v = n * (1u64 << shift) as f64;
    (v.is_finite() && v >= 0.0 && v < i64::MAX as f64).then_some(v as i64)
}

/// A Go duration (`5s`, `100ms`, `1m30s`, `250us`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    while !rest.is_empty() {
        let n_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or("a unit is missing (ns, us, ms, s, m, h)")?;
        let n: f64 = rest[..n_end].parse().map_err(|_| "not a number")?;
        rest = &rest[n_end..];
        let u_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..u_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => return Err(format!("unknown unit {u:?}")),
        };
        total += n * scale;
        rest = &rest[u_end..];
    }
    Duration::try_from_secs_f64(total).map_err(|e| e.to_string())
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
                console_socket: Some("/tmp/s".into()),
                preserve_fds: 0,
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
            matches!(op, Op::Exec(ref e) if e.detach && e.process.as_deref() == Some(std::path::Path::new("/tmp/p.json")))
        );
        let (_, op) = p("-root /r ps --format json c1").unwrap();
        assert_eq!(
            op,
            Op::Ps {
                id: "c1".into(),
                json: true,
                args: vec![]
            }
        );
        let (_, op) = p("exec c1 sh -c true").unwrap();
        assert!(matches!(op, Op::Exec(ref e) if e.args == ["sh", "-c", "true"]));
    }

    #[test]
    fn what_runcs_own_suite_sends() {
        // options after the operands (urfave/cli moves them first), values that look
        // like options
        let (_, op) = p("update test_update --memory 50M --cpu-quota -1 --pids-limit=-1").unwrap();
        let Op::Update(u) = op else { panic!() };
        assert_eq!(u.id, "test_update");
        assert_eq!(u.memory, Some(50 << 20));
        assert_eq!(u.cpu_quota, Some(-1));
        assert_eq!(u.pids_limit, Some(-1));
        assert_eq!(u.memory_swap, None);
        let (_, op) = p("update -r - c").unwrap();
        assert!(matches!(op, Op::Update(ref u) if u.resources.as_deref() == Some("-")));
        // ps's own options after the id; exec's command after the id keeps its options
        let (_, op) = p("ps test_busybox -e -x").unwrap();
        assert!(matches!(op, Op::Ps { ref args, json: false, .. } if args == &["-e", "-x"]));
        let (_, op) = p("exec --user 1000:1000 --additional-gids 100 -g 65534 --preserve-fds=2 --cgroup memory:a --cgroup cpu,cpuacct:b c id -G").unwrap();
        let Op::Exec(e) = op else { panic!() };
        assert_eq!(e.user, Some((1000, Some(1000))));
        assert_eq!(e.additional_gids, [100, 65534]);
        assert_eq!(e.preserve_fds, 2);
        assert_eq!(e.cgroups, ["memory:a", "cpu,cpuacct:b"]);
        assert_eq!(e.args, ["id", "-G"]);
        let (_, op) = p("list -q").unwrap();
        assert_eq!(
            op,
            Op::List {
                json: false,
                quiet: true
            }
        );
        let (_, op) = p("spec --rootless -b /x").unwrap();
        assert_eq!(
            op,
            Op::Spec {
                bundle: Some("/x".into()),
                rootless: true
            }
        );
        let (_, op) = p("events --interval 100ms c").unwrap();
        assert!(
            matches!(op, Op::Events { interval, stats: false, .. } if interval == Duration::from_millis(100))
        );
        let (_, op) = p("run -d --console-socket /s test").unwrap();
        assert!(matches!(op, Op::Run { detach: true, .. }));
        // help, as runc answers it
        assert_eq!(p("-h").unwrap().1, Op::Help(None));
        assert_eq!(p("list --help").unwrap().1, Op::Help(Some("list".into())));
        assert_eq!(
            p("checkpoint -h").unwrap().1,
            Op::Help(Some("checkpoint".into()))
        );
        assert_eq!(p("help update").unwrap().1, Op::Help(Some("update".into())));
        assert!(p("foo -h").unwrap_err().contains("No help topic for 'foo'"));
        assert!(p("checkpoint c").unwrap_err().contains("no checkpoints"));
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
        assert!(p("exec --user me c id").unwrap_err().contains("--user"));
        assert!(p("update --memory lots c")
            .unwrap_err()
            .contains("--memory"));
        assert!(p("update --kernel-memory 1M c")
            .unwrap_err()
            .contains("kernel memory"));
        assert!(p("events --interval 0s c")
            .unwrap_err()
            .contains("greater than 0"));
        assert!(p("list --format yaml").unwrap_err().contains("yaml"));
        assert!(p("list extra").unwrap_err().contains("extra"));
    }

    #[test]
    fn sizes_and_durations_as_docker_and_go_read_them() {
        assert_eq!(ram_in_bytes("67108864"), Some(67108864));
        assert_eq!(ram_in_bytes("50M"), Some(52428800));
        assert_eq!(ram_in_bytes("1g"), Some(1 << 30));
        assert_eq!(ram_in_bytes("1.5k"), Some(1536));
        assert_eq!(ram_in_bytes("12q"), None);
        assert_eq!(ram_in_bytes("-5"), None);
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("100ms").unwrap(), Duration::from_millis(100));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("3 days").is_err());
    }
}

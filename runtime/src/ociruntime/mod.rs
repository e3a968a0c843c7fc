//! capsule as an OCI runtime: the runc command line (`capsule-runc`, a symlink to
//! `capsule`: the binary dispatches on argv[0]'s file name before anything else, so
//! `capsule exec` pays one comparison), which containerd's `io.containerd.runc.v2` shim
//! drives, and through it Kubernetes with a RuntimeClass (see `docs/oci.md`).
//!
//! Every decision is the container's plan's ([`crate::plan::container`]: config.json's
//! closed model, its seccomp compiler and one pure function from config.json and the
//! host's facts to the plan; re-exported here as [`spec`] and [`seccomp`]); the files
//! here gather the facts and carry the plan out, one file per concern: [`cli`] the
//! command line, [`bundle`] reading config.json, [`facts`] the host's facts, [`state`]
//! the state directory and the runtime spec's status, [`create`] the init and its
//! release by `start`, [`rootfs`] the container's root over capsule's setup root
//! (`linux::mounts`), [`process`] the process's last steps (Landlock over the writable
//! mounts, capabilities, user, seccomp), [`cgroup`] the container's cgroups (v1 here;
//! v2 basics), [`copyup`] the `tmpcopyup` of a tmpfs, [`hooks`], [`observe`], [`exec`]; the small operations (start, state,
//! kill, delete, ps, pause, resume, features) are here.
//!
//! Errors are one line, on stderr and, with `--log`, in the log file as runc writes it
//! (`--log-format json`: `{"level":"error","msg":…,"time":…}`), which is where the shim
//! reads the reason a `create` failed. Exit status 1 on error, 2 on a usage error.

pub mod bundle;
pub mod cli;
pub mod create;
pub mod detached;
pub mod diskguard;
pub mod events;
pub mod example;
pub mod exec;
pub mod facts;
pub mod help;
pub mod hooks;
pub mod listing;
pub mod observe;
pub mod process;
pub mod state;
pub mod update;

// the config model and the seccomp compiler are the plan's (pure, below the front end)
use crate::kernel::cgroup;
pub use crate::plan::container::{config as spec, seccomp};

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// argv[0] names the runtime: `capsule-runc` (any path).
pub fn is_runc(argv0: &std::ffi::OsStr) -> bool {
    Path::new(argv0)
        .file_name()
        .is_some_and(|n| n == "capsule-runc")
}

fn log(g: &cli::Global, level: &str, msg: &str) {
    if let Some(p) = &g.log {
        log_to(p, g.log_json, level, msg);
    }
}

/// One line in the log file `p`, as runc writes it (JSON, or logrus's text format).
pub fn log_to(p: &Path, json: bool, level: &str, msg: &str) {
    let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
    else {
        return;
    };
    let line = if json {
        serde_json::json!({"level": level, "msg": msg, "time": state::now_rfc3339()}).to_string()
    } else {
        format!(
            "time=\"{}\" level={level} msg={:?}",
            state::now_rfc3339(),
            msg
        )
    };
    let _ = writeln!(f, "{line}");
}

fn log_target(g: &cli::Global) -> Option<observe::LogTo> {
    g.log.clone().map(|path| observe::LogTo {
        path,
        json: g.log_json,
    })
}

/// The runtime's entry point (after argv[0] said so).
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (g, op) = match cli::parse(&args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("capsule-runc: {e}");
            return ExitCode::from(2);
        }
    };
    // exec's own failures are 255, apart from the process's statuses (as with runc)
    let failed = if matches!(op, cli::Op::Exec(_)) {
        255
    } else {
        1
    };
    match dispatch(&g, op) {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            log(&g, "error", &e);
            eprintln!("capsule-runc: {e}");
            ExitCode::from(failed)
        }
    }
}

fn dispatch(g: &cli::Global, op: cli::Op) -> Result<i32, String> {
    use cli::Op;
    let root = g.root();
    match op {
        Op::Help(topic) => {
            print!("{}", help::text(topic.as_deref())?);
            Ok(0)
        }
        Op::Version => {
            print!("{}", help::version());
            Ok(0)
        }
        Op::Spec { bundle, rootless } => example::write(bundle.as_deref(), rootless).map(|()| 0),
        Op::Features => {
            println!(
                "{}",
                serde_json::to_string_pretty(&features()).unwrap_or_default()
            );
            Ok(0)
        }
        Op::Create {
            id,
            bundle,
            pid_file,
            console_socket,
            preserve_fds,
        } => {
            no_preserved_fds(preserve_fds)?;
            create(g, &root, &id, &bundle, &pid_file, &console_socket)?;
            Ok(0)
        }
        Op::Run {
            id,
            bundle,
            pid_file,
            console_socket,
            preserve_fds,
            detach,
            keep,
        } => {
            no_preserved_fds(preserve_fds)?;
            create(g, &root, &id, &bundle, &pid_file, &console_socket)?;
            start(&root, &id)?;
            if detach {
                return Ok(0);
            }
            let s = state::load(&root, &id)?;
            // the init is our child: its status is the run's
            let mut st = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(s.pid, &mut st, 0) };
            if !keep {
                let _ = delete(&root, &id, true);
            }
            Ok(if libc::WIFEXITED(st) {
                libc::WEXITSTATUS(st)
            } else {
                128 + libc::WTERMSIG(st)
            })
        }
        Op::Start { id } => start(&root, &id).map(|()| 0),
        Op::State { id } => {
            let s = state::load(&root, &id)?;
            println!(
                "{}",
                serde_json::to_string_pretty(&s.container_state(&root))
                    .map_err(|e| e.to_string())?
            );
            Ok(0)
        }
        Op::Kill { id, signal, all } => kill(&root, &id, &signal, all).map(|()| 0),
        Op::Delete { id, force } => delete(&root, &id, force).map(|()| 0),
        Op::Exec(opts) => exec::run(&root, &opts),
        Op::Ps { id, json, args } => listing::ps(&root, &id, json, &args).map(|()| 0),
        Op::List { json, quiet } => listing::list(&root, json, quiet).map(|()| 0),
        Op::Update(u) => update::run(&root, &u).map(|()| 0),
        Op::Events {
            id,
            stats,
            interval,
        } => events::run(&root, &id, stats, interval).map(|()| 0),
        Op::Pause { id } => {
            let s = state::load(&root, &id)?;
            if s.status(&root) != "running" {
                return Err(format!("container {id} is not running"));
            }
            cgroup::container::freeze(&s.cgroups, true).map(|()| 0)
        }
        Op::Resume { id } => {
            let s = state::load(&root, &id)?;
            if s.status(&root) != "paused" {
                return Err(format!("container {id} is not paused"));
            }
            cgroup::container::freeze(&s.cgroups, false).map(|()| 0)
        }
    }
}

fn create(
    g: &cli::Global,
    root: &Path,
    id: &str,
    bundle: &Path,
    pid_file: &Option<std::path::PathBuf>,
    console_socket: &Option<std::path::PathBuf>,
) -> Result<(), String> {
    create::run(create::Args {
        root,
        id,
        bundle,
        pid_file: pid_file.as_deref(),
        console_socket: console_socket.as_deref(),
        systemd_cgroup: g.systemd_cgroup,
        log: log_target(g),
    })
}

fn start(root: &Path, id: &str) -> Result<(), String> {
    let s = state::load(root, id)?;
    let fifo = state::dir(root, id).join("exec.fifo");
    match s.status(root) {
        "created" => {}
        "stopped" => return Err(format!("container {id} is stopped")),
        other => return Err(format!("cannot start a container that is {other}")),
    }
    // opening for reading releases the init, which writes one byte
    let f = std::fs::OpenOptions::new()
        .read(true)
        .open(&fifo)
        .map_err(|e| format!("starting {id}: {e}"))?;
    let mut b = [0u8; 1];
    let n = std::io::Read::read(&mut &f, &mut b).map_err(|e| format!("starting {id}: {e}"))?;
    let _ = std::fs::remove_file(&fifo);
    if n != 1 {
        return Err(format!(
            "container {id}: the init ended before it was started"
        ));
    }
    if let Some(h) = &s.hooks {
        // as the runtime spec has it: the process started (it may have ended since)
        let mut st = s.spec_state(root);
        st["status"] = "running".into();
        st["pid"] = s.pid.into();
        if let Err(e) = hooks::run(&h.poststart, "poststart", &st) {
            log_warn(&e);
        }
    }
    Ok(())
}

/// `--preserve-fds` of create and run: only 0 (exec passes descriptors on).
fn no_preserved_fds(n: u32) -> Result<(), String> {
    if n == 0 {
        Ok(())
    } else {
        Err(format!(
            "--preserve-fds {n}: passing descriptors to a container's init is not supported"
        ))
    }
}

/// A system call's error as runc (Go) words it (the kernel stack's).
pub use crate::kernel::sys::os_error;

fn log_warn(e: &str) {
    eprintln!("capsule-runc: warning: {e}");
}

/// A signal by number or name (`9`, `KILL`, `SIGKILL`).
pub fn signal(s: &str) -> Result<i32, String> {
    if let Ok(n) = s.parse::<i32>() {
        return Ok(n);
    }
    let name = s.to_ascii_uppercase();
    let name = name.strip_prefix("SIG").unwrap_or(&name);
    let n = match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "STOP" => libc::SIGSTOP,
        "CONT" => libc::SIGCONT,
        "WINCH" => libc::SIGWINCH,
        "ALRM" => libc::SIGALRM,
        "PIPE" => libc::SIGPIPE,
        "CHLD" => libc::SIGCHLD,
        "ABRT" => libc::SIGABRT,
        "TSTP" => libc::SIGTSTP,
        _ => return Err(format!("unknown signal {s:?}")),
    };
    Ok(n)
}

fn kill(root: &Path, id: &str, sig: &str, all: bool) -> Result<(), String> {
    let s = state::load(root, id)?;
    let n = signal(sig)?;
    // frozen processes get a SIGKILL only once thawed
    let frozen = cgroup::container::is_frozen(&s.cgroups);
    if all {
        // the container's processes, not capsule's helpers beside them (they end when
        // the container's processes are gone, with their last lines said); none (a
        // stopped container) is no error, as with runc
        for p in detached::container_pids(&s.cgroups, &state::dir(root, id)) {
            // SAFETY: signalling a process of the container.
            unsafe { libc::kill(p, n) };
        }
    } else {
        if !s.alive() {
            return Err("container not running".into());
        }
        // SAFETY: signalling the container's init.
        if unsafe { libc::kill(s.pid, n) } < 0 {
            return Err(format!(
                "signalling {id}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    if frozen && n == libc::SIGKILL {
        let _ = cgroup::container::freeze(&s.cgroups, false);
    }
    Ok(())
}

fn delete(root: &Path, id: &str, force: bool) -> Result<(), String> {
    let s = match state::load(root, id) {
        Ok(s) => s,
        Err(e) if force && e.contains("does not exist") => {
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let status = s.status(root);
    if status != "stopped" && status != "created" && !force {
        return Err(format!(
            "cannot delete container {id} that is not stopped: {status}"
        ));
    }
    let dir = state::dir(root, id);
    let own = || detached::container_pids(&s.cgroups, &dir);
    if s.alive() || !own().is_empty() {
        for p in own() {
            // SAFETY: killing a process of the container.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        // SAFETY: killing the container's init.
        unsafe { libc::kill(s.pid, libc::SIGKILL) };
        let _ = cgroup::container::freeze(&s.cgroups, false);
        for _ in 0..500 {
            if !s.alive() && own().is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    // the observer's last lines (its summary in the log) before the state goes; then
    // whatever is left in the cgroups (a helper that did not end) before they go
    observe::wait_for(&dir);
    diskguard::wait_for(&dir);
    let _ = cgroup::container::freeze(&s.cgroups, false);
    for p in cgroup::container::all_pids(&s.cgroups) {
        // SAFETY: killing what is left in the container's cgroups.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    cgroup::container::remove(&s.cgroups);
    if let Some(h) = &s.hooks {
        let mut st = s.spec_state(root);
        st["status"] = "stopped".into();
        if let Err(e) = hooks::run(&h.poststop, "poststop", &st) {
            log_warn(&e);
        }
    }
    std::fs::remove_dir_all(state::dir(root, id))
        .map_err(|e| format!("removing the state of {id}: {e}"))
}

/// The runtime spec's features document.
fn features() -> serde_json::Value {
    let mut opts: Vec<&str> = [
        "ro",
        "rw",
        "nosuid",
        "suid",
        "nodev",
        "dev",
        "noexec",
        "exec",
        "sync",
        "async",
        "dirsync",
        "noatime",
        "atime",
        "nodiratime",
        "diratime",
        "relatime",
        "norelatime",
        "strictatime",
        "nostrictatime",
        "mand",
        "tmpcopyup",
        "nomand",
        "bind",
        "rbind",
        "silent",
        "loud",
        "private",
        "rprivate",
        "shared",
        "rshared",
        "slave",
        "rslave",
        "unbindable",
        "runbindable",
    ]
    .to_vec();
    opts.sort_unstable();
    serde_json::json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": "1.1.0",
        "hooks": ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"],
        "mountOptions": opts,
        "linux": {
            "namespaces": spec::NAMESPACES.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            "capabilities": caps::all().iter().map(|c| c.to_string()).collect::<std::collections::BTreeSet<_>>(),
            "cgroup": {"v1": !crate::kernel::cgroup::unified(), "v2": crate::kernel::cgroup::unified(), "systemd": false, "systemdUser": false},
            "seccomp": {
                "enabled": true,
                "actions": ["SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD", "SCMP_ACT_LOG", "SCMP_ACT_TRACE", "SCMP_ACT_TRAP"],
                "operators": ["SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_LE", "SCMP_CMP_LT", "SCMP_CMP_MASKED_EQ", "SCMP_CMP_NE"],
                "archs": [if cfg!(target_arch = "aarch64") { "SCMP_ARCH_AARCH64" } else { "SCMP_ARCH_X86_64" }],
            },
            "apparmor": {"enabled": crate::kernel::process::apparmor_enabled()},
            "selinux": {"enabled": false},
        },
        "annotations": {"dev.capsule.landlock": "the container may write only where its mounts are writable"},
    })
}

//! `exec`: another process in a running container (`ctr task exec`, `kubectl exec`).
//! It joins the init's namespaces (`setns`: the pid namespace by a fork), its cgroups,
//! gets the container's Landlock set and the bundle's seccomp filter (planned from the
//! config.json kept at create: [`crate::plan::container::confinement`]), its process's
//! own user, capabilities, limits and terminal ([`crate::plan::container::process`]),
//! then `execve`s. With `--detach` (what the
//! shim passes) capsule-runc exits once the process runs, its pid in `--pid-file`; the
//! process is then the shim's to reap. Without, capsule-runc waits and exits with its
//! status.

use super::spec::Process;
use super::{create, process, state};
use crate::kernel::{ns, sys};
use crate::plan::container as plan;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// `exec`'s options (runc's, each applied over the container's process as runc does).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOpts {
    pub id: String,
    pub process: Option<PathBuf>,
    pub args: Vec<String>,
    pub detach: bool,
    pub pid_file: Option<PathBuf>,
    pub console_socket: Option<PathBuf>,
    pub tty: bool,
    pub cwd: Option<String>,
    pub env: Vec<String>,
    /// `--user UID[:GID]`
    pub user: Option<(u32, Option<u32>)>,
    pub additional_gids: Vec<u32>,
    pub caps: Vec<String>,
    pub apparmor: Option<String>,
    pub process_label: Option<String>,
    /// `--no-new-privs` given (true or false)
    pub no_new_privs: Option<bool>,
    pub preserve_fds: u32,
    /// `--cgroup [CONTROLLERS:]PATH`, each as given
    pub cgroups: Vec<String>,
    pub ignore_paused: bool,
}

/// The process `exec` runs: `--process`'s file as it is, or the container's own process
/// with the command and the options over it, as runc applies them.
fn process_of(base: &Process, a: &ExecOpts) -> Result<Process, String> {
    if let Some(f) = &a.process {
        let b = std::fs::read(f).map_err(|e| format!("--process {}: {e}", f.display()))?;
        return serde_json::from_slice(&b).map_err(|e| format!("--process {}: {e}", f.display()));
    }
    if a.args.is_empty() {
        return Err("process args cannot be empty".into());
    }
    let mut p = base.clone();
    p.args = a.args.clone();
    p.terminal = a.tty;
    if let Some(c) = &a.cwd {
        p.cwd = c.clone();
    }
    p.env.extend(a.env.iter().cloned());
    if let Some((uid, gid)) = a.user {
        p.user.uid = uid;
        if let Some(g) = gid {
            p.user.gid = g;
        }
    }
    p.user
        .additional_gids
        .extend(a.additional_gids.iter().copied());
    if !a.caps.is_empty() {
        let c = p.capabilities.get_or_insert_with(Default::default);
        for cap in &a.caps {
            for set in [
                &mut c.bounding,
                &mut c.effective,
                &mut c.permitted,
                &mut c.ambient,
            ] {
                set.push(cap.clone());
            }
        }
    }
    if let Some(ap) = &a.apparmor {
        p.apparmor_profile = Some(ap.clone());
    }
    if let Some(l) = &a.process_label {
        p.selinux_label = Some(l.clone());
    }
    if let Some(n) = a.no_new_privs {
        p.no_new_privileges = n;
    }
    Ok(p)
}

pub fn run(root: &Path, a: &ExecOpts) -> Result<i32, String> {
    // the descriptors to pass on are the caller's: open before capsule-runc opened any
    // of its own (none of which can then take their numbers)
    for fd in 3..3 + a.preserve_fds {
        if !crate::kernel::sys::is_open(fd as i32) {
            return Err(format!(
                "--preserve-fds {}: descriptor {fd} is not open",
                a.preserve_fds
            ));
        }
    }
    let saved = state::load(root, &a.id)?;
    match saved.status(root) {
        "stopped" => return Err("cannot exec in a stopped container".into()),
        "paused" if !a.ignore_paused => {
            return Err(
                "cannot exec in a paused container (use --ignore-paused to override)".into(),
            )
        }
        _ => {}
    }
    // config.json as it was at create (kept in the state directory)
    let spec = super::bundle::load(&state::dir(root, &a.id))?;
    let base = spec.process.clone().ok_or("process: missing")?;
    let p = process_of(&base, a)?;
    if p.args.is_empty() {
        return Err("process.args: empty".into());
    }
    if p.terminal && a.console_socket.is_none() {
        return Err("process.terminal is true but no --console-socket was given".into());
    }
    if p.selinux_label.as_deref().is_some_and(|l| !l.is_empty()) {
        return Err("--process-label: SELinux labels are not supported".into());
    }
    // the cgroups the process joins: the container's, or sub-cgroups of them (--cgroup)
    let cg_dirs = crate::kernel::cgroup::container::sub_cgroups(&saved.cgroups, &a.cgroups)?;
    // the process's plan, and the container's confinement as create planned it
    let facts = super::facts::gather(false);
    let mut plan = plan::process(&p, &facts).map_err(|e| e.to_string())?;
    // the disk guard's budget, as create set it on the container's init: now's
    if let Ok(d) = crate::plan::container::disk::disk(&spec, &facts) {
        if d.reserve != crate::limits::DiskReserve::Off {
            if let Some(h) = crate::linux::diskguard::budget_of(&d.paths(&saved.rootfs), d.reserve)
            {
                super::diskguard::budget(&mut plan.rlimits, h);
            }
        }
    }
    let confine = plan::confinement(&spec, &facts).map_err(|e| e.to_string())?;
    let namespaces = ns::of_process(saved.pid).map_err(|e| e.to_string())?;
    let console = a
        .console_socket
        .as_deref()
        .map(create::console)
        .transpose()?;
    // the container's refusal observer, for this process too
    let observer = super::observe::connect(&state::dir(root, &a.id));
    // the pid namespace for the child to come
    for (fd, f, k) in &namespaces {
        if *f == libc::CLONE_NEWPID {
            ns::join(fd.as_raw_fd(), *f)
                .map_err(|e| format!("joining the container's {k} namespace: {e}"))?;
        }
    }
    let (err_r, err_w) = sys::pipe_owned().map_err(|e| format!("pipe: {e}"))?;
    let (go_r, go_w) = sys::pipe_owned().map_err(|e| format!("pipe: {e}"))?;
    // a single-threaded process
    let forked = ns::fork_into(libc::SIGCHLD as libc::c_long).map_err(|e| format!("fork: {e}"))?;
    if forked == ns::Forked::Child {
        drop(err_r);
        drop(go_w);
        let mut w = std::fs::File::from(err_w);
        let r = (|| -> Result<process::Prepared, String> {
            let mut b = [0u8; 1];
            if !matches!(std::fs::File::from(go_r).read(&mut b), Ok(1)) {
                return Err("exec ended before the process was released".into());
            }
            for (fd, f, k) in &namespaces {
                if *f == libc::CLONE_NEWPID {
                    continue;
                }
                ns::join(fd.as_raw_fd(), *f)
                    .map_err(|e| format!("joining the container's {k} namespace: {e}"))?;
            }
            // a session of its own (with a terminal: made by attaching it)
            if console.is_none() {
                ns::new_session();
            }
            if let Some(c) = &console {
                create::terminal(c.as_raw_fd(), plan.console_size, None)?;
            }
            process::setup(&plan)?;
            let mut prep = process::prepare(&plan, &confine)?;
            prep.observer = observer.as_ref().map(|o| o.as_raw_fd());
            prep.preserve_fds = a.preserve_fds;
            Ok(prep)
        })();
        let e = match r {
            Ok(prep) => process::finish(prep),
            Err(e) => e,
        };
        let _ = w.write_all(e.as_bytes());
        // SAFETY: leaving the child.
        unsafe { libc::_exit(127) }
    }
    let ns::Forked::Parent(pid) = forked else {
        unreachable!("the child never leaves its branch")
    };
    drop(err_w);
    drop(go_r);
    drop(console);
    drop(observer);
    let placed = crate::kernel::cgroup::container::enter(&cg_dirs, pid)
        .and_then(|()| process::rlimits(pid, &plan));
    if let Err(e) = placed {
        crate::kernel::process::kill_and_reap(pid);
        return Err(e);
    }
    let _ = std::fs::File::from(go_w).write_all(&[1]);
    let mut msg = String::new();
    let _ = std::fs::File::from(err_r).read_to_string(&mut msg);
    if !msg.is_empty() {
        crate::kernel::process::wait_status(pid);
        return Err(msg);
    }
    if let Some(pf) = &a.pid_file {
        if let Err(e) = std::fs::write(pf, pid.to_string()) {
            crate::kernel::process::kill_and_reap(pid);
            return Err(format!("--pid-file {}: {e}", pf.display()));
        }
    }
    if a.detach {
        return Ok(0);
    }
    Ok(crate::kernel::process::wait_status(pid))
}

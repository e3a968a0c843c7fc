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
use std::path::Path;

pub struct Args<'a> {
    pub root: &'a Path,
    pub id: &'a str,
    pub process: Option<&'a Path>,
    pub args: &'a [String],
    pub detach: bool,
    pub pid_file: Option<&'a Path>,
    pub console_socket: Option<&'a Path>,
    pub tty: bool,
    pub cwd: Option<&'a str>,
    pub env: &'a [String],
}

pub fn run(a: Args<'_>) -> Result<i32, String> {
    let saved = state::load(a.root, a.id)?;
    let status = saved.status(a.root);
    if status != "running" && status != "created" {
        return Err(format!("cannot exec in a container that is {status}"));
    }
    // config.json as it was at create (kept in the state directory)
    let spec = super::bundle::load(&state::dir(a.root, a.id))?;
    let base = spec.process.clone().ok_or("process: missing")?;
    let p: Process = match a.process {
        Some(f) => {
            let b = std::fs::read(f).map_err(|e| format!("--process {}: {e}", f.display()))?;
            serde_json::from_slice(&b).map_err(|e| format!("--process {}: {e}", f.display()))?
        }
        None => {
            if a.args.is_empty() {
                return Err("exec: no command given".into());
            }
            let mut p = base.clone();
            p.args = a.args.to_vec();
            p.terminal = a.tty;
            if let Some(c) = a.cwd {
                p.cwd = c.to_string();
            }
            p.env.extend(a.env.iter().cloned());
            p
        }
    };
    if p.args.is_empty() {
        return Err("process.args: empty".into());
    }
    if p.terminal && a.console_socket.is_none() {
        return Err("process.terminal is true but no --console-socket was given".into());
    }
    // the process's plan, and the container's confinement as create planned it
    let facts = super::facts::gather(false);
    let plan = plan::process(&p, &facts).map_err(|e| e.to_string())?;
    let confine = plan::confinement(&spec, &facts).map_err(|e| e.to_string())?;
    let namespaces = ns::of_process(saved.pid).map_err(|e| e.to_string())?;
    let console = a.console_socket.map(create::console).transpose()?;
    // the container's refusal observer, for this process too
    let observer = super::observe::connect(&state::dir(a.root, a.id));
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
                create::terminal(c.as_raw_fd(), plan.console_size, false)?;
            }
            process::setup(&plan)?;
            let mut prep = process::prepare(&plan, &confine)?;
            prep.observer = observer.as_ref().map(|o| o.as_raw_fd());
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
    let placed =
        super::cgroup::enter(&saved.cgroups, pid).and_then(|()| process::rlimits(pid, &plan));
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
    if let Some(pf) = a.pid_file {
        std::fs::write(pf, pid.to_string())
            .map_err(|e| format!("--pid-file {}: {e}", pf.display()))?;
    }
    if a.detach {
        return Ok(0);
    }
    Ok(crate::kernel::process::wait_status(pid))
}

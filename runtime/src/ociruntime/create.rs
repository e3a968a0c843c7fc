//! `create`: the container's init is cloned into its new namespaces, placed in its
//! cgroups, builds its root ([`super::rootfs`]), prepares its process
//! ([`super::process::prepare`]), tells `create` it is ready and blocks opening the
//! state directory's `exec.fifo` for writing; `start` opens it for reading, which
//! releases the init to its last steps and `execve`. `create` exits as soon as the init
//! is ready: the init is then a child of whoever reaps orphans (containerd's shim, a
//! subreaper), which is what the shim expects of the pid it reads from `--pid-file`.
//!
//! Errors of the init before it is ready come back over a pipe as one line and fail
//! `create`; after `start`, the init can only write its error to its stderr (the
//! container's) and exit 127, as runc does.

use super::state::{self, Saved};
use super::{hooks, observe, process, rootfs};
use crate::kernel::cgroup::container as cgroup;
use crate::kernel::ns;
use crate::plan::container::{container, ContainerPlan, Create};
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub struct Args<'a> {
    pub root: &'a Path,
    pub id: &'a str,
    pub bundle: &'a Path,
    pub pid_file: Option<&'a Path>,
    pub console_socket: Option<&'a Path>,
    pub systemd_cgroup: bool,
    /// containerd's `--log`, where the refusal observer says what it lists.
    pub log: Option<super::observe::LogTo>,
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 into a two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: two new descriptors of ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Connect to the console socket the caller listens on.
pub fn console(path: &Path) -> Result<OwnedFd, String> {
    let s = std::os::unix::net::UnixStream::connect(path)
        .map_err(|e| format!("--console-socket {}: {e}", path.display()))?;
    Ok(OwnedFd::from(s))
}

/// The container's pseudo-terminal: `pair` (made with the root, its slave bound at
/// `/dev/console`: [`rootfs::build`]) or, for `exec`, a pair on the running container's
/// own devpts (its `ptmx` checked to be one: the container may have put anything at its
/// path); its master goes over `sock` (what runc does: SCM_RIGHTS on the console socket)
/// and its slave becomes stdio.
pub fn terminal(
    sock: RawFd,
    size: Option<(u16, u16)>,
    pair: Option<(OwnedFd, OwnedFd)>,
) -> Result<(), String> {
    use std::os::fd::IntoRawFd;
    let (master, slave) = match pair {
        Some((m, s)) => (m.into_raw_fd(), s.into_raw_fd()),
        None => crate::linux::pty::open_here()
            .map_err(|e| format!("opening a terminal in the container: {e}"))?,
    };
    if let Some((h, w)) = size {
        let ws = libc::winsize {
            ws_row: h,
            ws_col: w,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ with a valid struct.
        unsafe { libc::ioctl(master, libc::TIOCSWINSZ, &ws) };
    }
    crate::kernel::sys::send_fds(sock, b"/dev/ptmx", &[master])
        .map_err(|e| format!("sending the terminal over the console socket: {e}"))?;
    crate::kernel::sys::close(master);
    crate::kernel::sys::close(sock);
    crate::linux::pty::Pty::attach_slave(slave)
        .map_err(|e| format!("attaching the terminal: {e}"))?;
    Ok(())
}

pub fn run(a: Args<'_>) -> Result<(), String> {
    let bundle = std::fs::canonicalize(a.bundle)
        .map_err(|e| format!("--bundle {}: {e}", a.bundle.display()))?;
    let spec = super::bundle::load(&bundle)?;
    // the container's plan: every decision, before anything is made
    let facts = super::facts::gather(true);
    let call = Create {
        id: a.id,
        bundle: &bundle,
        systemd_cgroup: a.systemd_cgroup,
        console_socket: a.console_socket.is_some(),
    };
    let mut plan = container(&spec, &call, &facts).map_err(|e| e.to_string())?;
    let rootfs = std::fs::canonicalize(&plan.rootfs)
        .map_err(|e| format!("root.path {}: {e}", plan.rootfs.display()))?;
    // the disk guard's first look: a filesystem below its reserve already fails here
    let guard = super::diskguard::prepare(&plan.disk, &rootfs)?;
    std::fs::create_dir_all(a.root).map_err(|e| format!("--root {}: {e}", a.root.display()))?;
    let dir = state::dir(a.root, a.id);
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(format!("container with id {} already exists", a.id))
        }
        Err(e) => return Err(format!("making {}: {e}", dir.display())),
    }
    // what exec reads later: config.json as it was at create (changes to the bundle's
    // after this step do not affect the container)
    let r = std::fs::copy(bundle.join("config.json"), dir.join("config.json"));
    if let Err(e) = r {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(format!("copying config.json into {}: {e}", dir.display()));
    }
    let mut cg_dirs = Vec::new();
    // capsule's own limits where the bundle sets none (CAPSULE_OCI_DEFAULTS=0: none),
    // and the disk guard's reserve when it is capsule's own
    let mut defaults = plan.cgroup.defaults.clone();
    if guard.is_some() && plan.disk.own {
        defaults.push(super::diskguard::show(plan.disk.reserve));
    }
    if let Some(h) = guard.as_ref().and_then(|g| g.headroom()) {
        super::diskguard::budget(&mut plan.process.rlimits, h);
        defaults.push(format!(
            "file_size={} (RLIMIT_FSIZE: the free space above the disk reserve, so that no single file takes a disk below it)",
            crate::limits::show_size(h)
        ));
    }
    let r = (|| {
        let (limits, devices) = (plan.cgroup.limits(), plan.cgroup.device_lines());
        let (dirs, without) = cgroup::setup(&cgroup::Setup {
            rel: &plan.cgroup.rel,
            hierarchies: &plan.cgroup.hierarchies,
            limits: &limits,
            devices: &devices,
            optional: plan.cgroup.optional,
        })?;
        cg_dirs = dirs;
        if let Some(why) = without {
            // rootless, and the bundle asks no limit: as runc, without cgroups, said
            defaults.retain(|d| !plan.cgroup.defaults.contains(d));
            crate::plan::container::without_own(&mut plan, crate::kernel::cgroup::own_path);
            if let Some(lg) = &a.log {
                super::log_to(
                    &lg.path,
                    lg.json,
                    "warning",
                    &format!(
                        "capsule: container {}: no cgroup (the runtime is rootless: {why}): capsule's default limits are not applied",
                        a.id
                    ),
                );
            }
        }
        spawn(&a, &plan, &bundle, &rootfs, &dir, &cg_dirs, &defaults)?;
        match guard {
            Some(g) => super::diskguard::start(g, a.root, a.id, a.log.as_ref()),
            None => Ok(()),
        }
    })();
    if r.is_ok() && !defaults.is_empty() {
        if let Some(lg) = &a.log {
            super::log_to(
                &lg.path,
                lg.json,
                "info",
                &format!(
                    "capsule: container {}: capsule's default limits where the bundle sets none: {}",
                    a.id,
                    defaults.join(", ")
                ),
            );
        }
    }
    if r.is_err() {
        cgroup::remove(&cg_dirs);
        let _ = std::fs::remove_dir_all(&dir);
    }
    r
}

fn spawn(
    a: &Args<'_>,
    plan: &ContainerPlan,
    bundle: &Path,
    rootfs: &Path,
    dir: &Path,
    cg_dirs: &[PathBuf],
    defaults: &[String],
) -> Result<(), String> {
    let p = &plan.process;
    let fifo = dir.join("exec.fifo");
    let cf = CString::new(fifo.as_os_str().as_bytes()).map_err(|_| "state path with NUL")?;
    // SAFETY: mkfifo of a C string path.
    if unsafe { libc::mkfifo(cf.as_ptr(), 0o622) } < 0 {
        return Err(format!(
            "making {}: {}",
            fifo.display(),
            std::io::Error::last_os_error()
        ));
    }
    // the init opens it for writing as the container's root: with a new user namespace,
    // that is the host id mapped to 0 (mkfifo's mode is cut by the umask)
    let (root_uid, root_gid) = plan.root_ids;
    // SAFETY: chown/chmod of the fifo just made in our own state directory.
    if unsafe {
        libc::chown(cf.as_ptr(), root_uid, root_gid) < 0 || libc::chmod(cf.as_ptr(), 0o622) < 0
    } {
        return Err(format!(
            "making {}: {}",
            fifo.display(),
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: open as O_PATH (no open of the fifo itself yet).
    let fifo_fd = unsafe { libc::open(cf.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fifo_fd < 0 {
        return Err(format!(
            "opening {}: {}",
            fifo.display(),
            std::io::Error::last_os_error()
        ));
    }
    let console = a.console_socket.map(console).transpose()?;
    // namespaces: new ones by clone flags, given ones joined (pid before the clone)
    let flags = plan.namespaces.new;
    let mut join: Vec<(OwnedFd, libc::c_int, String)> = Vec::new();
    for n in &plan.namespaces.join {
        let fd = std::fs::File::open(&n.path).map_err(|e| {
            format!(
                "linux.namespaces: {} namespace {}: {e}",
                n.typ,
                n.path.display()
            )
        })?;
        join.push((OwnedFd::from(fd), n.flag, n.typ.clone()));
    }
    if let Some((fd, _, _)) = join.iter().find(|(_, f, _)| *f == libc::CLONE_NEWPID) {
        // our children are born in it
        ns::join(fd.as_raw_fd(), libc::CLONE_NEWPID)
            .map_err(|e| format!("linux.namespaces: joining the pid namespace: {e}"))?;
    }
    let userns = plan.namespaces.userns;
    // the refusal observer's way in: a socket pair for the init, a socket for exec
    // (CAPSULE_OCI_OBSERVE=0 in capsule-runc's environment: none)
    let observed = plan.observe.is_some();
    let obs = if observed {
        let (mine, init) = crate::kernel::seccomp::listener_channel()
            .map_err(|e| format!("the refusal observer's socket pair: {e}"))?;
        Some((mine, init, observe::bind(dir)?))
    } else {
        None
    };
    let (err_r, err_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    let hostname = plan.hostname.clone();
    let domainname = plan.domainname.clone();
    // a fork into new namespaces (single-threaded here)
    let forked = ns::fork_into((flags | libc::SIGCHLD) as libc::c_long)
        .map_err(|e| format!("cloning the container's init into its namespaces: {e}"))?;
    if forked == ns::Forked::Child {
        drop(err_r);
        drop(go_w);
        let obs_init = obs.map(|(mine, init, listen)| {
            drop((mine, listen));
            init
        });
        let mut w = std::fs::File::from(err_w);
        let res = (|| -> Result<process::Prepared, String> {
            let mut b = [0u8; 1];
            let mut g = std::fs::File::from(go_r);
            if !matches!(g.read(&mut b), Ok(1)) {
                return Err("create ended before the init was released".into());
            }
            for (fd, f, typ) in &join {
                if *f == libc::CLONE_NEWPID {
                    continue;
                }
                ns::join(fd.as_raw_fd(), *f)
                    .map_err(|e| format!("linux.namespaces: joining the {typ} namespace: {e}"))?;
            }
            if userns {
                // root of the user namespace (the mappings are written by now): until
                // then the init's ids are unmapped there, and the filesystems it mounts
                // refuse to make anything (EOVERFLOW)
                ns::become_root().map_err(|e| {
                    format!("linux.uidMappings: becoming root of the user namespace (0 must be mapped): {e}")
                })?;
            }
            // a session of its own (with a terminal: made by attaching it)
            if console.is_none() {
                ns::new_session();
            }
            let pair = rootfs::build(plan, rootfs).map_err(|e| e.to_string())?;
            if let Some(h) = &hostname {
                crate::kernel::sys::sethostname(h.as_bytes())
                    .map_err(|e| format!("hostname {h:?}: {e}"))?;
            }
            if plan.loopback_up {
                crate::kernel::sys::loopback_up()
                    .map_err(|e| format!("linux.namespaces: network: bringing lo up: {e}"))?;
            }
            if let Some(d) = &domainname {
                crate::kernel::sys::setdomainname(d.as_bytes())
                    .map_err(|e| format!("domainname {d:?}: {e}"))?;
            }
            if let Some(c) = &console {
                terminal(c.as_raw_fd(), p.console_size, pair)?;
            }
            process::setup(p)?;
            hooks::run_inside(
                &plan.hooks.clone().unwrap_or_default().create_container,
                "createContainer",
            )?;
            let mut prep = process::prepare(p, &plan.confine)?;
            prep.observer = obs_init.as_ref().map(|o| o.as_raw_fd());
            Ok(prep)
        })();
        let prepared = match res {
            Ok(p) => p,
            Err(e) => {
                let _ = w.write_all(e.as_bytes());
                // SAFETY: leaving the child.
                unsafe { libc::_exit(1) }
            }
        };
        let _ = w.write_all(b"\0ready");
        drop(w);
        // blocks until `start` opens the fifo for reading
        let path = CString::new(format!("/proc/self/fd/{fifo_fd}")).unwrap_or_default();
        // SAFETY: open of our own descriptor's magic link.
        let f = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
        if f < 0 {
            eprintln!(
                "capsule-runc: waiting for start: {}",
                std::io::Error::last_os_error()
            );
            // SAFETY: leaving the child.
            unsafe { libc::_exit(127) }
        }
        // SAFETY: one byte to our own descriptor.
        unsafe {
            libc::write(f, b"0".as_ptr() as *const libc::c_void, 1);
            libc::close(f);
            libc::close(fifo_fd);
        }
        if let Err(e) = hooks::run_inside(
            &plan.hooks.clone().unwrap_or_default().start_container,
            "startContainer",
        ) {
            eprintln!("capsule-runc: {e}");
            // SAFETY: leaving the child.
            unsafe { libc::_exit(127) }
        }
        let e = process::finish(prepared);
        eprintln!("capsule-runc: {e}");
        // SAFETY: leaving the child.
        unsafe { libc::_exit(127) }
    }
    let ns::Forked::Parent(pid) = forked else {
        unreachable!("the child never leaves its branch")
    };
    drop(err_w);
    drop(go_r);
    let obs = obs.map(|(mine, init, listen)| {
        drop(init);
        (mine, listen)
    });
    // SAFETY: our own descriptor.
    unsafe { libc::close(fifo_fd) };
    drop(console);
    let kill = || {
        // SAFETY: killing and reaping our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    };
    let setup = (|| -> Result<(), String> {
        cgroup::enter(cg_dirs, pid)?;
        if flags & libc::CLONE_NEWUSER != 0 {
            id_maps(pid, plan)?;
        }
        process::rlimits(pid, p)
    })();
    if let Err(e) = setup {
        kill();
        return Err(e);
    }
    let (start_time, _) = state::proc_start(pid);
    let saved = Saved {
        id: a.id.to_string(),
        pid,
        start_time,
        bundle: bundle.to_path_buf(),
        rootfs: rootfs.to_path_buf(),
        created: state::now_rfc3339(),
        cgroups: cg_dirs.to_vec(),
        annotations: plan.annotations.clone(),
        hooks: plan.hooks.clone(),
        default_limits: defaults.to_vec(),
    };
    let hk = plan.hooks.clone().unwrap_or_default();
    let st = |status: &str| {
        let mut v = saved.spec_state(a.root);
        v["status"] = status.into();
        v["pid"] = pid.into();
        v
    };
    // prestart (deprecated) and createRuntime: in the runtime's namespaces, once the
    // container's exist; prestart sees `created`, as in runtime-spec 1.0 (its tools
    // check for it), createRuntime `creating`
    for (list, name, status) in [
        (&hk.prestart, "prestart", "created"),
        (&hk.create_runtime, "createRuntime", "creating"),
    ] {
        if let Err(e) = hooks::run(list, name, &st(status)) {
            kill();
            return Err(e);
        }
    }
    let mut go = std::fs::File::from(go_w);
    let _ = go.write_all(&[1]);
    let mut msg = Vec::new();
    let _ = std::fs::File::from(err_r).read_to_end(&mut msg);
    if msg != b"\0ready" {
        kill();
        let text = String::from_utf8_lossy(&msg).trim().to_string();
        return Err(if text.is_empty() {
            "the container's init ended before it was ready".into()
        } else {
            text
        });
    }
    if let (Some((mine, listen)), Some(watch)) = (obs, &plan.observe) {
        let allowed = observe::allowed(watch);
        let r = observe::spawn(
            dir,
            a.id,
            pid,
            start_time,
            allowed,
            mine,
            listen,
            a.log.clone(),
            cg_dirs,
            plan.disk.reserve,
        );
        if let Err(e) = r {
            kill();
            return Err(e);
        }
    }
    state::save(a.root, &saved)?;
    if let Some(pf) = a.pid_file {
        std::fs::write(pf, pid.to_string()).map_err(|e| {
            kill();
            format!("--pid-file {}: {e}", pf.display())
        })?;
    }
    Ok(())
}

fn id_maps(pid: libc::pid_t, l: &ContainerPlan) -> Result<(), String> {
    let maps = |m: &[super::spec::IdMapping]| -> Vec<ns::IdMap> {
        m.iter()
            .map(|m| ns::IdMap {
                inside: m.container_id,
                outside: m.host_id,
                size: m.size,
            })
            .collect()
    };
    ns::write_id_maps(pid, &maps(&l.uid_mappings), &maps(&l.gid_mappings), false).map_err(
        |(step, e)| match step {
            ns::MapStep::Gid => format!("linux.gidMappings: {e}"),
            _ => format!("linux.uidMappings: {e}"),
        },
    )
}

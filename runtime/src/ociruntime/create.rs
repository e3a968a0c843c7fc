//! `create`: the container's init is cloned into its new namespaces, placed in its
//! cgroups, sets itself up in the kernel stack's order ([`crate::kernel::setup`]: the
//! namespaces joined, its root built by [`crate::kernel::mount::container`], hostname,
//! loopback), prepares its process
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
use super::{hooks, observe, process};
use crate::kernel::cgroup::container as cgroup;
use crate::kernel::{mount, ns, setup, sys};
use crate::plan::container::{container, ContainerPlan, Create};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
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

/// Connect to the console socket the caller listens on.
pub fn console(path: &Path) -> Result<OwnedFd, String> {
    let s = std::os::unix::net::UnixStream::connect(path)
        .map_err(|e| format!("--console-socket {}: {e}", path.display()))?;
    Ok(OwnedFd::from(s))
}

/// The container's pseudo-terminal: `pair` (made with the root, its slave bound at
/// `/dev/console`: [`crate::kernel::mount::container::build`]) or, for `exec`, a pair on the running container's
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

/// What the container's init is handed at its clone.
struct Init<'a> {
    plan: &'a ContainerPlan,
    rootfs: &'a Path,
    /// The namespaces it joins by `path` (the pid one joined before the clone).
    join: Vec<(OwnedFd, libc::c_int, String)>,
    console: Option<OwnedFd>,
    /// Its end of the refusal observer's socket pair.
    observer: Option<OwnedFd>,
    /// The state directory's `exec.fifo` (`O_PATH`): opened for writing, it blocks until
    /// `start`.
    fifo: OwnedFd,
    /// Where it says it is ready, or why not.
    report: Option<OwnedFd>,
    /// The go-ahead: its maps, cgroups and limits are in place.
    go: Option<OwnedFd>,
}

/// `create`'s steps after the cgroups are made: the exec fifo, the namespaces to join,
/// the observer's channel, the init cloned; then, on this side, the init placed in its
/// cgroups with its id maps and limits, the hooks of the runtime's namespaces, the init
/// released and its readiness awaited, the observer started, the state saved.
fn spawn(
    a: &Args<'_>,
    plan: &ContainerPlan,
    bundle: &Path,
    rootfs: &Path,
    dir: &Path,
    cg_dirs: &[PathBuf],
    defaults: &[String],
) -> Result<(), String> {
    let fifo = exec_fifo(dir, plan.root_ids)?;
    let console = a.console_socket.map(console).transpose()?;
    let join = namespaces_to_join(plan)?;
    // the refusal observer's way in: a socket pair for the init, a socket for exec
    // (CAPSULE_OCI_OBSERVE=0 in capsule-runc's environment: none)
    let obs = match &plan.observe {
        Some(_) => {
            let (mine, init) = crate::kernel::seccomp::listener_channel()
                .map_err(|e| format!("the refusal observer's socket pair: {e}"))?;
            Some((mine, init, observe::bind(dir)?))
        }
        None => None,
    };
    let (err_r, err_w) = sys::pipe_owned().map_err(|e| format!("pipe: {e}"))?;
    let (go_r, go_w) = sys::pipe_owned().map_err(|e| format!("pipe: {e}"))?;
    let (obs_mine, obs_init) = match obs {
        Some((mine, init, listen)) => (Some((mine, listen)), Some(init)),
        None => (None, None),
    };
    let init = Init {
        plan,
        rootfs,
        join,
        console,
        observer: obs_init,
        fifo,
        report: Some(err_w),
        go: Some(go_r),
    };
    // a fork into new namespaces (single-threaded here)
    let forked = ns::fork_into((plan.namespaces.new | libc::SIGCHLD) as libc::c_long)
        .map_err(|e| format!("cloning the container's init into its namespaces: {e}"))?;
    let pid = match forked {
        ns::Forked::Child => {
            drop((err_r, go_w, obs_mine));
            init_main(init)
        }
        ns::Forked::Parent(pid) => pid,
    };
    drop(init);
    let kill = || crate::kernel::process::kill_and_reap(pid);
    if let Err(e) = place(pid, plan, cg_dirs) {
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
    let ready = runtime_hooks(a.root, &saved, plan)
        .and_then(|()| release(go_w, err_r))
        .and_then(|()| match (obs_mine, &plan.observe) {
            (Some((mine, listen)), Some(watch)) => observe::spawn(
                dir,
                a.id,
                pid,
                start_time,
                observe::allowed(watch),
                mine,
                listen,
                a.log.clone(),
                cg_dirs,
                plan.disk.reserve,
            ),
            _ => Ok(()),
        })
        .and_then(|()| state::save(a.root, &saved))
        .and_then(|()| match a.pid_file {
            Some(pf) => std::fs::write(pf, pid.to_string())
                .map_err(|e| format!("--pid-file {}: {e}", pf.display())),
            None => Ok(()),
        });
    if ready.is_err() {
        kill();
    }
    ready
}

/// The state directory's `exec.fifo`, made for the init to open for writing as the
/// container's root (with a new user namespace, the host ids mapped to 0), and opened
/// `O_PATH` (no open of the fifo itself yet).
fn exec_fifo(dir: &Path, (uid, gid): (u32, u32)) -> Result<OwnedFd, String> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let fifo = dir.join("exec.fifo");
    let made = (|| {
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o622))?;
        std::os::unix::fs::chown(&fifo, Some(uid), Some(gid))?;
        // mkfifo's mode is cut by the umask
        std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o622))?;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(&fifo)
    })();
    made.map(OwnedFd::from)
        .map_err(|e: std::io::Error| format!("making {}: {e}", fifo.display()))
}

/// The namespaces the bundle gives by `path`, opened; the pid one joined now (a process
/// cannot enter one itself: its children are born in it).
fn namespaces_to_join(plan: &ContainerPlan) -> Result<Vec<(OwnedFd, libc::c_int, String)>, String> {
    let mut join = Vec::new();
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
        ns::join(fd.as_raw_fd(), libc::CLONE_NEWPID)
            .map_err(|e| format!("linux.namespaces: joining the pid namespace: {e}"))?;
    }
    Ok(join)
}

/// The init placed from outside, before it is released: into its cgroups, its user
/// namespace's id maps, its resource limits.
fn place(pid: libc::pid_t, plan: &ContainerPlan, cg_dirs: &[PathBuf]) -> Result<(), String> {
    cgroup::enter(cg_dirs, pid)?;
    if plan.namespaces.new & libc::CLONE_NEWUSER != 0 {
        id_maps(pid, plan)?;
    }
    process::rlimits(pid, &plan.process)
}

/// prestart (deprecated) and createRuntime: in the runtime's namespaces, once the
/// container's exist; prestart sees `created`, as in runtime-spec 1.0 (its tools check
/// for it), createRuntime `creating`.
fn runtime_hooks(root: &Path, saved: &Saved, plan: &ContainerPlan) -> Result<(), String> {
    let hk = plan.hooks.clone().unwrap_or_default();
    for (list, name, status) in [
        (&hk.prestart, "prestart", "created"),
        (&hk.create_runtime, "createRuntime", "creating"),
    ] {
        let mut st = saved.spec_state(root);
        st["status"] = status.into();
        st["pid"] = saved.pid.into();
        hooks::run(list, name, &st)?;
    }
    Ok(())
}

/// The go-ahead to the init, then its word: ready, or why not.
fn release(go: OwnedFd, report: OwnedFd) -> Result<(), String> {
    let _ = std::fs::File::from(go).write_all(&[1]);
    let mut msg = Vec::new();
    let _ = std::fs::File::from(report).read_to_end(&mut msg);
    if msg == b"\0ready" {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&msg).trim().to_string();
    Err(if text.is_empty() {
        "the container's init ended before it was ready".into()
    } else {
        text
    })
}

/// The container's init: its setup in the kernel stack's order, its process prepared,
/// ready said; then, once `start` opens the fifo, the startContainer hooks and the last
/// steps. Never returns (`init` lives until the `execve`: its descriptors are the
/// process's until then).
fn init_main(mut init: Init<'_>) -> ! {
    let Some(report) = init.report.take() else {
        exit(1)
    };
    let mut w = std::fs::File::from(report);
    let prepared = match init_setup(&mut init) {
        Ok(p) => p,
        Err(e) => {
            let _ = w.write_all(e.as_bytes());
            exit(1)
        }
    };
    let _ = w.write_all(b"\0ready");
    drop(w);
    let plan = init.plan;
    if let Err(e) = wait_for_start(&init.fifo) {
        eprintln!("capsule-runc: waiting for start: {e}");
        exit(127)
    }
    if let Err(e) = hooks::run_inside(
        &plan.hooks.clone().unwrap_or_default().start_container,
        "startContainer",
    ) {
        eprintln!("capsule-runc: {e}");
        exit(127)
    }
    let e = process::finish(prepared);
    eprintln!("capsule-runc: {e}");
    exit(127)
}

fn exit(code: i32) -> ! {
    // SAFETY: leaving the child without the parent's atexit handlers and buffers.
    unsafe { libc::_exit(code) }
}

/// The init's steps before it is ready: the go-ahead awaited, the namespaces, root,
/// hostname and loopback ([`setup::setup`]), the terminal, its process settled, the
/// createContainer hooks, its last steps prepared.
fn init_setup(init: &mut Init<'_>) -> Result<process::Prepared, String> {
    let (plan, p) = (init.plan, &init.plan.process);
    let mut b = [0u8; 1];
    let released = init
        .go
        .take()
        .is_some_and(|go| matches!(std::fs::File::from(go).read(&mut b), Ok(1)));
    if !released {
        return Err("create ended before the init was released".into());
    }
    let join: Vec<setup::Join<'_>> = init
        .join
        .iter()
        .filter(|(_, f, _)| *f != libc::CLONE_NEWPID)
        .map(|(fd, f, typ)| (fd.as_raw_fd(), *f, typ.as_str()))
        .collect();
    let steps = setup::Setup {
        join: &join,
        // root of the user namespace (the mappings are written by now): until then the
        // init's ids are unmapped there, and the filesystems it mounts refuse to make
        // anything (EOVERFLOW)
        become_root: plan.namespaces.userns,
        cgroups: &[],
        // a session of its own (with a terminal: made by attaching it)
        new_session: init.console.is_none(),
        hostname: plan.hostname.as_deref().map(str::as_bytes),
        domainname: plan.domainname.as_deref().map(str::as_bytes),
        loopback: plan.loopback_up,
    };
    let pair = setup::setup(&steps, || {
        mount::container::build(&mount::container::Root {
            rootfs: init.rootfs,
            mounts: &plan.mounts,
            devices: &plan.devices,
            bind_devices: plan.bind_devices,
            console: plan.console,
            sysctl: &plan.sysctl,
            masked_paths: &plan.masked_paths,
            readonly_paths: &plan.readonly_paths,
            read_only: plan.root_readonly,
            propagation: plan.rootfs_propagation,
        })
    })
    .map_err(|e| setup_field(&e, plan))?;
    if let Some(c) = &init.console {
        terminal(c.as_raw_fd(), p.console_size, pair)?;
    }
    process::setup(p)?;
    hooks::run_inside(
        &plan.hooks.clone().unwrap_or_default().create_container,
        "createContainer",
    )?;
    let mut prep = process::prepare(p, &plan.confine)?;
    prep.observer = init.observer.as_ref().map(|o| o.as_raw_fd());
    Ok(prep)
}

/// A failed setup step, named by the field of config.json it carries out.
fn setup_field(e: &setup::SetupError, plan: &ContainerPlan) -> String {
    use setup::SetupError as E;
    match e {
        E::Join { kind, error } => {
            format!("linux.namespaces: joining the {kind} namespace: {error}")
        }
        E::BecomeRoot(error) => format!(
            "linux.uidMappings: becoming root of the user namespace (0 must be mapped): {error}"
        ),
        E::Hostname(error) => format!(
            "hostname {:?}: {error}",
            plan.hostname.as_deref().unwrap_or("")
        ),
        E::Domainname(error) => {
            format!(
                "domainname {:?}: {error}",
                plan.domainname.as_deref().unwrap_or("")
            )
        }
        E::Loopback(error) => format!("linux.namespaces: network: bringing lo up: {error}"),
        other => other.to_string(),
    }
}

/// Block until `start` opens the fifo for reading, then leave it a byte.
fn wait_for_start(fifo: &OwnedFd) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/self/fd/{}", fifo.as_raw_fd()))?;
    f.write_all(b"0")
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

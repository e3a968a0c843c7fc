//! The sandbox's init (pid 1 of its pid namespace) and the command's last steps before
//! `execve`.
//!
//! Init builds the root, brings loopback up, forks the command, runs the inside hooks,
//! releases the command, then reaps and forwards signals. When the command ends it kills
//! everything left in the namespace (double-forked daemons included) and exits with the
//! command's status; if `capsule` dies, `PR_SET_PDEATHSIG` kills init and with it the
//! namespace. Under weaker isolation (no pid namespace) init is a child subreaper and
//! kills the descendants it can find.
//!
//! Everything here runs between `clone` and `execve` of a single-threaded process; errors
//! go to the report pipe as one JSON line and the process `_exit`s.

use super::hooks::Hooks;
use super::report::{Applied, Report};
use super::{mounts, plan::Isolation, plan::Stdio, ExecPlan};
use crate::kernel::sys;
use crate::kernel::{landlock as ll, process, rlimit, seccomp::SeccompProgram, setup};
use nix::sys::signal::SigSet;
use std::ffi::CString;
use std::os::fd::RawFd;

/// `/dev/null` opened read-write by a warm spare before it enforced its layers
/// ([`super::warm`]), taken by init for its own standard descriptors; -1: none.
pub(crate) static DEV_NULL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// What init needs, all prepared before `clone`.
pub struct Ctx<'a> {
    pub plan: &'a ExecPlan,
    pub argv: &'a [CString],
    pub envp: &'a [CString],
    pub report: RawFd,
    pub sync: RawFd,
    /// Console socket (`-t`): init sends the master of the pair it opens inside.
    pub pty_sock: Option<RawFd>,
    pub old_mask: &'a SigSet,
    pub seccomp: Option<&'a SeccompProgram>,
    /// The sandbox's end of the seccomp listener's channel ([`super::notify`]): the
    /// command sends the listener of the filter it installs there.
    pub notify: Option<RawFd>,
    pub namespaces: &'a [&'static str],
    /// When the caller started `run` (for debug timings).
    pub t0: std::time::Instant,
    /// How the root comes to be.
    pub root: Root<'a>,
    /// The files init moves itself into this exec's cgroups by, before it forks anything
    /// ([`crate::kernel::cgroup::open_self_moves`]; none for a warm spare, which waits in its
    /// groups already).
    pub cgroup_self: &'a [RawFd],
    /// The host's `/dev/fuse` (`O_PATH`, [`super::fusemask::device`]) when the plan has
    /// watched masks and init mounts them; -1: none.
    pub fuse_dev: RawFd,
}

/// How init gets its root.
pub enum Root<'a> {
    /// Build it from the plan's mount steps (fresh namespaces).
    Build,
    /// In a copy of a prepared root's mount namespace ([`super::prepared`]): only the
    /// per-exec mounts are made; Landlock comes as a ruleset.
    Joined(&'a Joined),
    /// A warm spare of a prepared root: namespaces, root, hostname and loopback are in
    /// place; capsule is not our parent and is watched through its pidfd instead.
    Warm(&'a Warm),
}

/// What a join hands over: the holder's namespaces and this exec's own Landlock ruleset.
#[derive(Debug)]
pub struct Joined {
    pub userns: std::os::fd::OwnedFd,
    pub mntns: std::os::fd::OwnedFd,
    /// A fresh ruleset with the rules collected in the prepared root (`None`: no Landlock).
    pub ruleset: Option<std::os::fd::OwnedFd>,
    /// The Landlock report of those rules (JSON of [`ll::LandlockReport`]).
    pub landlock: serde_json::Value,
    /// Rules left out because their paths are this exec's own mounts: add them again.
    pub again: Vec<ll::PathRule>,
}

/// What a warm spare holds for the exec it will serve.
pub struct Warm {
    /// capsule's pidfd: readable when capsule has ended, which ends the sandbox.
    pub capsule: RawFd,
    /// The command's `layers` report ([`PreLayers::report_line`]): the layers the spare
    /// enforced on itself before the request, which the command, forked from it, inherits.
    pub report_line: Vec<u8>,
}

/// Layers a warm spare enforced on itself before its request ([`Warm::report_line`]): no
/// capabilities, `no_new_privs`, Landlock and seccomp. Their reports, for the record.
pub struct PreLayers {
    pub landlock: serde_json::Value,
    pub seccomp: serde_json::Value,
}

impl PreLayers {
    /// The `layers` report line of a command forked from a warm spare holding these layers
    /// (all of it is known before the request: the command sends these bytes as they are).
    pub fn report_line(&self, plan: &ExecPlan, namespaces: &[&str]) -> Vec<u8> {
        let applied = Applied {
            isolation: if plan.landlock_best_effort {
                "weaker"
            } else {
                "full"
            }
            .into(),
            namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
            landlock: self.landlock.clone(),
            seccomp: self.seccomp.clone(),
            capabilities:
                "none (bounding, ambient, permitted, effective, inheritable sets emptied)".into(),
            no_new_privs: true,
            root: "prepared".into(),
            plan_digest: String::new(),
        };
        let mut line = serde_json::to_vec(&Report::Layers { applied }).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

impl Root<'_> {
    /// The prepared Landlock ruleset, its report and the rules to add again, if any.
    fn landlock(
        &self,
    ) -> Option<(
        std::os::fd::BorrowedFd<'_>,
        &serde_json::Value,
        &[ll::PathRule],
    )> {
        use std::os::fd::AsFd;
        match self {
            Root::Build => None,
            Root::Joined(j) => j
                .ruleset
                .as_ref()
                .map(|r| (r.as_fd(), &j.landlock, j.again.as_slice())),
            // enforced by the spare already
            Root::Warm(_) => None,
        }
    }
}

/// The signal the host sends init under weaker isolation to end everything (timeout).
pub(crate) fn kill_all_signal() -> libc::c_int {
    libc::SIGRTMIN() + 2
}

fn exit(code: i32) -> ! {
    // SAFETY: _exit never returns and skips the parent's atexit handlers and buffers.
    unsafe { libc::_exit(code) }
}

fn send(fd: RawFd, r: &Report) {
    if let Ok(mut line) = serde_json::to_vec(r) {
        line.push(b'\n');
        let _ = sys::write_all(fd, &line);
    }
}

fn fail(fd: RawFd, step: String) -> ! {
    send(fd, &Report::SetupFailed { step });
    exit(crate::exit::SANDBOX_FAILED as i32)
}

/// Init's body; never returns.
pub fn main(cx: Ctx<'_>, hooks: Hooks) -> ! {
    let full = cx.plan.isolation == Isolation::Full;
    // capsule's death: under full isolation init's own death ends the pid namespace;
    // without one, init must first kill what the command left behind (its children and
    // double-forked daemons re-parented to us), as on a timeout: kill_all_signal, handled
    // in `supervise`, then `kill_rest`
    let deathsig = if full {
        libc::SIGKILL
    } else {
        kill_all_signal()
    };
    if !matches!(cx.root, Root::Warm(_)) {
        let _ = sys::prctl(libc::PR_SET_PDEATHSIG, deathsig as libc::c_ulong, 0);
    }
    // the parent writes our id maps, then one byte; end of file means it died
    let mut b = [0u8; 1];
    if !matches!(sys::read(cx.sync, &mut b), Ok(1)) {
        exit(crate::exit::SANDBOX_FAILED as i32);
    }
    // into this exec's cgroups while we are single-threaded and before anything is forked
    // (what init starts is born there), then the root, the hostname and loopback
    let builds = full && !matches!(cx.root, Root::Warm(_));
    let steps = setup::Setup {
        cgroups: cx.cgroup_self,
        hostname: builds.then_some(cx.plan.hostname.as_bytes()),
        // `--no-network`: loopback stays down (and Landlock refuses TCP as well)
        loopback: builds && cx.plan.new_netns && !cx.plan.network_off,
        ..Default::default()
    };
    let built = setup::setup(&steps, || {
        if !builds {
            return Ok(());
        }
        match cx.root {
            Root::Joined(_) => mounts::exec_mounts(&cx.plan.mounts)?,
            _ => mounts::build_root(&cx.plan.mounts)?,
        }
        // the watched masks, to capsule before anything is forked (the command never
        // holds their connections)
        if cx.fuse_dev >= 0 {
            let masks = super::fusemask::mount(&cx.plan.watched, cx.fuse_dev);
            sys::close(cx.fuse_dev);
            if let Some(sock) = cx.notify {
                super::fusemask::send(sock, masks);
            }
        }
        Ok(())
    });
    if let Err(e) = built {
        fail(cx.report, e.to_string());
    }
    if !builds {
        if let Err(e) = sys::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0) {
            fail(cx.report, format!("becoming a subreaper: {e}"));
        }
    }

    let mut pty_slave = None;
    if let Some(sock) = cx.pty_sock {
        match super::pty::open_here() {
            Ok((master, slave)) => {
                if let Err(e) = super::pty::send_fd(sock, master) {
                    fail(cx.report, format!("handing the terminal to capsule: {e}"));
                }
                sys::close(master);
                pty_slave = Some(slave);
            }
            Err(e) => fail(
                cx.report,
                format!("opening a pseudo-terminal in the sandbox: {e}"),
            ),
        }
        sys::close(sock);
    }
    tracing::debug!("init: root built: {:?}", cx.t0.elapsed());
    let (go_r, go_w) = match sys::pipe() {
        Ok(p) => p,
        Err(e) => fail(cx.report, format!("pipe: {e}")),
    };
    // a warm spare runs no hooks inside: its command takes capsule's go-ahead itself (one
    // wake-up less on the way to execve), and init is made non-dumpable before the fork
    let warm = matches!(cx.root, Root::Warm(_)) && hooks.inside.is_empty();
    if warm {
        let _ = sys::prctl(libc::PR_SET_DUMPABLE, 0, 0);
    }
    // init's signals are blocked before the fork (the command restores its own mask)
    init_signals();
    // SAFETY: fork in a single-threaded process.
    let child = unsafe { libc::fork() };
    if child < 0 {
        fail(
            cx.report,
            format!("forking the command: {}", std::io::Error::last_os_error()),
        );
    }
    if child == 0 {
        sys::close(go_w);
        if warm {
            sys::close(go_r);
            command(&cx, cx.sync, pty_slave)
        }
        command(&cx, go_r, pty_slave)
    }
    sys::close(go_r);
    if warm {
        sys::close(go_w);
        sys::close(cx.sync);
    }
    if let Some(s) = pty_slave {
        sys::close(s);
    }
    // the command's stdio is the command's: init keeps no end of it open (a reader of the
    // command's output sees its end when the command's processes are gone, not when init
    // is, after the namespaces' teardown)
    // SAFETY: opening /dev/null and dup2 onto our own standard descriptors.
    unsafe {
        // a warm spare opened it before its layers held it (an open for writing under
        // them is observed by capsule's seccomp supervisor: a round trip per exec)
        let pre = DEV_NULL.swap(-1, std::sync::atomic::Ordering::Relaxed);
        let null = if pre >= 0 {
            pre
        } else {
            libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC)
        };
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
    if let Stdio::Redirect { stdout, stderr } = cx.plan.stdio {
        for fd in [stdout, stderr] {
            if fd > 2 {
                sys::close(fd);
            }
        }
    }
    // the prepared root's descriptors are the command's business now, not init's
    if let Root::Joined(j) = cx.root {
        use std::os::fd::AsRawFd;
        sys::close(j.userns.as_raw_fd());
        sys::close(j.mntns.as_raw_fd());
        if let Some(r) = &j.ruleset {
            sys::close(r.as_raw_fd());
        }
    }
    for h in hooks.inside {
        if let Err(e) = h() {
            // SAFETY: killing our own child.
            unsafe { libc::kill(child, libc::SIGKILL) };
            fail(
                cx.report,
                format!("starting a helper inside the sandbox: {e}"),
            );
        }
    }
    if !warm {
        // the caller's go-ahead (it may have work to finish first); end of file: it died
        let mut b = [0u8; 1];
        if !matches!(sys::read(cx.sync, &mut b), Ok(1)) {
            // SAFETY: killing our own child.
            unsafe { libc::kill(child, libc::SIGKILL) };
            exit(crate::exit::SANDBOX_FAILED as i32);
        }
        sys::close(cx.sync);
        tracing::debug!("init: go-ahead: {:?}", cx.t0.elapsed());
        // nothing in the sandbox may ptrace or read init's memory: set before the command
        // runs
        let _ = sys::prctl(libc::PR_SET_DUMPABLE, 0, 0);
        let _ = sys::write_all(go_w, &[1]);
        sys::close(go_w);
    }
    supervise(&cx, child, full)
}

/// The signals init handles (through a signalfd): blocked before the command is forked,
/// so that a command ending at once cannot make its SIGCHLD go unseen.
fn init_signals() -> libc::sigset_t {
    // SAFETY: building a signal set on the stack and blocking it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [
            libc::SIGCHLD,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGWINCH,
            kill_all_signal(),
        ] {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn supervise(cx: &Ctx<'_>, child: libc::pid_t, full: bool) -> ! {
    let set = init_signals();
    // SAFETY: a signalfd on the blocked set.
    let sfd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if sfd < 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: killing our own child.
        unsafe { libc::kill(child, libc::SIGKILL) };
        fail(cx.report, format!("signalfd: {e}"));
    }
    // a warm spare's capsule is not its parent (no PDEATHSIG): its end is ours too
    let capsule = match cx.root {
        Root::Warm(w) => w.capsule,
        _ => -1,
    };
    let mut main_status: Option<libc::c_int> = None;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: sfd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: capsule,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // a periodic look at the children as well, whatever the signals say
        // SAFETY: two valid pollfds (a negative fd is ignored).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 250) };
        if n > 0 && fds[1].revents != 0 {
            // SAFETY: killing our own child; then everything else.
            unsafe { libc::kill(child, libc::SIGKILL) };
            kill_rest(full);
            exit(crate::exit::SANDBOX_FAILED as i32);
        }
        loop {
            // SAFETY: signalfd_siginfo is plain data.
            let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            // SAFETY: reading one record into a buffer of its size.
            let buf = unsafe {
                std::slice::from_raw_parts_mut(
                    &mut info as *mut libc::signalfd_siginfo as *mut u8,
                    std::mem::size_of::<libc::signalfd_siginfo>(),
                )
            };
            if !matches!(sys::read(sfd, buf), Ok(k) if k == std::mem::size_of::<libc::signalfd_siginfo>())
            {
                break;
            }
            let sig = info.ssi_signo as libc::c_int;
            if sig == kill_all_signal() {
                // SAFETY: killing our own child.
                unsafe { libc::kill(child, libc::SIGKILL) };
            } else if sig != libc::SIGWINCH && sig != libc::SIGCHLD {
                // SAFETY: forwarding to our own child.
                unsafe { libc::kill(child, sig) };
            }
        }
        loop {
            let mut st = 0;
            // SAFETY: reaping our children.
            let w = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
            if w <= 0 {
                break;
            }
            if w == child {
                main_status = Some(st);
            }
        }
        if main_status.is_some() {
            break;
        }
    }
    tracing::debug!("init: command ended: {:?}", cx.t0.elapsed());
    kill_rest(full);
    tracing::debug!("init: the rest killed: {:?}", cx.t0.elapsed());
    let st = main_status.unwrap_or(0);
    // everything else is dead and reaped: capsule need not wait for the namespaces'
    // teardown that follows our exit
    let code = if libc::WIFSIGNALED(st) {
        let s = libc::WTERMSIG(st);
        send(cx.report, &Report::Signaled { signal: s });
        128 + s
    } else {
        libc::WEXITSTATUS(st)
    };
    send(cx.report, &Report::Ended { code });
    if capsule >= 0 {
        // a warm spare's end tears down its namespaces (network, mounts: CPU work and RCU
        // grace periods); capsule, which has what it needs, finishes its record first
        linger_until_gone(capsule);
    }
    exit(code)
}

/// Wait (up to [`LINGER`]) for capsule, whose pidfd is `capsule`, to end. Nothing of the
/// sandbox runs any more: only init is left, and it makes no further report.
fn linger_until_gone(capsule: RawFd) {
    let mut p = libc::pollfd {
        fd: capsule,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, LINGER.as_millis() as libc::c_int) };
}

/// How long a warm spare's init waits for capsule after the command's end.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// Kill and reap every process left: the whole pid namespace under full isolation, the
/// descendants we can see (as their subreaper) otherwise.
fn kill_rest(full: bool) {
    if full {
        // SAFETY: pid 1 killing every other process of its namespace.
        unsafe { libc::kill(-1, libc::SIGKILL) };
        // SAFETY: reaping until no child is left.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) } > 0 {}
        return;
    }
    for _ in 0..64 {
        let pids = children();
        if pids.is_empty() {
            break;
        }
        for p in &pids {
            // SAFETY: killing our own children (re-parented to us as subreaper).
            unsafe { libc::kill(*p, libc::SIGKILL) };
        }
        for _ in &pids {
            // SAFETY: reaping.
            unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) };
        }
    }
}

fn children() -> Vec<libc::pid_t> {
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    std::fs::read_to_string(format!("/proc/{me}/task/{me}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// The command's process: last steps, then `execve`. Never returns.
fn command(cx: &Ctx<'_>, go: RawFd, pty_slave: Option<RawFd>) -> ! {
    let plan = cx.plan;
    let rep = cx.report;
    if plan.isolation != Isolation::Full {
        // without a pid namespace, our death must take the command with it
        let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0);
    }
    // SAFETY: resetting dispositions the Rust runtime changed (SIGPIPE is ignored there).
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    if plan.stdio == Stdio::Tty {
        if let Some(s) = pty_slave {
            if let Err(e) = super::pty::Pty::attach_slave(s) {
                fail(rep, format!("attaching the pseudo-terminal: {e}"));
            }
        }
    }
    if let Stdio::Redirect { stdout, stderr } = plan.stdio {
        // SAFETY: dup2/open on descriptors we own.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
            if null < 0
                || libc::dup2(null, 0) < 0
                || libc::dup2(stdout, 1) < 0
                || libc::dup2(stderr, 2) < 0
            {
                fail(
                    rep,
                    format!(
                        "redirecting the command's output: {}",
                        std::io::Error::last_os_error()
                    ),
                );
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
    let cwd = match CString::new(plan.cwd.as_os_str().as_encoded_bytes()) {
        Ok(c) => c,
        Err(_) => fail(rep, "working directory contains a NUL byte".into()),
    };
    if let Err(e) = sys::chdir(&cwd) {
        fail(
            rep,
            format!("entering {} in the sandbox: {e}", plan.cwd.display()),
        );
    }
    let mut b = [0u8; 1];
    if !matches!(sys::read(go, &mut b), Ok(1)) {
        exit(crate::exit::SANDBOX_FAILED as i32);
    }
    sys::close(go);

    if let Root::Warm(w) = &cx.root {
        // a warm spare enforced every layer before its request came: this process inherits
        // them (from the spare, which forked it), and their report was written then too
        tracing::debug!("command: layers applied: {:?}", cx.t0.elapsed());
        let _ = sys::write_all(rep, &w.report_line);
    } else {
        let applied = match take_layers(cx) {
            Ok(a) => a,
            Err(e) => fail(rep, e.to_string()),
        };
        tracing::debug!("command: layers applied: {:?}", cx.t0.elapsed());
        send(rep, &Report::Layers { applied });
    }
    // the exec's own limits, soft and hard (never above the hard limit it has: the limit
    // is as tight as asked or tighter); set by the command's process, so that init is not
    // held by them, and after its layers (whose Landlock ruleset opens descriptors)
    for (r, flag, v) in plan.limits.rlimits() {
        if let Err(e) = rlimit::lower(r, v) {
            fail(rep, format!("setting the limit of {flag}: {e}"));
        }
    }
    let program = process::Program {
        path: None,
        argv: cx.argv,
        envp: cx.envp,
        keep_fds: 0,
    };
    match process::exec(&program, cx.old_mask.as_ref()) {
        process::ExecError::Exec { command, errno } => {
            send(cx.report, &Report::ExecFailed { errno, command });
            exit(if errno == libc::ENOENT {
                crate::exit::NOT_FOUND as i32
            } else {
                crate::exit::NOT_EXECUTABLE as i32
            })
        }
        process::ExecError::Step(e) => fail(rep, e.to_string()),
    }
}

/// The command's layers ([`process::take_layers`]: no capabilities, `no_new_privs`,
/// Landlock, capsule's seccomp filter last, its listener to capsule's supervisor), and
/// what was applied, for the exec record. Under no isolation, none.
fn take_layers(cx: &Ctx<'_>) -> Result<Applied, process::StepError> {
    let plan = cx.plan;
    let mut applied = Applied {
        isolation: match plan.isolation {
            Isolation::Full if plan.landlock_best_effort => "weaker",
            Isolation::Full => "full",
            Isolation::Weaker => "weaker",
            Isolation::None => "none",
        }
        .into(),
        namespaces: cx.namespaces.iter().map(|s| s.to_string()).collect(),
        landlock: serde_json::Value::Null,
        seccomp: serde_json::Value::Null,
        capabilities: "kept (no sandbox)".into(),
        no_new_privs: false,
        root: match (plan.isolation, &cx.root) {
            (Isolation::Full, Root::Build) => "built",
            (Isolation::Full, _) => "prepared",
            _ => "host",
        }
        .into(),
        plan_digest: String::new(),
    };
    if plan.isolation == Isolation::None {
        return Ok(applied);
    }
    let (policy, opts) = landlock_inputs(plan);
    let landlock = match cx.root.landlock() {
        Some((ruleset, report, again)) => process::Landlock::Received {
            ruleset,
            report,
            again,
        },
        None => process::Landlock::Build {
            policy: &policy,
            opts: &opts,
            best_effort: plan.landlock_best_effort,
        },
    };
    // the very last step before execve; its listener to capsule's supervisor
    let filters: Vec<process::Filter<'_>> = cx
        .seccomp
        .iter()
        .map(|s| process::Filter::Capsule {
            program: s,
            listener: match cx.notify {
                Some(sock) => process::Listener::SendTo(sock),
                None => process::Listener::Plain,
            },
        })
        .collect();
    tracing::debug!("command: before the layers: {:?}", cx.t0.elapsed());
    let taken = process::take_layers(process::Layers {
        no_new_privs: true,
        user: None,
        capabilities: process::Capabilities::None,
        landlock: Some(landlock),
        filters: &filters,
    })?;
    applied.capabilities =
        "none (bounding, ambient, permitted, effective, inheritable sets emptied)".into();
    applied.no_new_privs = true;
    applied.landlock = taken.landlock.unwrap_or_default();
    if let Some(s) = cx.seccomp {
        applied.seccomp = serde_json::to_value(s.report()).unwrap_or_default();
    }
    Ok(applied)
}

/// The Landlock policy and options of `plan`'s command (also what a prepared root's holder
/// collects its rules from, so both are the same by construction).
pub(crate) fn landlock_inputs(
    plan: &ExecPlan,
) -> (
    std::borrow::Cow<'_, capsule_bundle::policy::SandboxPolicy>,
    ll::LandlockOptions,
) {
    let full = plan.isolation == Isolation::Full;
    let opts = ll::LandlockOptions {
        namespaces: full,
        list_ancestors: full,
        // the sandbox's own /dev/shm is writable, unless policy paths live below it
        // (a workspace on the host's /dev/shm): then granting it would also grant them
        extra_writable: if full && !policy_under(&plan.policy, "/dev/shm") {
            vec!["/dev/shm".into()]
        } else {
            vec![]
        },
        // Landlock treats /dev as hidden but for devices; a home on the host's
        // /dev/shm (bound at the same path) stays readable like any home
        extra_readable: plan
            .policy
            .home
            .iter()
            // only with mounts hiding what lies inside; alone, Landlock could not
            .filter(|h| full && h.starts_with("/dev/"))
            .cloned()
            .collect(),
        all_devices: false,
        tcp_connect_ports: vec![],
    };
    // files only root may read (shadow, private keys): under full isolation the mount
    // plan masks them; without mounts Landlock alone must leave them out
    let mut policy = std::borrow::Cow::Borrowed(&plan.policy);
    // SAFETY: geteuid cannot fail.
    let root = plan.policy.home.as_deref() == Some(std::path::Path::new("/root"))
        || unsafe { libc::geteuid() } == 0;
    if !full && root {
        let p = policy.to_mut();
        for s in super::plan::SYSTEM_SECRETS {
            let path = std::path::PathBuf::from(s);
            if std::fs::symlink_metadata(&path).is_ok() && !p.hidden.iter().any(|h| h.path == path)
            {
                p.hidden.push(capsule_bundle::policy::HiddenPath {
                    path,
                    reason: capsule_bundle::policy::HiddenReason::Credentials,
                });
            }
        }
    }
    (policy, opts)
}

fn policy_under(p: &capsule_bundle::policy::SandboxPolicy, dir: &str) -> bool {
    let d = std::path::Path::new(dir);
    p.workspace.starts_with(d)
        || p.home.as_deref().is_some_and(|h| h.starts_with(d))
        || p.hidden.iter().any(|h| h.path.starts_with(d))
        || p.writable.iter().any(|w| w.starts_with(d))
}

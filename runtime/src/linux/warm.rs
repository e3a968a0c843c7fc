//! Warm spares of a prepared root: a sandbox's init made ahead of time by the holder
//! ([`super::prepared`]), with its namespaces (mount copy, pid, ipc, uts, network with
//! loopback up), its own `/proc`, devpts and `/dev/shm`, its hostname, and every layer
//! already enforced on itself (no capabilities, `no_new_privs`, Landlock, seccomp; the
//! command it forks inherits them), waiting for one exec.
//!
//! ```text
//! capsule exec (P)            holder (H)                      spare (S, pid 1 of its own)
//! X <fingerprint> ──────────▶ hand S's pidfd to P, the
//!                             connection to S; make the next ─▶ read the request: argv,
//! request + fds (stdio,                                           env, cwd, stdio fds,
//!   report, sync, P's pidfd) ────────────────────────────────▶    report pipe, go-ahead
//! supervise S by its pidfd ◀─────────────── report pipe ──────── init::main (Root::Warm)
//! ```
//!
//! A spare serves exactly one exec and never runs anything of the task before its
//! request: the command's own process is forked from it then, with the request's argv and
//! environment, so nothing a previous exec did can be in it. It is not capsule's child, so
//! instead of `PR_SET_PDEATHSIG` it watches capsule's pidfd and ends the sandbox when
//! capsule ends; capsule signals it (timeouts, forwarded signals) through its pidfd and
//! reads its end from the report pipe. The holder waits for the spares it handed out
//! before it exits (they live in its pid namespace).

use super::hooks::Hooks;
use super::init::{self, Root};
use super::{mounts, ExecPlan, Stdio};
use crate::kernel::landlock::LandlockRules;
use crate::kernel::seccomp::SeccompProgram;
use crate::kernel::sys;
use crate::kernel::{ns, process, setup};
use std::ffi::{CString, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

/// One exec's part of the plan, sent by capsule to a spare.
#[derive(serde::Serialize, serde::Deserialize)]
struct ExecRequest {
    argv: Vec<Vec<u8>>,
    env: Vec<(Vec<u8>, Vec<u8>)>,
    cwd: PathBuf,
    /// The caller's umask and soft resource limits (the hard ones are part of the
    /// prepared root's fingerprint).
    umask: u32,
    soft_limits: Vec<u64>,
    /// The exec's own limits (`--fds`, `--file-size`), set by the command's process.
    #[serde(default)]
    limits: crate::limits::Limits,
    /// 0: inherit (fds stdin, stdout, stderr follow), 1: tty (the console socket
    /// follows), 2: redirect (stdout, stderr follow).
    stdio: u8,
}

/// Descriptors of a request, in this order, then the stdio ones.
const REQUEST_FDS: usize = 4; // report, sync, capsule's pidfd, the seccomp listener's channel

/// Send `plan`'s exec to the spare at the other end of `conn` (capsule's side). `report`
/// and `sync` are the pipe ends init writes to and reads from; `console` the pty's child
/// socket for `-t`.
pub(crate) fn send(
    conn: &mut UnixStream,
    plan: &ExecPlan,
    report: RawFd,
    sync: RawFd,
    notify: RawFd,
    console: Option<RawFd>,
) -> io::Result<()> {
    // SAFETY: pidfd_open of ourselves.
    let me = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    if me < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just opened.
    let me = unsafe { OwnedFd::from_raw_fd(me as RawFd) };
    let mut fds = vec![report, sync, me.as_raw_fd(), notify];
    let stdio = match plan.stdio {
        Stdio::Inherit => {
            fds.extend([0, 1, 2]);
            0
        }
        Stdio::Tty => {
            fds.push(console.ok_or_else(|| io::Error::other("no console socket"))?);
            1
        }
        Stdio::Redirect { stdout, stderr } => {
            fds.extend([stdout, stderr]);
            2
        }
    };
    let req = ExecRequest {
        argv: plan.argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
        env: plan
            .env
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect(),
        cwd: plan.cwd.clone(),
        umask: umask(),
        soft_limits: crate::kernel::rlimit::current()
            .into_iter()
            .map(|(soft, _)| soft)
            .collect(),
        limits: plan.limits,
        stdio,
    };
    let bytes = serde_json::to_vec(&req).map_err(io::Error::other)?;
    let first = sys::send_fds(conn.as_raw_fd(), &bytes[..bytes.len().min(4096)], &fds)?;
    conn.write_all(&bytes[first..])?;
    conn.shutdown(std::net::Shutdown::Write)
}

/// This process's umask (read without changing it, from /proc).
fn umask() -> u32 {
    // one read: the line is near the start of the file
    let mut buf = [0u8; 512];
    let n = std::fs::File::open("/proc/self/status")
        .and_then(|mut f| f.read(&mut buf))
        .unwrap_or(0);
    umask_of(&buf[..n]).unwrap_or(0o022)
}

/// The `Umask:` of a `/proc/<pid>/status` text.
fn umask_of(status: &[u8]) -> Option<u32> {
    let text = match std::str::from_utf8(status) {
        Ok(t) => t,
        // a read that ended inside a multi-byte character: the valid prefix
        Err(e) => std::str::from_utf8(&status[..e.valid_up_to()]).ok()?,
    };
    text.lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
}

/// A spare, as its holder sees it.
pub(crate) struct Spare {
    pub pid: libc::pid_t,
    pub pidfd: OwnedFd,
    /// The holder's end of the channel that passes the spare its connection.
    chan: OwnedFd,
    /// The name of the cgroups it waits in (`cgroup::SpareCgroups`), if any, and those
    /// groups as the exec it serves sees them.
    pub cgroup: Option<String>,
    pub groups: Vec<crate::kernel::cgroup::Group>,
}

/// What capsule learns of its spare with the spare's pidfd: the cgroups it waits in (by
/// their host paths), or why it waits in none where the execs limit resources (the
/// holder could not make them: capsule's own default limits are then not enforced).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Handed {
    #[serde(default)]
    pub groups: Vec<HandedGroup>,
    #[serde(default)]
    pub no_cgroups: Option<String>,
}

/// A group of [`Handed`].
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct HandedGroup {
    pub version: crate::kernel::cgroup::Version,
    pub controllers: Vec<String>,
    pub dir: PathBuf,
}

impl Handed {
    /// The groups, as the exec's cgroups take them (adopted: the holder hands them on).
    pub fn groups(&self) -> Vec<crate::kernel::cgroup::Group> {
        self.groups
            .iter()
            .map(|g| crate::kernel::cgroup::Group {
                version: g.version,
                controllers: g
                    .controllers
                    .iter()
                    .filter_map(|c| match c.as_str() {
                        "memory" => Some("memory"),
                        "pids" => Some("pids"),
                        "cpu" => Some("cpu"),
                        _ => None,
                    })
                    .collect(),
                dir: g.dir.clone(),
                adopted: true,
                before: Vec::new(),
            })
            .collect()
    }
}

impl Spare {
    /// Is it still waiting (not ended by a failed setup)?
    pub fn alive(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no waiting.
        unsafe { libc::poll(&mut p, 1, 0) == 0 }
    }

    /// Hand the spare to capsule at the other end of `conn`: its pidfd to capsule with its
    /// cgroups (or, `no_cgroups`, why there are none), the connection to the spare.
    /// Returns its pid and the holder's own pidfd of it.
    pub fn hand_over(
        self,
        conn: &UnixStream,
        no_cgroups: Option<&str>,
    ) -> io::Result<(libc::pid_t, OwnedFd)> {
        // the spare says when it sits in its cgroups (it moves itself there as it starts):
        // an exec must never meet it on its way in, or the two moves race and the
        // command could run outside the exec's limits
        let mut p = libc::pollfd {
            fd: self.chan.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, 5000) } != 1 {
            return Err(io::Error::other("the spare did not get ready"));
        }
        let mut b = [0u8; 1];
        if !matches!(sys::read(self.chan.as_raw_fd(), &mut b), Ok(1)) || b[0] != b'r' {
            return Err(io::Error::other("the spare did not get ready"));
        }
        let handed = Handed {
            groups: self
                .groups
                .iter()
                .map(|g| HandedGroup {
                    version: g.version,
                    controllers: g.controllers.iter().map(|c| c.to_string()).collect(),
                    dir: g.dir.clone(),
                })
                .collect(),
            no_cgroups: no_cgroups
                .filter(|_| self.cgroup.is_none())
                .map(str::to_string),
        };
        let mut msg = b"W".to_vec();
        serde_json::to_writer(&mut msg, &handed).map_err(io::Error::other)?;
        msg.push(b'\n');
        let sent = sys::send_fds(conn.as_raw_fd(), &msg, &[self.pidfd.as_raw_fd()])?;
        (&*conn).write_all(&msg[sent..])?;
        sys::send_fds(self.chan.as_raw_fd(), b"c", &[conn.as_raw_fd()])?;
        Ok((self.pid, self.pidfd))
    }
}

/// Make a spare for `plan` (called by the holder, in its prepared root; single-threaded).
/// `holder_fds` are the holder's own descriptors, closed in the spare; `fuse_dev` the
/// host's `/dev/fuse` for its watched masks (-1: none).
pub(crate) fn make(
    plan: &ExecPlan,
    rules: &LandlockRules,
    landlock: &serde_json::Value,
    holder_fds: &[RawFd],
    cgroup_procs: &[RawFd],
    fuse_dev: RawFd,
) -> io::Result<Spare> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (h, s) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let mut flags =
        (libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS)
            as libc::c_long
            | libc::SIGCHLD as libc::c_long;
    if plan.new_netns {
        flags |= libc::CLONE_NEWNET as libc::c_long;
    }
    // the holder is single-threaded
    let pid = match ns::fork_into(flags)? {
        ns::Forked::Child => {
            for fd in holder_fds {
                sys::close(*fd);
            }
            drop(h);
            spare_main(plan, rules, landlock, s, cgroup_procs, fuse_dev)
        }
        ns::Forked::Parent(pid) => pid,
    };
    drop(s);
    // SAFETY: pidfd_open of our own child.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Spare {
        pid,
        // SAFETY: a descriptor just opened.
        pidfd: unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) },
        chan: h,
        cgroup: None,
        groups: Vec::new(),
    })
}

fn quit() -> ! {
    // SAFETY: _exit in a cloned child.
    unsafe { libc::_exit(1) }
}

/// The spare: get ready, wait for one request, become that exec's init.
fn spare_main(
    plan: &ExecPlan,
    rules: &LandlockRules,
    landlock: &serde_json::Value,
    chan: OwnedFd,
    cgroup_procs: &[RawFd],
    fuse_dev: RawFd,
) -> ! {
    // the holder's end is the spare's end too (it lives in the holder's pid namespace)
    let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0);
    // into the groups the holder made for it, by itself and while single-threaded (no
    // global lock, no RCU grace period on cgroup v1: see `cgroup::move_self_file`)
    if crate::kernel::cgroup::move_self(cgroup_procs).is_err() {
        quit()
    }
    // ready to be handed out (see `Spare::hand_over`)
    if sys::write_all(chan.as_raw_fd(), b"r").is_err() {
        quit()
    }
    // the per-exec mounts and this spare's watched masks (kept for the exec it serves),
    // the hostname and loopback, in the kernel stack's order
    let steps = setup::Setup {
        hostname: Some(plan.hostname.as_bytes()),
        loopback: plan.new_netns && !plan.network_off,
        ..Default::default()
    };
    let Ok(masks) = setup::setup(&steps, || {
        mounts::exec_mounts(&plan.mounts)?;
        let masks = super::fusemask::mount(&plan.watched, fuse_dev);
        if fuse_dev >= 0 {
            sys::close(fuse_dev);
        }
        Ok(masks)
    }) else {
        quit()
    };
    let per_exec = mounts::per_exec_roots(&plan.mounts);
    let Ok((created, again)) = rules.create(&per_exec) else {
        quit()
    };
    let ruleset: Option<OwnedFd> = created.and_then(|c| c.into());
    // this spare's own /proc, devpts and /dev/shm are in place: their rules now, not in
    // the command
    if let Some(r) = &ruleset {
        use std::os::fd::AsFd;
        if crate::kernel::landlock::add_path_rules(r.as_fd(), &again).is_err() {
            quit()
        }
    }
    // init's /dev/null, opened while nothing observes opens for writing yet
    // SAFETY: opening /dev/null.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    init::DEV_NULL.store(null, std::sync::atomic::Ordering::Relaxed);
    let Ok(seccomp) = SeccompProgram::build_for(plan.list_reads, plan.list_writes) else {
        quit()
    };
    // every layer now, before the request: caps, no_new_privs, Landlock, seccomp; the
    // spare (init) is held by them too, and the command forked from it inherits them
    let (layers, listener) = enforce(ruleset.as_ref(), landlock, &seccomp);
    drop(ruleset);
    let mut namespaces = vec!["user", "mount", "pid", "ipc", "uts"];
    if plan.new_netns {
        namespaces.push("net");
    }
    // the command's report of them, made now rather than on its way to execve
    let report_line = layers.report_line(plan, &namespaces);
    drop(layers);
    // wait for the connection of the exec we serve (end of file: the holder is done)
    let Some(conn) = recv_fds(chan.as_raw_fd(), &mut [0u8; 8])
        .ok()
        .and_then(|(_, f)| f.into_iter().next())
    else {
        quit()
    };
    drop(chan);
    let mut conn = UnixStream::from(conn);
    let mut buf = vec![0u8; 64 * 1024];
    let Ok((n, fds)) = recv_fds(conn.as_raw_fd(), &mut buf) else {
        quit()
    };
    buf.truncate(n);
    if conn.read_to_end(&mut buf).is_err() {
        quit()
    }
    drop(conn);
    let Ok(req) = serde_json::from_slice::<ExecRequest>(&buf) else {
        quit()
    };
    let fds: Vec<RawFd> = fds.into_iter().map(IntoRawFd::into_raw_fd).collect();
    if fds.len() < REQUEST_FDS {
        quit()
    }
    let (report, sync, capsule) = (fds[0], fds[1], fds[2]);
    // the watched masks and the listener of the filter this spare installed, to
    // capsule's supervisor (none of them is the command's)
    super::fusemask::send(fds[3], masks);
    if let Some(l) = listener {
        let _ = crate::kernel::seccomp::send_listener(fds[3], l.as_raw_fd());
    }
    sys::close(fds[3]);
    let stdio_fds = &fds[REQUEST_FDS..];
    let mut plan = plan.clone();
    plan.argv = req.argv.into_iter().map(OsString::from_vec).collect();
    plan.env = req
        .env
        .into_iter()
        .map(|(k, v)| (OsString::from_vec(k), OsString::from_vec(v)))
        .collect();
    plan.cwd = req.cwd;
    plan.limits = req.limits;
    // the caller's umask and soft limits (within the hard ones, which are the same)
    // SAFETY: umask of our own process.
    unsafe { libc::umask(req.umask & 0o777) };
    for ((r, soft), (_, hard)) in crate::kernel::rlimit::RLIMITS
        .iter()
        .zip(&req.soft_limits)
        .zip(crate::kernel::rlimit::current())
    {
        let _ = crate::kernel::rlimit::set(*r, (*soft).min(hard), hard);
    }
    let mut console = None;
    match (req.stdio, stdio_fds) {
        (0, [i, o, e]) => {
            for (from, to) in [(*i, 0), (*o, 1), (*e, 2)] {
                // SAFETY: dup2 of descriptors we received.
                if unsafe { libc::dup2(from, to) } < 0 {
                    quit()
                }
            }
            // only 0, 1 and 2 (which init gives up once the command is forked): a reader
            // of the command's output sees its end with the command's
            for fd in [*i, *o, *e] {
                if fd > 2 {
                    sys::close(fd);
                }
            }
            plan.stdio = Stdio::Inherit;
        }
        (1, [c]) => {
            console = Some(*c);
            plan.stdio = Stdio::Tty;
        }
        (2, [o, e]) => {
            plan.stdio = Stdio::Redirect {
                stdout: *o,
                stderr: *e,
            };
        }
        _ => quit(),
    }
    let cstrings = |items: Vec<Vec<u8>>| -> Option<Vec<CString>> {
        items.into_iter().map(|b| CString::new(b).ok()).collect()
    };
    let Some(argv) = cstrings(plan.argv.iter().map(|a| a.as_bytes().to_vec()).collect()) else {
        quit()
    };
    let Some(envp) = cstrings(
        plan.env
            .iter()
            .map(|(k, v)| {
                let mut b = k.as_bytes().to_vec();
                b.push(b'=');
                b.extend_from_slice(v.as_bytes());
                b
            })
            .collect(),
    ) else {
        quit()
    };
    let warm = init::Warm {
        capsule,
        report_line,
    };
    let old_mask = nix::sys::signal::SigSet::empty();
    let cx = init::Ctx {
        plan: &plan,
        argv: &argv,
        envp: &envp,
        report,
        sync,
        pty_sock: console,
        old_mask: &old_mask,
        seccomp: Some(&seccomp),
        notify: None,
        namespaces: &namespaces,
        t0: std::time::Instant::now(),
        root: Root::Warm(&warm),
        cgroup_self: &[],
        fuse_dev: -1,
    };
    init::main(cx, Hooks::default())
}

/// Enforce the sandbox's layers on the spare itself (they are inherited by what it forks):
/// no capabilities, `no_new_privs`, the Landlock ruleset, the seccomp filter (with its
/// listener, for the exec's supervisor). A spare that cannot ends (its holder then serves
/// a join instead).
fn enforce(
    ruleset: Option<&OwnedFd>,
    landlock: &serde_json::Value,
    seccomp: &SeccompProgram,
) -> (init::PreLayers, Option<OwnedFd>) {
    use std::os::fd::AsFd;
    let Some(r) = ruleset else { quit() };
    let filters = [process::Filter::Capsule {
        program: seccomp,
        listener: process::Listener::Keep,
    }];
    let Ok(taken) = process::take_layers(process::Layers {
        no_new_privs: true,
        user: None,
        capabilities: process::Capabilities::None,
        landlock: Some(process::Landlock::Received {
            ruleset: r.as_fd(),
            report: landlock,
            again: &[],
        }),
        filters: &filters,
    }) else {
        quit()
    };
    (
        init::PreLayers {
            landlock: taken.landlock.unwrap_or_default(),
            seccomp: serde_json::to_value(seccomp.report()).unwrap_or_default(),
        },
        taken.listener,
    )
}

/// [`sys::recv_fds`], with end of file as an error.
fn recv_fds(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let (n, fds) = sys::recv_fds(sock, buf)?;
    if n == 0 && fds.is_empty() {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    Ok((n, fds))
}

/// Capsule's side of a warm exec: the spare's pidfd and its cgroups ([`Handed`]),
/// received in answer to `X`.
pub(crate) fn recv_pidfd(conn: &UnixStream) -> io::Result<Option<(OwnedFd, Handed)>> {
    let mut b = vec![0u8; 8192];
    let (mut n, fds) = recv_fds(conn.as_raw_fd(), &mut b)?;
    if n == 0 || b[0] != b'W' {
        return Ok(None);
    }
    // the rest of a long answer (the spare writes nothing on this connection before the
    // request)
    while !b[..n].ends_with(b"\n") {
        if n == b.len() {
            b.resize(b.len() * 2, 0);
        }
        match (&*conn).read(&mut b[n..])? {
            0 => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            m => n += m,
        }
    }
    let handed: Handed = serde_json::from_slice(&b[1..n - 1]).map_err(io::Error::other)?;
    Ok(fds.into_iter().next().map(|fd| (fd, handed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_umask_is_read_from_the_status_text() {
        assert_eq!(
            umask_of(b"Name:\tcapsule\nUmask:\t0027\nState:\tR\n"),
            Some(0o027)
        );
        assert_eq!(umask_of(b"Name:\tcapsule\nState:\tR\n"), None);
        // cut inside a multi-byte character after the line: still found
        assert_eq!(umask_of(b"Umask:\t0077\nName:\t\xc3"), Some(0o077));
    }

    #[test]
    fn the_umask_is_this_processs_own() {
        // SAFETY: umask swaps the process's mask; put back at once (a test-only read).
        let own = unsafe {
            let m = libc::umask(0o022);
            libc::umask(m);
            m
        };
        assert_eq!(umask(), own as u32);
    }
}

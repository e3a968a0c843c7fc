//! capsule's refusal listing for a container: what its processes tried to write where
//! the container may not, listed in `<root>/<id>/refusals.jsonl` (one JSON line per
//! distinct refusal, with its count and the times first and last seen; rewritten as
//! refusals come) and said in the `--log` file containerd gave at create (a `warning`
//! line per distinct refusal as it comes, a summary when the container's processes are
//! gone), which the shim keeps with the task.
//!
//! How: each container process (the init at `start`, each `exec`'d one) stacks, last
//! before `execve`, a filter that only observes ([`crate::kernel::seccomp::install_observer`]:
//! the write calls with write intent go to a listener, everything else is allowed, so
//! the bundle's own filter alone decides) and sends its listener to the observer, a
//! process of capsule-runc's that `create` leaves behind (forked twice, in a session of
//! its own, stdio on `/dev/null`, no other descriptor). The observer answers every call
//! "continue" (the kernel then runs it exactly as without it: the mounts and Landlock
//! decide) and lists it when the container's writable set refuses it, the same judgment
//! as `capsule exec`'s ([`crate::linux::observe`], [`crate::linux::notify`]). The init
//! reaches it over a socket pair made at create; `exec` over `<root>/<id>/observe.sock`
//! (bound by create, in the state directory only root may enter).
//!
//! The observer ends when the container's processes are gone (their listeners closed and
//! the init dead) or its state directory is removed; `delete` waits for it (briefly) so
//! the summary is in the log before the task is gone.

use crate::linux::observe::Allowed;
use crate::plan::container::Watch;
use crate::refusals::{Collector, Say};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// The listing, in the state directory.
pub const LISTING: &str = "refusals.jsonl";
/// Where `exec` sends its process's listener, in the state directory.
pub const SOCK: &str = "observe.sock";
/// The observer's pid, for `delete` to wait for it.
const PID_FILE: &str = super::detached::OBSERVER_PID;

/// Where and how the observer says what it lists: containerd's `--log`.
#[derive(Debug, Clone)]
pub struct LogTo {
    pub path: PathBuf,
    pub json: bool,
}

/// The writable set of a container, as its plan has it
/// ([`crate::plan::container::watch`]), as the observer judges writes.
pub fn allowed(w: &Watch) -> Allowed {
    Allowed::of_paths(w.writable.clone(), w.read_only.clone())
}

/// Run `f` with the working directory in `dir` (a socket's path is limited to 108
/// bytes; a state directory's can be longer), then back.
fn in_dir<T>(dir: &Path, f: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    let back = std::env::current_dir()?;
    std::env::set_current_dir(dir)?;
    let r = f();
    std::env::set_current_dir(back)?;
    r
}

/// Bind the socket `exec` connects to, in the state directory `dir`.
pub fn bind(dir: &Path) -> Result<OwnedFd, String> {
    in_dir(dir, || std::os::unix::net::UnixListener::bind(SOCK))
        .map(OwnedFd::from)
        .map_err(|e| format!("binding {}: {e}", dir.join(SOCK).display()))
}

/// `exec`: the observer's socket, if it is there (a container made before it, or whose
/// observer ended, is not observed: said in the log).
pub fn connect(dir: &Path) -> Option<OwnedFd> {
    in_dir(dir, || std::os::unix::net::UnixStream::connect(SOCK))
        .ok()
        .map(OwnedFd::from)
}

/// Start the observer of container `id` (state directory `dir`, init `pid`): `init` is
/// the end of the init's socket pair, `listen` the socket [`bind`] made. Returns once
/// the observer runs on its own.
pub fn spawn(
    dir: &Path,
    id: &str,
    pid: libc::pid_t,
    start_time: u64,
    allowed: Allowed,
    init: OwnedFd,
    listen: OwnedFd,
    log: Option<LogTo>,
    cgroups: &[PathBuf],
    reserve: crate::limits::DiskReserve,
) -> Result<(), String> {
    let (i, l) = (init.into_raw_fd(), listen.into_raw_fd());
    // the two sockets at 3 and 4 of the observer
    let here = super::detached::fork(dir, PID_FILE, "refusal observer", &[i, l], cgroups);
    if !matches!(here, Ok(true)) {
        crate::kernel::sys::close(i);
        crate::kernel::sys::close(l);
        return here.map(|_| ());
    }
    // SAFETY: the descriptors just put there.
    let (init, listen) = unsafe { (OwnedFd::from_raw_fd(3), OwnedFd::from_raw_fd(4)) };
    let budget = crate::linux::diskguard::Budget::new(reserve);
    serve(
        dir,
        id,
        pid,
        start_time,
        (&allowed, budget.as_ref()),
        init,
        listen,
        log.as_ref(),
    );
    // SAFETY: leaving the observer.
    unsafe { libc::_exit(0) }
}

/// `delete`, once the container's processes are gone: tell the observer to end, and wait
/// (at most a second) for it to write its last lines.
pub fn wait_for(dir: &Path) {
    super::detached::wait_for(dir, PID_FILE)
}

fn say(log: Option<&LogTo>, level: &str, msg: &str) {
    if let Some(l) = log {
        super::log_to(&l.path, l.json, level, msg);
    }
}

/// Rewrite the listing (a temporary file renamed over it: a reader sees it whole).
fn write_listing(dir: &Path, refusals: &Collector) {
    let mut buf = Vec::new();
    for mut l in refusals.lines("") {
        // capsule's command-line grants mean nothing to a bundle's author
        l.refusal.grant = None;
        if let Ok(mut one) = serde_json::to_vec(&l) {
            one.push(b'\n');
            buf.extend_from_slice(&one);
        }
    }
    let tmp = dir.join(".refusals.jsonl.tmp");
    if std::fs::write(&tmp, &buf).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join(LISTING));
    }
}

#[allow(clippy::too_many_arguments)]
fn serve(
    dir: &Path,
    id: &str,
    pid: libc::pid_t,
    start_time: u64,
    (allowed, budget): (&Allowed, Option<&crate::linux::diskguard::Budget>),
    init: OwnedFd,
    listen: OwnedFd,
    log: Option<&LogTo>,
) {
    let refusals = Collector::new(Say::Quiet);
    let names = crate::linux::notify::Names::new();
    // sockets a listener may come on, the listeners
    let mut socks: Vec<OwnedFd> = vec![init];
    let mut listeners: Vec<OwnedFd> = Vec::new();
    let mut said = 0usize;
    let mut total = 0u64;
    let pfd = |fd: RawFd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        let mut p = vec![pfd(listen.as_raw_fd())];
        p.extend(socks.iter().map(|s| pfd(s.as_raw_fd())));
        p.extend(listeners.iter().map(|l| pfd(l.as_raw_fd())));
        let stopping = super::detached::stopping();
        // SAFETY: valid pollfds.
        let n = unsafe {
            libc::poll(
                p.as_mut_ptr(),
                p.len() as libc::nfds_t,
                if stopping { 0 } else { 500 },
            )
        };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
        if n <= 0 && stopping {
            // nothing pending any more
            break;
        }
        let (ns, nl) = (socks.len(), listeners.len());
        let mut drop_socks = Vec::new();
        for k in 0..ns {
            if p[1 + k].revents == 0 {
                continue;
            }
            drop_socks.push(k);
            if let Ok((body, fds)) = crate::linux::fusemask::recv(socks[k].as_raw_fd()) {
                if body.first() == Some(&b'L') {
                    listeners.extend(fds.into_iter().take(1));
                }
            }
        }
        let mut drop_listeners = Vec::new();
        for k in 0..nl {
            let r = p[1 + ns + k].revents;
            if r & libc::POLLIN != 0 {
                crate::linux::notify::answer_one(
                    listeners[k].as_raw_fd(),
                    &names,
                    allowed,
                    &[],
                    budget,
                    &refusals,
                );
            } else if r != 0 {
                // the filter's last task is gone
                drop_listeners.push(k);
            }
        }
        for k in drop_socks.into_iter().rev() {
            socks.remove(k);
        }
        for k in drop_listeners.into_iter().rev() {
            listeners.remove(k);
        }
        if p[0].revents & libc::POLLIN != 0 {
            // SAFETY: accept on our listening socket.
            let c = unsafe {
                libc::accept4(
                    listen.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if c >= 0 {
                // SAFETY: a new descriptor of ours.
                socks.push(unsafe { OwnedFd::from_raw_fd(c) });
            }
        }
        // what is new: in the listing, and said in the log
        let list = refusals.refusals();
        let now: u64 = list.iter().map(|r| r.count).sum();
        if now != total {
            total = now;
            write_listing(dir, &refusals);
            for r in list.iter().skip(said) {
                let mut r = r.clone();
                r.grant = None;
                r.count = 1;
                say(
                    log,
                    "warning",
                    &format!("capsule: container {id}: {}", r.line()),
                );
            }
            said = list.len();
        }
        let (t, zombie) = super::state::proc_start(pid);
        let init_alive = t == start_time && !zombie;
        if !dir.exists() || (socks.is_empty() && listeners.is_empty() && !init_alive) {
            break;
        }
    }
    let list = refusals.refusals();
    if !list.is_empty() {
        if dir.exists() {
            write_listing(dir, &refusals);
        }
        let total: u64 = list.iter().map(|r| r.count).sum();
        let dropped = refusals.dropped();
        say(
            log,
            "warning",
            &format!(
                "capsule: container {id}: {total} refused writes ({} distinct{}), listed in {}",
                list.len(),
                if dropped > 0 {
                    format!(", {dropped} more not listed")
                } else {
                    String::new()
                },
                dir.join(LISTING).display()
            ),
        );
    }
    let _ = std::fs::remove_file(dir.join(PID_FILE));
}

//! The seccomp supervisor of one exec: it holds the listener of the filter the command
//! runs under ([`crate::kernel::seccomp::SeccompProgram::install_listened`]). For each refused
//! syscall it records who asked (kind `syscall`, its name, the program's `comm` and pid)
//! in the exec's [`Collector`] and answers `EPERM`, the errno the plain filter gives. For
//! each observed call (an open, a path call with write intent, a `connect`) it answers
//! "continue",
//! so the kernel decides, and lists it when the sandbox refuses it ([`observe`]). Which
//! is which is told by the syscall number alone ([`seccomp::observed`]): the filter sends
//! an observed call only when its table allowed it. A TCP `connect` to an address off
//! loopback, when the exec's network routes them ([`Connects`], allowlist mode), is
//! carried out to the proxy's relay on the task's own socket ([`redirect`]) or refused
//! with the errno and the refusal the route gives, instead of going on.
//!
//! How the listener gets here: [`channel`] makes a socketpair before the sandbox is
//! started; its sandbox end reaches the process that installs the filter (the command's
//! own process on its way to `execve`, or a warm spare, which installed it ahead of
//! time), which sends the listener over it (`SCM_RIGHTS`) and closes its own copy. The
//! command never holds it: the end is close-on-exec and closed before `execve`.
//!
//! Why the task can neither hang nor crash it, nor decide anything with it:
//! - for a refusal it reads nothing of the task's memory: the syscall number, its
//!   arguments as integers (to name an `ioctl` request, say) and the pid the kernel
//!   gives (an observed call's path or address is read with `process_vm_readv`, which
//!   fails rather than blocks, for the report only); the
//!   program's name comes from `/proc/<pid>/comm` and `/proc/<pid>/status` (the task's
//!   namespace pid), checked with `SECCOMP_IOCTL_NOTIF_ID_VALID` afterwards so a
//!   recycled pid is never named;
//! - every answer is the same (`EPERM`); a refused call waits only for this thread, and
//!   only for one `read` of two small procfs files;
//! - should this thread or capsule end, the listener closes and the kernel answers every
//!   call the filter sends here with `ENOSYS`: still refused (and capsule's end ends the
//!   sandbox anyway);
//! - a storm of refusals costs the task one round trip each; the record stays bounded
//!   ([`crate::refusals::MAX_DISTINCT`], counts).

use super::diskguard;
use super::hooks::{Connects, Route};
use super::observe::{self, Allowed};
use super::{fusemask, redirect};
use crate::kernel::seccomp;
use crate::refusals::{Collector, Event, Kind};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;

/// A running supervisor (a thread of the scope the exec is supervised in).
pub struct Supervisor<'scope> {
    thread: Option<std::thread::ScopedJoinHandle<'scope, ()>>,
    /// An eventfd the thread polls: written to stop it (never a pipe, whose write could
    /// raise `SIGPIPE` once the thread is gone).
    stop: Arc<OwnedFd>,
}

impl<'scope> Supervisor<'scope> {
    /// Start the supervisor thread on capsule's end of the channel, in `scope`. Call after
    /// the sandbox is cloned (the executor clones while single-threaded). `allowed` is
    /// called by the thread, when the first notification comes: what it costs (a walk of
    /// the plan's mounts) is off the exec's way to its command, and most commands are
    /// never refused anything.
    /// `connects`: where the command's TCP connects to remote addresses go (allowlist
    /// mode), see [`Connects`].
    pub fn start<'env, F>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        sock: OwnedFd,
        refusals: Arc<Collector>,
        watched: Vec<PathBuf>,
        budget: Option<diskguard::Budget>,
        allowed: F,
        connects: Option<Arc<dyn Connects>>,
    ) -> io::Result<Supervisor<'scope>>
    where
        F: FnOnce() -> Allowed + Send + 'scope,
    {
        // SAFETY: eventfd makes a new descriptor.
        let e = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if e < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just made, ours to own.
        let stop = Arc::new(unsafe { OwnedFd::from_raw_fd(e) });
        let stop_r = stop.clone();
        let thread = std::thread::Builder::new()
            .name("capsule-seccomp".into())
            .stack_size(64 * 1024)
            .spawn_scoped(scope, move || {
                serve(
                    sock,
                    stop_r,
                    allowed,
                    &watched,
                    budget.as_ref(),
                    &refusals,
                    connects.as_deref(),
                )
            })?;
        Ok(Supervisor {
            thread: Some(thread),
            stop,
        })
    }

    /// Stop (the sandbox has ended) and wait for the thread.
    pub fn finish(mut self) {
        let _ = crate::kernel::sys::write_all(self.stop.as_raw_fd(), &1u64.to_ne_bytes());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the supervisor thread polls: the channel until the listener came, the listener,
/// the watched masks' connections.
struct Polled {
    sock: Option<OwnedFd>,
    listener: Option<OwnedFd>,
    masks: Option<fusemask::serve::Masks>,
    /// The masks' connections still open: (index into `masks`, descriptor).
    live: Vec<(usize, RawFd)>,
}

fn serve(
    sock: OwnedFd,
    stop: Arc<OwnedFd>,
    allowed: impl FnOnce() -> Allowed,
    watched: &[PathBuf],
    budget: Option<&diskguard::Budget>,
    refusals: &Collector,
    connects: Option<&dyn Connects>,
) {
    let mut st = Polled {
        sock: Some(sock),
        listener: None,
        masks: None,
        live: Vec::new(),
    };
    let mut allowed = Some(allowed);
    let mut judged: Option<(Names, Allowed, Vec<PathBuf>)> = None;
    let pollfd = |fd: RawFd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // one set of pollfds for the thread's life: a notification storm allocates nothing
    let mut p: Vec<libc::pollfd> = Vec::with_capacity(3 + fusemask::MAX_WATCHED);
    loop {
        p.clear();
        p.push(pollfd(stop.as_raw_fd()));
        p.push(pollfd(st.sock.as_ref().map_or(-1, |s| s.as_raw_fd())));
        p.push(pollfd(st.listener.as_ref().map_or(-1, |l| l.as_raw_fd())));
        p.extend(st.live.iter().map(|&(_, fd)| pollfd(fd)));
        // the connections polled this round (`receive` may add some after the poll)
        let polled = st.live.len();
        // SAFETY: valid pollfds (a negative fd is skipped by poll).
        let n = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, -1) };
        if n < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        if p[0].revents != 0 {
            return;
        }
        if p[1].revents != 0 {
            receive(&mut st, watched, refusals);
        }
        if p[2].revents & libc::POLLIN != 0 {
            if let Some(l) = &st.listener {
                let (names, allowed, served) = judged.get_or_insert_with(|| {
                    let served = st.masks.as_ref().map(|m| m.paths()).unwrap_or_default();
                    let a = allowed.take().map(|f| f()).unwrap_or_default();
                    (Names::new(), a, served)
                });
                answer_one_with(
                    l.as_raw_fd(),
                    names,
                    allowed,
                    served,
                    budget,
                    refusals,
                    connects,
                );
            }
        } else if p[2].revents != 0 {
            // the filter's last task is gone: the sandbox has ended
            return;
        }
        let mut gone = Vec::new();
        for (k, pfd) in p[3..3 + polled].iter().enumerate() {
            if pfd.revents == 0 {
                continue;
            }
            let i = st.live[k].0;
            let alive = pfd.revents & libc::POLLIN != 0
                && st.masks.as_mut().is_some_and(|m| m.answer(i, refusals));
            if !alive {
                gone.push(i);
            }
        }
        if !gone.is_empty() {
            st.live.retain(|(i, _)| !gone.contains(i));
        }
    }
}

/// One message on the listener's channel: the watched masks ([`fusemask::MESSAGE`]) or
/// the listener, the last one (the channel is dropped then, and on its end).
fn receive(st: &mut Polled, watched: &[PathBuf], refusals: &Collector) {
    let Some(sock) = &st.sock else { return };
    let Ok((body, fds)) = fusemask::recv(sock.as_raw_fd()) else {
        st.sock = None;
        return;
    };
    match body.first() {
        Some(&fusemask::MESSAGE) if st.masks.is_none() => {
            st.masks = fusemask::serve::Masks::from_message(&body, fds, watched);
            // whatever waits already (INIT, if the sandbox did not answer it)
            if let Some(m) = st.masks.as_mut() {
                for (i, fd) in m.fds().into_iter().enumerate() {
                    if m.answer(i, refusals) {
                        st.live.push((i, fd));
                    }
                }
            }
        }
        Some(b'L') => {
            if let Some(l) = fds.into_iter().next() {
                sync_wake_up(l.as_raw_fd());
                st.listener = Some(l);
            }
            st.sock = None;
        }
        _ => st.sock = None,
    }
}

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6): the task that notifies waits for the
/// answer anyway, so the kernel wakes this thread on that task's CPU and the task on
/// ours when it is answered, instead of waking an idle CPU each way: a notification costs
/// about half (~17 to ~9 us in a storm of refused calls). Best effort (older kernels
/// refuse the flag; notifications work as before).
fn sync_wake_up(listener: RawFd) {
    const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: libc::c_ulong = 1;
    // SAFETY: an ioctl on our own listener; its argument is the flags value itself.
    let r = unsafe {
        libc::ioctl(
            listener,
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
            SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
        )
    };
    if r != 0 {
        tracing::debug!(
            "seccomp listener: no synchronous wake-up ({})",
            io::Error::last_os_error()
        );
    }
}

/// Is notification `id` still pending (its task alive, so its pid still names it)?
fn still_valid(listener: RawFd, id: u64) -> bool {
    let mut id = id;
    // SAFETY: the ioctl reads id.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id) == 0 }
}

/// Answer notification `id`: `continue` (the kernel runs the call and decides), or the
/// errno `error` (`0`: the call returns 0).
fn respond(listener: RawFd, id: u64, continue_: bool, error: i32) {
    let mut resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: if continue_ { 0 } else { -error },
        flags: if continue_ {
            libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32
        } else {
            0
        },
    };
    // SAFETY: the ioctl reads resp. A task gone meanwhile gets no answer (ENOENT).
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp) };
}

/// Receive one notification and answer it: a write call continues (observed,
/// [`observe`]), anything else is a refusal of the table, answered `EPERM` and recorded.
pub(crate) fn answer_one(
    listener: RawFd,
    names: &Names,
    allowed: &Allowed,
    served: &[PathBuf],
    budget: Option<&diskguard::Budget>,
    refusals: &Collector,
) {
    answer_one_with(listener, names, allowed, served, budget, refusals, None)
}

/// [`answer_one`], with the command's TCP connects to remote addresses sent where
/// `connects` routes them.
fn answer_one_with(
    listener: RawFd,
    names: &Names,
    allowed: &Allowed,
    served: &[PathBuf],
    budget: Option<&diskguard::Budget>,
    refusals: &Collector,
    connects: Option<&dyn Connects>,
) {
    // SAFETY: seccomp_notif is plain data; the kernel wants it zeroed.
    let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctl fills n.
    if unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n) } != 0 {
        // the task is gone (ENOENT) or interrupted: nothing to answer
        return;
    }
    // the listened filter sends a write call only when its table allowed it (see
    // `seccomp::listened`): continuing it gives the kernel the decision it would have
    // made without us
    let nr = n.data.nr as i64;
    if seccomp::budget_call(nr) {
        return answer_budget(listener, &n, budget, refusals);
    }
    if nr == seccomp::OBSERVED_CONNECT {
        if let Some(c) = connects {
            if routed(listener, &n, c, refusals) {
                return;
            }
        }
    }
    if seccomp::observed(nr) {
        // what the task names is read before the call goes on (its working directory
        // may change after); the judgment is for the report only
        let refused = match seccomp::write_call(nr) {
            Some(w) => {
                let named = observe::named(w, n.pid, &n.data.args);
                if observe::is_read(w, &n.data.args) {
                    let listing = observe::is_listing(w, &n.data.args);
                    // a watched mask lists its own reads
                    let watched = named
                        .paths
                        .iter()
                        .any(|p| served.iter().any(|w| super::plan::within(p, w)));
                    if watched {
                        None
                    } else {
                        observe::judge_read(named, allowed, listing)
                    }
                } else {
                    observe::judge(w, named, allowed, String::new(), None)
                }
            }
            None => observe::connect_peer(n.pid, &n.data.args)
                .and_then(|p| observe::judge_connect(p, allowed, String::new(), None)),
        };
        return answer(listener, &n, refused, true, refusals);
    }
    let refused = Event {
        header: None,
        kind: Kind::Syscall,
        target: names.describe(nr, &n.data.args),
        program: String::new(),
        pid: None,
        grant: None,
        reason: None,
    };
    answer(listener, &n, Some(refused), false, refusals)
}

/// Answer a call that allocates much at once (`fallocate`, `copy_file_range`): continued,
/// unless the bytes it may allocate would take the filesystem of the file it writes below
/// the disk reserve ([`diskguard::Budget`]): then `ENOSPC`, listed as a refused write with
/// the grant that allows more. The file is looked at through `/proc/<pid>/fd/<n>`, opened
/// `O_PATH` (nothing of it is read); the size asked is the call's own argument
/// (`copy_file_range`: at most what its source holds).
fn answer_budget(
    listener: RawFd,
    n: &libc::seccomp_notif,
    budget: Option<&diskguard::Budget>,
    refusals: &Collector,
) {
    let Some(budget) = budget else {
        return respond(listener, n.id, true, 0);
    };
    let a = &n.data.args;
    let copy = n.data.nr as i64 == seccomp::BUDGET_COPY_FILE_RANGE;
    let (out, mut bytes) = if copy {
        (a[2] as i32, a[4])
    } else {
        (a[0] as i32, a[3])
    };
    let open = |fd: i32| -> Option<OwnedFd> {
        let p = std::ffi::CString::new(format!("/proc/{}/fd/{fd}", n.pid)).ok()?;
        // SAFETY: open of a path as O_PATH (nothing is read or opened for real).
        let f = unsafe { libc::open(p.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        // SAFETY: a new descriptor of ours.
        (f >= 0).then(|| unsafe { OwnedFd::from_raw_fd(f) })
    };
    let Some(file) = open(out) else {
        return respond(listener, n.id, true, 0);
    };
    if copy {
        if let Some(size) = open(a[0] as i32)
            .and_then(|s| crate::kernel::checked::stat(s.as_raw_fd()).ok())
            .map(|st| st.st_size.max(0) as u64)
        {
            bytes = bytes.min(size);
        }
    }
    // the descriptor named the task's file (not one of a recycled pid's)
    if !still_valid(listener, n.id) {
        return;
    }
    use std::os::fd::AsFd;
    match budget.allow(file.as_fd(), bytes) {
        Ok(()) => respond(listener, n.id, true, 0),
        Err(b) => {
            respond(listener, n.id, false, libc::ENOSPC);
            let target = std::fs::read_link(format!("/proc/{}/fd/{out}", n.pid))
                .map(|p| crate::refusals::path_target(&p))
                .unwrap_or_else(|_| format!("fd {out}"));
            refusals.add(Event {
                header: None,
                kind: Kind::Write,
                target,
                program: comm(n.pid),
                pid: nspid(n.pid),
                grant: Some(
                    "a smaller \"disk_reserve\" in $CAPSULE_ROOT/settings.json (\"1G\", \"1%\"; \"off\": no guard)"
                        .into(),
                ),
                reason: Some(format!(
                    "{} of {} refused: it would take the filesystem below the disk reserve of {} ({} free)",
                    if copy { "copy_file_range" } else { "fallocate" },
                    crate::limits::show_size(bytes),
                    crate::limits::show_size(b.reserve),
                    crate::limits::show_size(b.free)
                )),
            });
        }
    }
}

/// A `connect` to a remote address (TCP, when `connects` sends it elsewhere): routed by
/// `connects`, and answered here unless it goes on as the kernel decides (`false`).
fn routed(
    listener: RawFd,
    n: &libc::seccomp_notif,
    connects: &dyn Connects,
    refusals: &Collector,
) -> bool {
    let Some(dst) = observe::connect_inet(n.pid, &n.data.args) else {
        return false;
    };
    if dst.ip().is_loopback() {
        return false;
    }
    match connects.route(dst) {
        Route::Continue => false,
        Route::Refuse { errno, event } => {
            answer_errno(listener, n, Some(event), false, errno, refusals);
            true
        }
        Route::To(to) => {
            let fd = n.data.args[0] as u32 as i32;
            let valid = || still_valid(listener, n.id);
            let tell = |local| connects.redirecting(local, dst, &comm(n.pid), nspid(n.pid));
            match redirect::connect(n.pid, fd, to, valid, tell) {
                redirect::Outcome::Continue => false,
                redirect::Outcome::Answer(e) => {
                    respond(listener, n.id, false, e);
                    true
                }
            }
        }
    }
}

/// Answer notification `n` (continue it, or `EPERM`) and record `refused` with the
/// program that asked: its `comm` each time (part of what tells refusals apart), its pid
/// the first time only (a repeat is counted, its pid not kept), both read while the
/// task waits and dropped if it is gone meanwhile (its pid could name another process).
fn answer(
    listener: RawFd,
    n: &libc::seccomp_notif,
    refused: Option<Event>,
    continue_: bool,
    refusals: &Collector,
) {
    answer_errno(listener, n, refused, continue_, libc::EPERM, refusals)
}

/// [`answer`] with the errno `errno` for a refusal.
fn answer_errno(
    listener: RawFd,
    n: &libc::seccomp_notif,
    refused: Option<Event>,
    continue_: bool,
    errno: i32,
    refusals: &Collector,
) {
    let Some(mut e) = refused else {
        return respond(listener, n.id, continue_, errno);
    };
    e.program = comm(n.pid);
    if !refusals.knows(e.kind, &e.target, &e.program) {
        e.pid = nspid(n.pid);
    }
    let valid = still_valid(listener, n.id);
    respond(listener, n.id, continue_, errno);
    if !valid {
        e.program.clear();
        e.pid = None;
    }
    refusals.add(e);
}

/// Up to `max` bytes of `/proc/<pid>/<what>`.
fn proc_read(pid: u32, what: &str, max: usize) -> Option<Vec<u8>> {
    use std::io::Read;
    if pid == 0 {
        return None;
    }
    let f = std::fs::File::open(format!("/proc/{pid}/{what}")).ok()?;
    let mut b = Vec::with_capacity(max);
    f.take(max as u64).read_to_end(&mut b).ok()?;
    Some(b)
}

/// The `comm` of host pid `pid` (empty when unknown).
fn comm(pid: u32) -> String {
    proc_read(pid, "comm", 64)
        .map(|b| String::from_utf8_lossy(b.strip_suffix(b"\n").unwrap_or(&b)).into_owned())
        .unwrap_or_default()
}

/// The pid of host pid `pid` in its innermost pid namespace.
fn nspid(pid: u32) -> Option<i32> {
    nspid_in(&proc_read(pid, "status", 4096)?)
}

/// The pid in the innermost pid namespace, from a `/proc/<pid>/status` file's `NSpid:`.
pub(crate) fn nspid_in(status: &[u8]) -> Option<i32> {
    String::from_utf8_lossy(status)
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|v| v.split_whitespace().last().and_then(|p| p.parse().ok()))
}

/// Syscall names by number, from the filter's table.
pub(crate) struct Names(Vec<(i64, &'static str)>);

impl Names {
    pub(crate) fn new() -> Names {
        let mut v: Vec<(i64, &'static str)> =
            seccomp::rules().iter().map(|r| (r.nr, r.name)).collect();
        v.sort_unstable();
        v.dedup();
        Names(v)
    }

    /// The refused call in a few words: its name, and for calls refused only for some
    /// arguments what made it refused.
    fn describe(&self, nr: i64, args: &[u64; 6]) -> String {
        let name = match self.0.binary_search_by_key(&nr, |e| e.0) {
            Ok(i) => self.0[i].1,
            Err(_) => return format!("syscall {nr}"),
        };
        let low = |i: usize| args[i] & 0xffff_ffff;
        let detail = match name {
            "ioctl" if low(1) == seccomp::TIOCSTI => " TIOCSTI",
            "ioctl" if low(1) == seccomp::TIOCLINUX => " TIOCLINUX",
            "clone" | "unshare" => " CLONE_NEWUSER",
            "personality" => " (a persona turning ASLR off or changing the ABI)",
            "fchmod" | "fchmodat" | "fchmodat2" | "openat" | "mknodat" | "chmod" | "open"
            | "creat" | "mknod" => " (a set-user-ID or set-group-ID mode)",
            _ => "",
        };
        format!("{name}{detail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_is_the_innermost() {
        assert_eq!(nspid_in(b"Name:\tx\nNSpid:\t4242\t7\n"), Some(7));
        assert_eq!(nspid_in(b"Name:\tx\n"), None);
    }

    #[test]
    fn names_refused_calls() {
        let n = Names::new();
        assert_eq!(n.describe(libc::SYS_keyctl, &[0; 6]), "keyctl");
        assert_eq!(
            n.describe(libc::SYS_ioctl, &[0, 0xffff_ffff_0000_5412, 0, 0, 0, 0]),
            "ioctl TIOCSTI"
        );
        assert_eq!(
            n.describe(libc::SYS_unshare, &[0; 6]),
            "unshare CLONE_NEWUSER"
        );
        assert_eq!(n.describe(99999, &[0; 6]), "syscall 99999");
    }

    /// A forked child under the listened filter: keyctl is answered EPERM by the
    /// supervisor and recorded; without the supervisor (listener closed) it is ENOSYS,
    /// still refused.
    #[test]
    fn refused_syscall_is_recorded_and_answered_eperm() {
        let prog = seccomp::SeccompProgram::build().unwrap();
        for supervised in [true, false] {
            let (mine, theirs) = seccomp::listener_channel().unwrap();
            let (rd, wr) = crate::kernel::sys::pipe().unwrap();
            // SAFETY: fork of a test process; the child only makes raw calls and _exits.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                unsafe {
                    libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                    let l = match prog.install_listened() {
                        Ok(Some(l)) => l,
                        _ => libc::_exit(90),
                    };
                    if supervised {
                        let _ = seccomp::send_listener(theirs.as_raw_fd(), l.as_raw_fd());
                    }
                    drop(l);
                    let rc = libc::syscall(libc::SYS_keyctl, 0, 0, 0, 0, 0);
                    let e = *libc::__errno_location();
                    let b = [if rc == -1 { e as u8 } else { 0 }];
                    libc::write(wr, b.as_ptr().cast(), 1);
                    libc::_exit(0);
                }
            }
            drop(theirs);
            crate::kernel::sys::close(wr);
            let c = Arc::new(Collector::new(crate::refusals::Say::Quiet));
            let mut b = [0u8; 1];
            std::thread::scope(|scope| {
                let sup = Supervisor::start(
                    scope,
                    mine,
                    c.clone(),
                    Vec::new(),
                    None,
                    Allowed::default,
                    None,
                )
                .unwrap();
                assert_eq!(crate::kernel::sys::read(rd, &mut b).unwrap(), 1);
                unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
                sup.finish();
            });
            let r = c.refusals();
            if supervised {
                assert_eq!(b[0] as i32, libc::EPERM);
                assert_eq!(r.len(), 1, "{r:?}");
                assert_eq!(r[0].target, "keyctl");
                assert_eq!(r[0].kind, Kind::Syscall);
                assert_eq!(r[0].pid, Some(pid));
                assert!(!r[0].program.is_empty());
            } else {
                assert_eq!(b[0] as i32, libc::ENOSYS);
                assert!(r.is_empty());
            }
            crate::kernel::sys::close(rd);
        }
    }

    /// The supervisor continues every write call, yet what the table refuses among them
    /// (set-id modes) stays refused by the kernel: the listened filter never sends those.
    #[test]
    fn setid_modes_stay_refused_though_writes_continue() {
        let prog = seccomp::SeccompProgram::build().unwrap();
        let d = tempfile::tempdir_in("/dev/shm").unwrap();
        let setid =
            std::ffi::CString::new(d.path().join("setid").into_os_string().into_encoded_bytes())
                .unwrap();
        let plain =
            std::ffi::CString::new(d.path().join("plain").into_os_string().into_encoded_bytes())
                .unwrap();
        let (mine, theirs) = seccomp::listener_channel().unwrap();
        let (rd, wr) = crate::kernel::sys::pipe().unwrap();
        // SAFETY: fork of a test process; the child only makes raw calls and _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                let l = match prog.install_listened() {
                    Ok(Some(l)) => l,
                    _ => libc::_exit(90),
                };
                let _ = seccomp::send_listener(theirs.as_raw_fd(), l.as_raw_fd());
                drop(l);
                let flags = libc::O_CREAT | libc::O_WRONLY;
                let a = libc::openat(libc::AT_FDCWD, setid.as_ptr(), flags, 0o4755);
                let ea = *libc::__errno_location();
                let b = libc::openat(libc::AT_FDCWD, plain.as_ptr(), flags, 0o644);
                let c = libc::chmod(plain.as_ptr(), 0o2755);
                let ec = *libc::__errno_location();
                let out = [
                    (a == -1 && ea == libc::EPERM) as u8,
                    (b >= 0) as u8,
                    (c == -1 && ec == libc::EPERM) as u8,
                ];
                libc::write(wr, out.as_ptr().cast(), 3);
                libc::_exit(0);
            }
        }
        drop(theirs);
        crate::kernel::sys::close(wr);
        let c = Arc::new(Collector::new(crate::refusals::Say::Quiet));
        let mut b = [0u8; 3];
        std::thread::scope(|scope| {
            let sup = Supervisor::start(
                scope,
                mine,
                c.clone(),
                Vec::new(),
                None,
                Allowed::default,
                None,
            )
            .unwrap();
            assert_eq!(crate::kernel::sys::read(rd, &mut b).unwrap(), 3);
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            sup.finish();
        });
        crate::kernel::sys::close(rd);
        assert_eq!(
            b,
            [1, 1, 1],
            "set-id openat refused, plain openat continued, set-id chmod refused"
        );
        assert!(!d.path().join("setid").exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.path().join("plain"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o6000, 0);
    }
}

//! The holder of a prepared root: the process (pid 1 of a pid namespace of its own, in the
//! user and mount namespaces it made) that builds the root once ([`mounts::build_root`]),
//! collects its Landlock rules, keeps [`SPARES`] warm inits ready ([`warm`]), and serves
//! joins on its socket until it has been idle for [`idle`], its bundle is gone or it is
//! told to stop. It watches its mount table ([`MountWatch`]) so a root that lost a mount
//! is never served. The exec side (fingerprint, spawn, join) is [`super`]'s.

use super::{idle, peer_uid, JoinReply};
use crate::kernel::landlock::LandlockRules;
use crate::kernel::sys;
use crate::linux::{mounts, warm, ExecPlan};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

/// Spares a holder keeps ready.
const SPARES: usize = 2;

/// The holder's state (all prepared before the clone).
pub(super) struct Holder<'a> {
    pub(super) plan: &'a ExecPlan,
    pub(super) listener: &'a UnixListener,
    /// The prepared directory, to remove our socket when we end.
    pub(super) dirfd: RawFd,
    pub(super) name: &'a str,
    /// Inode of our socket file (only that one is removed).
    pub(super) ino: u64,
    /// The full fingerprint of the plan this root was prepared for.
    pub(super) fp: &'a str,
    pub(super) report: RawFd,
    pub(super) go: RawFd,
}

impl Holder<'_> {
    fn fail(&self, msg: String) -> ! {
        let _ = sys::write_all(self.report, format!("E{msg}\n").as_bytes());
        // SAFETY: _exit in a cloned child.
        unsafe { libc::_exit(1) }
    }

    pub(super) fn main(self) -> ! {
        let mut b = [0u8; 1];
        if !matches!(sys::read(self.go, &mut b), Ok(1)) {
            // SAFETY: _exit in a cloned child.
            unsafe { libc::_exit(1) }
        }
        sys::close(self.go);
        // SAFETY: leaving the caller's session and process group (its ^C is not ours).
        unsafe { libc::setsid() };
        // the exec that spawned us blocks the signals it forwards: a holder takes them
        // (SIGTERM ends it like any process)
        let _ = nix::sys::signal::SigSet::empty().thread_set_mask();
        set_title();
        // the folders its spares' cgroups go in, while the host's are still in view (or
        // why they cannot be made, told to each exec)
        let (cgroups, no_cgroups) =
            match crate::kernel::cgroup::SpareCgroups::open(&self.plan.limits) {
                Ok(c) => (c, None),
                Err(why) => (None, Some(why)),
            };
        // and the device its spares' watched masks are opened from
        let fuse_dev = if self.plan.watched.is_empty() {
            None
        } else {
            crate::linux::fusemask::device()
        };
        if let Err(e) = mounts::build_root(&self.plan.mounts) {
            self.fail(format!("preparing the sandbox's root: {e}"));
        }
        let open_ns = |p: &str| {
            nix::fcntl::open(
                p,
                nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
        };
        let (userns, mntns) = match (open_ns("/proc/self/ns/user"), open_ns("/proc/self/ns/mnt")) {
            (Ok(u), Ok(m)) => (u, m),
            (Err(e), _) | (_, Err(e)) => {
                self.fail(format!("opening the prepared root's namespaces: {e}"))
            }
        };
        let (policy, opts) = crate::linux::init::landlock_inputs(self.plan);
        let rules = match LandlockRules::collect(&policy, &opts) {
            Ok(r) => r,
            Err(e) => self.fail(e.to_string()),
        };
        let missing: Vec<String> = rules
            .report()
            .missing()
            .iter()
            .map(|m| m.right.to_string())
            .collect();
        if !missing.is_empty() {
            self.fail(format!(
                "Landlock ABI {} lacks rights this policy needs: {}",
                rules.report().abi,
                missing.join(", ")
            ));
        }
        let landlock = serde_json::to_value(rules.report()).unwrap_or_default();
        // keep only what serving needs; the caller's stdio and everything else goes
        let mut keep = vec![
            self.listener.as_raw_fd(),
            self.dirfd,
            self.report,
            userns.as_raw_fd(),
            mntns.as_raw_fd(),
        ];
        keep.extend(rules.fds());
        keep.extend(cgroups.iter().flat_map(|c| c.fds()));
        keep.extend(fuse_dev.as_ref().map(|f| f.as_raw_fd()));
        close_all_but(&keep);
        // 0, 1 and 2 point at /dev/null: a descriptor received later never takes their
        // numbers (a spare dup2s the exec's stdio there)
        for want in 0..3 {
            // SAFETY: probing and opening descriptors of our own.
            unsafe {
                if libc::fcntl(want, libc::F_GETFD) < 0 {
                    let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                    if fd >= 0 && fd != want {
                        libc::dup2(fd, want);
                        libc::close(fd);
                    }
                }
            }
        }
        let _ = sys::prctl(libc::PR_SET_DUMPABLE, 0, 0);
        let _ = sys::write_all(self.report, b"R\n");
        sys::close(self.report);
        let fuse_dev = fuse_dev.as_ref().map_or(-1, |f| f.as_raw_fd());
        self.serve(
            &userns,
            &mntns,
            &rules,
            &landlock,
            cgroups.as_ref(),
            no_cgroups.as_deref(),
            fuse_dev,
        )
    }

    fn serve(
        &self,
        userns: &OwnedFd,
        mntns: &OwnedFd,
        rules: &LandlockRules,
        landlock: &serde_json::Value,
        cgroups: Option<&crate::kernel::cgroup::SpareCgroups>,
        no_cgroups: Option<&str>,
        fuse_dev: RawFd,
    ) -> ! {
        let idle = idle();
        let mut last = Instant::now();
        // SAFETY: getuid cannot fail.
        let me = unsafe { libc::getuid() };
        // the mounts of the prepared root, counted now: a host path removed under one of
        // them (rmdir of a hidden folder) detaches it in every namespace, and a root that
        // lost a mount is never served again, whatever the fingerprint says (inode numbers
        // can be reused)
        let Ok(mut watch) = MountWatch::new() else {
            self.end(Vec::new(), Vec::new(), cgroups)
        };
        let mut own = vec![
            self.listener.as_raw_fd(),
            self.dirfd,
            userns.as_raw_fd(),
            mntns.as_raw_fd(),
            watch.fd.as_raw_fd(),
        ];
        own.extend(cgroups.iter().flat_map(|c| c.fds()));
        // each spare waits in cgroups of its own when the execs limit resources: it moves
        // itself there as it starts, so that neither the exec nor this holder waits for
        // the move
        let make = || {
            let groups = cgroups.and_then(|c| c.prepare());
            let procs: Vec<RawFd> = groups
                .iter()
                .flat_map(|(_, f, _)| f.iter().map(|f| f.as_raw_fd()))
                .collect();
            let made = warm::make(self.plan, rules, landlock, &own, &procs, fuse_dev);
            let Ok(mut s) = made else {
                if let (Some(c), Some((name, _, _))) = (cgroups, &groups) {
                    c.remove(name);
                }
                return None;
            };
            if let Some((name, _, g)) = groups {
                s.cgroup = Some(name);
                s.groups = g;
            }
            Some(s)
        };
        // spares ready (up to SPARES); the first one at once, for the exec that spawned us
        let mut spares: Vec<warm::Spare> = make().into_iter().collect();
        // spares handed out and still running (they live in our pid namespace), with our
        // pidfds of them (readable when they end) and their cgroups, handed on when they end
        let mut served: Vec<Served> = Vec::new();
        loop {
            reap(&mut served, &mut spares, cgroups);
            // new spares are made when no exec runs in ours, capsule included (their CPU
            // work then competes with none), or at once when execs run side by side (see
            // `X`); two ready ones let execs back to back find one each
            // one at a time, with a look for a waiting exec in between: making a spare that
            // waits in cgroups takes the kernel's moves of it (tens of ms), and an exec
            // that came meanwhile takes the one ready instead of waiting for both
            let mut more = false;
            if served.is_empty() && spares.len() < SPARES {
                if let Some(s) = make() {
                    spares.push(s);
                    more = spares.len() < SPARES;
                }
            }
            let left = idle.saturating_sub(last.elapsed());
            if (left.is_zero() && served.is_empty()) || self.bundle_gone() {
                self.end(spares, served, cgroups);
            }
            let mut pfds: Vec<libc::pollfd> = std::iter::once(self.listener.as_raw_fd())
                .chain(served.iter().map(|s| s.pidfd.as_raw_fd()))
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // idle time used up but execs still running in our spares: look again in 5 s
            // (not every millisecond)
            let wait = if left.is_zero() {
                Duration::from_secs(5)
            } else {
                left.min(Duration::from_secs(5))
            };
            let ms = wait.as_millis() as libc::c_int;
            let ms = if more { 0 } else { ms.max(1) };
            // SAFETY: a valid array of pollfds.
            let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
            if n <= 0 || pfds[0].revents == 0 {
                continue;
            }
            let Ok((mut conn, _)) = self.listener.accept() else {
                continue;
            };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
            if peer_uid(conn.as_raw_fd()).ok() != Some(me) {
                continue;
            }
            let mut req = [0u8; 66];
            let mut got = 0;
            while got < req.len() {
                match conn.read(&mut req[got..]) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
                if req[..got].ends_with(b"\n") {
                    break;
                }
            }
            let line = &req[..got];
            let ours = line.len() > 1 && line[1..] == *format!("{}\n", self.fp).as_bytes();
            if ours && !watch.unchanged() {
                drop(conn);
                self.end(spares, served, cgroups)
            }
            match line.first() {
                Some(b'J') if ours => {
                    last = Instant::now();
                    let _ = answer(&mut conn, userns, mntns, rules, landlock, self.plan);
                }
                Some(b'X') if ours => {
                    last = Instant::now();
                    spares.retain(warm::Spare::alive);
                    // none ready (more execs at once than spares): one made now, which
                    // gets ready while capsule sends its request
                    let next = if spares.is_empty() {
                        make()
                    } else {
                        Some(spares.remove(0))
                    };
                    match next {
                        Some(s) => {
                            let cgroup = s.cgroup.clone().map(|n| (n, s.groups.clone()));
                            if let Ok((pid, pidfd)) = s.hand_over(&conn, no_cgroups) {
                                served.push(Served { pid, pidfd, cgroup });
                            }
                            // execs side by side: the next one is not kept waiting
                            if spares.is_empty() && served.len() > 1 {
                                spares.extend(make());
                            }
                        }
                        None => {
                            let _ = conn.write_all(b"N");
                        }
                    }
                }
                Some(b'Q') => {
                    let _ = conn.write_all(b"q");
                    drop(conn);
                    self.end(spares, served, cgroups)
                }
                _ => {}
            }
        }
    }

    /// The bundle (and with it our socket's directory) was removed.
    fn bundle_gone(&self) -> bool {
        // SAFETY: fstat into a zeroed stat of our descriptor.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let rc = unsafe { libc::fstat(self.dirfd, &mut st) };
        rc < 0 || st.st_nlink == 0
    }

    /// Remove our socket (only if it is still ours), stop the spare, wait for the execs
    /// still running in spares we handed out (our exit would kill them), and exit.
    fn end(
        &self,
        spares: Vec<warm::Spare>,
        served: Vec<Served>,
        cgroups: Option<&crate::kernel::cgroup::SpareCgroups>,
    ) -> ! {
        if let Ok(n) = std::ffi::CString::new(self.name) {
            // SAFETY: fstatat/unlinkat relative to our directory descriptor.
            unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                if libc::fstatat(self.dirfd, n.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0
                    && st.st_ino == self.ino
                {
                    libc::unlinkat(self.dirfd, n.as_ptr(), 0);
                }
            }
        }
        // SAFETY: closing our listening socket: no new joins.
        unsafe { libc::close(self.listener.as_raw_fd()) };
        for s in &spares {
            // SAFETY: killing our own child.
            unsafe { libc::kill(s.pid, libc::SIGKILL) };
        }
        // SAFETY: reaping every child (the spare, the served ones) until none is left.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) } > 0 {}
        // the cgroups of spares nobody took, and those of the served ones, handed on
        if let Some(c) = cgroups {
            for name in spares.iter().filter_map(|s| s.cgroup.as_deref()) {
                c.remove(name);
            }
            for s in &served {
                if let Some((name, groups)) = &s.cgroup {
                    c.hand_on(name, groups);
                }
            }
        }
        // SAFETY: _exit in the holder.
        unsafe { libc::_exit(0) }
    }
}

/// Name the holder `capsule-holder` in `ps`, instead of the command line of the exec
/// that spawned it (which named a command the holder does not run): the argument area is
/// overwritten in place, as `setproctitle` does, and the thread is renamed.
fn set_title() {
    let _ = sys::prctl(
        libc::PR_SET_NAME,
        c"capsule-holder".as_ptr() as libc::c_ulong,
        0,
    );
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // fields after the command name in parentheses; arg_start and arg_end are the 48th
    // and 49th of the whole line
    let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
        return;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let (Some(a), Some(e)) = (
        f.get(45).and_then(|v| v.parse::<usize>().ok()),
        f.get(46).and_then(|v| v.parse::<usize>().ok()),
    ) else {
        return;
    };
    if e <= a {
        return;
    }
    let title = b"capsule-holder";
    // SAFETY: [arg_start, arg_end) is this process's own argument area, mapped and
    // writable (the initial stack); nothing of ours reads it any more (std copied argv).
    unsafe {
        let area = std::slice::from_raw_parts_mut(a as *mut u8, e - a);
        area.fill(0);
        let n = title.len().min(area.len() - 1);
        area[..n].copy_from_slice(&title[..n]);
    }
}

/// The holder's watch on its own mount table: `/proc/self/mountinfo` held open, which the
/// kernel marks (`POLLPRI`) on every mount or unmount in the namespace, propagated ones
/// and detaches by rmdir included. Its mounts are counted when the watch starts and again
/// only after a mark: a join costs one `poll`, however many paths are hidden.
struct MountWatch {
    fd: OwnedFd,
    mounts: usize,
}

impl MountWatch {
    fn new() -> io::Result<Self> {
        // opened before the count: a change after the open marks it
        let fd = nix::fcntl::open(
            "/proc/self/mountinfo",
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(io::Error::from)?;
        let mounts = count_mounts()?;
        Ok(MountWatch { fd, mounts })
    }

    /// Has the namespace still every mount it had when the watch started? (Mounts of
    /// our own that a change of the host's brought and took again count as unchanged.)
    fn unchanged(&mut self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no waiting; a mark is read (and cleared) by the poll.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        if n == 0 {
            return true;
        }
        if n < 0 || p.revents & (libc::POLLPRI | libc::POLLERR) == 0 {
            return false;
        }
        count_mounts().ok() == Some(self.mounts)
    }
}

/// Mounts in this process's mount namespace (lines of `/proc/self/mountinfo`).
fn count_mounts() -> io::Result<usize> {
    std::fs::read("/proc/self/mountinfo").map(|b| b.iter().filter(|c| **c == b'\n').count())
}

/// A spare handed out to an exec, still running.
struct Served {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    /// The cgroups it waits in (their name and groups), handed on when it ends.
    cgroup: Option<(String, Vec<crate::kernel::cgroup::Group>)>,
}

/// Reap the spares that ended; the groups of a served one are handed on (its exec is
/// done: a spare ends after its capsule).
fn reap(
    served: &mut Vec<Served>,
    spares: &mut Vec<warm::Spare>,
    cgroups: Option<&crate::kernel::cgroup::SpareCgroups>,
) {
    loop {
        // SAFETY: reaping our own children without blocking.
        let w = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if w <= 0 {
            break;
        }
        if let Some(i) = served.iter().position(|s| s.pid == w) {
            let s = served.remove(i);
            if let (Some(c), Some((name, groups))) = (cgroups, &s.cgroup) {
                c.hand_on(name, groups);
            }
        }
        spares.retain(|s| s.pid != w);
    }
}

/// One join: a fresh ruleset, then the descriptors and the report.
fn answer(
    conn: &mut UnixStream,
    userns: &OwnedFd,
    mntns: &OwnedFd,
    rules: &LandlockRules,
    landlock: &serde_json::Value,
    plan: &ExecPlan,
) -> io::Result<()> {
    let (created, again) = rules
        .create(&mounts::per_exec_roots(&plan.mounts))
        .map_err(io::Error::other)?;
    let ruleset: Option<OwnedFd> = created.and_then(|c| c.into());
    let reply = serde_json::to_vec(&JoinReply {
        landlock: landlock.clone(),
        again,
        ruleset: ruleset.is_some(),
    })
    .map_err(io::Error::other)?;
    let mut fds = vec![userns.as_raw_fd(), mntns.as_raw_fd()];
    if let Some(r) = &ruleset {
        fds.push(r.as_raw_fd());
    }
    let first = sys::send_fds(conn.as_raw_fd(), &reply[..reply.len().min(4096)], &fds)?;
    conn.write_all(&reply[first..])
}

/// Close every descriptor of this process but `keep` (0, 1 and 2 included).
fn close_all_but(keep: &[RawFd]) {
    let mut open: Vec<RawFd> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc/self/fd") {
        for e in rd.flatten() {
            if let Some(fd) = e.file_name().to_str().and_then(|s| s.parse().ok()) {
                open.push(fd);
            }
        }
    }
    for fd in open {
        if !keep.contains(&fd) {
            sys::close(fd);
        }
    }
}

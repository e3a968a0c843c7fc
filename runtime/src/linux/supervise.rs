//! The supervision of a running sandbox from the host ([`supervise`]): its init watched by
//! pid and pidfd, signals forwarded, the pty and output relayed, the timeouts and the disk
//! guard enforced, the report pipe read; and the inits that ended before they were reaped.

use super::report::Report;
use super::{activity, diskguard, init, pty, ExecPlan, Isolation, Termination};
use crate::kernel::sys;
use nix::sys::signal::SigSet;
use std::os::fd::RawFd;
use std::time::Instant;

/// Inits that reported [`Report::Ended`] and were not reaped yet (reaped by later runs).
static UNREAPED: std::sync::Mutex<Vec<libc::pid_t>> = std::sync::Mutex::new(Vec::new());

/// Reap the inits of earlier runs that have exited by now.
pub(super) fn reap_finished() {
    if let Ok(mut v) = UNREAPED.lock() {
        // SAFETY: waiting for our own children without blocking.
        v.retain(|p| unsafe { libc::waitpid(*p, std::ptr::null_mut(), libc::WNOHANG) } == 0);
    }
}

/// The report says init has ended the sandbox ([`Report::Ended`]): its status as a wait
/// status.
fn ended(report: &[u8]) -> Option<libc::c_int> {
    report
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<Report>(l).ok())
        .find_map(|r| match r {
            Report::Ended { code } => Some((code & 0xff) << 8),
            _ => None,
        })
}

/// The init `supervise` watches.
#[derive(Clone, Copy)]
pub(super) struct Init {
    /// Its pid, when it is our child (else -1: a warm spare, child of its holder).
    pub(super) pid: libc::pid_t,
    /// Its pidfd (opened here for a child).
    pub(super) pidfd: RawFd,
}

impl Init {
    pub(super) fn child(pid: libc::pid_t) -> Init {
        // a pidfd tells us init ended even if a stray thread of ours swallowed the SIGCHLD
        // SAFETY: pidfd_open on our own child.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as RawFd;
        Init { pid, pidfd }
    }

    fn signal(&self, sig: libc::c_int) {
        if self.pid > 0 {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.pid, sig) };
        } else {
            // SAFETY: signalling the process of a pidfd we own.
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    self.pidfd,
                    sig,
                    std::ptr::null::<libc::c_void>(),
                    0u32,
                )
            };
        }
    }

    /// Reap it if it has ended: its wait status, or `None` while it runs. Not our child:
    /// ended once its pidfd is readable; status as if killed (the report says more).
    fn reap(&self, pidfd_ready: bool) -> Option<libc::c_int> {
        if self.pid > 0 {
            let mut status = 0;
            // SAFETY: waiting for our own child.
            let w = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            (w == self.pid).then_some(status)
        } else {
            pidfd_ready.then_some(libc::SIGKILL)
        }
    }
}

/// Wait for init: forward signals, relay the pty, enforce the timeout, read the report
/// pipe. Returns init's wait status, whether the timeout fired, and the report bytes.
pub(super) fn supervise(
    init: Init,
    plan: &ExecPlan,
    rep_r: RawFd,
    mut pty: Option<&mut pty::Pty>,
    mut out: Option<&mut activity::Relay>,
    mask: &SigSet,
    mut guard: Option<&mut diskguard::Guard>,
    breach: &mut Option<diskguard::Breach>,
) -> std::io::Result<(libc::c_int, Option<Termination>, Vec<u8>)> {
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use std::os::fd::AsRawFd;
    let sfd = SignalFd::with_flags(mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(std::io::Error::from)?;
    let pid = init.pid;
    let pidfd = init.pidfd;
    // SAFETY: fcntl on our own descriptor.
    unsafe {
        let fl = libc::fcntl(rep_r, libc::F_GETFL);
        libc::fcntl(rep_r, libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let deadline = plan.timeout.map(|t| Instant::now() + t);
    let mut watch = plan.activity_timeout.map(activity::Watch::new);
    let mut report = Vec::new();
    let mut rep_open = true;
    let mut timed_out = false;
    let mut killed = None;
    let mut relay: Option<pty::Relay> = None;
    loop {
        let mut fds = vec![libc::pollfd {
            fd: sfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if rep_open {
            fds.push(libc::pollfd {
                fd: rep_r,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        fds.push(libc::pollfd {
            fd: pidfd,
            events: libc::POLLIN,
            revents: 0,
        });
        let pidfd_idx = fds.len() - 1;
        let console_idx = fds.len();
        fds.push(libc::pollfd {
            fd: match &pty {
                Some(p) if relay.is_none() => p.sock,
                _ => -1,
            },
            events: libc::POLLIN,
            revents: 0,
        });
        let relay_base = fds.len();
        if let Some(r) = &relay {
            fds.extend(r.pollfds());
        }
        let out_base = fds.len();
        if let Some(o) = &out {
            fds.extend(o.pollfds());
        }
        // the nearer of the absolute deadline and the end of the allowed silence
        let next = match (deadline, &watch) {
            _ if timed_out => None,
            (Some(d), Some(w)) => Some(d.min(w.deadline())),
            (d, w) => d.or(w.as_ref().map(|w| w.deadline())),
        };
        // and the disk guard's next look
        let next = match (next, guard.as_ref()) {
            _ if timed_out => None,
            (Some(d), Some(g)) => Some(d.min(g.due())),
            (d, g) => d.or(g.map(|g| g.due())),
        };
        let timeout_ms = match next {
            Some(d) => {
                // rounded up: a poll that ends a little early only loops once more
                let left = d.saturating_duration_since(Instant::now());
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
            None => -1,
        };
        // SAFETY: fds is a valid array of pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let now = Instant::now();
        if !timed_out {
            if let Some(b) = guard.as_mut().and_then(|g| g.check(now)) {
                // below the reserve: the whole tree, before the disk is full
                tracing::debug!("disk guard: {b:?}");
                *breach = Some(b);
                timed_out = true;
                killed = Some(Termination::DiskReserve);
                init.signal(if plan.isolation == Isolation::Full {
                    libc::SIGKILL
                } else {
                    init::kill_all_signal()
                });
                continue;
            }
        }
        let silent = watch.as_ref().is_some_and(|w| now >= w.deadline());
        if !timed_out && (deadline.is_some_and(|d| now >= d) || silent) {
            timed_out = true;
            killed = Some(if deadline.is_some_and(|d| now >= d) {
                Termination::TimedOut
            } else {
                Termination::ActivityTimeout
            });
            let sig = if plan.isolation == Isolation::Full {
                libc::SIGKILL
            } else {
                init::kill_all_signal()
            };
            init.signal(sig);
            continue;
        }
        if rep_open && fds[1].revents != 0 {
            let mut buf = [0u8; 4096];
            match sys::read(rep_r, &mut buf) {
                Ok(0) | Err(_) => rep_open = false,
                Ok(k) => {
                    report.extend_from_slice(&buf[..k]);
                    // init's last word: everything in the sandbox is dead already
                    let from = report.len().saturating_sub(k + 8);
                    if report[from..].windows(7).any(|w| w == b"\"ended\"") {
                        if let Some(status) = ended(&report) {
                            tracing::debug!("run: init reported the end");
                            if let Some(r) = relay.as_mut() {
                                r.drain();
                            }
                            if let Some(o) = out.as_mut() {
                                o.drain();
                            }
                            // SAFETY: reaping our own child if it is gone already.
                            let w =
                                unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
                            if w != pid {
                                if let Ok(mut v) = UNREAPED.lock() {
                                    v.push(pid);
                                }
                            }
                            sys::close(pidfd);
                            return Ok((status, killed, report));
                        }
                    }
                }
            }
        }
        if fds[console_idx].revents != 0 {
            if let Some(p) = pty.as_mut() {
                match p.receive_master() {
                    Ok(_) => relay = Some(p.relay()),
                    // init is gone before sending: its report says why
                    Err(_) => pty = None,
                }
            }
        }
        if let Some(r) = relay.as_mut() {
            // (none polled yet when the relay was made in this round)
            let polled = fds.get(relay_base..(relay_base + 2).min(fds.len()));
            let polled = polled.unwrap_or_default();
            // the terminal's output is the command's activity under -t
            if polled.get(1).is_some_and(|f| f.revents != 0) {
                if let Some(w) = watch.as_mut() {
                    w.last = Instant::now();
                }
            }
            r.pump(polled);
        }
        if let Some(o) = out.as_mut() {
            if o.pump(&fds[out_base..]) {
                if let Some(w) = watch.as_mut() {
                    w.last = Instant::now();
                }
            }
        }
        let init_ended = pidfd >= 0 && fds[pidfd_idx].revents != 0;
        if fds[0].revents != 0 || init_ended {
            while let Ok(Some(info)) = sfd.read_signal() {
                let sig = info.ssi_signo as libc::c_int;
                if sig == libc::SIGCHLD {
                    continue;
                }
                if sig == libc::SIGWINCH {
                    if let Some(r) = &relay {
                        r.resize();
                    }
                    continue;
                }
                init.signal(sig);
            }
            if let Some(status) = init.reap(init_ended) {
                tracing::debug!("run: init reaped");
                sys::close(pidfd);
                // drain what is left of the report and the terminal output
                if let Some(r) = relay.as_mut() {
                    r.drain();
                }
                if let Some(o) = out.as_mut() {
                    o.drain();
                }
                while rep_open {
                    let mut buf = [0u8; 4096];
                    match sys::read(rep_r, &mut buf) {
                        Ok(0) | Err(_) => rep_open = false,
                        Ok(k) => report.extend_from_slice(&buf[..k]),
                    }
                }
                // init's own word on how the command ended, if it got to say it (a warm
                // spare is not our child: its status is not ours to wait for)
                let status = ended(&report).unwrap_or(status);
                return Ok((status, killed, report));
            }
        }
    }
}

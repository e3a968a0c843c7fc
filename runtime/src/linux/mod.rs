//! The Linux executor: user, mount, pid, network, ipc and uts namespaces, a fresh root
//! built from read-only binds, Landlock and seccomp, and an init (pid 1) that reaps and
//! forwards signals.
//!
//! One code path for root and for an unprivileged user, the way bubblewrap works:
//!
//! ```text
//! capsule (host)                      init (pid 1 of the new namespaces)      command
//! ─────────────────────────────────── ─────────────────────────────────────── ──────────────
//! clone(NEWUSER|NEWNS|NEWPID|NEWNET|…) ─▶ PDEATHSIG=KILL, wait for the maps
//! write uid_map/gid_map (uid->uid)   ─▶ build the root (plan.rs, mounts.rs),
//!                                        hostname, loopback up
//!                                        fork ───────────────────────────────▶ chdir, drop caps,
//!                                        run inside hooks (e.g. net relay),    no_new_privs,
//!                                        release the command ─────────────────▶ Landlock, seccomp,
//! relay signals / pty / timeout ◀──────  forward signals, reap; when the          exec
//! read the report pipe (supervise.rs)    command ends, kill everything left
//! ```
//!
//! The report pipe carries JSON lines from init and the command's setup: a failed setup
//! step, the layers that were applied, an `execve` failure, the command's signal.
//!
//! Known limits (measured or reasoned, not hidden):
//! - connect(2) to a unix socket ignores read-only mounts and Landlock has no rule for it
//!   before ABI 9 (from ABI 9 on, it is allowed in the writable paths only): the host's
//!   sockets that the sandbox would show are masked, as the kernel lists them for the
//!   host's network namespace ([`sockets`]). Below ABI 9, one bound in another network
//!   namespace onto a visible host path after the prepared root was made is not masked.
//! - Root runs mapped to itself, so root-owned files keep their owner permissions; writable
//!   kernel knobs under /proc are read-only mounts and root-only system secrets are masked
//!   ([`plan::SYSTEM_SECRETS`]).
//! - A workspace under the host's /tmp is bound inside the capsule's /tmp, whose skeleton
//!   directories then appear in the bundle's tmp.
//!
//! [`run`] must be called while the calling process is single-threaded (the children
//! allocate between `clone` and `execve`): it refuses to start otherwise (only a git read
//! `gitguard` gave up on, parked on a FIFO, may be alive; the exec record's own workspace
//! snapshots never block and take no thread). Host-side threads (the stderr
//! relay of `home::display`, the allowlist proxy) start in [`Hooks::before_release`],
//! after the clone; bind their sockets before.
//!
//! Three ways to the command's init, fastest first ([`prepared`], [`warm`]):
//! - **warm**: the capsule's prepared root has a spare init ready (namespaces, root,
//!   `/proc`, loopback, Landlock ruleset, seccomp program); `capsule` sends it the exec's
//!   argv, environment, cwd, stdio, umask and limits and supervises it by pidfd.
//! - **joined**: the prepared root's user and mount namespaces are joined (`setns`) and
//!   init is cloned into a copy of the mount table with its own pid/net/ipc/uts namespaces,
//!   `/proc` and devpts; used when init must run hooks inside (the allowlist relay).
//! - **built**: the root is built for this exec alone, as in the diagram above; used when
//!   prepared roots are off (`CAPSULE_PREPARED_IDLE=0`) or cannot be joined (a caller in
//!   another user namespace), and for probes. The same isolation either way.
//!
//! Where the time goes (release build, `RUST_LOG=capsule_runtime=debug` prints the points)
//! is measured side by side with bwrap and runc by `hack/bench-exec.sh`; see
//! docs/benchmarks.md. A built root costs ~3 ms (55 mounts, 35 `mount_setattr`, one bind per
//! hidden path); a warm exec makes no mount, no namespace and no Landlock or seccomp call
//! on its path (the spare did all of that ahead of time, and its teardown waits until
//! capsule has exited): its cost is capsule's own start (a static-pie binary, see
//! `hack/build-release.sh`), the gate, the plan and its fingerprint (one `statx` per
//! mounted path, or one listing of a folder of many hidden paths), the record's two
//! workspace snapshots (`crate::record`, ~0.1-0.3 ms), a fork in the spare and the
//! command's `execve`.
//!
//! The same [`ExecPlan`] renders as an OCI `config.json` ([`oci`], for `capsule export`
//! and `capsule inspect`), never on the exec path.

mod activity;
pub mod diskguard;
pub mod fusemask;
pub mod hooks;
pub mod init;
pub mod mounts;
pub mod notify;
pub mod observe;
pub mod oci;
pub mod outcome;
pub mod plan;
pub mod prepared;
pub mod pty;
pub mod redirect;
pub mod report;
pub mod sockets;
mod spawn;
mod supervise;
pub mod warm;

use crate::kernel::{cgroup, ns, seccomp, sys};
pub use hooks::{Connects, Hooks, InitHook, Route};
pub use outcome::ExecOutcome;
pub use plan::{ExecPlan, Isolation, MountStep, Stdio};
use report::Report;
pub use report::{Applied, ExecError, Termination};
use spawn::{single_threaded, write_id_maps};
use supervise::{reap_finished, supervise, Init};

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use std::ffi::CString;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::time::Instant;

/// Signals `capsule` forwards to the sandbox.
const FORWARDED: &[Signal] = &[
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Run `plan`'s command in the sandbox and wait for it.
pub fn run(plan: &ExecPlan, mut hooks: Hooks) -> Result<ExecOutcome, ExecError> {
    reap_finished();
    let hooks_before_release = hooks.before_release.take();
    let start = Instant::now();
    let setup = |what: &str, e: std::io::Error| ExecError::Setup(format!("{what}: {e}"));
    let argv = cstrings(plan.argv.iter().map(|a| a.as_bytes().to_vec()))?;
    let envp = cstrings(plan.env.iter().map(|(k, v)| {
        let mut b = k.as_bytes().to_vec();
        b.push(b'=');
        b.extend_from_slice(v.as_bytes());
        b
    }))?;
    if argv.is_empty() {
        return Err(ExecError::Setup("no command given".into()));
    }
    let mut pty = match plan.stdio {
        Stdio::Tty => Some(pty::Pty::open().map_err(|e| setup("opening a pseudo-terminal", e))?),
        Stdio::Inherit | Stdio::Redirect { .. } => None,
    };
    let (rep_r, rep_w) = sys::pipe().map_err(|e| setup("pipe", e))?;
    let (sync_r, sync_w) = sys::pipe().map_err(|e| setup("pipe", e))?;
    // the seccomp listener's way to capsule ([`notify`]): its sandbox end is init's and
    // the command's (or a warm spare's) until the listener is sent
    let (notify_mine, notify_theirs) = match seccomp::listener_channel() {
        Ok(c) => c,
        Err(e) => {
            for fd in [rep_r, rep_w, sync_r, sync_w] {
                sys::close(fd);
            }
            return Err(setup("socketpair", e));
        }
    };
    let notify_fd = {
        use std::os::fd::AsRawFd;
        notify_theirs.as_raw_fd()
    };
    let refusals = hooks.refusals.take().unwrap_or_default();
    let connects = hooks.connects.take();

    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    mask.add(Signal::SIGWINCH);
    for s in FORWARDED {
        mask.add(*s);
    }
    let old_mask = mask
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .map_err(|e| setup("blocking signals", e.into()))?;
    let restore = |old: &SigSet| {
        let _ = old.thread_set_mask();
    };

    // a prepared root for this plan (a warm spare, or its namespaces to join; spawned
    // first if need be), else none. Spares run no hooks inside.
    let mut before_clone = hooks.before_clone.take();
    let mut run_before_clone = move || {
        if let Some(f) = before_clone.take() {
            f()
        }
    };
    // once per exec: the prepared root's fingerprint is made from it, the record keeps it
    let plan_digest = plan.digest();
    tracing::debug!("run: plan digest: {:?}", start.elapsed());
    let entry = match prepared::join(
        plan,
        &plan_digest,
        hooks.inside.is_empty(),
        &mut run_before_clone,
    ) {
        Ok(j) => j,
        Err(e) => {
            restore(&old_mask);
            for fd in [rep_r, rep_w, sync_r, sync_w] {
                sys::close(fd);
            }
            return Err(e);
        }
    };
    tracing::debug!(
        "run: prepared root {}: {:?}",
        match &entry {
            Some(prepared::Entry::Warm(_)) => "warm",
            Some(prepared::Entry::Joined(_)) => "joined",
            None => "not used",
        },
        start.elapsed()
    );
    let (joined, mut warm) = match entry {
        Some(prepared::Entry::Joined(j)) => (Some(j), None),
        Some(prepared::Entry::Warm(w)) => (None, Some(w)),
        None => (None, None),
    };
    // capsule's own default limits ([`ExecPlan::cgroups_found_here`]): the warm spare's
    // groups as they are (nothing read or written on the way), or groups made now for init
    // to move itself in; where neither can be, the exec runs without them (said in the
    // outcome) and processes are bounded by `RLIMIT_NPROC` instead
    let mut found = cgroup::Found::default();
    let mut own_files = Vec::new();
    let without_cgroups;
    let plan: &ExecPlan = if plan.cgroups_found_here && plan.limits.needs_cgroup() {
        match &warm {
            Some(w) if !w.handed.groups.is_empty() => {
                found.groups = w.handed.groups();
                if let Err(e) = cgroup::fit(&found.groups, &plan.limits) {
                    found.not_enforced = Some(e.to_string());
                    found.groups.clear();
                }
            }
            Some(w) => {
                found.not_enforced =
                    Some(w.handed.no_cgroups.clone().unwrap_or_else(|| {
                        "the prepared root's spare waits in no cgroup".to_string()
                    }))
            }
            None => match cgroup::ExecCgroups::create(&plan.limits) {
                Ok(mut c) => {
                    own_files = c.procs_files();
                    found.groups = std::mem::take(&mut c.groups);
                }
                Err(e) => found.not_enforced = Some(e.to_string()),
            },
        }
        if found.not_enforced.is_some() {
            without_cgroups = plan.without_cgroup_limits();
            &without_cgroups
        } else {
            plan
        }
    } else {
        plan
    };
    // the filter the command installs; a warm spare has its own installed already
    let seccomp = match plan.isolation {
        Isolation::None => None,
        _ if warm.is_some() => None,
        _ => match seccomp::SeccompProgram::build_for(plan.list_reads, plan.list_writes) {
            Ok(p) => Some(p),
            Err(e) => {
                restore(&old_mask);
                for fd in [rep_r, rep_w, sync_r, sync_w] {
                    sys::close(fd);
                }
                return Err(ExecError::Setup(e.to_string()));
            }
        },
    };
    // The children allocate between clone and execve: no other thread of ours may be
    // running then (it could hold an allocator lock the child would wait on forever). A
    // warm spare is not our child: nothing is cloned here then.
    if warm.is_none() {
        run_before_clone();
        if let Err(e) = single_threaded() {
            restore(&old_mask);
            for fd in [rep_r, rep_w, sync_r, sync_w] {
                sys::close(fd);
            }
            return Err(e);
        }
    }

    let mut flags: libc::c_long = libc::SIGCHLD as libc::c_long;
    let mut namespaces = Vec::new();
    if plan.isolation == Isolation::Full {
        flags |= (libc::CLONE_NEWUSER
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS) as libc::c_long;
        namespaces = vec!["user", "mount", "pid", "ipc", "uts"];
        if plan.new_netns {
            flags |= libc::CLONE_NEWNET as libc::c_long;
            namespaces.push("net");
        }
    }
    let pty_child_sock = pty.as_ref().map(|p| p.child_sock);
    // `--activity-timeout` with inherited stdio: the command writes into pipes of ours
    // from here to the clone (or the warm spare's request)
    let mut relay = match (plan.activity_timeout, plan.stdio) {
        (Some(_), Stdio::Inherit) => match activity::Relay::start() {
            Ok(r) => Some(r),
            Err(e) => {
                restore(&old_mask);
                for fd in [rep_r, rep_w, sync_r, sync_w] {
                    sys::close(fd);
                }
                return Err(setup("relaying the output (--activity-timeout)", e));
            }
        },
        _ => None,
    };
    // this exec's cgroups, for init to move itself in (a warm spare waits in its own)
    let self_files = if own_files.is_empty() {
        &plan.cgroup_procs
    } else {
        &own_files
    };
    let cgroup_self = if warm.is_none() && !self_files.is_empty() {
        match cgroup::open_self_moves(self_files, &plan.limits) {
            Ok(f) => f,
            Err(e) if !own_files.is_empty() => {
                // capsule's defaults: run without them, said in the outcome
                found.groups.clear();
                found.not_enforced = Some(format!("placing the sandbox in its cgroup: {e}"));
                Vec::new()
            }
            Err(e) => {
                // (the relay, if any, gives capsule's stdio back as it is dropped)
                restore(&old_mask);
                for fd in [rep_r, rep_w, sync_r, sync_w] {
                    sys::close(fd);
                }
                return Err(setup("placing the sandbox in its cgroup", e));
            }
        }
    } else {
        Vec::new()
    };
    let cgroup_self_fds: Vec<RawFd> = {
        use std::os::fd::AsRawFd;
        cgroup_self.iter().map(|f| f.as_raw_fd()).collect()
    };
    // the device init opens the watched masks' connections from (a warm spare has made
    // its own)
    let fuse_dev =
        if warm.is_none() && !plan.watched.is_empty() && plan.isolation == Isolation::Full {
            fusemask::device()
        } else {
            None
        };
    // whether init runs in the prepared root (false again if joining it fails)
    let in_prepared = std::cell::Cell::new(joined.is_some());
    let mut child = Some(|| -> ! {
        sys::close(rep_r);
        sys::close(sync_w);
        let ctx = init::Ctx {
            plan,
            argv: &argv,
            envp: &envp,
            report: rep_w,
            sync: sync_r,
            pty_sock: pty_child_sock,
            old_mask: &old_mask,
            seccomp: seccomp.as_ref(),
            notify: Some(notify_fd),
            namespaces: &namespaces,
            t0: start,
            root: match (in_prepared.get(), joined.as_ref()) {
                (true, Some(j)) => init::Root::Joined(j),
                _ => init::Root::Build,
            },
            cgroup_self: &cgroup_self_fds,
            fuse_dev: fuse_dev.as_ref().map_or(-1, |f| {
                use std::os::fd::AsRawFd;
                f.as_raw_fd()
            }),
        };
        init::main(ctx, hooks)
    });
    let mut pid: libc::c_long = -1;
    let mut warm_pidfd = None;
    // the groups the sandbox runs in, when a warm spare's own were taken
    let mut cgroup_dirs = Vec::new();
    if let Some(w) = warm.as_mut() {
        // the spare is init: into this exec's cgroups before it forks the command (it
        // does when it gets the request)
        use std::os::fd::AsRawFd;
        if !plan.cgroup_procs.is_empty() {
            let handed = w.handed.groups();
            let moved = if handed.len() == plan.cgroup_procs.len() {
                // the groups the spare waits in, as its holder named them
                cgroup::fit(&handed, &plan.limits)
                    .map(|_| handed.iter().map(|g| g.dir.clone()).collect())
            } else {
                sys::pidfd_pid(w.pidfd.as_raw_fd())
                    .and_then(|p| cgroup::enter_warm(&plan.cgroup_procs, p, &plan.limits))
            };
            match moved {
                Ok(dirs) => cgroup_dirs = dirs,
                Err(e) => {
                    drop(child.take());
                    restore(&old_mask);
                    for fd in [rep_r, rep_w, sync_r, sync_w] {
                        sys::close(fd);
                    }
                    return Err(setup("placing the sandbox in its cgroup", e));
                }
            }
        }
        // the spare is init: send it this exec
        match warm::send(&mut w.conn, plan, rep_w, sync_r, notify_fd, pty_child_sock) {
            Ok(()) => pid = 0,
            Err(e) => {
                drop(child.take());
                restore(&old_mask);
                for fd in [rep_r, rep_w, sync_r, sync_w] {
                    sys::close(fd);
                }
                return Err(ExecError::Setup(format!(
                    "handing the exec to the prepared root's spare: {e}"
                )));
            }
        }
    }
    if let Some(w) = warm.take() {
        use std::os::fd::IntoRawFd;
        warm_pidfd = Some(w.pidfd.into_raw_fd());
    }
    if let Some(j) = &joined {
        // the user namespace is the prepared root's; all else is this exec's own
        let f = flags & !(libc::CLONE_NEWUSER as libc::c_long);
        let mut run_child = || {
            if let Some(c) = child.take() {
                c()
            }
        };
        match prepared::spawn_init(j, f, &mut run_child) {
            Ok(p) => pid = p as libc::c_long,
            Err(e) => {
                // e.g. a caller in another user namespace than the holder's parent: build
                // the root for this exec alone (the same isolation, only slower)
                tracing::warn!("cannot join the prepared root ({e}); building the root");
                in_prepared.set(false);
            }
        }
    }
    let mut clone_error = None;
    if !in_prepared.get() && warm_pidfd.is_none() {
        match ns::fork_into(flags) {
            Ok(ns::Forked::Child) => {
                if let Some(c) = child.take() {
                    c()
                }
                // SAFETY: unreachable in practice (init never returns).
                unsafe { libc::_exit(125) }
            }
            Ok(ns::Forked::Parent(p)) => pid = p as libc::c_long,
            Err(e) => clone_error = Some(e),
        }
    }
    drop(child);
    if let Some(e) = clone_error {
        restore(&old_mask);
        for fd in [rep_r, rep_w, sync_r, sync_w] {
            sys::close(fd);
        }
        let msg = format!("{} ({e})", namespaces.join(", "));
        return Err(if plan.isolation == Isolation::Full {
            ExecError::Namespaces(msg)
        } else {
            ExecError::Setup(format!("fork: {e}"))
        });
    }
    let pid = pid as libc::pid_t;
    if let Some(r) = relay.as_mut() {
        r.give_back();
    }
    tracing::debug!("run: cloned: {:?}", start.elapsed());
    sys::close(rep_w);
    sys::close(sync_r);
    if let Some(p) = pty.as_mut() {
        sys::close(p.child_sock);
        p.child_sock = -1;
    }
    if plan.isolation == Isolation::Full && !in_prepared.get() && warm_pidfd.is_none() {
        if let Err(e) = write_id_maps(pid) {
            // SAFETY: killing and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            restore(&old_mask);
            sys::close(rep_r);
            sys::close(sync_w);
            return Err(setup("writing the user namespace's id maps", e));
        }
    }
    // init has its copies of the cgroup files (it moves itself in after the byte below)
    drop(cgroup_self);
    // one byte: the id maps are written; init builds the root meanwhile
    let _ = sys::write_all(sync_w, &[1]);
    drop(notify_theirs);
    let init_proc = match warm_pidfd {
        Some(pidfd) => Init { pid: -1, pidfd },
        None => Init::child(pid),
    };
    // the seccomp supervisor runs beside the supervision of the sandbox, in a scope of
    // this exec (it borrows the plan, and works out what it needs of it only when the
    // first notification comes)
    let mut breach = None;
    let waited = std::thread::scope(|scope| {
        let allowed =
            || observe::Allowed::of_plan(plan, init::landlock_inputs(plan).1.extra_writable);
        let seccomp_supervisor = match notify::Supervisor::start(
            scope,
            notify_mine,
            refusals,
            plan.watched.clone(),
            diskguard::Budget::new(plan.disk_reserve),
            allowed,
            connects,
        ) {
            Ok(s) => Some(s),
            Err(e) => {
                // the command then gets ENOSYS for what the filter refuses: still refused
                tracing::warn!("cannot start the seccomp supervisor: {e}");
                None
            }
        };
        if let Some(f) = hooks_before_release {
            f();
        }
        tracing::debug!("run: before_release done: {:?}", start.elapsed());
        // second byte: the command may start
        let _ = sys::write_all(sync_w, &[2]);
        sys::close(sync_w);
        let mut guard = diskguard::Guard::new(plan, plan.disk_reserve, Instant::now());
        let waited = supervise(
            init_proc,
            plan,
            rep_r,
            pty.as_mut(),
            relay.as_mut(),
            &mask,
            guard.as_mut(),
            &mut breach,
        );
        if let Some(s) = seccomp_supervisor {
            s.finish();
        }
        waited
    });
    restore(&old_mask);
    sys::close(rep_r);
    drop(pty);
    drop(relay);
    let (status, killed, report_bytes) = waited.map_err(|e| setup("supervising", e))?;
    let timed_out = killed.is_some();

    let mut applied = None;
    let mut signaled = None;
    for line in report_bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
    {
        match serde_json::from_slice::<Report>(line) {
            Ok(Report::SetupFailed { step }) => return Err(ExecError::Setup(step)),
            Ok(Report::ExecFailed { errno, command }) => {
                return Err(if errno == libc::ENOENT {
                    ExecError::NotFound { command }
                } else {
                    ExecError::NotExecutable {
                        command,
                        error: std::io::Error::from_raw_os_error(errno).to_string(),
                    }
                })
            }
            Ok(Report::Layers { applied: a }) => applied = Some(a),
            Ok(Report::Signaled { signal }) => signaled = Some(signal),
            Ok(Report::Ended { .. }) => {}
            Err(e) => tracing::warn!("unreadable report from the sandbox: {e}"),
        }
    }
    let termination = if let Some(k) = killed {
        k
    } else if let Some(s) = signaled {
        Termination::Signaled(s)
    } else if libc::WIFEXITED(status) {
        Termination::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Termination::Signaled(libc::WTERMSIG(status))
    } else {
        Termination::Exited(crate::exit::SANDBOX_FAILED as i32)
    };
    let Some(mut applied) = applied else {
        if timed_out {
            return Err(ExecError::Setup(
                "the timeout expired before the command started".into(),
            ));
        }
        return Err(ExecError::Setup(format!(
            "the sandbox's init ended before the command started (status {status:#x})"
        )));
    };
    applied.plan_digest = plan_digest;
    Ok(ExecOutcome {
        termination,
        duration: start.elapsed(),
        applied,
        cgroup_dirs,
        found,
        disk_reserve_reached: breach,
    })
}

fn cstrings(items: impl Iterator<Item = Vec<u8>>) -> Result<Vec<CString>, ExecError> {
    items
        .map(|b| {
            CString::new(b).map_err(|_| {
                ExecError::Setup("an argument or environment value contains a NUL byte".into())
            })
        })
        .collect()
}

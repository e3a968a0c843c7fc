//! The processes `create` leaves behind for a container (the refusal observer, the disk
//! guard): how one is started (forked twice, so that it is nobody's child but the
//! reaper's, as the container's init is; in a session of its own; stdio on `/dev/null`
//! and no other descriptor but those it keeps, so that whoever waits for create's output,
//! the shim, sees it end with create; in the container's cgroups, so that it is counted
//! in the container's limits and goes with it), its pid file in the state directory,
//! `delete`'s word to it to end (SIGUSR1) and wait for its last lines, and the
//! container's processes told apart from these ([`container_pids`]: `ps`, `kill --all`
//! and `delete` act on the container's own).

use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

/// The refusal observer's pid file, in the state directory.
pub const OBSERVER_PID: &str = "observer.pid";
/// The disk guard's pid file, in the state directory.
pub const GUARD_PID: &str = "diskguard.pid";

/// The pids of the helpers of the container whose state directory is `dir` (those
/// running now, by their pid files).
pub fn helpers(dir: &Path) -> Vec<libc::pid_t> {
    [OBSERVER_PID, GUARD_PID]
        .iter()
        .filter_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

/// The processes in the container's cgroups (and the sub-cgroups below them) but its
/// helpers.
pub fn container_pids(cgroups: &[PathBuf], dir: &Path) -> Vec<libc::pid_t> {
    let helpers = helpers(dir);
    let mut pids = crate::kernel::cgroup::container::all_pids(cgroups);
    pids.retain(|p| !helpers.contains(p));
    pids
}
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Whether `delete` said to end (SIGUSR1).
pub fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Fork the detached process (`what` names it in errors), moved into `cgroups` and its
/// pid written to `dir/pid_file` before this returns: `Ok(false)` in create, once it runs
/// on its own; `Ok(true)` in the detached process itself, with `keep` moved to 3, 4, ...
/// in order and every other descriptor closed. The detached process must end with
/// `_exit`.
pub fn fork(
    dir: &Path,
    pid_file: &str,
    what: &str,
    keep: &[RawFd],
    cgroups: &[PathBuf],
) -> Result<bool, String> {
    // SAFETY: fork of a single-threaded process (create).
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(format!(
            "starting the {what}: {}",
            std::io::Error::last_os_error()
        ));
    }
    if child > 0 {
        let mut st = 0;
        // SAFETY: reaping our own child (it forks the detached process and exits).
        unsafe { libc::waitpid(child, &mut st, 0) };
        return if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0 {
            Ok(false)
        } else {
            Err(format!(
                "starting the {what}: it could not be placed in the container's cgroups"
            ))
        };
    }
    // SAFETY: a session of its own, then the process itself in a second fork; its pid
    // is written before create returns, so that a delete however soon finds it.
    unsafe {
        libc::setsid();
        match libc::fork() {
            0 => {}
            n if n < 0 => libc::_exit(1),
            n => {
                // in the container's cgroups (its pids and memory count it), then known
                let ok = crate::kernel::cgroup::container::enter(cgroups, n).is_ok()
                    && std::fs::write(dir.join(pid_file), n.to_string()).is_ok();
                if !ok {
                    libc::kill(n, libc::SIGKILL);
                }
                libc::_exit(if ok { 0 } else { 1 })
            }
        }
    }
    // SAFETY: descriptors of ours, moved into place (first out of the way of 3.., then
    // there), the rest closed.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for n in 0..3 {
            libc::dup2(null, n);
        }
        let high: Vec<RawFd> = keep
            .iter()
            .map(|fd| libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 10 + keep.len() as RawFd))
            .collect();
        for (k, fd) in high.iter().enumerate() {
            libc::dup3(*fd, 3 + k as RawFd, libc::O_CLOEXEC);
        }
        libc::syscall(libc::SYS_close_range, 3 + keep.len() as u32, u32::MAX, 0u32);
    }
    // the first a memory cgroup's OOM killer would leave (best effort: lowering it
    // needs CAP_SYS_RESOURCE): a helper killed would leave the observer's filter with
    // no listener, and the container's writes failing
    let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    // SIGUSR1 (from delete: the container's processes are gone): finish and end
    // SAFETY: a handler that only stores to an atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_stop as extern "C" fn(libc::c_int) as usize;
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
    }
    Ok(true)
}

/// `delete`, once the container's processes are gone: tell the process of `dir/pid_file`
/// to end, and wait (at most a second) for it to write its last lines.
pub fn wait_for(dir: &Path, pid_file: &str) {
    let Some(pid) = std::fs::read_to_string(dir.join(pid_file))
        .ok()
        .and_then(|s| s.trim().parse::<libc::pid_t>().ok())
    else {
        return;
    };
    if is_ours(pid) {
        // SAFETY: a signal to our own process (checked by its executable just now).
        unsafe { libc::kill(pid, libc::SIGUSR1) };
    }
    // in steps of 0.2 ms: the process ends within a few of them, and delete waits
    for _ in 0..5000 {
        let (t, zombie) = super::state::proc_start(pid);
        // gone, a zombie, or another process (not of our executable)
        if t == 0 || zombie || !is_ours(pid) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

fn is_ours(pid: libc::pid_t) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .zip(std::env::current_exe().ok())
        .is_some_and(|(a, b)| a == b)
}

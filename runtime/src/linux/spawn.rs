//! What the host side checks and writes around the clone of a sandbox: that no other
//! thread of capsule runs ([`single_threaded`]), and the new user namespace's id maps
//! ([`write_id_maps`]).

use super::report::ExecError;
use crate::kernel::ns;
use std::time::Duration;

/// Map our own uid and gid to the same ids inside (root stays root, a user stays itself),
/// `setgroups` denied.
pub(crate) fn write_id_maps(pid: libc::pid_t) -> std::io::Result<()> {
    let (uid, gid) = ns::own_ids();
    ns::write_id_maps(pid, &[uid], &[gid], true).map_err(|(_, e)| e)
}

/// Other threads of this process, by id.
fn other_threads() -> Vec<String> {
    // SAFETY: gettid cannot fail.
    let me = unsafe { libc::syscall(libc::SYS_gettid) }.to_string();
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|t| *t != me)
                .collect()
        })
        .unwrap_or_default()
}

/// Is thread `tid` a git read `gitguard` gave up on (named `capsule-git-read`), parked in
/// the kernel on a FIFO, pipe or terminal? Blocked in open(2) or read(2) on a file planted
/// in the workspace's git directory, it holds no allocator lock. Any other thread counts
/// as running, parked or not.
fn parked(tid: &str) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap_or_default();
    // comm holds 15 bytes of the name
    if !"capsule-git-read".starts_with(comm.trim()) || comm.trim().len() < 15 {
        return false;
    }
    let w = std::fs::read_to_string(format!("/proc/self/task/{tid}/wchan")).unwrap_or_default();
    w == "wait_for_partner" || w.contains("pipe") || w.contains("fifo") || w.contains("tty")
}

/// Refuse to clone while another thread of ours could be running: the executor's children
/// allocate between `clone` and `execve`, and a lock held by a thread that does not exist
/// in the child is never released there. Threads that are just ending get a few
/// milliseconds to go; given-up git reads parked on a FIFO, pipe or terminal
/// ([`parked`]) are tolerated. Host-side helpers (the stderr relay, the network proxy) start in
/// `Hooks::before_release`, after the clone.
pub(crate) fn single_threaded() -> Result<(), ExecError> {
    let mut others = other_threads();
    // a thread that just handed over its result (gitguard's reads) is usually gone within
    // tens of microseconds: look again often, for at most ~20 ms
    for i in 0..400 {
        if others.iter().all(|t| parked(t)) {
            break;
        }
        if i < 50 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
        others = other_threads();
    }
    let running: Vec<String> = others.iter().filter(|t| !parked(t)).cloned().collect();
    if !running.is_empty() {
        let names: Vec<String> = running
            .iter()
            .map(|t| {
                let comm = std::fs::read_to_string(format!("/proc/self/task/{t}/comm"))
                    .unwrap_or_default();
                format!("{t} ({})", comm.trim())
            })
            .collect();
        return Err(ExecError::Setup(format!(
            "internal error: other threads of capsule are running when the sandbox would start: {} (the sandbox must be started single-threaded)",
            names.join(", ")
        )));
    }
    if !others.is_empty() {
        tracing::debug!(
            "{} parked threads alive when starting the sandbox",
            others.len()
        );
    }
    Ok(())
}

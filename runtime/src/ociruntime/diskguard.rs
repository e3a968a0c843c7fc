//! The disk guard of a container: the reserve `capsule exec` keeps free on every host
//! filesystem its task can write ([`crate::linux::diskguard`], whose looks and reserve
//! this reuses), kept for the host filesystems a container can write: the one behind its
//! rootfs (unless `root.readonly`) and those behind its writable bind mounts. A
//! filesystem the bundle mounts itself (a tmpfs: memory, bounded by the memory cgroup)
//! is not the host's and not watched.
//!
//! `create` looks once before anything is made (a filesystem below its reserve already
//! fails create: nothing runs) and leaves a guard process behind
//! ([`super::detached`]), apart from the refusal observer so that either can be off. It
//! looks as the exec's supervisor does, at an interval set by the headroom, and when the
//! container's writing would take a filesystem below its reserve within 50 ms it kills
//! the container (its init, whose death ends its pid namespace, and every process of its
//! cgroup), says so in one line in `--log` (level `error`) and writes the line to
//! `<root>/<id>/limits_reached`, which `state` shows as `limits_reached`. The guard ends
//! with the container's processes or its state directory.
//!
//! What it keeps and watches is decided by the container's plan
//! ([`crate::plan::container::disk`]).

use super::observe::LogTo;
use crate::linux::diskguard::{Breach, Guard, Reserve};
use crate::plan::container::disk::{DiskPlan, ANNOTATION, ENV};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

const PID_FILE: &str = super::detached::GUARD_PID;

/// The reserve as the log and the state say it (`disk_reserve=5%,2 GiB`).
pub fn show(r: Reserve) -> String {
    let v = match r {
        Reserve::Share {
            percent,
            cap: u64::MAX,
        } => format!("{percent}%"),
        Reserve::Share { percent, cap } => {
            format!("{percent}%,{}", crate::limits::show_size(cap))
        }
        Reserve::Bytes(b) => crate::limits::show_size(b),
        Reserve::Off => "off".into(),
    };
    format!("disk_reserve={v}")
}

/// `create`, before anything is made: the container's guard (`None`: off), having looked
/// once; an error when a filesystem is below its reserve already.
pub fn prepare(disk: &DiskPlan, rootfs: &Path) -> Result<Option<Guard>, String> {
    let Some(mut g) = Guard::of_paths(disk.paths(rootfs), disk.reserve, Instant::now()) else {
        return Ok(None);
    };
    match g.look_now() {
        None => Ok(Some(g)),
        Some(b) => Err(format!(
            "the disk guard: free space on the filesystem of {} is {}, below the disk reserve of {}: nothing ran (free space there, or set another reserve: annotation {ANNOTATION} or {ENV}, \"1G\", \"1%\", \"off\")",
            capsule_bundle::escape::name(b.path.as_os_str().as_bytes()),
            crate::limits::show_size(b.free),
            crate::limits::show_size(b.reserve)
        )),
    }
}

/// The disk guard's budget on a container's process: its `RLIMIT_FSIZE` no higher than
/// `headroom` (the least free space above the reserve of the filesystems it can write,
/// at the guard's first look), so that no single file can take a disk below the reserve;
/// a lower limit of the bundle's stands.
pub fn budget(rlimits: &mut Vec<(libc::__rlimit_resource_t, String, u64, u64)>, headroom: u64) {
    match rlimits.iter_mut().find(|r| r.0 == libc::RLIMIT_FSIZE) {
        Some(r) => {
            r.2 = r.2.min(headroom);
            r.3 = r.3.min(headroom);
        }
        None => rlimits.push((
            libc::RLIMIT_FSIZE,
            "RLIMIT_FSIZE (the disk guard's budget)".into(),
            headroom,
            headroom,
        )),
    }
}

/// The container whose guard it is.
struct Container<'a> {
    dir: &'a Path,
    id: &'a str,
    pid: libc::pid_t,
    start_time: u64,
    cgroups: &'a [PathBuf],
    log: Option<&'a LogTo>,
}

/// `create`, once the init is ready and its state saved: leave the guard of container
/// `id` behind. Returns once it runs on its own; on an error the init is killed.
pub fn start(guard: Guard, root: &Path, id: &str, log: Option<&LogTo>) -> Result<(), String> {
    let s = super::state::load(root, id)?;
    let dir = super::state::dir(root, id);
    let c = Container {
        dir: &dir,
        id,
        pid: s.pid,
        start_time: s.start_time,
        cgroups: &s.cgroups,
        log,
    };
    spawn(guard, &c).inspect_err(|_| {
        // SAFETY: killing and reaping our own child, the init.
        unsafe {
            libc::kill(s.pid, libc::SIGKILL);
            libc::waitpid(s.pid, std::ptr::null_mut(), 0);
        }
    })
}

fn spawn(guard: Guard, c: &Container<'_>) -> Result<(), String> {
    if !super::detached::fork(c.dir, PID_FILE, "disk guard", &[], c.cgroups)? {
        return Ok(());
    }
    watch(guard, c);
    let _ = std::fs::remove_file(c.dir.join(PID_FILE));
    // SAFETY: leaving the guard process.
    unsafe { libc::_exit(0) }
}

/// `delete`: tell the guard to end, and wait for it.
pub fn wait_for(dir: &Path) {
    super::detached::wait_for(dir, PID_FILE)
}

fn init_alive(c: &Container<'_>) -> bool {
    let (t, zombie) = super::state::proc_start(c.pid);
    t == c.start_time && !zombie
}

fn watch(mut guard: Guard, c: &Container<'_>) {
    loop {
        if super::detached::stopping() || !c.dir.exists() {
            return;
        }
        if !init_alive(c) && super::detached::container_pids(c.cgroups, c.dir).is_empty() {
            return;
        }
        if let Some(b) = guard.check(Instant::now()) {
            kill(c);
            say(c, &b);
            sweep(c);
            return;
        }
        let wait = guard.due().saturating_duration_since(Instant::now());
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        // SAFETY: a sleep (cut short by delete's SIGUSR1).
        unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
    }
}

/// Kill the container at once: its init (in its own pid namespace that ends them all),
/// then every process of its cgroup (not v2's `cgroup.kill`: the guard and the observer
/// are in the cgroup too, and the guard has its line to say).
fn kill(c: &Container<'_>) {
    if init_alive(c) {
        // SAFETY: killing the container's init (the same process as at create).
        unsafe { libc::kill(c.pid, libc::SIGKILL) };
    }
    for p in super::detached::container_pids(c.cgroups, c.dir) {
        // SAFETY: killing a process of the container.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
}

/// Then every process left in its cgroup, until none is (a second at most).
fn sweep(c: &Container<'_>) {
    for _ in 0..500 {
        let pids = super::detached::container_pids(c.cgroups, c.dir);
        if pids.is_empty() {
            break;
        }
        for p in pids {
            // SAFETY: killing a process of the container.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        if crate::kernel::cgroup::container::is_frozen(c.cgroups) {
            // a frozen process gets its SIGKILL once thawed
            let _ = crate::kernel::cgroup::container::freeze(c.cgroups, false);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

fn say(c: &Container<'_>, b: &Breach) {
    let line = b.message();
    let _ = std::fs::write(c.dir.join(super::state::REACHED), format!("{line}\n"));
    if let Some(l) = c.log {
        super::log_to(
            &l.path,
            l.json,
            "error",
            &format!(
                "capsule: container {}: {line}; another reserve: annotation {ANNOTATION} or {ENV} (\"1G\", \"1%\", \"off\")",
                c.id
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_shown_as_the_log_says_it() {
        assert_eq!(show(Reserve::default()), "disk_reserve=5%,2 GiB");
        assert_eq!(show(Reserve::Off), "disk_reserve=off");
    }
}

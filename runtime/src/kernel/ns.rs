//! Namespaces and `clone`: the one raw `clone` both front ends make their processes
//! with ([`fork_into`]: a fork into new namespaces), the memory-sharing children that
//! join namespaces or outlive an exit ([`clone_vm`]), joining a namespace by descriptor
//! ([`join`], [`of_process`]), a user namespace's id maps ([`write_id_maps`]) and
//! becoming its root ([`become_root`]); and an exit whose address space's teardown a
//! memory-sharing child takes over ([`exit_lightly`]).
//!
//! A raw `clone(2)` without `CLONE_VM` behaves like `fork`: the child gets a copy of the
//! address space and continues on its copy of the stack, so it may return from here. The
//! caller must be single-threaded (the child allocates before `execve`, and a lock held by
//! another thread would never be released there).

use std::io;
use std::os::fd::{OwnedFd, RawFd};

/// Which side of a [`fork_into`] this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    /// The new process.
    Child,
    /// The caller; the child's pid (in the caller's pid namespace).
    Parent(libc::pid_t),
}

/// `clone(flags)` without `CLONE_VM`: a fork into the new namespaces of `flags`
/// (`CLONE_NEW*`, and the signal the parent gets at the child's end, `SIGCHLD` for a
/// child to wait for; `CLONE_PARENT` for a sibling).
pub fn fork_into(flags: libc::c_long) -> io::Result<Forked> {
    // SAFETY: a raw clone without CLONE_VM behaves like fork; the child continues on its
    // own copy of this stack.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    match pid {
        0 => Ok(Forked::Child),
        p if p < 0 => Err(io::Error::last_os_error()),
        p => Ok(Forked::Parent(p as libc::pid_t)),
    }
}

/// A stack for a [`clone_vm`] child: an anonymous private mapping, unmapped on drop (or
/// left for the process's end, [`Stack::leak`]).
pub struct Stack {
    base: *mut libc::c_void,
    size: usize,
}

impl Stack {
    /// Map `size` bytes (reserved lazily).
    pub fn new(size: usize) -> io::Result<Stack> {
        // SAFETY: an anonymous private mapping of our own.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Stack { base, size })
    }

    /// Never unmap it (a child that outlives our use of it keeps running on it).
    pub fn leak(self) {
        std::mem::forget(self);
    }

    /// The top of the stack (it grows down; the mapping is page-aligned).
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of our own mapping.
        unsafe { (self.base as *mut u8).add(self.size) as *mut libc::c_void }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.base, self.size) };
    }
}

/// `clone(f, stack, flags, arg)` with `CLONE_VM` in `flags`: a child that shares our
/// memory and runs `f(arg)` on `stack`. Returns its pid.
///
/// # Safety
/// `f` runs in our memory beside us (or while we wait, with `CLONE_VFORK`): it may make
/// system calls only, allocate nothing and take no lock; `arg` must outlive its use there.
pub unsafe fn clone_vm(
    f: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    stack: &Stack,
    flags: libc::c_int,
    arg: *mut libc::c_void,
) -> io::Result<libc::pid_t> {
    // SAFETY: the caller's contract; the stack is ours and large enough.
    let pid = unsafe { libc::clone(f, stack.top(), flags, arg) };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

/// `setns(fd, nstype)`: join the namespace of descriptor `fd` (no allocation).
pub fn join(fd: RawFd, nstype: libc::c_int) -> io::Result<()> {
    // SAFETY: setns of a descriptor the caller owns.
    if unsafe { libc::setns(fd, nstype) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The kinds of namespace by their `/proc/<pid>/ns/` name, in the order a process joins
/// them (the user namespace first: it gives the rights to join the others).
pub const KINDS: &[(&str, libc::c_int)] = &[
    ("user", libc::CLONE_NEWUSER),
    ("ipc", libc::CLONE_NEWIPC),
    ("uts", libc::CLONE_NEWUTS),
    ("net", libc::CLONE_NEWNET),
    ("pid", libc::CLONE_NEWPID),
    ("cgroup", libc::CLONE_NEWCGROUP),
    ("mnt", libc::CLONE_NEWNS),
];

/// A namespace to join: its descriptor, its `CLONE_NEW*` flag and its kind's name.
pub type Namespace = (OwnedFd, libc::c_int, &'static str);

/// The namespaces of process `pid` that are not ours, opened, in [`KINDS`] order.
pub fn of_process(pid: libc::pid_t) -> io::Result<Vec<Namespace>> {
    use std::os::unix::fs::MetadataExt;
    let ino = |p: &str| std::fs::metadata(p).map(|m| m.ino()).unwrap_or(0);
    let mut out = Vec::new();
    for (k, f) in KINDS {
        let theirs = format!("/proc/{pid}/ns/{k}");
        if ino(&theirs) != ino(&format!("/proc/self/ns/{k}")) {
            let fd = std::fs::File::open(&theirs)
                .map_err(|e| io::Error::new(e.kind(), format!("opening {theirs}: {e}")))?;
            out.push((OwnedFd::from(fd), *f, *k));
        }
    }
    Ok(out)
}

/// One line of an id map: `size` ids from `inside` in the namespace are `outside` out
/// of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMap {
    pub inside: u32,
    pub outside: u32,
    pub size: u32,
}

/// Which map failed to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapStep {
    SetGroups,
    Uid,
    Gid,
}

/// Write the user namespace id maps of process `pid` (a child in a new user namespace,
/// waiting for them): `setgroups` denied first when `deny_setgroups` (what an
/// unprivileged writer of a gid map must do), then the uid and the gid map.
pub fn write_id_maps(
    pid: libc::pid_t,
    uids: &[IdMap],
    gids: &[IdMap],
    deny_setgroups: bool,
) -> Result<(), (MapStep, io::Error)> {
    let text = |m: &[IdMap]| {
        m.iter()
            .map(|m| format!("{} {} {}\n", m.inside, m.outside, m.size))
            .collect::<String>()
    };
    if deny_setgroups {
        std::fs::write(format!("/proc/{pid}/setgroups"), "deny")
            .map_err(|e| (MapStep::SetGroups, e))?;
    }
    std::fs::write(format!("/proc/{pid}/uid_map"), text(uids)).map_err(|e| (MapStep::Uid, e))?;
    std::fs::write(format!("/proc/{pid}/gid_map"), text(gids)).map_err(|e| (MapStep::Gid, e))?;
    Ok(())
}

/// Our own effective uid and gid mapped to themselves: the one map an unprivileged
/// process may write (root stays root, a user stays itself).
pub fn own_ids() -> (IdMap, IdMap) {
    // SAFETY: getters cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let one = |id| IdMap {
        inside: id,
        outside: id,
        size: 1,
    };
    (one(uid), one(gid))
}

/// Become root (uid and gid 0) of the user namespace we are in: until then a process
/// cloned into a new one runs as an unmapped id there, and what it mounts refuses to
/// make anything (`EOVERFLOW`). 0 must be mapped.
pub fn become_root() -> io::Result<()> {
    // SAFETY: plain system calls on our own process.
    if unsafe { libc::setresgid(0, 0, 0) } < 0 || unsafe { libc::setresuid(0, 0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A session of our own (no controlling terminal), unless we already lead one.
pub fn new_session() {
    // SAFETY: setsid cannot fail but for a process that leads a group already.
    unsafe { libc::setsid() };
}

/// Leave the teardown of this process's address space to a child that shares it, so that
/// whoever waits for this process learns of its end without waiting for the kernel to
/// unmap the (large, static) binary and free its pages (~0.4 ms at every `capsule exec`
/// here). The child shares only the memory: it closes its copy of every descriptor at
/// once (so no pipe or lock outlives this process through it), asks to be killed when
/// this process ends, and then does nothing. Best effort: when the clone fails, the
/// process simply ends as usual. Call it last, right before exiting.
///
/// Only in the machine's own pid namespace: that child outlives this process by a moment
/// and is then reaped by whoever adopts orphans, which a machine's init does. A
/// container's first process may never reap (`tail -f /dev/null` is a common one), and
/// each exec would leave a zombie there; in any other pid namespace capsule ends as usual.
pub fn exit_lightly() {
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap_or_default();
    if !in_the_initial_pid_namespace(ns.as_os_str().as_encoded_bytes()) {
        return;
    }
    // used only as the child's stack and never unmapped (the address space it lives in
    // goes away with the child)
    let Ok(stack) = Stack::new(64 * 1024) else {
        return;
    };
    extern "C" fn hold(parent: *mut libc::c_void) -> libc::c_int {
        // SAFETY: only async-signal-safe system calls on our own descriptors and state; no
        // allocation, no lock (the memory is the parent's, which may be anywhere in exit).
        // The thread pointer is the parent's too, so a failing call would write the
        // parent's `errno`: none of these fails here (close_range with valid bounds, a
        // valid prctl, getppid; pause returns only for a caught signal, and none is
        // caught: the only one coming is SIGKILL).
        unsafe {
            libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != parent as libc::pid_t {
                libc::syscall(libc::SYS_exit, 0);
            }
            loop {
                libc::pause();
            }
        }
    }
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    // SAFETY: a child sharing the memory, on its own stack, running `hold`, which touches
    // nothing of the parent's memory but its own stack; not a thread (it has its own
    // descriptor table, signal handlers and pid) and sending no signal at its end.
    let _ = unsafe {
        clone_vm(
            hold,
            &stack,
            libc::CLONE_VM,
            me as usize as *mut libc::c_void,
        )
    };
    stack.leak();
}

/// Does `/proc/self/ns/pid`'s link text name the machine's initial pid namespace? Its
/// inode number is fixed by the kernel (`PROC_PID_INIT_INO`, 0xEFFFFFFC).
fn in_the_initial_pid_namespace(link: &[u8]) -> bool {
    link == b"pid:[4026531836]"
}

#[cfg(test)]
mod tests {
    // moved here with `exit_lightly` from kernel/sys.rs
    #[test]
    fn only_the_initial_pid_namespace_counts() {
        assert!(super::in_the_initial_pid_namespace(b"pid:[4026531836]"));
        assert!(!super::in_the_initial_pid_namespace(b"pid:[4026532412]"));
        assert!(!super::in_the_initial_pid_namespace(b""));
    }
}

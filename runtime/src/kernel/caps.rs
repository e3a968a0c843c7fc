//! Capabilities, the user a process runs as, and `no_new_privs`: the kernel's side of
//! "what may this process do as whom". Every function is a few direct system calls that
//! allocate nothing (they run between `fork` and `execve`).
//!
//! Two shapes, one set of calls: capsule's command empties every set and locks the
//! securebits ([`drop_all`]); an OCI container's process keeps the five sets its bundle
//! names ([`CapSets`]: [`limit_bounding`], [`capset`], [`raise_ambient`]) and changes user
//! ([`become_user`]) with the capabilities kept across the change.

use super::sys;
use std::io;

/// The capability sets, as bit masks (bit `n` is capability `n`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapSets {
    pub bounding: u64,
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
    pub ambient: u64,
}

/// The user a process becomes: its ids and supplementary groups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<libc::gid_t>,
}

/// The step of a user or capability change that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapStep {
    Bounding,
    KeepCaps,
    Groups,
    Gid,
    Uid,
    Sets,
    Ambient,
}

fn last() -> io::Error {
    io::Error::last_os_error()
}

/// Drop from the bounding set every capability not in `keep` (the ones this kernel knows).
pub fn limit_bounding(keep: u64) -> io::Result<()> {
    for cap in 0..64u32 {
        // SAFETY: integer prctl.
        if unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) } < 0 {
            break; // past the last capability this kernel knows
        }
        if keep & (1 << cap) == 0 {
            sys::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0)?;
        }
    }
    Ok(())
}

/// Become `u` (groups, then gid, then uid), keeping the permitted capabilities across the
/// change ([`capset`] sets them after). A refused `setgroups` (a user namespace where
/// `setgroups` is denied) leaves the groups as they are.
pub fn become_user(u: &User) -> Result<(), (CapStep, io::Error)> {
    sys::prctl(libc::PR_SET_KEEPCAPS, 1, 0).map_err(|e| (CapStep::KeepCaps, e))?;
    // SAFETY: plain system calls on our own process with a valid group array.
    unsafe {
        if libc::setgroups(u.groups.len(), u.groups.as_ptr()) < 0
            && last().raw_os_error() != Some(libc::EPERM)
        {
            return Err((CapStep::Groups, last()));
        }
        if libc::setresgid(u.gid, u.gid, u.gid) < 0 {
            return Err((CapStep::Gid, last()));
        }
        if libc::setresuid(u.uid, u.uid, u.uid) < 0 {
            return Err((CapStep::Uid, last()));
        }
    }
    let _ = sys::prctl(libc::PR_SET_KEEPCAPS, 0, 0);
    Ok(())
}

/// Set the sets of `c` but the bounding set (limited before the user changes,
/// [`limit_bounding`]): effective, permitted and inheritable, the ambient set raised
/// (after clearing it).
pub fn set(c: &CapSets) -> Result<(), (CapStep, io::Error)> {
    capset(c.effective, c.permitted, c.inheritable).map_err(|e| (CapStep::Sets, e))?;
    raise_ambient(c.ambient).map_err(|e| (CapStep::Ambient, e))
}

/// Clear the ambient set, then raise each capability of `ambient` (each must be permitted
/// and inheritable by now).
pub fn raise_ambient(ambient: u64) -> io::Result<()> {
    // SAFETY: integer prctl.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    for cap in 0..64u32 {
        if ambient & (1 << cap) != 0 {
            // SAFETY: integer prctl.
            let rc = unsafe {
                libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                    cap as libc::c_ulong,
                    0,
                    0,
                )
            };
            if rc < 0 {
                return Err(last());
            }
        }
    }
    Ok(())
}

/// `PR_SET_NO_NEW_PRIVS`: no `execve` from here on gains privileges (set-id bits, file
/// capabilities); also what lets an unprivileged process install a seccomp filter or
/// enforce Landlock.
pub fn no_new_privs() -> io::Result<()> {
    sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0)
}

/// Drop every capability: the bounding set, the ambient set, then effective, permitted and
/// inheritable, and lock the securebits so uid 0 regains nothing on `execve`.
pub fn drop_all() -> io::Result<()> {
    // securebits first (needs CAP_SETPCAP, which we still hold in our user namespace).
    let bits = libc::SECBIT_NOROOT
        | libc::SECBIT_NOROOT_LOCKED
        | libc::SECBIT_NO_SETUID_FIXUP
        | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
        | libc::SECBIT_KEEP_CAPS_LOCKED;
    // Allowed to fail when CAP_SETPCAP is missing (weaker isolation): the bounding set and
    // the empty permitted set below still leave nothing to regain.
    let _ = sys::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0);
    let mut cap = 0;
    loop {
        // SAFETY: integer prctl.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) };
        if rc < 0 {
            break; // past the last capability this kernel knows
        }
        if rc == 1 {
            sys::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0)?;
        }
        cap += 1;
        if cap > 63 {
            break;
        }
    }
    // SAFETY: integer prctl.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    capset(0, 0, 0)
}

/// `capset(2)` (version 3, all 64 bits) of the calling thread: the effective, permitted
/// and inheritable sets as bit masks (bit `n` is capability `n`). No allocation.
pub fn capset(effective: u64, permitted: u64, inheritable: u64) -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let hdr = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let data = [
        Data {
            effective: effective as u32,
            permitted: permitted as u32,
            inheritable: inheritable as u32,
        },
        Data {
            effective: (effective >> 32) as u32,
            permitted: (permitted >> 32) as u32,
            inheritable: (inheritable >> 32) as u32,
        },
    ];
    // SAFETY: header and two data structs, as capset(2) v3 requires.
    sys::check(unsafe { libc::syscall(libc::SYS_capset, &hdr as *const Header, data.as_ptr()) })
        .map(drop)
}

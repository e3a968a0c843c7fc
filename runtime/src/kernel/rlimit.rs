//! Resource limits (`setrlimit(2)`, `prlimit(2)`): set as asked (an OCI bundle's
//! `process.rlimits`, set on the process from outside by the runtime, whose
//! `CAP_SYS_RESOURCE` may raise them), or lowered only (capsule's own
//! `--fds`, `--file-size`: never above the hard limit the process has); and the limits a
//! process has now, for renderings.

use super::sys;
use std::io;

/// Set `resource`'s soft and hard limit of process `pid` as given (`prlimit(2)`: the
/// caller's own capabilities decide whether a hard limit may be raised, whatever user
/// namespace `pid` is in).
pub fn set_of(
    pid: libc::pid_t,
    resource: libc::__rlimit_resource_t,
    soft: u64,
    hard: u64,
) -> io::Result<()> {
    let l = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: prlimit with a valid struct and no old value asked.
    sys::check_int(unsafe { libc::prlimit(pid, resource, &l, std::ptr::null_mut()) }).map(drop)
}

/// Set `resource`'s soft and hard limit as given.
pub fn set(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> io::Result<()> {
    let l = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit of our own process from a valid struct.
    sys::check_int(unsafe { libc::setrlimit(resource, &l) }).map(drop)
}

/// Set `resource`'s soft and hard limit to `value`, or to the hard limit it has if that is
/// lower (an unprivileged process cannot raise it; the limit is then tighter than asked).
pub fn lower(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a valid struct.
    sys::check_int(unsafe { libc::getrlimit(resource, &mut l) })?;
    let v = (value as libc::rlim_t).min(l.rlim_max);
    let l = libc::rlimit {
        rlim_cur: v,
        rlim_max: v,
    };
    // SAFETY: setrlimit of our own process from a valid struct.
    sys::check_int(unsafe { libc::setrlimit(resource, &l) }).map(drop)
}

/// The resource limits a process inherits, in this order (an OCI rendering lists them so).
pub const RLIMITS: [libc::__rlimit_resource_t; 16] = [
    libc::RLIMIT_CPU,
    libc::RLIMIT_FSIZE,
    libc::RLIMIT_DATA,
    libc::RLIMIT_STACK,
    libc::RLIMIT_CORE,
    libc::RLIMIT_RSS,
    libc::RLIMIT_NPROC,
    libc::RLIMIT_NOFILE,
    libc::RLIMIT_MEMLOCK,
    libc::RLIMIT_AS,
    libc::RLIMIT_LOCKS,
    libc::RLIMIT_SIGPENDING,
    libc::RLIMIT_MSGQUEUE,
    libc::RLIMIT_NICE,
    libc::RLIMIT_RTPRIO,
    libc::RLIMIT_RTTIME,
];

/// This process's (soft, hard) resource limits, in [`RLIMITS`] order.
pub fn current() -> Vec<(u64, u64)> {
    RLIMITS
        .iter()
        .map(|r| {
            let mut l = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit into a valid struct.
            unsafe { libc::getrlimit(*r, &mut l) };
            (l.rlim_cur, l.rlim_max)
        })
        .collect()
}

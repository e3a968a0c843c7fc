//! The steps between `clone` and a process's last ones ([`super::process`]), in the one
//! order both front ends use (`capsule exec`'s init, [`crate::linux::init`], and an OCI
//! container's init, `crate::ociruntime`'s `create`):
//!
//! 1. the namespaces given by descriptor joined (the pid one was joined before the
//!    clone: a process cannot enter another pid namespace itself);
//! 2. root of a new user namespace (its id maps are written by now);
//! 3. into its cgroups, by itself while single-threaded (nothing forked yet is left out);
//! 4. a session of its own, unless a terminal makes one;
//! 5. the root, built by the caller's steps ([`super::mount`]: capsule's mount plan, or
//!    an OCI bundle's root in its own fixed order, sysctls before the read-only paths);
//! 6. the hostname and domain name (in its own uts namespace);
//! 7. loopback up (in its own network namespace).
//!
//! One order for both, so a step added for one front end lands at the same place for
//! the other.

use super::{mount, ns, sys};
use std::io;
use std::os::fd::RawFd;

/// A namespace to join: its descriptor, its `CLONE_NEW*` flag and its kind's name.
pub type Join<'a> = (RawFd, libc::c_int, &'a str);

/// The steps of [`setup`] (each left out when empty or false).
#[derive(Debug, Clone, Copy, Default)]
pub struct Setup<'a> {
    pub join: &'a [Join<'a>],
    pub become_root: bool,
    /// The files a single-threaded process moves itself into its cgroups by
    /// ([`super::cgroup::open_self_moves`]), closed after.
    pub cgroups: &'a [RawFd],
    pub new_session: bool,
    pub hostname: Option<&'a [u8]>,
    pub domainname: Option<&'a [u8]>,
    pub loopback: bool,
}

/// The step of [`setup`] that failed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("joining the {kind} namespace: {error}")]
    Join { kind: String, error: io::Error },
    #[error("becoming root of the user namespace (0 must be mapped): {0}")]
    BecomeRoot(io::Error),
    #[error("placing the sandbox in its cgroup: {0}")]
    Cgroup(io::Error),
    #[error("{0}")]
    Root(#[from] mount::StepError),
    #[error("setting the hostname: {0}")]
    Hostname(io::Error),
    #[error("setting the domain name: {0}")]
    Domainname(io::Error),
    #[error("bringing loopback up: {0}")]
    Loopback(io::Error),
}

/// Take the steps of `s` in the order of the module docs; `root` builds the root (step
/// 5) and what it returns is returned.
pub fn setup<T>(
    s: &Setup<'_>,
    root: impl FnOnce() -> Result<T, mount::StepError>,
) -> Result<T, SetupError> {
    for (fd, flag, kind) in s.join {
        ns::join(*fd, *flag).map_err(|error| SetupError::Join {
            kind: kind.to_string(),
            error,
        })?;
    }
    if s.become_root {
        ns::become_root().map_err(SetupError::BecomeRoot)?;
    }
    super::cgroup::move_self(s.cgroups).map_err(SetupError::Cgroup)?;
    if s.new_session {
        ns::new_session();
    }
    let built = root()?;
    if let Some(h) = s.hostname {
        sys::sethostname(h).map_err(SetupError::Hostname)?;
    }
    if let Some(d) = s.domainname {
        sys::setdomainname(d).map_err(SetupError::Domainname)?;
    }
    if s.loopback {
        sys::loopback_up().map_err(SetupError::Loopback)?;
    }
    Ok(built)
}

//! The kernel stack both front ends stand on (`capsule exec`'s executor, [`crate::linux`],
//! and capsule-runc, [`crate::ociruntime`]): one module per kernel concern, each taking
//! the decisions of a plan as plain values and carrying them out, deciding nothing.
//!
//! - [`sys`]: thin wrappers over the system calls, `errno` kept, no allocation;
//! - [`landlock`]: the Landlock ruleset of a policy, built and enforced;
//! - [`seccomp`]: capsule's seccomp filter, its listened variant and the observer;
//! - [`cgroup`]: control groups (v1 and v2) of an exec's limits;
//! - [`caps`]: capabilities, the user a process runs as, `no_new_privs`;
//! - [`rlimit`]: resource limits;
//! - [`ns`]: namespaces and `clone` (the one raw `clone` of both front ends), id maps;
//! - [`mount`]: mounts and the root switch (capsule's primitives, an OCI bundle's root
//!   inside its hostile rootfs, `tmpcopyup`);
//! - [`setup`]: the steps between `clone` and a process's last ones (namespaces joined,
//!   cgroups, the root, hostname, loopback), in the one order both front ends use;
//! - [`process`]: a process's last steps before `execve`, in the one order both front
//!   ends use.
//! - [`checked`]: what a hostile tree names, opened without following its links and
//!   checked (a devpts's `ptmx`, a procfs file, a device).
//!
//! Nothing here uses a front end, a plan or the exec pipeline above it; what it needs
//! comes in as arguments (the architecture tests check it).

pub mod caps;
pub mod cgroup;
pub mod checked;
pub mod landlock;
pub mod mount;
pub mod ns;
pub mod process;
pub mod rlimit;
pub mod seccomp;
pub mod setup;
pub mod sys;

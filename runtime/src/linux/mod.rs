//! The Linux executor: user, mount, pid, network, ipc and uts namespaces, a fresh root
//! built from read-only binds, Landlock and seccomp, and an init (pid 1) that reaps and
//! forwards signals. (Issue 4.)

pub mod landlock;
pub mod seccomp;

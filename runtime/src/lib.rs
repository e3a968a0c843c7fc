//! `capsule-runtime` owns executing capsules: the Linux executor (namespaces, mounts,
//! Landlock, seccomp, init), the macOS executor, supervision and exec records. The
//! `capsule` binary (`src/main.rs`) is its command-line front end, in [`cli`].

pub mod cli;
pub mod exit;
pub mod home;
pub mod isolation;
#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "macos")]
pub mod macos;
pub mod net;
pub mod settings;

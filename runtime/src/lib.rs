//! `capsule-runtime` owns executing capsules: the Linux executor (namespaces, mounts,
//! Landlock, seccomp, init), the macOS executor, supervision and exec records. The
//! `capsule` binary (`src/main.rs`) is its command-line front end, in [`cli`].

pub mod cli;
pub mod exit;
pub mod home;
pub mod isolation;
pub mod limits;
#[cfg(target_os = "linux")]
pub mod linux;
// compiled in Linux test builds too, so its control flow is type-checked and tested
#[cfg(any(target_os = "macos", test))]
pub mod macos;
pub mod net;
pub mod record;
pub mod refusals;
pub mod settings;

//! The container's plan (capsule-runc's): config.json's model ([`config`]) and its
//! seccomp compiler ([`seccomp`]).

pub mod config;
pub mod seccomp;

//! `capsule-bundle` owns everything a capsule *is* on disk, before anything runs:
//! the `capsule.yaml` spec (Kitsoki's format plus our `sandbox:` block), materializing it
//! into a workspace (a real git checkout), the sentinel and `capsule-manifest.json`,
//! the tree digest, the resolved sandbox policy model, and the OCI `config.json` of the bundle.
//!
//! It never executes a sandbox; `capsule-runtime` does: [`open::open`] takes a
//! [`materialize::StepRunner`] that runs a synthetic spec's steps (the runtime's runs them
//! in its build sandbox; this crate has no public runner that runs them on the host).
//! Dependency direction:
//! bundle <- policy <- runtime, bundle <- seatbelt <- runtime.
//!
//! Public entry points: [`store::resolve`] / [`store::list`] / [`store::close`] for open
//! capsules (the runtime loads a capsule's [`policy::SandboxPolicy`] through
//! [`store::resolve`]), [`digest::tree_digest`], and the spec in [`spec`].

#[cfg(test)]
mod architecture_tests;
pub mod digest;
pub mod error;
pub mod escape;
pub mod fsat;
pub mod git;
pub mod gitguard;
pub mod gitinfo;
pub mod grants;
pub mod hostgit;
pub mod layout;
pub mod limits;
pub mod manifest;
#[cfg(test)]
mod manifest_props;
pub mod materialize;
pub mod objcache;
pub mod oci;
pub mod open;
mod overlay;
pub mod ownobjects;
pub mod packwrite;
pub mod policy;
pub mod progress;
pub mod reachcopy;
pub mod record;
pub mod rmtree;
pub mod source;
pub mod spec;
#[cfg(test)]
mod spec_props;
pub mod staging;
pub mod store;
pub mod wspath;

pub use error::{Error, Result};

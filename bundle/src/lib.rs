//! `capsule-bundle` owns everything a capsule *is* on disk, before anything runs:
//! the `capsule.yaml` spec (Kitsoki's format plus our `sandbox:` block), materializing it
//! into a workspace (a real git checkout), the sentinel and `capsule-manifest.json`,
//! the tree digest, the resolved sandbox policy model, and the OCI `config.json` of the bundle.
//!
//! It never executes a sandbox; `capsule-runtime` does: [`open::open`] takes a
//! [`workspace::materialize::StepRunner`] that runs a synthetic spec's steps (the runtime's
//! runs them in its build sandbox; this crate has no public runner that runs them on the
//! host). Dependency direction:
//! bundle <- policy <- runtime, bundle <- seatbelt <- runtime.
//!
//! The crate is grouped by concern, each group using only the ones listed before it and
//! the shared building blocks (checked by `architecture_tests.rs`):
//!
//! - building blocks: [`error`], [`escape`] (hostile text on a terminal), [`fsat`] and
//!   [`rmtree`] (trees someone else wrote), [`progress`], [`layout`] (where things live);
//! - [`policy`]: the sandbox policy model, its grants, resource limits and the OCI
//!   rendering of the bundle;
//! - [`spec`]: the `capsule.yaml` spec;
//! - [`git`]: git on the host: running it hermetically, reading repositories without it,
//!   and guarding the operator's git against what a task wrote;
//! - [`objects`]: a repository's own objects, copying what a commit reaches, packs, and
//!   the per-source object cache;
//! - [`workspace`]: making and describing a workspace: from a source or a pinned repo, a
//!   synthetic spec's steps, the overlay, the manifest and the tree digest;
//! - [`store`]: the open capsules under a capsule root, their records and staging;
//! - [`open`]: opening a capsule, which puts all of the above together.
//!
//! Public entry points: [`store::resolve`] / [`store::list`] / [`store::close`] for open
//! capsules (the runtime loads a capsule's [`policy::SandboxPolicy`] through
//! [`store::resolve`]), [`workspace::digest::tree_digest`], and the spec in [`spec`].

#[cfg(test)]
mod architecture_tests;
pub mod error;
pub mod escape;
pub mod fsat;
pub mod git;
pub mod layout;
pub mod objects;
pub mod open;
pub mod policy;
pub mod progress;
pub mod rmtree;
pub mod spec;
pub mod store;
pub mod workspace;

pub use error::{Error, Result};

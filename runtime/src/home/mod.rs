//! The task's own environment (issue 5): the home layer and its review, package caches of
//! the capsule's own, projects revealed next to the source folder, and devices.
//!
//! - [`reveal`]: folders a source folder's manifests name, and which are opened.
//! - [`layer`]: the home layer (an overlayfs upper directory) — review, apply, discard.
//! - [`caches`]: per-tool package caches as overlays over the person's caches.
//! - [`devices`]: the device allowlist and validation of `sandbox.devices`.

pub mod baseline;
pub mod caches;
pub mod devices;
pub mod fsat;
pub mod layer;
pub mod reveal;

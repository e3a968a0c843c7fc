//! The sandbox tests' fixture now lives in the crate library as [`capsule_e2e::sandbox`];
//! this module re-exports it for test files that still say `mod sandbox_support;`.
#![allow(unused_imports)]

pub use capsule_e2e::sandbox::*;

//! Git objects taken from a repository someone else prepared: its own object store read
//! without leaving it ([`own`]), exactly the objects one commit reaches copied out of it
//! ([`reachcopy`]) into one pack ([`packwrite`]), and the per-source cache of those packs
//! that later opens reuse ([`cache`]).

pub mod cache;
pub mod own;
pub mod packwrite;
pub mod reachcopy;

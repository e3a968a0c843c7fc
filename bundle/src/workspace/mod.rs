//! Making a workspace and describing it: from an existing repository ([`source`]), from a
//! synthetic spec's steps ([`materialize`]) and its overlay (`overlay`), paths inside a
//! tree someone else wrote ([`wspath`]), the sentinel and manifest ([`manifest`]) and the
//! tree digest ([`digest`]).

pub mod digest;
pub mod manifest;
pub mod materialize;
pub(crate) mod overlay;
pub mod source;
pub mod wspath;

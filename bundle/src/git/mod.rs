//! Git on the host, always on someone else's repository: running the git CLI
//! hermetically ([`run`]), reading facts without running it ([`info`]), reading a
//! repository a sandboxed command could have written ([`guard`]), and keeping the
//! operator's own git safe in a workspace a task wrote ([`hostgit`]).

pub mod guard;
pub mod hostgit;
pub mod info;
pub mod run;

//! The hooks an exec is given by its caller and runs at fixed points ([`Hooks`]): the
//! executor calls down into what it was handed and never reaches up into the layers
//! that use it (network, record).

/// A hook run by init inside the sandbox (its namespaces, its root) after the command is
/// forked and before it is released to `execve`; e.g. the allowlist relay listening on
/// the sandbox's loopback. It must not block: start a thread or process and return.
pub type InitHook = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// Hooks of one exec.
#[derive(Default)]
pub struct Hooks {
    /// Run by init inside the sandbox, in order.
    pub inside: Vec<InitHook>,
    /// Run by the caller before it clones or forks anything (the process must be
    /// single-threaded then): e.g. joining a reading thread started early. Not run when
    /// nothing is cloned (a warm spare); `before_release` runs in any case.
    pub before_clone: Option<Box<dyn FnOnce()>>,
    /// Run by the caller while init builds the sandbox, before the command is released
    /// (e.g. the workspace snapshot the exec record compares against). Runs with the
    /// executor's signals blocked; threads it starts inherit that mask.
    pub before_release: Option<Box<dyn FnOnce()>>,
    /// Where the refusals of the exec are listed ([`super::notify`] feeds it the refused
    /// syscalls, write calls and connects); without one they are answered as always and
    /// not kept.
    pub refusals: Option<std::sync::Arc<crate::refusals::Collector>>,
}

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
    /// What the seccomp supervisor does with the command's connects to remote addresses
    /// (none: they go on, and the kernel decides).
    pub connects: Option<std::sync::Arc<dyn Connects>>,
}

/// What the seccomp supervisor does with the command's TCP connects to remote addresses,
/// decided by the layer that owns the network (allowlist mode: send them to its proxy, or
/// refuse them) and carried out on the task's own socket ([`super::redirect`]). Given in
/// [`Hooks::connects`]; without it every connect goes on as the kernel decides.
pub trait Connects: Send + Sync {
    /// What to do with a TCP connect to `dst` (an address off loopback).
    fn route(&self, dst: std::net::SocketAddr) -> Route;
    /// The task's socket, now bound at `local` (inside), is about to be connected where
    /// [`Connects::route`] said, in place of `dst`; `program` and `pid` (in the sandbox)
    /// made it. Said before the connect, so that whoever accepts the connection can tell
    /// where it was meant to go.
    fn redirecting(
        &self,
        local: std::net::SocketAddr,
        dst: std::net::SocketAddr,
        program: &str,
        pid: Option<i32>,
    );
}

/// The answer of [`Connects::route`].
#[derive(Debug, Clone)]
pub enum Route {
    /// The kernel decides (continue the call).
    Continue,
    /// Connect the task's socket to this address (inside the sandbox) instead.
    To(std::net::SocketAddr),
    /// Refuse the call with `errno`, and list `event` (its program and pid filled in).
    Refuse {
        errno: i32,
        event: crate::refusals::Event,
    },
}

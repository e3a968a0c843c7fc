//! What [`super::run`] returns for a command that ran: how it ended, the layers applied,
//! the cgroups it ran in (or why capsule's own defaults had none) and what the disk guard
//! saw. Above the building blocks it gathers from (cgroup, diskguard, report).

/// The result of a command that ran.
#[derive(Debug, Clone)]
pub struct ExecOutcome {
    pub termination: super::report::Termination,
    pub duration: std::time::Duration,
    pub applied: super::report::Applied,
    /// The cgroups the sandbox ran in, one per entry of the plan's `cgroup_procs`, when
    /// they are not those (a warm spare's own groups, taken as they are); else empty.
    pub cgroup_dirs: Vec<std::path::PathBuf>,
    /// The cgroups of capsule's own default limits, found by the executor
    /// ([`super::ExecPlan::cgroups_found_here`]), or why there are none.
    pub found: crate::kernel::cgroup::Found,
    /// The disk guard stopped the tree: where and how far ([`super::diskguard`]).
    pub disk_reserve_reached: Option<super::diskguard::Breach>,
}

//! The host facts a container's plan is made from ([`ContainerFacts`]), each from the
//! module that owns it, before the plan and with no call back into it: the kernel's
//! Landlock ABI ([`crate::kernel::landlock`]), the cgroup layout ([`super::cgroup`]), the
//! machine's default limits ([`crate::limits::machine_defaults`]), AppArmor
//! ([`super::process`]) and capsule-runc's own settings (its environment:
//! `CAPSULE_OCI_LANDLOCK=0`, `CAPSULE_OCI_OBSERVE=0`, `CAPSULE_OCI_DEFAULTS=0`,
//! `CAPSULE_OCI_DISK_RESERVE`).

use crate::kernel::cgroup;
use crate::plan::container::{ContainerFacts, Settings};

fn off(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| v == "0")
}

/// The facts of this host. `cgroups`: the cgroup layout and default limits too
/// (`create`; `exec` joins the groups the container has).
pub fn gather(cgroups: bool) -> ContainerFacts {
    let settings = Settings {
        landlock: !off("CAPSULE_OCI_LANDLOCK"),
        observe: !off("CAPSULE_OCI_OBSERVE"),
        defaults: !off("CAPSULE_OCI_DEFAULTS"),
    };
    let mut f = ContainerFacts {
        // asked only when it is used
        landlock_abi: if settings.landlock {
            crate::kernel::landlock::abi_version()
        } else {
            0
        },
        apparmor: crate::kernel::process::apparmor_enabled(),
        settings,
        disk_reserve: std::env::var_os(crate::plan::container::disk::ENV)
            .map(|v| v.to_string_lossy().into_owned()),
        // SAFETY: geteuid cannot fail.
        rootless: unsafe { libc::geteuid() } != 0 || in_user_namespace(),
        ..ContainerFacts::default()
    };
    if cgroups {
        f.cgroup_unified = cgroup::unified();
        f.hierarchies = cgroup::hierarchies();
        f.default_limits = settings.defaults.then(crate::limits::machine_defaults);
    }
    f
}

/// This process is in a user namespace other than the host's (its uid map is not the
/// whole range mapped to itself): rootless Podman runs its runtime so, as root there.
pub fn in_user_namespace() -> bool {
    std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|m| {
        let f: Vec<&str> = m.split_whitespace().collect();
        f != ["0", "0", "4294967295"]
    })
}

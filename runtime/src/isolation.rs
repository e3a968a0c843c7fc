//! What isolation this machine gives (user namespaces, Landlock ABI, seccomp), and the
//! operator's knowing acceptance of weaker isolation.
//!
//! [`probe`] looks at the running kernel (it forks a child to try `unshare(CLONE_NEWUSER)`
//! and the other namespaces, asks Landlock for its ABI and seccomp which actions it has);
//! [`decide`] turns that and the settings into the level the executor may run at, or a
//! [`MissingIsolation`] that says what is missing and how to accept weaker isolation
//! knowingly (`capsule isolation --accept-weaker on`). Never a silent fallback.

use crate::settings::Settings;
use serde::Serialize;

/// Lowest Landlock ABI for full isolation: filesystem rights including truncate (ABI 3).
pub const FULL_LANDLOCK_ABI: u32 = 3;
/// Landlock ABI with signal and abstract-socket scoping, which weaker isolation leans on.
pub const SCOPED_LANDLOCK_ABI: u32 = 6;

/// User namespaces on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserNamespaces {
    /// This user can create a user namespace and, inside it, mount, pid, network, ipc and
    /// uts namespaces.
    pub available: bool,
    /// Why not, when not (the failing step and the kernel's answer).
    pub error: Option<String>,
    /// `/proc/sys/user/max_user_namespaces` (per user namespace).
    pub max_user_namespaces: Option<u64>,
    /// Known switches that restrict unprivileged user namespaces, with their values.
    pub restrictions: Vec<String>,
}

/// Landlock on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LandlockInfo {
    /// ABI version (0: absent or disabled).
    pub abi: u32,
    /// What each ABI step this machine lacks would add, in plain words.
    pub lacking: Vec<String>,
}

/// Seccomp on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeccompInfo {
    /// Seccomp filters can be installed with the actions the filter uses.
    pub available: bool,
    /// This process's own seccomp mode (`/proc/self/status`: 0 none, 1 strict, 2 filter).
    pub own_mode: Option<u32>,
    pub error: Option<String>,
}

/// What isolation this machine gives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IsolationReport {
    pub os: &'static str,
    pub user_namespaces: UserNamespaces,
    pub landlock: LandlockInfo,
    pub seccomp: SeccompInfo,
    /// Missing pieces of full isolation, in plain words (empty: full isolation).
    pub missing: Vec<String>,
}

impl IsolationReport {
    /// Full isolation is possible: user namespaces, Landlock ABI >= 3 and seccomp.
    pub fn full(&self) -> bool {
        self.missing.is_empty()
    }
}

/// Weaker isolation the operator accepted: which walls remain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Degraded {
    /// Namespaces are used (false: Landlock + seccomp only).
    pub namespaces: bool,
    /// Landlock ABI that will be used (0: none).
    pub landlock_abi: u32,
    /// What is missing compared with full isolation, in plain words.
    pub missing: Vec<String>,
}

/// The isolation the executor may run at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "level")]
pub enum IsolationLevel {
    /// Namespaces, Landlock and seccomp.
    Full,
    /// Accepted knowingly with `capsule isolation --accept-weaker on`.
    Weaker(Degraded),
}

/// Full isolation is not possible and weaker isolation was not (or cannot be) accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct MissingIsolation {
    /// Missing pieces in plain words.
    pub missing: Vec<String>,
    /// Weaker isolation would be possible if accepted.
    pub weaker_possible: bool,
    /// One line: what is missing and what to do.
    pub message: String,
}

/// Decide the isolation level from what the machine gives and the operator's settings.
pub fn decide(
    report: &IsolationReport,
    settings: &Settings,
) -> Result<IsolationLevel, MissingIsolation> {
    if report.full() {
        return Ok(IsolationLevel::Full);
    }
    let ns = report.user_namespaces.available;
    let abi = report.landlock.abi;
    // weaker needs seccomp, and at least one wall for the filesystem
    let weaker_possible = report.seccomp.available && (ns || abi >= 1);
    let what = report.missing.join("; ");
    if !weaker_possible {
        return Err(MissingIsolation {
            missing: report.missing.clone(),
            weaker_possible,
            message: format!(
                "cannot isolate commands on this machine ({what}); not even weaker isolation is possible: it needs seccomp and either user namespaces or Landlock; nothing ran"
            ),
        });
    }
    if !settings.accept_weaker {
        return Err(MissingIsolation {
            missing: report.missing.clone(),
            weaker_possible,
            message: format!(
                "full isolation is not available ({what}); nothing ran. To run with weaker isolation knowingly, run `capsule isolation --accept-weaker on` (see `capsule isolation` for details)"
            ),
        });
    }
    Ok(IsolationLevel::Weaker(Degraded {
        namespaces: ns,
        landlock_abi: abi,
        missing: report.missing.clone(),
    }))
}

/// Look at this machine.
pub fn probe() -> IsolationReport {
    imp::probe()
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    pub fn probe() -> IsolationReport {
        let user_namespaces = user_namespaces();
        let abi = crate::kernel::landlock::abi_version();
        let landlock = LandlockInfo {
            abi,
            lacking: landlock_lacking(abi),
        };
        let seccomp = seccomp();
        let mut missing = Vec::new();
        if !user_namespaces.available {
            missing.push(format!(
                "user namespaces cannot be created by this user ({}), so commands cannot get their own mounts, processes and network",
                user_namespaces.error.as_deref().unwrap_or("refused")
            ));
        }
        if abi == 0 {
            missing.push("Landlock is not available in this kernel (not built in, or not enabled at boot: add `landlock` to the `lsm=` boot parameter)".into());
        } else if abi < FULL_LANDLOCK_ABI {
            missing.push(format!(
                "Landlock ABI {abi} is older than {FULL_LANDLOCK_ABI} (Linux 6.2): truncating read-only files cannot be refused"
            ));
        }
        if !seccomp.available {
            missing.push(format!(
                "seccomp filters cannot be installed ({})",
                seccomp.error.as_deref().unwrap_or("unknown reason")
            ));
        }
        IsolationReport {
            os: std::env::consts::OS,
            user_namespaces,
            landlock,
            seccomp,
            missing,
        }
    }

    fn landlock_lacking(abi: u32) -> Vec<String> {
        let steps: &[(u32, &str)] = &[
            (1, "ABI 1 (Linux 5.13): read and write rules on files"),
            (
                2,
                "ABI 2 (Linux 5.19): linking and renaming across directories",
            ),
            (3, "ABI 3 (Linux 6.2): refusing truncation"),
            (4, "ABI 4 (Linux 6.7): refusing TCP bind and connect"),
            (5, "ABI 5 (Linux 6.10): refusing ioctl on devices"),
            (
                6,
                "ABI 6 (Linux 6.12): keeping signals and abstract unix sockets inside the sandbox",
            ),
            (
                9,
                "ABI 9 (Linux 7.1): connecting to unix sockets by path only inside the writable paths (without it, the host's sockets are masked instead)",
            ),
        ];
        steps
            .iter()
            .filter(|(n, _)| *n > abi)
            .map(|(_, s)| s.to_string())
            .collect()
    }

    fn read_sysctl(path: &str) -> Option<String> {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_string())
    }

    fn user_namespaces() -> UserNamespaces {
        let max = read_sysctl("/proc/sys/user/max_user_namespaces").and_then(|s| s.parse().ok());
        let mut restrictions = Vec::new();
        for (path, bad, meaning) in [
            (
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
                "1",
                "AppArmor restricts unprivileged user namespaces",
            ),
            (
                "/proc/sys/kernel/unprivileged_userns_clone",
                "0",
                "unprivileged user namespaces are disabled",
            ),
            (
                "/proc/sys/user/max_user_namespaces",
                "0",
                "no user namespaces may be created here",
            ),
        ] {
            if let Some(v) = read_sysctl(path) {
                if v == bad {
                    restrictions.push(format!("{path} = {v}: {meaning}"));
                }
            }
        }
        let (available, error) = match try_namespaces() {
            Ok(()) => (true, None),
            Err(e) => (false, Some(e)),
        };
        UserNamespaces {
            available,
            error,
            max_user_namespaces: max,
            restrictions,
        }
    }

    /// Fork a child that tries `unshare(CLONE_NEWUSER)` and then the other namespaces the
    /// executor uses; it reports the failing step and errno through a pipe.
    fn try_namespaces() -> Result<(), String> {
        let mut fds = [0i32; 2];
        // SAFETY: fds is a valid array of two ints.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(format!("pipe: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: the pipe fds are fresh and owned here.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child only makes async-signal-safe calls (unshare, write, _exit).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(format!("fork: {}", std::io::Error::last_os_error()));
        }
        if pid == 0 {
            let others = libc::CLONE_NEWNS
                | libc::CLONE_NEWPID
                | libc::CLONE_NEWNET
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUTS;
            let mut msg = [0u8; 8];
            // SAFETY: plain syscalls in the forked child; no allocation.
            unsafe {
                let step: u32 = if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                    1
                } else if libc::unshare(others) != 0 {
                    2
                } else {
                    0
                };
                let errno = if step == 0 {
                    0
                } else {
                    *libc::__errno_location() as u32
                };
                msg[..4].copy_from_slice(&step.to_ne_bytes());
                msg[4..].copy_from_slice(&errno.to_ne_bytes());
                libc::write(wr.as_raw_fd(), msg.as_ptr().cast(), msg.len());
                libc::_exit(0);
            }
        }
        drop(wr);
        let mut msg = [0u8; 8];
        let mut f = std::fs::File::from(rd);
        let got = f.read_exact(&mut msg);
        let mut status = 0;
        // SAFETY: pid is our child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        got.map_err(|e| format!("probe child: {e}"))?;
        let step = u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]);
        let errno = i32::from_ne_bytes([msg[4], msg[5], msg[6], msg[7]]);
        let err = std::io::Error::from_raw_os_error(errno);
        match step {
            0 => Ok(()),
            1 => Err(format!("unshare(CLONE_NEWUSER): {err}")),
            _ => Err(format!(
                "mount/pid/network namespaces inside a new user namespace: {err}"
            )),
        }
    }

    fn seccomp() -> SeccompInfo {
        let own_mode = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Seccomp:"))
                    .and_then(|v| v.trim().parse().ok())
            });
        // SAFETY: PR_GET_SECCOMP takes no pointer arguments.
        let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
        if mode < 0 {
            return SeccompInfo {
                available: false,
                own_mode,
                error: Some(format!(
                    "prctl(PR_GET_SECCOMP): {} (kernel without CONFIG_SECCOMP)",
                    std::io::Error::last_os_error()
                )),
            };
        }
        for (action, name) in [
            (libc::SECCOMP_RET_ERRNO, "SECCOMP_RET_ERRNO"),
            (libc::SECCOMP_RET_KILL_PROCESS, "SECCOMP_RET_KILL_PROCESS"),
        ] {
            let a: u32 = action;
            // SAFETY: SECCOMP_GET_ACTION_AVAIL reads one u32 from the pointer.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_GET_ACTION_AVAIL,
                    0,
                    &a as *const u32,
                )
            };
            if rc != 0 {
                return SeccompInfo {
                    available: false,
                    own_mode,
                    error: Some(format!(
                        "the kernel lacks the seccomp action {name}: {}",
                        std::io::Error::last_os_error()
                    )),
                };
            }
        }
        SeccompInfo {
            available: true,
            own_mode,
            error: None,
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;

    /// On macOS the sandbox is Seatbelt; none of the Linux layers exist.
    pub fn probe() -> IsolationReport {
        IsolationReport {
            os: std::env::consts::OS,
            user_namespaces: UserNamespaces {
                available: false,
                error: Some("not Linux".into()),
                max_user_namespaces: None,
                restrictions: vec![],
            },
            landlock: LandlockInfo {
                abi: 0,
                lacking: vec![],
            },
            seccomp: SeccompInfo {
                available: false,
                own_mode: None,
                error: Some("not Linux".into()),
            },
            missing: vec![format!(
                "{} has no user namespaces, Landlock or seccomp; its sandbox is Seatbelt (see `capsule seatbelt`)",
                std::env::consts::OS
            )],
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// A machine's report with these walls (for tests of what is decided from it).
    pub(crate) fn report(ns: bool, abi: u32, seccomp: bool) -> IsolationReport {
        let mut missing = vec![];
        if !ns {
            missing.push("no userns".to_string());
        }
        if abi < FULL_LANDLOCK_ABI {
            missing.push("old landlock".to_string());
        }
        if !seccomp {
            missing.push("no seccomp".to_string());
        }
        IsolationReport {
            os: "linux",
            user_namespaces: UserNamespaces {
                available: ns,
                error: None,
                max_user_namespaces: None,
                restrictions: vec![],
            },
            landlock: LandlockInfo {
                abi,
                lacking: vec![],
            },
            seccomp: SeccompInfo {
                available: seccomp,
                own_mode: None,
                error: None,
            },
            missing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::report;
    use super::*;

    #[test]
    fn decide_never_falls_back_silently() {
        let off = Settings::default();
        let on = Settings {
            accept_weaker: true,
            ..Default::default()
        };
        assert_eq!(
            decide(&report(true, 7, true), &off),
            Ok(IsolationLevel::Full)
        );
        let e = decide(&report(false, 7, true), &off).unwrap_err();
        assert!(e.weaker_possible);
        assert!(
            e.message.contains("capsule isolation --accept-weaker on"),
            "{}",
            e.message
        );
        match decide(&report(false, 7, true), &on) {
            Ok(IsolationLevel::Weaker(d)) => {
                assert!(!d.namespaces);
                assert_eq!(d.landlock_abi, 7);
                assert_eq!(d.missing, vec!["no userns".to_string()]);
            }
            other => panic!("{other:?}"),
        }
        // nothing to stand on: refused even when accepted
        let e = decide(&report(false, 0, true), &on).unwrap_err();
        assert!(!e.weaker_possible);
        let e = decide(&report(true, 7, false), &on).unwrap_err();
        assert!(!e.weaker_possible);
        // namespaces but an old Landlock: weaker only when accepted
        assert!(decide(&report(true, 2, true), &off).is_err());
        assert!(matches!(
            decide(&report(true, 2, true), &on),
            Ok(IsolationLevel::Weaker(Degraded {
                namespaces: true,
                ..
            }))
        ));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn probe_sees_this_machine() {
        // this machine and CI: user namespaces, Landlock and seccomp are all there
        let r = probe();
        assert!(r.seccomp.available, "{r:?}");
        assert!(r.landlock.abi >= 1, "{r:?}");
        if std::env::var_os("CAPSULE_EXPECT_FULL_ISOLATION").is_some() {
            assert!(r.full(), "{r:?}");
        }
    }
}

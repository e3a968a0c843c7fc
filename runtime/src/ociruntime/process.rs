//! The container process's last steps, shared by `create`'s init and `exec`, as the
//! kernel stack takes them ([`crate::kernel::process`]: one order for both front ends):
//! what can fail is prepared first ([`prepare`]: the executable looked up, `HOME` from
//! the container's `/etc/passwd` where the bundle sets none, the Landlock ruleset built),
//! in the container's root, while create or exec can still report it; [`rlimits`] sets
//! its limits from outside and [`setup`] settles it before `start` (OOM score, AppArmor,
//! umask, working directory);
//! then [`finish`] takes the layers (Landlock, the user and its groups, the capability
//! sets, `no_new_privs`, the observer's filter and the bundle's) and `execve`s.
//!
//! What the process is and what confines it are decided in its plan
//! ([`crate::plan::container::ProcessPlan`], [`crate::plan::container::Confinement`]);
//! this module hands them to the kernel stack and names a failed step by the field of
//! config.json it carries out.

use crate::kernel::caps::{CapStep, User};
use crate::kernel::landlock::{LandlockOptions, LandlockRuleset};
use crate::kernel::process::{self, Settled, StepError};
use crate::plan::container::{Confinement, ProcessPlan};
use std::ffi::CString;
use std::os::fd::RawFd;

pub struct Prepared {
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    user: User,
    caps: crate::kernel::caps::CapSets,
    no_new_privs: bool,
    seccomp: Option<super::seccomp::Program>,
    landlock: Option<LandlockRuleset>,
    /// The socket the refusal observer's listener goes on ([`super::observe`]).
    pub observer: Option<RawFd>,
    /// `--preserve-fds N`: descriptors 3 to 3+N-1 (the caller's, checked open when
    /// capsule-runc started) pass to the process; every other one above 2 is closed.
    pub preserve_fds: u32,
}

fn cstr(s: &[u8], what: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what}: contains a NUL byte"))
}

/// The Landlock ruleset of the plan's policy (built here: it opens the writable paths).
fn landlock_ruleset(c: &Confinement) -> Result<Option<LandlockRuleset>, String> {
    let Some(policy) = &c.landlock else {
        return Ok(None);
    };
    let opts = LandlockOptions {
        namespaces: true,
        list_ancestors: false,
        extra_writable: vec![],
        extra_readable: vec![],
        all_devices: true,
        tcp_connect_ports: vec![],
    };
    LandlockRuleset::build(policy, &opts)
        .map(Some)
        .map_err(|e| format!("Landlock over the writable mounts: {e}"))
}

/// Look the command up, build the layers. In the container's root, before the last steps.
pub fn prepare(p: &ProcessPlan, c: &Confinement) -> Result<Prepared, String> {
    let argv: Vec<CString> = p
        .args
        .iter()
        .map(|a| cstr(a.as_bytes(), "process.args"))
        .collect::<Result<_, _>>()?;
    let mut env = p.env.clone();
    if p.home_from_passwd {
        // as runc: the user's home in the container's /etc/passwd, else `/`
        env.retain(|e| !e.starts_with("HOME="));
        env.push(format!(
            "HOME={}",
            process::passwd_home(p.uid).unwrap_or_else(|| "/".into())
        ));
    }
    let envp: Vec<CString> = env
        .iter()
        .map(|e| cstr(e.as_bytes(), "process.env"))
        .collect::<Result<_, _>>()?;
    // runc reports a missing command at create, and so does capsule-runc
    let path_env = p
        .env
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    let path = process::find_executable(&p.args[0], path_env, &p.cwd).map_err(|e| e.to_string())?;
    Ok(Prepared {
        path,
        argv,
        envp,
        user: User {
            uid: p.uid,
            gid: p.gid,
            groups: p.groups.clone(),
        },
        caps: p.caps,
        no_new_privs: p.no_new_privs,
        seccomp: c.seccomp.clone(),
        landlock: landlock_ruleset(c)?,
        observer: None,
        preserve_fds: 0,
    })
}

/// `process.rlimits`, set on the container's process `pid` by capsule-runc from outside
/// (as runc does), before it is released: the runtime's own capabilities decide, so a
/// hard limit above the runtime's is raised where the runtime may raise it, even for a
/// process in a user namespace of its own, whose capabilities there do not count.
pub fn rlimits(pid: libc::pid_t, p: &ProcessPlan) -> Result<(), String> {
    process::limit(pid, &p.rlimits).map_err(|e| field(&e))
}

/// Process steps that take place before the wait for `start` (oom score, AppArmor,
/// umask, the working directory; the limits are [`rlimits`]'s).
pub fn setup(p: &ProcessPlan) -> Result<(), String> {
    process::settle(&process::Settle {
        oom_score_adj: p.oom_score_adj,
        apparmor: p.apparmor.as_deref(),
        umask: p.umask,
        cwd: &p.cwd,
    })
    .map_err(|e| field(&e))
}

/// A failed step, named by the field of config.json it carries out.
fn field(e: &StepError) -> String {
    match e {
        StepError::Capabilities(s, err) => {
            let f = match s {
                CapStep::Bounding => "process.capabilities.bounding",
                CapStep::KeepCaps => "keeping capabilities across the user change",
                CapStep::Groups => "process.user.additionalGids",
                CapStep::Gid => "process.user.gid",
                CapStep::Uid => "process.user.uid",
                CapStep::Sets => "process.capabilities",
                CapStep::Ambient => "process.capabilities.ambient",
            };
            format!("{f}: {err}")
        }
        StepError::NoNewPrivs(err) => format!("process.noNewPrivileges: {err}"),
        StepError::Filter(err) => format!("linux.seccomp: installing the filter: {err}"),
        StepError::Landlock(err) => format!("Landlock: {err}"),
        StepError::Settle { what, error } => match what {
            Settled::Rlimit(name) => format!("process.rlimits {name}: {error}"),
            Settled::OomScoreAdj => format!("process.oomScoreAdj: {error}"),
            Settled::AppArmor(p) => format!("process.apparmorProfile {p:?}: {error}"),
            Settled::Cwd(c) => format!("process.cwd {c:?}: {error}"),
        },
        other => other.to_string(),
    }
}

/// The last steps and `execve`. Returns only the error that stopped it.
pub fn finish(mut p: Prepared) -> String {
    // capsule's observer first (it sends its listener at once: no call of ours is
    // observed before), then the bundle's
    let mut filters = Vec::new();
    if let Some(sock) = p.observer {
        filters.push(process::Filter::Observer { listener_to: sock });
    }
    if let Some(s) = &p.seccomp {
        filters.push(process::Filter::Program {
            bpf: &s.bpf,
            flags: s.flags,
        });
    }
    let taken = process::take_layers(process::Layers {
        no_new_privs: p.no_new_privs,
        user: Some(&p.user),
        capabilities: process::Capabilities::Sets(p.caps),
        landlock: p.landlock.take().map(process::Landlock::Ruleset),
        filters: &filters,
    });
    match taken {
        // not observed is not less confined: said on the container's stderr
        Ok(t) => {
            for w in t.warnings {
                eprintln!("capsule-runc: warning: {w}");
            }
        }
        Err(e) => return field(&e),
    }
    let program = process::Program {
        path: Some(&p.path),
        argv: &p.argv,
        envp: &p.envp,
        keep_fds: p.preserve_fds,
    };
    // SAFETY: an empty signal set.
    let empty: libc::sigset_t = unsafe { std::mem::zeroed() };
    match process::exec(&program, &empty) {
        process::ExecError::Step(e) => field(&e),
        e => e.to_string(),
    }
}

//! A process's last steps before `execve`, in the one order both front ends use
//! (`capsule exec`'s command, [`crate::linux::init`], and an OCI container's process,
//! [`crate::ociruntime`]):
//!
//! 1. **settle** ([`settle`], a container's process, before `start`): its OOM score,
//!    AppArmor profile, umask and working directory (its resource limits are set from
//!    outside, [`limit`], by the runtime before it releases the process);
//! 2. **layers** ([`take_layers`]), in this order:
//!    1. `no_new_privs`, when asked (it only changes what a later `execve` gains);
//!    2. without `no_new_privs`, Landlock and the seccomp filters now, while
//!       `CAP_SYS_ADMIN` is still held (the kernel requires one or the other);
//!    3. a bundle's bounding set, then the user and its groups ([`caps::become_user`],
//!       capabilities kept across);
//!    4. the capabilities: every set emptied ([`caps::drop_all`], capsule's) or the five
//!       sets a bundle names ([`caps::set`]);
//!    5. with `no_new_privs`, Landlock and the seccomp filters last: the filters see
//!       nothing of the steps above, and the observer's goes before the others so no call
//!       of ours is observed;
//! 3. **exec** ([`exec`]): inherited descriptors close on exec, `SIGPIPE` back to its
//!    default, the signal mask restored, `execve` (of a path found before, or searched
//!    in `PATH` as `execvp` does).
//!
//! What can fail for reasons of the process's own (its executable missing, the Landlock
//! ruleset) is prepared before ([`find_executable`], the ruleset built in the process's
//! root), while the caller can still report it. Nothing here allocates on the way to
//! `execve` but the reports of what was applied.

use super::caps::{self, CapSets, CapStep, User};
use super::landlock::{self as ll, LandlockOptions, LandlockRuleset, PathRule};
use super::seccomp::{self, SeccompProgram};
use super::{rlimit, sys};
use capsule_bundle::policy::SandboxPolicy;
use std::ffi::{CStr, CString};
use std::os::fd::{BorrowedFd, RawFd};
use std::path::{Path, PathBuf};

/// A step of the last ones that failed, and why.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("setting no_new_privs: {0}")]
    NoNewPrivs(std::io::Error),
    #[error("dropping capabilities: {0}")]
    DropCapabilities(std::io::Error),
    #[error("{step}: {error}", step = cap_step(*.0), error = .1)]
    Capabilities(CapStep, std::io::Error),
    #[error("{0}")]
    Landlock(#[from] ll::LandlockError),
    #[error("Landlock ABI {abi} lacks rights this policy needs: {missing}")]
    LandlockMissing { abi: u32, missing: String },
    #[error("{0}")]
    Seccomp(#[from] seccomp::SeccompError),
    #[error("seccomp: installing the filter: {0}")]
    Filter(std::io::Error),
    #[error("closing inherited descriptors: {0}")]
    CloseDescriptors(std::io::Error),
    #[error("passing descriptor {fd} on: {error}")]
    KeepDescriptor { fd: i32, error: std::io::Error },
    #[error("{what}: {error}")]
    Settle {
        what: Settled,
        error: std::io::Error,
    },
}

impl StepError {
    /// The capability or user step that failed, if it was one.
    pub fn cap_step(&self) -> Option<CapStep> {
        match self {
            StepError::Capabilities(s, _) => Some(*s),
            _ => None,
        }
    }
}

fn cap_step(s: CapStep) -> &'static str {
    match s {
        CapStep::Bounding => "limiting the bounding set",
        CapStep::KeepCaps => "keeping capabilities across the user change",
        CapStep::Groups => "setting the supplementary groups",
        CapStep::Gid => "setting the group id",
        CapStep::Uid => "setting the user id",
        CapStep::Sets => "setting the capability sets",
        CapStep::Ambient => "raising the ambient capabilities",
    }
}

/// What [`settle`] sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    Rlimit(String),
    OomScoreAdj,
    AppArmor(String),
    Cwd(String),
}

impl std::fmt::Display for Settled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Settled::Rlimit(name) => write!(f, "the limit {name}"),
            Settled::OomScoreAdj => write!(f, "the OOM score"),
            Settled::AppArmor(p) => write!(f, "the AppArmor profile {p:?}"),
            Settled::Cwd(c) => write!(f, "the working directory {c:?}"),
        }
    }
}

/// One resource limit as asked: `(resource, its name, soft, hard)`.
pub type Rlimit = (libc::__rlimit_resource_t, String, u64, u64);

/// Set the resource limits `rlimits` of process `pid` from outside, exactly as asked:
/// the caller's capabilities decide whether a hard limit may be raised, whatever user
/// namespace `pid` is in.
pub fn limit(pid: libc::pid_t, rlimits: &[Rlimit]) -> Result<(), StepError> {
    for (res, name, soft, hard) in rlimits {
        rlimit::set_of(pid, *res, *soft, *hard).map_err(|error| StepError::Settle {
            what: Settled::Rlimit(name.clone()),
            error,
        })?;
    }
    Ok(())
}

/// A process's own settings, made before its layers ([`settle`]).
#[derive(Debug, Clone, Default)]
pub struct Settle<'a> {
    pub oom_score_adj: Option<i32>,
    pub apparmor: Option<&'a str>,
    pub umask: Option<u32>,
    pub cwd: &'a str,
}

/// Set the OOM score, the AppArmor profile of the next `execve`, the umask, and enter
/// the working directory.
pub fn settle(s: &Settle<'_>) -> Result<(), StepError> {
    let failed = |what: Settled| move |error| StepError::Settle { what, error };
    // the process's /proc (a container's: it may have put anything there), checked to be
    // a procfs's root, and each file reached beneath it without a link or a mount (its
    // own pid's directory, not `self`)
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let proc = |rel: &str, data: &[u8]| super::checked::proc_write_here(rel, data);
    if let Some(adj) = s.oom_score_adj {
        proc(&format!("{me}/oom_score_adj"), adj.to_string().as_bytes())
            .map_err(failed(Settled::OomScoreAdj))?;
    }
    if let Some(profile) = s.apparmor {
        let attr = if Path::new("/proc/self/attr/apparmor/exec").exists() {
            format!("{me}/attr/apparmor/exec")
        } else {
            format!("{me}/attr/exec")
        };
        proc(&attr, format!("exec {profile}").as_bytes())
            .map_err(failed(Settled::AppArmor(profile.to_string())))?;
    }
    if let Some(m) = s.umask {
        // SAFETY: umask cannot fail.
        unsafe { libc::umask(m as libc::mode_t) };
    }
    let cwd = CString::new(s.cwd).map_err(|_| StepError::Settle {
        what: Settled::Cwd(s.cwd.to_string()),
        error: std::io::Error::from_raw_os_error(libc::EINVAL),
    })?;
    sys::chdir(&cwd).map_err(failed(Settled::Cwd(s.cwd.to_string())))
}

/// Kill our child `pid` and reap it.
pub fn kill_and_reap(pid: libc::pid_t) {
    // SAFETY: killing and reaping our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
}

/// Wait for our child `pid` to end: its exit status, or 128 + the signal that ended it.
pub fn wait_status(pid: libc::pid_t) -> i32 {
    let mut st = 0;
    // SAFETY: waiting for our own child.
    if unsafe { libc::waitpid(pid, &mut st, 0) } < 0 {
        return 128 + libc::SIGKILL;
    }
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else {
        128 + libc::WTERMSIG(st)
    }
}

/// Is AppArmor on in this kernel?
pub fn apparmor_enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|s| s.trim() == "Y")
}

/// The Landlock layer of a process.
pub enum Landlock<'a> {
    /// A ruleset built before (in the process's root): enforced as it is.
    Ruleset(LandlockRuleset),
    /// The ruleset of `policy`, built now and enforced. Rights this kernel's ABI lacks
    /// refuse the step, unless `best_effort` (then the report lists them; a kernel
    /// without Landlock is reported as not applied).
    Build {
        policy: &'a SandboxPolicy,
        opts: &'a LandlockOptions,
        best_effort: bool,
    },
    /// A prepared root's ruleset, with the rules of the process's own mounts added again
    /// (`report`: the JSON report it was collected with).
    Received {
        ruleset: BorrowedFd<'a>,
        report: &'a serde_json::Value,
        again: &'a [PathRule],
    },
}

/// A seccomp filter a process installs.
pub enum Filter<'a> {
    /// capsule's filter, plain or listened (its refusals sent to capsule's supervisor).
    Capsule {
        program: &'a SeccompProgram,
        listener: Listener,
    },
    /// A compiled program (an OCI bundle's), installed as it is.
    Program {
        bpf: &'a [seccomp::bpf::sock_filter],
        flags: libc::c_ulong,
    },
    /// The refusal observer's filter (only observes), its listener sent on `listener_to`
    /// (then closed). Best effort: not observed is not less confined, so a failure is a
    /// warning ([`Taken::warnings`]).
    Observer { listener_to: RawFd },
}

/// Where the listener of capsule's filter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// None: the plain filter is installed.
    Plain,
    /// The listened filter; its listener sent on this socket (then closed).
    SendTo(RawFd),
    /// The listened filter; its listener kept by the caller ([`Taken::listener`]).
    Keep,
}

/// The capabilities a process keeps.
#[derive(Debug, Clone, Copy)]
pub enum Capabilities {
    /// None in any set, securebits locked so uid 0 regains nothing on `execve`.
    None,
    /// The five sets as given.
    Sets(CapSets),
}

/// A process's layers ([`take_layers`]).
pub struct Layers<'a> {
    pub no_new_privs: bool,
    /// The user to become; `None`: stay who it is.
    pub user: Option<&'a User>,
    pub capabilities: Capabilities,
    pub landlock: Option<Landlock<'a>>,
    /// Installed in this order (the last one installed is evaluated first).
    pub filters: &'a [Filter<'a>],
}

/// What [`take_layers`] applied, for the caller's report.
#[derive(Debug, Default)]
pub struct Taken {
    /// The Landlock report (JSON), when there was a Landlock layer.
    pub landlock: Option<serde_json::Value>,
    /// The listener of capsule's filter, when the caller keeps it ([`Listener::Keep`]).
    pub listener: Option<std::os::fd::OwnedFd>,
    /// What went wrong without making the process less confined.
    pub warnings: Vec<String>,
}

/// Take on `l`'s layers, in the order of the module docs.
pub fn take_layers(mut l: Layers<'_>) -> Result<Taken, StepError> {
    let mut taken = Taken::default();
    if l.no_new_privs {
        caps::no_new_privs().map_err(StepError::NoNewPrivs)?;
    } else {
        // a filter or Landlock without no_new_privs needs CAP_SYS_ADMIN: now, while held
        confine(&mut l, &mut taken)?;
    }
    // the bounding set before the user: dropping from it needs CAP_SETPCAP in the
    // effective set, which a change to another uid than 0 empties
    if let Capabilities::Sets(c) = &l.capabilities {
        caps::limit_bounding(c.bounding)
            .map_err(|e| StepError::Capabilities(CapStep::Bounding, e))?;
    }
    if let Some(u) = l.user {
        caps::become_user(u).map_err(|(s, e)| StepError::Capabilities(s, e))?;
    }
    match l.capabilities {
        Capabilities::None => caps::drop_all().map_err(StepError::DropCapabilities)?,
        Capabilities::Sets(c) => caps::set(&c).map_err(|(s, e)| StepError::Capabilities(s, e))?,
    }
    if l.no_new_privs {
        confine(&mut l, &mut taken)?;
    }
    Ok(taken)
}

/// Landlock, then the filters.
fn confine(l: &mut Layers<'_>, taken: &mut Taken) -> Result<(), StepError> {
    if let Some(ll) = l.landlock.take() {
        taken.landlock = Some(landlock(ll, l.no_new_privs)?);
    }
    for f in l.filters {
        install(f, taken)?;
    }
    Ok(())
}

fn landlock(l: Landlock<'_>, no_new_privs: bool) -> Result<serde_json::Value, StepError> {
    match l {
        Landlock::Ruleset(r) => {
            Ok(serde_json::to_value(r.restrict_self_with(no_new_privs)?).unwrap_or_default())
        }
        Landlock::Received {
            ruleset,
            report,
            again,
        } => Ok(ll::restrict_received(ruleset, report.clone(), again)?),
        Landlock::Build {
            policy,
            opts,
            best_effort,
        } => match ll::restrict(policy, opts) {
            Ok(r) => {
                let missing: Vec<String> =
                    r.missing().iter().map(|m| m.right.to_string()).collect();
                // weaker isolation with namespaces: the lacking rights are the accepted
                // degradation, recorded in the report's `missing`
                if !missing.is_empty() && !best_effort {
                    return Err(StepError::LandlockMissing {
                        abi: r.abi,
                        missing: missing.join(", "),
                    });
                }
                Ok(serde_json::to_value(&r).unwrap_or_default())
            }
            Err(e) if best_effort => Ok(serde_json::json!({
                "status": "not_applied",
                "error": e.to_string(),
            })),
            Err(e) => Err(e.into()),
        },
    }
}

fn install(f: &Filter<'_>, taken: &mut Taken) -> Result<(), StepError> {
    match f {
        Filter::Capsule {
            program,
            listener: Listener::Plain,
        } => program.install()?,
        Filter::Capsule {
            program,
            listener: Listener::SendTo(sock),
        } => {
            let listener = program.install_listened()?;
            if let Some(l) = listener {
                use std::os::fd::AsRawFd;
                let _ = seccomp::send_listener(*sock, l.as_raw_fd());
            }
            sys::close(*sock);
        }
        Filter::Capsule {
            program,
            listener: Listener::Keep,
        } => taken.listener = program.install_listened()?,
        Filter::Program { bpf, flags } => {
            seccomp::install_program(bpf, *flags).map_err(StepError::Filter)?
        }
        Filter::Observer { listener_to } => {
            let r = match seccomp::install_observer() {
                Ok(Some(l)) => {
                    use std::os::fd::AsRawFd;
                    seccomp::send_listener(*listener_to, l.as_raw_fd())
                        .map_err(|e| format!("sending the refusal observer its listener: {e}"))
                }
                Ok(None) => Ok(()),
                Err(e) => Err(format!("installing the refusal observer's filter: {e}")),
            };
            sys::close(*listener_to);
            if let Err(w) = r {
                taken.warnings.push(w);
            }
        }
    }
    Ok(())
}

/// The program a process becomes.
pub struct Program<'a> {
    /// Its executable, found before ([`find_executable`]); `None`: `argv[0]` searched in
    /// the `PATH` of `envp` as `execvp` does, at the `execve`.
    pub path: Option<&'a CStr>,
    pub argv: &'a [CString],
    pub envp: &'a [CString],
    /// Descriptors 3 to 3+N-1 pass through `execve` as they are (capsule-runc's
    /// `--preserve-fds N`: the caller's); 0 for every other process.
    pub keep_fds: u32,
}

/// Why [`exec`] did not become the program.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("{0}")]
    Step(#[from] StepError),
    /// `execve` failed with this errno (with a `PATH` search: the one that decides, as
    /// `execvp` reports it).
    #[error("exec {command}: {}", std::io::Error::from_raw_os_error(*errno))]
    Exec { command: String, errno: i32 },
}

/// The last step: every inherited descriptor from 3 up closed on exec (but the
/// [`Program::keep_fds`] ones), `SIGPIPE` back to its default, the signal mask `mask`
/// (the caller's, or empty), then `execve`. Returns only why it failed.
pub fn exec(p: &Program<'_>, mask: &libc::sigset_t) -> ExecError {
    if let Err(e) = sys::cloexec_from(3 + p.keep_fds) {
        return StepError::CloseDescriptors(e).into();
    }
    for fd in 3..3 + p.keep_fds as i32 {
        if let Err(error) = sys::keep_across_exec(fd) {
            return StepError::KeepDescriptor { fd, error }.into();
        }
    }
    let mut argv: Vec<*const libc::c_char> = p.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = p.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: resetting our own signal disposition and mask.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::sigprocmask(libc::SIG_SETMASK, mask, std::ptr::null_mut());
    }
    let try_exec = |path: &CStr| -> libc::c_int {
        // SAFETY: argv and envp are NULL-terminated arrays of valid C strings that
        // outlive the call.
        unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    let argv0 = p.argv.first().map_or(&b""[..], |a| a.as_bytes());
    let errno = match p.path {
        Some(path) => try_exec(path),
        None => search(argv0, p.envp, try_exec),
    };
    let command = String::from_utf8_lossy(match p.path {
        Some(path) => path.to_bytes(),
        None => argv0,
    })
    .into_owned();
    ExecError::Exec { command, errno }
}

/// `execve` of `argv0` in each folder of `envp`'s `PATH` (a name with a `/` as it is),
/// the errno `execvp` would report: the first that is not "not here", else `EACCES` if
/// one was seen, else `ENOENT`.
fn search(argv0: &[u8], envp: &[CString], try_exec: impl Fn(&CStr) -> libc::c_int) -> i32 {
    if argv0.contains(&b'/') {
        return match CString::new(argv0) {
            Ok(c) => try_exec(&c),
            Err(_) => libc::ENOENT,
        };
    }
    if argv0.is_empty() {
        return libc::ENOENT;
    }
    let path = envp
        .iter()
        .find_map(|e| e.as_bytes().strip_prefix(b"PATH="))
        .unwrap_or(b"/usr/local/bin:/usr/bin:/bin");
    let mut errno = libc::ENOENT;
    let mut seen_eacces = false;
    for dir in path.split(|b| *b == b':') {
        let dir = if dir.is_empty() { &b"."[..] } else { dir };
        let mut full = dir.to_vec();
        full.push(b'/');
        full.extend_from_slice(argv0);
        let Ok(c) = CString::new(full) else { continue };
        match try_exec(&c) {
            libc::EACCES => seen_eacces = true,
            libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG => {}
            e => {
                errno = e;
                break;
            }
        }
    }
    if seen_eacces && errno == libc::ENOENT {
        errno = libc::EACCES;
    }
    errno
}

/// Why [`find_executable`] found nothing.
#[derive(Debug, thiserror::Error)]
pub enum NotFound {
    #[error("exec: {0:?}: no such executable file in the container")]
    NoSuchFile(String),
    #[error("exec: {0:?}: executable file not found in $PATH")]
    NotInPath(String),
    #[error("process.args[0]: contains a NUL byte")]
    Nul,
}

/// `cmd` as an executable path, looked up now (in the process's root): as given with a
/// `/` (relative to `cwd`), else in the folders of `path` (a `PATH` value; an empty entry
/// is `cwd`).
pub fn find_executable(cmd: &str, path: &str, cwd: &str) -> Result<CString, NotFound> {
    use std::os::unix::ffi::OsStrExt;
    let is_exec = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        })
    };
    let c = |p: PathBuf| CString::new(p.as_os_str().as_bytes()).map_err(|_| NotFound::Nul);
    if cmd.contains('/') {
        let full = if cmd.starts_with('/') {
            PathBuf::from(cmd)
        } else {
            Path::new(cwd).join(cmd)
        };
        if !is_exec(&full) {
            return Err(NotFound::NoSuchFile(cmd.to_string()));
        }
        return c(full);
    }
    for dir in path.split(':') {
        let d = if dir.is_empty() { cwd } else { dir };
        let full = Path::new(d).join(cmd);
        if is_exec(&full) {
            return c(full);
        }
    }
    Err(NotFound::NotInPath(cmd.to_string()))
}

/// The most of a user database (`/etc/passwd`) read (runc reads it whole; an image's
/// file is its own to make big, not ours to read unbounded).
const PASSWD_MAX: u64 = 4 << 20;

/// The home of `uid` in `/etc/passwd` of the process's root (an image's file: opened
/// without blocking, so a fifo there cannot hold the process; read only when it is a
/// regular file, bounded).
pub fn passwd_home(uid: u32) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open("/etc/passwd")
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = Vec::new();
    f.take(PASSWD_MAX).read_to_end(&mut text).ok()?;
    home_in_passwd(&text, uid)
}

/// The home directory of the first entry of `uid` in the text of a passwd file
/// (`name:password:uid:gid:gecos:home:shell`); `None` when there is none or it is empty.
pub fn home_in_passwd(text: &[u8], uid: u32) -> Option<String> {
    text.split(|b| *b == b'\n').find_map(|line| {
        let f: Vec<&[u8]> = line.split(|b| *b == b':').collect();
        if f.len() < 6 || std::str::from_utf8(f[2]).ok()?.parse::<u32>().ok()? != uid {
            return None;
        }
        let home = std::str::from_utf8(f[5]).ok()?;
        (!home.is_empty() && !home.contains('\0')).then(|| home.to_string())
    })
}

#[cfg(test)]
mod tests;

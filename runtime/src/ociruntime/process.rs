//! The container process's last steps, shared by `create`'s init and `exec`: what can
//! fail is prepared first ([`prepare`]: the executable looked up, the Landlock ruleset
//! built, the seccomp program compiled), in the container's root, while create or exec
//! can still report it; then [`finish`] runs the few system calls left before `execve`
//! (after `start` for the init): Landlock, the user and its groups, the capability sets,
//! `no_new_privs`, seccomp last.
//!
//! What the process is (its user, capabilities, limits, environment) and what confines
//! it (capsule's Landlock layer over the writable mounts, the bundle's seccomp program)
//! are decided in its plan ([`crate::plan::container::ProcessPlan`],
//! [`crate::plan::container::Confinement`]); this module only carries them out.

use crate::kernel::landlock::{LandlockOptions, LandlockRuleset};
use crate::plan::container::{Confinement, ProcessPlan};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub struct Prepared {
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
    bounding: u64,
    effective: u64,
    permitted: u64,
    inheritable: u64,
    ambient: u64,
    no_new_privs: bool,
    seccomp: Option<super::seccomp::Program>,
    landlock: Option<LandlockRuleset>,
    /// The socket the refusal observer's listener goes on ([`super::observe`]).
    pub observer: Option<std::os::fd::RawFd>,
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
            home_of(p.uid).unwrap_or_else(|| "/".into())
        ));
    }
    let envp: Vec<CString> = env
        .iter()
        .map(|e| cstr(e.as_bytes(), "process.env"))
        .collect::<Result<_, _>>()?;
    let path = lookup(&p.args[0], &p.env, &p.cwd)?;
    Ok(Prepared {
        path,
        argv,
        envp,
        uid: p.uid,
        gid: p.gid,
        groups: p.groups.clone(),
        bounding: p.caps.bounding,
        effective: p.caps.effective,
        permitted: p.caps.permitted,
        inheritable: p.caps.inheritable,
        ambient: p.caps.ambient,
        no_new_privs: p.no_new_privs,
        seccomp: c.seccomp.clone(),
        landlock: landlock_ruleset(c)?,
        observer: None,
    })
}

/// The most of the container's `/etc/passwd` read (runc reads it whole; an image's
/// file is its own to make big, not ours to read unbounded).
const PASSWD_MAX: u64 = 4 << 20;

/// The home of `uid` in the container's `/etc/passwd` (this process is in the
/// container's root by now). The file is the image's: opened without blocking (a fifo
/// there cannot hold the init), read only when it is a regular file, bounded.
fn home_of(uid: u32) -> Option<String> {
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

/// `args[0]` as an executable path: as given with a `/`, else searched in the process's
/// `PATH` (runc reports a missing command at create, and so does capsule-runc).
fn lookup(cmd: &str, env: &[String], cwd: &str) -> Result<CString, String> {
    let is_exec = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        })
    };
    if cmd.contains('/') {
        let full = if cmd.starts_with('/') {
            PathBuf::from(cmd)
        } else {
            Path::new(cwd).join(cmd)
        };
        if !is_exec(&full) {
            return Err(format!(
                "exec: {cmd:?}: no such executable file in the container"
            ));
        }
        return cstr(full.as_os_str().as_bytes(), "process.args[0]");
    }
    let path = env
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    for dir in path.split(':') {
        let d = if dir.is_empty() { cwd } else { dir };
        let full = Path::new(d).join(cmd);
        if is_exec(&full) {
            return cstr(full.as_os_str().as_bytes(), "process.args[0]");
        }
    }
    Err(format!("exec: {cmd:?}: executable file not found in $PATH"))
}

/// `process.rlimits`, set on the container's process `pid` by capsule-runc from outside
/// (as runc does), before it is released: the runtime's own capabilities decide, so a
/// hard limit above the runtime's is raised where the runtime may raise it, even for a
/// process in a user namespace of its own, whose capabilities there do not count.
pub fn rlimits(pid: libc::pid_t, p: &ProcessPlan) -> Result<(), String> {
    for (res, typ, soft, hard) in &p.rlimits {
        let lim = libc::rlimit {
            rlim_cur: *soft,
            rlim_max: *hard,
        };
        // SAFETY: prlimit with a valid struct and no old value asked.
        if unsafe { libc::prlimit(pid, *res, &lim, std::ptr::null_mut()) } < 0 {
            return Err(format!(
                "process.rlimits {typ}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// Process steps that take place before the wait for `start` (oom score, AppArmor,
/// umask, the working directory; the limits are [`rlimits`]'s).
pub fn setup(p: &ProcessPlan) -> Result<(), String> {
    if let Some(adj) = p.oom_score_adj {
        std::fs::write("/proc/self/oom_score_adj", adj.to_string())
            .map_err(|e| format!("process.oomScoreAdj: {e}"))?;
    }
    if let Some(profile) = &p.apparmor {
        let attr = if Path::new("/proc/self/attr/apparmor/exec").exists() {
            "/proc/self/attr/apparmor/exec"
        } else {
            "/proc/self/attr/exec"
        };
        std::fs::write(attr, format!("exec {profile}"))
            .map_err(|e| format!("process.apparmorProfile {profile:?}: {e}"))?;
    }
    if let Some(m) = p.umask {
        // SAFETY: umask cannot fail.
        unsafe { libc::umask(m as libc::mode_t) };
    }
    let cwd = cstr(p.cwd.as_bytes(), "process.cwd")?;
    // SAFETY: chdir to a C string.
    if unsafe { libc::chdir(cwd.as_ptr()) } < 0 {
        return Err(format!(
            "process.cwd {:?}: {}",
            p.cwd,
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

pub fn apparmor_enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|s| s.trim() == "Y")
}

/// Install the compiled filter `p` on the calling thread (no allocation).
fn install(p: &super::seccomp::Program) -> std::io::Result<()> {
    let prog = libc::sock_fprog {
        len: p.bpf.len() as libc::c_ushort,
        filter: p.bpf.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: a live BPF program the kernel copies.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            p.flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The seccomp filters: capsule's observer (it sends its listener at once: no call of
/// ours is observed before), then the bundle's.
fn filters(p: &Prepared) -> Result<(), String> {
    if let Some(sock) = p.observer {
        if let Err(e) = super::observe::install(sock) {
            // not observed is not less confined: said on the container's stderr
            eprintln!("capsule-runc: warning: {e}");
        }
    }
    if let Some(s) = &p.seccomp {
        install(s).map_err(|err| format!("linux.seccomp: installing the filter: {err}"))?;
    }
    Ok(())
}

/// The last steps and `execve`. Returns only the error that stopped it.
pub fn finish(mut p: Prepared) -> String {
    let e = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    // Landlock (needs no_new_privs or CAP_SYS_ADMIN: the latter, still held, here)
    if let Some(l) = p.landlock.take() {
        if let Err(err) = l.restrict_self_with(p.no_new_privs) {
            return format!("Landlock: {err}");
        }
    }
    // a filter without no_new_privs needs CAP_SYS_ADMIN: installed while it is held
    if !p.no_new_privs {
        if let Err(err) = filters(&p) {
            return err;
        }
    }
    // SAFETY: plain system calls on our own process.
    unsafe {
        for cap in 0..64u32 {
            if libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) < 0 {
                break;
            }
            if p.bounding & (1 << cap) == 0
                && libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0
            {
                return e("process.capabilities.bounding");
            }
        }
        if libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 {
            return e("keeping capabilities across the user change");
        }
        if libc::setgroups(p.groups.len(), p.groups.as_ptr()) < 0 && last_errno() != libc::EPERM {
            return e("process.user.additionalGids");
        }
        if libc::setresgid(p.gid, p.gid, p.gid) < 0 {
            return e("process.user.gid");
        }
        if libc::setresuid(p.uid, p.uid, p.uid) < 0 {
            return e("process.user.uid");
        }
        libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0);
    }
    if let Err(err) = crate::kernel::sys::capset(p.effective, p.permitted, p.inheritable) {
        return format!("process.capabilities: {err}");
    }
    // SAFETY: prctl on our own process.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
        for cap in 0..64u32 {
            if p.ambient & (1 << cap) != 0
                && libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                    cap as libc::c_ulong,
                    0,
                    0,
                ) < 0
            {
                return e("process.capabilities.ambient");
            }
        }
        if p.no_new_privs && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
            return e("process.noNewPrivileges");
        }
    }
    if p.no_new_privs {
        if let Err(err) = filters(&p) {
            return err;
        }
    }
    let _ = crate::kernel::sys::cloexec_from(3);
    let mut argv: Vec<*const libc::c_char> = p.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = p.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: NULL-terminated arrays of C strings that outlive the call.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let empty: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execve(p.path.as_ptr(), argv.as_ptr(), envp.as_ptr());
    }
    e(&format!("exec {}", p.path.to_string_lossy()))
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::home_in_passwd;

    #[test]
    fn home_comes_from_the_users_line() {
        let text = b"root:x:0:0:root:/root:/bin/sh\n# odd\nbad:x:notanumber:0::/bad:/bin/sh\n\
app:x:1000:1000:App:/home/app:/bin/sh\nempty:x:7:7:::/bin/sh\nshort:x:8\n";
        assert_eq!(home_in_passwd(text, 0).as_deref(), Some("/root"));
        assert_eq!(home_in_passwd(text, 1000).as_deref(), Some("/home/app"));
        assert_eq!(home_in_passwd(text, 7), None);
        assert_eq!(home_in_passwd(text, 8), None);
        assert_eq!(home_in_passwd(text, 42), None);
        assert_eq!(
            home_in_passwd(b"\xff\xfe:x:1:1::/x\n", 1).as_deref(),
            Some("/x")
        );
    }
}

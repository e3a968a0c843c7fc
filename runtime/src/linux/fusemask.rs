//! Watched masks: hidden credentials of the home shown as empty, read-only entries that
//! capsule itself serves over FUSE, so that every lookup, listing and open in one is
//! listed as a refused read, by name (`refused read ~/.ssh/id_ed25519 (ssh); to allow:
//! --reveal ~/.ssh`), at no cost to any other open.
//!
//! What a command sees: each hidden credential path of the home the host has
//! ([`watched`]: `HOME_CREDENTIALS`, not revealed, at most [`MAX_WATCHED`]) is an empty
//! folder (mode 0555) or an empty file (0444), read-only, `nosuid`, `nodev`, `noexec`,
//! where the rest of the hidden home is absent. Its contents never reach the sandbox:
//! below the watched mount lies the plain mask of the plan ([`super::MountStep::Mask`],
//! made in the prepared root as always), and the server answers from constants only
//! ([`serve`]).
//!
//! How one is made, per exec (a warm spare makes its own ahead of time):
//! - a descriptor of the host's `/dev/fuse` (`O_PATH`, no access; [`device`]) is opened on
//!   the host by capsule, or by the holder before it builds its root, and inherited by init
//!   or the spare;
//! - in the sandbox, after its own `/proc` is mounted, the process holding the mount
//!   namespace's capabilities reopens it through `/proc/self/fd` (a FUSE descriptor must
//!   be opened in the user namespace the mount belongs to), once per mask, and mounts each
//!   over its mask ([`mount`]);
//! - it sends the descriptors, with one of its `/proc`, to capsule on the seccomp
//!   listener's channel ([`send`]) and closes its own, before the command is forked; the
//!   command never holds one;
//! - capsule's seccomp supervisor thread answers them ([`serve::Masks`]), speaking the FUSE
//!   protocol itself rather than through fuser (why: [`serve`]).
//!
//! Why the task can neither hang nor crash the server, nor learn anything from it: each
//! request gets a constant answer at once (lookups `ENOENT`, listings `.` and `..`, reads
//! end of file) and nothing of the host is read to make it; the descriptors are
//! non-blocking; should the supervisor or capsule end, the kernel aborts the connection and
//! every access gets `ENOTCONN`: still nothing shown. The supervisor thread that answers
//! them also reads the task's memory for its seccomp notifications (`process_vm_readv`),
//! which must never wait on this server: it cannot, since a file mask is empty (size 0,
//! always), so no page of the task's memory can be backed by one. A storm of lookups costs
//! the task a round trip each (~23 us measured, `hack/bench-refusals.sh` with `BASE_ENV`)
//! and leaves the record bounded (counts).
//!
//! Where it cannot be used, the view is as before (every hidden path of the home absent)
//! and reads are listed only with `exec --list-reads`: without full isolation, when
//! `/dev/fuse` cannot be opened by the user (on this project's test machines it is mode
//! 0600, root's; most distributions make it 0666), or with `CAPSULE_FUSE_MASKS=0`. `capsule
//! isolation` says which.

pub mod serve;

use super::plan::{within, MountStep};
use crate::kernel::sys;
use capsule_bundle::policy::{HiddenReason, SandboxPolicy};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// At most this many watched masks per exec (a descriptor and a mount each); hidden
/// credentials beyond are plain masks, absent in the home's view.
pub const MAX_WATCHED: usize = 32;

/// The message kind on the listener's channel ([`super::notify`]).
pub const MESSAGE: u8 = b'F';

/// `/dev/fuse`'s device number (misc 229).
const FUSE_RDEV: (u32, u32) = (10, 229);

/// The FUSE device's path: `/dev/fuse`, or **for tests only**
/// `CAPSULE_FUSE_TEST_DEVICE` (another node of the same device, which [`device`] checks:
/// the tests give an unprivileged user one it may open, as most distributions do).
fn device_path() -> CString {
    std::env::var_os("CAPSULE_FUSE_TEST_DEVICE")
        .and_then(|p| CString::new(p.as_bytes()).ok())
        .unwrap_or_else(|| c"/dev/fuse".to_owned())
}

/// Can this user serve watched masks here? `/dev/fuse` is the FUSE device, readable and
/// writable for it, and they are not turned off (`CAPSULE_FUSE_MASKS=0`). Asked once per
/// process (an exec's plan and its record both ask).
pub fn usable() -> bool {
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(probe)
}

fn probe() -> bool {
    if std::env::var_os("CAPSULE_FUSE_MASKS").is_some_and(|v| v == "0") {
        return false;
    }
    let path = device_path();
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: stat(2) and access(2) on a valid C string.
    unsafe {
        libc::stat(path.as_ptr(), &mut st) == 0
            && is_fuse(&st)
            && libc::access(path.as_ptr(), libc::R_OK | libc::W_OK) == 0
    }
}

/// Is this the FUSE device?
fn is_fuse(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFCHR
        && (libc::major(st.st_rdev), libc::minor(st.st_rdev)) == FUSE_RDEV
}

/// The hidden credentials of the home at `home` that `policy` hides and the host has (a
/// folder or a file, no symlink followed), when [`usable`]: at most [`MAX_WATCHED`], none
/// revealed, none with another step of `steps` at or inside it (the filtered
/// `~/.npmrc`, a bind).
pub fn watched(policy: &SandboxPolicy, home: &Path, steps: &[MountStep]) -> Vec<PathBuf> {
    select(policy, home, steps, &present(policy, home))
}

/// The hidden credentials below `home` that the host has as a folder or a file (one
/// `lstat` each, nothing followed), when [`usable`]: the host's part of [`watched`],
/// gathered before a plan is made ([`select`] is the rest).
pub fn present(policy: &SandboxPolicy, home: &Path) -> Vec<PathBuf> {
    if !usable() {
        return Vec::new();
    }
    on_host(policy, home)
}

/// [`present`], wherever FUSE can be used.
fn on_host(policy: &SandboxPolicy, home: &Path) -> Vec<PathBuf> {
    policy
        .hidden
        .iter()
        .filter(|h| {
            h.reason == HiddenReason::Credentials && h.path != home && within(&h.path, home)
        })
        .filter(|h| std::fs::symlink_metadata(&h.path).is_ok_and(|m| m.is_dir() || m.is_file()))
        .map(|h| h.path.clone())
        .collect()
}

/// The watched masks of a plan (see [`watched`]) among the credentials the host has
/// (`present`, from [`present`]): no system call.
pub fn select(
    policy: &SandboxPolicy,
    home: &Path,
    steps: &[MountStep],
    present: &[PathBuf],
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for h in &policy.hidden {
        if out.len() == MAX_WATCHED {
            break;
        }
        let p = &h.path;
        if h.reason != HiddenReason::Credentials || p == home || !within(p, home) {
            continue;
        }
        if policy.revealed.iter().any(|r| within(p, r) || within(r, p)) {
            continue;
        }
        let mounted_inside = steps.iter().any(|s| {
            !matches!(
                s,
                MountStep::Mask {
                    carve_outs: false,
                    ..
                } | MountStep::HomeView(_)
            ) && within(s.dst(), p)
        });
        if mounted_inside || out.iter().any(|o| within(p, o) || within(o, p)) {
            continue;
        }
        if present.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

/// An `O_PATH` descriptor of the host's `/dev/fuse` (close-on-exec), for [`mount`] to
/// reopen in the sandbox; `None` when it is not the FUSE device.
pub fn device() -> Option<OwnedFd> {
    // SAFETY: open(2) of a valid C string; the descriptor is ours.
    let fd = unsafe {
        libc::open(
            device_path().as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor just opened.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on our own descriptor.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 || !is_fuse(&st) {
        return None;
    }
    Some(fd)
}

/// The watched masks one sandbox made, for capsule.
#[derive(Default)]
pub struct Mounted {
    /// One FUSE connection per mounted mask, with its index in the plan's `watched` and
    /// whether it is a folder.
    conns: Vec<(OwnedFd, u16, bool)>,
    /// The sandbox's `/proc` (`O_PATH`): the server names programs from it.
    proc: Option<OwnedFd>,
}

/// Mount a watched mask over each of `watched` that is a folder or a file here (in the
/// sandbox's root, its own `/proc` mounted; by the process that holds the capabilities of
/// the mount namespace's user namespace). `dev`: [`device`]'s descriptor. Best effort: a
/// mask that cannot be watched stays the plain mask it is (nothing is shown either way),
/// and its reads go unlisted.
pub fn mount(watched: &[PathBuf], dev: RawFd) -> Mounted {
    let mut m = Mounted::default();
    if watched.is_empty() || dev < 0 {
        return m;
    }
    // SAFETY: open(2) of a constant path.
    let proc = unsafe {
        libc::open(
            c"/proc".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if proc < 0 {
        return m;
    }
    // SAFETY: a descriptor just opened.
    m.proc = Some(unsafe { OwnedFd::from_raw_fd(proc) });
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let Ok(reopen) = CString::new(format!("/proc/self/fd/{dev}")) else {
        return m;
    };
    for (i, w) in watched.iter().enumerate().take(MAX_WATCHED) {
        // the mount point, resolved once and without following a symlink on the way (a
        // folder of the home layer, which a task wrote, may be one); mounted on through
        // its descriptor, so the mount lands on exactly what was resolved
        let Some(at) = resolve(w) else {
            continue;
        };
        // SAFETY: zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on our own descriptor.
        if unsafe { libc::fstat(at.as_raw_fd(), &mut st) } != 0 {
            continue;
        }
        let dir = match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => true,
            libc::S_IFREG => false,
            _ => continue,
        };
        let Ok(dst) = CString::new(format!("/proc/self/fd/{}", at.as_raw_fd())) else {
            continue;
        };
        // SAFETY: open(2) of a valid C string.
        let fd = unsafe { libc::open(reopen.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            tracing::debug!(
                "watched masks: reopening /dev/fuse: {}",
                io::Error::last_os_error()
            );
            break;
        }
        // SAFETY: a descriptor just opened.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let opts = format!(
            "fd={},rootmode={:o},user_id={uid},group_id={gid},allow_other,default_permissions",
            fd.as_raw_fd(),
            if dir { libc::S_IFDIR } else { libc::S_IFREG }
        );
        let Ok(opts) = CString::new(opts) else {
            continue;
        };
        let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        match sys::mount(
            Some(c"capsule-hidden"),
            &dst,
            Some(c"fuse"),
            flags,
            Some(&opts),
        ) {
            Ok(()) => {
                serve::answer_init(fd.as_raw_fd());
                m.conns.push((fd, i as u16, dir))
            }
            Err(e) => tracing::debug!("watched masks: mounting at {}: {e}", w.display()),
        }
    }
    m
}

/// `O_PATH` of `path` (absolute), no symlink followed on the way (`openat2` with
/// `RESOLVE_NO_SYMLINKS`); `None` if one is there, or the path is missing.
fn resolve(path: &Path) -> Option<OwnedFd> {
    let p = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: open_how is plain data; zeroed is its empty value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS;
    // SAFETY: openat2(2) with a valid C string and open_how of its own size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            p.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        tracing::debug!(
            "watched masks: {}: {}",
            path.display(),
            io::Error::last_os_error()
        );
        return None;
    }
    // SAFETY: a descriptor just opened.
    Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Send `m` to capsule on the sandbox's end `sock` of the listener's channel, and close
/// this process's copies (the connections then live on in capsule alone: should it not
/// take them, they are aborted, never left unanswered). Never raises `SIGPIPE`.
pub fn send(sock: RawFd, m: Mounted) {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let Some(proc) = &m.proc else { return };
    if m.conns.is_empty() {
        return;
    }
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut body = vec![MESSAGE];
    body.extend_from_slice(&uid.to_le_bytes());
    body.extend_from_slice(&gid.to_le_bytes());
    let mut fds = vec![proc.as_raw_fd()];
    for (fd, i, dir) in &m.conns {
        body.extend_from_slice(&i.to_le_bytes());
        body.push(u8::from(*dir));
        fds.push(fd.as_raw_fd());
    }
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let iov = [io::IoSlice::new(&body)];
    if let Err(e) = sendmsg::<()>(sock, &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None) {
        tracing::debug!("watched masks: sending them to capsule: {e}");
    }
}

/// Receive one message from the listener's channel: its bytes and descriptors (room for a
/// [`Mounted`]'s: `/proc` and [`MAX_WATCHED`] connections).
pub fn recv(sock: RawFd) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; 16 + 3 * MAX_WATCHED];
    let (n, fds) = sys::recv_fds_into(
        sock,
        &mut buf,
        &mut nix::cmsg_space!([RawFd; MAX_WATCHED + 1]),
    )?;
    buf.truncate(n);
    Ok((buf, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_bundle::policy::HiddenPath;

    #[test]
    fn the_homes_credentials_the_host_has_are_watched() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("h");
        for dir in [".ssh", ".aws", ".kube", ".docker/x", "Documents"] {
            std::fs::create_dir_all(home.join(dir)).unwrap();
        }
        std::fs::write(home.join(".netrc"), "x").unwrap();
        std::os::unix::fs::symlink(home.join(".ssh"), home.join(".gnupg")).unwrap();
        std::fs::create_dir_all(d.path().join("elsewhere/.ssh")).unwrap();
        let hidden = |rel: &str, reason| HiddenPath {
            path: if rel.starts_with('/') {
                PathBuf::from(rel)
            } else {
                home.join(rel)
            },
            reason,
        };
        let mut policy: SandboxPolicy = serde_json::from_value(serde_json::json!({
            "version": 1, "capsule_name": "c", "workspace": "/w", "read_only": [],
            "tmp_dir": "/t", "writable": [], "hidden": [], "revealed": [], "pass_env": [],
            "devices": [], "network": {"mode": "none"}
        }))
        .unwrap();
        let elsewhere = d.path().join("elsewhere/.ssh");
        policy.hidden = vec![
            hidden(".ssh", HiddenReason::Credentials),
            hidden(".aws", HiddenReason::Credentials),
            hidden(".netrc", HiddenReason::Credentials),
            hidden(".kube", HiddenReason::Credentials),
            hidden(".docker", HiddenReason::Credentials),
            hidden(".gnupg", HiddenReason::Credentials),
            hidden(".azure", HiddenReason::Credentials),
            hidden(".ssh/id_rsa", HiddenReason::Credentials),
            hidden("Documents", HiddenReason::PersonalFiles),
            hidden(elsewhere.to_str().unwrap(), HiddenReason::Credentials),
        ];
        policy.revealed = vec![home.join(".kube")];
        let steps = vec![MountStep::Bind {
            src: "/x".into(),
            dst: home.join(".docker/x"),
            rw: false,
            optional: true,
        }];
        let got = select(&policy, &home, &steps, &on_host(&policy, &home));
        // a folder and a file the host has; not revealed, not mounted inside, not a
        // symlink, not absent, not inside another, not a personal folder, not elsewhere
        assert_eq!(
            got,
            [home.join(".ssh"), home.join(".aws"), home.join(".netrc")]
        );
    }
}

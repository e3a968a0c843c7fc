//! Prepared roots: a capsule's sandbox root built once and joined by each exec, so that
//! starting a command costs a `setns` and a copy of the mount table instead of ~60 mount
//! calls plus one per hidden path, and the Landlock walk is done once too.
//!
//! Two ways in: `X` takes one of the holder's two *warm spares* (inits made ahead of
//! time, see [`super::warm`]; new ones are made when no exec runs in a spare any more,
//! capsule included, so that their CPU work competes with none; at once when execs run
//! side by side; an `X` finding none ready gets one made for it); `J` joins the holder's
//! namespaces (init runs hooks inside):
//!
//! ```text
//! capsule exec (P)                 holder (H, per capsule and plan fingerprint)
//! ───────────────────────────────  ─────────────────────────────────────────────────────
//! fingerprint the plan
//! connect <bundle>/prepared/<fp>.sock ──▶ accept, check the peer's uid and fingerprint,
//!   (absent: spawn H, see below)        check that no mount was lost; for J: make a
//!                                       fresh Landlock ruleset from its rules
//! receive userns, mntns, ruleset ◀───── send them (SCM_RIGHTS) + the Landlock report
//! vfork C: setns(userns), setns(mntns),
//!   clone(CLONE_PARENT|NEWNS|NEWPID|NEWNET|NEWIPC|NEWUTS) ──▶ init (pid 1, P's child):
//!   its own copy of the prepared mount table, a fresh /proc and devpts of its own
//! ```
//!
//! The holder is pid 1 of a pid namespace of its own and runs no code of the task: it
//! builds the root exactly as a one-off exec would ([`super::mounts::build_root`]),
//! collects the Landlock rules there ([`crate::kernel::landlock::LandlockRules`]), closes every
//! descriptor it does not need (the caller's stdio included), leaves the caller's session
//! and serves joins on a unix socket in the bundle (a directory the sandbox never sees).
//! It exits after [`idle`] without a join, when the bundle is removed, or when told to
//! ([`stop_all`]: `capsule close`, `capsule home apply|discard`), and removes its socket.
//! A holder killed outright leaves its socket, which the next exec finds refused and
//! replaces: nothing needs a clean-up pass.
//!
//! Staleness is ruled out by the fingerprint: a SHA-256 of this binary's identity, the
//! user, user namespace, cgroup, hard limits and `RUST_LOG`, the plan's digest
//! ([`ExecPlan::digest`]: the whole mount plan and Landlock policy), and the identity (device, inode, type) of every host path the plan
//! mounts from or onto, as `lstat`/`stat` see it now. A hidden path created, removed or
//! replaced since, a workspace recreated under the same name, a changed policy: each gives
//! another fingerprint, hence another holder. And since rmdir of a masked directory
//! detaches its mask in every namespace (and inode numbers can be reused), a holder never
//! serves a root that lost a mount: it watches its mount table (`MountWatch`: the kernel
//! marks `/proc/self/mountinfo` on every change, a join looks at the mark in one `poll`)
//! and counts the mounts again only when it is set. A bind of a socket or
//! FIFO makes a plan not preparable: it is then built for that exec alone.
//!
//! Every exec still gets new pid, network, ipc and uts namespaces, its own `/proc` and
//! devpts and its own copy of the mount table: the sandboxed command can change neither
//! the holder's mounts nor another exec's. `CAPSULE_PREPARED_IDLE=0` turns prepared roots
//! off (every exec builds its root).

use super::init::Joined;
use super::report::ExecError;
use super::{warm, ExecPlan, Isolation, MountStep};
use crate::kernel::landlock::PathRule;
use crate::kernel::{ns, sys};
use sha2::{Digest, Sha256};
use std::ffi::OsStr;
use std::io::{self, Read, Write};

mod holder;
use holder::Holder;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The directory of `bundle_dir` where its prepared roots' sockets live.
pub fn dir(bundle_dir: &Path) -> PathBuf {
    bundle_dir.join("prepared")
}

/// How long a holder waits for the next join before it exits (`CAPSULE_PREPARED_IDLE`,
/// seconds; default 30; 0 turns prepared roots off).
pub fn idle() -> Duration {
    let secs = std::env::var("CAPSULE_PREPARED_IDLE")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(30);
    Duration::from_secs(secs.min(24 * 3600))
}

/// At most this many holders per capsule; the oldest are told to stop beyond it.
const MAX_HOLDERS: usize = 4;

/// The way into a prepared root.
#[derive(Debug)]
pub enum Entry {
    /// Its namespaces, to make this exec's init in.
    Joined(Joined),
    /// A warm spare that becomes this exec's init.
    Warm(WarmConn),
}

/// A warm spare handed to this exec: the connection to send it the exec on
/// ([`warm::send`]), and its pidfd.
#[derive(Debug)]
pub struct WarmConn {
    pub conn: UnixStream,
    pub pidfd: OwnedFd,
    /// The cgroups the spare waits in, or why none.
    pub(crate) handed: warm::Handed,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct JoinReply {
    landlock: serde_json::Value,
    again: Vec<PathRule>,
    ruleset: bool,
}

/// Identities of host paths for the fingerprint: device, inode and file type, or absent.
/// Each parent folder is opened once and its entries looked at with `fstatat` (200 hidden
/// siblings: one path walk instead of 200).
struct Identities<'a> {
    h: &'a mut Sha256,
    /// Parent folders opened (`O_PATH`), by their path bytes.
    parents: std::collections::HashMap<Vec<u8>, Option<OwnedFd>>,
    /// Folders holding many of the plan's paths, listed once (hidden siblings).
    listings: sys::Listings,
}

impl Identities<'_> {
    /// Hash `p`'s identity (following a final symlink when `follow`); its metadata.
    fn add(&mut self, p: &Path, follow: bool) -> Option<libc::stat> {
        self.h.update(p.as_os_str().as_bytes());
        self.h.update([0]);
        let st = self.stat(p, follow);
        match &st {
            Some(st) => {
                self.h.update(st.st_dev.to_le_bytes());
                self.h.update(st.st_ino.to_le_bytes());
                self.h.update((st.st_mode & libc::S_IFMT).to_le_bytes());
            }
            None => self.h.update(b"-"),
        }
        st
    }

    fn stat(&mut self, p: &Path, follow: bool) -> Option<libc::stat> {
        let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
        // SAFETY: a zeroed stat is a valid out-buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if !follow {
            if let Some((parent, name)) = sys::split_name(p) {
                if let Some(Some((dev, ino, t))) = self.listings.entry(parent, name) {
                    st.st_dev = dev as libc::dev_t;
                    st.st_ino = ino as libc::ino_t;
                    st.st_mode = t;
                    return Some(st);
                }
            }
        }
        let (dir, name) = match (p.parent(), p.file_name()) {
            (Some(parent), Some(name)) => {
                let fd = self
                    .parents
                    .entry(parent.as_os_str().as_bytes().to_vec())
                    .or_insert_with(|| {
                        nix::fcntl::open(
                            parent,
                            nix::fcntl::OFlag::O_PATH
                                | nix::fcntl::OFlag::O_DIRECTORY
                                | nix::fcntl::OFlag::O_CLOEXEC,
                            nix::sys::stat::Mode::empty(),
                        )
                        .ok()
                    })
                    .as_ref()?
                    .as_raw_fd();
                (fd, std::ffi::CString::new(name.as_bytes()).ok()?)
            }
            _ => (
                libc::AT_FDCWD,
                std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?,
            ),
        };
        // SAFETY: fstatat with a valid directory descriptor (or AT_FDCWD) and C string.
        let rc = unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, flags) };
        (rc == 0).then_some(st)
    }
}

/// The plan's fingerprint (hex), or `None` when the plan cannot be served by a prepared
/// root (not full isolation, Landlock best effort, a per-exec mount such as a socket).
pub fn fingerprint(plan: &ExecPlan, plan_digest: &str) -> io::Result<Option<String>> {
    if plan.isolation != Isolation::Full || plan.landlock_best_effort || plan.prepared.is_none() {
        return Ok(None);
    }
    let mut h = Sha256::new();
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    if let Ok(m) = std::fs::metadata("/proc/self/exe") {
        h.update(m.dev().to_le_bytes());
        h.update(m.ino().to_le_bytes());
        h.update(m.mtime().to_le_bytes());
        h.update(m.mtime_nsec().to_le_bytes());
        h.update(m.size().to_le_bytes());
    }
    // SAFETY: getters cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    h.update(uid.to_le_bytes());
    h.update(gid.to_le_bytes());
    // the holder's processes (warm spares become the exec's init) live in the cgroup of
    // the caller that spawned it: only callers of that cgroup may use it, so that a CI
    // job's limits and accounting hold for its commands; likewise the hard resource limits
    h.update(std::fs::read("/proc/self/cgroup").unwrap_or_default());
    for (_, hard) in crate::kernel::rlimit::current() {
        h.update(hard.to_le_bytes());
    }
    // which cgroup controllers the exec limits: the holder's spares wait in groups of
    // those (see `cgroup::SpareCgroups`), and only execs limiting the same take them
    let l = &plan.limits;
    h.update([
        l.memory.is_some() as u8,
        l.pids.is_some() as u8,
        l.cpus_milli.is_some() as u8,
    ]);
    // the holder's diagnostics follow the RUST_LOG of the exec that spawned it
    h.update(std::env::var_os("RUST_LOG").unwrap_or_default().as_bytes());
    // a caller in another user namespace never meets this one's holders
    h.update(
        std::fs::read_link("/proc/self/ns/user")?
            .as_os_str()
            .as_bytes(),
    );
    // the whole mount plan and Landlock policy, through the plan's digest
    h.update(plan_digest.as_bytes());
    let masked = plan.mounts.iter().filter_map(|s| match s {
        MountStep::Mask { dst, .. } => Some(dst.as_path()),
        _ => None,
    });
    let mut ids = Identities {
        h: &mut h,
        parents: Default::default(),
        listings: sys::Listings::for_paths(masked),
    };
    for s in &plan.mounts {
        match s {
            MountStep::Bind { src, dst, .. } => {
                if let Some(st) = ids.add(src, true) {
                    let t = st.st_mode & libc::S_IFMT;
                    if t == libc::S_IFSOCK || t == libc::S_IFIFO {
                        return Ok(None);
                    }
                }
                ids.add(dst, false);
            }
            MountStep::Overlay {
                lower,
                upper,
                work,
                dst,
            } => {
                for l in lower {
                    ids.add(l, true);
                }
                ids.add(upper, true);
                ids.add(work, true);
                ids.add(dst, false);
            }
            MountStep::Mask { dst, .. }
            | MountStep::ReadOnly { dst }
            | MountStep::Symlink { dst, .. }
            | MountStep::Tmpfs { dst, .. }
            | MountStep::Dir { dst } => {
                ids.add(dst, false);
            }
            MountStep::Dev { extra, .. } => {
                for e in extra {
                    ids.add(&Path::new("/dev").join(e), true);
                }
            }
            MountStep::TaskTmp { dsts, .. } => {
                // the exec's own tmpfs goes over the prepared one: nothing may be mounted
                // below it in the prepared root
                if plan
                    .mounts
                    .iter()
                    .any(|o| dsts.iter().any(|d| o.dst() != d && o.dst().starts_with(d)))
                {
                    return Ok(None);
                }
                for d in dsts {
                    ids.add(d, false);
                }
            }
            MountStep::HomeView(v) => {
                ids.add(&v.src, true);
                ids.add(&v.upper, true);
                ids.add(&v.work, true);
                for e in &v.entries {
                    // a file entry is copied into the view: a change of it is another view
                    if let Some(st) = ids.add(&e.src, true) {
                        if e.kind == super::plan::view::EntryKind::File {
                            for x in [st.st_mtime, st.st_mtime_nsec, st.st_ctime, st.st_ctime_nsec]
                            {
                                ids.h.update(x.to_le_bytes());
                            }
                            ids.h.update(st.st_size.to_le_bytes());
                        }
                    }
                }
            }
            MountStep::Proc { .. } => {}
        }
    }
    drop(ids);
    let d = h.finalize();
    Ok(Some(d.iter().map(|b| format!("{b:02x}")).collect()))
}

/// Enter the prepared root of `plan`, spawning its holder first if there is none: a warm
/// spare when `warm` allows and one is ready, else its namespaces to join. `Ok(None)`
/// when the plan is not preparable or prepared roots are off. Spawning a holder runs
/// `before_fork`, then checks that the process is single-threaded (it forks).
pub fn join(
    plan: &ExecPlan,
    plan_digest: &str,
    warm: bool,
    before_fork: &mut dyn FnMut(),
) -> Result<Option<Entry>, ExecError> {
    let setup = |what: &str, e: io::Error| ExecError::Setup(format!("{what}: {e}"));
    if idle().is_zero() {
        return Ok(None);
    }
    let Some(dir) = plan.prepared.as_deref() else {
        return Ok(None);
    };
    let Some(fp) = fingerprint(plan, plan_digest)
        .map_err(|e| setup("fingerprinting the sandbox's root", e))?
    else {
        return Ok(None);
    };
    let sock = dir.join(format!("{}.sock", &fp[..32]));
    let enter = |sock: &Path| -> io::Result<Option<Entry>> {
        if warm {
            if let Some(e) = request(sock, b'X', &fp)? {
                return Ok(Some(e));
            }
        }
        request(sock, b'J', &fp)
    };
    match enter(&sock) {
        Ok(Some(j)) => return Ok(Some(j)),
        Ok(None) => {}
        Err(e) => tracing::warn!("prepared root {}: {e}; preparing a new one", sock.display()),
    }
    // one spawner at a time per capsule: the others wait, then join what it made
    let _lock = lock(dir).map_err(|e| setup(&format!("locking {}", dir.display()), e))?;
    if let Ok(Some(j)) = enter(&sock) {
        return Ok(Some(j));
    }
    before_fork();
    spawn(plan, dir, &fp)?;
    match enter(&sock) {
        Ok(Some(j)) => Ok(Some(j)),
        Ok(None) => Err(ExecError::Setup(format!(
            "the prepared root's holder at {} went away before it was joined",
            sock.display()
        ))),
        Err(e) => Err(setup(
            &format!("joining the prepared root at {}", sock.display()),
            e,
        )),
    }
}

/// Tell every holder of the capsule whose prepared roots live in `dir` to stop (best
/// effort: one that is gone already is fine), and remove their sockets. For `capsule close`
/// and for changes of the home layer under the holders' overlays.
pub fn stop_all(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.extension() == Some(OsStr::new("sock")) {
            let _ = request(&p, b'Q', "");
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// `path` as short as a unix socket address needs: through `/proc/self/fd/<dir>/<name>`
/// (the directory descriptor is returned, to keep open while the path is used).
fn short_path(path: &Path) -> io::Result<(PathBuf, Option<OwnedFd>)> {
    if path.as_os_str().len() < 100 {
        return Ok((path.to_path_buf(), None));
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok((path.to_path_buf(), None));
    };
    let d = nix::fcntl::open(
        dir,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(io::Error::from)?;
    let short = Path::new("/proc/self/fd")
        .join(d.as_raw_fd().to_string())
        .join(name);
    Ok((short, Some(d)))
}

fn peer_uid(fd: RawFd) -> io::Result<libc::uid_t> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED into a ucred of the right size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

const NS_GET_NSTYPE: libc::c_ulong = 0xb703;
const NS_GET_OWNER_UID: libc::c_ulong = 0xb704;

/// Check that `fd` is a namespace of type `ty` (a `CLONE_NEW*` flag).
fn check_ns(fd: &OwnedFd, ty: libc::c_int) -> io::Result<()> {
    // SAFETY: an ioctl without arguments on a descriptor we own.
    let t = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_NSTYPE as _) };
    if t != ty {
        return Err(io::Error::other(
            "the holder sent something that is not the expected namespace",
        ));
    }
    Ok(())
}

/// Send one request to the holder at `sock`: a byte (`J` join, `Q` quit), then for a join
/// the full fingerprint (the socket's name holds only half of it; a holder of another
/// fingerprint answers nothing). `Ok(None)`: no holder there (a refused socket is
/// removed). For `J`, the reply's descriptors are checked: the peer is this user, the
/// namespaces are a user namespace this user owns and a mount namespace.
fn request(sock: &Path, what: u8, fp: &str) -> io::Result<Option<Entry>> {
    let (short, _dir) = match short_path(sock) {
        Ok(v) => v,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut s = match UnixStream::connect(&short) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
            let _ = std::fs::remove_file(sock);
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if peer_uid(s.as_raw_fd())? != me {
        return Err(io::Error::other("the socket's owner is another user"));
    }
    let mut req = vec![what];
    req.extend_from_slice(fp.as_bytes());
    req.push(b'\n');
    s.write_all(&req)?;
    if what == b'X' {
        // a warm spare: its pidfd now; the connection goes on to the spare
        return Ok(warm::recv_pidfd(&s)?.map(|(pidfd, handed)| {
            let _ = s.set_read_timeout(None);
            Entry::Warm(WarmConn {
                conn: s,
                pidfd,
                handed,
            })
        }));
    }
    if what != b'J' {
        let mut b = [0u8; 1];
        let _ = s.read(&mut b);
        return Ok(None);
    }
    let mut buf = vec![0u8; 64 * 1024];
    let (n, fds) = sys::recv_fds(s.as_raw_fd(), &mut buf)?;
    if n == 0 {
        // the holder ended before answering (idle timeout just then)
        return Ok(None);
    }
    buf.truncate(n);
    s.read_to_end(&mut buf)?;
    let reply: JoinReply = serde_json::from_slice(&buf).map_err(io::Error::other)?;
    let mut fds = fds.into_iter();
    let (Some(userns), Some(mntns)) = (fds.next(), fds.next()) else {
        return Err(io::Error::other("the holder sent no namespaces"));
    };
    check_ns(&userns, libc::CLONE_NEWUSER)?;
    check_ns(&mntns, libc::CLONE_NEWNS)?;
    let mut owner: libc::uid_t = u32::MAX;
    // SAFETY: NS_GET_OWNER_UID writes one uid_t.
    let rc = unsafe { libc::ioctl(userns.as_raw_fd(), NS_GET_OWNER_UID as _, &mut owner) };
    if rc < 0 || owner != me {
        return Err(io::Error::other(
            "the holder's user namespace is not this user's",
        ));
    }
    let ruleset = if reply.ruleset { fds.next() } else { None };
    if reply.ruleset && ruleset.is_none() {
        return Err(io::Error::other("the holder sent no Landlock ruleset"));
    }
    Ok(Some(Entry::Joined(Joined {
        userns,
        mntns,
        ruleset,
        landlock: reply.landlock,
        again: reply.again,
    })))
}

/// `plan` with a mask on each socket file the walk of the service folders finds
/// ([`super::sockets::scan`]) where the plan shows them and does not mask them already
/// (the kernel's list of the host's sockets is in the plan itself).
fn with_scanned_sockets(plan: &ExecPlan) -> ExecPlan {
    use super::plan::VAR_TMP;
    let masked: Vec<&Path> = plan
        .mounts
        .iter()
        .filter_map(|s| match s {
            MountStep::Mask { dst, .. } => Some(dst.as_path()),
            _ => None,
        })
        .collect();
    let roots: Vec<&Path> = super::sockets::SCANNED
        .iter()
        .map(Path::new)
        .filter(|r| {
            plan.mounts
                .iter()
                .any(|s| matches!(s, MountStep::Bind { src, dst, .. } if src == r && dst == r))
        })
        .collect();
    let skip = |p: &Path| p == Path::new(VAR_TMP) || masked.iter().any(|m| p.starts_with(m));
    let mut held = plan.clone();
    let t = Instant::now();
    let found = super::sockets::scan(&roots, &skip, 4096);
    tracing::debug!(
        "sockets walk: {} found, took {:?}",
        found.len(),
        t.elapsed()
    );
    for s in found {
        held.mounts.push(MountStep::Mask {
            dst: s,
            carve_outs: false,
        });
    }
    held
}

/// Start a holder for `plan` with socket `<dir>/<fp>.sock`: the socket is bound under a
/// temporary name and renamed into place once the root is built, so a join never meets a
/// half-made holder. The holder is a grandchild (its parent exits at once), so nobody
/// waits for it.
fn spawn(plan: &ExecPlan, dir: &Path, fp: &str) -> Result<(), ExecError> {
    let setup = |what: String, e: io::Error| ExecError::Setup(format!("{what}: {e}"));
    retire_old(dir);
    let name = format!("{}.sock", &fp[..32]);
    let tmp = dir.join(format!("{}.{}.tmp", &fp[..32], std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = short_path(&tmp)
        .and_then(|(short, _dir)| UnixListener::bind(short))
        .map_err(|e| setup(format!("binding {}", tmp.display()), e))?;
    let ino = std::fs::symlink_metadata(&tmp)
        .map(|m| m.ino())
        .unwrap_or(0);
    let dirfd = nix::fcntl::open(
        dir,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| setup(format!("opening {}", dir.display()), e.into()))?;
    let (rep_r, rep_w) = sys::pipe().map_err(|e| setup("pipe".into(), e))?;
    let (go_r, go_w) = sys::pipe().map_err(|e| setup("pipe".into(), e))?;
    let cleanup = |fds: &[RawFd]| {
        for fd in fds {
            sys::close(*fd);
        }
        let _ = std::fs::remove_file(&tmp);
    };
    // sockets of other network namespaces in the service folders: masked in this root
    let held = with_scanned_sockets(plan);
    let holder = Holder {
        plan: &held,
        listener: &listener,
        dirfd: dirfd.as_raw_fd(),
        name: &name,
        ino,
        fp,
        report: rep_w,
        go: go_r,
    };
    if let Err(e) = super::spawn::single_threaded() {
        cleanup(&[rep_r, rep_w, go_r, go_w]);
        return Err(e);
    }
    // SAFETY: fork in a single-threaded process (checked just above).
    let mid = unsafe { libc::fork() };
    if mid < 0 {
        let e = io::Error::last_os_error();
        cleanup(&[rep_r, rep_w, go_r, go_w]);
        return Err(setup("fork".into(), e));
    }
    if mid == 0 {
        // the intermediate process: clone the holder, write its id maps, go
        sys::close(rep_r);
        let flags = (libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID) as libc::c_long
            | libc::SIGCHLD as libc::c_long;
        let pid = match ns::fork_into(flags) {
            Ok(ns::Forked::Child) => {
                sys::close(go_w);
                holder.main()
            }
            Ok(ns::Forked::Parent(pid)) => pid,
            Err(e) => {
                let _ = sys::write_all(rep_w, format!("N{e}\n").as_bytes());
                // SAFETY: _exit in a forked child.
                unsafe { libc::_exit(1) }
            }
        };
        if let Err(e) = super::spawn::write_id_maps(pid) {
            let _ = sys::write_all(rep_w, format!("Ewriting the id maps: {e}\n").as_bytes());
            // SAFETY: killing our own child, then _exit.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::_exit(1)
            }
        }
        let _ = sys::write_all(go_w, &[1]);
        // SAFETY: _exit in a forked child.
        unsafe { libc::_exit(0) }
    }
    sys::close(rep_w);
    sys::close(go_r);
    sys::close(go_w);
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(mid, std::ptr::null_mut(), 0) };
    drop(listener);
    let mut out = Vec::new();
    let mut b = [0u8; 4096];
    while let Ok(n) = sys::read(rep_r, &mut b) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[..n]);
        if out.ends_with(b"\n") {
            break;
        }
    }
    sys::close(rep_r);
    let line = String::from_utf8_lossy(&out).trim_end().to_string();
    match line.as_bytes().first() {
        Some(b'R') => {}
        Some(b'N') => {
            let _ = std::fs::remove_file(&tmp);
            return Err(ExecError::Namespaces(format!(
                "user, mount, pid ({})",
                &line[1..]
            )));
        }
        Some(_) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(ExecError::Setup(line[1..].to_string()));
        }
        None => {
            let _ = std::fs::remove_file(&tmp);
            return Err(ExecError::Setup(
                "the prepared root's holder ended before it was ready".into(),
            ));
        }
    }
    std::fs::rename(&tmp, dir.join(&name))
        .map_err(|e| setup(format!("publishing {}", dir.join(&name).display()), e))
}

/// Create `dir` (mode 0700) if needed and take its spawn lock (`flock` on `dir/lock`,
/// released when the returned descriptor closes, also when the process dies).
fn lock(dir: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir.join("lock"))?;
    let fd = OwnedFd::from(f);
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(fd);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Tell the oldest holders beyond [`MAX_HOLDERS`] - 1 to stop (a new one is coming).
fn retire_old(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut socks: Vec<(std::time::SystemTime, PathBuf)> = rd
        .flatten()
        .filter(|e| e.path().extension() == Some(OsStr::new("sock")))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if socks.len() < MAX_HOLDERS {
        return;
    }
    socks.sort();
    let n = socks.len() + 1 - MAX_HOLDERS;
    for (_, p) in socks.into_iter().take(n) {
        let _ = request(&p, b'Q', "");
        let _ = std::fs::remove_file(&p);
    }
}

/// Start init in the prepared root `j`: a short-lived child that shares our memory (we
/// wait meanwhile, so nothing of ours runs concurrently) joins the holder's user and mount
/// namespaces and clones init as *our* child (`CLONE_PARENT`) with `flags` (new mount, pid,
/// ipc, uts and maybe network namespaces; never a new user namespace), then exits. Init
/// runs `child`, which must not return. Returns init's pid.
pub(crate) fn spawn_init(
    j: &Joined,
    flags: libc::c_long,
    child: &mut dyn FnMut(),
) -> io::Result<libc::pid_t> {
    struct Args<'a> {
        userns: RawFd,
        mntns: RawFd,
        flags: libc::c_long,
        child: &'a mut dyn FnMut(),
        pid: libc::pid_t,
        errno: i32,
        step: u8,
    }
    extern "C" fn joiner(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the Args the parent passed and waits on (CLONE_VFORK); this
        // function makes system calls only and allocates nothing.
        let a = unsafe { &mut *(arg as *mut Args<'_>) };
        if let Err(e) = ns::join(a.userns, libc::CLONE_NEWUSER) {
            a.errno = e.raw_os_error().unwrap_or(libc::EIO);
            a.step = 1;
            return 1;
        }
        if let Err(e) = ns::join(a.mntns, libc::CLONE_NEWNS) {
            a.errno = e.raw_os_error().unwrap_or(libc::EIO);
            a.step = 2;
            return 1;
        }
        // init gets a copy of the address space and continues here, on its copy of this
        // stack
        match ns::fork_into(a.flags | libc::CLONE_PARENT as libc::c_long) {
            Ok(ns::Forked::Child) => {
                (a.child)();
                // SAFETY: `child` must not return; if it does, end here.
                unsafe { libc::_exit(125) }
            }
            Ok(ns::Forked::Parent(pid)) => {
                a.pid = pid;
                0
            }
            Err(e) => {
                a.errno = e.raw_os_error().unwrap_or(libc::EIO);
                a.step = 3;
                1
            }
        }
    }
    // the joiner's (and init's) stack
    let stack = ns::Stack::new(1 << 20)?;
    let mut args = Args {
        userns: j.userns.as_raw_fd(),
        mntns: j.mntns.as_raw_fd(),
        flags,
        child,
        pid: -1,
        errno: 0,
        step: 0,
    };
    // SAFETY: CLONE_VFORK suspends us until the joiner exits, so `args` outlives its use
    // there; the joiner makes system calls only.
    let c = unsafe {
        ns::clone_vm(
            joiner,
            &stack,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &mut args as *mut Args<'_> as *mut libc::c_void,
        )
    }?;
    // SAFETY: reaping the joiner, our own child.
    unsafe { libc::waitpid(c, std::ptr::null_mut(), 0) };
    // unmapped: init has its own copy
    drop(stack);
    if args.pid > 0 {
        return Ok(args.pid);
    }
    let what = match args.step {
        1 => "joining the prepared root's user namespace",
        2 => "joining the prepared root's mount namespace",
        _ => "creating the sandbox's namespaces",
    };
    Err(io::Error::new(
        io::Error::from_raw_os_error(args.errno).kind(),
        format!("{what}: {}", io::Error::from_raw_os_error(args.errno)),
    ))
}

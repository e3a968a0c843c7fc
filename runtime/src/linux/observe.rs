//! Writes outside the writable paths and reads of hidden paths, observed: for each path
//! call the listened filter sends ([`crate::kernel::seccomp::WRITE_CALLS`]: the write calls, and
//! every open whatever its flags) and each `connect`, the supervisor ([`super::notify`])
//! reads the path or address the task named, answers "continue" and then, for the report
//! only, judges whether the kernel refused it. A read is an open without write intent in
//! its flags; it is refused when the deepest of the hidden paths (masks) and of what is
//! shown again inside them (binds, writable roots, reveals) that holds the path is a
//! hidden one, as the deepest mount decides.
//!
//! What decides stays the kernel: the supervisor answers every write call with
//! `SECCOMP_USER_NOTIF_FLAG_CONTINUE`, and the kernel then runs the call exactly as
//! without the supervisor, path lookup, Landlock and read-only mounts included. The path
//! read from the task's memory (`process_vm_readv`) may differ from the one the kernel
//! reads after (another thread can rewrite it in between): that is why it is never used
//! to decide anything, only to name the refusal. A task that races it can at worst make
//! its own report wrong.
//!
//! How the refusal is learned: the call's result is not visible to the supervisor (no
//! ptrace), so the path is judged against the plan's writable set, the same list Landlock
//! was given ([`Allowed`]): the path is made absolute (against the task's working
//! directory or the directory descriptor, read from `/proc/<pid>/cwd` and
//! `/proc/<pid>/fd/<n>`), normalized lexically, and listed as refused when it lies
//! outside every writable root, or on a read-only path inside one. Limits, said in
//! `capsule isolation`: symlinks are not followed (a link inside the workspace that points
//! out is refused by the kernel but not listed; a link outside that points into a
//! writable root would be listed wrongly: none of the sandbox's own does); a call that
//! fails for another reason first (a missing folder outside the writable paths) is still
//! listed, since it would be refused; paths under `/proc` and the `/dev/fd`, `/dev/std*`
//! links are never judged.

use crate::kernel::seccomp::WriteCall;
use crate::refusals::{path_target, Event, Kind};
use std::path::{Component, Path, PathBuf};

/// Where the command may write and connect, as it names paths and addresses.
#[derive(Debug, Clone, Default)]
pub struct Allowed {
    writable: Roots,
    read_only: Roots,
    net: NetView,
    /// Hidden paths (masks), and what is shown again inside them (binds, writable roots,
    /// reveals): the deepest of the two holding a path decides, as the deepest mount does.
    hidden: Roots,
    shown: Roots,
}

/// A list of absolute paths, asked "which is the deepest holding this path?" once per
/// observed call: kept as bytes (one `/` between components, none at the end), deepest
/// first, so the first one that holds a path is the answer and each test is one
/// comparison of bytes (a build's plan has a few hundred of them: the home's entries,
/// caches, binds; comparing them `Path`-wise, component by component, cost the
/// supervisor more than the unpacking task spent in the kernel).
#[derive(Debug, Clone, Default)]
struct Roots(Vec<Vec<u8>>);

impl Roots {
    fn new<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Roots {
        let mut v: Vec<Vec<u8>> = paths.into_iter().map(|p| components(p.as_ref())).collect();
        v.sort_unstable_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        v.dedup();
        Roots(v)
    }

    /// The deepest path that holds `p` (as [`Path::starts_with`] tells: whole
    /// components), or `None`.
    fn deepest(&self, p: &[u8]) -> Option<&[u8]> {
        self.0.iter().find(|r| holds(r, p)).map(|r| r.as_slice())
    }
}

/// `p` as bytes with its components joined by one `/` (what [`Path::starts_with`]
/// compares: `//`, `.` and a trailing `/` make no difference; `..` stays).
fn components(p: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::with_capacity(p.as_os_str().len());
    for c in p.components() {
        match c {
            Component::RootDir => out.push(b'/'),
            Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir | Component::Normal(_) => {
                if !out.is_empty() && out.last() != Some(&b'/') {
                    out.push(b'/');
                }
                out.extend_from_slice(c.as_os_str().as_bytes());
            }
        }
    }
    out
}

/// Does `root` hold `p` (both as [`components`] makes them)?
fn holds(root: &[u8], p: &[u8]) -> bool {
    p.starts_with(root)
        && (p.len() == root.len() || root.last() == Some(&b'/') || p[root.len()] == b'/')
}

/// What the sandbox's network refuses, as far as a `connect` shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NetView {
    /// Not judged (the host's network, or no network namespace of its own).
    #[default]
    Unjudged,
    /// `--no-network`: every TCP/UDP connect is refused, loopback too.
    Off,
    /// Its own namespace with loopback only (`network: none`).
    Loopback,
    /// Its own namespace with loopback only; the way out is capsule's proxy.
    Proxied,
}

/// Paths never judged: magic links and the process's own files.
const UNJUDGED: &[&str] = &[
    "/proc",
    "/dev/fd",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
];

impl Allowed {
    /// The writable set of `plan`: its policy's writable roots (workspace, tmp, home
    /// layer, caches, `--allow-write`), the sandbox's `/dev/shm` and devices; its
    /// read-only paths inside them (the manifest, read-only binds such as `.git/hooks`).
    /// `extra_writable`: what Landlock was given besides (the sandbox's own `/dev/shm`,
    /// `init::landlock_inputs`).
    pub fn of_plan(plan: &super::ExecPlan, extra_writable: Vec<PathBuf>) -> Allowed {
        let mut writable: Vec<PathBuf> = plan
            .policy
            .writable_roots()
            .into_iter()
            .map(Path::to_path_buf)
            .collect();
        writable.extend(extra_writable);
        writable.extend(
            crate::kernel::landlock::DEVICES
                .iter()
                .map(|d| Path::new("/dev").join(d))
                .chain(
                    plan.policy
                        .devices
                        .iter()
                        .map(|d| Path::new("/dev").join(d)),
                ),
        );
        let mut read_only: Vec<PathBuf> = plan.policy.read_only.clone();
        let mut hidden: Vec<PathBuf> = plan.policy.hidden.iter().map(|h| h.path.clone()).collect();
        let mut shown: Vec<PathBuf> = plan.policy.revealed.clone();
        shown.extend(writable.iter().cloned());
        for m in &plan.mounts {
            match m {
                super::MountStep::Bind { dst, rw, .. } => {
                    if !rw {
                        read_only.push(dst.clone());
                    }
                    shown.push(dst.clone());
                }
                super::MountStep::Overlay { dst, .. } | super::MountStep::Tmpfs { dst, .. } => {
                    shown.push(dst.clone())
                }
                super::MountStep::Mask { dst, .. } => hidden.push(dst.clone()),
                _ => {}
            }
        }
        let net = match (plan.new_netns, plan.network_off) {
            (_, true) => NetView::Off,
            (true, false) if plan.env.iter().any(|(k, _)| k == "HTTPS_PROXY") => NetView::Proxied,
            (true, false) => NetView::Loopback,
            (false, false) => NetView::Unjudged,
        };
        Allowed::new(writable, read_only, hidden, shown, net)
    }

    /// The set of these writable roots, read-only paths inside them, hidden paths and
    /// what is shown again inside those, for the network `net`.
    pub fn new(
        writable: Vec<PathBuf>,
        read_only: Vec<PathBuf>,
        hidden: Vec<PathBuf>,
        shown: Vec<PathBuf>,
        net: NetView,
    ) -> Allowed {
        Allowed {
            writable: Roots::new(writable),
            read_only: Roots::new(read_only),
            net,
            hidden: Roots::new(hidden),
            shown: Roots::new(shown),
        }
    }

    /// A writable set given as lists (an OCI bundle's: its writable mounts, and the
    /// read-only ones inside them); nothing hidden, the network not judged.
    pub fn of_paths(writable: Vec<PathBuf>, read_only: Vec<PathBuf>) -> Allowed {
        Allowed {
            writable: Roots::new(writable),
            read_only: Roots::new(read_only),
            ..Allowed::default()
        }
    }

    /// The hidden path that hides absolute, normalized `p`, if one does (and nothing
    /// deeper shows it again).
    pub fn hiding(&self, p: &Path) -> Option<PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        if UNJUDGED.iter().any(|u| p.starts_with(u)) {
            return None;
        }
        let b = p.as_os_str().as_bytes();
        let h = self.hidden.deepest(b)?;
        match self.shown.deepest(b) {
            Some(s) if s.len() >= h.len() => None,
            _ => Some(PathBuf::from(std::ffi::OsStr::from_bytes(h))),
        }
    }

    /// Would the sandbox refuse a write to absolute, normalized `p`? `None`: not judged.
    pub fn refuses(&self, p: &Path) -> Option<bool> {
        use std::os::unix::ffi::OsStrExt;
        if UNJUDGED.iter().any(|u| p.starts_with(u)) {
            return None;
        }
        // the deepest of the writable roots and read-only paths holding `p` decides, as
        // the deepest mount does
        let b = p.as_os_str().as_bytes();
        Some(
            match (self.writable.deepest(b), self.read_only.deepest(b)) {
                (None, _) => true,
                (Some(w), Some(r)) => r.len() > w.len(),
                (Some(_), None) => false,
            },
        )
    }
}

/// `p` without `.` and `..` (lexically; `..` at the root stays at the root).
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Read process `pid`'s memory at `addr` into `buf` (`process_vm_readv`): the bytes
/// read, or a negative number on error.
fn read_into(pid: u32, addr: u64, buf: &mut [u8]) -> isize {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one local buffer of `buf.len()` bytes; the remote range is only read.
    unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) }
}

/// `len` bytes at `addr` in process `pid`'s memory (all of them, or `None`).
fn read_bytes(pid: u32, addr: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    (read_into(pid, addr, &mut buf) == len as isize).then_some(buf)
}

/// The address a `connect(fd, addr, len)` of task `pid` names, read before the call is
/// continued: `(target, is loopback)` for TCP/UDP, the path for a unix socket by path
/// (made absolute against `pid`'s working directory).
pub enum Peer {
    Inet { target: String, loopback: bool },
    Unix(PathBuf),
}

/// The type (`SOCK_STREAM`, `SOCK_DGRAM`...) of socket `fd` of task `pid`, from a copy of
/// it (`pidfd_getfd`, closed at once); `None` when it cannot be told.
fn socket_type(pid: u32, fd: i32) -> Option<i32> {
    // SAFETY: plain syscalls on descriptors we own and close.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0);
        if pidfd < 0 {
            return None;
        }
        let copy = libc::syscall(libc::SYS_pidfd_getfd, pidfd as i32, fd, 0);
        libc::close(pidfd as i32);
        if copy < 0 {
            return None;
        }
        let mut ty: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let rc = libc::getsockopt(
            copy as i32,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut ty as *mut libc::c_int).cast(),
            &mut len,
        );
        libc::close(copy as i32);
        (rc == 0).then_some(ty)
    }
}

/// The IPv4 or IPv6 address a `connect(fd, addr, len)` of task `pid` names (an
/// IPv4-mapped address as IPv4), whatever the socket's type; `None`: another family, or
/// unreadable. Read from the task's memory: what the task may change after, so it names
/// and routes, never decides.
pub fn connect_inet(pid: u32, args: &[u64; 6]) -> Option<std::net::SocketAddr> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let len = (args[2] as u32 as usize).min(std::mem::size_of::<libc::sockaddr_in6>());
    if len < 8 {
        return None;
    }
    let b = read_bytes(pid, args[1], len)?;
    let port = u16::from_be_bytes([b[2], b[3]]);
    match u16::from_ne_bytes([b[0], b[1]]) as i32 {
        libc::AF_INET => Some(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])),
            port,
        )),
        libc::AF_INET6 if b.len() >= 24 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[8..24]);
            Some(SocketAddr::new(Ipv6Addr::from(a).to_canonical(), port))
        }
        _ => None,
    }
}

/// Read the peer of a `connect` (`None`: another family, an abstract or unnamed socket,
/// a datagram socket off loopback (a resolver trying its name server: the proxy resolves
/// names), or unreadable).
pub fn connect_peer(pid: u32, args: &[u64; 6]) -> Option<Peer> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let len = (args[2] as u32 as usize).min(std::mem::size_of::<libc::sockaddr_un>());
    if len < 2 {
        return None;
    }
    let b = read_bytes(pid, args[1], len)?;
    let family = u16::from_ne_bytes([b[0], b[1]]) as i32;
    let port = |b: &[u8]| u16::from_be_bytes([b[2], b[3]]);
    let inet = |ip: IpAddr, port: u16| {
        let ip = ip.to_canonical();
        Peer::Inet {
            target: SocketAddr::new(ip, port).to_string(),
            loopback: ip.is_loopback(),
        }
    };
    let stream = || socket_type(pid, args[0] as u32 as i32) != Some(libc::SOCK_DGRAM);
    match family {
        libc::AF_INET | libc::AF_INET6 if !stream() => None,
        libc::AF_INET if b.len() >= 8 => Some(inet(
            IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])),
            port(&b),
        )),
        libc::AF_INET6 if b.len() >= 24 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[8..24]);
            Some(inet(IpAddr::V6(Ipv6Addr::from(a)), port(&b)))
        }
        libc::AF_UNIX if b.len() > 2 && b[2] != 0 => {
            use std::os::unix::ffi::OsStrExt;
            let raw = &b[2..];
            let raw = &raw[..raw.iter().position(|c| *c == 0).unwrap_or(raw.len())];
            let p = Path::new(std::ffi::OsStr::from_bytes(raw));
            let abs = if p.is_absolute() {
                p.to_path_buf()
            } else {
                base_dir(pid, None)?.join(p)
            };
            Some(Peer::Unix(normalize(&abs)))
        }
        _ => None,
    }
}

/// The refusal of a `connect` to `peer`, if the sandbox's network refuses it.
pub fn judge_connect(
    peer: Peer,
    allowed: &Allowed,
    program: String,
    pid: Option<i32>,
) -> Option<Event> {
    let (target, reason, grant) = match (peer, allowed.net) {
        (_, NetView::Unjudged) => return None,
        (Peer::Inet { target, .. }, NetView::Off) => {
            (target, "no network at all (--no-network)".to_string(), None)
        }
        (
            Peer::Inet {
                target,
                loopback: false,
            },
            NetView::Loopback,
        ) => {
            let grant = crate::refusals::connect_grant(&target);
            (
                target,
                "no network but the sandbox's own loopback".into(),
                Some(grant),
            )
        }
        (
            Peer::Inet {
                target,
                loopback: false,
            },
            NetView::Proxied,
        ) => {
            let grant = crate::refusals::connect_grant(&target);
            (
                target,
                "only through capsule's proxy (HTTPS_PROXY, ALL_PROXY)".into(),
                Some(grant),
            )
        }
        (Peer::Inet { .. }, _) => return None,
        (Peer::Unix(p), _) => {
            allowed.hiding(&p)?;
            (
                path_target(&p),
                "a unix socket in a hidden path".into(),
                None,
            )
        }
    };
    Some(Event {
        header: None,
        kind: Kind::Connect,
        target,
        program,
        pid,
        grant,
        reason: Some(reason),
    })
}

/// A C string of at most `PATH_MAX` bytes at `addr` in process `pid`'s memory.
fn read_string(pid: u32, addr: u64) -> Option<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < libc::PATH_MAX as usize {
        let chunk = (PAGE - at % PAGE) as usize;
        let mut buf = vec![0u8; chunk];
        let n = read_into(pid, at, &mut buf);
        if n <= 0 {
            return None;
        }
        buf.truncate(n as usize);
        if let Some(end) = buf.iter().position(|b| *b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf);
        at += n as u64;
    }
    None
}

/// The folder a relative path of `pid` starts from: its working directory, or the
/// directory descriptor `dirfd`.
fn base_dir(pid: u32, dirfd: Option<i32>) -> Option<PathBuf> {
    let link = match dirfd {
        None | Some(libc::AT_FDCWD) => format!("/proc/{pid}/cwd"),
        Some(fd) if fd >= 0 => format!("/proc/{pid}/fd/{fd}"),
        Some(_) => return None,
    };
    let p = std::fs::read_link(link).ok()?;
    p.is_absolute().then_some(p)
}

/// What the task named: the call's paths, made absolute. Read before the call is
/// continued (its working directory may change after).
pub struct Named {
    pub paths: Vec<PathBuf>,
}

/// Read the paths of write call `w` of task `pid` with arguments `args`.
pub fn named(w: &WriteCall, pid: u32, args: &[u64; 6]) -> Named {
    use std::os::unix::ffi::OsStringExt;
    let mut paths = Vec::new();
    for (dirfd, arg) in w.paths {
        let Some(raw) = read_string(pid, args[*arg as usize]) else {
            continue;
        };
        let rel = PathBuf::from(std::ffi::OsString::from_vec(raw));
        let abs = if rel.is_absolute() {
            rel
        } else {
            let fd = dirfd.map(|d| args[d as usize] as u32 as i32);
            match base_dir(pid, fd) {
                Some(b) => b.join(rel),
                None => continue,
            }
        };
        paths.push(normalize(&abs));
    }
    Named { paths }
}

/// Is this open a read (no write intent in its flags)?
pub fn is_read(w: &WriteCall, args: &[u64; 6]) -> bool {
    w.flags
        .is_some_and(|(arg, mask)| (args[arg as usize] as u32) & mask == 0)
}

/// Is this open of a folder (`O_DIRECTORY`: a listing)?
pub fn is_listing(w: &WriteCall, args: &[u64; 6]) -> bool {
    w.flags
        .is_some_and(|(arg, _)| (args[arg as usize] as u32) & libc::O_DIRECTORY as u32 != 0)
}

/// The refusal of a read (an open without write intent) of a hidden path: named as the
/// task named it, with the hidden path that hides it as the grant.
pub fn judge_read(named: Named, allowed: &Allowed, listing: bool) -> Option<Event> {
    let (p, h) = named
        .paths
        .iter()
        .find_map(|p| allowed.hiding(p).map(|h| (p.clone(), h)))?;
    Some(Event {
        header: None,
        kind: Kind::Read,
        target: path_target(&p),
        program: String::new(),
        pid: None,
        grant: Some(format!("--reveal {}", path_target(&h))),
        reason: Some(if listing {
            "listing a hidden folder".into()
        } else {
            "a hidden path".into()
        }),
    })
}

/// The refusal of a write call, if the sandbox refuses it (see the module's doc).
pub fn judge(
    w: &WriteCall,
    named: Named,
    set: &Allowed,
    program: String,
    pid: Option<i32>,
) -> Option<Event> {
    let p = named
        .paths
        .into_iter()
        .find(|p| set.refuses(p) == Some(true))?;
    let grant_path = match (w.creates, p.parent()) {
        (true, Some(parent)) => parent.to_path_buf(),
        _ => p.clone(),
    };
    let target = capsule_bundle::escape::path(&p);
    let target = match p.to_str() {
        Some(s) => s.to_string(),
        None => target,
    };
    Some(Event {
        header: None,
        kind: Kind::Write,
        grant: Some(format!("--allow-write {}", path_target(&grant_path))),
        target,
        program,
        pid,
        reason: Some(format!(
            "{} outside the writable paths",
            w.name.trim_start_matches("SYS_")
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_lexically() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), Path::new("/a/c"));
        assert_eq!(normalize(Path::new("/../../etc/x")), Path::new("/etc/x"));
    }

    #[test]
    fn judges_against_the_writable_set() {
        let set = Allowed::new(
            vec!["/ws/".into(), "/tmp".into(), "/dev/null".into()],
            vec![
                "/".into(),
                "/ws/capsule-manifest.json".into(),
                "/ws//.git/hooks".into(),
            ],
            vec![],
            vec![],
            NetView::Unjudged,
        );
        assert_eq!(set.refuses(Path::new("/ws/a/b")), Some(false));
        assert_eq!(set.refuses(Path::new("/wsx")), Some(true));
        assert_eq!(set.refuses(Path::new("/etc/x")), Some(true));
        assert_eq!(set.refuses(Path::new("/dev/null")), Some(false));
        assert_eq!(
            set.refuses(Path::new("/ws/.git/hooks/pre-commit")),
            Some(true)
        );
        assert_eq!(
            set.refuses(Path::new("/ws/capsule-manifest.json")),
            Some(true)
        );
        assert_eq!(set.refuses(Path::new("/ws/.git/hooksx")), Some(false));
        assert_eq!(set.refuses(Path::new("/ws")), Some(false));
        assert_eq!(set.refuses(Path::new("/proc/self/fd/1")), None);
        assert_eq!(set.refuses(Path::new("/dev/stdout")), None);
    }

    /// The byte comparison holds exactly what `Path::starts_with` holds.
    #[test]
    fn roots_hold_as_path_starts_with() {
        let roots = ["/", "/a", "/a/b/", "/a//c", "/ab", "/a/./d", "/a/../e"];
        let paths = [
            "/",
            "/a",
            "/ab",
            "/abc",
            "/a/b",
            "/a/bc",
            "/a/b/c",
            "/a/c",
            "/a/c/d",
            "/a/d",
            "/a/../e/f",
            "/e",
            "/b",
        ];
        for r in roots {
            let set = Roots::new([r]);
            for p in paths {
                assert_eq!(
                    set.deepest(p.as_bytes()).is_some(),
                    Path::new(p).starts_with(r),
                    "{r} holds {p}?"
                );
            }
        }
        let set = Roots::new(["/", "/a", "/a/b", "/ab"]);
        assert_eq!(set.deepest(b"/a/b/c"), Some(&b"/a/b"[..]));
        assert_eq!(set.deepest(b"/ab/c"), Some(&b"/ab"[..]));
        assert_eq!(set.deepest(b"/x"), Some(&b"/"[..]));
    }

    #[test]
    fn the_deepest_of_hidden_and_shown_decides() {
        let set = Allowed::new(
            vec!["/home/u/ws".into()],
            vec![],
            vec!["/home/u".into(), "/home/u/ws/secret".into()],
            vec!["/home/u/.cargo".into(), "/home/u/ws".into()],
            NetView::Unjudged,
        );
        assert_eq!(
            set.hiding(Path::new("/home/u/.ssh/id")),
            Some("/home/u".into())
        );
        assert_eq!(set.hiding(Path::new("/home/u/.cargo/bin")), None);
        assert_eq!(set.hiding(Path::new("/home/u/ws/a")), None);
        assert_eq!(
            set.hiding(Path::new("/home/u/ws/secret/k")),
            Some("/home/u/ws/secret".into())
        );
        assert_eq!(set.hiding(Path::new("/home/uv")), None);
    }
}

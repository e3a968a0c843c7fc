//! Who made a connection the proxy refuses: the process of the sandbox holding the
//! client's end of a socket the relay handed over, named in the refusal (`program`,
//! `pid`).
//!
//! The proxy holds the relay's accepted end, a socket of the sandbox's network namespace;
//! the client's end is another socket, held by some process of the sandbox. Only when a
//! connection is refused (an allowed one costs nothing here), and before the refusal is
//! answered (the client is still waiting, so still holds its end), the proxy asks the
//! kernel, from the host:
//! 1. which network namespace the accepted socket is in ([`Netns::of_socket`],
//!    `SIOCGSKNS`: once per exec, on the first connection handed over);
//! 2. which processes are in it (`/proc/<pid>/ns/net` of each process it may inspect,
//!    scanned in pid order): the sandbox's, since they share its namespace and nothing
//!    else is in it;
//! 3. which socket has the connection's addresses the other way round (local = the
//!    client's, remote = the relay's): its inode, from one exact lookup on a
//!    `NETLINK_SOCK_DIAG` socket of the sandbox's namespace ([`diag_socket`]: made by
//!    init inside and handed over with the first message of the relay's channel), or,
//!    without one, from that namespace's `/proc/<pid>/net/tcp` and `tcp6` (which walk
//!    the host's whole TCP hash table: ~2.5 ms here, against ~20 us);
//! 4. which of those processes holds `socket:[inode]` in `/proc/<pid>/fd` (the first in
//!    pid order when a fork shared it: the one that made it, mostly), then its `comm`,
//!    its executable's file name and its pid in the sandbox (`NSpid` of `status`), all
//!    read through one descriptor of its `/proc/<pid>` directory, which fails once that
//!    process is gone, so a recycled pid is never named.
//!
//! Nothing is read from or through the sandbox's own files. The name is the task's text
//! (it chose its `comm` and its executable's name): cut here at [`MAX_NAME`] bytes,
//! escaped wherever it is said, as every refusal's program; it decides nothing. When the
//! process is gone, none holds the socket, or a bound is reached, the program is unknown
//! (empty) rather than guessed. Every read is bounded: table bytes ([`MAX_TABLE`]),
//! processes ([`MAX_PROCS`]), descriptors looked at ([`MAX_FDS`]). One lookup runs at a
//! time per proxy process, on a blocking thread, so a storm of refusals costs the host
//! at most one thread.

use std::fs::File;
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

/// Longest program name kept (bytes): a file name's longest.
pub const MAX_NAME: usize = 255;
/// At most this much of each of `net/tcp` and `net/tcp6` is read.
pub const MAX_TABLE: u64 = 16 << 20;
/// At most this many processes of the namespace are looked at.
pub const MAX_PROCS: usize = 1 << 14;
/// At most this many descriptors are looked at, over all processes.
pub const MAX_FDS: usize = 1 << 18;
/// `comm` holds this many bytes of a name at most (`TASK_COMM_LEN` - 1).
const COMM_LEN: usize = 15;

/// A network namespace, by its identity (the nsfs inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Netns {
    dev: u64,
    ino: u64,
}

impl Netns {
    /// The namespace socket `s` belongs to. Needs `CAP_NET_ADMIN` over it: the
    /// supervisor has it over the sandbox's (it owns the sandbox's user namespace).
    pub fn of_socket(s: BorrowedFd<'_>) -> io::Result<Netns> {
        // SAFETY: SIOCGSKNS takes no argument and returns a new descriptor (close-on-exec).
        let fd = unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGSKNS as _) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just opened `fd` for us; nothing else owns it.
        let ns = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let m = ns.metadata()?;
        Ok(Netns {
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    /// Is host process `pid` in this namespace (false when it cannot be told)?
    fn has(&self, pid: u32) -> bool {
        std::fs::metadata(format!("/proc/{pid}/ns/net"))
            .is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino)
    }
}

/// What the proxy knows of the sandbox to find who holds a socket.
#[derive(Debug)]
pub struct Sandbox {
    netns: Netns,
    /// A `NETLINK_SOCK_DIAG` socket of the sandbox's namespace, when init sent one.
    diag: Option<OwnedFd>,
}

impl Sandbox {
    /// `diag`: checked ([`is_diag_socket`]) by the caller; its reads time out after 1 s.
    pub fn new(netns: Netns, diag: Option<OwnedFd>) -> Sandbox {
        if let Some(d) = &diag {
            let tv = libc::timeval {
                tv_sec: 1,
                tv_usec: 0,
            };
            // SAFETY: setsockopt reads a timeval we own.
            unsafe {
                libc::setsockopt(
                    d.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    (&tv as *const libc::timeval).cast(),
                    std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                )
            };
        }
        Sandbox { netns, diag }
    }

    /// The process of the sandbox holding the socket connected from `client` to
    /// `server` (the accepted socket's peer and local addresses); `None` when it cannot be
    /// found. Blocking: a few reads of procfs (see the module docs).
    pub fn find(&self, client: SocketAddr, server: SocketAddr) -> Option<Owner> {
        let members = members(self.netns);
        let by_diag = self
            .diag
            .as_ref()
            .and_then(|d| diag_inode(d.as_fd(), client, server).ok());
        let inode = match by_diag {
            Some(found) => found?,
            // the first member whose tables can be read tells (they are the namespace's)
            None => members
                .iter()
                .find_map(|&pid| socket_inode(pid, client, server).ok())??,
        };
        let want = format!("socket:[{inode}]");
        let mut budget = MAX_FDS;
        members
            .iter()
            .find_map(|&pid| holder(pid, want.as_bytes(), &mut budget))
    }
}

/// `NETLINK_SOCK_DIAG` (linux/netlink.h).
const NETLINK_SOCK_DIAG: libc::c_int = 4;
/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;

/// A socket to ask the kernel about the sockets of this network namespace (made by init
/// inside the sandbox; unprivileged).
pub fn diag_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the descriptor is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just created, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Is `fd` a `NETLINK_SOCK_DIAG` socket (what init may send besides clients)?
pub fn is_diag_socket(fd: BorrowedFd<'_>) -> bool {
    let opt = |name| super::handoff::int_opt(fd, libc::SOL_SOCKET, name).ok();
    opt(libc::SO_DOMAIN) == Some(libc::AF_NETLINK)
        && opt(libc::SO_PROTOCOL) == Some(NETLINK_SOCK_DIAG)
}

/// The inode of the TCP socket whose local address is `local` and remote `remote`, by
/// one exact `SOCK_DIAG_BY_FAMILY` request on `diag` (an IPv4 connection is also looked
/// for as IPv6-mapped, the form a dual-stack socket has). `Ok(None)`: no such socket.
fn diag_inode(
    diag: BorrowedFd<'_>,
    local: SocketAddr,
    remote: SocketAddr,
) -> io::Result<Option<u64>> {
    let (local, remote) = (canonical(local), canonical(remote));
    let mapped = |a: SocketAddr| match a.ip() {
        IpAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), a.port()),
        IpAddr::V6(_) => a,
    };
    if let Some(i) = diag_ask(diag, local, remote)? {
        return Ok(Some(i));
    }
    if local.is_ipv4() && remote.is_ipv4() {
        return diag_ask(diag, mapped(local), mapped(remote));
    }
    Ok(None)
}

fn diag_ask(
    diag: BorrowedFd<'_>,
    local: SocketAddr,
    remote: SocketAddr,
) -> io::Result<Option<u64>> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(1);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let (family, src, dst) = match (local.ip(), remote.ip()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mut x = [0u8; 16];
            let mut y = [0u8; 16];
            x[..4].copy_from_slice(&a.octets());
            y[..4].copy_from_slice(&b.octets());
            (libc::AF_INET, x, y)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => (libc::AF_INET6, a.octets(), b.octets()),
        _ => return Ok(None),
    };
    // nlmsghdr, inet_diag_req_v2 (family, protocol, ext, pad, states), inet_diag_sockid
    // (ports and addresses in network order, interface, cookie "none")
    let mut m = Vec::with_capacity(72);
    m.extend_from_slice(&72u32.to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[family as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    m.extend_from_slice(&u32::MAX.to_ne_bytes());
    m.extend_from_slice(&local.port().to_be_bytes());
    m.extend_from_slice(&remote.port().to_be_bytes());
    m.extend_from_slice(&src);
    m.extend_from_slice(&dst);
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&u32::MAX.to_ne_bytes());
    m.extend_from_slice(&u32::MAX.to_ne_bytes());
    // SAFETY: send reads `m.len()` bytes of `m`.
    let sent = unsafe { libc::send(diag.as_raw_fd(), m.as_ptr().cast(), m.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut b = [0u8; 8192];
    // a late answer to an earlier request (one that timed out) is skipped
    for _ in 0..8 {
        // SAFETY: recv writes at most `b.len()` bytes into `b`.
        let n = unsafe { libc::recv(diag.as_raw_fd(), b.as_mut_ptr().cast(), b.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let r = &b[..n as usize];
        let u16_at = |o: usize| r.get(o..o + 2).map(|x| u16::from_ne_bytes([x[0], x[1]]));
        let u32_at = |o: usize| {
            r.get(o..o + 4)
                .map(|x| u32::from_ne_bytes([x[0], x[1], x[2], x[3]]))
        };
        if u32_at(8) != Some(seq) {
            continue;
        }
        return match u16_at(4) {
            // inet_diag_msg: 4 bytes, the sockid (48), expires, rqueue, wqueue, uid, inode
            Some(SOCK_DIAG_BY_FAMILY) => Ok(u32_at(16 + 68).map(u64::from).filter(|i| *i != 0)),
            Some(t) if t == libc::NLMSG_ERROR as u16 => match u32_at(16).map(|e| -(e as i32)) {
                Some(libc::ENOENT) => Ok(None),
                Some(e) => Err(io::Error::from_raw_os_error(e)),
                None => Ok(None),
            },
            _ => Ok(None),
        };
    }
    Ok(None)
}

/// The process found holding the client's end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owner {
    /// Its name (see [`program`]); empty when unknown.
    pub program: String,
    /// Its pid as the sandbox sees it.
    pub pid: Option<i32>,
}

/// The processes of `ns`, in pid order (at most [`MAX_PROCS`]).
fn members(ns: Netns) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut v: Vec<u32> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .filter(|&pid| ns.has(pid))
        .take(MAX_PROCS)
        .collect();
    v.sort_unstable();
    v
}

/// The inode of the socket from `client` to `server` in the tables of `pid`'s network
/// namespace (`Ok(None)`: not there; `Err`: the tables cannot be read).
fn socket_inode(pid: u32, client: SocketAddr, server: SocketAddr) -> io::Result<Option<u64>> {
    for table in ["tcp", "tcp6"] {
        let mut b = Vec::new();
        match File::open(format!("/proc/{pid}/net/{table}")) {
            Ok(f) => f.take(MAX_TABLE).read_to_end(&mut b)?,
            // no IPv6 in this kernel
            Err(e) if e.kind() == io::ErrorKind::NotFound && table == "tcp6" => continue,
            Err(e) => return Err(e),
        };
        if let Some(i) = find_inode(&String::from_utf8_lossy(&b), client, server) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// The inode of the entry of a `net/tcp` or `net/tcp6` table whose local address is
/// `local` and remote address `remote` (an IPv4 address matching its IPv6-mapped form).
pub fn find_inode(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    let (local, remote) = (canonical(local), canonical(remote));
    table.lines().skip(1).find_map(|line| {
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
        let f: Vec<&str> = line.split_whitespace().take(10).collect();
        if f.len() < 10 {
            return None;
        }
        let l = canonical(parse_addr(f[1])?);
        let r = canonical(parse_addr(f[2])?);
        let inode: u64 = f[9].parse().ok()?;
        (l == local && r == remote && inode != 0).then_some(inode)
    })
}

/// An address as the tables write it: `0100007F:0CBC` (IPv4: one 32-bit word in the
/// machine's byte order), or four such words (IPv6); the port in hex.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    if !ip.is_ascii() {
        return None;
    }
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| u32::from_str_radix(ip.get(8 * i..8 * i + 8)?, 16).ok();
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?.to_ne_bytes())),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[4 * i..4 * i + 4].copy_from_slice(&word(i)?.to_ne_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

fn canonical(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

/// Process `pid` if it holds a descriptor linked to `want`: its name and sandbox pid.
fn holder(pid: u32, want: &[u8], budget: &mut usize) -> Option<Owner> {
    use nix::fcntl::{openat, readlinkat, OFlag};
    use nix::sys::stat::Mode;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    // every read below goes through this descriptor: it names this process, not its pid
    let dir = nix::fcntl::open(format!("/proc/{pid}").as_str(), flags, Mode::empty()).ok()?;
    let fds = openat(&dir, "fd", flags, Mode::empty()).ok()?;
    let mut list = nix::dir::Dir::from_fd(fds.try_clone().ok()?).ok()?;
    let mut held = false;
    for e in list.iter() {
        if *budget == 0 {
            return None;
        }
        *budget -= 1;
        let Ok(e) = e else { continue };
        let name = e.file_name();
        if name.to_bytes().first() == Some(&b'.') {
            continue;
        }
        if readlinkat(&fds, name).is_ok_and(|l| l.as_bytes() == want) {
            held = true;
            break;
        }
    }
    if !held {
        return None;
    }
    let read = |what: &str, max: u64| -> Option<Vec<u8>> {
        let f = File::from(
            openat(
                &dir,
                what,
                OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .ok()?,
        );
        let mut b = Vec::new();
        f.take(max).read_to_end(&mut b).ok()?;
        Some(b)
    };
    let comm = read("comm", 64)?;
    let exe = readlinkat(&dir, "exe").ok();
    let status = read("status", 8192).unwrap_or_default();
    Some(Owner {
        program: program(&comm, exe.as_ref().map(|e| e.as_bytes())),
        pid: crate::linux::notify::nspid_in(&status),
    })
}

/// The program's name: its `comm`; when that may be cut short (15 bytes) and its
/// executable's file name starts with it, that file name. At most [`MAX_NAME`] bytes,
/// invalid UTF-8 replaced.
pub fn program(comm: &[u8], exe: Option<&[u8]>) -> String {
    let comm = comm.strip_suffix(b"\n").unwrap_or(comm);
    let file = exe
        .map(|e| e.strip_suffix(b" (deleted)").unwrap_or(e))
        .and_then(|e| e.rsplit(|b| *b == b'/').next());
    let name = match file {
        Some(f) if comm.len() == COMM_LEN && f.len() > comm.len() && f.starts_with(comm) => f,
        _ => comm,
    };
    let mut s = String::from_utf8_lossy(&name[..name.len().min(MAX_NAME)]).into_owned();
    // cut where the lossy form still fits, at a character boundary
    while s.len() > MAX_NAME {
        s.pop();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::handoff;
    #[test]
    fn init_diagnostics_socket_is_told_apart() {
        let (p, r) = handoff::channel().unwrap();
        let diag = super::diag_socket().unwrap();
        handoff::send_diag(r.as_fd(), diag.as_fd()).unwrap();
        let handoff::Received::Diag(got) = handoff::recv(p.as_fd()).unwrap() else {
            panic!("not told apart")
        };
        assert!(super::is_diag_socket(got.as_fd()));
        // and a client is still a client
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (accepted, _) = l.accept().unwrap();
        handoff::send(r.as_fd(), accepted.as_fd()).unwrap();
        assert!(matches!(
            handoff::recv(p.as_fd()).unwrap(),
            handoff::Received::Fd(_)
        ));
    }

    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn tables_are_read_both_ways_round() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
                 \x20  0: 0100007F:0C38 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0\n\
                 \x20  1: 0100007F:9C40 0100007F:0C38 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 20 4 30 10 -1\n\
                 \x20  2: 0100007F:0C38 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0000000000000000 20 4 30 10 -1\n";
        let relay: SocketAddr = "127.0.0.1:3128".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        assert_eq!(find_inode(t, client, relay), Some(222));
        assert_eq!(find_inode(t, relay, client), Some(333));
        assert_eq!(find_inode(t, "127.0.0.1:1".parse().unwrap(), relay), None);
        // an IPv4 connection of an IPv6 socket, and ::1
        let t6 = "header\n   0: 0000000000000000FFFF00000100007F:9C40 0000000000000000FFFF00000100007F:0C38 01 0:0 0:0 0 0 0 444\n\
                  \x20  1: 00000000000000000000000001000000:9C41 00000000000000000000000001000000:0C38 01 0:0 0:0 0 0 0 555\n";
        assert_eq!(find_inode(t6, client, relay), Some(444));
        let c6: SocketAddr = "[::1]:40001".parse().unwrap();
        assert_eq!(find_inode(t6, c6, "[::1]:3128".parse().unwrap()), Some(555));
        // garbage is skipped, never a panic
        assert_eq!(
            find_inode("h\n 0: é0000007F:0C38 x 0 0 0 0 0 0 1\n", client, relay),
            None
        );
    }

    #[test]
    fn names_are_comm_or_the_full_file_name_and_bounded() {
        assert_eq!(program(b"curl\n", Some(b"/usr/bin/curl")), "curl");
        // comm may be set to anything: it is what is named unless it is cut short
        assert_eq!(
            program(b"renamed\n", Some(b"/usr/bin/python3.11")),
            "renamed"
        );
        assert_eq!(
            program(
                b"a-long-program-\n",
                Some(b"/w/a-long-program-name (deleted)")
            ),
            "a-long-program-name"
        );
        assert_eq!(
            program(b"a-long-program-\n", Some(b"/w/other")),
            "a-long-program-"
        );
        assert_eq!(program(b"x\xff\x1b\n", None), "x\u{fffd}\x1b");
        let long = [b'n'; 400];
        let mut exe = b"/".to_vec();
        exe.extend_from_slice(&long);
        assert_eq!(program(&long[..15], Some(&exe)).len(), MAX_NAME);
    }

    #[test]
    fn the_holder_of_a_connection_is_found() {
        // SIOCGSKNS on the host's namespace needs CAP_NET_ADMIN there
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (accepted, _) = l.accept().unwrap();
        let ns = Netns::of_socket(accepted.as_fd()).unwrap();
        let (client, server) = (
            accepted.peer_addr().unwrap(),
            accepted.local_addr().unwrap(),
        );
        let by_tables = Sandbox::new(ns, None);
        let o = by_tables
            .find(client, server)
            .expect("this process holds the client's end");
        let diag = diag_socket().unwrap();
        assert!(is_diag_socket(diag.as_fd()) && !is_diag_socket(c.as_fd()));
        let by_diag = Sandbox::new(ns, Some(diag));
        assert_eq!(by_diag.find(client, server).as_ref(), Some(&o));
        let exe = std::env::current_exe().unwrap();
        let file = exe.file_name().unwrap().to_str().unwrap();
        assert!(
            file.starts_with(&o.program) && !o.program.is_empty(),
            "{o:?} {file}"
        );
        let status = std::fs::read("/proc/self/status").unwrap();
        assert_eq!(o.pid, crate::linux::notify::nspid_in(&status));
        // IPv6 too, where this machine has ::1
        if let Ok(l6) = TcpListener::bind("[::1]:0") {
            let c6 = TcpStream::connect(l6.local_addr().unwrap()).unwrap();
            let (a6, _) = l6.accept().unwrap();
            let (cl, sv) = (a6.peer_addr().unwrap(), a6.local_addr().unwrap());
            assert_eq!(by_diag.find(cl, sv).as_ref(), Some(&o));
            assert_eq!(by_tables.find(cl, sv).as_ref(), Some(&o));
            drop(c6);
        }
        // closed: nobody holds it any more
        drop(c);
        assert_eq!(by_tables.find(client, server), None);
        assert_eq!(by_diag.find(client, server), None);
    }
}

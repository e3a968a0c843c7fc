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
//!    client's, remote = the relay's) in that namespace's `/proc/<pid>/net/tcp` and
//!    `tcp6`: its inode;
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
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
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

/// The process found holding the client's end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owner {
    /// Its name (see [`program`]); empty when unknown.
    pub program: String,
    /// Its pid as the sandbox sees it.
    pub pid: Option<i32>,
}

/// The process in namespace `ns` holding the socket connected from `client` to `server`
/// (the accepted socket's peer and local addresses); `None` when it cannot be found.
/// Blocking: a few reads of procfs (see the module docs).
pub fn find(ns: Netns, client: SocketAddr, server: SocketAddr) -> Option<Owner> {
    let members = members(ns);
    // the first member whose tables can be read tells (they are the namespace's)
    let inode = members
        .iter()
        .find_map(|&pid| socket_inode(pid, client, server).ok())??;
    let want = format!("socket:[{inode}]");
    let mut budget = MAX_FDS;
    members
        .iter()
        .find_map(|&pid| holder(pid, want.as_bytes(), &mut budget))
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
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

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
        let o = find(ns, client, server).expect("this process holds the client's end");
        let exe = std::env::current_exe().unwrap();
        let file = exe.file_name().unwrap().to_str().unwrap();
        assert!(
            file.starts_with(&o.program) && !o.program.is_empty(),
            "{o:?} {file}"
        );
        let status = std::fs::read("/proc/self/status").unwrap();
        assert_eq!(o.pid, crate::linux::notify::nspid_in(&status));
        // closed: nobody holds it any more
        drop(c);
        assert_eq!(find(ns, client, server), None);
    }
}

//! Servers a task starts, reachable from this computer only (`--publish [HOST_PORT:]PORT`,
//! spec `sandbox.publish`): `capsule exec` listens on the host's `127.0.0.1:HOST_PORT` and
//! `[::1]:HOST_PORT`, never on another address, and forwards each connection to the
//! sandbox's `127.0.0.1:PORT` for as long as the exec runs.
//!
//! The supervisor cannot enter the sandbox's network namespace (unprivileged, it has no
//! `CAP_SYS_ADMIN` where it runs), so the connection inside is made by the sandbox's init:
//! a connector thread there ([`spawn_connector`]) serves requests on a socketpair it
//! inherited (close-on-exec: the command never holds it). For each host client the
//! supervisor sends it a fresh socketpair end carrying the port; the connector connects
//! to `127.0.0.1:PORT` inside and sends the connected socket back on that end
//! (`SCM_RIGHTS`). The supervisor then splices the two sockets: no byte passes through
//! init, and no host socket enters the sandbox.

use super::handoff::{self, check_client, Received};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

/// One published port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Publish {
    /// The host's port (0: any free one).
    pub host_port: u16,
    /// The sandbox's port.
    pub port: u16,
}

/// Parse `[HOST_PORT:]PORT`.
pub fn parse(s: &str) -> Result<Publish, String> {
    let bad =
        || format!("--publish {s:?}: want [HOST_PORT:]PORT (ports 1-65535; HOST_PORT 0: any)");
    let num = |p: &str| -> Result<u16, String> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        p.parse::<u16>().map_err(|_| bad())
    };
    let (h, p) = match s.split_once(':') {
        Some((h, p)) => (num(h)?, num(p)?),
        None => {
            let p = num(s)?;
            (p, p)
        }
    };
    if p == 0 {
        return Err(bad());
    }
    Ok(Publish {
        host_port: h,
        port: p,
    })
}

/// A published port as bound on the host.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Bound {
    /// The host addresses listening (`127.0.0.1:8080`, `[::1]:8080`).
    pub host: Vec<String>,
    /// The sandbox's port they forward to.
    pub port: u16,
}

/// The host listeners of an exec's published ports, bound, not serving yet.
pub struct Publisher {
    listeners: Vec<(TcpListener, u16)>,
    bound: Vec<Bound>,
    channel: OwnedFd,
}

/// The serving publisher; stops when dropped.
pub struct Running {
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Publisher {
    /// Bind every port on the host's loopback (IPv4, and IPv6 where the host has it) and
    /// make the connector's channel. Returns the publisher and init's end of the channel.
    pub fn bind(ports: &[Publish]) -> io::Result<(Publisher, OwnedFd)> {
        let mut listeners = Vec::new();
        let mut bound = Vec::new();
        for p in ports {
            let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, p.host_port));
            let l4 = TcpListener::bind(v4)
                .map_err(|e| io::Error::new(e.kind(), format!("--publish: {v4}: {e}")))?;
            let port = l4.local_addr()?.port();
            let mut host = vec![SocketAddr::from((Ipv4Addr::LOCALHOST, port)).to_string()];
            let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
            match TcpListener::bind(v6) {
                Ok(l6) => {
                    host.push(v6.to_string());
                    listeners.push((l6, p.port));
                }
                // no IPv6 loopback here: IPv4 only
                Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => {}
                Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {}
                Err(e) => return Err(io::Error::new(e.kind(), format!("--publish: {v6}: {e}"))),
            }
            listeners.push((l4, p.port));
            bound.push(Bound { host, port: p.port });
        }
        let (mine, init) = handoff::channel()?;
        Ok((
            Publisher {
                listeners,
                bound,
                channel: mine,
            },
            init,
        ))
    }

    /// What is published (for the record and the message).
    pub fn bound(&self) -> &[Bound] {
        &self.bound
    }

    /// Serve on a thread of its own (call after the sandbox is cloned).
    pub fn start(self, idle: Option<Duration>) -> io::Result<Running> {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let Publisher {
            listeners, channel, ..
        } = self;
        let thread = std::thread::Builder::new()
            .name("capsule-publish".into())
            .spawn(move || {
                rt.block_on(async move {
                    let channel = std::sync::Arc::new(channel);
                    let mut tasks = Vec::new();
                    for (l, port) in listeners {
                        let ch = channel.clone();
                        tasks.push(tokio::spawn(accept_loop(l, port, ch, idle)));
                    }
                    let _ = rx.await;
                    for t in tasks {
                        t.abort();
                    }
                })
            })?;
        Ok(Running {
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }
}

async fn accept_loop(
    l: TcpListener,
    port: u16,
    channel: std::sync::Arc<OwnedFd>,
    idle: Option<Duration>,
) {
    if l.set_nonblocking(true).is_err() {
        return;
    }
    let Ok(l) = tokio::net::TcpListener::from_std(l) else {
        return;
    };
    loop {
        let client = match l.accept().await {
            Ok((c, _)) => c,
            Err(e) => {
                tracing::warn!("publish accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ch = channel.clone();
        tokio::spawn(async move {
            match connect_inside(&ch, port).await {
                Ok(inside) => {
                    let _ = client.set_nodelay(true);
                    let _ = inside.set_nodelay(true);
                    if let Err(e) = super::splice::tunnel(&client, &inside, idle).await {
                        tracing::debug!("published port {port}: {e}");
                    }
                }
                // nothing listens there inside (yet): the client sees the connection close
                Err(e) => tracing::debug!("published port {port}: {e}"),
            }
        });
    }
}

/// Ask init's connector for a socket connected to the sandbox's `127.0.0.1:port`.
async fn connect_inside(channel: &OwnedFd, port: u16) -> io::Result<tokio::net::TcpStream> {
    use tokio::io::unix::AsyncFd;
    let (mine, theirs) = handoff::channel()?;
    std::fs::File::from(mine.try_clone()?).write_all(&port.to_be_bytes())?;
    handoff::send(channel.as_fd(), theirs.as_fd())?;
    drop(theirs);
    // SAFETY: an OwnedFd owns its descriptor, keeps it open until dropped and always
    // returns the same number: the AsyncFd owns it for its whole life.
    let reply = unsafe { AsyncFd::register_with_interest(mine, tokio::io::Interest::READABLE) }?;
    let wait = async {
        loop {
            let mut g = reply.readable().await?;
            match g.try_io(|c| handoff::recv(c.get_ref().as_fd())) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    };
    let got = tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the sandbox did not answer"))??;
    let fd = match got {
        Received::Fd(fd) => fd,
        Received::Closed | Received::Nothing | Received::Diag(_) | Received::Dns(_) => {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("nothing listens on 127.0.0.1:{port} inside"),
            ))
        }
    };
    let (s, _) = check_client(fd).map_err(|e| io::Error::other(e.to_string()))?;
    tokio::net::TcpStream::from_std(s)
}

/// Init's connector (inside the sandbox's network namespace): for each request on
/// `channel`, connect to `127.0.0.1:PORT` and send the socket back. One thread; a request
/// it cannot serve is answered by closing its socket.
pub fn spawn_connector(channel: OwnedFd) -> io::Result<()> {
    let old = super::relay::block_all_signals();
    let r = std::thread::Builder::new()
        .name("capsule-publish".into())
        .stack_size(64 * 1024)
        .spawn(move || connector(channel));
    super::relay::restore_signals(&old);
    r.map(|_| ())
}

fn connector(channel: OwnedFd) {
    loop {
        let mut p = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&channel),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd we own.
        if unsafe { libc::poll(&mut p, 1, -1) } < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        let reply = match handoff::recv(channel.as_fd()) {
            Ok(Received::Fd(fd)) => fd,
            Ok(Received::Nothing | Received::Diag(_) | Received::Dns(_)) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Ok(Received::Closed) | Err(_) => return,
        };
        let mut port = [0u8; 2];
        let mut f = std::fs::File::from(reply);
        if f.read_exact(&mut port).is_err() {
            continue;
        }
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, u16::from_be_bytes(port)));
        if let Ok(s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            let _ = handoff::send(f.as_fd(), s.as_fd());
        }
    }
}

/// The published ports of one exec, wired into the executor as the proxy is (see
/// [`super::exec`]): bound in [`ExecPublish::prepare`] (a port in use fails the exec before
/// anything runs), the connector started by an init hook, the listeners served from
/// `before_release` until [`ExecPublish::finish`].
pub struct ExecPublish {
    publisher: std::rc::Rc<std::cell::RefCell<Option<Publisher>>>,
    running: std::rc::Rc<std::cell::RefCell<Option<Running>>>,
    init_end: std::sync::Arc<std::sync::Mutex<Option<OwnedFd>>>,
    bound: Vec<Bound>,
}

impl ExecPublish {
    /// Parse and bind `specs` (the policy's `publish` list).
    pub fn prepare(specs: &[String]) -> Result<Option<ExecPublish>, String> {
        if specs.is_empty() {
            return Ok(None);
        }
        let ports = specs
            .iter()
            .map(|p| parse(p))
            .collect::<Result<Vec<_>, _>>()?;
        let (p, init_end) = Publisher::bind(&ports).map_err(|e| e.to_string())?;
        Ok(Some(ExecPublish {
            bound: p.bound().to_vec(),
            publisher: std::rc::Rc::new(std::cell::RefCell::new(Some(p))),
            running: Default::default(),
            init_end: std::sync::Arc::new(std::sync::Mutex::new(Some(init_end))),
        }))
    }

    pub fn bound(&self) -> &[Bound] {
        &self.bound
    }

    /// Add the connector's init hook and the listeners' start to `hooks`.
    pub fn hooks(
        &self,
        mut hooks: crate::linux::Hooks,
        idle: Option<Duration>,
    ) -> crate::linux::Hooks {
        let inside = self.init_end.clone();
        hooks.inside.push(Box::new(move || {
            let fd = inside
                .lock()
                .map_err(|_| "published ports: channel slot poisoned".to_string())?
                .take()
                .ok_or_else(|| "published ports: no channel".to_string())?;
            spawn_connector(fd).map_err(|e| format!("published ports: {e}"))
        }));
        let prev = hooks.before_release.take();
        let end = self.init_end.clone();
        let publisher = self.publisher.clone();
        let running = self.running.clone();
        let bound = self.bound.clone();
        hooks.before_release = Some(Box::new(move || {
            if let Ok(mut slot) = end.lock() {
                slot.take();
            }
            if let Some(p) = publisher.borrow_mut().take() {
                match p.start(idle) {
                    Ok(r) => {
                        *running.borrow_mut() = Some(r);
                        for b in &bound {
                            eprintln!(
                                "capsule: published {} -> port {} inside",
                                b.host.join(" and "),
                                b.port
                            );
                        }
                    }
                    Err(e) => eprintln!("capsule: cannot serve the published ports: {e}"),
                }
            }
            if let Some(f) = prev {
                f();
            }
        }));
        hooks
    }

    /// Stop serving (the listeners close).
    pub fn finish(&self) {
        self.running.borrow_mut().take();
        self.publisher.borrow_mut().take();
        if let Ok(mut slot) = self.init_end.lock() {
            slot.take();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(
            parse("8000").unwrap(),
            Publish {
                host_port: 8000,
                port: 8000
            }
        );
        assert_eq!(
            parse("9000:8000").unwrap(),
            Publish {
                host_port: 9000,
                port: 8000
            }
        );
        assert_eq!(
            parse("0:8000").unwrap(),
            Publish {
                host_port: 0,
                port: 8000
            }
        );
        for bad in ["", "0", "x", "1:0", "70000", "127.0.0.1:80:80", "-1", ":80"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn forwards_through_the_connector() {
        // the "sandbox": a server on this namespace's loopback, and the connector
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = server.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for c in server.incoming().flatten().take(2) {
                let mut c = c;
                let _ = c.write_all(b"from inside");
            }
        });
        let (publisher, init_end) = Publisher::bind(&[Publish { host_port: 0, port }]).unwrap();
        let host: SocketAddr = publisher.bound()[0].host[0].parse().unwrap();
        assert!(host.ip().is_loopback());
        spawn_connector(init_end).unwrap();
        let _running = publisher.start(None).unwrap();
        for _ in 0..2 {
            let mut c = std::net::TcpStream::connect(host).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut got = String::new();
            c.read_to_string(&mut got).unwrap();
            assert_eq!(got, "from inside");
        }
    }
}

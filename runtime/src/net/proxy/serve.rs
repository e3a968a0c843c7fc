//! Where the proxy's clients come from: the accept loops on a TCP listener and on a unix
//! socket, and the client sockets the sandbox's relay hands over ([`Proxy::serve_handoff`]),
//! with who each one is and the allow-listed host services reached at their own address.

use super::{Conn, Proxy, Verdict};
use crate::net::allowlist::Host;
use crate::net::refusal::Who;
use std::future::Future;
use std::net::SocketAddr;
#[cfg(target_os = "linux")]
use std::sync::Arc;
use std::time::Duration;
#[cfg(target_os = "linux")]
use tokio::net::TcpStream;

impl Proxy {
    /// Accept clients on a TCP listener until `shutdown` completes.
    pub async fn serve_tcp(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) {
        let accept = || async {
            let (s, _) = listener.accept().await?;
            let _ = s.set_nodelay(true);
            Ok(s)
        };
        self.serve_accepted(accept, shutdown).await
    }

    /// Accept clients on a unix-socket listener until `shutdown` completes.
    pub async fn serve_unix(
        &self,
        listener: tokio::net::UnixListener,
        shutdown: impl Future<Output = ()>,
    ) {
        let accept = || async { listener.accept().await.map(|(s, _)| s) };
        self.serve_accepted(accept, shutdown).await
    }

    /// Serve each client `accept` gives, one task each within the proxy's permits, until
    /// `shutdown` completes.
    async fn serve_accepted<S: Conn, A: Future<Output = std::io::Result<S>>>(
        &self,
        mut accept: impl FnMut() -> A,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        loop {
            let Ok(permit) = self.inner.permits.clone().acquire_owned().await else {
                return;
            };
            tokio::select! {
                _ = &mut shutdown => return,
                r = accept() => match r {
                    Ok(s) => {
                        let me = self.clone();
                        tokio::spawn(async move {
                            me.handle(s).await;
                            drop(permit);
                        });
                    }
                    Err(e) => accept_error(e).await,
                },
            }
        }
    }

    /// Serve the client sockets the relay hands over on `channel` (the proxy's end, see
    /// [`crate::net::handoff`]) until `shutdown` completes or the relay's end closes. A
    /// descriptor that is not a connected TCP socket is closed unused.
    #[cfg(target_os = "linux")]
    pub async fn serve_handoff(
        &self,
        channel: std::os::fd::OwnedFd,
        shutdown: impl Future<Output = ()>,
    ) {
        use crate::net::handoff::{check_client, recv, Received};
        use std::os::fd::AsFd;
        use tokio::io::unix::AsyncFd;
        // SAFETY: an OwnedFd owns its descriptor, keeps it open until dropped and always
        // returns the same number: the AsyncFd owns it for its whole life.
        let registered =
            unsafe { AsyncFd::register_with_interest(channel, tokio::io::Interest::READABLE) };
        let chan = match registered {
            Ok(c) => c,
            Err(e) => return tracing::warn!("proxy: cannot watch the relay's channel: {e}"),
        };
        tokio::pin!(shutdown);
        loop {
            let Ok(permit) = self.inner.permits.clone().acquire_owned().await else {
                return;
            };
            let fd = loop {
                let mut guard = tokio::select! {
                    _ = &mut shutdown => return,
                    r = chan.readable() => match r {
                        Ok(g) => g,
                        Err(e) => return tracing::warn!("proxy: relay channel: {e}"),
                    },
                };
                match guard.try_io(|c| recv(c.get_ref().as_fd())) {
                    Ok(Ok(Received::Fd(fd))) => break fd,
                    Ok(Ok(Received::Diag(fd))) => self.keep_diag(fd),
                    Ok(Ok(Received::Dns(fd))) => self.serve_dns(fd),
                    Ok(Ok(Received::Nothing)) => {}
                    Ok(Ok(Received::Closed)) => return,
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Ok(Err(e)) => {
                        tracing::warn!("proxy: relay channel: {e}");
                        return;
                    }
                    Err(_would_block) => {}
                }
            };
            let (client, peer) = match check_client(fd) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("proxy: refused a descriptor from the relay: {e}");
                    continue;
                }
            };
            let client = match TcpStream::from_std(client) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("proxy: cannot serve a client from the relay: {e}");
                    continue;
                }
            };
            let _ = client.set_nodelay(true);
            // a connection the command made directly, sent here by the seccomp supervisor
            let direct = self.inner.cfg.direct.as_ref().and_then(|d| d.take(peer));
            if let Some(r) = direct {
                let me = self.clone();
                tokio::spawn(async move {
                    me.handle_direct(client, r).await;
                    drop(permit);
                });
                continue;
            }
            // what the relay listened on: the proxy port, or a host service's own address
            let local = client.local_addr().ok();
            let service = local.filter(|a| self.inner.services.contains(a));
            let who = local.and_then(|server| self.who(&client, peer, server));
            let me = self.clone();
            tokio::spawn(async move {
                match service {
                    Some(addr) => me.handle_service(client, addr, who.as_ref()).await,
                    None => me.handle_from(client, who).await,
                }
                drop(permit);
            });
        }
    }

    /// Who is behind a client the relay handed over (when refusals are listed): the
    /// sandbox's network namespace is learnt from the first client (one `ioctl`).
    #[cfg(target_os = "linux")]
    fn who(&self, client: &TcpStream, client_addr: SocketAddr, server: SocketAddr) -> Option<Who> {
        use std::os::fd::AsFd;
        self.inner.cfg.refusals.as_ref()?;
        let sandbox = self.inner.sandbox.get_or_init(|| {
            let netns = crate::net::owner::Netns::of_socket(client.as_fd())
                .map_err(|e| tracing::debug!("proxy: the sandbox's network namespace: {e}"))
                .ok()?;
            let diag = match self.inner.diag.lock() {
                Ok(mut d) => d.take(),
                Err(p) => p.into_inner().take(),
            };
            Some(Arc::new(crate::net::owner::Sandbox::new(netns, diag)))
        });
        Some(Who::new(sandbox.clone()?, client_addr, server))
    }

    /// Answer the sandbox's name queries on the socket init bound (the first one, if it is
    /// one; allowlist mode with direct connections only).
    #[cfg(target_os = "linux")]
    fn serve_dns(&self, fd: std::os::fd::OwnedFd) {
        let Some(direct) = &self.inner.cfg.direct else {
            return tracing::warn!("proxy: ignored a name server socket (no direct connections)");
        };
        if self
            .inner
            .dns_started
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return tracing::warn!("proxy: ignored a second name server socket");
        }
        let sock = match crate::net::handoff::check_dns(fd)
            .map_err(|e| e.to_string())
            .and_then(|s| tokio::net::UdpSocket::from_std(s).map_err(|e| e.to_string()))
        {
            Ok(s) => s,
            Err(e) => return tracing::warn!("proxy: refused the name server's socket: {e}"),
        };
        tokio::spawn(crate::net::dns::serve(sock, direct.names().clone()));
    }

    /// Keep init's diagnostics socket (the first one, if it is one; before any client).
    #[cfg(target_os = "linux")]
    fn keep_diag(&self, fd: std::os::fd::OwnedFd) {
        use std::os::fd::AsFd;
        if !crate::net::owner::is_diag_socket(fd.as_fd()) || self.inner.sandbox.get().is_some() {
            return tracing::warn!(
                "proxy: ignored a descriptor sent as the relay's diagnostics socket"
            );
        }
        let mut d = match self.inner.diag.lock() {
            Ok(d) => d,
            Err(p) => p.into_inner(),
        };
        d.get_or_insert(fd);
    }

    /// Serve a client that connected to an allow-listed host service at its own address
    /// inside (`127.0.0.1:4873`): the same check, then the host's service at that address,
    /// requests substituted when a secret is for it, else bytes tunnelled.
    async fn handle_service<S: Conn>(&self, client: S, addr: SocketAddr, who: Option<&Who>) {
        let host = Host::Ip(addr.ip());
        let port = addr.port();
        let addrs = match self.check(&host, port).await {
            Verdict::Allow(a) => a,
            Verdict::Refuse(reason) | Verdict::Unresolved(reason) => {
                return self.refuse_log(&host, port, &reason, who).await;
            }
        };
        let upstream = match self.connect_any(&addrs).await {
            Ok(s) => s,
            Err(e) => return tracing::debug!(%host, port, "proxy: cannot connect: {}", e.msg),
        };
        if let Some(sc) = self.secrets_for(&host, port).cloned() {
            return self
                .intercept(
                    &sc,
                    client,
                    Vec::new(),
                    upstream,
                    self.site(&sc, &host, port, who),
                )
                .await;
        }
        let limits = &self.inner.cfg.limits;
        client
            .tunnel(upstream, limits.buffer, limits.idle_timeout)
            .await;
    }
}

/// Out of descriptors or a similar transient failure: say so and back off briefly instead
/// of spinning.
async fn accept_error(e: std::io::Error) {
    tracing::warn!("proxy accept: {e}");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

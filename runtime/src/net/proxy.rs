//! The allowlist proxy (tokio): HTTP `CONNECT` tunnels and plain `http://` forwarding,
//! served to the client sockets the sandbox's relay hands over ([`Proxy::serve_handoff`]),
//! on a TCP listener (tests, benchmarks, `capsule proxy`) or on a unix socket.
//!
//! For every request the proxy
//! 1. reads the head (bounded size and time) and finds the destination `host:port`;
//! 2. refuses it unless the [allowlist](super::allowlist) names the host (and port);
//! 3. resolves a name itself ([`Resolver`]), a literal address stands for itself;
//! 4. checks every resolved address: loopback, private, link-local, metadata and the other
//!    special classes of [`super::addr`], and the host's own addresses, are refused unless
//!    the allowlist names that literal address (and port);
//! 5. connects to the first allowed address that answers — exactly the `SocketAddr` it
//!    checked, so a second DNS answer can never slip in (no rebinding race);
//! 6. tunnels bytes (`CONNECT`) or forwards the request rewritten to origin form.
//!
//! Every refusal is answered `403 Forbidden` with the reason in the body and appended to
//! the refusal log. Malformed requests get `400`, unreachable destinations `502`/`504`.
//!
//! The accept loops and the handed-over clients are served in the submodule `serve`.

use super::addr::{classify, HostAddrs};
use super::allowlist::{Allowlist, Host};
use super::http::{self, HeadError, Target};
use super::intercept::{self, Prefixed, Site};
use super::refusal::{RefusalLog, Who};
use super::resolve::Resolver;
use super::secrets::{Leak, Secrets};
use super::socks;
use super::tls::Ca;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

mod direct;
mod serve;

/// Bounds on what one client may cost.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request head accepted (`431` beyond).
    pub max_head: usize,
    /// Time allowed for the client to send its request head (`408` beyond).
    pub head_timeout: Duration,
    /// Time allowed for resolving a name.
    pub resolve_timeout: Duration,
    /// Time allowed for connecting to one address.
    pub connect_timeout: Duration,
    /// Connections served at once; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// Buffer size of each direction of a tunnel where it is copied (not on Linux, where
    /// tunnels use `splice`).
    pub buffer: usize,
    /// A tunnel that has moved no byte either way for this long is closed (`None`: never).
    pub idle_timeout: Option<Duration>,
}

/// The default [`Limits::idle_timeout`]: 15 minutes, as squid's `read_timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head: 32 * 1024,
            head_timeout: Duration::from_secs(30),
            resolve_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            max_connections: 1024,
            buffer: 64 * 1024,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
        }
    }
}

/// Descriptors one client costs the proxy at most: its socket, the upstream socket, and
/// a pipe (two descriptors) per tunnel direction.
pub const FDS_PER_CLIENT: u64 = 6;

/// Raise this process's soft `RLIMIT_NOFILE` (never above the hard limit, never lowering
/// it) so `limits.max_connections` clients fit: the usual soft limit of 1,024 would run out
/// at ~170 tunnels. Process-wide: `capsule exec` calls it only after the sandbox is cloned
/// (when the proxy starts), so the sandboxed command keeps the limit it was given.
/// Returns the soft limit in force.
pub fn ensure_fd_budget(limits: &Limits) -> u64 {
    let want = limits.max_connections as u64 * FDS_PER_CLIENT + 64;
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return 0;
    }
    if rl.rlim_cur >= want as libc::rlim_t || rl.rlim_cur >= rl.rlim_max {
        return rl.rlim_cur;
    }
    let raised = libc::rlimit {
        rlim_cur: (want as libc::rlim_t).min(rl.rlim_max),
        rlim_max: rl.rlim_max,
    };
    // SAFETY: setrlimit reads one rlimit we own; raising the soft limit up to the hard
    // limit needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return rl.rlim_cur;
    }
    raised.rlim_cur
}

/// What the proxy allows and where it records refusals.
#[derive(Debug, Default)]
pub struct ProxyConfig {
    pub allowlist: Allowlist,
    pub resolver: Resolver,
    pub refusal_log: Option<RefusalLog>,
    /// The exec's list of refusals (under `capsule exec`).
    pub refusals: Option<std::sync::Arc<crate::refusals::Collector>>,
    pub limits: Limits,
    /// This exec's secrets and the TLS to read their hosts' requests (`None`: none).
    pub secrets: Option<Arc<SecretsConfig>>,
    /// The connections the command makes directly, sent here by the seccomp supervisor,
    /// and the names its name server gave out (`None`: only proxy clients).
    pub direct: Option<Arc<super::direct::Direct>>,
}

/// The secrets of an exec as the proxy uses them: the values, the capsule's CA (when
/// some secret's host may be reached over TLS) and the upstream TLS configuration, made
/// on first use.
#[derive(Debug)]
pub struct SecretsConfig {
    pub secrets: Secrets,
    pub ca: Ca,
    upstream: std::sync::OnceLock<Result<Arc<rustls::ClientConfig>, String>>,
}

impl SecretsConfig {
    pub fn new(secrets: Secrets, ca: Ca) -> SecretsConfig {
        SecretsConfig {
            secrets,
            ca,
            upstream: Default::default(),
        }
    }

    fn upstream(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        self.upstream
            .get_or_init(|| super::tls::upstream_config().map_err(|e| e.to_string()))
            .clone()
    }
}

/// The outcome of checking a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Connect to these addresses, in order (every one was checked).
    Allow(Vec<SocketAddr>),
    /// Refused by policy: `403` with this reason, recorded in the refusal log.
    Refuse(String),
    /// Could not be decided (the name does not resolve): `502` with this message.
    Unresolved(String),
}

/// A running proxy's shared state; cheap to clone.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: ProxyConfig,
    /// The host services reached at their own address (see [`Allowlist::loopback_services`]).
    services: Vec<SocketAddr>,
    host_addrs: HostAddrs,
    permits: Arc<Semaphore>,
    /// What is known of the sandbox to find who made a connection: its network
    /// namespace, from the first client the relay handed over (`None` inside: it could not
    /// be told), when refusals are listed.
    #[cfg(target_os = "linux")]
    sandbox: std::sync::OnceLock<Option<Arc<super::owner::Sandbox>>>,
    /// Init's diagnostics socket, until the first client takes it into `sandbox`.
    #[cfg(target_os = "linux")]
    diag: std::sync::Mutex<Option<std::os::fd::OwnedFd>>,
    /// The name server runs (its socket came).
    #[cfg(target_os = "linux")]
    dns_started: std::sync::atomic::AtomicBool,
}

impl Proxy {
    pub fn new(cfg: ProxyConfig) -> Proxy {
        let permits = Arc::new(Semaphore::new(cfg.limits.max_connections.max(1)));
        Proxy {
            inner: Arc::new(Inner {
                services: cfg
                    .allowlist
                    .loopback_services()
                    .into_iter()
                    .filter(|a| *a != super::RELAY_ADDR)
                    .collect(),
                cfg,
                host_addrs: HostAddrs::default(),
                permits,
                #[cfg(target_os = "linux")]
                sandbox: std::sync::OnceLock::new(),
                #[cfg(target_os = "linux")]
                diag: std::sync::Mutex::new(None),
                #[cfg(target_os = "linux")]
                dns_started: Default::default(),
            }),
        }
    }

    pub fn config(&self) -> &ProxyConfig {
        &self.inner.cfg
    }

    /// Decide whether `host:port` may be contacted, and at which addresses.
    pub async fn check(&self, host: &Host, port: u16) -> Verdict {
        let cfg = &self.inner.cfg;
        if !cfg.allowlist.allows(host, port) {
            return Verdict::Refuse(if cfg.allowlist.names_host(host) {
                format!("port {port} is not allowed for {host} by the allowlist")
            } else {
                "not on the allowlist".to_string()
            });
        }
        let addrs = match host {
            Host::Ip(ip) => vec![SocketAddr::new(*ip, port)],
            Host::Name(name) => {
                match tokio::time::timeout(
                    cfg.limits.resolve_timeout,
                    cfg.resolver.resolve(name, port),
                )
                .await
                {
                    Ok(Ok(a)) if !a.is_empty() => a,
                    Ok(Ok(_)) => return Verdict::Unresolved(format!("{host} has no addresses")),
                    Ok(Err(e)) => {
                        return Verdict::Unresolved(format!("cannot resolve {host}: {e}"))
                    }
                    Err(_) => return Verdict::Unresolved(format!("resolving {host} timed out")),
                }
            }
        };
        let mut allowed = Vec::new();
        let mut first_refusal = None;
        for a in addrs {
            let ip = a.ip().to_canonical();
            let a = SocketAddr::new(ip, a.port());
            if allowed.contains(&a) {
                continue;
            }
            if cfg.allowlist.names_literal(ip, port) {
                allowed.push(a);
                continue;
            }
            let class = classify(ip).or_else(|| {
                self.inner
                    .host_addrs
                    .contains(ip)
                    .then_some(super::addr::Class::HostOwn)
            });
            match class {
                None => allowed.push(a),
                Some(c) => {
                    first_refusal.get_or_insert_with(|| {
                        let shown = Host::Ip(ip);
                        format!(
                            "{host} resolves to {shown}, {}; only an allowlist entry naming that literal address permits it",
                            c.describe()
                        )
                    });
                }
            }
        }
        match (allowed.is_empty(), first_refusal) {
            (false, _) => Verdict::Allow(allowed),
            (true, Some(r)) => Verdict::Refuse(r),
            (true, None) => Verdict::Unresolved(format!("{host} has no addresses")),
        }
    }

    /// Record a refusal, naming the program behind `who` (call it before answering: the
    /// client then still holds its end).
    async fn refuse_log(&self, host: &Host, port: u16, reason: &str, who: Option<&Who>) {
        let grant =
            crate::refusals::connect_grant(&super::refusal::target(&host.to_string(), port));
        self.refuse_log_granting(host, port, reason, who, Some(grant))
            .await
    }

    /// [`Proxy::refuse_log`] naming `grant` as what would allow it (`None`: no flag would).
    async fn refuse_log_granting(
        &self,
        host: &Host,
        port: u16,
        reason: &str,
        who: Option<&Who>,
        grant: Option<String>,
    ) {
        tracing::info!(%host, port, reason, "proxy refused");
        if let Some(log) = &self.inner.cfg.refusal_log {
            log.record(&host.to_string(), port, reason);
        }
        if let Some(c) = &self.inner.cfg.refusals {
            let (program, pid) = Who::asker(who).await;
            let target = super::refusal::target(&host.to_string(), port);
            c.add(crate::refusals::Event {
                header: None,
                kind: crate::refusals::Kind::Connect,
                grant,
                target,
                program,
                pid,
                reason: Some(reason.to_string()),
            });
        }
    }

    /// Record that the client refused the capsule's certificate for `host:port` (its TLS
    /// `alert`): a program with roots of its own, which a secret's host cannot be reached
    /// from this way. Says what the user can do; no flag of capsule's allows it.
    async fn distrust_log(&self, host: &Host, port: u16, alert: &str, who: Option<&Who>) {
        let reason = format!(
            "does not trust the capsule CA (its TLS alert: {alert}): the program checks this host against roots of its own, not the system's; make it use the system's (the trust file {} inside, SSL_CERT_FILE), or give it the secret by name (--pass-env) so that this host's TLS goes through untouched",
            super::trust::system_trust_paths()
                .first()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "SSL_CERT_FILE names".into())
        );
        self.refuse_log_granting(host, port, &reason, who, None)
            .await
    }

    async fn leak_log(&self, host: &Host, port: u16, leak: &Leak, who: Option<&Who>) {
        tracing::info!(%host, port, secret = %leak.secret, header = %leak.header, "proxy refused a placeholder");
        let cfg = &self.inner.cfg;
        super::refusal::report_leak(
            cfg.refusal_log.as_ref(),
            cfg.refusals.as_ref(),
            &host.to_string(),
            port,
            leak,
            who,
        )
        .await;
    }

    /// The secrets config if some secret is for `host:port`.
    fn secrets_for(&self, host: &Host, port: u16) -> Option<&Arc<SecretsConfig>> {
        self.inner
            .cfg
            .secrets
            .as_ref()
            .filter(|s| s.secrets.for_host(host, port))
    }

    fn site<'a>(
        &'a self,
        sc: &'a SecretsConfig,
        host: &'a Host,
        port: u16,
        who: Option<&'a Who>,
    ) -> Site<'a> {
        let limits = &self.inner.cfg.limits;
        Site {
            host,
            port,
            secrets: &sc.secrets,
            log: self.inner.cfg.refusal_log.as_ref(),
            refusals: self.inner.cfg.refusals.as_ref(),
            who,
            max_head: limits.max_head,
            idle: limits.idle_timeout,
        }
    }

    /// Serve a tunnel to a host a secret is for: TLS terminated with the capsule's CA if
    /// the client starts a handshake (and the real server verified), else plain HTTP;
    /// every request read and substituted ([`intercept`]).
    async fn intercept<S: Conn>(
        &self,
        sc: &SecretsConfig,
        mut client: S,
        mut first: Vec<u8>,
        upstream: TcpStream,
        site: Site<'_>,
    ) {
        let (host, port) = (site.host, site.port);
        let limits = &self.inner.cfg.limits;
        if first.is_empty() {
            let mut b = vec![0u8; 4096];
            match tokio::time::timeout(limits.head_timeout, client.read(&mut b)).await {
                Ok(Ok(n)) if n > 0 => {
                    b.truncate(n);
                    first = b;
                }
                _ => return,
            }
        }
        // a TLS handshake record
        if first[0] != 0x16 {
            return intercept::serve(Prefixed::new(first, client), upstream, site).await;
        }
        let server = match sc.ca.server_config(host) {
            Ok(c) => c,
            Err(e) => return tracing::warn!(%host, "proxy: no certificate for {host}: {e}"),
        };
        let accept = tokio_rustls::TlsAcceptor::from(server).accept(Prefixed::new(first, client));
        let mut tls = match tokio::time::timeout(limits.head_timeout, accept).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                if let Some(alert) = distrusted(&e) {
                    self.distrust_log(host, port, alert, site.who).await;
                }
                return tracing::debug!(%host, "proxy: TLS from the sandbox: {e}");
            }
            Err(_) => return,
        };
        let up = match (sc.upstream(), super::tls::server_name(host)) {
            (Ok(cfg), Ok(name)) => {
                let connect = tokio_rustls::TlsConnector::from(cfg).connect(name, upstream);
                match tokio::time::timeout(limits.connect_timeout, connect).await {
                    Ok(Ok(u)) => Ok(u),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("TLS handshake timed out".to_string()),
                }
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        match up {
            Ok(up) => intercept::serve(tls, up, site).await,
            Err(e) => {
                tracing::info!(%host, port, "proxy: upstream TLS: {e}");
                let body = format!("capsule proxy: TLS to {host}:{port} failed: {e}\n");
                let _ = tls
                    .write_all(&http::simple_response(502, "Bad Gateway", &body))
                    .await;
                let _ = tls.shutdown().await;
            }
        }
    }

    /// Serve one client connection to completion.
    pub async fn handle<S: Conn>(&self, client: S) {
        self.handle_from(client, None).await
    }

    /// [`Proxy::handle`] for a client `who` names (refusals name its program).
    async fn handle_from<S: Conn>(&self, mut client: S, who: Option<Who>) {
        let limits = &self.inner.cfg.limits;
        let deadline = tokio::time::Instant::now() + limits.head_timeout;
        // the first bytes tell SOCKS5 (version byte 5) from HTTP (a method's letter)
        let mut first = vec![0u8; 4096];
        let n = match tokio::time::timeout_at(deadline, client.read(&mut first)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(n)) => n,
            Err(_) => {
                let body = "capsule proxy: timed out waiting for the request head\n";
                return reply(&mut client, 408, "Request Timeout", body).await;
            }
        };
        first.truncate(n);
        if first[0] == socks::VERSION {
            return self
                .handle_socks(client, first, deadline, who.as_ref())
                .await;
        }
        let read = tokio::time::timeout_at(
            deadline,
            http::read_head_after(&mut client, limits.max_head, first),
        )
        .await;
        let (head_bytes, rest) = match read {
            Ok(Ok(h)) => h,
            Ok(Err(HeadError::TooLarge(n))) => {
                let body = format!("capsule proxy: request head larger than {n} bytes\n");
                return reply(&mut client, 431, "Request Header Fields Too Large", &body).await;
            }
            Ok(Err(e)) => {
                tracing::debug!("proxy client: {e}");
                return;
            }
            Err(_) => {
                let body = "capsule proxy: timed out waiting for the request head\n";
                return reply(&mut client, 408, "Request Timeout", body).await;
            }
        };
        let target = match http::parse_head(&head_bytes).and_then(|h| {
            let t = http::target(&h)?;
            Ok((h, t))
        }) {
            Ok(t) => t,
            Err(e) => {
                let body = format!("capsule proxy: bad request: {e}\n");
                return reply(&mut client, 400, "Bad Request", &body).await;
            }
        };
        let (mut head, mut target) = target;
        let (host, port) = {
            let (h, p) = target.host_port();
            (h.clone(), p)
        };
        let host = &host;
        // placeholders: replaced for their hosts (plain forwarding), refused elsewhere
        if let Some(sc) = &self.inner.cfg.secrets {
            let forwarded = matches!(target, Target::Http { .. });
            let mut probe = head.clone();
            match sc.secrets.substitute(&mut probe, host, port) {
                Err(leak) => {
                    self.leak_log(host, port, &leak, who.as_ref()).await;
                    let body = format!("capsule: refused {host}:{port}: {leak}\n");
                    return reply(&mut client, 403, "Forbidden", &body).await;
                }
                Ok(n) if n > 0 && forwarded => {
                    head = probe;
                    match http::target(&head) {
                        Ok(t) => target = t,
                        Err(e) => {
                            let body = format!("capsule proxy: bad request: {e}\n");
                            return reply(&mut client, 400, "Bad Request", &body).await;
                        }
                    }
                }
                Ok(_) => {}
            }
        }
        let addrs = match self.check(host, port).await {
            Verdict::Allow(a) => a,
            Verdict::Refuse(reason) => {
                self.refuse_log(host, port, &reason, who.as_ref()).await;
                let body = format!("capsule: refused {host}:{port}: {reason}\n");
                return reply(&mut client, 403, "Forbidden", &body).await;
            }
            Verdict::Unresolved(msg) => {
                let body = format!("capsule proxy: {msg}\n");
                return reply(&mut client, 502, "Bad Gateway", &body).await;
            }
        };
        let mut upstream = match self.connect_any(&addrs).await {
            Ok(s) => s,
            Err(e) => {
                let (status, reason) = if e.timed_out {
                    (504, "Gateway Timeout")
                } else {
                    (502, "Bad Gateway")
                };
                let msg = e.msg;
                let body = format!("capsule proxy: cannot connect to {host}:{port}: {msg}\n");
                return reply(&mut client, status, reason, &body).await;
            }
        };
        tracing::debug!(%host, port, peer = ?upstream.peer_addr().ok(), "proxy connected");
        let first = match &target {
            Target::Connect { .. } => {
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                if let Some(sc) = self.secrets_for(host, port).cloned() {
                    return self
                        .intercept(
                            &sc,
                            client,
                            rest,
                            upstream,
                            self.site(&sc, host, port, who.as_ref()),
                        )
                        .await;
                }
                rest
            }
            Target::Http {
                authority, path, ..
            } => {
                let mut out = http::rewrite_origin(&head, authority, path);
                out.extend_from_slice(&rest);
                if let Some(sc) = self.secrets_for(host, port).cloned() {
                    // its responses are scrubbed: the request (substituted above) and
                    // what follows go through the same path as a tunnel's
                    let site = self.site(&sc, host, port, who.as_ref());
                    return intercept::serve(Prefixed::new(out, client), upstream, site).await;
                }
                out
            }
        };
        if !first.is_empty() && upstream.write_all(&first).await.is_err() {
            return;
        }
        client
            .tunnel(upstream, limits.buffer, limits.idle_timeout)
            .await;
    }

    /// Serve a SOCKS5 client (see [`socks`]): the same checks, refusals and tunnels as
    /// `CONNECT`, answered in SOCKS5 reply codes.
    async fn handle_socks<S: Conn>(
        &self,
        mut client: S,
        first: Vec<u8>,
        deadline: tokio::time::Instant,
        who: Option<&Who>,
    ) {
        use socks::{rep, SocksError};
        let negotiated = {
            let mut input = socks::Input::new(&first, &mut client);
            match tokio::time::timeout_at(deadline, socks::negotiate(&mut input)).await {
                Ok(Ok(dest)) => Ok((dest, input.rest().to_vec())),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(SocksError::Reply(
                    rep::GENERAL_FAILURE,
                    "timed out waiting for the SOCKS5 request".into(),
                )),
            }
        };
        let ((host, port), rest) = match negotiated {
            Ok(n) => n,
            Err(SocksError::Closed(msg)) => return tracing::debug!("proxy client: {msg}"),
            Err(SocksError::Reply(code, msg)) => {
                tracing::debug!("proxy client: {msg}");
                return socks_fail(&mut client, code).await;
            }
        };
        let addrs = match self.check(&host, port).await {
            Verdict::Allow(a) => a,
            Verdict::Refuse(reason) => {
                self.refuse_log(&host, port, &reason, who).await;
                return socks_fail(&mut client, rep::NOT_ALLOWED).await;
            }
            Verdict::Unresolved(msg) => {
                tracing::debug!("proxy: {msg}");
                return socks_fail(&mut client, rep::HOST_UNREACHABLE).await;
            }
        };
        let mut upstream = match self.connect_any(&addrs).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%host, port, "proxy: cannot connect: {}", e.msg);
                let code = socks::connect_failure(e.kind, e.timed_out);
                return socks_fail(&mut client, code).await;
            }
        };
        tracing::debug!(%host, port, peer = ?upstream.peer_addr().ok(), "proxy connected (socks5)");
        if client
            .write_all(&socks::reply(rep::SUCCEEDED))
            .await
            .is_err()
        {
            return;
        }
        if let Some(sc) = self.secrets_for(&host, port).cloned() {
            return self
                .intercept(
                    &sc,
                    client,
                    rest,
                    upstream,
                    self.site(&sc, &host, port, who),
                )
                .await;
        }
        if !rest.is_empty() && upstream.write_all(&rest).await.is_err() {
            return;
        }
        let limits = &self.inner.cfg.limits;
        client
            .tunnel(upstream, limits.buffer, limits.idle_timeout)
            .await;
    }

    async fn connect_any(&self, addrs: &[SocketAddr]) -> Result<TcpStream, ConnectError> {
        let limits = &self.inner.cfg.limits;
        let mut last = ConnectError {
            msg: "no address".to_string(),
            kind: None,
            timed_out: false,
        };
        for a in addrs {
            match tokio::time::timeout(limits.connect_timeout, TcpStream::connect(a)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Ok(Err(e)) => {
                    last = ConnectError {
                        msg: format!("{a}: {e}"),
                        kind: Some(e.kind()),
                        timed_out: false,
                    }
                }
                Err(_) => {
                    last = ConnectError {
                        msg: format!("{a}: connect timed out"),
                        kind: None,
                        timed_out: true,
                    }
                }
            }
        }
        Err(last)
    }
}

/// A client connection the proxy serves: a TCP or unix stream. Once a destination is
/// allowed and connected, [`Conn::tunnel`] carries bytes both ways until both sides are done:
/// with `splice(2)` on Linux (no copies through the proxy), else by copying.
pub trait Conn: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    fn tunnel(
        self,
        upstream: TcpStream,
        buffer: usize,
        idle: Option<Duration>,
    ) -> impl Future<Output = ()> + Send;
}

macro_rules! conn {
    ($t:ty) => {
        impl Conn for $t {
            async fn tunnel(self, upstream: TcpStream, buffer: usize, idle: Option<Duration>) {
                #[cfg(target_os = "linux")]
                {
                    let _ = buffer;
                    if let Err(e) = super::splice::tunnel(&self, &upstream, idle).await {
                        tracing::debug!("tunnel ended: {e}");
                    }
                }
                #[cfg(not(target_os = "linux"))]
                {
                    let (mut a, mut b) = (self, upstream);
                    // (the idle timeout is tracked by the splice tunnel only)
                    let _ = idle;
                    let _ =
                        tokio::io::copy_bidirectional_with_sizes(&mut a, &mut b, buffer, buffer)
                            .await;
                }
            }
        }
    };
}
conn!(TcpStream);
conn!(tokio::net::UnixStream);

/// Why no allowed address could be connected to (the last address's failure).
struct ConnectError {
    msg: String,
    kind: Option<std::io::ErrorKind>,
    timed_out: bool,
}

/// The TLS alert a client refused the capsule's certificate with, if that is why the
/// handshake failed (`unknown_ca`, `bad_certificate`, `certificate_unknown`...).
fn distrusted(e: &std::io::Error) -> Option<&'static str> {
    use rustls::AlertDescription as A;
    let inner = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    match inner {
        rustls::Error::AlertReceived(a) => match a {
            A::UnknownCA => Some("unknown_ca"),
            A::BadCertificate => Some("bad_certificate"),
            A::CertificateUnknown => Some("certificate_unknown"),
            A::UnsupportedCertificate => Some("unsupported_certificate"),
            A::CertificateExpired => Some("certificate_expired"),
            A::AccessDenied => Some("access_denied"),
            _ => None,
        },
        _ => None,
    }
}

/// Answer a SOCKS5 client with a failure `code` and close.
async fn socks_fail<S: AsyncWrite + Unpin>(client: &mut S, code: u8) {
    let _ = client.write_all(&socks::reply(code)).await;
    let _ = client.shutdown().await;
}

/// Send a closing response, then drain (briefly, boundedly) whatever the client still
/// sends, so closing with unread data does not reset the connection before the client has
/// read the response.
async fn reply<S>(client: &mut S, status: u16, reason: &str, body: &str)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    use tokio::io::AsyncReadExt;
    if client
        .write_all(&http::simple_response(status, reason, body))
        .await
        .is_err()
    {
        return;
    }
    let _ = client.shutdown().await;
    let drain = async {
        let mut buf = [0u8; 8192];
        let mut total = 0usize;
        while total < 1 << 20 {
            match client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
}

//! `capsule proxy`: run the allowlist proxy on its own, in the foreground, on a loopback
//! TCP port and/or a unix socket. For diagnostics and `hack/bench-proxy.sh`; `capsule exec`
//! runs the same proxy itself in allowlist mode.

use crate::exit::{CliError, CliResult};
use crate::net::allowlist::Allowlist;
use crate::net::proxy::{Proxy, ProxyConfig};
use crate::net::refusal::RefusalLog;
use crate::net::resolve::Resolver;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// Run the allowlist proxy in the foreground until interrupted.
///
/// Prints one line per listener: `listening on tcp 127.0.0.1:PORT`, `listening on unix PATH`,
/// `listening on relay 127.0.0.1:PORT` (`--json`: one JSON object per listener). Names resolve through the system resolver, or
/// — in tests only — through the table in CAPSULE_PROXY_TEST_RESOLVE=name=ADDR,...
#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Allow this destination: `host`, `*.suffix`, a literal address, each with an optional
    /// `:PORT` (repeatable).
    #[arg(long = "allow", value_name = "HOST[:PORT]")]
    pub allow: Vec<String>,
    /// Listen on this TCP address (loopback addresses only; port 0 picks a free port).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// Listen on this unix socket.
    #[arg(long, value_name = "PATH")]
    pub unix: Option<PathBuf>,
    /// Also run the sandbox-side relay on this loopback address, handing its connections
    /// to the proxy as `capsule exec` does (the whole allowlist path minus the sandbox; for
    /// benchmarks).
    #[arg(long, value_name = "ADDR:PORT")]
    pub relay: Option<SocketAddr>,
    /// A secret, as `capsule exec --secret`: its value from this environment, put in for
    /// these hosts only, HTTPS to them terminated with the CA kept in --ca-dir
    /// (repeatable; for diagnostics and benchmarks).
    #[arg(
        long = "secret",
        value_name = "NAME=HOST[:PORT][,...]",
        requires = "ca_dir"
    )]
    pub secret: Vec<String>,
    /// Where the CA for --secret lives (`proxy-ca.key`, `proxy-ca.pem`; made if missing).
    #[arg(long = "ca-dir", value_name = "DIR")]
    pub ca_dir: Option<PathBuf>,
    /// Append refusals (JSON lines) to this file.
    #[arg(long, value_name = "PATH")]
    pub refusal_log: Option<PathBuf>,
    /// Print the listeners as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ProxyArgs) -> CliResult {
    if a.listen.is_none() && a.unix.is_none() && a.relay.is_none() {
        return Err(CliError::new(
            crate::exit::USAGE,
            "give --listen 127.0.0.1:PORT, --unix PATH and/or --relay 127.0.0.1:PORT",
        ));
    }
    for (flag, addr) in [("--listen", a.listen), ("--relay", a.relay)] {
        if let Some(l) = addr {
            if !l.ip().is_loopback() {
                return Err(CliError::new(
                    crate::exit::USAGE,
                    format!("{flag} {l}: the proxy listens on loopback addresses only"),
                ));
            }
        }
    }
    let allowlist = Allowlist::parse(&a.allow).map_err(|e| CliError::failure(e.to_string()))?;
    let resolver = Resolver::from_env().map_err(CliError::failure)?;
    let refusal_log = match &a.refusal_log {
        Some(p) => Some(
            RefusalLog::open(p)
                .map_err(|e| CliError::failure(format!("refusal log {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let secrets = match &a.ca_dir {
        Some(dir) if !a.secret.is_empty() => {
            let mut net = capsule_bundle::policy::NetworkPolicy::default();
            crate::net::secrets::add_to_policy(&mut net, &a.secret)
                .map_err(|e| CliError::failure(e.to_string()))?;
            let s = crate::net::secrets::Secrets::load(&net.secrets, &[], |n| std::env::var_os(n))
                .map_err(|e| CliError::failure(e.to_string()))?;
            let ca = crate::net::tls::Ca::load_or_create(dir)
                .map_err(|e| CliError::failure(e.to_string()))?;
            Some(std::sync::Arc::new(crate::net::proxy::SecretsConfig::new(
                s, ca,
            )))
        }
        _ => None,
    };
    crate::net::proxy::ensure_fd_budget(&Default::default());
    let proxy = Proxy::new(ProxyConfig {
        allowlist,
        resolver,
        refusal_log,
        refusals: None,
        limits: Default::default(),
        secrets,
        direct: None,
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the proxy runtime: {e}")))?;
    rt.block_on(async move {
        let mut tasks = Vec::new();
        if let Some(addr) = a.listen {
            let l = crate::net::listen::tcp(addr)
                .and_then(|l| l.set_nonblocking(true).map(|_| l))
                .and_then(tokio::net::TcpListener::from_std)
                .map_err(|e| CliError::failure(format!("cannot listen on {addr}: {e}")))?;
            let local = l
                .local_addr()
                .map_err(|e| CliError::failure(e.to_string()))?;
            announce(a.json, "tcp", &local.to_string());
            let p = proxy.clone();
            tasks.push(tokio::spawn(async move {
                p.serve_tcp(l, std::future::pending()).await
            }));
        }
        let mut cleanup = None;
        if let Some(path) = &a.unix {
            let std_l = crate::net::host::bind_socket(path).map_err(|e| {
                CliError::failure(format!("cannot listen on {}: {e}", path.display()))
            })?;
            let l = tokio::net::UnixListener::from_std(std_l)
                .map_err(|e| CliError::failure(e.to_string()))?;
            announce(a.json, "unix", &path.display().to_string());
            cleanup = Some(path.clone());
            let p = proxy.clone();
            tasks.push(tokio::spawn(async move {
                p.serve_unix(l, std::future::pending()).await
            }));
        }
        #[cfg(target_os = "linux")]
        if let Some(r) = a.relay {
            let (proxy_end, relay_end) = crate::net::handoff::channel()
                .map_err(|e| CliError::failure(format!("cannot make the relay's channel: {e}")))?;
            let bound = crate::net::relay::spawn(r, relay_end)
                .map_err(|e| CliError::failure(format!("cannot listen on {r}: {e}")))?;
            announce(a.json, "relay", &bound.to_string());
            let p = proxy.clone();
            tasks.push(tokio::spawn(async move {
                p.serve_handoff(proxy_end, std::future::pending()).await
            }));
        }
        #[cfg(not(target_os = "linux"))]
        if a.relay.is_some() {
            return Err(CliError::new(
                crate::exit::USAGE,
                "--relay: the sandbox relay exists on Linux only",
            ));
        }
        let _ = tokio::signal::ctrl_c().await;
        if let Some(p) = cleanup {
            let _ = std::fs::remove_file(p);
        }
        Ok::<_, CliError>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn announce(json: bool, kind: &str, addr: &str) {
    use std::io::Write;
    if json {
        super::print_json(&serde_json::json!({"listening": kind, "address": addr}));
    } else {
        println!("listening on {kind} {addr}");
    }
    let _ = std::io::stdout().flush();
}

//! The network part of one `capsule exec` on Linux: choose the mode (capsule policy and
//! exec flags, see [`super::plan`]), and for allowlist mode wire the pieces into the
//! executor:
//!
//! 1. [`ExecNet::prepare`] (host, before `linux::run`, single-threaded): makes the proxy's
//!    [handoff channel](super::handoff) (a socketpair: nothing in the file system, nothing
//!    to mount); the proxy reports its refusals to the exec's
//!    [`Collector`](crate::refusals::Collector), which writes `refusals.jsonl` at the end;
//! 2. [`ExecNet::apply`] adds to the [`ExecPlan`]: the proxy environment and the network
//!    namespace flags;
//! 3. [`ExecNet::hooks`] adds the init hook that starts the relay on [`RELAY_ADDR`] inside
//!    the sandbox's namespace (before the command is released) with the relay's end of the
//!    channel, which init inherited across the clone (close-on-exec: the command never has
//!    it); and chains a `before_release` hook that closes the supervisor's copy of that end
//!    and starts the proxy thread (after `clone`, so the executor forks while
//!    single-threaded);
//! 4. [`ExecNet::finish`] stops the proxy.
//!
//! Allowlist mode needs a network namespace of the sandbox's own. Without one (weaker
//! isolation) the command gets no TCP at all (Landlock refuses it), which is stricter than
//! asked and recorded as such; with `--no-sandbox` nothing is restricted.

use super::allowlist::Allowlist;
use super::host::{HostProxy, RunningProxy};
use super::proxy::{ProxyConfig, SecretsConfig};
use super::publish::ExecPublish;
use super::resolve::Resolver;
use super::secrets::Secrets;
use super::tls::Ca;
use super::{plan, proxy_env, NetFlags, NetPlan, PlanError, RELAY_ADDR};
use crate::linux::{ExecPlan, Hooks, Isolation};
use capsule_bundle::layout::bundle_files;
use capsule_bundle::policy::NetworkPolicy;
use std::cell::RefCell;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// Why the network of an exec could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("network proxy: {what} {}: {err}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        err: std::io::Error,
    },
    #[error("network proxy: cannot make the relay's channel: {0}")]
    Channel(std::io::Error),
    #[error("network proxy: {0}")]
    Resolver(String),
    #[error(transparent)]
    Secret(#[from] super::secrets::SecretError),
    #[error("secrets: {0}")]
    Tls(#[from] super::tls::TlsError),
    #[error("{0}")]
    Publish(String),
}

impl NetError {
    /// Bad input (an allowlist entry, conflicting flags) rather than a setup failure.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            NetError::Plan(PlanError::Entry(_) | PlanError::Conflict(..))
                | NetError::Secret(_)
                | NetError::Publish(_)
        )
    }
}

/// What the sandbox trusts ([`super::trust`]): the trust file bound read-only over each
/// system CA bundle and the Java store over each JDK trust store, and the variables tools
/// read the trust file from pointing there. Returns the Java store's path inside.
fn apply_trust(plan: &mut ExecPlan, trust: &super::trust::TrustFiles) -> Option<PathBuf> {
    use super::trust::{java_trust_paths, system_trust_paths, TRUST_ENV};
    let bind = |plan: &mut ExecPlan, src: &Path, dsts: &[PathBuf]| {
        for dst in dsts {
            plan.mounts.push(crate::linux::plan::MountStep::Bind {
                src: src.to_path_buf(),
                dst: dst.clone(),
                rw: false,
                optional: false,
            });
        }
    };
    let paths = system_trust_paths();
    bind(plan, &trust.pem, &paths);
    if let Some(inside) = paths.first() {
        plan.env
            .retain(|(k, _)| !TRUST_ENV.iter().any(|n| k.to_str() == Some(n)));
        plan.env.extend(
            TRUST_ENV
                .iter()
                .map(|n| ((*n).into(), inside.as_os_str().to_owned())),
        );
    }
    let java = java_trust_paths();
    bind(plan, &trust.java, &java);
    java.into_iter().next()
}

/// The sandbox's `/etc/resolv.conf` in the bundle directory (direct connections).
pub const RESOLV_FILE: &str = "proxy-resolv.conf";

/// Can direct connections be sent to the proxy here? It takes `pidfd_getfd` (Linux 5.6)
/// and a seccomp supervisor that can let calls go on (Linux 5.5).
fn direct_supported() -> Result<(), String> {
    if !crate::kernel::seccomp::continue_supported() {
        return Err(
            "this kernel's seccomp cannot hand calls to capsule's supervisor (Linux 5.5)".into(),
        );
    }
    // SAFETY: pidfd_getfd on a descriptor that cannot be a pidfd: EBADF where it exists.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, -1, 0, 0) };
    if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
        return Err("this kernel has no pidfd_getfd (Linux 5.6)".into());
    }
    Ok(())
}

/// Where the sandbox reads its name servers from, when the host's `/etc/resolv.conf` is
/// there inside to be covered: the file itself, or what its link leads to outside `/run`
/// (which the sandbox does not have; a link dangling inside leaves resolvers on their
/// default, `127.0.0.1`, the name server's address all the same).
fn resolv_conf_inside() -> Option<PathBuf> {
    let etc = Path::new("/etc/resolv.conf");
    let md = std::fs::symlink_metadata(etc).ok()?;
    if md.is_file() {
        return Some(etc.to_path_buf());
    }
    let target = std::fs::canonicalize(etc).ok()?;
    let regular = std::fs::symlink_metadata(&target).is_ok_and(|m| m.is_file());
    (regular && !target.starts_with("/run") && !target.starts_with("/var/run")).then_some(target)
}

/// Write `data` to `dir/name` unless it holds exactly that already (its identity then
/// stays, and with it a prepared root that binds it).
fn write_unchanged(dir: &Path, name: &str, data: &[u8]) -> Result<PathBuf, NetError> {
    let path = dir.join(name);
    let same = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file())
        && std::fs::read(&path).is_ok_and(|d| d == data);
    if same {
        return Ok(path);
    }
    super::tls::write_replace(dir, name, data, 0o644).map_err(NetError::Tls)
}

/// The network of one exec.
pub struct ExecNet {
    plan: NetPlan,
    /// Bound, not yet serving (allowlist mode).
    proxy: Rc<RefCell<Option<HostProxy>>>,
    running: Rc<RefCell<Option<RunningProxy>>>,
    /// The relay's end of the channel (allowlist mode): taken by init's hook in the
    /// sandbox, and by the supervisor (to close its copy) once the sandbox is cloned.
    relay_end: Option<Arc<Mutex<Option<OwnedFd>>>>,
    refusal_log: PathBuf,
    /// Set by [`ExecNet::apply`] when the mode could not be given as asked.
    note: RefCell<Option<String>>,
    /// Each secret's name and placeholder (the command's environment).
    secret_env: Vec<(String, String)>,
    /// The sandbox's trust files on the host (secrets in allowlist mode, or the test
    /// roots).
    trust: Option<super::trust::TrustFiles>,
    /// Published ports (`--publish`, `sandbox.publish`).
    publish: Option<ExecPublish>,
    /// The command's direct connections (allowlist mode), and the sandbox's
    /// `/etc/resolv.conf` naming the name server that goes with them (on the host).
    direct: Option<(Arc<super::direct::Direct>, PathBuf)>,
}

impl ExecNet {
    /// Decide the network of this exec from the (effective) policy's network part; for
    /// allowlist mode make the proxy's channel. Prints the open-network warning.
    /// `secret_files`: the `--secret-file NAME=PATH` flags.
    pub fn prepare(
        network: &NetworkPolicy,
        bundle_dir: &Path,
        secret_files: &[String],
        refusals: Arc<crate::refusals::Collector>,
    ) -> Result<ExecNet, NetError> {
        let plan = plan(network, &NetFlags::default())?;
        let files = secret_files
            .iter()
            .map(|f| super::secrets::parse_file_flag(f))
            .collect::<Result<Vec<_>, _>>()?;
        let secrets = if network.secrets.is_empty() && files.is_empty() {
            None
        } else {
            Some(Secrets::load(&network.secrets, &files, |n| {
                std::env::var_os(n)
            })?)
        };
        let refusal_log = bundle_dir.join(bundle_files::REFUSALS);
        let mut net = ExecNet {
            plan,
            proxy: Rc::default(),
            running: Rc::default(),
            relay_end: None,
            refusal_log,
            note: RefCell::new(None),
            secret_env: secrets.as_ref().map(Secrets::env).unwrap_or_default(),
            trust: None,
            publish: None,
            direct: None,
        };
        if !network.publish.is_empty() {
            match net.plan {
                NetPlan::Off => return Err(NetError::Publish(
                    "--publish: the sandbox has no network at all (--no-network): nothing inside can be published".into(),
                )),
                NetPlan::Open => return Err(NetError::Publish(
                    "--publish: with the open network the command's servers are on the host's network already; publish needs the sandbox's own (none or an allowlist)".into(),
                )),
                NetPlan::Loopback | NetPlan::Allowlist(_) => {}
            }
            net.publish = ExecPublish::prepare(&network.publish).map_err(NetError::Publish)?;
        }
        match &net.plan {
            NetPlan::Allowlist(list) => {
                let cfg = ProxyConfig {
                    allowlist: list.clone(),
                    resolver: Resolver::from_env().map_err(NetError::Resolver)?,
                    refusal_log: None,
                    refusals: Some(refusals),
                    limits: Default::default(),
                    secrets: None,
                    direct: None,
                };
                let mut cfg = cfg;
                let test_roots = super::tls::test_roots()?;
                let secrets = secrets.filter(|s| !s.is_empty());
                let ca = secrets
                    .as_ref()
                    .map(|_| Ca::load_or_create(bundle_dir))
                    .transpose()?;
                if ca.is_some() || test_roots.is_some() {
                    net.trust = Some(super::trust::write(
                        bundle_dir,
                        ca.as_ref(),
                        test_roots.as_deref(),
                    )?);
                }
                if let (Some(secrets), Some(ca)) = (secrets, ca) {
                    cfg.secrets = Some(Arc::new(SecretsConfig::new(secrets, ca)));
                }
                match direct_supported() {
                    Ok(()) => {
                        let names = Arc::new(super::fakeip::FakeIps::new());
                        let d = Arc::new(super::direct::Direct::new(names, list.clone(), RELAY_ADDR));
                        let resolv = write_unchanged(
                            bundle_dir,
                            RESOLV_FILE,
                            super::dns::RESOLV_CONF.as_bytes(),
                        )?;
                        cfg.direct = Some(d.clone());
                        net.direct = Some((d, resolv));
                    }
                    Err(why) => eprintln!(
                        "capsule: note: connections the command makes directly, ignoring HTTP(S)_PROXY, are not sent to the proxy: {why}; only clients using the proxy reach the allowed hosts"
                    ),
                }
                let (hp, relay_end) = HostProxy::new(cfg).map_err(NetError::Channel)?;
                *net.proxy.borrow_mut() = Some(hp);
                net.relay_end = Some(Arc::new(Mutex::new(Some(relay_end))));
            }
            NetPlan::Open => eprintln!(
                "capsule: WARNING: open network: the command can reach the host's network and the internet without restriction"
            ),
            NetPlan::Loopback | NetPlan::Off => {}
        }
        Ok(net)
    }

    pub fn plan(&self) -> &NetPlan {
        &self.plan
    }

    /// The allowlist in force (allowlist mode).
    pub fn allowlist(&self) -> Option<&Allowlist> {
        match &self.plan {
            NetPlan::Allowlist(l) => Some(l),
            _ => None,
        }
    }

    /// The host's loopback services the allowlist names (address and port): reached
    /// inside at that same address, the relay listening there.
    fn loopback_services(&self) -> Vec<std::net::SocketAddr> {
        let mut v = self
            .allowlist()
            .map(|l| l.loopback_services())
            .unwrap_or_default();
        v.retain(|a| *a != RELAY_ADDR);
        v
    }

    /// Does this exec get the proxy (allowlist mode under full isolation)?
    fn proxied(&self, isolation: Isolation) -> bool {
        self.relay_end.is_some() && isolation == Isolation::Full
    }

    /// Set the network fields of `plan` (built for its isolation level): namespace,
    /// loopback, and in allowlist mode the proxy environment (no mount: the relay's channel
    /// is inherited, see [`ExecNet::hooks`]).
    pub fn apply(&self, plan: &mut ExecPlan) {
        plan.new_netns = self.plan.own_namespace();
        plan.network_off = self.plan == NetPlan::Off;
        // a secret's name is its placeholder, whatever else would set it
        if !self.secret_env.is_empty() {
            plan.env.retain(|(k, _)| {
                !self
                    .secret_env
                    .iter()
                    .any(|(n, _)| k.to_str() == Some(n.as_str()))
            });
            plan.env
                .extend(self.secret_env.iter().map(|(k, v)| (k.into(), v.into())));
            plan.env.sort();
        }
        if self.proxied(plan.isolation) {
            let java_trust = self.trust.as_ref().and_then(|t| apply_trust(plan, t));
            let java_before = plan
                .env
                .iter()
                .find(|(k, _)| k == "JAVA_TOOL_OPTIONS")
                .and_then(|(_, v)| v.to_str().map(str::to_string));
            let mut env = proxy_env(RELAY_ADDR);
            env.extend(super::tools::env(
                RELAY_ADDR,
                java_trust.as_deref(),
                java_before.as_deref(),
            ));
            plan.env
                .retain(|(k, _)| !env.iter().any(|(n, _)| k.to_str() == Some(n.as_str())));
            plan.env
                .extend(env.into_iter().map(|(k, v)| (k.into(), v.into())));
            plan.env.sort();
            if let Some((_, resolv)) = &self.direct {
                if let Some(dst) = resolv_conf_inside() {
                    plan.mounts.push(crate::linux::plan::MountStep::Bind {
                        src: resolv.clone(),
                        dst,
                        rw: false,
                        optional: false,
                    });
                }
            }
            *self.note.borrow_mut() = None;
        } else if self.relay_end.is_some() && plan.isolation == Isolation::Weaker {
            *self.note.borrow_mut() = Some(
                "network allowlist needs a network namespace: under weaker isolation the command gets no TCP at all (stricter than asked)".into(),
            );
        }
    }

    /// What [`ExecNet::apply`] could not give as asked (for the record's degradation list).
    pub fn degradation(&self) -> Option<String> {
        self.note.borrow().clone()
    }

    /// Add this exec's network hooks to `hooks`, for a plan of `isolation`: the relay
    /// (allowlist mode) and the published ports' connector (own network namespace only).
    pub fn hooks(&self, hooks: Hooks, isolation: Isolation) -> Hooks {
        let hooks = self.proxy_hooks(hooks, isolation);
        match &self.publish {
            Some(p) if isolation == Isolation::Full => {
                p.hooks(hooks, Some(super::proxy::DEFAULT_IDLE_TIMEOUT))
            }
            Some(_) => {
                *self.note.borrow_mut() = Some(
                    "published ports need the sandbox's own network namespace: not published under weaker isolation".into(),
                );
                hooks
            }
            None => hooks,
        }
    }

    fn proxy_hooks(&self, mut hooks: Hooks, isolation: Isolation) -> Hooks {
        if !self.proxied(isolation) {
            return hooks;
        }
        let direct = self.direct.is_some();
        if let Some((d, _)) = &self.direct {
            hooks.connects = Some(d.clone());
        }
        let Some(end) = self.relay_end.clone() else {
            return hooks;
        };
        // clone copies the address space: init takes the end from its copy of the slot,
        // the supervisor (below) from its own
        let inside = end.clone();
        let services = self.loopback_services();
        hooks.inside.push(Box::new(move || {
            let fd = inside
                .lock()
                .map_err(|_| "network relay: channel slot poisoned".to_string())?
                .take()
                .ok_or_else(|| "network relay: no channel to the proxy".to_string())?;
            // first, a socket of this namespace for the proxy to find who made a
            // connection it refuses (without one it reads the namespace's TCP tables)
            match super::owner::diag_socket() {
                Ok(d) => {
                    if let Err(e) = super::handoff::send_diag(fd.as_fd(), d.as_fd()) {
                        tracing::debug!("network relay: diagnostics socket not sent: {e}");
                    }
                }
                Err(e) => tracing::debug!("network relay: no diagnostics socket: {e}"),
            }
            // the name server's socket (direct connections): bound here, where port 53
            // may be bound, served by the proxy
            if direct {
                let dns = super::handoff::bind_dns()
                    .map_err(|e| format!("network relay: the name server's socket: {e}"))?;
                super::handoff::send_dns(fd.as_fd(), dns.as_fd())
                    .map_err(|e| format!("network relay: the name server's socket: {e}"))?;
            }
            let mut listens = vec![RELAY_ADDR];
            listens.extend(services.iter().copied());
            super::relay::spawn_all(&listens, fd)
                .map(|_| ())
                .map_err(|e| format!("network relay: {e}"))
        }));
        let prev = hooks.before_release.take();
        let proxy = self.proxy.clone();
        let running = self.running.clone();
        hooks.before_release = Some(Box::new(move || {
            // init has its copy now; once ours is closed too, the channel ends when the
            // sandbox does
            if let Ok(mut slot) = end.lock() {
                slot.take();
            }
            if let Some(p) = proxy.borrow_mut().take() {
                match p.start() {
                    Ok(r) => *running.borrow_mut() = Some(r),
                    // the relay answers 502 to every request: visible, not silent
                    Err(e) => eprintln!("capsule: cannot start the network proxy: {e}"),
                }
            }
            if let Some(f) = prev {
                f();
            }
        }));
        hooks
    }

    /// The network part of the exec record.
    pub fn record(&self) -> serde_json::Value {
        let mut v = serde_json::json!({ "mode": self.plan.mode().as_str() });
        if let NetPlan::Allowlist(l) = &self.plan {
            v["allow"] = l.entries().iter().map(|e| e.to_string()).collect();
            if self.relay_end.is_some() {
                v["proxy"] = format!("http://{RELAY_ADDR}").into();
                v["socks"] = format!("socks5h://{RELAY_ADDR}").into();
                if self.direct.is_some() {
                    v["direct"] = "sent to the proxy".into();
                    v["name_server"] = super::handoff::DNS_ADDR.to_string().into();
                }
                v["refusal_log"] = self.refusal_log.display().to_string().into();
                let services = self.loopback_services();
                if !services.is_empty() {
                    v["host_services"] = services.iter().map(|a| a.to_string()).collect();
                }
            }
        }
        if !self.secret_env.is_empty() {
            // names and hosts; never a value (nor the placeholder)
            v["secrets"] = self.secret_env.iter().map(|(n, _)| n.clone()).collect();
        }
        if let Some(p) = &self.publish {
            v["published"] = serde_json::to_value(p.bound()).unwrap_or_default();
        }
        if self.plan == NetPlan::Open {
            v["warning"] = "the host's network, unrestricted".into();
        }
        v
    }

    /// Stop the proxy (if it ran).
    pub fn finish(&self) {
        if let Some(r) = self.running.borrow_mut().take() {
            r.stop();
        }
        if let Some(p) = &self.publish {
            p.finish();
        }
        self.proxy.borrow_mut().take();
        if let Some(end) = &self.relay_end {
            if let Ok(mut slot) = end.lock() {
                slot.take();
            }
        }
    }
}

impl Drop for ExecNet {
    fn drop(&mut self) {
        self.finish();
    }
}

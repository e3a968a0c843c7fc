//! The network part of one `capsule exec` on Linux: choose the mode (capsule policy and
//! exec flags, see [`super::plan`]), and for allowlist mode wire the pieces into the
//! executor:
//!
//! 1. [`ExecNet::prepare`] (host, before `linux::run`, single-threaded): binds the proxy's
//!    unix socket in the bundle directory (`proxy-<pid>.sock`) and opens `refusals.jsonl`;
//! 2. [`ExecNet::apply`] adds to the [`ExecPlan`]: a bind of that socket at
//!    [`SANDBOX_PROXY_SOCKET`], the proxy environment, the network namespace flags;
//! 3. [`ExecNet::hooks`] adds the init hook that starts the relay on [`RELAY_ADDR`] inside
//!    the sandbox's namespace (before the command is released), and chains a
//!    `before_release` hook that starts the proxy thread (after `clone`, so the executor
//!    forks while single-threaded);
//! 4. [`ExecNet::finish`] stops the proxy and removes its socket.
//!
//! Allowlist mode needs a network namespace of the sandbox's own. Without one (weaker
//! isolation) the command gets no TCP at all (Landlock refuses it), which is stricter than
//! asked and recorded as such; with `--no-sandbox` nothing is restricted.

use super::allowlist::Allowlist;
use super::host::{HostProxy, RunningProxy};
use super::proxy::ProxyConfig;
use super::refusal::RefusalLog;
use super::resolve::Resolver;
use super::{host_socket_path, plan, proxy_env, NetFlags, NetPlan, PlanError};
use super::{RELAY_ADDR, SANDBOX_PROXY_SOCKET};
use crate::linux::{ExecPlan, Hooks, Isolation, MountStep};
use capsule_bundle::layout::bundle_files;
use capsule_bundle::policy::NetworkPolicy;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

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
    #[error("network proxy: {0}")]
    Resolver(String),
}

impl NetError {
    /// Bad input (an allowlist entry, conflicting flags) rather than a setup failure.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            NetError::Plan(PlanError::Entry(_) | PlanError::Conflict(..))
        )
    }
}

/// The network of one exec.
pub struct ExecNet {
    plan: NetPlan,
    /// Bound, not yet serving (allowlist mode).
    proxy: Rc<RefCell<Option<HostProxy>>>,
    running: Rc<RefCell<Option<RunningProxy>>>,
    socket: Option<PathBuf>,
    refusal_log: PathBuf,
    /// Set by [`ExecNet::apply`] when the mode could not be given as asked.
    note: RefCell<Option<String>>,
}

impl ExecNet {
    /// Decide the network of this exec from the (effective) policy's network part; for
    /// allowlist mode bind the proxy socket in `bundle_dir`. Prints the open-network warning.
    pub fn prepare(network: &NetworkPolicy, bundle_dir: &Path) -> Result<ExecNet, NetError> {
        let plan = plan(network, &NetFlags::default())?;
        let refusal_log = bundle_dir.join(bundle_files::REFUSALS);
        let mut net = ExecNet {
            plan,
            proxy: Rc::default(),
            running: Rc::default(),
            socket: None,
            refusal_log,
            note: RefCell::new(None),
        };
        match &net.plan {
            NetPlan::Allowlist(list) => {
                let cfg = ProxyConfig {
                    allowlist: list.clone(),
                    resolver: Resolver::from_env().map_err(NetError::Resolver)?,
                    refusal_log: Some(RefusalLog::open(&net.refusal_log).map_err(|err| {
                        NetError::Io {
                            what: "cannot open the refusal log",
                            path: net.refusal_log.clone(),
                            err,
                        }
                    })?),
                    limits: Default::default(),
                };
                let path = host_socket_path(bundle_dir);
                let hp = HostProxy::bind(&path, cfg).map_err(|err| NetError::Io {
                    what: "cannot create its socket",
                    path: path.clone(),
                    err,
                })?;
                *net.proxy.borrow_mut() = Some(hp);
                net.socket = Some(path);
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

    /// Does this exec get the proxy (allowlist mode under full isolation)?
    fn proxied(&self, isolation: Isolation) -> bool {
        self.socket.is_some() && isolation == Isolation::Full
    }

    /// Set the network fields of `plan` (built for its isolation level): namespace,
    /// loopback, and in allowlist mode the socket bind and the proxy environment.
    pub fn apply(&self, plan: &mut ExecPlan) {
        plan.new_netns = self.plan.own_namespace();
        plan.network_off = self.plan == NetPlan::Off;
        if let (Some(sock), true) = (&self.socket, self.proxied(plan.isolation)) {
            plan.mounts.push(MountStep::Bind {
                src: sock.clone(),
                dst: SANDBOX_PROXY_SOCKET.into(),
                rw: true,
                optional: false,
            });
            let env = proxy_env(RELAY_ADDR);
            plan.env
                .retain(|(k, _)| !env.iter().any(|(n, _)| k.to_str() == Some(n.as_str())));
            plan.env
                .extend(env.into_iter().map(|(k, v)| (k.into(), v.into())));
            plan.env.sort();
            *self.note.borrow_mut() = None;
        } else if self.socket.is_some() && plan.isolation == Isolation::Weaker {
            *self.note.borrow_mut() = Some(
                "network allowlist needs a network namespace: under weaker isolation the command gets no TCP at all (stricter than asked)".into(),
            );
        }
    }

    /// What [`ExecNet::apply`] could not give as asked (for the record's degradation list).
    pub fn degradation(&self) -> Option<String> {
        self.note.borrow().clone()
    }

    /// Add this exec's network hooks to `hooks`, for a plan of `isolation`.
    pub fn hooks(&self, mut hooks: Hooks, isolation: Isolation) -> Hooks {
        if !self.proxied(isolation) {
            return hooks;
        }
        hooks.inside.push(Box::new(|| {
            super::relay::spawn(RELAY_ADDR, Path::new(SANDBOX_PROXY_SOCKET))
                .map(|_| ())
                .map_err(|e| format!("network relay on {RELAY_ADDR}: {e}"))
        }));
        let prev = hooks.before_release.take();
        let proxy = self.proxy.clone();
        let running = self.running.clone();
        hooks.before_release = Some(Box::new(move || {
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
            if self.socket.is_some() {
                v["proxy"] = format!("http://{RELAY_ADDR}").into();
                v["refusal_log"] = self.refusal_log.display().to_string().into();
            }
        }
        if self.plan == NetPlan::Open {
            v["warning"] = "the host's network, unrestricted".into();
        }
        v
    }

    /// Stop the proxy (if it ran) and remove its socket.
    pub fn finish(&self) {
        if let Some(r) = self.running.borrow_mut().take() {
            r.stop();
        }
        self.proxy.borrow_mut().take();
        if let Some(s) = &self.socket {
            let _ = std::fs::remove_file(s);
        }
    }
}

impl Drop for ExecNet {
    fn drop(&mut self) {
        self.finish();
    }
}

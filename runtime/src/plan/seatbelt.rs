//! The exec plan on macOS: [`plan`] turns the policy resolved for one exec
//! ([`SeatbeltRequest`]: the capsule's policy with this exec's choices, as
//! `crate::exec::resolve_policy` or `capsule seatbelt` resolved it) and a snapshot of the
//! host's paths ([`SeatbeltFacts`], gathered before by [`gather`]) into the
//! [`SeatbeltPlan`] that the Seatbelt rendering ([`render`]) translates into a profile,
//! for `capsule exec` on macOS (`crate::macos::run`) and `capsule seatbelt`. It is a pure
//! function: no system call; the same input gives the same plan.
//!
//! What it decides: the hidden paths (the policy's, and the home's default credential,
//! personal and agent-login paths whether or not they exist yet), the home view (the home
//! hidden but for its visible list and the PATH and SDK folders of the command's
//! environment, read-only), the writable set (the policy's, the task's TMPDIR, the home
//! layer and the cache folder, which the task environment's `HOME`, `XDG_*` and cache
//! variables point at: Seatbelt cannot redirect a write), the network mode, every path
//! canonical as Seatbelt matches it. What this backend adds to the policy is
//! `capsule_seatbelt::effective_policy`; the rendering adds nothing.

use capsule_bundle::policy::{
    env_dirs, NetworkMode, SandboxPolicy, HOME_AGENT_LOGINS, HOME_CREDENTIALS, HOME_PERSONAL,
    HOME_VISIBLE,
};
use capsule_seatbelt::canon::canonicalize;
use capsule_seatbelt::{
    effective_policy, env::task_env, render_checked, CheckError, GenError, Generated, Nonce,
    ProfileInputs, Resolver,
};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One exec on macOS as decided before its plan.
#[derive(Debug, Clone)]
pub struct SeatbeltRequest<'a> {
    /// The exec's policy (the capsule's, with this exec's flags applied).
    pub policy: &'a SandboxPolicy,
    /// The refusal nonce of this exec (its profile's `deny default` message).
    pub nonce: Nonce,
    /// Network mode of this exec (default: the policy's).
    pub network: Option<NetworkMode>,
    /// Port of capsule's allowlist proxy on loopback (allowlist mode).
    pub proxy_port: Option<u16>,
    /// Allow `com.apple.SecurityServer` (the keychain).
    pub allow_keychain: bool,
    /// The task's own TMPDIR (default: the policy's `tmp_dir`).
    pub tmpdir: Option<PathBuf>,
    /// The command's environment before the task's own variables; its PATH and SDK
    /// folders are shown where they lie in the home.
    pub env: Vec<(OsString, OsString)>,
}

impl SeatbeltRequest<'_> {
    fn inputs(&self) -> ProfileInputs<'_> {
        let mut inp = ProfileInputs::new(self.policy, self.nonce.clone());
        inp.tmpdir = self.tmpdir.clone();
        inp.network = self.network;
        inp.proxy_port = self.proxy_port;
        inp.allow_keychain = self.allow_keychain;
        inp.env_dirs = env_dirs(self.env.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str())));
        inp
    }
    fn task_tmpdir(&self) -> &Path {
        self.tmpdir.as_deref().unwrap_or(&self.policy.tmp_dir)
    }
}

/// The host's paths a plan looks at: for each (lexically clean) path and each of its
/// ancestors, its real path, or `None` where it does not exist. A [`Resolver`] that makes
/// no system call; a path not looked at by [`gather`] resolves as if it did not exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeatbeltFacts {
    pub real_paths: BTreeMap<PathBuf, Option<PathBuf>>,
}

impl Resolver for SeatbeltFacts {
    fn real_path(&self, p: &Path) -> Option<PathBuf> {
        self.real_paths.get(p).cloned().flatten()
    }
}

impl SeatbeltFacts {
    fn look(&mut self, p: &Path, r: &dyn Resolver) {
        let Ok(clean) = capsule_seatbelt::canon::lexical(p) else {
            return; // the plan refuses it (GenError::Path) without looking
        };
        for a in clean.ancestors() {
            if self.real_paths.contains_key(a) {
                continue;
            }
            self.real_paths.insert(a.to_path_buf(), r.real_path(a));
        }
    }
}

/// The paths of the host the plan of `req` resolves, looked up with `r` (the host's file
/// system on a Mac, a model of macOS's symlinks elsewhere).
pub fn gather(req: &SeatbeltRequest<'_>, r: &dyn Resolver) -> SeatbeltFacts {
    let p = req.policy;
    let mut f = SeatbeltFacts::default();
    let mut paths: Vec<PathBuf> = vec![p.workspace.clone(), p.tmp_dir.clone()];
    paths.extend(req.tmpdir.clone());
    paths.extend(p.home_layer.clone());
    paths.extend(p.cache_dir.clone());
    paths.extend(p.read_only.iter().cloned());
    paths.extend(p.revealed.iter().cloned());
    paths.extend(p.writable.iter().cloned());
    paths.extend(p.hidden.iter().map(|h| h.path.clone()));
    paths.extend(env_dirs(
        req.env.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str())),
    ));
    if let Some(home) = &p.home {
        paths.push(home.clone());
        // the default lists are looked up below the canonical home
        let lists = [
            HOME_CREDENTIALS,
            HOME_PERSONAL,
            HOME_AGENT_LOGINS,
            HOME_VISIBLE,
        ];
        for h in [Some(home.clone()), canonicalize(home, r).ok()]
            .into_iter()
            .flatten()
        {
            for rel in lists.iter().flat_map(|l| l.iter()) {
                paths.push(h.join(rel));
            }
        }
    }
    for x in &paths {
        f.look(x, r);
    }
    f
}

/// What the Seatbelt profile of one exec enforces (see the module docs).
#[derive(Debug, Clone)]
pub struct SeatbeltPlan {
    /// The policy as resolved for the exec (its spellings become deny aliases).
    pub resolved: SandboxPolicy,
    pub nonce: Nonce,
    /// The policy the profile enforces, canonical: hidden, revealed (the home view),
    /// writable, read-only paths and the network mode.
    pub policy: SandboxPolicy,
    /// The task's TMPDIR, canonical.
    pub task_tmpdir: PathBuf,
    pub proxy_port: Option<u16>,
    pub allow_keychain: bool,
    /// The variables the task gets on top of its environment (TMPDIR, HOME and XDG
    /// folders in the home layer, the cache variables).
    pub task_env: Vec<(String, String)>,
    /// The command's whole environment: the request's with [`Self::task_env`] set.
    pub env: Vec<(OsString, OsString)>,
}

/// The plan of `req` on the host `f` describes (see the module docs). No system call.
pub fn plan(req: &SeatbeltRequest<'_>, f: &SeatbeltFacts) -> Result<SeatbeltPlan, GenError> {
    let inp = req.inputs();
    let policy = effective_policy(&inp, f)?;
    let task_tmpdir = canonicalize(req.task_tmpdir(), f).map_err(|err| GenError::Path {
        what: "tmpdir",
        err,
    })?;
    let task_env = task_env(&policy, &task_tmpdir);
    let mut env = req.env.clone();
    for (k, v) in &task_env {
        env.retain(|(ek, _)| ek.as_os_str() != k.as_str());
        env.push((k.into(), v.into()));
    }
    Ok(SeatbeltPlan {
        resolved: req.policy.clone(),
        nonce: req.nonce.clone(),
        policy,
        task_tmpdir,
        proxy_port: req.proxy_port,
        allow_keychain: req.allow_keychain,
        task_env,
        env,
    })
}

/// The Seatbelt profile of `plan`: its decisions translated as they are (nothing added,
/// nothing looked up), then round-tripped and linted (`capsule_seatbelt::render_checked`).
pub fn render(plan: &SeatbeltPlan) -> Result<Generated, CheckError> {
    let mut inp = ProfileInputs::new(&plan.resolved, plan.nonce.clone());
    inp.proxy_port = plan.proxy_port;
    inp.allow_keychain = plan.allow_keychain;
    inp.network = Some(plan.policy.network.mode);
    render_checked(&inp, plan.policy.clone(), plan.task_tmpdir.clone())
}

#[cfg(test)]
mod tests;

//! The generator: a capsule's [`SandboxPolicy`] plus the per-exec inputs
//! ([`ProfileInputs`]) become a typed [`Profile`] and its parameter map.
//!
//! Shape of every generated profile, in this order (SBPL: the last matching filtered
//! rule wins; an unfiltered rule is only its operation's fallback, so fallbacks come
//! first and cannot be mistaken for overrides):
//! 1. `(deny default (with message NONCE))`;
//! 2. unfiltered fallbacks: fork, exec, reads (`file-read*`), sysctl reads, ...;
//! 3. an explicit `mach-lookup` allowlist;
//! 4. device writes (`/dev/null`, `/dev/tty`, ...);
//! 5. path rules for reads/exec and for writes/links, shallow to deep, with the same
//!    precedence as [`SandboxPolicy::access`] (deeper wins; at equal depth
//!    read_only > writable > revealed > hidden);
//! 6. no unlink/link of hidden paths and of their ancestors (a secret cannot be renamed
//!    or hard-linked out);
//! 7. unix sockets only under the task's TMPDIR, then the network mode's rules.
//!
//! Every path is a parameter; deny rules name both the canonical and the original
//! spelling when they differ.
//!
//! Two halves. [`effective_policy`] is what this backend adds to the [`SandboxPolicy`]
//! the runtime resolved for the exec (hidden, revealed, writable and read-only paths and
//! the network mode are that policy's): the task's TMPDIR, home layer and caches
//! writable, the default home credential, personal and agent-login paths hidden whether
//! or not they exist yet, and the home default deny (the home hidden, with only its
//! visible list and the PATH and SDK folders in it readable, read-only), all canonical.
//! The runtime's macOS plan (`capsule_runtime::plan::seatbelt`) is made with it. [`render`]
//! translates such a decided policy into SBPL and adds nothing to it; [`generate`] is
//! both, for a policy on its own.

use crate::canon::{canonicalize, CanonError, Resolver};
use crate::sbpl::{self, Action, Filter, Item, Modifier, Profile, Rule, Str};
use capsule_bundle::policy::{
    Access, HiddenPath, HiddenReason, NetworkMode, SandboxPolicy, HOME_AGENT_LOGINS,
    HOME_CREDENTIALS, HOME_PERSONAL, HOME_VISIBLE,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Mach services every task may look up (logging, notifications, user/group lookups,
/// preferences, file-system events).
pub const MACH_BASE: &[&str] = &[
    "com.apple.system.logger",
    "com.apple.system.notification_center",
    "com.apple.system.opendirectoryd.libinfo",
    "com.apple.system.opendirectoryd.membership",
    "com.apple.logd",
    "com.apple.diagnosticd",
    "com.apple.cfprefsd.daemon",
    "com.apple.cfprefsd.agent",
    "com.apple.FSEvents",
];
/// Added when the task reaches the network (proxy or open): certificate checks and
/// network configuration.
pub const MACH_NETWORK: &[&str] = &[
    "com.apple.trustd",
    "com.apple.trustd.agent",
    "com.apple.SystemConfiguration.configd",
];
/// Added in open mode: the system resolver.
pub const MACH_DNS: &[&str] = &["com.apple.dnssd.service"];
/// Added only when the spec asks for the keychain.
pub const MACH_KEYCHAIN: &[&str] = &["com.apple.SecurityServer"];

/// Device files a task may write.
pub const DEVICE_WRITES: &[(&str, &str)] = &[
    ("DEV_NULL", "/dev/null"),
    ("DEV_ZERO", "/dev/zero"),
    ("DEV_TTY", "/dev/tty"),
    ("DEV_DTRACEHELPER", "/dev/dtracehelper"),
];

/// Most filters in one rule; rules are also split by size ([`MAX_RULE_BYTES`]).
pub const MAX_FILTERS_PER_RULE: usize = 100;
/// Budget for one rule's text with its parameters substituted: well under SBPL's
/// 64 KiB limit.
pub const MAX_RULE_BYTES: usize = 16 * 1024;

/// The refusal nonce: 8 to 64 characters of `[A-Za-z0-9_-]`, rendered as the message of
/// `deny default` so the executor can find this task's refusals in the system log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nonce(String);

impl Nonce {
    pub fn parse(s: &str) -> Result<Self, GenError> {
        let ok = (8..=64).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if ok {
            Ok(Nonce(s.to_string()))
        } else {
            Err(GenError::BadNonce(s.to_string()))
        }
    }
    /// A fresh nonce: `capsule-` and 32 hex digits from the system's random source.
    pub fn random() -> std::io::Result<Self> {
        use std::io::Read;
        let mut b = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        Ok(Nonce(format!("capsule-{hex}")))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Everything a profile is made from besides the policy itself.
#[derive(Debug, Clone)]
pub struct ProfileInputs<'a> {
    pub policy: &'a SandboxPolicy,
    pub nonce: Nonce,
    /// The task's own TMPDIR (default: the policy's `tmp_dir`); the only place for unix
    /// sockets.
    pub tmpdir: Option<PathBuf>,
    /// Network mode of this exec (default: the policy's).
    pub network: Option<NetworkMode>,
    /// Port of capsule's allowlist proxy on loopback (required in allowlist mode).
    pub proxy_port: Option<u16>,
    /// Allow `com.apple.SecurityServer` (the spec asked for the keychain).
    pub allow_keychain: bool,
    /// The PATH and SDK folders of the task's environment: shown where they lie in the
    /// home (see [`capsule_bundle::policy::env_dirs`]).
    pub env_dirs: Vec<PathBuf>,
}

impl<'a> ProfileInputs<'a> {
    pub fn new(policy: &'a SandboxPolicy, nonce: Nonce) -> Self {
        ProfileInputs {
            policy,
            nonce,
            tmpdir: None,
            network: None,
            proxy_port: None,
            allow_keychain: false,
            env_dirs: Vec::new(),
        }
    }
    fn task_tmpdir(&self) -> &Path {
        self.tmpdir.as_deref().unwrap_or(&self.policy.tmp_dir)
    }
    fn mode(&self) -> NetworkMode {
        self.network.unwrap_or(self.policy.network.mode)
    }
}

/// Why no profile could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenError {
    #[error("policy path ({what}): {err}")]
    Path { what: &'static str, err: CanonError },
    #[error("nonce {0:?} must be 8 to 64 characters of letters, digits, '-' or '_'")]
    BadNonce(String),
    #[error("network mode allowlist needs the proxy's port")]
    NoProxyPort,
    #[error(
        "network mode {0} is not available on macOS (it needs a supervised network namespace)"
    )]
    Unsupported(&'static str),
    #[error("rendering the profile: {0}")]
    Render(#[from] sbpl::RenderError),
}

/// A generated profile: the model, its text and the parameters for `sandbox-exec -D`.
#[derive(Debug, Clone)]
pub struct Generated {
    pub profile: Profile,
    pub text: String,
    /// Parameter name -> value (a canonical path).
    pub params: BTreeMap<String, String>,
    /// The policy the profile enforces: canonical paths, and the task TMPDIR, home layer
    /// and cache folders added to `writable` (they are writable on every backend).
    pub effective: SandboxPolicy,
    /// The task's TMPDIR, canonical (the value for the `TMPDIR` variable).
    pub task_tmpdir: PathBuf,
}

impl Generated {
    /// `-D NAME=VALUE` arguments for `sandbox-exec`, in name order.
    pub fn define_args(&self) -> Vec<String> {
        self.params
            .iter()
            .flat_map(|(k, v)| ["-D".to_string(), format!("{k}={v}")])
            .collect()
    }
}

fn canon(p: &Path, what: &'static str, r: &dyn Resolver) -> Result<PathBuf, GenError> {
    canonicalize(p, r).map_err(|err| GenError::Path { what, err })
}

/// The policy this backend enforces, with canonical paths: the task TMPDIR, the home
/// layer and the cache folder are writable (see the crate docs).
pub fn effective_policy(
    inp: &ProfileInputs<'_>,
    r: &dyn Resolver,
) -> Result<SandboxPolicy, GenError> {
    let p = inp.policy;
    let mut e = p.clone();
    e.workspace = canon(&p.workspace, "workspace", r)?;
    e.tmp_dir = canon(&p.tmp_dir, "tmp_dir", r)?;
    e.home = p.home.as_deref().map(|h| canon(h, "home", r)).transpose()?;
    e.home_layer = p
        .home_layer
        .as_deref()
        .map(|h| canon(h, "home_layer", r))
        .transpose()?;
    e.cache_dir = p
        .cache_dir
        .as_deref()
        .map(|h| canon(h, "cache_dir", r))
        .transpose()?;
    e.read_only = p
        .read_only
        .iter()
        .map(|x| canon(x, "read_only", r))
        .collect::<Result<_, _>>()?;
    e.revealed = p
        .revealed
        .iter()
        .map(|x| canon(x, "revealed", r))
        .collect::<Result<_, _>>()?;
    e.writable = p
        .writable
        .iter()
        .map(|x| canon(x, "writable", r))
        .collect::<Result<_, _>>()?;
    for h in &mut e.hidden {
        h.path = canon(&h.path, "hidden", r)?;
    }
    // The policy lists only default hidden paths that existed when the bundle was made;
    // a rule can name one that does not exist yet (and someone may create it while the
    // task runs), so Seatbelt hides all of them.
    if let Some(home) = &e.home {
        let lists = [
            (HOME_CREDENTIALS, HiddenReason::Credentials),
            (HOME_PERSONAL, HiddenReason::PersonalFiles),
            (HOME_AGENT_LOGINS, HiddenReason::AgentLogins),
        ];
        for (list, reason) in lists {
            for rel in list {
                let path = canon(&home.join(rel), "hidden", r)?;
                if !e.hidden.iter().any(|h| h.path == path) {
                    e.hidden.push(HiddenPath { path, reason });
                }
            }
        }
    }
    // The home is default deny: only what development tools need is readable there
    // ([`HOME_VISIBLE`] and the PATH and SDK folders), never a path the policy hides.
    if let Some(home) = e.home.clone() {
        let mut shown: Vec<PathBuf> = Vec::new();
        for rel in HOME_VISIBLE {
            shown.push(canon(&home.join(rel), "revealed", r)?);
        }
        for d in &inp.env_dirs {
            let c = canon(d, "revealed", r)?;
            if c.starts_with(&home) && c != home {
                shown.push(c);
            }
        }
        shown.retain(|s| !e.hidden.iter().any(|h| s.starts_with(&h.path)));
        for s in shown {
            if !e.revealed.contains(&s) {
                e.revealed.push(s);
            }
        }
        if !e.hidden.iter().any(|h| h.path == home) {
            e.hidden.push(HiddenPath {
                path: home,
                reason: HiddenReason::NotListed,
            });
        }
    }
    let extra = [
        Some(inp.task_tmpdir()),
        p.home_layer.as_deref(),
        p.cache_dir.as_deref(),
    ];
    for x in extra.into_iter().flatten() {
        let c = canon(x, "writable", r)?;
        if !e.writable.contains(&c) {
            e.writable.push(c);
        }
    }
    e.network.mode = inp.mode();
    Ok(e)
}

/// Parameter names, one per distinct value.
#[derive(Default)]
struct Params {
    by_value: BTreeMap<String, String>,
    by_name: BTreeMap<String, String>,
    counters: BTreeMap<&'static str, usize>,
}

impl Params {
    fn name(&mut self, role: &'static str, indexed: bool, path: &Path) -> Str {
        let v = path.to_string_lossy().into_owned();
        if let Some(n) = self.by_value.get(&v) {
            return Str::Param(n.clone());
        }
        let n = if indexed {
            let c = self.counters.entry(role).or_default();
            *c += 1;
            format!("{role}_{}", *c - 1)
        } else {
            role.to_string()
        };
        self.by_value.insert(v.clone(), n.clone());
        self.by_name.insert(n.clone(), v);
        Str::Param(n)
    }
}

/// One path of the policy with its precedence (as in [`SandboxPolicy::access`]).
struct Entry {
    path: PathBuf,
    prec: u8,
    access: Access,
    role: &'static str,
    indexed: bool,
    /// Original spellings that differ from `path` (denied too).
    aliases: Vec<PathBuf>,
}

fn entries(orig: &SandboxPolicy, e: &SandboxPolicy, task_tmp: &Path) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    let mut index: std::collections::HashMap<PathBuf, usize> = Default::default();
    let mut add = |path: &Path, original: Option<&Path>, prec, access, role, indexed| {
        let alias = original.filter(|o| crate::canon::lexical(o).ok().as_deref() != Some(path));
        let alias = alias.and_then(|o| crate::canon::lexical(o).ok());
        if let Some(x) = index.get(path).map(|&i| &mut out[i]) {
            if prec > x.prec {
                (x.prec, x.access, x.role, x.indexed) = (prec, access, role, indexed);
            }
            x.aliases.extend(alias);
            return;
        }
        index.insert(path.to_path_buf(), out.len());
        out.push(Entry {
            path: path.to_path_buf(),
            prec,
            access,
            role,
            indexed,
            aliases: alias.into_iter().collect(),
        });
    };
    for (i, h) in e.hidden.iter().enumerate() {
        let original = orig.hidden.get(i).map(|o| o.path.as_path());
        add(&h.path, original, 1, Access::Hidden, "HIDDEN", true);
    }
    for (i, p) in e.revealed.iter().enumerate() {
        let original = orig.revealed.get(i).map(PathBuf::as_path);
        add(p, original, 2, Access::ReadOnly, "REVEALED", true);
    }
    add(&e.workspace, None, 3, Access::ReadWrite, "WORKSPACE", false);
    let tmp_role = if e.tmp_dir == task_tmp {
        "TMPDIR"
    } else {
        "CAPSULE_TMP"
    };
    add(&e.tmp_dir, None, 3, Access::ReadWrite, tmp_role, false);
    for p in &e.writable {
        let (role, indexed) = if p == task_tmp {
            ("TMPDIR", false)
        } else if Some(p) == e.home_layer.as_ref() {
            ("HOME_LAYER", false)
        } else if Some(p) == e.cache_dir.as_ref() {
            ("CACHE", false)
        } else {
            ("WRITABLE", true)
        };
        add(p, None, 3, Access::ReadWrite, role, indexed);
    }
    for (p, o) in e.read_only.iter().zip(&orig.read_only) {
        add(p, Some(o), 4, Access::ReadOnly, "READ_ONLY", true);
    }
    out.sort_by(|a, b| {
        (a.path.components().count(), a.prec, &a.path).cmp(&(
            b.path.components().count(),
            b.prec,
            &b.path,
        ))
    });
    out
}

/// Turn `(action, filter)` pairs (already in precedence order) into rules: consecutive
/// filters with the same action share a rule, split by count and size.
fn grouped(ops: &[&str], seq: Vec<(Action, Filter, usize)>, out: &mut Vec<Item>) {
    let mut cur: Option<(Action, Vec<Filter>, usize)> = None;
    let flush = |cur: &mut Option<(Action, Vec<Filter>, usize)>, out: &mut Vec<Item>| {
        if let Some((a, fs, _)) = cur.take() {
            if !fs.is_empty() {
                out.push(Item::Rule(Rule::new(a, ops, fs)));
            }
        }
    };
    for (a, f, bytes) in seq {
        let fits = matches!(&cur, Some((ca, fs, b)) if *ca == a
            && fs.len() < MAX_FILTERS_PER_RULE && b + bytes <= MAX_RULE_BYTES);
        if !fits {
            flush(&mut cur, out);
            cur = Some((a, Vec::new(), 64));
        }
        if let Some((_, fs, b)) = cur.as_mut() {
            fs.push(f);
            *b += bytes;
        }
    }
    flush(&mut cur, out);
}

fn path_filter(subpath: bool, s: Str) -> Filter {
    if subpath {
        Filter::Subpath(s)
    } else {
        Filter::Literal(s)
    }
}

fn mach_rule(names: &[&str]) -> Item {
    Item::Rule(Rule::new(
        Action::Allow,
        &["mach-lookup"],
        names
            .iter()
            .map(|n| Filter::GlobalName(Str::Lit(n.to_string())))
            .collect(),
    ))
}

/// Generate the profile for `inp`, resolving paths with `r` (the host on macOS, a model in
/// tests).
pub fn generate(inp: &ProfileInputs<'_>, r: &dyn Resolver) -> Result<Generated, GenError> {
    let mode = inp.mode();
    if mode == NetworkMode::Replay {
        return Err(GenError::Unsupported(mode.as_str()));
    }
    if mode == NetworkMode::Allowlist && inp.proxy_port.is_none() {
        return Err(GenError::NoProxyPort);
    }
    let eff = effective_policy(inp, r)?;
    let task_tmp = canon(inp.task_tmpdir(), "tmpdir", r)?;
    render(inp, eff, task_tmp)
}

/// The profile of a policy already decided ([`effective_policy`], or the runtime's macOS
/// plan made with it): `eff` (canonical paths) is translated as it is, nothing is added
/// to it, and the network mode is `eff`'s. `inp` gives the policy as resolved before
/// (its original spellings become deny aliases), the nonce, the proxy port and the
/// keychain; `task_tmp` is the task's TMPDIR, canonical. No path is resolved here.
pub fn render(
    inp: &ProfileInputs<'_>,
    eff: SandboxPolicy,
    task_tmp: PathBuf,
) -> Result<Generated, GenError> {
    let mode = eff.network.mode;
    if mode == NetworkMode::Replay {
        return Err(GenError::Unsupported(mode.as_str()));
    }
    if mode == NetworkMode::Allowlist && inp.proxy_port.is_none() {
        return Err(GenError::NoProxyPort);
    }
    let mut params = Params::default();
    let mut items =
        vec![
            Item::Version(1),
            Item::Comment(format!(
            "capsule {:?}, network {}; generated by capsule-seatbelt; paths are parameters (-D)",
            inp.policy.capsule_name.replace(|c: char| c.is_control(), "?"),
            mode.as_str()
        )),
        ];
    let mut deny_default = Rule::new(Action::Deny, &["default"], vec![]);
    deny_default
        .modifiers
        .push(Modifier::Message(inp.nonce.as_str().to_string()));
    items.push(Item::Rule(deny_default));

    items.push(Item::Comment(
        "fallbacks: processes, reads everywhere (hidden paths below)".into(),
    ));
    for ops in [
        &["process-fork"][..],
        &["process-exec*"],
        &["file-read*"],
        &["sysctl-read"],
        &["pseudo-tty"],
        &["ipc-posix-sem"],
        &["user-preference-read"],
    ] {
        items.push(Item::Rule(Rule::new(Action::Allow, ops, vec![])));
    }
    items.push(Item::Rule(Rule::new(
        Action::Allow,
        &["signal", "process-info*"],
        vec![Filter::Target("same-sandbox".into())],
    )));

    items.push(Item::Comment("mach services (explicit list)".into()));
    let mut mach: Vec<&str> = MACH_BASE.to_vec();
    if matches!(mode, NetworkMode::Allowlist | NetworkMode::Open) {
        mach.extend(MACH_NETWORK);
    }
    if mode == NetworkMode::Open {
        mach.extend(MACH_DNS);
    }
    if inp.allow_keychain {
        mach.extend(MACH_KEYCHAIN);
    }
    items.push(mach_rule(&mach));

    items.push(Item::Comment("devices".into()));
    let mut dev = Vec::new();
    for (name, p) in DEVICE_WRITES {
        dev.push(Filter::Literal(params.name(name, false, Path::new(p))));
    }
    dev.push(Filter::Subpath(params.name(
        "DEV_FD",
        false,
        Path::new("/dev/fd"),
    )));
    items.push(Item::Rule(Rule::new(Action::Allow, &["file-write*"], dev)));
    items.push(Item::Rule(Rule::new(
        Action::Allow,
        &["file-ioctl"],
        vec![Filter::Subpath(params.name(
            "DEV",
            false,
            Path::new("/dev"),
        ))],
    )));

    // path rules, shallow to deep
    let es = entries(inp.policy, &eff, &task_tmp);
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    for e in &es {
        let main = params.name(e.role, e.indexed, &e.path);
        let aliases: Vec<Str> = e
            .aliases
            .iter()
            .map(|a| params.name("ALIAS", true, a))
            .collect();
        let size = |s: &Str, pm: &Params| match s {
            Str::Param(n) => pm.by_name.get(n).map(|v| v.len()).unwrap_or(0) + n.len() + 24,
            Str::Lit(l) => l.len() + 16,
        };
        let read_allow = e.access != Access::Hidden;
        let write_allow = e.access == Access::ReadWrite;
        let ra = if read_allow {
            Action::Allow
        } else {
            Action::Deny
        };
        let wa = if write_allow {
            Action::Allow
        } else {
            Action::Deny
        };
        reads.push((ra, Filter::Subpath(main.clone()), size(&main, &params)));
        writes.push((wa, Filter::Subpath(main.clone()), size(&main, &params)));
        for a in aliases {
            // the other spelling is only ever denied
            if !read_allow {
                reads.push((
                    Action::Deny,
                    path_filter(true, a.clone()),
                    size(&a, &params),
                ));
            }
            if !write_allow {
                writes.push((
                    Action::Deny,
                    path_filter(true, a.clone()),
                    size(&a, &params),
                ));
            }
        }
    }
    items.push(Item::Comment(
        "reads and exec: hidden paths, carve-outs; deeper rules last".into(),
    ));
    grouped(&["file-read*", "process-exec*"], reads, &mut items);
    items.push(Item::Comment(
        "writes and hard links: only writable paths; deeper rules last".into(),
    ));
    grouped(&["file-write*", "file-link"], writes, &mut items);

    // hidden paths and their ancestors: no unlink/rename, no hard link
    let mut anc: std::collections::BTreeSet<PathBuf> = Default::default();
    for e in es.iter().filter(|e| e.access == Access::Hidden) {
        for p in std::iter::once(&e.path).chain(&e.aliases) {
            anc.extend(p.ancestors().map(Path::to_path_buf));
        }
    }
    let mut anc: Vec<PathBuf> = anc.into_iter().collect();
    anc.sort_by(|a, b| (a.components().count(), a).cmp(&(b.components().count(), b)));
    if !anc.is_empty() {
        items.push(Item::Comment(
            "hidden paths and their ancestors cannot be renamed, removed or linked".into(),
        ));
        let seq = anc
            .iter()
            .map(|a| {
                let s = params.name("ANCESTOR", true, a);
                (Action::Deny, Filter::Literal(s), a.as_os_str().len() + 40)
            })
            .collect();
        grouped(&["file-write-unlink", "file-link"], seq, &mut items);
    }

    items.push(Item::Comment(format!(
        "unix sockets only in the task's TMPDIR; network: {}",
        mode.as_str()
    )));
    let tmp = params.name("TMPDIR", false, &task_tmp);
    items.push(Item::Rule(Rule::new(
        Action::Allow,
        &["network-outbound"],
        vec![Filter::RemoteUnixSocket(Box::new(Filter::Subpath(
            tmp.clone(),
        )))],
    )));
    items.push(Item::Rule(Rule::new(
        Action::Allow,
        &["network-bind", "network-inbound"],
        vec![Filter::LocalUnixSocket(Box::new(Filter::Subpath(tmp)))],
    )));
    let ip = |action, ops: &[&str], f: Filter| Item::Rule(Rule::new(action, ops, vec![f]));
    match mode {
        NetworkMode::None => {
            items.push(ip(
                Action::Allow,
                &["network-outbound"],
                Filter::RemoteIp("localhost:*".into()),
            ));
            items.push(ip(
                Action::Allow,
                &["network-bind", "network-inbound"],
                Filter::LocalIp("localhost:*".into()),
            ));
        }
        NetworkMode::Off => {}
        NetworkMode::Allowlist => {
            let port = inp.proxy_port.ok_or(GenError::NoProxyPort)?;
            items.push(ip(
                Action::Allow,
                &["network-outbound"],
                Filter::RemoteIp(format!("localhost:{port}")),
            ));
        }
        NetworkMode::Open => {
            items.push(ip(
                Action::Allow,
                &["network-outbound"],
                Filter::RemoteIp("*:*".into()),
            ));
            items.push(ip(
                Action::Allow,
                &["network-bind", "network-inbound"],
                Filter::LocalIp("*:*".into()),
            ));
        }
        NetworkMode::Replay => return Err(GenError::Unsupported(mode.as_str())),
    }

    let profile = Profile { items };
    let text = sbpl::render(&profile)?;
    Ok(Generated {
        profile,
        text,
        params: params.by_name,
        effective: eff,
        task_tmpdir: task_tmp,
    })
}

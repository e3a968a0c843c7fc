//! Landlock rules derived from the sandbox policy (second wall; the only filesystem wall
//! under weaker isolation).
//!
//! Landlock only *grants*: once a right is handled, it is refused everywhere except beneath
//! the paths a rule names, and a rule cannot take back what a rule higher up granted. So
//! "read everywhere except the hidden paths" is built as a cover of `/` minus the hidden
//! paths: for every directory on the way from `/` to a hidden path, each entry that neither
//! is a hidden path nor leads to one gets read (and execute) rights; the directories on the
//! way themselves get nothing (or only `ReadDir`, see [`LandlockOptions::list_ancestors`]).
//! Revealed paths are granted read again, writable roots get every right, and `/dev` is
//! treated as hidden except the named devices. Symbolic links met on the way are never
//! followed (a link's target is governed by its own rules), and every path is opened by
//! walking down from `/` with `O_NOFOLLOW`, so what is granted is what was looked at.
//!
//! Build this where the filesystem looks like the sandbox (for our executor: in the child,
//! after the new root is in place; paths are the same absolute paths as on the host), since
//! rules bind to the inodes they name. [`LandlockRuleset::build`] opens the paths and makes
//! the ruleset; [`LandlockRuleset::restrict_self`] enforces it on the calling thread.
//!
//! Network (ABI 4+): TCP bind and connect are refused in mode `off`, and, under weaker
//! isolation (no network namespace), in every mode but `open` (Landlock cannot tell loopback
//! from the internet; it filters by port only). Scopes (ABI 6+): signals and abstract unix
//! sockets cannot reach outside the sandbox. Landlock (every ABI) also refuses ptrace of any
//! process outside the domain.
//!
//! What Landlock cannot express is reported, never silently dropped: read-only carve-outs
//! and hidden paths *inside* writable roots, and rights the running kernel's ABI lacks
//! ([`LandlockReport::missing`] lists the ones this policy needs; the caller refuses).
//!
//! How the named paths are opened and compared is in the submodule `paths`.

use capsule_bundle::policy::{NetworkMode, SandboxPolicy};
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use serde::Serialize;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

mod paths;
use paths::{components, hidden_link_targets, key, key_ancestors, kind, open_nofollow, Kind};

/// Devices a sandboxed command may open (read and write), by name under `/dev`.
pub const DEVICES: &[&str] = &[
    "null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts",
];

/// Errors building or enforcing the ruleset.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error("landlock: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error("landlock: opening {path}: {source}")]
    Open { path: PathBuf, source: nix::Error },
    #[error("landlock: {path} is not an absolute path")]
    NotAbsolute { path: PathBuf },
}

/// Options of the ruleset beyond the policy itself.
#[derive(Debug, Clone, Default)]
pub struct LandlockOptions {
    /// Namespaces isolate too (full isolation). `false` under weaker isolation: then this
    /// layer must also keep the host network, signals and abstract sockets out.
    pub namespaces: bool,
    /// Give `ReadDir` to the directories on the way to hidden paths. Landlock grants it
    /// recursively, so the *names* inside hidden directories become listable (never their
    /// contents). Set it when mounts already hide those names (full isolation); leave it off
    /// under weaker isolation, where `ls /` then fails but nothing hidden can be listed.
    pub list_ancestors: bool,
    /// More writable paths (e.g. the home layer's mount point, caches, a private `/dev/shm`).
    pub extra_writable: Vec<PathBuf>,
    /// More read-only paths revealed inside hidden ones.
    pub extra_readable: Vec<PathBuf>,
    /// Leave `/dev` alone (do not restrict it to [`DEVICES`] and the policy's devices).
    pub all_devices: bool,
    /// TCP ports the command may still connect to when TCP is restricted (e.g. a proxy).
    pub tcp_connect_ports: Vec<u16>,
}

/// Enforcement status, as Landlock reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    FullyEnforced,
    PartiallyEnforced,
    NotEnforced,
}

/// One requested right and what it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RightReport {
    /// Stable name (`fs.read_write`, `fs.truncate`, `net.tcp`, `scope.signal`, ...).
    pub right: &'static str,
    /// First Landlock ABI that has it.
    pub needs_abi: u32,
    /// This policy needs it to hold its promises (if missing, the layer counts as missing).
    pub required: bool,
    /// Enforced on this kernel.
    pub enforced: bool,
    /// What it means, in plain words.
    pub what: &'static str,
}

/// What the Landlock layer did, for the exec record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LandlockReport {
    /// The kernel's Landlock ABI (0: none).
    pub abi: u32,
    pub status: Enforcement,
    pub rights: Vec<RightReport>,
    /// Number of path rules added.
    pub path_rules: usize,
    /// TCP restricted (bind and connect refused except `tcp_connect_ports`).
    pub tcp_restricted: bool,
    /// Parts of the policy this layer cannot express (others must enforce them).
    pub not_expressible: Vec<String>,
    /// Policy paths that do not exist (nothing to grant).
    pub skipped: Vec<PathBuf>,
}

impl LandlockReport {
    /// Rights this policy needs that the kernel lacks: each one is a missing layer.
    pub fn missing(&self) -> Vec<&RightReport> {
        self.rights
            .iter()
            .filter(|r| r.required && !r.enforced)
            .collect()
    }
}

/// The kernel's Landlock ABI version (0 when Landlock is absent or disabled).
pub fn abi_version() -> u32 {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attr and size 0 only queries.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if v < 0 {
        0
    } else {
        v as u32
    }
}

/// Whether TCP must be restricted for this network mode.
pub fn tcp_restricted(mode: NetworkMode, namespaces: bool) -> bool {
    match mode {
        NetworkMode::Off => true,
        NetworkMode::Open => false,
        // a network namespace keeps these to loopback / the proxy; without one, only
        // refusing TCP keeps the host's network out
        NetworkMode::None | NetworkMode::Allowlist | NetworkMode::Replay => !namespaces,
    }
}

/// The rights this policy asks of Landlock, and whether the kernel with `abi` has them.
pub fn requested_rights(
    policy: &SandboxPolicy,
    opts: &LandlockOptions,
    abi: u32,
) -> Vec<RightReport> {
    let tcp = tcp_restricted(policy.network.mode, opts.namespaces);
    let r = |right, needs_abi: u32, required, what| RightReport {
        right,
        needs_abi,
        required,
        enforced: abi >= needs_abi,
        what,
    };
    let mut v = vec![
        r("fs.read_write", 1, true, "reads outside hidden paths and writes only to writable roots"),
        r("fs.refer", 2, false, "linking and renaming across directories (without it Landlock refuses them all, stricter)"),
        r("fs.truncate", 3, true, "truncating files outside writable roots is refused"),
        r("fs.ioctl_dev", 5, false, "ioctl on devices only for the allowed devices"),
    ];
    if tcp {
        v.push(r("net.tcp", 4, true, "TCP bind and connect refused"));
    }
    v.push(r(
        "scope.signal",
        6,
        !opts.namespaces,
        "no signals to processes outside the sandbox",
    ));
    v.push(r(
        "scope.abstract_unix_socket",
        6,
        !opts.namespaces,
        "no connection to abstract unix sockets outside the sandbox",
    ));
    // handled with every other right of the kernel's ABI (`AccessFs::from_all`) and
    // granted with the write rights, on the writable roots only: a task connects to the
    // sockets it binds in its own places, to none of the host's; below ABI 9 the host's
    // sockets are masked in the mount plan instead (`crate::linux::sockets`), so not required
    v.push(r(
        "fs.resolve_unix",
        9,
        false,
        "connecting to unix sockets by path only inside the writable paths (the task's own); without it the host's sockets are masked instead",
    ));
    v
}

/// A ruleset built from a policy, ready to enforce.
#[derive(Debug)]
pub struct LandlockRuleset {
    created: Option<RulesetCreated>,
    report: LandlockReport,
}

/// Rights that make sense on a non-directory.
fn file_rights(abi: ABI) -> BitFlags<AccessFs> {
    AccessFs::from_file(abi)
}

struct Builder {
    abi: ABI,
    handled: BitFlags<AccessFs>,
    /// (path, opened without following symlinks, rights): collected, not yet added.
    rules: Vec<(PathBuf, OwnedFd, BitFlags<AccessFs>)>,
}

impl Builder {
    /// Grant `rights` (masked to what is handled and to the object's kind) beneath `fd`.
    fn grant(
        &mut self,
        fd: OwnedFd,
        path: &Path,
        rights: BitFlags<AccessFs>,
    ) -> Result<(), LandlockError> {
        let mut rights = rights & self.handled;
        match kind(&fd, path)? {
            Kind::Symlink => return Ok(()),
            Kind::File => rights &= file_rights(self.abi),
            Kind::Dir => {}
        }
        if rights.is_empty() {
            return Ok(());
        }
        self.rules.push((path.to_path_buf(), fd, rights));
        Ok(())
    }

    /// Grant `rights` beneath `path` opened without following symlinks; false if absent.
    fn grant_path(
        &mut self,
        path: &Path,
        rights: BitFlags<AccessFs>,
    ) -> Result<bool, LandlockError> {
        match open_nofollow(path, OFlag::O_PATH)? {
            Some(fd) => {
                self.grant(fd, path, rights)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Cover the tree below `dir` (which leads to some point where visibility changes)
    /// with `read` rights where visible: each entry takes the state of the point it is
    /// (hidden, or visible again) or else the state of `dir`; entries that lead to further
    /// points are walked into, the others get `read` when visible and nothing when hidden.
    fn cover(
        &mut self,
        dir: &Path,
        visible: bool,
        pts: &Points,
        read: BitFlags<AccessFs>,
        list_ancestors: bool,
    ) -> Result<(), LandlockError> {
        let Some(dfd) = open_nofollow(dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY)? else {
            return Ok(());
        };
        let dup = |fd: &OwnedFd| {
            fd.try_clone().map_err(|e| LandlockError::Open {
                path: dir.to_path_buf(),
                source: nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            })
        };
        if list_ancestors {
            self.grant(dup(&dfd)?, dir, AccessFs::ReadDir.into())?;
        }
        let mut d = nix::dir::Dir::from_fd(dup(&dfd)?).map_err(|source| LandlockError::Open {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut names: Vec<Vec<u8>> = Vec::new();
        for e in d.iter() {
            let e = e.map_err(|source| LandlockError::Open {
                path: dir.to_path_buf(),
                source,
            })?;
            let n = e.file_name().to_bytes();
            if n != b"." && n != b".." {
                names.push(n.to_vec());
            }
        }
        drop(d);
        for n in names {
            let name = OsStr::from_bytes(&n);
            let child = dir.join(name);
            let ck = key(&child);
            let state = if pts.hidden.contains(&ck) {
                false
            } else if pts.visible.contains(&ck) {
                true
            } else {
                visible
            };
            if pts.ancestors.contains(&ck) {
                // walked into without following symlinks (open_nofollow in the call)
                self.cover(&child, state, pts, read, list_ancestors)?;
                continue;
            }
            if !state {
                continue;
            }
            let fd = match openat(
                dfd.as_fd(),
                name,
                OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(nix::Error::ENOENT) => continue,
                Err(source) => {
                    return Err(LandlockError::Open {
                        path: child,
                        source,
                    })
                }
            };
            self.grant(fd, &child, read)?;
        }
        Ok(())
    }
}

/// Where visibility changes, as normalized path bytes (cheap to hash and compare).
struct Points {
    /// Hidden paths.
    hidden: HashSet<Vec<u8>>,
    /// Paths readable again below a hidden one (revealed; a home under /dev).
    visible: HashSet<Vec<u8>>,
    /// Strict ancestors of all of the above.
    ancestors: HashSet<Vec<u8>>,
}

impl Points {
    fn new(hidden: HashSet<Vec<u8>>, visible: HashSet<Vec<u8>>) -> Self {
        // state of the nearest point above `k` ("/" is visible)
        let above = |k: &[u8]| -> bool {
            for a in key_ancestors(k) {
                if hidden.contains(a) {
                    return false;
                }
                if visible.contains(a) {
                    return true;
                }
            }
            true
        };
        // keep only the points that change the state they sit in (linear in their number)
        let hidden_kept: HashSet<Vec<u8>> = hidden.iter().filter(|h| above(h)).cloned().collect();
        let visible_kept: HashSet<Vec<u8>> = visible
            .iter()
            .filter(|v| !hidden.contains(*v) && !above(v))
            .cloned()
            .collect();
        let mut ancestors: HashSet<Vec<u8>> = HashSet::new();
        for p in hidden_kept.iter().chain(&visible_kept) {
            for a in key_ancestors(p) {
                if !ancestors.insert(a.to_vec()) {
                    break; // and all above it are in already
                }
            }
        }
        Points {
            hidden: hidden_kept,
            visible: visible_kept,
            ancestors,
        }
    }
}

/// The rules of a policy with every path already opened (bound to the inodes looked at),
/// not yet in a ruleset: [`LandlockRules::create`] makes a fresh ruleset of them, as often
/// as needed. A prepared root ([`crate::linux::prepared`]) collects them once and hands each exec
/// a ruleset of its own.
#[derive(Debug)]
pub struct LandlockRules {
    abi_n: u32,
    handled: BitFlags<AccessFs>,
    tcp: bool,
    rules: Vec<(PathBuf, OwnedFd, BitFlags<AccessFs>)>,
    ports: Vec<u16>,
    report: LandlockReport,
}

/// A rule left out of a ruleset ([`LandlockRules::create`]'s `skip`), to be added again by
/// path where the path means something else (a mount made per exec, like `/proc`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PathRule {
    pub path: PathBuf,
    /// `landlock_path_beneath_attr.allowed_access`
    pub access: u64,
}

impl LandlockRules {
    /// Open every path `policy` needs rules for on this kernel (see the module docs).
    pub fn collect(policy: &SandboxPolicy, opts: &LandlockOptions) -> Result<Self, LandlockError> {
        Self::collect_for_abi(policy, opts, abi_version())
    }

    /// What the rules will enforce (status is final only once enforced).
    pub fn report(&self) -> &LandlockReport {
        &self.report
    }

    /// The descriptors the rules hold (to keep when closing everything else).
    pub fn fds(&self) -> Vec<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.rules.iter().map(|(_, fd, _)| fd.as_raw_fd()).collect()
    }

    /// A new ruleset holding the rules, except those at or beneath a `skip` path (returned
    /// for the caller to add again where they mean what they should). `None` without
    /// Landlock on this kernel.
    pub fn create(
        &self,
        skip: &[&Path],
    ) -> Result<(Option<RulesetCreated>, Vec<PathRule>), LandlockError> {
        if self.abi_n == 0 {
            return Ok((None, Vec::new()));
        }
        let mut rs = Ruleset::default()
            // exactly what this kernel has: anything else is a bug, not a silent downgrade
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(self.handled)?;
        if self.tcp {
            rs = rs.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
        }
        if self.abi_n >= 6 {
            rs = rs.scope(Scope::from_all(ABI::V6))?;
        }
        let mut created = rs.create()?;
        let mut skipped = Vec::new();
        for (path, fd, rights) in &self.rules {
            if skip.iter().any(|s| path.starts_with(s)) {
                skipped.push(PathRule {
                    path: path.clone(),
                    access: rights.bits(),
                });
                continue;
            }
            created = created.add_rule(PathBeneath::new(fd.as_fd(), *rights))?;
        }
        if self.tcp {
            for port in &self.ports {
                created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
            }
        }
        Ok((Some(created), skipped))
    }

    fn collect_for_abi(
        policy: &SandboxPolicy,
        opts: &LandlockOptions,
        abi_n: u32,
    ) -> Result<Self, LandlockError> {
        let tcp = tcp_restricted(policy.network.mode, opts.namespaces);
        let mut report = LandlockReport {
            abi: abi_n,
            status: Enforcement::NotEnforced,
            rights: requested_rights(policy, opts, abi_n),
            path_rules: 0,
            tcp_restricted: false,
            not_expressible: not_expressible(policy, opts),
            skipped: Vec::new(),
        };
        if abi_n == 0 {
            return Ok(Self {
                abi_n,
                handled: BitFlags::empty(),
                tcp: false,
                rules: Vec::new(),
                ports: Vec::new(),
                report,
            });
        }
        let abi = ABI::from(abi_n as i32);
        let handled = AccessFs::from_all(abi);
        let read = AccessFs::from_read(abi);
        let write = AccessFs::from_write(abi);

        report.tcp_restricted = tcp && abi_n >= 4;
        let mut b = Builder {
            abi,
            handled,
            rules: Vec::new(),
        };

        // 1. read: "/" minus hidden paths (and /dev unless all devices), plus revealed
        let mut hidden: HashSet<Vec<u8>> = HashSet::new();
        for h in &policy.hidden {
            components(&h.path)?;
            hidden.insert(key(&h.path));
        }
        // a hidden symlink (`~/.aws -> /data/aws`) hides its target too: reads follow it
        for target in hidden_link_targets(policy.hidden.iter().map(|h| h.path.as_path())) {
            hidden.insert(key(&target));
        }
        let mut visible: HashSet<Vec<u8>> = HashSet::new();
        for r in policy.revealed.iter().chain(&opts.extra_readable) {
            components(r)?;
            if std::fs::symlink_metadata(r).is_err() {
                report.skipped.push(r.clone());
            }
            visible.insert(key(r));
        }
        // a read-only workspace (`exec --read-only-workspace`) is no writable root, and
        // may lie in capsule's hidden state: readable as a revealed path is
        if policy.read_only.contains(&policy.workspace) {
            visible.insert(key(&policy.workspace));
        }
        if !opts.all_devices {
            hidden.insert(key(Path::new("/dev")));
            // a home that lives under /dev (a tmpfs scratch home) stays what the policy says
            if let Some(home) = &policy.home {
                if home.starts_with("/dev") && home != Path::new("/dev") {
                    visible.insert(key(home));
                }
            }
        }
        let hide_all = hidden.contains(&key(Path::new("/")));
        let pts = Points::new(hidden, visible);
        if pts.hidden.is_empty() && !hide_all {
            b.grant_path(Path::new("/"), read)?;
        } else {
            b.cover(Path::new("/"), !hide_all, &pts, read, opts.list_ancestors)?;
        }

        // 3. devices by name
        if !opts.all_devices {
            let dev = Path::new("/dev");
            let dev_rights = AccessFs::ReadFile
                | AccessFs::WriteFile
                | AccessFs::Truncate
                | AccessFs::IoctlDev
                | AccessFs::ReadDir;
            for name in DEVICES
                .iter()
                .copied()
                .chain(policy.devices.iter().map(|s| s.as_str()))
            {
                let rel = Path::new(name.trim_start_matches("/dev/"));
                if rel.is_absolute() || rel.components().any(|c| !matches!(c, Component::Normal(_)))
                {
                    continue;
                }
                b.grant_path(&dev.join(rel), dev_rights)?;
            }
        }

        // 4. writable roots: every right
        let writable = policy
            .writable_roots()
            .into_iter()
            .map(Path::to_path_buf)
            .chain(opts.extra_writable.iter().cloned());
        for w in writable {
            if !b.grant_path(&w, read | write)? {
                report.skipped.push(w);
            }
        }

        // 5. TCP ports still allowed: added by `create`
        report.path_rules = b.rules.len();
        Ok(Self {
            abi_n,
            handled,
            tcp: report.tcp_restricted,
            rules: b.rules,
            ports: opts.tcp_connect_ports.clone(),
            report,
        })
    }
}

impl LandlockRuleset {
    /// Build the ruleset for `policy` on this kernel: opens every path it names and every
    /// entry on the way to hidden paths. Allocates and makes syscalls; does not restrict
    /// anything yet.
    pub fn build(policy: &SandboxPolicy, opts: &LandlockOptions) -> Result<Self, LandlockError> {
        Self::build_for_abi(policy, opts, abi_version())
    }

    fn build_for_abi(
        policy: &SandboxPolicy,
        opts: &LandlockOptions,
        abi_n: u32,
    ) -> Result<Self, LandlockError> {
        let rules = LandlockRules::collect_for_abi(policy, opts, abi_n)?;
        let (created, _) = rules.create(&[])?;
        Ok(Self {
            created,
            report: rules.report,
        })
    }

    /// What the ruleset will enforce (status is final after [`Self::restrict_self`]).
    pub fn report(&self) -> &LandlockReport {
        &self.report
    }

    /// Enforce the ruleset on the calling thread (and what it executes). Sets
    /// `no_new_privs`. With no Landlock on this kernel this enforces nothing and says so.
    pub fn restrict_self(self) -> Result<LandlockReport, LandlockError> {
        self.restrict_self_with(true)
    }

    /// [`LandlockRuleset::restrict_self`], setting `no_new_privs` or not (`false`: the
    /// caller holds `CAP_SYS_ADMIN`, and set-id programs keep working, as an OCI bundle
    /// without `noNewPrivileges` asks; `crate::ociruntime`).
    pub fn restrict_self_with(self, no_new_privs: bool) -> Result<LandlockReport, LandlockError> {
        let mut report = self.report;
        let Some(created) = self.created else {
            report.status = Enforcement::NotEnforced;
            return Ok(report);
        };
        let st = created.no_new_privs(no_new_privs).restrict_self()?;
        let enforced = match st.ruleset {
            RulesetStatus::FullyEnforced => Enforcement::FullyEnforced,
            RulesetStatus::PartiallyEnforced => Enforcement::PartiallyEnforced,
            RulesetStatus::NotEnforced => Enforcement::NotEnforced,
        };
        // the ruleset is exact for this ABI; rights the ABI lacks make it partial overall
        let all_rights = report.rights.iter().all(|r| r.enforced);
        report.status = match enforced {
            Enforcement::FullyEnforced if !all_rights => Enforcement::PartiallyEnforced,
            s => s,
        };
        Ok(report)
    }
}

/// Add `rules` to the ruleset behind `ruleset`, each path opened here (walking down from
/// `/` without following symlinks; an absent path is skipped).
pub fn add_path_rules(
    ruleset: std::os::fd::BorrowedFd<'_>,
    rules: &[PathRule],
) -> Result<(), LandlockError> {
    use std::os::fd::AsRawFd;
    let sys_err = |what: &str| LandlockError::Open {
        path: what.into(),
        source: nix::Error::last(),
    };
    for r in rules {
        let Some(fd) = open_nofollow(&r.path, OFlag::O_PATH)? else {
            continue;
        };
        #[repr(C, packed)]
        struct PathBeneathAttr {
            allowed_access: u64,
            parent_fd: i32,
        }
        let attr = PathBeneathAttr {
            allowed_access: r.access,
            parent_fd: fd.as_raw_fd(),
        };
        // SAFETY: LANDLOCK_RULE_PATH_BENEATH (1) with a valid attribute of its layout.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                1u32,
                &attr as *const PathBeneathAttr,
                0u32,
            )
        };
        if rc < 0 {
            return Err(sys_err("landlock_add_rule"));
        }
    }
    Ok(())
}

/// Enforce a ruleset made by [`LandlockRules::create`] in another process (a prepared
/// root's holder) and received as a descriptor: first add `again` (the rules it left out,
/// opened here, where their paths are this exec's own mounts), then restrict the calling
/// thread. `no_new_privs` must be set already. `report` is the [`LandlockReport`] the
/// rules were collected with, as JSON; its status becomes what was enforced.
pub fn restrict_received(
    ruleset: std::os::fd::BorrowedFd<'_>,
    mut report: serde_json::Value,
    again: &[PathRule],
) -> Result<serde_json::Value, LandlockError> {
    use std::os::fd::AsRawFd;
    add_path_rules(ruleset, again)?;
    let sys_err = |what: &str| LandlockError::Open {
        path: what.into(),
        source: nix::Error::last(),
    };
    // SAFETY: restricting the calling thread with a ruleset descriptor we own.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) };
    if rc < 0 {
        return Err(sys_err("landlock_restrict_self"));
    }
    let all = report["rights"]
        .as_array()
        .is_some_and(|v| v.iter().all(|r| r["enforced"] == true));
    report["status"] = serde_json::to_value(if all {
        Enforcement::FullyEnforced
    } else {
        Enforcement::PartiallyEnforced
    })
    .unwrap_or_default();
    Ok(report)
}

/// Parts of the policy Landlock cannot express (it cannot take back beneath a grant).
fn not_expressible(policy: &SandboxPolicy, opts: &LandlockOptions) -> Vec<String> {
    let roots: Vec<&Path> = policy
        .writable_roots()
        .into_iter()
        .chain(opts.extra_writable.iter().map(PathBuf::as_path))
        .collect();
    let mut v = Vec::new();
    for r in &policy.read_only {
        if let Some(w) = roots.iter().find(|w| r.starts_with(w) && r != *w) {
            v.push(format!(
                "{} stays writable at this layer (read-only inside writable {})",
                r.display(),
                w.display()
            ));
        }
    }
    // hidden paths by the writable root they lie in, in policy order
    let mut hidden: Vec<(&Path, Vec<&Path>)> = Vec::new();
    for h in &policy.hidden {
        if let Some(w) = roots
            .iter()
            .find(|w| h.path.starts_with(w) && h.path != **w)
        {
            match hidden.iter_mut().find(|(r, _)| r == w) {
                Some((_, paths)) => paths.push(&h.path),
                None => hidden.push((w, vec![&h.path])),
            }
        }
    }
    for (w, paths) in hidden {
        if paths.len() <= LISTED {
            for p in paths {
                v.push(format!(
                    "{} stays readable at this layer (hidden inside writable {})",
                    p.display(),
                    w.display()
                ));
            }
        } else {
            // one line, not hundreds: this report travels with every exec and its record
            // (the exec's hidden paths are in the record's request and policy)
            let first: Vec<String> = paths[..3].iter().map(|p| p.display().to_string()).collect();
            v.push(format!(
                "{} hidden paths stay readable at this layer (hidden inside writable {}), {} and {} more",
                paths.len(),
                w.display(),
                first.join(", "),
                paths.len() - 3
            ));
        }
    }
    v
}

/// Hidden paths inside one writable root that [`not_expressible`] lists one by one; more
/// are summed up in one line.
const LISTED: usize = 8;

/// Build and enforce in one step; see [`LandlockRuleset`].
pub fn restrict(
    policy: &SandboxPolicy,
    opts: &LandlockOptions,
) -> Result<LandlockReport, LandlockError> {
    LandlockRuleset::build(policy, opts)?.restrict_self()
}

#[cfg(test)]
mod tests;

//! What one sandboxed exec will do, decided on the host before anything starts: the
//! argv, the clean environment, the working directory, the namespaces, and the mount plan
//! as a list of small typed [`MountStep`]s derived from the [`SandboxPolicy`].
//!
//! The mount plan of a policy is made here from the host's facts ([`SystemFacts`],
//! [`mount_plan_from`]: no system call); the runtime's plan (`crate::plan`) adds the home
//! view, caches, devices and reveals, and the network its own steps, before
//! [`super::run`]; steps run in order,
//! after the host root is reachable under `/oldroot` and before the final `pivot_root`.
//! Every `dst` is a path as the command will see it; every `src` is a host path.

pub mod view;

use capsule_bundle::policy::{is_default_env, SandboxPolicy};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// One step of building the sandbox's root.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MountStep {
    /// Bind host `src` (recursively, submounts included) at `dst`. Read-only recursively
    /// unless `rw`. A missing `src` is skipped when `optional`, an error otherwise.
    Bind {
        src: PathBuf,
        dst: PathBuf,
        rw: bool,
        optional: bool,
    },
    /// A fresh, empty, writable tmpfs at `dst`.
    Tmpfs { dst: PathBuf, mode: u32 },
    /// An overlay at `dst`: host `lower` dirs (read-only), host `upper` and `work` (rw).
    Overlay {
        lower: Vec<PathBuf>,
        upper: PathBuf,
        work: PathBuf,
        dst: PathBuf,
    },
    /// A fresh `/proc` of the sandbox's pid namespace, with `sys`, `sysrq-trigger`, `irq`,
    /// `bus`, `fs` read-only and kernel-internal files masked.
    Proc { dst: PathBuf },
    /// A minimal `/dev`: null zero full random urandom tty, a private devpts (`ptmx`),
    /// `shm`, plus the `extra` device names (validated: plain names under /dev).
    Dev { dst: PathBuf, extra: Vec<String> },
    /// Hide whatever is at `dst`: an empty read-only directory or file over it. With
    /// `carve_outs`, a fresh tmpfs is used instead so later steps can mount deeper paths
    /// inside it; a [`MountStep::ReadOnly`] at the end of the plan seals it.
    Mask { dst: PathBuf, carve_outs: bool },
    /// Make the single mount at `dst` read-only (not its submounts).
    ReadOnly { dst: PathBuf },
    /// A symlink at `dst` pointing to `target`.
    Symlink { target: PathBuf, dst: PathBuf },
    /// An empty directory at `dst` (parents created).
    Dir { dst: PathBuf },
    /// One fresh tmpfs of `size` bytes seen at each of `dsts` (the capsule's `/tmp` and
    /// `/var/tmp` under `--tmp-size`: their bytes count together), made anew for each exec
    /// (see [`with_tmp_size`]).
    TaskTmp { size: u64, dsts: Vec<PathBuf> },
    /// The home as a view of only its `entries` over host `src` (everything else of it
    /// is absent), written through the home layer (`upper`, `work`); see
    /// [`crate::home::view`].
    HomeView(view::HomeView),
}

impl MountStep {
    /// Where the step acts, as the command sees it.
    pub fn dst(&self) -> &Path {
        match self {
            MountStep::Bind { dst, .. }
            | MountStep::Tmpfs { dst, .. }
            | MountStep::Overlay { dst, .. }
            | MountStep::Proc { dst }
            | MountStep::Dev { dst, .. }
            | MountStep::Mask { dst, .. }
            | MountStep::ReadOnly { dst }
            | MountStep::Symlink { dst, .. }
            | MountStep::Dir { dst } => dst,
            MountStep::TaskTmp { dsts, .. } => dsts.first().map_or(Path::new("/tmp"), |d| d),
            MountStep::HomeView(v) => &v.dst,
        }
    }
}

/// How the command's standard streams are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stdio {
    /// The caller's stdin/stdout/stderr.
    #[default]
    Inherit,
    /// A new pseudo-terminal, relayed by the caller (`-t`).
    Tty,
    /// stdin from `/dev/null`, stdout and stderr to these descriptors of the caller
    /// (e.g. probes capturing their output in a file).
    Redirect { stdout: i32, stderr: i32 },
}

/// Which isolation the exec runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// user, mount, pid, network (unless open), ipc and uts namespaces + Landlock + seccomp.
    #[default]
    Full,
    /// Landlock + seccomp only (no namespaces), accepted knowingly by the operator.
    Weaker,
    /// No isolation at all (`--no-sandbox`).
    None,
}

/// Everything needed to run one command in the sandbox.
#[derive(Debug, Clone)]
pub struct ExecPlan {
    pub argv: Vec<OsString>,
    /// The complete environment of the command.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory inside the sandbox.
    pub cwd: PathBuf,
    pub mounts: Vec<MountStep>,
    pub isolation: Isolation,
    /// A new network namespace (loopback only) — false only for open network.
    pub new_netns: bool,
    pub hostname: String,
    /// The policy as the command sees it (tmp at `/tmp`): input of the Landlock rules.
    pub policy: SandboxPolicy,
    /// Refuse TCP even on loopback (`--no-network`).
    pub network_off: bool,
    pub stdio: Stdio,
    pub timeout: Option<Duration>,
    /// Kill the command when it has written nothing to stdout or stderr for this long
    /// (its output is relayed through pipes, or the terminal, then; see `super::activity`).
    pub activity_timeout: Option<Duration>,
    /// The command's resource limits set as rlimits in its process before `execve` (also
    /// in a warm spare's command: they are part of the request, not of the spare).
    pub limits: crate::limits::Limits,
    /// The `cgroup.procs` files of this exec's cgroups ([`crate::kernel::cgroup`]): init (or the
    /// warm spare) is written into them before the command is forked.
    pub cgroup_procs: Vec<PathBuf>,
    /// The cgroup limits of `limits` are capsule's own defaults, not asked for: the
    /// executor finds their groups itself (a warm spare's, as they are, or groups made for
    /// init), and where it cannot, runs without them and says why
    /// ([`super::ExecOutcome::found`]). `cgroup_procs` is empty then.
    pub cgroups_found_here: bool,
    /// What the disk guard keeps free on every host filesystem the command can write
    /// ([`super::diskguard`]).
    pub disk_reserve: crate::limits::DiskReserve,
    /// Landlock as far as the kernel's ABI allows, its lack recorded instead of refused:
    /// weaker isolation the operator accepted where namespaces work but Landlock is too
    /// old or absent (`crate::exec::isolation_for`). False: every right the policy needs is required.
    pub landlock_best_effort: bool,
    /// Where this capsule's prepared roots live (see [`super::prepared`]): a directory of
    /// the bundle, outside every sandbox. `None`: the root is built for this exec alone.
    pub prepared: Option<PathBuf>,
    /// List reads of hidden paths too: every open is sent to capsule's seccomp supervisor
    /// ([`super::notify`]), which costs a round trip per open.
    pub list_reads: bool,
    /// List refused writes: every path call with write intent is sent to capsule's
    /// seccomp supervisor, a round trip each (true unless `exec --no-list-writes`).
    /// False: those calls never leave the kernel; Landlock and the mounts refuse them as
    /// ever, unlisted.
    pub list_writes: bool,
    /// Hidden paths whose masks capsule watches ([`super::fusemask`]): each is a plain
    /// [`MountStep::Mask`] of the plan, and each exec mounts a mask served by capsule over
    /// it, which lists every lookup, listing and open in it. Empty where FUSE cannot be
    /// used.
    pub watched: Vec<PathBuf>,
}

/// The parts of an [`ExecPlan`] that decide policy, as [`ExecPlan::digest`] hashes them.
#[derive(serde::Serialize)]
struct Decided<'a> {
    isolation: Isolation,
    landlock_best_effort: bool,
    new_netns: bool,
    network_off: bool,
    hostname: &'a str,
    mounts: &'a [MountStep],
    policy: &'a SandboxPolicy,
    /// The filter a warm spare installs ahead of time depends on it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    list_reads: bool,
    /// So does whether it sends the write calls.
    #[serde(skip_serializing_if = "is_true")]
    list_writes: bool,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    watched: &'a [PathBuf],
}

fn is_true(b: &bool) -> bool {
    *b
}

impl ExecPlan {
    /// This plan without its cgroup limits (capsule's own defaults that cannot be enforced
    /// here): processes are bounded by `RLIMIT_NPROC` instead, which needs no cgroup (it
    /// counts the tasks of the sandbox's user in its user namespace; root's are exempt).
    pub fn without_cgroup_limits(&self) -> ExecPlan {
        let l = self.limits;
        ExecPlan {
            limits: crate::limits::Limits {
                memory: None,
                pids: None,
                cpus_milli: None,
                nproc: l.nproc.or(l.pids),
                ..l
            },
            cgroups_found_here: false,
            ..self.clone()
        }
    }

    /// `sha256:<hex>` of the parts of the plan that decide policy: isolation, namespaces,
    /// network, hostname, every mount step and the Landlock policy. Not the command, its
    /// environment or working directory: `capsule inspect` shows the digest of an exec's
    /// plan, and the exec record the digest of the plan that ran, so the two can be
    /// matched. The prepared root's fingerprint is made from it ([`super::prepared`]).
    /// Serialized whole, then hashed in one call (serde writes in many small pieces, and
    /// each hash update has its own cost: ~0.1 ms with 200 hidden paths).
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let decided = Decided {
            isolation: self.isolation,
            landlock_best_effort: self.landlock_best_effort,
            new_netns: self.new_netns,
            network_off: self.network_off,
            hostname: &self.hostname,
            mounts: &self.mounts,
            policy: &self.policy,
            list_reads: self.list_reads,
            list_writes: self.list_writes,
            watched: &self.watched,
        };
        // a plan of paths and flags always serializes
        let json = serde_json::to_vec(&decided).unwrap_or_default();
        format!("sha256:{}", hex::encode(Sha256::digest(&json)))
    }

    /// The plan for running `argv` under `policy` at `isolation`: the policy-derived parts
    /// (mounts, network namespace, hostname, the sandbox's view of the policy) filled in
    /// one place; stdio inherited, no timeout, every Landlock right required. Callers
    /// change what differs with struct update syntax.
    pub fn for_policy(
        policy: &SandboxPolicy,
        isolation: Isolation,
        argv: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        cwd: PathBuf,
    ) -> Self {
        let mounts = if isolation == Isolation::Full {
            mount_plan(policy, &policy.devices)
        } else {
            Vec::new()
        };
        Self::with_mounts(policy, isolation, argv, env, cwd, mounts)
    }

    /// [`ExecPlan::for_policy`] with its mount steps given (at full isolation; none
    /// else), made from facts gathered before ([`mount_plan_from`]): no system call.
    pub fn with_mounts(
        policy: &SandboxPolicy,
        isolation: Isolation,
        argv: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        cwd: PathBuf,
        mounts: Vec<MountStep>,
    ) -> Self {
        let full = isolation == Isolation::Full;
        use capsule_bundle::policy::NetworkMode;
        ExecPlan {
            argv,
            env,
            cwd,
            mounts,
            isolation,
            new_netns: policy.network.mode != NetworkMode::Open,
            hostname: format!("capsule-{}", policy.capsule_name)
                .chars()
                .take(64)
                .collect(),
            policy: if full {
                sandbox_view(policy)
            } else {
                policy.clone()
            },
            network_off: policy.network.mode == NetworkMode::Off,
            stdio: Stdio::Inherit,
            timeout: None,
            activity_timeout: None,
            limits: crate::limits::Limits::default(),
            cgroup_procs: Vec::new(),
            cgroups_found_here: false,
            disk_reserve: crate::limits::DiskReserve::default(),
            landlock_best_effort: false,
            list_reads: false,
            list_writes: true,
            watched: Vec::new(),
            prepared: None,
        }
    }
}

/// Top-level host directories bound read-only into every sandbox (when present).
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/srv", "/var",
    "/home", "/nix", "/snap", "/gnu",
];

/// Host files that only root may read; masked too, since root runs mapped to itself.
pub const SYSTEM_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/sss",
    "/var/log",
    "/var/mail",
    "/var/spool",
];

/// The host's `/var/tmp`: in the sandbox, the capsule's tmp (like `/tmp`).
pub const VAR_TMP: &str = "/var/tmp";

/// `p.components().count()` of a normalized absolute path, from its bytes.
fn depth(p: &Path) -> usize {
    bytes(p)
        .split(|b| *b == b'/')
        .filter(|s| !s.is_empty())
        .count()
        + 1
}

fn bytes(p: &Path) -> &[u8] {
    p.as_os_str().as_bytes()
}

/// What [`mount_plan_from`] needs to know of the host: how its system directories are
/// (a folder, a symlink and its target, or absent), whether it has a `/var/tmp` folder,
/// the workspace's git dirs ([`git_dir_rules`]), whether capsule runs as root, and the
/// host's unix sockets the sandbox would show ([`super::sockets::host_sockets`]).
/// Gathered once per plan by [`SystemFacts::gather`]; a plan made from it makes no system
/// call.
#[derive(Debug, Clone, Default)]
pub struct SystemFacts {
    /// Each of [`SYSTEM_DIRS`] the host has as a folder or a symlink, in that order.
    pub dirs: Vec<(PathBuf, SystemDir)>,
    /// The host's [`VAR_TMP`] is a folder.
    pub var_tmp: bool,
    /// [`git_dir_rules`] of the policy's workspace.
    pub git: Vec<(PathBuf, bool)>,
    /// capsule runs as root (the root-only files of the host are masked too).
    pub root: bool,
    /// The canonical paths of the host's pathname sockets the policy's binds would show.
    pub sockets: Vec<PathBuf>,
}

/// A system directory as the host has it.
#[derive(Debug, Clone, PartialEq)]
pub enum SystemDir {
    Folder,
    /// A symlink, with its target (bound as the same symlink inside).
    Symlink(PathBuf),
}

impl SystemFacts {
    /// The host as `policy`'s mount plan needs to know it: one `lstat` (and `readlink`)
    /// per system directory, two for the workspace's git dir, one read of the kernel's
    /// socket list (its candidates resolved).
    pub fn gather(policy: &SandboxPolicy) -> Self {
        let mut dirs = Vec::new();
        for d in SYSTEM_DIRS {
            let p = Path::new(d);
            match std::fs::symlink_metadata(p) {
                Ok(md) if md.file_type().is_symlink() => {
                    if let Ok(t) = std::fs::read_link(p) {
                        dirs.push((p.to_path_buf(), SystemDir::Symlink(t)));
                    }
                }
                Ok(md) if md.is_dir() => dirs.push((p.to_path_buf(), SystemDir::Folder)),
                _ => {}
            }
        }
        let mut facts = SystemFacts {
            dirs,
            var_tmp: std::fs::symlink_metadata(VAR_TMP).is_ok_and(|m| m.is_dir()),
            git: git_dir_rules(&policy.workspace),
            root: is_root(),
            sockets: Vec::new(),
        };
        // (`shown` looks at the rules that bind: the hidden paths are left out)
        let (visible_roots, rules) = policy_rules(policy, &facts, false);
        facts.sockets = super::sockets::host_sockets(|p| shown(p, &visible_roots, &rules));
        facts
    }
}

/// How a policy path is mounted, by precedence.
#[derive(Clone, Copy, PartialEq)]
enum Rule {
    Home,
    Hide,
    Reveal,
    Write,
    ReadOnly,
}

/// The system folders bound read-only (`facts`), and the policy's rules `(path,
/// precedence, rule)` before the host's sockets are added (its hidden paths only
/// `with_hidden`).
fn policy_rules(
    policy: &SandboxPolicy,
    facts: &SystemFacts,
    with_hidden: bool,
) -> (Vec<PathBuf>, Vec<(PathBuf, u8, Rule)>) {
    let visible_roots: Vec<PathBuf> = facts
        .dirs
        .iter()
        .filter(|(_, k)| *k == SystemDir::Folder)
        .map(|(p, _)| p.clone())
        .collect();
    let mut rules: Vec<(PathBuf, u8, Rule)> = Vec::new();
    if let Some(home) = &policy.home {
        if !visible_roots.iter().any(|r| home.starts_with(r)) {
            rules.push((home.clone(), 0, Rule::Home));
        }
    }
    if with_hidden {
        for h in &policy.hidden {
            rules.push((h.path.clone(), 1, Rule::Hide));
        }
    }
    if with_hidden && (policy.home.as_deref() == Some(Path::new("/root")) || facts.root) {
        for s in SYSTEM_SECRETS {
            rules.push((PathBuf::from(s), 1, Rule::Hide));
        }
    }
    for r in &policy.revealed {
        rules.push((r.clone(), 2, Rule::Reveal));
    }
    rules.push((policy.workspace.clone(), 3, Rule::Write));
    // the workspace's `.git` bound onto itself: a mount point, which the command cannot
    // rename, remove or replace (EBUSY), and its hooks read-only (see [`git_dir_rules`])
    for (p, ro) in &facts.git {
        if *ro {
            rules.push((p.clone(), 4, Rule::ReadOnly));
        } else {
            rules.push((p.clone(), 3, Rule::Write));
        }
    }
    for w in &policy.writable {
        rules.push((w.clone(), 3, Rule::Write));
    }
    for r in &policy.read_only {
        rules.push((r.clone(), 4, Rule::ReadOnly));
    }
    (visible_roots, rules)
}

/// A host path the sandbox would show (outside its own tmp): below a system folder or a
/// rule that binds.
fn shown(p: &Path, visible_roots: &[PathBuf], rules: &[(PathBuf, u8, Rule)]) -> bool {
    !within(p, Path::new("/tmp"))
        && !within(p, Path::new(VAR_TMP))
        && (visible_roots.iter().any(|r| within(p, r))
            || rules
                .iter()
                .any(|(r, _, k)| *k != Rule::Hide && within(p, r)))
}

/// [`mount_plan_from`] with the host's facts of now ([`SystemFacts::gather`]).
pub fn mount_plan(policy: &SandboxPolicy, extra_devices: &[String]) -> Vec<MountStep> {
    mount_plan_from(policy, extra_devices, &SystemFacts::gather(policy))
}

/// Build the mount plan of `policy` on a host as `facts` describe it (no system call):
/// system dirs, `/dev`, `/proc`, the capsule's `/tmp`, the home (read-only), then every
/// policy path in order of depth so deeper rules win (hidden < revealed < writable <
/// read-only at equal depth), then seals.
pub fn mount_plan_from(
    policy: &SandboxPolicy,
    extra_devices: &[String],
    facts: &SystemFacts,
) -> Vec<MountStep> {
    let mut steps = Vec::new();
    for (p, kind) in &facts.dirs {
        steps.push(match kind {
            SystemDir::Symlink(t) => MountStep::Symlink {
                target: t.clone(),
                dst: p.clone(),
            },
            SystemDir::Folder => MountStep::Bind {
                src: p.clone(),
                dst: p.clone(),
                rw: false,
                optional: true,
            },
        });
    }
    steps.push(MountStep::Dev {
        dst: "/dev".into(),
        extra: extra_devices.to_vec(),
    });
    steps.push(MountStep::Proc {
        dst: "/proc".into(),
    });
    steps.push(MountStep::Bind {
        src: policy.tmp_dir.clone(),
        dst: "/tmp".into(),
        rw: true,
        optional: false,
    });
    // the host's /var/tmp is the task's own too: the same folder as its /tmp (a symlink
    // there points elsewhere, and a missing one needs nothing)
    if facts.var_tmp {
        steps.push(MountStep::Bind {
            src: policy.tmp_dir.clone(),
            dst: VAR_TMP.into(),
            rw: true,
            optional: false,
        });
    }
    let (mut visible_roots, mut rules) = policy_rules(policy, facts, true);
    // the host's unix sockets that would be visible are hidden like secrets
    for s in &facts.sockets {
        rules.push((s.clone(), 1, Rule::Hide));
    }
    rules.retain(|(p, _, _)| {
        // the sandbox's own /proc and /dev are not the host's; host paths below /dev/shm
        // and /tmp (a workspace or home on tmpfs) are bound at the same path all the same
        p.is_absolute()
            && !within(p, Path::new("/proc"))
            && (!within(p, Path::new("/dev"))
                || (within(p, Path::new("/dev/shm")) && p != Path::new("/dev/shm")))
            && p != Path::new("/tmp")
            && p != Path::new(VAR_TMP)
    });
    // deeper rules later, stronger precedence later; path bytes last so duplicates are
    // adjacent (policy paths are canonical: equal bytes, equal paths; hundreds of hidden
    // paths are compared without splitting them into components)
    rules.sort_by_cached_key(|(p, prec, _)| (depth(p), *prec, bytes(p).to_vec()));
    rules.dedup_by(|a, b| a.1 == b.1 && bytes(&a.0) == bytes(&b.0));

    let binds: Vec<PathBuf> = rules
        .iter()
        .filter(|(_, _, r)| *r != Rule::Hide)
        .map(|(p, _, _)| p.clone())
        .collect();
    let mut seals = Vec::new();
    for (path, _, rule) in &rules {
        let bind = |rw: bool, optional: bool| MountStep::Bind {
            src: path.clone(),
            dst: path.clone(),
            rw,
            optional,
        };
        match rule {
            Rule::Home => {
                steps.push(bind(false, true));
                visible_roots.push(path.clone());
            }
            Rule::Hide => {
                // only what the sandbox would otherwise show needs hiding
                let visible = visible_roots.iter().any(|r| within(path, r))
                    || binds.iter().any(|b| within(path, b) && b != path);
                if !visible {
                    continue;
                }
                let carve_outs = binds.iter().any(|b| within(b, path) && b != path);
                steps.push(MountStep::Mask {
                    dst: path.clone(),
                    carve_outs,
                });
                if carve_outs {
                    seals.push(MountStep::ReadOnly { dst: path.clone() });
                }
            }
            Rule::Reveal => steps.push(bind(false, true)),
            // the workspace must exist; an extra writable path that does not (yet) exist is
            // skipped: the runtime never creates host paths, and inside the workspace it is
            // writable anyway
            Rule::Write => steps.push(bind(true, path != &policy.workspace)),
            Rule::ReadOnly => steps.push(bind(false, true)),
        }
    }
    steps.extend(seals);
    steps
}

/// `--tmp-size`: the capsule's `/tmp` (and `/var/tmp`, the same folder) become one fresh
/// tmpfs of `size` bytes per exec instead of the bundle's tmp folder, so their bytes
/// together are bounded (and kept in memory, not on the operator's disk, for that exec
/// only). Replaces their binds in `steps` (a plan without them, weaker isolation: none).
pub fn with_tmp_size(steps: &mut Vec<MountStep>, tmp_dir: &Path, size: u64) {
    let is_tmp = |s: &MountStep| {
        matches!(s, MountStep::Bind { src, dst, rw: true, .. }
            if src == tmp_dir && (dst == Path::new("/tmp") || dst == Path::new(VAR_TMP)))
    };
    let dsts: Vec<PathBuf> = steps
        .iter()
        .filter(|s| is_tmp(s))
        .map(|s| s.dst().to_path_buf())
        .collect();
    let Some(at) = steps.iter().position(is_tmp) else {
        return;
    };
    steps.retain(|s| !is_tmp(s));
    steps.insert(at, MountStep::TaskTmp { size, dsts });
}

/// The mounts that keep the workspace's git dir in place for the operator's host git:
/// `(path, read_only)`. `.git` (when it is a real directory, not a symlink or a `gitdir:`
/// file) is bound read-write onto itself, so it is a mount point inside the sandbox: the
/// command can write in it (commit, branch, rebase, worktrees...) but cannot rename or
/// remove it, nor put a `gitdir:` file or a symlink to another repository in its place.
/// `.git/hooks` (when a directory) is bound read-only: no hook can be planted for the
/// operator's next `git commit` while the command runs. `.git/config` stays writable:
/// `git branch -d`/`-m`, `git push -u`, `git remote add` rewrite it; what it may hold
/// for the host is enforced after every exec (`capsule_bundle::git::hostgit`). Two `lstat`s.
pub fn git_dir_rules(workspace: &Path) -> Vec<(PathBuf, bool)> {
    let git = workspace.join(".git");
    let mut out = Vec::new();
    if std::fs::symlink_metadata(&git).is_ok_and(|m| m.is_dir()) {
        let hooks = git.join("hooks");
        out.push((git, false));
        if std::fs::symlink_metadata(&hooks).is_ok_and(|m| m.is_dir()) {
            out.push((hooks, true));
        }
    }
    out
}

/// `p` is `root` or below it: `Path::starts_with` on the bytes of absolute, normalized
/// paths (policy paths are canonical), without splitting them into components (a plan
/// with hundreds of hidden paths compares each with every bind). Relative paths of normal
/// components compare the same way.
pub(crate) fn within(p: &Path, root: &Path) -> bool {
    let (p, mut r) = (p.as_os_str().as_bytes(), root.as_os_str().as_bytes());
    while r.len() > 1 && r.ends_with(b"/") {
        r = &r[..r.len() - 1];
    }
    if r == b"/" {
        return p.starts_with(b"/");
    }
    p.starts_with(r) && (p.len() == r.len() || p[r.len()] == b'/')
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The clean environment of a command: the default variables and those named in
/// `pass_env`, with values from `host`; `TMPDIR=/tmp`.
pub fn clean_env(
    host: impl IntoIterator<Item = (OsString, OsString)>,
    pass_env: &[String],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = host
        .into_iter()
        .filter(|(k, _)| {
            let Some(k) = k.to_str() else { return false };
            k != "TMPDIR" && (is_default_env(k) || pass_env.iter().any(|p| p == k))
        })
        .collect();
    env.push(("TMPDIR".into(), "/tmp".into()));
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push((
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ));
    }
    env.sort();
    env
}

/// The working directory inside the sandbox: the caller's own directory when it lies in
/// the workspace, else the workspace root.
pub fn sandbox_cwd(workspace: &Path, caller_cwd: Option<&Path>) -> PathBuf {
    match caller_cwd {
        Some(c) if c.starts_with(workspace) && normal(c) => c.to_path_buf(),
        _ => workspace.to_path_buf(),
    }
}

fn normal(p: &Path) -> bool {
    p.components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// Reject paths that cannot be passed safely as mount options.
pub fn option_safe(p: &Path) -> bool {
    !p.as_os_str()
        .as_bytes()
        .iter()
        .any(|b| matches!(b, b',' | b':' | b'\\' | b'\n'))
}

/// The policy as the command sees it: the capsule's tmp is `/tmp`.
pub fn sandbox_view(policy: &SandboxPolicy) -> SandboxPolicy {
    let mut p = policy.clone();
    p.tmp_dir = "/tmp".into();
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_is_starts_with_on_normalized_paths() {
        for (p, r) in [
            ("/a/b", "/a"),
            ("/a", "/a"),
            ("/ab", "/a"),
            ("/a", "/a/b"),
            ("/a/b/c", "/"),
            ("/", "/"),
            ("/a/b", "/a/"),
            ("/home/u/.ssh", "/home/u/.ss"),
        ] {
            assert_eq!(
                within(Path::new(p), Path::new(r)),
                Path::new(p).starts_with(r),
                "{p} within {r}"
            );
        }
    }
    use capsule_bundle::policy::{HiddenPath, HiddenReason, NetworkPolicy};

    fn pol() -> SandboxPolicy {
        SandboxPolicy {
            version: 1,
            capsule_name: "c".into(),
            workspace: "/home/u/.local/share/capsule/workspaces/c".into(),
            read_only: vec![
                "/home/u/.local/share/capsule/workspaces/c/capsule-manifest.json".into(),
            ],
            tmp_dir: "/home/u/.local/share/capsule/bundles/c/tmp".into(),
            home: Some("/home/u".into()),
            home_layer: None,
            cache_dir: None,
            writable: vec![],
            hidden: vec![
                HiddenPath {
                    path: "/home/u/.ssh".into(),
                    reason: HiddenReason::Credentials,
                },
                HiddenPath {
                    path: "/home/u/.local/share/capsule".into(),
                    reason: HiddenReason::ToolState,
                },
            ],
            revealed: vec![],
            pass_env: vec![],
            devices: vec![],
            network: NetworkPolicy::default(),
        }
    }

    #[test]
    fn deeper_rules_come_later_and_carve_outs_are_sealed() {
        let steps = mount_plan(&pol(), &[]);
        let pos = |pred: &dyn Fn(&MountStep) -> bool| steps.iter().position(pred).unwrap();
        let mask_root = pos(
            &|s| matches!(s, MountStep::Mask { dst, carve_outs: true } if dst == Path::new("/home/u/.local/share/capsule")),
        );
        let ws = pos(
            &|s| matches!(s, MountStep::Bind { dst, rw: true, .. } if dst.ends_with("workspaces/c")),
        );
        let manifest = pos(
            &|s| matches!(s, MountStep::Bind { dst, rw: false, .. } if dst.ends_with("capsule-manifest.json")),
        );
        let seal = pos(&|s| matches!(s, MountStep::ReadOnly { .. }));
        assert!(
            mask_root < ws && ws < manifest && manifest < seal,
            "{steps:#?}"
        );
        assert!(steps.iter().any(
            |s| matches!(s, MountStep::Mask { dst, carve_outs: false } if dst == Path::new("/home/u/.ssh"))
        ));
    }

    #[test]
    fn the_digest_covers_what_decides_policy_and_nothing_else() {
        let plan = |p: &SandboxPolicy| {
            ExecPlan::for_policy(p, Isolation::Full, vec!["a".into()], vec![], "/w".into())
        };
        let base = plan(&pol());
        let d = base.digest();
        assert!(d.starts_with("sha256:") && d.len() == 7 + 64, "{d}");
        // the command, its environment, cwd, stdio, timeout: not policy
        let same = ExecPlan {
            argv: vec!["b".into(), "c".into()],
            env: vec![("K".into(), "V".into())],
            cwd: "/elsewhere".into(),
            stdio: Stdio::Tty,
            timeout: Some(Duration::from_secs(1)),
            prepared: Some("/p".into()),
            ..base.clone()
        };
        assert_eq!(same.digest(), d);
        // each policy decision: another digest
        let mut hidden = pol();
        hidden.hidden.push(HiddenPath {
            path: "/home/u/.aws".into(),
            reason: HiddenReason::Credentials,
        });
        let mut open = pol();
        open.network.mode = capsule_bundle::policy::NetworkMode::Open;
        let mut mounts = base.clone();
        mounts.mounts.push(MountStep::Dir { dst: "/x".into() });
        let others = [
            plan(&hidden),
            plan(&open),
            mounts,
            ExecPlan {
                landlock_best_effort: true,
                ..base.clone()
            },
            ExecPlan {
                network_off: true,
                ..base.clone()
            },
            ExecPlan {
                isolation: Isolation::Weaker,
                ..base.clone()
            },
        ];
        for o in &others {
            assert_ne!(o.digest(), d, "{o:?}");
        }
    }

    #[test]
    fn env_is_clean() {
        let host = vec![
            ("PATH".into(), "/bin".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "x".into()),
            ("SSH_AUTH_SOCK".into(), "/run/a".into()),
            ("LC_ALL".into(), "C".into()),
            ("MY_TOKEN".into(), "t".into()),
            ("TMPDIR".into(), "/var/tmp".into()),
        ];
        let env = clean_env(host, &["MY_TOKEN".to_string()]);
        let names: Vec<_> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(names, ["LC_ALL", "MY_TOKEN", "PATH", "TMPDIR"]);
        assert!(env.contains(&("TMPDIR".into(), "/tmp".into())));
    }
}

//! The sandbox policy model: what a capsule's commands may write, what they may not see,
//! which environment they get and which network. One model, enforced by every backend
//! (Linux namespaces + Landlock + seccomp; macOS Seatbelt), so it lives here.
//!
//! A [`SandboxPolicy`] is *resolved*: every path is absolute and canonical (symlinks
//! resolved once, when the bundle is made). It is stored as the bundle's `policy.json`
//! and the runtime trusts only that copy.
//!
//! Precedence, from weakest to strongest, for a given path:
//! 1. everything is read-only;
//! 2. `hidden` paths cannot be read (or written);
//! 3. `revealed` paths are readable again (read-only) even inside a hidden path;
//! 4. `writable` paths (and the workspace, tmp, home layer, caches) are writable;
//! 5. `read_only` paths are read-only again even inside a writable path
//!    (the workspace's manifest and sentinel).
//!
//! For overlapping rules the deeper path wins; [`SandboxPolicy::access`] is the reference
//! answer that every backend's tests compare against.
//!
//! Beside the model: the grants a policy makes and their acceptance ([`grants`]), resource
//! limits as values are written ([`limits`]) and the bundle's OCI `config.json` ([`oci`]).

pub mod grants;
pub mod limits;
pub mod oci;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Network mode of a capsule or of one exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// Own network namespace with loopback only (Kitsoki `network: none`).
    #[default]
    None,
    /// As `None`, and TCP refused even on the task's loopback (`--no-network`).
    Off,
    /// Own namespace; the only way out is capsule's allowlist proxy.
    Allowlist,
    /// The host's network, unrestricted (`--open-network`, `network: live` without a list).
    Open,
    /// Kitsoki's replay mode: needs a supervised replay network from the deployment.
    Replay,
}

impl NetworkMode {
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::Off => "off",
            NetworkMode::Allowlist => "allowlist",
            NetworkMode::Open => "open",
            NetworkMode::Replay => "replay",
        }
    }
}

/// Network part of the policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPolicy {
    pub mode: NetworkMode,
    /// Allowlist entries (`host`, `*.suffix`, optional `:port`; literal IPs allowed),
    /// meaningful in [`NetworkMode::Allowlist`].
    #[serde(default)]
    pub allow: Vec<String>,
    /// Secrets kept outside the sandbox: name -> the allowlist entries of the hosts its
    /// value goes to (the command sees a placeholder; the proxy puts the value in for
    /// those hosts only). Names and hosts only, never a value.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub secrets: std::collections::BTreeMap<String, Vec<String>>,
    /// Ports of the sandbox's loopback published on the host's loopback
    /// (`[HOST_PORT:]PORT`), while an exec runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub publish: Vec<String>,
}

/// What a path may be used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    Hidden,
    ReadOnly,
    ReadWrite,
}

/// Why a path is hidden (reported in plain words by `inspect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HiddenReason {
    Credentials,
    PersonalFiles,
    SiblingProject,
    ToolState,
    AgentLogins,
    Requested,
    /// In the home, on no list of what development tools need ([`HOME_VISIBLE`]).
    NotListed,
}

/// One hidden path and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HiddenPath {
    pub path: PathBuf,
    pub reason: HiddenReason,
}

/// The resolved sandbox policy of a capsule (one exec may add to it, never weaken it
/// silently: `--reveal`/`--allow-write`/network flags are recorded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPolicy {
    /// Format version of this record.
    pub version: u32,
    pub capsule_name: String,
    /// The workspace root (read-write).
    pub workspace: PathBuf,
    /// Paths inside the workspace that stay read-only (manifest, sentinel).
    pub read_only: Vec<PathBuf>,
    /// The capsule's own `/tmp` on the host (in the bundle), mounted at `/tmp` inside.
    pub tmp_dir: PathBuf,
    /// The user's home directory as the host sees it (`None` if unknown).
    pub home: Option<PathBuf>,
    /// Upper directory of the home layer (in the bundle).
    pub home_layer: Option<PathBuf>,
    /// The capsule's own package caches (in the bundle).
    pub cache_dir: Option<PathBuf>,
    /// Extra writable paths (spec `sandbox.writable`, `--allow-write`).
    pub writable: Vec<PathBuf>,
    /// Hidden paths (defaults + spec `sandbox.hidden` + `--hide`).
    pub hidden: Vec<HiddenPath>,
    /// Read-only carve-outs inside hidden paths (git dir, PATH/SDK dirs, `--reveal`).
    pub revealed: Vec<PathBuf>,
    /// Names of host environment variables passed through besides the default set.
    pub pass_env: Vec<String>,
    /// Extra device names requested by the spec (`sandbox.devices`).
    #[serde(default)]
    pub devices: Vec<String>,
    pub network: NetworkPolicy,
}

/// Environment variables a command gets by default (values from the host), so tools find
/// themselves. Tokens, keys and agent sockets are not among them.
pub const DEFAULT_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "LANG",
    "LANGUAGE",
    "TZ",
    "COLORTERM",
    "JAVA_HOME",
    "GOROOT",
    "GOPATH",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "PYENV_ROOT",
    "NVM_DIR",
    "VOLTA_HOME",
    "DOTNET_ROOT",
    "ANDROID_HOME",
    "ANDROID_SDK_ROOT",
    "GEM_HOME",
    "GEM_PATH",
    "PNPM_HOME",
    "BUN_INSTALL",
    "DENO_INSTALL",
    "SDKMAN_DIR",
];

/// SDK variables whose directories stay readable even inside hidden folders.
pub const SDK_ENV: &[&str] = &[
    "JAVA_HOME",
    "GOROOT",
    "GOPATH",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "PYENV_ROOT",
    "NVM_DIR",
    "VOLTA_HOME",
    "DOTNET_ROOT",
    "ANDROID_HOME",
    "ANDROID_SDK_ROOT",
    "GEM_HOME",
    "PNPM_HOME",
    "BUN_INSTALL",
    "DENO_INSTALL",
    "SDKMAN_DIR",
];

/// Is `name` one of the default environment variables (LC_* included)?
pub fn is_default_env(name: &str) -> bool {
    DEFAULT_ENV.contains(&name) || name.starts_with("LC_")
}

/// Credential paths relative to the home directory.
pub const HOME_CREDENTIALS: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pypirc",
    ".netrc",
    ".git-credentials",
    ".config/gh",
    ".config/hub",
    ".config/git/credentials",
    ".kube",
    ".docker",
    ".gnupg",
    ".password-store",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".config/gcloud",
    ".terraform.d/credentials.tfrc.json",
    ".terraformrc",
    ".vault-token",
    ".gem/credentials",
    ".nuget/NuGet/NuGet.Config",
    ".config/NuGet/NuGet.Config",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".local/share/keyrings",
    ".pgpass",
    ".my.cnf",
    ".s3cfg",
    ".boto",
    ".config/op",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    "Library/Keychains",
    "Library/Cookies",
];

/// The person's own files, relative to home.
pub const HOME_PERSONAL: &[&str] = &[
    "Documents",
    "Desktop",
    "Downloads",
    "Pictures",
    "Movies",
    "Music",
    "Videos",
    "Public",
    "Dropbox",
    "Google Drive",
    "OneDrive",
    "iCloud Drive",
    "Library/Mobile Documents",
    "Library/CloudStorage",
    "Library/Mail",
    "Library/Messages",
    "Nextcloud",
    "pCloudDrive",
    "Box",
    "Sync",
];

/// Other agents' logins and transcripts, relative to home.
pub const HOME_AGENT_LOGINS: &[&str] = &[
    ".claude",
    ".claude.json",
    ".claude.json.backup",
    ".codex",
    ".config/claude",
    ".gemini",
    ".cursor",
    ".config/github-copilot",
    ".copilot",
    ".aider",
    ".continue",
    ".codeium",
    ".local/share/opencode",
    ".config/opencode",
    ".kitsoki",
];

/// What of the home a command sees, relative to home: everything else of it is absent
/// (default deny), unless revealed. Toolchains and their bins, git's configuration,
/// shells' startup files and tool configuration that holds no credentials. Credential
/// paths inside them ([`HOME_CREDENTIALS`], e.g. `.cargo/credentials.toml`) stay hidden.
/// The package caches, the PATH and SDK folders, an agent's own login and revealed paths
/// are added by the runtime. Why each entry is safe: docs/home.md, "The home a
/// command sees".
pub const HOME_VISIBLE: &[&str] = &[
    // toolchains and their bins
    ".cargo",
    ".rustup",
    ".nvm",
    ".pyenv",
    ".rbenv",
    ".volta",
    ".bun",
    ".deno",
    ".sdkman",
    ".ghcup",
    ".elan",
    ".dotnet",
    ".asdf",
    "go",
    ".local/bin",
    ".local/lib",
    ".local/share/pnpm",
    ".local/share/fnm",
    ".npm-global",
    ".npm-packages",
    // git's configuration (`.config/git/credentials` stays hidden)
    ".gitconfig",
    ".gitignore_global",
    ".config/git",
    // shells' startup files
    ".profile",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".zshenv",
    ".zshrc",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".inputrc",
    ".config/fish/config.fish",
    ".config/fish/conf.d",
    ".config/fish/functions",
    // editor and tool configuration without credentials
    ".editorconfig",
    ".vimrc",
    ".vim",
    ".config/nvim",
    ".nanorc",
    ".tmux.conf",
    ".config/tmux",
    ".config/starship.toml",
    ".ripgreprc",
    ".config/ripgrep",
    ".config/bat",
    ".clang-format",
    ".config/clangd",
];

/// Is `p` (below `home`) on the home's visible list ([`HOME_VISIBLE`])? The home itself
/// and paths outside it are not.
pub fn on_home_list(home: &Path, p: &Path) -> bool {
    p.strip_prefix(home)
        .is_ok_and(|rel| HOME_VISIBLE.iter().any(|v| rel.starts_with(v)))
}

/// The folders an environment names for tools: each `PATH` entry and each [`SDK_ENV`]
/// variable's value (absolute paths only). Below the home they are shown in it.
pub fn env_dirs<'a>(
    env: impl IntoIterator<Item = (&'a std::ffi::OsStr, &'a std::ffi::OsStr)>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (k, v) in env {
        if k == "PATH" {
            out.extend(std::env::split_paths(v));
        } else if SDK_ENV.iter().any(|s| k == *s) {
            out.push(PathBuf::from(v));
        }
    }
    out.retain(|p| p.is_absolute());
    out
}

/// Inputs for computing the default hidden set of a capsule.
#[derive(Debug, Clone, Default)]
pub struct HiddenInputs<'a> {
    /// Canonical home directory of the person.
    pub home: Option<&'a Path>,
    /// Canonical source folder of the capsule (for `--source` capsules): its siblings
    /// are hidden when its parent lies inside home (but the home itself is not hidden).
    pub source_dir: Option<&'a Path>,
    /// Canonical capsule root (tool state and other capsules).
    pub capsule_root: Option<&'a Path>,
}

/// The default hidden paths: credentials, personal files, agent logins, the tool's own
/// state and the projects beside the source folder. Only paths that exist are returned
/// (a path that does not exist cannot be read; backends that must name non-existent paths,
/// like Seatbelt, add them themselves). Siblings are listed by reading the parent folder
/// once.
pub fn default_hidden(inp: &HiddenInputs<'_>) -> Vec<HiddenPath> {
    let mut out = Vec::new();
    let mut push = |p: PathBuf, reason| {
        if std::fs::symlink_metadata(&p).is_ok() && !out.iter().any(|h: &HiddenPath| h.path == p) {
            out.push(HiddenPath { path: p, reason });
        }
    };
    if let Some(home) = inp.home {
        // the home's own entries, read once: a path whose first component is not among
        // them does not exist, and needs no lstat of its own (~70 per exec otherwise)
        let names = home_names(home);
        let may_exist = |rel: &str| {
            let first = rel.split('/').next().unwrap_or(rel);
            names
                .as_ref()
                .is_none_or(|n| n.contains(&first.to_ascii_lowercase()))
        };
        for (list, reason) in [
            (HOME_CREDENTIALS, HiddenReason::Credentials),
            (HOME_PERSONAL, HiddenReason::PersonalFiles),
            (HOME_AGENT_LOGINS, HiddenReason::AgentLogins),
        ] {
            for rel in list.iter().filter(|r| may_exist(r)) {
                push(home.join(rel), reason);
            }
        }
    }
    if let Some(root) = inp.capsule_root {
        push(root.to_path_buf(), HiddenReason::ToolState);
    }
    if let (Some(src), Some(home)) = (inp.source_dir, inp.home) {
        if let Some(parent) = src.parent() {
            if parent.starts_with(home) {
                if let Ok(rd) = std::fs::read_dir(parent) {
                    let mut sib: Vec<PathBuf> = rd
                        .filter_map(|e| e.ok())
                        .map(|e| e.path())
                        .filter(|p| p != src)
                        // never hide the home itself nor a folder holding the source
                        .filter(|p| p != home && !src.starts_with(p))
                        .filter(|p| {
                            // dot-folders directly in home are tool config (handled above),
                            // not projects; keep them readable unless listed.
                            !(parent == home
                                && p.file_name()
                                    .and_then(|n| n.to_str())
                                    .is_some_and(|n| n.starts_with('.')))
                        })
                        .collect();
                    sib.sort();
                    for p in sib {
                        push(p, HiddenReason::SiblingProject);
                    }
                }
            }
        }
    }
    out
}

/// The names directly in `home`, ASCII-lowercased (a case-insensitive file system finds
/// `~/Documents` under `documents` too), or `None` when they cannot all be read, when one
/// is not ASCII (Unicode case folding and ignorable characters are the file system's to
/// judge), or when there are very many: then every default path is looked up itself.
fn home_names(home: &Path) -> Option<std::collections::HashSet<String>> {
    const MAX: usize = 4096;
    let mut names = std::collections::HashSet::new();
    for e in std::fs::read_dir(home).ok()? {
        let name = e.ok()?.file_name().into_string().ok()?;
        if !name.is_ascii() || names.len() >= MAX {
            return None;
        }
        names.insert(name.to_ascii_lowercase());
    }
    Some(names)
}

impl SandboxPolicy {
    /// The reference decision for `path` (absolute, canonical): what the command may do
    /// with it. Deeper rules win over shallower ones; at equal depth the stronger
    /// precedence of the module docs wins.
    pub fn access(&self, path: &Path) -> Access {
        // (depth, precedence, access)
        let mut best: (usize, u8, Access) = (0, 0, Access::ReadOnly);
        let mut consider = |p: &Path, prec: u8, acc: Access| {
            if path.starts_with(p) {
                let d = p.components().count();
                if (d, prec) > (best.0, best.1) {
                    best = (d, prec, acc);
                }
            }
        };
        for h in &self.hidden {
            consider(&h.path, 1, Access::Hidden);
        }
        for r in &self.revealed {
            consider(r, 2, Access::ReadOnly);
        }
        consider(&self.workspace, 3, Access::ReadWrite);
        consider(&self.tmp_dir, 3, Access::ReadWrite);
        for w in &self.writable {
            consider(w, 3, Access::ReadWrite);
        }
        for r in &self.read_only {
            consider(r, 4, Access::ReadOnly);
        }
        best.2
    }

    /// All paths the command may write (workspace, tmp, extra writable), in that order;
    /// the workspace not when it is itself read-only (`exec --read-only-workspace`).
    pub fn writable_roots(&self) -> Vec<&Path> {
        let mut v = Vec::with_capacity(2 + self.writable.len());
        if !self.read_only.contains(&self.workspace) {
            v.push(self.workspace.as_path());
        }
        v.push(self.tmp_dir.as_path());
        v.extend(self.writable.iter().map(|p| p.as_path()));
        v
    }

    /// `sha256:<hex>` of the canonical JSON of this policy.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("sha256:{}", hex::encode(Sha256::digest(&json)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                HiddenPath {
                    path: "/home/u/.cargo".into(),
                    reason: HiddenReason::Requested,
                },
            ],
            revealed: vec!["/home/u/.cargo/bin".into()],
            pass_env: vec![],
            devices: vec![],
            network: NetworkPolicy::default(),
        }
    }

    #[test]
    fn a_read_only_workspace_is_no_writable_root() {
        let mut p = pol();
        let ws = p.workspace.clone();
        assert_eq!(p.writable_roots()[0], ws.as_path());
        p.read_only.push(ws.clone());
        p.writable.push(ws.join("out"));
        assert!(!p.writable_roots().contains(&ws.as_path()));
        assert_eq!(p.access(&ws.join("a.txt")), Access::ReadOnly);
        assert_eq!(p.access(&ws.join("out/x")), Access::ReadWrite);
    }

    #[test]
    fn precedence_deeper_wins() {
        let p = pol();
        assert_eq!(p.access(Path::new("/etc/passwd")), Access::ReadOnly);
        assert_eq!(p.access(Path::new("/home/u/.ssh/id_rsa")), Access::Hidden);
        assert_eq!(p.access(Path::new("/home/u/.sshx")), Access::ReadOnly);
        assert_eq!(
            p.access(Path::new(
                "/home/u/.local/share/capsule/bundles/c/policy.json"
            )),
            Access::Hidden
        );
        assert_eq!(
            p.access(Path::new("/home/u/.local/share/capsule/bundles/c/tmp/x")),
            Access::ReadWrite
        );
        assert_eq!(
            p.access(Path::new(
                "/home/u/.local/share/capsule/workspaces/c/src/a.rs"
            )),
            Access::ReadWrite
        );
        assert_eq!(
            p.access(Path::new(
                "/home/u/.local/share/capsule/workspaces/c/capsule-manifest.json"
            )),
            Access::ReadOnly
        );
        assert_eq!(
            p.access(Path::new("/home/u/.local/share/capsule/workspaces/d/x")),
            Access::Hidden
        );
        assert_eq!(
            p.access(Path::new("/home/u/.cargo/bin/cargo")),
            Access::ReadOnly
        );
        assert_eq!(
            p.access(Path::new("/home/u/.cargo/credentials")),
            Access::Hidden
        );
    }

    #[test]
    fn siblings_hidden_only_inside_home() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        let proj = home.join("src");
        for d in ["a", "b", "c"] {
            std::fs::create_dir_all(proj.join(d)).unwrap();
        }
        let src = proj.join("b");
        let h = default_hidden(&HiddenInputs {
            home: Some(&home),
            source_dir: Some(&src),
            capsule_root: None,
        });
        let sib: Vec<_> = h
            .iter()
            .filter(|h| h.reason == HiddenReason::SiblingProject)
            .map(|h| h.path.clone())
            .collect();
        assert_eq!(sib, vec![proj.join("a"), proj.join("c")]);
        // source outside home: no siblings hidden
        let other = t.path().join("elsewhere/x");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::create_dir_all(t.path().join("elsewhere/y")).unwrap();
        let h = default_hidden(&HiddenInputs {
            home: Some(&home),
            source_dir: Some(&other),
            capsule_root: None,
        });
        assert!(h.iter().all(|h| h.reason != HiddenReason::SiblingProject));
    }

    /// The paths [`default_hidden`] finds are exactly those an lstat of every listed path
    /// finds, whatever the home holds.
    #[test]
    fn hidden_home_paths_are_those_that_exist() {
        let reference = |home: &Path| -> Vec<PathBuf> {
            HOME_CREDENTIALS
                .iter()
                .chain(HOME_PERSONAL)
                .chain(HOME_AGENT_LOGINS)
                .map(|r| home.join(r))
                .filter(|p| std::fs::symlink_metadata(p).is_ok())
                .collect()
        };
        let found = |home: &Path| -> Vec<PathBuf> {
            default_hidden(&HiddenInputs {
                home: Some(home),
                ..Default::default()
            })
            .into_iter()
            .map(|h| h.path)
            .collect()
        };
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        let elsewhere = t.path().join("elsewhere");
        for d in [
            ".ssh",
            ".config/gh",
            ".cargo",
            "Documents",
            "Library/Mail",
            "proj",
        ] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        std::fs::create_dir_all(elsewhere.join("NuGet")).unwrap();
        std::fs::write(elsewhere.join("NuGet/NuGet.Config"), "x").unwrap();
        std::fs::write(home.join(".netrc"), "x").unwrap();
        std::fs::write(home.join(".cargo/credentials.toml"), "x").unwrap();
        // a symlinked first component, a dangling symlink
        std::os::unix::fs::symlink(&elsewhere, home.join(".nuget")).unwrap();
        std::os::unix::fs::symlink("/nonexistent", home.join(".aws")).unwrap();
        let got = found(&home);
        assert_eq!(got, reference(&home));
        for p in [".ssh", ".config/gh", ".netrc", ".aws", "Library/Mail"] {
            assert!(got.contains(&home.join(p)), "{p}: {got:?}");
        }
        assert!(got.contains(&home.join(".nuget/NuGet/NuGet.Config")));
        assert!(got.contains(&home.join(".cargo/credentials.toml")));
        // a non-ASCII name in home: every path is looked up itself, same answer
        std::fs::create_dir_all(home.join("Übung")).unwrap();
        assert_eq!(found(&home), reference(&home));
        // an unreadable or missing home: the same
        assert_eq!(found(&t.path().join("nohome")), Vec::<PathBuf>::new());
    }
}

//! Running the git CLI hermetically, for synthetic steps (inside the runtime's build
//! sandbox, see [`crate::workspace::materialize::StepRunner`]) and for fetching a pinned source by
//! URL into capsule's own cache; never on an operator's repository (those are read with
//! gix).
//!
//! The environment is cleared except `PATH`; `HOME` is an empty temporary folder;
//! system and global configuration are off (`GIT_CONFIG_NOSYSTEM=1`,
//! `GIT_CONFIG_GLOBAL=/dev/null`); the identity and dates are Kitsoki's
//! (`Kitsoki Capsule <capsule@kitsoki.dev>`, `2026-01-01T00:00:00Z`); hooks, signing,
//! fsmonitor, auto-gc and network protocols are switched off on the command line. So the
//! operator's `merge.conflictStyle`, `commit.gpgsign`, hooks or templates cannot change a
//! capsule's commits, files or digest.

use crate::error::{Error, IoContext, Result};
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Output, Stdio};

pub const IDENTITY_NAME: &str = "Kitsoki Capsule";
pub const IDENTITY_EMAIL: &str = "capsule@kitsoki.dev";
pub const FIXED_DATE: &str = "2026-01-01T00:00:00Z";

/// A hermetic git runner. Holds the empty `HOME` for its lifetime.
pub struct Git {
    home: tempfile::TempDir,
    path: OsString,
    default_branch: String,
}

impl Git {
    /// A runner whose `init.defaultBranch` is `default_branch`.
    pub fn new(default_branch: &str) -> Result<Self> {
        let home = tempfile::Builder::new()
            .prefix("capsule-git-home-")
            .tempdir()
            .map_err(|e| Error::io(std::env::temp_dir(), e))?;
        let path = std::env::var_os("PATH")
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        Ok(Self {
            home,
            path,
            default_branch: default_branch.to_string(),
        })
    }

    /// A `git` command in `cwd` with the hermetic environment and overrides.
    pub fn command(&self, cwd: &Path) -> Command {
        let mut c = Command::new("git");
        c.current_dir(cwd)
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path().join(".config"))
            .env("LC_ALL", "C")
            .env("TZ", "UTC")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", IDENTITY_NAME)
            .env("GIT_AUTHOR_EMAIL", IDENTITY_EMAIL)
            .env("GIT_AUTHOR_DATE", FIXED_DATE)
            .env("GIT_COMMITTER_NAME", IDENTITY_NAME)
            .env("GIT_COMMITTER_EMAIL", IDENTITY_EMAIL)
            .env("GIT_COMMITTER_DATE", FIXED_DATE)
            .stdin(Stdio::null());
        for kv in [
            "core.hooksPath=/dev/null".to_string(),
            "core.fsmonitor=false".into(),
            "core.autocrlf=false".into(),
            "commit.gpgsign=false".into(),
            "tag.gpgsign=false".into(),
            format!("init.defaultBranch={}", self.default_branch),
            "gc.auto=0".into(),
            "maintenance.auto=false".into(),
            "merge.conflictStyle=merge".into(),
            "rebase.autoStash=false".into(),
            "advice.detachedHead=false".into(),
            "credential.helper=".into(),
            "protocol.allow=never".into(),
            "protocol.file.allow=always".into(),
        ] {
            c.arg("-c").arg(kv);
        }
        c
    }

    /// Run `git args...` in `cwd`; `Err` carries a one-line reason (stderr's last line).
    pub fn run<S: AsRef<std::ffi::OsStr>>(&self, cwd: &Path, args: &[S]) -> Result<Output, String> {
        let mut c = self.command(cwd);
        c.args(args);
        let out = c.output().map_err(|e| format!("cannot run git: {e}"))?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(one_line_failure(&out))
        }
    }

    /// The empty home folder (for tests).
    pub fn home(&self) -> &Path {
        self.home.path()
    }
}

/// `git <args>: exit N: <last stderr line>`, on one line, bounded.
pub fn one_line_failure(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>();
    let tail = last
        .iter()
        .rev()
        .take(2)
        .rev()
        .cloned()
        .collect::<Vec<_>>()
        .join(" / ");
    let mut s = match out.status.code() {
        Some(c) => format!("git exited {c}"),
        None => "git was killed".into(),
    };
    if !tail.is_empty() {
        s.push_str(": ");
        s.push_str(&tail);
    }
    if s.len() > 400 {
        let mut cut = 400;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Is the git CLI usable at all?
pub fn available() -> Result<()> {
    Command::new("git")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .at("git")
        .and_then(|s| {
            if s.success() {
                Ok(())
            } else {
                Err(Error::other("git --version failed"))
            }
        })
}

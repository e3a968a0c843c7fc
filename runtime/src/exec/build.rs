//! Where a synthetic spec's steps run: in a build sandbox, never on the host.
//!
//! A step's git arguments (`-c alias.x=!cmd`, `rebase --exec`, `-c core.sshCommand`) and
//! the files it writes into `.git/` (filters, hooks, `core.worktree`) are the spec
//! author's code. [`SandboxedSteps`] is the only [`StepRunner`] the command line uses: it
//! runs `git init` and all steps in ONE sandboxed process of this binary (the hidden
//! `capsule __materialize` entry, in `crate::cli::materialize`), under the executor of
//! `capsule exec` with a one-off policy:
//!
//! - writable: only the staging workspace (bound at its own path, so the paths git records
//!   are the ones `rewrite_paths` later turns into the final ones) and a private `/tmp`
//!   (in the staging bundle, removed after the steps); HOME is an empty folder in it;
//! - hidden: the user's home whole, the default credential paths, capsule's own state
//!   (other capsules, bundles, settings); only this binary is revealed, read-only, so the
//!   sandbox can run it;
//! - network off (not even loopback TCP); its own pid namespace (nothing survives the
//!   steps); Landlock and seccomp as for `exec`.
//!
//! The parsed steps go in as JSON in the sandbox's tmp (the sandbox never reads the spec
//! file); the outcome comes back as one JSON line on stdout ([`StepFailure`]), stderr is
//! kept for the error when the entry itself fails. Isolation follows `exec`: weaker only
//! when the operator accepted it (`capsule isolation --accept-weaker on`), otherwise the
//! open fails with exit status 125 and nothing is left behind. There is no fallback to the
//! host. Elsewhere than Linux synthetic steps are refused (the macOS executor has no build
//! sandbox yet).

use capsule_bundle::layout::Layout;
use capsule_bundle::workspace::materialize::{StepFailure, StepRunner, Steps};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The hidden subcommand the sandbox runs.
pub const ENTRY: &str = "__materialize";
/// Set by [`SandboxedSteps`] in the sandbox's environment; the entry refuses
/// to run without it (a guard against running the steps on the host by accident).
pub const ENTRY_GUARD: &str = "CAPSULE_BUILD_SANDBOX";
/// How long all the steps of one spec may take before they are killed.
pub const STEPS_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs a spec's steps in the build sandbox (see the module documentation).
pub struct SandboxedSteps {
    layout: Layout,
    /// The sandbox could not be set up (the CLI then exits 125).
    setup_failed: Cell<bool>,
}

impl SandboxedSteps {
    /// The runner for capsules opened in `layout` (its root is hidden from the steps).
    pub fn new(layout: &Layout) -> Self {
        Self {
            layout: layout.clone(),
            setup_failed: Cell::new(false),
        }
    }

    /// Did the last run fail because the sandbox could not be set up (nothing ran)?
    pub fn setup_failed(&self) -> bool {
        self.setup_failed.get()
    }
}

impl StepRunner for SandboxedSteps {
    fn run(&self, steps: &Steps, root: &Path, scratch: &Path) -> Result<(), StepFailure> {
        let r = imp::run(&self.layout, steps, root, scratch);
        if let Err(Refused::Setup(_)) = &r {
            self.setup_failed.set(true);
        }
        r.map_err(|e| match e {
            Refused::Step(f) => f,
            Refused::Setup(msg) => StepFailure::Runner {
                msg: format!("the build sandbox could not be set up: {msg}; no step ran (steps never run on the host)"),
            },
        })
    }
}

/// Why the steps did not all apply.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
enum Refused {
    /// The steps ran and failed (or the entry in the sandbox failed).
    Step(StepFailure),
    /// Nothing ran.
    Setup(String),
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;
    pub(super) fn run(_: &Layout, _: &Steps, _: &Path, _: &Path) -> Result<(), Refused> {
        Err(Refused::Setup(
            "synthetic steps run only in capsule's Linux build sandbox, which this platform does not have yet (they are the spec author's code and are never run on the host)".into(),
        ))
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use crate::isolation;
    use crate::linux::{self, ExecError, ExecPlan, Hooks, Isolation, Stdio, Termination};
    use crate::settings::Settings;
    use capsule_bundle::policy::{
        default_hidden, HiddenInputs, HiddenPath, HiddenReason, NetworkMode, NetworkPolicy,
        SandboxPolicy,
    };
    use std::ffi::OsString;
    use std::io::{Read, Seek};
    use std::os::fd::AsRawFd;

    /// The outcome line the entry printed (its last non-empty stdout line).
    fn parse_outcome(stdout: &[u8]) -> Option<Option<StepFailure>> {
        let text = String::from_utf8_lossy(stdout);
        let last = text.lines().rev().find(|l| !l.trim().is_empty())?;
        serde_json::from_str::<Option<StepFailure>>(last).ok()
    }

    /// The last line or two of the entry's stderr, bounded, for an error message.
    fn tail(stderr: &[u8]) -> String {
        let text = String::from_utf8_lossy(stderr);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let mut s = lines[lines.len().saturating_sub(2)..].join(" / ");
        s = s.chars().filter(|c| !c.is_control()).take(400).collect();
        s
    }

    /// The build sandbox's policy: `workspace` and `tmp` writable, everything of the
    /// user's and of capsule's hidden, `exe` revealed, no network.
    pub(super) fn build_policy(
        workspace: &Path,
        tmp: &Path,
        capsule_root: &Path,
        exe: &Path,
    ) -> SandboxPolicy {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .and_then(|h| std::fs::canonicalize(h).ok());
        let mut hidden = default_hidden(&HiddenInputs {
            home: home.as_deref(),
            source_dir: None,
            capsule_root: Some(capsule_root),
        });
        let mut push = |path: PathBuf, reason| {
            if !hidden.iter().any(|h| h.path == path) {
                hidden.push(HiddenPath { path, reason });
            }
        };
        if let Some(h) = &home {
            push(h.clone(), HiddenReason::PersonalFiles);
        }
        push(capsule_root.to_path_buf(), HiddenReason::ToolState);
        // a path inside another hidden one is hidden already (one mount and one Landlock
        // walk less each), unless it is a symlink: its target is hidden too
        let all: Vec<PathBuf> = hidden.iter().map(|h| h.path.clone()).collect();
        hidden.retain(|h| {
            !all.iter().any(|o| o != &h.path && h.path.starts_with(o))
                || std::fs::symlink_metadata(&h.path).is_ok_and(|m| m.file_type().is_symlink())
        });
        SandboxPolicy {
            version: 1,
            capsule_name: "build".into(),
            workspace: workspace.to_path_buf(),
            read_only: Vec::new(),
            tmp_dir: tmp.to_path_buf(),
            // hidden whole (above), not shown read-only
            home: None,
            home_layer: None,
            cache_dir: None,
            writable: Vec::new(),
            hidden,
            revealed: vec![exe.to_path_buf()],
            pass_env: Vec::new(),
            devices: Vec::new(),
            network: NetworkPolicy {
                mode: NetworkMode::Off,
                ..Default::default()
            },
        }
    }

    pub(super) fn run(
        layout: &Layout,
        steps: &Steps,
        root: &Path,
        scratch: &Path,
    ) -> Result<(), Refused> {
        let setup = |what: &str, e: &dyn std::fmt::Display| Refused::Setup(format!("{what}: {e}"));
        let settings =
            Settings::load(&layout.settings_file()).map_err(|e| setup("settings", &e))?;
        let capsule_root =
            std::fs::canonicalize(&layout.root).map_err(|e| setup("capsule root", &e))?;
        let exe = std::fs::canonicalize("/proc/self/exe")
            .map_err(|e| setup("this binary (/proc/self/exe)", &e))?;
        if exe.to_string_lossy().ends_with(" (deleted)") {
            return Err(Refused::Setup(format!(
                "{}: this binary was replaced on disk; run capsule again",
                exe.display()
            )));
        }
        let workspace = std::fs::canonicalize(root).map_err(|e| setup("workspace", &e))?;
        let tmp = scratch.join("tmp");
        std::fs::create_dir(&tmp).map_err(|e| setup("sandbox tmp", &e))?;
        let tmp = std::fs::canonicalize(&tmp).map_err(|e| setup("sandbox tmp", &e))?;
        std::fs::create_dir(tmp.join("home")).map_err(|e| setup("sandbox home", &e))?;
        let job = serde_json::to_vec(steps).map_err(|e| setup("steps", &e))?;
        std::fs::write(tmp.join("steps.json"), job).map_err(|e| setup("steps", &e))?;
        // the entry's output, in files the sandbox cannot name (unlinked, host tmp)
        let mut out = tempfile::tempfile_in(scratch).map_err(|e| setup("output file", &e))?;
        let mut err = tempfile::tempfile_in(scratch).map_err(|e| setup("output file", &e))?;
        let policy = build_policy(&workspace, &tmp, &capsule_root, &exe);

        let mut degradation = Vec::new();
        let weaker = |degradation: &mut Vec<String>, namespaces_ok| {
            crate::exec::weaker_or_refuse(&settings, degradation, namespaces_ok)
                .map_err(|e| Refused::Setup(e.message))
        };
        let (mut iso, mut best_effort) =
            if crate::kernel::landlock::abi_version() < isolation::FULL_LANDLOCK_ABI {
                weaker(&mut degradation, true)?
            } else {
                (Isolation::Full, false)
            };
        let make = |iso: Isolation, landlock_best_effort: bool| {
            // with a mount namespace the private tmp is /tmp; without, it is where it is
            let inside = if iso == Isolation::Full {
                PathBuf::from("/tmp")
            } else {
                tmp.clone()
            };
            let path = std::env::var_os("PATH")
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
            let mut env: Vec<(OsString, OsString)> = vec![
                (ENTRY_GUARD.into(), "1".into()),
                ("HOME".into(), inside.join("home").into()),
                ("LANG".into(), "C".into()),
                ("PATH".into(), path),
                ("TMPDIR".into(), inside.clone().into()),
            ];
            // the entry's own diagnostics (to its captured stderr, logged below)
            if let Some(v) = std::env::var_os("RUST_LOG") {
                env.push(("RUST_LOG".into(), v));
            }
            let argv: Vec<OsString> = vec![
                exe.clone().into(),
                ENTRY.into(),
                "--steps".into(),
                inside.join("steps.json").into(),
                "--workspace".into(),
                workspace.clone().into(),
            ];
            ExecPlan {
                stdio: Stdio::Redirect {
                    stdout: out.as_raw_fd(),
                    stderr: err.as_raw_fd(),
                },
                timeout: Some(STEPS_TIMEOUT),
                landlock_best_effort,
                ..ExecPlan::for_policy(&policy, iso, argv, env, workspace.clone())
            }
        };
        let t0 = std::time::Instant::now();
        let mut result = linux::run(&make(iso, best_effort), Hooks::default());
        tracing::debug!("build sandbox: the steps ran in {:?}", t0.elapsed());
        if let Err(ExecError::Namespaces(msg)) = &result {
            tracing::info!("build sandbox: namespaces refused: {msg}");
            (iso, best_effort) = weaker(&mut degradation, false)?;
            result = linux::run(&make(iso, best_effort), Hooks::default());
        }
        if iso == Isolation::Weaker || best_effort {
            eprintln!(
                "capsule: warning: the spec's steps ran under weaker isolation: {}",
                degradation.join("; ")
            );
        }
        let read = |f: &mut std::fs::File| {
            let mut buf = Vec::new();
            if f.seek(std::io::SeekFrom::Start(0)).is_ok() {
                let _ = f.take(1 << 20).read_to_end(&mut buf);
            }
            buf
        };
        let outcome = match result {
            Err(e @ (ExecError::Setup(_) | ExecError::Namespaces(_))) => {
                return Err(Refused::Setup(e.to_string()))
            }
            Err(e) => return Err(Refused::Setup(format!("cannot start the step runner: {e}"))),
            Ok(o) => o,
        };
        let (stdout, stderr) = (read(&mut out), read(&mut err));
        if !stderr.is_empty() {
            tracing::debug!("build sandbox: stderr: {}", tail(&stderr));
        }
        let failed = |msg: String| Refused::Step(StepFailure::Runner { msg });
        match (outcome.termination, parse_outcome(&stdout)) {
            (Termination::Exited(0), Some(None)) => Ok(()),
            (Termination::Exited(1), Some(Some(f))) => Err(Refused::Step(f)),
            (Termination::TimedOut, _) => Err(failed(format!(
                "the steps took longer than {}s and were killed",
                STEPS_TIMEOUT.as_secs()
            ))),
            (t, _) => Err(failed(format!(
                "the step runner in the sandbox ended with {t:?}: {}",
                tail(&stderr)
            ))),
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::imp::build_policy;
    use super::*;
    use capsule_bundle::policy::{Access, NetworkMode};

    #[test]
    fn the_build_policy_writes_only_the_workspace_and_hides_the_home() {
        let home = std::fs::canonicalize(std::env::var_os("HOME").unwrap_or("/root".into()))
            .unwrap_or_else(|_| "/root".into());
        let ws = Path::new("/dev/shm/root/workspaces/.capsule-open-x-1");
        let tmp = Path::new("/dev/shm/root/bundles/.open-x-1/.steps/tmp");
        let exe = Path::new("/opt/capsule/bin/capsule");
        let p = build_policy(ws, tmp, Path::new("/dev/shm/root"), exe);
        assert_eq!(p.network.mode, NetworkMode::Off);
        assert_eq!(p.workspace, ws);
        assert_eq!(p.tmp_dir, tmp);
        assert!(p.writable.is_empty() && p.pass_env.is_empty() && p.devices.is_empty());
        assert!(p.home.is_none() && p.home_layer.is_none() && p.cache_dir.is_none());
        assert_eq!(p.revealed, vec![exe.to_path_buf()]);
        assert_eq!(p.access(&home), Access::Hidden, "{:?}", p.hidden);
        assert_eq!(p.access(&home.join("notes/secret")), Access::Hidden);
        assert_eq!(
            p.access(Path::new("/dev/shm/root/settings.json")),
            Access::Hidden
        );
        assert_eq!(
            p.access(Path::new("/dev/shm/root/workspaces/other")),
            Access::Hidden
        );
        assert_eq!(p.access(&ws.join(".git/config")), Access::ReadWrite);
        // no hidden path inside another (they are hidden already), symlinks aside
        for h in &p.hidden {
            assert!(
                !p.hidden
                    .iter()
                    .any(|o| o.path != h.path && h.path.starts_with(&o.path))
                    || std::fs::symlink_metadata(&h.path).is_ok_and(|m| m.file_type().is_symlink()),
                "{:?}",
                h.path
            );
        }
    }
}

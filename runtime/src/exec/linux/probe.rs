//! A spec's probe run in the capsule's sandbox ([`run_probe`]): the capsule's own policy,
//! an empty HOME of its own, isolation as for an exec, the git guard after it.

use super::{guard_git, weaker_or_refuse};
use crate::exec::with_current_hidden;
use crate::exit;
use crate::isolation;
use crate::linux::{self, ExecError, ExecPlan, Hooks, Isolation, Stdio};
use crate::settings::Settings;
use capsule_bundle::layout::{capsule_root, Layout};
use capsule_bundle::store;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

/// Run a probe script (`sh -c script`) of `cap` in its sandbox, with the capsule's own
/// policy (the spec's network mode) and exactly `env`; stdin is `/dev/null`, stdout and
/// stderr go to `out`. Isolation as for `exec` (never a silent fallback). Returns the
/// exit status (the command's own, 128+N, 124 on timeout, 126/127) or why nothing ran.
pub fn run_probe(
    cap: &store::OpenCapsule,
    script: &str,
    cwd: &Path,
    env: Vec<(OsString, OsString)>,
    timeout: Duration,
    out: std::os::fd::RawFd,
) -> Result<Option<i32>, String> {
    let settings = capsule_root()
        .map(|r| Layout::new(r).settings_file())
        .and_then(|f| Settings::load(&f).ok())
        .unwrap_or_default();
    let current = capsule_root()
        .map(|r| with_current_hidden(cap, &Layout::new(r)))
        .unwrap_or_else(|| cap.policy.clone());
    let policy = &current;
    let mut degradation = Vec::new();
    let (mut isolation, mut best_effort) =
        if crate::kernel::landlock::abi_version() < isolation::FULL_LANDLOCK_ABI {
            weaker_or_refuse(&settings, &mut degradation, true).map_err(|e| e.message)?
        } else {
            (Isolation::Full, false)
        };
    // an empty HOME of the probe's own, in the capsule's tmp (its /tmp inside)
    let home = tempfile::Builder::new()
        .prefix("probe-home-")
        .tempdir_in(&policy.tmp_dir)
        .map_err(|e| {
            format!(
                "cannot make a probe HOME in {}: {e}",
                policy.tmp_dir.display()
            )
        })?;
    let make = |iso: Isolation, landlock_best_effort: bool| {
        let full = iso == Isolation::Full;
        let home_inside = match (full, home.path().file_name()) {
            (true, Some(n)) => Path::new("/tmp").join(n),
            _ => home.path().to_path_buf(),
        };
        let mut env: Vec<(OsString, OsString)> =
            env.iter().filter(|(k, _)| k != "HOME").cloned().collect();
        env.push(("HOME".into(), home_inside.into_os_string()));
        ExecPlan {
            stdio: Stdio::Redirect {
                stdout: out,
                stderr: out,
            },
            timeout: Some(timeout),
            landlock_best_effort,
            ..ExecPlan::for_policy(
                policy,
                iso,
                vec!["sh".into(), "-c".into(), script.into()],
                env,
                cwd.to_path_buf(),
            )
        }
    };
    let mut result = linux::run(&make(isolation, best_effort), Hooks::default());
    if let Err(ExecError::Namespaces(_)) = &result {
        (isolation, best_effort) =
            weaker_or_refuse(&settings, &mut degradation, false).map_err(|e| e.message)?;
        result = linux::run(&make(isolation, best_effort), Hooks::default());
    }
    // a probe is the spec's code: the operator's git is guarded after it as after exec
    guard_git(cap, None);
    match result {
        Ok(o) if o.termination == linux::Termination::TimedOut => Ok(None),
        Ok(o) => Ok(Some(o.termination.exit_status() as i32)),
        Err(ExecError::NotFound { .. }) => Ok(Some(exit::NOT_FOUND as i32)),
        Err(ExecError::NotExecutable { .. }) => Ok(Some(exit::NOT_EXECUTABLE as i32)),
        Err(e) => Err(e.to_string()),
    }
}

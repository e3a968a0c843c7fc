//! The macOS executor: runs a command under `/usr/bin/sandbox-exec` with the Seatbelt
//! profile it is handed, rendered from the exec's macOS plan (`crate::plan::seatbelt`, by
//! the exec pipeline, `crate::exec`).
//!
//! The exec's policy is resolved where the Linux executor's is
//! (`crate::exec::resolve_policy`: the stored policy, the hidden paths of now, the exec's
//! flags); what is hidden, writable, read-only, the home view and the network mode are
//! decided by the plan made of it and the host's paths, never here, and `capsule
//! seatbelt` renders the same plan.
//!
//! Steps: the task's own TMPDIR the plan named (inside the capsule's tmp folder); a
//! preflight of `/usr/bin/true` under the profile, so a profile error is reported as one
//! and not as the command's status (65/71); a nested sandbox (`sandbox_apply: Operation
//! not permitted`) is reported, never retried without a sandbox; `log stream` filtered by
//! the nonce feeds the capsule's `refusals.jsonl` while the command runs.
//!
//! Everything that can be a pure function lives in `capsule-seatbelt` and the plan, tested
//! on Linux. This file uses only `std`, so it is also compiled (and its control flow tested
//! with a stand-in `sandbox-exec`, `crate::exec`'s macOS tests) in Linux test builds; it
//! has never run on a Mac.

use crate::exit;
use capsule_bundle::layout::bundle_files;
use capsule_bundle::policy::is_default_env;
use capsule_seatbelt::refusal::{parse_log_line, refusal_predicate};
use capsule_seatbelt::{Generated, Nonce};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// The system's `sandbox-exec`, always by absolute path.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";
/// The system's `log`, for refusals.
pub const LOG: &str = "/usr/bin/log";
/// The preflight command.
pub const TRUE: &str = "/usr/bin/true";

/// One exec on macOS: the profile rendered from its plan and what the plan gave the
/// command (`crate::exec`'s macOS pipeline makes both; the executor decides nothing).
#[derive(Debug, Clone)]
pub struct MacExec<'a> {
    /// The profile (`crate::plan::seatbelt::render`): its text and `-D` parameters.
    pub profile: &'a Generated,
    /// The refusal nonce the profile carries.
    pub nonce: &'a Nonce,
    /// The task's own TMPDIR, made here for the task and removed after it.
    pub task_tmpdir: &'a Path,
    /// The command's whole environment (the plan's, with the task's variables).
    pub env: &'a [(OsString, OsString)],
    /// The capsule's bundle directory (for `refusals.jsonl`).
    pub bundle_dir: &'a Path,
    pub cwd: &'a Path,
    pub command: &'a [OsString],
    /// `sandbox-exec` to use ([`SANDBOX_EXEC`]; tests substitute a stand-in).
    pub sandbox_exec: &'a Path,
    /// `log` to read refusals with (`None`: do not collect).
    pub log: Option<&'a Path>,
}

/// Why the command did not run (it never ran unsandboxed).
#[derive(Debug, thiserror::Error)]
pub enum MacError {
    #[error("cannot make the task's TMPDIR {0}: {1}")]
    TmpDir(PathBuf, std::io::Error),
    #[error("cannot make a nonce: {0}")]
    Nonce(std::io::Error),
    #[error("seatbelt profile: {0}")]
    Profile(#[from] capsule_seatbelt::CheckError),
    #[error(
        "already inside a sandbox ({0}); capsule does not run commands without their own \
         sandbox: run capsule outside the enclosing sandbox"
    )]
    Nested(String),
    #[error("the seatbelt profile was refused by {0} (status {1}): {2}")]
    Preflight(String, i32, String),
    #[error("cannot start {0}: {1}")]
    Spawn(String, std::io::Error),
}

fn first_line(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message")
        .trim()
        .to_string()
}

/// The task's TMPDIR, removed when the task ends (or fails to start).
struct TaskTmp(PathBuf);

impl Drop for TaskTmp {
    fn drop(&mut self) {
        // remove_dir_all does not follow symlinks the command may have left there
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!("cannot remove the task's TMPDIR {}: {e}", self.0.display());
        }
    }
}

/// Run the command; its exit status on success.
pub fn run(x: &MacExec<'_>) -> Result<ExitStatus, MacError> {
    // the task's own TMPDIR, private to it
    let tmp = x.task_tmpdir.to_path_buf();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&tmp)
        .map_err(|e| MacError::TmpDir(tmp.clone(), e))?;
    let _cleanup = TaskTmp(tmp);
    let g = x.profile;
    let env = x.env;
    let mut prefix: Vec<OsString> = vec!["-p".into(), g.text.clone().into()];
    prefix.extend(g.define_args().into_iter().map(OsString::from));
    prefix.push("--".into());
    let sandboxed = |argv: &[OsString]| {
        let mut c = Command::new(x.sandbox_exec);
        c.args(&prefix)
            .args(argv)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)));
        c
    };
    let shown = x.sandbox_exec.display().to_string();

    // preflight: the same profile around /usr/bin/true
    let pre = sandboxed(&[TRUE.into()])
        .current_dir(x.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| MacError::Spawn(shown.clone(), e))?;
    if !pre.status.success() {
        let msg = first_line(&pre.stderr);
        if msg.contains("sandbox_apply") && msg.contains("Operation not permitted") {
            return Err(MacError::Nested(msg));
        }
        return Err(MacError::Preflight(
            shown,
            pre.status.code().unwrap_or(-1),
            msg,
        ));
    }

    let logger = x
        .log
        .and_then(|log| start_refusal_log(log, x.nonce, x.bundle_dir));
    let status = sandboxed(x.command)
        .current_dir(x.cwd)
        .status()
        .map_err(|e| MacError::Spawn(shown, e));
    if let Some((mut child, reader)) = logger {
        // the log lags the kernel a little
        std::thread::sleep(std::time::Duration::from_millis(300));
        let _ = child.kill();
        let _ = child.wait();
        let _ = reader.join();
    }
    status
}

/// Start `log stream` for this nonce; a thread appends each refusal to `refusals.jsonl`.
/// Failing to start it is a warning: refusals still happen, they are just not recorded.
fn start_refusal_log(
    log: &Path,
    nonce: &Nonce,
    bundle_dir: &Path,
) -> Option<(std::process::Child, std::thread::JoinHandle<()>)> {
    let mut child = Command::new(log)
        .args(["stream", "--style", "ndjson", "--predicate"])
        .arg(refusal_predicate(nonce))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            tracing::warn!(
                "refusals will not be recorded: cannot start {}: {e}",
                log.display()
            )
        })
        .ok()?;
    let out = child.stdout.take()?;
    let path = bundle_dir.join(bundle_files::REFUSALS);
    let nonce = nonce.clone();
    let reader = std::thread::spawn(move || {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path);
        let mut file = match file {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!("refusals will not be recorded: {}: {e}", path.display());
                return;
            }
        };
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let Some(r) = parse_log_line(&line, &nonce) else {
                continue;
            };
            let mut v = serde_json::to_value(&r).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                let now =
                    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
                o.insert("time".into(), now.into());
            }
            let mut bytes = v.to_string().into_bytes();
            bytes.push(b'\n');
            if let Err(e) = file.write_all(&bytes) {
                tracing::warn!("cannot append to {}: {e}", path.display());
            }
        }
    });
    Some((child, reader))
}

/// The clean environment of a command: the default variables and those named in
/// `pass_env`, with values from `host` (TMPDIR, HOME and caches are set by [`run`]).
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
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), "/usr/bin:/bin:/usr/sbin:/sbin".into()));
    }
    env.sort();
    env
}

/// The exit code for a finished command: its own status, or 128+N for signal N.
pub fn exit_status(st: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
        _ => exit::SANDBOX_FAILED,
    }
}

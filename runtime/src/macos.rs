//! The macOS executor: runs a command under `/usr/bin/sandbox-exec` with the Seatbelt
//! profile rendered from the exec's macOS plan ([`crate::plan::seatbelt`]).
//!
//! The exec's policy is resolved where the Linux executor's is
//! (`crate::exec::resolve_policy`: the stored policy, the hidden paths of now, the exec's
//! flags); what is hidden, writable, read-only, the home view and the network mode are
//! decided by the plan made of it and the host's paths, never here, and `capsule
//! seatbelt` renders the same plan. The rendering only translates it.
//!
//! Steps: a fresh nonce and the task's own TMPDIR (inside the capsule's tmp folder); the
//! host's paths, the plan and the profile (rendered, round-tripped and linted); a preflight of
//! `/usr/bin/true` under the same profile, so a profile error is reported as one and not
//! as the command's status (65/71); a nested sandbox (`sandbox_apply: Operation not
//! permitted`) is reported, never retried without a sandbox; `log stream` filtered by the
//! nonce feeds the capsule's `refusals.jsonl` while the command runs.
//!
//! Everything that can be a pure function lives in `capsule-seatbelt` and is tested on
//! Linux. This file uses only `std`, so it is also compiled (and its control flow tested
//! with a stand-in `sandbox-exec`) in Linux test builds; it has never run on a Mac.

use crate::exit;
use crate::plan::seatbelt::{self, SeatbeltRequest};
use capsule_bundle::layout::bundle_files;
use capsule_bundle::policy::{is_default_env, SandboxPolicy};
use capsule_seatbelt::refusal::{parse_log_line, refusal_predicate};
use capsule_seatbelt::{HostResolver, Nonce};
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

/// One exec on macOS.
#[derive(Debug, Clone)]
pub struct MacExec<'a> {
    /// The exec's policy (the capsule's, with this exec's flags applied).
    pub policy: &'a SandboxPolicy,
    /// The capsule's bundle directory (for `refusals.jsonl`).
    pub bundle_dir: &'a Path,
    /// Port of the allowlist proxy (allowlist mode).
    pub proxy_port: Option<u16>,
    pub allow_keychain: bool,
    /// The environment the command gets before the task's own variables are added.
    pub env: Vec<(OsString, OsString)>,
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
    let nonce = Nonce::random().map_err(MacError::Nonce)?;
    // the task's own TMPDIR, private to it
    let tmp = x.policy.tmp_dir.join(format!("task-{}", nonce.as_str()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&tmp)
        .map_err(|e| MacError::TmpDir(tmp.clone(), e))?;
    let _cleanup = TaskTmp(tmp.clone());
    let req = SeatbeltRequest {
        policy: x.policy,
        nonce: nonce.clone(),
        network: None,
        proxy_port: x.proxy_port,
        allow_keychain: x.allow_keychain,
        tmpdir: Some(tmp),
        env: x.env.clone(),
    };
    // the host's paths first, then the plan (pure) and its rendering
    let facts = seatbelt::gather(&req, &HostResolver);
    let plan = seatbelt::plan(&req, &facts).map_err(capsule_seatbelt::CheckError::from)?;
    let g = seatbelt::render(&plan)?;
    let env = plan.env;
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
        .and_then(|log| start_refusal_log(log, &nonce, x.bundle_dir));
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

#[cfg(test)]
mod tests {
    //! Control flow with a stand-in `sandbox-exec` (a shell script) on Linux: what reaches
    //! the command, what a refused profile and a nested sandbox look like. Whether the real
    //! `sandbox-exec` behaves so is only known from its documentation and Codex's use.
    use super::*;
    use capsule_bundle::policy::{NetworkMode, NetworkPolicy};
    use std::os::unix::fs::PermissionsExt;

    fn policy(root: &Path) -> SandboxPolicy {
        SandboxPolicy {
            version: 1,
            capsule_name: "t".into(),
            workspace: root.join("ws"),
            read_only: vec![],
            tmp_dir: root.join("tmp"),
            home: None,
            home_layer: Some(root.join("home")),
            cache_dir: None,
            writable: vec![],
            hidden: vec![],
            revealed: vec![],
            pass_env: vec![],
            devices: vec![],
            network: NetworkPolicy {
                mode: NetworkMode::None,
                ..Default::default()
            },
        }
    }

    /// A stand-in for sandbox-exec: checks the argument shape, logs it, runs `$@`.
    /// [`run`], again while the fake is "text file busy": another test thread's fork may
    /// hold the fake's write descriptor (close-on-exec) for a moment after it was written.
    fn run_fake(x: &MacExec<'_>) -> Result<ExitStatus, MacError> {
        for _ in 0..100 {
            match run(x) {
                Err(MacError::Spawn(_, e)) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                r => return r,
            }
        }
        run(x)
    }

    fn fake(root: &Path, body: &str) -> PathBuf {
        let p = root.join("sandbox-exec");
        let script = format!(
            "#!/bin/sh\n[ \"$1\" = -p ] || exit 64\nprintf '%s\\n' \"$2\" > \"{log}/profile.sb\"\nshift 2\nwhile [ \"$1\" = -D ]; do echo \"$2\" >> \"{log}/defines\"; shift 2; done\n[ \"$1\" = -- ] || exit 64\nshift\n{body}\nexec \"$@\"\n",
            log = root.display()
        );
        std::fs::write(&p, script).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn exec<'a>(
        pol: &'a SandboxPolicy,
        root: &'a Path,
        fake: &'a Path,
        cmd: &'a [OsString],
    ) -> MacExec<'a> {
        MacExec {
            policy: pol,
            bundle_dir: root,
            proxy_port: None,
            allow_keychain: false,
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("TMPDIR".into(), "/elsewhere".into()),
            ],
            cwd: root,
            command: cmd,
            sandbox_exec: fake,
            log: None,
        }
    }

    fn setup() -> (tempfile::TempDir, PathBuf, SandboxPolicy) {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        for d in ["ws", "tmp", "home"] {
            std::fs::create_dir(root.join(d)).unwrap();
        }
        let pol = policy(&root);
        (t, root, pol)
    }

    #[test]
    fn runs_the_command_with_the_task_environment() {
        let (_t, root, pol) = setup();
        let f = fake(&root, "");
        let out = root.join("out");
        let cmd: Vec<OsString> = vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("echo \"$TMPDIR|$HOME\" > {}; exit 7", out.display()).into(),
        ];
        let st = run_fake(&exec(&pol, &root, &f, &cmd)).unwrap();
        assert_eq!(st.code(), Some(7));
        let got = std::fs::read_to_string(&out).unwrap();
        let (tmp, home) = got.trim().split_once('|').unwrap();
        assert!(
            tmp.starts_with(&format!("{}/task-capsule-", root.join("tmp").display())),
            "{tmp}"
        );
        assert!(
            !Path::new(tmp).exists(),
            "the task's TMPDIR is removed at the end"
        );
        assert_eq!(home, root.join("home").to_str().unwrap());
        let profile = std::fs::read_to_string(root.join("profile.sb")).unwrap();
        assert!(profile.starts_with("(version 1)"));
        let defines = std::fs::read_to_string(root.join("defines")).unwrap();
        assert!(defines.contains(&format!("WORKSPACE={}", root.join("ws").display())));
        assert!(defines.lines().any(|l| l == format!("TMPDIR={tmp}")));
    }

    #[test]
    fn a_nested_sandbox_is_reported_and_nothing_runs() {
        let (_t, root, pol) = setup();
        let f = fake(
            &root,
            "echo 'sandbox-exec: sandbox_apply: Operation not permitted' >&2; exit 71",
        );
        let marker = root.join("ran");
        let cmd: Vec<OsString> = vec!["/usr/bin/touch".into(), marker.clone().into()];
        let e = run_fake(&exec(&pol, &root, &f, &cmd)).unwrap_err();
        assert!(matches!(e, MacError::Nested(_)), "{e}");
        assert!(!marker.exists());
        assert_eq!(
            std::fs::read_dir(root.join("tmp")).unwrap().count(),
            0,
            "nothing left behind"
        );
    }

    #[test]
    fn a_refused_profile_is_reported_as_such() {
        let (_t, root, pol) = setup();
        let f = fake(
            &root,
            "echo 'sandbox-exec: unbound variable: foo' >&2; exit 65",
        );
        let marker = root.join("ran");
        let cmd: Vec<OsString> = vec!["/usr/bin/touch".into(), marker.clone().into()];
        let e = run_fake(&exec(&pol, &root, &f, &cmd)).unwrap_err();
        assert!(matches!(e, MacError::Preflight(_, 65, _)), "{e}");
        assert!(e.to_string().contains("unbound variable"));
        assert!(!marker.exists());
    }
}

//! Control flow with a stand-in `sandbox-exec` (a shell script) on Linux: what reaches
//! the command, what a refused profile and a nested sandbox look like. Whether the real
//! `sandbox-exec` behaves so is only known from its documentation and Codex's use. The
//! executor is handed the profile and environment of the plan [`planned`] makes.
use super::*;
use crate::macos::run;
use capsule_bundle::policy::NetworkPolicy;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::ExitStatus;

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

/// Plan the exec of `cmd` under `pol` and run it with the stand-in `fake`.
fn run_planned(
    pol: &SandboxPolicy,
    root: &Path,
    fake: &Path,
    cmd: &[OsString],
) -> Result<ExitStatus, MacError> {
    let env = vec![
        ("PATH".into(), "/usr/bin:/bin".into()),
        ("TMPDIR".into(), "/elsewhere".into()),
    ];
    let (plan, profile) = planned(pol, env, &HostResolver)?;
    run_fake(&MacExec {
        profile: &profile,
        nonce: &plan.nonce,
        task_tmpdir: &plan.task_tmpdir,
        env: &plan.env,
        bundle_dir: root,
        cwd: root,
        command: cmd,
        sandbox_exec: fake,
        log: None,
    })
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
    let st = run_planned(&pol, &root, &f, &cmd).unwrap();
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
    let e = run_planned(&pol, &root, &f, &cmd).unwrap_err();
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
    let e = run_planned(&pol, &root, &f, &cmd).unwrap_err();
    assert!(matches!(e, MacError::Preflight(_, 65, _)), "{e}");
    assert!(e.to_string().contains("unbound variable"));
    assert!(!marker.exists());
}

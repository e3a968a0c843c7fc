//! `capsule export`: the bundle it writes runs under plain OCI runtimes (runc and crun, as
//! Debian ships them), as root and as the unprivileged test user, and what an OCI runtime
//! can enforce holds there: a secret made after open is unreadable, nothing outside the
//! workspace is writable, no capability, no_new_privs, keyctl and new user namespaces
//! refused (through the 32-bit and x32 entries too), no set-id file, no host network in
//! `none`; the workspace is writable and `git commit` works in it.
//!
//! The runtimes must be installed (`.ci/run` installs them); without them the test says so
//! and passes, unless `CAPSULE_TEST_REQUIRE_USER=1` (CI), where it fails.

use capsule_e2e::{bounded, git_repo, runners, scratch, stderr, stdout, Runner};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SECRET: &str = "OCI-LATE-SECRET-77c1";

/// The runtimes present; panics in CI when one is missing.
fn runtimes() -> Vec<&'static str> {
    let mut v = Vec::new();
    for rt in ["runc", "crun"] {
        let found = Command::new(rt)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if found {
            v.push(rt);
        } else if std::env::var("CAPSULE_TEST_REQUIRE_USER").as_deref() == Ok("1") {
            panic!("{rt} is not installed (apt-get install runc crun; .ci/run does it)");
        } else {
            eprintln!("note: {rt} is not installed: its exported-bundle checks are skipped");
        }
    }
    v
}

fn capsule(r: &Runner, root: &Path, home: &Path) -> Command {
    let mut c = r.capsule(root);
    c.env("HOME", home).current_dir(home).stdin(Stdio::null());
    c
}

/// `RT --root STATE run -b BUNDLE ID` as the runner. A host whose cgroup v2 hierarchy is
/// mounted next to v1 with controllers in it ("hybrid") is refused by crun 1.8 whatever
/// the bundle says; there the run is repeated in a mount namespace without the v2 mount
/// (root sets it up, then becomes the runner), which changes nothing the bundle enforces.
fn run_bundle(rt: &str, r: &Runner, bundle: &Path, state: &Path, id: &str) -> Option<Output> {
    let args = |c: &mut Command| {
        c.arg(rt)
            .arg("--root")
            .arg(state.join(rt))
            .args(["run", "-b"])
            .arg(bundle)
            .arg(id);
    };
    let mut c = Command::new("env");
    c.arg(format!("XDG_RUNTIME_DIR={}", state.display()));
    args(&mut c);
    c.stdin(Stdio::null());
    if let Runner::User { uid, gid, .. } = r {
        c.uid(*uid).gid(*gid);
    }
    let o = bounded(&mut c, 60);
    if !stderr(&o).contains("cgroups in hybrid mode not supported") {
        return Some(o);
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("note: {rt} refuses this host's hybrid cgroup layout, and only root can run it without the v2 mount: skipped");
        return None;
    }
    eprintln!(
        "note: {rt} refuses this host's hybrid cgroup layout; running it without the v2 mount"
    );
    let drop = match r {
        Runner::User { uid, gid, .. } => {
            format!("setpriv --reuid={uid} --regid={gid} --clear-groups -- ")
        }
        Runner::Current => String::new(),
    };
    let mut inner = Command::new("true");
    args(&mut inner);
    let line: Vec<String> = std::iter::once(inner.get_program())
        .chain(inner.get_args())
        .map(|a| format!("'{}'", a.to_string_lossy()))
        .collect();
    let script = format!(
        "umount -l /sys/fs/cgroup/unified && exec {drop}env XDG_RUNTIME_DIR='{}' {}",
        state.display(),
        line[1..].join(" ")
    );
    Some(bounded(
        Command::new("unshare")
            .args(["-m", "sh", "-c", &script])
            .stdin(Stdio::null()),
        60,
    ))
}

/// The probe run in the bundle: one marker line per check.
fn probe(ws: &Path, port: u16, rt: &str) -> String {
    format!(
        r#"
cat "$HOME/.ssh/id_ed25519" 2>/dev/null
grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs):' /proc/self/status
touch /usr/oci-probe 2>/dev/null && echo WROTE-USR
touch /etc/oci-probe 2>/dev/null && echo WROTE-ETC
touch /oci-probe 2>/dev/null && echo WROTE-ROOT
unshare --user true 2>/dev/null && echo USERNS-MADE
python3 -c 'import ctypes; l=ctypes.CDLL(None, use_errno=True); r=l.syscall(250, 0, -3, 0); print("KEYCTL", r, ctypes.get_errno())'
python3 -c '
import ctypes, mmap
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ|mmap.PROT_WRITE|mmap.PROT_EXEC)
m.write(bytes([0xb8,0x14,0,0,0,0xcd,0x80,0xc3]))
a = ctypes.addressof(ctypes.c_char.from_buffer(m))
print("I386-RAN", ctypes.CFUNCTYPE(ctypes.c_int)(a)())' 2>/dev/null
python3 -c 'import ctypes; l=ctypes.CDLL(None, use_errno=True); print("X32-RAN", l.syscall(0x40000000 | 39))' 2>/dev/null
(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo HOST-NET
touch /tmp/sid && chmod u+s /tmp/sid 2>/dev/null
python3 -c 'import ctypes; l=ctypes.CDLL(None); l.syscall(452, -100, b"/tmp/sid", 0o6755, 0)'
[ -u /tmp/sid ] || [ -g /tmp/sid ] && echo SETID-MADE
cd '{ws}' && echo w > oci-{rt}.txt && git add oci-{rt}.txt && git -c user.email=t@e -c user.name=t commit -qm oci && echo COMMIT-OK
echo PROBE-END
"#,
        ws = ws.display(),
    )
}

#[test]
fn exported_bundles_run_under_runc_and_crun_and_enforce_the_plan() {
    let rts = runtimes();
    if rts.is_empty() {
        return;
    }
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let dir = scratch();
        let home = dir.path().join("home");
        let src = home.join("projects/app");
        git_repo(&src, &[("a.txt", "a\n")]);
        let root: PathBuf = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        r.own(dir.path());
        let o = capsule(&r, &root, &home)
            .args(["open", "--source"])
            .arg(&src)
            .args(["--name", "oci", "--json"])
            .output()
            .unwrap();
        assert!(o.status.success(), "open: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let ws = PathBuf::from(v["workspace"].as_str().unwrap());
        // a first ssh key, made after the open
        let key = home.join(".ssh/id_ed25519");
        std::fs::create_dir_all(key.parent().unwrap()).unwrap();
        std::fs::write(&key, SECRET).unwrap();
        r.own(&home);
        let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = host.local_addr().unwrap().port();

        for rt in &rts {
            let bundle = dir.path().join(format!("bundle-{rt}"));
            let o = capsule(&r, &root, &home)
                .args(["export", "oci"])
                .arg(&bundle)
                .args(["--json", "--", "/bin/bash", "-c", &probe(&ws, port, rt)])
                .output()
                .unwrap();
            assert!(o.status.success(), "export: {}", stderr(&o));
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(v["dir"].as_str(), Some(bundle.to_str().unwrap()));
            let state = dir.path().join(format!("state-{rt}"));
            std::fs::create_dir_all(&state).unwrap();
            r.own(&state);
            let id = format!("capsule-e2e-{}-{rt}-{}", std::process::id(), r.uid());
            let Some(o) = run_bundle(rt, &r, &bundle, &state, &id) else {
                continue;
            };
            let out = stdout(&o);
            let ctx = format!("{rt} as {}: {out}\n{}", r.label(), stderr(&o));
            assert!(o.status.success(), "{ctx}");
            assert!(out.contains("PROBE-END"), "{ctx}");
            assert!(!out.contains(SECRET), "secret readable: {ctx}");
            for cap in ["CapEff", "CapPrm", "CapBnd"] {
                assert!(
                    out.lines()
                        .any(|l| l.starts_with(cap) && l.ends_with("0000000000000000")),
                    "{cap} not empty: {ctx}"
                );
            }
            assert!(
                out.lines()
                    .any(|l| l.starts_with("NoNewPrivs:") && l.ends_with('1')),
                "{ctx}"
            );
            for w in ["WROTE-USR", "WROTE-ETC", "WROTE-ROOT"] {
                assert!(!out.contains(w), "{w}: {ctx}");
            }
            assert!(!out.contains("USERNS-MADE"), "{ctx}");
            assert!(
                out.lines().any(|l| l == "KEYCTL -1 1"),
                "keyctl not refused with EPERM: {ctx}"
            );
            assert!(!out.contains("I386-RAN"), "32-bit entry open: {ctx}");
            assert!(!out.contains("X32-RAN"), "x32 entry open: {ctx}");
            assert!(!out.contains("HOST-NET"), "host network reachable: {ctx}");
            assert!(!out.contains("SETID-MADE"), "a set-id file was made: {ctx}");
            assert!(out.contains("COMMIT-OK"), "{ctx}");
            assert!(ws.join(format!("oci-{rt}.txt")).exists(), "{ctx}");
        }
        drop(host);
    }
}

#[test]
fn export_refuses_a_non_empty_dir_and_leaves_nothing_on_failure() {
    let r = Runner::Current;
    let dir = scratch();
    let home = dir.path().join("home");
    let src = home.join("app");
    git_repo(&src, &[("a.txt", "a\n")]);
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let o = capsule(&r, &root, &home)
        .args(["open", "--source"])
        .arg(&src)
        .args(["--name", "x"])
        .output()
        .unwrap();
    assert!(o.status.success(), "open: {}", stderr(&o));
    let full = dir.path().join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("keep"), "mine").unwrap();
    let o = capsule(&r, &root, &home)
        .args(["export", "x"])
        .arg(&full)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not empty"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(full.join("keep")).unwrap(), "mine");
    // an unknown capsule: nothing made at the target, nothing left next to it
    let none = dir.path().join("new");
    let o = capsule(&r, &root, &home)
        .args(["export", "nope"])
        .arg(&none)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(!none.exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".capsule-export")
        })
        .collect();
    assert!(leftovers.is_empty());
    // an empty dir is fine, and the default command is a shell
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = capsule(&r, &root, &home)
        .args(["export", "x", "--json"])
        .arg(&empty)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["args"][0].as_str().unwrap().starts_with('/'), "{v}");
    assert!(empty.join("config.json").is_file() && empty.join("rootfs").is_dir());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(empty.join("config.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o077,
        0,
        "config.json holds the environment: {mode:o}"
    );
}

#[test]
fn inspect_shows_the_plan_and_its_rendering_as_of_now() {
    let r = Runner::Current;
    let dir = scratch();
    let home = dir.path().join("home");
    let src = home.join("app");
    git_repo(&src, &[("a.txt", "a\n")]);
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let o = capsule(&r, &root, &home)
        .args(["open", "--source"])
        .arg(&src)
        .args(["--name", "i"])
        .output()
        .unwrap();
    assert!(o.status.success(), "open: {}", stderr(&o));
    // made after open: the stored open-time config cannot know it, the plan does
    let ssh = home.join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    std::fs::write(ssh.join("id_ed25519"), SECRET).unwrap();
    let o = capsule(&r, &root, &home)
        .args(["inspect", "i", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["plan"]["mounts"]
            .as_array()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    let now = &v["config_now"];
    assert_eq!(
        now["process"]["capabilities"]["bounding"],
        serde_json::json!([])
    );
    assert_eq!(now["process"]["noNewPrivileges"], serde_json::json!(true));
    assert!(now["linux"]["seccomp"]["syscalls"]
        .as_array()
        .is_some_and(|s| !s.is_empty()));
    let masked: Vec<&str> = now["linux"]["maskedPaths"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x.as_str())
        .collect();
    assert!(masked.contains(&ssh.to_str().unwrap()), "{masked:?}");
    assert!(!stdout(&o).contains(SECRET));
    let text = capsule(&r, &root, &home)
        .args(["inspect", "i"])
        .output()
        .unwrap();
    assert!(
        stdout(&text).contains("does NOT enforce"),
        "{}",
        stdout(&text)
    );
}

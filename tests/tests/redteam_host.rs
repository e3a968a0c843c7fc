//! Red team: host-side commands (`close`, `inspect`) over what a sandboxed command left in
//! the workspace and the capsule's state. Each case runs as root and as the unprivileged
//! test user.

use capsule_e2e::{runners, scratch, stderr, Runner};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn git(dir: &Path, args: &[&str]) {
    let st = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .stdout(Stdio::null())
        .status()
        .expect("git");
    assert!(st.success(), "git {args:?}");
}

struct Env {
    dir: tempfile::TempDir,
    runner: Runner,
}

impl Env {
    fn new(runner: &Runner) -> Env {
        let dir = scratch();
        let src = dir.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("a.txt"), "a\n").unwrap();
        git(&src, &["init", "-q"]);
        git(&src, &["add", "-A"]);
        git(&src, &["commit", "-q", "-m", "init"]);
        std::fs::create_dir_all(dir.path().join("root")).unwrap();
        runner.own(dir.path());
        Env {
            dir,
            runner: runner.clone(),
        }
    }
    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    fn run(&self, args: &[&str]) -> Output {
        let mut c = self.runner.capsule(&self.root());
        c.current_dir(self.dir.path())
            .args(args)
            .stdin(Stdio::null());
        c.output().expect("run capsule")
    }
    fn open(&self, name: &str) -> PathBuf {
        let src = self.dir.path().join("src");
        let o = self.run(&[
            "open",
            "--source",
            src.to_str().unwrap(),
            "--name",
            name,
            "--json",
        ]);
        assert!(o.status.success(), "open: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        PathBuf::from(v["workspace"].as_str().unwrap())
    }
}

fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// After an exec (the home layer's overlay leaves a mode-000 `work/work` in the bundle)
/// and a command that made folders without permissions in the workspace, `close` removes
/// everything, also for an unprivileged user: nothing half-removed stays on disk.
#[test]
fn close_removes_folders_without_permissions() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = Env::new(&r);
        let ws = e.open("perm");
        let o = e.run(&[
            "exec",
            "perm",
            "--",
            "sh",
            "-c",
            "mkdir -p locked/inner/deeper && touch locked/inner/deeper/f && chmod 000 locked/inner locked && echo hi > ~/.newrc",
        ]);
        assert!(o.status.success(), "exec: {}", stderr(&o));
        let o = e.run(&["close", "perm", "--force"]);
        assert!(o.status.success(), "close: {}", stderr(&o));
        assert!(!ws.exists(), "workspace left behind");
        assert_eq!(
            names(&e.root().join("bundles")),
            Vec::<String>::new(),
            "bundle (or a half-removed .closing-*) left behind"
        );
        assert_eq!(names(&e.root().join("workspaces")), Vec::<String>::new());
    }
}

/// `capsule ARGS` as the runner inside a user namespace that may create no more (so
/// `capsule exec` can only run under weaker isolation: Landlock + seccomp, no mounts).
fn no_userns(e: &Env, args: &[&str]) -> Output {
    let base = e.runner.capsule(&e.root());
    let mut w = match &e.runner {
        Runner::Current => Command::new("unshare"),
        Runner::User { uid, gid, .. } => {
            let mut w = Command::new("setpriv");
            w.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--clear-groups")
                .arg("unshare");
            w
        }
    };
    w.args(["-U", "-r", "sh", "-c"])
        .arg("echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"")
        .arg(base.get_program())
        .args(args);
    w.env_clear();
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            w.env(k, v);
        }
    }
    w.current_dir(e.dir.path()).stdin(Stdio::null());
    w.output().expect("run capsule in a user namespace")
}

/// `capsule inspect` prints the workspace's manifest, "informational". Under weaker
/// isolation (no mounts) the command can replace it: a symlink to a file it cannot read
/// must not be followed (serde's errors quote values), a FIFO must not block `inspect`,
/// and a symlink to /dev/zero must not make it read forever.
#[test]
fn inspect_does_not_follow_a_replaced_manifest() {
    let value = "HIDDEN-VALUE-0b7e";
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = Env::new(&r);
        // a host file hidden from the sandbox (capsule's own state) shaped like a manifest,
        // so a followed link would print it whole
        let secret = e.root().join("hidden.json");
        std::fs::write(
            &secret,
            format!(
                "{{\"capsule_name\": \"{value}\", \"workspace\": \"w\", \"opened_at\": \"t\"}}"
            ),
        )
        .unwrap();
        e.runner.own(&secret);
        let o = no_userns(&e, &["isolation", "--accept-weaker", "on"]);
        assert!(o.status.success(), "accept weaker: {}", stderr(&o));
        let plants = [
            (
                "symlink",
                format!("ln -s {} capsule-manifest.json", secret.display()),
            ),
            ("fifo", "mkfifo capsule-manifest.json".to_string()),
            ("zero", "ln -s /dev/zero capsule-manifest.json".to_string()),
        ];
        for (i, (what, plant)) in plants.iter().enumerate() {
            let name = format!("weak{i}");
            e.open(&name);
            let script = format!(
                "cat {} 2>/dev/null && {{ echo 'secret readable inside'; exit 9; }}; rm capsule-manifest.json && {plant}",
                secret.display()
            );
            let o = no_userns(&e, &["exec", &name, "--", "sh", "-c", &script]);
            assert!(o.status.success(), "{what}: weaker exec: {}", stderr(&o));
            // inspect, bounded in time (a FIFO or /dev/zero would block or grow forever)
            let mut c = e.runner.capsule(&e.root());
            c.current_dir(e.dir.path())
                .args(["inspect", &name, "--json"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = c.spawn().expect("spawn inspect");
            let t = std::time::Instant::now();
            while child.try_wait().unwrap().is_none() {
                if t.elapsed() > std::time::Duration::from_secs(20) {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("{what}: capsule inspect hung on a replaced manifest");
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let o = child.wait_with_output().unwrap();
            assert!(o.status.success(), "{what}: inspect: {}", stderr(&o));
            let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
            assert!(
                !all.contains(value),
                "{what}: inspect showed a hidden file through the manifest: {all}"
            );
        }
    }
}

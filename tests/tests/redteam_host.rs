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
        c.current_dir(self.dir.path()).args(args).stdin(Stdio::null());
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

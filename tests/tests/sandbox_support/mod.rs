//! Shared fixture of the sandbox tests: a capsule made by hand the way `capsule open`
//! lays it out (workspace = a git repository, bundle with `policy.json` and `bundle.json`),
//! with the capsule root inside a scratch home that holds a fake secret
//! (`~/.ssh/id_rsa`). Every command runs as a given [`Runner`] with `HOME` = that home.
#![allow(dead_code)]

use capsule_bundle::policy::{default_hidden, HiddenInputs, NetworkPolicy, SandboxPolicy};
use capsule_e2e::{scratch, Runner};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const NAME: &str = "t";
pub const SECRET: &str = "SECRET-KEY-MATERIAL-4f1c";

pub struct Capsule {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    pub root: PathBuf,
    pub ws: PathBuf,
    pub bundle: PathBuf,
    pub runner: Runner,
}

fn git(dir: &Path, home: &Path, args: &[&str]) {
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
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdout(Stdio::null())
        .status()
        .expect("git");
    assert!(st.success(), "git {args:?}");
}

impl Capsule {
    pub fn new(runner: &Runner) -> Capsule {
        Self::with(runner, |_| {})
    }

    /// Make a capsule; `tweak` may change the policy before it is written.
    pub fn with(runner: &Runner, tweak: impl FnOnce(&mut SandboxPolicy)) -> Capsule {
        let dir = scratch();
        let home = dir.path().join("home");
        let root = home.join(".local/share/capsule");
        let ws = root.join("workspaces").join(NAME);
        let bundle = root.join("bundles").join(NAME);
        for d in [
            &ws,
            &bundle.join("tmp"),
            &home.join(".ssh"),
            &home.join("Documents"),
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(home.join(".ssh/id_rsa"), SECRET).unwrap();
        std::fs::write(home.join("Documents/diary.txt"), SECRET).unwrap();
        std::fs::write(home.join("notes.txt"), "readable\n").unwrap();
        // the workspace: a git repository with one commit
        std::fs::write(ws.join("README.md"), "hello\n").unwrap();
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/main.c"), "int main(void){return 0;}\n").unwrap();
        git(&ws, &home, &["init", "-q"]);
        git(&ws, &home, &["add", "."]);
        git(&ws, &home, &["commit", "-q", "-m", "init"]);
        std::fs::write(
            ws.join(".git/info/exclude"),
            ".kitsoki-capsule\ncapsule-manifest.json\n",
        )
        .unwrap();
        std::fs::write(ws.join(".kitsoki-capsule"), format!("{NAME}\n")).unwrap();
        std::fs::write(
            ws.join("capsule-manifest.json"),
            serde_json::json!({"capsule_name": NAME, "workspace": ws, "opened_at": "2026-01-01T00:00:00Z"}).to_string(),
        )
        .unwrap();
        let hidden = default_hidden(&HiddenInputs {
            home: Some(&home),
            source_dir: None,
            capsule_root: Some(&root),
        });
        let mut policy = SandboxPolicy {
            version: 1,
            capsule_name: NAME.into(),
            workspace: ws.clone(),
            read_only: vec![
                ws.join("capsule-manifest.json"),
                ws.join(".kitsoki-capsule"),
            ],
            tmp_dir: bundle.join("tmp"),
            home: Some(home.clone()),
            home_layer: None,
            cache_dir: None,
            writable: vec![],
            hidden,
            revealed: vec![],
            pass_env: vec![],
            devices: vec![],
            network: NetworkPolicy::default(),
        };
        tweak(&mut policy);
        Self::write_bundle(&bundle, &policy);
        runner.own(dir.path());
        Capsule {
            dir,
            home,
            root,
            ws,
            bundle,
            runner: runner.clone(),
        }
    }

    pub fn write_bundle(bundle: &Path, policy: &SandboxPolicy) {
        std::fs::write(
            bundle.join("policy.json"),
            serde_json::to_vec_pretty(policy).unwrap(),
        )
        .unwrap();
        let record = serde_json::json!({
            "version": 1,
            "name": NAME,
            "workspace": policy.workspace,
            "opened_at": "2026-01-01T00:00:00Z",
            "policy_digest": policy.digest(),
            "network": "none",
            "tree_digest": "0",
        });
        std::fs::write(bundle.join("bundle.json"), record.to_string()).unwrap();
    }

    /// `capsule` as the runner, HOME = the scratch home.
    pub fn capsule(&self) -> Command {
        let mut c = self.runner.capsule(&self.root);
        c.env("HOME", &self.home);
        c.current_dir(&self.ws);
        c
    }

    /// `capsule exec t [flags] -- argv`
    pub fn exec_with(&self, flags: &[&str], argv: &[&str]) -> Output {
        let mut c = self.capsule();
        c.arg("exec").arg(NAME).args(flags).arg("--").args(argv);
        c.stdin(Stdio::null());
        c.output().unwrap_or_else(|e| panic!("run capsule: {e}"))
    }

    pub fn exec(&self, argv: &[&str]) -> Output {
        self.exec_with(&[], argv)
    }

    /// `sh -c script` in the sandbox.
    pub fn sh(&self, script: &str) -> Output {
        self.exec(&["sh", "-c", script])
    }

    /// The exec records written so far.
    pub fn records(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.bundle.join("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("record is JSON"))
            .collect()
    }
}

pub fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// Assert the command ran in the sandbox and exited 0.
#[track_caller]
pub fn ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        out(o),
        err(o)
    );
}

/// Every runner: root and the unprivileged test user.
pub fn each_runner(f: impl Fn(&Runner)) {
    for r in capsule_e2e::runners() {
        eprintln!("--- runner {}", r.label());
        f(&r);
    }
}

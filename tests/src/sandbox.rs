//! Fixture of the sandbox tests: a capsule made by hand the way `capsule open` lays it out
//! (workspace = a git repository, bundle with `policy.json` and `bundle.json`), with the
//! capsule root inside a scratch home that holds a fake secret (`~/.ssh/id_rsa`). Every
//! command runs as a given [`Runner`] with `HOME` = that home.

use crate::{git_repo, scratch, Runner};
use capsule_bundle::policy::{default_hidden, HiddenInputs, NetworkPolicy, SandboxPolicy};
use capsule_bundle::store::record::{BundleRecord, RECORD_VERSION};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub use crate::assert_ok as ok;
pub use crate::code;
pub use crate::stderr as err;
pub use crate::stdout as out;

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
        std::fs::write(home.join(".profile"), "readable\n").unwrap();
        // the workspace: a git repository with one commit
        git_repo(
            &ws,
            &[
                ("README.md", "hello\n"),
                ("src/main.c", "int main(void){return 0;}\n"),
            ],
        );
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
        write_bundle(&bundle, &policy);
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

/// Write a hand-made capsule's records into `bundle` as `capsule open` would:
/// `policy.json` and a `bundle.json` naming the policy's capsule and workspace (no spec,
/// source or HEAD, a zero tree digest, network `none`, every grant of the policy accepted).
pub fn write_bundle(bundle: &Path, policy: &SandboxPolicy) {
    let record = BundleRecord {
        version: RECORD_VERSION,
        name: policy.capsule_name.clone(),
        workspace: policy.workspace.clone(),
        spec_path: None,
        source: None,
        opened_at: "2026-01-01T00:00:00Z".into(),
        policy_digest: policy.digest(),
        network: "none".into(),
        head: None,
        branch: None,
        tree_digest: "0".repeat(64),
        // a hand-made capsule stands for an operator who accepted what its policy gives
        grants: Some(
            capsule_bundle::policy::grants::decide(
                capsule_bundle::policy::grants::of_policy(policy, &[]),
                &capsule_bundle::policy::grants::Acceptance::All,
            )
            .expect("accept all"),
        ),
        tool_reveals: vec![],
        limits: Default::default(),
    };
    std::fs::write(
        bundle.join("policy.json"),
        serde_json::to_vec_pretty(policy).expect("policy as JSON"),
    )
    .expect("write policy.json");
    std::fs::write(
        bundle.join("bundle.json"),
        serde_json::to_vec_pretty(&record).expect("record as JSON"),
    )
    .expect("write bundle.json");
}

/// Every runner: root and the unprivileged test user.
pub fn each_runner(f: impl Fn(&Runner)) {
    for r in crate::runners() {
        eprintln!("--- runner {}", r.label());
        f(&r);
    }
}

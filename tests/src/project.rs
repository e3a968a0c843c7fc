//! The fixture of tests that open capsules with `capsule open`: a scratch folder owned by
//! the runner holding a source checkout `src/` (a git repository with one commit) and an
//! empty capsule root `root/`; every `capsule` command runs from the scratch folder.

use crate::{bounded, git_repo, scratch, Runner};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// See the module.
pub struct Project {
    pub dir: tempfile::TempDir,
    pub runner: Runner,
}

impl Project {
    /// A checkout of one file, `a.txt`.
    pub fn new(runner: &Runner) -> Project {
        Self::with_files(runner, &[("a.txt", "a\n")])
    }

    /// A checkout of `files` (relative path, content).
    pub fn with_files(runner: &Runner, files: &[(&str, &str)]) -> Project {
        let dir = scratch();
        git_repo(&dir.path().join("src"), files);
        std::fs::create_dir_all(dir.path().join("root")).expect("mkdir root");
        runner.own(dir.path());
        Project {
            dir,
            runner: runner.clone(),
        }
    }

    /// The source checkout.
    pub fn src(&self) -> PathBuf {
        self.dir.path().join("src")
    }

    /// The capsule root (`CAPSULE_ROOT`).
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// `capsule` as the runner, from the scratch folder, stdin from `/dev/null`.
    pub fn capsule(&self) -> Command {
        let mut c = self.runner.capsule(&self.root());
        c.current_dir(self.dir.path()).stdin(Stdio::null());
        c
    }

    /// `capsule ARGS`, its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.capsule().args(args).output().expect("run capsule")
    }

    /// `capsule ARGS` inside a user namespace that may create no more (weaker isolation:
    /// see [`Runner::without_userns`]).
    pub fn no_userns(&self, args: &[&str]) -> Command {
        self.runner.without_userns(self.capsule().args(args))
    }

    /// `capsule isolation --accept-weaker on` where weaker isolation is all there is (see
    /// [`Project::no_userns`]); asserts it succeeded.
    #[track_caller]
    pub fn accept_weaker(&self) {
        let o = self
            .no_userns(&["isolation", "--accept-weaker", "on"])
            .output()
            .expect("run capsule in a user namespace");
        assert!(
            o.status.success(),
            "accept weaker: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// Open a capsule of the source checkout called `name` (bounded in time); its
    /// workspace.
    #[track_caller]
    pub fn open(&self, name: &str) -> PathBuf {
        let o = bounded(
            self.capsule()
                .args(["open", "--source"])
                .arg(self.src())
                .args(["--name", name, "--json"]),
            60,
        );
        assert!(
            o.status.success(),
            "open {name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("open --json");
        PathBuf::from(v["workspace"].as_str().expect("workspace"))
    }

    /// The capsule's `events.jsonl` (empty when there is none).
    pub fn events(&self, name: &str) -> String {
        std::fs::read_to_string(self.root().join("bundles").join(name).join("events.jsonl"))
            .unwrap_or_default()
    }
}

//! Red team: a spec author's code in a synthetic spec's steps. A `git` step's arguments
//! (`-c alias.x=!cmd`, `rebase --exec`, `-c core.sshCommand`, `difftool --extcmd`,
//! `filter-branch --tree-filter`, `submodule foreach`, `-C /elsewhere`) and `write` steps
//! into `.git/` (a filter, `core.worktree`, a hook) run programs. `capsule open` runs all
//! steps in the build sandbox: nothing may write outside the workspace being built (a
//! marker in a scratch folder on the host) or read the operator's home (a planted secret)
//! into the workspace. Also: `capsule verify <spec>` builds the same way, a build
//! sandbox that cannot be set up fails the open cleanly (never a run on the host), and
//! Kitsoki's capsules keep their commit ids and digests. Every case runs as root and as
//! the unprivileged test user.

use capsule_e2e::{bounded, code, kitsoki_capsules, run, runners, scratch, stderr, Runner};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

const SECRET: &str = "SECRET-KEY-3c9f1e";

/// One runner's scratch world: a home with a planted secret and a folder outside every
/// workspace, both where a sandbox could see them (under /var/tmp, a system folder every
/// sandbox shows read-only: not a private /dev/shm), a capsule root and the spec folders.
struct World {
    runner: Runner,
    dir: tempfile::TempDir,
    visible: tempfile::TempDir,
}

impl World {
    fn new(runner: &Runner) -> Self {
        let dir = scratch();
        let visible = tempfile::Builder::new()
            .prefix("capsule-e2e-visible-")
            .tempdir_in("/var/tmp")
            .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(visible.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let w = Self {
            runner: runner.clone(),
            dir,
            visible,
        };
        std::fs::create_dir_all(w.secret().parent().unwrap()).unwrap();
        std::fs::write(w.secret(), format!("{SECRET}\n")).unwrap();
        for d in ["cdir", "wt"] {
            std::fs::create_dir_all(w.out().join(d)).unwrap();
        }
        std::fs::create_dir_all(w.dir.path().join("specs")).unwrap();
        runner.own(w.dir.path());
        runner.own(w.visible.path());
        w
    }
    fn home(&self) -> PathBuf {
        self.visible.path().join("home")
    }
    /// Not among the default hidden paths: hidden only because the whole home is.
    fn secret(&self) -> PathBuf {
        self.home().join("notes/id_test")
    }
    /// A folder outside every workspace that the runner can write on the host.
    fn out(&self) -> PathBuf {
        self.visible.path().join("outside")
    }
    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    fn marker(&self, name: &str) -> PathBuf {
        self.out().join(format!("MARKER-{name}"))
    }
    /// A shell payload: leave a marker outside, copy the secret into the current folder.
    fn payload(&self, name: &str) -> String {
        format!(
            "touch {m}; cat {s} > leak-{name}.txt 2>/dev/null; true",
            m = self.marker(name).display(),
            s = self.secret().display()
        )
    }
    /// Write a spec (JSON is YAML) with these steps; returns its folder.
    fn spec(&self, name: &str, steps: Vec<Value>) -> PathBuf {
        let d = self.dir.path().join("specs").join(name);
        std::fs::create_dir_all(&d).unwrap();
        let spec = json!({
            "name": name,
            "source": { "synthetic": true, "steps": steps },
            "network": "none",
        });
        std::fs::write(d.join("capsule.yaml"), spec.to_string()).unwrap();
        self.runner.own(self.dir.path());
        d
    }
    /// `capsule <args>` as the runner, with the scratch home as HOME.
    fn capsule(&self) -> Command {
        let mut c = self.runner.capsule(&self.root());
        c.env("HOME", self.home());
        c
    }
    /// Open `spec`; the workspace when it opened.
    fn open(&self, spec: &Path) -> (std::process::Output, Option<PathBuf>) {
        let o = run(self.capsule().arg("open").arg(spec).arg("--json"));
        let ws = serde_json::from_slice::<Value>(&o.stdout)
            .ok()
            .and_then(|j| j["workspace"].as_str().map(PathBuf::from));
        (o, ws)
    }
}

fn write(path: &str, content: &str) -> Value {
    json!({"action": "write", "path": path, "content": content})
}
fn commit(msg: &str) -> Value {
    json!({"action": "commit", "message": msg})
}
fn git(args: &[&str]) -> Value {
    json!({"action": "git", "args": args, "allow_failure": true})
}
fn git_in(dir: &str, args: &[&str]) -> Value {
    json!({"action": "git", "dir": dir, "args": args, "allow_failure": true})
}

/// Files under `dir` (`.git` included, objects excepted: they are compressed) whose
/// content holds the secret.
fn leaks(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in rd.flatten() {
        let p = e.path();
        let ft = e.file_type().unwrap();
        if ft.is_dir() && e.file_name() != "objects" {
            found.extend(leaks(&p));
        } else if ft.is_file()
            && std::fs::read(&p)
                .map(|d| String::from_utf8_lossy(&d).contains(SECRET))
                .unwrap_or(false)
        {
            found.push(p);
        }
    }
    found
}

/// The steps of every attack, by name.
fn attacks(w: &World) -> Vec<(&'static str, Vec<Value>)> {
    let p = |n: &str| w.payload(n);
    let normal_config =
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n";
    vec![
        (
            "alias",
            vec![git(&["-c", &format!("alias.x=!{}", p("alias")), "x"])],
        ),
        (
            "rebase-exec",
            vec![
                write("a.txt", "1\n"),
                commit("one"),
                write("a.txt", "2\n"),
                commit("two"),
                git(&["rebase", "--exec", &p("rebase-exec"), "HEAD~1"]),
            ],
        ),
        (
            "ssh-command",
            vec![git(&[
                "-c",
                "protocol.ssh.allow=always",
                "-c",
                &format!("core.sshCommand={}", p("ssh-command")),
                "ls-remote",
                "ssh://git@example.invalid/repo.git",
            ])],
        ),
        (
            "difftool",
            vec![
                write("a.txt", "1\n"),
                commit("one"),
                write("a.txt", "2\n"),
                git(&["difftool", "-y", &format!("--extcmd={}", p("difftool"))]),
            ],
        ),
        (
            "submodule-foreach",
            vec![
                write("a.txt", "1\n"),
                commit("one"),
                write("sub/f.txt", "s\n"),
                git_in("sub", &["init", "-q"]),
                git_in("sub", &["add", "f.txt"]),
                git_in("sub", &["commit", "-q", "-m", "s"]),
                git(&["submodule", "add", "./sub", "sub"]),
                git(&["submodule", "foreach", &p("submodule-foreach")]),
            ],
        ),
        (
            "dash-c-outside",
            vec![git(&[
                "-C",
                &w.out().join("cdir").display().to_string(),
                "init",
                "-q",
            ])],
        ),
        (
            "config-filter",
            vec![
                write(
                    ".git/config",
                    &format!(
                        "{normal_config}[filter \"x\"]\n\tclean = \"{}; cat\"\n",
                        p("config-filter")
                    ),
                ),
                write(".gitattributes", "* filter=x\n"),
                write("b.txt", "b\n"),
                commit("filtered"),
            ],
        ),
        (
            "worktree-write",
            vec![
                write("pwned.txt", "pwned\n"),
                commit("one"),
                write(
                    ".git/config",
                    &format!(
                        "{normal_config}\tworktree = {}\n",
                        w.out().join("wt").display()
                    ),
                ),
                git(&["reset", "-q", "--hard"]),
                git(&["checkout", "-q", "-f", "HEAD", "--", "."]),
            ],
        ),
        (
            "worktree-read-home",
            vec![
                write(
                    ".git/config",
                    &format!(
                        "{normal_config}\tworktree = {}\n",
                        w.secret().parent().unwrap().display()
                    ),
                ),
                json!({"action": "commit", "message": "home", "allow_empty": true}),
                write(".git/config", normal_config),
                git(&["reset", "-q", "--hard"]),
            ],
        ),
        (
            "hook",
            vec![
                write("post-commit", &format!("#!/bin/sh\n{}\n", p("hook"))),
                git(&["add", "post-commit"]),
                git(&["update-index", "--chmod=+x", "post-commit"]),
                git(&["commit", "-q", "-m", "hook"]),
                git(&[
                    "--work-tree=.git/hooks",
                    "checkout",
                    "HEAD",
                    "--",
                    "post-commit",
                ]),
                git(&[
                    "-c",
                    "core.hooksPath=.git/hooks",
                    "commit",
                    "-q",
                    "--allow-empty",
                    "-m",
                    "x",
                ]),
                commit("and the commit action"),
            ],
        ),
    ]
}

/// Open a spec per attack; none may leave a marker outside or the secret inside.
fn contained(w: &World, name: &str, steps: Vec<Value>) {
    let spec = w.spec(name, steps);
    let (o, ws) = w.open(&spec);
    let label = format!("[{}] {name}", w.runner.label());
    assert!(
        !w.marker(name).exists(),
        "{label}: the step wrote outside the workspace; stderr: {}",
        stderr(&o)
    );
    let outside_leaks = leaks(&w.out());
    assert!(outside_leaks.is_empty(), "{label}: {outside_leaks:?}");
    if let Some(ws) = ws {
        let l = leaks(&ws);
        assert!(
            l.is_empty(),
            "{label}: the home's secret reached the workspace: {l:?}"
        );
    } else {
        // it may fail; then on one line, leaving nothing behind
        assert_eq!(
            stderr(&o).trim().lines().count(),
            1,
            "{label}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn spec_steps_cannot_reach_outside_the_workspace() {
    for r in runners() {
        let w = World::new(&r);
        for (name, steps) in attacks(&w) {
            contained(&w, name, steps);
        }
        // `-C` made no repository outside; `core.worktree` wrote nothing outside
        assert!(!w.out().join("cdir/.git").exists(), "[{}] -C", r.label());
        assert!(
            !w.out().join("wt/pwned.txt").exists(),
            "[{}] core.worktree",
            r.label()
        );
    }
}

/// `filter-branch` sleeps 10 s before it starts: a test of its own, run in parallel.
#[test]
fn filter_branch_tree_filter_is_contained() {
    for r in runners() {
        let w = World::new(&r);
        let steps = vec![
            write("a.txt", "1\n"),
            commit("one"),
            git(&[
                "filter-branch",
                "-f",
                "--tree-filter",
                &w.payload("filter-branch"),
                "HEAD",
            ]),
        ];
        contained(&w, "filter-branch", steps);
    }
}

/// A spec that is not open is verified in a capsule built the same way.
#[test]
fn verify_of_a_spec_builds_it_in_the_sandbox() {
    for r in runners() {
        let w = World::new(&r);
        let spec = w.spec(
            "verify-alias",
            vec![git(&[
                "-c",
                &format!("alias.x=!{}", w.payload("verify")),
                "x",
            ])],
        );
        let o = run(w.capsule().arg("verify").arg(&spec).arg("--json"));
        assert!(
            !w.marker("verify").exists(),
            "[{}] verify ran a step on the host; stderr: {}",
            r.label(),
            stderr(&o)
        );
    }
}

/// Without namespaces (a user namespace that may create no more) and without the
/// operator's acceptance of weaker isolation, the open fails with 125 and leaves nothing;
/// with the acceptance it runs under Landlock + seccomp, still contained.
#[test]
fn no_build_sandbox_no_open() {
    for r in runners() {
        let w = World::new(&r);
        let spec = w.spec(
            "no-sandbox",
            vec![
                write("a.txt", "a\n"),
                commit("one"),
                git(&["-c", &format!("alias.x=!{}", w.payload("no-sandbox")), "x"]),
            ],
        );
        let mut base = w.capsule();
        base.arg("open").arg(&spec).arg("--json");
        let o = run(&mut r.without_userns(&base));
        assert_eq!(code(&o), 125, "[{}] {}", r.label(), stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("sandbox"), "{e}");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(
            !w.marker("no-sandbox").exists(),
            "[{}] ran on the host",
            r.label()
        );
        for sub in ["workspaces", "bundles"] {
            let left: Vec<_> = std::fs::read_dir(w.root().join(sub))
                .map(|rd| rd.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            assert!(left.is_empty(), "[{}] left behind: {left:?}", r.label());
        }

        // accepted: weaker isolation, said on stderr, still contained
        std::fs::write(w.root().join("settings.json"), r#"{"accept_weaker": true}"#).unwrap();
        r.own(&w.root());
        let o = run(&mut r.without_userns(&base));
        assert_eq!(code(&o), 0, "[{}] {}", r.label(), stderr(&o));
        assert!(stderr(&o).contains("weaker isolation"), "{}", stderr(&o));
        assert!(!w.marker("no-sandbox").exists(), "[{}] weaker", r.label());
        let ws: Value = serde_json::from_slice(&o.stdout).unwrap();
        let ws = PathBuf::from(ws["workspace"].as_str().unwrap());
        assert!(leaks(&ws).is_empty(), "[{}] weaker: secret read", r.label());
    }
}

/// What the steps leave in the staging workspace is read and written by capsule on the
/// host afterwards (`.git/info/exclude`, the sentinel and manifest, HEAD, the paths git
/// recorded): a symlink the steps planted there is never followed, a FIFO never blocks.
#[test]
fn what_the_steps_leave_is_never_followed_on_the_host() {
    for r in runners() {
        let w = World::new(&r);
        let out = w.out();
        std::fs::create_dir_all(out.join("info-dir")).unwrap();
        for v in ["victim-sentinel", "victim-manifest", "victim-config"] {
            std::fs::write(out.join(v), "orig\n").unwrap();
        }
        r.own(&out);
        let cases = [
            (
                "info-link",
                format!(
                    "rm -rf .git/info && ln -s {} .git/info",
                    out.join("info-dir").display()
                ),
            ),
            (
                "sentinel-link",
                format!(
                    "ln -s {} .kitsoki-capsule",
                    out.join("victim-sentinel").display()
                ),
            ),
            (
                "manifest-link",
                format!(
                    "ln -s {} capsule-manifest.json",
                    out.join("victim-manifest").display()
                ),
            ),
            (
                "config-link",
                format!(
                    "mv .git/config .git/config.real && ln -s {} .git/config",
                    out.join("victim-config").display()
                ),
            ),
            ("fifo-packed-refs", "mkfifo .git/packed-refs".to_string()),
            ("fifo-sentinel", "mkfifo .kitsoki-capsule".to_string()),
        ];
        for (name, script) in cases {
            let spec = w.spec(
                name,
                vec![
                    write("a.txt", "a\n"),
                    commit("one"),
                    json!({"action": "git", "args": ["-c", format!("alias.x=!{script}"), "x"]}),
                ],
            );
            let o = bounded(w.capsule().arg("open").arg(&spec).arg("--json"), 60);
            let label = format!("[{}] {name}", r.label());
            // refused on one line, or opened without touching what the links point at
            if !o.status.success() {
                assert_eq!(
                    stderr(&o).trim().lines().count(),
                    1,
                    "{label}: {}",
                    stderr(&o)
                );
            }
            assert!(
                !out.join("info-dir/exclude").exists(),
                "{label}: wrote through .git/info"
            );
            for v in ["victim-sentinel", "victim-manifest", "victim-config"] {
                assert_eq!(
                    std::fs::read_to_string(out.join(v)).unwrap(),
                    "orig\n",
                    "{label}: wrote through a link to {v}"
                );
            }
        }
        let left: Vec<_> = std::fs::read_dir(w.root().join("bundles"))
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(
            left.iter().all(|p| !p
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".open-")),
            "[{}] a half-made bundle was left: {left:?}",
            r.label()
        );
    }
}

/// Kitsoki's commit ids and tree digests, as the steps gave them when they ran on the
/// host: building in the sandbox changes no byte.
const KITSOKI: &[(&str, &str, &str)] = &[
    (
        "agent-task-replay-base",
        "a6326699bc979ccd4b0a22e1837293171a7dbf78",
        "d1ef38c655c96f7baaf23b4ece27a5857cfb70a92d09c09c17b0db8be62b1f47",
    ),
    (
        "clean-repo",
        "895f37ec80453a990b7c47aeeedcf4a1c96f2ed0",
        "769060770f6140b512a65419b6d81985491947f34e56d1a86fd6000cb403d4eb",
    ),
    (
        "corpus-forge-red-green",
        "ae6a103888954dd1cab4e7fc3a09265ffaccfb48",
        "3481bcbd72971d568f389790405744d5bd3a64ce99d26a2acafda453796feae7",
    ),
    (
        "dev-story-implementation-replay",
        "ec695077f90e04b8179ebc4755db3117e650bc49",
        "182cdb395bed66e717c3b0f2e7fb4b0717fed61bc9fcf76640c1cd0180f096c1",
    ),
    (
        "dirty-index",
        "376299ea7616dcbb76092d9998027a434d51a6a3",
        "918e8f39748a5e6866079f4fe1eaae8e64b9d83d37fcc60a5fe5aca09fee8d5d",
    ),
    (
        "diverged-remote",
        "0d2f7d21ac31a27e4ead00c2c72a8735433eeaf9",
        "b9501be9f62d32986f4b540f0ba0c0512d1e13d1667ee9d778d7c6b0ba356d78",
    ),
    (
        "kit-update-pair",
        "4a83e809d9c57b3df7acd7443f028674887014ed",
        "cde5c44a63d33c663abfb8676316e19d41dec6b62d03c0639d15b63292b94021",
    ),
    (
        "mid-rebase-conflict",
        "59fa7eeaa030a02e330fe336847bac75b93d7a7f",
        "16b5dd43c849e6a11089fdf0801fa5c6229480a8bceff8b7b8863ed353ceb5e1",
    ),
    (
        "old-dev-story-project",
        "f6900514cb65cd670c30772136748d571603f40a",
        "430d9a3abf6fb954587b982b30a7aaf7582d9c85cf7ee787818d84457042303b",
    ),
    (
        "rebase-conflict-ready",
        "b4b5eed01fb46d37d9d66b776db2a5a8d7f83041",
        "2197998034a19c275446c3b1c98c52137f81452a3bf989af46a6d12342d5569d",
    ),
    (
        "slidey-edit-kitsoki-pitch",
        "0ffa68881b5943e255c47ef190cf411acf851461",
        "45f22f9e49e38a9800abdd6191116e862cd9183984af9c7efc7198e4000eee49",
    ),
    (
        "stale-worktree",
        "157d23f8db199fba3ed77956f0b6eb02df41591f",
        "11c6de3871c4e1b767c4f82c2120fc8498b9bd1433affbdd0a86f88a1fdcdb5f",
    ),
    (
        "visual-story-two-revisions",
        "259325d8de52e4491056dd59f476e6640eed7bb2",
        "59199b875e4b20c0ad6b4a23469783d2fe0f65663804d075dafbdcaac2da6657",
    ),
    (
        "worktree-repro-repo",
        "7011c5710b33e85230407e41d1c2e2a1ba0dcc25",
        "1ba53111e6a4e77830bdd2726324a22663f6fd3f38ecba0020784eabf1b1d565",
    ),
];

#[test]
fn kitsoki_capsules_keep_their_ids_when_built_in_the_sandbox() {
    for r in runners() {
        let w = World::new(&r);
        for (name, head, digest) in KITSOKI {
            let spec = kitsoki_capsules().join(name);
            let (o, _) = w.open(&spec);
            let j: Value = serde_json::from_slice(&o.stdout)
                .unwrap_or_else(|e| panic!("[{}] {name}: {e}: {}", r.label(), stderr(&o)));
            assert_eq!(j["head"], *head, "[{}] {name}", r.label());
            assert_eq!(
                j["tree_digest"],
                format!("sha256:{digest}"),
                "[{}] {name}",
                r.label()
            );
        }
    }
}

/// A folder the steps lock (`chmod 000`) in the build's private tmp is removed all the
/// same: the bundle keeps nothing of the build.
#[test]
fn the_build_tmp_is_removed_even_when_locked() {
    for r in runners() {
        let w = World::new(&r);
        let spec = w.spec(
            "locked",
            vec![
                write("a.txt", "a\n"),
                commit("one"),
                json!({"action": "git", "args": ["-c", "alias.x=!mkdir -p /tmp/locked/in && chmod 000 /tmp/locked", "x"]}),
            ],
        );
        let (o, _) = w.open(&spec);
        assert_eq!(code(&o), 0, "[{}] {}", r.label(), stderr(&o));
        let j: Value = serde_json::from_slice(&o.stdout).unwrap();
        let bundle = PathBuf::from(j["bundle"].as_str().unwrap());
        assert!(
            !bundle.join(".steps").exists(),
            "[{}] build tmp kept",
            r.label()
        );
    }
}

/// What the steps leave in `.git` for the operator's own git (a `core.fsmonitor`, a
/// pager, a filter driver with the attribute that selects it, an alias) never runs when
/// the operator runs git on the host in the new workspace: open checks the git dirs as an
/// exec does, quarantines the offenders in the bundle and says so.
#[test]
fn what_the_steps_plant_for_the_operators_git_never_runs_on_the_host() {
    use std::os::unix::process::CommandExt;
    for r in runners() {
        let w = World::new(&r);
        let run = format!("touch {}; false", w.marker("hostgit").display());
        let config = format!(
            "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = {run}\n\tpager = {run}\n[filter \"x\"]\n\tclean = {run}\n\tsmudge = {run}\n[alias]\n\tst = !{run}\n[user]\n\tname = Kitsoki Capsule\n\temail = capsule@kitsoki.dev\n"
        );
        let spec = w.spec(
            "plants-hostgit",
            vec![
                write("a.txt", "a\n"),
                commit("init"),
                write(".gitattributes", "* filter=x\n"),
                write(".git/config", &config),
                write("b.txt", "b\n"),
            ],
        );
        let (o, ws) = w.open(&spec);
        let label = format!("[{}]", r.label());
        let ws = ws.unwrap_or_else(|| panic!("{label} open failed: {}", stderr(&o)));
        assert!(
            stderr(&o).contains("git guard"),
            "{label} open says nothing of what it quarantined: {}",
            stderr(&o)
        );
        assert!(!w.marker("hostgit").exists(), "{label} ran during open");
        let home = w.dir.path().join("operator-home");
        std::fs::create_dir_all(&home).unwrap();
        r.own(&home);
        for args in [
            &["status"][..],
            &["diff"],
            &["add", "-A"],
            &["-c", "core.pager=cat", "log", "-p"],
            &["st"],
        ] {
            let mut c = Command::new("git");
            c.args(args)
                .current_dir(&ws)
                .env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env("HOME", &home)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_PAGER", "cat")
                .stdin(std::process::Stdio::null());
            if let Runner::User { uid, gid, .. } = &r {
                c.uid(*uid).gid(*gid);
            }
            let _ = bounded(&mut c, 30);
            assert!(
                !w.marker("hostgit").exists(),
                "{label} the operator's `git {}` ran what the spec planted",
                args.join(" ")
            );
        }
    }
}

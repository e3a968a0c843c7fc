//! Faults injected into the commands that write the operator's own files: `capsule home
//! apply` (into the real home) and `capsule reveal add` (into the tool's settings), each
//! killed with SIGKILL at times spread over its run, as root and as the unprivileged user.
//!
//! Afterwards every home file is exactly its old or its new version (never cut short),
//! the task's symlink is applied as a symlink, nothing of apply's is left in the home, the settings and every `events.jsonl` parse,
//! the next command succeeds and finishes the job, and after `close` no process or mount
//! of the capsule is left.
//!
//! Iterations per runner: `CAPSULE_FAULT_ITERS` (default 4; `hack/faults.sh N` runs more).

use capsule_e2e::faults::*;
use capsule_e2e::*;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Files the task rewrites in the home (each old and new version distinct and of
/// different lengths, so a file cut short or half written is neither); every 20th new
/// version is large (128 KiB: several writes, most of apply's time), so a copy made in
/// place would be seen half-written.
const FILES: usize = 200;

fn old_text(i: usize) -> String {
    format!("old {i}\n")
}

fn new_len(i: usize) -> usize {
    if i.is_multiple_of(20) {
        (128 << 10) + i
    } else {
        200 + i % 50
    }
}

fn new_text(i: usize) -> String {
    format!("new {i} {}\n", "n".repeat(new_len(i)))
}

struct Env {
    dir: tempfile::TempDir,
    home: PathBuf,
    root: PathBuf,
    runner: Runner,
}

impl Env {
    fn new(r: &Runner) -> Env {
        let dir = scratch();
        let home = dir.path().join("home");
        let root = dir.path().join("root");
        let app = home.join("src/app");
        write(&app.join("README"), "app\n");
        git(&app, &["init", "-q"]);
        git(&app, &["add", "."]);
        git(&app, &["commit", "-q", "-m", "init"]);
        std::fs::create_dir_all(&root).unwrap();
        let e = Env {
            dir,
            home,
            root,
            runner: r.clone(),
        };
        e.reset_home();
        e
    }

    /// The home's files as they were when the task started.
    fn reset_home(&self) {
        for i in 0..FILES {
            write(&self.file(i), &old_text(i));
        }
        self.runner.own(self.dir.path());
    }

    fn file(&self, i: usize) -> PathBuf {
        self.home.join(format!("d/f{i:03}"))
    }

    fn cmd(&self) -> Command {
        let mut c = self.runner.capsule(&self.root);
        c.env("HOME", &self.home)
            .current_dir(self.home.join("src/app"));
        c
    }

    #[track_caller]
    fn ok(&self, args: &[&str]) -> std::process::Output {
        let o = bounded(self.cmd().args(args), 60);
        assert_ok(&o, &format!("[{}] capsule {args:?}", self.runner.label()));
        o
    }

    /// Each home file is its old or its new version; how many are new.
    #[track_caller]
    fn check_files(&self, when: &str) -> usize {
        let mut new = 0;
        for i in 0..FILES {
            let got = std::fs::read_to_string(self.file(i)).unwrap_or_else(|e| {
                panic!(
                    "[{}] {when}: {}: {e}",
                    self.runner.label(),
                    self.file(i).display()
                )
            });
            if got == new_text(i) {
                new += 1;
            } else {
                assert_eq!(
                    got,
                    old_text(i),
                    "[{}] {when}: {} is neither its old nor its new version",
                    self.runner.label(),
                    self.file(i).display()
                );
            }
        }
        new
    }

    /// What apply may have left in the home besides the files (temporary files).
    fn strays(&self) -> Vec<String> {
        let mut v: Vec<String> = names(&self.home.join("d"))
            .into_iter()
            .filter(|n| !n.starts_with('f') && n != "link")
            .collect();
        v.extend(
            names(&self.home)
                .into_iter()
                .filter(|n| n != "d" && n != "src"),
        );
        v
    }
}

#[test]
fn killed_home_applies_leave_each_file_old_or_new() {
    for r in runners() {
        let e = Env::new(&r);
        let label = r.label().to_string();
        e.ok(&["open", "--name", "h", "--source", "."]);
        // the task writes the new versions into the home layer
        let script = format!(
            "mkdir -p ~/d && i=0; while [ $i -lt {FILES} ]; do \
             if [ $((i % 20)) = 0 ]; then n=$((131072 + i)); else n=$((200 + i % 50)); fi; \
             {{ printf 'new %d ' $i; head -c $n /dev/zero | tr '\\0' n; echo; }} \
             > ~/d/f$(printf %03d $i); i=$((i+1)); done; ln -s f001 ~/d/link"
        );
        e.ok(&["exec", "h", "--", "sh", "-c", &script]);
        assert_eq!(e.check_files("after the exec"), 0, "[{label}] home written");
        let bundle = e.root.join("bundles/h");
        let baseline = std::fs::read(bundle.join("home.baseline.json")).expect("baseline");
        // back to the state right after the exec: real files old, baseline as recorded
        let restart = || {
            e.reset_home();
            std::fs::write(bundle.join("home.baseline.json"), &baseline).unwrap();
            r.own(&bundle);
            e.ok(&["home", "diff", "h", "--json"]);
        };
        restart();
        let full = timed(e.cmd().args(["home", "apply", "h"]), "home apply (timed)");
        assert_eq!(e.check_files("after a whole apply"), FILES, "[{label}]");
        let n = iters(4);
        let (mut partial, mut late) = (0, 0);
        for i in 0..n {
            restart();
            // spread over the apply's run, the last one half-way through
            let at = if i + 1 == n {
                full / 2
            } else {
                full.mul_f64((i as f64 + 0.5) / n as f64 * 1.1)
            };
            if kill_after(e.cmd().args(["home", "apply", "h"]), at) {
                late += 1;
            }
            let new = e.check_files(&format!("apply killed after {at:?}"));
            if new > 0 && new < FILES {
                partial += 1;
            }
        }
        eprintln!("[{label}] apply ~{full:?}; {n} kills, {partial} part-way, {late} too late");
        // the next apply finishes the job, without --force: the files already applied
        // are no change any more, the others are as reviewed
        e.ok(&["home", "diff", "h", "--json"]);
        e.ok(&["home", "apply", "h"]);
        assert_eq!(e.check_files("after the next apply"), FILES, "[{label}]");
        // the task's symlink is applied as a symlink, never followed into a copy
        let link = e.home.join("d/link");
        assert!(
            std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()),
            "[{label}] ~/d/link is not a symlink"
        );
        assert_eq!(std::fs::read_link(&link).unwrap(), PathBuf::from("f001"));
        assert_eq!(
            e.strays(),
            Vec::<String>::new(),
            "[{label}] left in the home"
        );
        let o = e.ok(&["home", "diff", "h", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["changes"], serde_json::json!([]), "[{label}]");
        assert_settings_parse(&e.root, &label);
        assert!(assert_events_parse(&e.root, &label) > 0);
        e.ok(&["list", "--json"]);
        e.ok(&["close", "h", "--force"]);
        assert_eq!(names(&e.root.join("bundles")), Vec::<String>::new());
        assert_nothing_runs(e.dir.path(), 15, &label);
    }
}

#[test]
fn killed_reveal_adds_leave_settings_that_parse() {
    for r in runners() {
        let e = Env::new(&r);
        let label = r.label().to_string();
        let n = iters(4) as usize;
        // siblings of the source folder to open, and a settings file of some size (the
        // more it holds, the longer a save takes)
        for k in 0..n + 1 {
            std::fs::create_dir_all(e.home.join(format!("src/lib{k}"))).unwrap();
        }
        let mut reveals = serde_json::Map::new();
        for k in 0..2000 {
            reveals.insert(
                format!("/nonexistent/source{k}"),
                serde_json::json!([format!("/nonexistent/lib{k}")]),
            );
        }
        std::fs::write(
            e.root.join("settings.json"),
            serde_json::to_vec_pretty(&serde_json::json!({ "reveals": reveals })).unwrap(),
        )
        .unwrap();
        r.own(e.dir.path());
        // the quickest of three adds (the first is slower: cold caches; the machine may
        // be busy)
        let mut full = Duration::MAX;
        for k in 0..3 {
            if k > 0 {
                e.ok(&["reveal", "rm", "../lib0"]);
            }
            full = full.min(timed(
                e.cmd().args(["reveal", "add", "../lib0"]),
                "reveal add (timed)",
            ));
        }
        e.ok(&["open", "--name", "v", "--source", "."]);
        let mut late = 0;
        for k in 1..=n {
            let at = full.mul_f64(k as f64 / (n + 1) as f64);
            if kill_after(e.cmd().args(["reveal", "add", &format!("../lib{k}")]), at) {
                late += 1;
            }
            let s = assert_settings_parse(&e.root, &label).expect("settings.json");
            assert_eq!(
                s["reveals"].as_object().map(|o| o.len()),
                Some(2001),
                "[{label}] a killed add lost other sources' reveals"
            );
        }
        eprintln!("[{label}] reveal add ~{full:?}; {n} kills, {late} too late");
        // the next add succeeds; what every add that ended said is there
        e.ok(&["reveal", "add", &format!("../lib{n}")]);
        let o = e.ok(&["reveal", "list", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(v.to_string().contains(&format!("lib{n}")), "[{label}] {v}");
        let strays: Vec<String> = names(&e.root)
            .into_iter()
            .filter(|n| n.starts_with("settings") && n != "settings.json")
            .collect();
        assert!(
            strays.is_empty(),
            "[{label}] left beside the settings: {strays:?}"
        );
        // a capsule still opens, runs, lists and closes under these settings
        e.ok(&["exec", "v", "--", "true"]);
        assert!(assert_events_parse(&e.root, &label) > 0);
        e.ok(&["list", "--json"]);
        e.ok(&["close", "v", "--force"]);
        assert_nothing_runs(e.dir.path(), 15, &label);
    }
}

//! The task's own environment through `capsule exec`, as root and as the
//! unprivileged test user: home writes land in the capsule's home layer and wait for review,
//! package caches are the capsule's own, revealed projects sit next to the workspace,
//! devices by name only, and no display.
//!
//! Each test makes a scratch home (`HOME` of the runner's commands) holding a source folder
//! `src/app` (a git repository, a Cargo package with `path = "../shared"`) and its sibling
//! `src/shared`, and a capsule root outside that home.

use capsule_e2e::*;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Output};

struct Env {
    _dir: tempfile::TempDir,
    home: PathBuf,
    root: PathBuf,
    runner: Runner,
}

impl Env {
    fn new(r: &Runner) -> Env {
        let dir = scratch();
        let home = dir.path().join("home");
        let root = dir.path().join("root");
        write(&home.join(".zshrc"), "# zsh\n");
        write(&home.join(".gitconfig"), "[user]\n\tname = Person\n");
        write(
            &home.join(".npm/_cacache/person-entry"),
            "from the person\n",
        );
        write(&home.join(".cargo/registry/cache/person.crate"), "crate\n");
        write(
            &home.join(".npmrc"),
            "registry=http://127.0.0.1:4873/\n//127.0.0.1:4873/:_authToken=NPM-TOKEN-SECRET\n",
        );
        write(
            &home.join(".cargo/credentials.toml"),
            "[registry]\ntoken = \"CARGO-TOKEN-SECRET\"\n",
        );
        let app = home.join("src/app");
        write(
            &app.join("Cargo.toml"),
            "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nshared = { path = \"../shared\" }\n",
        );
        write(
            &app.join("src/main.rs"),
            "fn main() { println!(\"answer {}\", shared::answer()); }\n",
        );
        write(&app.join(".gitignore"), "target/\n");
        git(&app, &["init", "-q"]);
        git(&app, &["add", "."]);
        git(&app, &["commit", "-q", "-m", "init"]);
        write(
            &home.join("src/shared/Cargo.toml"),
            "[package]\nname = \"shared\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        );
        write(
            &home.join("src/shared/src/lib.rs"),
            "pub fn answer() -> u32 { 42 }\n",
        );
        std::fs::create_dir_all(&root).unwrap();
        r.own(dir.path());
        Env {
            _dir: dir,
            home,
            root,
            runner: r.clone(),
        }
    }

    fn cmd(&self) -> Command {
        let mut c = self.runner.capsule(&self.root);
        c.env("HOME", &self.home);
        c
    }

    fn capsule(&self, args: &[&str]) -> Output {
        run(self.cmd().args(args))
    }

    fn open(&self, name: &str) {
        let o = run(self
            .cmd()
            .args(["open", "--name", name, "--source"])
            .arg(self.home.join("src/app")));
        assert_ok(&o, "open");
    }

    fn sh(&self, name: &str, script: &str) -> Output {
        self.capsule(&["exec", name, "--", "sh", "-c", script])
    }
}

fn changes(e: &Env, name: &str) -> BTreeSet<(String, String)> {
    let o = e.capsule(&["home", "diff", name, "--json"]);
    assert_ok(&o, "home diff");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn set(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn home_writes_wait_for_review_and_stay_per_capsule() {
    for r in runners() {
        let e = Env::new(&r);
        e.open("a1");
        e.open("a2");
        let before = hash_tree(&e.home);
        let zshrc = std::fs::read(e.home.join(".zshrc")).unwrap();
        let gitconfig = std::fs::read(e.home.join(".gitconfig")).unwrap();
        let o = e.sh(
            "a1",
            "echo 'alias t=true' >> ~/.zshrc && git config --global user.email task@example.com && cat ~/.zshrc && git config --global user.email",
        );
        assert_ok(&o, "task writes home");
        assert!(
            stdout(&o).contains("alias t=true") && stdout(&o).contains("task@example.com"),
            "{}",
            stdout(&o)
        );
        assert_eq!(std::fs::read(e.home.join(".zshrc")).unwrap(), zshrc);
        assert_eq!(std::fs::read(e.home.join(".gitconfig")).unwrap(), gitconfig);
        assert_eq!(
            hash_tree(&e.home),
            before,
            "{}: the real home changed",
            r.label()
        );
        assert_eq!(
            changes(&e, "a1"),
            set(&[(".gitconfig", "changed"), (".zshrc", "changed")]),
            "{}",
            r.label()
        );
        // another capsule does not see them
        let o = e.sh(
            "a2",
            "cat ~/.zshrc; git config --global user.email || echo no-email",
        );
        assert_ok(&o, "second capsule");
        assert_eq!(stdout(&o), "# zsh\nno-email\n", "{}", r.label());
        assert!(changes(&e, "a2").is_empty());
        // apply one path: only that path changes in the real home
        let o = e.capsule(&["home", "apply", "a1", "~/.zshrc"]);
        assert_ok(&o, "home apply");
        assert_eq!(
            std::fs::read_to_string(e.home.join(".zshrc")).unwrap(),
            "# zsh\nalias t=true\n"
        );
        assert_eq!(std::fs::read(e.home.join(".gitconfig")).unwrap(), gitconfig);
        assert_eq!(changes(&e, "a1"), set(&[(".gitconfig", "changed")]));
        // the next exec of a1 still sees its own .gitconfig
        let o = e.sh("a1", "git config --global user.email");
        assert_eq!(stdout(&o), "task@example.com\n");
    }
}

#[test]
fn package_caches_are_the_capsules_own() {
    for r in runners() {
        let e = Env::new(&r);
        e.open("c");
        let o = e.sh(
            "c",
            "cat ~/.npm/_cacache/person-entry ~/.cargo/registry/cache/person.crate \
             && echo task > ~/.npm/_cacache/task-entry \
             && echo task > ~/.cargo/registry/cache/task.crate \
             && mkdir -p ~/.cache/pip && echo w > ~/.cache/pip/wheel \
             && echo written",
        );
        assert_ok(&o, "cache task");
        assert_eq!(
            stdout(&o),
            "from the person\ncrate\nwritten\n",
            "{}",
            r.label()
        );
        for p in [
            ".npm/_cacache/task-entry",
            ".cargo/registry/cache/task.crate",
            ".cache/pip",
        ] {
            assert!(
                std::fs::symlink_metadata(e.home.join(p)).is_err(),
                "{}: {p} reached the person's cache",
                r.label()
            );
        }
        let bundle = e.root.join("bundles/c");
        assert_eq!(
            std::fs::read_to_string(bundle.join("cache/npm/_cacache/task-entry")).unwrap(),
            "task\n"
        );
        // caches are not part of the review
        assert!(changes(&e, "c").is_empty(), "{:?}", changes(&e, "c"));
        // the capsule keeps its cache across execs; credentials stay hidden
        let o = e.sh(
            "c",
            "cat ~/.npm/_cacache/task-entry; cat ~/.cargo/credentials.toml 2>/dev/null; echo end",
        );
        assert_eq!(stdout(&o), "task\nend\n", "{}", r.label());
        assert!(!stdout(&o).contains("CARGO-TOKEN-SECRET"));
        // ~/.npmrc keeps its registry line, not its token, and cannot be written
        let o = e.sh("c", "cat ~/.npmrc; echo x >> ~/.npmrc && echo WROTE");
        assert_eq!(
            stdout(&o),
            "registry=http://127.0.0.1:4873/\n",
            "{}",
            r.label()
        );
    }
}

/// The directory of the toolchain running these tests (cargo and rustc), if the runner
/// can reach it.
fn toolchain_bin() -> Option<PathBuf> {
    let cargo = PathBuf::from(std::env::var_os("CARGO")?);
    let bin = std::fs::canonicalize(cargo).ok()?.parent()?.to_path_buf();
    bin.join("rustc").exists().then_some(bin)
}

#[test]
fn revealed_project_builds_next_to_the_workspace() {
    for r in runners() {
        let e = Env::new(&r);
        e.open("rv");
        let read_shared = "cat ../shared/src/lib.rs";
        let o = e.sh("rv", read_shared);
        assert!(
            !o.status.success() && !stdout(&o).contains("answer"),
            "{}: sibling readable before reveal: {}",
            r.label(),
            stdout(&o)
        );
        // reveal list suggests it; add opens it for this source's capsules
        let app = e.home.join("src/app");
        let o = run(e.cmd().current_dir(&app).args(["reveal", "list", "--json"]));
        assert_ok(&o, "reveal list");
        assert!(
            stdout(&o).contains("\"relative\":\"../shared\""),
            "{}",
            stdout(&o)
        );
        let o = run(e
            .cmd()
            .current_dir(&app)
            .args(["reveal", "add", "../shared"]));
        assert_ok(&o, "reveal add");
        let o = e.sh(
            "rv",
            &format!("{read_shared} && echo x >> ../shared/src/lib.rs"),
        );
        assert!(
            stdout(&o).contains("pub fn answer"),
            "{}: {}",
            r.label(),
            stderr(&o)
        );
        assert!(!o.status.success(), "the revealed project is writable");
        assert_eq!(
            std::fs::read_to_string(e.home.join("src/shared/src/lib.rs")).unwrap(),
            "pub fn answer() -> u32 { 42 }\n"
        );
        // a Cargo workspace with a ../shared path dependency builds offline inside. The
        // toolchain lives in root's home, which only root can reach.
        if let Runner::Current = r {
            let bin = toolchain_bin().expect("the toolchain running the tests ($CARGO)");
            let toolchain = bin.parent().unwrap();
            let o = run(e
                .cmd()
                .args(["exec", "rv", "--reveal"])
                .arg(toolchain)
                .args(["--", "env"])
                .arg(format!("PATH={}:/usr/bin:/bin", bin.display()))
                .args(["sh", "-c", "cargo build --offline -q && ./target/debug/app"]));
            assert_ok(&o, "cargo build --offline");
            assert_eq!(stdout(&o), "answer 42\n");
        }
        // closed again
        let o = run(e
            .cmd()
            .current_dir(&app)
            .args(["reveal", "rm", "../shared"]));
        assert_ok(&o, "reveal rm");
        let o = e.sh("rv", read_shared);
        assert!(!o.status.success(), "{}", stdout(&o));
    }
}

#[test]
fn devices_by_name_only() {
    let allowed: BTreeSet<&str> = [
        "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty",
        "urandom", "zero",
    ]
    .into_iter()
    .collect();
    for r in runners() {
        let e = Env::new(&r);
        e.open("d");
        let o = e.capsule(&["exec", "d", "--no-gpu", "--", "ls", "-1", "/dev"]);
        assert_ok(&o, "ls /dev");
        let got: BTreeSet<String> = stdout(&o).lines().map(str::to_string).collect();
        let extra: Vec<&String> = got
            .iter()
            .filter(|n| !allowed.contains(n.as_str()))
            .collect();
        assert!(
            extra.is_empty(),
            "{}: unexpected devices {extra:?}",
            r.label()
        );
        assert!(got.contains("null") && got.contains("urandom"));
        // GPU nodes appear only when present and not turned off
        let o = e.capsule(&["exec", "d", "--", "ls", "-1", "/dev"]);
        for n in stdout(&o).lines() {
            assert!(
                allowed.contains(n) || n.starts_with("nvidia") || n == "dri",
                "{}: {n}",
                r.label()
            );
        }
        // specs asking for disks or input devices are refused, and nothing runs, even
        // when the operator accepted the grant at open
        for (spec, name) in [
            ("devices-sda.yaml", "dev-sda"),
            ("devices-dev-sda.yaml", "dev-dev-sda"),
            ("devices-input-event0.yaml", "dev-input-event0"),
        ] {
            let o = run(e
                .cmd()
                .arg("open")
                .arg("--accept-grants")
                .arg(fixtures().join("home").join(spec)));
            assert_ok(&o, spec);
            let marker = e.root.join(format!("ran-{name}"));
            let o = e.capsule(&[
                "exec",
                name,
                "--",
                "sh",
                "-c",
                &format!("touch {}", marker.display()),
            ]);
            assert_eq!(
                o.status.code(),
                Some(1),
                "{}: {spec}: {}",
                r.label(),
                stderr(&o)
            );
            assert!(stderr(&o).contains("is refused"), "{}", stderr(&o));
            assert!(!marker.exists());
        }
    }
}

#[test]
fn no_display_and_a_failure_for_want_of_one_is_said_once() {
    for r in runners() {
        let e = Env::new(&r);
        e.open("x");
        let o = run(e
            .cmd()
            .env("DISPLAY", ":0")
            .env("WAYLAND_DISPLAY", "wayland-0")
            .args(["exec", "x", "--pass-env", "DISPLAY", "--", "sh", "-c"])
            .arg("echo \"[$DISPLAY][$WAYLAND_DISPLAY]\"; ls /tmp/.X11-unix 2>/dev/null | wc -l"));
        assert_ok(&o, "env");
        assert_eq!(stdout(&o), "[][]\n0\n", "{}", r.label());
        let o = e.sh("x", "echo \"Error: Can't open display: \" >&2; exit 1");
        assert_eq!(o.status.code(), Some(1));
        let err = stderr(&o);
        assert!(
            err.contains("Can't open display"),
            "the command's stderr is relayed: {err}"
        );
        assert_eq!(
            err.matches("needs a display; tasks run without one")
                .count(),
            1,
            "{}: {err}",
            r.label()
        );
        let events = std::fs::read_to_string(e.root.join("bundles/x/events.jsonl")).unwrap();
        assert_eq!(events.matches("\"needs_display\"").count(), 1, "{events}");
        // a failure that has nothing to do with a display says nothing of it
        let o = e.sh("x", "echo 'error: no such file' >&2; exit 2");
        assert_eq!(o.status.code(), Some(2));
        assert!(!stderr(&o).contains("needs a display"));
    }
}

#[test]
fn default_layout_with_the_capsule_root_inside_home() {
    // capsule's default root is ~/.local/share/capsule: the layer's upper directory then
    // lies inside the overlay's lower layer (the home), which overlayfs accepts as long as
    // nothing looks it up through the overlay (the capsule root is hidden there)
    for r in runners() {
        let mut e = Env::new(&r);
        e.root = e.home.join(".local/share/capsule");
        std::fs::create_dir_all(&e.root).unwrap();
        r.own(&e.home);
        e.open("in-home");
        let o = e.sh(
            "in-home",
            "echo hi > ~/new-file && cat ~/new-file && ls -A ~/.local/share/capsule/bundles 2>/dev/null | wc -l",
        );
        assert_ok(&o, "exec with the capsule root in home");
        // the bundles (the layer itself included) stay hidden
        assert_eq!(stdout(&o), "hi\n0\n", "{}", r.label());
        assert!(!e.home.join("new-file").exists());
        assert_eq!(
            changes(&e, "in-home"),
            set(&[("new-file", "added")]),
            "{}",
            r.label()
        );
        let o = e.capsule(&["home", "apply", "in-home"]);
        assert_ok(&o, "apply");
        assert_eq!(
            std::fs::read_to_string(e.home.join("new-file")).unwrap(),
            "hi\n"
        );
    }
}

/// Every path under `root` with its kind, mode, size and mtime (nanoseconds), and a
/// digest of each file's content.
fn listing(root: &std::path::Path) -> BTreeSet<String> {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let content = if md.is_file() {
                hex::encode(Sha256::digest(std::fs::read(&p).unwrap()))
            } else {
                String::new()
            };
            out.insert(format!(
                "{} {:o} {} {}.{} {content}",
                p.strip_prefix(root).unwrap().display(),
                md.mode(),
                md.len(),
                md.mtime(),
                md.mtime_nsec()
            ));
            if md.is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

/// `capsule inspect` shows what an exec would enforce (the home layer and the caches
/// included) without making any of it: the capsule's bundle (where an exec makes them)
/// is the same, byte for byte and mtime for mtime, before and after.
#[test]
fn inspect_makes_nothing() {
    for r in runners() {
        let e = Env::new(&r);
        e.open("i1");
        let bundles = e.root.join("bundles");
        let before = listing(&bundles);
        let o = e.capsule(&["inspect", "i1", "--json"]);
        assert_ok(&o, "inspect --json");
        let shown = stdout(&o);
        assert!(
            shown.contains("home/upper") && shown.contains("npmrc.filtered"),
            "the home layer and the filtered .npmrc are in the plan: {shown}"
        );
        assert_ok(&e.capsule(&["inspect", "i1"]), "inspect");
        let after = listing(&bundles);
        assert!(
            before == after,
            "{}: inspect changed the bundle:\n gone: {:#?}\n new: {:#?}",
            r.label(),
            before.difference(&after).collect::<Vec<_>>(),
            after.difference(&before).collect::<Vec<_>>()
        );
    }
}

//! Red team: process lifetime under weaker isolation (Landlock + seccomp, no pid
//! namespace), where no kernel namespace takes the command's processes down with it. The
//! issue's promise holds there too: if `capsule` itself is killed (SIGKILL too), the
//! sandbox dies with it, double-forked daemons and the command's own children included.
//! As root and as the unprivileged test user.

use capsule_e2e::{runners, scratch, stderr, Runner};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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
    /// `capsule ARGS` inside a user namespace that may create no more (weaker isolation).
    fn no_userns(&self, args: &[&str]) -> Command {
        let base = self.runner.capsule(&self.root());
        let mut w = match &self.runner {
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
        // unshare, sh and capsule exec each other: the spawned pid is capsule's
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
        w.current_dir(self.dir.path()).stdin(Stdio::null());
        w
    }
    fn run(&self, args: &[&str]) -> Output {
        let mut c = self.runner.capsule(&self.root());
        c.current_dir(self.dir.path())
            .args(args)
            .stdin(Stdio::null());
        c.output().expect("run capsule")
    }
}

/// Host processes whose command line contains `marker`.
fn procs(marker: &str) -> Vec<i32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(marker) {
            v.push(pid);
        }
    }
    v
}

fn wait_until(mut f: impl FnMut() -> bool, secs: u64) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

#[test]
fn weaker_isolation_sandbox_dies_with_a_killed_capsule() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = Env::new(&r);
        let src = e.dir.path().join("src");
        let o = e.run(&["open", "--source", src.to_str().unwrap(), "--name", "w"]);
        assert!(o.status.success(), "open: {}", stderr(&o));
        let o = e
            .no_userns(&["isolation", "--accept-weaker", "on"])
            .output()
            .unwrap();
        assert!(o.status.success(), "accept weaker: {}", stderr(&o));
        // two markers: a double-forked daemon in its own session, and a plain child of the
        // command (the command itself is what init watches)
        let id = std::process::id();
        let daemon = format!("rt-daemon-{id}");
        let child = format!("rt-child-{id}");
        let script = format!(
            "setsid bash -c 'exec -a {daemon} sleep 300' </dev/null >/dev/null 2>&1 & \
             bash -c 'exec -a {child} sleep 300' & wait"
        );
        let mut cap = e
            .no_userns(&["exec", "w", "--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = wait_until(
            || !procs(&daemon).is_empty() && !procs(&child).is_empty(),
            10,
        );
        // SIGKILL: capsule cannot clean up
        cap.kill().unwrap();
        cap.wait().unwrap();
        let gone = wait_until(|| procs(&daemon).is_empty() && procs(&child).is_empty(), 5);
        let left: Vec<i32> = procs(&daemon).into_iter().chain(procs(&child)).collect();
        for p in &left {
            // SAFETY: killing the leftovers this test made (found by their unique marker).
            unsafe { libc::kill(*p, libc::SIGKILL) };
        }
        assert!(started, "the command never started its processes");
        assert!(gone, "processes outlived a SIGKILLed capsule: {left:?}");
    }
}

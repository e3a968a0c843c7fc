//! Red team: weaker isolation (Landlock + seccomp, no namespaces) run by root. Without a
//! mount namespace nothing masks the files only root may read (`/etc/shadow`, private
//! keys), which full isolation masks with mounts: Landlock must leave them out. As root
//! and as the unprivileged test user (for whom file modes already refuse them).

use capsule_e2e::{runners, scratch, stderr, stdout, Runner};
use std::path::Path;
use std::process::{Command, Stdio};

/// Host files only root may read, with content (the test needs something to look for).
const ROOT_ONLY: &[&str] = &["/etc/shadow", "/etc/ssl/private/ssl-cert-snakeoil.key"];

fn git(dir: &Path, args: &[&str]) {
    let st = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .stdout(Stdio::null())
        .status()
        .expect("git");
    assert!(st.success(), "git {args:?}");
}

/// `capsule ARGS` inside a user namespace that may create no more.
fn weaker(r: &Runner, root: &Path, cwd: &Path, args: &[&str]) -> std::process::Output {
    let base = r.capsule(root);
    let mut w = match r {
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
    w.current_dir(cwd).stdin(Stdio::null());
    w.output().expect("run capsule in a user namespace")
}

#[test]
fn root_only_files_stay_hidden_under_weaker_isolation() {
    // lines of the root-only files as the test (root in CI) reads them on the host
    let lines: Vec<String> = ROOT_ONLY
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| t.lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|l| l.len() > 8)
        .collect();
    if lines.is_empty() {
        eprintln!("note: no root-only file readable here (not root?); nothing to look for");
        return;
    }
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let dir = scratch();
        let src = dir.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("a.txt"), "a\n").unwrap();
        git(&src, &["init", "-q"]);
        git(&src, &["add", "-A"]);
        git(&src, &["commit", "-q", "-m", "init"]);
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        r.own(dir.path());
        let o = r
            .capsule(&root)
            .current_dir(dir.path())
            .args(["open", "--source", src.to_str().unwrap(), "--name", "w"])
            .output()
            .unwrap();
        assert!(o.status.success(), "open: {}", stderr(&o));
        let o = weaker(
            &r,
            &root,
            dir.path(),
            &["isolation", "--accept-weaker", "on"],
        );
        assert!(o.status.success(), "accept: {}", stderr(&o));
        let script = format!("cat {} 2>/dev/null; echo done", ROOT_ONLY.join(" "));
        let o = weaker(
            &r,
            &root,
            dir.path(),
            &["exec", "w", "--", "sh", "-c", &script],
        );
        assert!(o.status.success(), "weaker exec: {}", stderr(&o));
        assert!(stdout(&o).contains("done"), "{}", stdout(&o));
        let out = stdout(&o);
        assert!(
            !lines.iter().any(|l| out.contains(l.as_str())),
            "a root-only file was readable under weaker isolation: {out}"
        );
    }
}

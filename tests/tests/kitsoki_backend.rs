//! Kitsoki's agent runtime with capsule as its `os_confined` backend: runs
//! `hack/test-kitsoki.sh` (Kitsoki's package from `../shared/kitsoki-agentruntime`,
//! unchanged, plus `integrations/kitsoki/*.go`, in a temporary Go module, `go test`) as
//! root and as the unprivileged test user, against the built binary.
//!
//! Needs Debian's Go (`golang-go`; `.ci/run` installs it). Without `go` the test is
//! skipped with a message, but only when not root: as root (CI) a missing Go fails.

use capsule_e2e::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn agentruntime_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("KITSOKI_AGENTRUNTIME") {
        return PathBuf::from(p);
    }
    for c in [
        "../shared/kitsoki-agentruntime",
        "../../shared/kitsoki-agentruntime",
    ] {
        let p = repo_root().join(c);
        if p.join("types.go").is_file() {
            return p;
        }
    }
    panic!("Kitsoki's agentruntime package not found (../shared/kitsoki-agentruntime); set KITSOKI_AGENTRUNTIME");
}

fn have_go() -> bool {
    Command::new("go")
        .arg("version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Copy the `*.go` files (and the harness) of `from` into `to`.
fn copy_files(from: &Path, to: &Path, ext: &str) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) == Some(ext) {
            std::fs::copy(&p, to.join(e.file_name())).expect("copy");
        }
    }
}

#[test]
fn kitsoki_agentruntime_with_capsule_backend() {
    if !have_go() {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout == b"0\n")
            .unwrap_or(false);
        assert!(
            !root,
            "go is missing: install Debian's golang-go (.ci/run does); as root this test does not skip"
        );
        eprintln!("SKIPPED kitsoki_agentruntime_with_capsule_backend: go is not installed (apt-get install golang-go)");
        return;
    }
    // a copy every runner can read: the checkout may sit in a 0700 home
    let dir = scratch();
    let base = dir.path();
    let repo = base.join("repo");
    copy_files(
        &repo_root().join("integrations/kitsoki"),
        &repo.join("integrations/kitsoki"),
        "go",
    );
    copy_files(&repo_root().join("hack"), &repo.join("hack"), "sh");
    copy_files(
        &agentruntime_dir(),
        &base.join("kitsoki-agentruntime"),
        "go",
    );
    let st = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(base)
        .status()
        .expect("chmod");
    assert!(st.success());
    // both runners at once: most of the time is the tests' own waits
    std::thread::scope(|sc| {
        let handles: Vec<_> = runners()
            .into_iter()
            .map(|r| {
                let (base, repo) = (base.to_path_buf(), repo.clone());
                sc.spawn(move || {
                    let t = std::time::Instant::now();
                    let root = base.join(format!("root-{}", r.label()));
                    std::fs::create_dir_all(&root).expect("mkdir");
                    r.own(&root);
                    let mut c = r.command(Path::new("/bin/bash"), &root);
                    c.arg(repo.join("hack/test-kitsoki.sh"))
                        .current_dir(&base)
                        .env("KITSOKI_AGENTRUNTIME", base.join("kitsoki-agentruntime"))
                        .env("CAPSULE_BIN", r.capsule_path());
                    let o = run(&mut c);
                    eprintln!(
                        "{}: hack/test-kitsoki.sh took {:?}\n{}",
                        r.label(),
                        t.elapsed(),
                        stdout(&o)
                    );
                    assert_ok(&o, &format!("{}: hack/test-kitsoki.sh", r.label()));
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a runner's go test panicked");
        }
    });
}

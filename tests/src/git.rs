//! Git repositories for fixtures, made with the `git` CLI in a hermetic environment: no
//! system or global configuration, `HOME` = the repository, a fixed identity and `main`
//! as the default branch. Only ever for the test's own scratch trees; capsule itself reads
//! repositories with gix and never runs git on the host.

use std::path::Path;
use std::process::Command;

/// Run `git ARGS` in `dir` (hermetic, see the module); panics with git's stderr on failure.
#[track_caller]
pub fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Write `files` (relative path, content) under `dir` and commit them all as the one
/// commit of a new repository on `main`.
#[track_caller]
pub fn git_repo(dir: &Path, files: &[(&str, &str)]) {
    for (rel, text) in files {
        crate::write(&dir.join(rel), text);
    }
    git(dir, &["init", "-q"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "init"]);
}

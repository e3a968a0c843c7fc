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

/// The git CLI in `dir` isolated from the machine's configuration, with a fixed identity
/// and date (so commits are the same on every run) and any owner's repository accepted
/// (a test running as `capsule-ci` reads repositories root made).
pub fn fixed_git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "safe.directory")
        .env("GIT_CONFIG_VALUE_0", "*")
        .env("GIT_AUTHOR_NAME", "T")
        .env("GIT_AUTHOR_EMAIL", "t@example.org")
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_COMMITTER_NAME", "T")
        .env("GIT_COMMITTER_EMAIL", "t@example.org")
        .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z");
    c
}

/// [`fixed_git`] `ARGS` in `dir`: its standard output, trimmed; panics on failure.
#[track_caller]
pub fn fixed_git_out(dir: &Path, args: &[&str]) -> String {
    let o = crate::run(fixed_git(dir).args(args));
    crate::assert_ok(&o, &format!("git {args:?} in {}", dir.display()));
    crate::stdout(&o).trim().to_string()
}

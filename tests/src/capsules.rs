//! Helpers of the `capsule open / verify / close` tests (`tests/capsules.rs`,
//! `tests/capsules_source.rs`): the binary run as the current user and its `--json`
//! output, the tree digest computed independently (in Python), and the git CLI with
//! Kitsoki's identity, isolated from the machine's configuration.

use crate::{assert_ok, run, stderr, stdout, Runner};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

pub fn json_of(o: &std::process::Output) -> Value {
    serde_json::from_str(stdout(o).trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", stdout(o), stderr(o)))
}

/// Run the capsule binary as the current user with CAPSULE_ROOT=root.
pub fn cap(root: &Path, args: &[&str]) -> std::process::Output {
    run(Runner::Current.capsule(root).args(args))
}

/// The tree digest, computed independently in Python.
pub fn python_digest(ws: &Path) -> String {
    const PY: &str = r#"
import hashlib, os, sys
SKIP_D = {b'.git', b'.worktrees', b'peers'}
SKIP_F = {b'capsule-manifest.json', b'.kitsoki-capsule', b'.git'}
files = []
def walk(d, rel):
    for e in os.scandir(d):
        r = rel + b'/' + e.name if rel else e.name
        if e.is_dir(follow_symlinks=False):
            if e.name not in SKIP_D:
                walk(e.path, r)
        elif e.name in SKIP_F:
            continue
        elif e.is_symlink():
            files.append((r, os.readlink(e.path)))
        elif e.is_file(follow_symlinks=False):
            with open(e.path, 'rb') as f:
                files.append((r, f.read()))
walk(os.fsencode(sys.argv[1]), b'')
files.sort(key=lambda x: x[0])
h = hashlib.sha256()
for p, data in files:
    h.update(p + b'\0' + len(data).to_bytes(8, 'big') + data)
print(h.hexdigest())
"#;
    let o = run(Command::new("python3").arg("-c").arg(PY).arg(ws));
    assert_ok(&o, "python digest");
    stdout(&o).trim().to_string()
}

/// A git CLI command isolated from the machine's configuration, with Kitsoki's identity.
pub fn plain_git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Kitsoki Capsule")
        .env("GIT_AUTHOR_EMAIL", "capsule@kitsoki.dev")
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_COMMITTER_NAME", "Kitsoki Capsule")
        .env("GIT_COMMITTER_EMAIL", "capsule@kitsoki.dev")
        .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z");
    c
}

pub fn git_ok(dir: &Path, args: &[&str]) -> String {
    let o = run(plain_git(dir).args(args));
    assert_ok(&o, &format!("git {args:?}"));
    stdout(&o).trim().to_string()
}

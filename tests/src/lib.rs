//! Helpers for the end-to-end tests: locating the built `capsule` binary, scratch
//! directories on tmpfs, and running the binary as root and as the unprivileged test user
//! that `.ci/run` creates (`capsule-ci`, or `$CAPSULE_TEST_USER`).
//!
//! Sandbox tests run once per [`Runner`] from [`runners()`]. When the test user is missing
//! they run as the current user only and say so on stderr, unless
//! `CAPSULE_TEST_REQUIRE_USER=1` (set by `hack/test.sh` in CI), which makes that a failure.
//!
//! Shared fixtures live in modules: [`git`] (hermetic fixture repositories), [`project`]
//! (a source checkout and a capsule root, for tests that `capsule open`), [`sandbox`] (a
//! hand-made open capsule in a scratch home), [`weaker`] (commands in a user namespace
//! that may create no more), [`bounded`] (commands with a deadline), [`procs`] (host
//! processes by marker), [`faults`] (the fault-injection tests' kills and checks),
//! [`oci`] (OCI bundles and `capsule-runc`), [`capsules`] (the open/verify tests' runs,
//! JSON, tree digest and Kitsoki-identity git) and [`containerd`] (the containerd tests'
//! engine).

pub mod bounded;
pub mod capsules;
pub mod containerd;
pub mod engines;
pub mod faults;
pub mod git;
pub mod oci;
pub mod procs;
pub mod project;
pub mod sandbox;
pub mod weaker;

pub use bounded::{bounded, wait_bounded};
pub use git::{git, git_repo};
pub use procs::{host_procs, wait_until};
pub use project::Project;

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The workspace root of this repository.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The built `capsule` binary: `$CAPSULE_BIN`, else `target/debug/capsule`.
/// `hack/test.sh` builds it before the tests run.
pub fn capsule_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CAPSULE_BIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    let p = target.join("debug/capsule");
    assert!(
        p.exists(),
        "{} missing: run `cargo build --workspace --bins` first (hack/test.sh does)",
        p.display()
    );
    p
}

/// Kitsoki's capsule library, next to the project root.
pub fn kitsoki_capsules() -> PathBuf {
    if let Some(p) = std::env::var_os("KITSOKI_CAPSULES") {
        return PathBuf::from(p);
    }
    let candidates = [
        repo_root().join("../shared/kitsoki-capsules"),
        repo_root().join("../../shared/kitsoki-capsules"),
    ];
    for c in &candidates {
        if c.is_dir() {
            return readable_by_all(c, "kitsoki-capsules");
        }
    }
    panic!("Kitsoki's capsule library not found next to the project root (../shared/kitsoki-capsules); set KITSOKI_CAPSULES");
}

/// Our own fixtures.
pub fn fixtures() -> PathBuf {
    readable_by_all(&repo_root().join("tests/fixtures"), "fixtures")
}

/// `dir` itself when every user can read it (the unprivileged test user reads specs and
/// fixtures too); else one shared copy under `/dev/shm/capsule-e2e-data/<name>`, made once
/// per test process and swapped in atomically (a checkout may sit in a 0700 home).
fn readable_by_all(dir: &Path, name: &str) -> PathBuf {
    let all_x = dir.ancestors().all(|a| {
        a.as_os_str().is_empty()
            || std::fs::metadata(a)
                .map(|m| m.permissions().mode() & 0o001 != 0)
                .unwrap_or(false)
    });
    let r = std::fs::metadata(dir)
        .map(|m| m.permissions().mode() & 0o004 != 0)
        .unwrap_or(false);
    if all_x && r {
        return dir.to_path_buf();
    }
    static COPIED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let base = Path::new("/dev/shm/capsule-e2e-data");
    let dst = base.join(name);
    let mut done = COPIED.lock().unwrap_or_else(|e| e.into_inner());
    if !done.iter().any(|n| n == name) {
        std::fs::create_dir_all(base).expect("mkdir data dir");
        std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let tmp = base.join(format!("{name}.tmp{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let st = Command::new("cp")
            .arg("-R")
            .arg(dir)
            .arg(&tmp)
            .status()
            .expect("cp");
        assert!(st.success(), "copy {} for the test user", dir.display());
        let st = Command::new("chmod")
            .args(["-R", "a+rX"])
            .arg(&tmp)
            .status()
            .expect("chmod");
        assert!(st.success());
        let old = base.join(format!("{name}.old{}", std::process::id()));
        let _ = std::fs::rename(&dst, &old);
        std::fs::rename(&tmp, &dst).expect("install data copy");
        let _ = std::fs::remove_dir_all(&old);
        done.push(name.to_string());
    }
    dst
}

/// A scratch directory on tmpfs (`/dev/shm` when present), removed on drop.
pub fn scratch() -> tempfile::TempDir {
    let base = Path::new("/dev/shm");
    let b = tempfile::Builder::new()
        .prefix("capsule-e2e-")
        .tempdir_in(if base.is_dir() {
            base
        } else {
            Path::new("/tmp")
        });
    let d = b.expect("create scratch dir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod scratch");
    d
}

/// Who runs the binary.
#[derive(Debug, Clone)]
pub enum Runner {
    /// The user running the tests (root in CI).
    Current,
    /// The unprivileged test user.
    User {
        name: String,
        uid: u32,
        gid: u32,
        home: PathBuf,
    },
}

impl Runner {
    pub fn label(&self) -> &str {
        match self {
            Runner::Current => "current-user",
            Runner::User { name, .. } => name,
        }
    }
    /// uid the binary runs as.
    pub fn uid(&self) -> u32 {
        match self {
            Runner::Current => nix_getuid(),
            Runner::User { uid, .. } => *uid,
        }
    }
    /// Does capsule watch the home's hidden credentials for this runner (it can open
    /// `/dev/fuse`: root, or a device mode that lets others read and write it)? On this
    /// project's machines `/dev/fuse` is 0600 root's: root does, `capsule-ci` does not.
    pub fn watches_masks(&self) -> bool {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        if std::env::var_os("CAPSULE_FUSE_MASKS").is_some_and(|v| v == "0") {
            return false;
        }
        let dev = std::env::var_os("CAPSULE_FUSE_TEST_DEVICE").unwrap_or("/dev/fuse".into());
        let Ok(md) = std::fs::metadata(dev) else {
            return false;
        };
        md.file_type().is_char_device()
            && (self.uid() == 0
                || (md.uid() == self.uid() && md.mode() & 0o600 == 0o600)
                || md.mode() & 0o006 == 0o006)
    }
    /// Hand `path` (a scratch dir) to this runner so it can write there.
    pub fn own(&self, path: &Path) {
        if let Runner::User { uid, gid, .. } = self {
            let st = Command::new("chown")
                .arg("-R")
                .arg(format!("{uid}:{gid}"))
                .arg(path)
                .status()
                .expect("chown");
            assert!(st.success(), "chown {}", path.display());
        }
    }
    /// A `Command` for the capsule binary run as this runner, with a clean environment
    /// (PATH, HOME, LANG) plus `CAPSULE_ROOT=root`.
    pub fn capsule(&self, capsule_root: &Path) -> Command {
        self.command(&self.bin(), capsule_root)
    }
    /// The path of the capsule binary this runner can execute.
    pub fn capsule_path(&self) -> PathBuf {
        self.bin()
    }
    /// `program` run as this runner, with the environment of [`Runner::capsule`].
    pub fn command(&self, program: &Path, capsule_root: &Path) -> Command {
        let mut c = Command::new(program);
        c.env_clear();
        c.env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        );
        c.env("LANG", "C.UTF-8");
        c.env("CAPSULE_ROOT", capsule_root);
        if let Ok(v) = std::env::var("RUST_LOG") {
            c.env("RUST_LOG", v);
        }
        match self {
            Runner::Current => {
                c.env(
                    "HOME",
                    std::env::var_os("HOME").unwrap_or_else(|| "/root".into()),
                );
                c.env("USER", whoami());
            }
            Runner::User {
                name,
                uid,
                gid,
                home,
            } => {
                // std drops root's supplementary groups itself (setgroups(0) before setuid
                // when running as root); a pre_exec hook would run after setuid and fail.
                c.uid(*uid).gid(*gid);
                c.env("HOME", home).env("USER", name).env("LOGNAME", name);
            }
        }
        c
    }
    fn bin(&self) -> PathBuf {
        match self {
            Runner::Current => capsule_bin(),
            Runner::User { .. } => shared_bin().to_path_buf(),
        }
    }
}

fn whoami() -> String {
    std::env::var("USER").unwrap_or_else(|_| {
        if nix_getuid() == 0 {
            "root".into()
        } else {
            "user".into()
        }
    })
}

fn nix_getuid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { getuid() }
}

extern "C" {
    fn getuid() -> u32;
}

/// The binary as the test user can execute it. The checkout may sit in a 0700 home, so
/// when the test user cannot reach the built binary it gets one shared copy in
/// `/dev/shm/capsule-e2e-bin/`, keyed by the binary's size and mtime and replaced
/// atomically (running copies keep their inode), never one copy per test process.
fn shared_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let src = capsule_bin();
        if world_executable(&src) {
            return src;
        }
        use std::os::unix::fs::MetadataExt;
        let md = std::fs::metadata(&src).expect("stat capsule binary");
        let dir = Path::new("/dev/shm/capsule-e2e-bin");
        std::fs::create_dir_all(dir).expect("mkdir bin dir");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let dst = dir.join("capsule");
        let stamp = dir.join("capsule.stamp");
        let want = format!(
            "{} {} {}",
            src.display(),
            md.size(),
            md.mtime_nsec() + md.mtime() * 1_000_000_000
        );
        if std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) && dst.exists() {
            return dst;
        }
        let tmp = dir.join(format!("capsule.tmp{}", std::process::id()));
        std::fs::copy(&src, &tmp).expect("copy capsule binary");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::rename(&tmp, &dst).expect("install shared capsule binary");
        std::fs::write(&stamp, want).expect("write stamp");
        dst
    })
}

/// Can any user execute `p` (every ancestor searchable by others, the file executable)?
fn world_executable(p: &Path) -> bool {
    let Ok(md) = std::fs::metadata(p) else {
        return false;
    };
    if md.permissions().mode() & 0o001 == 0 {
        return false;
    }
    p.ancestors().skip(1).all(|a| {
        a.as_os_str().is_empty()
            || std::fs::metadata(a)
                .map(|m| m.permissions().mode() & 0o001 != 0)
                .unwrap_or(false)
    })
}

/// The unprivileged test user, if it exists and we are root.
pub fn test_user() -> Option<Runner> {
    if nix_getuid() != 0 {
        return None;
    }
    let name = std::env::var("CAPSULE_TEST_USER").unwrap_or_else(|_| "capsule-ci".into());
    let out = Command::new("getent")
        .args(["passwd", &name])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let f: Vec<&str> = line.split(':').collect();
    if f.len() < 6 {
        return None;
    }
    Some(Runner::User {
        name,
        uid: f[2].parse().ok()?,
        gid: f[3].parse().ok()?,
        home: PathBuf::from(f[5]),
    })
}

/// The runners every sandbox test runs under: the current user, and the test user.
pub fn runners() -> Vec<Runner> {
    let mut v = vec![Runner::Current];
    match test_user() {
        Some(u) => v.push(u),
        None => {
            if std::env::var("CAPSULE_TEST_REQUIRE_USER").as_deref() == Ok("1") {
                panic!("CAPSULE_TEST_REQUIRE_USER=1 but the test user is missing (create it: useradd -m capsule-ci)");
            }
            eprintln!(
                "note: no unprivileged test user (capsule-ci); running as the current user only"
            );
        }
    }
    v
}

/// Run `cmd`, returning its output; panics with the command line if it cannot start.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", cmd))
}

/// Stdout as a string.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stderr as a string.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The exit code, -1 when killed by a signal.
pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// Assert success, showing stdout and stderr otherwise.
#[track_caller]
pub fn assert_ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what} failed ({:?})\nstdout: {}\nstderr: {}",
        o.status,
        stdout(o),
        stderr(o)
    );
}

/// sha256 over a whole directory tree (paths, modes, symlink targets, contents),
/// `.git` included: used to prove a checkout was left byte-for-byte unchanged.
pub fn hash_tree(root: &Path) -> String {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::MetadataExt;
    let mut paths = Vec::new();
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut ents: Vec<_> = std::fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").path())
            .collect();
        ents.sort();
        for p in ents {
            out.push(p.clone());
            let md = std::fs::symlink_metadata(&p).expect("lstat");
            if md.is_dir() {
                walk(&p, out);
            }
        }
    }
    walk(root, &mut paths);
    let mut h = Sha256::new();
    for p in paths {
        let md = std::fs::symlink_metadata(&p).expect("lstat");
        h.update(
            p.strip_prefix(root)
                .expect("prefix")
                .as_os_str()
                .as_encoded_bytes(),
        );
        h.update([0]);
        h.update(md.mode().to_be_bytes());
        h.update(md.mtime().to_be_bytes());
        if md.file_type().is_symlink() {
            h.update(
                std::fs::read_link(&p)
                    .expect("readlink")
                    .as_os_str()
                    .as_encoded_bytes(),
            );
        } else if md.is_file() {
            h.update(std::fs::read(&p).expect("read"));
        }
        h.update([0xff]);
    }
    hex::encode(h.finalize())
}

/// Write `text` to `p`, making its parent folders first.
#[track_caller]
pub fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

/// Convenience: an OsStr from a str.
pub fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

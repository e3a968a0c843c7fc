//! Shared pieces of the tests that drive `capsule-runc` directly on a bundle (as
//! runtime-tools' validation suite does): a busybox bundle with a config.json to adjust,
//! and `capsule-runc` itself (a symlink to the capsule binary).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `capsule-runc` in `dir` (a symlink to the binary under test), made if missing.
pub fn runc_link(dir: &Path) -> PathBuf {
    let runc = dir.join("capsule-runc");
    if !runc.exists() {
        std::os::unix::fs::symlink(crate::capsule_bin(), &runc).unwrap();
    }
    runc
}

/// `dir/bundle-NAME`: a rootfs with busybox (read-only unless `extra` says otherwise) and
/// a config.json running `args` in new pid, mount, ipc, uts and network namespaces, in
/// the cgroup `/capsule-test/NAME-PID`; `extra` adjusts the config.
pub fn bundle(
    dir: &Path,
    name: &str,
    args: &[&str],
    extra: impl FnOnce(&mut serde_json::Value),
) -> PathBuf {
    let b = dir.join(format!("bundle-{name}"));
    let _ = std::fs::remove_dir_all(&b);
    std::fs::create_dir_all(b.join("rootfs/bin")).unwrap();
    std::fs::copy("/bin/busybox", b.join("rootfs/bin/busybox")).unwrap();
    for a in ["sh", "sleep", "echo", "cat", "touch", "dd"] {
        std::os::unix::fs::symlink("busybox", b.join("rootfs/bin").join(a)).unwrap();
    }
    let mut c = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": 0, "gid": 0}, "args": args, "env": ["PATH=/bin"], "cwd": "/",
            "capabilities": {"bounding": ["CAP_KILL"], "effective": ["CAP_KILL"], "permitted": ["CAP_KILL"]}},
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "lifecycle",
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                   {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]}],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"}, {"type": "network"}],
                  "cgroupsPath": format!("/capsule-test/{name}-{}", std::process::id()),
                  "maskedPaths": ["/proc/timer_list"], "readonlyPaths": ["/proc/sys"]}
    });
    extra(&mut c);
    std::fs::write(
        b.join("config.json"),
        serde_json::to_vec_pretty(&c).unwrap(),
    )
    .unwrap();
    b
}

/// `capsule-runc --root ROOT ARGS...` (stdin from /dev/null), its output.
pub fn runc(runc: &Path, root: &Path, args: &[&str]) -> Output {
    Command::new(runc)
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

//! capsule-runc's Landlock layer, planned from the bundle's mounts
//! (`plan::container::landlock_policy`), holds where the mounts alone would not: a
//! container the bundle gives `CAP_SYS_ADMIN` cannot remount its read-only root
//! writable and write to it. `capsule-runc run` driven directly on a small busybox
//! bundle (no containerd). Root only (capsule-runc makes cgroups and device nodes); as
//! another user the test says so and passes.

use capsule_e2e::{capsule_bin, stderr, stdout};
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn bundle(dir: &std::path::Path, script: &str) -> PathBuf {
    let b = dir.join("bundle");
    std::fs::create_dir_all(b.join("rootfs/bin")).unwrap();
    std::fs::copy("/bin/busybox", b.join("rootfs/bin/busybox")).unwrap();
    for a in ["sh", "touch", "mount", "echo"] {
        std::os::unix::fs::symlink("busybox", b.join("rootfs/bin").join(a)).unwrap();
    }
    let caps = ["CAP_SYS_ADMIN"];
    let c = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": 0, "gid": 0}, "args": ["sh", "-c", script], "env": ["PATH=/bin"], "cwd": "/",
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps}},
        "root": {"path": "rootfs", "readonly": true},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                   {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]}],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"}, {"type": "network"}],
                  "cgroupsPath": format!("/capsule-test/landlock-{}", std::process::id())}
    });
    std::fs::write(b.join("config.json"), serde_json::to_vec(&c).unwrap()).unwrap();
    b
}

#[test]
fn cap_sys_admin_cannot_remount_the_read_only_root_and_write() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("note: capsule-runc needs root: skipped for this user");
        return;
    }
    if !std::path::Path::new("/bin/busybox").exists() {
        assert!(
            std::env::var("CAPSULE_TEST_REQUIRE_USER").as_deref() != Ok("1"),
            "busybox is not installed (.ci/run installs busybox-static)"
        );
        eprintln!("note: busybox is not installed: skipped");
        return;
    }
    let dir = PathBuf::from(format!("/dev/shm/capsule-ocill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let runc = dir.join("capsule-runc");
    std::os::unix::fs::symlink(capsule_bin(), &runc).unwrap();
    let script = "mount -o remount,bind,rw / 2>/dev/null && echo REMOUNTED; touch /f 2>/dev/null && echo WROTE; echo done";
    let b = bundle(&dir, script);
    let run = |landlock: &str| {
        Command::new(&runc)
            .env("CAPSULE_OCI_LANDLOCK", landlock)
            .arg("--root")
            .arg(dir.join("state"))
            .args(["run", "--bundle"])
            .arg(&b)
            .arg(format!("ll-{landlock}-{}", std::process::id()))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let o = run("1");
    let out = stdout(&o);
    assert!(out.contains("done"), "{out} {}", stderr(&o));
    assert!(
        !out.contains("WROTE"),
        "Landlock let the write through: {out}"
    );
    // the control: the same bundle without capsule's Landlock writes (the test can fail)
    let o = run("0");
    let out = stdout(&o);
    let ok = out.contains("WROTE");
    let _ = std::fs::remove_file(b.join("rootfs/f"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        ok,
        "without Landlock the remount and write should work: {out} {}",
        stderr(&o)
    );
}

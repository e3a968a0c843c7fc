//! The disk guard of containers run by `capsule-runc`, driven directly on bundles
//! (create/start/state/delete, and `run`), on a small filesystem made for the test (a
//! tmpfs of 256 MiB: its reserve, 5%, is 12.8 MiB):
//!
//! - a container writing in a loop into its rootfs (on that filesystem), or into a
//!   writable bind mount of it, is killed with the reserve still free: exit 137, one
//!   `error` line in `--log`, the same line in `state`'s `limits_reached`; a file the
//!   operator has there is untouched;
//! - the annotation `dev.capsule.disk-reserve: off` lets it fill the disk;
//! - a filesystem below its reserve already fails `create`, nothing left behind.
//!
//! Root only (capsule-runc makes namespaces and cgroups, the test mounts): as another
//! user the tests say so and pass.

use capsule_e2e::faults::{free, SmallFs};
use capsule_e2e::oci::{bundle, runc, runc_link};
use capsule_e2e::{code, scratch, stderr, stdout, Runner};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const FS_SIZE: &str = "256m";
const RESERVE: u64 = (256 << 20) / 100 * 5;
const OPERATOR_FILE: &str = "operator-backup.bin";
/// 8 MiB a write, in a loop, until something stops it (a full disk: exit 3).
const FILL: &str = "i=0; while :; do dd if=/dev/zero of=DIR/fill$i bs=8M count=1 2>/dev/null || exit 3; i=$((i+1)); done";

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// (fields dropped in order: the tmpfs unmounted before the scratch folder is removed)
struct Setup {
    fs: SmallFs,
    _t: tempfile::TempDir,
    dir: PathBuf,
    runc: PathBuf,
    root: PathBuf,
    data: Vec<u8>,
}

impl Setup {
    /// A scratch folder, the small filesystem in it with the operator's 16 MiB file.
    fn new() -> Option<Setup> {
        if !is_root() {
            eprintln!("skipped: capsule-runc and the small tmpfs need root");
            return None;
        }
        let t = scratch();
        let dir = t.path().to_path_buf();
        let fs = SmallFs::mount(&dir.join("fs"), FS_SIZE, &Runner::Current);
        let data: Vec<u8> = (0..16u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        std::fs::write(fs.0.join(OPERATOR_FILE), &data).unwrap();
        Some(Setup {
            runc: runc_link(&dir),
            root: dir.join("runc-root"),
            dir,
            fs,
            data,
            _t: t,
        })
    }

    fn runc(&self, args: &[&str]) -> std::process::Output {
        runc(&self.runc, &self.root, args)
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }

    /// `capsule-runc --log LOG --log-format json ARGS...`.
    fn logged(&self, name: &str, args: &[&str]) -> std::process::Output {
        let log = self.log(name);
        let mut a = vec!["--log", log.to_str().unwrap(), "--log-format", "json"];
        a.extend_from_slice(args);
        self.runc(&a)
    }

    /// `create --bundle B ID` with `--log`: its status and stderr (the container's stdio is
    /// create's: a file, not a pipe the init would hold open).
    fn create(&self, name: &str, b: &Path) -> (i32, String) {
        let err = self.dir.join(format!("{name}.create"));
        let f = std::fs::File::create(&err).unwrap();
        let log = self.log(name);
        let st = std::process::Command::new(&self.runc)
            .arg("--root")
            .arg(&self.root)
            .arg("--log")
            .arg(&log)
            .args(["--log-format", "json", "create", "--bundle"])
            .arg(b)
            .arg(name)
            .stdin(std::process::Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .status()
            .unwrap();
        (
            st.code().unwrap_or(-1),
            std::fs::read_to_string(&err).unwrap_or_default(),
        )
    }

    /// The guard's lines in the log: one, at level error, naming the filesystem.
    fn guard_line(&self, name: &str) -> String {
        let text = std::fs::read_to_string(self.log(name)).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .filter(|l| l.contains("disk guard"))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1, "{name}: {text}");
        assert_eq!(lines[0]["level"], "error", "{text}");
        let msg = lines[0]["msg"].as_str().unwrap().to_string();
        assert!(
            msg.starts_with(&format!(
                "capsule: container {name}: killed: free space on the filesystem of "
            )) && msg.contains("at the disk reserve of 12.8 MiB")
                && msg.contains("dev.capsule.disk-reserve"),
            "{msg}"
        );
        msg
    }

    /// The reserve is still free and the operator's file as it was; the fill removed.
    fn assert_reserve_kept(&self, name: &str, fills: &Path) {
        let left = free(&self.fs.0);
        eprintln!("{name}: {left} bytes free after the stop");
        assert!(
            left >= RESERVE,
            "{name}: {left} bytes free, reserve {RESERVE}"
        );
        assert!(std::fs::read(self.fs.0.join(OPERATOR_FILE)).unwrap() == self.data);
        for e in std::fs::read_dir(fills).unwrap().flatten() {
            if e.file_name().to_string_lossy().starts_with("fill") {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
    }
}

impl Drop for Setup {
    /// What a failed test left: its containers deleted (their processes and cgroups).
    fn drop(&mut self) {
        for e in std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
        {
            let id = e.file_name().to_string_lossy().into_owned();
            let _ = self.runc(&["delete", "--force", &id]);
        }
    }
}

/// A bundle in the scratch folder (its rootfs read-only there) running `args`, with the
/// small filesystem's `data` folder (made) bound writable at `/data`; `extra` adjusts it.
fn bind_bundle(
    s: &Setup,
    id: &str,
    args: &[&str],
    extra: impl FnOnce(&mut serde_json::Value),
) -> (PathBuf, PathBuf) {
    let data = s.fs.0.join("data");
    std::fs::create_dir(&data).unwrap();
    let b = bundle(&s.dir, id, args, |c| {
        c["mounts"].as_array_mut().unwrap().push(serde_json::json!(
            {"destination": "/data", "type": "bind", "source": data, "options": ["rbind", "rw"]}
        ));
        extra(c);
    });
    (b, data)
}

fn wait_stopped(s: &Setup, id: &str) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let o = s.runc(&["state", id]);
        assert!(o.status.success(), "state: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        if v["status"] == "stopped" {
            return v;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "never stopped: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A container writing into its rootfs, created and started as the shim does: killed
/// before the disk is full, the reason in the log and in `state`.
#[test]
fn a_container_filling_its_rootfs_is_stopped_with_the_reserve_still_free() {
    let Some(s) = Setup::new() else { return };
    let id = "guard-rootfs";
    let b = bundle(&s.fs.0, id, &["sh", "-c", &FILL.replace("DIR", "")], |c| {
        c["root"]["readonly"] = false.into();
    });
    let (st, e) = s.create(id, &b);
    assert_eq!(st, 0, "create: {e}");
    let o = s.runc(&["start", id]);
    assert!(o.status.success(), "start: {}", stderr(&o));
    let st = wait_stopped(&s, id);
    let msg = s.guard_line(id);
    assert_eq!(
        st["limits_reached"],
        serde_json::json!([msg
            .trim_start_matches(&format!("capsule: container {id}: "))
            .split("; another reserve")
            .next()
            .unwrap()]),
        "{st}"
    );
    // the filesystem named is the rootfs's
    assert!(
        msg.contains(&b.join("rootfs").display().to_string()),
        "{msg}"
    );
    assert!(s.runc(&["delete", id]).status.success());
    s.assert_reserve_kept(id, &b.join("rootfs"));
}

/// A container writing into a writable bind mount of the small filesystem (its own
/// rootfs read-only elsewhere), through `run`: its status is the kill's, 137.
#[test]
fn a_container_filling_a_bind_mount_is_killed_exit_137() {
    let Some(s) = Setup::new() else { return };
    let id = "guard-bind";
    let fill = FILL.replace("DIR", "/data");
    let (b, data) = bind_bundle(&s, id, &["sh", "-c", &fill], |_| {});
    let o = s.logged(id, &["run", "--bundle", b.to_str().unwrap(), id]);
    assert_eq!(code(&o), 137, "run: {}", stderr(&o));
    let msg = s.guard_line(id);
    assert!(msg.contains(&data.display().to_string()), "{msg}");
    s.assert_reserve_kept(id, &data);
}

/// The annotation turns the guard off: the container fills the disk and ends on its
/// own (dd's ENOSPC: exit 3).
#[test]
fn the_annotation_turns_it_off() {
    let Some(s) = Setup::new() else { return };
    let id = "guard-off";
    let fill = FILL.replace("DIR", "/data");
    let (b, _) = bind_bundle(&s, id, &["sh", "-c", &fill], |c| {
        c["annotations"] = serde_json::json!({"dev.capsule.disk-reserve": "off"});
    });
    let o = s.logged(id, &["run", "--bundle", b.to_str().unwrap(), id]);
    assert_eq!(code(&o), 3, "run: {}", stderr(&o));
    assert!(free(&s.fs.0) < 8 << 20, "the disk did not fill");
    let text = std::fs::read_to_string(s.log(id)).unwrap_or_default();
    assert!(!text.contains("disk guard"), "{text}");
}

/// A filesystem below its reserve before the container starts: create fails, saying
/// so in one line, with nothing left behind.
#[test]
fn a_filesystem_below_its_reserve_already_fails_create() {
    let Some(s) = Setup::new() else { return };
    let id = "guard-full";
    let (b, _) = bind_bundle(&s, id, &["true"], |_| {});
    let big = vec![0u8; (free(&s.fs.0) - RESERVE / 2) as usize];
    std::fs::write(s.fs.0.join("big"), big).unwrap();
    let (st, e) = s.create(id, &b);
    assert_eq!(st, 1, "{e}");
    assert!(
        e.lines().count() == 1
            && e.contains("the disk guard: free space on the filesystem of")
            && e.contains("below the disk reserve of 12.8 MiB: nothing ran"),
        "{e}"
    );
    assert!(!s.root.join(id).exists(), "state left behind");
}

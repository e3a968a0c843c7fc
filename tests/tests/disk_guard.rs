//! The disk guard and the exec record on a full disk, on a small filesystem made for the
//! test: a tmpfs of 256 MiB holding the capsule root (mounted by root, handed to the
//! runner; the unprivileged runner's capsule uses it as any folder of its own).
//!
//! - A task writing in a loop (the workspace, then `/tmp`) is stopped with the reserve
//!   still free, in one line, `limits_reached`, a write refusal naming the grant, exit 137;
//!   a file the operator has on the same filesystem is untouched.
//! - With the guard off, a task that fills the disk still gets its record (its room was
//!   taken before it started); a disk full before the exec loses the record, and the exit
//!   status says so (122).
//!
//! Needs root to mount; without root the tests say so and check nothing.

use capsule_e2e::faults::*;
use capsule_e2e::*;
use std::path::Path;

/// The capsule root's filesystem: this size, the reserve at its default (5% of it).
const FS_SIZE: &str = "256m";
const RESERVE: u64 = (256 << 20) / 100 * 5;
/// What the operator keeps on the same filesystem, outside the capsule root.
const OPERATOR_FILE: &str = "operator-backup.bin";

fn is_root() -> bool {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() == 0 }
}

/// A capsule `g` opened from a one-file checkout into a capsule root on a small tmpfs,
/// with the operator's file of 16 MiB next to that root; (the tmpfs, the root, the
/// operator file's bytes).
fn small_capsule(r: &Runner, t: &Path) -> (SmallFs, std::path::PathBuf, Vec<u8>) {
    let src = t.join("src");
    git_repo(&src, &[("README", "r\n")]);
    r.own(&src);
    let fs = SmallFs::mount(&t.join("fs"), FS_SIZE, r);
    let data: Vec<u8> = (0..16u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(fs.0.join(OPERATOR_FILE), &data).unwrap();
    let root = fs.0.join("root");
    let o = bounded(
        r.capsule(&root)
            .args(["open", "--name", "g", "--source"])
            .arg(&src),
        60,
    );
    assert_ok(&o, "open");
    (fs, root, data)
}

fn last_record(root: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(root.join("bundles/g/events.jsonl")).unwrap();
    serde_json::from_str(text.lines().last().expect("a record")).unwrap()
}

/// `f(runner, label, the tmpfs, the capsule root, the operator's bytes)` for each runner,
/// on a capsule of its own on a small tmpfs ([`small_capsule`]); then the capsule is
/// closed, the tmpfs unmounted, and nothing of it may run on.
fn on_small_fs(f: impl Fn(&Runner, &str, &SmallFs, &Path, &[u8])) {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs as the capsule root needs root");
        return;
    }
    for r in runners() {
        let label = r.label().to_string();
        let t = scratch();
        let (fs, root, data) = small_capsule(&r, t.path());
        f(&r, &label, &fs, &root, &data);
        assert_ok(
            &bounded(r.capsule(&root).args(["close", "g", "--force"]), 60),
            "close",
        );
        drop(fs);
        assert_nothing_runs(t.path(), 15, &label);
    }
}

#[test]
fn a_writing_loop_is_stopped_with_the_reserve_still_free() {
    on_small_fs(|r, label, fs, root, data| {
        // 8 MiB a write, in a loop, until something stops it (a full disk: exit 3)
        for (dir, what) in [(".", "the workspace"), ("/tmp", "/tmp")] {
            let script = format!(
                "i=0; while :; do dd if=/dev/zero of={dir}/fill$i bs=8M count=1 2>/dev/null || exit 3; i=$((i+1)); done"
            );
            let o = bounded(
                r.capsule(root)
                    .args(["exec", "g", "--", "sh", "-c", &script]),
                60,
            );
            let e = stderr(&o);
            assert_eq!(code(&o), 137, "[{label}] {what}: {e}");
            let left = free(&fs.0);
            eprintln!("[{label}] {what}: {left} bytes free after the stop; {e}");
            assert!(
                left >= RESERVE,
                "[{label}] {what}: {left} bytes free, reserve {RESERVE}"
            );
            // one line, naming the filesystem
            let said: Vec<&str> = e.lines().filter(|l| l.contains("disk guard")).collect();
            assert_eq!(said.len(), 1, "[{label}] {what}: {e}");
            assert!(
                said[0].starts_with("capsule: killed: free space on the filesystem of "),
                "{e}"
            );
            assert!(said[0].contains("at the disk reserve of 12.8 MiB"), "{e}");
            let rec = last_record(root);
            assert_eq!(
                rec["limits_reached"],
                serde_json::json!([said[0].trim_start_matches("capsule: ")]),
                "[{label}] {rec}"
            );
            assert_eq!(
                rec["termination"]["kind"], "disk_reserve",
                "[{label}] {rec}"
            );
            assert_eq!(rec["exit_status"], 137, "[{label}] {rec}");
            let refusal = rec["refusals"].to_string();
            assert!(
                refusal.contains("disk_reserve") && refusal.contains("settings.json"),
                "[{label}] the refusal names no grant: {rec}"
            );
            // the operator's file on the same filesystem is as it was
            assert!(
                std::fs::read(fs.0.join(OPERATOR_FILE)).unwrap() == *data,
                "[{label}]"
            );
            // the space given back (the task's files are the user's to remove)
            for d in ["workspaces/g", "bundles/g/tmp"] {
                for e in std::fs::read_dir(root.join(d)).unwrap().flatten() {
                    if e.file_name().to_string_lossy().starts_with("fill") {
                        std::fs::remove_file(e.path()).unwrap();
                    }
                }
            }
        }
        // with the space given back, the next exec runs
        assert_ok(
            &bounded(r.capsule(root).args(["exec", "g", "--", "true"]), 60),
            "exec after",
        );
    });
}

#[test]
fn the_record_survives_a_full_disk_and_its_loss_is_in_the_exit_status() {
    on_small_fs(|r, label, fs, root, _| {
        // the task fills the disk to its last block: its record still goes in
        let o = fill_the_disk(r, root, "g", label);
        assert!(free(&fs.0) < 1 << 20, "[{label}] the disk did not fill");
        assert_eq!(code(&o), 0, "[{label}] {}", stderr(&o));
        let rec = last_record(root);
        assert_eq!(
            rec["argv"][0], "sh",
            "[{label}] the record of the exec that filled the disk is lost: {rec}"
        );
        // the disk is full before the next exec, and the log holds no room (the room one
        // exec takes stays after its record, so the operator's copy stands for a log
        // without it): the exec runs, its record cannot be written, and the exit status
        // says so
        let before = assert_events_parse(root, label);
        let events = root.join("bundles/g/events.jsonl");
        std::fs::remove_file(root.join("workspaces/g/fill")).unwrap();
        let copy = root.join("bundles/g/events.copy");
        std::fs::copy(&events, &copy).unwrap();
        std::fs::rename(&copy, &events).unwrap();
        r.own(&events);
        let mut grow = std::fs::File::create(root.join("workspaces/g/fill")).unwrap();
        use std::io::Write;
        while grow.write_all(&[0u8; 4096]).is_ok() {}
        drop(grow);
        let o = bounded(r.capsule(root).args(["exec", "g", "--", "true"]), 60);
        let e = stderr(&o);
        assert_eq!(code(&o), 122, "[{label}] {e}");
        assert!(
            e.lines()
                .any(|l| l.starts_with("capsule: cannot append the exec record")
                    && l.contains("No space left on device")
                    && l.contains("the command's exit status was 0")),
            "[{label}] {e}"
        );
        assert_eq!(assert_events_parse(root, label), before, "[{label}]");
        std::fs::remove_file(root.join("workspaces/g/fill")).unwrap();
    });
}

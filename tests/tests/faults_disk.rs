//! A full disk, as a user meets it: the capsule root on a small tmpfs (mounted by root,
//! handed to the runner), filled during `capsule open` (the workspace does not fit) and
//! during an exec (the task fills it, then capsule writes the exec's record). Each gives
//! a clear one-line error, nothing half-made is left once the next `list` ran, earlier
//! records stay whole (`events.jsonl` parses line by line), and once space is freed the
//! next command works.
//!
//! Needs root to mount (the unprivileged runner gets a tmpfs root mounted for it); without
//! root the test says so and checks nothing.

use capsule_e2e::faults::*;
use capsule_e2e::*;
use std::path::Path;

/// A git checkout at `dir` holding `big` bytes of random data (incompressible, so its
/// objects take as much room as its checkout).
fn checkout(dir: &Path, big: usize) {
    git_repo(dir, &[("README", "r\n")]);
    if big > 0 {
        let mut data = vec![0u8; big];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for b in data.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        std::fs::write(dir.join("big.bin"), data).unwrap();
        git(dir, &["add", "big.bin"]);
        git(dir, &["commit", "-q", "-m", "big"]);
    }
}

/// The error of a failed command: one line, saying the disk is full.
#[track_caller]
fn assert_one_line_enospc(o: &std::process::Output, what: &str, label: &str) -> String {
    let e = stderr(o);
    let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines.len() == 1 && lines[0].contains("No space left on device"),
        "[{label}] {what}: want one line saying the disk is full, got:\n{e}"
    );
    lines[0].to_string()
}

/// No staging or half-made folder in `root`, and `list` shows only whole capsules.
#[track_caller]
fn assert_nothing_half_made(r: &Runner, root: &Path, label: &str) -> serde_json::Value {
    let o = bounded(r.capsule(root).args(["list", "--json"]), 60);
    assert_ok(&o, "list");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for c in v["capsules"].as_array().unwrap() {
        assert!(c.get("error").is_none(), "[{label}] broken capsule: {c}");
    }
    for d in ["bundles", "workspaces"] {
        let dots: Vec<String> = names(&root.join(d))
            .into_iter()
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(dots.is_empty(), "[{label}] left in {d}: {dots:?}");
    }
    v
}

#[test]
fn a_full_disk_during_open_and_exec_leaves_nothing_half_made() {
    // SAFETY: getuid cannot fail.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("skipped: mounting a small tmpfs as the capsule root needs root");
        return;
    }
    for r in runners() {
        let label = r.label().to_string();
        let t = scratch();
        let big = t.path().join("big");
        let small = t.path().join("small");
        checkout(&big, 3 << 19);
        checkout(&small, 0);
        r.own(t.path());

        // open: the workspace (1.5 MiB checked out + 1.5 MiB of objects) does not fit in 2 MiB
        let fs = SmallFs::mount(&t.path().join("fs-open"), "2m", &r);
        let root = fs.0.join("root");
        let o = bounded(
            r.capsule(&root)
                .args(["open", "--name", "o", "--source"])
                .arg(&big),
            60,
        );
        assert!(
            !o.status.success(),
            "[{label}] open on a full disk succeeded"
        );
        let line = assert_one_line_enospc(&o, "open", &label);
        eprintln!("[{label}] open: {line}");
        let v = assert_nothing_half_made(&r, &root, &label);
        assert_eq!(v["capsules"], serde_json::json!([]), "[{label}]");
        assert_eq!(names(&root.join("workspaces")), Vec::<String>::new());
        assert_eq!(names(&root.join("bundles")), Vec::<String>::new());
        // with room again, the same open works
        drop(fs);
        let fs = SmallFs::mount(&t.path().join("fs-open2"), "16m", &r);
        let root = fs.0.join("root");
        let o = bounded(
            r.capsule(&root)
                .args(["open", "--name", "o", "--source"])
                .arg(&big),
            60,
        );
        assert_ok(&o, "open with room");
        assert_ok(
            &run(r.capsule(&root).args(["close", "o", "--force"])),
            "close",
        );
        drop(fs);

        // exec: the task fills the disk, then capsule writes its record
        let fs = SmallFs::mount(&t.path().join("fs-exec"), "4m", &r);
        let root = fs.0.join("root");
        let o = bounded(
            r.capsule(&root)
                .args(["open", "--name", "e", "--source"])
                .arg(&small),
            60,
        );
        assert_ok(&o, "open");
        for _ in 0..2 {
            assert_ok(
                &bounded(r.capsule(&root).args(["exec", "e", "--", "true"]), 60),
                "exec",
            );
        }
        let before = std::fs::read_to_string(root.join("bundles/e/events.jsonl")).unwrap();
        assert_eq!(assert_events_parse(&root, &label), 2);
        let o = fill_the_disk(&r, &root, "e", &label);
        // the records before are intact, and whatever was written of this one is whole
        let after = std::fs::read_to_string(root.join("bundles/e/events.jsonl")).unwrap();
        assert!(
            after.starts_with(&before),
            "[{label}] earlier records changed"
        );
        let n = assert_events_parse(&root, &label);
        eprintln!(
            "[{label}] exec filling the disk: {}",
            match n {
                2 => format!("its record did not fit: {}", stderr(&o).trim()),
                _ => "its record fitted".into(),
            }
        );
        if n == 2 {
            // the record did not fit: said in one line naming it, and in the exit status
            let e = stderr(&o);
            assert!(
                e.lines()
                    .any(|l| l.contains("exec record") && l.contains("No space left on device")),
                "[{label}] a lost record is not said: {e}"
            );
            assert_eq!(o.status.code(), Some(122), "[{label}] {e}");
        } else {
            assert_eq!(o.status.code(), Some(0), "[{label}] {}", stderr(&o));
        }
        // room again: the next exec works and is recorded after the others
        std::fs::remove_file(root.join("workspaces/e/fill")).unwrap();
        assert_ok(
            &bounded(r.capsule(&root).args(["exec", "e", "--", "true"]), 60),
            "exec after freeing space",
        );
        assert_eq!(assert_events_parse(&root, &label), n + 1, "[{label}]");
        assert_nothing_half_made(&r, &root, &label);
        assert_ok(
            &bounded(r.capsule(&root).args(["close", "e", "--force"]), 60),
            "close",
        );
        drop(fs);
        assert_nothing_runs(t.path(), 15, &label);
    }
}

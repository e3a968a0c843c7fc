//! Faults injected into `capsule` as a user would: commands killed with SIGKILL at times
//! spread over their run. Afterwards nothing half-made stays once the next command ran,
//! every capsule left loads, and no mount of the capsule root is left.
//!
//! Iterations per runner: `CAPSULE_FAULT_ITERS` (default 10; `hack/faults.sh N` runs more).

use capsule_e2e::faults::names;
use capsule_e2e::*;
use std::time::Duration;

fn iters() -> u64 {
    std::env::var("CAPSULE_FAULT_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

fn kill_after(mut cmd: std::process::Command, after: Duration) {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().expect("spawn capsule");
    std::thread::sleep(after);
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
}

#[test]
fn killed_opens_leave_nothing_after_the_next_list() {
    let spec = kitsoki_capsules().join("clean-repo");
    for r in runners() {
        let t = scratch();
        let root = t.path().join("root");
        std::fs::create_dir(&root).unwrap();
        r.own(t.path());
        let n = iters();
        for i in 0..n {
            let mut c = r.capsule(&root);
            c.arg("open").arg(&spec).arg("--name").arg(format!("k{i}"));
            // spread over an open's run (~20-150 ms here), the last one early: the
            // list below, not a next open, must clean what it left
            kill_after(c, Duration::from_millis(20 + (n - 1 - i) * 130 / n.max(1)));
        }
        // a kill may have left staging folders; the next list removes them
        let o = run(r.capsule(&root).args(["list", "--json"]));
        assert_ok(&o, "list");
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let label = r.label();
        let left_b: Vec<_> = names(&root.join("bundles"))
            .into_iter()
            .filter(|n| n.starts_with('.'))
            .collect();
        let left_w: Vec<_> = names(&root.join("workspaces"))
            .into_iter()
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(left_b.is_empty(), "[{label}] bundles left: {left_b:?}");
        assert!(left_w.is_empty(), "[{label}] workspaces left: {left_w:?}");
        // every capsule left is whole: it loads, and closes
        for c in v["capsules"].as_array().unwrap() {
            assert!(c.get("error").is_none(), "[{label}] broken capsule: {c}");
            let name = c["name"].as_str().unwrap();
            assert_ok(&run(r.capsule(&root).args(["close", name])), "close");
        }
        assert!(
            names(&root.join("workspaces")).is_empty(),
            "[{label}] {:?}",
            names(&root.join("workspaces"))
        );
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains(root.to_str().unwrap()),
            "[{label}] a mount of the capsule root is left"
        );
        // and a new open still works
        let o = run(r.capsule(&root).arg("open").arg(&spec));
        assert_ok(&o, "open after the kills");
    }
}

#[test]
fn killed_execs_and_closes_leave_capsules_that_load() {
    let spec = kitsoki_capsules().join("clean-repo");
    for r in runners() {
        let t = scratch();
        let root = t.path().join("root");
        std::fs::create_dir(&root).unwrap();
        r.own(t.path());
        let label = r.label();
        assert_ok(
            &run(r
                .capsule(&root)
                .arg("open")
                .arg(&spec)
                .args(["--name", "e"])),
            "open",
        );
        let n = iters();
        for i in 0..n {
            let mut c = r.capsule(&root);
            c.args(["exec", "e", "--", "sh", "-c", "echo x >> f; sleep 1"]);
            kill_after(c, Duration::from_millis(i * 100 / n.max(1)));
        }
        // the record still parses line by line (a torn last line is the only loss)
        let ev = root.join("bundles/e/events.jsonl");
        if let Ok(text) = std::fs::read_to_string(&ev) {
            for (k, l) in text.lines().enumerate() {
                assert!(
                    serde_json::from_str::<serde_json::Value>(l).is_ok(),
                    "[{label}] events.jsonl line {} does not parse: {l}",
                    k + 1
                );
            }
        }
        assert_ok(
            &run(r.capsule(&root).args(["exec", "e", "--", "true"])),
            "exec after kills",
        );
        // kill closes, then the next list/close finishes the job
        for i in 0..n.min(5) {
            let name = format!("c{i}");
            assert_ok(
                &run(r
                    .capsule(&root)
                    .arg("open")
                    .arg(&spec)
                    .args(["--name", &name])),
                "open",
            );
            let mut c = r.capsule(&root);
            c.args(["close", "--force", &name]);
            kill_after(c, Duration::from_millis(i * 10));
        }
        let o = run(r.capsule(&root).args(["list", "--json"]));
        assert_ok(&o, "list");
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        for c in v["capsules"].as_array().unwrap() {
            let name = c["name"].as_str().unwrap();
            assert_ok(
                &run(r.capsule(&root).args(["close", "--force", name])),
                &format!("[{label}] close {name} after a killed close"),
            );
        }
        let left: Vec<_> = names(&root.join("bundles"));
        assert!(left.is_empty(), "[{label}] bundles left: {left:?}");
        let left: Vec<_> = names(&root.join("workspaces"));
        assert!(left.is_empty(), "[{label}] workspaces left: {left:?}");
    }
}

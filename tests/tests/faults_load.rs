//! Load, as a user would make it: many capsules, each with several execs running at
//! once (the first ones racing to start the capsule's holder), as root and as the
//! unprivileged user. Every exec succeeds and is recorded once, and each capsule's
//! holders (`capsule-holder`) and mounts are gone after its `close`.
//!
//! Size: 6 capsules x 3 concurrent execs x 3 each; `CAPSULE_FAULT_LONG=1` (set by
//! `hack/faults.sh`) runs 50 x 4 x 10.

use capsule_e2e::faults::*;
use capsule_e2e::*;
use std::path::Path;
use std::time::Instant;

/// Processes whose mount table shows `path` (a capsule's holders and sandboxes do).
fn mounting(path: &Path) -> Vec<(i32, String)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let mi = std::fs::read_to_string(e.path().join("mountinfo")).unwrap_or_default();
        if names_path(&mi, path) {
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            v.push((pid, comm.trim().to_string()));
        }
    }
    v
}

#[test]
fn many_capsules_with_concurrent_execs_all_succeed_and_close_clean() {
    let (caps, par, each) = if long() { (50, 4, 10) } else { (6, 3, 3) };
    for r in runners() {
        let label = r.label().to_string();
        let p = Project::new(&r);
        let t0 = Instant::now();
        let caps_names: Vec<String> = (0..caps).map(|k| format!("l{k}")).collect();
        for n in &caps_names {
            p.open(n);
        }
        let opened = t0.elapsed();
        let t1 = Instant::now();
        let failures: Vec<String> = std::thread::scope(|s| {
            let mut hs = Vec::new();
            for n in &caps_names {
                for j in 0..par {
                    let (p, n) = (&p, n.clone());
                    hs.push(s.spawn(move || {
                        let mut bad = Vec::new();
                        for i in 0..each {
                            let line = format!("{j}.{i}");
                            let o = bounded(
                                p.capsule().args([
                                    "exec",
                                    &n,
                                    "--",
                                    "sh",
                                    "-c",
                                    &format!("echo {line} >> out"),
                                ]),
                                120,
                            );
                            if !o.status.success() {
                                bad.push(format!(
                                    "{n} exec {line}: {:?}: {}",
                                    o.status,
                                    stderr(&o)
                                ));
                            }
                        }
                        bad
                    }));
                }
            }
            hs.into_iter()
                .flat_map(|h| h.join().expect("exec thread"))
                .collect()
        });
        let ran = t1.elapsed();
        assert!(
            failures.is_empty(),
            "[{label}] {} failed: {failures:#?}",
            failures.len()
        );
        for n in &caps_names {
            // each exec ran once and was recorded once
            let out = std::fs::read_to_string(p.root().join("workspaces").join(n).join("out"))
                .unwrap_or_default();
            let mut lines: Vec<&str> = out.lines().collect();
            lines.sort();
            let mut want: Vec<String> = (0..par)
                .flat_map(|j| (0..each).map(move |i| format!("{j}.{i}")))
                .collect();
            want.sort();
            assert_eq!(lines, want, "[{label}] {n}: what the execs wrote");
            let records = p.events(n).lines().count();
            assert_eq!(records, par * each, "[{label}] {n}: records");
        }
        assert!(assert_events_parse(&p.root(), &label) == caps * par * each);
        // close each: its holders and mounts go
        let t2 = Instant::now();
        for n in &caps_names {
            let ws = p.root().join("workspaces").join(n);
            let holders = mounting(&ws);
            assert!(
                holders.iter().any(|(_, c)| c == "capsule-holder"),
                "[{label}] {n}: no holder before close: {holders:?}"
            );
            let o = bounded(p.capsule().args(["close", n, "--force"]), 60);
            assert_ok(&o, &format!("[{label}] close {n}"));
            // close tells them to stop: they go at once, not when they notice by
            // themselves that the capsule is gone (seconds later)
            assert!(
                wait_until(|| mounting(&ws).is_empty(), 2),
                "[{label}] 2 s after close {n}, still mounting its workspace: {:?}",
                mounting(&ws)
            );
        }
        eprintln!(
            "[{label}] {caps} capsules x {par} x {each}: opened in {opened:?}, execs in {ran:?}, closed in {:?}",
            t2.elapsed()
        );
        assert_nothing_runs(p.dir.path(), 15, &label);
    }
}

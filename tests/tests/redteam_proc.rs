//! Red team: process lifetime under weaker isolation (Landlock + seccomp, no pid
//! namespace), where no kernel namespace takes the command's processes down with it. The
//! issue's promise holds there too: if `capsule` itself is killed (SIGKILL too), the
//! sandbox dies with it, double-forked daemons and the command's own children included.
//! As root and as the unprivileged test user.

use capsule_e2e::{runners, stderr, Project};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Host processes whose command line contains `marker`.
fn procs(marker: &str) -> Vec<i32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(marker) {
            v.push(pid);
        }
    }
    v
}

fn wait_until(mut f: impl FnMut() -> bool, secs: u64) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

#[test]
fn weaker_isolation_sandbox_dies_with_a_killed_capsule() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = Project::new(&r);
        e.open("w");
        let o = e
            .no_userns(&["isolation", "--accept-weaker", "on"])
            .output()
            .unwrap();
        assert!(o.status.success(), "accept weaker: {}", stderr(&o));
        // two markers: a double-forked daemon in its own session, and a plain child of the
        // command (the command itself is what init watches)
        let id = std::process::id();
        let daemon = format!("rt-daemon-{id}");
        let child = format!("rt-child-{id}");
        let script = format!(
            "setsid bash -c 'exec -a {daemon} sleep 300' </dev/null >/dev/null 2>&1 & \
             bash -c 'exec -a {child} sleep 300' & wait"
        );
        let mut cap = e
            .no_userns(&["exec", "w", "--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = wait_until(
            || !procs(&daemon).is_empty() && !procs(&child).is_empty(),
            10,
        );
        // SIGKILL: capsule cannot clean up
        cap.kill().unwrap();
        cap.wait().unwrap();
        let gone = wait_until(|| procs(&daemon).is_empty() && procs(&child).is_empty(), 5);
        let left: Vec<i32> = procs(&daemon).into_iter().chain(procs(&child)).collect();
        for p in &left {
            // SAFETY: killing the leftovers this test made (found by their unique marker).
            unsafe { libc::kill(*p, libc::SIGKILL) };
        }
        assert!(started, "the command never started its processes");
        assert!(gone, "processes outlived a SIGKILLed capsule: {left:?}");
    }
}

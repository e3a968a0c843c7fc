//! Red team: process lifetime under weaker isolation (Landlock + seccomp, no pid
//! namespace), where no kernel namespace takes the command's processes down with it. The
//! issue's promise holds there too: if `capsule` itself is killed (SIGKILL too), the
//! sandbox dies with it, double-forked daemons and the command's own children included.
//! As root and as the unprivileged test user.

use capsule_e2e::{host_procs, runners, wait_until, Project};
use std::process::Stdio;

#[test]
fn weaker_isolation_sandbox_dies_with_a_killed_capsule() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = Project::new(&r);
        e.open("w");
        e.accept_weaker();
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
            || !host_procs(&daemon).is_empty() && !host_procs(&child).is_empty(),
            10,
        );
        // SIGKILL: capsule cannot clean up
        cap.kill().unwrap();
        cap.wait().unwrap();
        let gone = wait_until(
            || host_procs(&daemon).is_empty() && host_procs(&child).is_empty(),
            5,
        );
        let left: Vec<i32> = host_procs(&daemon)
            .into_iter()
            .chain(host_procs(&child))
            .collect();
        for p in &left {
            // SAFETY: killing the leftovers this test made (found by their unique marker).
            unsafe { libc::kill(*p, libc::SIGKILL) };
        }
        assert!(started, "the command never started its processes");
        assert!(gone, "processes outlived a SIGKILLed capsule: {left:?}");
    }
}

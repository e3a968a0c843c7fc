//! The executor clones while `capsule exec` is single-threaded: host-side helper threads
//! (the stderr relay that looks for "needs a display", the network proxy) start only after
//! the clone. Many execs in a row with those helpers active must all finish; a deadlock
//! (a child waiting forever on an allocator lock held by a thread that does not exist in
//! it) turns the test red through a deadline instead of hanging it.
use capsule_e2e::sandbox::*;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// Run `cmd`, killing it and failing the test when it takes longer than `limit`.
fn run_with_deadline(mut cmd: std::process::Command, limit: Duration, what: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run capsule: {e}"));
    // drain both pipes on threads so a chatty command cannot block on a full pipe
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let to = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut so, &mut b).ok();
        b
    });
    let te = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut se, &mut b).ok();
        b
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: capsule exec did not finish within {limit:?} (deadlock?)");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: to.join().unwrap(),
        stderr: te.join().unwrap(),
    }
}

#[test]
fn many_execs_with_the_stderr_relay_never_hang() {
    each_runner(|r| {
        let c = Capsule::new(r);
        for i in 0..40 {
            let mut cmd = c.capsule();
            // stderr is a pipe (not a terminal) and no -t: the display relay is active;
            // debug logging makes capsule itself write to the relayed stderr around clone
            cmd.env("RUST_LOG", "capsule_runtime=debug")
                .args(["exec", NAME, "--json", "--timeout", "20s", "--"])
                .args([
                    "sh",
                    "-c",
                    &format!("echo out-{i}; echo err-{i} >&2; echo x > f{}.txt", i % 3),
                ]);
            let o = run_with_deadline(cmd, Duration::from_secs(30), &format!("exec {i}"));
            ok(&o, &format!("exec {i}"));
            assert!(out(&o).contains(&format!("out-{i}")), "{}", out(&o));
            // the relay thread ran (it copies the command's stderr to ours)
            assert!(err(&o).contains(&format!("err-{i}")), "{}", err(&o));
            assert!(!err(&o).contains("internal error"), "{}", err(&o));
        }
        // the record of the last one: the snapshot (taken on the host while the relay
        // runs) saw the file it wrote
        let recs = c.records();
        assert_eq!(recs.len(), 40);
        assert_eq!(recs[39]["exit_status"], 0, "{}", recs[39]);
        assert!(
            recs[0]["changes"]["added"]
                .as_array()
                .is_some_and(|a| !a.is_empty()),
            "{}",
            recs[0]
        );
    });
}

#[test]
fn a_failing_sandbox_start_still_relays_stderr() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let mut cmd = c.capsule();
        cmd.args(["exec", NAME, "--", "no-such-command-xyz"]);
        let o = run_with_deadline(cmd, Duration::from_secs(30), "not found");
        assert_eq!(code(&o), 127, "{}", err(&o));
        assert!(err(&o).contains("not found"), "{}", err(&o));
    });
}

#[test]
fn many_execs_with_the_relay_and_the_allowlist_proxy_never_hang() {
    each_runner(|r| {
        let c = Capsule::new(r);
        for i in 0..20 {
            let mut cmd = c.capsule();
            // the allowlist proxy's host thread (tokio) and the stderr relay both run
            // during the exec; both must start after the clone
            cmd.args([
                "exec",
                NAME,
                "--allow-host",
                "example.invalid",
                "--timeout",
                "20s",
                "--",
            ])
            .args([
                "sh",
                "-c",
                &format!("echo err-{i} >&2; echo \"$HTTPS_PROXY\""),
            ]);
            let o = run_with_deadline(cmd, Duration::from_secs(30), &format!("exec {i}"));
            ok(&o, &format!("exec {i}"));
            assert!(err(&o).contains(&format!("err-{i}")), "{}", err(&o));
            // the proxy was really set up for the command
            assert!(out(&o).trim().starts_with("http://"), "{}", out(&o));
        }
    });
}

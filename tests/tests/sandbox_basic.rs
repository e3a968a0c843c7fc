//! Ordinary work inside the sandbox, and the exec record.
use capsule_e2e::sandbox::*;

#[test]
fn true_and_exit_codes() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let o = c.exec(&["true"]);
        ok(&o, "true");
        assert_eq!(code(&c.exec(&["sh", "-c", "exit 7"])), 7);
        assert_eq!(code(&c.exec(&["sh", "-c", "kill -TERM $$"])), 128 + 15);
        assert_eq!(code(&c.exec(&["no-such-command-xyz"])), 127);
        assert_eq!(code(&c.exec(&["/etc/passwd"])), 126);
    });
}

#[test]
fn launch_policy_denial_starts_nothing() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // the operator's project, whose .kitsoki.yaml protects the capsule's workspace
        let proj = c.dir.path().join("proj");
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::write(
            proj.join(".kitsoki.yaml"),
            format!(
                "agent_launch_policy:\n  enabled: true\n  protected_roots: ['{}']\n",
                c.ws.display()
            ),
        )
        .unwrap();
        r.own(&proj);
        let mut cmd = c.capsule();
        cmd.current_dir(&proj)
            .args(["exec", NAME, "--", "sh", "-c", "echo ran > ran.txt"]);
        let o = cmd.stdin(std::process::Stdio::null()).output().unwrap();
        assert_eq!(code(&o), 3, "{}", err(&o));
        assert!(
            err(&o).contains("denied by the launch policy"),
            "{}",
            err(&o)
        );
        assert!(!c.ws.join("ran.txt").exists(), "the command ran");
        // without the protection it runs (so the test can fail)
        std::fs::remove_file(proj.join(".kitsoki.yaml")).unwrap();
        let o = cmd.output().unwrap();
        ok(&o, "allowed");
        assert!(c.ws.join("ran.txt").exists());
    });
}

/// capsule ends with nothing of its own left behind: the child that takes over the
/// teardown of its address space at exit (so that the caller learns of the end sooner) is
/// gone soon after, and holds none of capsule's descriptors (else reading the output to
/// its end, as `output()` does here, would wait for it).
#[test]
fn nothing_of_capsule_outlives_an_exec() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let marker = format!("capsule-outlives-{}", std::process::id());
        let o = c.exec(&["sh", "-c", &format!("echo done # {marker}")]);
        ok(&o, "exec");
        assert_eq!(out(&o).trim(), "done");
        let left = || capsule_e2e::procs::host_procs(&marker);
        assert!(
            capsule_e2e::procs::wait_until(|| left().is_empty(), 5),
            "processes left after the exec: {:?}",
            left()
        );
    });
}

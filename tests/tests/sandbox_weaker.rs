//! Weaker isolation for real: `capsule` runs inside a user namespace whose
//! `user.max_user_namespaces` is 0, so it cannot make the namespaces of full isolation.
//! `capsule exec` must then refuse to run anything until weaker isolation is accepted, and
//! once accepted, Landlock and seccomp alone must still keep secrets, writes outside the
//! workspace, host processes, host abstract sockets and the host's TCP listeners out, and
//! say so on stderr and in the record. As root and as the unprivileged user.
use capsule_e2e::sandbox::*;
use std::process::{Command, Output};

/// `capsule ARGS` as the capsule's runner, inside a user namespace with no room for more.
fn capsule_no_userns(c: &Capsule, args: &[&str]) -> Output {
    c.runner
        .without_userns(c.capsule().args(args))
        .output()
        .expect("run capsule in a user namespace")
}

fn exec(c: &Capsule, argv: &[&str]) -> Output {
    let mut args = vec!["exec", NAME, "--"];
    args.extend_from_slice(argv);
    capsule_no_userns(c, &args)
}

fn sh(c: &Capsule, script: &str) -> Output {
    exec(c, &["sh", "-c", script])
}

fn accept(c: &Capsule) {
    let o = capsule_no_userns(c, &["isolation", "--accept-weaker", "on"]);
    ok(&o, "capsule isolation --accept-weaker on");
}

#[test]
fn refused_until_accepted_then_says_so() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let marker = c.ws.join("ran");
        let o = sh(&c, &format!("touch {}", marker.display()));
        assert_eq!(code(&o), 125, "stdout {} stderr {}", out(&o), err(&o));
        assert!(
            err(&o).contains("capsule isolation --accept-weaker on"),
            "{}",
            err(&o)
        );
        assert!(
            !marker.exists(),
            "the command ran although isolation was refused"
        );

        accept(&c);
        let o = exec(&c, &["sh", "-c", "echo hello; exit 3"]);
        assert_eq!(code(&o), 3, "stderr {}", err(&o));
        assert_eq!(out(&o), "hello\n");
        assert!(err(&o).contains("weaker isolation"), "{}", err(&o));
        let rec = c.records().pop().expect("an exec record");
        assert!(
            !rec["degradation"].as_array().unwrap().is_empty(),
            "the record must say isolation was weaker: {rec}"
        );
        let applied = rec["applied"].to_string();
        assert!(applied.contains("weaker"), "{rec}");
        assert!(
            rec["applied"]["landlock"]["abi"].as_u64().unwrap() >= 6,
            "{rec}"
        );
        assert!(rec["applied"]["seccomp"]["refused"].is_array(), "{rec}");

        // taken back: refused again
        ok(
            &capsule_no_userns(&c, &["isolation", "--accept-weaker", "off"]),
            "--accept-weaker off",
        );
        assert_eq!(code(&exec(&c, &["true"])), 125);
    });
}

#[test]
fn secrets_and_writes_stay_out() {
    each_runner(|r| {
        let c = Capsule::new(r);
        accept(&c);
        let home = c.home.display().to_string();
        // ordinary work: read the home's ordinary files, write the workspace and /tmp
        let o = sh(
            &c,
            &format!(
                "cat {home}/.profile && echo new > {}/new.txt && echo t > \"${{TMPDIR:-/tmp}}/t\"",
                c.ws.display()
            ),
        );
        ok(&o, "ordinary work under weaker isolation");
        assert_eq!(
            std::fs::read_to_string(c.ws.join("new.txt")).unwrap(),
            "new\n"
        );
        // secrets: directly, through a symlink made inside, and the tool's own state
        for path in [
            format!("{home}/.ssh/id_rsa"),
            format!("{home}/Documents/diary.txt"),
            format!("{}/policy.json", c.bundle.display()),
        ] {
            let o = sh(&c, &format!("cat {path}"));
            assert_ne!(code(&o), 0, "{path} was readable");
            assert!(!out(&o).contains(SECRET), "{path} leaked");
        }
        let o = sh(
            &c,
            &format!(
                "ln -s {home}/.ssh/id_rsa {}/key && cat {}/key",
                c.ws.display(),
                c.ws.display()
            ),
        );
        assert!(!out(&o).contains(SECRET), "secret leaked through a symlink");
        // writes outside the workspace
        let o = sh(&c, &format!("echo x > {home}/.profile"));
        assert_ne!(code(&o), 0);
        assert_eq!(
            std::fs::read_to_string(c.home.join(".profile")).unwrap(),
            "readable\n"
        );
        let o = sh(&c, &format!("echo x > {home}/dropped"));
        assert_ne!(code(&o), 0);
        assert!(!c.home.join("dropped").exists());
        // a file the runner could write without the sandbox: the capsule's own record
        let o = sh(
            &c,
            &format!("echo forged >> {}/events.jsonl", c.bundle.display()),
        );
        assert_ne!(code(&o), 0, "the exec record was writable from inside");
    });
}

#[test]
fn host_processes_sockets_and_network_stay_out() {
    each_runner(|r| {
        let c = Capsule::new(r);
        accept(&c);
        // a host process of the same user as the sandboxed command
        let mut host = match &c.runner {
            capsule_e2e::Runner::Current => Command::new("sleep"),
            capsule_e2e::Runner::User { uid, gid, .. } => {
                let mut s = Command::new("setpriv");
                s.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--clear-groups")
                    .arg("sleep");
                s
            }
        };
        let mut host = host.arg("30").spawn().expect("sleep");
        let pid = host.id();
        // the sandbox is in a nested user namespace that maps the same user: only
        // Landlock's signal scope stands between it and `kill`
        let o = sh(&c, &format!("kill -0 {pid}"));
        assert_ne!(code(&o), 0, "signal reached a host process: {}", err(&o));
        let o = sh(&c, &format!("cat /proc/{pid}/environ"));
        assert_ne!(code(&o), 0, "host process environment readable");
        assert!(host.try_wait().unwrap().is_none(), "host process died");
        let _ = host.kill();
        let _ = host.wait();

        // a TCP listener on the host's loopback
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let o = exec(
            &c,
            &["bash", "-c", &format!("exec 3<>/dev/tcp/127.0.0.1/{port}")],
        );
        assert_ne!(code(&o), 0, "host loopback TCP reachable");

        // an abstract unix socket of the host
        use std::os::linux::net::SocketAddrExt;
        let name = format!("capsule-weaker-{}", std::process::id());
        let sa = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let _ul = std::os::unix::net::UnixListener::bind_addr(&sa).unwrap();
        let script = format!(
            "import socket\ns=socket.socket(socket.AF_UNIX)\ns.connect('\\0{name}')\nprint('connected')"
        );
        let o = exec(&c, &["python3", "-c", &script]);
        assert_ne!(code(&o), 0, "host abstract socket reachable: {}", out(&o));
        assert!(
            err(&o).contains("PermissionError") || err(&o).contains("Operation not permitted"),
            "{}",
            err(&o)
        );
        // the same client works outside the sandbox (so the refusal above is the sandbox's)
        let o = Command::new("python3")
            .args(["-c", &script])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout), "connected\n");

        // seccomp: still refuses what it refuses (keyctl via python's ctypes)
        let o = exec(
            &c,
            &[
                "python3",
                "-c",
                "import ctypes,os\nlibc=ctypes.CDLL(None,use_errno=True)\nr=libc.syscall(250,0,0,0,0,0)\nprint(r, ctypes.get_errno())",
            ],
        );
        ok(&o, "python3 keyctl probe");
        assert_eq!(out(&o).trim(), "-1 1", "keyctl not refused with EPERM");
    });
}

#[test]
fn tmp_size_without_namespaces_is_refused_or_said() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let args = ["exec", NAME, "--tmp-size", "16M", "--", "true"];
        // not accepted: nothing runs, as for any weaker isolation
        let o = capsule_no_userns(&c, &args);
        assert_eq!(code(&o), 125, "{}", err(&o));
        accept(&c);
        let o = capsule_no_userns(&c, &args);
        ok(&o, "--tmp-size with weaker isolation accepted");
        assert!(
            err(&o).contains("--tmp-size cannot be enforced without a mount namespace"),
            "{}",
            err(&o)
        );
        let rec = c.records().pop().expect("a record");
        assert!(
            rec["degradation"].to_string().contains("--tmp-size"),
            "{rec}"
        );
    });
}

/// `--read-only-workspace` under weaker isolation: no mounts, so Landlock alone keeps the
/// workspace read-only (it is no writable root), still readable, and an `--allow-write`
/// folder in it writable.
#[test]
fn read_only_workspace_by_landlock_alone() {
    each_runner(|r| {
        let c = Capsule::new(r);
        accept(&c);
        let out_dir = c.ws.join("out");
        std::fs::create_dir_all(&out_dir).expect("mkdir");
        std::fs::write(c.ws.join("in.txt"), "readable\n").expect("write");
        c.runner.own(&c.ws);
        let o = capsule_no_userns(
            &c,
            &[
                "exec",
                NAME,
                "--read-only-workspace",
                "--allow-write",
                out_dir.to_str().expect("utf-8"),
                "--",
                "sh",
                "-c",
                "cat in.txt; echo x > in.txt && echo wrote-ws; echo y > out/o && echo wrote-out",
            ],
        );
        let so = out(&o);
        assert!(so.contains("readable"), "{}: {so} {}", r.label(), err(&o));
        assert!(
            !so.contains("wrote-ws"),
            "{}: the workspace was writable: {so}",
            r.label()
        );
        assert!(so.contains("wrote-out"), "{}: {so} {}", r.label(), err(&o));
        assert_eq!(
            std::fs::read_to_string(c.ws.join("in.txt")).unwrap(),
            "readable\n"
        );
    });
}

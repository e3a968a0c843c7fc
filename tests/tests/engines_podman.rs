//! capsule-runc under Podman (Debian's podman 4.3), as root (its own storage, a network
//! namespace made for it) and rootless (the unprivileged test user, its subordinate ids,
//! its own storage; Podman runs the runtime in its user namespace and, on this cgroup v1
//! host, without cgroups: no limit cells there). One storage per mode for this test
//! binary (tests/src/engines.rs), each cell of `hack/engines.sh`'s matrix a case.
//! Skipped with the reason where podman is not installed (CI installs it), rootless where
//! the test user is missing.

use capsule_e2e::engines::{out, processes_naming, usable, wait_until, Podman, IMAGE};
use capsule_e2e::{code, stderr, stdout};
use std::process::Output;
use std::sync::OnceLock;

fn root() -> Option<&'static Podman> {
    static P: OnceLock<Option<Podman>> = OnceLock::new();
    P.get_or_init(|| usable("Podman", &["podman", "nsenter", "ip"]).then(Podman::root))
        .as_ref()
}

fn rootless() -> Option<&'static Podman> {
    static P: OnceLock<Option<Podman>> = OnceLock::new();
    P.get_or_init(|| {
        if !usable("rootless Podman", &["podman", "runuser", "newuidmap"]) {
            return None;
        }
        let Some(capsule_e2e::Runner::User { name, .. }) = capsule_e2e::test_user() else {
            assert!(
                !capsule_e2e::containerd::required(),
                "the test user is missing (useradd -m capsule-ci)"
            );
            eprintln!("note: no test user: the rootless Podman tests are skipped");
            return None;
        };
        Some(Podman::rootless(&name))
    })
    .as_ref()
}

fn run(p: &Podman, opts: &[&str], cmd: &[&str]) -> Output {
    out(p
        .cmd()
        .args(["run", "--rm"])
        .args(opts)
        .arg(IMAGE)
        .args(cmd))
}

fn name(n: &str) -> String {
    format!("{n}-{}", std::process::id())
}

fn detached(p: &Podman, n: &str, opts: &[&str], cmd: &[&str]) -> String {
    let o = out(p
        .cmd()
        .args(["run", "-d", "--name", n])
        .args(opts)
        .arg(IMAGE)
        .args(cmd));
    assert!(o.status.success(), "podman run -d: {}", stderr(&o));
    stdout(&o).trim().to_string()
}

fn rm(p: &Podman, n: &str) {
    let _ = out(p.cmd().args(["rm", "-f", "-t", "0", n]));
}

fn inspect(p: &Podman, n: &str, fmt: &str) -> String {
    stdout(&out(p.cmd().args(["inspect", "-f", fmt, n])))
        .trim()
        .to_string()
}

/// The cells both modes share: output and status, exec, a terminal, kill, the
/// read-only root (Podman's tmpfs over /tmp, /run with `tmpcopyup`), bind mounts, HOME
/// and --user, --network none, --tmpfs, nothing left after rm -f.
fn common(p: &Podman, net: &[&str]) {
    let o = run(p, net, &["sh", "-c", "echo out; exit 7"]);
    assert_eq!(code(&o), 7, "{}", stderr(&o));
    assert_eq!(stdout(&o), "out\n");

    let o = run(p, &[net, &["-t"]].concat(), &["tty"]);
    assert!(stdout(&o).contains("/dev/pts/"), "{}", stderr(&o));

    // --read-only: the root refuses, the tmpfs Podman puts on /run keeps the image's file
    let o = run(
        p,
        &[net, &["--read-only"]].concat(),
        &[
            "sh",
            "-c",
            "touch /tmp/ok && cat /run/from-image && touch /x",
        ],
    );
    assert_ne!(code(&o), 0);
    assert_eq!(stdout(&o), "kept\n", "{}", stderr(&o));
    assert!(
        stderr(&o).contains("Read-only file system"),
        "{}",
        stderr(&o)
    );

    let dir = p.dir.join("bind");
    std::fs::create_dir_all(&dir).unwrap();
    if let Some(u) = &p.user {
        let _ = out(std::process::Command::new("chown").arg(u).arg(&dir));
    }
    let v = format!("{}:/b", dir.display());
    let o = run(
        p,
        &[net, &["-v", &v]].concat(),
        &["sh", "-c", "echo w > /b/w"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(dir.join("w")).unwrap(), "w\n");
    let ro = format!("{v}:ro");
    let o = run(
        p,
        &[net, &["-v", &ro]].concat(),
        &["sh", "-c", "echo w > /b/w2"],
    );
    assert_ne!(code(&o), 0);
    assert!(!dir.join("w2").exists());

    let o = run(p, net, &["sh", "-c", "echo $HOME"]);
    assert_eq!(stdout(&o), "/root\n", "{}", stderr(&o));
    let o = run(
        p,
        &[net, &["--user", "1000"]].concat(),
        &["sh", "-c", "id -u; echo $HOME"],
    );
    assert_eq!(stdout(&o), "1000\n/home/app\n", "{}", stderr(&o));

    let o = run(p, &["--network", "none"], &["ip", "-o", "addr"]);
    assert!(stdout(&o).contains("127.0.0.1"), "lo up: {}", stdout(&o));

    let o = run(
        p,
        &[net, &["--tmpfs", "/scratch:size=1m"]].concat(),
        &[
            "sh",
            "-c",
            "grep ' /scratch ' /proc/mounts && echo a > /scratch/a",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));

    let n = name(if p.user.is_some() { "rl" } else { "rt" });
    let id = detached(
        p,
        &n,
        net,
        &[
            "sh",
            "-c",
            "trap 'echo got-term; exit 3' TERM; while true; do sleep 0.1; done",
        ],
    );
    let o = out(p
        .cmd()
        .args(["exec", &n, "sh", "-c", "cat /proc/1/cmdline; exit 4"]));
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(stdout(&o).starts_with("sh"), "{}", stdout(&o));
    let o = out(p.cmd().args(["kill", "-s", "TERM", &n]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(wait_until(10, || inspect(p, &n, "{{.State.Status}}") == "exited"));
    assert_eq!(inspect(p, &n, "{{.State.ExitCode}}"), "3");
    assert!(stdout(&out(p.cmd().args(["logs", &n]))).contains("got-term"));
    rm(p, &n);
    assert!(
        wait_until(10, || processes_naming(&id).is_empty()),
        "left: {:?}",
        processes_naming(&id)
    );
}

#[test]
fn podman_as_root() {
    let Some(p) = root() else { return };
    common(p, &[]);
}

#[test]
fn podman_as_root_limits_security_and_the_bridge() {
    let Some(p) = root() else { return };
    let o = run(
        p,
        &["-m", "32m", "--memory-swap", "32m"],
        &["sh", "-c", "head -c 100m /dev/zero | tail > /dev/null"],
    );
    assert_eq!(code(&o), 137, "the OOM kill: {}", stderr(&o));
    let o = run(
        p,
        &["--pids-limit", "8"],
        &["sh", "-c", "for i in $(seq 12); do sleep 2 & done; wait"],
    );
    assert!(stderr(&o).contains("can't fork"), "{}", stderr(&o));
    let o = run(
        p,
        &["--security-opt", "seccomp=unconfined"],
        &["grep", "^Seccomp:", "/proc/self/status"],
    );
    assert!(stdout(&o).contains('0'), "{}", stdout(&o));
    let o = run(
        p,
        &[
            "--cap-drop",
            "ALL",
            "--cap-add",
            "NET_ADMIN",
            "--security-opt",
            "no-new-privileges",
        ],
        &["grep", "-E", "CapEff|NoNewPrivs", "/proc/self/status"],
    );
    assert!(
        stdout(&o).contains("0000000000001000") && stdout(&o).contains("NoNewPrivs:\t1"),
        "{}",
        stdout(&o)
    );
    let o = run(p, &["--init"], &["cat", "/proc/1/cmdline"]);
    assert!(stdout(&o).contains("init"), "{}", stdout(&o));
    let o = run(
        p,
        &["--device", "/dev/zero:/dev/myzero"],
        &["sh", "-c", "head -c 3 /dev/myzero | wc -c"],
    );
    assert_eq!(stdout(&o), "3\n", "{}", stderr(&o));
    let o = run(p, &[], &["ip", "-o", "-4", "addr", "show", "eth0"]);
    assert!(
        stdout(&o).contains("inet "),
        "the default bridge: {}",
        stdout(&o)
    );
    // pause, cp, top, stats
    let n = name("ops");
    detached(p, &n, &[], &["sleep", "1000"]);
    let step = |args: &[&str]| {
        let o = out(p.cmd().args(args));
        assert!(o.status.success(), "podman {args:?}: {}", stderr(&o));
        stdout(&o)
    };
    step(&["pause", &n]);
    assert_eq!(inspect(p, &n, "{{.State.Status}}"), "paused");
    step(&["unpause", &n]);
    let f = p.dir.join("cp-in");
    std::fs::write(&f, "copied\n").unwrap();
    step(&["cp", f.to_str().unwrap(), &format!("{n}:/tmp/cp-in")]);
    assert_eq!(step(&["exec", &n, "cat", "/tmp/cp-in"]), "copied\n");
    let top = step(&["top", &n]);
    assert!(
        top.contains("sleep") && !top.contains("capsule-runc"),
        "{top}"
    );
    step(&["stats", "--no-stream", &n]);
    rm(p, &n);
}

#[test]
fn podman_rootless() {
    let Some(p) = rootless() else { return };
    // no slirp4netns without /dev/net/tun for the user: every cell on --network none
    common(p, &["--network", "none"]);
}

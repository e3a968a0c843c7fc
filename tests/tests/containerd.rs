//! capsule as the OCI runtime of the real engine: Debian's containerd (one daemon for all
//! the tests of this file, see `capsule_e2e::containerd`), a busybox image built with
//! umoci and imported with `ctr image import`, and `ctr run --runc-binary …/capsule-runc`,
//! which goes through containerd's `io.containerd.runc.v2` shim exactly as a Kubernetes
//! node's containers do.
//!
//! Root only (containerd needs it): as another user each test says so and passes. Where
//! containerd, ctr or umoci are missing the tests say so and pass, unless
//! `CAPSULE_TEST_REQUIRE_USER=1` (CI), where they fail.
//!
//! The lifecycle cases that drive `capsule-runc` directly on a bundle, as runtime-tools'
//! validation suite does, are in `containerd_lifecycle.rs`.

use capsule_e2e::containerd::{ctr, engine, have, id, Engine, IMAGE};
use capsule_e2e::{code, stderr, stdout};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `ctr run --rm --runc-binary capsule-runc [opts] IMAGE ID sh -c SCRIPT`.
fn run(e: &Engine, name: &str, opts: &[&str], script: &str) -> Output {
    let o = ctr(e)
        .arg("run")
        .arg("--rm")
        .arg("--runc-binary")
        .arg(&e.runc)
        .args(opts)
        .arg(IMAGE)
        .arg(id(name))
        .args(["sh", "-c", script])
        .output()
        .unwrap();
    eprintln!(
        "{name}: status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        stdout(&o),
        stderr(&o)
    );
    o
}

#[test]
fn the_commands_output_and_exit_status_come_through() {
    let Some(e) = engine() else { return };
    let o = run(
        e,
        "out",
        &[],
        "echo hello from capsule; echo to-stderr >&2; exit 7",
    );
    assert_eq!(code(&o), 7);
    assert_eq!(stdout(&o).trim(), "hello from capsule");
    assert!(stderr(&o).contains("to-stderr"));
    assert_eq!(code(&run(e, "zero", &[], "true")), 0);
}

#[test]
fn a_terminal_with_dash_t() {
    let Some(e) = engine() else { return };
    if !have("script") {
        eprintln!("note: script(1) is not installed: the -t test is skipped");
        return;
    }
    // ctr -t needs a terminal of its own: script gives it one
    let cmd = format!(
        "ctr --address {} run --rm -t --runc-binary {} {IMAGE} {} sh -c 'test -t 0 && test -t 1 && echo TTY:$(tty); exit 5'",
        e.sock.display(),
        e.runc.display(),
        id("tty")
    );
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(out.contains("TTY:/dev/pts/0"), "{out} {}", stderr(&o));
    assert_eq!(code(&o), 5, "{out}");
}

#[test]
fn what_the_config_denies_is_denied() {
    let Some(e) = engine() else { return };
    // a read-only root, no capability at all, the masked kernel files
    let o = run(
        e,
        "deny",
        &[
            "--read-only",
            "--cap-drop",
            "CAP_CHOWN",
            "--cap-drop",
            "CAP_DAC_OVERRIDE",
            "--cap-drop",
            "CAP_FSETID",
            "--cap-drop",
            "CAP_FOWNER",
            "--cap-drop",
            "CAP_MKNOD",
            "--cap-drop",
            "CAP_NET_RAW",
            "--cap-drop",
            "CAP_SETGID",
            "--cap-drop",
            "CAP_SETUID",
            "--cap-drop",
            "CAP_SETFCAP",
            "--cap-drop",
            "CAP_SETPCAP",
            "--cap-drop",
            "CAP_NET_BIND_SERVICE",
            "--cap-drop",
            "CAP_SYS_CHROOT",
            "--cap-drop",
            "CAP_KILL",
            "--cap-drop",
            "CAP_AUDIT_WRITE",
        ],
        "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; \
         touch /newfile 2>&1 && echo WROTE-ROOT; \
         echo timer_list:$(head -c 20 /proc/timer_list | wc -c); \
         head -c 10 /proc/kcore 2>/dev/null | wc -c | sed 's/^/kcore:/'; \
         echo 1 > /proc/sys/kernel/domainname 2>&1 && echo WROTE-PROC-SYS; \
         touch /tmp/x 2>&1 && echo WROTE-TMP; \
         echo end",
    );
    let out = stdout(&o);
    assert_eq!(code(&o), 0);
    for l in [
        "CapEff:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapBnd:\t0000000000000000",
    ] {
        assert!(out.contains(l), "{l} in {out}");
    }
    assert!(
        !out.contains("WROTE-ROOT") && out.contains("Read-only file system"),
        "{out}"
    );
    assert!(out.contains("timer_list:0"), "{out}");
    assert!(out.contains("kcore:0"), "{out}");
    assert!(!out.contains("WROTE-PROC-SYS"), "{out}");
    assert!(out.contains("end"), "{out}");
    // the same image with its defaults: containerd's capabilities, a writable root
    let o = run(
        e,
        "allow",
        &[],
        "grep ^CapEff /proc/self/status; touch /newfile && echo WROTE-ROOT",
    );
    let out = stdout(&o);
    assert!(out.contains("CapEff:\t00000000a80425fb"), "{out}");
    assert!(out.contains("WROTE-ROOT"), "{out}");
}

fn wait_status(e: &Engine, id: &str, want: &str) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        let o = ctr(e).args(["task", "ls"]).output().unwrap();
        if stdout(&o)
            .lines()
            .any(|l| l.starts_with(id) && l.contains(want))
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn cleanup(e: &Engine, id: &str) {
    let _ = ctr(e).args(["task", "kill", "-s", "SIGKILL", id]).output();
    let _ = wait_status(e, id, "STOPPED");
    let _ = ctr(e).args(["task", "delete", id]).output();
    let _ = ctr(e).args(["container", "delete", id]).output();
}

#[test]
fn ctr_task_kill_stops_it_and_ctr_task_exec_runs_inside() {
    let Some(e) = engine() else { return };
    let cid = id("long");
    let o = ctr(e)
        .args(["run", "-d", "--runc-binary"])
        .arg(&e.runc)
        .args([IMAGE, &cid, "sleep", "1000"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(wait_status(e, &cid, "RUNNING"));
    // exec: in the container's namespaces (its pid 1 is the sleep), its status back
    let o = ctr(e)
        .args([
            "task",
            "exec",
            "--exec-id",
            "e1",
            &cid,
            "sh",
            "-c",
            "echo in-exec; cat /proc/1/cmdline | tr '\\0' ' '; echo; exit 3",
        ])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(
        out.contains("in-exec") && out.contains("sleep 1000"),
        "{out} {}",
        stderr(&o)
    );
    assert_eq!(code(&o), 3, "{out}");
    let o = ctr(e).args(["task", "ps", &cid]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // kill: SIGKILL to its init, containerd sees it stop
    let o = ctr(e)
        .args(["task", "kill", "-s", "SIGKILL", &cid])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        wait_status(e, &cid, "STOPPED"),
        "{}",
        stdout(&ctr(e).args(["task", "ls"]).output().unwrap())
    );
    cleanup(e, &cid);
}

/// Wait (at most 20 s) until `file` holds `want`; its text at the end.
fn wait_for_text(file: &Path, want: &str) -> String {
    let t0 = Instant::now();
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.contains(want) || t0.elapsed() > Duration::from_secs(20) {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_refused_write_is_listed_for_the_init_and_for_exec() {
    let Some(e) = engine() else { return };
    let cid = id("refused");
    // a read-only root: /etc is not writable, /tmp neither (the image has no mount there);
    // ctr's default seccomp profile (the observer's filter joins a bundle's own filter:
    // an unconfined container gets none of capsule's)
    let o = ctr(e)
        .args(["run", "-d", "--read-only", "--seccomp", "--runc-binary"])
        .arg(&e.runc)
        .args([
            IMAGE,
            &cid,
            "sh",
            "-c",
            "echo x > /etc/by-init; test -e /etc/by-init && echo WROTE; sleep 1000",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(wait_status(e, &cid, "RUNNING"));
    // the shim's runc root is /run/containerd/runc/<namespace>; its log the bundle's
    let listing = Path::new("/run/containerd/runc/default")
        .join(&cid)
        .join("refusals.jsonl");
    let log = e
        .dir
        .join("state/io.containerd.runtime.v2.task/default")
        .join(&cid)
        .join("log.json");
    let text = wait_for_text(&listing, "/etc/by-init");
    assert!(
        text.lines().any(|l| l.contains("\"kind\":\"write\"")
            && l.contains("\"target\":\"/etc/by-init\"")
            && l.contains("\"program\":\"sh\"")),
        "listing: {text:?}"
    );
    let logged = wait_for_text(&log, "refused write /etc/by-init");
    assert!(
        logged.contains("\"level\":\"warning\"")
            && logged.contains("refused write /etc/by-init (sh)"),
        "log.json: {logged:?}"
    );
    // a process added by exec is observed too, in the same listing
    let o = ctr(e)
        .args([
            "task",
            "exec",
            "--exec-id",
            "w1",
            &cid,
            "touch",
            "/etc/by-exec",
        ])
        .output()
        .unwrap();
    assert_ne!(code(&o), 0, "the write must be refused: {}", stderr(&o));
    let text = wait_for_text(&listing, "/etc/by-exec");
    assert!(
        text.lines()
            .any(|l| l.contains("\"target\":\"/etc/by-exec\"")
                && l.contains("\"program\":\"touch\"")),
        "listing: {text:?}"
    );
    assert!(
        text.contains("/etc/by-init"),
        "the init's refusal stays listed: {text:?}"
    );
    // an allowed write is not listed (a writable mount: /dev/shm)
    let o = ctr(e)
        .args([
            "task",
            "exec",
            "--exec-id",
            "w2",
            &cid,
            "touch",
            "/dev/shm/fine",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    std::thread::sleep(Duration::from_millis(300));
    let text = std::fs::read_to_string(&listing).unwrap_or_default();
    assert!(!text.contains("/dev/shm/fine"), "listing: {text:?}");
    cleanup(e, &cid);
}

/// The disk guard through containerd: a container filling a bind mount of a small
/// tmpfs (256 MiB, reserve 12.8 MiB) is killed (137) with the reserve free, the reason
/// in the task's log.json (tests/tests/oci_disk_guard.rs has the rest).
#[test]
fn the_disk_guard_stops_a_container_through_ctr() {
    let Some(e) = engine() else { return };
    let cid = id("diskguard");
    let fs = capsule_e2e::faults::SmallFs::mount(
        &e.dir.join("small-fs"),
        "256m",
        &capsule_e2e::Runner::Current,
    );
    let mount = format!(
        "type=bind,src={},dst=/data,options=rbind:rw",
        fs.0.display()
    );
    let fill =
        "i=0; while :; do head -c 8388608 /dev/zero > /data/fill$i || exit 3; i=$((i+1)); done";
    let o = ctr(e)
        .args(["run", "-d", "--mount", &mount, "--runc-binary"])
        .arg(&e.runc)
        .args([IMAGE, &cid, "sh", "-c", fill])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let stopped = wait_status(e, &cid, "STOPPED");
    let log = e.dir.join("state/io.containerd.runtime.v2.task/default");
    let logged = std::fs::read_to_string(log.join(&cid).join("log.json")).unwrap_or_default();
    let left = capsule_e2e::faults::free(&fs.0);
    // ctr task delete says the task's status
    let o = ctr(e).args(["task", "delete", &cid]).output().unwrap();
    cleanup(e, &cid);
    assert!(stopped, "still running: {logged}");
    assert!(
        stderr(&o).contains("exit code 137"),
        "{} {logged}",
        stderr(&o)
    );
    assert!(left >= (256 << 20) / 100 * 5, "{left} bytes free");
    assert!(
        logged.contains("\"level\":\"error\"")
            && logged.contains("killed: free space on the filesystem of")
            && logged.contains("the disk guard stopped"),
        "log.json: {logged}"
    );
}

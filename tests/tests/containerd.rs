//! capsule as the OCI runtime of the real engine: Debian's containerd, started by this
//! file (one daemon for all its tests, on a scratch folder in /dev/shm, its own socket),
//! a busybox image built here with umoci and imported with `ctr image import`, and
//! `ctr run --runc-binary …/capsule-runc`, which goes through containerd's
//! `io.containerd.runc.v2` shim exactly as a Kubernetes node's containers do.
//!
//! Root only (containerd needs it): as another user each test says so and passes. Where
//! containerd, ctr or umoci are missing the tests say so and pass, unless
//! `CAPSULE_TEST_REQUIRE_USER=1` (CI), where they fail.
//!
//! The lifecycle cases at the end drive `capsule-runc` directly on a bundle, as
//! runtime-tools' validation suite does (create, state, start, kill, delete and the
//! refusal of a field it cannot honour).

use capsule_e2e::{code, stderr, stdout};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const IMAGE: &str = "capsule.test/busybox:1";

struct Engine {
    dir: PathBuf,
    sock: PathBuf,
    runc: PathBuf,
}

fn required() -> bool {
    std::env::var("CAPSULE_TEST_REQUIRE_USER").as_deref() == Ok("1")
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool} >/dev/null")])
        .status()
        .is_ok_and(|s| s.success())
}

/// The shared engine, or `None` (said why) where it cannot run here.
fn engine() -> Option<&'static Engine> {
    static E: OnceLock<Option<Engine>> = OnceLock::new();
    E.get_or_init(|| {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!(
                "note: containerd needs root: the containerd tests are skipped for this user"
            );
            return None;
        }
        for t in ["containerd", "ctr", "umoci", "busybox"] {
            if !have(t) {
                assert!(
                    !required(),
                    "{t} is not installed (.ci/run installs containerd, umoci and busybox-static)"
                );
                eprintln!("note: {t} is not installed: the containerd tests are skipped");
                return None;
            }
        }
        Some(start())
    })
    .as_ref()
}

/// Remove what earlier runs of this file left (their containerd is gone with them).
fn sweep() {
    let Ok(d) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for e in d.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("capsule-ctd-") else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let p = e.path();
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut mounts: Vec<&str> = info
            .lines()
            .filter_map(|l| l.split_whitespace().nth(4))
            .filter(|m| m.starts_with(p.to_str().unwrap_or("-")))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
        let _ = std::fs::remove_dir_all(&p);
    }
}

fn start() -> Engine {
    sweep();
    let dir = PathBuf::from(format!("/dev/shm/capsule-ctd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("containerd.sock");
    let config = format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{s}"
[ttrpc]
  address = "{s}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
"#,
        d = dir.display(),
        s = sock.display()
    );
    std::fs::write(dir.join("config.toml"), config).unwrap();
    let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
    let cfg = dir.join("config.toml");
    // containerd ends with the thread that started it (PDEATHSIG): a thread of its own
    // that lives as long as the test process
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut c = Command::new("containerd");
        c.arg("--config")
            .arg(&cfg)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null());
        // SAFETY: prctl in the child before exec.
        unsafe {
            c.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = c.spawn().expect("starting containerd");
        tx.send(child.id()).unwrap();
        loop {
            std::thread::park();
        }
    });
    rx.recv().unwrap();
    let t0 = Instant::now();
    while !sock.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "containerd did not start: {}",
            std::fs::read_to_string(dir.join("containerd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let runc = capsule_e2e::oci::runc_link(&dir);
    let e = Engine { dir, sock, runc };
    image(&e);
    e
}

/// A busybox image: an OCI layout made with umoci, imported with ctr.
fn image(e: &Engine) {
    let img = e.dir.join("img");
    let b = e.dir.join("unpacked");
    let sh = |cmd: &str| {
        let o = Command::new("sh")
            .arg("-ec")
            .arg(cmd)
            .current_dir(&e.dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{cmd}: {}", stderr(&o));
    };
    sh(&format!(
        "umoci init --layout {img}; umoci new --image {img}:1; umoci unpack --image {img}:1 {b}; \
         mkdir -p {b}/rootfs/bin {b}/rootfs/tmp; cp /bin/busybox {b}/rootfs/bin/; \
         for a in sh echo cat ls id sleep touch test grep tty ps wc head; do ln -s busybox {b}/rootfs/bin/$a; done; \
         umoci repack --image {img}:1 {b}; cd {img} && tar cf ../img.tar .",
        img = img.display(),
        b = b.display()
    ));
    let o = ctr(e)
        .args(["image", "import", "--index-name", IMAGE])
        .arg(e.dir.join("img.tar"))
        .output()
        .unwrap();
    assert!(o.status.success(), "ctr image import: {}", stderr(&o));
}

fn ctr(e: &Engine) -> Command {
    let mut c = Command::new("ctr");
    c.arg("--address").arg(&e.sock).stdin(Stdio::null());
    c
}

fn id(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

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
    // a read-only root: /etc is not writable, /tmp neither (the image has no mount there)
    let o = ctr(e)
        .args(["run", "-d", "--read-only", "--runc-binary"])
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

// ---- the lifecycle, driven directly (runtime-tools' lifecycle/state/kill cases) ----

fn bundle(
    e: &Engine,
    name: &str,
    args: &[&str],
    extra: impl FnOnce(&mut serde_json::Value),
) -> PathBuf {
    capsule_e2e::oci::bundle(&e.dir, name, args, extra)
}

fn runc(e: &Engine, args: &[&str]) -> Output {
    capsule_e2e::oci::runc(&e.runc, &e.dir.join("runc-root"), args)
}

fn state_of(e: &Engine, cid: &str) -> serde_json::Value {
    let o = runc(e, &["state", cid]);
    assert!(o.status.success(), "state: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

#[test]
fn create_state_start_kill_delete() {
    let Some(e) = engine() else { return };
    let b = bundle(e, "life", &["sleep", "1000"], |_| {});
    let cid = id("life");
    let pidfile = e.dir.join("life.pid");
    // the init keeps create's stdio (as with runc): a file, not a pipe this test waits on
    let errf = e.dir.join("life.err");
    let o = Command::new(&e.runc)
        .arg("--root")
        .arg(e.dir.join("runc-root"))
        .args(["create", "--bundle"])
        .arg(&b)
        .arg("--pid-file")
        .arg(&pidfile)
        .arg(&cid)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&errf).unwrap())
        .status()
        .unwrap();
    assert!(
        o.success(),
        "create: {}",
        std::fs::read_to_string(&errf).unwrap_or_default()
    );
    let s = state_of(e, &cid);
    assert_eq!(s["status"], "created", "{s}");
    let pid: i64 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(s["pid"], pid);
    assert_eq!(s["id"], cid.as_str());
    assert_eq!(s["bundle"], b.to_str().unwrap());
    // a second create of the same id is refused
    let o = runc(e, &["create", "--bundle", b.to_str().unwrap(), &cid]);
    assert!(
        !o.status.success() && stderr(&o).contains("already exists"),
        "{}",
        stderr(&o)
    );
    // not started yet: the command has not run (the init waits on the fifo)
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(
        !cmdline.starts_with(b"sleep"),
        "{:?}",
        String::from_utf8_lossy(&cmdline)
    );
    assert!(runc(e, &["start", &cid]).status.success());
    assert_eq!(state_of(e, &cid)["status"], "running");
    let t0 = Instant::now();
    while !std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .starts_with(b"sleep")
    {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(10));
    }
    // a second start is refused; delete of a running container without --force too
    assert!(!runc(e, &["start", &cid]).status.success());
    let o = runc(e, &["delete", &cid]);
    assert!(
        !o.status.success() && stderr(&o).contains("not stopped"),
        "{}",
        stderr(&o)
    );
    // ps lists its init
    let o = runc(e, &["ps", "--format", "json", &cid]);
    let pids: Vec<i64> = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(pids, [pid], "{}", stdout(&o));
    // kill: the init (pid 1 of its namespace: SIGKILL reaches it)
    assert!(runc(e, &["kill", &cid, "KILL"]).status.success());
    // not our child: the init is reaped by us here only as its parent's orphan
    let t0 = Instant::now();
    while state_of(e, &cid)["status"] != "stopped" {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{}",
            state_of(e, &cid)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let o = runc(e, &["kill", &cid, "TERM"]);
    assert!(
        !o.status.success() && stderr(&o).contains("not running"),
        "{}",
        stderr(&o)
    );
    assert!(runc(e, &["delete", &cid]).status.success());
    let o = runc(e, &["state", &cid]);
    assert!(
        !o.status.success() && stderr(&o).contains("does not exist"),
        "{}",
        stderr(&o)
    );
    assert!(runc(e, &["delete", "--force", &cid]).status.success());
}

/// The image's rootfs is hostile: its symlinks must lead no mount point, masked or
/// read-only path or device node out of it (each is resolved in the rootfs, as if it
/// were `/`).
#[test]
fn a_hostile_rootfs_cannot_lead_create_out_of_it() {
    let Some(e) = engine() else { return };
    let host = e.dir.join("host-victim");
    let _ = std::fs::remove_dir_all(&host);
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("secret"), "host's").unwrap();
    let b = bundle(
        e,
        "hostile",
        &["sh", "-c", "echo in > /proc/../ran-inside || true"],
        |c| {
            // no /dev tmpfs: the devices are made in the image's own /dev (with a link out)
            c["linux"]["devices"] = serde_json::json!([
                {"path": "/dev/sub/null2", "type": "c", "major": 1, "minor": 3}
            ]);
            c["mounts"] = serde_json::json!([
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/victim/sub", "type": "tmpfs", "source": "tmpfs"},
                {"destination": "/knows/sub", "type": "tmpfs", "source": "tmpfs"},
            ]);
            c["root"]["readonly"] = false.into();
            c["linux"]["maskedPaths"] = serde_json::json!(["/mask"]);
            c["linux"]["readonlyPaths"] = serde_json::json!(["/ro/secret"]);
        },
    );
    let r = b.join("rootfs");
    let climb = format!("../../../../../../../..{}", host.display());
    std::os::unix::fs::symlink(host.join("p"), r.join("proc")).unwrap();
    std::os::unix::fs::symlink(format!("{climb}/v"), r.join("victim")).unwrap();
    std::os::unix::fs::symlink(host.join("secret"), r.join("mask")).unwrap();
    std::os::unix::fs::symlink(&climb, r.join("ro")).unwrap();
    // one that knows where capsule-runc keeps the host while it builds the root
    let knows = r.join("oldroot").join(host.strip_prefix("/").unwrap());
    std::fs::create_dir_all(&knows).unwrap();
    std::os::unix::fs::symlink(
        Path::new("/oldroot").join(host.strip_prefix("/").unwrap()),
        r.join("knows"),
    )
    .unwrap();
    std::fs::create_dir_all(r.join("dev")).unwrap();
    std::os::unix::fs::symlink(&climb, r.join("dev/sub")).unwrap();
    // where the links lead when resolved in the rootfs: there, so that create succeeds
    let inside = r.join(host.strip_prefix("/").unwrap());
    std::fs::create_dir_all(inside.join("p")).unwrap();
    std::fs::create_dir_all(inside.join("v")).unwrap();
    let cid = id("hostile");
    let o = runc(e, &["run", "--bundle", b.to_str().unwrap(), &cid]);
    let _ = runc(e, &["delete", "--force", &cid]);
    // the host's folder: as it was (no node, folder or mount added, the file unchanged)
    let mut names: Vec<String> = std::fs::read_dir(&host)
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["secret"], "run: {} {}", stdout(&o), stderr(&o));
    assert_eq!(
        std::fs::read_to_string(host.join("secret")).unwrap(),
        "host's"
    );
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!info.contains(host.to_str().unwrap()), "{info}");
    // ... and the links were followed inside the rootfs instead (the test did something)
    assert!(
        knows.join("sub").is_dir(),
        "mount point made inside: {}",
        stderr(&o)
    );
    assert!(
        inside.join("v/sub").is_dir(),
        "mount point made inside: {}",
        stderr(&o)
    );
    assert!(
        inside.join("null2").exists(),
        "device made inside: {}",
        stderr(&o)
    );
    assert_eq!(code(&o), 0, "run: {} {}", stdout(&o), stderr(&o));
}

/// `capsule-runc --root … --log LOG --log-format json create --bundle B CID`.
fn create_logged(e: &Engine, b: &Path, cid: &str, log: &Path) -> Command {
    let mut c = Command::new(&e.runc);
    c.arg("--root")
        .arg(e.dir.join("runc-root"))
        .arg("--log")
        .arg(log)
        .args(["--log-format", "json", "create", "--bundle"])
        .arg(b)
        .arg(cid);
    c
}

/// capsule's own limits (memory, processes) where the bundle sets none; the bundle's
/// own stand. Numbers from CAPSULE_OWN_DEFAULTS, so the test can tell them apart.
#[test]
fn capsule_default_limits_where_the_bundle_sets_none() {
    let Some(e) = engine() else { return };
    let read = |ctl: &str, rel: &str, file: &str| {
        std::fs::read_to_string(Path::new("/sys/fs/cgroup").join(ctl).join(rel).join(file))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    for (name, pids) in [("deflim", None), ("ownlim", Some(50))] {
        let b = bundle(e, name, &["sleep", "1000"], |c| {
            if let Some(n) = pids {
                c["linux"]["resources"] = serde_json::json!({"pids": {"limit": n}});
            }
        });
        let cid = id(name);
        let rel = format!("capsule-test/{name}-{}", std::process::id());
        let log = e.dir.join(format!("{name}.log"));
        let o = create_logged(e, &b, &cid, &log)
            .env("CAPSULE_OWN_DEFAULTS", "pids=77,memory=300M")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(o.success(), "create {name}");
        // in capsule-runc's own state (the runtime spec's state shows the bundle's
        // annotations only)
        let saved: serde_json::Value = serde_json::from_slice(
            &std::fs::read(e.dir.join("runc-root").join(&cid).join("state.json")).unwrap(),
        )
        .unwrap();
        let have_pids = Path::new("/sys/fs/cgroup/pids").exists();
        let have_mem = Path::new("/sys/fs/cgroup/memory").exists();
        match pids {
            None if have_pids => {
                assert_eq!(read("pids", &rel, "pids.max"), "77");
                assert!(
                    saved["default_limits"]
                        .as_array()
                        .is_some_and(|v| v.iter().any(|l| l == "pids=77")),
                    "{saved}"
                );
                let logged = std::fs::read_to_string(&log).unwrap_or_default();
                assert!(
                    logged.contains("default limits") && logged.contains("pids=77"),
                    "{logged}"
                );
            }
            Some(n) if have_pids => assert_eq!(read("pids", &rel, "pids.max"), n.to_string()),
            _ => eprintln!("note: no pids controller here"),
        }
        if have_mem {
            assert_eq!(
                read("memory", &rel, "memory.limit_in_bytes"),
                (300u64 << 20).to_string()
            );
        }
        let _ = runc(e, &["delete", "--force", &cid]);
    }
}

#[test]
fn a_field_it_cannot_honour_fails_create_naming_it() {
    let Some(e) = engine() else { return };
    let cases: &[(&str, &dyn Fn(&mut serde_json::Value))] = &[
        ("intelRdt", &|c| {
            c["linux"]["intelRdt"] = serde_json::json!({"closID": "x"})
        }),
        ("rootfsPropagation", &|c| {
            c["linux"]["rootfsPropagation"] = "sideways".into()
        }),
        ("\"time\"", &|c| {
            c["linux"]["namespaces"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"type": "time"}))
        }),
        ("rdma", &|c| {
            c["linux"]["resources"]["rdma"] = serde_json::json!({"mlx5_1": {"hcaHandles": 3}})
        }),
        ("hugepageLimits", &|c| {
            c["linux"]["resources"]["hugepageLimits"] =
                serde_json::json!([{"pageSize": "2MB", "limit": 2097152}])
        }),
        ("personality", &|c| {
            c["linux"]["personality"] = serde_json::json!({"domain": "LINUX32"})
        }),
        ("mounts[2].destination", &|c| {
            c["mounts"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"destination": "/../../etc", "type": "tmpfs", "source": "tmpfs"}))
        }),
        ("blockIO.weight", &|c| {
            c["linux"]["resources"]["blockIO"] = serde_json::json!({"weight": 10})
        }),
        ("memory: swappiness", &|c| {
            c["linux"]["resources"]["memory"] = serde_json::json!({"swappiness": 10})
        }),
        (
            "listenerPath",
            &|c| {
                c["linux"]["seccomp"] =
                    serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW", "listenerPath": "/x"})
            },
        ),
        ("scheduler", &|c| {
            c["process"]["scheduler"] = serde_json::json!({"policy": "SCHED_FIFO"})
        }),
    ];
    for (field, f) in cases {
        let b = bundle(e, "refuse", &["true"], f);
        let cid = id("refuse");
        let log = e.dir.join("refuse.log");
        let o = create_logged(e, &b, &cid, &log).output().unwrap();
        let err = stderr(&o);
        assert_eq!(code(&o), 1, "{field}: {err}");
        assert!(
            err.contains(field) && err.lines().count() == 1,
            "{field}: {err}"
        );
        // the log as the shim reads it: a JSON line at level error
        let last = std::fs::read_to_string(&log).unwrap();
        let v: serde_json::Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
        assert_eq!(v["level"], "error");
        assert!(v["msg"].as_str().unwrap().contains(field));
        // nothing half-made: no state is left
        assert!(!e.dir.join("runc-root").join(&cid).exists());
    }
}

#[test]
fn run_enforces_the_bundle() {
    let Some(e) = engine() else { return };
    let b = bundle(
        e,
        "enforce",
        &["sh", "-c", "cat /proc/self/status | grep ^CapEff; hostname 2>/dev/null; cat /proc/sys/kernel/hostname; echo x > /proc/sys/kernel/domainname && echo WROTE; touch /f && echo WROTE-ROOT; echo masked:$(cat /proc/timer_list | wc -c); exit 4"],
        |c| {
            c["process"]["rlimits"] = serde_json::json!([{"type": "RLIMIT_NOFILE", "hard": 77, "soft": 77}]);
        },
    );
    let o = runc(e, &["run", "--bundle", b.to_str().unwrap(), &id("enforce")]);
    let out = stdout(&o);
    assert_eq!(code(&o), 4, "{out} {}", stderr(&o));
    assert!(out.contains("CapEff:\t0000000000000020"), "{out}");
    assert!(out.contains("lifecycle"), "{out}");
    assert!(!out.contains("WROTE"), "{out}");
    assert!(out.contains("masked:0"), "{out}");
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

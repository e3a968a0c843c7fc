//! The containerd of the containerd tests (`tests/containerd.rs`,
//! `tests/containerd_lifecycle.rs`): Debian's containerd started once per test binary on
//! a scratch folder in /dev/shm with its own socket, a busybox image built with umoci and
//! imported with `ctr image import`, and `capsule-runc` beside it. Root only; where
//! containerd, ctr or umoci are missing the tests are skipped, unless
//! `CAPSULE_TEST_REQUIRE_USER=1` (CI), where that fails.

use crate::stderr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const IMAGE: &str = "capsule.test/busybox:1";

pub struct Engine {
    pub dir: PathBuf,
    pub sock: PathBuf,
    pub runc: PathBuf,
}

pub fn required() -> bool {
    std::env::var("CAPSULE_TEST_REQUIRE_USER").as_deref() == Ok("1")
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool} >/dev/null")])
        .status()
        .is_ok_and(|s| s.success())
}

/// The shared engine, or `None` (said why) where it cannot run here.
pub fn engine() -> Option<&'static Engine> {
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

/// Remove what earlier runs of these tests left (their containerd is gone with them).
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

pub fn start() -> Engine {
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
    let runc = crate::oci::runc_link(&dir);
    let e = Engine { dir, sock, runc };
    image(&e);
    e
}

/// A busybox image: an OCI layout made with umoci, imported with ctr.
pub fn image(e: &Engine) {
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

pub fn ctr(e: &Engine) -> Command {
    let mut c = Command::new("ctr");
    c.arg("--address").arg(&e.sock).stdin(Stdio::null());
    c
}

pub fn id(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

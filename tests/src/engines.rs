//! The container engines of the engine tests (`tests/engines_docker.rs`,
//! `tests/engines_podman.rs`): Debian's `dockerd` and `podman`, each started by the test
//! binary once, on scratch folders in /dev/shm, in a network namespace of its own (their
//! bridges and firewall rules never touch the host's), with `capsule-runc` named as a
//! runtime, and a busybox image imported from a tarball made here (no registry). Root
//! only; where an engine is not installed its tests are skipped with the reason printed,
//! unless `CAPSULE_TEST_REQUIRE_USER=1` (CI, where `.ci/run` installs them).
//!
//! The image's `/etc/passwd` has `root` (home `/root`) and `app` (uid 1000, home
//! `/home/app`), for the tests of `HOME` and `--user`.

use crate::stderr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const IMAGE: &str = "capsule.test/busybox:1";

/// Is `tool` on PATH?
pub fn have(tool: &str) -> bool {
    crate::containerd::have(tool)
}

/// Whether the engine's tests can run here; `false` said why (a failure in CI).
pub fn usable(engine: &str, tools: &[&str]) -> bool {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("note: {engine} needs root here: its tests are skipped for this user");
        return false;
    }
    for t in tools {
        if !have(t) {
            assert!(
                !crate::containerd::required(),
                "{t} is not installed (.ci/run installs docker.io, podman and busybox-static)"
            );
            eprintln!("note: {t} is not installed: the {engine} tests are skipped");
            return false;
        }
    }
    true
}

/// A busybox root (every applet linked, `/etc/passwd` with root and app) as a tarball,
/// `dir/busybox.tar`.
pub fn image_tarball(dir: &Path) -> PathBuf {
    let r = dir.join("rootfs");
    for d in [
        "bin", "etc", "root", "home/app", "tmp", "proc", "sys", "dev", "run",
    ] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", r.join("bin/busybox")).unwrap();
    let list = Command::new("/bin/busybox").arg("--list").output().unwrap();
    for a in String::from_utf8_lossy(&list.stdout).split_whitespace() {
        if a != "busybox" {
            let _ = std::os::unix::fs::symlink("busybox", r.join("bin").join(a));
        }
    }
    std::fs::write(
        r.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    )
    .unwrap();
    std::fs::write(
        r.join("etc/group"),
        "root:x:0:\napp:x:1000:\nnogroup:x:65534:\n",
    )
    .unwrap();
    std::fs::write(r.join("run/from-image"), "kept\n").unwrap();
    let sh = |c: &str| {
        let o = Command::new("sh").arg("-ec").arg(c).output().unwrap();
        assert!(o.status.success(), "{c}: {}", stderr(&o));
    };
    sh(&format!(
        "chown 1000:1000 {r}/home/app; chmod 1777 {r}/tmp; tar -C {r} -cf {d}/busybox.tar .",
        r = r.display(),
        d = dir.display()
    ));
    dir.join("busybox.tar")
}

/// Remove what earlier runs left under /dev/shm/`prefix`<pid> (their daemons are gone).
pub fn sweep(prefix: &str) {
    let Ok(d) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for e in d.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(prefix) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        unmount_under(&e.path());
        let _ = std::fs::remove_dir_all(e.path());
        let _ = Command::new("ip")
            .args(["netns", "delete", &name])
            .stderr(Stdio::null())
            .status();
    }
}

/// Unmount everything mounted below `p`, deepest first.
pub fn unmount_under(p: &Path) {
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
}

/// Start `cmd` so that it ends with the test process (PDEATHSIG from a thread that lives
/// as long as the process), its output in `log`.
pub fn daemon(mut cmd: Command, log: &Path) {
    let log = std::fs::File::create(log).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        cmd.stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null());
        // SAFETY: prctl in the child before exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd.spawn().expect("starting the engine's daemon");
        tx.send(child.id()).unwrap();
        loop {
            std::thread::park();
        }
    });
    rx.recv().unwrap();
}

/// Wait (at most `secs`) until `f` holds.
pub fn wait_until(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// `Command::output`, stdin closed.
pub fn out(c: &mut Command) -> Output {
    c.stdin(Stdio::null()).output().unwrap()
}

/// A private Docker: `dockerd` with its own data root, exec root and socket, in a network
/// namespace of its own (its `docker0` and iptables rules are that namespace's), the
/// runtime `capsule` = capsule-runc.
pub struct Docker {
    pub dir: PathBuf,
    pub sock: PathBuf,
    pub runc: PathBuf,
}

impl Docker {
    pub fn start() -> Docker {
        sweep("capsule-dk-");
        let dir = PathBuf::from(format!("/dev/shm/capsule-dk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let runc = crate::oci::runc_link(&dir);
        let sock = dir.join("docker.sock");
        let mut c = Command::new("unshare");
        c.args(["--net", "--", "sh", "-c"]).arg(format!(
            "ip link set lo up; exec dockerd --data-root {d}/data --exec-root {d}/exec \
             --host unix://{s} --pidfile {d}/docker.pid --add-runtime capsule={r} \
             --storage-driver overlay2 --log-level warn",
            d = dir.display(),
            s = sock.display(),
            r = runc.display()
        ));
        daemon(c, &dir.join("dockerd.log"));
        let d = Docker { dir, sock, runc };
        let up = wait_until(60, || {
            d.sock.exists() && out(d.cmd().arg("version")).status.success()
        });
        assert!(
            up,
            "dockerd did not start: {}",
            std::fs::read_to_string(d.dir.join("dockerd.log")).unwrap_or_default()
        );
        let tar = image_tarball(&d.dir);
        let o = out(d.cmd().arg("import").arg(&tar).arg(IMAGE));
        assert!(o.status.success(), "docker import: {}", stderr(&o));
        d
    }

    /// The Debian client (`/usr/bin/docker` before any other on PATH) on this daemon.
    pub fn cmd(&self) -> Command {
        let bin = if Path::new("/usr/bin/docker").exists() {
            "/usr/bin/docker"
        } else {
            "docker"
        };
        let mut c = Command::new(bin);
        c.env("DOCKER_HOST", format!("unix://{}", self.sock.display()))
            .stdin(Stdio::null());
        c
    }

    /// Where the runc shim keeps capsule-runc's state (`--root`) for this daemon.
    pub fn runtime_root(&self) -> PathBuf {
        self.dir.join("exec/runtime-capsule/moby")
    }
}

/// A private Podman: its own storage (`--root`, `--runroot` in /dev/shm), cgroupfs,
/// its own `containers.conf`, run in a network namespace made for it (root) or as the
/// unprivileged test user (rootless, its storage its own).
pub struct Podman {
    pub dir: PathBuf,
    pub runc: PathBuf,
    /// The network namespace (root), or the user (rootless).
    pub netns: Option<String>,
    pub user: Option<String>,
}

/// The `containers.conf` of the tests: cgroupfs, file events, and the open-files and
/// process limits the engine asks at what this machine's runtime holds (Podman asks
/// 1048576 open files; raising a hard limit needs `CAP_SYS_RESOURCE`, which the machines
/// these tests run on do not give even to root, and runc fails there the same way).
fn containers_conf(dir: &Path) -> PathBuf {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a valid struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
    let conf = dir.join("containers.conf");
    std::fs::write(
        &conf,
        format!(
            "[containers]\ndefault_ulimits = [\"nofile={n}:{n}\", \"nproc=32768:32768\"]\n\
             [engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n",
            n = l.rlim_max
        ),
    )
    .unwrap();
    conf
}

impl Podman {
    /// Podman as root, in a network namespace of its own.
    pub fn root() -> Podman {
        sweep("capsule-pm-");
        let name = format!("capsule-pm-{}", std::process::id());
        let dir = PathBuf::from("/dev/shm").join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let o = out(Command::new("ip").args(["netns", "add", &name]));
        assert!(o.status.success(), "ip netns add: {}", stderr(&o));
        let _ =
            out(Command::new("ip").args(["netns", "exec", &name, "ip", "link", "set", "lo", "up"]));
        let p = Podman {
            runc: crate::oci::runc_link(&dir),
            dir,
            netns: Some(name),
            user: None,
        };
        p.import();
        p
    }

    /// Rootless Podman as the test user `user` (its subordinate ids in /etc/subuid).
    pub fn rootless(user: &str) -> Podman {
        sweep("capsule-pr-");
        let dir = PathBuf::from(format!("/dev/shm/capsule-pr-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("xdg")).unwrap();
        let o = out(Command::new("chown").args(["-R", user]).arg(&dir));
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        std::fs::set_permissions(
            dir.join("xdg"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let p = Podman {
            runc: crate::oci::runc_link(&dir),
            dir,
            netns: None,
            user: Some(user.to_string()),
        };
        p.import();
        p
    }

    fn import(&self) {
        let tar = image_tarball(&self.dir);
        if let Some(u) = &self.user {
            let _ = out(Command::new("chown").arg(u).arg(&tar));
        }
        let o = out(self.cmd().args(["import", "-q"]).arg(&tar).arg(IMAGE));
        assert!(o.status.success(), "podman import: {}", stderr(&o));
    }

    /// `podman` on this storage with capsule-runc as the runtime.
    pub fn cmd(&self) -> Command {
        self.with_runtime(&self.runc)
    }

    /// `podman` on this storage with `runtime`.
    pub fn with_runtime(&self, runtime: &Path) -> Command {
        let conf = containers_conf(&self.dir);
        let mut c = match (&self.netns, &self.user) {
            (_, Some(u)) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--", "env"])
                    .arg(format!(
                        "XDG_RUNTIME_DIR={}",
                        self.dir.join("xdg").display()
                    ))
                    .arg(format!("HOME={}", self.dir.display()))
                    .arg(format!("CONTAINERS_CONF={}", conf.display()))
                    .arg("podman");
                c
            }
            (Some(ns), None) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}"))
                    .arg("podman")
                    .env("CONTAINERS_CONF", &conf);
                c
            }
            (None, None) => Command::new("podman"),
        };
        let runroot = if self.user.is_some() {
            self.dir.join("xdg/run")
        } else {
            self.dir.join("run")
        };
        c.arg("--root")
            .arg(self.dir.join("root"))
            .arg("--runroot")
            .arg(runroot)
            .arg("--runtime")
            .arg(runtime)
            .stdin(Stdio::null());
        c
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        if let Some(ns) = &self.netns {
            let _ = Command::new("ip").args(["netns", "delete", ns]).status();
        }
    }
}

/// The processes whose command line names `needle` (a container's id: capsule-runc's
/// helpers keep the command line of the `create` that started them).
pub fn processes_naming(needle: &str) -> Vec<u32> {
    let mut v = Vec::new();
    let Ok(d) = std::fs::read_dir("/proc") else {
        return v;
    };
    for e in d.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(needle) && pid != std::process::id() {
            v.push(pid);
        }
    }
    v
}

//! Red team: a container's `/dev` is the runtime's, not the image's. An image can put a
//! symlink at every path of `/dev` the runtime sets up (the devices, `ptmx`, `console`,
//! the mounts `shm`, `pts`, `mqueue`, the links `fd`, `stdin`, `stdout`, `stderr`,
//! `core`), pointing at a host file (by its host path) or into procfs. A runtime that
//! follows one mounts onto, chmods or writes through the host's file, or hands the
//! container a procfs file where a device should be (runc's CVE-2025-31133, -52565,
//! -52881). capsule-runc must leave every host file as it was and give the container its
//! own device, mount or link at each name, with and without a user namespace.
//!
//! Calibration, in the same test: with no sandbox, writing through the image's links from
//! the host does reach the host files (the links are live).
//!
//! `capsule exec`'s own `/dev` is checked the same way: each name is the runtime's.
//!
//! capsule-runc parts: root only (it makes namespaces and cgroups); as another user they
//! say so and pass.

use capsule_e2e::oci::{bundle, runc, runc_link};
use capsule_e2e::{scratch, stdout};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Every path of `/dev` the runtime sets up.
const NAMES: [&str; 16] = [
    "null", "zero", "full", "random", "urandom", "tty", "ptmx", "console", "shm", "pts", "mqueue",
    "fd", "stdin", "stdout", "stderr", "core",
];

/// What the container must see at each name (busybox `stat -c '%F|%t:%T|%N'`; the
/// console's numbers are its pty's).
fn expected(name: &str) -> String {
    let dev = |maj: u32, min: u32| format!("character special file|{maj:x}:{min:x}|/dev/{name}");
    let link = |t: &str| format!("symbolic link|0:0|'/dev/{name}' -> '{t}'");
    match name {
        "null" => dev(1, 3),
        "zero" => dev(1, 5),
        "full" => dev(1, 7),
        "random" => dev(1, 8),
        "urandom" => dev(1, 9),
        "tty" => dev(5, 0),
        "ptmx" => link("pts/ptmx"),
        "console" => "character special file|88:".into(),
        "shm" | "pts" | "mqueue" => format!("directory|0:0|/dev/{name}"),
        "fd" => link("/proc/self/fd"),
        "stdin" => link("/proc/self/fd/0"),
        "stdout" => link("/proc/self/fd/1"),
        "stderr" => link("/proc/self/fd/2"),
        "core" => link("/proc/kcore"),
        _ => unreachable!(),
    }
}

/// The filesystem each mount of the runtime's must be (its magic, as `stat -f -c %t`).
const MOUNTED: [(&str, &str); 3] = [("shm", "1021994"), ("pts", "1cd1"), ("mqueue", "19800202")];

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A console socket in `dir`: a thread accepts the runtime's connection and keeps the
/// terminal's master it receives open until the returned guard is dropped.
struct Console {
    path: PathBuf,
    got: std::sync::mpsc::Receiver<OwnedFd>,
}

impl Console {
    fn listen(dir: &Path) -> Console {
        let path = dir.join("console.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let (tx, got) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let Ok((s, _)) = l.accept() else { return };
            let mut buf = [0u8; 64];
            let mut cmsg = [0u8; 64];
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr() as *mut libc::c_void,
                iov_len: buf.len(),
            };
            // SAFETY: a zeroed msghdr pointing at our buffers.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cmsg.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = cmsg.len();
            // SAFETY: recvmsg into the buffers above.
            if unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, 0) } <= 0 {
                return;
            }
            // SAFETY: walking the control messages the kernel wrote.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&msg);
                if !c.is_null() && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let fd = *(libc::CMSG_DATA(c) as *const libc::c_int);
                    let _ = tx.send(OwnedFd::from_raw_fd(fd));
                }
            }
        });
        Console { path, got }
    }
}

/// A bundle whose rootfs has, at each of [`NAMES`] in its own `/dev` (no tmpfs over it),
/// a symlink to `target(name)`; the runtime's mounts at `/dev/pts`, `/dev/shm` and
/// `/dev/mqueue`, a terminal, and `/out` (rw) for the report of what the container sees.
fn attack_bundle(
    dir: &Path,
    name: &str,
    out: &Path,
    userns: bool,
    target: impl Fn(&str) -> String,
) -> PathBuf {
    let script = format!(
        "for n in {}; do stat -c '%F|%t:%T|%N' /dev/$n; done > /out/seen; \
         for n in shm pts mqueue; do stat -f -c \"$n %t\" /dev/$n; done > /out/fs; \
         echo x > /dev/null && echo done >> /out/fs",
        NAMES.join(" ")
    );
    let out = out.to_str().unwrap().to_string();
    let b = bundle(dir, name, &["sh", "-c", &script], |c| {
        c["root"]["readonly"] = false.into();
        c["process"]["terminal"] = true.into();
        c["mounts"] = serde_json::json!([
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "nodev", "mode=1777"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "nodev", "noexec"]},
            {"destination": "/out", "type": "bind", "source": out, "options": ["rbind", "rw"]}
        ]);
        if userns {
            let ns = c["linux"]["namespaces"].as_array_mut().unwrap();
            ns.push(serde_json::json!({"type": "user"}));
            c["linux"]["uidMappings"] =
                serde_json::json!([{"containerID": 0, "hostID": 0, "size": 65536}]);
            c["linux"]["gidMappings"] =
                serde_json::json!([{"containerID": 0, "hostID": 0, "size": 65536}]);
        }
    });
    std::os::unix::fs::symlink("busybox", b.join("rootfs/bin/stat")).unwrap();
    let dev = b.join("rootfs/dev");
    std::fs::create_dir_all(&dev).unwrap();
    for n in NAMES {
        std::os::unix::fs::symlink(target(n), dev.join(n)).unwrap();
    }
    b
}

/// The host's files the image's links point at: `host/NAME` (a file; a folder for the
/// runtime's mounts), each with its own content and mode.
fn host_files(dir: &Path) -> PathBuf {
    let h = dir.join("host");
    std::fs::create_dir_all(&h).unwrap();
    for n in NAMES {
        if matches!(n, "shm" | "pts" | "mqueue") {
            std::fs::create_dir_all(h.join(n)).unwrap();
            std::fs::write(h.join(n).join("inside"), format!("host-{n}\n")).unwrap();
        } else {
            std::fs::write(h.join(n), format!("host-{n}\n")).unwrap();
        }
    }
    h
}

/// Each host file as it was: content, kind, mode, and nothing mounted on it.
#[track_caller]
fn assert_host_untouched(h: &Path, modes: &[(String, u32)], label: &str) {
    use std::os::unix::fs::PermissionsExt;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for (n, mode) in modes {
        let p = if matches!(n.as_str(), "shm" | "pts" | "mqueue") {
            h.join(n).join("inside")
        } else {
            h.join(n)
        };
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(m.is_file(), "[{label}] {} is no longer a file", p.display());
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            format!("host-{n}\n"),
            "[{label}] {} was written",
            p.display()
        );
        assert_eq!(
            m.permissions().mode(),
            *mode,
            "[{label}] {} chmod",
            p.display()
        );
        assert!(
            !mounts.contains(&format!(" {} ", h.join(n).display())),
            "[{label}] something is mounted on {}",
            h.join(n).display()
        );
    }
}

fn modes(h: &Path) -> Vec<(String, u32)> {
    use std::os::unix::fs::PermissionsExt;
    NAMES
        .iter()
        .map(|n| {
            let p = if matches!(*n, "shm" | "pts" | "mqueue") {
                h.join(n).join("inside")
            } else {
                h.join(n)
            };
            (
                n.to_string(),
                std::fs::metadata(p).unwrap().permissions().mode(),
            )
        })
        .collect()
}

/// Run the attack bundle under capsule-runc and check what the container saw.
fn run_attack(dir: &Path, name: &str, userns: bool, target: impl Fn(&str) -> String) {
    let out = dir.join(format!("out-{name}"));
    std::fs::create_dir_all(&out).unwrap();
    let b = attack_bundle(dir, name, &out, userns, target);
    let rc = runc_link(dir);
    let console = Console::listen(&out);
    let o = runc(
        &rc,
        &dir.join("runc-root"),
        &[
            "run",
            "--bundle",
            b.to_str().unwrap(),
            "--console-socket",
            console.path.to_str().unwrap(),
            name,
        ],
    );
    let _master = console
        .got
        .recv_timeout(std::time::Duration::from_secs(10))
        .ok();
    assert!(
        o.status.success(),
        "[{name}] run: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let seen = std::fs::read_to_string(out.join("seen")).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines.len(), NAMES.len(), "[{name}] {seen}");
    for (n, l) in NAMES.iter().zip(&lines) {
        let want = expected(n).replace('\'', "");
        assert!(
            l.replace('\'', "").starts_with(&want),
            "[{name}] /dev/{n}: saw {l:?}, want {want:?}"
        );
    }
    let fs = std::fs::read_to_string(out.join("fs")).unwrap();
    for (n, t) in MOUNTED {
        assert!(
            fs.contains(&format!("{n} {t}\n")),
            "[{name}] /dev/{n}: {fs}"
        );
    }
    assert!(fs.ends_with("done\n"), "[{name}] {fs}");
    let _ = runc(&rc, &dir.join("runc-root"), &["delete", "-f", name]);
}

#[test]
fn an_images_dev_links_are_never_followed_by_capsule_runc() {
    if !is_root() {
        eprintln!("skipped: capsule-runc needs root");
        return;
    }
    let t = scratch();
    let dir = t.path();
    let h = host_files(dir);
    let before = modes(&h);
    let to_host = |n: &str| h.join(n).to_str().unwrap().to_string();

    // calibration: with no sandbox, the image's links reach the host's files
    {
        let cal = dir.join("calibration");
        std::fs::create_dir_all(&cal).unwrap();
        let hc = host_files(&cal);
        let dev = cal.join("rootfs-dev");
        std::fs::create_dir_all(&dev).unwrap();
        for n in NAMES {
            std::os::unix::fs::symlink(hc.join(n), dev.join(n)).unwrap();
        }
        std::fs::write(dev.join("null"), "through the link\n").unwrap();
        std::fs::write(dev.join("console"), "through the link\n").unwrap();
        std::fs::write(dev.join("shm").join("inside"), "through the link\n").unwrap();
        for n in ["null", "console"] {
            assert_eq!(
                std::fs::read_to_string(hc.join(n)).unwrap(),
                "through the link\n",
                "calibration: the link to the host's {n} is live"
            );
        }
    }

    // links to host files, with and without a user namespace
    run_attack(dir, "devhost", false, to_host);
    assert_host_untouched(&h, &before, "devhost");
    run_attack(dir, "devhostns", true, to_host);
    assert_host_untouched(&h, &before, "devhostns");

    // links into procfs (harmless targets: a runtime that followed them would only mount
    // over or chmod the container's own view)
    let to_proc = |n: &str| {
        match n {
            "shm" => "/proc/sys/kernel",
            "pts" => "/proc/sys/vm",
            "mqueue" => "/proc/sys/fs",
            "console" => "/proc/sys/kernel/core_pattern",
            _ => "/proc/self/comm",
        }
        .to_string()
    };
    run_attack(dir, "devproc", false, to_proc);
    run_attack(dir, "devprocns", true, to_proc);
    assert_host_untouched(&h, &before, "devproc");
}

#[test]
fn capsule_exec_dev_is_the_runtimes() {
    use capsule_e2e::sandbox::Capsule;
    let script = format!(
        "for n in {}; do stat -c '%F|%t:%T|%N' /dev/$n 2>&1; done; \
         for n in shm pts; do stat -f -c \"$n %T\" /dev/$n; done",
        NAMES
            .iter()
            .filter(|n| !matches!(**n, "console" | "mqueue" | "core"))
            .copied()
            .collect::<Vec<_>>()
            .join(" ")
    );
    for r in capsule_e2e::runners() {
        let sb = Capsule::new(&r);
        let o = sb.sh(&script);
        let out = stdout(&o);
        let mut lines = out.lines();
        for n in NAMES
            .iter()
            .filter(|n| !matches!(**n, "console" | "mqueue" | "core"))
        {
            let l = lines.next().unwrap_or("").replace('\'', "");
            let want = expected(n).replace('\'', "");
            assert!(
                l.starts_with(&want),
                "[{}] /dev/{n}: saw {l:?}, want {want:?}\n{out}",
                r.label()
            );
        }
        let rest: Vec<&str> = lines.collect();
        assert_eq!(rest, ["shm tmpfs", "pts devpts"], "[{}] {out}", r.label());
    }
}

//! `capsule-runc` driven directly on a bundle beside the containerd tests' engine, as
//! runtime-tools' validation suite does (its lifecycle, state and kill cases): create,
//! state, start, kill, delete, a hostile rootfs, capsule's default limits and the refusal
//! of a field it cannot honour. Root only, as `containerd.rs` (its engine gives the
//! scratch folder and `capsule-runc`).

use capsule_e2e::containerd::{engine, id, Engine};
use capsule_e2e::{code, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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

//! capsule-runc under containerd's CRI plugin (what a kubelet drives, through a
//! RuntimeClass whose handler is `capsule`), driven by crictl: Debian's containerd
//! started by this test binary with the CRI plugin on a scratch folder, in a network
//! namespace of its own, the runtime `capsule` = the runc v2 shim with capsule-runc as
//! its `BinaryName`, a busybox image made with umoci (its command `sleep`, the pod
//! sandbox's too) and imported into the `k8s.io` namespace. Pods use the host's network
//! (no CNI plugin here) and share their ipc and uts namespaces by path.
//!
//! crictl is cri-tools (1.26.1 tested): Debian 12 packages none, so CI, which starts
//! from a fresh Debian, has no crictl and skips this binary with the reason printed;
//! a machine with crictl on PATH runs it.

use capsule_e2e::engines::{daemon, out, processes_naming, sweep, usable, wait_until, IMAGE};
use capsule_e2e::{code, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

struct Cri {
    dir: PathBuf,
    sock: PathBuf,
    /// containerd's network namespace, where crictl runs too (the CRI streaming server
    /// of `exec` listens on that namespace's loopback).
    netns: String,
}

fn cri() -> Option<&'static Cri> {
    static C: OnceLock<Option<Cri>> = OnceLock::new();
    C.get_or_init(|| {
        if !capsule_e2e::engines::have("crictl") {
            eprintln!(
                "note: crictl is not installed (Debian 12 has no cri-tools; install crictl from cri-tools' releases): the CRI tests are skipped"
            );
            return None;
        }
        usable("containerd's CRI", &["containerd", "ctr", "umoci", "ip", "nsenter"])
            .then(start)
    })
    .as_ref()
}

fn start() -> Cri {
    sweep("capsule-cri-");
    let name = format!("capsule-cri-{}", std::process::id());
    let dir = PathBuf::from("/dev/shm").join(&name);
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    let runc = capsule_e2e::oci::runc_link(&dir);
    let sock = dir.join("containerd.sock");
    let o = out(Command::new("ip").args(["netns", "add", &name]));
    assert!(o.status.success(), "ip netns add: {}", stderr(&o));
    let _ = out(Command::new("ip").args(["netns", "exec", &name, "ip", "link", "set", "lo", "up"]));
    let config = format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{s}"
[ttrpc]
  address = "{s}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  # no container below containerd's own OOM score: lowering one needs CAP_SYS_RESOURCE,
  # which the machines these tests run on do not give (runc fails there the same way)
  restrict_oom_score_adj = true
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.capsule]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.capsule.options]
    BinaryName = "{r}"
"#,
        d = dir.display(),
        s = sock.display(),
        r = runc.display()
    );
    std::fs::write(dir.join("config.toml"), config).unwrap();
    let mut c = Command::new("nsenter");
    c.arg(format!("--net=/run/netns/{name}"))
        .arg("containerd")
        .arg("--config")
        .arg(dir.join("config.toml"));
    daemon(c, &dir.join("containerd.log"));
    let e = Cri {
        dir,
        sock,
        netns: name,
    };
    assert!(
        wait_until(60, || out(e.crictl().arg("version")).status.success()),
        "containerd did not start: {}",
        std::fs::read_to_string(e.dir.join("containerd.log")).unwrap_or_default()
    );
    let sh = |cmd: &str| {
        let o = out(Command::new("sh").arg("-ec").arg(cmd).current_dir(&e.dir));
        assert!(o.status.success(), "{cmd}: {}", stderr(&o));
    };
    let tar = capsule_e2e::engines::image_tarball(&e.dir);
    sh(&format!(
        "umoci init --layout img; umoci new --image img:1; umoci unpack --image img:1 b; \
         tar -C b/rootfs -xf {t}; umoci repack --image img:1 b; \
         umoci config --image img:1 --config.cmd sleep --config.cmd 2147483647; \
         cd img && tar cf ../img.tar .",
        t = tar.display()
    ));
    let o = out(Command::new("ctr")
        .arg("--address")
        .arg(&e.sock)
        .args(["-n", "k8s.io", "image", "import", "--index-name", IMAGE])
        .arg(e.dir.join("img.tar")));
    assert!(o.status.success(), "ctr image import: {}", stderr(&o));
    e
}

impl Cri {
    fn crictl(&self) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.netns))
            .arg("crictl");
        let ep = format!("unix://{}", self.sock.display());
        c.args([
            "--runtime-endpoint",
            &ep,
            "--image-endpoint",
            &ep,
            "--timeout",
            "30s",
        ]);
        c
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = out(self.crictl().args(args));
        assert!(o.status.success(), "crictl {args:?}: {}", stderr(&o));
        stdout(&o).trim().to_string()
    }

    /// A pod sandbox under capsule-runc on the host's network: (its id, its config file).
    fn pod(&self, name: &str) -> (String, PathBuf) {
        let f = self.dir.join(format!("pod-{name}.json"));
        let cfg = serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-{}", std::process::id())},
            "log_directory": self.dir.join("logs").join(name),
            "linux": {"security_context": {"namespace_options": {"network": 2}}}
        });
        std::fs::write(&f, cfg.to_string()).unwrap();
        let id = self.ok(&["runp", "--runtime", "capsule", f.to_str().unwrap()]);
        (id, f)
    }

    /// A container of `pod` running `cmd`, created and started.
    fn container(&self, pod: &(String, PathBuf), name: &str, cmd: &[&str]) -> String {
        let f = self.dir.join(format!("ctr-{name}.json"));
        let cfg = serde_json::json!({
            "metadata": {"name": name},
            "image": {"image": IMAGE},
            "command": cmd,
            "log_path": format!("{name}.log"),
            "linux": {}
        });
        std::fs::write(&f, cfg.to_string()).unwrap();
        let id = self.ok(&[
            "create",
            &pod.0,
            f.to_str().unwrap(),
            pod.1.to_str().unwrap(),
        ]);
        self.ok(&["start", &id]);
        id
    }

    fn state(&self, id: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["inspect", id])).unwrap()
    }

    fn exec(&self, id: &str, cmd: &[&str]) -> Output {
        out(self.crictl().args(["exec", id]).args(cmd))
    }

    fn rmp(&self, pod: &str) {
        let _ = out(self.crictl().args(["rmp", "-f", pod]));
    }
}

fn name(n: &str) -> String {
    format!("{n}{}", std::process::id())
}

#[test]
fn output_exit_code_and_home() {
    let Some(c) = cri() else { return };
    let pod = c.pod(&name("out"));
    let id = c.container(&pod, "out", &["sh", "-c", "echo out $HOME; exit 7"]);
    assert!(wait_until(20, || c.state(&id)["status"]["state"] == "CONTAINER_EXITED"));
    let st = c.state(&id);
    let logs = stdout(&out(c.crictl().args(["logs", &id])));
    c.rmp(&pod.0);
    assert_eq!(st["status"]["exitCode"], 7, "{st}");
    assert_eq!(logs, "out /root\n");
}

#[test]
fn exec_and_stop() {
    let Some(c) = cri() else { return };
    let pod = c.pod(&name("exec"));
    let id = c.container(&pod, "exec", &["sleep", "1000"]);
    let o = c.exec(&id, &["sh", "-c", "cat /proc/1/cmdline; exit 4"]);
    // crictl exits 1 and names the process's status
    assert_ne!(code(&o), 0);
    assert!(stderr(&o).contains("exit code 4"), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("sleep"), "{}", stdout(&o));
    c.ok(&["stop", "-t", "1", &id]);
    let st = c.state(&id);
    c.rmp(&pod.0);
    assert_eq!(st["status"]["state"], "CONTAINER_EXITED", "{st}");
}

#[test]
fn a_pod_of_two_containers_shares_its_namespaces() {
    let Some(c) = cri() else { return };
    let pod = c.pod(&name("pod"));
    let a = c.container(&pod, "a", &["sleep", "1000"]);
    let b = c.container(&pod, "b", &["sleep", "1000"]);
    let ns = |id: &str| {
        let o = c.exec(
            id,
            &[
                "sh",
                "-c",
                "for n in ipc uts mnt; do readlink /proc/self/ns/$n; done",
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let (na, nb) = (ns(&a), ns(&b));
    c.rmp(&pod.0);
    let (la, lb): (Vec<&str>, Vec<&str>) = (na.lines().collect(), nb.lines().collect());
    // ipc and uts the pod's (joined by path), the mount namespace each container's own
    assert_eq!(la[..2], lb[..2], "{na} {nb}");
    assert_ne!(la[2], lb[2]);
}

#[test]
fn rmp_force_leaves_nothing_behind() {
    let Some(c) = cri() else { return };
    let pod = c.pod(&name("rmp"));
    let id = c.container(&pod, "rmp", &["sleep", "1000"]);
    assert!(!processes_naming(&id).is_empty());
    c.ok(&["rmp", "-f", &pod.0]);
    assert!(
        wait_until(10, || processes_naming(&id).is_empty()
            && processes_naming(&pod.0).is_empty()),
        "left: {:?} {:?}",
        processes_naming(&id),
        processes_naming(&pod.0)
    );
    for x in [&id, &pod.0] {
        assert!(!Path::new("/run/containerd/runc/k8s.io").join(x).exists());
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!mounts.contains(x.as_str()), "a mount of {x} is left");
        let found =
            out(Command::new("find").args(["/sys/fs/cgroup/pids", "-name", &format!("*{x}*")]));
        assert!(stdout(&found).is_empty(), "{}", stdout(&found));
    }
}

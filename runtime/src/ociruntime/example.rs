//! `spec`: the starter `config.json` runc's `spec` writes, byte for byte (runc 1.1.5's
//! example: busybox-style `sh` with a terminal, the three capabilities, the default
//! mounts, masked and read-only paths, all devices denied, the pid, network, ipc, uts
//! and mount namespaces, a cgroup namespace on a unified host), and with `--rootless`
//! the same converted as runc converts it (a user namespace mapping the caller's euid
//! and egid to 0, no network namespace, `/sys` bound from the host, no `gid=`/`uid=`
//! mount options, no cgroup settings). Tools and test suites write every bundle with it
//! and then edit it, so the output is runc's own: the same fields in the same order,
//! tab-indented, no trailing newline. capsule-runc runs it unchanged (what capsule adds,
//! Landlock and its default limits, is not in config.json: see `docs/oci.md`).

use serde::Serialize;
use std::path::Path;

/// The file `spec` writes in the bundle.
pub const CONFIG: &str = "config.json";

// The types below hold the fields runc's example sets, in the order runtime-spec's Go
// types (specs-go 1.0.2-dev) declare them, with their `omitempty`.

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    oci_version: &'static str,
    process: Process,
    root: Root,
    hostname: &'static str,
    mounts: Vec<Mount>,
    linux: Linux,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Process {
    terminal: bool,
    user: User,
    args: Vec<&'static str>,
    env: Vec<&'static str>,
    cwd: &'static str,
    capabilities: Capabilities,
    rlimits: Vec<Rlimit>,
    no_new_privileges: bool,
}

#[derive(Serialize)]
struct User {
    uid: u32,
    gid: u32,
}

#[derive(Serialize)]
struct Capabilities {
    bounding: Vec<&'static str>,
    effective: Vec<&'static str>,
    permitted: Vec<&'static str>,
    ambient: Vec<&'static str>,
}

#[derive(Serialize)]
struct Rlimit {
    #[serde(rename = "type")]
    typ: &'static str,
    hard: u64,
    soft: u64,
}

#[derive(Serialize)]
struct Root {
    path: &'static str,
    readonly: bool,
}

#[derive(Serialize)]
struct Mount {
    destination: &'static str,
    #[serde(rename = "type")]
    typ: &'static str,
    source: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    options: Vec<&'static str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Linux {
    #[serde(rename = "uidMappings", skip_serializing_if = "Vec::is_empty")]
    uid_mappings: Vec<IdMapping>,
    #[serde(rename = "gidMappings", skip_serializing_if = "Vec::is_empty")]
    gid_mappings: Vec<IdMapping>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resources: Option<Resources>,
    namespaces: Vec<Namespace>,
    masked_paths: Vec<&'static str>,
    readonly_paths: Vec<&'static str>,
}

#[derive(Serialize)]
struct IdMapping {
    #[serde(rename = "containerID")]
    container_id: u32,
    #[serde(rename = "hostID")]
    host_id: u32,
    size: u32,
}

#[derive(Serialize)]
struct Resources {
    devices: Vec<DeviceRule>,
}

#[derive(Serialize)]
struct DeviceRule {
    allow: bool,
    access: &'static str,
}

#[derive(Serialize)]
struct Namespace {
    #[serde(rename = "type")]
    typ: &'static str,
}

const CAPS: [&str; 3] = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"];

fn mount(
    destination: &'static str,
    typ: &'static str,
    source: &'static str,
    options: &[&'static str],
) -> Mount {
    Mount {
        destination,
        typ,
        source,
        options: options.to_vec(),
    }
}

/// The example as runc makes it; `unified`: the host's cgroups are v2 only (a cgroup
/// namespace is added); `rootless`: `Some((euid, egid))` converts it for that user.
fn example(unified: bool, rootless: Option<(u32, u32)>) -> Spec {
    let mut namespaces = vec!["pid", "network", "ipc", "uts", "mount"];
    if unified {
        namespaces.push("cgroup");
    }
    let mut mounts = vec![
        mount("/proc", "proc", "proc", &[]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        mount(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", "ro"],
        ),
        mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", "ro"],
        ),
    ];
    let mut resources = Some(Resources {
        devices: vec![DeviceRule {
            allow: false,
            access: "rwm",
        }],
    });
    let (mut uid_mappings, mut gid_mappings) = (Vec::new(), Vec::new());
    if let Some((uid, gid)) = rootless {
        namespaces.retain(|n| *n != "network" && *n != "user");
        namespaces.push("user");
        let one = |host_id| IdMapping {
            container_id: 0,
            host_id,
            size: 1,
        };
        uid_mappings.push(one(uid));
        gid_mappings.push(one(gid));
        for m in &mut mounts {
            if m.destination == "/sys" {
                *m = mount(
                    "/sys",
                    "none",
                    "/sys",
                    &["rbind", "nosuid", "noexec", "nodev", "ro"],
                );
            } else {
                m.options
                    .retain(|o| !o.starts_with("gid=") && !o.starts_with("uid="));
            }
        }
        resources = None;
    }
    Spec {
        oci_version: "1.0.2-dev",
        process: Process {
            terminal: true,
            user: User { uid: 0, gid: 0 },
            args: vec!["sh"],
            env: vec![
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "TERM=xterm",
            ],
            cwd: "/",
            capabilities: Capabilities {
                bounding: CAPS.to_vec(),
                effective: CAPS.to_vec(),
                permitted: CAPS.to_vec(),
                ambient: CAPS.to_vec(),
            },
            rlimits: vec![Rlimit {
                typ: "RLIMIT_NOFILE",
                hard: 1024,
                soft: 1024,
            }],
            no_new_privileges: true,
        },
        root: Root {
            path: "rootfs",
            readonly: true,
        },
        hostname: "runc",
        mounts,
        linux: Linux {
            uid_mappings,
            gid_mappings,
            resources,
            namespaces: namespaces
                .into_iter()
                .map(|typ| Namespace { typ })
                .collect(),
            masked_paths: vec![
                "/proc/acpi",
                "/proc/asound",
                "/proc/kcore",
                "/proc/keys",
                "/proc/latency_stats",
                "/proc/timer_list",
                "/proc/timer_stats",
                "/proc/sched_debug",
                "/sys/firmware",
                "/proc/scsi",
            ],
            readonly_paths: vec![
                "/proc/bus",
                "/proc/fs",
                "/proc/irq",
                "/proc/sys",
                "/proc/sysrq-trigger",
            ],
        },
    }
}

/// The example's text: tab-indented as Go's `json.MarshalIndent(spec, "", "\t")`, no
/// trailing newline.
pub fn render(unified: bool, rootless: Option<(u32, u32)>) -> Vec<u8> {
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"\t");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    // a struct of strings, numbers and booleans always serializes
    let _ = example(unified, rootless).serialize(&mut ser);
    out
}

/// `spec [--bundle DIR] [--rootless]`: write the example into DIR (default: the
/// working directory), refusing to replace a file that is there, as runc does.
pub fn write(bundle: Option<&Path>, rootless: bool) -> Result<(), String> {
    let dir = bundle.unwrap_or(Path::new("."));
    let path = dir.join(CONFIG);
    let ids = rootless.then(|| {
        // SAFETY: geteuid and getegid cannot fail.
        unsafe { (libc::geteuid(), libc::getegid()) }
    });
    let text = render(crate::kernel::cgroup::unified(), ids);
    // create_new: never replaces what is there, nor follows a symlink planted at the name
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => {
                format!("File {} exists. Remove it first", path.display())
            }
            _ => format!("writing {}: {e}", path.display()),
        })?;
    std::io::Write::write_all(&mut f, &text).map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // what runc 1.1.5's `runc spec` and `runc spec --rootless` (as root) write on a
    // cgroup v1 host
    const RUNC: &str = include_str!("testdata/runc-spec.json");
    const RUNC_ROOTLESS: &str = include_str!("testdata/runc-spec-rootless.json");

    #[test]
    fn byte_for_byte_what_runc_writes() {
        assert_eq!(String::from_utf8(render(false, None)).unwrap(), RUNC);
        assert_eq!(
            String::from_utf8(render(false, Some((0, 0)))).unwrap(),
            RUNC_ROOTLESS
        );
    }

    #[test]
    fn a_unified_host_adds_a_cgroup_namespace_and_rootless_maps_the_caller() {
        let v: serde_json::Value = serde_json::from_slice(&render(true, None)).unwrap();
        assert_eq!(v["linux"]["namespaces"][5]["type"], "cgroup");
        let v: serde_json::Value =
            serde_json::from_slice(&render(true, Some((1000, 1001)))).unwrap();
        let ns: Vec<&str> = v["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap())
            .collect();
        assert_eq!(ns, ["pid", "ipc", "uts", "mount", "cgroup", "user"]);
        assert_eq!(v["linux"]["uidMappings"][0]["hostID"], 1000);
        assert_eq!(v["linux"]["gidMappings"][0]["hostID"], 1001);
        assert!(v["linux"].get("resources").is_none());
    }

    #[test]
    fn the_example_is_what_capsule_runc_runs() {
        for rootless in [None, Some((1000, 1000))] {
            let s: crate::plan::container::config::Spec =
                serde_json::from_slice(&render(false, rootless)).unwrap();
            crate::plan::container::config::check(&s).unwrap();
        }
    }

    #[test]
    fn an_existing_file_is_never_replaced() {
        let d = tempfile::tempdir_in("/dev/shm").unwrap();
        write(Some(d.path()), false).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path().join(CONFIG))
                .unwrap()
                .len(),
            RUNC.len()
        );
        let e = write(Some(d.path()), true).unwrap_err();
        assert!(e.contains("exists. Remove it first"), "{e}");
        let l = tempfile::tempdir_in("/dev/shm").unwrap();
        std::os::unix::fs::symlink("/dev/shm/nothing-here-capsule", l.path().join(CONFIG)).unwrap();
        assert!(write(Some(l.path()), false).is_err());
        assert!(!Path::new("/dev/shm/nothing-here-capsule").exists());
    }
}

//! The container's plan from made-up config.json and facts: its decisions, and what it
//! refuses, naming the field.

use super::*;
use crate::limits::Limits;

/// A config.json: a small valid one, changed by `f`.
fn spec_with(f: impl FnOnce(&mut serde_json::Value)) -> Spec {
    let mut v = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": 1000, "gid": 1000, "additionalGids": [5]}, "args": ["sh"], "cwd": "/",
                    "env": ["PATH=/bin"]},
        "root": {"path": "rootfs"},
        "linux": {"namespaces": [{"type": "mount"}, {"type": "pid"}]}
    });
    f(&mut v);
    serde_json::from_value(v).unwrap()
}

/// A cgroup v1 host with memory and pids, Landlock, no AppArmor, capsule's defaults.
fn facts() -> ContainerFacts {
    ContainerFacts {
        landlock_abi: 4,
        cgroup_unified: false,
        hierarchies: vec![
            Hierarchy {
                mount: "/sys/fs/cgroup/memory".into(),
                controllers: vec!["memory".into()],
            },
            Hierarchy {
                mount: "/sys/fs/cgroup/pids".into(),
                controllers: vec!["pids".into()],
            },
        ],
        default_limits: Some(Limits {
            memory: Some(300 << 20),
            pids: Some(77),
            ..Limits::default()
        }),
        apparmor: false,
        settings: Settings::default(),
        disk_reserve: None,
        rootless: false,
    }
}

fn call() -> Create<'static> {
    Create {
        id: "c1",
        bundle: Path::new("/b"),
        systemd_cgroup: false,
        console_socket: false,
    }
}

fn plan_of(spec: &Spec, f: &ContainerFacts) -> Result<ContainerPlan, Refused> {
    container(spec, &call(), f)
}

#[test]
fn the_plan_is_made_of_the_config_and_the_facts() {
    let spec = spec_with(|c| {
        c["hostname"] = "box".into();
        c["linux"]["namespaces"] = serde_json::json!([
            {"type": "mount"}, {"type": "network", "path": "/proc/9/ns/net"},
            {"type": "user", "path": "/proc/9/ns/user"}, {"type": "pid"}
        ]);
        c["linux"]["sysctl"] = serde_json::json!({"kernel.domainname": "x"});
        c["linux"]["maskedPaths"] = serde_json::json!(["/proc/kcore"]);
        c["linux"]["devices"] =
            serde_json::json!([{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}]);
        c["mounts"] = serde_json::json!([
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/data", "type": "bind", "source": "/srv/data", "options": ["rbind", "ro", "nosuid", "rprivate"]},
            {"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755", "size=65536k", "tmpcopyup"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["ro"]}
        ]);
        c["process"]["capabilities"] = serde_json::json!({
            "bounding": ["CAP_CHOWN", "CAP_KILL"], "permitted": ["CAP_KILL"],
            "effective": ["CAP_KILL"], "ambient": ["CAP_KILL", "CAP_CHOWN"]
        });
        c["process"]["rlimits"] =
            serde_json::json!([{"type": "RLIMIT_NOFILE", "hard": 77, "soft": 70}]);
        c["linux"]["seccomp"] = serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW"});
    });
    let p = plan_of(&spec, &facts()).unwrap();
    assert_eq!(p.rootfs, Path::new("/b/rootfs"));
    assert_eq!(p.namespaces.new, libc::CLONE_NEWNS | libc::CLONE_NEWPID);
    // a user namespace is joined first
    let joined: Vec<&str> = p.namespaces.join.iter().map(|j| j.typ.as_str()).collect();
    assert_eq!(joined, ["user", "network"]);
    assert!(p.namespaces.userns && p.bind_devices);
    assert_eq!(p.hostname.as_deref(), Some("box"));
    // the network namespace is joined: its loopback is its owner's
    assert!(!p.loopback_up);
    assert_eq!(
        p.sysctl,
        [(
            "kernel.domainname".to_string(),
            "/proc/sys/kernel/domainname".to_string(),
            "x".to_string()
        )]
    );
    // the cgroup: capsule's defaults where the bundle sets none
    assert_eq!(p.cgroup.rel, Path::new("capsule-runc/c1"));
    assert_eq!(p.cgroup.defaults, ["memory=314572800", "pids=77"]);
    assert_eq!(
        p.cgroup.resources.memory.as_ref().and_then(|m| m.limit),
        Some(300 << 20)
    );
    // the mount steps
    assert_eq!(p.mounts[0].what, "mounts[0] (proc at /proc)");
    assert!(matches!(&p.mounts[0].kind, MountKind::Fs { typ, flags: 0, .. } if typ == "proc"));
    assert_eq!(
        p.mounts[1].kind,
        MountKind::Bind {
            src: "/srv/data".into(),
            recursive: true,
            attrs: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
        }
    );
    assert_eq!(p.mounts[1].propagation, [libc::MS_PRIVATE | libc::MS_REC]);
    assert_eq!(
        p.mounts[2].kind,
        MountKind::Fs {
            typ: "tmpfs".into(),
            src: "tmpfs".into(),
            flags: libc::MS_NOSUID,
            data: "mode=755,size=65536k".into(),
            copy_up: true,
        }
    );
    assert_eq!(
        p.mounts[3].kind,
        MountKind::CgroupV1 {
            ro: true,
            binds: vec![
                (
                    "/oldroot/sys/fs/cgroup/memory/capsule-runc/c1".into(),
                    "/sys/fs/cgroup/memory".into()
                ),
                (
                    "/oldroot/sys/fs/cgroup/pids/capsule-runc/c1".into(),
                    "/sys/fs/cgroup/pids".into()
                ),
            ],
        }
    );
    // the default devices, then the bundle's
    let devs: Vec<&Path> = p.devices.iter().map(|d| d.path.as_path()).collect();
    assert_eq!(devs.len(), DEFAULT_DEVICES.len() + 1);
    assert_eq!(devs[0], Path::new("/dev/null"));
    assert_eq!(
        p.devices.last().unwrap().what,
        "linux.devices[0] (/dev/fuse)"
    );
    assert_eq!(p.masked_paths, [PathBuf::from("/proc/kcore")]);
    // the process
    let kill = 1u64 << caps::Capability::CAP_KILL.index();
    let chown = 1u64 << caps::Capability::CAP_CHOWN.index();
    assert_eq!(p.process.caps.bounding, kill | chown);
    // ambient only where inheritable and permitted too (none inheritable here)
    assert_eq!(p.process.caps.ambient, 0);
    assert_eq!(
        p.process.rlimits,
        [(libc::RLIMIT_NOFILE, "RLIMIT_NOFILE".to_string(), 70, 77)]
    );
    assert_eq!((p.process.uid, p.process.gid), (1000, 1000));
    assert_eq!(p.process.groups, [5]);
    // Landlock: the root, the writable mounts and /dev; not the read-only bind or cgroup
    let ll = p.confine.landlock.as_ref().unwrap();
    assert_eq!(ll.workspace, Path::new("/"));
    assert_eq!(
        ll.writable,
        [
            PathBuf::from("/proc"),
            PathBuf::from("/run"),
            PathBuf::from("/dev")
        ]
    );
    let w = p.observe.as_ref().unwrap();
    assert_eq!(
        w.read_only,
        [PathBuf::from("/data"), PathBuf::from("/sys/fs/cgroup")]
    );
    assert!(p.confine.seccomp.is_some());
    // no HOME in process.env: the image's /etc/passwd says it
    assert!(p.process.home_from_passwd);
}

#[test]
fn an_unconfined_container_gets_no_filter_of_capsules() {
    // no linux.seccomp (Docker's seccomp=unconfined): no observer, whose filter it is
    let p = plan_of(&spec_with(|_| {}), &facts()).unwrap();
    assert!(p.confine.seccomp.is_none() && p.observe.is_none());
    let p = plan_of(
        &spec_with(|c| {
            c["linux"]["seccomp"] = serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW"})
        }),
        &facts(),
    )
    .unwrap();
    assert!(p.observe.is_some());
}

#[test]
fn a_new_network_namespace_gets_its_loopback_up() {
    let p = plan_of(
        &spec_with(|c| {
            c["linux"]["namespaces"] = serde_json::json!([{"type": "mount"}, {"type": "network"}])
        }),
        &facts(),
    )
    .unwrap();
    assert!(p.loopback_up);
}

#[test]
fn cgroups_are_optional_only_rootless_and_without_limits_of_the_bundles() {
    let bare = spec_with(|_| {});
    let limited =
        spec_with(|c| c["linux"]["resources"] = serde_json::json!({"pids": {"limit": 9}}));
    let devices = spec_with(|c| {
        c["linux"]["resources"] =
            serde_json::json!({"devices": [{"allow": false, "access": "rwm"}]})
    });
    let mut rootless = facts();
    rootless.rootless = true;
    assert!(!plan_of(&bare, &facts()).unwrap().cgroup.optional);
    assert!(plan_of(&bare, &rootless).unwrap().cgroup.optional);
    assert!(plan_of(&devices, &rootless).unwrap().cgroup.optional);
    assert!(!plan_of(&limited, &rootless).unwrap().cgroup.optional);
    // and the devices are bound, not made (no mknod in the runtime's user namespace)
    assert!(!plan_of(&bare, &facts()).unwrap().bind_devices);
    assert!(plan_of(&bare, &rootless).unwrap().bind_devices);
}

#[test]
fn home_is_looked_up_only_when_the_env_has_none() {
    for (env, lookup) in [
        (serde_json::json!(["PATH=/bin"]), true),
        (serde_json::json!(["HOME="]), true),
        (serde_json::json!(["HOME=/work"]), false),
    ] {
        let p = plan_of(&spec_with(|c| c["process"]["env"] = env), &facts()).unwrap();
        assert_eq!(p.process.home_from_passwd, lookup);
    }
}

#[test]
fn the_same_input_gives_the_same_plan() {
    let spec = spec_with(|c| {
        c["linux"]["seccomp"] = serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_ERRNO"}]});
    });
    let a = format!("{:?}", plan_of(&spec, &facts()).unwrap());
    let b = format!("{:?}", plan_of(&spec, &facts()).unwrap());
    assert_eq!(a, b);
    assert!(
        a.contains("bpf"),
        "the seccomp program is compiled in the plan"
    );
}

#[test]
fn the_bundles_own_limits_stand_and_defaults_need_their_controller() {
    let own = spec_with(|c| {
        c["linux"]["resources"] =
            serde_json::json!({"pids": {"limit": 50}, "memory": {"limit": -1}})
    });
    let p = plan_of(&own, &facts()).unwrap();
    assert!(p.cgroup.defaults.is_empty());
    assert_eq!(p.cgroup.resources.pids.as_ref().map(|p| p.limit), Some(50));
    assert_eq!(
        p.cgroup.resources.memory.as_ref().and_then(|m| m.limit),
        Some(-1)
    );
    // no pids controller: no pids default; CAPSULE_OCI_DEFAULTS=0: none at all
    let mut f = facts();
    f.hierarchies.retain(|h| h.controllers != ["pids"]);
    let p = plan_of(&spec_with(|_| {}), &f).unwrap();
    assert_eq!(p.cgroup.defaults, ["memory=314572800"]);
    f.default_limits = None;
    let p = plan_of(&spec_with(|_| {}), &f).unwrap();
    assert!(p.cgroup.defaults.is_empty() && p.cgroup.resources.memory.is_none());
}

#[test]
fn a_unified_host_mounts_cgroup2() {
    let mut f = facts();
    f.cgroup_unified = true;
    f.hierarchies = vec![Hierarchy {
        mount: "/sys/fs/cgroup".into(),
        controllers: vec![],
    }];
    let spec = spec_with(
        |c| c["mounts"] = serde_json::json!([{"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup"}]),
    );
    let p = plan_of(&spec, &f).unwrap();
    assert_eq!(p.mounts[0].kind, MountKind::Cgroup2 { ro: false });
    // every controller of the v2 root counts
    assert_eq!(p.cgroup.defaults, ["memory=314572800", "pids=77"]);
}

#[test]
fn landlock_follows_the_mounts_the_settings_and_the_kernel() {
    let ro_root = spec_with(|c| {
        c["root"]["readonly"] = true.into();
        c["mounts"] =
            serde_json::json!([{"destination": "/work", "type": "tmpfs", "source": "tmpfs"}]);
    });
    let p = plan_of(&ro_root, &facts()).unwrap();
    let ll = p.confine.landlock.unwrap();
    assert_eq!(ll.workspace, Path::new("/work"));
    assert_eq!(ll.writable, [PathBuf::from("/dev")]);
    assert!(p.root_readonly);
    let mut f = facts();
    f.landlock_abi = 0;
    assert!(plan_of(&ro_root, &f).unwrap().confine.landlock.is_none());
    let mut f = facts();
    f.settings.landlock = false;
    f.settings.observe = false;
    let p = plan_of(&ro_root, &f).unwrap();
    assert!(p.confine.landlock.is_none() && p.observe.is_none());
}

#[test]
fn what_cannot_be_honoured_is_refused_naming_the_field() {
    type Change = fn(&mut serde_json::Value);
    let cases: &[(&str, Change)] = &[
        ("process.terminal", |c| {
            c["process"]["terminal"] = true.into()
        }),
        ("linux.resources.unified", |c| {
            c["linux"]["resources"] = serde_json::json!({"unified": {"memory.high": "1"}})
        }),
        ("linux.cgroupsPath", |c| {
            c["linux"]["cgroupsPath"] = "/a/../../etc".into()
        }),
        ("process.apparmorProfile", |c| {
            c["process"]["apparmorProfile"] = "runtime/default".into()
        }),
        (
            "process.rlimits",
            |c| {
                c["process"]["rlimits"] =
                    serde_json::json!([{"type": "RLIMIT_NOPE", "hard": 1, "soft": 1}])
            },
        ),
        ("process.capabilities.bounding", |c| {
            c["process"]["capabilities"] = serde_json::json!({"bounding": ["CAP_TEST"]})
        }),
        (
            "linux.seccomp.listenerPath",
            |c| {
                c["linux"]["seccomp"] =
                    serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW", "listenerPath": "/x"})
            },
        ),
        ("linux.namespaces", |c| {
            c["linux"]["namespaces"] = serde_json::json!([{"type": "pid"}])
        }),
        ("process.cwd", |c| c["process"]["cwd"] = "rel".into()),
    ];
    for (field, change) in cases {
        let e = plan_of(&spec_with(change), &facts()).unwrap_err();
        assert_eq!(e.field(), *field, "{e}");
        assert_eq!(e.to_string().lines().count(), 1, "{e}");
    }
    // the host decides too: a memory limit without a memory controller
    let mut f = facts();
    f.hierarchies.clear();
    let spec =
        spec_with(|c| c["linux"]["resources"] = serde_json::json!({"memory": {"limit": 1 << 30}}));
    assert_eq!(
        plan_of(&spec, &f).unwrap_err().field(),
        "linux.resources.memory"
    );
    // and AppArmor where the host has it is planned
    let mut f = facts();
    f.apparmor = true;
    let spec = spec_with(|c| c["process"]["apparmorProfile"] = "runtime/default".into());
    assert_eq!(
        plan_of(&spec, &f).unwrap().process.apparmor.as_deref(),
        Some("runtime/default")
    );
}

#[test]
fn cgroup_paths() {
    assert_eq!(
        relative_path(Some("/default/c1"), "c1", false).unwrap(),
        PathBuf::from("default/c1")
    );
    assert_eq!(
        relative_path(Some("kubepods-burstable-pod1.slice:cri-containerd:abc"), "abc", true).unwrap(),
        PathBuf::from("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-abc.scope")
    );
    assert_eq!(
        relative_path(None, "abc", true).unwrap(),
        PathBuf::from("system.slice/capsule-abc.scope")
    );
    assert!(relative_path(Some("/a/../../etc"), "c", false).is_err());
}

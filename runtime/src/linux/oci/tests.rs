use super::*;
use crate::linux::plan::mount_plan;
use capsule_bundle::policy::{HiddenPath, HiddenReason, NetworkMode, NetworkPolicy, SandboxPolicy};
use std::collections::BTreeSet;

/// A policy over a real scratch tree: home with a hidden `.ssh` and a hidden capsule
/// root holding the workspace (a carve-out), a revealed folder inside another hidden one.
fn fixture() -> (tempfile::TempDir, SandboxPolicy) {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let ws = home.join(".local/share/capsule/workspaces/c");
    for d in [
        home.join(".ssh"),
        ws.clone(),
        home.join("projects/other/lib"),
        t.path().join("tmp"),
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(ws.join("capsule-manifest.json"), "{}").unwrap();
    std::fs::write(home.join(".netrc"), "secret").unwrap();
    let hidden = |p: PathBuf| HiddenPath {
        path: p,
        reason: HiddenReason::Credentials,
    };
    let p = SandboxPolicy {
        version: 1,
        capsule_name: "c".into(),
        workspace: ws.clone(),
        read_only: vec![ws.join("capsule-manifest.json")],
        tmp_dir: t.path().join("tmp"),
        home: Some(home.clone()),
        home_layer: None,
        cache_dir: None,
        writable: vec![],
        hidden: vec![
            hidden(home.join(".ssh")),
            hidden(home.join(".netrc")),
            hidden(home.join(".local/share/capsule")),
            hidden(home.join("projects/other")),
        ],
        revealed: vec![home.join("projects/other/lib")],
        pass_env: vec![],
        devices: vec![],
        network: NetworkPolicy {
            mode: NetworkMode::None,
            ..Default::default()
        },
    };
    (t, p)
}

fn plan_of(p: &SandboxPolicy) -> ExecPlan {
    ExecPlan::for_policy(
        p,
        Isolation::Full,
        vec!["/bin/sh".into()],
        vec![("PATH".into(), "/usr/bin:/bin".into())],
        p.workspace.clone(),
    )
}

fn render_plan(plan: &ExecPlan) -> Spec {
    render(plan, 1000, 1000, Path::new("rootfs"), false, &[])
        .unwrap()
        .spec
}

#[test]
fn every_step_of_the_plan_is_in_the_config() {
    let (_t, p) = fixture();
    let mut plan = plan_of(&p);
    // a home layer overlay, as the home layer adds it
    plan.mounts.push(MountStep::Overlay {
        lower: vec![p.home.clone().unwrap()],
        upper: p.tmp_dir.join("upper"),
        work: p.tmp_dir.join("work"),
        dst: p.home.clone().unwrap(),
    });
    let spec = render_plan(&plan);
    let mounts = spec.mounts().clone().unwrap();
    let linux = spec.linux().clone().unwrap();
    let masked: BTreeSet<String> = linux.masked_paths().clone().unwrap().into_iter().collect();
    let readonly: BTreeSet<String> = linux
        .readonly_paths()
        .clone()
        .unwrap()
        .into_iter()
        .collect();
    let opts = |m: &Mount| m.options().clone().unwrap_or_default();
    let mut hidden_seen = 0;
    for step in &plan.mounts {
        match step {
            MountStep::Bind { src, dst, rw, .. } if src.exists() => {
                let m = mounts
                    .iter()
                    .find(|m| m.destination() == dst && m.source().as_ref() == Some(src))
                    .unwrap_or_else(|| panic!("bind {} missing", dst.display()));
                let o = opts(m);
                assert!(o.contains(&"rbind".to_string()), "{o:?}");
                if *rw {
                    assert!(o.contains(&"rw".to_string()), "{}: {o:?}", dst.display());
                } else {
                    assert!(
                        o.iter().any(|x| x == "ro" || x == "rro"),
                        "{}: {o:?}",
                        dst.display()
                    );
                }
            }
            MountStep::Overlay { dst, upper, .. } => {
                let m = mounts
                    .iter()
                    .find(|m| m.destination() == dst && m.typ().as_deref() == Some("overlay"))
                    .expect("overlay");
                assert!(opts(m).contains(&format!("upperdir={}", upper.display())));
            }
            // a missing path has nothing to hide (the executor skips it too)
            MountStep::Mask { dst, carve_outs }
                if *carve_outs
                    || std::fs::symlink_metadata(dst)
                        .is_ok_and(|m| !m.file_type().is_symlink()) =>
            {
                hidden_seen += 1;
                let d = dst.display().to_string();
                let in_order = mounts
                    .iter()
                    .any(|m| m.destination() == dst && m.typ().as_deref() == Some("tmpfs"));
                assert!(
                    masked.contains(&d) || (in_order && readonly.contains(&d)),
                    "hidden {d} is not masked"
                );
                if *carve_outs {
                    assert!(in_order && readonly.contains(&d), "{d}");
                }
            }
            MountStep::ReadOnly { dst } => {
                assert!(readonly.contains(&dst.display().to_string()));
            }
            _ => {}
        }
    }
    assert!(hidden_seen >= 4, "{:#?}", plan.mounts);
    // every hidden path of the policy that exists is hidden in the config
    for h in &p.hidden {
        let d = h.path.display().to_string();
        let as_tmpfs = mounts
            .iter()
            .any(|m| m.destination() == &h.path && m.typ().as_deref() == Some("tmpfs"));
        assert!(masked.contains(&d) || as_tmpfs, "{d}");
    }
    // the carve-outs come after their mask, in mount order
    let pos = |dst: &Path| mounts.iter().position(|m| m.destination() == dst).unwrap();
    let capsule_root = p.home.clone().unwrap().join(".local/share/capsule");
    assert!(pos(&capsule_root) < pos(&p.workspace));
    let other = p.home.clone().unwrap().join("projects/other");
    assert!(pos(&other) < pos(&other.join("lib")));
}

#[test]
fn nothing_is_granted_and_the_network_follows_the_plan() {
    let (_t, p) = fixture();
    for (new_netns, want) in [(true, true), (false, false)] {
        let mut plan = plan_of(&p);
        plan.new_netns = new_netns;
        let spec = render_plan(&plan);
        let pr = spec.process().clone().unwrap();
        let caps = pr.capabilities().clone().unwrap();
        for set in [
            caps.bounding(),
            caps.effective(),
            caps.permitted(),
            caps.inheritable(),
            caps.ambient(),
        ] {
            assert!(set.as_ref().is_some_and(|s| s.is_empty()), "{caps:?}");
        }
        assert_eq!(pr.no_new_privileges(), Some(true));
        let linux = spec.linux().clone().unwrap();
        let has_net = linux
            .namespaces()
            .clone()
            .unwrap()
            .iter()
            .any(|n| n.typ() == LinuxNamespaceType::Network);
        assert_eq!(has_net, want);
        assert!(linux.cgroups_path().is_none());
        let um = linux.uid_mappings().clone().unwrap();
        assert_eq!(
            (
                um.len(),
                um[0].host_id(),
                um[0].container_id(),
                um[0].size()
            ),
            (1, 1000, 0, 1)
        );
        assert!(capsule_bundle::policy::oci::validate(&spec).is_ok());
    }
}

/// Whether the rendered OCI rules refuse `name` called with `args` (low 32 bits compared,
/// conditions of one rule together, rules as alternatives).
fn oci_refuses(rules: &[LinuxSyscall], name: &str, args: [u64; 6]) -> Option<u32> {
    for r in rules.iter().filter(|r| r.names().iter().any(|n| n == name)) {
        let all = r.args().iter().flatten().all(|a| {
            assert_eq!(a.op(), LinuxSeccompOperator::ScmpCmpMaskedEq);
            args[a.index()] & a.value() == a.value_two().unwrap()
        });
        if all {
            return r.errno_ret();
        }
    }
    None
}

#[test]
fn seccomp_rules_are_capsules_own() {
    let rendered = seccomp_syscalls().unwrap();
    let names: BTreeSet<String> = rendered.iter().flat_map(|r| r.names().clone()).collect();
    let own: BTreeSet<String> = seccomp::rules()
        .iter()
        .map(|r| r.name.to_string())
        .collect();
    assert_eq!(names, own);
    for (n, _) in seccomp::refused_syscalls() {
        assert_eq!(
            oci_refuses(&rendered, n, [0; 6]),
            Some(libc::EPERM as u32),
            "{n}"
        );
    }
    for n in ["clone3", "openat2"] {
        assert_eq!(oci_refuses(&rendered, n, [0; 6]), Some(libc::ENOSYS as u32));
    }
    let nu = libc::CLONE_NEWUSER as u64;
    assert!(oci_refuses(&rendered, "unshare", [nu | 0x20000, 0, 0, 0, 0, 0]).is_some());
    assert!(oci_refuses(&rendered, "unshare", [0x20000, 0, 0, 0, 0, 0]).is_none());
    assert!(oci_refuses(&rendered, "clone", [nu, 0, 0, 0, 0, 0]).is_some());
    // ioctl compared on the low 32 bits, as the kernel reads it
    for req in [seccomp::TIOCSTI, 0xffff_ffff_0000_0000 | seccomp::TIOCSTI] {
        assert!(oci_refuses(&rendered, "ioctl", [0, req, 0, 0, 0, 0]).is_some());
    }
    assert!(oci_refuses(&rendered, "ioctl", [0, 0x5401, 0, 0, 0, 0]).is_none());
    let suid = libc::S_ISUID as u64;
    assert!(oci_refuses(&rendered, "fchmodat", [0, 0, suid | 0o755, 0, 0, 0]).is_some());
    assert!(oci_refuses(&rendered, "fchmodat", [0, 0, 0o755, 0, 0, 0]).is_none());
    // personality: refused exactly off the allowed personas
    for v in [0u64, 8, 0x20000, 0x20008, 0xffff_ffff] {
        assert!(
            oci_refuses(&rendered, "personality", [v, 0, 0, 0, 0, 0]).is_none(),
            "{v:#x}"
        );
    }
    for v in [
        1u64,
        7,
        9,
        0x0040000, // ADDR_NO_RANDOMIZE
        0x1ffff,
        0x20001,
        0x20007,
        0x20009,
        0xffff_fffe,
        0x8000_0000,
    ] {
        assert!(
            oci_refuses(&rendered, "personality", [v, 0, 0, 0, 0, 0]).is_some(),
            "{v:#x}"
        );
    }
}

#[test]
fn blocks_cover_ranges_exactly() {
    for (lo, hi) in [
        (1u64, 7u64),
        (9, 0x1ffff),
        (0x20009, 0xffff_fffe),
        (5, 5),
        (0, 0xffff_ffff),
    ] {
        let b = blocks(lo, hi);
        for x in [lo.saturating_sub(1), lo, lo + 1, (lo + hi) / 2, hi, hi + 1] {
            let inside = b.iter().any(|(m, v)| x & m == *v) && x <= 0xffff_ffff;
            assert_eq!(
                inside,
                (lo..=hi).contains(&x),
                "{x:#x} in {lo:#x}..={hi:#x}"
            );
        }
    }
}

#[test]
fn rendered_mount_plan_of_the_real_root_validates() {
    let (_t, p) = fixture();
    let steps = mount_plan(&p, &[]);
    assert!(!steps.is_empty());
    let spec = render_plan(&plan_of(&p));
    capsule_bundle::policy::oci::validate(&spec).unwrap();
}

#[test]
fn the_execs_limits_are_rendered_as_resources_and_rlimits() {
    let (_t, p) = fixture();
    let mut plan = plan_of(&p);
    // no limits: none in the resources (a runtime then needs no cgroup it may write)
    let v = serde_json::to_value(render_plan(&plan)).unwrap();
    let r = &v["linux"]["resources"];
    assert!(r.get("memory").is_none() && r.get("pids").is_none() && r.get("cpu").is_none());
    plan.limits = crate::limits::Limits {
        memory: Some(512 << 20),
        pids: Some(64),
        cpus_milli: Some(1500),
        fds: Some(32),
        file_size: Some(1 << 20),
        tmp_size: Some(16 << 20),
        nproc: None,
        disk_budget: None,
    };
    plan.activity_timeout = Some(std::time::Duration::from_secs(90));
    super::super::plan::with_tmp_size(&mut plan.mounts, &p.tmp_dir, 16 << 20);
    let v = serde_json::to_value(render_plan(&plan)).unwrap();
    let r = &v["linux"]["resources"];
    assert_eq!(r["memory"]["limit"], 512 << 20, "{r}");
    assert_eq!(r["memory"]["swap"], 512 << 20, "{r}");
    assert_eq!(r["pids"]["limit"], 64, "{r}");
    assert_eq!(r["cpu"]["quota"], 150_000, "{r}");
    assert_eq!(r["cpu"]["period"], 100_000, "{r}");
    let rl = v["process"]["rlimits"].as_array().unwrap();
    let get = |t: &str| rl.iter().find(|x| x["type"] == t).cloned().unwrap();
    assert_eq!(get("RLIMIT_NOFILE")["hard"], 32);
    assert_eq!(get("RLIMIT_FSIZE")["soft"], 1 << 20);
    assert_eq!(
        v["annotations"]["dev.capsule.limits.activity-timeout"],
        "1m 30s"
    );
    // /tmp and /var/tmp: tmpfs of that size (each its own in OCI)
    let tmp: Vec<&serde_json::Value> = v["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["destination"] == "/tmp" || m["destination"] == "/var/tmp")
        .collect();
    assert!(!tmp.is_empty());
    for m in tmp {
        assert_eq!(m["type"], "tmpfs", "{m}");
        assert!(m["options"].to_string().contains("size=16777216"), "{m}");
    }
}

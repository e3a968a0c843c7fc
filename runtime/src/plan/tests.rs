//! The plan made from made-up host facts: paths that do not exist on this machine, so a
//! plan that looked at the host would differ.

use super::*;
use crate::home::caches::CacheLayer;
use crate::home::layer::LayerPaths;
use crate::linux::plan::view::{Entry, EntryKind};
use crate::linux::plan::{SystemDir, SystemFacts};
use capsule_bundle::policy::{HiddenPath, HiddenReason, NetworkPolicy};
use std::collections::HashMap;

const HOME: &str = "/nowhere/home/u";

fn policy() -> SandboxPolicy {
    SandboxPolicy {
        version: 1,
        capsule_name: "c".into(),
        workspace: "/nowhere/root/workspaces/c".into(),
        read_only: vec![],
        tmp_dir: "/nowhere/root/bundles/c/tmp".into(),
        home: Some(HOME.into()),
        home_layer: None,
        cache_dir: None,
        writable: vec![],
        hidden: vec![
            HiddenPath {
                path: format!("{HOME}/.ssh").into(),
                reason: HiddenReason::Credentials,
            },
            HiddenPath {
                path: format!("{HOME}/.aws").into(),
                reason: HiddenReason::Credentials,
            },
            HiddenPath {
                path: format!("{HOME}/.cache/secret").into(),
                reason: HiddenReason::Credentials,
            },
        ],
        revealed: vec![],
        pass_env: vec![],
        devices: vec![],
        network: NetworkPolicy::default(),
    }
}

fn resolved(policy: &SandboxPolicy, isolation: Isolation) -> ResolvedPolicy<'_> {
    ResolvedPolicy {
        policy,
        isolation,
        landlock_best_effort: false,
        argv: vec!["true".into()],
        env: vec![
            ("DISPLAY".into(), ":0".into()),
            ("PATH".into(), "/usr/bin".into()),
            ("TMPDIR".into(), "/tmp".into()),
        ],
        cwd: policy.workspace.clone(),
        workspace: policy.workspace.clone(),
        stdio: Stdio::Inherit,
        timeout: None,
        activity_timeout: None,
        limits: Default::default(),
        cgroups_found_here: false,
        disk_reserve: Default::default(),
        list_reads: false,
        list_writes: true,
        prepared: None,
        login: vec![],
    }
}

fn facts() -> HostFacts {
    let upper = PathBuf::from("/nowhere/root/bundles/c/home/upper");
    HostFacts {
        system: SystemFacts {
            dirs: vec![
                ("/usr".into(), SystemDir::Folder),
                ("/bin".into(), SystemDir::Symlink("usr/bin".into())),
            ],
            var_tmp: true,
            git: vec![],
            root: false,
            sockets: vec![],
        },
        devices: vec!["null".into(), "dri/card0".into()],
        home: Some(HomeFacts {
            home: HOME.into(),
            entries: vec![Entry {
                rel: ".cache".into(),
                src: format!("{HOME}/.cache").into(),
                kind: EntryKind::Dir,
            }],
            layer: LayerPaths {
                upper: upper.clone(),
                work: "/nowhere/root/bundles/c/home/work".into(),
            },
            caches: vec![CacheLayer {
                tool: "cargo",
                target: format!("{HOME}/.cargo/registry").into(),
                lower: None,
                upper: "/nowhere/root/bundles/c/cache/cargo".into(),
                work: "/nowhere/root/bundles/c/cache/.work/cargo".into(),
            }],
            npmrc: Some("/nowhere/root/bundles/c/npmrc.filtered".into()),
            credentials: vec![],
            // the task left an ~/.aws in the layer: its mask stays
            in_upper: HashMap::from([
                (".ssh".into(), false),
                (".aws".into(), true),
                (".cache/secret".into(), false),
            ]),
        }),
        reveals: None,
        cgroup_procs: vec!["/nowhere/cgroup/cgroup.procs".into()],
    }
}

fn masks(plan: &ExecPlan) -> Vec<&Path> {
    plan.mounts
        .iter()
        .filter_map(|s| match s {
            MountStep::Mask { dst, .. } => Some(dst.as_path()),
            _ => None,
        })
        .collect()
}

#[test]
fn the_plan_is_made_of_the_facts_alone() {
    let p = policy();
    let plan = plan(&resolved(&p, Isolation::Full), &facts());
    // the system dirs as the facts say, whatever this machine has
    assert!(matches!(&plan.mounts[0], MountStep::Bind { dst, .. } if dst == Path::new("/usr")));
    assert!(
        matches!(&plan.mounts[1], MountStep::Symlink { dst, target } if dst == Path::new("/bin") && target == Path::new("usr/bin"))
    );
    assert!(plan
        .mounts
        .iter()
        .any(|s| matches!(s, MountStep::Bind { dst, .. } if dst == Path::new("/var/tmp"))));
    // the devices beyond the defaults, in the policy and on /dev
    assert_eq!(plan.policy.devices, vec!["dri/card0".to_string()]);
    assert!(plan
        .mounts
        .iter()
        .any(|s| matches!(s, MountStep::Dev { extra, .. } if extra == &["dri/card0".to_string()])));
    // no display
    assert!(!plan.env.iter().any(|(k, _)| k == "DISPLAY"));
    assert_eq!(
        plan.cgroup_procs,
        vec![PathBuf::from("/nowhere/cgroup/cgroup.procs")]
    );
    // the view right after the home's own bind, the cache right after the view
    let home_bind = plan
        .mounts
        .iter()
        .position(|s| matches!(s, MountStep::Bind { dst, .. } if dst == Path::new(HOME)))
        .expect("the home is bound");
    assert!(matches!(&plan.mounts[home_bind + 1], MountStep::HomeView(v) if v.entries.len() == 1));
    assert!(
        matches!(&plan.mounts[home_bind + 2], MountStep::Bind { dst, rw: true, .. } if dst.ends_with(".cargo/registry"))
    );
    assert!(plan.mounts.iter().any(
        |s| matches!(s, MountStep::Bind { dst, rw: false, .. } if dst == &Path::new(HOME).join(".npmrc"))
    ));
    assert!(plan.policy.writable.contains(&PathBuf::from(HOME)));
    // ~/.ssh lies outside every entry and is not in the layer: the view leaves it absent
    // and its mask goes; ~/.aws is in the layer: masked; ~/.cache/secret is inside a
    // folder entry: kept absent by the view
    let m = masks(&plan);
    assert!(!m.contains(&Path::new("/nowhere/home/u/.ssh")), "{m:?}");
    assert!(m.contains(&Path::new("/nowhere/home/u/.aws")), "{m:?}");
    let MountStep::HomeView(v) = &plan.mounts[home_bind + 1] else {
        unreachable!()
    };
    assert_eq!(v.absent, vec![PathBuf::from(".cache/secret")]);
    // the same facts, the same plan
    assert_eq!(
        plan.digest(),
        super::plan(&resolved(&p, Isolation::Full), &facts()).digest()
    );
}

#[test]
fn a_path_the_facts_did_not_look_at_keeps_its_mask() {
    let p = policy();
    let mut f = facts();
    if let Some(h) = f.home.as_mut() {
        h.in_upper.clear();
    }
    let plan = plan(&resolved(&p, Isolation::Full), &f);
    let m = masks(&plan);
    assert!(m.contains(&Path::new("/nowhere/home/u/.ssh")), "{m:?}");
}

#[test]
fn revealed_folders_are_shown_at_both_places() {
    let p = policy();
    let mut f = facts();
    f.reveals = Some(Reveals {
        source: "/nowhere/src/app".into(),
        root: "/nowhere/root".into(),
        folders: vec!["/nowhere/src/shared".into()],
    });
    let plan = plan(&resolved(&p, Isolation::Full), &f);
    assert_eq!(
        plan.policy.revealed,
        vec![
            PathBuf::from("/nowhere/src/shared"),
            PathBuf::from("/nowhere/root/workspaces/shared")
        ]
    );
}

#[test]
fn weaker_isolation_plans_no_mounts_and_the_real_tmp() {
    let p = policy();
    let plan = plan(&resolved(&p, Isolation::Weaker), &facts());
    assert!(plan.mounts.is_empty());
    assert!(plan.watched.is_empty());
    assert_eq!(plan.policy.devices, vec!["dri/card0".to_string()]);
    assert!(plan
        .env
        .iter()
        .any(|(k, v)| k == "TMPDIR" && v.as_os_str() == p.tmp_dir.as_os_str()));
    // the home stays read-only: no writable home without an overlay
    assert!(!plan.policy.writable.contains(&PathBuf::from(HOME)));
}

#[test]
fn home_view_goes_before_deeper_steps() {
    let home = Path::new("/root");
    let steps = vec![
        MountStep::Bind {
            src: "/usr".into(),
            dst: "/usr".into(),
            rw: false,
            optional: true,
        },
        MountStep::Bind {
            src: "/root".into(),
            dst: "/root".into(),
            rw: false,
            optional: true,
        },
        MountStep::Mask {
            dst: "/root/.ssh".into(),
            carve_outs: false,
        },
        MountStep::ReadOnly { dst: "/x".into() },
    ];
    assert_eq!(home_position(&steps, home), 2);
    assert_eq!(home_position(&steps[2..], home), 0);
    assert_eq!(before_seals(&steps), 3);
}

#[test]
fn mapped_paths() {
    let ws = Path::new("/root/.local/share/capsule/workspaces/app");
    assert_eq!(
        mapped_path(Path::new("/src/shared"), Path::new("/src/app"), ws),
        PathBuf::from("/root/.local/share/capsule/workspaces/shared")
    );
    assert_eq!(
        mapped_path(Path::new("/src/libs/x"), Path::new("/src/app"), ws),
        PathBuf::from("/root/.local/share/capsule/workspaces/libs/x")
    );
}

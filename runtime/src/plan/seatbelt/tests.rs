//! The macOS plan and its rendering: the profile is the plan's (a path the plan hides is
//! denied, a root it makes writable is allowed, its network mode is the profile's, even
//! where the resolved policy says otherwise), the same profile as the generator makes
//! from the policy alone, and the plan made from the gathered facts equals the one made
//! with the live resolver.

use super::*;
use capsule_bundle::policy::{HiddenPath, HiddenReason, NetworkPolicy};
use capsule_seatbelt::{generate_checked, Evaluator, HostResolver, ModelResolver, Target};

const NONCE: &str = "capsule-00112233445566778899aabbccddeeff";

fn policy(home: &Path) -> SandboxPolicy {
    let root = home.join("Library/capsule");
    SandboxPolicy {
        version: 1,
        capsule_name: "demo".into(),
        workspace: root.join("workspaces/demo"),
        read_only: vec![root.join("workspaces/demo/capsule-manifest.json")],
        tmp_dir: root.join("bundles/demo/tmp"),
        home: Some(home.to_path_buf()),
        home_layer: Some(root.join("bundles/demo/home")),
        cache_dir: Some(root.join("bundles/demo/cache")),
        writable: vec![],
        hidden: vec![
            HiddenPath {
                path: home.join(".aws"),
                reason: HiddenReason::Credentials,
            },
            HiddenPath {
                path: "/tmp/ssh-agent.abc".into(),
                reason: HiddenReason::Requested,
            },
        ],
        revealed: vec![],
        pass_env: vec![],
        devices: vec![],
        network: NetworkPolicy {
            mode: NetworkMode::None,
            ..Default::default()
        },
    }
}

fn request(p: &SandboxPolicy) -> SeatbeltRequest<'_> {
    SeatbeltRequest {
        policy: p,
        nonce: Nonce::parse(NONCE).unwrap(),
        network: None,
        proxy_port: None,
        allow_keychain: false,
        tmpdir: Some(p.tmp_dir.join("task-1")),
        env: vec![(
            "PATH".into(),
            format!("/usr/bin:{}/.cargo/bin", p.home.as_ref().unwrap().display()).into(),
        )],
    }
}

fn planned(p: &SandboxPolicy) -> SeatbeltPlan {
    let req = request(p);
    plan(&req, &gather(&req, &ModelResolver::macos())).unwrap()
}

/// (read allowed, write allowed) of `path` under `plan`'s profile.
fn access(plan: &SeatbeltPlan, path: &Path) -> (bool, bool) {
    let g = render(plan).unwrap();
    let ev = Evaluator::new(&g.profile, &g.params).unwrap();
    let t = Target::path(path);
    (
        ev.decide("file-read-data", &t).allow,
        ev.decide("file-write-data", &t).allow,
    )
}

#[test]
fn the_profile_of_the_plan_is_the_generators_of_the_policy() {
    let p = policy(Path::new("/Users/u"));
    let req = request(&p);
    let mut inp = ProfileInputs::new(&p, req.nonce.clone());
    inp.tmpdir = req.tmpdir.clone();
    inp.env_dirs = env_dirs(req.env.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str())));
    let want = generate_checked(&inp, &ModelResolver::macos()).unwrap();
    let pl = planned(&p);
    let got = render(&pl).unwrap();
    assert_eq!(got.text, want.text);
    assert_eq!(got.params, want.params);
    assert_eq!(pl.task_env, task_env(&want.effective, &want.task_tmpdir));
    // the task's TMPDIR, canonical, reaches the command
    assert!(pl
        .env
        .iter()
        .any(|(k, v)| k == "TMPDIR" && *v == *pl.task_tmpdir.as_os_str()));
    assert!(pl.env.iter().any(|(k, _)| k == "PATH"));
}

#[test]
fn the_plan_decides_the_home_view_hidden_paths_and_writable_set() {
    let p = policy(Path::new("/Users/u"));
    let pl = planned(&p);
    let hidden = |q: &str| pl.policy.hidden.iter().any(|h| h.path == Path::new(q));
    // the policy's, a default credential that is not in the policy, the home itself
    assert!(hidden("/Users/u/.aws"));
    assert!(hidden("/Users/u/.ssh"));
    assert!(hidden("/Users/u"));
    // canonical as Seatbelt matches it
    assert!(hidden("/private/tmp/ssh-agent.abc"));
    // the home view: its visible list and the PATH folder in the home, read-only
    assert!(pl.policy.revealed.contains(&"/Users/u/.gitconfig".into()));
    assert!(pl.policy.revealed.contains(&"/Users/u/.cargo/bin".into()));
    for w in [&pl.task_tmpdir, p.home_layer.as_ref().unwrap()] {
        assert!(pl.policy.writable.contains(w), "{}", w.display());
    }
    assert_eq!(access(&pl, Path::new("/Users/u/.gitconfig")), (true, false));
    assert_eq!(
        access(&pl, Path::new("/Users/u/.ssh/id_rsa")),
        (false, false)
    );
    assert_eq!(access(&pl, &p.workspace.join("src/main.rs")), (true, true));
}

#[test]
fn a_path_the_plan_hides_is_denied() {
    let p = policy(Path::new("/Users/u"));
    let mut pl = planned(&p);
    let secret = p.workspace.join("secret.env");
    assert_eq!(access(&pl, &secret), (true, true));
    // hidden by the plan alone: the resolved policy still has it readable and writable
    pl.policy.hidden.push(HiddenPath {
        path: secret.clone(),
        reason: HiddenReason::Requested,
    });
    assert_eq!(access(&pl, &secret), (false, false));
    let g = render(&pl).unwrap();
    assert!(g.params.values().any(|v| Path::new(v) == secret));
}

#[test]
fn a_root_the_plan_makes_writable_is_allowed() {
    let p = policy(Path::new("/Users/u"));
    let mut pl = planned(&p);
    let out = PathBuf::from("/Users/u/Library/capsule/out");
    assert!(!access(&pl, &out.join("f")).1);
    pl.policy.writable.push(out.clone());
    assert!(access(&pl, &out.join("f")).1);
}

#[test]
fn the_network_mode_is_the_plans() {
    let p = policy(Path::new("/Users/u"));
    let mut pl = planned(&p);
    let remote = Target::Remote {
        host: "203.0.113.7".into(),
        port: 443,
    };
    let allowed = |pl: &SeatbeltPlan| {
        let g = render(pl).unwrap();
        let ev = Evaluator::new(&g.profile, &g.params).unwrap();
        ev.decide("network-outbound", &remote).allow
    };
    assert!(!allowed(&pl));
    pl.policy.network.mode = NetworkMode::Open;
    assert!(allowed(&pl));
    // and the request's mode is planned
    let mut req = request(&p);
    req.network = Some(NetworkMode::Open);
    let f = gather(&req, &ModelResolver::macos());
    assert_eq!(
        plan(&req, &f).unwrap().policy.network.mode,
        NetworkMode::Open
    );
}

#[test]
fn the_gathered_facts_plan_as_the_live_resolver_does() {
    // a home reached through a symlink, its ~/.ssh another one, on the host's file system
    let t = tempfile::tempdir().unwrap();
    let top = std::fs::canonicalize(t.path()).unwrap();
    let real = top.join("real-home");
    std::fs::create_dir_all(top.join("keys")).unwrap();
    std::fs::create_dir_all(real.join(".cargo/bin")).unwrap();
    std::os::unix::fs::symlink(top.join("keys"), real.join(".ssh")).unwrap();
    let home = t.path().join("home");
    std::os::unix::fs::symlink(&real, &home).unwrap();
    let p = policy(&home);
    let req = request(&p);
    let f = gather(&req, &HostResolver);
    let from_facts = plan(&req, &f).unwrap();
    let live = effective_policy(&req.inputs(), &HostResolver).unwrap();
    assert_eq!(from_facts.policy, live);
    assert!(from_facts
        .policy
        .hidden
        .iter()
        .any(|h| h.path == top.join("keys")));
    // the plan looks nothing up: the same facts give the same plan with the home gone
    std::fs::remove_file(&home).unwrap();
    assert_eq!(plan(&req, &f).unwrap().policy, live);
}

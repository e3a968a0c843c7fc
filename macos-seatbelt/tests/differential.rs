//! Differential test: on random synthetic trees, the evaluator's answer on the generated
//! (and re-parsed) profile equals the policy model's answer ([`SandboxPolicy::access`] of
//! the effective policy), path for path, for reads, exec and writes.

mod common;
use capsule_bundle::policy::{Access, HiddenPath, HiddenReason, NetworkMode, SandboxPolicy};
use capsule_seatbelt::{
    generate_checked, parse, Evaluator, ModelResolver, Nonce, ProfileInputs, Target,
};
use proptest::prelude::*;
use std::path::PathBuf;

/// Paths under a small alphabet so rules overlap often (`a` vs `ab`: component
/// boundaries), some under `/tmp` so canonicalization (`/private/tmp`) is exercised.
fn path() -> impl Strategy<Value = PathBuf> {
    (
        prop_oneof![Just("/Users/u"), Just("/tmp"), Just("/private/tmp")],
        proptest::collection::vec(
            prop_oneof![Just("a"), Just("ab"), Just("b"), Just(".s"), Just("c d")],
            1..5,
        ),
    )
        .prop_map(|(root, comps)| {
            let mut p = PathBuf::from(root);
            for c in comps {
                p.push(c);
            }
            p
        })
}

fn paths(max: usize) -> impl Strategy<Value = Vec<PathBuf>> {
    proptest::collection::vec(path(), 0..max)
}

#[derive(Debug, Clone)]
struct Tree {
    policy: SandboxPolicy,
    task_tmp: Option<PathBuf>,
    targets: Vec<PathBuf>,
}

fn tree() -> impl Strategy<Value = Tree> {
    (
        (
            path(),
            path(),
            proptest::option::of(path()),
            proptest::option::of(path()),
        ),
        (paths(6), paths(4), paths(4), paths(4)),
        proptest::option::of(path()),
        paths(12),
    )
        .prop_map(
            |(
                (ws, tmp, layer, cache),
                (hidden, revealed, writable, read_only),
                task_tmp,
                extra,
            )| {
                let mut p = common::policy(NetworkMode::None);
                p.workspace = ws;
                p.tmp_dir = tmp;
                p.home_layer = layer;
                p.cache_dir = cache;
                p.hidden = hidden
                    .into_iter()
                    .map(|path| HiddenPath {
                        path,
                        reason: HiddenReason::Requested,
                    })
                    .collect();
                p.revealed = revealed;
                p.writable = writable;
                p.read_only = read_only;
                // targets: every named path, a child, a sibling sharing a prefix, and extras
                let mut targets = extra;
                let named: Vec<PathBuf> = [p.workspace.clone(), p.tmp_dir.clone()]
                    .into_iter()
                    .chain(p.hidden.iter().map(|h| h.path.clone()))
                    .chain(p.revealed.iter().cloned())
                    .chain(p.writable.iter().cloned())
                    .chain(p.read_only.iter().cloned())
                    .collect();
                for n in named {
                    targets.push(n.join("child"));
                    targets.push(PathBuf::from(format!("{}b", n.display())));
                    if let Some(parent) = n.parent() {
                        targets.push(parent.to_path_buf());
                    }
                    targets.push(n);
                }
                Tree {
                    policy: p,
                    task_tmp,
                    targets,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn evaluator_agrees_with_the_policy_model(t in tree()) {
        let r = ModelResolver::macos();
        let mut inp = ProfileInputs::new(&t.policy, Nonce::parse(common::NONCE).unwrap());
        inp.tmpdir = t.task_tmp.clone();
        let g = generate_checked(&inp, &r).unwrap();
        let parsed = parse::parse(&g.text).unwrap();
        let ev = Evaluator::new(&parsed, &g.params).unwrap();
        for target in &t.targets {
            // the kernel sees resolved paths
            let target = capsule_seatbelt::canon::canonicalize(target, &r).unwrap();
            let want = g.effective.access(&target);
            let tg = Target::Path(target.clone());
            let read = ev.decide("file-read-data", &tg);
            let exec = ev.decide("process-exec", &tg);
            let write = ev.decide("file-write-data", &tg);
            let create = ev.decide("file-write-create", &tg);
            prop_assert_eq!(read.allow, want != Access::Hidden, "read {:?}: model {:?}", target, want);
            prop_assert_eq!(exec.allow, want != Access::Hidden, "exec {:?}: model {:?}", target, want);
            prop_assert_eq!(write.allow, want == Access::ReadWrite, "write {:?}: model {:?}", target, want);
            prop_assert_eq!(create.allow, want == Access::ReadWrite, "create {:?}: model {:?}", target, want);
        }
        // and the effective policy is the given one plus the writable TMPDIR/home layer/cache
        let tmp = capsule_seatbelt::canon::canonicalize(t.task_tmp.as_ref().unwrap_or(&t.policy.tmp_dir), &r).unwrap();
        prop_assert!(g.effective.writable.contains(&tmp));
    }
}

/// The differential test must be able to fail: a profile missing one deny is caught.
#[test]
fn a_dropped_deny_is_caught() {
    let p = common::policy(NetworkMode::None);
    let r = ModelResolver::macos();
    let g = generate_checked(&common::inputs(&p), &r).unwrap();
    let mut broken = g.profile.clone();
    // drop the first deny rule on reads
    let idx = broken
        .items
        .iter()
        .position(|i| matches!(i, capsule_seatbelt::sbpl::Item::Rule(r)
            if r.action == capsule_seatbelt::sbpl::Action::Deny && r.operations[0].name() == "file-read*"))
        .unwrap();
    broken.items.remove(idx);
    let ev = Evaluator::new(&broken, &g.params).unwrap();
    let t = Target::path("/Users/u/.ssh/id_rsa");
    assert_eq!(
        g.effective
            .access(std::path::Path::new("/Users/u/.ssh/id_rsa")),
        Access::Hidden
    );
    assert!(
        ev.decide("file-read-data", &t).allow,
        "the broken profile leaks, and the comparison sees it"
    );
}

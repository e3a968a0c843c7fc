//! Cost of making a profile per exec: generate + round trip + lint (`generate_checked`)
//! for policies with 8, 100 and 1000 hidden paths, side by side with spawning `/bin/true`
//! (the cheapest possible exec) on this machine. Prints medians of N runs.
//!
//! `cargo run --release -p capsule-seatbelt --example bench` (or `hack/bench-seatbelt.sh`).

use capsule_bundle::policy::{HiddenPath, HiddenReason, NetworkMode, NetworkPolicy, SandboxPolicy};
use capsule_seatbelt::{generate_checked, ModelResolver, Nonce, ProfileInputs};
use std::time::{Duration, Instant};

fn policy(hidden: usize) -> SandboxPolicy {
    let root = "/Users/u/Library/Application Support/capsule";
    SandboxPolicy {
        version: 1,
        capsule_name: "bench".into(),
        workspace: format!("{root}/workspaces/bench").into(),
        read_only: vec![format!("{root}/workspaces/bench/capsule-manifest.json").into()],
        tmp_dir: format!("{root}/bundles/bench/tmp").into(),
        home: Some("/Users/u".into()),
        home_layer: Some(format!("{root}/bundles/bench/home").into()),
        cache_dir: Some(format!("{root}/bundles/bench/cache").into()),
        writable: vec![],
        hidden: (0..hidden)
            .map(|i| HiddenPath {
                path: format!("/Users/u/src/project-{i}").into(),
                reason: HiddenReason::SiblingProject,
            })
            .chain(std::iter::once(HiddenPath {
                path: root.into(),
                reason: HiddenReason::ToolState,
            }))
            .collect(),
        revealed: vec!["/Users/u/.cargo/bin".into()],
        pass_env: vec![],
        devices: vec![],
        network: NetworkPolicy {
            mode: NetworkMode::None,
            ..Default::default()
        },
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let n = 51;
    let r = ModelResolver::macos();
    let nonce = Nonce::parse("capsule-0123456789abcdef").expect("nonce");
    let spawn = median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                let _ = std::process::Command::new("/bin/true").status();
                t.elapsed()
            })
            .collect(),
    );
    println!(
        "spawn /bin/true: median {:.3} ms (n={n})",
        spawn.as_secs_f64() * 1e3
    );
    for hidden in [8, 100, 1000] {
        let p = policy(hidden);
        let mut bytes = 0;
        let d = median(
            (0..n)
                .map(|_| {
                    let t = Instant::now();
                    let g = generate_checked(&ProfileInputs::new(&p, nonce.clone()), &r)
                        .expect("profile");
                    bytes = g.text.len();
                    t.elapsed()
                })
                .collect(),
        );
        println!(
            "generate+parse+lint, {hidden:>4} hidden paths: median {:.3} ms, {bytes} bytes of profile, {:.2}x a spawn of /bin/true",
            d.as_secs_f64() * 1e3,
            d.as_secs_f64() / spawn.as_secs_f64()
        );
    }
}

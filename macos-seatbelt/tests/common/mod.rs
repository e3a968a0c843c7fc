//! Shared fixtures: a macOS-like capsule policy.
#![allow(dead_code)]

use capsule_bundle::policy::{HiddenPath, HiddenReason, NetworkMode, NetworkPolicy, SandboxPolicy};
use capsule_seatbelt::{Nonce, ProfileInputs};
use std::path::PathBuf;

pub const ROOT: &str = "/Users/u/Library/Application Support/capsule";
pub const WS: &str = "/Users/u/Library/Application Support/capsule/workspaces/demo";
pub const BUNDLE: &str = "/Users/u/Library/Application Support/capsule/bundles/demo";
pub const TASK_TMP: &str = "/Users/u/Library/Application Support/capsule/bundles/demo/tmp/task-1";
pub const NONCE: &str = "capsule-00112233445566778899aabbccddeeff";
pub const PROXY_PORT: u16 = 3128;

fn hid(p: &str, reason: HiddenReason) -> HiddenPath {
    HiddenPath {
        path: p.into(),
        reason,
    }
}

/// A capsule as `open` would resolve it on a Mac (one hidden path spelled through `/tmp`
/// to exercise both spellings).
pub fn policy(mode: NetworkMode) -> SandboxPolicy {
    SandboxPolicy {
        version: 1,
        capsule_name: "demo".into(),
        workspace: WS.into(),
        read_only: vec![
            format!("{WS}/capsule-manifest.json").into(),
            format!("{WS}/.kitsoki-capsule").into(),
        ],
        tmp_dir: format!("{BUNDLE}/tmp").into(),
        home: Some("/Users/u".into()),
        home_layer: Some(format!("{BUNDLE}/home").into()),
        cache_dir: Some(format!("{BUNDLE}/cache").into()),
        writable: vec!["/Users/u/shared-out".into()],
        hidden: vec![
            hid("/Users/u/.ssh", HiddenReason::Credentials),
            hid("/Users/u/.aws", HiddenReason::Credentials),
            hid("/Users/u/.cargo", HiddenReason::Requested),
            hid("/Users/u/Documents", HiddenReason::PersonalFiles),
            hid("/Users/u/.claude", HiddenReason::AgentLogins),
            hid("/Users/u/src/other-project", HiddenReason::SiblingProject),
            hid(ROOT, HiddenReason::ToolState),
            hid("/tmp/ssh-agent.abc", HiddenReason::Requested),
        ],
        revealed: vec!["/Users/u/.cargo/bin".into()],
        pass_env: vec![],
        devices: vec![],
        network: NetworkPolicy {
            mode,
            ..Default::default()
        },
    }
}

pub fn inputs(p: &SandboxPolicy) -> ProfileInputs<'_> {
    let mut i = ProfileInputs::new(p, Nonce::parse(NONCE).unwrap());
    i.tmpdir = Some(PathBuf::from(TASK_TMP));
    if p.network.mode == NetworkMode::Allowlist {
        i.proxy_port = Some(PROXY_PORT);
    }
    i
}

pub const MODES: &[NetworkMode] = &[
    NetworkMode::None,
    NetworkMode::Off,
    NetworkMode::Allowlist,
    NetworkMode::Open,
];

//! `capsule seatbelt`: the macOS profile of an open capsule (found through its bundle's
//! records) or of a policy.json, as text or JSON, on Linux. (The profile's semantics are
//! tested in `capsule-seatbelt`; here: the command's inputs, outputs and errors.)

use capsule_bundle::policy::{HiddenPath, HiddenReason, NetworkMode, NetworkPolicy, SandboxPolicy};
use capsule_e2e::sandbox;
use capsule_e2e::*;
use std::path::Path;

const NONCE: &str = "capsule-0123456789abcdef";

/// A capsule root holding one open capsule "demo" (records written as `open` would).
fn root_with_capsule(dir: &Path) -> SandboxPolicy {
    let root = dir.join("root");
    let ws = root.join("workspaces/demo");
    let bundle = root.join("bundles/demo");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(bundle.join("tmp")).unwrap();
    let policy = SandboxPolicy {
        version: 1,
        capsule_name: "demo".into(),
        workspace: ws.clone(),
        read_only: vec![ws.join("capsule-manifest.json")],
        tmp_dir: bundle.join("tmp"),
        home: Some("/home/someone".into()),
        home_layer: None,
        cache_dir: None,
        writable: vec![],
        hidden: vec![
            HiddenPath {
                path: "/home/someone/.ssh".into(),
                reason: HiddenReason::Credentials,
            },
            HiddenPath {
                path: root.clone(),
                reason: HiddenReason::ToolState,
            },
        ],
        revealed: vec![],
        pass_env: vec![],
        devices: vec![],
        network: NetworkPolicy {
            mode: NetworkMode::None,
            ..Default::default()
        },
    };
    sandbox::write_bundle(&bundle, &policy);
    policy
}

#[test]
fn prints_the_profile_of_an_open_capsule_as_json() {
    let d = scratch();
    let policy = root_with_capsule(d.path());
    let root = d.path().join("root");
    let r = Runner::Current;
    let o = run(r
        .capsule(&root)
        .args(["seatbelt", "demo", "--json", "--nonce", NONCE]));
    assert_ok(&o, "seatbelt --json");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON object");
    let profile = v["profile"].as_str().unwrap();
    assert!(profile.contains(&format!("(deny default (with message \"{NONCE}\"))")));
    assert!(
        profile.contains("(remote ip \"localhost:*\")"),
        "network none: loopback only"
    );
    // paths are parameters, never pasted into the text
    let ws = policy.workspace.to_str().unwrap();
    assert_eq!(v["params"]["WORKSPACE"], ws);
    assert!(!profile.contains(ws));
    let params = v["params"].as_object().unwrap();
    assert!(params
        .iter()
        .any(|(k, v)| k.starts_with("HIDDEN_") && v == "/home/someone/.ssh"));
    // default credential paths are hidden even when the policy did not list them
    assert!(params
        .iter()
        .any(|(k, v)| k.starts_with("HIDDEN_") && v == "/home/someone/.netrc"));
    let defines: Vec<&str> = v["define_args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert!(defines
        .windows(2)
        .any(|w| w[0] == "-D" && w[1] == format!("WORKSPACE={ws}")));
    assert_eq!(v["env"][0][0], "TMPDIR");
    // by workspace path as well
    let o = run(r
        .capsule(&root)
        .args(["seatbelt", "--json", "--nonce", NONCE])
        .arg(&policy.workspace));
    assert_ok(&o, "seatbelt <workspace path>");
    let w: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(w["profile"], v["profile"]);
}

#[test]
fn renders_a_policy_file_per_mode() {
    let d = scratch();
    let policy = root_with_capsule(d.path());
    let file = d.path().join("root/bundles/demo/policy.json");
    let r = Runner::Current;
    let o = run(r
        .capsule(d.path())
        .arg("seatbelt")
        .arg("--policy")
        .arg(&file)
        .args(["--network", "open"]));
    assert_ok(&o, "seatbelt --policy");
    let text = stdout(&o);
    assert!(text.starts_with("(version 1)\n"));
    assert!(text.contains("(remote ip \"*:*\")"));
    assert!(!text.contains(policy.workspace.to_str().unwrap()));
    assert!(
        stderr(&o).contains("/usr/bin/sandbox-exec -f profile.sb"),
        "{}",
        stderr(&o)
    );
    let o = run(r
        .capsule(d.path())
        .arg("seatbelt")
        .arg("--policy")
        .arg(&file)
        .args(["--network", "allowlist", "--proxy-port", "3128"]));
    assert_ok(&o, "seatbelt allowlist");
    assert!(stdout(&o).contains("(remote ip \"localhost:3128\")"));
    assert!(!stdout(&o).contains("localhost:*"));
}

#[test]
fn bad_input_is_one_clear_line() {
    let d = scratch();
    root_with_capsule(d.path());
    let root = d.path().join("root");
    let r = Runner::Current;
    let bad = d.path().join("bad.json");
    std::fs::write(&bad, "{\"version\": 1,\n  \"capsule_name\": }").unwrap();
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (
            vec!["seatbelt".into(), "--policy".into(), bad.clone().into()],
            "line 2, column",
        ),
        (vec!["seatbelt".into(), "nosuch".into()], "nosuch"),
        (
            vec![
                "seatbelt".into(),
                "demo".into(),
                "--network".into(),
                "allowlist".into(),
            ],
            "--proxy-port",
        ),
        (
            vec![
                "seatbelt".into(),
                "demo".into(),
                "--nonce".into(),
                "x\"y".into(),
            ],
            "nonce",
        ),
    ];
    for (args, want) in cases {
        let o = run(r.capsule(&root).args(&args));
        assert!(!o.status.success(), "{args:?} succeeded");
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(
            e.starts_with("capsule: ") && e.contains(want),
            "{args:?}: {e}"
        );
        assert!(stdout(&o).is_empty());
    }
    // a policy.json changed after open is refused (digest)
    let p = root.join("bundles/demo/policy.json");
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("\"none\"", "\"open\"");
    std::fs::write(&p, text).unwrap();
    let o = run(r.capsule(&root).args(["seatbelt", "demo"]));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("digest"), "{}", stderr(&o));
}

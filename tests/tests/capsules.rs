//! End-to-end tests of `capsule open / verify / close / list / inspect / demo`:
//! Kitsoki's library opens and verifies unchanged, materialization is hermetic and
//! reproducible, the tree digest matches an independent implementation, bad input fails
//! on one line with nothing left behind, config.json is valid. `--source` and pinned
//! sources are tested in `capsules_source.rs`.

use capsule_e2e::capsules::{cap, git_ok, json_of, python_digest};
use capsule_e2e::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Entries of a folder (including hidden ones); empty if it does not exist.
fn entries(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(rd) => {
            let mut v: Vec<String> = rd
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        }
        Err(_) => Vec::new(),
    }
}

fn kitsoki_specs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(kitsoki_capsules())
        .expect("kitsoki capsules")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("capsule.yaml").is_file())
        .collect();
    v.sort();
    v
}

#[test]
fn kitsoki_library_opens_verifies_and_closes_for_every_runner() {
    let specs = kitsoki_specs();
    assert_eq!(specs.len(), 14, "Kitsoki ships 14 capsules");
    for runner in runners() {
        let s = scratch();
        runner.own(s.path());
        let root = s.path().join("root");
        for spec in &specs {
            let o = run(runner.capsule(&root).arg("open").arg(spec).arg("--json"));
            assert_ok(&o, &format!("[{}] open {}", runner.label(), spec.display()));
            let j = json_of(&o);
            let name = j["name"].as_str().expect("name").to_string();
            let ws = PathBuf::from(j["workspace"].as_str().expect("workspace"));
            assert!(Path::new(j["bundle"].as_str().expect("bundle"))
                .join("policy.json")
                .is_file());
            assert!(
                !Path::new(j["bundle"].as_str().unwrap()).starts_with(&ws),
                "bundle outside the workspace"
            );
            assert_eq!(
                std::fs::read_to_string(ws.join(".kitsoki-capsule")).unwrap(),
                format!("{name}\n")
            );
            let exclude = std::fs::read_to_string(ws.join(".git/info/exclude")).unwrap();
            assert!(
                exclude.contains("/capsule-manifest.json") && exclude.contains("/.kitsoki-capsule")
            );
            let manifest: Value = serde_json::from_str(
                &std::fs::read_to_string(ws.join("capsule-manifest.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(manifest["capsule_name"], name.as_str());
            assert_eq!(manifest["source"]["synthetic"], true);
            assert_eq!(manifest["source"]["head"], j["head"]);
            assert_eq!(manifest["capsule"]["policy_digest"], j["policy_digest"]);
            // tree digest = an independent implementation
            let digest = j["tree_digest"]
                .as_str()
                .unwrap()
                .trim_start_matches("sha256:")
                .to_string();
            assert_eq!(digest, python_digest(&ws), "[{name}] tree digest");
            if name == "slidey-edit-kitsoki-pitch" {
                assert_eq!(j["head"], "0ffa68881b5943e255c47ef190cf411acf851461");
            }
            let o = run(runner.capsule(&root).args(["verify", &name, "--json"]));
            assert_ok(&o, &format!("[{}] verify {name}", runner.label()));
            let v = json_of(&o);
            assert_eq!(v["ok"], true, "{v}");
            let probes = v["probes"].as_array().unwrap();
            assert!(!probes.is_empty(), "[{name}] has probes");
            assert!(probes.iter().all(|p| p["ok"] == true), "{v}");
        }
        let o = run(runner.capsule(&root).args(["list", "--json"]));
        assert_ok(&o, "list");
        assert_eq!(json_of(&o)["capsules"].as_array().unwrap().len(), 14);
        for spec in &specs {
            let name = spec.file_name().unwrap().to_str().unwrap();
            // a few Kitsoki capsules are dirty by design but unchanged since open
            let o = run(runner.capsule(&root).args(["close", name]));
            assert_ok(&o, &format!("close {name}"));
        }
        assert!(entries(&root.join("workspaces")).is_empty());
        assert!(entries(&root.join("bundles")).is_empty());
    }
}

#[test]
fn verify_a_spec_directly_and_detect_broken_probes() {
    let s = scratch();
    let root = s.path().join("root");
    let spec = kitsoki_capsules().join("corpus-forge-red-green");
    let o = cap(&root, &["verify", spec.to_str().unwrap(), "--json"]);
    assert_ok(&o, "verify spec");
    assert_eq!(json_of(&o)["ok"], true);
    assert!(
        entries(&root.join("workspaces")).is_empty(),
        "temporary capsule left behind"
    );
    // break an open capsule: the probe must fail and verify exit non-zero
    let o = cap(&root, &["open", spec.to_str().unwrap(), "--json"]);
    assert_ok(&o, "open");
    let ws = PathBuf::from(json_of(&o)["workspace"].as_str().unwrap());
    std::fs::write(ws.join("README.md"), "edited\n").unwrap();
    let o = cap(&root, &["verify", "corpus-forge-red-green"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("clean-tree"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn our_fixture_covers_overlay_mkdir_branch_allow_empty_and_default_remote() {
    let s = scratch();
    let root = s.path().join("root");
    let spec = fixtures().join("capsules/features");
    // the fixture asks for a device and an allowlisted network
    let o = cap(
        &root,
        &["open", spec.to_str().unwrap(), "--accept-grants", "--json"],
    );
    assert_ok(&o, "open features");
    let j = json_of(&o);
    let ws = PathBuf::from(j["workspace"].as_str().unwrap());
    assert_eq!(j["branch"], "trunk");
    assert!(ws.join("empty/dir").is_dir());
    assert!(ws.join("peers/origin.git/HEAD").is_file());
    let url = git_ok(&ws, &["remote", "get-url", "origin"]);
    assert_eq!(
        url,
        ws.join("peers/origin.git").display().to_string(),
        "remote URL points at the final workspace"
    );
    assert_eq!(
        std::fs::read_link(ws.join("bin/link")).unwrap(),
        PathBuf::from("tool.sh")
    );
    assert_eq!(
        j["tree_digest"].as_str().unwrap(),
        format!("sha256:{}", python_digest(&ws))
    );
    let o = cap(&root, &["verify", "features", "--json"]);
    assert_ok(&o, "verify features");
    let v = json_of(&o);
    assert_eq!(v["probes"].as_array().unwrap().len(), 8);
    // the sandbox block resolved into policy.json
    let policy: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(j["bundle"].as_str().unwrap()).join("policy.json"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(policy["network"]["mode"], "allowlist");
    assert_eq!(policy["network"]["allow"][1], "*.crates.io:443");
    assert_eq!(policy["devices"][0], "fuse");
    assert_eq!(policy["pass_env"][0], "TERM");
    assert!(policy["hidden"]
        .as_array()
        .unwrap()
        .iter()
        .any(
            |h| h["path"] == ws.join("secrets").display().to_string() && h["reason"] == "requested"
        ));
    assert!(policy["hidden"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["path"]
            == std::fs::canonicalize(&root)
                .unwrap()
                .join("bundles")
                .display()
                .to_string()));
}

#[test]
fn two_opens_give_the_git_cli_head() {
    let s = scratch();
    let root = s.path().join("root");
    let spec = fixtures().join("capsules/features");
    let mut heads = Vec::new();
    for (name, dest) in [
        ("one", s.path().join("ws-one")),
        ("two", s.path().join("elsewhere/ws-two")),
    ] {
        let o = cap(
            &root,
            &[
                "open",
                spec.to_str().unwrap(),
                "--accept-grants",
                "--name",
                name,
                "--dest",
                dest.to_str().unwrap(),
                "--json",
            ],
        );
        assert_ok(&o, "open");
        let j = json_of(&o);
        assert_eq!(
            j["workspace"],
            std::fs::canonicalize(&dest).unwrap().display().to_string()
        );
        heads.push((
            j["head"].as_str().unwrap().to_string(),
            j["tree_digest"].as_str().unwrap().to_string(),
        ));
    }
    assert_eq!(heads[0], heads[1]);
    // the same steps with the git CLI
    let g = s.path().join("by-hand");
    std::fs::create_dir_all(g.join("empty/dir")).unwrap();
    std::fs::create_dir_all(g.join("src")).unwrap();
    git_ok(&g, &["init", "-q", "--initial-branch=trunk"]);
    std::fs::write(g.join("src/lib.txt"), "lib\n").unwrap();
    git_ok(&g, &["add", "-A"]);
    git_ok(&g, &["commit", "-q", "-m", "first"]);
    git_ok(&g, &["branch", "topic"]);
    git_ok(
        &g,
        &["commit", "-q", "-m", "nothing changed", "--allow-empty"],
    );
    assert_eq!(heads[0].0, git_ok(&g, &["rev-parse", "HEAD"]));
    // and a Kitsoki spec
    let o = cap(
        &root,
        &[
            "open",
            kitsoki_capsules()
                .join("visual-story-two-revisions")
                .to_str()
                .unwrap(),
            "--json",
        ],
    );
    assert_ok(&o, "open visual");
    let g = s.path().join("by-hand-2");
    std::fs::create_dir_all(g.join("stories/demo")).unwrap();
    git_ok(&g, &["init", "-q", "--initial-branch=main"]);
    for (content, msg) in [("scene: one\n", "one"), ("scene: two\n", "two")] {
        std::fs::write(g.join("stories/demo/app.yaml"), content).unwrap();
        git_ok(&g, &["add", "-A"]);
        git_ok(&g, &["commit", "-q", "-m", msg]);
    }
    assert_eq!(
        json_of(&o)["head"].as_str().unwrap(),
        git_ok(&g, &["rev-parse", "HEAD"])
    );
}

#[test]
fn bad_inputs_fail_on_one_line_and_leave_nothing_behind() {
    let s = scratch();
    let root = s.path().join("root");
    let bad = fixtures().join("capsules/bad");
    let cases: &[(&str, &[&str])] = &[
        ("malformed.yaml", &["malformed.yaml:7:"]),
        (
            "unknown-action.yaml",
            &["unknown-action.yaml:8:15:", "source.steps[1]", "teleport"],
        ),
        (
            "dotdot.yaml",
            &["dotdot.yaml:", "source.steps[0]", "escapes"],
        ),
        (
            "absolute.yaml",
            &["absolute.yaml:", "source.steps[0]", "absolute"],
        ),
        (
            "symlink.yaml",
            &["symlink.yaml:", "source.steps[2]", "symlink"],
        ),
        (
            "failing-step.yaml",
            &[
                "failing-step.yaml:",
                "source.steps[2] (git)",
                "no-such-branch",
            ],
        ),
        ("sandbox-typo.yaml", &["sandbox-typo.yaml:10:3:", "hiden"]),
        (
            "digest-mismatch.yaml",
            &["digest-mismatch.yaml", "tree_digest"],
        ),
        (
            "probe-dir.yaml",
            &["probe-dir.yaml:", "probes[0]", "escapes"],
        ),
        (
            "overlay-escape",
            &["overlay-escape/capsule.yaml", "overlay", "escapes"],
        ),
    ];
    for (f, needles) in cases {
        let o = cap(&root, &["open", bad.join(f).to_str().unwrap()]);
        assert!(!o.status.success(), "{f} opened");
        let err = stderr(&o);
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{f}: not one line: {err}"
        );
        assert!(err.starts_with("capsule: "), "{err}");
        for n in *needles {
            assert!(err.contains(n), "{f}: {err:?} lacks {n:?}");
        }
        assert!(
            entries(&root.join("workspaces")).is_empty(),
            "{f}: left {:?}",
            entries(&root.join("workspaces"))
        );
        assert!(
            entries(&root.join("bundles")).is_empty(),
            "{f}: left {:?}",
            entries(&root.join("bundles"))
        );
    }
    assert!(!Path::new("/tmp/capsule-escaped.txt").exists());
    assert!(!Path::new("/tmp/capsule-escape").exists());
    // non-empty --dest, with nothing added to it
    let dest = s.path().join("busy");
    std::fs::create_dir_all(&dest).unwrap();
    std::fs::write(dest.join("keep"), "x").unwrap();
    let o = cap(
        &root,
        &[
            "open",
            fixtures().join("capsules/features").to_str().unwrap(),
            "--accept-grants",
            "--dest",
            dest.to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not empty"), "{}", stderr(&o));
    assert_eq!(entries(&dest), vec!["keep".to_string()]);
    assert_eq!(
        entries(s.path())
            .iter()
            .filter(|e| e.starts_with('.'))
            .count(),
        0,
        "temp dir next to --dest left behind"
    );
    // missing and non-git sources
    let o = cap(
        &root,
        &[
            "open",
            "--source",
            s.path().join("missing").to_str().unwrap(),
        ],
    );
    assert!(
        !o.status.success() && stderr(&o).contains("missing"),
        "{}",
        stderr(&o)
    );
    let plain = s.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let o = cap(&root, &["open", "--source", plain.to_str().unwrap()]);
    assert!(
        !o.status.success() && stderr(&o).contains("not a git"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stderr(&o).trim_end().lines().count(), 1);
    assert!(entries(&root.join("workspaces")).is_empty());
    assert!(entries(&root.join("bundles")).is_empty());
    // a name that is already open
    assert_ok(
        &cap(
            &root,
            &[
                "open",
                kitsoki_capsules().join("clean-repo").to_str().unwrap(),
            ],
        ),
        "open",
    );
    let o = cap(
        &root,
        &[
            "open",
            kitsoki_capsules().join("clean-repo").to_str().unwrap(),
        ],
    );
    assert!(
        !o.status.success() && stderr(&o).contains("already open"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn close_refuses_a_folder_without_the_sentinel_and_changed_work() {
    let s = scratch();
    let root = s.path().join("root");
    let o = cap(
        &root,
        &[
            "open",
            kitsoki_capsules().join("clean-repo").to_str().unwrap(),
            "--json",
        ],
    );
    assert_ok(&o, "open");
    let j = json_of(&o);
    let ws = PathBuf::from(j["workspace"].as_str().unwrap());
    let bundle = PathBuf::from(j["bundle"].as_str().unwrap());
    std::fs::write(ws.join("work.txt"), "precious\n").unwrap();
    let o = cap(&root, &["close", "clean-repo"]);
    assert!(
        !o.status.success() && stderr(&o).contains("--force"),
        "{}",
        stderr(&o)
    );
    assert!(ws.join("work.txt").exists());
    std::fs::remove_file(ws.join(".kitsoki-capsule")).unwrap();
    let o = cap(&root, &["close", ws.to_str().unwrap()]);
    assert!(
        !o.status.success() && stderr(&o).contains("sentinel"),
        "{}",
        stderr(&o)
    );
    assert!(ws.is_dir() && bundle.is_dir());
    let o = cap(&root, &["close", ws.to_str().unwrap(), "--force"]);
    assert_ok(&o, "close --force");
    assert!(
        ws.join("work.txt").exists(),
        "a folder without the sentinel is never removed"
    );
    assert!(!bundle.exists());
    // unknown capsule
    let o = cap(&root, &["close", "nope"]);
    assert!(
        !o.status.success() && stderr(&o).contains("no open capsule"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn config_json_is_a_valid_oci_runtime_spec() {
    let s = scratch();
    let root = s.path().join("root");
    let live = s.path().join("live.yaml");
    std::fs::write(&live, "name: live\nsource:\n  synthetic: true\n  steps: [{action: commit, message: x, allow_empty: true}]\nnetwork: live\n").unwrap();
    for (spec, netns) in [
        (fixtures().join("capsules/features"), true),
        (kitsoki_capsules().join("clean-repo"), true),
        (live, false),
    ] {
        // the fixture and the live spec ask for network access: accepted
        let o = cap(
            &root,
            &["open", spec.to_str().unwrap(), "--accept-grants", "--json"],
        );
        assert_ok(&o, "open");
        let j = json_of(&o);
        let name = j["name"].as_str().unwrap().to_string();
        let ws = j["workspace"].as_str().unwrap().to_string();
        let o = cap(&root, &["inspect", &name, "--json"]);
        assert_ok(&o, "inspect");
        let i = json_of(&o);
        assert_eq!(i["config_valid"], true, "{}", i["config_error"]);
        let c = &i["config"];
        let ver = c["ociVersion"].as_str().unwrap();
        assert!(ver.starts_with("1."), "{ver}");
        assert_eq!(c["root"]["path"], "/");
        assert_eq!(c["root"]["readonly"], true);
        assert_eq!(c["process"]["cwd"], ws.as_str());
        assert!(!c["process"]["args"].as_array().unwrap().is_empty());
        let mounts = c["mounts"].as_array().unwrap();
        assert!(mounts
            .iter()
            .all(|m| m["destination"].as_str().unwrap().starts_with('/')));
        let wsm = mounts
            .iter()
            .find(|m| m["destination"] == ws.as_str())
            .expect("workspace mount");
        assert_eq!(wsm["type"], "bind");
        assert!(wsm["options"].as_array().unwrap().iter().any(|o| o == "rw"));
        let masked = c["linux"]["maskedPaths"].as_array().unwrap();
        let policy = &i["policy"];
        for h in policy["hidden"].as_array().unwrap() {
            assert!(
                masked.contains(&h["path"]),
                "hidden {} not masked",
                h["path"]
            );
        }
        assert!(c["linux"]["readonlyPaths"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().unwrap().ends_with("capsule-manifest.json")));
        let ns: Vec<&str> = c["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap())
            .collect();
        for t in ["mount", "pid", "user"] {
            assert!(ns.contains(&t), "{ns:?}");
        }
        assert_eq!(ns.contains(&"network"), netns, "{name}: {ns:?}");
        assert!(i["policy_in_words"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("network: ")));
        // human inspect mentions the plain-words policy
        let o = cap(&root, &["inspect", &name]);
        assert_ok(&o, "inspect human");
        assert!(stdout(&o).contains("valid OCI runtime spec"));
    }
    // a tampered policy.json is refused (its digest no longer matches bundle.json)
    let p = root.join("bundles/live/policy.json");
    let t = std::fs::read_to_string(&p)
        .unwrap()
        .replace("\"open\"", "\"none\"");
    std::fs::write(&p, t).unwrap();
    let o = cap(&root, &["inspect", "live"]);
    assert!(
        !o.status.success() && stderr(&o).contains("digest"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn demo_runs_with_nothing_set_up() {
    let s = scratch();
    let o = cap(&s.path().join("unused-root"), &["demo", "--json"]);
    assert_ok(&o, "demo");
    let j = json_of(&o);
    assert_eq!(j["closed"], true);
    assert_eq!(j["verify"]["ok"], true);
    let cmds = j["commands"].as_array().unwrap();
    assert!(cmds.iter().any(|c| c["output"]
        .as_str()
        .unwrap()
        .contains("hello from inside the capsule")));
    assert!(!Path::new(j["capsule"]["workspace"].as_str().unwrap()).exists());
    // every refusal the demo shows really happened (the demo fails otherwise) and the
    // planted key never reached the output
    assert_eq!(j["unexpected"], 0);
    assert_eq!(j["sandboxed"], true);
    assert!(cmds
        .iter()
        .all(|c| !c["output"].as_str().unwrap().contains("FAKE-DEMO-KEY")));
    let refused = cmds.iter().filter(|c| c["exit_code"] != 0).count();
    assert_eq!(refused, 5, "{cmds:?}");
    let o = cap(&s.path().join("unused-root"), &["demo"]);
    assert_ok(&o, "demo human");
    assert!(stdout(&o).contains("refused by the sandbox"));
    assert!(!stdout(&o).contains("UNEXPECTEDLY"));
}

#[test]
fn open_finds_a_name_under_capsules_in_a_parent_folder() {
    let s = scratch();
    let proj = s.path().join("proj");
    std::fs::create_dir_all(proj.join("capsules/tiny")).unwrap();
    std::fs::create_dir_all(proj.join("deep/er")).unwrap();
    std::fs::write(
        proj.join("capsules/tiny/capsule.yaml"),
        "name: tiny\nsource:\n  synthetic: true\n  steps:\n    - {action: write, path: t.txt, content: \"t\\n\"}\n    - {action: commit, message: t}\n",
    )
    .unwrap();
    let root = s.path().join("root");
    let o = run(Runner::Current
        .capsule(&root)
        .current_dir(proj.join("deep/er"))
        .args(["open", "tiny", "--json"]));
    assert_ok(&o, "open by name");
    let j = json_of(&o);
    assert_eq!(j["name"], "tiny");
    assert_eq!(
        j["spec_path"],
        std::fs::canonicalize(proj.join("capsules/tiny/capsule.yaml"))
            .unwrap()
            .display()
            .to_string()
    );
    // and by workspace path from inside it
    let ws = PathBuf::from(j["workspace"].as_str().unwrap());
    let o = run(Runner::Current
        .capsule(&root)
        .current_dir(&ws)
        .args(["verify", ".", "--json"]));
    assert_ok(&o, "verify .");
    assert_eq!(json_of(&o)["capsule_name"], "tiny");
    let o = run(Runner::Current
        .capsule(&root)
        .current_dir(proj.join("deep"))
        .args(["open", "nonesuch"]));
    assert!(
        !o.status.success() && stderr(&o).contains("capsules/nonesuch/capsule.yaml"),
        "{}",
        stderr(&o)
    );
}

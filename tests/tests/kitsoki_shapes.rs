//! Kitsoki's own CLI shapes: `capsule open --json` prints the fields of Kitsoki's
//! `Manifest`, and `capsule verify` writes the probe results and the measured tree digest
//! back into `capsule-manifest.json` (which stays read-only inside the sandbox, so a task
//! cannot forge them), replacing a symlink a task may have left there instead of writing
//! through it.

use capsule_e2e::*;
use serde_json::Value;
use std::path::PathBuf;

#[test]
fn open_json_has_kitsokis_manifest_fields_and_verify_writes_them_back() {
    for r in runners() {
        let who = r.label().to_string();
        let dir = scratch();
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).expect("mkdir");
        r.own(dir.path());
        let spec = kitsoki_capsules().join("clean-repo");
        let o = run(r.capsule(&root).args(["open", "--json"]).arg(&spec));
        assert_ok(&o, &format!("{who}: open"));
        let j: Value = serde_json::from_str(&stdout(&o)).expect("open json");
        for k in [
            "capsule_name",
            "spec_path",
            "workspace",
            "opened_at",
            "source",
            "network",
            "tree_digest",
            "environment",
            "probes",
        ] {
            assert!(j.get(k).is_some(), "{who}: open --json lacks {k}: {j}");
        }
        assert_eq!(j["source"]["synthetic"], true, "{who}: {j}");
        assert_eq!(j["source"]["head"], j["head"], "{who}");
        assert_eq!(j["probes"][0]["name"], "clean-tree", "{who}: {j}");
        assert_eq!(j["capsule_name"], j["name"]);
        let ws = PathBuf::from(j["workspace"].as_str().expect("workspace"));
        let name = j["name"].as_str().expect("name").to_string();

        // a task cannot write the manifest
        let o = run(r
            .capsule(&root)
            .args(["exec", &name, "--", "sh", "-c"])
            .arg("echo '{\"probes\":[{\"ok\":true}]}' > capsule-manifest.json"));
        assert_ne!(code(&o), 0, "{who}: the task wrote the manifest");

        // verify writes the results; a failing probe is recorded as failing
        let o = run(r
            .capsule(&root)
            .args(["exec", &name, "--", "sh", "-c"])
            .arg("f=$(git ls-files | grep -v capsule-manifest | head -n1); echo dirty >> \"$f\""));
        assert_ok(&o, &format!("{who}: dirty a tracked file"));
        let o = run(r.capsule(&root).args(["verify", &name, "--json"]));
        let v: Value = serde_json::from_str(&stdout(&o)).expect("verify json");
        let m: Value = serde_json::from_str(
            &std::fs::read_to_string(ws.join("capsule-manifest.json")).expect("manifest"),
        )
        .expect("manifest json");
        let p = &m["probes"][0];
        assert_eq!(p["name"], "clean-tree", "{who}: {m}");
        assert_eq!(
            p["command"],
            "git diff --quiet && git diff --cached --quiet"
        );
        assert_eq!(p["expect"], "zero");
        assert_eq!(p["ok"], false, "{who}: the dirty tree passed: {m}");
        assert_eq!(p["exit_code"], 1, "{who}: {m}");
        assert!(p.get("output").is_some());
        assert_eq!(
            format!("sha256:{}", m["tree_digest"].as_str().expect("digest")),
            v["actual_tree_digest"].as_str().expect("actual"),
            "{who}: measured digest"
        );
        assert_eq!(m["capsule_name"], name.as_str(), "{who}: other fields kept");

        // a symlink in the manifest's place is not followed; a hard link to another file
        // (a task under weaker isolation could leave one) is replaced, not written through
        let mpath = ws.join("capsule-manifest.json");
        let content = std::fs::read_to_string(&mpath).expect("manifest");
        let target = dir.path().join("elsewhere.json");
        std::fs::write(&target, &content).expect("write");
        std::fs::remove_file(&mpath).expect("rm");
        std::os::unix::fs::symlink(&target, &mpath).expect("symlink");
        let o = run(r.capsule(&root).args(["verify", &name, "--json"]));
        assert_ne!(code(&o), 0, "{who}: verify followed a symlink manifest");
        assert_eq!(std::fs::read_to_string(&target).expect("target"), content);
        std::fs::remove_file(&mpath).expect("rm");
        std::fs::hard_link(&target, &mpath).expect("hard link");
        let o = run(r.capsule(&root).args(["verify", &name, "--json"]));
        assert_eq!(
            std::fs::read_to_string(&target).expect("target"),
            content,
            "{who}: verify wrote through a hard link: {}",
            stderr(&o)
        );
        use std::os::unix::fs::MetadataExt;
        let ino = |p: &std::path::Path| std::fs::metadata(p).expect("stat").ino();
        assert_ne!(
            ino(&mpath),
            ino(&target),
            "{who}: the manifest is still the link"
        );
        // the manifest's list entry still loads after a verify
        let o = run(r.capsule(&root).args(["list", "--json"]));
        assert_ok(&o, &format!("{who}: list"));
    }
}

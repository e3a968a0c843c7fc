//! `capsule reveal list|add|rm`: folders outside a source folder named by its manifests
//! (Cargo.toml incl. workspace deps, package.json `file:`, .csproj `ProjectReference` with
//! backslashes, go.mod `replace … => ../x`), and opening/closing them in the tool's settings.

use capsule_e2e::*;
use std::path::Path;
use std::process::Command;

/// Copy the reveal fixtures into a fresh scratch dir (so the source folder is not inside
/// this repository's git work tree).
fn fixture_copy() -> tempfile::TempDir {
    let d = scratch();
    let st = Command::new("cp")
        .arg("-a")
        .arg(fixtures().join("reveal/."))
        .arg(d.path())
        .status()
        .expect("cp");
    assert!(st.success());
    d
}

fn list_json(r: &Runner, root: &Path, source: &Path) -> serde_json::Value {
    let o = run(r
        .capsule(root)
        .args(["reveal", "list", "--json"])
        .arg(source));
    assert_ok(&o, "reveal list");
    serde_json::from_str(&stdout(&o)).expect("json")
}

/// (relative path, opened, kinds) of each suggestion.
fn summary(v: &serde_json::Value) -> Vec<(String, bool, Vec<String>)> {
    v["suggestions"]
        .as_array()
        .expect("suggestions")
        .iter()
        .map(|s| {
            let mut kinds: Vec<String> = s["named_by"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["kind"].as_str().unwrap().to_string())
                .collect();
            kinds.dedup();
            (
                s["relative"].as_str().unwrap().to_string(),
                s["opened"].as_bool().unwrap(),
                kinds,
            )
        })
        .collect()
}

#[test]
fn list_finds_each_manifest_kind() {
    let fx = fixture_copy();
    let root = scratch();
    let src = fx.path().join("app");
    let v = list_json(&Runner::Current, root.path(), &src);
    assert!(v["unreadable"].as_array().unwrap().is_empty(), "{v}");
    let got = summary(&v);
    let want: Vec<(String, bool, Vec<String>)> = vec![
        ("../Shared".into(), false, vec!["dotnet".into()]),
        ("../gox".into(), false, vec!["go_mod".into()]),
        ("../shared".into(), false, vec!["cargo".into()]),
        ("../ui".into(), false, vec!["npm".into()]),
        ("../wsdep".into(), false, vec!["cargo".into()]),
    ];
    assert_eq!(got, want, "{v}");
    // the mention records where it came from, as written
    let shared = &v["suggestions"][2]["named_by"][0];
    assert_eq!(shared["manifest"], "crates/core/Cargo.toml");
    assert_eq!(shared["written"], "../../../shared");
    let dotnet = &v["suggestions"][0]["named_by"][0];
    assert_eq!(dotnet["written"], "..\\..\\..\\Shared\\Shared.csproj");
    // human output names them too
    let o = run(Runner::Current
        .capsule(root.path())
        .args(["reveal", "list"])
        .arg(&src));
    assert_ok(&o, "reveal list");
    let text = stdout(&o);
    for rel in ["../shared", "../ui", "../Shared", "../gox", "../wsdep"] {
        assert!(
            text.contains(&format!("closed  {rel}")),
            "{rel} in:\n{text}"
        );
    }
}

#[test]
fn broken_manifest_is_reported_not_fatal() {
    let fx = fixture_copy();
    let root = scratch();
    let src = fx.path().join("app");
    std::fs::write(src.join("web/package.json"), "{\n  \"dependencies\": {\n").unwrap();
    let v = list_json(&Runner::Current, root.path(), &src);
    let un = v["unreadable"].as_array().unwrap();
    assert_eq!(un.len(), 1, "{v}");
    assert_eq!(un[0]["manifest"], "web/package.json");
    assert!(un[0]["error"].as_str().unwrap().contains("line"), "{v}");
    assert!(!summary(&v).iter().any(|s| s.0 == "../ui"));
}

#[test]
fn add_and_rm_persist_in_settings() {
    for r in runners() {
        let fx = fixture_copy();
        let root = scratch();
        r.own(fx.path());
        r.own(root.path());
        let src = fx.path().join("app");
        // from inside the source folder, relative path, default source = cwd (no git)
        let o = run(r
            .capsule(root.path())
            .current_dir(&src)
            .args(["reveal", "add", "../shared"]));
        assert_ok(&o, "reveal add");
        let settings: serde_json::Value =
            serde_json::from_slice(&std::fs::read(root.path().join("settings.json")).unwrap())
                .unwrap();
        let canon_src = std::fs::canonicalize(&src).unwrap();
        let canon_shared = std::fs::canonicalize(fx.path().join("shared")).unwrap();
        assert_eq!(
            settings["reveals"][canon_src.to_str().unwrap()],
            serde_json::json!([canon_shared.to_str().unwrap()]),
            "{}: {settings}",
            r.label()
        );
        let got = summary(&list_json(&r, root.path(), &src));
        assert!(
            got.contains(&("../shared".into(), true, vec!["cargo".into()])),
            "{got:?}"
        );
        assert!(
            got.contains(&("../ui".into(), false, vec!["npm".into()])),
            "{got:?}"
        );
        // a subfolder of the source uses the git root as its source when there is one
        std::fs::create_dir(src.join(".git")).unwrap();
        r.own(&src);
        let o = run(r
            .capsule(root.path())
            .current_dir(src.join("web"))
            .args(["reveal", "add", "../../ui"]));
        assert_ok(&o, "reveal add from subfolder");
        let got = summary(&list_json(&r, root.path(), &src));
        assert!(
            got.contains(&("../ui".into(), true, vec!["npm".into()])),
            "{got:?}"
        );
        // rm closes it again
        let o = run(r
            .capsule(root.path())
            .args(["reveal", "rm"])
            .arg(fx.path().join("shared"))
            .arg("--source")
            .arg(&src));
        assert_ok(&o, "reveal rm");
        let got = summary(&list_json(&r, root.path(), &src));
        assert!(
            got.contains(&("../shared".into(), false, vec!["cargo".into()])),
            "{got:?}"
        );
        // rm of something not open is an error
        let o = run(r
            .capsule(root.path())
            .args(["reveal", "rm"])
            .arg(fx.path().join("gox"))
            .arg("--source")
            .arg(&src));
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains("not revealed"), "{}", stderr(&o));
    }
}

#[test]
fn add_refuses_home_root_credentials_and_missing() {
    let fx = fixture_copy();
    let root = scratch();
    let src = fx.path().join("app");
    let home = fx.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    let try_add = |dir: &Path| {
        run(Runner::Current
            .capsule(root.path())
            .env("HOME", &home)
            .args(["reveal", "add"])
            .arg(dir)
            .arg("--source")
            .arg(&src))
    };
    for bad in [
        Path::new("/"),
        home.as_path(),
        &home.join(".ssh"),
        fx.path(),
    ] {
        let o = try_add(bad);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{}: {}",
            bad.display(),
            stdout(&o)
        );
        assert!(stderr(&o).starts_with("capsule: "), "{}", stderr(&o));
    }
    let o = try_add(&fx.path().join("nope"));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("nope"), "{}", stderr(&o));
    // inside the source folder: pointless, refused
    let o = try_add(&src.join("web"));
    assert_eq!(o.status.code(), Some(1));
    assert!(!root.path().join("settings.json").exists());
}

//! End-to-end tests of `capsule open --source` and pinned sources: a hostile global git
//! configuration changes nothing, the operator's checkout is left byte-for-byte unchanged
//! (whatever its hooks, filters and state), and a pinned source is served from the cache
//! the second time.

use capsule_e2e::capsules::{cap, git_ok, json_of, python_digest};
use capsule_e2e::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

#[test]
fn hostile_global_git_config_changes_nothing() {
    let s = scratch();
    let specs = [
        kitsoki_capsules().join("mid-rebase-conflict"),
        kitsoki_capsules().join("diverged-remote"),
        fixtures().join("capsules/features"),
    ];
    // baseline, clean environment
    let base_root = s.path().join("base");
    let mut base = Vec::new();
    for spec in &specs {
        let o = cap(
            &base_root,
            &["open", spec.to_str().unwrap(), "--accept-grants", "--json"],
        );
        assert_ok(&o, "baseline open");
        let j = json_of(&o);
        let ws = PathBuf::from(j["workspace"].as_str().unwrap());
        let conflict = std::fs::read(ws.join("file.txt")).ok();
        base.push((j["head"].clone(), j["tree_digest"].clone(), conflict));
    }
    // a hostile operator configuration
    let home = s.path().join("evil-home");
    let hooks = home.join("hooks");
    let tmpl = home.join("template");
    let marker = s.path().join("HOOK-RAN");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::create_dir_all(tmpl.join("hooks")).unwrap();
    std::fs::create_dir_all(tmpl.join("info")).unwrap();
    std::fs::write(tmpl.join("info/exclude"), "*.txt\n*.yaml\n").unwrap();
    let hook = format!("#!/bin/sh\ntouch {}\n", marker.display());
    for h in [
        "pre-commit",
        "post-commit",
        "post-checkout",
        "commit-msg",
        "prepare-commit-msg",
        "pre-push",
        "pre-rebase",
        "reference-transaction",
    ] {
        for d in [&hooks, &tmpl.join("hooks")] {
            let p = d.join(h);
            std::fs::write(&p, &hook).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    let cfg = home.join(".gitconfig");
    std::fs::write(
        &cfg,
        format!(
            "[merge]\n\tconflictStyle = diff3\n[commit]\n\tgpgsign = true\n[core]\n\thooksPath = {}\n\tautocrlf = true\n[init]\n\ttemplateDir = {}\n\tdefaultBranch = evil\n[user]\n\tname = Evil\n\temail = evil@example.invalid\n[rebase]\n\tautoStash = true\n",
            hooks.display(),
            tmpl.display()
        ),
    )
    .unwrap();
    let evil_root = s.path().join("evil");
    for (spec, (head, digest, conflict)) in specs.iter().zip(&base) {
        let mut c = Runner::Current.capsule(&evil_root);
        c.env("HOME", &home)
            .env("GIT_CONFIG_GLOBAL", &cfg)
            .env("GIT_TEMPLATE_DIR", &tmpl)
            .env("GIT_AUTHOR_NAME", "Evil")
            .env("GIT_COMMITTER_DATE", "2001-01-01T00:00:00Z")
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .args(["open", spec.to_str().unwrap(), "--accept-grants", "--json"]);
        let o = run(&mut c);
        assert_ok(&o, "open under hostile config");
        let j = json_of(&o);
        assert_eq!(
            &j["head"],
            head,
            "{}: HEAD changed by the operator's config",
            spec.display()
        );
        assert_eq!(
            &j["tree_digest"],
            digest,
            "{}: digest changed",
            spec.display()
        );
        let ws = PathBuf::from(j["workspace"].as_str().unwrap());
        assert_eq!(&std::fs::read(ws.join("file.txt")).ok(), conflict);
    }
    assert!(
        !marker.exists(),
        "a hook from the operator's configuration ran"
    );
}

/// A checkout with hostile local configuration: a smudge filter, fsmonitor and hooks that
/// leave a marker, a linked worktree on a detached HEAD, packed refs, dirt.
fn hostile_checkout(s: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let src = s.join("home/projects/app");
    let marker = s.join("SOURCE-CONFIG-RAN");
    std::fs::create_dir_all(src.join("src")).unwrap();
    git_ok(&src, &["init", "-q", "--initial-branch=dev"]);
    std::fs::write(src.join("src/a.txt"), "alpha\n").unwrap();
    std::fs::write(src.join(".gitattributes"), "*.txt filter=evil\n").unwrap();
    std::os::unix::fs::symlink("src/a.txt", src.join("link")).unwrap();
    git_ok(&src, &["add", "-A"]);
    git_ok(&src, &["commit", "-q", "-m", "one"]);
    std::fs::write(src.join("src/b.txt"), "beta\n").unwrap();
    git_ok(&src, &["add", "-A"]);
    git_ok(&src, &["commit", "-q", "-m", "two"]);
    git_ok(&src, &["pack-refs", "--all"]);
    git_ok(&src, &["gc", "-q"]);
    std::fs::write(src.join("src/c.txt"), "loose\n").unwrap();
    git_ok(&src, &["add", "-A"]);
    git_ok(&src, &["commit", "-q", "-m", "three (loose objects)"]);
    let wt = s.join("home/projects/app-wt");
    git_ok(
        &src,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            wt.to_str().unwrap(),
            "HEAD~1",
        ],
    );
    let m = marker.display();
    git_ok(
        &src,
        &[
            "config",
            "filter.evil.smudge",
            &format!("touch {m}; sed s/a/EVIL/"),
        ],
    );
    git_ok(
        &src,
        &["config", "filter.evil.clean", &format!("touch {m}; cat")],
    );
    git_ok(&src, &["config", "core.fsmonitor", &format!("touch {m}")]);
    let hooks = s.join("src-hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for h in [
        "post-checkout",
        "post-index-change",
        "reference-transaction",
    ] {
        let p = hooks.join(h);
        std::fs::write(&p, format!("#!/bin/sh\ntouch {m}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    git_ok(&src, &["config", "core.hooksPath", hooks.to_str().unwrap()]);
    std::fs::write(src.join("src/a.txt"), "alpha, edited\n").unwrap();
    std::fs::write(src.join("untracked.txt"), "u\n").unwrap();
    (src, wt, marker)
}

#[test]
fn source_checkout_is_left_byte_for_byte_unchanged() {
    let s = scratch();
    let (src, wt, marker) = hostile_checkout(s.path());
    let root = s.path().join("root");
    let before = (hash_tree(&src), hash_tree(&wt));
    let head = git_ok(&src, &["rev-parse", "HEAD"]);
    let wt_head = git_ok(&wt, &["rev-parse", "HEAD"]);

    let o = cap(
        &root,
        &["open", "--source", src.to_str().unwrap(), "--json"],
    );
    assert_ok(&o, "open --source");
    let j = json_of(&o);
    assert_eq!(j["name"], "app");
    assert_eq!(j["head"], head.as_str());
    assert_eq!(j["branch"], "dev");
    let ws = PathBuf::from(j["workspace"].as_str().unwrap());
    assert_eq!(
        j["tree_digest"].as_str().unwrap(),
        format!("sha256:{}", python_digest(&ws))
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("src/a.txt")).unwrap(),
        "alpha\n",
        "committed content, no smudge filter"
    );
    assert!(ws.join("src/c.txt").is_file());
    assert!(!ws.join("untracked.txt").exists());
    assert_eq!(
        std::fs::read_link(ws.join("link")).unwrap(),
        PathBuf::from("src/a.txt")
    );
    // a real, independent repository: clean status, full history, no alternates
    assert_eq!(git_ok(&ws, &["status", "--porcelain"]), "");
    assert_eq!(git_ok(&ws, &["rev-list", "--count", "HEAD"]), "3");
    assert!(!ws.join(".git/objects/info/alternates").exists());
    git_ok(&ws, &["fsck", "--no-progress"]);
    let policy: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(j["bundle"].as_str().unwrap()).join("policy.json"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(policy["workspace"], ws.display().to_string());

    let o = cap(
        &root,
        &[
            "open",
            "--source",
            wt.to_str().unwrap(),
            "--name",
            "wt",
            "--json",
        ],
    );
    assert_ok(&o, "open --source linked worktree");
    let j2 = json_of(&o);
    assert_eq!(j2["head"], wt_head.as_str());
    assert_eq!(j2["branch"], Value::Null, "detached HEAD stays detached");
    let ws2 = PathBuf::from(j2["workspace"].as_str().unwrap());
    assert!(!ws2.join("src/c.txt").exists());
    assert_eq!(git_ok(&ws2, &["status", "--porcelain"]), "");

    for n in ["app", "wt"] {
        assert_ok(&cap(&root, &["close", n]), "close");
    }
    assert!(!ws.exists() && !ws2.exists());
    assert_eq!(
        (hash_tree(&src), hash_tree(&wt)),
        before,
        "the operator's checkout changed"
    );
    assert!(
        !marker.exists(),
        "the source's filter, fsmonitor or hooks ran"
    );
}

#[test]
fn pinned_source_is_served_from_the_cache_the_second_time() {
    let s = scratch();
    let upstream = s.path().join("upstream");
    std::fs::create_dir_all(&upstream).unwrap();
    git_ok(&upstream, &["init", "-q", "--initial-branch=main"]);
    std::fs::write(upstream.join("pinned.txt"), "pinned\n").unwrap();
    git_ok(&upstream, &["add", "-A"]);
    git_ok(&upstream, &["commit", "-q", "-m", "pinned"]);
    let commit = git_ok(&upstream, &["rev-parse", "HEAD"]);
    std::fs::write(upstream.join("pinned.txt"), "later\n").unwrap();
    git_ok(&upstream, &["commit", "-q", "-am", "later"]);
    let spec = s.path().join("pinned.yaml");
    std::fs::write(
        &spec,
        format!(
            "name: pinned\nsource:\n  repo: {}\n  commit: {commit}\nverify:\n  probes:\n    - name: content\n      run: test \"$(cat pinned.txt)\" = pinned\n",
            upstream.display()
        ),
    )
    .unwrap();
    let root = s.path().join("root");
    let o = cap(&root, &["open", spec.to_str().unwrap(), "--json"]);
    assert_ok(&o, "first open");
    let j = json_of(&o);
    assert_eq!(j["read_source"], true);
    assert_eq!(j["head"], commit.as_str());
    assert_ok(&cap(&root, &["verify", "pinned"]), "verify pinned");
    assert_ok(&cap(&root, &["close", "pinned"]), "close");
    std::fs::rename(&upstream, s.path().join("upstream-gone")).unwrap();
    let o = cap(&root, &["open", spec.to_str().unwrap(), "--json"]);
    assert_ok(&o, "second open without the source");
    let j = json_of(&o);
    assert_eq!(j["read_source"], false);
    assert_eq!(j["head"], commit.as_str());
    let ws = PathBuf::from(j["workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(ws.join("pinned.txt")).unwrap(),
        "pinned\n"
    );
    // computed from the objects during checkout (no .gitattributes): same as the files
    assert_eq!(
        j["tree_digest"].as_str().unwrap(),
        format!("sha256:{}", python_digest(&ws))
    );
}

//! `capsule isolation`: what this machine gives, the persisted acceptance of weaker
//! isolation, and a real machine without user namespaces (a user namespace whose
//! `user.max_user_namespaces` is 0). Each test runs as root and as the unprivileged user.

use capsule_e2e::{assert_ok, capsule_bin, run, runners, scratch, stdout, Runner};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn json(o: &Output) -> Value {
    serde_json::from_str(stdout(o).trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

#[test]
fn reports_the_layers_this_machine_has() {
    for r in runners() {
        let root = scratch();
        r.own(root.path());
        let o = run(r.capsule(root.path()).args(["isolation", "--json"]));
        assert_ok(&o, "capsule isolation --json");
        let v = json(&o);
        let rep = &v["report"];
        assert_eq!(
            rep["user_namespaces"]["available"],
            true,
            "{}: {v}",
            r.label()
        );
        assert!(
            rep["user_namespaces"]["max_user_namespaces"]
                .as_u64()
                .unwrap()
                > 0
        );
        // this machine and CI: Landlock ABI 7
        assert!(rep["landlock"]["abi"].as_u64().unwrap() >= 6, "{v}");
        assert_eq!(rep["seccomp"]["available"], true, "{v}");
        assert_eq!(v["full"], true, "{v}");
        assert_eq!(v["exec_level"]["level"], "full", "{v}");
        assert!(rep["missing"].as_array().unwrap().is_empty(), "{v}");

        let o = run(r.capsule(root.path()).arg("isolation"));
        assert_ok(&o, "capsule isolation");
        let text = stdout(&o);
        assert!(text.contains("User namespaces:  yes"), "{text}");
        assert!(text.contains("Landlock:         yes, ABI "), "{text}");
        assert!(text.contains("Seccomp:          yes"), "{text}");
        assert!(text.contains("Full isolation is available"), "{text}");
    }
}

#[test]
fn accept_weaker_is_persisted_and_can_be_taken_back() {
    for r in runners() {
        let root = scratch();
        r.own(root.path());
        let settings = root.path().join("settings.json");
        let get = |root: &Path| {
            let o = run(r.capsule(root).args(["isolation", "--json"]));
            assert_ok(&o, "capsule isolation --json");
            json(&o)["accept_weaker"].clone()
        };
        assert_eq!(get(root.path()), false);

        let o = run(r
            .capsule(root.path())
            .args(["isolation", "--accept-weaker", "on"]));
        assert_ok(&o, "--accept-weaker on");
        assert!(
            stdout(&o).contains("Weaker isolation is now accepted"),
            "{}",
            stdout(&o)
        );
        let saved: Value =
            serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
        assert_eq!(saved["accept_weaker"], true);
        // persisted: a later run sees it
        assert_eq!(get(root.path()), true);

        let o = run(r
            .capsule(root.path())
            .args(["isolation", "--accept-weaker", "off", "--json"]));
        assert_ok(&o, "--accept-weaker off");
        assert_eq!(json(&o)["accept_weaker"], false);
        let saved: Value =
            serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
        assert_eq!(saved["accept_weaker"], false);
        assert_eq!(get(root.path()), false);

        // a bad value is a usage error and changes nothing
        let o = run(r
            .capsule(root.path())
            .args(["isolation", "--accept-weaker", "maybe"]));
        assert_eq!(o.status.code(), Some(2));
        assert_eq!(get(root.path()), false);

        // a broken settings file is named with line and column
        std::fs::write(&settings, "{ nope").unwrap();
        let o = run(r.capsule(root.path()).arg("isolation"));
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(err.contains("settings.json:1:"), "{err}");
    }
}

/// A copy of the binary anyone can execute.
fn shared_copy(dir: &Path) -> PathBuf {
    let dst = dir.join("capsule");
    std::fs::copy(capsule_bin(), &dst).unwrap();
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755)).unwrap();
    dst
}

/// `capsule ARGS` run by `r` inside a new user namespace whose `user.max_user_namespaces`
/// is 0: a real machine without user namespaces for whatever runs there.
fn capsule_without_userns(r: &Runner, bin: &Path, root: &Path, args: &[&str]) -> Output {
    let mut base = Command::new(bin);
    base.args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("LANG", "C.UTF-8")
        .env("HOME", root)
        .env("CAPSULE_ROOT", root);
    run(&mut r.without_userns(&base))
}

#[test]
fn without_user_namespaces_exec_is_refused_until_weaker_is_accepted() {
    for r in runners() {
        let root = scratch();
        let bin = shared_copy(root.path());
        let state = root.path().join("state");
        std::fs::create_dir(&state).unwrap();
        r.own(root.path());

        let o = capsule_without_userns(&r, &bin, &state, &["isolation", "--json"]);
        assert_ok(&o, "capsule isolation --json without user namespaces");
        let v = json(&o);
        let ns = &v["report"]["user_namespaces"];
        assert_eq!(ns["available"], false, "{}: {v}", r.label());
        assert!(
            ns["error"]
                .as_str()
                .unwrap()
                .contains("unshare(CLONE_NEWUSER)"),
            "{v}"
        );
        assert_eq!(ns["max_user_namespaces"], 0, "{v}");
        assert!(
            ns["restrictions"][0]
                .as_str()
                .unwrap()
                .contains("max_user_namespaces"),
            "{v}"
        );
        assert_eq!(v["full"], false);
        assert!(v["exec_level"].is_null(), "{v}");
        let refused = v["exec_refused"].as_str().unwrap();
        assert!(
            refused.contains("capsule isolation --accept-weaker on"),
            "{refused}"
        );
        // Landlock and seccomp are still there: weaker isolation is possible
        assert!(v["report"]["landlock"]["abi"].as_u64().unwrap() >= 6);
        assert_eq!(v["report"]["seccomp"]["available"], true);

        let o = capsule_without_userns(&r, &bin, &state, &["isolation"]);
        assert_ok(&o, "capsule isolation");
        let text = stdout(&o);
        assert!(text.contains("User namespaces:  NO"), "{text}");
        assert!(text.contains("Missing for full isolation"), "{text}");
        assert!(text.contains("--accept-weaker on"), "{text}");

        let o = capsule_without_userns(
            &r,
            &bin,
            &state,
            &["isolation", "--accept-weaker", "on", "--json"],
        );
        assert_ok(&o, "--accept-weaker on");
        let v = json(&o);
        assert_eq!(v["exec_level"]["level"], "weaker", "{v}");
        assert_eq!(v["exec_level"]["namespaces"], false, "{v}");
        assert!(v["exec_refused"].is_null());
    }
}

//! Agent profiles as data: `capsule agent profile list|show|add|rm`, validation, and what
//! an operator's profile can and cannot do: `agent launch --backend NAME` runs it (its
//! batch arguments, its hosts), its own login paths are hidden from every other agent,
//! and naming a credential folder as a login path un-hides nothing.

use capsule_e2e::*;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

#[test]
fn operator_profiles_are_validated_and_cannot_unhide_credentials() {
    for r in runners() {
        let who = r.label().to_string();
        let dir = scratch();
        let base = std::fs::canonicalize(dir.path()).expect("canon");
        let home = base.join("home");
        let root = base.join("root");
        write(&home.join(".ssh/id_ed25519"), "SSH-KEY-SECRET\n");
        write(&home.join(".mine/token"), "MINE-TOKEN\n");
        let bin = home.join(".local/bin/mine");
        write(
            &bin,
            "#!/bin/sh\necho \"argv:$*\"\nfor f in \"$HOME/.ssh/id_ed25519\" \"$HOME/.mine/token\"; do cat \"$f\" 2>/dev/null || echo \"denied:$f\"; done\n",
        );
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::copy(&bin, home.join(".local/bin/claude")).expect("a fake claude");
        let app = home.join("app");
        write(&app.join("README"), "app\n");
        git(&app, &["init", "-q", "-b", "main"]);
        git(&app, &["add", "."]);
        git(&app, &["commit", "-q", "-m", "init"]);
        std::fs::create_dir_all(&root).expect("mkdir");
        r.own(&base);
        let cmd = || -> Command {
            let mut c = r.capsule(&root);
            c.current_dir(&base).env("HOME", &home).env(
                "PATH",
                format!("{}:/usr/bin:/bin", home.join(".local/bin").display()),
            );
            c
        };
        let add = |json: &str| {
            let mut c = cmd();
            c.args(["agent", "profile", "add", "-"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = c.spawn().expect("spawn");
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(json.as_bytes())
                .expect("write");
            child.wait_with_output().expect("wait")
        };
        assert_ok(
            &run(cmd().args(["open", "--name", "c", "--source"]).arg(&app)),
            "open",
        );
        // refused: an escaping login path, a path as binary, a built-in's name, bad JSON
        for bad in [
            r#"{"name":"x","binary":"x","login_paths":["../.ssh"]}"#,
            r#"{"name":"x","binary":"/bin/sh"}"#,
            r#"{"name":"claude","binary":"claude"}"#,
            r#"{"name":"x","binary":"x","unknown":1}"#,
        ] {
            let o = add(bad);
            assert_eq!(code(&o), 1, "{who}: accepted {bad}: {}", stdout(&o));
            assert!(stderr(&o).starts_with("capsule: "), "{who}: {}", stderr(&o));
        }
        // a profile naming ~/.ssh as its own login: .ssh stays hidden, .mine is its own
        let o = add(
            r#"{"name":"mine","binary":"mine","login_paths":[".mine",".ssh"],"batch":["--batch"]}"#,
        );
        assert_ok(&o, &format!("{who}: add"));
        let o = run(cmd().args(["agent", "profile", "list", "--json"]));
        assert!(
            stdout(&o).contains("\"name\":\"mine\""),
            "{who}: {}",
            stdout(&o)
        );
        let ws = root.join("workspaces/c");
        let o = run(cmd()
            .args(["agent", "launch", "--backend", "mine", "--working-dir"])
            .arg(&ws)
            .args(["--", "go"]));
        assert_ok(&o, &format!("{who}: launch mine"));
        let out = stdout(&o);
        assert!(out.contains("argv:--batch go"), "{who}: {out}");
        assert!(
            !out.contains("SSH-KEY-SECRET"),
            "{who}: a profile un-hid ~/.ssh: {out}"
        );
        // another agent does not see mine's login
        let o = run(cmd()
            .args([
                "agent",
                "launch",
                "--backend",
                "claude",
                "--dry-run",
                "--working-dir",
            ])
            .arg(&ws));
        assert_ok(&o, &format!("{who}: dry-run claude"));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap_or_default();
        let hidden = v["login"]["hidden"].to_string();
        assert!(
            hidden.contains(&home.join(".mine").display().to_string()),
            "{who}: {hidden}"
        );
        assert_eq!(v["profile"]["name"], "claude");
        // rm: yours only
        assert_eq!(
            code(&run(cmd().args(["agent", "profile", "rm", "codex"]))),
            1
        );
        assert_ok(&run(cmd().args(["agent", "profile", "rm", "mine"])), "rm");
        let o = run(cmd()
            .args([
                "agent",
                "launch",
                "--backend",
                "mine",
                "--dry-run",
                "--working-dir",
            ])
            .arg(&ws));
        assert_eq!(code(&o), 2, "{who}: {}", stderr(&o));
    }
}

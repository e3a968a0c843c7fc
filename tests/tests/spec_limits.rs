//! A spec's `sandbox.limits`: checked at open (a value that cannot be read is refused
//! with file:line), recorded in bundle.json, applied by every exec where it is lower than
//! the operator's default (a spec may lower a limit, never raise one), shown by
//! `capsule inspect`; the operator's flags decide over both.

use capsule_e2e::*;
use std::process::Command;

const HEAD: &str =
    "source:\n  synthetic: true\n  steps: [{action: commit, message: x, allow_empty: true}]\n";

fn cmd(r: &Runner, root: &std::path::Path, home: &std::path::Path) -> Command {
    let mut c = r.capsule(root);
    c.env("HOME", home).current_dir(home);
    c
}

/// `Max open files` and `Max file size` soft limits the command sees.
fn limits_seen(text: &str) -> (String, String) {
    let soft = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l[name.len()..].split_whitespace().next())
            .unwrap_or_default()
            .to_string()
    };
    (soft("Max open files"), soft("Max file size"))
}

#[test]
fn spec_limits_only_lower_the_operators_defaults() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let s = scratch();
        let home = s.path().join("home");
        let root = s.path().join("root");
        std::fs::create_dir_all(&home).unwrap();
        // a value that cannot be read: refused at open, naming file and line
        let bad = home.join("bad.yaml");
        std::fs::write(
            &bad,
            format!("name: bad\n{HEAD}sandbox:\n  limits: {{memory: lots}}\n"),
        )
        .unwrap();
        // fds: the spec asks for more than the operator's default (not raised); file
        // size: lower (applied); tmp_size: none of the operator's (applied)
        let spec = home.join("lim.yaml");
        std::fs::write(
            &spec,
            format!(
                "name: lim\n{HEAD}sandbox:\n  limits: {{fds: 4096, file_size: 1M, tmp_size: 16M}}\n"
            ),
        )
        .unwrap();
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(
            root.join("settings.json"),
            r#"{"limits": {"fds": 64, "file_size": "8M"}}"#,
        )
        .unwrap();
        r.own(s.path());
        let o = run(cmd(&r, &root, &home).arg("open").arg(&bad));
        assert_eq!(code(&o), 1, "{}", stderr(&o));
        assert!(
            stderr(&o).contains("bad.yaml:") && stderr(&o).contains("limits.memory"),
            "{}",
            stderr(&o)
        );
        let o = run(cmd(&r, &root, &home).arg("open").arg(&spec));
        assert_ok(&o, "open a spec with limits");
        let o = run(cmd(&r, &root, &home).args(["exec", "lim", "--", "cat", "/proc/self/limits"]));
        assert_ok(&o, "exec under the spec's limits");
        assert_eq!(
            limits_seen(&stdout(&o)),
            ("64".to_string(), (1u64 << 20).to_string()),
            "{}",
            stdout(&o)
        );
        // tmp_size from the spec: /tmp is a tmpfs of 16 MiB
        let o = run(cmd(&r, &root, &home).args(["exec", "lim", "--", "df", "-k", "/tmp"]));
        assert_ok(&o, "df /tmp");
        assert!(stdout(&o).contains("16384"), "{}", stdout(&o));
        // the operator's flags decide over both
        let o = run(cmd(&r, &root, &home).args([
            "exec",
            "lim",
            "--fds",
            "128",
            "--",
            "cat",
            "/proc/self/limits",
        ]));
        assert_ok(&o, "exec with a flag");
        assert_eq!(limits_seen(&stdout(&o)).0, "128");
        // inspect shows them
        let o = run(cmd(&r, &root, &home).args(["inspect", "lim"]));
        assert_ok(&o, "inspect");
        assert!(
            stdout(&o).contains("fds 64") && stdout(&o).contains("file size 1 MiB"),
            "{}",
            stdout(&o)
        );
        let o = run(cmd(&r, &root, &home).args(["inspect", "lim", "--json"]));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["spec_limits"]["fds"], 4096, "{v}");
        assert_eq!(v["plan"]["limits"]["fds"], 64, "{v}");
    }
}

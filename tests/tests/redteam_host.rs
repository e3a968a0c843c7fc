//! Red team: host-side commands (`close`, `inspect`) over what a sandboxed command left in
//! the workspace and the capsule's state. Each case runs as root and as the unprivileged
//! test user.

use capsule_e2e::{runners, stderr, wait_bounded, Project};
use std::path::Path;
use std::process::{Output, Stdio};

fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// After an exec (the home layer's overlay leaves a mode-000 `work/work` in the bundle)
/// and a command that made folders without permissions in the workspace, `close` removes
/// everything, also for an unprivileged user: nothing half-removed stays on disk.
#[test]
fn close_removes_folders_without_permissions() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = Project::new(&r);
        let ws = e.open("perm");
        let o = e.run(&[
            "exec",
            "perm",
            "--",
            "sh",
            "-c",
            "mkdir -p locked/inner/deeper && touch locked/inner/deeper/f && chmod 000 locked/inner locked && echo hi > ~/.newrc",
        ]);
        assert!(o.status.success(), "exec: {}", stderr(&o));
        let o = e.run(&["close", "perm", "--force"]);
        assert!(o.status.success(), "close: {}", stderr(&o));
        assert!(!ws.exists(), "workspace left behind");
        assert_eq!(
            names(&e.root().join("bundles")),
            Vec::<String>::new(),
            "bundle (or a half-removed .closing-*) left behind"
        );
        assert_eq!(names(&e.root().join("workspaces")), Vec::<String>::new());
    }
}

/// `capsule ARGS` as the runner inside a user namespace that may create no more (so
/// `capsule exec` can only run under weaker isolation: Landlock + seccomp, no mounts).
fn no_userns(e: &Project, args: &[&str]) -> Output {
    e.no_userns(args)
        .output()
        .expect("run capsule in a user namespace")
}

/// `capsule inspect` prints the workspace's manifest, "informational". Under weaker
/// isolation (no mounts) the command can replace it: a symlink to a file it cannot read
/// must not be followed (serde's errors quote values), a FIFO must not block `inspect`,
/// and a symlink to /dev/zero must not make it read forever.
#[test]
fn inspect_does_not_follow_a_replaced_manifest() {
    let value = "HIDDEN-VALUE-0b7e";
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = Project::new(&r);
        // a host file hidden from the sandbox (capsule's own state) shaped like a manifest,
        // so a followed link would print it whole
        let secret = e.root().join("hidden.json");
        std::fs::write(
            &secret,
            format!(
                "{{\"capsule_name\": \"{value}\", \"workspace\": \"w\", \"opened_at\": \"t\"}}"
            ),
        )
        .unwrap();
        e.runner.own(&secret);
        e.accept_weaker();
        let plants = [
            (
                "symlink",
                format!("ln -s {} capsule-manifest.json", secret.display()),
            ),
            ("fifo", "mkfifo capsule-manifest.json".to_string()),
            ("zero", "ln -s /dev/zero capsule-manifest.json".to_string()),
        ];
        for (i, (what, plant)) in plants.iter().enumerate() {
            let name = format!("weak{i}");
            e.open(&name);
            let script = format!(
                "cat {} 2>/dev/null && {{ echo 'secret readable inside'; exit 9; }}; rm capsule-manifest.json && {plant}",
                secret.display()
            );
            let o = no_userns(&e, &["exec", &name, "--", "sh", "-c", &script]);
            assert!(o.status.success(), "{what}: weaker exec: {}", stderr(&o));
            // inspect, bounded in time (a FIFO or /dev/zero would block or grow forever)
            let child = e
                .capsule()
                .args(["inspect", &name, "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn inspect");
            let o = wait_bounded(
                child,
                20,
                &format!("{what}: capsule inspect on a replaced manifest"),
            );
            assert!(o.status.success(), "{what}: inspect: {}", stderr(&o));
            let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
            assert!(
                !all.contains(value),
                "{what}: inspect showed a hidden file through the manifest: {all}"
            );
        }
    }
}

//! Red team: weaker isolation (Landlock + seccomp, no namespaces) run by root. Without a
//! mount namespace nothing masks the files only root may read (`/etc/shadow`, private
//! keys), which full isolation masks with mounts: Landlock must leave them out. As root
//! and as the unprivileged test user (for whom file modes already refuse them).

use capsule_e2e::{runners, stderr, stdout, Project};

/// Host files only root may read, with content (the test needs something to look for).
const ROOT_ONLY: &[&str] = &["/etc/shadow", "/etc/ssl/private/ssl-cert-snakeoil.key"];

#[test]
fn root_only_files_stay_hidden_under_weaker_isolation() {
    // lines of the root-only files as the test (root in CI) reads them on the host
    let lines: Vec<String> = ROOT_ONLY
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| t.lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|l| l.len() > 8)
        .collect();
    if lines.is_empty() {
        eprintln!("note: no root-only file readable here (not root?); nothing to look for");
        return;
    }
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = Project::new(&r);
        e.open("w");
        e.accept_weaker();
        let script = format!("cat {} 2>/dev/null; echo done", ROOT_ONLY.join(" "));
        let o = e
            .no_userns(&["exec", "w", "--", "sh", "-c", &script])
            .output()
            .expect("run capsule in a user namespace");
        assert!(o.status.success(), "weaker exec: {}", stderr(&o));
        assert!(stdout(&o).contains("done"), "{}", stdout(&o));
        let out = stdout(&o);
        assert!(
            !lines.iter().any(|l| out.contains(l.as_str())),
            "a root-only file was readable under weaker isolation: {out}"
        );
    }
}

//! Red team: paths hidden by default that appear after the capsule was opened. `open`
//! resolves the policy once and lists only the credential, personal and sibling-project
//! paths that exist then; a credential made later (`aws configure`, a first ssh key, an
//! agent's login) or a project cloned next to the source must be hidden all the same, for
//! `capsule exec` and for the spec's probes. As root and as the unprivileged test user.

use capsule_e2e::{git_repo, runners, scratch, stderr, stdout, Runner};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const SECRET: &str = "LATE-SECRET-5e0a";

fn capsule(r: &Runner, root: &Path, home: &Path) -> Command {
    let mut c = r.capsule(root);
    c.env("HOME", home).current_dir(home).stdin(Stdio::null());
    c
}

#[test]
fn credentials_and_projects_created_after_open_stay_hidden() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let dir = scratch();
        let home = dir.path().join("home");
        let src = home.join("projects/app");
        git_repo(&src, &[("a.txt", "a\n")]);
        let root: PathBuf = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        r.own(dir.path());
        let o = capsule(&r, &root, &home)
            .args(["open", "--source"])
            .arg(&src)
            .args(["--name", "late"])
            .output()
            .unwrap();
        assert!(o.status.success(), "open: {}", stderr(&o));

        // made after the open, by the person: credentials, an agent login, a project
        let late = [
            home.join(".aws/credentials"),
            home.join(".ssh/id_ed25519"),
            home.join(".claude/.credentials.json"),
            home.join("projects/other/secret.txt"),
        ];
        for f in &late {
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, SECRET).unwrap();
        }
        r.own(&home);
        let script: String = late
            .iter()
            .map(|f| format!("cat {} 2>/dev/null; ", f.display()))
            .collect::<String>()
            + "echo done";
        let o = capsule(&r, &root, &home)
            .args(["exec", "late", "--", "sh", "-c", &script])
            .output()
            .unwrap();
        assert!(o.status.success(), "exec: {}", stderr(&o));
        assert!(stdout(&o).contains("done"), "{}", stdout(&o));
        assert!(
            !stdout(&o).contains(SECRET),
            "a credential or project created after open was readable: {}",
            stdout(&o)
        );
    }
}

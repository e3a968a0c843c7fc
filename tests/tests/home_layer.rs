//! `capsule home diff|apply|discard` over a home layer made by a real overlayfs mount
//! (as root with `trusted.*` xattrs, and as the unprivileged user in a user namespace with
//! `userxattr`), and over hand-made malicious upper directories.
//!
//! The capsule here is hand-made with capsule-bundle's own types (bundle.json +
//! policy.json) so the review commands are tested on their own; the sandboxed runs that
//! fill the layer through `capsule exec` are in `home_exec.rs`.

use capsule_bundle::layout::Layout;
use capsule_bundle::policy::{NetworkPolicy, SandboxPolicy};
use capsule_e2e::sandbox;
use capsule_e2e::*;
use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A hand-made open capsule whose policy's home is `home`. Returns its bundle dir.
fn fake_capsule(root: &Path, name: &str, home: &Path) -> PathBuf {
    let layout = Layout::new(root);
    let ws = layout.workspaces_dir().join(name);
    let bundle = layout.bundle_dir(name);
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(bundle.join("tmp")).unwrap();
    let ws = std::fs::canonicalize(&ws).unwrap();
    let policy = SandboxPolicy {
        version: 1,
        capsule_name: name.into(),
        workspace: ws.clone(),
        read_only: vec![],
        tmp_dir: std::fs::canonicalize(bundle.join("tmp")).unwrap(),
        home: Some(std::fs::canonicalize(home).unwrap()),
        home_layer: Some(std::fs::canonicalize(&bundle).unwrap().join("home/upper")),
        cache_dir: Some(std::fs::canonicalize(&bundle).unwrap().join("cache")),
        writable: vec![],
        hidden: vec![],
        revealed: vec![],
        pass_env: vec![],
        devices: vec![],
        network: NetworkPolicy::default(),
    };
    sandbox::write_bundle(&bundle, &policy);
    bundle
}

/// A small fake home directory.
fn make_home(home: &Path) {
    write(&home.join(".zshrc"), "# zsh\nalias ll='ls -l'\n");
    write(&home.join(".gitconfig"), "[user]\n\tname = Person\n");
    write(&home.join(".bashrc"), "# bash\n");
    write(&home.join(".profile"), "# profile\n");
    write(&home.join(".config/app/settings"), "a=1\n");
    write(&home.join(".config/app/keep"), "k\n");
    write(&home.join(".ssh/id_ed25519"), "SECRET\n");
}

/// Run `script` with `$M` = an overlay of `home` (upper/work from the bundle) as `r`:
/// root mounts it in a private mount namespace (trusted.* xattrs); the unprivileged user
/// in its own user namespace (`userxattr`).
fn task_in_overlay(r: &Runner, home: &Path, bundle: &Path, script: &str) {
    let upper = bundle.join("home/upper");
    let work = bundle.join("home/work");
    let mnt = bundle.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    r.own(bundle);
    let (unshare, extra) = match r {
        Runner::Current => ("-m", ""),
        Runner::User { .. } => ("-Urm", ",userxattr"),
    };
    let full = format!(
        "set -e; mount -t overlay overlay -o lowerdir={},upperdir={},workdir={}{extra} {}; M={}; export HOME=$M; cd $M; {script}",
        home.display(),
        upper.display(),
        work.display(),
        mnt.display(),
        mnt.display()
    );
    let mut c = Command::new("unshare");
    c.args([unshare, "--", "sh", "-c", &full]);
    c.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
    c.env("GIT_CONFIG_NOSYSTEM", "1");
    if let Runner::User { uid, gid, .. } = r {
        c.uid(*uid).gid(*gid);
    }
    let o = run(&mut c);
    assert_ok(&o, &format!("task in overlay as {}", r.label()));
}

/// The changes `home diff --json` reports, as (path, kind, entry) + refused paths.
fn diff(
    r: &Runner,
    root: &Path,
    name: &str,
) -> (BTreeSet<(String, String, String)>, serde_json::Value) {
    let o = run(r.capsule(root).args(["home", "diff", name, "--json"]));
    assert_ok(&o, "home diff");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let set = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["kind"].as_str().unwrap().to_string(),
                c["entry"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (set, v)
}

fn s3(a: &str, b: &str, c: &str) -> (String, String, String) {
    (a.into(), b.into(), c.into())
}

const TASK: &str = "printf 'export EDITOR=vi\\n' >> .zshrc; \
    git config --global user.email task@example.com; \
    rm .bashrc; \
    : >> .profile; cat .zshrc >/dev/null; \
    rm -r .config/app; mkdir .config/app; echo new > .config/app/other; \
    mkdir -p .tool/bin; printf '#!/bin/sh\\n' > .tool/bin/x; chmod 755 .tool/bin/x";

#[test]
fn diff_apply_discard_over_a_real_overlay() {
    for r in runners() {
        let sc = scratch();
        let home = sc.path().join("home");
        let root = sc.path().join("root");
        make_home(&home);
        let bundle = fake_capsule(&root, "c1", &home);
        r.own(sc.path());
        // the baseline is taken when the layer is first mounted: after the setup
        capsule_runtime::home::layer::prepare(&bundle, &std::fs::canonicalize(&home).unwrap(), &[])
            .unwrap();
        let before = hash_tree(&home);
        task_in_overlay(&r, &home, &bundle, TASK);
        assert_eq!(
            hash_tree(&home),
            before,
            "{}: the real home changed",
            r.label()
        );

        let (got, v) = diff(&r, &root, "c1");
        let want: BTreeSet<_> = [
            s3(".bashrc", "removed", "file"),
            s3(".config/app/keep", "removed", "file"),
            s3(".config/app/settings", "removed", "file"),
            s3(".config/app/other", "added", "file"),
            s3(".gitconfig", "changed", "file"),
            s3(".tool", "added", "dir"),
            s3(".tool/bin", "added", "dir"),
            s3(".tool/bin/x", "added", "file"),
            s3(".zshrc", "changed", "file"),
        ]
        .into_iter()
        .collect();
        assert_eq!(got, want, "{}: {v}", r.label());
        let zshrc = v["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == ".zshrc")
            .unwrap();
        let d = zshrc["diff"].as_str().unwrap();
        assert!(
            d.contains("+export EDITOR=vi") && d.contains(" alias ll='ls -l'"),
            "{d}"
        );
        // what would run as the person once applied is marked; an ordinary file is not
        let marked = |p: &str| {
            v["changes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["path"] == p)
                .map(|c| c["runs_as_you"].is_string())
                .unwrap()
        };
        assert!(marked(".zshrc") && marked(".gitconfig"), "{v}");
        assert!(!marked(".config/app/other") && !marked(".bashrc"), "{v}");
        // the human form names them too
        let o = run(r.capsule(&root).args(["home", "diff", "c1"]));
        assert_ok(&o, "home diff");
        assert!(
            stdout(&o).contains(
                "changed ~/.gitconfig\n        RUNS AS YOU once applied (git configuration"
            ),
            "{}",
            stdout(&o)
        );
        assert!(
            stdout(&o).contains("+\temail = task@example.com"),
            "{}",
            stdout(&o)
        );

        // apply one path: only that path changes
        let gitconfig_before = std::fs::read(home.join(".gitconfig")).unwrap();
        let o = run(r.capsule(&root).args(["home", "apply", "c1", "~/.zshrc"]));
        assert_ok(&o, "home apply ~/.zshrc");
        assert_eq!(
            std::fs::read_to_string(home.join(".zshrc")).unwrap(),
            "# zsh\nalias ll='ls -l'\nexport EDITOR=vi\n"
        );
        assert_eq!(
            std::fs::read(home.join(".gitconfig")).unwrap(),
            gitconfig_before
        );
        assert!(home.join(".bashrc").exists() && home.join(".config/app/keep").exists());
        assert!(!home.join(".tool").exists());
        let (got, _) = diff(&r, &root, "c1");
        assert!(
            !got.iter().any(|c| c.0 == ".zshrc"),
            "applied change still listed: {got:?}"
        );
        assert_eq!(got.len(), want.len() - 1);

        // the person edits .gitconfig meanwhile: apply refuses, --force overrides
        write(&home.join(".gitconfig"), "[user]\n\tname = Person Edited\n");
        r.own(&home);
        let o = run(r.capsule(&root).args(["home", "apply", "c1", ".gitconfig"]));
        assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
        assert!(
            stderr(&o).contains("moved on") && stderr(&o).contains("--force"),
            "{}",
            stderr(&o)
        );
        assert_eq!(
            std::fs::read_to_string(home.join(".gitconfig")).unwrap(),
            "[user]\n\tname = Person Edited\n"
        );
        let o = run(r
            .capsule(&root)
            .args(["home", "apply", "c1", ".gitconfig", "--force"]));
        assert_ok(&o, "home apply --force");
        assert!(std::fs::read_to_string(home.join(".gitconfig"))
            .unwrap()
            .contains("task@example.com"));

        // discard: a path inside the replaced folder is refused, the folder itself works
        let o = run(r
            .capsule(&root)
            .args(["home", "discard", "c1", "~/.config/app/other"]));
        assert_eq!(o.status.code(), Some(1));
        assert!(stderr(&o).contains("replaced as a whole"), "{}", stderr(&o));
        let o = run(r
            .capsule(&root)
            .args(["home", "discard", "c1", "~/.config/app"]));
        assert_ok(&o, "discard ~/.config/app");
        let (got, _) = diff(&r, &root, "c1");
        assert!(!got.iter().any(|c| c.0.starts_with(".config")), "{got:?}");

        // apply the rest: removal and new folders reach the real home
        let o = run(r.capsule(&root).args(["home", "apply", "c1"]));
        assert_ok(&o, "home apply (all)");
        assert!(!home.join(".bashrc").exists());
        assert_eq!(
            std::fs::read_to_string(home.join(".tool/bin/x")).unwrap(),
            "#!/bin/sh\n"
        );
        assert_eq!(
            std::fs::read_to_string(home.join(".config/app/keep")).unwrap(),
            "k\n"
        );
        let (got, _) = diff(&r, &root, "c1");
        assert!(got.is_empty(), "{}: after apply: {got:?}", r.label());

        // discard everything
        let o = run(r.capsule(&root).args(["home", "discard", "c1"]));
        assert_ok(&o, "discard all");
        assert_eq!(
            std::fs::read_dir(bundle.join("home/upper"))
                .unwrap()
                .count(),
            0
        );
        // bad paths are refused with a clear message
        for bad in ["../etc/passwd", "/etc/passwd", "~"] {
            let o = run(r.capsule(&root).args(["home", "apply", "c1", bad]));
            assert_eq!(o.status.code(), Some(1), "{bad}");
            assert!(
                stderr(&o).contains("not a path under the home directory"),
                "{}",
                stderr(&o)
            );
        }
    }
}

/// Set an xattr on a path (test helper).
fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C strings and buffer.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "setxattr {name} on {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

fn mknod(p: &Path, mode: u32, dev: u64) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C string.
    let r = unsafe { libc::mknod(c.as_ptr(), mode as libc::mode_t, dev as libc::dev_t) };
    assert_eq!(
        r,
        0,
        "mknod {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

#[test]
fn xattr_whiteouts_and_opaque_dirs_by_hand() {
    let sc = scratch();
    let home = sc.path().join("home");
    let root = sc.path().join("root");
    make_home(&home);
    let bundle = fake_capsule(&root, "c2", &home);
    let upper = bundle.join("home/upper");
    // user.* form: a zero-size file marked as whiteout, an opaque folder, and the "x"
    // value that only marks a folder holding xattr whiteouts (not opaque)
    write(&upper.join(".bashrc"), "");
    set_xattr(&upper.join(".bashrc"), "user.overlay.whiteout", b"");
    std::fs::create_dir_all(upper.join(".config/app")).unwrap();
    set_xattr(&upper.join(".config"), "user.overlay.opaque", b"x");
    set_xattr(&upper.join(".config/app"), "user.overlay.opaque", b"y");
    // trusted.* form (root only) and a char 0/0 whiteout
    mknod(&upper.join(".profile"), libc::S_IFCHR | 0o600, 0);
    // a whiteout for something that does not exist in the real home: no change
    mknod(&upper.join(".nothing"), libc::S_IFCHR | 0o600, 0);
    let (got, v) = diff(&Runner::Current, &root, "c2");
    let want: BTreeSet<_> = [
        s3(".bashrc", "removed", "file"),
        s3(".config/app/keep", "removed", "file"),
        s3(".config/app/settings", "removed", "file"),
        s3(".profile", "removed", "file"),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want, "{v}");
    let d = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == ".bashrc")
        .unwrap();
    assert!(d["diff"].as_str().unwrap().contains("-# bash"), "{d}");
}

#[test]
fn malicious_upper_dir_is_refused() {
    for r in runners() {
        let sc = scratch();
        let home = sc.path().join("home");
        let root = sc.path().join("root");
        let outside = sc.path().join("outside");
        make_home(&home);
        write(&outside.join("victim"), "untouched\n");
        // the person's own symlinked folder in home: apply must not write through it
        std::os::unix::fs::symlink(&outside, home.join(".linked")).unwrap();
        let bundle = fake_capsule(&root, "c3", &home);
        let upper = bundle.join("home/upper");
        std::fs::create_dir_all(&upper).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", upper.join(".evil")).unwrap();
        std::fs::create_dir_all(upper.join(".config")).unwrap();
        std::os::unix::fs::symlink("../../outside/victim", upper.join(".config/escape")).unwrap();
        std::os::unix::fs::symlink(".zshrc", upper.join(".fine-link")).unwrap();
        mknod(&upper.join(".dev"), libc::S_IFCHR | 0o666, (1 << 8) | 3);
        mknod(&upper.join(".fifo"), libc::S_IFIFO | 0o666, 0);
        write(
            &upper.join(".ssh/authorized_keys"),
            "ssh-ed25519 AAAA attacker\n",
        );
        write(&upper.join(".ok"), "fine\n");
        write(&upper.join(".linked/victim"), "overwritten\n");
        r.own(sc.path());
        // the baseline is taken when the layer is first mounted: after the setup
        capsule_runtime::home::layer::prepare(&bundle, &std::fs::canonicalize(&home).unwrap(), &[])
            .unwrap();
        let before_home = hash_tree(&home);
        let before_out = hash_tree(&outside);

        let (got, v) = diff(&r, &root, "c3");
        let refused: BTreeSet<String> = v["changes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c.get("refused").is_some())
            .map(|c| c["path"].as_str().unwrap().to_string())
            .collect();
        let want_refused: BTreeSet<String> = [".evil", ".config/escape", ".dev", ".fifo", ".ssh"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(refused, want_refused, "{}: {v}", r.label());
        assert!(got.contains(&s3(".ok", "added", "file")));
        assert!(got.contains(&s3(".fine-link", "added", "symlink")));

        // applying everything is refused as a whole: nothing is written
        let o = run(r.capsule(&root).args(["home", "apply", "c3", "--force"]));
        assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
        assert!(stderr(&o).contains("refused"), "{}", stderr(&o));
        assert_eq!(hash_tree(&home), before_home);
        assert_eq!(hash_tree(&outside), before_out);
        for bad in [
            "~/.evil",
            "~/.dev",
            "~/.fifo",
            "~/.ssh/authorized_keys",
            "~/.config/escape",
        ] {
            let o = run(r
                .capsule(&root)
                .args(["home", "apply", "c3", bad, "--force"]));
            assert_eq!(o.status.code(), Some(1), "{bad}");
        }
        assert_eq!(hash_tree(&home), before_home);

        // the safe ones apply; the task's folder replaces the person's symlink instead of
        // writing through it
        let o = run(r.capsule(&root).args([
            "home",
            "apply",
            "c3",
            "~/.ok",
            "~/.fine-link",
            "~/.linked",
        ]));
        assert_ok(&o, "apply safe paths");
        assert_eq!(std::fs::read_to_string(home.join(".ok")).unwrap(), "fine\n");
        assert_eq!(
            std::fs::read_link(home.join(".fine-link")).unwrap(),
            PathBuf::from(".zshrc")
        );
        assert_eq!(
            hash_tree(&outside),
            before_out,
            "{}: wrote through a symlink",
            r.label()
        );
        assert!(std::fs::symlink_metadata(home.join(".linked"))
            .unwrap()
            .is_dir());
        assert_eq!(
            std::fs::read_to_string(home.join(".linked/victim")).unwrap(),
            "overwritten\n"
        );
        assert!(!home.join(".evil").exists() && !home.join(".ssh/authorized_keys").exists());
    }
}

//! The home is default deny: inside the sandbox it shows only what development tools need
//! (toolchains, git's and shells' configuration, tool configuration without credentials),
//! and everything else of it is absent (ENOENT, never an empty file), whatever its name,
//! including what the operator makes on the host while an exec runs or after a warm spare
//! was prepared. `--reveal` opens more, read-only. Writes still land in the home layer.

use capsule_e2e::sandbox::{each_runner, err, ok, out, Capsule, NAME, SECRET};
use std::path::Path;

/// Twenty credentials where no list of capsule's names them.
const PLANTED: &[&str] = &[
    ".config/containers/auth.json",
    ".bash_history",
    ".cache/huggingface/token",
    ".config/rclone/rclone.conf",
    ".pulumi/credentials.json",
    ".config/doctl/config.yaml",
    ".zsh_history",
    ".python_history",
    ".lesshst",
    ".config/heroku/credentials",
    ".fly/config.yml",
    ".config/netlify/config.json",
    ".vercel/auth.json",
    ".config/sentry/sentryclirc",
    ".databrickscfg",
    ".snowsql/config",
    ".config/linode-cli",
    ".oci/config",
    ".wrangler/config/default.toml",
    "work/other-project/.env",
];

const TOKEN: &str = "PLANTED-TOKEN-9b2e";

fn plant(home: &Path, rel: &str) {
    let p = home.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, format!("token={TOKEN}\n")).unwrap();
}

/// A script printing `ABSENT <rel>` for each path that does not exist (stat fails with
/// ENOENT) and `SEEN <rel>` otherwise, and the content of whatever it could read.
fn probe(home: &Path, rels: &[&str]) -> String {
    let mut s = String::new();
    for r in rels {
        let p = home.join(r);
        s.push_str(&format!(
            "if [ -e '{p}' ] || [ -L '{p}' ]; then echo 'SEEN {r}'; cat '{p}' 2>/dev/null; else echo 'ABSENT {r}'; fi\n",
            p = p.display()
        ));
    }
    s
}

fn assert_absent(stdout: &str, rels: &[&str]) {
    for r in rels {
        assert!(
            stdout.lines().any(|l| l == format!("ABSENT {r}")),
            "{r} is visible inside:\n{stdout}"
        );
    }
    assert!(
        !stdout.contains(TOKEN),
        "a planted token was read:\n{stdout}"
    );
}

#[test]
fn credentials_on_no_list_are_absent_and_tools_config_is_there() {
    each_runner(|r| {
        let c = Capsule::new(r);
        for p in PLANTED {
            plant(&c.home, p);
        }
        std::fs::write(
            c.home.join(".gitconfig"),
            "[user]\n\tname = Op Erator\n\temail = op@example.com\n",
        )
        .unwrap();
        std::fs::write(c.home.join(".bashrc"), "# bashrc of the operator\n").unwrap();
        std::fs::create_dir_all(c.home.join(".cargo/bin")).unwrap();
        std::fs::write(c.home.join(".cargo/config.toml"), "[build]\n").unwrap();
        std::fs::write(c.home.join("notes.txt"), "a plain file of the home\n").unwrap();
        c.runner.own(c.dir.path());
        let mut script = probe(&c.home, PLANTED);
        // the listing of the home itself shows none of them either
        script.push_str(&format!("ls -a '{}'\n", c.home.display()));
        script.push_str(&format!(
            "cat '{h}/.gitconfig' '{h}/.bashrc' '{h}/.cargo/config.toml'\n",
            h = c.home.display()
        ));
        let o = c.sh(&script);
        ok(&o, "probe");
        let so = out(&o);
        assert_absent(&so, PLANTED);
        for name in [
            ".bash_history",
            ".pulumi",
            ".oci",
            "work",
            ".databrickscfg",
            "notes.txt",
        ] {
            assert!(
                !so.lines().any(|l| l == name),
                "{name} listed in the home:\n{so}"
            );
        }
        for want in ["name = Op Erator", "# bashrc of the operator", "[build]"] {
            assert!(so.contains(want), "{want} not readable:\n{so}\n{}", err(&o));
        }
    });
}

#[test]
fn a_credential_made_on_the_host_later_is_absent_for_a_running_exec_and_a_prepared_spare() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // folders the view shows: a credential made in them later stays absent too
        std::fs::create_dir_all(c.home.join(".cargo/bin")).unwrap();
        std::fs::create_dir_all(c.home.join(".config/git")).unwrap();
        std::fs::write(
            c.home.join(".config/git/config"),
            "[core]\n\tpager = less\n",
        )
        .unwrap();
        c.runner.own(c.dir.path());
        // a first exec prepares the root and its warm spares
        ok(&c.sh("true"), "warm up");
        let late = [
            ".config/late-tool/token",
            ".late_history",
            ".cargo/credentials.toml",
            ".config/git/credentials",
        ];
        // the workspace is the one folder both sides see
        let gate = c.ws.join("gate");
        let script = format!(
            "n=0; while [ ! -e '{g}' ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done\n{}cat '{h}/.config/git/config'; ls -d '{h}/.cargo/bin'\n",
            probe(&c.home, &late),
            g = gate.display(),
            h = c.home.display()
        );
        // while an exec runs (in a spare prepared before), the operator writes a token
        let mut cmd = c.capsule();
        cmd.arg("exec").arg(NAME).args(["--", "sh", "-c", &script]);
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = cmd.spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        for l in late {
            plant(&c.home, l);
        }
        c.runner.own(c.dir.path());
        std::fs::write(&gate, "").unwrap();
        let o = child.wait_with_output().unwrap();
        ok(&o, "running exec");
        assert_absent(&out(&o), &late);
        // the folders holding them are shown
        assert!(out(&o).contains("pager = less"), "{}", out(&o));
        assert!(out(&o).contains(".cargo/bin"), "{}", out(&o));
        // and the next exec: where capsule watches the credentials' masks, the two of the
        // credential list are shown as the empty masks that list their reads (its plan
        // has them now: another prepared root), the rest stays absent; elsewhere all of
        // them are absent, from a spare prepared before the token was made
        let o = c.sh(&probe(&c.home, &late));
        ok(&o, "next exec");
        assert!(!out(&o).contains(TOKEN), "{}", out(&o));
        if r.watches_masks() {
            assert_absent(&out(&o), &late[..2]);
            for l in &late[2..] {
                assert!(
                    out(&o).lines().any(|x| x == format!("SEEN {l}")),
                    "{}",
                    out(&o)
                );
            }
        } else {
            assert_absent(&out(&o), &late);
        }
        let rec = c.records();
        assert_eq!(
            rec.last().unwrap()["applied"]["root"],
            "prepared",
            "served by the prepared root"
        );
    });
}

#[test]
fn reveal_opens_one_path_read_only() {
    each_runner(|r| {
        let c = Capsule::new(r);
        plant(&c.home, ".config/tool/settings");
        plant(&c.home, ".config/other/token");
        c.runner.own(c.dir.path());
        let dir = c.home.join(".config/tool");
        let file = dir.join("settings");
        let script = format!(
            "cat '{f}'; (echo x >> '{f}') 2>/dev/null && echo WROTE; {}",
            probe(&c.home, &[".config/other/token"]),
            f = file.display()
        );
        let o = c.exec_with(&["--reveal", dir.to_str().unwrap()], &["sh", "-c", &script]);
        ok(&o, "reveal");
        let so = out(&o);
        assert!(so.contains(TOKEN), "the revealed file is readable:\n{so}");
        assert!(
            !so.contains("WROTE"),
            "the revealed file is read-only:\n{so}"
        );
        assert!(so.contains("ABSENT .config/other/token"), "{so}");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            format!("token={TOKEN}\n")
        );
        // without the flag: absent
        let o = c.sh(&probe(&c.home, &[".config/tool/settings"]));
        ok(&o, "no reveal");
        assert_absent(&out(&o), &[".config/tool/settings"]);
    });
}

#[test]
fn git_commit_uses_the_operators_identity_and_home_writes_land_in_the_layer() {
    each_runner(|r| {
        let c = Capsule::new(r);
        std::fs::write(
            c.home.join(".gitconfig"),
            "[user]\n\tname = Op Erator\n\temail = op@example.com\n",
        )
        .unwrap();
        c.runner.own(c.dir.path());
        let o = c.sh(
            "echo change >> README.md && git commit -qam change && git log -1 --format='%an <%ae>' \
             && git config --global core.editor vi && echo new > ~/.newfile && cat ~/.newfile",
        );
        ok(&o, "git commit");
        let so = out(&o);
        assert!(so.contains("Op Erator <op@example.com>"), "{so}");
        assert!(so.contains("new"), "{so}");
        // the writes are in the layer, the real home is unchanged
        let upper = c.bundle.join("home/upper");
        assert!(upper.join(".newfile").exists());
        let g = std::fs::read_to_string(upper.join(".gitconfig")).unwrap();
        assert!(g.contains("editor = vi") && g.contains("Op Erator"), "{g}");
        assert!(!c.home.join(".newfile").exists());
        assert!(!std::fs::read_to_string(c.home.join(".gitconfig"))
            .unwrap()
            .contains("editor"));
        // and the next exec sees them through the layer
        let o = c.sh("cat ~/.newfile; git config --global core.editor");
        ok(&o, "again");
        assert_eq!(out(&o), "new\nvi\n");
    });
}

#[test]
fn a_spec_capsules_sibling_projects_are_absent() {
    each_runner(|r| {
        let s = capsule_e2e::scratch();
        let home = s.path().join("home");
        let spec = home.join("src/specs/tiny");
        std::fs::create_dir_all(&spec).unwrap();
        std::fs::write(
            spec.join("capsule.yaml"),
            "name: tiny\nsource:\n  synthetic: true\n  steps:\n    - {action: write, path: t.txt, content: \"t\\n\"}\n    - {action: commit, message: t}\n",
        )
        .unwrap();
        for p in [
            "src/other-project/.env",
            "src/specs/notes/plan.md",
            "work/client/key",
        ] {
            plant(&home, p);
        }
        let root = home.join(".local/share/capsule");
        std::fs::create_dir_all(&root).unwrap();
        r.own(s.path());
        let cap = |args: &[&str]| {
            let mut c = r.capsule(&root);
            c.env("HOME", &home).current_dir(&home).args(args);
            c.stdin(std::process::Stdio::null());
            c.output().unwrap()
        };
        let o = cap(&["open", spec.to_str().unwrap()]);
        ok(&o, "open the spec");
        let rels = [
            "src/other-project/.env",
            "src/specs/notes/plan.md",
            "src/specs/tiny/capsule.yaml",
            "work/client/key",
        ];
        let o = cap(&[
            "exec",
            "tiny",
            "--",
            "sh",
            "-c",
            &format!("cat t.txt; {}", probe(&home, &rels)),
        ]);
        ok(&o, "exec");
        assert!(out(&o).starts_with("t\n"), "{}", out(&o));
        assert_absent(&out(&o), &rels);
        ok(&cap(&["close", "tiny"]), "close");
    });
}

#[test]
fn a_shown_file_edited_on_the_host_is_seen_by_the_next_exec() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let rc = c.home.join(".bashrc");
        std::fs::write(&rc, "# one\n").unwrap();
        c.runner.own(c.dir.path());
        let o = c.sh("cat ~/.bashrc");
        ok(&o, "first");
        assert_eq!(out(&o), "# one\n");
        // edited in place (same inode): the prepared root's copy is stale, so another one
        std::fs::write(&rc, "# two\n").unwrap();
        let o = c.sh("cat ~/.bashrc");
        ok(&o, "after the edit");
        assert_eq!(out(&o), "# two\n");
    });
}

#[test]
fn dotfiles_kept_elsewhere_are_shown_and_leave_no_change_in_the_layer() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let dots = c.home.join("dotfiles");
        std::fs::create_dir_all(dots.join("nvim")).unwrap();
        std::fs::write(dots.join("nvim/init.lua"), "-- init\n").unwrap();
        std::fs::write(dots.join("bashrc"), "# linked bashrc\n").unwrap();
        plant(&c.home, "dotfiles/secret-token");
        std::fs::create_dir_all(c.home.join(".config")).unwrap();
        std::os::unix::fs::symlink(dots.join("nvim"), c.home.join(".config/nvim")).unwrap();
        std::os::unix::fs::symlink("dotfiles/bashrc", c.home.join(".bashrc")).unwrap();
        c.runner.own(c.dir.path());
        let o = c.sh(&format!(
            "cat ~/.config/nvim/init.lua ~/.bashrc; {}",
            probe(&c.home, &["dotfiles/secret-token"])
        ));
        ok(&o, "read through links");
        let so = out(&o);
        assert!(
            so.contains("-- init") && so.contains("# linked bashrc"),
            "{so}\n{}",
            err(&o)
        );
        assert_absent(&so, &["dotfiles/secret-token"]);
        let o = c.capsule().args(["home", "diff", NAME]).output().unwrap();
        ok(&o, "home diff");
        assert!(out(&o).contains("no home changes"), "{}", out(&o));
    });
}

#[test]
fn a_layer_symlink_where_a_shown_folder_appears_later_is_never_followed() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let ssh = c.home.join(".ssh");
        // the task leaves a symlink in the layer where no folder is shown yet, pointing
        // at the real ~/.ssh as seen from the layer's folder on the host (relative)
        let depth = c
            .bundle
            .join("home/upper/.config")
            .strip_prefix(&c.home)
            .unwrap()
            .components()
            .count();
        let target = format!("{}.ssh", "../".repeat(depth));
        let o = c.sh(&format!(
            "mkdir -p ~/.config && ln -s '{target}' ~/.config/git && echo PLANTED"
        ));
        ok(&o, "plant");
        assert!(out(&o).contains("PLANTED"), "{}", err(&o));
        // then the operator starts a git config: a shown folder, a new root
        std::fs::create_dir_all(c.home.join(".config/git")).unwrap();
        std::fs::write(c.home.join(".config/git/config"), "[core]\n").unwrap();
        c.runner.own(c.dir.path());
        let o = c.sh(
            "cat ~/.config/git/id_rsa; ls -a ~/.config/git/; echo x > ~/.config/git/planted; true",
        );
        ok(&o, "exec after the folder appeared");
        assert!(!out(&o).contains(SECRET), "{}", out(&o));
        assert!(!out(&o).contains("id_rsa"), "{}", out(&o));
        assert!(!ssh.join("planted").exists(), "wrote into the real ~/.ssh");
        assert_eq!(std::fs::read_dir(&ssh).unwrap().count(), 1);
    });
}

/// Execs of different plans (here: one more hidden path) mount their own overlays of the
/// one home layer; a folder of the view that one of them copies up into the layer must
/// stay writable for the others (it was ENOENT for them, and an agent CLI retrying its
/// `mkdir -p ~/.cache/x` spun forever).
#[test]
fn writes_below_the_views_folders_work_across_plans() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let other = c.dir.path().join("other-plan");
        std::fs::create_dir_all(&other).unwrap();
        c.runner.own(c.dir.path());
        let hide = other.display().to_string();
        // the second plan's root is prepared (its overlay mounted) first
        ok(
            &c.exec_with(&["--hide", &hide], &["true"]),
            "prepare plan 2",
        );
        let a = c.home.join(".cache/from-plan-1").display().to_string();
        ok(&c.exec(&["mkdir", &a]), "mkdir under ~/.cache, plan 1");
        let b = c.home.join(".cache/from-plan-2").display().to_string();
        ok(
            &c.exec_with(&["--hide", &hide], &["mkdir", &b]),
            "mkdir under ~/.cache, plan 2",
        );
    });
}

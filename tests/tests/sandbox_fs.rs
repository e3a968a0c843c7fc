//! Adversarial filesystem tests: secrets stay unreadable (directly, through symlinks, hard
//! links and /proc/<pid>/root), nothing outside the writable roots can be written,
//! truncated or renamed into, and the capsule's own manifest and records cannot be
//! tampered with. Each test also shows the sandbox is not simply refusing everything
//! (the same kind of access succeeds where the policy allows it).
use capsule_e2e::sandbox::*;

#[test]
fn secrets_are_hidden_directly() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // what the home shows is visible (so the hiding below is the sandbox's doing)
        let o = c.sh("cat \"$HOME/.profile\"");
        ok(&o, "reading a plain file in home");
        assert_eq!(out(&o), "readable\n");
        for p in [".ssh/id_rsa", "Documents/diary.txt"] {
            let o = c.sh(&format!(
                "cat \"$HOME/{p}\"; ls -a \"$HOME/{}\"",
                p.split('/').next().unwrap()
            ));
            assert!(!out(&o).contains(SECRET), "{p} readable: {}", out(&o));
            assert!(
                !out(&o).contains("id_rsa") && !out(&o).contains("diary"),
                "{p} listable: {}",
                out(&o)
            );
        }
        // host-side check that the secret is really there (a sandbox doing nothing would leak it)
        assert_eq!(
            std::fs::read_to_string(c.home.join(".ssh/id_rsa")).unwrap(),
            SECRET
        );
    });
}

#[test]
fn secrets_stay_hidden_through_symlinks_hardlinks_and_proc_root() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // planted before the exec: a symlink in the workspace pointing at the secret
        std::os::unix::fs::symlink(c.home.join(".ssh/id_rsa"), c.ws.join("planted")).unwrap();
        let script = r#"
            cat planted
            ln -s "$HOME/.ssh/id_rsa" mine && cat mine
            ln "$HOME/.ssh/id_rsa" hard 2>/dev/null && cat hard
            cat "/proc/1/root$HOME/.ssh/id_rsa"
            cat "/proc/self/root$HOME/.ssh/id_rsa"
            cat "/proc/$$/root$HOME/.ssh/id_rsa"
            for p in /proc/[0-9]*; do cat "$p/root$HOME/.ssh/id_rsa"; done
            exit 0
        "#;
        let o = c.sh(script);
        ok(&o, "script");
        assert!(!out(&o).contains(SECRET), "secret leaked: {}", out(&o));
        // a hard link of the secret must not have been made in the workspace
        if let Ok(s) = std::fs::read_to_string(c.ws.join("hard")) {
            assert!(!s.contains(SECRET));
        }
    });
}

#[test]
fn nothing_outside_the_writable_roots_can_be_written() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let before = std::fs::read_to_string(c.home.join(".profile")).unwrap();
        let script = r#"
            for f in /etc/capsule-test /usr/capsule-test /capsule-test /var/capsule-test "$HOME/.local/share/capsule/x"; do
              if (echo pwned > "$f") 2>/dev/null; then echo "WROTE $f"; fi
            done
            # the home directory is the capsule's home layer: these land there,
            # never in the real home (checked below)
            (echo pwned > "$HOME/new"; echo pwned > "$HOME/.profile") 2>/dev/null
            (: > "$HOME/.profile"; truncate -s 0 "$HOME/.profile") 2>/dev/null
            cp README.md "$HOME/README.md" 2>/dev/null
            (mkdir "$HOME/newdir"; rm "$HOME/.profile") 2>/dev/null
            # allowed: the workspace, /tmp, $TMPDIR
            echo ok > ws-file && echo ok > /tmp/t && echo ok > "$TMPDIR/t2" && echo ALLOWED
        "#;
        let o = c.sh(script);
        ok(&o, "script");
        let s = out(&o);
        assert!(
            !s.contains("WROTE") && !s.contains("TRUNCATED") && !s.contains("RENAMED"),
            "{s}"
        );
        assert!(!c.home.join("newdir").exists(), "{s}");
        assert!(
            s.contains("ALLOWED"),
            "legitimate writes failed: {s}\n{}",
            err(&o)
        );
        assert_eq!(
            std::fs::read_to_string(c.home.join(".profile")).unwrap(),
            before
        );
        assert!(c.ws.join("README.md").exists() && !c.home.join("README.md").exists());
        assert!(!c.home.join("new").exists());
        assert!(!std::path::Path::new("/etc/capsule-test").exists());
        // the capsule's /tmp is its bundle's tmp, shared by its execs
        assert_eq!(
            std::fs::read_to_string(c.bundle.join("tmp/t")).unwrap(),
            "ok\n"
        );
        ok(&c.sh("cat /tmp/t"), "second exec sees the capsule's /tmp");
    });
}

#[test]
fn host_tmp_is_not_the_sandbox_tmp() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let marker = format!("/tmp/capsule-host-tmp-{}", std::process::id());
        std::fs::write(&marker, SECRET).unwrap();
        let o = c.sh(&format!("cat {marker}; ls /tmp"));
        std::fs::remove_file(&marker).unwrap();
        assert!(!out(&o).contains(SECRET), "{}", out(&o));
    });
}

#[test]
fn manifest_sentinel_and_records_cannot_be_tampered_with() {
    each_runner(|r| {
        let c = Capsule::new(r);
        ok(&c.exec(&["true"]), "first exec writes a record");
        let watched = [
            c.ws.join("capsule-manifest.json"),
            c.ws.join(".kitsoki-capsule"),
            c.bundle.join("policy.json"),
            c.bundle.join("bundle.json"),
            c.bundle.join("events.jsonl"),
        ];
        let before: Vec<Vec<u8>> = watched.iter().map(|p| std::fs::read(p).unwrap()).collect();
        let root = c.root.display().to_string();
        let script = format!(
            r#"
            (echo '{{}}' > capsule-manifest.json) 2>/dev/null && echo TAMPERED-manifest
            rm -f .kitsoki-capsule 2>/dev/null; [ -e .kitsoki-capsule ] || echo TAMPERED-sentinel
            mv capsule-manifest.json m2 2>/dev/null && echo TAMPERED-rename
            (echo x >> {root}/bundles/t/events.jsonl) 2>/dev/null && echo TAMPERED-events
            (echo x > {root}/bundles/t/policy.json) 2>/dev/null && echo TAMPERED-policy
            cat {root}/bundles/t/policy.json 2>/dev/null && echo READ-policy
            ls {root}/bundles/t 2>/dev/null
            cat capsule-manifest.json >/dev/null && echo MANIFEST-READABLE
        "#
        );
        let o = c.sh(&script);
        let s = out(&o);
        assert!(!s.contains("TAMPERED") && !s.contains("READ-policy"), "{s}");
        assert!(!s.contains("policy.json"), "the bundle is listable: {s}");
        assert!(s.contains("MANIFEST-READABLE"), "{s}\n{}", err(&o));
        for (p, b) in watched.iter().zip(&before) {
            let now = std::fs::read(p).unwrap();
            if p.ends_with("events.jsonl") {
                // the runtime appended one record for the exec above, nothing else
                assert!(now.starts_with(b) && now.len() > b.len());
                assert_eq!(now.iter().filter(|&&x| x == b'\n').count(), 2);
            } else {
                assert_eq!(&now, b, "{} changed", p.display());
            }
        }
    });
}

#[test]
fn allow_write_hide_and_reveal() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let extra = c.home.join("extra");
        std::fs::create_dir(&extra).unwrap();
        r.own(&extra);
        let f = format!("{}/f", extra.display());
        // without --allow-write the write lands in the home layer, not in `extra`
        let _ = c.sh(&format!("echo x > {f}"));
        assert!(!std::path::Path::new(&f).exists());
        let o = c.exec_with(
            &["--allow-write", extra.to_str().unwrap()],
            &["sh", "-c", &format!("echo x > {f}")],
        );
        ok(&o, "--allow-write");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "x\n");

        let notes = c.home.join(".profile");
        let o = c.exec_with(
            &["--hide", notes.to_str().unwrap()],
            &["cat", notes.to_str().unwrap()],
        );
        assert!(!out(&o).contains("readable"), "--hide: {}", out(&o));

        let docs = c.home.join("Documents");
        let o = c.exec_with(
            &["--reveal", docs.to_str().unwrap()],
            &["cat", docs.join("diary.txt").to_str().unwrap()],
        );
        ok(&o, "--reveal");
        assert_eq!(out(&o), SECRET);
        let o = c.exec_with(
            &["--reveal", docs.to_str().unwrap()],
            &[
                "sh",
                "-c",
                &format!("echo x >> {}/diary.txt", docs.display()),
            ],
        );
        assert!(!o.status.success(), "revealed paths are read-only");
        // capsule's own state cannot be revealed nor made writable
        let o = c.exec_with(&["--reveal", c.bundle.to_str().unwrap()], &["true"]);
        assert_eq!(code(&o), 1, "{}", err(&o));
        let o = c.exec_with(&["--allow-write", c.bundle.to_str().unwrap()], &["true"]);
        assert_eq!(code(&o), 1, "{}", err(&o));
    });
}

#[test]
fn kernel_knobs_and_system_secrets_stay_out_of_reach() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // root runs mapped to itself: file modes alone would let it write these
        let script = r#"
            (echo h > /proc/sysrq-trigger) 2>/dev/null && echo WROTE-sysrq
            (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null && echo WROTE-sysctl
            cat /etc/shadow 2>/dev/null | head -c 4 | grep -q . && echo READ-shadow
            cat /proc/kcore 2>/dev/null | head -c 4 | grep -q . && echo READ-kcore
            ls /dev | tr '\n' ' '
        "#;
        let o = c.sh(script);
        let s = out(&o);
        assert!(!s.contains("WROTE") && !s.contains("READ"), "{s}");
        for d in ["sda", "vda", "mem", "kmsg", "input"] {
            assert!(
                !s.split_whitespace().any(|x| x == d),
                "/dev/{d} present: {s}"
            );
        }
        for d in ["null", "zero", "urandom", "tty", "pts", "shm"] {
            assert!(
                s.split_whitespace().any(|x| x == d),
                "/dev/{d} missing: {s}"
            );
        }
    });
}

//! Prepared roots: a capsule's root is built once per plan by a holder and
//! joined by each exec. Joined roots hide what a fresh one hides, a stale root is never
//! joined, and holders go away with the capsule.
use capsule_e2e::procs::{host_procs, wait_until};
use capsule_e2e::sandbox::*;
use std::path::Path;

/// How the last exec's root came to be (`prepared`, `built`, `host`).
fn last_root(c: &Capsule) -> String {
    c.records()
        .last()
        .and_then(|r| r["applied"]["root"].as_str().map(str::to_string))
        .unwrap_or_default()
}

fn sockets(c: &Capsule) -> Vec<String> {
    std::fs::read_dir(c.bundle.join("prepared"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".sock"))
                .collect()
        })
        .unwrap_or_default()
}

/// Processes (any) whose mount table still shows `path`.
fn mounts_of(path: &Path) -> usize {
    let needle = path.to_string_lossy().into_owned();
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let mi = std::fs::read_to_string(e.path().join("mountinfo")).unwrap_or_default();
        if mi.contains(&needle) {
            n += 1;
        }
    }
    n
}

#[test]
fn execs_join_one_prepared_root_that_hides_the_same() {
    each_runner(|r| {
        let c = Capsule::new(r);
        ok(&c.exec(&["true"]), "first exec");
        assert_eq!(last_root(&c), "prepared");
        assert_eq!(sockets(&c).len(), 1, "{:?}", sockets(&c));
        let o = c.sh("cat ~/.ssh/id_rsa; cat ~/Documents/diary.txt; cat ~/.profile");
        assert_eq!(last_root(&c), "prepared");
        assert!(!out(&o).contains(SECRET), "secret readable: {}", out(&o));
        assert!(out(&o).contains("readable"), "{}", err(&o));
        // the same holder served both: no second one
        assert_eq!(sockets(&c).len(), 1, "{:?}", sockets(&c));
        // each exec has a /proc and pid namespace of its own
        let o = c.sh("ls /proc | grep -c '^[0-9]'");
        ok(&o, "ls /proc");
        let n: u32 = out(&o).trim().parse().unwrap_or(99);
        assert!(n <= 4, "processes seen inside: {n}");
        // and a write lands in the workspace, as in a built root
        ok(&c.sh("echo x > made-inside.txt"), "write");
        assert!(c.ws.join("made-inside.txt").exists());
    });
}

#[test]
fn a_hidden_folder_replaced_on_the_host_stays_hidden() {
    // rmdir of a masked folder detaches its mask in every namespace, the holder's too:
    // the next exec must not join that root (its fingerprint names the folder's inode).
    // A folder hidden inside the workspace is guarded by the mask alone (Landlock cannot
    // take back beneath a writable root).
    each_runner(|r| {
        let c = Capsule::new(r);
        let vault = c.ws.join("vault");
        std::fs::create_dir(&vault).unwrap();
        std::fs::write(vault.join("old.txt"), "old").unwrap();
        r.own(&vault);
        let hide = vault.to_string_lossy().into_owned();
        let look = ["sh", "-c", "cat vault/*; ls vault"];
        let o = c.exec_with(&["--hide", &hide], &look);
        assert!(
            !out(&o).contains("old"),
            "hidden folder visible: {}",
            out(&o)
        );
        assert_eq!(last_root(&c), "prepared");
        std::fs::remove_dir_all(&vault).unwrap();
        std::fs::create_dir(&vault).unwrap();
        std::fs::write(vault.join("new.txt"), "VAULT-NEW-SECRET-5").unwrap();
        r.own(&vault);
        let o = c.exec_with(&["--hide", &hide], &look);
        assert_eq!(last_root(&c), "prepared");
        assert!(
            !out(&o).contains("VAULT-NEW-SECRET-5") && !out(&o).contains("new.txt"),
            "the replaced hidden folder is visible: {}",
            out(&o)
        );

        // the same for a credentials folder in the home
        ok(&c.exec(&["true"]), "exec");
        let ssh = c.home.join(".ssh");
        std::fs::remove_dir_all(&ssh).unwrap();
        std::fs::create_dir(&ssh).unwrap();
        std::fs::write(ssh.join("id_ed25519"), "NEW-KEY-MATERIAL-77").unwrap();
        r.own(&ssh);
        let o = c.sh("cat ~/.ssh/id_ed25519; ls -a ~/.ssh");
        assert!(
            !out(&o).contains("NEW-KEY-MATERIAL-77") && !out(&o).contains("id_ed25519"),
            "the replaced folder is visible: {}",
            out(&o)
        );
        // a credentials folder made after the holder is hidden as well
        let aws = c.home.join(".aws");
        std::fs::create_dir(&aws).unwrap();
        std::fs::write(aws.join("credentials"), "AWS-NEW-SECRET-31").unwrap();
        r.own(&aws);
        let o = c.sh("cat ~/.aws/credentials");
        assert!(!out(&o).contains("AWS-NEW-SECRET-31"), "{}", out(&o));
    });
}

#[test]
fn concurrent_first_execs_all_run() {
    each_runner(|r| {
        let c = Capsule::new(r);
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..6)
                .map(|i| {
                    let c = &c;
                    s.spawn(move || c.sh(&format!("echo {i} > /tmp/c{i}; cat /tmp/c{i}")))
                })
                .collect();
            for (i, h) in hs.into_iter().enumerate() {
                let o = h.join().unwrap();
                ok(&o, "concurrent exec");
                assert_eq!(out(&o).trim(), i.to_string());
            }
        });
        assert!(sockets(&c).len() <= 4, "{:?}", sockets(&c));
    });
}

#[test]
fn prepared_roots_can_be_turned_off() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let mut cmd = c.capsule();
        cmd.env("CAPSULE_PREPARED_IDLE", "0")
            .args(["exec", NAME, "--", "cat", "/proc/self/status"])
            .stdin(std::process::Stdio::null());
        let o = cmd.output().unwrap();
        ok(&o, "exec without prepared roots");
        assert_eq!(last_root(&c), "built");
        assert!(sockets(&c).is_empty(), "{:?}", sockets(&c));
    });
}

#[test]
fn holders_end_when_idle_or_closed_and_leave_nothing() {
    each_runner(|r| {
        // idle: a holder with a one-second idle time goes, with its socket and mounts
        let c = Capsule::new(r);
        let marker = format!("idle-marker-{}", std::process::id());
        let mut cmd = c.capsule();
        cmd.env("CAPSULE_PREPARED_IDLE", "1")
            .args(["exec", NAME, "--", "sh", "-c", &format!("true {marker}")])
            .stdin(std::process::Stdio::null());
        ok(&cmd.output().unwrap(), "exec");
        assert_eq!(last_root(&c), "prepared");
        // the holder does not carry the command line of the exec that spawned it
        assert!(
            wait_until(|| host_procs(&marker).is_empty(), 10),
            "processes named after the command: {:?}",
            host_procs(&marker)
        );
        assert!(
            wait_until(|| sockets(&c).is_empty(), 15),
            "{:?}",
            sockets(&c)
        );
        assert!(
            wait_until(|| mounts_of(&c.ws) == 0, 15),
            "{} processes still mount the workspace",
            mounts_of(&c.ws)
        );

        // closed: `capsule close` stops the holders of the capsule
        let c = Capsule::new(r);
        ok(&c.exec(&["true"]), "exec");
        assert_eq!(sockets(&c).len(), 1);
        assert!(mounts_of(&c.ws) > 0, "no holder mounts the workspace");
        let mut cmd = c.capsule();
        cmd.args(["close", NAME, "--force"])
            .stdin(std::process::Stdio::null());
        let o = cmd.output().unwrap();
        ok(&o, "close");
        assert!(
            wait_until(|| mounts_of(&c.ws) == 0, 15),
            "{} processes still mount the closed capsule's workspace",
            mounts_of(&c.ws)
        );
    });
}

#[test]
fn a_warm_exec_gets_the_callers_umask_limits_and_stdio() {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    each_runner(|r| {
        let c = Capsule::new(r);
        ok(&c.exec(&["true"]), "first exec (spawns the holder)");
        for (mask, limit) in [(0o077u32, 1234u64), (0o002, 777)] {
            let mut cmd = c.capsule();
            cmd.args(["exec", NAME, "--", "sh", "-c", "umask; ulimit -n; cat"]);
            // SAFETY: async-signal-safe calls between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    libc::umask(mask);
                    let l = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: 4096,
                    };
                    libc::setrlimit(libc::RLIMIT_NOFILE, &l);
                    Ok(())
                });
            }
            let mut ch = cmd
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            ch.stdin.take().unwrap().write_all(b"from-stdin\n").unwrap();
            let o = ch.wait_with_output().unwrap();
            ok(&o, "exec with umask and limit");
            assert_eq!(last_root(&c), "prepared");
            let text = out(&o);
            assert!(
                text.contains(&format!("{mask:04o}")),
                "umask not the caller's ({mask:04o}): {text}"
            );
            assert!(
                text.contains(&limit.to_string()),
                "limit not the caller's: {text}"
            );
            assert!(
                text.contains("from-stdin"),
                "stdin not the caller's: {text}"
            );
        }
    });
}

#[test]
fn commands_that_end_at_once_never_leave_an_exec_waiting() {
    // a command that is gone before init watches for its end must still be seen to end
    // (init blocks its signals before the fork and looks at its children periodically)
    each_runner(|r| {
        let c = Capsule::new(r);
        for i in 0..40 {
            let mut cmd = c.capsule();
            cmd.args(["exec", NAME, "--", "true"])
                .stdin(std::process::Stdio::null());
            let o = capsule_e2e::bounded::bounded(&mut cmd, 20);
            ok(&o, &format!("exec {i}"));
        }
        assert_eq!(last_root(&c), "prepared");
    });
}

#[test]
fn an_idle_holder_waits_for_the_execs_in_its_spares() {
    // the holder's pid namespace holds the spares it handed out: it must not end (and kill
    // them) while one still runs, idle time or not
    each_runner(|r| {
        let c = Capsule::new(r);
        let mut cmd = c.capsule();
        cmd.env("CAPSULE_PREPARED_IDLE", "1")
            .args(["exec", NAME, "--", "sh", "-c", "sleep 3; echo survived"])
            .stdin(std::process::Stdio::null());
        let o = capsule_e2e::bounded::bounded(&mut cmd, 30);
        ok(&o, "long exec past the idle time");
        assert!(out(&o).contains("survived"), "{}", out(&o));
        assert_eq!(last_root(&c), "prepared");
        assert!(
            wait_until(|| sockets(&c).is_empty(), 15),
            "{:?}",
            sockets(&c)
        );
    });
}

/// A plan that differs only in what it decides (here `--no-network`: the same mounts from
/// the same host paths, TCP refused even on the sandbox's loopback) gets a root of its
/// own: the fingerprint is made from the plan's digest, which the record keeps.
#[test]
fn a_plan_that_decides_otherwise_never_joins_another_plans_root() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let tcp = ["bash", "-c", "(exec 3<>/dev/tcp/127.0.0.1/9) 2>&1; true"];
        let digest = |c: &Capsule| c.records().last().unwrap()["applied"]["plan_digest"].clone();
        let o = c.exec(&tcp);
        ok(&o, "loopback");
        assert_eq!(last_root(&c), "prepared");
        assert!(out(&o).contains("Connection refused"), "{}", out(&o));
        let first = digest(&c);
        assert!(first.as_str().is_some_and(|d| d.starts_with("sha256:")));
        let o = c.exec_with(&["--no-network"], &tcp);
        ok(&o, "--no-network");
        assert_eq!(last_root(&c), "prepared");
        assert!(!out(&o).contains("Connection refused"), "{}", out(&o));
        assert_ne!(digest(&c), first, "two plans, one digest");
        assert_eq!(sockets(&c).len(), 2, "{:?}", sockets(&c));
        // the first plan again: its own holder, the same digest
        let o = c.exec(&tcp);
        assert!(out(&o).contains("Connection refused"), "{}", out(&o));
        assert_eq!(digest(&c), first);
        assert_eq!(sockets(&c).len(), 2, "{:?}", sockets(&c));
    });
}

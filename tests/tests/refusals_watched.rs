//! Reads of the home's hidden credentials listed by default: where capsule can open
//! `/dev/fuse` (root here), each hidden credential the host has is an empty, read-only
//! mask served by capsule, and every lookup, listing and open in it is a refused read in
//! the record and on stderr, in each way an exec gets its root (a warm spare, a root
//! built for it, a prepared root joined). Where it cannot (`capsule-ci` here: `/dev/fuse`
//! is 0600 root's), the home's hidden credentials stay absent and nothing is listed
//! without `--list-reads`. Either way no byte of them reaches the sandbox.
use capsule_e2e::sandbox::*;
use capsule_e2e::Runner;

fn refusals(c: &Capsule) -> Vec<String> {
    let rec = c.records().pop().expect("exec record");
    let home = c.home.display().to_string();
    let mut v: Vec<String> = rec["refusals"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|r| {
            format!(
                "{} {} ({}) {} {}",
                r["kind"].as_str().unwrap_or(""),
                r["target"].as_str().unwrap_or("").replace(&home, "~"),
                r["program"].as_str().unwrap_or(""),
                r["grant"].as_str().unwrap_or("-").replace(&home, "~"),
                r["count"],
            )
        })
        .collect();
    v.sort();
    v
}

/// `capsule exec NAME [flags] -- sh -c script` with `env` set, stdin from /dev/null.
fn sh_with(
    c: &Capsule,
    env: &[(&str, &std::ffi::OsStr)],
    flags: &[&str],
    script: &str,
) -> std::process::Output {
    let mut cmd = c.capsule();
    cmd.envs(env.iter().copied());
    cmd.args(["exec", NAME]);
    cmd.args(flags);
    cmd.args(["--", "sh", "-c", script]);
    cmd.stdin(std::process::Stdio::null());
    cmd.output().unwrap()
}

fn planted(r: &Runner) -> Capsule {
    let c = Capsule::new(r);
    std::fs::write(c.home.join(".ssh/id_ed25519"), SECRET).unwrap();
    std::fs::create_dir_all(c.home.join(".aws")).unwrap();
    std::fs::write(c.home.join(".aws/credentials"), SECRET).unwrap();
    std::fs::write(c.home.join(".netrc"), SECRET).unwrap();
    c.runner.own(&c.home);
    c
}

/// One command reads a key, lists a folder and reads a file of the hidden credentials:
/// exactly those three refusals, named, with their grants, by default.
#[test]
fn credential_reads_are_listed_by_default_in_each_kind_of_root() {
    each_runner(|r| {
        let c = planted(r);
        let home = c.home.display().to_string();
        let script = format!(
            "cat {home}/.ssh/id_ed25519; ls -a {home}/.aws; cat {home}/.netrc; \
             cat {home}/.aws/credentials 2>/dev/null; cat README.md >/dev/null; \
             stat -c '%a %s' {home}/.ssh {home}/.netrc 2>&1; true"
        );
        // a warm spare, a root built for this exec, a prepared root joined (the proxy's
        // relay runs inside)
        for (idle, extra) in [
            ("30", &[][..]),
            ("0", &[][..]),
            ("30", &["--allow-host", "listed.test:443"][..]),
        ] {
            let o = sh_with(
                &c,
                &[("CAPSULE_PREPARED_IDLE", idle.as_ref())],
                extra,
                &script,
            );
            ok(&o, "reads of hidden credentials");
            assert!(!out(&o).contains(SECRET), "{}", out(&o));
            let got = refusals(&c);
            if r.watches_masks() {
                // shown as the empty, read-only entries they are
                assert_eq!(
                    out(&o),
                    ".\n..\n555 40\n444 0\n",
                    "{idle} {extra:?}: {}",
                    err(&o)
                );
                assert_eq!(
                    got,
                    [
                        "read ~/.aws (ls) --reveal ~/.aws 1",
                        "read ~/.aws/credentials (cat) --reveal ~/.aws 1",
                        "read ~/.netrc (cat) --reveal ~/.netrc 1",
                        "read ~/.ssh/id_ed25519 (cat) --reveal ~/.ssh 1",
                    ],
                    "{idle} {extra:?}: {}",
                    err(&o)
                );
                for line in [
                    format!("capsule: refused read {home}/.ssh/id_ed25519 (cat): a hidden path; to allow: --reveal {home}/.ssh\n"),
                    format!("capsule: refused read {home}/.aws (ls): listing a hidden folder; to allow: --reveal {home}/.aws\n"),
                    format!("capsule: refused read {home}/.netrc (cat): a hidden path; to allow: --reveal {home}/.netrc\n"),
                ] {
                    assert!(err(&o).contains(&line), "{line}: {}", err(&o));
                }
            } else {
                // absent, as the rest of the hidden home, and not listed
                assert!(got.is_empty(), "{got:?}");
                assert!(
                    out(&o).contains("cannot statx") || out(&o).contains("cannot stat"),
                    "{}",
                    out(&o)
                );
            }
        }
    });
}

/// The masks give nothing and take nothing: no write lands in them (nor in the home
/// layer), they cannot be unmounted, and `--reveal` shows the real folder again.
#[test]
fn watched_masks_are_read_only_and_a_reveal_shows_the_real_folder() {
    each_runner(|r| {
        if !r.watches_masks() {
            return;
        }
        let c = planted(r);
        let home = c.home.display().to_string();
        let o = c.sh(&format!(
            "touch {home}/.ssh/new 2>&1; mkdir {home}/.aws/d 2>&1; echo x > {home}/.netrc 2>&1; \
             umount {home}/.ssh 2>/dev/null; chmod 700 {home}/.ssh 2>&1; ls -a {home}/.ssh; true"
        ));
        ok(&o, "writes");
        // and they are the watched masks, not plain ones (those would list nothing)
        let got = refusals(&c);
        for want in [
            "read ~/.ssh/new (touch) --reveal ~/.ssh",
            "read ~/.aws/d (mkdir) --reveal ~/.aws",
            "read ~/.ssh (ls) --reveal ~/.ssh",
        ] {
            assert!(got.iter().any(|g| g.starts_with(want)), "{want}: {got:?}");
        }
        let s = out(&o);
        // touch, mkdir, chmod here; the shell's redirection on its stderr
        assert_eq!(s.matches("Read-only file system").count(), 3, "{s}");
        assert!(err(&o).contains("Read-only file system"), "{}", err(&o));
        assert!(s.ends_with(".\n..\n"), "{s}");
        assert!(!c.home.join(".ssh/new").exists());
        assert_eq!(
            std::fs::read_to_string(c.home.join(".netrc")).unwrap(),
            SECRET
        );
        let o = c.exec_with(
            &["--reveal", &format!("{home}/.ssh")],
            &["cat", &format!("{home}/.ssh/id_ed25519")],
        );
        ok(&o, "revealed");
        assert_eq!(out(&o), SECRET, "{}", err(&o));
        assert!(
            !refusals(&c).iter().any(|l| l.contains(".ssh")),
            "{:?}",
            refusals(&c)
        );
    });
}

/// A storm of lookups of distinct names: each answered, the record bounded (counts and
/// a number dropped), and the sandbox's end is never held up by the server.
#[test]
fn a_storm_of_lookups_keeps_the_record_bounded() {
    each_runner(|r| {
        if !r.watches_masks() {
            return;
        }
        let c = planted(r);
        let home = c.home.display().to_string();
        let script = format!(
            "import os\nfor i in range(20000):\n try: os.stat('{home}/.ssh/k%d' % (i % 400))\n except OSError: pass\nprint('done')"
        );
        let t = std::time::Instant::now();
        let o = c.exec_with(&["--quiet-refusals"], &["python3", "-c", &script]);
        ok(&o, "storm");
        assert_eq!(out(&o), "done\n");
        let rec = c.records().pop().unwrap();
        let list = rec["refusals"].as_array().unwrap();
        assert_eq!(list.len(), 256, "{}", list.len());
        assert!(rec["refusals_dropped"].as_u64().unwrap() > 0, "{rec}");
        assert_eq!(list[0]["count"], 50, "{}", list[0]);
        let line = serde_json::to_string(&rec).unwrap();
        assert!(line.len() < 128 * 1024, "{}", line.len());
        eprintln!("20,000 lookups in a watched mask: {:?}", t.elapsed());
    });
}

/// A watched mask answers what a plain mask answers (a `--hide` folder in the workspace,
/// a tmpfs-backed mask as before): kind, mode, links, owner, size, and a listing of `.`
/// and `..` only.
#[test]
fn a_watched_mask_answers_as_a_plain_mask() {
    each_runner(|r| {
        if !r.watches_masks() {
            return;
        }
        let c = planted(r);
        std::fs::create_dir_all(c.ws.join("private")).unwrap();
        std::fs::write(c.ws.join("private/notes"), SECRET).unwrap();
        std::fs::write(c.ws.join("private.txt"), SECRET).unwrap();
        c.runner.own(c.dir.path());
        let home = c.home.display().to_string();
        let ws = c.ws.display().to_string();
        let o = c.exec_with(
            &[
                "--hide",
                &format!("{ws}/private"),
                "--hide",
                &format!("{ws}/private.txt"),
            ],
            &[
                "sh",
                "-c",
                &format!(
                    "for p in {ws}/private {home}/.aws {ws}/private.txt {home}/.netrc; do \
                     stat -c '%F %a %h %u %g %s' $p; ls -a $p | tr '\\n' ' '; echo; \
                     cat $p/x 2>&1 | sed 's|.*: ||'; done"
                ),
            ],
        );
        ok(&o, "stat");
        let text = out(&o);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 12, "{}", out(&o));
        assert_eq!(lines[0..3], lines[3..6], "{}", out(&o));
        // (a file's listing is its name)
        assert_eq!((lines[6], lines[8]), (lines[9], lines[11]), "{}", out(&o));
        assert!(lines[0].starts_with("directory 555 2 "), "{}", out(&o));
        assert_eq!(lines[1], ". .. ", "{}", out(&o));
        assert_eq!(lines[2], "No such file or directory");
        assert!(
            lines[6].starts_with("regular empty file 444 1 "),
            "{}",
            out(&o)
        );
        assert_eq!(lines[8], "Not a directory");
        // the watched ones said what they were asked; the plain ones said nothing
        let got = refusals(&c);
        assert!(
            got.iter().any(|g| g.starts_with("read ~/.aws (ls) ")),
            "{got:?}"
        );
        assert!(
            got.iter().any(|g| g.starts_with("read ~/.aws/x (cat) ")),
            "{got:?}"
        );
        assert!(!got.iter().any(|g| g.contains("private")), "{got:?}");
    });
}

/// An unprivileged user who may open the FUSE device (most distributions make it 0666)
/// gets the same listing: init opens and mounts the connections in the sandbox's user
/// namespace, which that user owns. `/dev/fuse` is root's here, so the test gives
/// `capsule-ci` a node of the same device that it may open (`CAPSULE_FUSE_TEST_DEVICE`,
/// for tests only; capsule checks that it is the FUSE device).
#[test]
fn an_unprivileged_user_who_may_open_fuse_gets_the_listing_too() {
    each_runner(|r| {
        // made by the tests' root, for the unprivileged runner
        if r.uid() == 0 || capsule_e2e::Runner::Current.uid() != 0 {
            return;
        }
        let c = planted(r);
        let dev = c.dir.path().join("fuse");
        let st = std::process::Command::new("mknod")
            .args(["-m", "0666"])
            .arg(&dev)
            .args(["c", "10", "229"])
            .status()
            .unwrap();
        assert!(st.success());
        // a scratch folder on a `nodev` mount cannot hold a usable node: nothing to test
        if std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&dev)
            .is_err()
        {
            eprintln!("skipped: {} cannot be opened (nodev?)", dev.display());
            return;
        }
        let home = c.home.display().to_string();
        for idle in ["30", "0"] {
            let o = sh_with(
                &c,
                &[
                    ("CAPSULE_FUSE_TEST_DEVICE", dev.as_os_str()),
                    ("CAPSULE_PREPARED_IDLE", idle.as_ref()),
                ],
                &[],
                &format!("cat {home}/.ssh/id_ed25519 2>/dev/null; ls {home}/.aws; true"),
            );
            ok(&o, "as an unprivileged user");
            assert!(!out(&o).contains(SECRET), "{}", out(&o));
            assert_eq!(
                refusals(&c),
                [
                    "read ~/.aws (ls) --reveal ~/.aws 1",
                    "read ~/.ssh/id_ed25519 (cat) --reveal ~/.ssh 1",
                ],
                "{idle}: {}",
                err(&o)
            );
        }
        // a node of another device is not used: the credentials are then absent, as
        // without FUSE, and nothing is listed
        std::fs::remove_file(&dev).unwrap();
        let st = std::process::Command::new("mknod")
            .args(["-m", "0666"])
            .arg(&dev)
            .args(["c", "1", "3"])
            .status()
            .unwrap();
        assert!(st.success());
        let o = sh_with(
            &c,
            &[("CAPSULE_FUSE_TEST_DEVICE", dev.as_os_str())],
            &[],
            &format!("ls {home}/.aws 2>&1; cat {home}/.aws/credentials; true"),
        );
        ok(&o, "another device");
        assert!(!out(&o).contains(SECRET), "{}", out(&o));
        assert!(out(&o).contains("No such file or directory"), "{}", out(&o));
        assert!(refusals(&c).is_empty(), "{:?}", refusals(&c));
    });
}

/// A watched mask's mount point is resolved without following a symlink: a task that
/// left `~/.config` in the home layer as a link to its workspace cannot make the mask of
/// `~/.config/gh` (a credential the operator makes later) land on a folder of its choice.
#[test]
fn a_watched_mask_is_never_mounted_through_a_symlink_the_task_left() {
    each_runner(|r| {
        if !r.watches_masks() {
            return;
        }
        let c = planted(r);
        let ws = c.ws.display().to_string();
        let o = c.sh(&format!(
            "mkdir -p {ws}/gh && echo mine > {ws}/gh/kept && ln -s {ws} ~/.config && echo PLANTED"
        ));
        ok(&o, "plant");
        assert!(out(&o).contains("PLANTED"), "{}", err(&o));
        std::fs::create_dir_all(c.home.join(".config/gh")).unwrap();
        std::fs::write(c.home.join(".config/gh/hosts.yml"), SECRET).unwrap();
        c.runner.own(c.dir.path());
        for idle in ["30", "0"] {
            let o = sh_with(
                &c,
                &[("CAPSULE_PREPARED_IDLE", idle.as_ref())],
                &[],
                &format!("cat {ws}/gh/kept; cat ~/.config/gh/hosts.yml 2>/dev/null; true"),
            );
            ok(&o, "exec after the credential appeared");
            assert_eq!(out(&o), "mine\n", "{idle}: {}", err(&o));
        }
    });
}

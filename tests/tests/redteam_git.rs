//! Red team: host-side code that reads what a sandboxed command wrote into the workspace's
//! git directory. After `capsule exec`, the host computes the record's workspace changes
//! with gix, and `capsule close` reads HEAD: a command can plant a hostile `.git/config`,
//! point `.git` at another repository, or put FIFOs and symlinks to the host's own stdin
//! where git reads its metadata. None of it may run a program on the host, leak what the
//! sandbox cannot read, or hang the host process. Every case runs as root and as the
//! unprivileged test user.

use capsule_e2e::{bounded, runners, stderr as err, wait_bounded, Project, Runner};
use std::path::PathBuf;
use std::process::{Output, Stdio};

/// A capsule root with a tiny source checkout, owned by the runner.
fn project(runner: &Runner) -> Project {
    Project::with_files(runner, &[("a.txt", "a\n"), ("sub/b.txt", "b\n")])
}

/// `capsule exec name --json -- sh -c script`, bounded in time.
fn exec(e: &Project, name: &str, script: &str) -> Output {
    bounded(
        e.capsule()
            .args(["exec", name, "--json", "--", "sh", "-c", script]),
        TIMEOUT,
    )
}

fn marker(e: &Project) -> PathBuf {
    e.dir.path().join("HOST-RAN-WORKSPACE-CONFIG")
}

/// Longest any of these host commands may take: they end in well under a second when
/// nothing blocks them.
const TIMEOUT: u64 = 30;

/// The exec record printed by `--json` (last line of stdout).
#[track_caller]
fn record(o: &Output) -> serde_json::Value {
    let s = String::from_utf8_lossy(&o.stdout);
    let line = s.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("no exec record ({e}): {s}\nstderr: {}", err(o)))
}

/// A hostile `.git/config` and `.gitattributes` written from inside: a clean filter on
/// every file, fsmonitor, hooks, diff.external, an ssh command. Nothing runs on the host
/// when the record is computed or the capsule closed.
#[test]
fn workspace_git_config_never_runs_on_the_host() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = project(&r);
        let ws = e.open("cfg");
        let m = marker(&e);
        let m = m.display();
        let script = format!(
            r#"set -e
git config filter.x.clean 'touch {m}; cat'
git config filter.x.smudge 'touch {m}; cat'
git config filter.x.process 'touch {m}'
git config filter.x.required true
git config core.fsmonitor 'touch {m}'
git config core.hooksPath "$PWD/hooks"
git config diff.external 'touch {m}'
git config core.sshCommand 'touch {m}'
git config core.askPass 'touch {m}'
mkdir hooks
for h in post-index-change reference-transaction post-checkout pre-commit; do
  printf '#!/bin/sh\ntouch {m}\n' > hooks/$h; chmod +x hooks/$h
done
echo '* filter=x diff=x' > .gitattributes
git config diff.x.textconv 'touch {m}; cat'
echo changed > a.txt
echo new > c.txt
"#
        );
        let o = exec(&e, "cfg", &script);
        assert!(o.status.success(), "exec: {}", err(&o));
        let rec = record(&o);
        let changes = &rec["changes"];
        assert!(
            changes["added"].to_string().contains("c.txt"),
            "changes still computed: {rec}"
        );
        assert!(!marker(&e).exists(), "workspace git config ran on the host");
        // a second exec (snapshot before) and close (HEAD read) must not run it either
        let o = exec(&e, "cfg", "true");
        assert!(o.status.success(), "exec: {}", err(&o));
        let o = bounded(e.capsule().args(["close", "cfg", "--force"]), TIMEOUT);
        assert!(o.status.success(), "close: {}", err(&o));
        assert!(!ws.exists());
        assert!(
            !marker(&e).exists(),
            "workspace git config ran on the host (second exec or close)"
        );
    }
}

/// `.git` replaced from inside by a file `gitdir: <other capsule's .git>`, by a symlink to
/// it, or a `commondir` pointing there: the other capsule is hidden from the command, so
/// the host must not read that repository into this capsule's record.
#[test]
fn record_does_not_follow_git_redirects_to_hidden_repositories() {
    // under full isolation `.git` is a mount point the command cannot replace (the first
    // two plants fail there; redteam_hostgit checks that): what is left must still not
    // be followed
    let redirects: &[(&str, &str)] = &[
        (
            "gitfile",
            r#"{ rm -rf .git && printf 'gitdir: %s\n' "$OTHER/.git" > .git; } 2>/dev/null; true"#,
        ),
        (
            "symlink",
            r#"{ rm -rf .git && ln -s "$OTHER/.git" .git; } 2>/dev/null; true"#,
        ),
        (
            "commondir",
            r#"printf '%s\n' "$OTHER/.git" > .git/commondir"#,
        ),
    ];
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = project(&r);
        let other = e.open("other");
        // the other capsule's repository: a file name and a commit only it has
        let secret = "hidden-repo-file-name-7c1e.txt";
        let o = exec(
            &e,
            "other",
            &format!("echo s > {secret} && git add {secret} && git -c user.name=o -c user.email=o@o commit -qm s && git rev-parse HEAD"),
        );
        assert!(o.status.success(), "commit in other: {}", err(&o));
        let rec = record(&o);
        let other_head = rec["changes"]["head"][1]
            .as_str()
            .expect("HEAD moved in other")
            .to_string();
        for (i, (what, plant)) in redirects.iter().enumerate() {
            let name = format!("redir{i}");
            e.open(&name);
            let script = format!(
                "OTHER={}; test ! -e \"$OTHER\" || {{ echo 'other capsule visible'; exit 9; }}; {plant}",
                other.display()
            );
            let o = exec(&e, &name, &script);
            assert!(o.status.success(), "{what}: exec: {}", err(&o));
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let _ = record(&o);
            assert!(
                !text.contains(secret) && !text.contains(&other_head),
                "{what}: the record shows a hidden repository's files or HEAD: {text}"
            );
            let events = e.events(&name);
            assert!(
                !events.contains(secret) && !events.contains(&other_head),
                "{what}: events.jsonl shows a hidden repository's files or HEAD"
            );
        }
    }
}

/// FIFOs planted where git reads metadata (HEAD, config, index, a ref, packed-refs,
/// info/exclude, a `.gitignore` or `.gitattributes` in a subfolder): the host's record
/// computation would block forever opening them (no writer is left once the sandbox has
/// ended). `capsule exec` must finish with the command's status, the next exec must start,
/// and `capsule close` must finish.
#[test]
fn fifos_in_git_metadata_do_not_hang_the_host() {
    let plants: &[(&str, &str)] = &[
        ("HEAD", "rm .git/HEAD && mkfifo .git/HEAD"),
        ("config", "rm .git/config && mkfifo .git/config"),
        ("index", "rm .git/index && mkfifo .git/index"),
        ("ref", "rm -f .git/refs/heads/main && mkfifo .git/refs/heads/main"),
        ("packed-refs", "rm -f .git/packed-refs && mkfifo .git/packed-refs"),
        ("exclude", "rm -f .git/info/exclude && mkfifo .git/info/exclude"),
        ("gitignore", "mkfifo sub/.gitignore"),
        ("gitattributes", "mkfifo sub/.gitattributes"),
        ("ref-symlink", "rm -f .git/refs/heads/main && mkfifo /tmp/f && ln -s \"$CAPSULE_TMP/f\" .git/refs/heads/main"),
    ];
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = project(&r);
        for (i, (what, plant)) in plants.iter().enumerate() {
            let name = format!("fifo{i}");
            e.open(&name);
            let tmp = e.root().join("bundles").join(&name).join("tmp");
            let script = format!("CAPSULE_TMP={}; {plant}; exit 7", tmp.display());
            let o = exec(&e, &name, &script);
            assert_eq!(
                o.status.code(),
                Some(7),
                "{what}: the command's own status: {}",
                err(&o)
            );
            let rec = record(&o);
            assert_eq!(rec["exit_status"], 7, "{what}: {rec}");
            // the next exec snapshots the workspace before it starts
            let o = exec(&e, &name, "echo next");
            assert!(
                String::from_utf8_lossy(&o.stdout).starts_with("next"),
                "{what}: second exec: {}",
                err(&o)
            );
            let o = bounded(e.capsule().args(["close", &name, "--force"]), TIMEOUT);
            assert!(o.status.success(), "{what}: close: {}", err(&o));
        }
    }
}

/// Symlinks from git metadata to `/proc/self/fd/0`: followed on the host, git would read
/// the host process's own stdin (the caller's pipe or terminal) and block on it.
#[test]
fn git_metadata_symlinked_to_host_stdin_is_not_read() {
    let plants: &[(&str, &str)] = &[
        (
            "config",
            "rm .git/config && ln -s /proc/self/fd/0 .git/config",
        ),
        ("HEAD", "rm .git/HEAD && ln -s /proc/self/fd/0 .git/HEAD"),
        (
            "ref",
            "rm -f .git/refs/heads/main && ln -s /proc/self/fd/0 .git/refs/heads/main",
        ),
        (
            "exclude",
            "rm -f .git/info/exclude && ln -s /proc/self/fd/0 .git/info/exclude",
        ),
    ];
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = project(&r);
        for (i, (what, plant)) in plants.iter().enumerate() {
            let name = format!("stdin{i}");
            e.open(&name);
            // stdin: a pipe the caller keeps open and never writes to (an agent's pipe)
            let mut cmd = e.capsule();
            cmd.args(["exec", &name, "--json", "--", "sh", "-c", plant])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().expect("spawn");
            let keep = child.stdin.take();
            let o = wait_bounded(child, TIMEOUT, &format!("{what}: exec with an open stdin"));
            drop(keep);
            assert!(o.status.success(), "{what}: {}", err(&o));
            let _ = record(&o);
        }
    }
}

/// Git metadata symlinked to a host file the command cannot read (here: one in capsule's
/// own state, hidden from the sandbox): gix on the host would follow the link, and its
/// parse errors quote what they read (`Invalid packed reference, input="<first line>"`),
/// putting the hidden file's content into the exec record printed by `--json`.
#[test]
fn record_never_quotes_hidden_host_files() {
    let plants: &[(&str, &str)] = &[
        (
            "packed-refs",
            "rm -f .git/packed-refs .git/refs/heads/main && ln -s \"$S\" .git/packed-refs",
        ),
        ("HEAD", "rm .git/HEAD && ln -s \"$S\" .git/HEAD"),
        (
            "ref",
            "rm -f .git/refs/heads/main && ln -s \"$S\" .git/refs/heads/main",
        ),
        ("config", "rm .git/config && ln -s \"$S\" .git/config"),
        ("index", "rm .git/index && ln -s \"$S\" .git/index"),
        (
            "exclude",
            "rm -f .git/info/exclude && ln -s \"$S\" .git/info/exclude",
        ),
    ];
    let value = "SECRET-TOKEN-9d2f61";
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = project(&r);
        let secret = e.root().join("secret-token.txt");
        std::fs::write(&secret, format!("{value}\n")).unwrap();
        e.runner.own(&secret);
        for (i, (what, plant)) in plants.iter().enumerate() {
            let name = format!("leak{i}");
            e.open(&name);
            let script = format!(
                "S={}; cat \"$S\" 2>/dev/null && {{ echo 'secret readable inside'; exit 9; }}; {plant}",
                secret.display()
            );
            let o = exec(&e, &name, &script);
            assert!(o.status.success(), "{what}: {}", err(&o));
            let _ = record(&o);
            let all = format!(
                "{}{}{}",
                String::from_utf8_lossy(&o.stdout),
                err(&o),
                e.events(&name)
            );
            assert!(
                !all.contains(value),
                "{what}: a hidden host file's content reached the record or stderr: {all}"
            );
        }
    }
}

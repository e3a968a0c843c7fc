//! Red team: the operator's own git on the host, in a workspace a sandboxed task has
//! written. After `capsule exec`, the operator runs `git status`, `git diff`, `git log -p`,
//! `git commit`, `git fetch <workspace>` there, as themselves, with their own git. A task
//! that planted config keys that run programs (fsmonitor, filters, textconv, diff.external,
//! includes, hooks...), pointed git elsewhere (core.worktree, a `.git` file or symlink to
//! the operator's real repository, a redirected linked worktree) must get none of it run
//! or followed; ordinary git work inside (commit, branch, rebase, stash, tags, local
//! config, remotes inside the workspace, Kitsoki's worktrees and bare remotes) must keep
//! working. Every case runs as root and as the unprivileged test user; the operator's git
//! runs as the same user, isolated from the machine's configuration.

use capsule_e2e::{bounded, git_repo, kitsoki_capsules, runners, stderr as err, Project, Runner};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const TIMEOUT: u64 = 60;

/// `capsule exec name --json -- sh -c script`, bounded in time.
fn exec(e: &Project, name: &str, script: &str) -> Output {
    bounded(
        e.capsule()
            .args(["exec", name, "--json", "--", "sh", "-c", script]),
        TIMEOUT,
    )
}

/// The exec record printed by `--json` (last line of stdout).
#[track_caller]
fn record(o: &Output) -> serde_json::Value {
    let s = String::from_utf8_lossy(&o.stdout);
    let line = s.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("no exec record ({e}): {s}\nstderr: {}", err(o)))
}

/// The operator's git: the host's `git`, as the runner, with no system or global config,
/// a scratch HOME, and no pager or editor variables (what a plain shell has).
fn host_git(r: &Runner, home: &Path, dir: &Path, args: &[&str]) -> Output {
    let mut c = Command::new("git");
    c.args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Operator")
        .env("GIT_AUTHOR_EMAIL", "op@example.com")
        .env("GIT_COMMITTER_NAME", "Operator")
        .env("GIT_COMMITTER_EMAIL", "op@example.com")
        .stdin(Stdio::null());
    if let Runner::User { uid, gid, .. } = r {
        c.uid(*uid).gid(*gid);
    }
    bounded(&mut c, TIMEOUT)
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A project with a scratch operator HOME and an "outside" folder beside it, owned by the
/// runner.
fn project(r: &Runner) -> (Project, PathBuf, PathBuf) {
    let e = Project::with_files(r, &[("a.txt", "a\n"), ("b.bin", "b\n")]);
    let home = e.dir.path().join("operator-home");
    let outside = e.dir.path().join("outside");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("outside-secret.txt"), "secret\n").unwrap();
    r.own(e.dir.path());
    (e, home, outside)
}

/// Config keys that run programs or point git elsewhere, hooks, an include and attributes,
/// planted from inside; then the operator's status, diff, log -p, commit, fetch and pull
/// on the host run none of it and read nothing outside the workspace.
#[test]
fn planted_git_config_and_hooks_never_run_in_the_operators_git() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let (e, home, outside) = project(&r);
        let ws = e.open("cfg");
        let m = e.dir.path().join("HOST-GIT-RAN-TASK-CODE");
        let md = m.display();
        let od = outside.display();
        let script = format!(
            r#"set -e
run='touch {md}'
mkdir -p peers && git init -q --bare peers/o.git
git remote add origin "$PWD/peers/o.git"
printf '#!/bin/sh\n%s\n' "$run" > peers/o.git/hooks/pre-receive
chmod +x peers/o.git/hooks/pre-receive
git -C peers/o.git config core.fsmonitor "$run"
mkdir sub && git -C sub init -q && git -C sub -c user.name=t -c user.email=t@t commit -q --allow-empty -m s
git add sub 2>/dev/null
git -C sub config core.fsmonitor "$run"
git config core.fsmonitor "$run"
git config core.pager "$run"
git config core.editor "$run"
git config core.sshCommand "$run"
git config sequence.editor "$run"
git config gpg.program "$run"
git config diff.external "$run"
git config filter.x.clean "$run; cat"
git config filter.x.smudge "$run; cat"
git config filter.x.process "$run"
git config diff.t.textconv "$run; cat"
git config alias.st "!$run"
git config core.hooksPath "$PWD/myhooks"
git config credential.helper "!$run"
git config uploadpack.packObjectsHook "$run"
git config core.worktree {od}
printf '[core]\n\tfsmonitor = %s\n' "$run" > inc.cfg
git config include.path "$PWD/inc.cfg"
git config 'includeIf.gitdir:/.path' "$PWD/inc.cfg"
git config 'remote.evil.url' "ext::sh -c touch% {md}"
printf '* filter=x diff=t\n' > .gitattributes
mkdir -p myhooks
for h in pre-commit post-commit post-checkout post-index-change reference-transaction; do
  printf '#!/bin/sh\n%s\n' "$run" > myhooks/$h; chmod +x myhooks/$h
  if printf '#!/bin/sh\n%s\n' "$run" > .git/hooks/$h 2>/dev/null; then chmod +x .git/hooks/$h; echo "HOOK-$h-WRITTEN"; fi
done
echo changed > a.txt
echo new > c.txt
"#
        );
        let o = exec(&e, "cfg", &script);
        assert!(o.status.success(), "exec: {}", err(&o));
        // full isolation: .git/hooks is read-only for the command
        assert!(
            !["pre-commit", "post-commit", "post-checkout"]
                .iter()
                .any(|h| out(&o).contains(&format!("HOOK-{h}-WRITTEN"))),
            "a hook could be written into .git/hooks: {}",
            out(&o)
        );
        let planted = o;
        // the operator's git on the host
        for args in [
            &["status"][..],
            &["status", "--porcelain", "--untracked-files=all"],
            &["diff"],
            &["diff", "--stat"],
            &["log", "-p", "-1"],
            &["st"],
            &["add", "-A"],
            &["commit", "-q", "-m", "operator"],
            &["checkout", "-q", "-b", "op-branch"],
        ] {
            let o = host_git(&r, &home, &ws, args);
            assert!(
                !m.exists(),
                "host `git {}` ran the task's code",
                args.join(" ")
            );
            assert!(
                !out(&o).contains("outside-secret"),
                "host `git {}` read outside the workspace: {}",
                args.join(" "),
                out(&o)
            );
        }
        let log = host_git(&r, &home, &ws, &["log", "--format=%s", "-1"]);
        assert_eq!(out(&log).trim(), "operator", "{}", err(&log));
        // git pulled from the workspace by the operator's real checkout
        let bare_url = ws.join("peers/o.git").display().to_string();
        let real = e.dir.path().join("operator-real");
        git_repo(&real, &[("r.txt", "r\n")]);
        r.own(&real);
        for args in [
            &["fetch", "-q", ws.to_str().unwrap(), "op-branch"][..],
            &[
                "pull",
                "-q",
                "--no-rebase",
                "--allow-unrelated-histories",
                ws.to_str().unwrap(),
                "op-branch",
            ],
            // the bare remote inside the workspace: receive-pack runs its hooks
            &[
                "push",
                "-q",
                bare_url.as_str(),
                "HEAD:refs/heads/from-operator",
            ],
        ] {
            let o = host_git(&r, &home, &real, args);
            assert!(o.status.success(), "git {args:?}: {}", err(&o));
            assert!(
                !m.exists(),
                "host `git {}` ran the task's code",
                args.join(" ")
            );
        }
        // the record and stderr say what was found and where it went
        let rec = record(&planted);
        let guard = &rec["git_guard"];
        let found = guard["findings"].to_string();
        for k in [
            "core.fsmonitor",
            "core.pager",
            "core.editor",
            "core.sshcommand",
            "diff.external",
            "filter.x.clean",
            "diff.t.textconv",
            "include.path",
            "includeif",
            "alias.st",
            "core.hookspath",
            "core.worktree",
            "credential.helper",
            "remote.evil.url",
            "peers/o.git/hooks/pre-receive",
            "peers/o.git/config",
            "sub/.git/config",
        ] {
            assert!(
                found.contains(k),
                "{k} not in the record's git_guard: {guard}"
            );
        }
        assert!(
            !found.contains("touch"),
            "the record names keys, never their values: {found}"
        );
        let q = PathBuf::from(guard["quarantine"].as_str().expect("a quarantine"));
        assert!(
            q.starts_with(e.root().join("bundles/cfg/quarantine")),
            "{q:?}"
        );
        assert!(
            std::fs::read_to_string(q.join(".git/config"))
                .unwrap()
                .contains("fsmonitor"),
            "the original config is kept in the quarantine"
        );
        let line = err(&planted);
        assert!(
            line.contains("capsule: git guard:") && line.contains(&q.display().to_string()),
            "one stderr line says what was quarantined and where: {line}"
        );

        // the next exec finds nothing new
        let o = exec(&e, "cfg", "git status --porcelain >/dev/null");
        assert!(o.status.success(), "exec: {}", err(&o));
        assert!(record(&o).get("git_guard").is_none(), "{}", out(&o));
        assert!(!err(&o).contains("git guard"), "{}", err(&o));
    }
}

/// `.git` replaced by a `gitdir:` file or a symlink to the operator's real repository:
/// under full isolation the command cannot do it (a mount point); under weaker isolation
/// (no mount namespace) it can, and the guard quarantines it, so the operator's next
/// `git commit` in the workspace fails instead of committing into the real repository.
#[test]
fn a_replaced_dotgit_never_reaches_the_operators_repository() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let (e, home, _) = project(&r);
        let real = e.dir.path().join("operator-real");
        git_repo(&real, &[("r.txt", "r\n")]);
        r.own(&real);
        let real_head = out(&host_git(&r, &home, &real, &["rev-parse", "HEAD"]));
        let plants = [
            (
                "gitfile",
                format!(
                    "mv .git .git-away && printf 'gitdir: %s\\n' {}/.git > .git",
                    real.display()
                ),
            ),
            (
                "symlink",
                format!("mv .git .git-away && ln -s {}/.git .git", real.display()),
            ),
        ];
        // full isolation: refused inside
        let ws = e.open("full");
        for (what, plant) in &plants {
            let o = exec(&e, "full", &format!("{{ {plant}; }} 2>&1; echo RC-$?-END"));
            assert!(
                out(&o).contains("busy") && !out(&o).contains("RC-0-END"),
                "{what}: .git could be replaced under full isolation: {}",
                out(&o)
            );
            assert!(ws.join(".git").is_dir());
        }
        // weaker isolation: done inside, undone by the guard
        e.accept_weaker();
        for (i, (what, plant)) in plants.iter().enumerate() {
            let name = format!("weak{i}");
            let ws = e.open(&name);
            let o = e
                .no_userns(&["exec", &name, "--json", "--", "sh", "-c", plant])
                .output()
                .expect("run capsule in a user namespace");
            assert!(o.status.success(), "{what}: weaker exec: {}", err(&o));
            let md = std::fs::symlink_metadata(ws.join(".git")).unwrap();
            assert!(!md.file_type().is_symlink(), "{what}: still a symlink");
            let c = host_git(
                &r,
                &home,
                &ws,
                &["commit", "-q", "--allow-empty", "-m", "evil"],
            );
            assert!(
                !c.status.success(),
                "{what}: the operator's commit went somewhere"
            );
            let head = out(&host_git(&r, &home, &real, &["rev-parse", "HEAD"]));
            assert_eq!(
                head, real_head,
                "{what}: the operator's real repository moved"
            );
            let log = out(&host_git(
                &r,
                &home,
                &real,
                &["log", "--all", "--format=%s"],
            ));
            assert!(!log.contains("evil"), "{what}: {log}");
            assert!(
                err(&o).contains("capsule: git guard:"),
                "{what}: no guard line: {}",
                err(&o)
            );
            let rec = record(&o);
            assert!(
                rec["git_guard"]["findings"].to_string().contains(".git"),
                "{what}: {rec}"
            );
        }
    }
}

/// A linked worktree made inside, then redirected: its `.git` file to the operator's real
/// repository, its admin dir's `gitdir` to a folder outside (which `git worktree remove`
/// would delete), its `commondir` elsewhere. The operator's git in the worktree and
/// `git worktree` in the workspace reach none of them.
#[test]
fn a_redirected_linked_worktree_never_reaches_outside() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let (e, home, outside) = project(&r);
        let real = e.dir.path().join("operator-real");
        git_repo(&real, &[("r.txt", "r\n")]);
        r.own(&real);
        let ws = e.open("wt");
        let o = exec(
            &e,
            "wt",
            "set -e; git worktree add -q -b one .worktrees/one; git worktree add -q -b two .worktrees/two; git worktree add -q -b three .worktrees/three",
        );
        assert!(o.status.success(), "worktrees: {}", err(&o));
        assert!(record(&o).get("git_guard").is_none(), "{}", out(&o));
        let victim = outside.join("victim");
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::write(victim.join("keep.txt"), "keep\n").unwrap();
        r.own(&outside);
        let script = format!(
            "set -e; printf 'gitdir: %s/.git\\n' {real} > .worktrees/one/.git; printf '%s/.git\\n' {victim} > .git/worktrees/two/gitdir; printf '%s/.git\\n' {real} > .git/worktrees/three/commondir",
            real = real.display(),
            victim = victim.display()
        );
        let o = exec(&e, "wt", &script);
        assert!(o.status.success(), "redirect: {}", err(&o));
        let real_head = out(&host_git(&r, &home, &real, &["rev-parse", "HEAD"]));
        let real_objects = out(&host_git(&r, &home, &real, &["count-objects"]));
        let _ = host_git(
            &r,
            &home,
            &ws.join(".worktrees/one"),
            &["commit", "-q", "--allow-empty", "-m", "evil"],
        );
        let _ = host_git(
            &r,
            &home,
            &ws.join(".worktrees/three"),
            &["commit", "-q", "--allow-empty", "-m", "evil3"],
        );
        assert_eq!(
            out(&host_git(&r, &home, &real, &["rev-parse", "HEAD"])),
            real_head,
            "a commit in the linked worktree landed in the operator's repository"
        );
        let all = out(&host_git(
            &r,
            &home,
            &real,
            &["log", "--all", "--format=%s"],
        ));
        assert!(
            !all.contains("evil"),
            "a commit in a linked worktree landed in the operator's repository: {all}"
        );
        let seen = out(&host_git(
            &r,
            &home,
            &ws.join(".worktrees/three"),
            &["rev-parse", "refs/heads/main"],
        ));
        assert_ne!(
            seen, real_head,
            "git in a linked worktree read the operator's repository (commondir)"
        );
        let objs = out(&host_git(&r, &home, &real, &["count-objects"]));
        assert_eq!(
            objs, real_objects,
            "objects were written into the operator's repository"
        );
        let _ = host_git(&r, &home, &ws, &["worktree", "remove", "--force", "two"]);
        let _ = host_git(&r, &home, &ws, &["worktree", "prune"]);
        assert!(
            victim.join("keep.txt").is_file(),
            "git worktree deleted outside the workspace"
        );
        let found = record(&o)["git_guard"]["findings"].to_string();
        for p in [
            ".worktrees/one/.git",
            ".git/worktrees/two",
            ".git/worktrees/three/commondir",
        ] {
            assert!(found.contains(p), "{p} not quarantined: {found}");
        }
        // the intact worktree machinery still works
        let l = host_git(&r, &home, &ws, &["worktree", "list"]);
        assert!(l.status.success(), "{}", err(&l));
    }
}

/// Ordinary git work in one exec: commit, branch (create, rename, delete), checkout,
/// rebase, stash, tags, local and global config, a bare remote inside the workspace
/// pushed to with `-u`, a linked worktree. Nothing is quarantined, and the operator's git
/// works after it.
#[test]
fn ordinary_git_work_inside_still_works() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let (e, home, _) = project(&r);
        let ws = e.open("work");
        let script = r#"set -e
git config user.name 'Task'
git config user.email 'task@example.com'
git config --global alias.co checkout
git config --global core.pager cat
echo x >> a.txt; git commit -qam one
git checkout -q -b feature
echo f > f.txt; git add f.txt; git commit -qm feature
git checkout -q main
echo y >> a.txt; git commit -qam two
git checkout -q feature; git rebase -q main
git co -q main
git branch tmp; git branch -m tmp tmp2; git branch -d tmp2
echo s >> a.txt; git stash -q; git stash pop -q; git checkout -q -- a.txt
git tag v1; git tag -a -m annotated v2
mkdir -p peers; git init -q --bare peers/origin.git
git remote add origin "$PWD/peers/origin.git"
git push -q -u origin main feature
git worktree add -q .worktrees/w feature2 2>/dev/null || git worktree add -q -b feature2 .worktrees/w
git -C .worktrees/w log -1 --format=%s
git fetch -q origin
git status --short
echo done
"#;
        let o = exec(&e, "work", script);
        assert!(
            o.status.success(),
            "ordinary work: {}\n{}",
            err(&o),
            out(&o)
        );
        assert!(out(&o).contains("done"), "{}", out(&o));
        let rec = record(&o);
        assert!(
            rec.get("git_guard").is_none(),
            "ordinary work quarantined: {rec}"
        );
        assert!(!err(&o).contains("git guard"), "{}", err(&o));
        let cfg = host_git(&r, &home, &ws, &["config", "--local", "--get", "user.name"]);
        assert_eq!(out(&cfg).trim(), "Task");
        let up = host_git(
            &r,
            &home,
            &ws,
            &["rev-parse", "--abbrev-ref", "main@{upstream}"],
        );
        assert_eq!(out(&up).trim(), "origin/main", "{}", err(&up));
        let st = host_git(&r, &home, &ws, &["status", "--porcelain"]);
        assert!(st.status.success(), "{}", err(&st));
        let o = exec(&e, "work", "git log --oneline | wc -l");
        assert!(o.status.success(), "{}", err(&o));
        assert!(record(&o).get("git_guard").is_none());
    }
}

/// Kitsoki's capsules with a linked worktree (stale-worktree) and a bare remote inside the
/// workspace (diverged-remote): opened, then used, with nothing quarantined.
#[test]
fn kitsoki_worktrees_and_bare_remotes_stay_usable() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let (e, home, _) = project(&r);
        for (spec, script) in [
            ("stale-worktree", "set -e; git worktree list --porcelain | grep -q stale; git worktree add -q .worktrees/fresh -b fresh; git worktree prune; git status --short"),
            ("diverged-remote", "set -e; git fetch -q origin; git log -1 --format=%s origin/main; git push -q origin HEAD:refs/heads/from-task; git ls-remote origin | grep -q from-task"),
        ] {
            let o = bounded(
                e.capsule()
                    .arg("open")
                    .arg(kitsoki_capsules().join(spec))
                    .arg("--json"),
                TIMEOUT,
            );
            assert!(o.status.success(), "open {spec}: {}", err(&o));
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            let ws = PathBuf::from(v["workspace"].as_str().unwrap());
            let name = v["name"].as_str().unwrap().to_string();
            let o = exec(&e, &name, script);
            assert!(o.status.success(), "{spec}: {}\n{}", err(&o), out(&o));
            let rec = record(&o);
            assert!(rec.get("git_guard").is_none(), "{spec}: {rec}");
            let st = host_git(&r, &home, &ws, &["worktree", "list"]);
            assert!(st.status.success(), "{spec}: {}", err(&st));
        }
    }
}

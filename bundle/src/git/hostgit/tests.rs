use super::*;
use std::process::Command;

/// A workspace made by the host's git (hermetic), in a tempdir beside a bundle dir.
struct Ws {
    _d: tempfile::TempDir,
    ws: PathBuf,
    bundle: PathBuf,
}

fn git(dir: &Path, args: &[&str]) {
    let st = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .status()
        .unwrap();
    assert!(st.success(), "git {args:?}");
}

fn ws() -> Ws {
    let d = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(d.path()).unwrap().join("ws");
    let bundle = std::fs::canonicalize(d.path()).unwrap().join("bundle");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&bundle).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    git(&ws, &["add", "a.txt"]);
    git(&ws, &["commit", "-q", "-m", "init"]);
    Ws { _d: d, ws, bundle }
}

fn exec_bit(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn append_config(ws: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(ws.join(".git/config"))
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

#[test]
fn a_fresh_repository_passes_and_is_stamped() {
    let w = ws();
    git(
        &w.ws,
        &["remote", "add", "origin", "https://example.com/r.git"],
    );
    git(&w.ws, &["config", "user.name", "Me"]);
    git(&w.ws, &["branch", "topic"]);
    git(&w.ws, &["config", "branch.topic.remote", "origin"]);
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(r.checked);
    assert!(!r.is_notable(), "{r:?}");
    assert!(r.summary_line().is_none());
    // nothing changed: not checked again
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(!r.checked, "{r:?}");
    // a commit changes the index and .git's own mtime, not what the guard watches
    std::fs::write(w.ws.join("b.txt"), "b\n").unwrap();
    git(&w.ws, &["add", "b.txt"]);
    git(&w.ws, &["commit", "-q", "-m", "b"]);
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(!r.checked, "{r:?}");
}

#[test]
fn dangerous_config_keys_are_quarantined_and_safe_ones_kept() {
    let w = ws();
    git(
        &w.ws,
        &["remote", "add", "origin", "https://example.com/r.git"],
    );
    guard_workspace(&w.ws, &w.bundle, None);
    append_config(
        &w.ws,
        "[core]\n\tfsmonitor = touch /tmp/x\n\tPAGER = evil\n[Diff]\n\texternal = evil\n\
         [filter \"x\"]\n\tclean = evil\n[diff \"t\"]\n\ttextconv = evil\n[include]\n\tpath = /etc/x\n\
         [includeIf \"gitdir:/\"]\n\tpath = /etc/x\n[alias]\n\tst = !evil\n\
         [remote \"bad\"]\n\turl = ext::sh -c evil\n\tuploadpack = evil\n[core.worktree]\n\
         [core]\n\tworktree = /tmp\n[submodule \"s\"]\n\tupdate = !evil\n\turl = ../../x\n\
         [user]\n\temail = \"me\\\"@x\" ; comment\n[core]\n\tsshCommand = \\\n evil\n",
    );
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(r.checked);
    let line = r.summary_line().unwrap();
    for k in [
        "core.fsmonitor",
        "core.pager",
        "diff.external",
        "filter.x.clean",
        "diff.t.textconv",
        "include.path",
        "includeif.gitdir:/.path",
        "alias.st",
        "remote.bad.url",
        "remote.bad.uploadpack",
        "core.worktree",
        "submodule.s.update",
        "submodule.s.url",
        "core.sshcommand",
    ] {
        assert!(line.contains(k), "{k} not in {line}");
    }
    assert!(!line.contains("evil"), "values never printed: {line}");
    let q = r.quarantine.clone().unwrap();
    assert!(q.starts_with(&w.bundle));
    let orig = std::fs::read_to_string(q.join(".git/config")).unwrap();
    assert!(orig.contains("fsmonitor"));
    // git reads the reduced config back: the safe keys are there, nothing else
    let out = Command::new("git")
        .args(["config", "--list", "--local"])
        .current_dir(&w.ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{list}");
    assert!(
        list.contains("remote.origin.url=https://example.com/r.git"),
        "{list}"
    );
    assert!(list.contains("user.email=me\"@x"), "{list}");
    assert!(list.contains("core.bare=false"), "{list}");
    for bad in [
        "fsmonitor",
        "pager",
        "external",
        "filter",
        "textconv",
        "include",
        "alias",
        "ext::",
        "worktree",
        "sshcommand",
        "submodule",
    ] {
        assert!(!list.to_lowercase().contains(bad), "{bad} in {list}");
    }
    // the reduced config is clean: checked once more, nothing found, then stamped
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(!r.is_notable(), "{r:?}");
}

#[test]
fn hooks_are_quarantined_samples_kept() {
    let w = ws();
    let hooks = w.ws.join(".git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::write(hooks.join("pre-commit.sample"), "#!/bin/sh\n").unwrap();
    guard_workspace(&w.ws, &w.bundle, None);
    std::fs::write(hooks.join("pre-commit"), "#!/bin/sh\ntouch /tmp/x\n").unwrap();
    exec_bit(&hooks.join("pre-commit"));
    std::os::unix::fs::symlink("/bin/true", hooks.join("post-checkout.sample")).unwrap();
    let r = guard_workspace(&w.ws, &w.bundle, None);
    let line = r.summary_line().unwrap();
    assert!(line.contains(".git/hooks/pre-commit ("), "{line}");
    assert!(line.contains(".git/hooks/post-checkout.sample"), "{line}");
    assert!(hooks.join("pre-commit.sample").is_file());
    assert!(!hooks.join("pre-commit").exists());
    assert!(r
        .quarantine
        .unwrap()
        .join(".git/hooks/pre-commit")
        .is_file());
}

#[test]
fn a_replaced_dotgit_is_quarantined_and_a_placeholder_written() {
    let w = ws();
    let operator = w.ws.parent().unwrap().join("operator");
    std::fs::create_dir_all(&operator).unwrap();
    git(&operator, &["init", "-q"]);
    std::fs::rename(w.ws.join(".git"), w.ws.parent().unwrap().join("moved")).unwrap();
    std::fs::write(
        w.ws.join(".git"),
        format!("gitdir: {}/.git\n", operator.display()),
    )
    .unwrap();
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(
        r.summary_line().unwrap().contains(".git (a .git file"),
        "{r:?}"
    );
    assert_eq!(std::fs::read(w.ws.join(".git")).unwrap(), PLACEHOLDER);
    // git there now fails rather than acting on the operator's repository
    let out = Command::new("git")
        .args(["status"])
        .current_dir(&w.ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(!out.status.success());
    // the placeholder itself is not a finding
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(!r.is_notable(), "{r:?}");

    // a symlink
    std::fs::remove_file(w.ws.join(".git")).unwrap();
    std::os::unix::fs::symlink(operator.join(".git"), w.ws.join(".git")).unwrap();
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(
        r.summary_line().unwrap().contains("a .git symlink"),
        "{r:?}"
    );
    assert!(
        operator.join(".git/HEAD").is_file(),
        "the target is untouched"
    );
}

#[test]
fn linked_worktrees_stay_and_redirected_ones_are_quarantined() {
    let w = ws();
    git(
        &w.ws,
        &["worktree", "add", "-q", "-b", "wt", ".worktrees/wt"],
    );
    git(
        &w.ws,
        &["worktree", "add", "-q", "-b", "wt2", ".worktrees/wt2"],
    );
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(!r.is_notable(), "{r:?}");
    // the admin dir's gitdir points outside; the other worktree's .git file too
    let outside = w.ws.parent().unwrap().join("victim");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(
        w.ws.join(".git/worktrees/wt/gitdir"),
        format!("{}/.git\n", outside.display()),
    )
    .unwrap();
    std::fs::write(
        w.ws.join(".worktrees/wt2/.git"),
        format!("gitdir: {}\n", outside.display()),
    )
    .unwrap();
    let r = guard_workspace(&w.ws, &w.bundle, None);
    let line = r.summary_line().unwrap();
    assert!(line.contains(".git/worktrees/wt ("), "{line}");
    assert!(line.contains(".worktrees/wt2/.git ("), "{line}");
    assert!(!w.ws.join(".git/worktrees/wt").exists());
    // commondir redirected
    let w = ws();
    git(
        &w.ws,
        &["worktree", "add", "-q", "-b", "wt", ".worktrees/wt"],
    );
    std::fs::write(w.ws.join(".git/worktrees/wt/commondir"), "/elsewhere\n").unwrap();
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(r.summary_line().unwrap().contains("commondir"), "{r:?}");
    assert_eq!(
        std::fs::read(w.ws.join(".git/worktrees/wt/commondir")).unwrap(),
        b"../..\n"
    );
    // config.worktree of the admin dir is checked too
    std::fs::write(
        w.ws.join(".git/worktrees/wt/config.worktree"),
        "[core]\n\tfsmonitor = x\n",
    )
    .unwrap();
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(
        r.summary_line().unwrap().contains("core.fsmonitor"),
        "{r:?}"
    );
}

#[test]
fn bare_remotes_and_submodules_inside_are_checked() {
    let w = ws();
    let bare = w.ws.join("peers/origin.git");
    std::fs::create_dir_all(w.ws.join("peers")).unwrap();
    git(&w.ws, &["init", "-q", "--bare", bare.to_str().unwrap()]);
    git(&w.ws, &["remote", "add", "origin", bare.to_str().unwrap()]);
    git(&w.ws, &["push", "-q", "-u", "origin", "main"]);
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(!r.is_notable(), "{r:?}");
    std::fs::write(bare.join("hooks/post-receive"), "#!/bin/sh\n").unwrap();
    exec_bit(&bare.join("hooks/post-receive"));
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(bare.join("config"))
        .unwrap()
        .write_all(b"[uploadpack]\n\tpackObjectsHook = x\n")
        .unwrap();
    let r = guard_workspace(&w.ws, &w.bundle, None);
    let line = r.summary_line().unwrap();
    assert!(
        line.contains("peers/origin.git/hooks/post-receive"),
        "{line}"
    );
    assert!(line.contains("uploadpack.packobjectshook"), "{line}");

    // an embedded repository added as a gitlink, with a hostile config
    let w = ws();
    let sub = w.ws.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    git(&sub, &["init", "-q"]);
    git(&sub, &["commit", "-q", "--allow-empty", "-m", "s"]);
    git(&w.ws, &["add", "sub"]);
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(!r.is_notable(), "{r:?}");
    std::fs::OpenOptions::new()
        .append(true)
        .open(sub.join(".git/config"))
        .unwrap()
        .write_all(b"[core]\n\tfsmonitor = x\n")
        .unwrap();
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(
        r.summary_line().unwrap().contains("sub/.git/config"),
        "{r:?}"
    );
}

#[test]
fn config_parsing_follows_git() {
    let ws = &paths::Roots {
        canonical: "/w".into(),
        given: None,
    };
    let g = Path::new("/w/.git");
    let s = config::sanitize(b"[core]\n\tbare\n\tfilemode = \"tr\\\nue\"\n[branch.Main]\n\tremote = o\n[branch \"Main\"]\n\tremote = p\n", ws, g);
    assert!(s.dropped.is_empty(), "{:?}", s.dropped);
    let text = String::from_utf8(s.bytes).unwrap();
    assert!(text.contains("\tbare\n"), "implicit true kept: {text}");
    assert!(text.contains("[branch \"main\"]"), "{text}");
    assert!(text.contains("[branch \"Main\"]"), "{text}");
    // remote URLs
    for (url, ok) in [
        ("https://h/r", true),
        ("git@github.com:o/r.git", true),
        ("ssh://-oProxyCommand=x/r", false),
        ("ssh://-oProxyCommand=x@h/r", false),
        ("-oProxyCommand=x@h:r", false),
        ("ssh://git@h/r@x", true),
        ("ext::sh -c x", false),
        ("fd::3", false),
        ("foo://x", false),
        ("/w/peers/o.git", true),
        ("/home/op/secret", false),
        ("file:///home/op/secret", false),
        ("peers/o.git", true),
        ("../x", false),
        ("-upload-pack=x", false),
    ] {
        let s = config::sanitize(format!("[remote \"o\"]\n\turl = {url}\n").as_bytes(), ws, g);
        assert_eq!(s.dropped.is_empty(), ok, "{url}: {:?}", s.dropped);
    }
    let s = config::sanitize(b"[core\n", ws, g);
    assert!(!s.dropped.is_empty());
}

#[test]
fn subsections_are_escaped_as_git_reads_them() {
    let w = ws();
    std::fs::write(
        w.ws.join(".git/config"),
        "[core]\n\trepositoryformatversion = 0\n[remote \"a\\\"b\\\\c\"]\n\turl = https://h/r\n\tfetch = +refs/heads/*:refs/remotes/x/*\n[core]\n\tfsmonitor = x\n",
    )
    .unwrap();
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(r.is_notable());
    let out = Command::new("git")
        .args(["config", "--list", "--local"])
        .current_dir(&w.ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(list.contains("remote.a\"b\\c.url=https://h/r"), "{list}");
}

#[test]
fn a_kept_hook_made_executable_later_is_seen() {
    let w = ws();
    let hooks = w.ws.join(".git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::write(hooks.join("pre-commit"), "#!/bin/sh\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        hooks.join("pre-commit"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(!r.is_notable(), "a non-executable file is no hook: {r:?}");
    std::fs::set_permissions(
        hooks.join("pre-commit"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(
        r.summary_line().unwrap().contains(".git/hooks/pre-commit"),
        "{r:?}"
    );
}

/// The fast path's cost (nothing changed since the last check): `cargo test -p
/// capsule-bundle fast_path_cost -- --ignored --nocapture`.
#[test]
#[ignore]
fn fast_path_cost() {
    let w = ws();
    guard_workspace(&w.ws, &w.bundle, None);
    let links: Vec<PathBuf> = Vec::new();
    let mut times: Vec<std::time::Duration> = (0..2000)
        .map(|_| {
            let t = std::time::Instant::now();
            let r = guard_workspace(&w.ws, &w.bundle, Some(&links));
            assert!(!r.checked);
            t.elapsed()
        })
        .collect();
    times.sort();
    eprintln!("fast path median {:?}, p90 {:?}", times[1000], times[1800]);
}

#[test]
fn a_workspace_reached_through_a_symlink_keeps_its_worktrees_and_remotes() {
    let w = ws();
    git(
        &w.ws,
        &["worktree", "add", "-q", "-b", "wt", ".worktrees/wt"],
    );
    let bare = w.ws.join("peers/o.git");
    std::fs::create_dir_all(w.ws.join("peers")).unwrap();
    git(&w.ws, &["init", "-q", "--bare", bare.to_str().unwrap()]);
    let alias = w.ws.parent().unwrap().join("alias");
    std::os::unix::fs::symlink(&w.ws, &alias).unwrap();
    // one remote named by the canonical path (as git writes it), one by the alias
    git(&w.ws, &["remote", "add", "a", bare.to_str().unwrap()]);
    git(
        &w.ws,
        &[
            "remote",
            "add",
            "b",
            alias.join("peers/o.git").to_str().unwrap(),
        ],
    );
    let r = guard_workspace(&alias, &w.bundle, None);
    assert!(r.checked);
    assert!(!r.is_notable(), "{r:?}");
}

#[test]
fn a_bare_remote_stays_checked_after_its_remote_is_removed() {
    let w = ws();
    let bare = w.ws.join("peers/o.git");
    std::fs::create_dir_all(w.ws.join("peers")).unwrap();
    git(&w.ws, &["init", "-q", "--bare", bare.to_str().unwrap()]);
    git(&w.ws, &["remote", "add", "origin", bare.to_str().unwrap()]);
    assert!(!guard_workspace(&w.ws, &w.bundle, None).is_notable());
    git(&w.ws, &["remote", "remove", "origin"]);
    std::fs::write(bare.join("hooks/pre-receive"), "#!/bin/sh\n").unwrap();
    exec_bit(&bare.join("hooks/pre-receive"));
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(
        r.summary_line()
            .unwrap_or_default()
            .contains("peers/o.git/hooks/pre-receive"),
        "{r:?}"
    );
}

#[test]
fn alternates_outside_are_quarantined() {
    let w = ws();
    let info = w.ws.join(".git/objects/info");
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(
        info.join("alternates"),
        "# own\n../../peers/o.git/objects\n",
    )
    .unwrap();
    assert!(!guard_workspace(&w.ws, &w.bundle, None).is_notable());
    std::fs::write(info.join("alternates"), "/home/op/real/.git/objects\n").unwrap();
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(r.summary_line().unwrap().contains("alternates"), "{r:?}");
    assert!(!info.join("alternates").exists());
}

/// The bundle on another filesystem than the workspace (a `--dest` workspace): entries
/// are copied into the quarantine, then removed.
#[test]
fn quarantine_across_filesystems() {
    let shm = Path::new("/dev/shm");
    let tmp = std::env::temp_dir();
    use std::os::unix::fs::MetadataExt;
    let (Ok(a), Ok(b)) = (std::fs::metadata(shm), std::fs::metadata(&tmp)) else {
        return;
    };
    if a.dev() == b.dev() {
        eprintln!(
            "note: /dev/shm and {} are one filesystem; nothing to test",
            tmp.display()
        );
        return;
    }
    let d = tempfile::tempdir_in(shm).unwrap();
    let ws = std::fs::canonicalize(d.path()).unwrap();
    let bundle = tempfile::tempdir_in(&tmp).unwrap();
    git(&ws, &["init", "-q"]);
    std::fs::create_dir_all(ws.join(".git/worktrees/x/sub")).unwrap();
    std::fs::write(ws.join(".git/worktrees/x/gitdir"), "/elsewhere/.git\n").unwrap();
    std::fs::write(ws.join(".git/worktrees/x/sub/f"), "f\n").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", ws.join(".git/worktrees/x/link")).unwrap();
    std::fs::write(ws.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
    exec_bit(&ws.join(".git/hooks/pre-commit"));
    let r = guard_workspace(&ws, bundle.path(), None);
    assert!(r.errors.is_empty(), "{r:?}");
    let q = r.quarantine.unwrap();
    assert!(q.join(".git/hooks/pre-commit").is_file());
    assert!(q.join(".git/worktrees/x/sub/f").is_file());
    assert!(q
        .join(".git/worktrees/x/link")
        .symlink_metadata()
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(!ws.join(".git/worktrees/x").exists());
    assert!(!ws.join(".git/hooks/pre-commit").exists());
}

#[test]
fn a_gitlink_checkout_made_later_is_seen() {
    let w = ws();
    let sub = w.ws.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    git(&sub, &["init", "-q"]);
    git(&sub, &["commit", "-q", "--allow-empty", "-m", "s"]);
    git(&w.ws, &["add", "sub"]);
    let away = w.ws.parent().unwrap().join("sub-away");
    std::fs::rename(&sub, &away).unwrap();
    assert!(!guard_workspace(&w.ws, &w.bundle, None).is_notable());
    std::fs::rename(&away, &sub).unwrap();
    std::fs::write(sub.join(".git/config"), "[core]\n\tfsmonitor = x\n").unwrap();
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(
        r.summary_line()
            .unwrap_or_default()
            .contains("sub/.git/config"),
        "{r:?}"
    );
}

#[test]
fn a_remote_repository_made_later_is_seen() {
    let w = ws();
    let bare = w.ws.join("peers/o.git");
    git(&w.ws, &["remote", "add", "origin", bare.to_str().unwrap()]);
    assert!(!guard_workspace(&w.ws, &w.bundle, None).is_notable());
    std::fs::create_dir_all(w.ws.join("peers")).unwrap();
    git(&w.ws, &["init", "-q", "--bare", bare.to_str().unwrap()]);
    std::fs::write(bare.join("hooks/pre-receive"), "#!/bin/sh\n").unwrap();
    exec_bit(&bare.join("hooks/pre-receive"));
    let r = guard_workspace(&w.ws, &w.bundle, None);
    assert!(
        r.summary_line()
            .unwrap_or_default()
            .contains("peers/o.git/hooks/pre-receive"),
        "{r:?}"
    );
}

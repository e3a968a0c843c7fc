//! What a sandboxed task leaves behind, against the host tools that look at it afterwards:
//! review output that cannot be forged or hidden by control characters in names and
//! content, `home apply` applying only what `home diff` showed (and never while an exec
//! runs), and hostile trees (thousands of folders deep, a 1 TiB sparse file, FIFOs,
//! sockets, device nodes, read-only folders, hard links, symlinked parents) that never
//! hang, crash or exhaust `verify`, `close`, `home diff|apply|discard`, the exec record,
//! `list` or `inspect`, each run under a deadline and a descriptor limit.

use capsule_bundle::layout::Layout;
use capsule_bundle::policy::{NetworkPolicy, SandboxPolicy};
use capsule_e2e::project::Project;
use capsule_e2e::*;
use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A hand-made open capsule whose policy's home is `home`. Returns its bundle dir.
fn fake_capsule(root: &Path, name: &str, home: &Path) -> PathBuf {
    let layout = Layout::new(root);
    let ws = layout.workspaces_dir().join(name);
    let bundle = layout.bundle_dir(name);
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(bundle.join("tmp")).unwrap();
    let ws = std::fs::canonicalize(&ws).unwrap();
    let b = std::fs::canonicalize(&bundle).unwrap();
    let policy = SandboxPolicy {
        version: 1,
        capsule_name: name.into(),
        workspace: ws,
        read_only: vec![],
        tmp_dir: b.join("tmp"),
        home: Some(std::fs::canonicalize(home).unwrap()),
        home_layer: Some(b.join("home/upper")),
        cache_dir: Some(b.join("cache")),
        writable: vec![],
        hidden: vec![],
        revealed: vec![],
        pass_env: vec![],
        devices: vec![],
        network: NetworkPolicy::default(),
    };
    sandbox::write_bundle(&bundle, &policy);
    std::fs::create_dir_all(bundle.join("home/upper")).unwrap();
    bundle
}

/// `cmd` with at most 1024 open descriptors, under a 60 s deadline.
fn limited(cmd: &mut Command) -> Output {
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let l = libc::rlimit {
                rlim_cur: 1024,
                rlim_max: 1024,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    bounded(cmd, 60)
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// `depth` nested folders `d` under `dir` (made with mkdirat, one descriptor at a time).
fn deep_tree(dir: &Path, depth: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let mut fd = std::fs::File::open(dir).unwrap();
    let d = CString::new("d").unwrap();
    for _ in 0..depth {
        // SAFETY: valid descriptors and C string
        unsafe {
            assert_eq!(libc::mkdirat(fd.as_raw_fd(), d.as_ptr(), 0o755), 0);
            let n = libc::openat(
                fd.as_raw_fd(),
                d.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY,
            );
            assert!(n >= 0);
            fd = std::fs::File::from_raw_fd(n);
        }
    }
}

fn fifo(p: &Path) {
    // SAFETY: a valid C string
    assert_eq!(unsafe { libc::mkfifo(cstr(p).as_ptr(), 0o644) }, 0);
}

fn socket(p: &Path) {
    drop(std::os::unix::net::UnixListener::bind(p).unwrap());
}

fn sparse(p: &Path) {
    std::fs::File::create(p).unwrap().set_len(1 << 40).unwrap();
}

/// Nothing in `out` a terminal would act on: no ESC, CR, other C0 but newline and tab,
/// DEL, C1 or bidi controls.
fn assert_inert(out: &str, what: &str) {
    for c in out.chars() {
        let bad = (c < ' ' && c != '\n' && c != '\t')
            || ('\u{7f}'..='\u{9f}').contains(&c)
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c);
        assert!(!bad, "{what}: raw {:?} in output:\n{out}", c);
    }
}

/// The hostile names a task can give files, and what the review must show instead.
const NAMES: &[(&[u8], &str)] = &[
    (b"a\n+ changed ~", "a\\n+ changed ~"),
    (b"\x1b[2Jclear", "\\x1b[2Jclear"),
    ("x\u{202e}hs.doc".as_bytes(), "x\\u{202e}hs.doc"),
    ("c1\u{9b}31m".as_bytes(), "c1\\u{9b}31m"),
    (b"bad\xff", "bad\\xff"),
    (b"over\rwrite", "over\\rwrite"),
];

#[test]
fn home_diff_shows_hostile_names_and_content_escaped() {
    let sc = scratch();
    let home = sc.path().join("home");
    let root = sc.path().join("root");
    write(&home.join(".bashrc"), "# bash\n");
    let bundle = fake_capsule(&root, "esc", &home);
    let upper = bundle.join("home/upper");
    for (name, _) in NAMES {
        std::fs::write(upper.join(OsStr::from_bytes(name)), "x\n").unwrap();
    }
    // a folder whose name ends a line and starts a forged one: `removed ~/.bashrc`
    write(&upper.join("x\nremoved ~/.bashrc"), "x\n");
    // content that would clear the screen and overwrite a line, in a text file
    write(
        &upper.join(".bashrc"),
        "# bash\nrm -rf ~\x1b[2J\r# harmless\n",
    );
    std::os::unix::fs::symlink("t\x1b]0;title\x07", upper.join(".link")).unwrap();
    let o = limited(
        Command::new(capsule_bin())
            .env("CAPSULE_ROOT", &root)
            .args(["home", "diff", "esc"]),
    );
    assert_ok(&o, "home diff");
    let out = stdout(&o);
    assert_inert(&out, "home diff");
    for (_, shown) in NAMES {
        assert!(
            out.contains(&format!("added   ~/{shown}\n")),
            "{shown}: {out}"
        );
    }
    // the forged line is part of its own escaped line, never a line of its own
    assert!(
        !out.lines()
            .any(|l| l.starts_with("removed ~/.bashrc") || l.starts_with("+ changed")),
        "{out}"
    );
    assert!(out.contains("added   ~/x\\nremoved ~/.bashrc\n"), "{out}");
    assert!(out.contains("+rm -rf ~\\x1b[2J\\r"), "{out}");
    assert!(out.contains("-> t\\x1b]0;title\\x07"), "{out}");
    // JSON is faithful (serde escapes C0) and a name that is not UTF-8 does not break it
    let o = limited(
        Command::new(capsule_bin())
            .env("CAPSULE_ROOT", &root)
            .args(["home", "diff", "esc", "--json"]),
    );
    assert_ok(&o, "home diff --json");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let paths: Vec<&str> = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"x\nremoved ~/.bashrc"), "{paths:?}");
    assert!(paths.contains(&"x\u{202e}hs.doc"), "{paths:?}");
    assert!(paths.contains(&"bad\\xff"), "{paths:?}");
    // an error naming a hostile path is escaped too
    let o = limited(
        Command::new(capsule_bin())
            .env("CAPSULE_ROOT", &root)
            .args(["home", "discard", "esc", "~/\x1b[2Jmissing"]),
    );
    assert_eq!(code(&o), 1);
    assert_inert(&stderr(&o), "discard error");
    assert!(stderr(&o).contains("\\x1b[2Jmissing"), "{}", stderr(&o));
}

/// `list`, `inspect` and `verify` of a capsule whose spec and workspace hold hostile text.
#[test]
fn list_inspect_verify_print_hostile_text_escaped() {
    let r = Runner::Current;
    let p = Project::with_files(&r, &[("a.txt", "a\n")]);
    let spec_dir = p.dir.path().join("spec");
    // YAML allows bidi and C1 characters raw (not ESC): in a comment, inspect shows them
    write(
        &spec_dir.join("capsule.yaml"),
        "name: esc\n# looks like \u{202e}txt.exe and \u{85}next\nsource:\n  synthetic: true\n  steps:\n    - action: write\n      path: \"a\\e[2J\u{202e}.txt\"\n      content: \"\\e]0;owned\\a\\n\"\n    - action: commit\n      message: init\n",
    );
    let o = bounded(
        p.capsule()
            .args(["open"])
            .arg(spec_dir.join("capsule.yaml")),
        60,
    );
    assert_ok(&o, "open the spec");
    for args in [&["list"][..], &["inspect", "esc"], &["verify", "esc"]] {
        let o = limited(p.capsule().args(args));
        assert_inert(&stdout(&o), &format!("{args:?} stdout"));
        assert_inert(&stderr(&o), &format!("{args:?} stderr"));
    }
    let o = limited(p.capsule().args(["close", "esc", "--force"]));
    assert_ok(&o, "close");
}

/// Apply needs a review, applies only what it showed, and the bytes it showed.
#[test]
fn apply_applies_only_what_was_reviewed() {
    let sc = scratch();
    let home = sc.path().join("home");
    let root = sc.path().join("root");
    write(&home.join(".a"), "old\n");
    let bundle = fake_capsule(&root, "rev", &home);
    let upper = bundle.join("home/upper");
    capsule_runtime::home::layer::prepare(&bundle, &std::fs::canonicalize(&home).unwrap(), &[])
        .unwrap();
    write(&upper.join(".a"), "reviewed\n");
    let cap = |args: &[&str]| {
        limited(
            Command::new(capsule_bin())
                .env("CAPSULE_ROOT", &root)
                .args(args),
        )
    };
    // never reviewed: refused
    let o = cap(&["home", "apply", "rev"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stderr(&o).contains("not reviewed"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(home.join(".a")).unwrap(), "old\n");

    // reviewed, then changed behind the review: refused, the real file untouched
    let o = cap(&["home", "diff", "rev", "--json"]);
    assert_ok(&o, "diff");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let first = v["review"].as_str().unwrap().to_string();
    write(&upper.join(".a"), "swapped\n");
    let o = cap(&["home", "apply", "rev"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(
        stderr(&o).contains("changed since the last review"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(home.join(".a")).unwrap(), "old\n");
    // so is a file added after the review
    write(&upper.join(".a"), "reviewed\n");
    write(&upper.join(".new"), "sneaked in\n");
    let o = cap(&["home", "apply", "rev"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("~/.new"), "{}", stderr(&o));
    assert!(!home.join(".new").exists());
    // a path of the review alone still applies, the reviewed bytes
    let o = cap(&["home", "apply", "rev", "~/.a", "--review", &first[..16]]);
    assert_ok(&o, "apply ~/.a with the token");
    assert_eq!(
        std::fs::read_to_string(home.join(".a")).unwrap(),
        "reviewed\n"
    );

    // a review from before is not the last one
    let o = cap(&["home", "diff", "rev"]);
    assert_ok(&o, "diff again");
    assert!(stdout(&o).contains("review "), "{}", stdout(&o));
    let o = cap(&["home", "apply", "rev", "--review", &first]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("last review is not"), "{}", stderr(&o));
    let o = cap(&["home", "apply", "rev"]);
    assert_ok(&o, "apply the last review");
    assert_eq!(
        std::fs::read_to_string(home.join(".new")).unwrap(),
        "sneaked in\n"
    );
}

/// A hard link in the layer to a file outside it (weaker isolation could make one): apply
/// copies it, discard unlinks it, and neither ever writes the outside file; nor does apply
/// replacing a real home file that is a hard link to one.
#[test]
fn hard_links_never_alter_the_file_they_link() {
    let sc = scratch();
    let home = sc.path().join("home");
    let root = sc.path().join("root");
    let outside = sc.path().join("outside");
    write(&outside.join("id_rsa"), "PRIVATE\n");
    write(&outside.join("victim"), "victim\n");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::hard_link(outside.join("victim"), home.join(".x")).unwrap();
    let bundle = fake_capsule(&root, "hl", &home);
    let upper = bundle.join("home/upper");
    capsule_runtime::home::layer::prepare(&bundle, &std::fs::canonicalize(&home).unwrap(), &[])
        .unwrap();
    std::fs::hard_link(outside.join("id_rsa"), upper.join(".stolen")).unwrap();
    write(&upper.join(".x"), "from the task\n");
    let cap = |args: &[&str]| {
        limited(
            Command::new(capsule_bin())
                .env("CAPSULE_ROOT", &root)
                .args(args),
        )
    };
    assert_ok(&cap(&["home", "diff", "hl"]), "diff");
    assert_ok(&cap(&["home", "apply", "hl"]), "apply");
    assert_eq!(
        std::fs::read_to_string(home.join(".stolen")).unwrap(),
        "PRIVATE\n"
    );
    assert_eq!(
        std::fs::read_to_string(home.join(".x")).unwrap(),
        "from the task\n"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("victim")).unwrap(),
        "victim\n"
    );
    assert_ok(&cap(&["home", "discard", "hl"]), "discard");
    assert_eq!(
        std::fs::read_to_string(outside.join("id_rsa")).unwrap(),
        "PRIVATE\n"
    );
    assert!(!upper.join(".stolen").exists());
}

/// While an exec of the capsule runs, apply and discard refuse; after it, they work.
#[test]
fn apply_refuses_while_an_exec_runs() {
    for r in runners() {
        let p = Project::new(&r);
        p.open("busy");
        let upper = p.root().join("bundles/busy/home/upper");
        let mut c = p.capsule();
        c.args([
            "exec",
            "busy",
            "--",
            "sh",
            "-c",
            "echo hi > ~/.busy-file; sleep 3",
        ]);
        c.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = c.spawn().unwrap();
        let t = std::time::Instant::now();
        while std::fs::symlink_metadata(upper.join(".busy-file")).is_err() {
            assert!(
                t.elapsed().as_secs() < 20,
                "{}: the task never wrote",
                r.label()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let o = limited(p.capsule().args(["home", "diff", "busy"]));
        assert_ok(&o, "diff while running");
        assert!(stderr(&o).contains("still running"), "{}", stderr(&o));
        for args in [&["home", "apply", "busy"][..], &["home", "discard", "busy"]] {
            let o = limited(p.capsule().args(args));
            assert_eq!(code(&o), 1, "{}: {args:?}: {}", r.label(), stdout(&o));
            assert!(stderr(&o).contains("still running"), "{}", stderr(&o));
        }
        assert!(upper.join(".busy-file").exists());
        let o = wait_bounded(child, 30, "exec");
        assert_ok(&o, "exec");
        assert_ok(
            &limited(p.capsule().args(["home", "diff", "busy"])),
            "diff after",
        );
        assert_ok(
            &limited(p.capsule().args(["home", "apply", "busy"])),
            "apply after",
        );
        assert_ok(
            &limited(p.capsule().args(["close", "busy", "--force"])),
            "close",
        );
    }
}

/// Make `dir` hold everything hostile: a tree 5000 folders deep, a 1 TiB sparse file, a
/// FIFO, a socket, read-only and mode-000 folders with files inside, a file of mode 000, a
/// symlink out.
fn plant(dir: &Path, deep: bool) {
    if deep {
        deep_tree(&dir.join("deep"), 5000);
    }
    sparse(&dir.join("sparse"));
    fifo(&dir.join("fifo"));
    socket(&dir.join("sock"));
    std::os::unix::fs::symlink("/etc", dir.join("etc-link")).unwrap();
    write(&dir.join("ro/inner/f"), "f\n");
    write(&dir.join("none/f"), "f\n");
    write(&dir.join("unreadable"), "u\n");
}

/// Read-only folders (`ro`, `ro/inner`: 0500); with `none`, a folder and a file of mode
/// 000.
fn lock_down(dir: &Path, none: bool) {
    let set =
        |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    set(&dir.join("ro/inner"), 0o500);
    set(&dir.join("ro"), 0o500);
    if none {
        set(&dir.join("none"), 0o000);
        set(&dir.join("unreadable"), 0o000);
    }
}

#[test]
fn host_tools_survive_hostile_workspace_and_home_layer() {
    for r in runners() {
        let p = Project::new(&r);
        let ws = p.open("hostile");
        // the first exec makes the home layer
        let o = limited(p.capsule().args(["exec", "hostile", "--", "true"]));
        assert_ok(&o, "first exec");
        let bundle = p.root().join("bundles/hostile");
        let upper = bundle.join("home/upper");
        plant(&ws, true);
        plant(&upper, true);
        if matches!(r, Runner::Current) {
            // a real device node (a task cannot make one; weaker isolation is another
            // matter): refused by review, removed by discard
            // SAFETY: a valid C string
            for d in [&upper, &ws] {
                let dev = cstr(&d.join("null-dev"));
                assert_eq!(
                    unsafe {
                        libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3))
                    },
                    0
                );
            }
        }
        r.own(p.dir.path());
        lock_down(&ws, true);
        lock_down(&upper, true);

        // the exec record: bounded, and says why it could not list the changes
        let o = limited(
            p.capsule()
                .args(["exec", "hostile", "--json", "--", "true"]),
        );
        assert_ok(&o, "exec over a hostile workspace");
        let rec: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert!(
            !rec["changes_error"].as_str().unwrap_or("").is_empty(),
            "{}: {rec}",
            r.label()
        );
        for args in [
            &["list"][..],
            &["inspect", "hostile"],
            &["verify", "hostile"],
        ] {
            let o = limited(p.capsule().args(args));
            assert!(o.status.code().is_some(), "{args:?} crashed: {o:?}");
            assert_inert(&stdout(&o), &format!("{args:?}"));
        }
        let o = limited(p.capsule().args(["verify", "hostile"]));
        assert_eq!(code(&o), 1, "{}", stdout(&o));

        // the home layer: a clear error for the deep tree, which discard then removes
        let o = limited(p.capsule().args(["home", "diff", "hostile"]));
        assert_eq!(code(&o), 1, "{}: {}", r.label(), stdout(&o));
        assert!(stderr(&o).contains("folders deep"), "{}", stderr(&o));
        let o = limited(p.capsule().args(["home", "discard", "hostile", "~/deep"]));
        assert_ok(&o, "discard the deep tree");
        let o = limited(p.capsule().args(["home", "diff", "hostile", "--json"]));
        assert_ok(&o, "diff over FIFO, socket, sparse file");
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let refused = |path: &str| {
            v["changes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["path"] == path && c.get("refused").is_some())
        };
        let unreadable: &[&str] = match r {
            // root reads whatever the mode says
            Runner::Current => &[],
            Runner::User { .. } => &["none", "unreadable"],
        };
        for path in ["sparse", "fifo", "sock", "etc-link"]
            .iter()
            .chain(unreadable)
        {
            assert!(refused(path), "{}: {path} not refused: {v}", r.label());
        }
        let o = limited(p.capsule().args(["home", "apply", "hostile"]));
        assert_eq!(code(&o), 1, "{}", stdout(&o));
        assert!(stderr(&o).contains("refused"), "{}", stderr(&o));
        let o = limited(p.capsule().args(["home", "discard", "hostile"]));
        assert_ok(&o, "discard all");
        for n in [
            "sparse", "fifo", "sock", "etc-link", "ro", "none", "null-dev",
        ] {
            assert!(
                std::fs::symlink_metadata(upper.join(n)).is_err(),
                "{}: {n}",
                r.label()
            );
        }

        // close: refused for changed files, then removes every last thing with --force
        plant(&upper, true);
        r.own(&upper);
        lock_down(&upper, true);
        let o = limited(p.capsule().args(["close", "hostile"]));
        assert_eq!(code(&o), 1, "{}", stdout(&o));
        let o = limited(p.capsule().args(["close", "hostile", "--force"]));
        assert_ok(&o, "close --force");
        assert!(
            std::fs::symlink_metadata(&ws).is_err(),
            "{}: workspace left",
            r.label()
        );
        assert!(
            std::fs::symlink_metadata(&bundle).is_err(),
            "{}: bundle left",
            r.label()
        );
        let left: Vec<_> = std::fs::read_dir(p.root().join("workspaces"))
            .unwrap()
            .chain(std::fs::read_dir(p.root().join("bundles")).unwrap())
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{}: left behind: {left:?}", r.label());
    }
}

/// A 1 TiB sparse file in the workspace: `verify` and `close` say so at once, never read
/// it (nor try to hold it in memory).
#[test]
fn a_sparse_terabyte_is_never_read() {
    let r = Runner::Current;
    let p = Project::new(&r);
    let ws = p.open("sparse");
    sparse(&ws.join("big.img"));
    let t = std::time::Instant::now();
    let o = limited(p.capsule().args(["verify", "sparse"]));
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stderr(&o).contains("larger than"), "{}", stderr(&o));
    let o = limited(p.capsule().args(["close", "sparse"]));
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stderr(&o).contains("larger than"), "{}", stderr(&o));
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
    assert_ok(
        &limited(p.capsule().args(["close", "sparse", "--force"])),
        "close",
    );
    assert!(!ws.exists());
}

/// A folder of tracked (or earlier untracked) files replaced by a symlink to a host
/// folder: the record reports the files removed and the symlink added, and nothing of
/// what the host folder holds (no oracle for `~/.ssh`).
#[test]
fn the_record_is_no_oracle_for_a_symlinked_parent() {
    for r in runners() {
        let p = Project::with_files(
            &r,
            &[
                ("sub/passwd", "x\n"),
                ("sub/no-such-file-anywhere", "x\n"),
                ("top", "t\n"),
            ],
        );
        p.open("oracle");
        let o = limited(p.capsule().args([
            "exec",
            "oracle",
            "--json",
            "--",
            "sh",
            "-c",
            "rm -rf sub && ln -s /etc sub",
        ]));
        assert_ok(&o, "exec");
        let rec: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let list = |k: &str| -> Vec<String> {
            rec["changes"][k]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            list("removed"),
            ["sub/no-such-file-anywhere", "sub/passwd"],
            "{}: {rec}",
            r.label()
        );
        assert_eq!(list("added"), ["sub"], "{}: {rec}", r.label());
        assert!(list("changed").is_empty(), "{}: {rec}", r.label());
        // untracked files an earlier exec made, then their folder replaced by a symlink
        let o = limited(p.capsule().args([
            "exec",
            "oracle",
            "--",
            "sh",
            "-c",
            "mkdir u && touch u/passwd u/no-such-file-anywhere",
        ]));
        assert_ok(&o, "exec");
        let o = limited(p.capsule().args([
            "exec",
            "oracle",
            "--json",
            "--",
            "sh",
            "-c",
            "rm -rf u && ln -s /etc u",
        ]));
        assert_ok(&o, "exec");
        let rec: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let list = |k: &str| -> Vec<String> {
            rec["changes"][k]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            list("removed"),
            ["u/no-such-file-anywhere", "u/passwd"],
            "{}: {rec}",
            r.label()
        );
        assert!(list("changed").is_empty(), "{}: {rec}", r.label());
        assert_ok(
            &limited(p.capsule().args(["close", "oracle", "--force"])),
            "close",
        );
    }
}

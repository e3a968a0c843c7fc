//! `capsule completions SHELL` and `capsule man DIR`: a completion script for each shell
//! that completes the visible subcommands (and no hidden one), and a manual page for the
//! command and for every subcommand `--help` lists, found by walking `--help` itself, so a
//! subcommand added without a page (or a page left for a removed one) turns this red.

use capsule_e2e::{assert_ok, capsule_bin, run, scratch, stdout};
use std::collections::BTreeSet;
use std::process::Command;

/// The subcommands `capsule <path> --help` lists under "Commands:", but `help`.
fn listed(path: &[String]) -> Vec<String> {
    let o = run(Command::new(capsule_bin()).args(path).arg("--help"));
    assert_ok(&o, &format!("capsule {} --help", path.join(" ")));
    let text = stdout(&o);
    let mut names = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line == "Commands:" {
            inside = true;
            continue;
        }
        if inside {
            if !line.starts_with("  ") {
                break;
            }
            let name = line.split_whitespace().next().unwrap().to_owned();
            if name != "help" {
                names.push(name);
            }
        }
    }
    names
}

/// Every subcommand path `--help` shows, depth first: ["home"], ["home", "diff"], ...
fn all_paths(path: Vec<String>, out: &mut Vec<Vec<String>>) {
    for name in listed(&path) {
        let mut p = path.clone();
        p.push(name);
        out.push(p.clone());
        all_paths(p, out);
    }
}

#[test]
fn a_completion_script_for_each_shell() {
    let visible = listed(&[]);
    assert!(
        visible.len() > 10 && visible.iter().any(|n| n == "exec"),
        "{visible:?}"
    );
    // what each script looks like to its shell: the line that registers it
    for (shell, marker) in [
        ("bash", "complete -F _capsule"),
        ("zsh", "#compdef capsule"),
        ("fish", "complete -c capsule"),
    ] {
        let o = run(Command::new(capsule_bin()).args(["completions", shell]));
        assert_ok(&o, &format!("capsule completions {shell}"));
        let script = stdout(&o);
        assert!(
            script.contains(marker),
            "{shell}: no `{marker}` in\n{script}"
        );
        for name in &visible {
            assert!(
                script.contains(name.as_str()),
                "{shell}: `{name}` is not completed"
            );
        }
        // exec's flags are completed too
        assert!(
            script.contains("activity-timeout"),
            "{shell}: exec's flags missing"
        );
        // hidden subcommands are internal: never offered
        for hidden in [
            "__materialize",
            "capsule__man",
            "capsule__proxy",
            "'man:",
            "\"man:",
        ] {
            assert!(
                !script.contains(hidden),
                "{shell}: offers the hidden `{hidden}`"
            );
        }
    }
    let o = run(Command::new(capsule_bin()).args(["completions", "tcsh"]));
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn a_man_page_for_the_command_and_each_subcommand() {
    let mut paths = Vec::new();
    all_paths(Vec::new(), &mut paths);
    let mut expected: BTreeSet<String> = paths
        .iter()
        .map(|p| format!("capsule-{}.1", p.join("-")))
        .collect();
    expected.insert("capsule.1".to_owned());
    assert!(expected.contains("capsule-home-diff.1"), "{expected:?}");

    let dir = scratch();
    let out = dir.path().join("man1");
    let o = run(Command::new(capsule_bin()).arg("man").arg(&out));
    assert_ok(&o, "capsule man DIR");
    let written: BTreeSet<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(written, expected, "one page per subcommand, no more");
    for name in &written {
        let page = std::fs::read_to_string(out.join(name)).unwrap();
        assert!(
            page.starts_with(".ie \\n(.g .ds Aq") || page.contains("\n.TH "),
            "{name}: not roff"
        );
        assert!(page.contains(".SH NAME"), "{name}: no NAME section");
    }
    let top = std::fs::read_to_string(out.join("capsule.1")).unwrap();
    assert!(
        top.contains("capsule\\-exec(1)"),
        "capsule.1 names its subcommands' pages"
    );
    assert!(top.contains("125"), "capsule.1 keeps the exit statuses");
    let exec = std::fs::read_to_string(out.join("capsule-exec.1")).unwrap();
    assert!(
        exec.contains("allow\\-write"),
        "capsule-exec.1 documents exec's flags"
    );

    // a folder that cannot be made: one line naming it, status 1
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    let o = run(Command::new(capsule_bin()).arg("man").arg(file.join("sub")));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("capsule: man: making ") && err.contains("file/sub"),
        "{err}"
    );
}

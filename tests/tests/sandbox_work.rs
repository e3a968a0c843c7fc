//! Ordinary work still works inside the sandbox: git commit in the workspace, python, a
//! C compiler, stdin, many files, a terminal (`-t`); and the exec record says what the
//! command changed.
use capsule_e2e::sandbox::*;
use std::io::Write;
use std::process::Stdio;

#[test]
fn git_commit_in_the_workspace_and_record_changes() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let script = r#"
            set -e
            echo new > added.txt
            echo changed >> README.md
            rm src/main.c
            git -c user.name=t -c user.email=t@example.invalid status --short
        "#;
        let o = c.exec_with(&["--json"], &["sh", "-c", script]);
        ok(&o, "git status");
        let s = out(&o);
        let rec: serde_json::Value = serde_json::from_str(s.lines().last().unwrap()).unwrap();
        assert_eq!(
            rec["changes"]["added"],
            serde_json::json!(["added.txt"]),
            "{rec}"
        );
        assert_eq!(
            rec["changes"]["changed"],
            serde_json::json!(["README.md"]),
            "{rec}"
        );
        assert_eq!(
            rec["changes"]["removed"],
            serde_json::json!(["src/main.c"]),
            "{rec}"
        );
        assert_eq!(rec["exit_status"], 0);
        assert_eq!(rec["applied"]["isolation"], "full");
        assert_eq!(rec["applied"]["no_new_privs"], true);
        assert!(
            rec["applied"]["namespaces"].as_array().unwrap().len() >= 6,
            "{rec}"
        );
        assert_eq!(
            rec["applied"]["landlock"]["abi"].as_u64().map(|a| a >= 3),
            Some(true),
            "{rec}"
        );
        assert!(
            rec["applied"]["seccomp"]["refused"].as_array().is_some(),
            "{rec}"
        );
        // the same record was appended to the bundle's event log
        assert_eq!(c.records().last().unwrap(), &rec);

        let o = c.sh("git -c user.name=t -c user.email=t@example.invalid add -A && git -c user.name=t -c user.email=t@example.invalid commit -q -m work && git log --oneline | wc -l");
        ok(&o, "git commit");
        assert_eq!(out(&o).trim(), "2");
        let rec = c.records().pop().unwrap();
        assert!(rec["changes"]["head"].is_array(), "HEAD moved: {rec}");
    });
}

#[test]
fn python_and_a_c_compiler() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let o = c.exec(&[
            "python3",
            "-c",
            "import json,sys; print(json.dumps({'n': sum(range(10))}))",
        ]);
        ok(&o, "python");
        assert_eq!(out(&o), "{\"n\": 45}\n");
        let o = c.sh("printf '#include <stdio.h>\\nint main(void){puts(\"compiled\");return 3;}\\n' > hello.c && cc -o hello hello.c && ./hello");
        assert_eq!(code(&o), 3, "{}", err(&o));
        assert_eq!(out(&o), "compiled\n");
    });
}

#[test]
fn stdin_is_passed_through() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let mut cmd = c.capsule();
        cmd.args(["exec", NAME, "--", "sh", "-c", "wc -c; read -r x || true"]);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let data = vec![b'x'; 200_000];
        child.stdin.take().unwrap().write_all(&data).unwrap();
        let o = child.wait_with_output().unwrap();
        ok(&o, "stdin");
        assert_eq!(out(&o).trim(), "200000");
    });
}

#[test]
fn many_files() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let o = c.sh("mkdir -p gen && i=0; while [ $i -lt 2000 ]; do echo $i > gen/f$i; i=$((i+1)); done; ls gen | wc -l; cat gen/f1999");
        ok(&o, "many files");
        assert_eq!(out(&o), "2000\n1999\n");
        assert_eq!(std::fs::read_dir(c.ws.join("gen")).unwrap().count(), 2000);
        let rec = c.records().pop().unwrap();
        assert_eq!(rec["changes"]["added"].as_array().unwrap().len(), 2000);
    });
}

#[test]
fn a_terminal_of_its_own() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let o = c.exec_with(
            &["-t"],
            &["sh", "-c", "test -t 0 && test -t 1 && tty && stty size"],
        );
        ok(&o, "-t");
        let s = out(&o);
        assert!(s.contains("/dev/pts/"), "{s}");
        // without -t there is no terminal
        let o = c.exec(&["sh", "-c", "test -t 1 || echo no-tty"]);
        assert_eq!(out(&o), "no-tty\n");
    });
}

#[test]
fn environment_is_clean() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let mut cmd = c.capsule();
        cmd.env("AWS_SECRET_ACCESS_KEY", "leak-me")
            .env("SSH_AUTH_SOCK", "/tmp/agent")
            .env("MY_TOKEN", "tok");
        cmd.args(["exec", NAME, "--pass-env", "MY_TOKEN", "--", "env"]);
        let o = cmd.stdin(Stdio::null()).output().unwrap();
        ok(&o, "env");
        let s = out(&o);
        assert!(
            !s.contains("leak-me") && !s.contains("SSH_AUTH_SOCK"),
            "{s}"
        );
        assert!(
            s.contains("MY_TOKEN=tok") && s.contains("TMPDIR=/tmp") && s.contains("PATH="),
            "{s}"
        );
    });
}

#[test]
fn working_directory_follows_the_caller_inside_the_workspace() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let mut cmd = c.capsule();
        cmd.current_dir(c.ws.join("src"))
            .args(["exec", NAME, "--", "pwd"]);
        let o = cmd.stdin(Stdio::null()).output().unwrap();
        ok(&o, "pwd");
        assert_eq!(out(&o).trim(), c.ws.join("src").to_str().unwrap());
    });
}

#[test]
fn no_sandbox_is_loud() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let o = c.exec_with(
            &["--no-sandbox"],
            &["cat", c.home.join(".ssh/id_rsa").to_str().unwrap()],
        );
        ok(&o, "--no-sandbox");
        assert!(err(&o).contains("WITHOUT ANY ISOLATION"), "{}", err(&o));
        let rec = c.records().pop().unwrap();
        assert_eq!(rec["applied"]["isolation"], "none");
        assert!(
            rec["degradation"].to_string().contains("--no-sandbox"),
            "{rec}"
        );
    });
}

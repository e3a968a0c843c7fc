//! Red team: secrets in the caller's environment. Tokens, keys and agent sockets must not
//! reach the command (unless named with `--pass-env`), not through its environment and not
//! through `/proc` (init's or any host process's environ, full and weaker isolation), and
//! their values must stay out of the exec record, `events.jsonl` and error messages.
//! As root and as the unprivileged test user.

use capsule_e2e::{runners, scratch, stderr, stdout, Runner};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SECRETS: &[(&str, &str)] = &[
    ("GITHUB_TOKEN", "ghp_RedTeamTokenValue0001"),
    ("AWS_SECRET_ACCESS_KEY", "RedTeamAwsSecretValue0002"),
    ("SSH_AUTH_SOCK", "/run/redteam-agent-0003.sock"),
    ("ANTHROPIC_API_KEY", "sk-ant-RedTeamValue0004"),
    ("NPM_TOKEN", "npm_RedTeamValue0005"),
];

fn git(dir: &Path, args: &[&str]) {
    let st = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .stdout(Stdio::null())
        .status()
        .expect("git");
    assert!(st.success(), "git {args:?}");
}

struct Env {
    dir: tempfile::TempDir,
    runner: Runner,
}

impl Env {
    fn new(runner: &Runner) -> Env {
        let dir = scratch();
        let src = dir.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("a.txt"), "a\n").unwrap();
        git(&src, &["init", "-q"]);
        git(&src, &["add", "-A"]);
        git(&src, &["commit", "-q", "-m", "init"]);
        std::fs::create_dir_all(dir.path().join("root")).unwrap();
        runner.own(dir.path());
        Env {
            dir,
            runner: runner.clone(),
        }
    }
    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    /// `capsule` with the secrets in its environment.
    fn capsule(&self) -> Command {
        let mut c = self.runner.capsule(&self.root());
        c.current_dir(self.dir.path()).stdin(Stdio::null());
        for (k, v) in SECRETS {
            c.env(k, v);
        }
        c
    }
    /// The same inside a user namespace that may create no more (weaker isolation).
    fn weaker(&self) -> Command {
        let base = self.capsule();
        let mut w = match &self.runner {
            Runner::Current => Command::new("unshare"),
            Runner::User { uid, gid, .. } => {
                let mut w = Command::new("setpriv");
                w.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--clear-groups")
                    .arg("unshare");
                w
            }
        };
        w.args(["-U", "-r", "sh", "-c"])
            .arg("echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"")
            .arg(base.get_program());
        w.env_clear();
        for (k, v) in base.get_envs() {
            if let Some(v) = v {
                w.env(k, v);
            }
        }
        w.current_dir(self.dir.path()).stdin(Stdio::null());
        w
    }
    fn events(&self, name: &str) -> String {
        std::fs::read_to_string(self.root().join("bundles").join(name).join("events.jsonl"))
            .unwrap_or_default()
    }
}

/// Everything a command can see of its environment and of every process's environ.
const LOOK: &str =
    "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null; done; true";

fn leaked(text: &str, except: &[&str]) -> Vec<&'static str> {
    SECRETS
        .iter()
        .filter(|(k, v)| !except.contains(k) && text.contains(v))
        .map(|(k, _)| *k)
        .collect()
}

fn all(o: &Output) -> String {
    format!("{}{}", stdout(o), stderr(o))
}

#[test]
fn secrets_in_the_callers_environment_stay_out() {
    for r in runners() {
        eprintln!("--- runner {}", r.label());
        let e = Env::new(&r);
        let src = e.dir.path().join("src");
        let o = e
            .capsule()
            .args(["open", "--source", src.to_str().unwrap(), "--name", "env"])
            .output()
            .unwrap();
        assert!(o.status.success(), "open: {}", stderr(&o));

        // full isolation: the command's environment and every environ it can read
        let o = e
            .capsule()
            .args(["exec", "env", "--json", "--", "sh", "-c", LOOK])
            .output()
            .unwrap();
        assert!(o.status.success(), "exec: {}", stderr(&o));
        assert!(
            stdout(&o).contains("TMPDIR=/tmp"),
            "env ran: {}",
            stdout(&o)
        );
        assert_eq!(leaked(&all(&o), &[]), Vec::<&str>::new(), "full isolation");

        // a command that cannot start: the error names the command, not the environment
        let o = e
            .capsule()
            .args(["exec", "env", "--json", "--", "no-such-command-rt"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
        assert_eq!(leaked(&all(&o), &[]), Vec::<&str>::new(), "error path");

        // --pass-env: the named one reaches the command, its value stays out of the record
        let o = e
            .capsule()
            .args([
                "exec",
                "env",
                "--pass-env",
                "GITHUB_TOKEN",
                "--",
                "sh",
                "-c",
                "printf '%s' \"$GITHUB_TOKEN\"",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "exec: {}", stderr(&o));
        assert_eq!(stdout(&o), SECRETS[0].1, "--pass-env passes the value");

        // weaker isolation: no pid namespace, so host processes' environ files exist
        let o = e
            .weaker()
            .args(["isolation", "--accept-weaker", "on"])
            .output()
            .unwrap();
        assert!(o.status.success(), "accept weaker: {}", stderr(&o));
        let o = e
            .weaker()
            .args(["exec", "env", "--json", "--", "sh", "-c", LOOK])
            .output()
            .unwrap();
        assert!(o.status.success(), "weaker exec: {}", stderr(&o));
        assert!(stdout(&o).contains("TMPDIR="), "env ran: {}", stdout(&o));
        assert_eq!(
            leaked(&all(&o), &[]),
            Vec::<&str>::new(),
            "weaker isolation"
        );

        let events = e.events("env");
        assert!(events.lines().count() >= 4, "records written: {events}");
        assert_eq!(leaked(&events, &[]), Vec::<&str>::new(), "events.jsonl");
        assert!(
            events.contains("GITHUB_TOKEN"),
            "the record names what --pass-env passed"
        );
    }
}

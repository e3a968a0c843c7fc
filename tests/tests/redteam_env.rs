//! Red team: secrets in the caller's environment. Tokens, keys and agent sockets must not
//! reach the command (unless named with `--pass-env`), not through its environment and not
//! through `/proc` (init's or any host process's environ, full and weaker isolation), and
//! their values must stay out of the exec record, `events.jsonl` and error messages.
//! As root and as the unprivileged test user.

use capsule_e2e::{runners, stderr, stdout, Project};
use std::process::{Command, Output};

const SECRETS: &[(&str, &str)] = &[
    ("GITHUB_TOKEN", "ghp_RedTeamTokenValue0001"),
    ("AWS_SECRET_ACCESS_KEY", "RedTeamAwsSecretValue0002"),
    ("SSH_AUTH_SOCK", "/run/redteam-agent-0003.sock"),
    ("ANTHROPIC_API_KEY", "sk-ant-RedTeamValue0004"),
    ("NPM_TOKEN", "npm_RedTeamValue0005"),
];

/// `capsule` with the secrets in its environment.
fn capsule(e: &Project) -> Command {
    let mut c = e.capsule();
    for (k, v) in SECRETS {
        c.env(k, v);
    }
    c
}

/// The same inside a user namespace that may create no more (weaker isolation).
fn weaker(e: &Project) -> Command {
    e.runner.without_userns(&capsule(e))
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
        let e = Project::new(&r);
        let o = capsule(&e)
            .args([
                "open",
                "--source",
                e.src().to_str().unwrap(),
                "--name",
                "env",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "open: {}", stderr(&o));

        // full isolation: the command's environment and every environ it can read
        let o = capsule(&e)
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
        let o = capsule(&e)
            .args(["exec", "env", "--json", "--", "no-such-command-rt"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
        assert_eq!(leaked(&all(&o), &[]), Vec::<&str>::new(), "error path");

        // --pass-env: the named one reaches the command, its value stays out of the record
        let o = capsule(&e)
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
        let o = weaker(&e)
            .args(["isolation", "--accept-weaker", "on"])
            .output()
            .unwrap();
        assert!(o.status.success(), "accept weaker: {}", stderr(&o));
        let o = weaker(&e)
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

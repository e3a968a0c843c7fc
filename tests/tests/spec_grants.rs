//! A spec cannot grant itself access: what its `sandbox:` block or `network: live` asks
//! beyond the defaults is refused by `capsule open` (nothing left behind) until the
//! operator accepts it with `--accept-grants`; the acceptance is recorded in bundle.json,
//! shown by `inspect`, and a bundle edited afterwards to give more does not get it.

use capsule_e2e::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const HEAD: &str =
    "source:\n  synthetic: true\n  steps: [{action: commit, message: x, allow_empty: true}]\n";

struct Env {
    _s: tempfile::TempDir,
    dir: PathBuf,
    root: PathBuf,
    home: PathBuf,
    runner: Runner,
}

impl Env {
    fn new(runner: &Runner) -> Env {
        let s = scratch();
        let dir = s.path().to_path_buf();
        let home = dir.join("home");
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        std::fs::write(home.join(".aws/credentials"), "AWS-SECRET\n").unwrap();
        std::fs::create_dir_all(dir.join("outside")).unwrap();
        runner.own(&dir);
        Env {
            root: dir.join("root"),
            home,
            dir,
            _s: s,
            runner: runner.clone(),
        }
    }
    fn cmd(&self) -> Command {
        let mut c = self.runner.capsule(&self.root);
        c.env("HOME", &self.home).env("GRANT_TOKEN", "tok-1234");
        c.current_dir(&self.dir);
        c
    }
    fn cap(&self, args: &[&str]) -> Output {
        run(self.cmd().args(args))
    }
    /// Write spec `name` with `rest` after the synthetic source.
    fn spec(&self, name: &str, rest: &str) -> PathBuf {
        let p = self.dir.join(format!("{name}.yaml"));
        std::fs::write(&p, format!("name: {name}\n{HEAD}{rest}")).unwrap();
        self.runner.own(&p);
        p
    }
    /// Nothing under the capsule root but empty folders.
    fn root_is_empty(&self) -> bool {
        fn files(d: &Path) -> usize {
            std::fs::read_dir(d)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| {
                            if e.file_type().unwrap().is_dir() {
                                files(&e.path())
                                    + usize::from(
                                        e.file_name() != "workspaces" && e.file_name() != "bundles",
                                    )
                            } else {
                                1
                            }
                        })
                        .sum()
                })
                .unwrap_or(0)
        }
        files(&self.root) == 0
    }
}

fn json_of(o: &Output) -> Value {
    serde_json::from_str(stdout(o).trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", stdout(o), stderr(o)))
}

/// Each kind of grant, with the text the refusal names.
fn grant_kinds(e: &Env) -> Vec<(&'static str, String, &'static str)> {
    let outside = e.dir.join("outside");
    vec![
        ("reveal", "sandbox:\n  reveal: [~/.aws]\n".into(), "reveal "),
        (
            "pass-env",
            "sandbox:\n  pass_env: [GRANT_TOKEN]\n".into(),
            "pass_env GRANT_TOKEN",
        ),
        (
            "writable",
            format!("sandbox:\n  writable: [{}]\n", outside.display()),
            "writable ",
        ),
        (
            "device",
            "sandbox:\n  devices: [fuse]\n".into(),
            "device fuse",
        ),
        ("open-net", "network: live\n".into(), "network open"),
        (
            "allow-net",
            "network: live\nsandbox:\n  network: {allow: [example.org]}\n".into(),
            "network to example.org",
        ),
        (
            "secret",
            "network: live\nsandbox:\n  secrets: {GRANT_TOKEN: [api.example.org]}\n".into(),
            "secret GRANT_TOKEN -> api.example.org",
        ),
        (
            "publish",
            "sandbox:\n  publish: [\"8000\"]\n".into(),
            "publish 8000",
        ),
    ]
}

#[test]
fn each_grant_is_refused_without_acceptance_and_leaves_nothing() {
    let e = Env::new(&Runner::Current);
    for (name, rest, words) in grant_kinds(&e) {
        let spec = e.spec(name, &rest);
        let o = e.cap(&["open", spec.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{name}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.trim().lines().count(), 1, "{name}: one line: {err}");
        assert!(
            err.contains(spec.to_str().unwrap())
                && err.contains("beyond the defaults")
                && err.contains(words)
                && err.contains("nothing was opened")
                && err.contains("--accept-grants"),
            "{name}: {err}"
        );
        assert!(
            e.root_is_empty(),
            "{name}: something left in the capsule root"
        );
        // verify of a spec opens it too: refused the same way
        let o = e.cap(&["verify", spec.to_str().unwrap()]);
        assert!(!o.status.success(), "{name}: verify: {}", stderr(&o));
        assert!(stderr(&o).contains("--accept-grants"), "{}", stderr(&o));
    }
}

#[test]
fn a_pinned_spec_with_grants_is_refused_before_its_repository_is_read() {
    let e = Env::new(&Runner::Current);
    let up = e.dir.join("upstream");
    std::fs::create_dir_all(&up).unwrap();
    let git = |args: &[&str]| {
        let o = run(Command::new("git")
            .current_dir(&up)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &up)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "T")
            .env("GIT_AUTHOR_EMAIL", "t@example.org")
            .env("GIT_COMMITTER_NAME", "T")
            .env("GIT_COMMITTER_EMAIL", "t@example.org")
            .args(args));
        assert_ok(&o, &format!("git {args:?}"));
        stdout(&o).trim().to_string()
    };
    git(&["init", "-q"]);
    git(&["commit", "-q", "--allow-empty", "-m", "x"]);
    let commit = git(&["rev-parse", "HEAD"]);
    let p = e.dir.join("pinned.yaml");
    std::fs::write(
        &p,
        format!(
            "name: pinned\nsource:\n  repo: {}\n  commit: {commit}\nnetwork: live\n",
            up.display()
        ),
    )
    .unwrap();
    let o = e.cap(&["open", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("network open"), "{}", stderr(&o));
    assert!(
        !e.root.exists(),
        "the capsule root (or its repository cache) was made before the refusal"
    );
    let o = e.cap(&["open", p.to_str().unwrap(), "--accept-grants"]);
    assert_ok(&o, "open accepted");
}

#[test]
fn accepted_grants_are_applied_recorded_and_shown() {
    let e = Env::new(&Runner::Current);
    for (name, rest, words) in grant_kinds(&e) {
        let spec = e.spec(name, &rest);
        let o = e.cap(&["open", spec.to_str().unwrap(), "--accept-grants", "--json"]);
        assert_ok(&o, name);
        let j = json_of(&o);
        assert_eq!(j["grants"]["by"], "all", "{name}: {j}");
        let accepted = j["grants"]["accepted"].as_array().unwrap();
        // a secret's host is an allowlist grant of its own
        let want = if name == "secret" { 2 } else { 1 };
        assert_eq!(accepted.len(), want, "{name}: {j}");
        assert!(j["grants"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));
        let o = e.cap(&["inspect", name, "--json"]);
        assert_ok(&o, "inspect");
        let i = json_of(&o);
        assert_eq!(i["capsule"]["grants"], j["grants"], "{name}");
        let o = e.cap(&["inspect", name]);
        assert_ok(&o, "inspect");
        let text = stdout(&o);
        let section = text
            .split("grants (access beyond the defaults")
            .nth(1)
            .unwrap_or_default();
        assert!(section.contains(words), "{name}: {text}");
        // the policy holds the grant
        let p = &i["policy"];
        let applied = match name {
            "reveal" => p["revealed"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r.as_str().unwrap().ends_with("/home/.aws")),
            "pass-env" => p["pass_env"] == serde_json::json!(["GRANT_TOKEN"]),
            "writable" => p["writable"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r.as_str().unwrap().ends_with("/outside")),
            "device" => p["devices"] == serde_json::json!(["fuse"]),
            "open-net" => p["network"]["mode"] == "open",
            "allow-net" => {
                p["network"]["mode"] == "allowlist"
                    && p["network"]["allow"] == serde_json::json!(["example.org"])
            }
            "secret" => {
                p["network"]["mode"] == "allowlist"
                    && p["network"]["allow"] == serde_json::json!(["api.example.org"])
                    && p["network"]["secrets"]
                        == serde_json::json!({"GRANT_TOKEN": ["api.example.org"]})
            }
            "publish" => p["network"]["publish"] == serde_json::json!(["8000"]),
            _ => unreachable!(),
        };
        assert!(applied, "{name}: {p}");
    }
}

#[test]
fn tightening_and_workspace_paths_need_no_acceptance() {
    let e = Env::new(&Runner::Current);
    for (name, rest) in [
        ("hidden", "sandbox:\n  hidden: [secrets, ~/.config]\n"),
        ("net-none", "network: none\n"),
        ("replay", "network: replay\n"),
        ("in-ws", "sandbox:\n  writable: [build-out, a/b]\n"),
        (
            "default-env",
            "sandbox:\n  pass_env: [TERM, LANG, LC_ALL]\n",
        ),
    ] {
        let spec = e.spec(name, rest);
        let o = e.cap(&["open", spec.to_str().unwrap(), "--json"]);
        assert_ok(&o, name);
        let j = json_of(&o);
        assert_eq!(j["grants"]["by"], "none", "{name}: {j}");
        assert_eq!(j["grants"]["accepted"], serde_json::json!([]), "{name}");
    }
    // the shipped demo spec asks for nothing beyond the defaults
    let o = e.cap(&["demo", "--json"]);
    assert_ok(&o, "demo");
}

#[test]
fn a_digest_accepts_exactly_the_reviewed_list() {
    let e = Env::new(&Runner::Current);
    let spec = e.spec("dg", "sandbox:\n  pass_env: [GRANT_TOKEN]\n");
    let o = e.cap(&["open", spec.to_str().unwrap()]);
    let err = stderr(&o);
    let digest = err
        .split("--accept-grants=")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .expect("the refusal names the digest")
        .to_string();
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{err}");
    let flag = format!("--accept-grants={digest}");
    // the spec changed after review: a new grant is refused, nothing is made
    let spec = e.spec("dg", "network: live\nsandbox:\n  pass_env: [GRANT_TOKEN]\n");
    let o = e.cap(&["open", spec.to_str().unwrap(), &flag]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("differs from the list you accepted")
            && stderr(&o).contains("network open"),
        "{}",
        stderr(&o)
    );
    assert!(e.root_is_empty());
    // the reviewed spec opens with its digest
    let spec = e.spec("dg", "sandbox:\n  pass_env: [GRANT_TOKEN]\n");
    let o = e.cap(&["open", spec.to_str().unwrap(), &flag, "--json"]);
    assert_ok(&o, "open with the digest");
    let j = json_of(&o);
    assert_eq!(j["grants"]["by"], "digest");
    assert_eq!(j["grants"]["digest"], digest.as_str());
    // a malformed digest is a usage error
    let o = e.cap(&["open", spec.to_str().unwrap(), "--accept-grants=abc"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn refusals_escape_spec_text() {
    let e = Env::new(&Runner::Current);
    let weird = e.dir.join("x\x1b[2J\u{202e}y");
    std::fs::create_dir_all(&weird).unwrap();
    let spec = e.spec(
        "esc",
        &format!(
            "sandbox:\n  reveal: [\"{}\"]\n",
            weird
                .display()
                .to_string()
                .replace('\x1b', "\\e")
                .replace('\u{202e}', "\\u202e")
        ),
    );
    let o = e.cap(&["open", spec.to_str().unwrap()]);
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(err.contains("x\\x1b[2J\\u{202e}y"), "{err}");
    assert!(
        !err.contains('\x1b') && !err.contains('\u{202e}'),
        "{err:?}"
    );
}

/// Rewrite `policy.json` with `edit` and put its digest in `bundle.json`, as someone
/// who can write the bundle would.
fn tamper(bundle: &Path, edit: impl Fn(&mut Value), edit_record: impl Fn(&mut Value)) {
    let pp = bundle.join("policy.json");
    let mut p: Value = serde_json::from_str(&std::fs::read_to_string(&pp).unwrap()).unwrap();
    edit(&mut p);
    let policy: capsule_bundle::policy::SandboxPolicy = serde_json::from_value(p).unwrap();
    std::fs::write(&pp, serde_json::to_vec_pretty(&policy).unwrap()).unwrap();
    let rp = bundle.join("bundle.json");
    let mut r: Value = serde_json::from_str(&std::fs::read_to_string(&rp).unwrap()).unwrap();
    r["policy_digest"] = Value::String(policy.digest());
    edit_record(&mut r);
    std::fs::write(&rp, serde_json::to_vec_pretty(&r).unwrap()).unwrap();
}

#[test]
fn a_bundle_edited_to_give_more_does_not_get_it() {
    for runner in runners() {
        let e = Env::new(&runner);
        let label = runner.label().to_string();
        // accepted and applied: the task sees the passed variable
        let spec = e.spec("acc", "sandbox:\n  pass_env: [GRANT_TOKEN]\n");
        assert_ok(
            &e.cap(&["open", spec.to_str().unwrap(), "--accept-grants"]),
            "open",
        );
        let o = e.cap(&["exec", "acc", "--", "sh", "-c", "echo v=$GRANT_TOKEN"]);
        assert_ok(&o, &format!("[{label}] exec"));
        assert!(
            stdout(&o).contains("v=tok-1234"),
            "[{label}] {}",
            stdout(&o)
        );

        // a capsule opened with nothing accepted, its policy edited to reveal ~/.aws and
        // pass a variable, its digest updated: refused, nothing runs
        let spec = e.spec("plain", "");
        let o = e.cap(&["open", spec.to_str().unwrap(), "--json"]);
        assert_ok(&o, "open plain");
        let bundle = PathBuf::from(json_of(&o)["bundle"].as_str().unwrap());
        let aws = e.home.join(".aws");
        tamper(
            &bundle,
            |p| {
                p["revealed"]
                    .as_array_mut()
                    .unwrap()
                    .push(Value::String(aws.display().to_string()));
                p["pass_env"] = serde_json::json!(["GRANT_TOKEN"]);
            },
            |_| {},
        );
        let o = e.cap(&[
            "exec",
            "plain",
            "--",
            "sh",
            "-c",
            "echo v=$GRANT_TOKEN; cat ~/.aws/credentials",
        ]);
        assert!(
            !stdout(&o).contains("tok-1234") && !stdout(&o).contains("AWS-SECRET"),
            "[{label}] the edited policy was applied: {}",
            stdout(&o)
        );
        assert!(!o.status.success(), "[{label}] tampered bundle ran");
        assert!(
            stderr(&o).contains("does not record as accepted"),
            "[{label}] {}",
            stderr(&o)
        );

        // bundle.json edited as well, to claim an acceptance of the old (empty) list's
        // digest for a different list: the recorded list is what counts
        tamper(
            &bundle,
            |_| {},
            |r| r["grants"]["digest"] = Value::String("sha256:".to_string() + &"0".repeat(64)),
        );
        let o = e.cap(&["exec", "plain", "--", "true"]);
        assert!(!o.status.success(), "[{label}] {}", stderr(&o));

        // an old bundle.json without the field: it loads, but no grant is applied
        tamper(
            &bundle,
            |_| {},
            |r| {
                r.as_object_mut().unwrap().remove("grants");
                r["version"] = 1.into();
            },
        );
        let o = e.cap(&[
            "exec",
            "plain",
            "--",
            "sh",
            "-c",
            "echo v=$GRANT_TOKEN; cat ~/.aws/credentials 2>&1 || true",
        ]);
        assert_ok(&o, &format!("[{label}] legacy bundle loads"));
        let out = stdout(&o);
        assert!(
            out.contains("v=\n") || out.starts_with("v=\n"),
            "[{label}] {out}"
        );
        assert!(!out.contains("AWS-SECRET"), "[{label}] {out}");
        let o = e.cap(&["inspect", "plain"]);
        assert_ok(&o, "inspect legacy");
        assert!(stdout(&o).contains("not recorded"), "{}", stdout(&o));
    }
}

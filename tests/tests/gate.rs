//! End-to-end tests of the launch-policy gate's command line: `capsule policy check` (exit
//! statuses, `--json`, the trace file, config errors) and `capsule agent launch --dry-run`
//! (the plan, redaction, denial before any plan). Run as the current user and as the
//! unprivileged test user, who reads repositories owned by someone else (gix reduced trust).

use capsule_e2e::{assert_ok, code, git, run, runners, scratch, stderr, stdout, write, Runner};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output};

/// A project on `main` with a `.kitsoki.yaml`, a capsule under its carve-out, a fake codex
/// and claude on a private PATH directory, and a directory the runner may write traces to.
struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    proj: PathBuf,
    capsule: PathBuf,
    bin: PathBuf,
    out: PathBuf,
}

fn fixture(runner: &Runner) -> Fixture {
    let tmp = scratch();
    let root = std::fs::canonicalize(tmp.path()).expect("canon");
    let proj = root.join("proj");
    std::fs::create_dir_all(proj.join("src")).expect("mkdir");
    git(&proj, &["init", "-q", "-b", "main"]);
    git(&proj, &["commit", "-q", "--allow-empty", "-m", "one"]);
    write(
        &proj.join(".kitsoki.yaml"),
        "project: demo\nagent_launch_policy:\n  enabled: true\n  require_capsule: true\n  allowed_roots: [./.worktrees/capsules]\n",
    );
    let capsule = proj.join(".worktrees/capsules/c1");
    write(&capsule.join(".kitsoki-capsule"), "c1\n");
    write(
        &capsule.join("capsule-manifest.json"),
        r#"{"capsule_name":"c1","spec_path":"/specs/c1.yaml","workspace":"x","opened_at":"now"}"#,
    );
    let bin = root.join("bin");
    for name in ["codex", "claude"] {
        write(&bin.join(name), "#!/bin/sh\necho fake backend ran\n");
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }
    let out = root.join("out");
    std::fs::create_dir_all(&out).expect("mkdir");
    runner.own(&out);
    Fixture {
        _tmp: tmp,
        root,
        proj,
        capsule,
        bin,
        out,
    }
}

impl Fixture {
    /// `capsule ARGS` run from inside the project (config found by walking up).
    fn capsule(&self, runner: &Runner, args: &[&str]) -> Command {
        let mut c = runner.capsule(&self.root.join("capsule-root"));
        c.current_dir(self.proj.join("src"));
        c.env(
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", self.bin.display()),
        );
        c.args(args);
        c
    }

    /// `capsule agent launch --backend BACKEND --working-dir DIR REST...`, as above.
    fn launch(&self, runner: &Runner, backend: &str, dir: &str, rest: &[&str]) -> Command {
        let mut c = self.capsule(
            runner,
            &[
                "agent",
                "launch",
                "--backend",
                backend,
                "--working-dir",
                dir,
            ],
        );
        c.args(rest);
        c
    }
}

fn json_line(o: &Output) -> serde_json::Value {
    let s = stdout(o);
    assert_eq!(s.lines().count(), 1, "one JSON line expected: {s}");
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[test]
fn policy_check_exit_statuses_json_and_trace() {
    for runner in runners() {
        let f = fixture(&runner);
        let who = runner.label().to_string();
        let cap = f.capsule.display().to_string();
        let src = f.proj.join("src").display().to_string();
        let trace = f.out.join("trace.jsonl");
        let trace_s = trace.display().to_string();

        // allowed, human
        let o = run(&mut f.capsule(&runner, &["policy", "check", "--working-dir", &cap]));
        assert_ok(&o, &format!("{who}: policy check in capsule"));
        assert!(stdout(&o).starts_with("allowed:"), "{who}: {}", stdout(&o));
        assert!(stdout(&o).contains("capsule: c1"), "{who}: {}", stdout(&o));

        // allowed, JSON, traced via --trace
        let o = run(&mut f.capsule(
            &runner,
            &[
                "policy",
                "check",
                "--working-dir",
                &cap,
                "--agent",
                "codex",
                "--json",
                "--trace",
                &trace_s,
            ],
        ));
        assert_ok(&o, &format!("{who}: policy check --json"));
        let v = json_line(&o);
        assert_eq!(v["allowed"], true, "{who}: {v}");
        assert_eq!(v["agent"], "codex");
        assert_eq!(v["verb"], "agent.launch");
        assert_eq!(v["capsule"]["name"], "c1");
        assert_eq!(v["resolved_working_dir"], cap.as_str());
        assert_eq!(
            v["git"]["branch"], "main",
            "{who}: gix must read a repo owned by another user: {v}"
        );

        // denied: the project itself; JSON, exit 3, traced via CAPSULE_TRACE
        let o = run(f
            .capsule(
                &runner,
                &[
                    "policy",
                    "check",
                    "--working-dir",
                    &src,
                    "--json",
                    "--verb",
                    "capsule.exec",
                ],
            )
            .env("CAPSULE_TRACE", &trace));
        assert_eq!(code(&o), 3, "{who}: {} {}", stdout(&o), stderr(&o));
        let v = json_line(&o);
        assert_eq!(v["allowed"], false);
        assert_eq!(v["failed_check"], "allowed_roots");
        assert_eq!(v["verb"], "capsule.exec");

        // denied, human
        let o = run(&mut f.capsule(&runner, &["policy", "check", "--working-dir", &src]));
        assert_eq!(code(&o), 3);
        assert!(stdout(&o).starts_with("denied:"), "{}", stdout(&o));
        assert!(
            stdout(&o).contains("check 2 (allowed_roots)"),
            "{}",
            stdout(&o)
        );

        // missing working dir
        let o = run(&mut f.capsule(
            &runner,
            &[
                "policy",
                "check",
                "--working-dir",
                "/nonexistent/x",
                "--json",
            ],
        ));
        assert_eq!(code(&o), 3);
        assert_eq!(json_line(&o)["failed_check"], "working_dir");

        // the trace holds exactly the two traced decisions
        let text = std::fs::read_to_string(&trace).expect("trace written");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("trace line is JSON"))
            .collect();
        assert_eq!(lines.len(), 2, "{who}: {text}");
        assert!(lines.iter().all(|l| l["event"] == "agent.launch.policy"));
        assert_eq!(
            (lines[0]["allowed"].clone(), lines[1]["allowed"].clone()),
            (true.into(), false.into())
        );

        // no config anywhere above /: gate off, allowed
        let o = run(runner
            .capsule(&f.root.join("capsule-root"))
            .current_dir("/")
            .args(["policy", "check", "--working-dir", &src, "--json"]));
        assert_ok(&o, "gate off");
        assert_eq!(json_line(&o)["gate"], "off");
    }
}

#[test]
fn policy_check_config_errors_and_explicit_config() {
    let runner = Runner::Current;
    let f = fixture(&runner);
    let cap = f.capsule.display().to_string();
    let bad = f.root.join("bad.yaml");
    write(
        &bad,
        "agent_launch_policy:\n  enabled: true\n  protected_root: [.]\n",
    );
    let bad_s = bad.display().to_string();
    let o = run(&mut f.capsule(
        &runner,
        &["policy", "check", "--working-dir", &cap, "--config", &bad_s],
    ));
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "capsule: {bad_s}:3:3: unknown field `protected_root`"
        )),
        "{err}"
    );
    assert!(stdout(&o).is_empty());

    // an explicit config that protects the capsule's directory
    let strict = f.root.join("strict.yaml");
    write(
        &strict,
        &format!(
            "agent_launch_policy:\n  protected_roots: ['{}']\n",
            f.proj.display()
        ),
    );
    let o = run(&mut f.capsule(
        &runner,
        &[
            "policy",
            "check",
            "--working-dir",
            &cap,
            "--config",
            &strict.display().to_string(),
            "--json",
        ],
    ));
    assert_eq!(code(&o), 3);
    assert_eq!(json_line(&o)["failed_check"], "protected_roots");
}

#[test]
fn agent_launch_dry_run_plan_is_redacted() {
    for runner in runners() {
        let f = fixture(&runner);
        let who = runner.label().to_string();
        let cap = f.capsule.display().to_string();
        let secret = "sk-test-4a7c1e9d0b";
        let o = run(f
            .launch(
                &runner,
                "codex",
                &cap,
                &[
                    "--dry-run",
                    "--model",
                    "gpt-x",
                    "--effort",
                    "high",
                    "--",
                    "fix the tests",
                ],
            )
            .env("OPENAI_API_KEY", secret)
            .env("UNRELATED_TOKEN", "tok-zzz-123"));
        assert_ok(&o, &format!("{who}: agent launch --dry-run"));
        let all = format!("{}{}", stdout(&o), stderr(&o));
        assert!(
            !all.contains(secret) && !all.contains("tok-zzz-123"),
            "{who}: secret leaked: {all}"
        );
        let v = json_line(&o);
        let codex = f.bin.join("codex").display().to_string();
        assert_eq!(v["backend"], "codex");
        assert_eq!(v["binary"], codex.as_str());
        assert_eq!(
            v["argv"],
            serde_json::json!([
                codex,
                "-c",
                "sandbox_mode=\"danger-full-access\"",
                "exec",
                "-m",
                "gpt-x",
                "-c",
                "model_reasoning_effort=\"high\"",
                "fix the tests"
            ])
        );
        assert_eq!(v["own_sandbox"]["off"], true);
        assert_eq!(v["working_dir"], cap.as_str());
        assert_eq!(v["environment"]["OPENAI_API_KEY"], "<redacted>");
        assert!(v["environment"].get("UNRELATED_TOKEN").is_none());
        assert_eq!(v["launch_policy"]["allowed"], true);
        assert_eq!(v["launch_policy"]["agent"], "codex");
        assert_eq!(v["launch_policy"]["capsule"]["name"], "c1");
        let runner_argv: Vec<String> =
            serde_json::from_value(v["runner"].clone()).expect("runner argv");
        assert_eq!(&runner_argv[..3], ["capsule", "exec", cap.as_str()]);
        assert!(runner_argv.contains(&"--pass-env".to_string()));

        // claude, interactive, raw
        let o = run(&mut f.launch(
            &runner,
            "claude",
            &cap,
            &["--dry-run", "--interactive", "--raw", "--", "--resume", "x"],
        ));
        assert_ok(&o, "claude raw");
        let v = json_line(&o);
        let claude = f.bin.join("claude").display().to_string();
        assert_eq!(v["argv"], serde_json::json!([claude, "--resume", "x"]));
        assert!(v["runner"]
            .as_array()
            .expect("runner")
            .contains(&"-t".into()));
        let o = run(&mut f.launch(
            &runner,
            "claude",
            &cap,
            &["--dry-run", "--model", "opus", "--", "hi"],
        ));
        assert_ok(&o, "claude -p");
        assert_eq!(
            json_line(&o)["argv"],
            serde_json::json!([claude, "-p", "--model", "opus", "hi"])
        );
    }
}

#[test]
fn agent_launch_denied_prints_no_plan() {
    let runner = Runner::Current;
    let f = fixture(&runner);
    let trace = f.out.join("t.jsonl");
    for backend in ["codex", "claude"] {
        for dry in [true, false] {
            let src = f.proj.join("src").display().to_string();
            let rest: &[&str] = if dry { &["--dry-run"] } else { &[] };
            let o = run(f
                .launch(&runner, backend, &src, rest)
                .env("CAPSULE_TRACE", &trace));
            assert_eq!(
                code(&o),
                3,
                "{backend} dry={dry}: {} {}",
                stdout(&o),
                stderr(&o)
            );
            assert!(stdout(&o).is_empty(), "a plan was printed: {}", stdout(&o));
            assert!(!stdout(&o).contains("fake backend ran"));
            assert!(stderr(&o).contains("launch denied"), "{}", stderr(&o));
        }
    }
    assert_eq!(
        std::fs::read_to_string(&trace)
            .expect("trace")
            .lines()
            .count(),
        4
    );

    // usage errors come before the gate
    let cap = f.capsule.display().to_string();
    for extra in [&["--raw", "--model", "m"][..], &["--effort", "extreme"][..]] {
        let rest = [&["--dry-run"][..], extra].concat();
        let o = run(&mut f.launch(&runner, "codex", &cap, &rest));
        assert_eq!(code(&o), 2, "{extra:?}: {}", stderr(&o));
    }
    let o = run(&mut f.launch(&runner, "claude", &cap, &["--dry-run", "--effort", "high"]));
    assert_eq!(code(&o), 2);

    // backend missing from PATH
    let o = run(f
        .launch(&runner, "codex", &cap, &["--dry-run"])
        .env("PATH", "/usr/bin:/bin"));
    assert_eq!(code(&o), 127, "{}", stderr(&o));
}

/// Without `--dry-run`, `agent launch` runs the backend through `capsule exec` in the
/// capsule's sandbox: in the resolved working directory, with the mapped arguments, the
/// backend's environment passed by name, and the backend's exit status.
#[test]
fn agent_launch_runs_the_backend_through_capsule_exec() {
    for runner in runners() {
        let who = runner.label().to_string();
        let tmp = scratch();
        let root = std::fs::canonicalize(tmp.path()).expect("canon");
        let proj = root.join("proj");
        write(&proj.join("README"), "hello\n");
        git(&proj, &["init", "-q", "-b", "main"]);
        git(&proj, &["add", "README"]);
        git(&proj, &["commit", "-q", "-m", "one"]);
        write(
            &root.join(".kitsoki.yaml"),
            "agent_launch_policy:\n  require_capsule: true\n  allowed_roots: [./capsule-root/workspaces]\n",
        );
        let capsule_root = root.join("capsule-root");
        std::fs::create_dir_all(&capsule_root).expect("mkdir");
        runner.own(&capsule_root);
        let o = run(runner
            .capsule(&capsule_root)
            .current_dir(&root)
            .args(["open", "--source", "proj", "--name", "c1"]));
        assert_ok(&o, &format!("{who}: capsule open --source"));
        let ws = capsule_root.join("workspaces/c1");
        // the fake backend lives in the workspace, so the sandbox can see it
        let fake = ws.join(".bin/codex");
        write(
            &fake,
            "#!/bin/sh\necho \"ran in $(pwd) args: $*\"\necho \"key: ${OPENAI_API_KEY:+set}\"\nexit ${FAKE_STATUS:-0}\n",
        );
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::create_dir_all(ws.join("sub")).expect("mkdir");
        runner.own(&ws);
        let secret = "sk-run-5e8f0c1d";
        let launch = |status: &str| {
            run(runner
                .capsule(&capsule_root)
                .current_dir(&root)
                .env(
                    "PATH",
                    format!("{}:/usr/local/bin:/usr/bin:/bin", ws.join(".bin").display()),
                )
                .env("OPENAI_API_KEY", secret)
                .args([
                    "agent",
                    "launch",
                    "--backend",
                    "codex",
                    "--working-dir",
                    "capsule-root/workspaces/c1/sub",
                    "--model",
                    "m1",
                    "--pass-env",
                    "FAKE_STATUS",
                    "--",
                    "do it",
                ])
                .env("FAKE_STATUS", status))
        };
        let o = launch("0");
        assert_ok(&o, &format!("{who}: agent launch"));
        let out = stdout(&o);
        assert!(
            out.contains(&format!(
                "ran in {} args: -c sandbox_mode=\"danger-full-access\" exec -m m1 do it",
                ws.join("sub").display()
            )),
            "{who}: {out} {}",
            stderr(&o)
        );
        assert!(
            out.contains("key: set"),
            "{who}: the backend's key was not passed: {out}"
        );
        assert!(!out.contains(secret) && !stderr(&o).contains(secret));
        let o = launch("7");
        assert_eq!(code(&o), 7, "{who}: {} {}", stdout(&o), stderr(&o));
    }
}

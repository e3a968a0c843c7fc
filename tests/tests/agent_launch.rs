//! `capsule agent launch` without `--dry-run`, for real, as root and as the unprivileged
//! test user: fake `claude` / `codex` CLIs (shell scripts) run inside the capsule's
//! sandbox and print what they see (files readable, environment names, argv, cwd,
//! terminal, proxy). Nothing connects anywhere.
//!
//! Each test makes a scratch home (`HOME` of every command) holding both agents' logins, a
//! credential, a source folder `app` directly in home (so its non-dot siblings `tools` and
//! `runtime` are hidden as projects), and a capsule root outside that home.

use capsule_e2e::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CLAUDE_TOKEN: &str = "CLAUDE-LOGIN-7f3a";
const CODEX_TOKEN: &str = "CODEX-LOGIN-91be";

/// What every fake backend prints: argv, cwd, each file of a fixed list and of
/// `$FAKE_READ` (read, or denied: unreadable or empty, as a masked file reads), environment names, key length, terminal, proxy; then
/// runs `$FAKE_WRITE`.
const PROBE: &str = r#"
echo "argv:$*"
echo "cwd:$(pwd)"
for f in "$HOME/.claude/.credentials.json" "$HOME/.claude.json" "$HOME/.codex/auth.json" "$HOME/.gemini/oauth_creds.json" "$HOME/.ssh/id_ed25519" $FAKE_READ; do
  if c=$(cat "$f" 2>/dev/null) && [ -n "$c" ]; then echo "read:$f:$c"; else echo "denied:$f"; fi
done
env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/env:\1/p'
echo "keylen:${#ANTHROPIC_API_KEY}"
if test -t 0 && test -t 1; then echo tty:yes; else echo tty:no; fi
echo "proxy:${HTTPS_PROXY:-none}"
if [ -n "$FAKE_WRITE" ]; then sh -c "$FAKE_WRITE" && echo wrote:ok || echo wrote:failed; fi
"#;

fn exe(p: &Path, text: &str) {
    write(p, text);
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

struct Env {
    _dir: tempfile::TempDir,
    base: PathBuf,
    home: PathBuf,
    root: PathBuf,
    runner: Runner,
}

impl Env {
    fn new(r: &Runner) -> Env {
        let dir = scratch();
        let base = std::fs::canonicalize(dir.path()).expect("canon");
        let home = base.join("home");
        let root = base.join("root");
        // both agents' logins, a credential
        write(
            &home.join(".claude/.credentials.json"),
            &format!("{CLAUDE_TOKEN}\n"),
        );
        write(&home.join(".claude/settings.json"), "{}\n");
        write(&home.join(".claude.json"), "{\"n\":1}\n");
        write(&home.join(".codex/auth.json"), &format!("{CODEX_TOKEN}\n"));
        write(&home.join(".codex/config.toml"), "model = \"m\"\n");
        write(&home.join(".ssh/id_ed25519"), "SSH-KEY-SECRET\n");
        // the source folder, directly in home
        let app = home.join("app");
        write(&app.join("README"), "app\n");
        git(&app, &["init", "-q", "-b", "main"]);
        git(&app, &["add", "."]);
        git(&app, &["commit", "-q", "-m", "init"]);
        // fake backends on a PATH directory that is not hidden
        let probe = format!("#!/bin/sh\n{PROBE}");
        exe(&home.join(".local/bin/claude"), &probe);
        exe(&home.join(".local/bin/codex"), &probe);
        // an npm-style install in a hidden sibling: tools/bin/claude -> the package's script
        let pkg = home.join("tools/lib/node_modules/fake-claude");
        write(&pkg.join("package.json"), "{\"name\":\"fake-claude\"}\n");
        write(&pkg.join("vendor/data.txt"), "vendored\n");
        exe(&pkg.join("bin/claude.sh"), &probe);
        std::fs::create_dir_all(home.join("tools/bin")).expect("mkdir");
        std::os::unix::fs::symlink(
            "../lib/node_modules/fake-claude/bin/claude.sh",
            home.join("tools/bin/claude"),
        )
        .expect("symlink");
        write(&home.join("tools/private.txt"), "TOOLS-PRIVATE\n");
        // a codex whose interpreter lies in another hidden sibling (not on PATH)
        let fakesh = home.join("runtime/bin/fakesh");
        std::fs::create_dir_all(fakesh.parent().expect("parent")).expect("mkdir");
        std::fs::copy("/bin/dash", &fakesh).expect("copy dash");
        write(&home.join("runtime/private.txt"), "RUNTIME-PRIVATE\n");
        exe(
            &home.join("tools/bin/codex"),
            &format!("#!{}\n{PROBE}", fakesh.display()),
        );
        write(
            &base.join(".kitsoki.yaml"),
            "agent_launch_policy:\n  require_capsule: true\n  allowed_roots: [./root/workspaces]\n",
        );
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::create_dir_all(base.join("out")).expect("mkdir");
        r.own(&base);
        let e = Env {
            _dir: dir,
            base,
            home,
            root,
            runner: r.clone(),
        };
        let o = run(e
            .cmd(&e.path(&[".local/bin", "tools/bin"]))
            .args(["open", "--name", "c", "--source"])
            .arg(e.home.join("app")));
        assert_ok(&o, &format!("{}: open", r.label()));
        e
    }

    /// PATH with these home folders first, then the system's.
    fn path(&self, first: &[&str]) -> String {
        let mut v: Vec<String> = first
            .iter()
            .map(|d| self.home.join(d).display().to_string())
            .collect();
        v.push("/usr/local/bin:/usr/bin:/bin".into());
        v.join(":")
    }

    fn cmd(&self, path: &str) -> Command {
        let mut c = self.runner.capsule(&self.root);
        c.current_dir(&self.base)
            .env("HOME", &self.home)
            .env("PATH", path)
            // should a proxy ever start (allowlist), it resolves no real name
            .env("CAPSULE_PROXY_TEST_RESOLVE", "nothing.test=127.0.0.1");
        c
    }

    fn ws(&self) -> PathBuf {
        self.root.join("workspaces/c")
    }

    /// `capsule agent launch --backend B --working-dir WS EXTRA... -- ARGS`, with the fake
    /// backends of `.local/bin` first on PATH.
    fn launch(&self, backend: &str, extra: &[&str], args: &[&str]) -> Command {
        self.launch_with(&self.path(&[".local/bin"]), backend, extra, args)
    }

    fn launch_with(&self, path: &str, backend: &str, extra: &[&str], args: &[&str]) -> Command {
        let mut c = self.cmd(path);
        c.args(["agent", "launch", "--backend", backend, "--working-dir"])
            .arg(self.ws())
            .args(["--pass-env", "FAKE_READ", "--pass-env", "FAKE_WRITE"])
            .args(extra)
            .arg("--")
            .args(args);
        c
    }
}

/// The lines a fake backend printed (a terminal adds `\r`).
fn lines(o: &Output) -> Vec<String> {
    stdout(o)
        .lines()
        .map(|l| l.trim_end_matches('\r').to_string())
        .collect()
}

fn has(o: &Output, line: &str) -> bool {
    lines(o).iter().any(|l| l == line)
}

#[track_caller]
fn expect(o: &Output, who: &str, line: &str) {
    assert!(
        has(o, line),
        "{who}: expected line {line:?}\nstdout: {}\nstderr: {}",
        stdout(o),
        stderr(o)
    );
}

fn read_line(path: &Path, content: &str) -> String {
    format!("read:{}:{content}", path.display())
}

fn denied_line(path: &Path) -> String {
    format!("denied:{}", path.display())
}

fn home_changes(e: &Env) -> Vec<(String, bool)> {
    let o = run(e.cmd(&e.path(&[])).args(["home", "diff", "c", "--json"]));
    assert_ok(&o, "home diff");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    v["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            (
                c["path"].as_str().expect("path").to_string(),
                c.get("refused").is_some(),
            )
        })
        .collect()
}

/// The launched agent reads its own login and writes into it (into the home layer, never
/// the real home); every other agent's login, made before or after the capsule was opened
/// and also the copy another agent left in the layer, stays hidden; credentials too.
#[test]
fn own_login_only_and_writes_stay_in_the_layer() {
    for r in runners() {
        let who = r.label().to_string();
        let e = Env::new(&r);
        let h = &e.home;
        // another agent's login made after the capsule was opened
        write(&h.join(".gemini/oauth_creds.json"), "GEMINI-LOGIN\n");
        r.own(&h.join(".gemini"));
        let real_before = hash_tree(h);

        let write_claude = "mkdir -p ~/.claude/projects && echo transcript > ~/.claude/projects/t.jsonl && echo tok2 > ~/.claude/.credentials.json && echo '{\"n\":2}' > ~/.claude.json.tmp && mv ~/.claude.json.tmp ~/.claude.json";
        let o = run(e
            .launch("claude", &[], &["hello"])
            .env("FAKE_WRITE", write_claude));
        assert_ok(&o, &format!("{who}: launch claude"));
        expect(&o, &who, "argv:-p hello");
        expect(&o, &who, &format!("cwd:{}", e.ws().display()));
        expect(
            &o,
            &who,
            &read_line(&h.join(".claude/.credentials.json"), CLAUDE_TOKEN),
        );
        expect(&o, &who, &read_line(&h.join(".claude.json"), "{\"n\":1}"));
        expect(&o, &who, &denied_line(&h.join(".codex/auth.json")));
        expect(&o, &who, &denied_line(&h.join(".gemini/oauth_creds.json")));
        expect(&o, &who, &denied_line(&h.join(".ssh/id_ed25519")));
        expect(&o, &who, "wrote:ok");
        assert_eq!(
            hash_tree(h),
            real_before,
            "{who}: the real home changed under claude"
        );
        // the writes wait in the layer, refused for apply (logins are never applied)
        let ch = home_changes(&e);
        for p in [".claude", ".claude.json"] {
            assert!(
                ch.iter().any(|(c, refused)| c == p && *refused),
                "{who}: {p} not in the layer as refused: {ch:?}"
            );
        }

        let write_codex = "mkdir -p ~/.codex/sessions && echo s1 > ~/.codex/sessions/s1.jsonl";
        let o = run(e
            .launch("codex", &[], &["fix it"])
            .env("FAKE_WRITE", write_codex)
            .env(
                "FAKE_READ",
                format!(
                    "{} {}",
                    h.join(".claude/projects/t.jsonl").display(),
                    h.join(".codex/config.toml").display()
                ),
            ));
        assert_ok(&o, &format!("{who}: launch codex"));
        expect(
            &o,
            &who,
            "argv:-c sandbox_mode=\"danger-full-access\" exec fix it",
        );
        expect(
            &o,
            &who,
            &read_line(&h.join(".codex/auth.json"), CODEX_TOKEN),
        );
        expect(
            &o,
            &who,
            &read_line(&h.join(".codex/config.toml"), "model = \"m\""),
        );
        // neither the real claude login nor what claude left in the layer
        expect(&o, &who, &denied_line(&h.join(".claude/.credentials.json")));
        expect(&o, &who, &denied_line(&h.join(".claude.json")));
        expect(&o, &who, &denied_line(&h.join(".claude/projects/t.jsonl")));
        expect(&o, &who, &denied_line(&h.join(".gemini/oauth_creds.json")));
        expect(&o, &who, &denied_line(&h.join(".ssh/id_ed25519")));
        expect(&o, &who, "wrote:ok");
        assert_eq!(
            hash_tree(h),
            real_before,
            "{who}: real home changed by codex"
        );

        // claude again: its own earlier writes are there, codex's are not
        let o = run(e.launch("claude", &[], &["again"]).env(
            "FAKE_READ",
            format!(
                "{} {}",
                h.join(".claude/projects/t.jsonl").display(),
                h.join(".codex/sessions/s1.jsonl").display()
            ),
        ));
        assert_ok(&o, &format!("{who}: claude again"));
        expect(
            &o,
            &who,
            &read_line(&h.join(".claude/.credentials.json"), "tok2"),
        );
        expect(
            &o,
            &who,
            &read_line(&h.join(".claude/projects/t.jsonl"), "transcript"),
        );
        expect(&o, &who, &denied_line(&h.join(".codex/sessions/s1.jsonl")));
        expect(&o, &who, &denied_line(&h.join(".codex/auth.json")));

        // a plain exec still sees no agent login at all
        let o = run(e.cmd(&e.path(&[])).args([
            "exec",
            "c",
            "--",
            "sh",
            "-c",
            "for f in ~/.claude/.credentials.json ~/.claude.json ~/.codex/auth.json; do c=$(cat $f 2>/dev/null); [ -n \"$c\" ] && echo \"$f: $c\"; done; echo end",
        ]));
        assert_ok(&o, &format!("{who}: plain exec"));
        assert_eq!(stdout(&o), "end\n", "{who}: {}", stderr(&o));
        assert_eq!(hash_tree(h), real_before, "{who}: real home changed");
    }
}

/// The binary is resolved once on the host: an npm-style symlink into a package that lies
/// in a hidden sibling project gets that package revealed (and nothing else of the
/// sibling); an interpreter named by `#!` likewise; a copy of the binary that a task wrote
/// into the home layer is refused.
#[test]
fn binary_and_interpreter_resolved_and_revealed() {
    for r in runners() {
        let who = r.label().to_string();
        let e = Env::new(&r);
        let h = &e.home;
        let pkg = h.join("tools/lib/node_modules/fake-claude");
        let tools_path = e.path(&["tools/bin"]);

        let o = run(&mut e.launch_with(&tools_path, "claude", &["--dry-run"], &["x"]));
        assert_ok(&o, &format!("{who}: dry-run"));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
        assert_eq!(v["binary"], pkg.join("bin/claude.sh").display().to_string());
        assert_eq!(
            v["found_on_path"],
            h.join("tools/bin/claude").display().to_string()
        );
        assert_eq!(v["reveal"], serde_json::json!([pkg.display().to_string()]));

        let o = run(e.launch_with(&tools_path, "claude", &[], &["x"]).env(
            "FAKE_READ",
            format!(
                "{} {}",
                pkg.join("vendor/data.txt").display(),
                h.join("tools/private.txt").display()
            ),
        ));
        assert_ok(
            &o,
            &format!("{who}: claude from a hidden sibling's package"),
        );
        expect(&o, &who, "argv:-p x");
        expect(
            &o,
            &who,
            &read_line(&pkg.join("vendor/data.txt"), "vendored"),
        );
        expect(&o, &who, &denied_line(&h.join("tools/private.txt")));

        let o = run(e.launch_with(&tools_path, "codex", &[], &["y"]).env(
            "FAKE_READ",
            h.join("runtime/private.txt").display().to_string(),
        ));
        assert_ok(&o, &format!("{who}: codex with a hidden interpreter"));
        expect(
            &o,
            &who,
            "argv:-c sandbox_mode=\"danger-full-access\" exec y",
        );
        expect(&o, &who, &denied_line(&h.join("runtime/private.txt")));
        let o = run(&mut e.launch_with(&tools_path, "codex", &["--dry-run"], &["y"]));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
        assert_eq!(
            v["interpreter"],
            h.join("runtime/bin/fakesh").display().to_string()
        );
        assert_eq!(
            v["reveal"],
            serde_json::json!([h.join("runtime/bin").display().to_string()])
        );

        // a task replaces ~/.local/bin/codex in the home layer: the launch refuses it
        let o = run(e.cmd(&e.path(&[])).args([
            "exec",
            "c",
            "--",
            "sh",
            "-c",
            "printf '#!/bin/sh\\necho planted-by-a-task\\n' > ~/.local/bin/codex",
        ]));
        assert_ok(&o, &format!("{who}: plant"));
        let o = run(&mut e.launch("codex", &[], &["z"]));
        assert_eq!(o.status.code(), Some(1), "{who}: {}", stdout(&o));
        assert!(!stdout(&o).contains("planted-by-a-task"), "{who}");
        assert!(
            stderr(&o).contains("shadowed") && stderr(&o).contains("capsule home diff"),
            "{who}: {}",
            stderr(&o)
        );
        // claude on the same PATH dir is untouched and still runs
        assert_ok(
            &run(&mut e.launch("claude", &[], &["ok"])),
            &format!("{who}: claude"),
        );
    }
}

/// Secrets reach the backend by name only: the key is set inside to a placeholder (a
/// `--secret` for the API hosts, and the base URL's host, which is allow-listed), and
/// its value is in no plan, record, trace or message; unrelated variables stay out.
#[test]
fn secrets_by_name_only() {
    for r in runners() {
        let who = r.label().to_string();
        let e = Env::new(&r);
        let secret = "sk-ant-e2e-c0ffee1234";
        let trace = e.base.join("out/trace.jsonl");
        let trace_arg = trace.display().to_string();
        let launch = |extra: &[&str]| {
            let mut args = vec!["--trace", trace_arg.as_str()];
            args.extend_from_slice(extra);
            let mut c = e.launch("claude", &args, &["hi"]);
            c.env("ANTHROPIC_API_KEY", secret)
                .env("CLAUDE_CODE_EXTRA_FLAG", "1")
                .env("UNRELATED_TOKEN", "tok-unrelated-999")
                .env("OPENAI_API_KEY", "sk-openai-not-for-claude")
                .env("ANTHROPIC_BASE_URL", "https://gw.example.test/v1");
            c
        };
        let o = run(&mut launch(&[]));
        assert_ok(&o, &format!("{who}: launch"));
        // the placeholder, not the key
        expect(&o, &who, "keylen:55");
        expect(&o, &who, "env:ANTHROPIC_API_KEY");
        expect(&o, &who, "env:ANTHROPIC_BASE_URL");
        expect(&o, &who, "env:CLAUDE_CODE_EXTRA_FLAG");
        expect(&o, &who, "env:CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC");
        assert!(!has(&o, "env:UNRELATED_TOKEN"), "{who}: {}", stdout(&o));
        assert!(!has(&o, "env:OPENAI_API_KEY"), "{who}: {}", stdout(&o));
        let dry = run(&mut launch(&["--dry-run"]));
        assert_ok(&dry, &format!("{who}: dry-run"));
        let v: serde_json::Value = serde_json::from_str(&stdout(&dry)).expect("json");
        assert_eq!(v["environment"]["ANTHROPIC_API_KEY"], "<redacted>");
        let runner: Vec<String> = serde_json::from_value(v["runner"].clone()).expect("argv");
        let secret_flag =
            "ANTHROPIC_API_KEY=api.anthropic.com:443,console.anthropic.com:443,gw.example.test:443";
        assert!(
            runner
                .windows(2)
                .any(|w| w[0] == "--secret" && w[1] == secret_flag),
            "{who}: {runner:?}"
        );
        assert!(
            runner
                .windows(2)
                .any(|w| w[0] == "--allow-host" && w[1] == "gw.example.test:443"),
            "{who}: {runner:?}"
        );
        assert!(
            !runner.iter().any(|a| a == "ANTHROPIC_API_KEY"),
            "{who}: passed by value: {runner:?}"
        );

        let events = e.root.join("bundles/c/events.jsonl");
        let rec = std::fs::read_to_string(&events).expect("events");
        let last: serde_json::Value = rec
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .rfind(|v| v["event"] == "exec")
            .expect("an exec record");
        assert_eq!(last["requested"]["agent_login"], "claude", "{who}: {last}");
        let names = last["requested"]["pass_env"].to_string();
        assert!(!names.contains("ANTHROPIC_API_KEY"), "{who}: {names}");
        assert!(names.contains("ANTHROPIC_BASE_URL"), "{who}: {names}");
        assert_eq!(
            last["requested"]["net"]["secrets"],
            serde_json::json!(["ANTHROPIC_API_KEY"]),
            "{who}: {last}"
        );
        let trace_text = std::fs::read_to_string(&trace).unwrap_or_default();
        for (what, text) in [
            ("stdout", stdout(&o)),
            ("stderr", stderr(&o)),
            ("dry-run", format!("{}{}", stdout(&dry), stderr(&dry))),
            ("exec record", rec),
            ("trace", trace_text),
        ] {
            assert!(
                !text.contains(secret) && !text.contains("tok-unrelated-999"),
                "{who}: a secret value is in the {what}"
            );
        }
    }
}

/// `--interactive` gives the backend a terminal of its own (and the interactive argv);
/// without it the backend's output is our pipe.
#[test]
fn interactive_runs_on_a_terminal() {
    for r in runners() {
        let who = r.label().to_string();
        let e = Env::new(&r);
        let o = run(&mut e.launch("codex", &["--interactive"], &["task"]));
        assert_ok(&o, &format!("{who}: --interactive"));
        expect(&o, &who, "tty:yes");
        expect(&o, &who, "argv:-c sandbox_mode=\"danger-full-access\" task");
        let o = run(&mut e.launch("codex", &[], &["task"]));
        assert_ok(&o, &format!("{who}: batch"));
        expect(&o, &who, "tty:no");
        expect(
            &o,
            &who,
            "argv:-c sandbox_mode=\"danger-full-access\" exec task",
        );
    }
}

/// The backend's API hosts: passed as `--allow-host` when `capsule exec` has the
/// allowlist (then the backend sees the relay as its proxy); said plainly otherwise.
#[test]
fn api_hosts_allowlisted_when_exec_can() {
    let help = run(Command::new(capsule_bin()).args(["exec", "--help"]));
    let allowlist = stdout(&help).contains("--allow-host");
    for r in runners() {
        let who = r.label().to_string();
        let e = Env::new(&r);
        for (backend, host) in [
            ("claude", "api.anthropic.com:443"),
            ("codex", "api.openai.com:443"),
        ] {
            let o = run(&mut e.launch(backend, &["--dry-run"], &["x"]));
            assert_ok(&o, &format!("{who}: dry-run {backend}"));
            let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
            let runner: Vec<String> = serde_json::from_value(v["runner"].clone()).expect("argv");
            let pos = runner
                .windows(2)
                .position(|w| w[0] == "--allow-host" && w[1] == host);
            assert_eq!(pos.is_some(), allowlist, "{who}: {runner:?}");
            let login = runner
                .windows(2)
                .any(|w| w[0] == "--agent-login" && w[1] == backend);
            assert!(login, "{who}: {runner:?}");
            if allowlist {
                let o = run(&mut e.launch(backend, &[], &["x"]));
                assert_ok(&o, &format!("{who}: {backend}"));
                assert!(
                    lines(&o)
                        .iter()
                        .any(|l| l.starts_with("proxy:http://127.0.0.1:")),
                    "{who}: {}",
                    stdout(&o)
                );
            } else {
                let note = v["network"]["note"].as_str().unwrap_or_default();
                assert!(note.contains(host), "{who}: {v}");
                let o = run(&mut e.launch(backend, &[], &["x"]));
                assert_ok(&o, &format!("{who}: {backend}"));
                assert!(stderr(&o).contains("no network allowlist"), "{who}");
                expect(&o, &who, "proxy:none");
            }
        }
    }
}

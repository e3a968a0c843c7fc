//! The real agent CLIs (Claude Code, Codex; pinned npm packages that `.ci/run` installs
//! into `$CAPSULE_AGENTS_PREFIX`, default `/opt/capsule-agents`) launched through
//! `capsule agent launch` against a fake model server on the host's 127.0.0.1
//! (`tests/fixtures/agents/fake-model-server.py`), as root and as the test user.
//!
//! The server asks for one shell tool call that writes a file in the workspace, tries to
//! read `~/.ssh/id_ed25519` and runs `git config --global user.name x`, then finishes when
//! the tool's result comes back. The agent reaches the server only through capsule's
//! allowlist proxy (a test name resolved by `CAPSULE_PROXY_TEST_RESOLVE`). Checked: the
//! write lands, the key is refused, the git config and the agent's own session files land
//! in the home layer (the real home is untouched), and the server got the API key.
//!
//! Without the packages the tests are skipped with a message, except as root (CI), where
//! `.ci/run` installs them.

use capsule_e2e::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOOL: &str = "echo from-tool > tool-wrote.txt; cat ~/.ssh/id_ed25519; git config --global user.name x; echo tool-done";
const KEY: &str = "sk-fake-key-0123456789-TAIL1234";

fn prefix() -> PathBuf {
    std::env::var_os("CAPSULE_AGENTS_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/capsule-agents"))
}

/// The agent's binary in the prefix, or None (skip) when not installed and not root.
fn agent_bin(name: &str) -> Option<PathBuf> {
    let b = prefix().join("bin").join(name);
    if b.exists() {
        return Some(b);
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    assert!(
        !root,
        "{} missing: .ci/run installs the pinned agent CLIs there (as root this test does not skip)",
        b.display()
    );
    eprintln!("SKIPPED: {} is not installed (see .ci/run)", b.display());
    None
}

struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let portfile = dir.join("port");
        let log = dir.join("server.log");
        let child = Command::new("python3")
            .arg(repo_root().join("tests/fixtures/agents/fake-model-server.py"))
            .arg(&portfile)
            .arg(&log)
            .arg(TOOL)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the fake model server");
        let t = Instant::now();
        while !portfile.exists() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "fake server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let port = std::fs::read_to_string(&portfile)
            .expect("port")
            .trim()
            .parse()
            .expect("port number");
        Server { child, port, log }
    }
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch home with an ssh key and a source checkout `app`, a capsule `c` of it.
struct Setup {
    _dir: tempfile::TempDir,
    base: PathBuf,
    home: PathBuf,
    root: PathBuf,
    runner: Runner,
}

impl Setup {
    fn new(r: &Runner) -> Setup {
        let dir = scratch();
        let base = std::fs::canonicalize(dir.path()).expect("canon");
        let home = base.join("home");
        let root = base.join("root");
        write(&home.join(".ssh/id_ed25519"), "SSH-KEY-SECRET\n");
        let app = home.join("app");
        write(&app.join("README"), "app\n");
        git(&app, &["init", "-q", "-b", "main"]);
        git(&app, &["add", "."]);
        git(&app, &["commit", "-q", "-m", "init"]);
        std::fs::create_dir_all(&root).expect("mkdir");
        r.own(&base);
        let s = Setup {
            _dir: dir,
            base,
            home,
            root,
            runner: r.clone(),
        };
        let o = run(s
            .cmd()
            .args(["open", "--name", "c", "--source"])
            .arg(s.home.join("app")));
        assert_ok(&o, &format!("{}: open", r.label()));
        s
    }
    fn cmd(&self) -> Command {
        let mut c = self.runner.capsule(&self.root);
        c.current_dir(&self.base)
            .env("HOME", &self.home)
            .env(
                "PATH",
                format!(
                    "{}:/usr/local/bin:/usr/bin:/bin",
                    prefix().join("bin").display()
                ),
            )
            .env("CAPSULE_PROXY_TEST_RESOLVE", "model.test=127.0.0.1")
            .stdin(Stdio::null());
        c
    }
    fn ws(&self) -> PathBuf {
        self.root.join("workspaces/c")
    }
    fn launch(&self, backend: &str, port: u16, extra: &[&str], args: &[&str]) -> Command {
        let mut c = self.cmd();
        c.args(["agent", "launch", "--backend", backend, "--working-dir"])
            .arg(self.ws())
            .args(["--allow-host", &format!("model.test:{port}")])
            .args(["--allow-host", &format!("127.0.0.1:{port}")])
            .args(extra)
            .arg("--")
            .args(args);
        c
    }
    /// What the run must have left: the file in the workspace, the key refused, git's
    /// config and `own` (the agent's state) in the home layer only.
    fn check(
        &self,
        who: &str,
        o: &std::process::Output,
        server: &Server,
        own: &str,
        in_layer: &str,
    ) {
        let log = server.log();
        assert_ok(o, &format!("{who}: launch\nserver log:\n{log}"));
        assert!(
            stdout(o).contains("FAKE-MODEL-DONE"),
            "{who}: {}",
            stdout(o)
        );
        let wrote = std::fs::read_to_string(self.ws().join("tool-wrote.txt")).unwrap_or_default();
        assert_eq!(wrote, "from-tool\n", "{who}: the tool's write; log:\n{log}");
        assert!(
            log.contains("tool-done"),
            "{who}: no tool result came back: {log}"
        );
        assert!(
            !log.contains("SSH-KEY-SECRET"),
            "{who}: the ssh key was read: {log}"
        );
        assert!(
            log.contains("TAIL1234"),
            "{who}: the server did not get the key: {log}"
        );
        assert!(
            !self.home.join(".gitconfig").exists(),
            "{who}: git config reached the real home"
        );
        assert!(
            !self.home.join(own).exists(),
            "{who}: {own} in the real home"
        );
        let d = run(self.cmd().args(["home", "diff", "c"]));
        assert_ok(&d, &format!("{who}: home diff"));
        let diff = stdout(&d);
        assert!(
            diff.contains("~/.gitconfig") && diff.contains("name = x"),
            "{who}: {diff}"
        );
        assert!(
            diff.contains(in_layer),
            "{who}: {in_layer} not in the layer: {diff}"
        );
    }
}

#[test]
fn claude_code_completes_a_tool_call_in_a_capsule() {
    let Some(_) = agent_bin("claude") else { return };
    for r in runners() {
        let who = format!("{}: claude", r.label());
        let s = Setup::new(&r);
        let server = Server::start(&s.base);
        let t = Instant::now();
        // no --dangerously-skip-permissions (refused as root): the tool is allowed by name
        let o = run(s
            .launch(
                "claude",
                server.port,
                &[],
                &["--allowedTools=Bash", "run the tool"],
            )
            .env("ANTHROPIC_API_KEY", KEY)
            .env(
                "ANTHROPIC_BASE_URL",
                format!("http://model.test:{}", server.port),
            ));
        eprintln!("{who}: took {:?}", t.elapsed());
        s.check(&who, &o, &server, ".claude.json", "~/.claude.json");
    }
}

#[test]
fn codex_completes_a_tool_call_in_a_capsule() {
    let Some(_) = agent_bin("codex") else { return };
    for r in runners() {
        let who = format!("{}: codex", r.label());
        let s = Setup::new(&r);
        let server = Server::start(&s.base);
        // codex takes its provider from its own config (it ignores OPENAI_BASE_URL)
        write(
            &s.home.join(".codex/config.toml"),
            &format!(
                "model = \"fake-model\"\nmodel_provider = \"fake\"\n\n[model_providers.fake]\nname = \"fake\"\nbase_url = \"http://model.test:{}/v1\"\nwire_api = \"responses\"\nenv_key = \"FAKE_OPENAI_KEY\"\n",
                server.port
            ),
        );
        r.own(&s.home);
        let t = Instant::now();
        let o = run(s
            .launch(
                "codex",
                server.port,
                &["--pass-env", "FAKE_OPENAI_KEY"],
                &["--skip-git-repo-check", "run the tool"],
            )
            .env("FAKE_OPENAI_KEY", KEY));
        eprintln!("{who}: took {:?}", t.elapsed());
        assert!(
            stdout(&o).contains("sandbox: danger-full-access")
                || stderr(&o).contains("sandbox: danger-full-access"),
            "{who}: codex's own sandbox is not off: {}{}",
            stdout(&o),
            stderr(&o)
        );
        s.check(&who, &o, &server, ".codex/sessions", "~/.codex/");
    }
}

/// Every built-in profile's CLI (the npm package `.ci/run` installs) starts inside a
/// capsule through `agent launch --backend NAME` and prints its version (the five run at
/// once).
#[test]
fn every_builtin_profile_prints_its_version_in_a_capsule() {
    let want = [
        ("claude", "2.1.332"),
        ("codex", "0.171.0"),
        ("copilot", "1.0.102"),
        ("gemini", "0.61.0"),
        ("opencode", "1.18.33"),
    ];
    if want.iter().any(|(b, _)| agent_bin(b).is_none()) {
        return;
    }
    let runners = runners();
    std::thread::scope(|sc| {
        let mut handles = Vec::new();
        for r in &runners {
            let s = std::sync::Arc::new(Setup::new(r));
            for (b, v) in want {
                let s = s.clone();
                let label = r.label().to_string();
                handles.push(sc.spawn(move || {
                    let mut c = s.cmd();
                    c.args(["agent", "launch", "--backend", b, "--raw", "--working-dir"])
                        .arg(s.ws())
                        .args(["--", "--version"]);
                    let o = run(&mut c);
                    let who = format!("{label}: {b}");
                    assert_ok(&o, &format!("{who} --version"));
                    assert!(stdout(&o).contains(v), "{who}: {}", stdout(&o));
                }));
            }
        }
        for h in handles {
            h.join().expect("a --version run panicked");
        }
    });
}

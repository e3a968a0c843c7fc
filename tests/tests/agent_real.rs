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
//! Claude Code and Codex also reach their real API hosts (`api.anthropic.com:443`,
//! `api.openai.com:443`, no base URL set) over HTTPS: the test resolver sends those names
//! to the server's own port, the proxy terminates the TLS with the capsule's CA (their key
//! is a secret) and verifies the server's certificate against a test CA. Gemini CLI,
//! Copilot CLI and opencode reach theirs the same way (the server speaks none of their
//! APIs: a request with the real host's name arriving is what is checked).
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
        Server::start_with(dir, &[])
    }

    /// The server speaking HTTPS with `cert` and `key` (see [`test_pki`]).
    fn start_tls(dir: &Path, cert: &Path, key: &Path) -> Server {
        Server::start_with(dir, &[cert, key])
    }

    fn start_with(dir: &Path, tls: &[&Path]) -> Server {
        let portfile = dir.join("port");
        let log = dir.join("server.log");
        let child = Command::new("python3")
            .arg(repo_root().join("tests/fixtures/agents/fake-model-server.py"))
            .arg(&portfile)
            .arg(&log)
            .arg(TOOL)
            .args(tls)
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

/// A test CA (`ca.pem`) and a server certificate for `names` signed by it, in `dir`:
/// (ca, cert, key).
fn test_pki(dir: &Path, names: &[&str]) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("key");
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "capsule e2e agents test CA");
    let ca = p.self_signed(&ca_key).expect("CA");
    let key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .expect("params")
        .signed_by(&key, &ca, &ca_key)
        .expect("leaf");
    let paths = (dir.join("ca.pem"), dir.join("srv.pem"), dir.join("srv.key"));
    write(&paths.0, &ca.pem());
    write(&paths.1, &leaf.pem());
    write(&paths.2, &key.serialize_pem());
    paths
}

/// Claude Code and Codex with no base URL: they reach `api.anthropic.com:443` and
/// `api.openai.com:443` themselves, over TLS the proxy terminates (their keys are
/// secrets), and complete the tool call.
#[test]
fn claude_and_codex_reach_their_real_api_hosts_over_https() {
    if agent_bin("claude").is_none() || agent_bin("codex").is_none() {
        return;
    }
    for r in runners() {
        let s = Setup::new(&r);
        let (ca, cert, key) = test_pki(&s.base, &["api.anthropic.com", "api.openai.com"]);
        r.own(&s.base);
        let server = Server::start_tls(&s.base, &cert, &key);
        let p = server.port;
        let resolve = format!("api.anthropic.com=127.0.0.1:{p},api.openai.com=127.0.0.1:{p}");
        let launch = |backend: &str, args: &[&str]| {
            let mut c = s.cmd();
            c.env("CAPSULE_PROXY_TEST_RESOLVE", &resolve)
                .env("CAPSULE_PROXY_TEST_UPSTREAM_CA", &ca)
                .args(["agent", "launch", "--backend", backend, "--working-dir"])
                .arg(s.ws())
                // the names resolve to the test server on loopback: allowed by address
                .args(["--allow-host", "127.0.0.1", "--"])
                .args(args);
            c
        };
        let who = format!("{}: claude over https", r.label());
        let o = run(launch("claude", &["--allowedTools=Bash", "run the tool"])
            .env("ANTHROPIC_API_KEY", KEY));
        s.check(&who, &o, &server, ".claude.json", "~/.claude.json");
        let log = server.log();
        assert!(log.contains("\"api\": \"anthropic\""), "{who}: {log}");
        std::fs::remove_file(s.ws().join("tool-wrote.txt")).expect("rm");
        let who = format!("{}: codex over https", r.label());
        let o =
            run(launch("codex", &["--skip-git-repo-check", "run the tool"])
                .env("OPENAI_API_KEY", KEY));
        s.check(&who, &o, &server, ".codex/sessions", "~/.codex/");
        assert!(
            server.log().contains("\"api\": \"openai\""),
            "{who}: {}",
            server.log()
        );
    }
}

/// Gemini CLI, Copilot CLI and opencode reach their API hosts (the fake server speaks
/// none of their APIs: a request arriving with the real host's name is what is checked).
#[test]
fn gemini_copilot_and_opencode_reach_their_api_hosts() {
    // (`--raw`: these arguments as they are, no batch flag added)
    let agents = [
        (
            "gemini",
            "GEMINI_API_KEY",
            vec!["--skip-trust", "-p", "hi"],
            "generativelanguage.googleapis.com",
        ),
        ("copilot", "GH_TOKEN", vec!["-p", "hi"], "github"),
        (
            "opencode",
            "ANTHROPIC_API_KEY",
            vec!["run", "hi"],
            "api.anthropic.com",
        ),
    ];
    if agents.iter().any(|a| agent_bin(a.0).is_none()) {
        return;
    }
    let names = [
        "generativelanguage.googleapis.com",
        "cloudcode-pa.googleapis.com",
        "oauth2.googleapis.com",
        "api.githubcopilot.com",
        "api.individual.githubcopilot.com",
        "api.github.com",
        "github.com",
        "api.anthropic.com",
        "models.dev",
        "opencode.ai",
    ];
    for r in runners() {
        let s = Setup::new(&r);
        let (ca, cert, key) = test_pki(&s.base, &names);
        r.own(&s.base);
        let server = Server::start_tls(&s.base, &cert, &key);
        let p = server.port;
        let resolve: Vec<String> = names.iter().map(|n| format!("{n}=127.0.0.1:{p}")).collect();
        // the three at once (opencode alone takes ~20 s)
        let outs: Vec<(String, std::process::Output)> = std::thread::scope(|sc| {
            let handles: Vec<_> = agents
                .iter()
                .map(|(backend, key_env, args, _)| {
                    let mut c = s.cmd();
                    c.env("CAPSULE_PROXY_TEST_RESOLVE", resolve.join(","))
                        .env("CAPSULE_PROXY_TEST_UPSTREAM_CA", &ca)
                        .env(key_env, KEY)
                        .args(["agent", "launch", "--raw", "--backend", backend])
                        .arg("--working-dir")
                        .arg(s.ws())
                        .args(["--allow-host", "127.0.0.1", "--"])
                        .args(args);
                    sc.spawn(move || (backend.to_string(), bounded(&mut c, 120)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a launch panicked"))
                .collect()
        });
        let log = server.log();
        for ((backend, o), (_, _, _, host)) in outs.iter().zip(&agents) {
            let who = format!("{}: {backend}", r.label());
            eprintln!("{who}:\n{}{}", stdout(o), stderr(o));
            let reached = log
                .lines()
                .any(|l| l.contains("\"host\": \"") && l.contains(host));
            assert!(reached, "{who} did not reach {host}:\n{log}");
        }
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

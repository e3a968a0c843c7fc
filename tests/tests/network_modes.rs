//! Network modes of `capsule exec`, end to end, as root and as the unprivileged user:
//! `none` (a server inside is the sandbox's alone), the allowlist proxy (curl and git over
//! http through it to a server on the host's loopback, curl over SOCKS5 too; 403 / SOCKS5
//! reply 2 and the refusal log otherwise, names resolving to loopback, wildcards, denied
//! ports), `open` and `replay`.
//!
//! Every server here listens on 127.0.0.1 and is started by the test; names resolve only
//! through the proxy's test resolver table (CAPSULE_PROXY_TEST_RESOLVE), never DNS.
//! (`--no-network` and the host's loopback being out of reach in `none` are tested in
//! sandbox_net.rs.)
use capsule_bundle::policy::NetworkMode;
use capsule_e2e::sandbox::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `python3 -m http.server` on 127.0.0.1, serving `dir`; killed on drop.
struct HttpServer {
    child: Child,
    port: u16,
}

impl HttpServer {
    fn start(dir: &Path) -> HttpServer {
        let mut child = Command::new("python3")
            .args(["-u", "-m", "http.server", "--bind", "127.0.0.1", "0"])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start python3 -m http.server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // "Serving HTTP on 127.0.0.1 port 40123 (http://127.0.0.1:40123/) ..."
        let port = line
            .split_whitespace()
            .skip_while(|w| *w != "port")
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        HttpServer { child, port }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory served over http: `hello.txt` and a bare repository `repo.git` (one
/// commit with README.md) prepared for git's dumb http protocol.
fn served_dir(base: &Path) -> std::path::PathBuf {
    let d = base.join("served");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("hello.txt"), "hello from the host\n").unwrap();
    let src = base.join("src-repo");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("README.md"), "cloned through the proxy\n").unwrap();
    let git = |dir: &Path, args: &[&str]| {
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
            .env("HOME", base)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "git {args:?}");
    };
    git(&src, &["init", "-q"]);
    git(&src, &["add", "."]);
    git(&src, &["commit", "-q", "-m", "one"]);
    git(
        base,
        &["clone", "-q", "--bare", "src-repo", "served/repo.git"],
    );
    git(&d.join("repo.git"), &["update-server-info"]);
    d
}

/// `curl` inside the sandbox through the proxy; prints the body then the status code.
/// NO_PROXY is cleared: it names the sandbox's own loopback, while these URLs mean the
/// host's 127.0.0.1 (reachable only through the proxy).
fn curl(url: &str) -> String {
    curl_with("", url)
}

/// [`curl`] with extra options (e.g. `-p`: tunnel through CONNECT).
fn curl_with(opts: &str, url: &str) -> String {
    format!(
        "env NO_PROXY= no_proxy= curl -sS {opts} --max-time 20 -w '\\n%{{http_code}}\\n' '{url}'"
    )
}

fn refusals(c: &Capsule) -> Vec<serde_json::Value> {
    std::fs::read_to_string(c.bundle.join("refusals.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("refusal is JSON"))
        .collect()
}

#[test]
fn none_mode_server_inside_is_not_reachable_from_the_host() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let token = format!("inside-token-{}", std::process::id());
        // the sandbox's server: answers the token, writes its port, waits for "done"
        let script = format!(
            r#"
import socket, threading, os, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
def serve():
    while True:
        c, _ = s.accept(); c.sendall(b"{token}"); c.close()
threading.Thread(target=serve, daemon=True).start()
port = s.getsockname()[1]
cl = socket.create_connection(("127.0.0.1", port), timeout=5)
print("inside:", cl.recv(64).decode(), flush=True)
open("port.tmp", "w").write(str(port)); os.rename("port.tmp", "port")
t = time.time()
while not os.path.exists("done") and time.time() - t < 20: time.sleep(0.02)
"#
        );
        let mut cmd = c.capsule();
        cmd.arg("exec")
            .arg(NAME)
            .args(["--", "python3", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = cmd.spawn().unwrap();
        let port_file = c.ws.join("port");
        let t = Instant::now();
        while !port_file.exists() && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let port: u16 = std::fs::read_to_string(&port_file)
            .expect("the sandbox's server wrote its port")
            .parse()
            .unwrap();
        // from the host: nothing there, or at least not the sandbox's server
        let reached = match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(mut s) => {
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut b = Vec::new();
                let _ = s.read_to_end(&mut b);
                String::from_utf8_lossy(&b).contains(&token)
            }
            Err(_) => false,
        };
        std::fs::write(c.ws.join("done"), "").unwrap();
        let o = child.wait_with_output().unwrap();
        ok(&o, "server inside");
        assert!(
            out(&o).contains(&format!("inside: {token}")),
            "reachable from inside: {}",
            out(&o)
        );
        assert!(!reached, "the sandbox's server was reachable from the host");
    });
}

#[test]
fn allowlist_curl_and_git_over_http_reach_a_listed_host_server() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let served = served_dir(c.dir.path());
        let srv = HttpServer::start(&served);
        let p = srv.port;
        let allow = format!("127.0.0.1:{p}");
        let script = format!(
            "set -e\n\
             echo \"proxy=$HTTP_PROXY https=$https_proxy all=$ALL_PROXY no=$NO_PROXY\"\n\
             {}\n\
             env NO_PROXY= no_proxy= git clone -q http://127.0.0.1:{p}/repo.git /tmp/clone\n\
             cat /tmp/clone/README.md\n\
             {}\n\
             {}\n\
             env -u http_proxy -u HTTP_PROXY {}\n",
            curl(&format!("http://127.0.0.1:{p}/hello.txt")),
            // through a CONNECT tunnel
            curl_with("-p", &format!("http://127.0.0.1:{p}/hello.txt")),
            // SOCKS5, named explicitly and through ALL_PROXY
            curl_with(
                "--socks5-hostname 127.0.0.1:3128",
                &format!("http://127.0.0.1:{p}/hello.txt")
            ),
            curl(&format!("http://127.0.0.1:{p}/hello.txt")),
        );
        let o = c.exec_with(&["--allow-host", &allow], &["sh", "-c", &script]);
        ok(&o, "curl and git through the proxy");
        let s = out(&o);
        assert!(
            s.contains("proxy=http://127.0.0.1:3128 https=http://127.0.0.1:3128 all=socks5h://127.0.0.1:3128 no=localhost,127.0.0.1,::1"),
            "{s}"
        );
        assert_eq!(
            s.matches("hello from the host\n\n200\n").count(),
            4,
            "plain, CONNECT, SOCKS5, ALL_PROXY: {s}"
        );
        assert!(s.contains("cloned through the proxy"), "{s}");
        assert!(refusals(&c).is_empty(), "{:?}", refusals(&c));
        let rec = c.records().pop().expect("exec record");
        let net = rec["requested"]["network"].to_string() + &rec["network"].to_string();
        assert!(net.contains("allowlist"), "record: {rec}");

        // the same server without the listing: nothing gets through (so the test can fail)
        let o = c.exec(&[
            "sh",
            "-c",
            &curl(&format!("http://127.0.0.1:{p}/hello.txt")),
        ]);
        assert!(!out(&o).contains("hello from the host"), "{}", out(&o));
    });
}

#[test]
fn allowlist_refusals_are_403_and_logged() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let served = served_dir(c.dir.path());
        let srv = HttpServer::start(&served);
        let other = HttpServer::start(&served);
        let (p, q) = (srv.port, other.port);
        let table = "loop.test=127.0.0.1,a.example.test=127.0.0.1,example.test=127.0.0.1,\
                     evil-example.test=127.0.0.1,meta.test=169.254.169.254";
        let run = |flags: &[&str], script: &str| {
            let mut cmd = c.capsule();
            cmd.env("CAPSULE_PROXY_TEST_RESOLVE", table);
            cmd.arg("exec")
                .arg(NAME)
                .args(flags)
                .args(["--", "sh", "-c", script]);
            cmd.stdin(Stdio::null()).output().unwrap()
        };
        // not listed (another port of the same address); a denied CONNECT port; the same
        // over SOCKS5 (curl exits 97, the proxy handshake failed, with reply 2 on stderr)
        let socks = format!("env NO_PROXY= no_proxy= curl -sS --max-time 20 --socks5-hostname 127.0.0.1:3128 http://127.0.0.1:{q}/hello.txt; echo socks=$?");
        let script = format!(
            "{}\n{}\n{}\n{}\n",
            curl(&format!("http://127.0.0.1:{q}/hello.txt")),
            "env NO_PROXY= no_proxy= curl -s -o /dev/null -p --max-time 20 -w 'connect=%{http_connect}\\n' "
                .to_string()
                + &format!("http://127.0.0.1:{q}/hello.txt || true"),
            curl(&format!("http://meta.test:{p}/latest/meta-data/")),
            socks,
        );
        let allow = format!("127.0.0.1:{p}");
        let o = run(
            &["--allow-host", &allow, "--allow-host", "meta.test"],
            &script,
        );
        let s = out(&o);
        assert!(!s.contains("hello from the host"), "{s}");
        assert_eq!(s.matches("\n403\n").count(), 2, "{s}");
        assert!(s.contains("not allowed for 127.0.0.1"), "{s}");
        assert!(s.contains("connect=403"), "{s}");
        assert!(s.contains("cloud metadata"), "{s}");
        assert!(s.contains("socks=97"), "{s}");
        // reply code 2, "connection not allowed by ruleset"
        assert!(
            err(&o).contains("SOCKS5") && err(&o).contains("(2)"),
            "{}",
            err(&o)
        );
        // one line per distinct refusal of the exec, repeats counted (plain, CONNECT,
        // SOCKS5 to the same target)
        let log = refusals(&c);
        assert_eq!(log.len(), 2, "{log:?}");
        assert!(log
            .iter()
            .all(|e| e["time"].is_string() && e["reason"].is_string() && e["kind"] == "connect"));
        assert_eq!(log[0]["target"], format!("127.0.0.1:{q}"));
        assert_eq!(log[0]["count"], 3);
        assert_eq!(log[0]["grant"], format!("--allow-host 127.0.0.1:{q}"));
        assert_eq!(log[1]["target"], format!("meta.test:{p}"));
        assert_eq!(log[1]["count"], 1);

        // a name resolving to loopback: refused unless the literal address is listed
        let script = curl(&format!("http://loop.test:{p}/hello.txt"));
        let o = run(&["--allow-host", "loop.test"], &script);
        assert!(out(&o).ends_with("\n403\n"), "{}", out(&o));
        assert!(out(&o).contains("loopback"), "{}", out(&o));
        let o = run(
            &["--allow-host", "loop.test", "--allow-host", &allow],
            &script,
        );
        assert!(
            out(&o).ends_with("hello from the host\n\n200\n"),
            "{} {}",
            out(&o),
            err(&o)
        );

        // wildcards
        let script = ["a.example.test", "example.test", "evil-example.test"]
            .iter()
            .map(|h| curl(&format!("http://{h}:{p}/hello.txt")))
            .collect::<Vec<_>>()
            .join("\n");
        let o = run(
            &["--allow-host", "*.example.test", "--allow-host", &allow],
            &script,
        );
        let text = out(&o);
        let codes: Vec<&str> = text
            .lines()
            .filter(|l| l.len() == 3 && l.chars().all(|c| c.is_ascii_digit()))
            .collect();
        assert_eq!(codes, ["200", "403", "403"], "{}", out(&o));
        assert_eq!(refusals(&c).len(), 2 + 1 + 2);
    });
}

#[test]
fn bad_allowlist_entries_and_replay_are_refused_before_anything_runs() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let o = c.exec_with(
            &["--allow-host", "http://example.test/"],
            &["sh", "-c", "echo ran > ran"],
        );
        assert_ne!(code(&o), 0);
        assert!(err(&o).contains("allowlist entry"), "{}", err(&o));
        let o = c.exec_with(&["--allow-host", "a.test", "--no-network"], &["true"]);
        assert_eq!(
            code(&o),
            2,
            "conflicting flags are a usage error: {}",
            err(&o)
        );
        assert!(!c.ws.join("ran").exists());

        let c = Capsule::with(r, |p| p.network.mode = NetworkMode::Replay);
        let o = c.sh("echo ran > ran");
        assert_eq!(code(&o), 125, "{}", err(&o));
        assert!(err(&o).contains("replay"), "{}", err(&o));
        assert!(!c.ws.join("ran").exists(), "replay ran the command");
        // an explicit choice of network on the exec overrides replay
        ok(
            &c.exec_with(&["--no-network"], &["true"]),
            "--no-network over replay",
        );
    });
}

#[test]
fn open_network_from_the_policy_is_loud() {
    each_runner(|r| {
        let c = Capsule::with(r, |p| p.network.mode = NetworkMode::Open);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                let _ = s.write_all(b"host-listener");
            }
        });
        let o = c.exec(&[
            "python3",
            "-c",
            &format!("import socket; print(socket.create_connection(('127.0.0.1', {port}), timeout=5).recv(32).decode())"),
        ]);
        ok(&o, "open network");
        assert_eq!(out(&o).trim(), "host-listener");
        assert!(err(&o).contains("open network"), "{}", err(&o));
        let rec = c.records().pop().unwrap();
        assert!(rec.to_string().contains("\"open\""), "{rec}");
    });
}

//! Real clients in allowlist mode, offline, as root and as the unprivileged user, each
//! doing its real job with nothing set up inside beyond what capsule sets: curl, wget,
//! git (clone and push over smart HTTP), Python's urllib, requests and `pip install`,
//! Node's `fetch` and `https` module, `npm install`, `cargo fetch` from a sparse registry,
//! `go mod download` from a GOPROXY, a Go program, and Java's HttpClient; and the same
//! clients ignoring the proxy variables (Node before 24, Go with `Proxy: nil`, Java and
//! Python without their proxy settings), whose direct connections reach the proxy all the
//! same; and what a hostile client sends (a TLS server name or `Host` naming another host,
//! bytes naming no host), each refused with a clear line while the proxy serves the rest.
//!
//! One server for the whole binary (`tests/fixtures/clients/server.py`): an HTTPS port and
//! a plain-HTTP port on 127.0.0.1, reached under test names through the proxy's test
//! resolver (`CAPSULE_PROXY_TEST_RESOLVE`): `api.test` is a secret's host (the proxy
//! terminates its TLS with the capsule's CA and puts the value in place of the
//! placeholder), `pkgs.test` is only allowed (its TLS tunnelled untouched, verified by the
//! client against the system's roots, where the test CA stands for a real root:
//! `CAPSULE_PROXY_TEST_UPSTREAM_CA`), `refused.test` is not allowed. Every case is one
//! `capsule exec` per runner.
use capsule_e2e::sandbox::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The server of the whole test binary.
struct Fixture {
    dir: PathBuf,
    ca: PathBuf,
    tls: u16,
    plain: u16,
    real: String,
    /// Kept so the server lives as long as the test binary: it exits (and removes `dir`)
    /// when its stdin closes.
    _child: Mutex<Child>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = PathBuf::from(format!(
            "/dev/shm/capsule-e2e-clients-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (ca, cert, key) = test_pki(&dir);
        let real = format!("sk-clients-{}-value", std::process::id());
        let mut child = Command::new("python3")
            .arg("-u")
            .arg(capsule_e2e::repo_root().join("tests/fixtures/clients/server.py"))
            .arg(&cert)
            .arg(&key)
            .arg(&dir)
            .env("REAL", &real)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start tests/fixtures/clients/server.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ports: Vec<u16> = line
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(ports.len(), 2, "server said {line:?}");
        Fixture {
            dir,
            ca,
            tls: ports[0],
            plain: ports[1],
            real,
            _child: Mutex::new(child),
        }
    })
}

/// A test CA and one server certificate for the test names and 127.0.0.1.
fn test_pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "capsule e2e clients test CA");
    let ca = p.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let names = ["api.test", "pkgs.test", "refused.test", "127.0.0.1"];
    let leaf = CertificateParams::new(names.map(String::from).to_vec())
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let paths = (dir.join("ca.pem"), dir.join("srv.pem"), dir.join("srv.key"));
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, leaf.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

impl Fixture {
    fn api(&self) -> String {
        format!("https://api.test:{}", self.tls)
    }
    fn pkgs(&self) -> String {
        format!("https://pkgs.test:{}", self.tls)
    }
    fn refused(&self) -> String {
        format!("https://refused.test:{}", self.tls)
    }
}

/// The command line every case runs with: the secret for `api.test`, `pkgs.test` allowed
/// (both resolving to 127.0.0.1, which the allowlist therefore names too).
fn exec(c: &Capsule, f: &Fixture, script: &str) -> std::process::Output {
    let (t, p) = (f.tls, f.plain);
    let mut cmd = c.capsule();
    cmd.env("TOKEN", &f.real)
        .env(
            "CAPSULE_PROXY_TEST_RESOLVE",
            "api.test=127.0.0.1,pkgs.test=127.0.0.1,refused.test=127.0.0.1",
        )
        .env("CAPSULE_PROXY_TEST_UPSTREAM_CA", &f.ca)
        .arg("exec")
        .arg(NAME)
        .args(["--secret", &format!("TOKEN=api.test:{t},api.test:{p}")])
        .args(["--allow-host", &format!("pkgs.test:{t}")])
        .args(["--allow-host", &format!("pkgs.test:{p}")])
        .args(["--allow-host", &format!("127.0.0.1:{t}")])
        .args(["--allow-host", &format!("127.0.0.1:{p}")])
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null());
    let o = cmd.output().unwrap();
    let (s, e) = (out(&o), err(&o));
    assert!(
        !s.contains(&f.real) && !e.contains(&f.real),
        "the secret's value reached the sandbox:\n{s}\n{e}"
    );
    o
}

/// Run `script` in a fresh capsule per runner (after `setup` wrote into its workspace);
/// `check` gets stdout and stderr.
fn case(setup: impl Fn(&Path), script: impl Fn(&Fixture) -> String, check: impl Fn(&str, &str)) {
    let f = fixture();
    each_runner(|r| {
        let c = Capsule::new(r);
        setup(&c.ws);
        r.own(&c.ws);
        let o = exec(&c, f, &script(f));
        let (s, e) = (out(&o), err(&o));
        eprintln!("--- stdout\n{s}--- stderr\n{e}");
        check(&s, &e);
    });
}

/// The echo of a request that reached `api.test` with the value in place of the
/// placeholder.
fn api_echo(f: &Fixture) -> String {
    format!("auth=Bearer <REAL> host=api.test:{}", f.tls)
}

/// The echo of a request that reached `pkgs.test` carrying the placeholder (its TLS is the
/// server's own: nothing is substituted).
fn pkgs_echo(f: &Fixture) -> String {
    let _ = f;
    "auth=Bearer capsule-secret-".to_string()
}

fn copy_fixture(name: &str, ws: &Path) {
    std::fs::copy(
        capsule_e2e::repo_root()
            .join("tests/fixtures/clients")
            .join(name),
        ws.join(name),
    )
    .unwrap();
}

/// Is `tool` on the sandbox's PATH (the host's system folders)? Absent on a developer's
/// machine: the case is skipped, saying so; as root (CI, where `.ci/run` installs it), it
/// fails.
fn have(tool: &str) -> bool {
    let found = ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(tool).exists());
    if !found {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout == b"0\n")
            .unwrap_or(false);
        assert!(!root, "{tool} missing: .ci/run installs it");
        eprintln!("SKIPPED: {tool} is not installed");
    }
    found
}

#[test]
fn curl() {
    case(
        |ws| {
            std::fs::copy(&fixture().ca, ws.join("own-roots.pem"))
                .map(|_| ())
                .unwrap()
        },
        |f| {
            let (a, p, r) = (f.api(), f.pkgs(), f.refused());
            format!(
                r#"c='curl -sS --max-time 20 -H'
$c "Authorization: Bearer $TOKEN" {a}/echo
$c "Authorization: Bearer $TOKEN" {p}/echo
$c "Authorization: Bearer $TOKEN" {r}/echo || echo "curl refused $?"
$c "Authorization: Bearer $TOKEN" --cacert own-roots.pem {a}/echo || echo "curl distrusts $?"
"#
            )
        },
        |s, e| {
            let f = fixture();
            assert!(s.contains(&api_echo(f)), "{s}");
            assert!(
                s.contains(&pkgs_echo(f)) && s.contains("host=pkgs.test"),
                "{s}"
            );
            assert!(s.contains("curl refused"), "{s}");
            assert!(e.contains("refused connect refused.test"), "{e}");
            // a program with roots of its own: said so, with what to do
            assert!(s.contains("curl distrusts 60"), "{s}");
            // (the program is named when it is still there to be found)
            let distrust = e
                .lines()
                .find(|l| l.contains("does not trust the capsule CA (its TLS alert: unknown_ca)"))
                .unwrap_or_else(|| panic!("{e}"));
            assert!(
                distrust.starts_with(&format!("capsule: refused connect api.test:{}", f.tls)),
                "{e}"
            );
        },
    );
}

#[test]
fn wget() {
    if !have("wget") {
        return;
    }
    case(
        |_| {},
        |f| {
            let (a, p, r) = (f.api(), f.pkgs(), f.refused());
            format!(
                r#"w='wget -q -T 20 -t 1 -O - --header'
$w "Authorization: Bearer $TOKEN" {a}/echo
$w "Authorization: Bearer $TOKEN" {p}/echo
$w "Authorization: Bearer $TOKEN" {r}/echo || echo "wget refused $?"
"#
            )
        },
        |s, e| {
            let f = fixture();
            assert!(s.contains(&api_echo(f)), "{s}");
            assert!(
                s.contains(&pkgs_echo(f)) && s.contains("host=pkgs.test"),
                "{s}"
            );
            assert!(s.contains("wget refused"), "{s}");
            assert!(e.contains("refused connect refused.test"), "{e}");
        },
    );
}

/// Clone over the secret's host (a private repository: it wants the real token) and over
/// the allowed one; push a commit back through the secret's host.
#[test]
fn git_clone_and_push() {
    case(
        |_| {},
        |f| {
            let (a, p) = (f.api(), f.pkgs());
            format!(
                r#"set -e
h="http.extraHeader=Authorization: Bearer $TOKEN"
git -c "$h" clone -q {a}/git/repo.git private
git clone -q {p}/git/repo.git public
cat public/README.md
cd private
echo pushed > pushed.txt
git add pushed.txt
git -c user.name=t -c user.email=t@example.invalid commit -q -m push
b="pushed-$(id -u)-$$"
git -c "$h" push -q origin "HEAD:refs/heads/$b"
git -c "$h" ls-remote origin "refs/heads/$b" | grep -q "$(git rev-parse HEAD)" && echo "git pushed $b"
"#
            )
        },
        |s, _| {
            assert!(s.contains("served by git http-backend"), "{s}");
            assert!(s.contains("git pushed"), "{s}");
        },
    );
}

const PY: &str = r#"
import os, sys, urllib.request
label = sys.argv[1]
h = {"Authorization": "Bearer " + os.environ["TOKEN"]}
for u in sys.argv[2:]:
    try:
        print(label, "urllib", urllib.request.urlopen(urllib.request.Request(u + "/echo", headers=h), timeout=20).read().decode().strip())
    except Exception as e:
        print(label, "urllib error", u, type(e).__name__)
import requests
for u in sys.argv[2:]:
    try:
        print(label, "requests", requests.get(u + "/echo", headers=h, timeout=20).text.strip())
    except Exception as e:
        print(label, "requests error", u, type(e).__name__)
"#;

/// Python's urllib and requests, through the proxy variables and without them.
#[test]
fn python_urllib_and_requests() {
    case(
        |ws| std::fs::write(ws.join("client.py"), PY).unwrap(),
        |f| {
            let urls = format!("{} {} {}", f.api(), f.pkgs(), f.refused());
            format!(
                "python3 client.py proxied {urls}\nenv -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY -u all_proxy python3 client.py direct {urls}\n"
            )
        },
        |s, e| {
            let f = fixture();
            for how in ["proxied", "direct"] {
                for lib in ["urllib", "requests"] {
                    let l = format!("{how} {lib}");
                    assert!(s.contains(&format!("{l} {}", api_echo(f))), "{l}: {s}");
                    assert!(s.contains(&format!("{l} {}", pkgs_echo(f))), "{l}: {s}");
                    assert!(
                        s.contains(&format!("{l} error https://refused.test")),
                        "{l}: {s}"
                    );
                }
            }
            assert!(e.contains("refused connect refused.test"), "{e}");
        },
    );
}

/// What a hostile client sends, connecting by itself: a TLS server name or an HTTP `Host`
/// naming another host than the one it connected to, bytes that name no host, a
/// ClientHello cut short; each is refused with one clear line (no grant where no flag
/// would allow it), and the proxy goes on serving the next request.
#[test]
fn hostile_direct_clients_get_clear_refusals() {
    const HOSTILE: &str = r#"
import socket, ssl, sys
t, p = int(sys.argv[1]), int(sys.argv[2])
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
try:
    with ctx.wrap_socket(socket.create_connection(("pkgs.test", t), timeout=20), server_hostname="evil.test") as c:
        c.sendall(b"GET /echo HTTP/1.1\r\nHost: evil.test\r\n\r\n")
        print("sni mismatch got", c.recv(100))
except ssl.SSLError as e:
    print("sni mismatch refused", e.reason)
c = socket.create_connection(("pkgs.test", p), timeout=20)
c.sendall(b"GET /echo HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n")
print("host mismatch", c.recv(100).split(b"\r\n")[0].decode())
c = socket.create_connection(("192.0.2.1", t), timeout=20)
c.sendall(b"\x00\x01 no host in here\r\n\r\n")
print("garbage", c.recv(100) or b"closed")
c = socket.create_connection(("api.test", t), timeout=20)
c.sendall(bytes([22, 3, 1, 1, 0]) + b"\x01\x00\x00\xfc\x03\x03")
c.shutdown(socket.SHUT_WR)
print("half hello", c.recv(100) or b"closed")
import urllib.request
print("still serving", urllib.request.urlopen("https://pkgs.test:%d/echo" % t, timeout=20).read().decode().strip())
"#;
    case(
        |ws| std::fs::write(ws.join("hostile.py"), HOSTILE).unwrap(),
        |f| format!("python3 hostile.py {} {}", f.tls, f.plain),
        |s, e| {
            let (t, p) = (fixture().tls, fixture().plain);
            assert!(
                s.contains("sni mismatch refused TLSV1_ALERT_ACCESS_DENIED"),
                "{s}"
            );
            assert!(s.contains("host mismatch HTTP/1.1 403 Forbidden"), "{s}");
            assert!(s.contains("garbage b'closed'"), "{s}");
            assert!(s.contains("half hello b'closed'"), "{s}");
            assert!(s.contains("still serving auth=None host=pkgs.test"), "{s}");
            let line = |l: &str| e.lines().any(|x| x == l);
            assert!(line(&format!("capsule: refused connect pkgs.test:{t} (python3): the TLS server name names evil.test, not pkgs.test, the host the connection was made to")), "{e}");
            assert!(line(&format!("capsule: refused connect pkgs.test:{p} (python3): the request's Host names evil.test, not pkgs.test, the host the connection was made to")), "{e}");
            assert!(line(&format!("capsule: refused connect 192.0.2.1:{t} (python3): a connection to an address that names no host (neither TLS nor HTTP); to allow: --allow-host 192.0.2.1:{t}")), "{e}");
            assert!(e.contains(&format!("capsule: refused connect api.test:{t} (python3): the client closed before naming a host")), "{e}");
        },
    );
}

/// `pip install` from an index on the secret's host (TLS terminated: pip must trust the
/// capsule's CA) and from the allowed host.
#[test]
fn pip_install() {
    case(
        |_| {},
        |f| {
            let (a, p) = (f.api(), f.pkgs());
            format!(
                r#"pip="python3 -m pip install -q --disable-pip-version-check --no-cache-dir --index-url"
$pip {a}/simple/ --target via-api capsuledemo && PYTHONPATH=via-api python3 -c 'import capsuledemo as c; print("pip api", c.VALUE)'
$pip {p}/simple/ --target via-pkgs capsuledemo && PYTHONPATH=via-pkgs python3 -c 'import capsuledemo as c; print("pip pkgs", c.VALUE)'
"#
            )
        },
        |s, _| {
            assert!(s.contains("pip api capsuledemo-py-ok"), "{s}");
            assert!(s.contains("pip pkgs capsuledemo-py-ok"), "{s}");
        },
    );
}

/// Node's built-in `fetch` and its `https` module, which ignore `HTTPS_PROXY` (Node 20;
/// from Node 22.21 and 24 they take it with `NODE_USE_ENV_PROXY`, set here and cleared
/// for this case): they resolve and dial by themselves, and their connections are sent to
/// the proxy all the same; the refused host's connect fails at once, said on stderr.
#[test]
fn node_fetch_and_https_direct() {
    if !have("node") {
        return;
    }
    case(
        |ws| copy_fixture("client.js", ws),
        |f| {
            let urls = format!("{}/echo {}/echo {}/echo", f.api(), f.pkgs(), f.refused());
            format!(
                "unset NODE_USE_ENV_PROXY
node client.js fetch {urls}
node client.js https {urls}
"
            )
        },
        |s, e| {
            let f = fixture();
            for m in ["fetch", "https"] {
                assert!(
                    s.contains(&format!("node-{m} 200 {}", api_echo(f))),
                    "{m}: {s}"
                );
                assert!(
                    s.contains(&format!("node-{m} 200 {}", pkgs_echo(f))),
                    "{m}: {s}"
                );
                assert!(
                    s.contains(&format!(
                        "node-{m} error https://refused.test:{}/echo ECONNREFUSED",
                        f.tls
                    )),
                    "{s}"
                );
            }
            let line = format!(
                "capsule: refused connect refused.test:{t} (node): not on the allowlist, 2 times; to allow: --allow-host refused.test:{t}",
                t = f.tls
            );
            assert!(e.contains(&line), "{e}");
        },
    );
}

/// `npm install` from a registry on the secret's host (TLS terminated).
#[test]
fn npm_install() {
    if !have("npm") {
        return;
    }
    case(
        |_| {},
        |f| {
            let a = f.api();
            format!(
                r#"npm install --no-audit --no-fund --no-update-notifier --loglevel=error --registry {a}/npm/ capsuledemo >/dev/null && node -e 'console.log("npm", require("capsuledemo"))'
"#
            )
        },
        |s, _| assert!(s.contains("npm capsuledemo-npm-ok"), "{s}"),
    );
}

/// `cargo fetch` of a crate from a sparse registry on the secret's host.
#[test]
fn cargo_fetch() {
    if !have("cargo") {
        return;
    }
    case(
        |ws| {
            let f = fixture();
            std::fs::create_dir_all(ws.join("demo/src")).unwrap();
            std::fs::create_dir_all(ws.join("demo/.cargo")).unwrap();
            std::fs::write(ws.join("demo/src/lib.rs"), "").unwrap();
            std::fs::write(
                ws.join("demo/Cargo.toml"),
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\ncapsuledemo = { version = \"1\", registry = \"demo\" }\n",
            )
            .unwrap();
            std::fs::write(
                ws.join("demo/.cargo/config.toml"),
                format!(
                    "[registries.demo]\nindex = \"sparse+{}/cargo/index/\"\n",
                    f.api()
                ),
            )
            .unwrap();
        },
        |_| {
            "cd demo && cargo fetch -q && ls ~/.cargo/registry/cache/*/ && echo cargo fetched"
                .to_string()
        },
        |s, _| {
            assert!(s.contains("capsuledemo-1.0.0.crate"), "{s}");
            assert!(s.contains("cargo fetched"), "{s}");
        },
    );
}

/// `go mod download` from a GOPROXY on the secret's host.
#[test]
fn go_mod_download() {
    if !have("go") {
        return;
    }
    case(
        |_| {},
        |f| {
            format!(
                "GOPROXY={}/goproxy GOSUMDB=off GOFLAGS=-modcacherw go mod download -json example.test/capsuledemo@v1.0.0 | grep -q '\"Zip\"' && echo go downloaded",
                f.api()
            )
        },
        |s, _| assert!(s.contains("go downloaded"), "{s}"),
    );
}

/// A Go program (`tests/fixtures/clients/goclient.go`, built once on the host) with Go's
/// default transport, which takes the proxy from the environment, and with a transport
/// that ignores it (`Proxy: nil`), dialling by itself.
#[test]
fn go_program_env_and_direct() {
    let Some(bin) = go_client() else { return };
    case(
        |ws| {
            std::fs::copy(&bin, ws.join("goclient")).unwrap();
        },
        |f| {
            let urls = format!("{}/echo {}/echo {}/echo", f.api(), f.pkgs(), f.refused());
            format!("./goclient env {urls}\n./goclient direct {urls}\n")
        },
        |s, e| {
            let f = fixture();
            for m in ["env", "direct"] {
                assert!(
                    s.contains(&format!("go-{m} 200 {}", api_echo(f))),
                    "{m}: {s}"
                );
                assert!(
                    s.contains(&format!("go-{m} 200 {}", pkgs_echo(f))),
                    "{m}: {s}"
                );
                assert!(
                    s.contains(&format!("go-{m} error https://refused.test")),
                    "{s}"
                );
            }
            assert!(e.contains("refused connect refused.test"), "{e}");
            assert!(
                e.contains("connect: connection refused"),
                "direct: refused at the connect: {e}"
            );
        },
    );
}

/// The Go client, built once for the binary (None: no Go here, skipped).
fn go_client() -> Option<PathBuf> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(|| {
        if !have("go") {
            return None;
        }
        let f = fixture();
        let out = f.dir.join("goclient");
        let o = Command::new("go")
            .args(["build", "-o"])
            .arg(&out)
            .arg(capsule_e2e::repo_root().join("tests/fixtures/clients/goclient.go"))
            .env("CGO_ENABLED", "0")
            .env("GO111MODULE", "off")
            .output()
            .expect("go build");
        assert!(
            o.status.success(),
            "go build: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Some(out)
    })
    .clone()
}

/// Java's HttpClient (Debian's default JDK), single-file source launch: with the proxy and
/// trust store capsule gives it in `JAVA_TOOL_OPTIONS`, and without them (the trust store
/// bound over the JDK's `cacerts`, its connections sent to the proxy directly).
#[test]
fn java_httpclient() {
    if !have("java") {
        return;
    }
    case(
        |ws| copy_fixture("Client.java", ws),
        |f| {
            let urls = format!("{}/echo {}/echo {}/echo", f.api(), f.pkgs(), f.refused());
            format!(
                "java Client.java {urls}\necho without its options\nenv -u JAVA_TOOL_OPTIONS java Client.java {urls}\n"
            )
        },
        |s, e| {
            let f = fixture();
            let (with, without) = s.split_once("without its options").expect("both runs");
            for out in [with, without] {
                assert!(out.contains(&format!("java 200 {}", api_echo(f))), "{s}");
                assert!(out.contains(&format!("java 200 {}", pkgs_echo(f))), "{s}");
                assert!(out.contains("java error https://refused.test"), "{s}");
            }
            assert!(e.contains("refused connect refused.test"), "{e}");
        },
    );
}

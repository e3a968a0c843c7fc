//! Secrets kept outside the sandbox (`--secret NAME=HOST`), end to end, as root and as
//! the unprivileged user: the command sees a placeholder; HTTPS servers with their own
//! test CA and plain-HTTP servers on the host's 127.0.0.1 receive the real value from
//! curl, Python's urllib and Node, for the secret's hosts only; another host gets the
//! placeholder (inside its own TLS) or a 403 (plain HTTP, a `Host` naming another host),
//! recorded without the value; the value is in no output and no file of the bundle.
//!
//! Every server listens on 127.0.0.1 and is started by the test; the proxy trusts the test
//! CA through CAPSULE_PROXY_TEST_UPSTREAM_CA (tests only).
use capsule_e2e::sandbox::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// An echo server: answers `auth=<Authorization> key=<x-api-key> path=<path>`, with the
/// real value shown as `<REAL>` so that no output ever carries it.
const ECHO: &str = r#"
import http.server, ssl, sys, os
real = os.environ["REAL"]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self): self.reply()
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0); self.rfile.read(n); self.reply()
    def reply(self):
        t = "auth=%s key=%s path=%s\n" % (self.headers.get("Authorization"), self.headers.get("x-api-key"), self.path)
        body = t.replace(real, "<REAL>").encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
if len(sys.argv) > 1:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

struct Echo {
    child: Child,
    port: u16,
}

impl Echo {
    fn start(dir: &Path, real: &str, tls: Option<(&Path, &Path)>) -> Echo {
        Echo::serve(dir, "echo.py", ECHO, &[("REAL", real)], tls)
    }

    /// Runs a python3 server `script` (written to `dir/name`), which prints its port first.
    fn serve(
        dir: &Path,
        name: &str,
        script: &str,
        env: &[(&str, &str)],
        tls: Option<(&Path, &Path)>,
    ) -> Echo {
        let path = dir.join(name);
        std::fs::write(&path, script).unwrap();
        let mut cmd = Command::new("python3");
        cmd.arg("-u").arg(&path).envs(env.iter().copied());
        if let Some((cert, key)) = tls {
            cmd.arg(cert).arg(key);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start python3 {name}: {e}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("port: {line:?}"));
        Echo { child, port }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A test CA and a server certificate for 127.0.0.1 signed by it: (ca.pem, cert, key).
/// Only the proxy trusts that CA: the unlisted server's TLS is not the proxy's, so curl
/// reaches it with `-k`.
fn test_pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "capsule e2e upstream test CA");
    let ca = p.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let paths = (dir.join("ca.pem"), dir.join("srv.pem"), dir.join("srv.key"));
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, leaf.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

/// Every file under `root` whose bytes contain `needle`.
fn files_containing(root: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                if let Ok(b) = std::fs::read(&p) {
                    if b.windows(needle.len()).any(|w| w == needle) {
                        hits.push(p);
                    }
                }
            }
        }
    }
    hits
}

const NODE_CLIENT: &str = r#"
const http = require('http'), tls = require('tls');
const port = process.argv[2];
const req = http.request({host: '127.0.0.1', port: 3128, method: 'CONNECT', path: '127.0.0.1:' + port});
req.on('connect', (res, sock) => {
  const t = tls.connect({socket: sock, host: '127.0.0.1'}, () => {
    t.write('GET /node HTTP/1.1\r\nHost: 127.0.0.1:' + port + '\r\nAuthorization: Bearer ' +
            process.env.TOKEN + '\r\nConnection: close\r\n\r\n');
  });
  let d = '';
  t.on('data', c => d += c);
  t.on('end', () => console.log('node: ' + d.split('\r\n\r\n')[1].trim()));
  t.on('error', e => console.log('node error: ' + e.message));
});
req.on('error', e => console.log('node error: ' + e.message));
req.end();
"#;

#[test]
fn secret_reaches_its_hosts_only() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let real = format!("sk-real-{}-value", std::process::id());
        let (ca, cert, key) = test_pki(c.dir.path());
        let a = Echo::start(c.dir.path(), &real, Some((&cert, &key)));
        let b = Echo::start(c.dir.path(), &real, Some((&cert, &key)));
        let p = Echo::start(c.dir.path(), &real, None);
        let q = Echo::start(c.dir.path(), &real, None);
        let (pa, pb, pp, pq) = (a.port, b.port, p.port, q.port);
        std::fs::write(c.ws.join("client.js"), NODE_CLIENT).unwrap();
        let curl = "curl -sS --max-time 20";
        let script = format!(
            r#"export NO_PROXY= no_proxy=
echo "env=$TOKEN"
{curl} -H "Authorization: Bearer $TOKEN" https://127.0.0.1:{pa}/curl
{curl} -k -H "Authorization: Bearer $TOKEN" https://127.0.0.1:{pb}/other
{curl} -H "Authorization: Bearer $TOKEN" http://127.0.0.1:{pp}/plain
{curl} -p -H "Authorization: Bearer $TOKEN" http://127.0.0.1:{pp}/plain-tunnel
{curl} --socks5-hostname 127.0.0.1:3128 -H "Authorization: Bearer $TOKEN" https://127.0.0.1:{pa}/socks
{curl} -o /dev/null -w 'leak=%{{http_code}}\n' -H "Authorization: Bearer $TOKEN" http://127.0.0.1:{pq}/leak
{curl} -o /dev/null -w 'fronted=%{{http_code}}\n' -H "Host: 127.0.0.1:{pb}" -H "Authorization: Bearer $TOKEN" https://127.0.0.1:{pa}/fronted
{curl} "https://127.0.0.1:{pa}/q?key=$TOKEN"
{curl} -X POST -H "x-api-key: $TOKEN" --data-binary @/etc/hostname https://127.0.0.1:{pa}/post
python3 -c 'import os, urllib.request as u; print("py:", u.urlopen(u.Request("https://127.0.0.1:{pa}/py", headers={{"x-api-key": os.environ["TOKEN"]}})).read().decode().strip())'
if command -v node >/dev/null; then node client.js {pa}; else echo "node: skipped"; fi
"#
        );
        let mut cmd = c.capsule();
        cmd.env("TOKEN", &real)
            .env("CAPSULE_PROXY_TEST_UPSTREAM_CA", &ca)
            .arg("exec")
            .arg(NAME)
            .args([
                "--secret",
                &format!("TOKEN=127.0.0.1:{pa},127.0.0.1:{pp}"),
                "--allow-host",
                &format!("127.0.0.1:{pb}"),
                "--allow-host",
                &format!("127.0.0.1:{pq}"),
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stdin(Stdio::null());
        let o = cmd.output().unwrap();
        ok(&o, "requests with a secret");
        let s = out(&o);
        let e = err(&o);
        assert!(s.contains("env=capsule-secret-"), "{s}");
        assert!(
            s.contains("auth=Bearer <REAL> key=None path=/curl"),
            "curl https: {s}\n{e}"
        );
        assert!(
            s.contains("auth=Bearer capsule-secret-") && s.contains("path=/other"),
            "another host gets the placeholder: {s}"
        );
        assert!(
            s.contains("auth=Bearer <REAL> key=None path=/plain"),
            "plain: {s}"
        );
        assert!(
            s.contains("auth=Bearer <REAL> key=None path=/plain-tunnel"),
            "CONNECT, plain HTTP inside: {s}"
        );
        assert!(
            s.contains("auth=Bearer <REAL> key=None path=/socks"),
            "SOCKS5: {s}"
        );
        assert!(s.contains("leak=403"), "plain to another host: {s}");
        assert!(s.contains("fronted=403"), "Host naming another host: {s}");
        assert!(s.contains("path=/q?key=<REAL>"), "query: {s}");
        assert!(s.contains("key=<REAL> path=/post"), "POST with a body: {s}");
        assert!(
            s.contains("py: auth=None key=<REAL> path=/py"),
            "python: {s}"
        );
        assert!(
            s.contains("node: auth=Bearer <REAL> key=None path=/node")
                || s.contains("node: skipped"),
            "node: {s}"
        );
        // the value: in no output, no file of the capsule (records, logs, policy)
        assert!(!s.contains(&real) && !e.contains(&real));
        let hits = files_containing(&c.root, real.as_bytes());
        assert!(hits.is_empty(), "value written to {hits:?}");
        let refusals = std::fs::read_to_string(c.bundle.join("refusals.jsonl")).unwrap();
        assert!(!refusals.contains(&real));
        let leaks: Vec<serde_json::Value> = refusals
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|v: &serde_json::Value| v["header"].is_string())
            .collect();
        assert!(
            leaks
                .iter()
                .any(|v| v["target"] == format!("127.0.0.1:{pq}") && v["header"] == "Authorization"),
            "{refusals}"
        );
        assert!(
            leaks
                .iter()
                .any(|v| v["target"] == format!("127.0.0.1:{pa}") && v["header"] == "Host"),
            "{refusals}"
        );
        let rec = c.records().pop().expect("record");
        assert_eq!(
            rec["requested"]["net"]["secrets"],
            serde_json::json!(["TOKEN"]),
            "{rec}"
        );
        // the CA's key stays private in the bundle
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(c.bundle.join("proxy-ca.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0);
    });
}

#[test]
fn secret_without_value_or_with_a_bad_flag_runs_nothing() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let o = c.exec_with(&["--secret", "TOKEN=api.test"], &["touch", "ran"]);
        assert_eq!(code(&o), 1, "{}", err(&o));
        assert!(err(&o).contains("secret `TOKEN`: no value"), "{}", err(&o));
        let o = c.exec_with(&["--secret", "TOKEN"], &["touch", "ran"]);
        assert_eq!(code(&o), 1, "{}", err(&o));
        let o = c.exec_with(
            &["--secret", "TOKEN=a.test", "--no-network"],
            &["touch", "ran"],
        );
        assert_eq!(code(&o), 2, "{}", err(&o));
        assert!(!c.ws.join("ran").exists());
    });
}

#[test]
fn a_policys_secret_is_a_placeholder_too() {
    each_runner(|r| {
        let scratch = capsule_e2e::scratch();
        let real = format!("spec-secret-{}", std::process::id());
        let p = Echo::start(scratch.path(), &real, None);
        let host = format!("127.0.0.1:{}", p.port);
        // as `open` makes it from `sandbox.secrets` (accepted)
        let c = Capsule::with(r, |pol| {
            pol.network.mode = capsule_bundle::policy::NetworkMode::Allowlist;
            pol.network.allow = vec![host.clone()];
            pol.network.secrets = [("TOKEN".to_string(), vec![host.clone()])].into();
        });
        let mut cmd = c.capsule();
        cmd.env("TOKEN", &real).arg("exec").arg(NAME).args([
            "--",
            "sh",
            "-c",
            &format!(
                "echo \"env=$TOKEN\"; env NO_PROXY= no_proxy= curl -sS --max-time 20 -H \"x-api-key: $TOKEN\" http://{host}/spec"
            ),
        ]);
        let o = cmd.stdin(Stdio::null()).output().unwrap();
        ok(&o, "exec with the policy's secret");
        let s = out(&o);
        assert!(s.contains("env=capsule-secret-"), "{s}");
        assert!(s.contains("key=<REAL> path=/spec"), "{s}");
        assert!(!s.contains(&real) && !err(&o).contains(&real));
    });
}

/// A host service reached at its own address (`--secret TOKEN=127.0.0.1:PORT` lists it):
/// the client connects to `127.0.0.1:PORT` inside, not to the proxy, and the value still
/// goes in, over TLS (terminated) and plain HTTP alike.
#[test]
fn secret_to_a_host_service_at_its_own_address() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let real = format!("sk-direct-{}-value", std::process::id());
        let (ca, cert, key) = test_pki(c.dir.path());
        let a = Echo::start(c.dir.path(), &real, Some((&cert, &key)));
        let p = Echo::start(c.dir.path(), &real, None);
        let (pa, pp) = (a.port, p.port);
        // NO_PROXY as set: these URLs go to the sandbox's own 127.0.0.1
        let script = format!(
            r#"curl -sS --max-time 20 -H "Authorization: Bearer $TOKEN" https://127.0.0.1:{pa}/direct
curl -sS --max-time 20 -H "Authorization: Bearer $TOKEN" http://127.0.0.1:{pp}/direct-plain
python3 -c 'import os, urllib.request as u; print("py:", u.urlopen(u.Request("https://127.0.0.1:{pa}/py", headers={{"x-api-key": os.environ["TOKEN"]}})).read().decode().strip())'
"#
        );
        let mut cmd = c.capsule();
        cmd.env("TOKEN", &real)
            .env("CAPSULE_PROXY_TEST_UPSTREAM_CA", &ca)
            .arg("exec")
            .arg(NAME)
            .args([
                "--secret",
                &format!("TOKEN=127.0.0.1:{pa},127.0.0.1:{pp}"),
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stdin(Stdio::null());
        let o = cmd.output().unwrap();
        ok(&o, "a host service with a secret");
        let s = out(&o);
        assert!(
            s.contains("auth=Bearer <REAL> key=None path=/direct\n"),
            "{s}\n{}",
            err(&o)
        );
        assert!(
            s.contains("auth=Bearer <REAL> key=None path=/direct-plain"),
            "{s}"
        );
        assert!(s.contains("py: auth=None key=<REAL> path=/py"), "{s}");
        assert!(!s.contains(&real) && !err(&o).contains(&real));
    });
}

/// A server that reflects the request back, the value and all (what the proxy must
/// scrub): `/headers` the request's headers in the body (and `X-Tok` in a header of its
/// own), `/chunked` the same in 5-byte chunks, `/split/N` `N` dots then `X-Tok` cut in
/// two writes 0.2 s apart (the proxy reads it in two pieces), `/gzip` the headers
/// gzip-compressed whatever the request accepts.
const REFLECT: &str = r#"
import http.server, ssl, sys, gzip, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        echo = "".join("%s: %s\n" % (k, v) for k, v in self.headers.items()).encode()
        tok = self.headers.get("X-Tok", "").encode()
        p = self.path
        if p == "/headers":
            self.send_response(200); self.send_header("X-Echo-Tok", tok.decode())
            self.send_header("Content-Length", str(len(echo))); self.end_headers(); self.wfile.write(echo)
        elif p == "/chunked":
            self.send_response(200); self.send_header("Transfer-Encoding", "chunked"); self.end_headers()
            for i in range(0, len(echo), 5):
                c = echo[i:i+5]; self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c)); self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        elif p.startswith("/split/"):
            body = b"." * int(p[7:]) + b"before " + tok + b" after\n"
            cut = len(body) - len(tok) // 2 - 7
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body[:cut]); self.wfile.flush(); time.sleep(0.2); self.wfile.write(body[cut:])
        elif p == "/gzip":
            body = gzip.compress(echo)
            self.send_response(200); self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
        else:
            self.send_error(404)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
if len(sys.argv) > 1:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

fn start_reflect(dir: &Path, tls: Option<(&Path, &Path)>) -> Echo {
    Echo::serve(dir, "reflect.py", REFLECT, &[], tls)
}

/// The issue's repro and its harder cases: a server of the secret's host reflecting the
/// request (headers into the body, into a header, chunked in 5-byte pieces, cut across
/// reads in a short body and in a long streamed one, compressed), over TLS (terminated)
/// and plain HTTP (forwarded and in a CONNECT tunnel): the command sees the placeholder
/// everywhere, never the value; a compressed answer is refused (502, saying why).
#[test]
fn a_secret_never_comes_back() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let real = format!("sk-echo-{}-value", std::process::id());
        let (ca, cert, key) = test_pki(c.dir.path());
        let t = start_reflect(c.dir.path(), Some((&cert, &key)));
        let p = start_reflect(c.dir.path(), None);
        let curl = r#"curl -sS --max-time 20 --compressed -H "X-Tok: $TOK""#;
        let mut script = String::from("export NO_PROXY= no_proxy=\n");
        for (name, base, extra) in [
            ("tls", format!("https://127.0.0.1:{}", t.port), ""),
            ("plain", format!("http://127.0.0.1:{}", p.port), ""),
            ("tunnel", format!("http://127.0.0.1:{}", p.port), "-p"),
        ] {
            script.push_str(&format!(
                r#"echo "== {name} headers"; {curl} {extra} -D - {base}/headers
echo "== {name} chunked"; {curl} {extra} {base}/chunked
echo "== {name} split short"; {curl} {extra} {base}/split/10 | tr -d .
echo "== {name} split long"; {curl} {extra} {base}/split/300000 | tr -d .
echo "== {name} gzip"; {curl} {extra} -w 'status=%{{http_code}}\n' {base}/gzip
"#
            ));
        }
        let mut cmd = c.capsule();
        cmd.env("TOK", &real)
            .env("CAPSULE_PROXY_TEST_UPSTREAM_CA", &ca)
            .arg("exec")
            .arg(NAME)
            .args([
                "--secret",
                &format!("TOK=127.0.0.1:{},127.0.0.1:{}", t.port, p.port),
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stdin(Stdio::null());
        let o = cmd.output().unwrap();
        ok(&o, "requests to reflecting servers");
        let s = out(&o);
        let e = err(&o);
        assert!(!s.contains(&real), "the value came back:\n{s}");
        assert!(!e.contains(&real));
        let sections: Vec<&str> = s.split("== ").skip(1).collect();
        assert_eq!(sections.len(), 15, "{s}\n{e}");
        for sec in sections {
            let (title, body) = sec.split_once('\n').unwrap();
            if title.ends_with("gzip") {
                assert!(body.contains("status=502"), "{title}: {body}");
                assert!(
                    body.contains("compressed (Content-Encoding `gzip`)"),
                    "{title}: {body}"
                );
            } else if title.contains("split") {
                assert!(
                    body.contains("before capsule-secret-") && body.contains(" after"),
                    "{title}: {body}"
                );
            } else {
                assert!(body.contains("X-Tok: capsule-secret-"), "{title}: {body}");
                // asked for no coding, whatever curl accepts
                assert!(
                    body.contains("Accept-Encoding: identity"),
                    "{title}: {body}"
                );
            }
            if title.ends_with("headers") {
                assert!(
                    body.contains("X-Echo-Tok: capsule-secret-"),
                    "{title}: {body}"
                );
            }
        }
        let hits = files_containing(&c.root, real.as_bytes());
        assert!(hits.is_empty(), "value written to {hits:?}");
    });
}

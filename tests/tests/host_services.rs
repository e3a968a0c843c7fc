//! Allow-listed host services at their own address (`--allow-host 127.0.0.1:PORT`), end
//! to end, as root and as the unprivileged user: curl, git over http and a Node client
//! inside reach the host's server at `127.0.0.1:PORT` itself (NO_PROXY as set), while
//! every other loopback port stays the sandbox's own (a server inside answers there; the
//! host's other servers are out of reach).
//!
//! Every server listens on 127.0.0.1 and is started by the test.
use capsule_e2e::sandbox::*;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// `python3 -m http.server` on 127.0.0.1 serving `dir`; killed on drop.
struct Served(Child, u16);

impl Served {
    fn start(dir: &Path) -> Served {
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
        let port = line
            .split_whitespace()
            .skip_while(|w| *w != "port")
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        Served(child, port)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `hello.txt` and a bare repository `repo.git` for git's dumb http protocol.
fn served_dir(base: &Path) -> std::path::PathBuf {
    let d = base.join("served");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("hello.txt"), "hello from the host service\n").unwrap();
    let src = base.join("src-repo");
    capsule_e2e::git_repo(&src, &[("README.md", "cloned from the host service\n")]);
    let st = Command::new("git")
        .args(["clone", "-q", "--bare"])
        .arg(&src)
        .arg(d.join("repo.git"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .status()
        .unwrap();
    assert!(st.success());
    let st = Command::new("git")
        .arg("-C")
        .arg(d.join("repo.git"))
        .arg("update-server-info")
        .status()
        .unwrap();
    assert!(st.success());
    d
}

const NODE_GET: &str = r#"
require('http').get('http://127.0.0.1:' + process.argv[2] + '/hello.txt', r => {
  let d = ''; r.on('data', c => d += c); r.on('end', () => console.log('node: ' + d.trim()));
}).on('error', e => console.log('node error: ' + e.message));
"#;

#[test]
fn host_service_at_its_own_address() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let served = served_dir(c.dir.path());
        r.own(c.dir.path());
        let srv = Served::start(&served);
        let other = Served::start(&served);
        let (p, q) = (srv.1, other.1);
        std::fs::write(c.ws.join("get.js"), NODE_GET).unwrap();
        r.own(&c.ws.join("get.js"));
        let script = format!(
            r#"echo "no_proxy=$NO_PROXY"
curl -sS --max-time 20 http://127.0.0.1:{p}/hello.txt
git clone -q http://127.0.0.1:{p}/repo.git /tmp/clone && cat /tmp/clone/README.md
if command -v node >/dev/null; then node get.js {p}; else echo "node: skipped"; fi
curl -sS --max-time 5 http://127.0.0.1:{q}/hello.txt >/dev/null 2>&1; echo "other host port: $?"
python3 -c '
import socket
s = socket.socket(); s.bind(("127.0.0.1", {q})); s.listen(1)
c = socket.create_connection(("127.0.0.1", {q})); a, _ = s.accept(); a.sendall(b"own")
print("inside on {q}:", c.recv(8).decode())'
"#
        );
        let o = c.exec_with(
            &["--allow-host", &format!("127.0.0.1:{p}")],
            &["sh", "-c", &script],
        );
        ok(&o, "host service");
        let s = out(&o);
        assert!(s.contains("no_proxy=localhost,127.0.0.1,::1"), "{s}");
        assert_eq!(
            s.matches("hello from the host service").count(),
            2,
            "curl, node: {s}\n{}",
            err(&o)
        );
        assert!(
            s.contains("node: hello from the host service") || s.contains("node: skipped"),
            "{s}"
        );
        assert!(s.contains("cloned from the host service"), "git: {s}");
        // curl exit 7: connection refused (the sandbox's own loopback has nothing there)
        assert!(s.contains("other host port: 7"), "{s}");
        assert!(s.contains(&format!("inside on {q}: own")), "{s}");
        let rec = c.records().pop().expect("record");
        assert_eq!(
            rec["requested"]["net"]["host_services"],
            serde_json::json!([format!("127.0.0.1:{p}")]),
            "{rec}"
        );
        // not listed: the same address is the sandbox's own
        let o = c.exec(&[
            "sh",
            "-c",
            &format!("curl -sS --max-time 5 http://127.0.0.1:{p}/hello.txt; echo rc=$?"),
        ]);
        assert!(out(&o).contains("rc=7"), "{}", out(&o));
    });
}

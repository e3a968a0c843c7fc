//! Servers a task starts, reachable from this computer only (`--publish`), end to end, as
//! root and as the unprivileged user: a Python server inside on 127.0.0.1:8000 answers a
//! client on the host at 127.0.0.1 and [::1] (the published port), for as long as the
//! exec runs; the listener is bound to loopback only (the host's other address is
//! refused); the record says what was published; `--no-network` refuses it.
use capsule_e2e::sandbox::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// `GET /hello.txt` at `addr`, retried until the server inside answers (or 20 s).
fn get(addr: SocketAddr) -> String {
    let t = Instant::now();
    loop {
        let r = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(b"GET /hello.txt HTTP/1.0\r\nHost: x\r\n\r\n")?;
            let mut b = String::new();
            s.read_to_string(&mut b)?;
            Ok(b)
        });
        match r {
            Ok(b) if b.starts_with("HTTP/1.0 200") => return b,
            _ if t.elapsed() > Duration::from_secs(20) => panic!("{addr}: no answer: {r:?}"),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The local addresses of the host's listening TCP sockets on `port` (from
/// `/proc/net/tcp` and `/proc/net/tcp6`; nothing is dialled), as their hex fields.
fn listeners_on(port: u16) -> Vec<String> {
    let mut v = Vec::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for l in text.lines().skip(1) {
            let cols: Vec<&str> = l.split_whitespace().collect();
            // local_address is "ADDR:PORT" in hex; state 0A is LISTEN
            let (Some(local), Some(state)) = (cols.get(1), cols.get(3)) else {
                continue;
            };
            let Some((addr, p)) = local.rsplit_once(':') else {
                continue;
            };
            if *state == "0A" && u16::from_str_radix(p, 16) == Ok(port) {
                v.push(addr.to_string());
            }
        }
    }
    v
}

#[test]
fn published_port_reaches_a_server_inside() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let script = r#"mkdir -p /tmp/srv && echo "hello from inside" > /tmp/srv/hello.txt
python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/srv >/dev/null 2>&1 &
t=0; while [ ! -e done ] && [ $t -lt 300 ]; do sleep 0.1; t=$((t+1)); done
kill $!"#;
        let mut cmd = c.capsule();
        cmd.args([
            "exec",
            NAME,
            "--publish",
            "0:8000",
            "--",
            "sh",
            "-c",
            script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut errs = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        errs.read_line(&mut line).unwrap();
        // "capsule: published 127.0.0.1:N and [::1]:N -> port 8000 inside"
        if !line.starts_with("capsule: published 127.0.0.1:") {
            std::fs::write(c.ws.join("done"), "").unwrap();
            let mut rest = String::new();
            let _ = errs.read_to_string(&mut rest);
            panic!("{line}{rest}");
        }
        assert!(line.trim_end().ends_with("-> port 8000 inside"), "{line}");
        let v4: SocketAddr = line.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert!(get(v4).contains("hello from inside"));
        if line.contains("[::1]") {
            let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, v4.port()));
            assert!(get(v6).contains("hello from inside"));
        }
        // listening on the loopback addresses only (127.0.0.1, ::1), never on another
        let listening = listeners_on(v4.port());
        assert!(!listening.is_empty(), "no listener seen on {}", v4.port());
        for a in &listening {
            assert!(
                a == "0100007F" || a == "00000000000000000000000001000000",
                "published port {} also listens on {a} (hex)",
                v4.port()
            );
        }
        std::fs::write(c.ws.join("done"), "").unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{o:?}");
        // gone with the exec
        assert!(TcpStream::connect_timeout(&v4, Duration::from_secs(2)).is_err());
        let rec = c.records().pop().expect("record");
        let p = &rec["requested"]["net"]["published"][0];
        assert_eq!(p["port"], 8000, "{rec}");
        assert_eq!(p["host"][0], v4.to_string(), "{rec}");

        let o = c.exec_with(&["--publish", "8000", "--no-network"], &["true"]);
        assert_eq!(code(&o), 2, "{}", err(&o));
        assert!(err(&o).contains("--publish"), "{}", err(&o));
    });
}

//! Adversarial network tests: no channel to host services (unix sockets by path, abstract
//! sockets, TCP on the host's loopback, the allowlist proxy's own channel), loopback of the
//! sandbox's own works, and the network flags do what they say. Servers only ever listen on this machine's loopback.
use capsule_e2e::sandbox::*;
use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

/// Python that tries to connect and prints CONNECTED on success.
fn py_connect(kind: &str, target: &str) -> String {
    match kind {
        "unix" => format!(
            "import socket\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect({target:?}); print('CONNECTED', s.recv(16))\nexcept OSError as e: print('refused', e)"
        ),
        "abstract" => format!(
            "import socket\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(b'\\0' + {target:?}.encode()); print('CONNECTED', s.recv(16))\nexcept OSError as e: print('refused', e)"
        ),
        _ => format!(
            "import socket\ns=socket.socket()\ns.settimeout(3)\ntry:\n s.connect(('127.0.0.1', {target})); print('CONNECTED', s.recv(16))\nexcept OSError as e: print('refused', e)"
        ),
    }
}

/// Accept connections forever in a thread, greeting each with "hello".
fn serve_unix(l: UnixListener) {
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let _ = s.write_all(b"hello");
        }
    });
}

#[test]
fn host_unix_sockets_are_unreachable() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let id = std::process::id();
        // where host services live: /run (docker, D-Bus), /tmp (X11, ssh-agent)
        let paths = [
            format!("/run/capsule-test-{id}.sock"),
            format!("/tmp/capsule-test-{id}.sock"),
        ];
        for p in &paths {
            let _ = std::fs::remove_file(p);
            let l = UnixListener::bind(p).unwrap();
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                .unwrap();
            serve_unix(l);
            // the host can connect (the test can fail)
            let mut s = std::os::unix::net::UnixStream::connect(p).unwrap();
            let mut b = [0u8; 5];
            s.read_exact(&mut b).unwrap();
            let o = c.exec(&["python3", "-c", &py_connect("unix", p)]);
            let _ = std::fs::remove_file(p);
            assert!(
                out(&o).starts_with("refused"),
                "{p}: {} {}",
                out(&o),
                err(&o)
            );
        }
    });
}

#[test]
fn host_abstract_sockets_are_unreachable() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let name = format!("capsule-test-abstract-{}-{}", std::process::id(), r.uid());
        let l = UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
            .unwrap();
        serve_unix(l);
        for flags in [&[][..], &["--open-network"][..]] {
            let o = c.exec_with(flags, &["python3", "-c", &py_connect("abstract", &name)]);
            assert!(
                out(&o).starts_with("refused"),
                "{flags:?}: {} {}",
                out(&o),
                err(&o)
            );
        }
        // with no sandbox at all it connects (so the test can fail)
        let o = c.exec_with(
            &["--no-sandbox"],
            &["python3", "-c", &py_connect("abstract", &name)],
        );
        assert!(out(&o).starts_with("CONNECTED"), "{} {}", out(&o), err(&o));
    });
}

#[test]
fn host_loopback_tcp_is_unreachable_unless_open_network() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                let _ = s.write_all(b"hello");
            }
        });
        let o = c.exec(&["python3", "-c", &py_connect("tcp", &port.to_string())]);
        assert!(out(&o).starts_with("refused"), "{} {}", out(&o), err(&o));
        let o = c.exec_with(
            &["--no-network"],
            &["python3", "-c", &py_connect("tcp", &port.to_string())],
        );
        assert!(out(&o).starts_with("refused"), "{} {}", out(&o), err(&o));
        let o = c.exec_with(
            &["--open-network"],
            &["python3", "-c", &py_connect("tcp", &port.to_string())],
        );
        assert!(
            out(&o).starts_with("CONNECTED"),
            "--open-network: {} {}",
            out(&o),
            err(&o)
        );
    });
}

const LOOPBACK_PAIR: &str = r#"
import socket, threading
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
port = srv.getsockname()[1]
def serve():
    c, _ = srv.accept(); c.sendall(b"pong:" + c.recv(16)); c.close()
t = threading.Thread(target=serve); t.start()
cl = socket.create_connection(("127.0.0.1", port), timeout=5); cl.sendall(b"ping")
print(cl.recv(32).decode()); t.join()
"#;

#[test]
fn loopback_inside_works_and_no_network_refuses_it() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let o = c.exec(&["python3", "-c", LOOPBACK_PAIR]);
        ok(&o, "server and client on the sandbox's loopback");
        assert_eq!(out(&o), "pong:ping\n");
        let o = c.exec(&["sh", "-c", "cat /sys/class/net/lo/operstate 2>/dev/null; ip -o link show lo 2>/dev/null | grep -c UP"]);
        assert!(out(&o).contains('1'), "loopback is up: {}", out(&o));
        let o = c.exec_with(
            &["--no-network"],
            &["sh", "-c", "ip -o link show lo | grep -c 'UP' || true"],
        );
        assert_eq!(out(&o).trim(), "0", "--no-network keeps loopback down");
        let o = c.exec_with(&["--no-network"], &["python3", "-c", LOOPBACK_PAIR]);
        assert!(
            !o.status.success() && !out(&o).contains("pong"),
            "--no-network allowed TCP: {}",
            out(&o)
        );
    });
}

#[test]
fn only_loopback_interface_exists() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let o = c.exec(&[
            "sh",
            "-c",
            "ls /proc/net/dev >/dev/null && tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
        ]);
        ok(&o, "interfaces");
        assert_eq!(out(&o).trim(), "lo");
    });
}

const CHANNEL_PROBE: &str = r#"
import os, ctypes
fds = []
for fd in range(3, 1024):
    try:
        os.fstat(fd); fds.append((fd, os.readlink("/proc/self/fd/%d" % fd)))
    except OSError:
        pass
print("fds", fds)
print("run_capsule", os.path.exists("/run/capsule"))
# init's descriptors (the relay's channel among them): names may be listable, but
# neither /proc/1/fd/N nor pidfd_getfd(2) may hand one over
reached = []
for fd in range(0, 300):
    try:
        reached.append(("readlink", fd, os.readlink("/proc/1/fd/%d" % fd)))
    except OSError:
        pass
    try:
        reached.append(("open", fd, os.open("/proc/1/fd/%d" % fd, os.O_RDONLY)))
    except OSError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(1)
for fd in range(0, 300):
    got = libc.syscall(438, pidfd, fd, 0)
    if got >= 0:
        reached.append(("pidfd_getfd", fd, os.readlink("/proc/self/fd/%d" % got)))
print("reached", reached)
"#;

/// In allowlist mode the relay's channel to the host proxy (a socketpair end inherited by
/// the sandbox's init) is nowhere the command can reach: not among its descriptors, not in
/// the file system (no socket is mounted any more), not through init's /proc entries or
/// `pidfd_getfd`. (Whatever does reach the proxy is checked there anyway: see
/// runtime/src/net/handoff.rs.)
#[test]
fn allowlist_channel_to_the_proxy_is_out_of_the_commands_reach() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let o = c.exec_with(
            &["--allow-host", "127.0.0.1:9"],
            &["python3", "-c", CHANNEL_PROBE],
        );
        ok(&o, "probe");
        let s = out(&o);
        assert!(s.contains("fds []\n"), "{s}");
        assert!(s.contains("run_capsule False"), "{s}");
        assert!(s.contains("reached []\n"), "{s}");
        // and the proxy is there all the same (so the probe ran in allowlist mode)
        let o = c.exec_with(
            &["--allow-host", "127.0.0.1:9"],
            &["sh", "-c", "echo $ALL_PROXY"],
        );
        assert_eq!(out(&o), "socks5h://127.0.0.1:3128\n");
        // the proxy raises the supervisor's descriptor limit once the sandbox is cloned:
        // the command keeps the limit it would have had without the proxy
        let limit = |flags: &[&str]| out(&c.exec_with(flags, &["sh", "-c", "ulimit -Sn"]));
        assert_eq!(limit(&["--allow-host", "127.0.0.1:9"]), limit(&[]));
        let leftovers: Vec<_> = std::fs::read_dir(&c.bundle)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".sock"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    });
}

//! No host socket is reachable from the sandbox, wherever it lives in the visible tree:
//! a host service (a listener of this test, on the host) at `/var/lib/…`, `/opt/…`,
//! `/srv/…` and `/var/tmp/…` answers nothing inside, also when it was bound after the
//! capsule's prepared root and warm spares were made; `/var/tmp` is the capsule's own; an
//! abstract socket of the host is out of reach (the sandbox's own network namespace);
//! and a socket the task binds in its own `/tmp` works.
use capsule_e2e::sandbox::*;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// What a connected client of the host's listeners reads.
const HOST_REPLY: &str = "HOST-SERVICE-ANSWERED";

/// A test folder under a system folder, removed at the end.
struct TestDir(PathBuf);

impl TestDir {
    fn new(parent: &str) -> Option<TestDir> {
        let p = Path::new(parent).join(format!("capsule-test-sock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).ok()?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).ok()?;
        Some(TestDir(p))
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A host service at `path`: every client gets [`HOST_REPLY`] (a thread of this test).
fn serve(path: &Path) {
    let l = UnixListener::bind(path).unwrap();
    // anyone may connect: the unprivileged runner too, were it reachable
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let _ = c.write_all(HOST_REPLY.as_bytes());
        }
    });
}

/// A host service in a network namespace of its own (`unshare --net`, root only).
struct OtherNetns(std::process::Child);

impl OtherNetns {
    fn serve(path: &Path) -> Option<OtherNetns> {
        let script = format!(
            "import socket, os\nl = socket.socket(socket.AF_UNIX); l.bind({p:?}); os.chmod({p:?}, 0o777); l.listen(8)\nwhile True:\n    c, _ = l.accept(); c.send(b{HOST_REPLY:?}); c.close()\n",
            p = path.display().to_string()
        );
        let child = std::process::Command::new("unshare")
            .args(["--net", "/usr/bin/python3", "-c", &script])
            .spawn()
            .ok()?;
        let me = OtherNetns(child);
        // listening (and answering from there) before the capsule's root is prepared
        capsule_e2e::procs::wait_until(
            || {
                std::os::unix::net::UnixStream::connect(path)
                    .and_then(|mut s| {
                        let mut b = String::new();
                        std::io::Read::read_to_string(&mut s, &mut b).map(|_| b)
                    })
                    .is_ok_and(|b| b == HOST_REPLY)
            },
            5,
        )
        .then_some(me)
    }
}

impl Drop for OtherNetns {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A shell script for the sandbox: for each path, print `<path>: ` and what connecting
/// to it gave (the service's reply, or the error).
const CONNECT: &str = r#"
import socket, sys
for p in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p.replace("@", "\0", 1) if p.startswith("@") else p)
        print(p + ": " + s.recv(100).decode())
    except OSError as e:
        print(p + ": refused " + str(e))
"#;

fn connect_all(c: &Capsule, paths: &[PathBuf]) -> String {
    let mut argv = vec!["/usr/bin/python3".to_string(), "-c".into(), CONNECT.into()];
    argv.extend(paths.iter().map(|p| p.display().to_string()));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = c.exec(&argv);
    ok(&o, "connecting to the host's sockets");
    out(&o)
}

#[test]
fn host_sockets_are_unreachable_wherever_they_are_visible() {
    if !Path::new("/usr/bin/python3").exists() {
        eprintln!("no /usr/bin/python3 here: skipped");
        return;
    }
    let dirs: Vec<TestDir> = ["/var/lib", "/opt", "/srv", "/var/tmp"]
        .iter()
        .filter_map(|d| TestDir::new(d))
        .collect();
    if dirs.len() < 4 {
        eprintln!("cannot make test folders in /var/lib, /opt, /srv, /var/tmp: skipped");
        return;
    }
    let mut early: Vec<PathBuf> = dirs.iter().map(|d| d.0.join("svc.sock")).collect();
    for p in &early {
        serve(p);
    }
    // an abstract socket of the host
    let abs = format!("@capsule-test-abstract-{}", std::process::id());
    {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(&abs[1..]).unwrap();
        let l = UnixListener::bind_addr(&addr).unwrap();
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                let _ = c.write_all(HOST_REPLY.as_bytes());
            }
        });
    }
    early.push(PathBuf::from(&abs));
    // a service in a network namespace of its own (a container's): not in the host's
    // list of sockets, found by the holder's walk of the service folders
    let other = dirs[2].0.join("other-netns.sock");
    let _other = OtherNetns::serve(&other);
    if _other.is_some() {
        early.push(other.clone());
    }
    each_runner(|r| {
        let c = Capsule::new(r);
        // the host can reach them (the test's services work)
        for p in &early[..4] {
            let mut s = std::os::unix::net::UnixStream::connect(p).unwrap();
            let mut b = String::new();
            std::io::Read::read_to_string(&mut s, &mut b).ok();
        }
        let text = connect_all(&c, &early);
        assert!(
            !text.contains(HOST_REPLY),
            "a host socket answered inside: {text}"
        );
        // /var/tmp is the capsule's own: the host's test folder is not there, and what
        // the task writes there is in the capsule's tmp
        let o = c.sh("ls /var/tmp; echo mine > /var/tmp/own.txt");
        ok(&o, "using /var/tmp");
        assert!(!out(&o).contains("capsule-test-sock"), "{}", out(&o));
        assert_eq!(
            std::fs::read_to_string(c.bundle.join("tmp/own.txt")).unwrap(),
            "mine\n"
        );
        // a service bound after the prepared root and its spares were made
        let late: Vec<PathBuf> = dirs[..3]
            .iter()
            .map(|d| d.0.join(format!("late-{}.sock", r.label())))
            .collect();
        for p in &late {
            serve(p);
        }
        let text = connect_all(&c, &late);
        assert!(
            !text.contains(HOST_REPLY),
            "a host socket bound after the prepared root answered inside: {text}"
        );
        // the task's own socket in its /tmp works
        let own = r#"
import socket
l = socket.socket(socket.AF_UNIX); l.bind("/tmp/own.sock"); l.listen(1)
c = socket.socket(socket.AF_UNIX); c.connect("/tmp/own.sock")
a, _ = l.accept(); a.send(b"task-own-socket-works"); print(c.recv(100).decode())
"#;
        let o = c.exec(&["/usr/bin/python3", "-c", own]);
        ok(&o, "the task's own socket");
        assert!(out(&o).contains("task-own-socket-works"), "{}", out(&o));
    });
}

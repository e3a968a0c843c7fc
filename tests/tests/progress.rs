//! The progress line of a long `open` or `verify`: one line on stderr, redrawn in place,
//! when stderr is a terminal (here a pseudo-terminal the test opens; the one-second delay
//! lowered with `CAPSULE_PROGRESS_DELAY_MS`), and nothing with `--json` or when stderr
//! is a pipe.

use capsule_e2e::*;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

/// A pseudo-terminal: (master, slave).
fn pty() -> (OwnedFd, OwnedFd) {
    let (mut m, mut s) = (-1, -1);
    // SAFETY: out-pointers to two ints; no name, termios or window size
    let rc = unsafe {
        libc::openpty(
            &mut m,
            &mut s,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty returned two fresh descriptors that we own
    unsafe { (OwnedFd::from_raw_fd(m), OwnedFd::from_raw_fd(s)) }
}

/// Run `cmd` with stderr on a fresh pseudo-terminal; its exit status and everything that
/// reached the terminal.
fn on_pty(cmd: &mut Command) -> (std::process::Output, Vec<u8>) {
    let (master, slave) = pty();
    cmd.stderr(Stdio::from(slave)).stdout(Stdio::piped());
    let child = cmd.spawn().expect("spawn capsule");
    // the only slave descriptor left is the child's: reading ends (EIO) when it exits
    cmd.stderr(Stdio::null());
    let reader = std::thread::spawn(move || {
        let mut f = std::fs::File::from(master);
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match f.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        out
    });
    let o = child.wait_with_output().expect("wait capsule");
    (o, reader.join().expect("pty reader"))
}

/// A checkout of a few commits and files.
fn source(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    for c in 0..3 {
        for i in 0..40 {
            write(
                &dir.join(format!("d{}/f{i}.txt", i % 4)),
                &format!("file {i} commit {c}\n"),
            );
        }
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-q", "-m", &format!("c{c}")]);
    }
}

const PHASE_NAMES: &[&str] = &["reading objects", "checking out", "copying objects"];

#[test]
fn progress_line_on_a_terminal_only() {
    let t = scratch();
    let src = t.path().join("src");
    source(&src);
    for r in runners() {
        let base = t.path().join(r.label());
        std::fs::create_dir(&base).unwrap();
        r.own(&base);
        let root = base.join("root");
        let open = |name: &str, json: bool| {
            let mut c = r.capsule(&root);
            c.env("CAPSULE_PROGRESS_DELAY_MS", "0")
                .env("RUST_LOG", "off");
            c.args(["open", "--source", src.to_str().unwrap(), "--name", name]);
            if json {
                c.arg("--json");
            }
            c
        };

        // a terminal, text output: the line is drawn (carriage returns, no newline) and
        // erased at the end
        let (o, tty) = on_pty(&mut open("a", false));
        let text = String::from_utf8_lossy(&tty).into_owned();
        assert_ok(&o, &format!("open on a terminal ({}): {text}", r.label()));
        assert!(
            text.contains("\rcapsule: ") && PHASE_NAMES.iter().any(|p| text.contains(p)),
            "no progress line on the terminal ({}): {text:?}",
            r.label()
        );
        assert!(
            !text.contains('\n') && text.ends_with("\r\x1b[K"),
            "one line, redrawn in place and erased ({}): {text:?}",
            r.label()
        );
        // the first open filled the object cache; a later one and a verify are quick,
        // but with the delay at 0 they draw too
        let (o, tty) = on_pty(&mut open("b", false));
        assert_ok(&o, "second open on a terminal");
        assert!(
            String::from_utf8_lossy(&tty).contains("\rcapsule: "),
            "later open: {:?}",
            String::from_utf8_lossy(&tty)
        );
        let mut v = r.capsule(&root);
        v.env("CAPSULE_PROGRESS_DELAY_MS", "0")
            .env("RUST_LOG", "off")
            .args(["verify", "b"]);
        let (o, tty) = on_pty(&mut v);
        assert_ok(&o, "verify on a terminal");
        let text = String::from_utf8_lossy(&tty).into_owned();
        assert!(
            text.contains("\rcapsule: hashing files"),
            "verify: {text:?}"
        );

        // --json: nothing on the terminal at all
        let (o, tty) = on_pty(&mut open("c", true));
        assert_ok(&o, "open --json on a terminal");
        assert!(
            tty.is_empty(),
            "--json drew on the terminal ({}): {:?}",
            r.label(),
            String::from_utf8_lossy(&tty)
        );
        let mut v = r.capsule(&root);
        v.env("CAPSULE_PROGRESS_DELAY_MS", "0")
            .env("RUST_LOG", "off")
            .args(["verify", "b", "--json"]);
        let (o, tty) = on_pty(&mut v);
        assert_ok(&o, "verify --json on a terminal");
        assert!(
            tty.is_empty(),
            "verify --json: {:?}",
            String::from_utf8_lossy(&tty)
        );

        // stderr a pipe: no progress
        let o = run(open("d", false).stderr(Stdio::piped()));
        assert_ok(&o, "open with stderr a pipe");
        let e = stderr(&o);
        assert!(
            !e.contains('\r') && !e.contains("capsule: reading"),
            "progress on a pipe ({}): {e:?}",
            r.label()
        );
        for n in ["a", "b", "c", "d"] {
            assert_ok(&run(r.capsule(&root).args(["close", n])), "close");
        }
    }
}

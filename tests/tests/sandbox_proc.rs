//! Adversarial process tests: no capabilities and no_new_privs inside; host processes
//! cannot be seen, signalled or ptraced; inherited descriptors are closed; nothing the
//! command starts outlives it, nor the sandbox outlives a killed `capsule`; refused
//! syscalls; timeouts and signal forwarding.
use capsule_e2e::sandbox::*;
use capsule_e2e::{host_procs, wait_until};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `marker` written so the text itself does not contain it, but the shell or regex yields it:
/// `capsule-x-1` -> `capsule-x-<open>1<close>` (e.g. `[1]` for grep, `"1"` for a shell).
fn split_marker(marker: &str, open: &str, close: &str) -> String {
    let (a, b) = marker.split_at(marker.len() - 1);
    format!("{a}{open}{b}{close}")
}

#[test]
fn no_capabilities_and_no_new_privs() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let o = c.exec(&["cat", "/proc/self/status"]);
        ok(&o, "status");
        let s = out(&o);
        for k in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            let line = s
                .lines()
                .find(|l| l.starts_with(k))
                .unwrap_or_else(|| panic!("{k} missing: {s}"));
            assert!(line.ends_with("0000000000000000"), "{line}");
        }
        assert!(s.lines().any(|l| l == "NoNewPrivs:\t1"), "{s}");
        assert!(s.lines().any(|l| l == "Seccomp:\t2"), "{s}");
        // uid 0 inside (root runner) must not regain capabilities through execve either
        let o = c.exec(&["sh", "-c", "grep CapEff /proc/self/status; id -u"]);
        assert!(out(&o).contains("0000000000000000"), "{}", out(&o));
        assert_eq!(out(&o).lines().last().unwrap().trim(), r.uid().to_string());
    });
}

#[test]
fn host_processes_are_invisible_and_unreachable() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let marker = format!("capsule-host-proc-{}", std::process::id());
        let mut host = Command::new("bash")
            .args(["-c", &format!("exec -a {marker} sleep 60")])
            .spawn()
            .unwrap();
        let hp = host.id();
        assert!(wait_until(|| host_procs(&marker).contains(&(hp as i32)), 5));
        let pattern = split_marker(&marker, "[", "]");
        let script = format!(
            r#"
            cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' ' | grep -c '{pattern}'
            ps ax | grep -c '{pattern}'
            ls /proc | grep -c '^[0-9]' 
            kill -0 {hp} 2>/dev/null && echo SIGNALLED
            kill -TERM {hp} 2>/dev/null && echo KILLED
            python3 -c '
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
for pid in ({hp}, 1):
    if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
        print("PTRACED", pid)
'
            exit 0
        "#
        );
        let o = c.sh(&script);
        let alive = host.try_wait().unwrap().is_none();
        let _ = host.kill();
        let _ = host.wait();
        ok(&o, "script");
        let s = out(&o);
        let mut lines = s.lines();
        assert_eq!(lines.next(), Some("0"), "host process visible: {s}");
        assert_eq!(lines.next(), Some("0"), "host process visible to ps: {s}");
        let nprocs: u32 = lines.next().unwrap().trim().parse().unwrap();
        assert!(nprocs < 10, "{nprocs} processes visible: {s}");
        assert!(
            !s.contains("SIGNALLED") && !s.contains("KILLED") && !s.contains("PTRACED"),
            "{s}\n{}",
            err(&o)
        );
        assert!(alive, "the host process was killed from inside");
    });
}

#[test]
fn inherited_descriptors_are_closed() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // a descriptor on the secret, inherited at fd 7 without close-on-exec
        let f = std::fs::File::open(c.home.join(".ssh/id_rsa")).unwrap();
        use std::os::fd::AsRawFd;
        let raw = f.as_raw_fd();
        let mut cmd = c.capsule();
        cmd.args([
            "exec",
            NAME,
            "--",
            "sh",
            "-c",
            "ls /proc/self/fd; cat <&7; cat /proc/self/fd/7",
        ]);
        // SAFETY: dup2 is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(raw, 7) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let o = cmd.stdin(Stdio::null()).output().unwrap();
        assert!(!out(&o).contains(SECRET), "{}", out(&o));
        let so = out(&o);
        let fds: Vec<&str> = so
            .lines()
            .take_while(|l| l.parse::<u32>().is_ok())
            .collect();
        assert!(
            fds.iter().all(|f| f.parse::<u32>().unwrap() <= 3),
            "fds: {fds:?}"
        );
    });
}

#[test]
fn nothing_outlives_the_command() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let marker = format!("capsule-daemon-{}", std::process::id());
        let m = split_marker(&marker, "\"", "\"");
        let g = split_marker(&marker, "[", "]");
        let script = format!(
            "(setsid bash -c 'exec -a {m}-a sleep 300' &) ; nohup bash -c 'exec -a {m}-b sleep 300' >/dev/null 2>&1 & sleep 0.3; ps ax | grep -c '{g}'; echo started"
        );
        let o = c.sh(&script);
        ok(&o, "daemonizing");
        assert_eq!(out(&o), "2\nstarted\n", "both daemons run inside");
        assert!(
            wait_until(|| host_procs(&marker).is_empty(), 5),
            "daemons survived: {:?}",
            host_procs(&marker)
        );
    });
}

#[test]
fn sandbox_dies_with_a_killed_capsule() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let marker = format!("capsule-orphan-{}", std::process::id());
        let mut cmd = c.capsule();
        let m = split_marker(&marker, "\"", "\"");
        cmd.args([
            "exec",
            NAME,
            "--",
            "bash",
            "-c",
            &format!("exec -a {m} sleep 300"),
        ]);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        assert!(
            wait_until(|| !host_procs(&marker).is_empty(), 10),
            "command never started"
        );
        // SIGKILL: capsule cannot clean up; the kernel must
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            wait_until(|| host_procs(&marker).is_empty(), 5),
            "sandbox outlived capsule"
        );
    });
}

#[test]
fn timeout_kills_everything_and_exits_124() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let marker = format!("capsule-timeout-{}", std::process::id());
        let t = Instant::now();
        let o = c.exec_with(
            &["--timeout", "500ms"],
            &[
                "bash",
                "-c",
                &format!(
                    "(exec -a {} sleep 300 &); sleep 300",
                    split_marker(&marker, "\"", "\"")
                ),
            ],
        );
        assert_eq!(code(&o), 124, "{}", err(&o));
        assert!(t.elapsed() < Duration::from_secs(20));
        assert!(wait_until(|| host_procs(&marker).is_empty(), 5));
        let rec = c.records().pop().unwrap();
        assert_eq!(rec["termination"]["kind"], "timed_out", "{rec}");
        assert_eq!(rec["exit_status"], 124);
    });
}

#[test]
fn signals_are_forwarded() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let mut cmd = c.capsule();
        cmd.args([
            "exec",
            NAME,
            "--",
            "sh",
            "-c",
            "trap 'echo got-term; exit 42' TERM; echo ready; while :; do sleep 0.1; done",
        ]);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut so = child.stdout.take().unwrap();
        let mut buf = [0u8; 6];
        use std::io::Read;
        so.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ready\n");
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let st = child.wait().unwrap();
        let mut rest = String::new();
        so.read_to_string(&mut rest).unwrap();
        assert_eq!(st.code(), Some(42), "{rest}");
        assert!(rest.contains("got-term"));
    });
}

#[test]
fn refused_syscalls() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let script = r#"
            unshare -U true 2>/dev/null && echo USERNS
            unshare -m true 2>/dev/null && echo MOUNTNS
            mount -t tmpfs none /tmp 2>/dev/null && echo MOUNTED
            python3 -c '
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for name, nr in (("bpf", 321), ("perf_event_open", 298), ("io_uring_setup", 425), ("userfaultfd", 323), ("keyctl", 250), ("add_key", 248)):
    if libc.syscall(nr, 0, 0, 0, 0, 0) >= 0 or ctypes.get_errno() != 1:
        print("NOT-REFUSED", name, ctypes.get_errno())
'
            echo done
        "#;
        let o = c.sh(script);
        let s = out(&o);
        assert!(s.contains("done"), "{s}\n{}", err(&o));
        for bad in ["USERNS", "MOUNTNS", "MOUNTED", "NOT-REFUSED"] {
            assert!(!s.contains(bad), "{s}");
        }
    });
}

#[test]
fn leaked_host_tty_injection_is_refused() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // TIOCSTI with the high bits set must be refused too (masked to 32 bits)
        let o = c.exec_with(
            &["-t"],
            &["python3", "-c", "import fcntl,sys,ctypes\nlibc=ctypes.CDLL(None,use_errno=True)\nc=ctypes.c_char(b'x')\nr=libc.ioctl(0, ctypes.c_ulong(0xffffffff00005412), ctypes.byref(c))\nprint('rc', r, ctypes.get_errno())"],
        );
        let s = out(&o);
        assert!(
            s.contains("rc -1 1"),
            "TIOCSTI not refused: {s} {}",
            err(&o)
        );
    });
}

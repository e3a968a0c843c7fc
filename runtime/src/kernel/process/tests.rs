//! Tests of the last steps: the layers are taken in forked children (what the child reads
//! of itself afterwards is its exit status), the `PATH` search and the user database on
//! made-up input. (`home_in_passwd`'s test moved here from `ociruntime/process.rs`.)

use super::*;

/// Run `f` in a forked child; its exit status is `f`'s return value.
fn in_child(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child makes system calls only (and the allocations of `f`, in a test
    // process whose other threads hold no lock the child needs) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = f();
        // SAFETY: leaving the child.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: pid is our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    libc::WEXITSTATUS(status)
}

/// The hex value of a `/proc/self/status` field (`CapEff`, `NoNewPrivs`...).
fn status_field(name: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(u64::MAX)
}

#[test]
fn capsules_layers_leave_no_capability_and_set_no_new_privs() {
    let code = in_child(|| {
        let r = take_layers(Layers {
            no_new_privs: true,
            user: None,
            capabilities: Capabilities::None,
            landlock: None,
            filters: &[],
        });
        if r.is_err() {
            return 10;
        }
        let caps = status_field("CapEff") | status_field("CapPrm") | status_field("CapBnd");
        match (caps, status_field("NoNewPrivs")) {
            (0, 1) => 0,
            (0, _) => 11,
            _ => 12,
        }
    });
    assert_eq!(code, 0);
}

#[test]
fn a_bundles_sets_are_kept_as_named() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root (capabilities to keep)");
        return;
    }
    const CAP_CHOWN: u64 = 1 << 0;
    const CAP_KILL: u64 = 1 << 5;
    let code = in_child(|| {
        let user = User {
            uid: 0,
            gid: 0,
            groups: vec![],
        };
        let sets = CapSets {
            bounding: CAP_CHOWN | CAP_KILL,
            effective: CAP_KILL,
            permitted: CAP_CHOWN | CAP_KILL,
            inheritable: 0,
            ambient: 0,
        };
        if take_layers(Layers {
            no_new_privs: false,
            user: Some(&user),
            capabilities: Capabilities::Sets(sets),
            landlock: None,
            filters: &[],
        })
        .is_err()
        {
            return 10;
        }
        let got = (
            status_field("CapBnd"),
            status_field("CapEff"),
            status_field("CapPrm"),
            status_field("NoNewPrivs"),
        );
        if got == (CAP_CHOWN | CAP_KILL, CAP_KILL, CAP_CHOWN | CAP_KILL, 0) {
            0
        } else {
            11
        }
    });
    assert_eq!(code, 0);
}

#[test]
fn a_program_filter_is_installed_last_with_no_new_privs() {
    // a filter answering EPERM to getppid, everything else allowed
    let ret_errno = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let f = |code: u16, k: u32, jt: u8, jf: u8| seccomp::bpf::sock_filter { code, jt, jf, k };
    let bpf = [
        f(0x20, 0, 0, 0),
        f(0x15, libc::SYS_getppid as u32, 0, 1),
        f(0x06, ret_errno, 0, 0),
        f(0x06, libc::SECCOMP_RET_ALLOW, 0, 0),
    ];
    for filtered in [false, true] {
        let code = in_child(|| {
            let filters = [Filter::Program {
                bpf: &bpf,
                flags: 0,
            }];
            let r = take_layers(Layers {
                no_new_privs: true,
                user: None,
                capabilities: Capabilities::None,
                landlock: None,
                filters: if filtered { &filters } else { &[] },
            });
            if r.is_err() {
                return 10;
            }
            // SAFETY: plain system call.
            let rc = unsafe { libc::syscall(libc::SYS_getppid) };
            if rc < 0 {
                std::io::Error::last_os_error().raw_os_error().unwrap_or(99)
            } else {
                0
            }
        });
        let want = if filtered { libc::EPERM } else { 0 };
        assert_eq!(code, want, "filtered: {filtered}");
    }
}

#[test]
fn exec_reports_what_execvp_would() {
    let path = |dirs: &str| CString::new(format!("PATH={dirs}")).unwrap();
    fn answer(errs: &'static [(&'static str, i32)]) -> impl Fn(&CStr) -> i32 {
        move |p: &CStr| -> i32 {
            let p = p.to_str().unwrap();
            errs.iter()
                .find(|(dir, _)| p.starts_with(dir))
                .map_or(libc::ENOENT, |(_, e)| *e)
        }
    }
    // not found anywhere
    assert_eq!(search(b"tool", &[path("/a:/b")], answer(&[])), libc::ENOENT);
    // a folder that refuses it, and none that has it: EACCES
    assert_eq!(
        search(b"tool", &[path("/a:/b")], answer(&[("/a", libc::EACCES)])),
        libc::EACCES
    );
    // another error stops the search
    assert_eq!(
        search(
            b"tool",
            &[path("/a:/b")],
            answer(&[("/a", libc::ENOEXEC), ("/b", libc::EACCES)])
        ),
        libc::ENOEXEC
    );
    // a name with a slash is tried as it is
    assert_eq!(
        search(b"./x", &[path("/a")], answer(&[("./x", libc::EPERM)])),
        libc::EPERM
    );
    assert_eq!(search(b"", &[path("/a")], answer(&[])), libc::ENOENT);
}

#[test]
fn executables_are_found_in_path_or_as_given() {
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let tool = bin.join("tool");
    std::fs::write(&tool, "#!/bin/sh\n").unwrap();
    let text = bin.join("text");
    std::fs::write(&text, "").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dirs = format!("/nowhere:{}", bin.display());
    let cwd = d.path().to_str().unwrap();
    assert_eq!(
        find_executable("tool", &dirs, cwd)
            .unwrap()
            .to_str()
            .unwrap(),
        tool.to_str().unwrap()
    );
    assert!(matches!(
        find_executable("text", &dirs, cwd),
        Err(NotFound::NotInPath(_))
    ));
    assert_eq!(
        find_executable("bin/tool", "", cwd)
            .unwrap()
            .to_str()
            .unwrap(),
        tool.to_str().unwrap()
    );
    assert!(matches!(
        find_executable("bin/text", "", cwd),
        Err(NotFound::NoSuchFile(_))
    ));
}

#[test]
fn home_comes_from_the_users_line() {
    let text = b"root:x:0:0:root:/root:/bin/sh\n# odd\nbad:x:notanumber:0::/bad:/bin/sh\n\
app:x:1000:1000:App:/home/app:/bin/sh\nempty:x:7:7:::/bin/sh\nshort:x:8\n";
    assert_eq!(home_in_passwd(text, 0).as_deref(), Some("/root"));
    assert_eq!(home_in_passwd(text, 1000).as_deref(), Some("/home/app"));
    assert_eq!(home_in_passwd(text, 7), None);
    assert_eq!(home_in_passwd(text, 8), None);
    assert_eq!(home_in_passwd(text, 42), None);
    assert_eq!(
        home_in_passwd(b"\xff\xfe:x:1:1::/x\n", 1).as_deref(),
        Some("/x")
    );
}

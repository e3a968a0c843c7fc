//! Tests of the seccomp filter: each one runs the operation in a forked child, once with the
//! filter installed and, where it matters, once without (the baseline), so a filter that did
//! nothing makes the test fail.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Exited(i32),
    Signaled(i32),
}

/// Run `f` in a forked child (after `no_new_privs` and, if `filtered`, the filter); the
/// child's exit status is `f`'s return value.
fn in_child(filtered: bool, f: impl FnOnce() -> i32) -> Outcome {
    let prog = SeccompProgram::build().expect("build filter");
    // SAFETY: the child makes syscalls only and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: plain prctl.
        unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
        if filtered && prog.install().is_err() {
            unsafe { libc::_exit(250) };
        }
        let code = f();
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: pid is our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    if libc::WIFSIGNALED(status) {
        Outcome::Signaled(libc::WTERMSIG(status))
    } else {
        Outcome::Exited(libc::WEXITSTATUS(status))
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// 0 on success, else errno (as the child's exit status).
fn rc_errno(rc: libc::c_long) -> i32 {
    if rc < 0 {
        errno()
    } else {
        0
    }
}

#[test]
fn program_shape() {
    let p = SeccompProgram::build().unwrap();
    assert!(p.instructions().len() > 40 && p.instructions().len() < 4096);
    let r = p.report();
    assert!(r.refused.contains(&"mount") && r.refused.contains(&"bpf"));
    assert_eq!(r.enosys.len(), 2);
    assert!(r.enosys[0] == "clone3" && r.enosys[1].starts_with("openat2"));
    // first instruction loads the arch, as our prologue does
    assert_eq!(p.instructions()[0].k, SECCOMP_DATA_ARCH);
}

#[test]
fn refused_syscalls_return_eperm() {
    let all: Vec<(&str, i64)> = refused_syscalls().collect();
    assert!(all.len() >= 34, "{all:?}");
    let mut discriminating = 0;
    for (name, nr) in &all {
        let nr = *nr;
        // every argument invalid (-1): bad pointers, bad fds, bad flags, so nothing happens
        // when a call gets through; the baseline shows what the kernel itself answers
        let call = move || {
            let m = u64::MAX;
            // SAFETY: invalid arguments only; the kernel rejects them.
            rc_errno(unsafe { libc::syscall(nr, m, m, m, m, m, m) })
        };
        let with = in_child(true, call);
        assert_eq!(
            with,
            Outcome::Exited(libc::EPERM),
            "{name} was not refused with EPERM"
        );
        let without = in_child(false, call);
        if without != Outcome::Exited(libc::EPERM) {
            discriminating += 1;
        }
    }
    // as root nearly every call fails for another reason without the filter, so the EPERM
    // above comes from the filter; unprivileged, the kernel's own EPERM hides many
    // SAFETY: getuid cannot fail.
    if unsafe { libc::getuid() } == 0 {
        assert!(
            discriminating * 4 >= all.len() * 3,
            "only {discriminating} of {} calls tell the filter apart from the kernel",
            all.len()
        );
    }
}

fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: valid array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

#[test]
fn terminal_injection_ioctls_refused_even_with_high_bits() {
    let (r, _w) = pipe();
    for req in [
        TIOCSTI,
        TIOCSTI | 0xdead_beef_0000_0000,
        TIOCSTI | 0xffff_ffff_0000_0000,
        TIOCLINUX,
        TIOCLINUX | 0x1_0000_0000,
    ] {
        let call = move || {
            let c = b'x';
            // SAFETY: ioctl on our own pipe fd with a valid byte pointer.
            rc_errno(unsafe { libc::syscall(libc::SYS_ioctl, r, req, &c as *const u8) })
        };
        assert_eq!(
            in_child(true, call),
            Outcome::Exited(libc::EPERM),
            "{req:#x}"
        );
        // baseline: a pipe is not a terminal
        assert_eq!(
            in_child(false, call),
            Outcome::Exited(libc::ENOTTY),
            "{req:#x}"
        );
    }
    // an ordinary ioctl still works
    let ok = in_child(true, move || {
        let mut n: libc::c_int = -1;
        // SAFETY: FIONREAD writes one int.
        rc_errno(unsafe { libc::syscall(libc::SYS_ioctl, r, libc::FIONREAD, &mut n) })
    });
    assert_eq!(ok, Outcome::Exited(0));
}

#[test]
fn new_user_namespaces_refused() {
    let unshare = || {
        // SAFETY: plain syscall.
        rc_errno(unsafe { libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER as u64) })
    };
    assert_eq!(in_child(true, unshare), Outcome::Exited(libc::EPERM));
    // high bits do not smuggle it through either
    let unshare_hi = || {
        rc_errno(unsafe {
            libc::syscall(
                libc::SYS_unshare,
                libc::CLONE_NEWUSER as u64 | 0xffff_0000_0000_0000,
            )
        })
    };
    assert_eq!(in_child(true, unshare_hi), Outcome::Exited(libc::EPERM));
    let clone = || {
        // SAFETY: raw clone like fork; the grandchild (if any) leaves at once.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_clone,
                (libc::CLONE_NEWUSER | libc::SIGCHLD) as u64,
                0u64,
                0u64,
                0u64,
                0u64,
            )
        };
        if rc == 0 {
            unsafe { libc::_exit(0) };
        }
        if rc > 0 {
            let mut st = 0;
            unsafe { libc::waitpid(rc as i32, &mut st, 0) };
        }
        rc_errno(rc)
    };
    assert_eq!(in_child(true, clone), Outcome::Exited(libc::EPERM));
    // clone3 says "not implemented" so libc falls back to clone
    let clone3 = || {
        // SAFETY: null args; refused before the kernel looks at them.
        rc_errno(unsafe { libc::syscall(libc::SYS_clone3, 0u64, 0u64) })
    };
    assert_eq!(in_child(true, clone3), Outcome::Exited(libc::ENOSYS));
    // baseline where this machine allows user namespaces (root in CI)
    if unsafe { libc::getuid() } == 0 {
        assert_eq!(in_child(false, unshare), Outcome::Exited(0));
        assert_eq!(in_child(false, clone), Outcome::Exited(0));
    }
}

#[test]
fn ordinary_work_still_works() {
    let (r, w) = pipe();
    let out = in_child(true, move || {
        // write, getpid, fork (clone without CLONE_NEWUSER), wait, personality query
        let msg = b"hello";
        // SAFETY: writing our own buffer to our own pipe.
        if unsafe { libc::write(w, msg.as_ptr().cast(), msg.len()) } != 5 {
            return 1;
        }
        if unsafe { libc::getpid() } <= 0 {
            return 2;
        }
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            unsafe { libc::_exit(7) };
        }
        if pid < 0 {
            return 3;
        }
        let mut st = 0;
        unsafe { libc::waitpid(pid, &mut st, 0) };
        if !libc::WIFEXITED(st) || libc::WEXITSTATUS(st) != 7 {
            return 4;
        }
        if unsafe { libc::personality(0xffff_ffff) } < 0 {
            return 5;
        }
        // unshare without CLONE_NEWUSER reaches the kernel (EPERM from missing caps is
        // fine for non-root; EINVAL for a zero flag set is what we expect)
        if rc_errno(unsafe { libc::syscall(libc::SYS_unshare, 0u64) }) != 0 {
            return 6;
        }
        0
    });
    assert_eq!(out, Outcome::Exited(0));
    let mut buf = [0u8; 5];
    // SAFETY: reading into our buffer.
    assert_eq!(unsafe { libc::read(r, buf.as_mut_ptr().cast(), 5) }, 5);
    assert_eq!(&buf, b"hello");
}

#[test]
fn aslr_cannot_be_switched_off() {
    const ADDR_NO_RANDOMIZE: u64 = 0x0040000;
    let call = || {
        // SAFETY: plain syscall in a throwaway child.
        rc_errno(unsafe { libc::syscall(libc::SYS_personality, ADDR_NO_RANDOMIZE) })
    };
    assert_eq!(in_child(true, call), Outcome::Exited(libc::EPERM));
    assert_eq!(in_child(false, call), Outcome::Exited(0));
}

#[cfg(target_arch = "x86_64")]
#[test]
fn i386_int80_is_refused() {
    // getpid through the 32-bit entry: eax = 20 (i386 __NR_getpid)
    let call = || {
        let mut eax: u32 = 20;
        // SAFETY: int 0x80 getpid takes no arguments and clobbers only eax.
        unsafe {
            std::arch::asm!("int 0x80", inout("eax") eax, options(nostack));
        }
        if (eax as i32) > 0 {
            0
        } else {
            1
        }
    };
    // the baseline proves the 32-bit entry works on this kernel, so only the filter stops it
    assert_eq!(in_child(false, call), Outcome::Exited(0));
    assert_eq!(in_child(true, call), Outcome::Signaled(libc::SIGSYS));

    // unshare(CLONE_NEWUSER) through the 32-bit table (i386 __NR_unshare = 310): the native
    // rule would not see it, the arch check does
    let unshare32 = || {
        let mut eax: u32 = 310;
        // SAFETY: unshare takes one integer argument in ebx (saved and restored around it,
        // since Rust reserves rbx).
        unsafe {
            std::arch::asm!(
                "xchg rbx, {flags}",
                "int 0x80",
                "xchg rbx, {flags}",
                flags = inout(reg) libc::CLONE_NEWUSER as u64 => _,
                inout("eax") eax,
                options(nostack),
            );
        }
        if eax == 0 {
            0
        } else {
            (eax as i32).wrapping_neg()
        }
    };
    assert_eq!(in_child(true, unshare32), Outcome::Signaled(libc::SIGSYS));
    if unsafe { libc::getuid() } == 0 {
        assert_eq!(in_child(false, unshare32), Outcome::Exited(0));
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x32_syscalls_are_refused() {
    let call = || {
        // x32 getpid (39 | X32_SYSCALL_BIT)
        // SAFETY: getpid takes no arguments.
        let rc = unsafe { libc::syscall((X32_SYSCALL_BIT | 39) as libc::c_long) };
        if rc > 0 {
            0
        } else {
            errno()
        }
    };
    // without the filter the kernel either runs it (x32 enabled) or says ENOSYS;
    // with it, the process dies before the kernel sees it
    let base = in_child(false, call);
    assert!(
        matches!(base, Outcome::Exited(0) | Outcome::Exited(libc::ENOSYS)),
        "{base:?}"
    );
    assert_eq!(in_child(true, call), Outcome::Signaled(libc::SIGSYS));
    // and an x32 mount (165) does not slip past the native table as an allowed call
    let mount = || {
        let m = u64::MAX;
        rc_errno(unsafe { libc::syscall((X32_SYSCALL_BIT | 165) as libc::c_long, m, m, m, m, m) })
    };
    assert_eq!(in_child(true, mount), Outcome::Signaled(libc::SIGSYS));
}

#[test]
fn install_requires_no_new_privs_or_reports_it() {
    // install() is one syscall returning a clear error, never a panic
    let p = SeccompProgram::build().unwrap();
    let out = in_child(false, move || match p.install() {
        Ok(()) => 0,
        Err(SeccompError::Install(_)) => 1,
        Err(_) => 2,
    });
    assert_eq!(out, Outcome::Exited(0));
}

#[test]
fn set_id_bits_cannot_be_set() {
    let dir = tempfile::Builder::new()
        .tempdir_in("/dev/shm")
        .expect("tmpdir");
    let file = std::ffi::CString::new(dir.path().join("f").as_os_str().as_encoded_bytes()).unwrap();
    let newf = std::ffi::CString::new(dir.path().join("g").as_os_str().as_encoded_bytes()).unwrap();
    std::fs::write(dir.path().join("f"), "x").unwrap();
    let (f, n) = (file.as_ptr() as usize, newf.as_ptr() as usize);
    let suid = 0o4755 as libc::c_long;
    let sgid = 0o2755 as libc::c_long;
    type Call = Box<dyn Fn() -> i32>;
    let calls: Vec<(&str, Call)> = vec![
        #[cfg(target_arch = "x86_64")]
        (
            "chmod suid",
            Box::new(move || rc_errno(unsafe { libc::syscall(libc::SYS_chmod, f, suid) })),
        ),
        (
            "fchmodat sgid",
            Box::new(move || {
                rc_errno(unsafe { libc::syscall(libc::SYS_fchmodat, libc::AT_FDCWD, f, sgid, 0) })
            }),
        ),
        (
            "fchmodat2 suid",
            Box::new(move || rc_errno(unsafe { libc::syscall(452, libc::AT_FDCWD, f, suid, 0) })),
        ),
        (
            "fchmod suid",
            Box::new(move || {
                let fd = unsafe { libc::open(f as *const libc::c_char, libc::O_RDONLY) };
                rc_errno(unsafe { libc::syscall(libc::SYS_fchmod, fd, suid) })
            }),
        ),
        (
            "openat O_CREAT suid",
            Box::new(move || {
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_openat,
                        libc::AT_FDCWD,
                        n,
                        libc::O_CREAT | libc::O_WRONLY,
                        suid,
                    )
                };
                if rc >= 0 {
                    unsafe { libc::unlink(n as *const libc::c_char) };
                }
                rc_errno(rc)
            }),
        ),
    ];
    for (what, call) in &calls {
        // SAFETY (all calls above): valid C strings that outlive the children.
        assert_eq!(
            in_child(true, call),
            Outcome::Exited(libc::EPERM),
            "{what} with the filter"
        );
        // baseline: without the filter the call succeeds (the test's user owns the file)
        assert_eq!(
            in_child(false, call),
            Outcome::Exited(0),
            "{what} without the filter"
        );
    }
    // ordinary modes still work
    let plain = move || {
        rc_errno(unsafe {
            libc::syscall(
                libc::SYS_fchmodat,
                libc::AT_FDCWD,
                f,
                0o755 as libc::c_long,
                0,
            )
        })
    };
    assert_eq!(in_child(true, plain), Outcome::Exited(0));
    let create = move || {
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                n,
                libc::O_CREAT | libc::O_WRONLY,
                0o644 as libc::c_long,
            )
        };
        if rc >= 0 {
            unsafe { libc::unlink(n as *const libc::c_char) };
        }
        rc_errno(rc)
    };
    assert_eq!(in_child(true, create), Outcome::Exited(0));
    // openat2: ENOSYS with the filter, so libc falls back to openat
    let o2 = move || {
        let how = [libc::O_RDONLY as u64, 0u64, 0u64];
        rc_errno(unsafe { libc::syscall(437, libc::AT_FDCWD, f, how.as_ptr(), 24usize) })
    };
    assert_eq!(in_child(true, o2), Outcome::Exited(libc::ENOSYS));
    assert_eq!(in_child(false, o2), Outcome::Exited(0));
}

/// The supervisor continues every observed call: none may be one the table refuses
/// outright, and those it refuses for some arguments (set-id modes) are answered by the
/// kernel in the listened program's own section, never sent (see `listened`).
#[test]
fn observed_calls_are_never_refused_outright() {
    for r in rules() {
        if observed(r.nr) {
            assert!(
                !r.when.is_empty(),
                "{} is refused outright and observed",
                r.name
            );
            assert_eq!(r.errno, libc::EPERM, "{}", r.name);
        }
    }
    assert!(observed(libc::SYS_openat) && observed(OBSERVED_CONNECT));
    assert!(!observed(libc::SYS_keyctl) && !observed(libc::SYS_read));
    let p = SeccompProgram::build().unwrap();
    assert!(p.listened_instructions().len() < 4096);
    // the plain program never notifies
    assert!(p
        .instructions()
        .iter()
        .all(|i| i.k != libc::SECCOMP_RET_USER_NOTIF));
}

/// A classic-BPF interpreter for the instructions these programs use: the answer to a
/// syscall `nr` with `args` on the native architecture, and how many instructions ran.
fn run_bpf(p: &[sock_filter], nr: u32, args: [u64; 6]) -> (u32, usize) {
    let mut data = Vec::with_capacity(64);
    data.extend(nr.to_ne_bytes());
    data.extend(NATIVE_AUDIT_ARCH.to_ne_bytes());
    data.extend(0u64.to_ne_bytes()); // instruction pointer
    for a in args {
        data.extend(a.to_ne_bytes());
    }
    let (mut a, mut pc, mut ran) = (0u32, 0usize, 0usize);
    loop {
        let i = &p[pc];
        ran += 1;
        let k = i.k;
        match i.code {
            0x20 => {
                let o = k as usize;
                a = u32::from_ne_bytes(data[o..o + 4].try_into().unwrap());
                pc += 1;
            }
            0x54 => {
                a &= k;
                pc += 1;
            }
            0x05 => pc += 1 + k as usize,
            0x15 | 0x25 | 0x35 | 0x45 => {
                let t = match i.code {
                    0x15 => a == k,
                    0x25 => a > k,
                    0x35 => a >= k,
                    _ => a & k != 0,
                };
                pc += 1 + if t { i.jt } else { i.jf } as usize;
            }
            0x06 => return (k, ran),
            c => panic!("instruction {c:#x} at {pc} not interpreted"),
        }
    }
}

/// The argument vectors compared: each interesting value in each argument, and pairs.
fn arg_vectors() -> Vec<[u64; 6]> {
    let values = [
        0,
        u64::MAX,
        (libc::O_WRONLY | libc::O_CREAT) as u64,
        libc::O_RDWR as u64,
        libc::O_TRUNC as u64,
        libc::S_ISUID as u64 | 0o755,
        libc::S_ISGID as u64,
        libc::CLONE_NEWUSER as u64 | libc::SIGCHLD as u64,
        TIOCSTI,
        0xffff_ffff_0000_0000 | TIOCLINUX,
        0x0040_0000, // ADDR_NO_RANDOMIZE
        0x0002_0008,
    ];
    let mut out = vec![[0u64; 6]];
    for i in 0..6 {
        for v in values {
            let mut a = [0u64; 6];
            a[i] = v;
            out.push(a);
            for w in values {
                let mut b = a;
                b[(i + 1) % 6] = w;
                out.push(b);
            }
        }
    }
    out
}

/// The direct jumps change no answer: the programs with them answer every syscall
/// number, with every argument vector, as the same programs without them do; and an
/// `openat` runs a few instructions, not the whole chain.
#[test]
fn hot_jumps_answer_as_the_whole_chain() {
    let refusals = rules();
    let mut pairs = vec![(
        plain(&refusals, HOT).unwrap(),
        plain(&refusals, &[]).unwrap(),
    )];
    for (r, w) in [(false, true), (false, false), (true, true)] {
        pairs.push((
            listened(&refusals, r, w, HOT).unwrap(),
            listened(&refusals, r, w, &[]).unwrap(),
        ));
    }
    let args = arg_vectors();
    for (hot, whole) in &pairs {
        assert!(hot.len() > whole.len());
        for nr in (0..=470u32).chain([X32_SYSCALL_BIT | 1, 0xffff_ffff]) {
            for a in &args {
                assert_eq!(
                    run_bpf(hot, nr, *a).0,
                    run_bpf(whole, nr, *a).0,
                    "syscall {nr} with {a:x?}"
                );
            }
        }
        for &h in HOT {
            let (fast, slow) = (
                run_bpf(hot, h as u32, [0; 6]).1,
                run_bpf(whole, h as u32, [0; 6]).1,
            );
            assert!(
                fast < 30 && (h != libc::SYS_openat || fast * 3 < slow),
                "syscall {h}: {fast} instructions, {slow} without the jumps"
            );
        }
    }
    // the answers the jumps must keep (not all "allow"): a set-id open refused, a write
    // open sent (listened), a read open allowed
    let (l, _) = &pairs[1];
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let openat = libc::SYS_openat as u32;
    assert_eq!(
        run_bpf(&pairs[0].0, openat, [0, 0, 0o101, 0o4755, 0, 0]).0,
        eperm
    );
    assert_eq!(
        run_bpf(l, openat, [0, 0, 0o101, 0o644, 0, 0]).0,
        libc::SECCOMP_RET_USER_NOTIF
    );
    assert_eq!(
        run_bpf(l, openat, [0, 0, 0, 0, 0, 0]).0,
        libc::SECCOMP_RET_ALLOW
    );
}

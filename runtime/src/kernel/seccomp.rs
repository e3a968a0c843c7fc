//! The seccomp filter: refused syscalls, ioctl masks, foreign ABIs.
//!
//! One filter for every sandboxed command, built once ([`SeccompProgram::build`], may
//! allocate) and installed in the child as the very last step before `execve`
//! ([`SeccompProgram::install`], one syscall, async-signal-safe). `no_new_privs` must be set
//! before installing (the executor does it; so does the Landlock layer).
//!
//! What it does, in order:
//! 1. Foreign ABIs: a syscall whose `seccomp_data.arch` is not the native one (on x86_64:
//!    the 32-bit `int 0x80` entry, `AUDIT_ARCH_I386`) or, on x86_64, whose number has the
//!    x32 bit (`0x40000000`) set, **kills the process** (`SECCOMP_RET_KILL_PROCESS`): no
//!    legitimate program in a 64-bit sandbox takes those doors, and a clean errno would leave
//!    a 32-bit program in an undefined state anyway. This is a hand-written classic-BPF
//!    prologue, because seccompiler only reasons about one architecture's table.
//! 2. `clone3` returns `ENOSYS`: its flags live in memory the filter cannot read, and libc
//!    falls back to `clone`, whose flags it can.
//! 3. The table built with `seccompiler` returns `EPERM` (a clean error, not a kill) for:
//!    kernel keyrings, `bpf`, `perf_event_open`, io_uring, `userfaultfd`, `setns`, every
//!    mount-API call, `pivot_root`, `chroot`, file handles, module and kexec calls, `reboot`,
//!    swap, `acct`, `syslog`, quota; `clone`/`unshare` with `CLONE_NEWUSER`; `ioctl` with
//!    `TIOCSTI`/`TIOCLINUX` compared on the low 32 bits of the request (the kernel ignores
//!    the high ones, so `0xffffffff00005412` is still refused); `personality` with anything
//!    other than the harmless personas (so ASLR cannot be switched off); any mode with a
//!    set-user-ID or set-group-ID bit in `chmod`/`fchmod`/`fchmodat(2)`/`open`/`openat`/
//!    `creat`/`mknod(at)` (a set-id file made by root inside the sandbox would be a set-id
//!    root file on the host). `openat2` gets `ENOSYS`: its mode sits in memory the filter
//!    cannot read, and libc falls back to `openat`.
//!
//! Listing what it refuses: the filter is built twice from the same table. The one an
//! exec installs ([`SeccompProgram::install_listened`]) answers `SECCOMP_RET_USER_NOTIF`
//! where the other answers `EPERM`; capsule's supervisor ([`crate::linux::notify`]) holds its
//! listener, records the refusal and answers `EPERM`, the same errno. Should the
//! supervisor be gone, the kernel answers `ENOSYS` itself: still refused. Every other
//! answer (the kills, `ENOSYS`, allow) is the same instruction in both. The OCI rendering
//! keeps plain errnos.
//!
//! `ptrace` is **allowed**, on purpose: debuggers and `strace` of the command's own children
//! are ordinary work, the pid namespace hides host processes, and Landlock (every ABI)
//! refuses ptrace of any process outside the sandbox's domain, which also covers weaker
//! isolation without a pid namespace.

use bpf::sock_filter;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// Errors building or installing the filter.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp: building the filter: {0}")]
    Build(#[from] seccompiler::BackendError),
    #[error("seccomp: filter too long ({0} instructions, the kernel takes at most 4096)")]
    TooLong(usize),
    #[error("seccomp: installing the filter: {0}")]
    Install(std::io::Error),
}

/// What the installed filter does, for the exec record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeccompReport {
    /// Native architecture the filter admits (`x86_64`, `aarch64`).
    pub arch: &'static str,
    /// Syscalls refused with `EPERM` whatever their arguments.
    pub refused: Vec<&'static str>,
    /// Syscalls refused with `EPERM` for some arguments only, in plain words.
    pub refused_when: Vec<&'static str>,
    /// Syscalls answered with `ENOSYS` (so libc falls back to an older call).
    pub enosys: Vec<&'static str>,
    /// Foreign ABIs and what happens to them.
    pub foreign_abis: Vec<&'static str>,
    /// Deliberately allowed calls a reader might expect here, and why.
    pub allowed_notes: Vec<&'static str>,
    /// Length of the BPF program.
    pub instructions: usize,
}

/// A built filter, ready to install.
#[derive(Debug, Clone)]
pub struct SeccompProgram {
    bpf: Vec<sock_filter>,
    /// The same program with each `EPERM` answer replaced by `SECCOMP_RET_USER_NOTIF`.
    listened: Vec<sock_filter>,
    /// Does this kernel answer "continue" ([`continue_supported`])? Else the plain
    /// program is installed even where the listened one is asked for.
    listen: bool,
    report: SeccompReport,
}

/// Does the running kernel take `SECCOMP_USER_NOTIF_FLAG_CONTINUE` (Linux 5.5)? The
/// listened filter is installed only then: a write call it sends must be continued.
pub fn continue_supported() -> bool {
    // SAFETY: uname into a zeroed struct.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return false;
    }
    let release: Vec<u8> = u
        .release
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    let release = String::from_utf8_lossy(&release);
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    matches!((it.next(), it.next()), (Some(major), Some(minor)) if (major, minor) >= (5, 5))
}

pub use bpf::X32_SYSCALL_BIT;
use bpf::{
    arch_check, arg_low, jump, stmt, DATA_NR as SECCOMP_DATA_NR, JA as BPF_JMP_JA,
    JEQ_K as BPF_JMP_JEQ_K, JSET_K as BPF_JMP_JSET_K_ANY, LD_W_ABS as BPF_LD_W_ABS, RET_ALLOW,
    RET_K as BPF_RET_K,
};
#[cfg(test)]
use bpf::{DATA_ARCH as SECCOMP_DATA_ARCH, NATIVE_AUDIT_ARCH};

/// `TIOCSTI`: push a byte into a terminal's input queue (terminal injection).
pub const TIOCSTI: u64 = 0x5412;
/// `TIOCLINUX`: console operations, including selection paste (injection on a VT).
pub const TIOCLINUX: u64 = 0x541C;
/// `ADDR_NO_RANDOMIZE` and friends are refused; these personas are allowed.
const PERSONALITY_ALLOWED: &[u64] = &[
    0x0000_0000, // PER_LINUX
    0x0000_0008, // PER_LINUX32
    0x0002_0000, // UNAME26
    0x0002_0008, // PER_LINUX32 | UNAME26
    0xffff_ffff, // query
];

macro_rules! syscalls {
    ($($name:ident),* $(,)?) => {
        &[$((stringify!($name), paste_sys!($name))),*]
    };
}
macro_rules! paste_sys {
    ($name:ident) => {
        sys::$name
    };
}

/// Syscall numbers by name (libc's `SYS_*` under plain names).
#[allow(non_upper_case_globals, clippy::unnecessary_cast)] // c_long is i64 on 64-bit targets
mod sys {
    pub const fchmod: i64 = libc::SYS_fchmod as i64;
    pub const fchmodat: i64 = libc::SYS_fchmodat as i64;
    /// `fchmodat2` (Linux 6.6): one number on every architecture.
    pub const fchmodat2: i64 = 452;
    pub const openat: i64 = libc::SYS_openat as i64;
    /// `openat2`: its mode lives in a struct the filter cannot read.
    pub const openat2: i64 = 437;
    pub const mknodat: i64 = libc::SYS_mknodat as i64;
    #[cfg(target_arch = "x86_64")]
    pub const chmod: i64 = libc::SYS_chmod as i64;
    #[cfg(target_arch = "x86_64")]
    pub const open: i64 = libc::SYS_open as i64;
    #[cfg(target_arch = "x86_64")]
    pub const creat: i64 = libc::SYS_creat as i64;
    #[cfg(target_arch = "x86_64")]
    pub const mknod: i64 = libc::SYS_mknod as i64;
    pub const add_key: i64 = libc::SYS_add_key as i64;
    pub const request_key: i64 = libc::SYS_request_key as i64;
    pub const keyctl: i64 = libc::SYS_keyctl as i64;
    pub const bpf: i64 = libc::SYS_bpf as i64;
    pub const perf_event_open: i64 = libc::SYS_perf_event_open as i64;
    pub const io_uring_setup: i64 = libc::SYS_io_uring_setup as i64;
    pub const io_uring_enter: i64 = libc::SYS_io_uring_enter as i64;
    pub const io_uring_register: i64 = libc::SYS_io_uring_register as i64;
    pub const userfaultfd: i64 = libc::SYS_userfaultfd as i64;
    pub const setns: i64 = libc::SYS_setns as i64;
    pub const mount: i64 = libc::SYS_mount as i64;
    pub const umount2: i64 = libc::SYS_umount2 as i64;
    pub const pivot_root: i64 = libc::SYS_pivot_root as i64;
    pub const chroot: i64 = libc::SYS_chroot as i64;
    pub const move_mount: i64 = libc::SYS_move_mount as i64;
    pub const open_tree: i64 = libc::SYS_open_tree as i64;
    pub const fsopen: i64 = libc::SYS_fsopen as i64;
    pub const fsmount: i64 = libc::SYS_fsmount as i64;
    pub const fsconfig: i64 = libc::SYS_fsconfig as i64;
    pub const fspick: i64 = libc::SYS_fspick as i64;
    pub const mount_setattr: i64 = libc::SYS_mount_setattr as i64;
    pub const open_by_handle_at: i64 = libc::SYS_open_by_handle_at as i64;
    pub const name_to_handle_at: i64 = libc::SYS_name_to_handle_at as i64;
    pub const init_module: i64 = libc::SYS_init_module as i64;
    pub const finit_module: i64 = libc::SYS_finit_module as i64;
    pub const delete_module: i64 = libc::SYS_delete_module as i64;
    pub const kexec_load: i64 = libc::SYS_kexec_load as i64;
    pub const kexec_file_load: i64 = libc::SYS_kexec_file_load as i64;
    pub const reboot: i64 = libc::SYS_reboot as i64;
    pub const swapon: i64 = libc::SYS_swapon as i64;
    pub const swapoff: i64 = libc::SYS_swapoff as i64;
    pub const acct: i64 = libc::SYS_acct as i64;
    pub const syslog: i64 = libc::SYS_syslog as i64;
    pub const quotactl: i64 = libc::SYS_quotactl as i64;
    pub const clone: i64 = libc::SYS_clone as i64;
    pub const clone3: i64 = libc::SYS_clone3 as i64;
    pub const unshare: i64 = libc::SYS_unshare as i64;
    pub const ioctl: i64 = libc::SYS_ioctl as i64;
    pub const personality: i64 = libc::SYS_personality as i64;
    #[cfg(target_arch = "x86_64")]
    pub const iopl: i64 = libc::SYS_iopl as i64;
    #[cfg(target_arch = "x86_64")]
    pub const ioperm: i64 = libc::SYS_ioperm as i64;
    #[cfg(target_arch = "x86_64")]
    pub const uselib: i64 = libc::SYS_uselib as i64;
}

/// Syscalls refused with `EPERM` whatever their arguments (all supported arches).
const REFUSED: &[(&str, i64)] = syscalls![
    add_key,
    request_key,
    keyctl,
    bpf,
    perf_event_open,
    io_uring_setup,
    io_uring_enter,
    io_uring_register,
    userfaultfd,
    setns,
    mount,
    umount2,
    pivot_root,
    chroot,
    move_mount,
    open_tree,
    fsopen,
    fsmount,
    fsconfig,
    fspick,
    mount_setattr,
    open_by_handle_at,
    name_to_handle_at,
    init_module,
    finit_module,
    delete_module,
    kexec_load,
    kexec_file_load,
    reboot,
    swapon,
    swapoff,
    acct,
    syslog,
    quotactl,
];

/// x86_64-only syscalls refused with `EPERM`.
#[cfg(target_arch = "x86_64")]
const REFUSED_ARCH: &[(&str, i64)] = syscalls![iopl, ioperm, uselib];
#[cfg(not(target_arch = "x86_64"))]
const REFUSED_ARCH: &[(&str, i64)] = &[];

/// Every syscall refused with `EPERM` regardless of arguments, by name and number, for
/// tests and documentation.
pub fn refused_syscalls() -> impl Iterator<Item = (&'static str, i64)> {
    REFUSED.iter().chain(REFUSED_ARCH).copied()
}

fn native_arch() -> Result<TargetArch, SeccompError> {
    #[cfg(target_arch = "x86_64")]
    return Ok(TargetArch::x86_64);
    #[cfg(target_arch = "aarch64")]
    return Ok(TargetArch::aarch64);
    #[allow(unreachable_code)]
    Err(SeccompError::Build(
        seccompiler::BackendError::InvalidTargetArch(std::env::consts::ARCH.into()),
    ))
}

/// The hand-written prologue: foreign ABIs die, `clone3` gets ENOSYS, everything else falls
/// through to seccompiler's table.
fn prologue(table: &[SysRule]) -> Vec<sock_filter> {
    let enosys = bpf::ret_errno(libc::ENOSYS as u32);
    let mut p = arch_check(bpf::RET_KILL_PROCESS);
    // the table's ENOSYS answers (openat2, clone3): unconditional, before the table
    for r in table.iter().filter(|r| r.errno == libc::ENOSYS) {
        p.extend([
            jump(BPF_JMP_JEQ_K, r.nr as u32, 0, 1),
            stmt(BPF_RET_K, enosys),
        ]);
    }
    p
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    Ok(SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        op,
        value,
    )?)
}

/// A condition on one syscall argument, compared on its low 32 bits (the kernel reads
/// every argument these rules look at as a 32-bit `int`, whatever the high bits say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgCond {
    /// `arg & mask == value`.
    MaskedEq { arg: u8, mask: u64, value: u64 },
    /// `arg == value`.
    Eq { arg: u8, value: u64 },
    /// `arg` is none of `values`.
    NoneOf { arg: u8, values: &'static [u64] },
}

/// One refusal of capsule's filter: `name` (number `nr`) answers `errno` when any of
/// `when` (each a conjunction of conditions) holds; an empty `when` refuses it always.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysRule {
    pub name: &'static str,
    pub nr: i64,
    pub when: Vec<Vec<ArgCond>>,
    pub errno: i32,
}

/// The one table both the installed filter ([`SeccompProgram::build`]) and the OCI
/// rendering (`linux.seccomp` of an exported bundle, [`crate::linux::oci`]) are made
/// from. (The foreign-ABI refusal is the filter's prologue; in OCI it is the
/// architecture list.)
pub fn rules() -> Vec<SysRule> {
    let always = |name, nr| SysRule {
        name,
        nr,
        when: vec![],
        errno: libc::EPERM,
    };
    let mut out: Vec<SysRule> = refused_syscalls().map(|(n, nr)| always(n, nr)).collect();
    let newuser = libc::CLONE_NEWUSER as u64;
    // flags are the first argument of clone on x86_64 and aarch64, and of unshare
    for (name, nr) in [("clone", sys::clone), ("unshare", sys::unshare)] {
        out.push(SysRule {
            when: vec![vec![ArgCond::MaskedEq {
                arg: 0,
                mask: newuser,
                value: newuser,
            }]],
            ..always(name, nr)
        });
    }
    out.push(SysRule {
        when: vec![
            vec![ArgCond::Eq {
                arg: 1,
                value: TIOCSTI,
            }],
            vec![ArgCond::Eq {
                arg: 1,
                value: TIOCLINUX,
            }],
        ],
        ..always("ioctl", sys::ioctl)
    });
    // set-user-ID / set-group-ID bits: a file the sandbox makes set-id would be set-id
    // on the host too (root inside is root's files outside), so no call may set them.
    let mut mode_rules = vec![
        ("fchmod", sys::fchmod, 1u8),
        ("fchmodat", sys::fchmodat, 2),
        ("fchmodat2", sys::fchmodat2, 2),
        ("openat", sys::openat, 3),
        ("mknodat", sys::mknodat, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    mode_rules.extend([
        ("chmod", sys::chmod, 1u8),
        ("open", sys::open, 2),
        ("creat", sys::creat, 1),
        ("mknod", sys::mknod, 1),
    ]);
    for (name, nr, arg) in mode_rules {
        let bit = |b: u64| {
            vec![ArgCond::MaskedEq {
                arg,
                mask: b,
                value: b,
            }]
        };
        out.push(SysRule {
            when: vec![bit(libc::S_ISUID as u64), bit(libc::S_ISGID as u64)],
            ..always(name, nr)
        });
    }
    out.push(SysRule {
        when: vec![vec![ArgCond::NoneOf {
            arg: 0,
            values: PERSONALITY_ALLOWED,
        }]],
        ..always("personality", sys::personality)
    });
    for (name, nr) in [("openat2", sys::openat2), ("clone3", sys::clone3)] {
        out.push(SysRule {
            errno: libc::ENOSYS,
            ..always(name, nr)
        });
    }
    out
}

/// seccompiler's table of the `EPERM` rules of `refusals` whose syscall `keep` selects:
/// `EPERM` when a rule matches, allow otherwise.
fn table(
    refusals: &[SysRule],
    keep: impl Fn(i64) -> bool,
) -> Result<Vec<sock_filter>, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for r in refusals
        .iter()
        .filter(|r| r.errno == libc::EPERM && keep(r.nr))
    {
        let mut alts = Vec::new();
        for conj in &r.when {
            let mut conds = Vec::new();
            for c in conj {
                match *c {
                    ArgCond::MaskedEq { arg, mask, value } => {
                        conds.push(cond(arg, SeccompCmpOp::MaskedEq(mask), value)?)
                    }
                    ArgCond::Eq { arg, value } => conds.push(cond(arg, SeccompCmpOp::Eq, value)?),
                    ArgCond::NoneOf { arg, values } => {
                        for v in values {
                            conds.push(cond(arg, SeccompCmpOp::Ne, *v)?);
                        }
                    }
                }
            }
            alts.push(SeccompRule::new(conds)?);
        }
        // an empty rule list = match whatever the arguments
        rules.insert(r.nr, alts);
    }
    if rules.is_empty() {
        // no rule selected: every syscall allowed (what the table answers for one it lacks)
        return Ok(vec![stmt(BPF_RET_K, RET_ALLOW)]);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        native_arch()?,
    )?;
    let program: BpfProgram = filter.try_into()?;
    // seccompiler's instructions, as the kernel's (the same layout)
    Ok(program
        .into_iter()
        .map(|i| sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect())
}

/// `section` with each "allow" replaced by a jump to the instruction right after it.
fn fall_through(section: Vec<sock_filter>) -> Vec<sock_filter> {
    let n = section.len();
    section
        .into_iter()
        .enumerate()
        .map(|(i, ins)| {
            if ins.code == BPF_RET_K && ins.k == RET_ALLOW {
                stmt(BPF_JMP_JA, (n - i - 1) as u32)
            } else {
                ins
            }
        })
        .collect()
}

/// The plain program ([`SeccompProgram::install`]): the prologue, then the table, with
/// direct jumps for the syscalls of `hot` ([`dispatch`]).
fn plain(refusals: &[SysRule], hot: &[i64]) -> Result<Vec<sock_filter>, SeccompError> {
    let mut p = prologue(refusals);
    p.extend(with_hot_jumps(hot, |keep| table(refusals, keep))?);
    if p.len() > 4096 {
        return Err(SeccompError::TooLong(p.len()));
    }
    Ok(p)
}

/// The listened program ([`SeccompProgram::install_listened`]), in four sections (after
/// the prologue, direct jumps for the syscalls of `hot` to the sections made of their
/// rules alone, [`dispatch`]):
/// 1. the prologue, as in the plain program;
/// 2. the table's rules of every syscall but the write calls ([`WRITE_CALLS`]), with
///    `SECCOMP_RET_USER_NOTIF` where the plain table answers `EPERM` (a refusal capsule
///    lists), falling through where it allows;
/// 3. the table's rules of the write calls (set-id modes), answering plain `EPERM`
///    (refused by the kernel, never sent to the supervisor), falling through otherwise;
/// 4. the write calls (opens whatever their flags) and `connect`:
///    `SECCOMP_RET_USER_NOTIF`, which the supervisor answers "continue" (the kernel then
///    decides, as without it); `fallocate` (unless it only frees) and `copy_file_range`:
///    `SECCOMP_RET_USER_NOTIF`, which the supervisor continues or refuses `ENOSPC` by the
///    disk guard's budget ([`budget_call`]); all else allowed.
///
/// So a notification of a write call always means "allowed by the table", and one of
/// any other syscall always means "refused": the supervisor tells them apart by the
/// syscall number alone and can never let through what the table refuses.
fn listened(
    refusals: &[SysRule],
    list_reads: bool,
    list_writes: bool,
    hot: &[i64],
) -> Result<Vec<sock_filter>, SeccompError> {
    let mut p = prologue(refusals);
    p.extend(with_hot_jumps(hot, |keep| {
        listened_sections(refusals, list_reads, list_writes, keep)
    })?);
    if p.len() > 4096 {
        return Err(SeccompError::TooLong(p.len()));
    }
    Ok(p)
}

/// Sections 2 to 4 of the listened program (see [`listened`]), of the syscalls `keep`
/// selects (all of them, or one hot syscall: [`dispatch`]); ends in a return.
fn listened_sections(
    refusals: &[SysRule],
    list_reads: bool,
    list_writes: bool,
    keep: &dyn Fn(i64) -> bool,
) -> Result<Vec<sock_filter>, SeccompError> {
    let notify = libc::SECCOMP_RET_USER_NOTIF;
    let eperm = libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & libc::SECCOMP_RET_DATA);
    let writes = |nr: i64| WRITE_CALLS.iter().any(|w| w.nr == nr);
    let mut p = Vec::new();
    p.extend(
        fall_through(table(refusals, |nr| !writes(nr) && keep(nr))?)
            .into_iter()
            .map(|i| match (i.code, i.k) {
                (BPF_RET_K, k) if k == eperm => stmt(BPF_RET_K, notify),
                _ => i,
            }),
    );
    p.extend(fall_through(table(refusals, |nr| writes(nr) && keep(nr))?));
    p.extend(observed_calls(list_reads, list_writes, true, keep));
    Ok(p)
}

/// The syscalls judged by their arguments that programs make often and that sit late in
/// the chain, jumped to directly ([`dispatch`]): the opens. (`ioctl` and `clone` come
/// early in the chain, which is in syscall number order: a jump would save nothing.)
#[cfg(target_arch = "x86_64")]
const HOT: &[i64] = &[sys::openat, sys::open];
#[cfg(not(target_arch = "x86_64"))]
const HOT: &[i64] = &[sys::openat];

/// The program after the prologue: jumps for the syscalls of `hot` to `body` made of
/// each one's rules alone, and `body` of every syscall for the rest ([`dispatch`]).
fn with_hot_jumps(
    hot: &[i64],
    body: impl Fn(&dyn Fn(i64) -> bool) -> Result<Vec<sock_filter>, SeccompError>,
) -> Result<Vec<sock_filter>, SeccompError> {
    let rest = body(&|_| true)?;
    let mut copies = Vec::with_capacity(hot.len());
    for &h in hot {
        copies.push((h as u32, body(&|nr| nr == h)?));
    }
    Ok(dispatch::dispatch(copies, rest))
}

/// The section of a listened program that sends the observed calls: the write calls
/// (with `list_reads` every open, else only those with write intent; the supervisor tells
/// a write from a read by the flags, which the kernel copied for it; without `list_writes`
/// and `list_reads` none: they are allowed here and Landlock and the mounts decide,
/// unseen), and `connect` when `connect`: `SECCOMP_RET_USER_NOTIF`; all else allowed.
fn observed_calls(
    list_reads: bool,
    list_writes: bool,
    connect: bool,
    keep: &dyn Fn(i64) -> bool,
) -> Vec<sock_filter> {
    let notify = libc::SECCOMP_RET_USER_NOTIF;
    let mut p = vec![stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR)];
    for w in WRITE_CALLS
        .iter()
        .filter(|w| (list_writes || list_reads) && keep(w.nr))
    {
        match w.flags {
            Some((arg, mask)) if !list_reads => p.extend([
                jump(BPF_JMP_JEQ_K, w.nr as u32, 0, 4),
                stmt(BPF_LD_W_ABS, arg_low(arg)),
                jump(BPF_JMP_JSET_K_ANY, mask, 0, 1),
                stmt(BPF_RET_K, notify),
                stmt(BPF_RET_K, RET_ALLOW),
            ]),
            _ => p.extend([
                jump(BPF_JMP_JEQ_K, w.nr as u32, 0, 1),
                stmt(BPF_RET_K, notify),
            ]),
        }
    }
    if connect && keep(OBSERVED_CONNECT) {
        p.extend([
            jump(BPF_JMP_JEQ_K, OBSERVED_CONNECT as u32, 0, 1),
            stmt(BPF_RET_K, notify),
        ]);
    }
    // the calls that allocate much at once, checked against the disk guard's budget:
    // `fallocate` unless it only frees (punching a hole, collapsing a range), and
    // `copy_file_range`
    if keep(BUDGET_FALLOCATE) {
        p.extend([
            jump(BPF_JMP_JEQ_K, BUDGET_FALLOCATE as u32, 0, 4),
            stmt(BPF_LD_W_ABS, arg_low(1)),
            jump(BPF_JMP_JSET_K_ANY, FALLOC_FREES, 1, 0),
            stmt(BPF_RET_K, notify),
            stmt(BPF_RET_K, RET_ALLOW),
        ]);
    }
    if keep(BUDGET_COPY_FILE_RANGE) {
        p.extend([
            jump(BPF_JMP_JEQ_K, BUDGET_COPY_FILE_RANGE as u32, 0, 1),
            stmt(BPF_RET_K, notify),
        ]);
    }
    p.push(stmt(BPF_RET_K, RET_ALLOW));
    p
}

/// `fallocate`, sent to the supervisor to be checked against the disk guard's budget
/// (unless its mode only frees).
#[allow(clippy::unnecessary_cast)] // c_long is i64 on 64-bit targets
pub const BUDGET_FALLOCATE: i64 = libc::SYS_fallocate as i64;
/// `copy_file_range`, sent to the supervisor to be checked against the disk guard's
/// budget.
#[allow(clippy::unnecessary_cast)]
pub const BUDGET_COPY_FILE_RANGE: i64 = libc::SYS_copy_file_range as i64;
/// `fallocate` modes that only free space (`FALLOC_FL_PUNCH_HOLE`,
/// `FALLOC_FL_COLLAPSE_RANGE`): not sent.
const FALLOC_FREES: u32 = 0x02 | 0x08;

/// Is `nr` a call the filter sends to be checked against the disk guard's budget
/// (continued, or refused `ENOSPC`)?
pub fn budget_call(nr: i64) -> bool {
    nr == BUDGET_FALLOCATE || nr == BUDGET_COPY_FILE_RANGE
}

/// A filter that only observes, stacked on a program of someone else's (an OCI
/// bundle's): the write calls with write intent of the native architecture are sent to
/// the listener, everything else allowed, so the other filter alone decides (the kernel
/// takes the stricter answer of the two: a call it refuses is never sent). Installed on
/// the calling thread; returns the listener (close-on-exec), or `None` where the kernel
/// cannot answer "continue" (before 5.5). Needs `no_new_privs` or `CAP_SYS_ADMIN`.
pub fn install_observer() -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    use std::os::fd::FromRawFd;
    if !continue_supported() {
        return Ok(None);
    }
    // another architecture: not observed
    let mut p = arch_check(RET_ALLOW);
    p.extend(observed_calls(false, true, false, &|_| true));
    let fd = install_bpf(&p, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER)?;
    // SAFETY: the kernel returned a new descriptor, ours to own.
    Ok(Some(unsafe {
        std::os::fd::OwnedFd::from_raw_fd(fd as i32)
    }))
}

/// Where a write call's paths are: `(dirfd argument, path argument)`, the dirfd `None`
/// for the calls relative to the working directory.
pub type PathArg = (Option<u8>, u8);

/// A path-taking call with write intent, observed (never decided) by the supervisor.
#[derive(Debug, Clone, Copy)]
pub struct WriteCall {
    pub name: &'static str,
    pub nr: i64,
    /// `(argument, mask)`: write intent only when the flags argument has one of these
    /// bits (`openat`'s `O_WRONLY|O_RDWR|O_CREAT|O_TRUNC`), a read otherwise; `None`:
    /// always a write.
    pub flags: Option<(u8, u32)>,
    /// The paths written (a rename writes two).
    pub paths: &'static [PathArg],
    /// Does it make a new name (so the grant is its folder)?
    pub creates: bool,
}

const OPEN_WRITE: u32 = (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u32;

macro_rules! write_call {
    ($name:ident, $flags:expr, $paths:expr, $creates:expr) => {
        WriteCall {
            name: stringify!($name),
            nr: libc::$name as i64,
            flags: $flags,
            paths: $paths,
            creates: $creates,
        }
    };
}

/// The write calls the listened filter sends to the supervisor.
#[cfg(target_arch = "x86_64")]
pub const WRITE_CALLS: &[WriteCall] = &[
    write_call!(SYS_openat, Some((2, OPEN_WRITE)), &[(Some(0), 1)], false),
    write_call!(SYS_open, Some((1, OPEN_WRITE)), &[(None, 0)], false),
    write_call!(SYS_creat, None, &[(None, 0)], true),
    write_call!(SYS_mkdirat, None, &[(Some(0), 1)], true),
    write_call!(SYS_mkdir, None, &[(None, 0)], true),
    write_call!(SYS_mknodat, None, &[(Some(0), 1)], true),
    write_call!(SYS_mknod, None, &[(None, 0)], true),
    write_call!(SYS_unlinkat, None, &[(Some(0), 1)], false),
    write_call!(SYS_unlink, None, &[(None, 0)], false),
    write_call!(SYS_rmdir, None, &[(None, 0)], false),
    write_call!(SYS_renameat2, None, &[(Some(0), 1), (Some(2), 3)], true),
    write_call!(SYS_renameat, None, &[(Some(0), 1), (Some(2), 3)], true),
    write_call!(SYS_rename, None, &[(None, 0), (None, 1)], true),
    write_call!(SYS_linkat, None, &[(Some(2), 3)], true),
    write_call!(SYS_link, None, &[(None, 1)], true),
    write_call!(SYS_symlinkat, None, &[(Some(1), 2)], true),
    write_call!(SYS_symlink, None, &[(None, 1)], true),
    write_call!(SYS_truncate, None, &[(None, 0)], false),
    write_call!(SYS_fchmodat, None, &[(Some(0), 1)], false),
    write_call!(SYS_chmod, None, &[(None, 0)], false),
    write_call!(SYS_fchownat, None, &[(Some(0), 1)], false),
    write_call!(SYS_chown, None, &[(None, 0)], false),
    write_call!(SYS_lchown, None, &[(None, 0)], false),
];
/// The write calls the listened filter sends to the supervisor.
#[cfg(not(target_arch = "x86_64"))]
pub const WRITE_CALLS: &[WriteCall] = &[
    write_call!(SYS_openat, Some((2, OPEN_WRITE)), &[(Some(0), 1)], false),
    write_call!(SYS_mkdirat, None, &[(Some(0), 1)], true),
    write_call!(SYS_mknodat, None, &[(Some(0), 1)], true),
    write_call!(SYS_unlinkat, None, &[(Some(0), 1)], false),
    write_call!(SYS_renameat2, None, &[(Some(0), 1), (Some(2), 3)], true),
    write_call!(SYS_renameat, None, &[(Some(0), 1), (Some(2), 3)], true),
    write_call!(SYS_linkat, None, &[(Some(2), 3)], true),
    write_call!(SYS_symlinkat, None, &[(Some(1), 2)], true),
    write_call!(SYS_truncate, None, &[(None, 0)], false),
    write_call!(SYS_fchmodat, None, &[(Some(0), 1)], false),
    write_call!(SYS_fchownat, None, &[(Some(0), 1)], false),
];

/// `connect`, observed like the write calls (the kernel decides; the supervisor names
/// what the sandbox's network refuses).
#[allow(clippy::unnecessary_cast)] // c_long is i64 on 64-bit targets
pub const OBSERVED_CONNECT: i64 = libc::SYS_connect as i64;

/// Is `nr` a call the listened filter sends only to be observed (continued)? Never one
/// the table refuses outright (see the tests).
pub fn observed(nr: i64) -> bool {
    nr == OBSERVED_CONNECT || write_call(nr).is_some() || budget_call(nr)
}

/// The write call of number `nr`, if it is one.
pub fn write_call(nr: i64) -> Option<&'static WriteCall> {
    WRITE_CALLS.iter().find(|w| w.nr == nr)
}

impl SeccompProgram {
    /// Build the filter for the native architecture. Allocates; call before forking or in
    /// a child that may still allocate.
    pub fn build() -> Result<Self, SeccompError> {
        Self::build_for(false, true)
    }

    /// [`SeccompProgram::build`], with a listened program that sends every open to the
    /// supervisor (`list_reads`), or only the opens with write intent, or (neither
    /// `list_reads` nor `list_writes`) no path call at all: the refusals of the table and
    /// `connect`s only.
    pub fn build_for(list_reads: bool, list_writes: bool) -> Result<Self, SeccompError> {
        // ENOSYS answers are the prologue's (seccompiler's table has one match action)
        let refusals = self::rules();
        let bpf = plain(&refusals, HOT)?;
        let mut refused: Vec<&'static str> = refused_syscalls().map(|(n, _)| n).collect();
        refused.sort_unstable();
        let report = SeccompReport {
            arch: std::env::consts::ARCH,
            refused,
            refused_when: vec![
                "clone with CLONE_NEWUSER",
                "unshare with CLONE_NEWUSER",
                "ioctl TIOCSTI (request compared on its low 32 bits)",
                "ioctl TIOCLINUX (request compared on its low 32 bits)",
                "personality other than PER_LINUX, PER_LINUX32, UNAME26 or a query",
                "chmod/fchmod/fchmodat/fchmodat2/open/openat/creat/mknod/mknodat with a set-user-ID or set-group-ID bit in the mode (such a file would be set-id on the host)",
            ],
            enosys: vec!["clone3", "openat2 (its mode cannot be inspected; libc falls back to openat)"],
            foreign_abis: if cfg!(target_arch = "x86_64") {
                vec![
                    "i386 (int 0x80, sysenter): process killed",
                    "x32 (syscall number with bit 0x40000000): process killed",
                ]
            } else {
                vec!["any architecture but the native one: process killed"]
            },
            allowed_notes: vec![
                "ptrace: allowed for debuggers; host processes are out of reach (pid namespace, and Landlock refuses ptrace outside its domain)",
            ],
            instructions: bpf.len(),
        };
        let listened = listened(&refusals, list_reads, list_writes, HOT)?;
        Ok(Self {
            bpf,
            listened,
            listen: continue_supported(),
            report,
        })
    }

    /// The program an exec installs when capsule lists refusals (for tests).
    pub fn listened_instructions(&self) -> &[sock_filter] {
        &self.listened
    }

    /// Install the listened filter ([`SeccompProgram::listened_instructions`]) on the
    /// calling thread and return its listener (close-on-exec); on a kernel without user
    /// notification (before 5.0) install the plain filter and return `None`. No
    /// allocation: safe between `fork` and `execve`.
    pub fn install_listened(&self) -> Result<Option<std::os::fd::OwnedFd>, SeccompError> {
        use std::os::fd::FromRawFd;
        if !self.listen {
            return self.install().map(|()| None);
        }
        match install_bpf(&self.listened, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER) {
            // SAFETY: the kernel returned a new descriptor, ours to own.
            Ok(fd) => Ok(Some(unsafe {
                std::os::fd::OwnedFd::from_raw_fd(fd as i32)
            })),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
                self.install().map(|()| None)
            }
            Err(e) => Err(SeccompError::Install(e)),
        }
    }

    /// What this filter does.
    pub fn report(&self) -> &SeccompReport {
        &self.report
    }

    /// The BPF program (for inspection and tests).
    pub fn instructions(&self) -> &[sock_filter] {
        &self.bpf
    }

    /// Install the filter on the calling thread. One `seccomp(2)` call, no allocation:
    /// safe between `fork` and `execve`. Requires `no_new_privs` (or `CAP_SYS_ADMIN`);
    /// otherwise the kernel answers `EACCES`.
    pub fn install(&self) -> Result<(), SeccompError> {
        install_bpf(&self.bpf, 0)
            .map(|_| ())
            .map_err(SeccompError::Install)
    }
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, bpf)`: its return value.
fn install_bpf(bpf: &[sock_filter], flags: libc::c_ulong) -> std::io::Result<libc::c_long> {
    set_mode_filter(bpf.as_ptr(), bpf.len(), flags)
}

/// Install a compiled program (an OCI bundle's) on the calling thread, with `flags`
/// (`SECCOMP_FILTER_FLAG_*`). One system call, no allocation.
pub fn install_program(bpf: &[sock_filter], flags: libc::c_ulong) -> std::io::Result<()> {
    install_bpf(bpf, flags).map(drop)
}

/// The one `seccomp(SECCOMP_SET_MODE_FILTER)` call every filter goes through.
fn set_mode_filter(
    bpf: *const libc::sock_filter,
    len: usize,
    flags: libc::c_ulong,
) -> std::io::Result<libc::c_long> {
    let prog = libc::sock_fprog {
        len: len as libc::c_ushort,
        filter: bpf as *mut libc::sock_filter,
    };
    // SAFETY: prog points to a live, correctly laid out BPF program of `len`
    // instructions; the kernel copies it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(rc)
}

/// The socketpair a filter's listener travels on: (the supervisor's end, the sandbox's
/// end), both close-on-exec.
pub fn listener_channel() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(std::io::Error::from)
}

/// Send `listener` on the sandbox's end `sock` (from the process that installed it).
/// Never raises `SIGPIPE` (the supervisor's end may be gone: then the listener closes
/// with the sender's copy, and the kernel answers what the filter sends `ENOSYS`).
pub fn send_listener(
    sock: std::os::fd::RawFd,
    listener: std::os::fd::RawFd,
) -> std::io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds = [listener];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let iov = [std::io::IoSlice::new(b"L")];
    sendmsg::<()>(sock, &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None)
        .map(|_| ())
        .map_err(std::io::Error::from)
}

/// Build and install the filter on the calling thread; returns what was installed.
pub fn install() -> Result<SeccompReport, SeccompError> {
    let p = SeccompProgram::build()?;
    p.install()?;
    Ok(p.report)
}

pub mod bpf;
mod dispatch;

#[cfg(test)]
mod tests;

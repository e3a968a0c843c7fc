//! The classic-BPF every seccomp program of capsule is emitted in, one place for both
//! front ends: the opcodes and `seccomp_data` offsets, the check of the architecture
//! every program starts with ([`arch_check`]: a foreign ABI, and on x86_64 the x32 one,
//! answered as the caller says), and rules whose argument conditions compare all 64
//! bits or the low 32 ([`rule`]: an OCI bundle's `linux.seccomp`, compiled by
//! `crate::plan::container::seccomp`). capsule's own table is emitted by `seccompiler`
//! between the sections built here ([`super`]).

/// The kernel's instruction (`seccompiler`'s has the same layout and is converted).
pub use libc::sock_filter;

/// `BPF_LD | BPF_W | BPF_ABS`: load a word of `seccomp_data`.
pub const LD_W_ABS: u16 = 0x20;
/// `BPF_ALU | BPF_AND | BPF_K`.
pub const AND_K: u16 = 0x54;
/// `BPF_JMP | BPF_JA`: an unconditional jump of `k`.
pub const JA: u16 = 0x05;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
pub const JEQ_K: u16 = 0x15;
/// `BPF_JMP | BPF_JGT | BPF_K`.
pub const JGT_K: u16 = 0x25;
/// `BPF_JMP | BPF_JGE | BPF_K`.
pub const JGE_K: u16 = 0x35;
/// `BPF_JMP | BPF_JSET | BPF_K`.
pub const JSET_K: u16 = 0x45;
/// `BPF_RET | BPF_K`.
pub const RET_K: u16 = 0x06;

/// Offset of the syscall number in `seccomp_data`.
pub const DATA_NR: u32 = 0;
/// Offset of the architecture in `seccomp_data`.
pub const DATA_ARCH: u32 = 4;

pub const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
pub const RET_KILL_PROCESS: u32 = libc::SECCOMP_RET_KILL_PROCESS;

#[cfg(target_arch = "x86_64")]
pub const NATIVE_AUDIT_ARCH: u32 = 62 | 0x8000_0000 | 0x4000_0000; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
pub const NATIVE_AUDIT_ARCH: u32 = 183 | 0x8000_0000 | 0x4000_0000; // AUDIT_ARCH_AARCH64
                                                                    // other architectures are not supported: the filters' builders say so
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const NATIVE_AUDIT_ARCH: u32 = 0;
/// The x32 ABI marks its syscall numbers with this bit.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

pub fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

pub fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// `errno` as a seccomp answer.
pub fn ret_errno(errno: u32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (errno & libc::SECCOMP_RET_DATA)
}

/// Offset of the low 32 bits of argument `i` in `seccomp_data`.
pub fn arg_low(i: u8) -> u32 {
    let base = 16 + 8 * i as u32;
    if cfg!(target_endian = "little") {
        base
    } else {
        base + 4
    }
}

/// Offset of the high 32 bits of argument `i` in `seccomp_data`.
pub fn arg_high(i: u8) -> u32 {
    let base = 16 + 8 * i as u32;
    if cfg!(target_endian = "little") {
        base + 4
    } else {
        base
    }
}

/// The start of every program: a call of another architecture than the native one
/// (and, on x86_64, of the x32 ABI: its number has [`X32_SYSCALL_BIT`]) is answered
/// `foreign` (a kill for a filter that decides, an allow for one that only observes);
/// the syscall number is left loaded for what follows.
pub fn arch_check(foreign: u32) -> Vec<sock_filter> {
    let mut p = vec![
        stmt(LD_W_ABS, DATA_ARCH),
        // native arch: skip the answer
        jump(JEQ_K, NATIVE_AUDIT_ARCH, 1, 0),
        stmt(RET_K, foreign),
        stmt(LD_W_ABS, DATA_NR),
    ];
    if cfg!(target_arch = "x86_64") {
        p.extend([
            // x32 bit set: fall into the answer, else skip it
            jump(JSET_K, X32_SYSCALL_BIT, 0, 1),
            stmt(RET_K, foreign),
        ]);
    }
    p
}

/// How an argument is compared.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// `arg & value == value_two`.
    MaskedEq,
}

/// One condition on argument `index`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Cond {
    pub index: u8,
    pub op: Op,
    pub value: u64,
    /// The expected value of a [`Op::MaskedEq`].
    pub value_two: u64,
}

// jump targets while building a rule: a relative skip, or past the rule ("fail")
#[derive(Clone, Copy)]
enum T {
    Rel(u8),
    Fail,
}

struct Ins {
    code: u16,
    k: u32,
    jt: T,
    jf: T,
}

fn ld(off: u32) -> Ins {
    Ins {
        code: LD_W_ABS,
        k: off,
        jt: T::Rel(0),
        jf: T::Rel(0),
    }
}

fn j(code: u16, k: u32, jt: T, jf: T) -> Ins {
    Ins { code, k, jt, jf }
}

/// The instructions of one condition, all 64 bits compared (high word, then low): all
/// pass: fall through; else go past the rule.
fn cond(c: &Cond, out: &mut Vec<Ins>) {
    let (lo_off, hi_off) = (arg_low(c.index), arg_high(c.index));
    let (vhi, vlo) = ((c.value >> 32) as u32, c.value as u32);
    let (ehi, elo) = ((c.value_two >> 32) as u32, c.value_two as u32);
    use T::*;
    let and = |k| Ins {
        code: AND_K,
        k,
        jt: Rel(0),
        jf: Rel(0),
    };
    match c.op {
        Op::Eq => out.extend([
            ld(hi_off),
            j(JEQ_K, vhi, Rel(0), Fail),
            ld(lo_off),
            j(JEQ_K, vlo, Rel(0), Fail),
        ]),
        Op::Ne => out.extend([
            ld(hi_off),
            j(JEQ_K, vhi, Rel(0), Rel(2)),
            ld(lo_off),
            j(JEQ_K, vlo, Fail, Rel(0)),
        ]),
        Op::MaskedEq => out.extend([
            ld(hi_off),
            and(vhi),
            j(JEQ_K, ehi, Rel(0), Fail),
            ld(lo_off),
            and(vlo),
            j(JEQ_K, elo, Rel(0), Fail),
        ]),
        Op::Gt | Op::Ge => out.extend([
            ld(hi_off),
            j(JGT_K, vhi, Rel(3), Rel(0)),
            j(JEQ_K, vhi, Rel(0), Fail),
            ld(lo_off),
            j(
                if c.op == Op::Gt { JGT_K } else { JGE_K },
                vlo,
                Rel(0),
                Fail,
            ),
        ]),
        Op::Lt | Op::Le => out.extend([
            ld(hi_off),
            j(JGT_K, vhi, Fail, Rel(0)),
            j(JEQ_K, vhi, Rel(0), Rel(2)),
            ld(lo_off),
            j(
                if c.op == Op::Lt { JGE_K } else { JGT_K },
                vlo,
                Fail,
                Rel(0),
            ),
        ]),
    }
}

/// One rule, with the syscall number loaded: "syscall `nr` whose arguments meet every
/// condition of `conds` is answered `action`"; any other call goes on past it, the number
/// loaded again (the conditions load the arguments). `None` when the rule is too long
/// for a conditional jump over it.
pub fn rule(nr: u32, conds: &[Cond], action: u32) -> Option<Vec<sock_filter>> {
    let mut body: Vec<Ins> = Vec::new();
    for c in conds {
        cond(c, &mut body);
    }
    body.push(Ins {
        code: RET_K,
        k: action,
        jt: T::Rel(0),
        jf: T::Rel(0),
    });
    // the next rule starts by loading the number again (conditions load args)
    let reload = !conds.is_empty();
    let len = body.len();
    if len > 250 {
        return None;
    }
    let mut out = vec![jump(JEQ_K, nr, 0, len as u8 + reload as u8)];
    for (i, ins) in body.iter().enumerate() {
        // the Fail target: the instruction after the body (the reload)
        let to_fail = (len - 1 - i) as u8;
        let t = |t: T| match t {
            T::Rel(n) => n,
            T::Fail => to_fail,
        };
        out.push(jump(ins.code, ins.k, t(ins.jt), t(ins.jf)));
    }
    if reload {
        out.push(stmt(LD_W_ABS, DATA_NR));
    }
    Some(out)
}

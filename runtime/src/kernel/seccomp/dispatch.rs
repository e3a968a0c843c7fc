//! Direct jumps to the rules of the few syscalls that programs make often and that the
//! filter judges by their arguments (`openat` above all).
//!
//! The kernel skips the filter for a syscall the filter allows whatever its arguments
//! (its per-filter action cache), so `read`, `close` or `fstat` cost nothing here. A
//! syscall judged by its arguments runs the program every time, and the table is a linear
//! chain: `openat` walked ~130 instructions (~0.18 us of every open, measured) before
//! reaching its own rules. So the program starts with a test of each hot syscall's number,
//! jumping to a copy of the program made from that syscall's rules alone; every other
//! syscall falls through to the whole program, as before.
//!
//! The copy answers as the whole program does for that syscall: each section of the
//! program is a chain in which a syscall's rules are looked at only for its own number,
//! so leaving out the other syscalls' rules changes no answer for this one (the tests
//! compare both programs on every syscall number and a spread of arguments).

use super::bpf::{
    sock_filter, DATA_NR as SECCOMP_DATA_NR, JA as BPF_JMP_JA, JEQ_K as BPF_JMP_JEQ_K,
    LD_W_ABS as BPF_LD_W_ABS,
};

/// `ld nr`, then for each `(nr, copy)` of `hot` "if the number is `nr`, go to `copy`",
/// then `rest` (the whole program, taken by every other syscall), then the copies. Each
/// of `rest` and the copies must end in a return (never fall off its end).
pub(super) fn dispatch(
    hot: Vec<(u32, Vec<sock_filter>)>,
    rest: Vec<sock_filter>,
) -> Vec<sock_filter> {
    let header = 1 + 2 * hot.len();
    let mut p =
        Vec::with_capacity(header + rest.len() + hot.iter().map(|h| h.1.len()).sum::<usize>());
    p.push(ins(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR));
    let mut target = header + rest.len();
    for (i, (nr, copy)) in hot.iter().enumerate() {
        // the `ja` of this entry is at header index 2 + 2i; its offset counts from the next
        let ja_at = 2 + 2 * i;
        p.push(ins(BPF_JMP_JEQ_K, 0, 1, *nr));
        p.push(ins(BPF_JMP_JA, 0, 0, (target - ja_at - 1) as u32));
        target += copy.len();
    }
    p.extend(rest);
    for (_, copy) in hot {
        p.extend(copy);
    }
    p
}

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

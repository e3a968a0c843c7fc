//! `linux.seccomp` of config.json compiled to a BPF program (in the kernel stack's BPF,
//! `crate::kernel::seccomp::bpf`): the filter the bundle asks for (capsule's own filter of `capsule exec` is not added: the bundle decides, as with
//! runc). Compiling is pure; the OCI front end installs the program as the container
//! process's last step before `execve`.
//!
//! The program checks the architecture (anything but the native one kills the process,
//! stricter than a profile that lists x86 or x32 too), then tries each rule in order:
//! the first rule whose system call and argument conditions match decides; otherwise the
//! default action. Conditions compare all 64 bits (two 32-bit words). As runc does, the
//! conditions of one rule hold together, except when one argument has several: then each
//! is a rule of its own. System calls this kernel's table does not name are skipped (as
//! runc and libseccomp do), and listed in the log.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Seccomp {
    pub default_action: String,
    pub default_errno_ret: Option<u32>,
    #[serde(default)]
    pub architectures: Vec<String>,
    #[serde(default)]
    pub flags: Vec<String>,
    pub listener_path: Option<String>,
    pub listener_metadata: Option<String>,
    #[serde(default)]
    pub syscalls: Vec<Syscall>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Syscall {
    pub names: Vec<String>,
    pub action: String,
    pub errno_ret: Option<u32>,
    #[serde(default)]
    pub args: Vec<Arg>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Arg {
    pub index: u32,
    pub value: u64,
    #[serde(default)]
    pub value_two: u64,
    pub op: String,
}

#[cfg(target_arch = "x86_64")]
#[path = "syscalls_x86_64.rs"]
mod table;
#[cfg(not(target_arch = "x86_64"))]
mod table {
    pub const SYSCALLS: &[(&str, u32)] = &[];
}

// emitted in the kernel stack's BPF (its names kept short here)
use crate::kernel::seccomp::bpf::{self, Op, RET_K as RET, RET_KILL_PROCESS};
#[cfg(test)]
use crate::kernel::seccomp::bpf::{
    AND_K as AND, JEQ_K as JEQ, JGE_K as JGE, JGT_K as JGT, JSET_K as JSET, LD_W_ABS as LD,
};
#[cfg(test)]
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;

fn action(name: &str, errno: Option<u32>, default_errno: u32) -> Result<u32, String> {
    Ok(match name {
        "SCMP_ACT_KILL" | "SCMP_ACT_KILL_THREAD" => 0,
        "SCMP_ACT_KILL_PROCESS" => RET_KILL_PROCESS,
        "SCMP_ACT_TRAP" => 0x0003_0000,
        "SCMP_ACT_ERRNO" => 0x0005_0000 | (errno.unwrap_or(default_errno) & 0xffff),
        "SCMP_ACT_TRACE" => 0x7ff0_0000 | (errno.unwrap_or(default_errno) & 0xffff),
        "SCMP_ACT_LOG" => 0x7ffc_0000,
        "SCMP_ACT_ALLOW" => 0x7fff_0000,
        other => return Err(format!("action {other:?} is not supported")),
    })
}

/// What cannot be honoured, naming the field.
pub fn check(s: &Seccomp) -> Result<(), String> {
    if table::SYSCALLS.is_empty() {
        return Err("linux.seccomp: not supported on this architecture yet".into());
    }
    if s.listener_path.is_some() || s.listener_metadata.is_some() {
        return Err(
            "linux.seccomp.listenerPath: seccomp user notification is not supported".into(),
        );
    }
    action(&s.default_action, s.default_errno_ret, libc::EPERM as u32)
        .map_err(|e| format!("linux.seccomp.defaultAction: {e}"))?;
    for f in &s.flags {
        if flag(f).is_none() {
            return Err(format!("linux.seccomp.flags: {f:?} is not supported"));
        }
    }
    for (i, r) in s.syscalls.iter().enumerate() {
        action(&r.action, r.errno_ret, libc::EPERM as u32)
            .map_err(|e| format!("linux.seccomp.syscalls[{i}].action: {e}"))?;
        for a in &r.args {
            if a.index > 5 {
                return Err(format!(
                    "linux.seccomp.syscalls[{i}].args: index {} (0 to 5)",
                    a.index
                ));
            }
            if op_of(&a.op).is_none() {
                return Err(format!(
                    "linux.seccomp.syscalls[{i}].args: operator {:?} is not supported",
                    a.op
                ));
            }
        }
    }
    Ok(())
}

fn flag(f: &str) -> Option<libc::c_ulong> {
    Some(match f {
        "SECCOMP_FILTER_FLAG_TSYNC" => 1,
        "SECCOMP_FILTER_FLAG_LOG" => 2,
        "SECCOMP_FILTER_FLAG_SPEC_ALLOW" => 4,
        _ => return None,
    })
}

fn op_of(s: &str) -> Option<Op> {
    Some(match s {
        "SCMP_CMP_EQ" => Op::Eq,
        "SCMP_CMP_NE" => Op::Ne,
        "SCMP_CMP_LT" => Op::Lt,
        "SCMP_CMP_LE" => Op::Le,
        "SCMP_CMP_GT" => Op::Gt,
        "SCMP_CMP_GE" => Op::Ge,
        "SCMP_CMP_MASKED_EQ" => Op::MaskedEq,
        _ => return None,
    })
}

/// A compiled filter.
#[derive(Debug, Clone)]
pub struct Program {
    pub bpf: Vec<bpf::sock_filter>,
    pub flags: libc::c_ulong,
    /// Names the kernel's table does not have (skipped).
    pub unknown: Vec<String>,
}

fn nr_of(name: &str) -> Option<u32> {
    table::SYSCALLS
        .binary_search_by(|(n, _)| n.cmp(&name))
        .ok()
        .map(|i| table::SYSCALLS[i].1)
}

/// Compile (allocates: done while the plan is made, long before the process's last steps).
pub fn compile(s: &Seccomp) -> Result<Program, String> {
    check(s)?;
    let default_errno = s.default_errno_ret.unwrap_or(libc::EPERM as u32);
    let default = action(&s.default_action, s.default_errno_ret, libc::EPERM as u32)?;
    let mut bpf = bpf::arch_check(RET_KILL_PROCESS);
    let mut unknown = Vec::new();
    for r in &s.syscalls {
        let act = action(&r.action, r.errno_ret, default_errno)?;
        // rules of conditions: together, or one each when an argument has several
        let mut counts = [0u8; 6];
        for a in &r.args {
            counts[a.index as usize] += 1;
        }
        let conds: Vec<bpf::Cond> = r
            .args
            .iter()
            .map(|a| bpf::Cond {
                index: a.index as u8,
                op: op_of(&a.op).unwrap_or(Op::Eq),
                value: a.value,
                value_two: a.value_two,
            })
            .collect();
        let groups: Vec<&[bpf::Cond]> = if counts.iter().any(|c| *c > 1) {
            conds.chunks(1).collect()
        } else {
            vec![&conds[..]]
        };
        for name in &r.names {
            let Some(nr) = nr_of(name) else {
                if !unknown.contains(name) {
                    unknown.push(name.clone());
                }
                continue;
            };
            for g in &groups {
                let rule = bpf::rule(nr, g, act)
                    .ok_or_else(|| format!("linux.seccomp: the rule of {name} is too long"))?;
                bpf.extend(rule);
            }
        }
    }
    bpf.push(bpf::stmt(RET, default));
    if bpf.len() > 4096 {
        return Err(format!(
            "linux.seccomp: {} instructions, more than the kernel's 4096",
            bpf.len()
        ));
    }
    let flags = s.flags.iter().filter_map(|f| flag(f)).fold(0, |a, b| a | b);
    Ok(Program {
        bpf,
        flags,
        unknown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_knows_the_usual_calls() {
        assert!(table::SYSCALLS.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(nr_of("read"), Some(libc::SYS_read as u32));
        assert_eq!(nr_of("mkdirat"), Some(libc::SYS_mkdirat as u32));
        assert_eq!(nr_of("no_such_call"), None);
    }

    /// Runs the program on one call, as the kernel would (a small BPF interpreter).
    fn eval(p: &Program, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = vec![0u8; 64];
        data[0..4].copy_from_slice(&nr.to_ne_bytes());
        data[4..8].copy_from_slice(&AUDIT_ARCH_X86_64.to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let f = p.bpf[pc];
            pc += 1;
            let jump = |c: bool| if c { f.jt as usize } else { f.jf as usize };
            match f.code {
                LD => {
                    acc =
                        u32::from_ne_bytes(data[f.k as usize..f.k as usize + 4].try_into().unwrap())
                }
                AND => acc &= f.k,
                JEQ => pc += jump(acc == f.k),
                JGT => pc += jump(acc > f.k),
                JGE => pc += jump(acc >= f.k),
                JSET => pc += jump(acc & f.k != 0),
                RET => return f.k,
                c => panic!("unknown code {c:#x}"),
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn rules_decide_in_order_and_compare_64_bits() {
        let s: Seccomp = serde_json::from_str(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
              {"names":["read","write","no_such_call"],"action":"SCMP_ACT_ALLOW"},
              {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":8,"op":"SCMP_CMP_EQ"}]},
              {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":4294967295,"op":"SCMP_CMP_EQ"}]},
              {"names":["clone"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":2114060288,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}]},
              {"names":["kill"],"action":"SCMP_ACT_ERRNO","errnoRet":38,"args":[{"index":1,"value":9,"op":"SCMP_CMP_GE"},{"index":0,"value":100,"op":"SCMP_CMP_LT"}]},
              {"names":["mkdir"],"action":"SCMP_ACT_KILL_PROCESS","args":[{"index":1,"value":511,"op":"SCMP_CMP_NE"}]}
            ]}"#,
        )
        .unwrap();
        let p = compile(&s).unwrap();
        assert_eq!(p.unknown, ["no_such_call"]);
        let allow = 0x7fff_0000;
        let eperm = 0x0005_0000 | libc::EPERM as u32;
        // (syscall, its first two arguments, the answer)
        let cases: &[(i64, [u64; 2], u32)] = &[
            (libc::SYS_read, [0, 0], allow),
            (libc::SYS_openat, [0, 0], eperm),
            (libc::SYS_personality, [8, 0], allow),
            (libc::SYS_personality, [0xffff_ffff, 0], allow),
            // the high word counts
            (libc::SYS_personality, [(1 << 32) | 8, 0], eperm),
            (libc::SYS_clone, [libc::SIGCHLD as u64, 0], allow),
            (libc::SYS_clone, [libc::CLONE_NEWUSER as u64, 0], eperm),
            (libc::SYS_kill, [5, 9], 0x0005_0000 | 38),
            (libc::SYS_kill, [5, 8], eperm),
            (libc::SYS_kill, [100, 9], eperm),
            (libc::SYS_kill, [1 << 32, 15], eperm),
            (libc::SYS_mkdir, [0, 0o777], eperm),
            (libc::SYS_mkdir, [0, 0o700], RET_KILL_PROCESS),
        ];
        for &(nr, [a0, a1], want) in cases {
            let got = eval(&p, nr as u32, [a0, a1, 0, 0, 0, 0]);
            assert_eq!(got, want, "syscall {nr} ({a0:#x}, {a1:#o})");
        }
    }

    #[test]
    fn what_it_cannot_do_is_named() {
        let s: Seccomp = serde_json::from_str(r#"{"defaultAction":"SCMP_ACT_NOTIFY"}"#).unwrap();
        assert!(check(&s).unwrap_err().contains("defaultAction"));
        let s: Seccomp =
            serde_json::from_str(r#"{"defaultAction":"SCMP_ACT_ALLOW","listenerPath":"/x"}"#)
                .unwrap();
        assert!(check(&s).unwrap_err().contains("listenerPath"));
    }
}

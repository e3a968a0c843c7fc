//! The limits written into one of a container's cgroup directories, at `create` and at
//! `update`, as runc's cgroup drivers write them: a value of 0 (or an empty cpuset) is
//! "leave as it is", `-1` is "no limit"; v1 in runc's order of controllers (cpuset,
//! memory, cpu, pids), memory and swap in the order the kernel accepts (swap first
//! when the new swap limit is above the current memory limit), a CFS period the kernel
//! refuses before the quota is written retried after it, cpu.shares read back; v2 in its
//! files (`memory.max`, `memory.low`, `memory.swap.max` without the memory part,
//! `cpu.weight` from shares, `cpu.max` keeping the quota or period not given, `pids.max`,
//! `cpuset.*`). The freezer is never touched: an update leaves a paused container paused.

use std::io;

/// What to write: runc's `configs.Resources` subset (0 / empty: unchanged).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    pub memory: i64,
    pub memory_reservation: i64,
    pub memory_swap: i64,
    pub cpu_shares: u64,
    pub cpu_quota: i64,
    pub cpu_period: u64,
    pub cpu_rt_runtime: i64,
    pub cpu_rt_period: u64,
    pub cpuset_cpus: String,
    pub cpuset_mems: String,
    pub pids: i64,
}

/// The files of one cgroup directory (a trait so that the order of writes is tested
/// without a cgroupfs).
pub trait Files {
    fn exists(&self, file: &str) -> bool;
    fn read(&self, file: &str) -> io::Result<String>;
    fn write(&mut self, file: &str, value: &str) -> io::Result<()>;
}

/// The directory of one hierarchy: its controllers (empty: the v2 hierarchy).
pub struct Dir<'a> {
    pub controllers: &'a [String],
    pub v2: bool,
}

impl Dir<'_> {
    fn has(&self, c: &str) -> bool {
        self.controllers.iter().any(|x| x == c)
    }
}

fn put(f: &mut dyn Files, file: &str, value: &str, field: &str) -> Result<(), String> {
    f.write(file, value).map_err(|e| {
        format!(
            "linux.resources.{field}: writing {value:?} to {file}: {}",
            crate::kernel::sys::os_error(&e)
        )
    })
}

fn read_u64(f: &dyn Files, file: &str) -> Option<u64> {
    f.read(file).ok()?.trim().parse().ok()
}

/// Write `l` into the directory `d` of files `f`.
pub fn apply(d: &Dir<'_>, f: &mut dyn Files, l: &Limits) -> Result<(), String> {
    if d.v2 {
        return apply_v2(f, l);
    }
    if d.has("cpuset") {
        if !l.cpuset_cpus.is_empty() {
            put(f, "cpuset.cpus", &l.cpuset_cpus, "cpu.cpus")?;
        }
        if !l.cpuset_mems.is_empty() {
            put(f, "cpuset.mems", &l.cpuset_mems, "cpu.mems")?;
        }
    }
    if d.has("memory") {
        memory_v1(f, l)?;
    }
    if d.has("cpu") {
        cpu_v1(f, l)?;
    }
    if d.has("pids") && l.pids != 0 {
        put(f, "pids.max", &pids_value(l.pids), "pids.limit")?;
    }
    Ok(())
}

fn pids_value(n: i64) -> String {
    if n > 0 {
        n.to_string()
    } else {
        "max".into()
    }
}

const MEMSW: &str = "memory.memsw.limit_in_bytes";

fn memory_v1(f: &mut dyn Files, l: &Limits) -> Result<(), String> {
    let mut swap = l.memory_swap;
    let has_swap = f.exists(MEMSW);
    // no memory limit and no swap asked: no swap limit either
    if l.memory == -1 && swap == 0 && has_swap {
        swap = -1;
    }
    if swap != 0 && !has_swap {
        // without swap accounting a swap limit equal to the memory limit is no swap:
        // what the kernel does anyway
        if swap != l.memory {
            return Err("linux.resources.memory.swap: this kernel has no swap accounting".into());
        }
        swap = 0;
    }
    let set_mem = |f: &mut dyn Files| {
        if l.memory != 0 {
            put(
                f,
                "memory.limit_in_bytes",
                &l.memory.to_string(),
                "memory.limit",
            )?;
        }
        Ok::<(), String>(())
    };
    let set_swap = |f: &mut dyn Files| {
        if swap != 0 {
            put(f, MEMSW, &swap.to_string(), "memory.swap")?;
        }
        Ok::<(), String>(())
    };
    // memory may not go above memsw: raise memsw first when the new one is above
    let current = read_u64(f, "memory.limit_in_bytes").unwrap_or(u64::MAX);
    if l.memory != 0 && swap != 0 && (swap == -1 || current < swap as u64) {
        set_swap(f)?;
        set_mem(f)?;
    } else {
        set_mem(f)?;
        set_swap(f)?;
    }
    if l.memory_reservation != 0 {
        put(
            f,
            "memory.soft_limit_in_bytes",
            &l.memory_reservation.to_string(),
            "memory.reservation",
        )?;
    }
    Ok(())
}

fn cpu_v1(f: &mut dyn Files, l: &Limits) -> Result<(), String> {
    if l.cpu_shares != 0 {
        put(f, "cpu.shares", &l.cpu_shares.to_string(), "cpu.shares")?;
        let got = read_u64(f, "cpu.shares").unwrap_or(l.cpu_shares);
        if l.cpu_shares > got {
            return Err(format!(
                "linux.resources.cpu.shares: the maximum allowed cpu-shares is {got}"
            ));
        }
        if l.cpu_shares < got {
            return Err(format!(
                "linux.resources.cpu.shares: the minimum allowed cpu-shares is {got}"
            ));
        }
    }
    let mut period_later = None;
    if l.cpu_period != 0 {
        let p = l.cpu_period.to_string();
        if let Err(e) = f.write("cpu.cfs_period_us", &p) {
            // a shorter period can be refused until the quota is lowered with it (the
            // parent's quota holds the old quota over the new period): retried after it
            if e.raw_os_error() != Some(libc::EINVAL) || l.cpu_quota == 0 {
                return Err(format!(
                    "linux.resources.cpu.period: writing {p:?} to cpu.cfs_period_us: {}",
                    crate::kernel::sys::os_error(&e)
                ));
            }
            period_later = Some(p);
        }
    }
    if l.cpu_quota != 0 {
        put(f, "cpu.cfs_quota_us", &l.cpu_quota.to_string(), "cpu.quota")?;
        if let Some(p) = period_later {
            put(f, "cpu.cfs_period_us", &p, "cpu.period")?;
        }
    }
    if l.cpu_rt_period != 0 {
        put(
            f,
            "cpu.rt_period_us",
            &l.cpu_rt_period.to_string(),
            "cpu.realtimePeriod",
        )?;
    }
    if l.cpu_rt_runtime != 0 {
        put(
            f,
            "cpu.rt_runtime_us",
            &l.cpu_rt_runtime.to_string(),
            "cpu.realtimeRuntime",
        )?;
    }
    Ok(())
}

/// cgroup v1 shares as a v2 weight (runc's conversion: [2, 262144] onto [1, 10000]).
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        0
    } else {
        1 + (shares.saturating_sub(2) * 9999) / 262142
    }
}

fn apply_v2(f: &mut dyn Files, l: &Limits) -> Result<(), String> {
    if l.cpu_rt_period != 0 || l.cpu_rt_runtime != 0 {
        return Err("linux.resources.cpu: realtime limits are cgroup v1 only".into());
    }
    if !l.cpuset_cpus.is_empty() {
        put(f, "cpuset.cpus", &l.cpuset_cpus, "cpu.cpus")?;
    }
    if !l.cpuset_mems.is_empty() {
        put(f, "cpuset.mems", &l.cpuset_mems, "cpu.mems")?;
    }
    let bytes = |v: i64| {
        if v < 0 {
            "max".to_string()
        } else {
            v.to_string()
        }
    };
    // v2's swap limit is swap alone: memory+swap less memory
    if l.memory_swap != 0 {
        let swap = match (l.memory_swap, l.memory) {
            (-1, _) => -1,
            (s, m) if m > 0 => {
                if s < m {
                    return Err("linux.resources.memory.swap: below the memory limit".into());
                }
                s - m
            }
            (_, 0) => {
                return Err(
                    "linux.resources.memory.swap: on cgroup v2 it is set together with the memory limit"
                        .into(),
                )
            }
            (_, _) => -1,
        };
        put(f, "memory.swap.max", &bytes(swap), "memory.swap")?;
    }
    if l.memory != 0 {
        put(f, "memory.max", &bytes(l.memory), "memory.limit")?;
    }
    if l.memory_reservation != 0 {
        put(
            f,
            "memory.low",
            &bytes(l.memory_reservation),
            "memory.reservation",
        )?;
    }
    if l.cpu_shares != 0 {
        put(
            f,
            "cpu.weight",
            &shares_to_weight(l.cpu_shares).to_string(),
            "cpu.shares",
        )?;
    }
    if l.cpu_quota != 0 || l.cpu_period != 0 {
        // cpu.max is "QUOTA PERIOD": the one not given is kept
        let cur = f.read("cpu.max").unwrap_or_default();
        let mut it = cur.split_whitespace();
        let (old_q, old_p) = (
            it.next().unwrap_or("max").to_string(),
            it.next().unwrap_or("100000").to_string(),
        );
        let q = match l.cpu_quota {
            0 => old_q,
            q if q < 0 => "max".into(),
            q => q.to_string(),
        };
        let p = match l.cpu_period {
            0 => old_p,
            p => p.to_string(),
        };
        put(f, "cpu.max", &format!("{q} {p}"), "cpu.quota")?;
    }
    if l.pids != 0 {
        put(f, "pids.max", &pids_value(l.pids), "pids.limit")?;
    }
    Ok(())
}

/// A real directory of a cgroupfs.
pub struct Real<'a>(pub &'a std::path::Path);

impl Files for Real<'_> {
    fn exists(&self, file: &str) -> bool {
        self.0.join(file).exists()
    }
    fn read(&self, file: &str) -> io::Result<String> {
        std::fs::read_to_string(self.0.join(file))
    }
    fn write(&mut self, file: &str, value: &str) -> io::Result<()> {
        std::fs::write(self.0.join(file), value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A directory in memory: its files, the writes in order, and a refusal to inject.
    #[derive(Default)]
    struct Fake {
        files: BTreeMap<String, String>,
        writes: Vec<String>,
        refuse_once: Option<(String, i32)>,
    }

    impl Files for Fake {
        fn exists(&self, file: &str) -> bool {
            self.files.contains_key(file)
        }
        fn read(&self, file: &str) -> io::Result<String> {
            self.files
                .get(file)
                .cloned()
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
        }
        fn write(&mut self, file: &str, value: &str) -> io::Result<()> {
            if let Some((f, errno)) = self.refuse_once.take() {
                if f == file {
                    return Err(io::Error::from_raw_os_error(errno));
                }
                self.refuse_once = Some((f, errno));
            }
            self.writes.push(format!("{file}={value}"));
            self.files.insert(file.into(), value.into());
            Ok(())
        }
    }

    fn v1() -> Vec<String> {
        ["cpuset", "memory", "cpu", "pids"]
            .map(String::from)
            .to_vec()
    }

    fn run(f: &mut Fake, l: &Limits) -> Result<(), String> {
        let c = v1();
        apply(
            &Dir {
                controllers: &c,
                v2: false,
            },
            f,
            l,
        )
    }

    #[test]
    fn zero_is_unchanged_and_minus_one_is_no_limit() {
        let mut f = Fake::default();
        f.files.insert(MEMSW.into(), "9223372036854771712".into());
        run(&mut f, &Limits::default()).unwrap();
        assert!(f.writes.is_empty(), "{:?}", f.writes);
        run(
            &mut f,
            &Limits {
                pids: -1,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(f.writes, ["pids.max=max"]);
        // no memory limit and no swap asked: the swap limit goes too
        f.writes.clear();
        run(
            &mut f,
            &Limits {
                memory: -1,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            f.writes,
            [format!("{MEMSW}=-1"), "memory.limit_in_bytes=-1".into()]
        );
    }

    #[test]
    fn memory_and_swap_in_the_order_the_kernel_takes() {
        let mut f = Fake::default();
        f.files.insert(MEMSW.into(), "52428800".into());
        f.files
            .insert("memory.limit_in_bytes".into(), "31457280".into());
        // raising both above the current limit: swap first
        run(
            &mut f,
            &Limits {
                memory: 60 << 20,
                memory_swap: 80 << 20,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            f.writes,
            [
                format!("{MEMSW}={}", 80 << 20),
                format!("memory.limit_in_bytes={}", 60 << 20)
            ]
        );
        // lowering: memory first
        f.writes.clear();
        run(
            &mut f,
            &Limits {
                memory: 30 << 20,
                memory_swap: 50 << 20,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            f.writes,
            [
                format!("memory.limit_in_bytes={}", 30 << 20),
                format!("{MEMSW}={}", 50 << 20)
            ]
        );
        // no swap accounting: a swap limit other than the memory limit is refused
        let mut f = Fake::default();
        assert!(run(
            &mut f,
            &Limits {
                memory: 1 << 20,
                memory_swap: 2 << 20,
                ..Default::default()
            }
        )
        .unwrap_err()
        .contains("memory.swap"));
        run(
            &mut f,
            &Limits {
                memory: 1 << 20,
                memory_swap: 1 << 20,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(f.writes, [format!("memory.limit_in_bytes={}", 1 << 20)]);
    }

    #[test]
    fn a_refused_period_is_retried_after_the_quota() {
        let mut f = Fake::default();
        f.refuse_once = Some(("cpu.cfs_period_us".into(), libc::EINVAL));
        run(
            &mut f,
            &Limits {
                cpu_period: 10000,
                cpu_quota: 3000,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            f.writes,
            ["cpu.cfs_quota_us=3000", "cpu.cfs_period_us=10000"]
        );
        // without a quota to write, the refusal is the error, worded as runc's
        let mut f = Fake::default();
        f.refuse_once = Some(("cpu.cfs_period_us".into(), libc::EINVAL));
        let e = run(
            &mut f,
            &Limits {
                cpu_period: 10000,
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(
            e.contains("cpu.period") && e.contains("invalid argument"),
            "{e}"
        );
        // shares the kernel clamps are refused
        let mut f = Fake::default();
        f.files.insert("cpu.shares".into(), "2".into());
        struct Clamp(Fake);
        impl Files for Clamp {
            fn exists(&self, x: &str) -> bool {
                self.0.exists(x)
            }
            fn read(&self, x: &str) -> io::Result<String> {
                self.0.read(x)
            }
            fn write(&mut self, x: &str, v: &str) -> io::Result<()> {
                self.0
                    .write(x, if x == "cpu.shares" { "262144" } else { v })
            }
        }
        let c = v1();
        let e = apply(
            &Dir {
                controllers: &c,
                v2: false,
            },
            &mut Clamp(f),
            &Limits {
                cpu_shares: 1 << 20,
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e.contains("maximum allowed cpu-shares is 262144"), "{e}");
    }

    #[test]
    fn v2_files() {
        let mut f = Fake::default();
        f.files.insert("cpu.max".into(), "max 100000".into());
        let d = Dir {
            controllers: &[],
            v2: true,
        };
        apply(
            &d,
            &mut f,
            &Limits {
                cpu_quota: 30000,
                memory: 50 << 20,
                memory_swap: 96 << 20,
                cpu_shares: 100,
                pids: 10,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            f.writes,
            [
                format!("memory.swap.max={}", 46 << 20),
                format!("memory.max={}", 50 << 20),
                "cpu.weight=4".into(),
                "cpu.max=30000 100000".into(),
                "pids.max=10".into()
            ]
        );
        f.writes.clear();
        apply(
            &d,
            &mut f,
            &Limits {
                cpu_period: 50000,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(f.writes, ["cpu.max=30000 50000"]);
        assert!(apply(
            &d,
            &mut f,
            &Limits {
                cpu_rt_runtime: 5,
                ..Default::default()
            }
        )
        .is_err());
    }
}

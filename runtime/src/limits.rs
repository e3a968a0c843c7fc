//! Resource limits of one exec as the operator asked for them (`capsule exec --fds N
//! --file-size SIZE --memory SIZE --pids N --cpus N --tmp-size SIZE --activity-timeout
//! DURATION`, spec `sandbox.limits`, the operator's settings): their parsing (shared by clap and the fast hand parser of `cli::exec_args`, so both read a value the same way), their
//! record entry, and the one-line message of a command a limit ended. The executor
//! enforces them ([`crate::linux`]: rlimits set in the command's process just before
//! `execve`, a cgroup per exec for memory and processes, the activity watch in the
//! supervisor's loop).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The limits of one exec; `None`: not limited by capsule (the caller's own limits hold).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Most open descriptors per process (`RLIMIT_NOFILE`, soft and hard).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fds: Option<u64>,
    /// Largest file a process may write, in bytes (`RLIMIT_FSIZE`, soft and hard).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_size: Option<u64>,
    /// Memory of the whole tree, in bytes (a cgroup's memory limit, swap included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Processes and threads of the whole tree at once (a cgroup's `pids.max`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// CPU time of the whole tree, in thousandths of a CPU (`--cpus 1.5`: 1500; a cgroup's
    /// CFS quota per 100 ms period).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus_milli: Option<u64>,
    /// Processes and threads of the sandbox's user in its user namespace
    /// (`RLIMIT_NPROC`): capsule's own processes default where no cgroup can hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nproc: Option<u64>,
    /// The capsule's `/tmp` and `/var/tmp` together, in bytes (one tmpfs of the exec's own
    /// instead of the bundle's tmp folder; see [`crate::linux::plan::with_tmp_size`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_size: Option<u64>,
    /// The disk guard's budget, in bytes: the least free space above the disk reserve of
    /// the filesystems the command can write, when the exec started
    /// ([`crate::linux::diskguard::budget`]); the command's `RLIMIT_FSIZE` where it is
    /// below `file_size`, so that no single file can take the disk below the reserve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_budget: Option<u64>,
}

impl Limits {
    /// No limit asked for.
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// A limit that needs a cgroup is asked for (`--memory`, `--pids`).
    pub fn needs_cgroup(&self) -> bool {
        self.memory.is_some() || self.pids.is_some() || self.cpus_milli.is_some()
    }

    /// `(resource, flag, value)` of each rlimit asked for.
    #[cfg(target_os = "linux")]
    pub fn rlimits(&self) -> impl Iterator<Item = (libc::__rlimit_resource_t, &'static str, u64)> {
        let fsize = match (self.file_size, self.disk_budget) {
            (Some(f), Some(b)) if b < f => (libc::RLIMIT_FSIZE, "the disk guard's budget", Some(b)),
            (None, Some(b)) => (libc::RLIMIT_FSIZE, "the disk guard's budget", Some(b)),
            (f, _) => (libc::RLIMIT_FSIZE, "--file-size", f),
        };
        [
            (libc::RLIMIT_NOFILE, "--fds", self.fds),
            fsize,
            (libc::RLIMIT_NPROC, "processes (RLIMIT_NPROC)", self.nproc),
        ]
        .into_iter()
        .filter_map(|(r, f, v)| Some((r, f, v?)))
    }
}

/// capsule's own limits of an exec for which neither its flags, the operator's settings nor
/// the spec give one, from this machine:
/// - **memory**: the machine's physical memory less a reserve for the host (an eighth of
///   it, at least 512 MiB and at most 4 GiB: 20.6 GiB of 23.5): a leak is killed inside the
///   sandbox's own group before the host runs out;
/// - **processes**: 256 per CPU this process may run on, at least 4096: far above what
///   `cargo build -j` starts (a rustc per CPU, each with its codegen threads, and the
///   linker's), far below what a fork bomb needs to take the machine down (the kernel's
///   `pid_max` is 4,194,304 on 64-bit machines, `threads-max` ~190,000 for 24 GiB).
///
/// Two system calls (`sysinfo`, `sched_getaffinity`), nothing read from a file.
/// `CAPSULE_OWN_DEFAULTS=pids=64,memory=256M` gives other numbers (still defaults: not
/// enforced where they cannot be, never a refusal). Both need
/// a cgroup; where none can be made the exec runs without them (processes are then bounded
/// by `RLIMIT_NPROC` in the sandbox's user namespace, which needs none), and the record's
/// `degradation` and `capsule isolation` say so: a default is not a request.
#[cfg(target_os = "linux")]
pub fn machine_defaults() -> Limits {
    // SAFETY: sysinfo fills a struct of ours.
    let total = unsafe {
        let mut si: libc::sysinfo = std::mem::zeroed();
        if libc::sysinfo(&mut si) == 0 {
            (si.totalram as u64).saturating_mul(si.mem_unit.max(1) as u64)
        } else {
            0
        }
    };
    // SAFETY: sched_getaffinity fills a set of ours.
    let cpus = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            libc::CPU_COUNT(&set).max(1) as u64
        } else {
            1
        }
    };
    let mut d = Limits {
        memory: memory_default(total),
        pids: Some(pids_default(cpus)),
        ..Limits::default()
    };
    // other numbers for the defaults, to try how they behave (the tests lower them)
    if let Some(v) = std::env::var_os("CAPSULE_OWN_DEFAULTS") {
        for kv in v.to_string_lossy().split(',') {
            match kv.split_once('=') {
                Some(("memory", m)) => d.memory = parse_size(m).ok(),
                Some(("pids", n)) => d.pids = parse_count(n).ok(),
                _ => {}
            }
        }
    }
    d
}

/// The memory default of a machine with `total` bytes (see [`machine_defaults`]).
pub fn memory_default(total: u64) -> Option<u64> {
    if total == 0 {
        return None;
    }
    let reserve = (total / 8).clamp(512 << 20, 4 << 30);
    Some(total.saturating_sub(reserve).max(256 << 20) & !0xfff)
}

/// The processes default of a machine with `cpus` CPUs (see [`machine_defaults`]).
pub fn pids_default(cpus: u64) -> u64 {
    (256 * cpus).max(4096)
}

/// The command was killed by `signal`: the one-line message naming the limit that did it,
/// if one of `limits` explains it (`SIGXFSZ` under `--file-size`).
pub fn killed_by(limits: &Limits, signal: i32) -> Option<String> {
    #[cfg(target_os = "linux")]
    if signal == libc::SIGXFSZ {
        return match (limits.file_size, limits.disk_budget) {
            (f, Some(b)) if f.is_none_or(|f| b < f) => Some(format!(
                "killed: file size limit {} reached (the disk guard's budget: the free space above the disk reserve when the exec started; no file may take the disk below the reserve)",
                show_size(b)
            )),
            (f, _) => f.map(|s| format!("killed: file size limit {} reached", show_size(s))),
        };
    }
    let _ = (limits, signal);
    None
}

/// The message of a command killed by `--activity-timeout`.
pub fn silent_for(d: Duration) -> String {
    format!(
        "killed: no output for {} (activity timeout)",
        humantime::format_duration(d)
    )
}

pub use capsule_bundle::policy::limits::{parse_count, parse_cpus, parse_duration, parse_size};

/// `bytes` for people: `512 MiB`, `1.5 GiB`, `4096 bytes`.
pub fn show_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (m, u) in UNITS {
        if bytes >= m {
            let v = bytes as f64 / m as f64;
            return if bytes.is_multiple_of(m) {
                format!("{} {u}", bytes / m)
            } else {
                format!("{v:.1} {u}")
            };
        }
    }
    format!("{bytes} bytes")
}

/// How much the disk guard keeps free on each filesystem the task can write
/// ([`crate::linux::diskguard`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskReserve {
    /// The smaller of `percent` of the filesystem and `cap` bytes (default: 5% and 2 GiB).
    Share { percent: u8, cap: u64 },
    /// Exactly so many bytes.
    Bytes(u64),
    /// No guard.
    Off,
}

impl Default for DiskReserve {
    fn default() -> Self {
        DiskReserve::Share {
            percent: 5,
            cap: 2 << 30,
        }
    }
}

impl DiskReserve {
    /// `"5%"`, `"2G"` (sizes as for `--memory`), `"off"`, or a percentage with a cap
    /// (`"5%,2G"`).
    pub fn parse(s: &str) -> Result<DiskReserve, String> {
        let s = s.trim();
        if s == "off" || s == "0" {
            return Ok(DiskReserve::Off);
        }
        let pct = |p: &str| -> Result<u8, String> {
            p.trim()
                .strip_suffix('%')
                .and_then(|n| n.trim().parse::<u8>().ok())
                .filter(|n| (1..=50).contains(n))
                .ok_or_else(|| format!("disk_reserve: {p:?} is not a percentage of 1-50%"))
        };
        if let Some((p, cap)) = s.split_once(',') {
            return Ok(DiskReserve::Share {
                percent: pct(p)?,
                cap: parse_size(cap.trim()).map_err(|e| format!("disk_reserve: {e}"))?,
            });
        }
        if s.ends_with('%') {
            return Ok(DiskReserve::Share {
                percent: pct(s)?,
                cap: u64::MAX,
            });
        }
        parse_size(s)
            .map(DiskReserve::Bytes)
            .map_err(|e| format!("disk_reserve: {e}"))
    }

    /// The bytes to keep free on a filesystem of `size` bytes.
    pub fn bytes(self, size: u64) -> u64 {
        match self {
            DiskReserve::Share { percent, cap } => (size / 100 * percent as u64).min(cap),
            DiskReserve::Bytes(b) => b,
            DiskReserve::Off => 0,
        }
    }

    /// Inodes to keep free on a filesystem of `files` inodes (a filesystem full of empty
    /// files is full too): the same share, its cap counted at one inode per 16 KiB
    /// (ext4's default ratio: 131,072 inodes for 2 GiB); exactly so many bytes' worth.
    pub fn inodes(self, files: u64) -> u64 {
        const PER: u64 = 16 << 10;
        match self {
            DiskReserve::Share { percent, cap } => (files / 100 * percent as u64).min(cap / PER),
            DiskReserve::Bytes(b) => (b / PER).min(files / 20),
            DiskReserve::Off => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_the_smaller_of_a_share_and_a_cap() {
        let r = DiskReserve::default();
        assert_eq!(r.bytes(300 << 20), (300 << 20) / 100 * 5);
        assert_eq!(r.bytes(1 << 40), 2 << 30);
        assert_eq!(DiskReserve::parse("off"), Ok(DiskReserve::Off));
        assert_eq!(DiskReserve::parse("1G"), Ok(DiskReserve::Bytes(1 << 30)));
        assert_eq!(
            DiskReserve::parse("10%"),
            Ok(DiskReserve::Share {
                percent: 10,
                cap: u64::MAX
            })
        );
        assert_eq!(
            DiskReserve::parse("5%,2G"),
            Ok(DiskReserve::Share {
                percent: 5,
                cap: 2 << 30
            })
        );
        for bad in ["", "x", "0%", "90%", "-1G", "5%,x"] {
            assert!(DiskReserve::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(DiskReserve::Off.bytes(1 << 30), 0);
    }

    #[test]
    fn sizes_are_read_in_powers_of_1024() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("1.5K"), Ok(1536));
        assert_eq!(parse_size("16 MB"), Ok(16 << 20));
        for bad in [
            "",
            "M",
            "0",
            "0M",
            "-1",
            "12Q",
            "1e3",
            "99999999999T",
            "1..2M",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} taken");
        }
        assert_eq!(parse_count("64"), Ok(64));
        assert_eq!(parse_cpus("0.5"), Ok(500));
        assert_eq!(parse_cpus("2"), Ok(2000));
        for bad in ["", "0", "0.001", "-1", "1e2", "x", "nan", "inf"] {
            assert!(parse_cpus(bad).is_err(), "{bad:?} taken");
        }
        assert!(parse_count("0").is_err() && parse_count("x").is_err());
        assert!(parse_duration("0s").is_err());
        assert_eq!(parse_duration("300ms"), Ok(Duration::from_millis(300)));
    }

    #[test]
    fn sizes_are_shown_as_people_read_them() {
        assert_eq!(show_size(512 << 20), "512 MiB");
        assert_eq!(show_size(1536 << 20), "1.5 GiB");
        assert_eq!(show_size(100), "100 bytes");
    }

    #[test]
    fn the_defaults_scale_with_the_machine() {
        // memory: an eighth kept for the host, within 512 MiB..4 GiB
        assert_eq!(memory_default(24 << 30), Some(21 << 30));
        assert_eq!(memory_default(4 << 30), Some((4 << 30) - (512 << 20)));
        assert_eq!(memory_default(256 << 30), Some(252 << 30));
        assert_eq!(memory_default(512 << 20), Some(256 << 20));
        assert_eq!(memory_default(0), None);
        // processes: 256 per CPU, at least 4096
        assert_eq!(pids_default(2), 4096);
        assert_eq!(pids_default(16), 4096);
        assert_eq!(pids_default(64), 16384);
        let d = machine_defaults();
        assert!(d.pids.unwrap() >= 4096 && d.memory.is_some(), "{d:?}");
    }

    #[test]
    fn a_file_size_kill_names_its_limit() {
        let l = Limits {
            file_size: Some(1 << 20),
            ..Limits::default()
        };
        assert_eq!(
            killed_by(&l, libc::SIGXFSZ).as_deref(),
            Some("killed: file size limit 1 MiB reached")
        );
        assert_eq!(killed_by(&Limits::default(), libc::SIGXFSZ), None);
        assert_eq!(killed_by(&l, libc::SIGKILL), None);
    }
}

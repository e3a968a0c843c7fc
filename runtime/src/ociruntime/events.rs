//! `events`: the container's statistics from its cgroups, as runc prints them (one JSON
//! line per event, `{"type":"stats","id":…,"data":{…}}` in runc's `types.Stats` layout,
//! and `{"type":"oom","id":…}`): `--stats` prints one and exits; otherwise one every
//! `--interval` (5 s by default) and an `oom` event each time the kernel's OOM killer
//! kills in the container's memory cgroup (the cgroup's `oom_kill` counter, looked at
//! every 100 ms), until the container is gone. Only the cgroup files are read.

use super::state;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Serialize)]
struct Event<'a, T: Serialize> {
    #[serde(rename = "type")]
    typ: &'a str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<T>,
}

#[derive(Serialize, Default)]
pub struct Stats {
    cpu: Cpu,
    cpuset: CpuSet,
    memory: Memory,
    pids: Pids,
    blkio: Blkio,
    hugetlb: BTreeMap<String, serde_json::Value>,
    intel_rdt: BTreeMap<String, serde_json::Value>,
    network_interfaces: Option<Vec<serde_json::Value>>,
}

fn zero(v: &u64) -> bool {
    *v == 0
}

#[derive(Serialize, Default)]
struct Cpu {
    usage: CpuUsage,
    throttling: Throttling,
}

#[derive(Serialize, Default)]
struct CpuUsage {
    #[serde(skip_serializing_if = "zero")]
    total: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    percpu: Vec<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    percpu_kernel: Vec<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    percpu_user: Vec<u64>,
    kernel: u64,
    user: u64,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Throttling {
    #[serde(skip_serializing_if = "zero")]
    periods: u64,
    #[serde(skip_serializing_if = "zero")]
    throttled_periods: u64,
    #[serde(skip_serializing_if = "zero")]
    throttled_time: u64,
}

#[derive(Serialize, Default)]
struct CpuSet {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cpus: Vec<u16>,
    cpu_exclusive: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    mems: Vec<u16>,
    mem_hardwall: u64,
    mem_exclusive: u64,
    memory_migrate: u64,
    memory_spread_page: u64,
    memory_spread_slab: u64,
    memory_pressure: u64,
    sched_load_balance: u64,
    sched_relax_domain_level: i64,
}

#[derive(Serialize, Default)]
struct MemoryEntry {
    limit: u64,
    #[serde(skip_serializing_if = "zero")]
    usage: u64,
    #[serde(skip_serializing_if = "zero")]
    max: u64,
    failcnt: u64,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Memory {
    #[serde(skip_serializing_if = "zero")]
    cache: u64,
    usage: MemoryEntry,
    swap: MemoryEntry,
    kernel: MemoryEntry,
    #[serde(rename = "kernelTCP")]
    kernel_tcp: MemoryEntry,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    raw: BTreeMap<String, u64>,
}

#[derive(Serialize, Default)]
struct Pids {
    #[serde(skip_serializing_if = "zero")]
    current: u64,
    #[serde(skip_serializing_if = "zero")]
    limit: u64,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Blkio {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    io_service_bytes_recursive: Vec<BlkioEntry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    io_serviced_recursive: Vec<BlkioEntry>,
}

#[derive(Serialize, Default)]
struct BlkioEntry {
    #[serde(skip_serializing_if = "zero")]
    major: u64,
    #[serde(skip_serializing_if = "zero")]
    minor: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    op: String,
    #[serde(skip_serializing_if = "zero")]
    value: u64,
}

/// The cgroup files read for stats: at most this much of each.
const MAX_FILE: u64 = 64 << 10;

fn read(dir: &Path, file: &str) -> String {
    use std::io::Read;
    let mut s = String::new();
    if let Ok(f) = std::fs::File::open(dir.join(file)) {
        let _ = f.take(MAX_FILE).read_to_string(&mut s);
    }
    s
}

fn num(dir: &Path, file: &str) -> u64 {
    read(dir, file).trim().parse().unwrap_or(0)
}

/// `key value` lines.
fn keyed(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// `0-3,7` as the list of numbers.
fn ranges(text: &str) -> Vec<u16> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
            // bounded: a cpuset names at most a few thousand cpus
            out.extend((a..=b.min(a.saturating_add(4096))).take(4097));
        }
    }
    out
}

/// Clock ticks (`cpuacct.stat`'s unit, USER_HZ) as nanoseconds.
const NS_PER_TICK: u64 = 1_000_000_000 / 100;

/// The directories of the container by controller (v1), or the v2 one.
struct Dirs {
    by: BTreeMap<String, PathBuf>,
    v2: Option<PathBuf>,
}

fn dirs(cgroups: &[PathBuf]) -> Dirs {
    let hs = crate::kernel::cgroup::hierarchies();
    let mut by = BTreeMap::new();
    let mut v2 = None;
    for d in cgroups {
        let Some(h) = hs.iter().find(|h| d.starts_with(&h.mount)) else {
            continue;
        };
        if h.controllers.is_empty() {
            v2 = Some(d.clone());
        }
        for c in &h.controllers {
            by.insert(c.clone(), d.clone());
        }
    }
    Dirs { by, v2 }
}

fn blkio_entries(text: &str) -> Vec<BlkioEntry> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (dev, op, v) = (f.next()?, f.next()?, f.next()?);
            let (ma, mi) = dev.split_once(':')?;
            Some(BlkioEntry {
                major: ma.parse().ok()?,
                minor: mi.parse().ok()?,
                op: op.to_string(),
                value: v.parse().ok()?,
            })
        })
        .collect()
}

/// The statistics of the container's cgroups.
pub fn stats(cgroups: &[PathBuf]) -> Stats {
    let d = dirs(cgroups);
    let mut s = Stats::default();
    if let Some(v2) = &d.v2 {
        let cpu = keyed(&read(v2, "cpu.stat"));
        let g = |k: &str| cpu.get(k).copied().unwrap_or(0);
        s.cpu.usage.total = g("usage_usec") * 1000;
        s.cpu.usage.user = g("user_usec") * 1000;
        s.cpu.usage.kernel = g("system_usec") * 1000;
        s.cpu.throttling = Throttling {
            periods: g("nr_periods"),
            throttled_periods: g("nr_throttled"),
            throttled_time: g("throttled_usec") * 1000,
        };
        let limit = |f: &str| match read(v2, f).trim() {
            "max" | "" => u64::MAX,
            v => v.parse().unwrap_or(0),
        };
        s.memory.usage = MemoryEntry {
            limit: limit("memory.max"),
            usage: num(v2, "memory.current"),
            max: num(v2, "memory.peak"),
            failcnt: keyed(&read(v2, "memory.events"))
                .get("max")
                .copied()
                .unwrap_or(0),
        };
        s.memory.swap = MemoryEntry {
            limit: limit("memory.swap.max"),
            usage: num(v2, "memory.swap.current"),
            ..Default::default()
        };
        s.memory.raw = keyed(&read(v2, "memory.stat"));
        s.memory.cache = s.memory.raw.get("file").copied().unwrap_or(0);
        s.pids.current = num(v2, "pids.current");
        s.pids.limit = num(v2, "pids.max");
        s.cpuset.cpus = ranges(&read(v2, "cpuset.cpus.effective"));
        s.cpuset.mems = ranges(&read(v2, "cpuset.mems.effective"));
        return s;
    }
    if let Some(a) = d.by.get("cpuacct") {
        s.cpu.usage.total = num(a, "cpuacct.usage");
        let list = |f: &str| -> Vec<u64> {
            read(a, f)
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect()
        };
        s.cpu.usage.percpu = list("cpuacct.usage_percpu");
        s.cpu.usage.percpu_kernel = list("cpuacct.usage_percpu_sys");
        s.cpu.usage.percpu_user = list("cpuacct.usage_percpu_user");
        let st = keyed(&read(a, "cpuacct.stat"));
        s.cpu.usage.user = st.get("user").copied().unwrap_or(0) * NS_PER_TICK;
        s.cpu.usage.kernel = st.get("system").copied().unwrap_or(0) * NS_PER_TICK;
    }
    if let Some(c) = d.by.get("cpu") {
        let st = keyed(&read(c, "cpu.stat"));
        let g = |k: &str| st.get(k).copied().unwrap_or(0);
        s.cpu.throttling = Throttling {
            periods: g("nr_periods"),
            throttled_periods: g("nr_throttled"),
            throttled_time: g("throttled_time"),
        };
    }
    if let Some(c) = d.by.get("cpuset") {
        s.cpuset = CpuSet {
            cpus: ranges(&read(c, "cpuset.cpus")),
            cpu_exclusive: num(c, "cpuset.cpu_exclusive"),
            mems: ranges(&read(c, "cpuset.mems")),
            mem_hardwall: num(c, "cpuset.mem_hardwall"),
            mem_exclusive: num(c, "cpuset.mem_exclusive"),
            memory_migrate: num(c, "cpuset.memory_migrate"),
            memory_spread_page: num(c, "cpuset.memory_spread_page"),
            memory_spread_slab: num(c, "cpuset.memory_spread_slab"),
            memory_pressure: num(c, "cpuset.memory_pressure"),
            sched_load_balance: num(c, "cpuset.sched_load_balance"),
            sched_relax_domain_level: read(c, "cpuset.sched_relax_domain_level")
                .trim()
                .parse()
                .unwrap_or(0),
        };
    }
    if let Some(m) = d.by.get("memory") {
        let entry = |prefix: &str| MemoryEntry {
            limit: num(m, &format!("{prefix}.limit_in_bytes")),
            usage: num(m, &format!("{prefix}.usage_in_bytes")),
            max: num(m, &format!("{prefix}.max_usage_in_bytes")),
            failcnt: num(m, &format!("{prefix}.failcnt")),
        };
        s.memory.usage = entry("memory");
        s.memory.swap = entry("memory.memsw");
        s.memory.kernel = entry("memory.kmem");
        s.memory.kernel_tcp = entry("memory.kmem.tcp");
        s.memory.raw = keyed(&read(m, "memory.stat"));
        s.memory.cache = s.memory.raw.get("cache").copied().unwrap_or(0);
    }
    if let Some(p) = d.by.get("pids") {
        s.pids.current = num(p, "pids.current");
        s.pids.limit = num(p, "pids.max");
    }
    if let Some(b) = d.by.get("blkio") {
        s.blkio.io_service_bytes_recursive =
            blkio_entries(&read(b, "blkio.throttle.io_service_bytes_recursive"));
        s.blkio.io_serviced_recursive =
            blkio_entries(&read(b, "blkio.throttle.io_serviced_recursive"));
    }
    s
}

/// How many times the OOM killer killed in the container's memory cgroup.
fn oom_kills(cgroups: &[PathBuf]) -> Option<u64> {
    let d = dirs(cgroups);
    let (dir, file) = match (&d.v2, d.by.get("memory")) {
        (Some(v2), _) => (v2.clone(), "memory.events"),
        (None, Some(m)) => (m.clone(), "memory.oom_control"),
        _ => return None,
    };
    keyed(&read(&dir, file)).get("oom_kill").copied()
}

fn print<T: Serialize>(typ: &str, id: &str, data: Option<T>) -> Result<(), String> {
    let line = serde_json::to_string(&Event { typ, id, data }).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("events: {e}"))
}

pub fn run(root: &Path, id: &str, once: bool, interval: Duration) -> Result<(), String> {
    let s = state::load(root, id)?;
    if s.status(root) == "stopped" {
        return Err(format!("container with id {id} is not running"));
    }
    if once {
        return print("stats", id, Some(stats(&s.cgroups)));
    }
    let tick = Duration::from_millis(100).min(interval);
    let mut next = Instant::now() + interval;
    let mut ooms = oom_kills(&s.cgroups).unwrap_or(0);
    loop {
        std::thread::sleep(tick);
        // gone (deleted) or stopped: the events end
        match state::load(root, id) {
            Ok(now) if now.status(root) != "stopped" => {}
            _ => return Ok(()),
        }
        if let Some(n) = oom_kills(&s.cgroups) {
            for _ in ooms..n {
                print::<()>("oom", id, None)?;
            }
            ooms = ooms.max(n);
        }
        if Instant::now() >= next {
            print("stats", id, Some(stats(&s.cgroups)))?;
            next += interval;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_read_as_runc_reads_them() {
        assert_eq!(ranges("0-3,7\n"), [0, 1, 2, 3, 7]);
        assert_eq!(ranges(""), Vec::<u16>::new());
        assert_eq!(ranges("65535"), [65535]);
        let k = keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
        assert_eq!(k["oom_kill"], 3);
        let b = blkio_entries("8:0 Read 4096\n8:0 Write 0\nTotal 4096\n");
        assert_eq!(b.len(), 2);
        assert_eq!(
            (b[0].major, b[0].op.as_str(), b[0].value),
            (8, "Read", 4096)
        );
    }

    #[test]
    fn an_event_line_as_runc_prints_it() {
        let line = serde_json::to_string(&Event {
            typ: "stats",
            id: "test_busybox",
            data: Some(Stats::default()),
        })
        .unwrap();
        assert!(
            line.starts_with(r#"{"type":"stats","id":"test_busybox","data":{"cpu":{"usage":{"kernel":0,"user":0},"throttling":{}},"cpuset":{"#),
            "{line}"
        );
        assert!(
            line.ends_with(r#""hugetlb":{},"intel_rdt":{},"network_interfaces":null}}"#),
            "{line}"
        );
        let oom = serde_json::to_string(&Event::<()> {
            typ: "oom",
            id: "c",
            data: None,
        })
        .unwrap();
        assert_eq!(oom, r#"{"type":"oom","id":"c"}"#);
    }
}

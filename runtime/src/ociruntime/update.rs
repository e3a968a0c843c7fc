//! `update`: change a running container's limits (`docker update`, Kubernetes' in-place
//! resize through containerd's shim: `update --resources FILE|-`). The new values come
//! from the options or from a `linux.resources` JSON (keys matched without regard to
//! case, as runc's Go decoder matches them); a value not given, or 0, leaves the
//! container's as it is, `-1` lifts a limit; they are written as create writes them
//! ([`crate::kernel::cgroup::container::update`]). What capsule-runc cannot change is refused by name, never
//! skipped: the device rules (accepted only unchanged, as containerd resends them),
//! kernel memory, swappiness, the OOM killer, blkio, hugepages, network, RDMA and the
//! unified map.

use super::state;
use crate::kernel::cgroup::resources::Limits;
use serde::Deserialize;
use std::io::Read;
use std::path::Path;

/// `update`'s values: each `None` leaves the container's as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateOpts {
    pub id: String,
    /// `-r FILE` (`-`: stdin): the resources as JSON; the other options are then ignored.
    pub resources: Option<String>,
    pub memory: Option<i64>,
    pub memory_reservation: Option<i64>,
    pub memory_swap: Option<i64>,
    pub cpu_shares: Option<u64>,
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    pub cpu_rt_runtime: Option<i64>,
    pub cpu_rt_period: Option<u64>,
    pub cpuset_cpus: Option<String>,
    pub cpuset_mems: Option<String>,
    pub pids_limit: Option<i64>,
    pub blkio_weight: Option<u16>,
}

/// The JSON `--resources` reads: runtime-spec's `LinuxResources`, every field it has.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Resources {
    devices: Option<Vec<serde_json::Value>>,
    memory: Option<Memory>,
    cpu: Option<Cpu>,
    pids: Option<Pids>,
    #[serde(rename = "blockIO")]
    block_io: Option<serde_json::Value>,
    hugepage_limits: Option<Vec<serde_json::Value>>,
    network: Option<serde_json::Value>,
    rdma: Option<serde_json::Value>,
    unified: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Memory {
    limit: Option<i64>,
    reservation: Option<i64>,
    swap: Option<i64>,
    kernel: Option<i64>,
    #[serde(rename = "kernelTCP")]
    kernel_tcp: Option<i64>,
    swappiness: Option<u64>,
    #[serde(rename = "disableOOMKiller")]
    disable_oom_killer: Option<bool>,
    use_hierarchy: Option<bool>,
    check_before_update: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Cpu {
    shares: Option<u64>,
    quota: Option<i64>,
    burst: Option<u64>,
    period: Option<u64>,
    realtime_runtime: Option<i64>,
    realtime_period: Option<u64>,
    cpus: Option<String>,
    mems: Option<String>,
    idle: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Pids {
    limit: i64,
}

const TOP: &[&str] = &[
    "devices",
    "memory",
    "cpu",
    "pids",
    "blockIO",
    "hugepageLimits",
    "network",
    "rdma",
    "unified",
];
const MEMORY: &[&str] = &[
    "limit",
    "reservation",
    "swap",
    "kernel",
    "kernelTCP",
    "swappiness",
    "disableOOMKiller",
    "useHierarchy",
    "checkBeforeUpdate",
];
const CPU: &[&str] = &[
    "shares",
    "quota",
    "burst",
    "period",
    "realtimeRuntime",
    "realtimePeriod",
    "cpus",
    "mems",
    "idle",
];

/// The object's keys that name one of `names` without regard to case, renamed to it.
fn canon(v: &mut serde_json::Value, names: &[&str]) {
    if let Some(o) = v.as_object_mut() {
        let keys: Vec<String> = o.keys().cloned().collect();
        for k in keys {
            if let Some(n) = names.iter().find(|n| n.eq_ignore_ascii_case(&k)) {
                if *n != k {
                    if let Some(x) = o.remove(&k) {
                        o.insert((*n).to_string(), x);
                    }
                }
            }
        }
    }
}

/// `--resources`' JSON, read.
fn parse(text: &[u8]) -> Result<Resources, String> {
    let mut v: serde_json::Value =
        serde_json::from_slice(text).map_err(|e| format!("update: --resources: {e}"))?;
    canon(&mut v, TOP);
    if let Some(m) = v.get_mut("memory") {
        canon(m, MEMORY);
    }
    if let Some(c) = v.get_mut("cpu") {
        canon(c, CPU);
    }
    if let Some(p) = v.get_mut("pids") {
        canon(p, &["limit"]);
    }
    serde_json::from_value(v).map_err(|e| format!("update: --resources: {e}"))
}

/// The limits of `r`, or the first field that cannot be honoured; `devices_now` is the
/// container's device rules as created (containerd sends them again unchanged).
fn limits_of(r: Resources, devices_now: &[serde_json::Value]) -> Result<Limits, String> {
    let refused = |f: &str, why: &str| Err(format!("update: {f}: {why}"));
    if let Some(d) = &r.devices {
        if !d.is_empty() && d.as_slice() != devices_now {
            return refused("devices", "the device rules cannot be changed by update");
        }
    }
    if r.block_io.as_ref().is_some_and(|b| {
        b.as_object()
            .is_none_or(|o| o.values().any(|v| !is_zero(v)))
    }) {
        return refused("blockIO", "not supported");
    }
    if r.hugepage_limits.as_ref().is_some_and(|h| !h.is_empty()) {
        return refused("hugepageLimits", "not supported");
    }
    if r.network.is_some() {
        return refused("network", "not supported");
    }
    if r.rdma.is_some() {
        return refused("rdma", "not supported");
    }
    if r.unified.as_ref().is_some_and(|u| !u.is_empty()) {
        return refused("unified", "not supported");
    }
    let m = r.memory.unwrap_or_default();
    if m.kernel.unwrap_or(0) != 0 || m.kernel_tcp.unwrap_or(0) != 0 {
        return refused(
            "memory.kernel",
            "kernel memory limits are not supported (this kernel no longer sets them)",
        );
    }
    if m.swappiness.is_some() || m.disable_oom_killer == Some(true) || m.use_hierarchy.is_some() {
        return refused(
            "memory",
            "swappiness, disableOOMKiller and useHierarchy are not supported",
        );
    }
    let _ = m.check_before_update; // a check of runc's own: the kernel's checks stand
    let c = r.cpu.unwrap_or_default();
    if c.burst.unwrap_or(0) != 0 || c.idle.unwrap_or(0) != 0 {
        return refused("cpu", "burst and idle are not supported");
    }
    Ok(Limits {
        memory: m.limit.unwrap_or(0),
        memory_reservation: m.reservation.unwrap_or(0),
        memory_swap: m.swap.unwrap_or(0),
        cpu_shares: c.shares.unwrap_or(0),
        cpu_quota: c.quota.unwrap_or(0),
        cpu_period: c.period.unwrap_or(0),
        cpu_rt_runtime: c.realtime_runtime.unwrap_or(0),
        cpu_rt_period: c.realtime_period.unwrap_or(0),
        cpuset_cpus: c.cpus.unwrap_or_default(),
        cpuset_mems: c.mems.unwrap_or_default(),
        pids: r.pids.map_or(0, |p| p.limit),
    })
}

fn is_zero(v: &serde_json::Value) -> bool {
    v.is_null() || v.as_u64() == Some(0) || v.as_array().is_some_and(|a| a.is_empty())
}

/// The options' limits (each not given: unchanged).
fn limits_of_options(u: &UpdateOpts) -> Result<Limits, String> {
    if u.blkio_weight.is_some_and(|w| w != 0) {
        return Err("update: --blkio-weight: not supported".into());
    }
    Ok(Limits {
        memory: u.memory.unwrap_or(0),
        memory_reservation: u.memory_reservation.unwrap_or(0),
        memory_swap: u.memory_swap.unwrap_or(0),
        cpu_shares: u.cpu_shares.unwrap_or(0),
        cpu_quota: u.cpu_quota.unwrap_or(0),
        cpu_period: u.cpu_period.unwrap_or(0),
        cpu_rt_runtime: u.cpu_rt_runtime.unwrap_or(0),
        cpu_rt_period: u.cpu_rt_period.unwrap_or(0),
        cpuset_cpus: u.cpuset_cpus.clone().unwrap_or_default(),
        cpuset_mems: u.cpuset_mems.clone().unwrap_or_default(),
        pids: u.pids_limit.unwrap_or(0),
    })
}

/// Reading `--resources` (a file, or `-`: stdin) is bounded: a resources object is small.
const MAX_INPUT: u64 = 1 << 20;

pub fn run(root: &Path, u: &UpdateOpts) -> Result<(), String> {
    let s = state::load(root, &u.id)?;
    if s.status(root) == "stopped" {
        return Err(format!("container {} is not running", u.id));
    }
    let limits = match u.resources.as_deref() {
        Some(src) => {
            let mut text = Vec::new();
            let r = if src == "-" {
                std::io::stdin().take(MAX_INPUT).read_to_end(&mut text)
            } else {
                std::fs::File::open(src).and_then(|f| f.take(MAX_INPUT).read_to_end(&mut text))
            };
            r.map_err(|e| format!("update: --resources {src}: {e}"))?;
            // the device rules as created, to tell a resend from a change
            let spec = super::bundle::load(&state::dir(root, &u.id))?;
            let now = spec
                .linux
                .and_then(|l| l.resources)
                .map(|r| r.devices)
                .unwrap_or_default();
            let now: Vec<serde_json::Value> = now.iter().map(device_json).collect();
            limits_of(parse(&text)?, &now)?
        }
        None => limits_of_options(u)?,
    };
    crate::kernel::cgroup::container::update(&s.cgroups, &limits)
}

/// A device rule as config.json writes it.
fn device_json(r: &super::spec::DeviceRule) -> serde_json::Value {
    let mut v = serde_json::json!({"allow": r.allow});
    if let Some(t) = &r.typ {
        v["type"] = t.clone().into();
    }
    if let Some(m) = r.major {
        v["major"] = m.into();
    }
    if let Some(m) = r.minor {
        v["minor"] = m.into();
    }
    if let Some(a) = &r.access {
        v["access"] = a.clone().into();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(json: &str) -> Result<Limits, String> {
        let now = [serde_json::json!({"allow": false, "access": "rwm"})];
        limits_of(parse(json.as_bytes())?, &now)
    }

    #[test]
    fn what_runc_reads_and_what_it_means() {
        let l = lim(r#"{"memory":{"limit":33554432,"reservation":25165824},"cpu":{"shares":100,"quota":500000,"period":1000000,"cpus":"0"},"pids":{"limit":20}}"#).unwrap();
        assert_eq!(l.memory, 33554432);
        assert_eq!(l.memory_reservation, 25165824);
        assert_eq!(
            (l.cpu_shares, l.cpu_quota, l.cpu_period),
            (100, 500000, 1000000)
        );
        assert_eq!(l.cpuset_cpus, "0");
        assert_eq!(l.pids, 20);
        assert_eq!(l.memory_swap, 0, "not given: unchanged");
        // Go's decoder matches keys without regard to case
        let l = lim(r#"{"CPU":{"Cpus":"1"}}"#).unwrap();
        assert_eq!(l.cpuset_cpus, "1");
        let l = lim(r#"{"cpu":{"realtimeRuntime":500001}}"#).unwrap();
        assert_eq!(l.cpu_rt_runtime, 500001);
        // containerd resends the device rules: unchanged ones pass, others are refused
        assert!(lim(r#"{"devices":[{"allow":false,"access":"rwm"}],"pids":{"limit":5}}"#).is_ok());
        assert!(lim(r#"{"devices":[{"allow":true,"access":"rwm"}]}"#)
            .unwrap_err()
            .contains("devices"));
        assert!(lim(r#"{"blockIO":{"weight":0}}"#).is_ok());
        assert!(lim(r#"{"hugepageLimits":[]}"#).is_ok());
    }

    #[test]
    fn what_it_cannot_honour_is_named() {
        for (json, field) in [
            (r#"{"blockIO":{"weight":300}}"#, "blockIO"),
            (r#"{"memory":{"kernel":1048576}}"#, "memory.kernel"),
            (r#"{"memory":{"swappiness":10}}"#, "swappiness"),
            (r#"{"unified":{"cpu.max":"max 100000"}}"#, "unified"),
            (r#"{"rdma":{}}"#, "rdma"),
            (r#"{"intelRdt":{}}"#, "intelRdt"),
            (r#"{"memory":{"limit":"lots"}}"#, "invalid type"),
            ("[", "EOF"),
        ] {
            let e = lim(json).unwrap_err();
            assert!(e.contains(field), "{json}: {e}");
        }
    }
}

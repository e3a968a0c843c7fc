//! Resource limits as values are written (a spec's `sandbox.limits`, the operator's
//! `settings.json` `limits`): their parsing, shared with `capsule exec`'s flags so that a
//! value reads the same everywhere. Limits are no grant of access: a spec's may only
//! lower what the operator's settings give (the runtime takes the lower of the two).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Limits as written, each a number or a string read as the flag's value is (`memory:
/// 8G`, `pids: 4096`, `cpus: 1.5`, `activity_timeout: 15m`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitValues {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fds: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_size: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity_timeout: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_size: Option<serde_json::Value>,
}

impl LimitValues {
    pub fn is_empty(&self) -> bool {
        *self == LimitValues::default()
    }

    /// Read `name`'s value with `parse` (a flag's parser); the error names it
    /// (`limits.memory: ...`).
    pub fn read<T>(
        &self,
        name: &str,
        parse: fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        let v = match name {
            "memory" => &self.memory,
            "pids" => &self.pids,
            "cpus" => &self.cpus,
            "fds" => &self.fds,
            "file_size" => &self.file_size,
            "tmp_size" => &self.tmp_size,
            _ => &self.activity_timeout,
        };
        let text = match v {
            None => return Ok(None),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            Some(other) => other.to_string(),
        };
        parse(&text)
            .map(Some)
            .map_err(|e| format!("limits.{name}: {e}"))
    }

    /// Every value read: the first one that cannot be, as an error.
    pub fn check(&self) -> Result<(), String> {
        self.read("memory", parse_size)?;
        self.read("pids", parse_count)?;
        self.read("cpus", parse_cpus)?;
        self.read("fds", parse_count)?;
        self.read("file_size", parse_size)?;
        self.read("tmp_size", parse_size)?;
        self.read("activity_timeout", parse_duration)?;
        Ok(())
    }
}

/// A size: bytes, or with a binary suffix `K`, `M`, `G`, `T` (also `KiB`, `KB`, `k`, …:
/// all powers of 1024), e.g. `512M`, `1.5G`. At least one byte.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("{s:?}: not a size (e.g. 512M, 2G, 4096)")),
    };
    let bad = || format!("{s:?}: not a size (e.g. 512M, 2G, 4096)");
    let v = if num.contains('.') {
        let f: f64 = num.parse().map_err(|_| bad())?;
        let b = f * mult as f64;
        if !b.is_finite() || b >= u64::MAX as f64 {
            return Err(bad());
        }
        b as u64
    } else {
        num.parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(mult))
            .ok_or_else(bad)?
    };
    if v == 0 {
        return Err(format!("{s:?}: a limit of nothing lets nothing run"));
    }
    Ok(v)
}

/// A number of CPUs, fractions allowed (`0.5`, `2`), in thousandths; at least 0.01.
pub fn parse_cpus(s: &str) -> Result<u64, String> {
    let bad = || format!("{s:?}: not a number of CPUs (e.g. 0.5, 2)");
    let t = s.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad());
    }
    let f: f64 = t.parse().map_err(|_| bad())?;
    if !(0.01..=1_000_000.0).contains(&f) {
        return Err(format!("{s:?}: from 0.01 to 1000000 CPUs"));
    }
    Ok((f * 1000.0).round() as u64)
}

/// A count of at least 1 (`--fds`).
pub fn parse_count(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err(format!("{s:?}: a limit of nothing lets nothing run")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?}: not a whole number")),
    }
}

/// A duration of more than nothing (`--activity-timeout`), as `humantime` reads it.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err(format!("{s:?}: a limit of nothing lets nothing run")),
        Ok(d) => Ok(d),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

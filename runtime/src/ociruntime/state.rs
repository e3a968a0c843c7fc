//! A container's state directory, `<root>/<id>/`: `state.json` (what capsule-runc needs
//! later: the init's pid and start time, the bundle, the cgroups), `exec.fifo` while the
//! container is created and not started, `refusals.jsonl` (capsule's listing) and
//! `limits_reached` (why its disk guard stopped it; see `docs/oci.md`). The status the runtime spec defines is worked out from these and from
//! the init process itself ([`Saved::status`]).

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Saved {
    pub id: String,
    pub pid: libc::pid_t,
    /// Field 22 of `/proc/<pid>/stat`: the same pid with another start time is another process.
    pub start_time: u64,
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    pub created: String,
    pub cgroups: Vec<PathBuf>,
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
    /// The hooks as config.json gave them at create: what `start` and `delete` run
    /// (changes to config.json after create do not affect the container).
    #[serde(default)]
    pub hooks: Option<super::spec::Hooks>,
    /// capsule's own limits applied where the bundle set none (`memory=…`, `pids=…`).
    #[serde(default)]
    pub default_limits: Vec<String>,
}

pub fn dir(root: &Path, id: &str) -> PathBuf {
    root.join(id)
}

pub fn load(root: &Path, id: &str) -> Result<Saved, String> {
    let p = dir(root, id).join("state.json");
    let b = std::fs::read(&p).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("container {id} does not exist")
        } else {
            format!("reading {}: {e}", p.display())
        }
    })?;
    serde_json::from_slice(&b).map_err(|e| format!("{}: {e}", p.display()))
}

pub fn save(root: &Path, s: &Saved) -> Result<(), String> {
    let d = dir(root, &s.id);
    let tmp = d.join("state.json.tmp");
    let b = serde_json::to_vec(s).map_err(|e| e.to_string())?;
    std::fs::write(&tmp, b).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, d.join("state.json"))
        .map_err(|e| format!("writing the state of {}: {e}", s.id))
}

/// Start time of `pid` (0 if gone), and whether it is a zombie.
pub fn proc_start(pid: libc::pid_t) -> (u64, bool) {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return (0, false);
    };
    // fields after the command's closing parenthesis
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let zombie = f.first().is_some_and(|st| *st == "Z" || *st == "X");
    (f.get(19).and_then(|v| v.parse().ok()).unwrap_or(0), zombie)
}

impl Saved {
    /// The init is alive (the same process as at create).
    pub fn alive(&self) -> bool {
        let (t, zombie) = proc_start(self.pid);
        t != 0 && t == self.start_time && !zombie
    }

    /// `creating` never shows (create writes the state last), then `created`, `running`,
    /// `paused`, `stopped`.
    pub fn status(&self, root: &Path) -> &'static str {
        if !self.alive() {
            "stopped"
        } else if dir(root, &self.id).join("exec.fifo").exists() {
            "created"
        } else if crate::kernel::cgroup::container::is_frozen(&self.cgroups) {
            "paused"
        } else {
            "running"
        }
    }

    /// The runtime spec's state, with runc's extra fields (which go-runc reads), in
    /// runc's order.
    pub fn container_state(&self, root: &Path) -> ContainerState {
        let status = self.status(root);
        ContainerState {
            oci_version: "1.0.2",
            id: self.id.clone(),
            pid: if status == "stopped" { 0 } else { self.pid },
            status,
            bundle: self.bundle.clone(),
            rootfs: self.rootfs.clone(),
            created: self.created.clone(),
            annotations: self.annotations.clone(),
            owner: String::new(),
            // capsule's: why its disk guard stopped the container
            limits_reached: reached(&dir(root, &self.id)),
        }
    }

    /// [`Self::container_state`] as a JSON value (for hooks, which are given it on stdin).
    pub fn spec_state(&self, root: &Path) -> serde_json::Value {
        serde_json::to_value(self.container_state(root)).unwrap_or_default()
    }
}

/// What `state` prints and `list --format json` lists: the runtime spec's state with
/// runc's fields, in runc's order.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerState {
    pub oci_version: &'static str,
    pub id: String,
    pub pid: libc::pid_t,
    pub status: &'static str,
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    pub created: String,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
    pub owner: String,
    /// capsule's own field, named as docs/oci.md has it (not camelCased with runc's)
    #[serde(rename = "limits_reached", skip_serializing_if = "Vec::is_empty")]
    pub limits_reached: Vec<String>,
}

/// Now, as RFC 3339 in UTC (to the nanosecond).
pub fn now_rfc3339() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // civil from days (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_nanos()
    )
}

/// Why the guard stopped the container, in the state directory.
pub const REACHED: &str = "limits_reached";

/// What the guard stopped the container for (empty: nothing).
pub fn reached(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join(REACHED))
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

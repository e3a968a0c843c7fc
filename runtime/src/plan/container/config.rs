//! A bundle's `config.json`, as the types that hold exactly what capsule-runc enforces:
//! every object refuses fields it does not know (`deny_unknown_fields`), so a field that
//! cannot be honoured fails `create` with one line naming it (serde's message with the
//! line and column), never a silent skip. Values that are present but cannot be honoured
//! are refused by [`check`], naming the field. Reading the file is the front end's
//! (`crate::ociruntime`'s `bundle::load`); this module reads nothing.
//!
//! (oci-spec's types, used by `capsule export` to write bundles, accept every field of
//! the spec; a runtime that must refuse what it cannot enforce needs the closed list.)

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    pub oci_version: String,
    pub process: Option<Process>,
    pub root: Option<Root>,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub domainname: Option<String>,
    #[serde(default)]
    pub mounts: Vec<Mount>,
    #[serde(default)]
    pub hooks: Option<Hooks>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    pub linux: Option<Linux>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Process {
    #[serde(default)]
    pub terminal: bool,
    pub console_size: Option<ConsoleSize>,
    pub user: User,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    pub cwd: String,
    pub capabilities: Option<Capabilities>,
    #[serde(default)]
    pub rlimits: Vec<Rlimit>,
    #[serde(default)]
    pub no_new_privileges: bool,
    pub apparmor_profile: Option<String>,
    pub oom_score_adj: Option<i32>,
    pub selinux_label: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleSize {
    pub height: u16,
    pub width: u16,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct User {
    #[serde(default)]
    pub uid: u32,
    #[serde(default)]
    pub gid: u32,
    pub umask: Option<u32>,
    #[serde(default)]
    pub additional_gids: Vec<u32>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    #[serde(default)]
    pub bounding: Vec<String>,
    #[serde(default)]
    pub effective: Vec<String>,
    #[serde(default)]
    pub inheritable: Vec<String>,
    #[serde(default)]
    pub permitted: Vec<String>,
    #[serde(default)]
    pub ambient: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rlimit {
    #[serde(rename = "type")]
    pub typ: String,
    pub hard: u64,
    pub soft: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Root {
    pub path: PathBuf,
    #[serde(default)]
    pub readonly: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    pub destination: PathBuf,
    #[serde(rename = "type")]
    pub typ: Option<String>,
    pub source: Option<PathBuf>,
    #[serde(default)]
    pub options: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hooks {
    #[serde(default)]
    pub prestart: Vec<Hook>,
    #[serde(default)]
    pub create_runtime: Vec<Hook>,
    #[serde(default)]
    pub create_container: Vec<Hook>,
    #[serde(default)]
    pub start_container: Vec<Hook>,
    #[serde(default)]
    pub poststart: Vec<Hook>,
    #[serde(default)]
    pub poststop: Vec<Hook>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Hook {
    pub path: PathBuf,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    pub timeout: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Linux {
    #[serde(default)]
    pub namespaces: Vec<Namespace>,
    #[serde(default)]
    pub uid_mappings: Vec<IdMapping>,
    #[serde(default)]
    pub gid_mappings: Vec<IdMapping>,
    #[serde(default)]
    pub devices: Vec<Device>,
    pub cgroups_path: Option<String>,
    pub resources: Option<Resources>,
    pub rootfs_propagation: Option<String>,
    pub seccomp: Option<super::seccomp::Seccomp>,
    #[serde(default)]
    pub sysctl: BTreeMap<String, String>,
    #[serde(default)]
    pub masked_paths: Vec<PathBuf>,
    #[serde(default)]
    pub readonly_paths: Vec<PathBuf>,
    pub mount_label: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Namespace {
    #[serde(rename = "type")]
    pub typ: String,
    pub path: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IdMapping {
    #[serde(rename = "containerID")]
    pub container_id: u32,
    #[serde(rename = "hostID")]
    pub host_id: u32,
    pub size: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Device {
    pub path: PathBuf,
    #[serde(rename = "type")]
    pub typ: String,
    #[serde(default)]
    pub major: i64,
    #[serde(default)]
    pub minor: i64,
    pub file_mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resources {
    #[serde(default)]
    pub devices: Vec<DeviceRule>,
    pub memory: Option<Memory>,
    pub cpu: Option<Cpu>,
    pub pids: Option<Pids>,
    #[serde(rename = "blockIO")]
    pub block_io: Option<BlockIo>,
    #[serde(default)]
    pub hugepage_limits: Vec<HugepageLimit>,
    #[serde(default)]
    pub unified: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceRule {
    pub allow: bool,
    #[serde(rename = "type")]
    pub typ: Option<String>,
    pub major: Option<i64>,
    pub minor: Option<i64>,
    pub access: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Memory {
    pub limit: Option<i64>,
    pub reservation: Option<i64>,
    pub swap: Option<i64>,
    pub swappiness: Option<u64>,
    #[serde(rename = "disableOOMKiller")]
    pub disable_oom_killer: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cpu {
    pub shares: Option<u64>,
    pub quota: Option<i64>,
    pub period: Option<u64>,
    pub cpus: Option<String>,
    pub mems: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pids {
    pub limit: i64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockIo {
    pub weight: Option<u16>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HugepageLimit {
    pub page_size: String,
    pub limit: i64,
}

/// Namespace kinds, as config.json names them, with their clone flags.
pub const NAMESPACES: &[(&str, libc::c_int)] = &[
    ("user", libc::CLONE_NEWUSER),
    ("pid", libc::CLONE_NEWPID),
    ("network", libc::CLONE_NEWNET),
    ("ipc", libc::CLONE_NEWIPC),
    ("uts", libc::CLONE_NEWUTS),
    ("mount", libc::CLONE_NEWNS),
    ("cgroup", libc::CLONE_NEWCGROUP),
];

/// Mount options capsule-runc applies as flags (the rest go to the filesystem as data).
pub fn mount_flag(opt: &str) -> Option<(bool, libc::c_ulong)> {
    Some(match opt {
        "ro" => (true, libc::MS_RDONLY),
        "rw" => (false, libc::MS_RDONLY),
        "nosuid" => (true, libc::MS_NOSUID),
        "suid" => (false, libc::MS_NOSUID),
        "nodev" => (true, libc::MS_NODEV),
        "dev" => (false, libc::MS_NODEV),
        "noexec" => (true, libc::MS_NOEXEC),
        "exec" => (false, libc::MS_NOEXEC),
        "sync" => (true, libc::MS_SYNCHRONOUS),
        "async" => (false, libc::MS_SYNCHRONOUS),
        "dirsync" => (true, libc::MS_DIRSYNC),
        "noatime" => (true, libc::MS_NOATIME),
        "atime" => (false, libc::MS_NOATIME),
        "nodiratime" => (true, libc::MS_NODIRATIME),
        "diratime" => (false, libc::MS_NODIRATIME),
        "relatime" => (true, libc::MS_RELATIME),
        "norelatime" => (false, libc::MS_RELATIME),
        "strictatime" => (true, libc::MS_STRICTATIME),
        "nostrictatime" => (false, libc::MS_STRICTATIME),
        "mand" => (true, libc::MS_MANDLOCK),
        "nomand" => (false, libc::MS_MANDLOCK),
        "bind" => (true, libc::MS_BIND),
        "rbind" => (true, libc::MS_BIND | libc::MS_REC),
        "silent" => (true, libc::MS_SILENT),
        "loud" => (false, libc::MS_SILENT),
        _ => return None,
    })
}

/// Propagation options (of a mount, or `linux.rootfsPropagation`) as mount flags. The
/// container's mount namespace is new and every mount in it is made private first, so a
/// shared mount is a peer only of mounts in the container's namespace (and ones copied
/// from it), never of the host's.
pub fn propagation(opt: &str) -> Option<libc::c_ulong> {
    Some(match opt {
        "private" => libc::MS_PRIVATE,
        "rprivate" => libc::MS_PRIVATE | libc::MS_REC,
        "shared" => libc::MS_SHARED,
        "rshared" => libc::MS_SHARED | libc::MS_REC,
        "slave" => libc::MS_SLAVE,
        "rslave" => libc::MS_SLAVE | libc::MS_REC,
        "unbindable" => libc::MS_UNBINDABLE,
        "runbindable" => libc::MS_UNBINDABLE | libc::MS_REC,
        _ => return None,
    })
}

/// Values present that capsule-runc cannot honour: the first one, naming its field.
pub fn check(spec: &Spec) -> Result<(), String> {
    if !spec.oci_version.starts_with("1.") {
        return Err(format!(
            "ociVersion {:?}: only 1.x is supported",
            spec.oci_version
        ));
    }
    let Some(root) = &spec.root else {
        return Err("root: missing (a container needs a root filesystem)".into());
    };
    if root.path.as_os_str().is_empty() {
        return Err("root.path: empty".into());
    }
    let Some(p) = &spec.process else {
        return Err("process: missing".into());
    };
    if p.args.is_empty() {
        return Err("process.args: empty (no command to run)".into());
    }
    if !p.cwd.starts_with('/') {
        return Err(format!("process.cwd {:?}: must be absolute", p.cwd));
    }
    if p.selinux_label.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err("process.selinuxLabel: SELinux labels are not supported".into());
    }
    for r in &p.rlimits {
        if rlimit_resource(&r.typ).is_none() {
            return Err(format!("process.rlimits: unknown type {:?}", r.typ));
        }
    }
    if let Some(c) = &p.capabilities {
        for (set, names) in [
            ("bounding", &c.bounding),
            ("effective", &c.effective),
            ("inheritable", &c.inheritable),
            ("permitted", &c.permitted),
            ("ambient", &c.ambient),
        ] {
            for n in names {
                if n.parse::<caps::Capability>().is_err() {
                    return Err(format!(
                        "process.capabilities.{set}: unknown capability {n:?}"
                    ));
                }
            }
        }
    }
    for (i, m) in spec.mounts.iter().enumerate() {
        if !m.destination.is_absolute() {
            return Err(format!(
                "mounts[{i}].destination {:?}: must be absolute",
                m.destination
            ));
        }
        if climbs(&m.destination) {
            return Err(format!(
                "mounts[{i}].destination {:?}: must not contain `..`",
                m.destination
            ));
        }
        let typ = m.typ.as_deref().unwrap_or("");
        for o in &m.options {
            if matches!(o.as_str(), "idmap" | "ridmap" | "remount") || o.starts_with("X-mount.") {
                return Err(format!("mounts[{i}].options: {o:?} is not supported"));
            }
            if o == "tmpcopyup" && typ != "tmpfs" {
                return Err(format!(
                    "mounts[{i}].options: \"tmpcopyup\" is for a tmpfs, not {typ:?}"
                ));
            }
        }
        let bind = m.options.iter().any(|o| o == "bind" || o == "rbind") || typ == "bind";
        if bind && m.source.as_ref().is_none_or(|s| !s.is_absolute()) {
            return Err(format!(
                "mounts[{i}].source: a bind mount needs an absolute source"
            ));
        }
    }
    let Some(l) = &spec.linux else {
        return Err("linux: missing (capsule-runc runs Linux containers)".into());
    };
    let mut seen = Vec::new();
    for n in &l.namespaces {
        if !NAMESPACES.iter().any(|(k, _)| *k == n.typ) {
            return Err(format!(
                "linux.namespaces: namespace type {:?} is not supported",
                n.typ
            ));
        }
        if seen.contains(&n.typ) {
            return Err(format!("linux.namespaces: {:?} given twice", n.typ));
        }
        seen.push(n.typ.clone());
    }
    if !seen.iter().any(|t| t == "mount") {
        return Err(
            "linux.namespaces: a container without its own mount namespace is not supported".into(),
        );
    }
    if l.namespaces
        .iter()
        .any(|n| n.typ == "mount" && n.path.is_some())
    {
        return Err(
            "linux.namespaces: joining another mount namespace (path) is not supported".into(),
        );
    }
    let userns = seen.iter().any(|t| t == "user");
    if !userns && (!l.uid_mappings.is_empty() || !l.gid_mappings.is_empty()) {
        return Err("linux.uidMappings: mappings without a user namespace".into());
    }
    if userns
        && l.namespaces
            .iter()
            .any(|n| n.typ == "user" && n.path.is_none())
        && l.uid_mappings.is_empty()
    {
        return Err("linux.uidMappings: a new user namespace needs mappings".into());
    }
    if let Some(prop) = &l.rootfs_propagation {
        if !prop.is_empty() && propagation(prop).is_none() {
            return Err(format!(
                "linux.rootfsPropagation {prop:?}: one of private, shared, slave, unbindable (r...)"
            ));
        }
    }
    if l.mount_label.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err("linux.mountLabel: SELinux labels are not supported".into());
    }
    if let Some(r) = &l.resources {
        if r.hugepage_limits.iter().any(|h| h.limit > 0) {
            return Err("linux.resources.hugepageLimits: not supported".into());
        }
        // 0 is "not set" (what Docker writes when no weight is asked), as runc reads it
        if r.block_io
            .as_ref()
            .is_some_and(|b| b.weight.is_some_and(|w| w != 0))
        {
            return Err("linux.resources.blockIO.weight: not supported".into());
        }
        if let Some(m) = &r.memory {
            if m.swappiness.is_some() || m.disable_oom_killer == Some(true) {
                return Err(
                    "linux.resources.memory: swappiness and disableOOMKiller are not supported"
                        .into(),
                );
            }
        }
    }
    for (i, d) in l.devices.iter().enumerate() {
        if !matches!(d.typ.as_str(), "c" | "u" | "b" | "p") {
            return Err(format!("linux.devices[{i}].type {:?}: c, u, b or p", d.typ));
        }
        // (with a user namespace the host's node of that path is bound: `..` would
        // name another host file)
        if !d.path.starts_with("/dev/") || climbs(&d.path) {
            return Err(format!(
                "linux.devices[{i}].path {:?}: must be below /dev, without `..`",
                d.path
            ));
        }
    }
    for (what, list) in [
        ("maskedPaths", &l.masked_paths),
        ("readonlyPaths", &l.readonly_paths),
    ] {
        if let Some(p) = list.iter().find(|p| !p.is_absolute() || climbs(p)) {
            return Err(format!(
                "linux.{what} {p:?}: must be absolute, without `..`"
            ));
        }
    }
    for k in l.sysctl.keys() {
        if k.contains('/') || k.contains("..") {
            return Err(format!("linux.sysctl: invalid key {k:?}"));
        }
    }
    if let Some(s) = &l.seccomp {
        super::seccomp::check(s)?;
    }
    Ok(())
}

/// Does path `p` have a `..` component?
fn climbs(p: &Path) -> bool {
    p.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// `RLIMIT_*` by the name config.json gives it.
pub fn rlimit_resource(name: &str) -> Option<libc::__rlimit_resource_t> {
    Some(match name {
        "RLIMIT_AS" => libc::RLIMIT_AS,
        "RLIMIT_CORE" => libc::RLIMIT_CORE,
        "RLIMIT_CPU" => libc::RLIMIT_CPU,
        "RLIMIT_DATA" => libc::RLIMIT_DATA,
        "RLIMIT_FSIZE" => libc::RLIMIT_FSIZE,
        "RLIMIT_LOCKS" => libc::RLIMIT_LOCKS,
        "RLIMIT_MEMLOCK" => libc::RLIMIT_MEMLOCK,
        "RLIMIT_MSGQUEUE" => libc::RLIMIT_MSGQUEUE,
        "RLIMIT_NICE" => libc::RLIMIT_NICE,
        "RLIMIT_NOFILE" => libc::RLIMIT_NOFILE,
        "RLIMIT_NPROC" => libc::RLIMIT_NPROC,
        "RLIMIT_RSS" => libc::RLIMIT_RSS,
        "RLIMIT_RTPRIO" => libc::RLIMIT_RTPRIO,
        "RLIMIT_RTTIME" => libc::RLIMIT_RTTIME,
        "RLIMIT_SIGPENDING" => libc::RLIMIT_SIGPENDING,
        "RLIMIT_STACK" => libc::RLIMIT_STACK,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str) -> Result<Spec, String> {
        let text = format!(
            r#"{{"ociVersion":"1.0.2","process":{{"user":{{"uid":0,"gid":0}},"args":["sh"],"cwd":"/"}},
            "root":{{"path":"rootfs"}},"linux":{{"namespaces":[{{"type":"mount"}},{{"type":"pid"}}]{extra}}}}}"#
        );
        let s: Spec = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        check(&s)?;
        Ok(s)
    }

    #[test]
    fn a_field_it_cannot_honour_is_named() {
        assert!(spec("").is_ok());
        assert!(spec(r#","intelRdt":{}"#).unwrap_err().contains("intelRdt"));
        assert!(spec(r#","rootfsPropagation":"rshared""#).is_ok());
        assert!(spec(r#","rootfsPropagation":"sideways""#)
            .unwrap_err()
            .contains("rootfsPropagation"));
        assert!(spec(r#","mountLabel":"system_u""#)
            .unwrap_err()
            .contains("mountLabel"));
        // Docker writes weight 0 for "no weight asked"
        assert!(spec(r#","resources":{"blockIO":{"weight":0}}"#).is_ok());
        assert!(spec(r#","resources":{"blockIO":{"weight":500}}"#)
            .unwrap_err()
            .contains("linux.resources.blockIO.weight"));
        let mounts = |m: &str| -> Result<Spec, String> {
            let mut s = spec("")?;
            s.mounts = serde_json::from_str(m).map_err(|e| e.to_string())?;
            check(&s).map(|()| s)
        };
        assert!(
            mounts(r#"[{"destination":"/run","type":"tmpfs","options":["tmpcopyup"]}]"#).is_ok()
        );
        assert!(
            mounts(r#"[{"destination":"/run","type":"proc","options":["tmpcopyup"]}]"#)
                .unwrap_err()
                .contains("mounts[0].options")
        );
        assert!(spec(r#","resources":{"rdma":{}}"#)
            .unwrap_err()
            .contains("rdma"));
        assert!(spec(
            r#","devices":[{"path":"/dev/../etc/shadow","type":"c","major":1,"minor":3}]"#
        )
        .unwrap_err()
        .contains("linux.devices[0].path"));
        assert!(spec(r#","maskedPaths":["/proc/../../etc"]"#)
            .unwrap_err()
            .contains("maskedPaths"));
        let mut s = spec("").unwrap();
        s.linux
            .as_mut()
            .unwrap()
            .namespaces
            .retain(|n| n.typ != "mount");
        assert!(check(&s).unwrap_err().contains("mount namespace"));
    }
}

//! The disk guard's part of a container's plan: the reserve kept free and the host
//! filesystems watched, decided from config.json and capsule-runc's settings. The guard
//! that keeps it is `crate::ociruntime::diskguard`.
//!
//! The reserve: the annotation `dev.capsule.disk-reserve` of config.json, else
//! `CAPSULE_OCI_DISK_RESERVE` in capsule-runc's environment, else none with
//! `CAPSULE_OCI_DEFAULTS=0`, else capsule's default (the smaller of 5% and 2 GiB);
//! values as settings.json's `disk_reserve` (`"1G"`, `"10%"`, `"5%,1G"`, `"off"`).
//! Watched: the filesystem behind the rootfs unless `root.readonly`, and those behind
//! writable bind mounts. A filesystem the bundle mounts itself (a tmpfs: memory, bounded
//! by the memory cgroup) is not the host's and not watched.

use super::config::Spec;
use super::{ContainerFacts, Refused};
use crate::limits::DiskReserve;
use std::path::{Path, PathBuf};

/// The annotation that sets a container's reserve.
pub const ANNOTATION: &str = "dev.capsule.disk-reserve";
/// The variable of capsule-runc's environment that sets the reserve of its containers.
pub const ENV: &str = "CAPSULE_OCI_DISK_RESERVE";

/// What the disk guard of a container keeps and watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskPlan {
    pub reserve: DiskReserve,
    /// The reserve is capsule's own, not the bundle's: listed with the default limits.
    pub own: bool,
    /// The rootfs is writable: its filesystem is watched.
    pub rootfs: bool,
    /// The sources of the writable bind mounts, as host paths (a relative source is the
    /// host's, from `/`, as the front end binds it).
    pub binds: Vec<PathBuf>,
}

impl DiskPlan {
    /// The host paths watched, the rootfs (as the front end resolved it) first.
    pub fn paths(&self, rootfs: &Path) -> Vec<PathBuf> {
        let root = self.rootfs.then(|| rootfs.to_path_buf());
        root.into_iter().chain(self.binds.iter().cloned()).collect()
    }
}

/// The disk guard's plan for `spec`'s container.
pub fn disk(spec: &Spec, f: &ContainerFacts) -> Result<DiskPlan, Refused> {
    let (reserve, own) = if let Some(v) = spec.annotations.get(ANNOTATION) {
        let r = DiskReserve::parse(v).map_err(|e| format!("annotations.{ANNOTATION}: {e}"))?;
        (r, false)
    } else if let Some(v) = &f.disk_reserve {
        (
            DiskReserve::parse(v).map_err(|e| format!("{ENV}: {e}"))?,
            true,
        )
    } else if !f.settings.defaults {
        (DiskReserve::Off, true)
    } else {
        (DiskReserve::default(), true)
    };
    let binds = spec
        .mounts
        .iter()
        .filter(|m| {
            let bind = m.typ.as_deref() == Some("bind")
                || m.options.iter().any(|o| o == "bind" || o == "rbind");
            bind && !m.options.iter().any(|o| o == "ro")
        })
        .filter_map(|m| m.source.as_ref().map(|s| Path::new("/").join(s)))
        .collect();
    Ok(DiskPlan {
        reserve,
        own,
        rootfs: !spec.root.as_ref().is_some_and(|r| r.readonly),
        binds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> Spec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn the_host_paths_it_can_write() {
        let s = spec(serde_json::json!({
            "ociVersion": "1.0.2",
            "root": {"path": "rootfs", "readonly": false},
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/data", "type": "bind", "source": "/srv/data"},
                {"destination": "/cfg", "source": "/etc/cfg", "options": ["rbind", "ro"]},
                {"destination": "/logs", "source": "var/log", "options": ["rbind", "rw"]},
                {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"}
            ]
        }));
        let f = ContainerFacts::default();
        assert_eq!(
            disk(&s, &f).unwrap().paths(Path::new("/b/rootfs")),
            [
                PathBuf::from("/b/rootfs"),
                "/srv/data".into(),
                "/var/log".into()
            ]
        );
        let ro = spec(serde_json::json!({
            "ociVersion": "1.0.2",
            "root": {"path": "rootfs", "readonly": true}
        }));
        assert!(disk(&ro, &f)
            .unwrap()
            .paths(Path::new("/b/rootfs"))
            .is_empty());
    }

    #[test]
    fn the_annotation_then_the_environment_then_the_defaults_set_the_reserve() {
        let mut s = spec(serde_json::json!({"ociVersion": "1.0.2"}));
        let mut f = ContainerFacts::default();
        let r = |s: &Spec, f: &ContainerFacts| disk(s, f).map(|d| (d.reserve, d.own));
        assert_eq!(r(&s, &f).unwrap(), (DiskReserve::default(), true));
        f.settings.defaults = false;
        assert_eq!(r(&s, &f).unwrap(), (DiskReserve::Off, true));
        f.disk_reserve = Some("1G".into());
        assert_eq!(r(&s, &f).unwrap(), (DiskReserve::Bytes(1 << 30), true));
        f.disk_reserve = Some("lots".into());
        assert!(r(&s, &f).unwrap_err().0.contains(ENV));
        s.annotations.insert(ANNOTATION.into(), "off".into());
        assert_eq!(r(&s, &f).unwrap(), (DiskReserve::Off, false));
        s.annotations.insert(ANNOTATION.into(), "1G".into());
        assert_eq!(r(&s, &f).unwrap(), (DiskReserve::Bytes(1 << 30), false));
        s.annotations.insert(ANNOTATION.into(), "lots".into());
        assert!(r(&s, &f).unwrap_err().0.contains(ANNOTATION));
    }
}

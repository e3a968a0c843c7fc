//! Devices a command gets: by name (null, zero, full, tty, random, urandom, its own
//! terminals through a private devpts), the GPU's (`/dev/nvidia*`, `/dev/dri/*`) when
//! present unless `--no-gpu`, and what a spec asks for under `sandbox.devices` — never
//! disks, memory, input (keyboard, mouse) or consoles and virtual terminals.
//!
//! A requested name is refused by name (`sda`, `input/event0`, `tty1`, …) and, when the
//! node exists, by what it really is: any block device, and the character device numbers
//! of memory, input, consoles and virtual terminals, even behind a symlink or a new name.

use std::path::{Component, Path, PathBuf};

/// Devices every command gets (bound from the host's `/dev`).
pub const DEFAULT_DEVICES: &[&str] = &["null", "zero", "full", "tty", "random", "urandom"];

/// Why a device name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error("sandbox.devices: {name:?} is not a device name under /dev (write e.g. `fuse` or `/dev/fuse`)")]
    BadName { name: String },
    #[error("sandbox.devices: /dev/{name} is refused: it reaches {what}; tasks never get disks, memory, keyboard and mouse, or consoles")]
    Refused { name: String, what: &'static str },
    #[error("sandbox.devices: /dev/{name}: {why}")]
    Unusable { name: String, why: String },
}

/// Normalize a `sandbox.devices` entry (`fuse`, `/dev/fuse`, `net/tun`) to a relative
/// name under /dev, refusing `..`, empty names and paths outside /dev.
pub fn device_name(entry: &str) -> Result<PathBuf, DeviceError> {
    let bad = || DeviceError::BadName {
        name: entry.to_string(),
    };
    let p = Path::new(entry);
    let rel = if p.is_absolute() {
        p.strip_prefix("/dev").map_err(|_| bad())?
    } else {
        p
    };
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            _ => return Err(bad()),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// The refused class of a relative device name, if any.
pub fn refused_by_name(name: &Path) -> Option<&'static str> {
    let s = name.to_string_lossy();
    let first = s.split('/').next().unwrap_or("");
    let digits_after = |prefix: &str| {
        s.strip_prefix(prefix)
            .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
    };
    // folders of disks and input devices
    match first {
        "disk" | "mapper" | "block" | "bsg" | "md" => return Some("a disk"),
        "input" => return Some("keyboard and mouse (input)"),
        _ => {}
    }
    if s.contains('/') {
        return None;
    }
    // the names of disks (as the brief lists them: any name with these prefixes)
    let disk_prefixes = [
        "sd", "nvme", "vd", "hd", "xvd", "loop", "dm-", "md", "mmcblk", "sr",
    ];
    // short prefixes that only mean a disk when a number follows (sg0, st0, ram0, nbd0…)
    let numbered = ["sg", "st", "nst", "ram", "nbd", "zram", "rbd", "scd", "ubd"];
    if disk_prefixes.iter().any(|p| s.starts_with(p)) || numbered.iter().any(|p| digits_after(p)) {
        return Some("a disk");
    }
    if matches!(s.as_ref(), "mem" | "kmem" | "port" | "kmsg" | "mcelog") {
        return Some("memory");
    }
    if matches!(s.as_ref(), "uinput" | "psaux")
        || s.starts_with("hidraw")
        || s.starts_with("event")
        || s.starts_with("mouse")
    {
        return Some("keyboard and mouse (input)");
    }
    if s == "console" || s == "tty0" || digits_after("tty") || s.starts_with("vcs") || s == "systty"
    {
        return Some("a console or virtual terminal");
    }
    None
}

/// Linux `major(dev)` / `minor(dev)`.
fn major_minor(rdev: u64) -> (u64, u64) {
    let major = ((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0x0000_0fff);
    let minor = ((rdev >> 12) & 0xffff_ff00) | (rdev & 0x0000_00ff);
    (major, minor)
}

/// The refused class of a device node by its type and number (Linux numbering).
pub fn refused_by_number(is_block: bool, rdev: u64) -> Option<&'static str> {
    if is_block {
        return Some("a disk");
    }
    match major_minor(rdev) {
        // mem: mem 1, kmem 2, port 4, kmsg 11; null 3, zero 5, full 7, random 8, urandom 9 fine
        (1, m) if !matches!(m, 3 | 5 | 7 | 8 | 9) => Some("memory"),
        (4, m) if m < 64 => Some("a console or virtual terminal"),
        (5, 1) => Some("a console or virtual terminal"),
        (7, _) => Some("a console or virtual terminal"),
        (13, _) => Some("keyboard and mouse (input)"),
        (10, 223) => Some("keyboard and mouse (input)"), // uinput
        (21, _) => Some("a disk"),                       // sg (SCSI generic)
        _ => None,
    }
}

/// Validate one `sandbox.devices` entry against `dev_root` (the host's `/dev`): refused
/// names and refused nodes (following a symlink to what it names, inside /dev) are errors.
/// Returns the relative name; a device that does not exist is fine (nothing to bind).
pub fn validate(entry: &str, dev_root: &Path) -> Result<PathBuf, DeviceError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let name = device_name(entry)?;
    let refuse = |what| DeviceError::Refused {
        name: name.display().to_string(),
        what,
    };
    if let Some(what) = refused_by_name(&name) {
        return Err(refuse(what));
    }
    let path = dev_root.join(&name);
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(name);
    }
    let real = std::fs::canonicalize(&path).map_err(|e| DeviceError::Unusable {
        name: name.display().to_string(),
        why: e.to_string(),
    })?;
    let dev_canon = std::fs::canonicalize(dev_root).unwrap_or_else(|_| dev_root.to_path_buf());
    match real.strip_prefix(&dev_canon) {
        Ok(rel) => {
            if let Some(what) = refused_by_name(rel) {
                return Err(refuse(what));
            }
        }
        Err(_) => {
            return Err(DeviceError::Unusable {
                name: name.display().to_string(),
                why: format!("resolves to {} outside /dev", real.display()),
            })
        }
    }
    let md = std::fs::metadata(&real).map_err(|e| DeviceError::Unusable {
        name: name.display().to_string(),
        why: e.to_string(),
    })?;
    let ft = md.file_type();
    if ft.is_block_device() || ft.is_char_device() {
        if let Some(what) = refused_by_number(ft.is_block_device(), md.rdev()) {
            return Err(refuse(what));
        }
    } else if ft.is_dir() {
        // a folder of devices (e.g. `snd`): every node inside must pass too
        let rd = std::fs::read_dir(&real).map_err(|e| DeviceError::Unusable {
            name: name.display().to_string(),
            why: e.to_string(),
        })?;
        for e in rd.flatten() {
            if let Ok(m) = e.metadata() {
                let t = m.file_type();
                if (t.is_block_device() || t.is_char_device())
                    && refused_by_number(t.is_block_device(), m.rdev()).is_some()
                {
                    return Err(refuse(
                        refused_by_number(t.is_block_device(), m.rdev())
                            .unwrap_or("a refused device"),
                    ));
                }
            }
        }
    } else {
        return Err(DeviceError::Unusable {
            name: name.display().to_string(),
            why: "not a device node".into(),
        });
    }
    Ok(name)
}

/// GPU device nodes present under `dev_root`: `nvidia*` and the nodes in `dri/`.
pub fn gpu_devices(dev_root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dev_root) {
        for e in rd.flatten() {
            let n = e.file_name();
            let node = e.file_type().is_ok_and(|t| !t.is_dir());
            if node && n.to_string_lossy().starts_with("nvidia") {
                out.push(PathBuf::from(n));
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(dev_root.join("dri")) {
        for e in rd.flatten() {
            // device nodes only (not the by-path folder)
            if e.file_type().is_ok_and(|t| !t.is_dir()) {
                out.push(Path::new("dri").join(e.file_name()));
            }
        }
    }
    out.sort();
    out
}

/// The device names (relative to /dev) a command gets: the defaults, the GPU's unless
/// `no_gpu`, and the validated `requested` ones. Defaults that do not exist are skipped.
pub fn device_plan(
    requested: &[String],
    gpu: bool,
    dev_root: &Path,
) -> Result<Vec<PathBuf>, DeviceError> {
    let mut out: Vec<PathBuf> = DEFAULT_DEVICES
        .iter()
        .map(PathBuf::from)
        .filter(|p| dev_root.join(p).exists())
        .collect();
    if gpu {
        out.extend(gpu_devices(dev_root));
    }
    for r in requested {
        let n = validate(r, dev_root)?;
        if dev_root.join(&n).exists() && !out.contains(&n) {
            out.push(n);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_table() {
        let refused = [
            "sda",
            "/dev/sda",
            "sdb1",
            "nvme0n1",
            "nvme0n1p2",
            "vda",
            "hda",
            "xvda",
            "loop0",
            "loop-control",
            "dm-0",
            "md0",
            "mmcblk0",
            "mmcblk0p1",
            "sr0",
            "disk/by-id/x",
            "mapper/root",
            "mem",
            "kmem",
            "port",
            "input/event0",
            "/dev/input/mice",
            "uinput",
            "hidraw0",
            "console",
            "tty0",
            "tty1",
            "tty63",
            "vcs",
            "vcs1",
            "vcsa1",
            "vcsu",
        ];
        for n in refused {
            let e = validate(n, Path::new("/nonexistent-dev")).unwrap_err();
            assert!(matches!(e, DeviceError::Refused { .. }), "{n}: {e}");
            assert!(e.to_string().contains("refused"), "{e}");
        }
        for ok in [
            "fuse",
            "/dev/fuse",
            "net/tun",
            "kvm",
            "ttyS0",
            "ttyUSB0",
            "snd/controlC0",
            "nvidia0",
            "dri/card0",
        ] {
            assert!(validate(ok, Path::new("/nonexistent-dev")).is_ok(), "{ok}");
        }
        for bad in ["", "/etc/passwd", "../sda", "net/../sda", "/dev"] {
            assert!(
                matches!(device_name(bad), Err(DeviceError::BadName { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn by_number() {
        let mk = |ma: u64, mi: u64| (ma << 8) | mi;
        assert_eq!(refused_by_number(false, mk(1, 3)), None); // null
        assert_eq!(refused_by_number(false, mk(1, 9)), None); // urandom
        assert!(refused_by_number(false, mk(1, 1)).is_some()); // mem
        assert!(refused_by_number(false, mk(4, 1)).is_some()); // tty1
        assert_eq!(refused_by_number(false, mk(4, 64)), None); // ttyS0
        assert!(refused_by_number(false, mk(13, 64)).is_some()); // input/event0
        assert!(refused_by_number(false, mk(5, 1)).is_some()); // console
        assert_eq!(refused_by_number(false, mk(5, 0)), None); // tty
        assert!(refused_by_number(true, mk(8, 0)).is_some()); // sda
    }

    #[test]
    fn gpu_nodes_unless_turned_off() {
        let d = tempfile::tempdir().unwrap();
        for n in [
            "nvidia0",
            "nvidiactl",
            "null",
            "sda",
            "dri/card0",
            "dri/renderD128",
        ] {
            let p = d.path().join(n);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"").unwrap();
        }
        std::fs::create_dir_all(d.path().join("dri/by-path")).unwrap();
        std::fs::create_dir_all(d.path().join("nvidia-caps")).unwrap();
        let want: Vec<PathBuf> = ["dri/card0", "dri/renderD128", "nvidia0", "nvidiactl"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(gpu_devices(d.path()), want);
        let with = device_plan(&[], true, d.path()).unwrap();
        assert_eq!(with, [&[PathBuf::from("null")][..], &want[..]].concat());
        let without = device_plan(&[], false, d.path()).unwrap();
        assert_eq!(without, vec![PathBuf::from("null")]);
        // the spec cannot ask for a disk even when it exists
        assert!(device_plan(&["sda".into()], false, d.path()).is_err());
    }

    #[test]
    fn real_dev_symlink_to_disk_is_refused() {
        // a name that looks harmless but resolves to a refused node
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/null", d.path().join("fine")).unwrap();
        // resolves outside the given dev root: unusable
        assert!(matches!(
            validate("fine", d.path()),
            Err(DeviceError::Unusable { .. })
        ));
        std::fs::create_dir(d.path().join("input")).unwrap();
        std::fs::write(d.path().join("input/event0"), b"").unwrap();
        std::os::unix::fs::symlink("input/event0", d.path().join("kbd")).unwrap();
        assert!(matches!(
            validate("kbd", d.path()),
            Err(DeviceError::Refused { .. })
        ));
        let plan = device_plan(&[], true, Path::new("/dev")).unwrap();
        assert!(plan.contains(&PathBuf::from("null")) && plan.contains(&PathBuf::from("urandom")));
        assert!(!plan
            .iter()
            .any(|p| p.starts_with("sda") || p.starts_with("input")));
    }
}

//! The bundle's OCI runtime spec, `config.json`, rendered with `oci-spec` from a resolved
//! [`SandboxPolicy`] at open, and our own checks of the fields the OCI runtime spec
//! requires. This open-time file is a picture of the policy, not what runs: what an exec
//! enforces is the runtime's plan, whose OCI rendering (`capsule_runtime::linux::oci`,
//! written by `capsule export`, shown by `capsule inspect`) runs under runc and crun.
//!
//! The rendering: the host root read-only (`root: {path: "/", readonly: true}`), the
//! workspace bind-mounted read-write at its own path, the capsule's tmp at `/tmp`, the
//! manifest and sentinel in `linux.readonlyPaths`, hidden paths in `linux.maskedPaths`
//! (revealed carve-outs as read-only binds after them), and namespaces mount, pid, ipc,
//! uts, user, cgroup, plus network unless the policy's network is `open`.

use crate::error::{Error, Result};
use crate::policy::{NetworkMode, SandboxPolicy};
use oci_spec::runtime::{
    Capabilities, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxIdMappingBuilder,
    LinuxNamespaceBuilder, LinuxNamespaceType, Mount, MountBuilder, ProcessBuilder, RootBuilder,
    Spec, UserBuilder,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// OCI runtime spec version we render.
pub const OCI_VERSION: &str = "1.2.0";

fn bind(src: &Path, dst: &Path, rw: bool) -> Result<Mount> {
    MountBuilder::default()
        .destination(dst.to_path_buf())
        .typ("bind")
        .source(src.to_path_buf())
        .options(vec![
            "rbind".to_string(),
            if rw { "rw" } else { "ro" }.to_string(),
            "nosuid".to_string(),
            "nodev".to_string(),
        ])
        .build()
        .map_err(|e| Error::other(format!("config.json: mount {}: {e}", dst.display())))
}

/// Render `config.json` for `policy`, running as `uid`/`gid`.
pub fn render(policy: &SandboxPolicy, uid: u32, gid: u32) -> Result<Spec> {
    let e = |what: &str, err: &dyn std::fmt::Display| {
        Error::other(format!("config.json: {what}: {err}"))
    };
    let mut spec = Spec::default();
    spec.set_version(OCI_VERSION.to_string());
    spec.set_hostname(Some(format!("capsule-{}", policy.capsule_name)));
    spec.set_root(Some(
        RootBuilder::default()
            .path(PathBuf::from("/"))
            .readonly(true)
            .build()
            .map_err(|x| e("root", &x))?,
    ));
    let mut env = vec![
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        "TMPDIR=/tmp".to_string(),
    ];
    if let Some(h) = &policy.home {
        env.push(format!("HOME={}", h.display()));
    }
    spec.set_process(Some(
        ProcessBuilder::default()
            .terminal(false)
            .user(
                UserBuilder::default()
                    .uid(uid)
                    .gid(gid)
                    .build()
                    .map_err(|x| e("user", &x))?,
            )
            .args(vec!["/bin/sh".to_string()])
            .env(env)
            .cwd(policy.workspace.clone())
            // capsule drops every capability; oci-spec's default would grant three
            .capabilities(
                LinuxCapabilitiesBuilder::default()
                    .bounding(Capabilities::new())
                    .effective(Capabilities::new())
                    .inheritable(Capabilities::new())
                    .permitted(Capabilities::new())
                    .ambient(Capabilities::new())
                    .build()
                    .map_err(|x| e("capabilities", &x))?,
            )
            .no_new_privileges(true)
            .build()
            .map_err(|x| e("process", &x))?,
    ));
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    mounts.push(bind(&policy.workspace, &policy.workspace, true)?);
    mounts.push(bind(&policy.tmp_dir, Path::new("/tmp"), true)?);
    // the host's /var/tmp is the capsule's tmp too (the executor binds the same folder)
    mounts.push(bind(&policy.tmp_dir, Path::new("/var/tmp"), true)?);
    for w in &policy.writable {
        mounts.push(bind(w, w, true)?);
    }
    for r in &policy.revealed {
        mounts.push(bind(r, r, false)?);
    }
    spec.set_mounts(Some(mounts));

    let mut ns_types = vec![
        LinuxNamespaceType::Mount,
        LinuxNamespaceType::Pid,
        LinuxNamespaceType::Ipc,
        LinuxNamespaceType::Uts,
        LinuxNamespaceType::User,
        LinuxNamespaceType::Cgroup,
    ];
    if policy.network.mode != NetworkMode::Open {
        ns_types.push(LinuxNamespaceType::Network);
    }
    let namespaces = ns_types
        .into_iter()
        .map(|t| {
            LinuxNamespaceBuilder::default()
                .typ(t)
                .build()
                .map_err(|x| e("namespace", &x))
        })
        .collect::<Result<Vec<_>>>()?;
    let uid_map = LinuxIdMappingBuilder::default()
        .container_id(uid)
        .host_id(uid)
        .size(1u32)
        .build()
        .map_err(|x| e("uid mapping", &x))?;
    let gid_map = LinuxIdMappingBuilder::default()
        .container_id(gid)
        .host_id(gid)
        .size(1u32)
        .build()
        .map_err(|x| e("gid mapping", &x))?;
    let mut masked: Vec<String> = vec![
        "/proc/kcore".into(),
        "/proc/keys".into(),
        "/proc/timer_list".into(),
        "/sys/firmware".into(),
    ];
    masked.extend(policy.hidden.iter().map(|h| h.path.display().to_string()));
    let readonly: Vec<String> = policy
        .read_only
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let linux = LinuxBuilder::default()
        .namespaces(namespaces)
        .uid_mappings(vec![uid_map])
        .gid_mappings(vec![gid_map])
        .masked_paths(masked)
        .readonly_paths(readonly)
        .build()
        .map_err(|x| e("linux", &x))?;
    spec.set_linux(Some(linux));
    let mut ann = HashMap::new();
    ann.insert("dev.capsule.name".to_string(), policy.capsule_name.clone());
    ann.insert("dev.capsule.policy-digest".to_string(), policy.digest());
    ann.insert(
        "dev.capsule.network".to_string(),
        policy.network.mode.as_str().to_string(),
    );
    spec.set_annotations(Some(ann));
    Ok(spec)
}

/// Our checks of what the OCI runtime spec requires (and what we promise) beyond what
/// deserializing into `oci-spec`'s types checks. Returns every problem found.
pub fn validate(spec: &Spec) -> std::result::Result<(), Vec<String>> {
    let mut p = Vec::new();
    let v = spec.version();
    let mut parts = v.split('.');
    let semver_ok = parts.next() == Some("1")
        && parts.next().is_some_and(|m| m.parse::<u32>().is_ok())
        && parts.next().is_some_and(|m| {
            m.split('-')
                .next()
                .is_some_and(|x| x.parse::<u32>().is_ok())
        });
    if !semver_ok {
        p.push(format!("ociVersion {v:?} is not a 1.x.y version"));
    }
    match spec.root() {
        None => p.push("root is required on Linux".into()),
        Some(r) if r.path().as_os_str().is_empty() => p.push("root.path is empty".into()),
        _ => {}
    }
    match spec.process() {
        None => p.push("process is required".into()),
        Some(pr) => {
            if pr.args().as_ref().is_none_or(|a| a.is_empty()) {
                p.push("process.args must not be empty".into());
            }
            if !pr.cwd().is_absolute() {
                p.push(format!(
                    "process.cwd {} is not absolute",
                    pr.cwd().display()
                ));
            }
            for kv in pr.env().iter().flatten() {
                if !kv.contains('=') {
                    p.push(format!("process.env entry {kv:?} has no '='"));
                }
            }
        }
    }
    for m in spec.mounts().iter().flatten() {
        if !m.destination().is_absolute() {
            p.push(format!(
                "mount destination {} is not absolute",
                m.destination().display()
            ));
        }
        if m.typ().as_deref() == Some("bind") {
            match m.source() {
                Some(s) if s.is_absolute() => {}
                _ => p.push(format!(
                    "bind mount at {} needs an absolute source",
                    m.destination().display()
                )),
            }
        }
    }
    if let Some(l) = spec.linux() {
        let mut seen = Vec::new();
        for ns in l.namespaces().iter().flatten() {
            if seen.contains(&ns.typ()) {
                p.push(format!("namespace {:?} listed twice", ns.typ()));
            }
            seen.push(ns.typ());
        }
        for mp in l
            .masked_paths()
            .iter()
            .flatten()
            .chain(l.readonly_paths().iter().flatten())
        {
            if !mp.starts_with('/') {
                p.push(format!(
                    "path {mp:?} in maskedPaths/readonlyPaths is not absolute"
                ));
            }
        }
        let has_user = seen.contains(&LinuxNamespaceType::User);
        if has_user && l.uid_mappings().as_ref().is_none_or(|m| m.is_empty()) {
            p.push("a user namespace needs uidMappings".into());
        }
    } else {
        p.push("linux is required for a Linux bundle".into());
    }
    if p.is_empty() {
        Ok(())
    } else {
        Err(p)
    }
}

/// Write `config.json` after validating it, and check it loads back.
pub fn write(spec: &Spec, path: &Path) -> Result<()> {
    validate(spec).map_err(|v| Error::other(format!("{}: {}", path.display(), v.join("; "))))?;
    let json = serde_json::to_vec_pretty(spec)
        .map_err(|x| Error::other(format!("{}: {x}", path.display())))?;
    std::fs::write(path, json).map_err(|x| Error::io(path, x))?;
    Spec::load(path)
        .map_err(|x| Error::other(format!("{}: does not load back: {x}", path.display())))?;
    Ok(())
}

/// Load and validate a `config.json`.
pub fn load_and_validate(path: &Path) -> Result<Spec> {
    let spec = Spec::load(path).map_err(|x| Error::other(format!("{}: {x}", path.display())))?;
    validate(&spec).map_err(|v| Error::other(format!("{}: {}", path.display(), v.join("; "))))?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{HiddenPath, HiddenReason, NetworkPolicy};

    fn policy(mode: NetworkMode) -> SandboxPolicy {
        SandboxPolicy {
            version: 1,
            capsule_name: "c".into(),
            workspace: "/w/c".into(),
            read_only: vec!["/w/c/capsule-manifest.json".into()],
            tmp_dir: "/b/c/tmp".into(),
            home: Some("/home/u".into()),
            home_layer: None,
            cache_dir: None,
            writable: vec![],
            hidden: vec![HiddenPath {
                path: "/home/u/.ssh".into(),
                reason: HiddenReason::Credentials,
            }],
            revealed: vec![],
            pass_env: vec![],
            devices: vec![],
            network: NetworkPolicy {
                mode,
                ..Default::default()
            },
        }
    }

    #[test]
    fn rendered_config_validates_and_network_namespace_follows_mode() {
        for (mode, netns) in [(NetworkMode::None, true), (NetworkMode::Open, false)] {
            let s = render(&policy(mode), 1000, 1000).unwrap();
            validate(&s).unwrap();
            let has = s
                .linux()
                .as_ref()
                .unwrap()
                .namespaces()
                .as_ref()
                .unwrap()
                .iter()
                .any(|n| n.typ() == LinuxNamespaceType::Network);
            assert_eq!(has, netns);
            let masked = s.linux().as_ref().unwrap().masked_paths().clone().unwrap();
            assert!(masked.contains(&"/home/u/.ssh".to_string()));
        }
    }

    #[test]
    fn validation_catches_missing_and_relative_fields() {
        let mut s = render(&policy(NetworkMode::None), 0, 0).unwrap();
        s.set_version("2.0".into());
        s.set_process(None);
        s.set_root(None);
        let mut m = s.mounts().clone().unwrap();
        m.push(
            MountBuilder::default()
                .destination(PathBuf::from("relative"))
                .typ("bind")
                .source(PathBuf::from("also-relative"))
                .build()
                .unwrap(),
        );
        s.set_mounts(Some(m));
        let errs = validate(&s).unwrap_err();
        let all = errs.join("\n");
        for n in [
            "ociVersion",
            "root is required",
            "process is required",
            "not absolute",
            "absolute source",
        ] {
            assert!(all.contains(n), "{all}");
        }
    }
}

//! `capsule export <capsule> DIR [-- CMD ARGS...]`: a self-contained OCI bundle of the
//! capsule, resolved now, that `runc run -b DIR ID` and `crun run -b DIR ID` run: DIR
//! holds `config.json` (the rendering of the plan `capsule exec` would run,
//! [`crate::linux::oci`]) and `rootfs/`, an empty root holding only the plan's top-level
//! symlinks, onto which the runtime binds the host's folders as the plan says.
//!
//! DIR must be new or empty; the bundle is made in a sibling temporary directory and
//! renamed into place, so a failure leaves nothing behind.

use crate::exit::{CliError, CliResult};
use clap::Args;
use std::ffi::OsString;
use std::path::PathBuf;

/// Write an OCI bundle (config.json + rootfs/) that runc or crun runs.
///
/// The bundle enforces what an OCI runtime can: the mounts (hidden paths, read-only
/// system, the workspace writable), seccomp, no capabilities, no_new_privs, the
/// namespaces. It does not enforce Landlock, the network allowlist proxy, the home
/// layer's review or the exec record (see the config's `dev.capsule.not-enforced`).
#[derive(Debug, Args)]
#[command(trailing_var_arg = true)]
pub struct ExportArgs {
    /// The capsule: a name (`capsule list`) or a workspace path.
    pub capsule: String,
    /// The bundle directory to write (new, or empty).
    pub dir: PathBuf,
    /// Give the process a terminal (`process.terminal`), for interactive use.
    #[arg(short = 't', long = "tty")]
    pub tty: bool,
    /// Print what was written as JSON.
    #[arg(long)]
    pub json: bool,
    /// The command and its arguments (after `--`); default: your shell.
    #[arg(value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `capsule export`.
pub fn export(a: ExportArgs) -> CliResult {
    imp::export(a)
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;
    pub fn export(_: ExportArgs) -> CliResult {
        Err(CliError::failure(
            "capsule export writes Linux OCI bundles; it runs on Linux only",
        ))
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use crate::linux::oci;
    use capsule_bundle::layout::{capsule_root, Layout};
    use capsule_bundle::store;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    use std::path::Path;
    use std::process::ExitCode;

    fn fail(msg: impl Into<String>) -> CliError {
        CliError::failure(msg)
    }

    fn esc(p: &Path) -> String {
        capsule_bundle::escape::path(p)
    }

    /// The target directory: absent (made by the final rename) or an empty real directory
    /// (removed just before it). Returns whether it exists.
    fn check_target(dir: &Path) -> Result<bool, CliError> {
        match std::fs::symlink_metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(fail(format!("export {}: {e}", esc(dir)))),
            Ok(md) if !md.is_dir() => Err(fail(format!(
                "export {}: exists and is not a directory",
                esc(dir)
            ))),
            Ok(_) => {
                let mut entries = std::fs::read_dir(dir)
                    .map_err(|e| fail(format!("export {}: {e}", esc(dir))))?;
                if entries.next().is_some() {
                    return Err(fail(format!(
                        "export {}: not empty (give a new or empty directory)",
                        esc(dir)
                    )));
                }
                Ok(true)
            }
        }
    }

    pub fn export(a: ExportArgs) -> CliResult {
        let root =
            capsule_root().ok_or_else(|| fail("no capsule root: set CAPSULE_ROOT or HOME"))?;
        let layout = Layout::new(root);
        let cap = store::resolve(&layout, &a.capsule).map_err(|e| fail(e.to_string()))?;
        let dir = std::path::absolute(&a.dir)
            .map_err(|e| fail(format!("export {}: {e}", esc(&a.dir))))?;
        let exists = check_target(&dir)?;
        let parent = dir
            .parent()
            .ok_or_else(|| fail(format!("export {}: no parent directory", esc(&dir))))?;
        let argv = if a.command.is_empty() {
            vec![std::env::var_os("SHELL")
                .filter(|s| Path::new(s).is_absolute())
                .unwrap_or_else(|| "/bin/sh".into())]
        } else {
            a.command.clone()
        };
        let plan = crate::exec::plan_now(&cap, &layout, argv)?;
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let rendered = oci::render(
            &plan,
            uid,
            gid,
            Path::new("rootfs"),
            a.tty,
            &[
                ("name", cap.name.clone()),
                ("policy-digest", plan.policy.digest()),
                ("exported-from", "capsule export".to_string()),
            ],
        )
        .map_err(|e| fail(e.to_string()))?;

        // made next to DIR, renamed into place: nothing half-made is ever at DIR
        let tmp = tempfile::Builder::new()
            .prefix(".capsule-export-")
            .tempdir_in(parent)
            .map_err(|e| fail(format!("export {}: {e}", esc(parent))))?;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| fail(format!("export {}: {e}", esc(tmp.path()))))?;
        let rootfs = tmp.path().join("rootfs");
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(&rootfs)
            .map_err(|e| fail(format!("export {}: {e}", esc(&rootfs))))?;
        for (target, at) in &rendered.links {
            let rel = at.strip_prefix("/").unwrap_or(at);
            if rel.components().count() != 1 {
                return Err(fail(format!(
                    "export: symlink {} is not at the top of the root",
                    esc(at)
                )));
            }
            std::os::unix::fs::symlink(target, rootfs.join(rel))
                .map_err(|e| fail(format!("export: symlink {}: {e}", esc(at))))?;
        }
        for d in &rendered.dirs {
            let rel = d.strip_prefix("/").unwrap_or(d);
            std::fs::DirBuilder::new()
                .mode(0o755)
                .recursive(true)
                .create(rootfs.join(rel))
                .map_err(|e| fail(format!("export: mkdir {}: {e}", esc(d))))?;
        }
        let config = tmp.path().join("config.json");
        let json = serde_json::to_vec_pretty(&rendered.spec)
            .map_err(|e| fail(format!("export: config.json: {e}")))?;
        // 0600: the environment it holds may carry what the spec passes by name
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&config)
                .and_then(|mut f| f.write_all(&json))
                .map_err(|e| fail(format!("export {}: {e}", esc(&config))))?;
        }
        capsule_bundle::policy::oci::load_and_validate(&config).map_err(|e| fail(e.to_string()))?;
        if exists {
            std::fs::remove_dir(&dir).map_err(|e| fail(format!("export {}: {e}", esc(&dir))))?;
        }
        let made = tmp.keep();
        std::fs::rename(&made, &dir).map_err(|e| {
            let _ = std::fs::remove_dir_all(&made);
            fail(format!("export {}: {e}", esc(&dir)))
        })?;
        if a.json {
            crate::cli::print_json(&serde_json::json!({
                "capsule": cap.name,
                "dir": dir,
                "config": dir.join("config.json"),
                "rootfs": dir.join("rootfs"),
                "args": rendered.spec.process().as_ref().and_then(|p| p.args().clone()),
                "not_enforced": oci::NOT_ENFORCED,
            }));
        } else {
            println!(
                "exported {} to {}: run it with `runc run -b {} ID` or `crun run -b {} ID`",
                capsule_bundle::escape::name(cap.name.as_bytes()),
                esc(&dir),
                esc(&dir),
                esc(&dir)
            );
            println!("an OCI runtime does not enforce:");
            for n in oci::NOT_ENFORCED {
                println!("  {n}");
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

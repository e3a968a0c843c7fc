//! Building the sandbox's root from `capsule exec`'s mount plan ([`MountStep`]) with the
//! kernel stack's mounts ([`crate::kernel::mount`]): the setup root, each step, `/dev`
//! sealed, the switch; the per-exec mounts of a prepared root; the home's view
//! (`homeview`).

mod homeview;

use super::plan::MountStep;
use crate::kernel::mount::{
    bind, c, cstr, ctx, dev, devpts, enter_setup_root, finish_root, mask_bind, mkdir_p,
    mount_point, overlay, proc_fs, seal_dev, task_tmp, tmpfs, under, MaskSource, MASK_DIR,
    MASK_FILE, NEW, OLD, R,
};
use crate::kernel::sys::{self, Kind};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Mounts each exec makes for itself: their Landlock rules are added by the exec.
pub(crate) const PER_EXEC_ROOTS: &[&str] = &["/proc", "/dev/pts", "/dev/shm"];

/// [`PER_EXEC_ROOTS`] and the exec's own tmp of a plan with a tmp size
/// ([`MountStep::TaskTmp`]).
pub(crate) fn per_exec_roots(steps: &[MountStep]) -> Vec<&Path> {
    let mut v: Vec<&Path> = PER_EXEC_ROOTS.iter().map(Path::new).collect();
    for s in steps {
        if let MountStep::TaskTmp { dsts, .. } = s {
            v.extend(dsts.iter().map(std::path::PathBuf::as_path));
        }
    }
    v
}

/// Step 2: one plan step.
pub fn apply(step: &MountStep) -> R<()> {
    match step {
        MountStep::Bind {
            src,
            dst,
            rw,
            optional,
        } => {
            let what = || {
                format!(
                    "bind {} at {}{}",
                    src.display(),
                    dst.display(),
                    if *rw { " (rw)" } else { "" }
                )
            };
            let s = ctx(under(OLD, src), what)?;
            let d = ctx(under(NEW, dst), what)?;
            let k = sys::kind_follow(&s);
            if k == Kind::Missing {
                if *optional {
                    return Ok(());
                }
                return ctx(Err(io::Error::from_raw_os_error(libc::ENOENT)), what);
            }
            ctx(mount_point(&d, k == Kind::Dir), what)?;
            ctx(bind(&s, &d, *rw), what)
        }
        MountStep::Tmpfs { dst, mode } => {
            let what = || format!("tmpfs at {}", dst.display());
            let d = ctx(under(NEW, dst), what)?;
            ctx(mount_point(&d, true), what)?;
            ctx(tmpfs(&d, *mode), what)
        }
        MountStep::Overlay {
            lower,
            upper,
            work,
            dst,
        } => {
            let what = || format!("overlay at {}", dst.display());
            let d = ctx(under(NEW, dst), what)?;
            ctx(mount_point(&d, true), what)?;
            let lower = lower
                .iter()
                .map(|l| under(OLD, l))
                .collect::<io::Result<Vec<_>>>();
            let lower = ctx(lower, what)?;
            let upper = ctx(under(OLD, upper), what)?;
            let work = ctx(under(OLD, work), what)?;
            ctx(overlay(&d, &lower, &upper, &work), what)
        }
        MountStep::HomeView(v) => homeview::apply(v),
        MountStep::Proc { dst } => proc_fs(NEW, dst, MaskSource::SetupRoot),
        MountStep::Dev { dst, extra } => dev(dst, extra),
        MountStep::Mask { dst, carve_outs } => {
            let what = || format!("hiding {}", dst.display());
            let d = ctx(under(NEW, dst), what)?;
            match sys::kind(&d) {
                // missing because a shallower mask's tmpfs covers it: with carve-outs it
                // still needs its own tmpfs (deeper steps mount inside; a seal follows)
                Kind::Missing if *carve_outs => {
                    ctx(mount_point(&d, true), what)?;
                    ctx(tmpfs(&d, 0o755), what)
                }
                Kind::Missing => Ok(()),
                // a symlink points elsewhere; its target is masked on its own (policy
                // paths are canonical) and mounting on it would follow it
                Kind::Symlink => Ok(()),
                Kind::Dir if *carve_outs => ctx(tmpfs(&d, 0o755), what),
                Kind::Dir => ctx(mask_bind(&c(MASK_DIR), &d), what),
                _ => ctx(mask_bind(&c(MASK_FILE), &d), what),
            }
        }
        MountStep::ReadOnly { dst } => {
            let what = || format!("making {} read-only", dst.display());
            let d = ctx(under(NEW, dst), what)?;
            if sys::kind(&d) == Kind::Missing {
                return Ok(());
            }
            ctx(sys::mount_setattr(&d, sys::MOUNT_ATTR_RDONLY, false), what)
        }
        MountStep::Symlink { target, dst } => {
            let what = || format!("symlink {} -> {}", dst.display(), target.display());
            let d = ctx(under(NEW, dst), what)?;
            let t = ctx(cstr(target.as_os_str().as_bytes()), what)?;
            if sys::kind(&d) != Kind::Missing {
                return Ok(());
            }
            ctx(sys::symlink(&t, &d), what)
        }
        MountStep::Dir { dst } => {
            let what = || format!("mkdir {}", dst.display());
            let d = ctx(under(NEW, dst), what)?;
            ctx(mkdir_p(d.as_bytes()), what)
        }
        MountStep::TaskTmp { size, dsts } => task_tmp(NEW, *size, dsts),
    }
}

/// The mounts each exec makes for itself in its copy of a prepared root's mount namespace
/// ([`super::prepared`]): a fresh `/proc` of its own pid namespace (over the holder's), a
/// private devpts instance and a fresh `/dev/shm` (over the holder's), so no two execs
/// share processes, terminals or shared memory. (`/dev/shm` stays the prepared one when
/// host paths are bound below it, e.g. a workspace on the host's `/dev/shm`.) Runs in the
/// exec's init, in the final root.
pub fn exec_mounts(steps: &[MountStep]) -> R<()> {
    for s in steps {
        match s {
            MountStep::Proc { dst } => proc_fs("", dst, MaskSource::Here)?,
            MountStep::Dev { dst, .. } => {
                let pts = ctx(under("", &dst.join("pts")), || "a private devpts".into())?;
                ctx(devpts(&pts), || "mounting a private devpts".into())?;
                let shm = dst.join("shm");
                let below = steps.iter().any(|o| match o {
                    MountStep::Bind { dst: d, .. }
                    | MountStep::Overlay { dst: d, .. }
                    | MountStep::Mask { dst: d, .. }
                    | MountStep::Tmpfs { dst: d, .. }
                    | MountStep::Symlink { dst: d, .. }
                    | MountStep::Dir { dst: d } => d.starts_with(&shm),
                    _ => false,
                });
                if !below {
                    let p = ctx(under("", &shm), || "a private /dev/shm".into())?;
                    ctx(tmpfs(&p, 0o1777), || "mounting /dev/shm".into())?;
                }
            }
            // the exec's own, over the prepared one (a plan with mounts below it is not
            // prepared: see `prepared::fingerprint`)
            MountStep::TaskTmp { size, dsts } => task_tmp("", *size, dsts)?,
            _ => {}
        }
    }
    Ok(())
}

/// Apply a whole plan: setup root, steps, seal `/dev`, switch roots.
pub fn build_root(steps: &[MountStep]) -> R<()> {
    enter_setup_root()?;
    for s in steps {
        apply(s)?;
    }
    for s in steps {
        if let MountStep::Dev { dst, .. } = s {
            seal_dev(dst)?;
        }
    }
    finish_root()
}

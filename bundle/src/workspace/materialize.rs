//! Materializing a synthetic spec into a folder: `git init` with the default branch and
//! Kitsoki's identity, each step in order, then the overlay, then the provenance
//! exclusions. Git runs hermetically ([`crate::git::run::Git`]).
//!
//! A step's git arguments and the files it writes (into `.git/` too: config, filters,
//! hooks, `core.worktree`) are the spec author's code, so the steps never run on the
//! host: [`synthetic`] hands the parsed steps ([`Steps`]) to a [`StepRunner`] chosen by
//! the caller, which applies them with [`apply_steps_inside_sandbox`] somewhere else (the
//! runtime's build sandbox: only the staging workspace and a private tmp writable, no
//! network, the home hidden). The overlay is copied on the host afterwards
//! ([`crate::workspace::overlay::apply`]: files only, nothing executed, no symlink followed).
//!
//! Every path a step, the overlay or a probe names must stay inside the workspace: the
//! spec parser rejects `..` and absolute paths, and here each existing component is
//! checked against the real tree (`lstat`, no symlinks followed) before use; files are
//! opened with `O_NOFOLLOW`.
//!
//! The workspace is built in a temporary folder and renamed into place by
//! [`crate::open`]; [`rewrite_paths`] turns the absolute temporary paths git recorded
//! (remote URLs, worktree links) into the final ones before the rename. What the steps
//! left is hostile input for the host: [`check_staged`] refuses a `.git` with symlinks or
//! special files ([`crate::git::guard::check_git_dir`]) before the host touches the tree,
//! and [`rewrite_paths`], [`exclude_provenance`] and [`open_regular`] never follow a link
//! or block on a FIFO on their own either. The overlay copy is in `crate::workspace::overlay`.

use crate::error::{Error, IoContext, Result};
use crate::git::run::Git;
use crate::spec::{Action, Source, Spec, Step};
use crate::workspace::manifest::{MANIFEST, SENTINEL};
use crate::workspace::wspath::{inside, mkdirs, write_file, Last};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The parsed steps of a synthetic spec, as handed to a [`StepRunner`] (JSON between the
/// host and the sandbox).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Steps {
    pub default_branch: String,
    pub steps: Vec<Step>,
}

/// Why the steps did not all apply.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "failed")]
pub enum StepFailure {
    /// `git init` (or the identity config after it) failed.
    Init { msg: String },
    /// `steps[index]` failed.
    Step { index: usize, msg: String },
    /// The runner could not run the steps at all (e.g. no sandbox); nothing ran.
    Runner { msg: String },
}

/// Runs a synthetic spec's steps in `root` (an existing empty folder, the staging
/// workspace). The runtime's implementation runs them in its build sandbox; there is
/// deliberately no public implementation that runs them on the host.
pub trait StepRunner {
    /// Apply `steps` in `root`; `scratch` is a fresh private folder of this open (outside
    /// the workspace, removed afterwards) the runner may use (e.g. as the sandbox's tmp).
    fn run(
        &self,
        steps: &Steps,
        root: &Path,
        scratch: &Path,
    ) -> std::result::Result<(), StepFailure>;
}

/// Apply `steps` in `root`, in this process: runs `git init` and every step (the spec
/// author's git arguments and files) with this process's rights.
///
/// ONLY for the runtime's build sandbox (its internal `__materialize` entry runs this
/// inside the sandbox) and for this crate's tests. Opening a capsule goes through
/// [`crate::open::open`] with a [`StepRunner`] that sandboxes it.
pub fn apply_steps_inside_sandbox(
    job: &Steps,
    root: &Path,
) -> std::result::Result<(), StepFailure> {
    let default_branch = &job.default_branch;
    let git = Git::new(default_branch).map_err(|e| StepFailure::Init { msg: e.to_string() })?;
    let init_err = |msg: String| StepFailure::Init { msg };
    git.run(
        root,
        &[
            "init",
            "--quiet",
            &format!("--initial-branch={default_branch}"),
        ],
    )
    .map_err(init_err)?;
    add_identity(root).map_err(init_err)?;
    for step in &job.steps {
        apply(&git, root, step).map_err(|msg| StepFailure::Step {
            index: step.index,
            msg,
        })?;
    }
    Ok(())
}

/// Kitsoki's identity in the fresh repository's `.git/config`, byte for byte what
/// `git config user.email …` and `git config user.name …` write after `git init` (two git
/// processes fewer per open).
fn add_identity(root: &Path) -> std::result::Result<(), String> {
    let p = root.join(".git/config");
    let mut text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    if text.contains("[user]") || !text.ends_with('\n') {
        return Err(format!(
            "{}: not the config of a fresh repository",
            p.display()
        ));
    }
    text.push_str(&format!(
        "[user]\n\temail = {}\n\tname = {}\n",
        crate::git::run::IDENTITY_EMAIL,
        crate::git::run::IDENTITY_NAME
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&p)
        .map_err(|e| format!("{}: {e}", p.display()))?;
    f.write_all(text.as_bytes())
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// The in-process runner of this crate's own tests (the steps run unsandboxed).
#[cfg(test)]
pub(crate) struct InProcess;

#[cfg(test)]
impl StepRunner for InProcess {
    fn run(&self, steps: &Steps, root: &Path, _: &Path) -> std::result::Result<(), StepFailure> {
        apply_steps_inside_sandbox(steps, root)
    }
}

/// Build the synthetic spec into `root` (an existing empty folder): its steps through
/// `runner` (with `scratch` as its private folder), then the overlay, on the host.
pub fn synthetic(spec: &Spec, root: &Path, runner: &dyn StepRunner, scratch: &Path) -> Result<()> {
    let Source::Synthetic {
        default_branch,
        steps,
    } = &spec.source
    else {
        return Err(Error::other("not a synthetic spec"));
    };
    let job = Steps {
        default_branch: default_branch.clone(),
        steps: steps.clone(),
    };
    let file = &spec.path;
    runner.run(&job, root, scratch).map_err(|f| match f {
        StepFailure::Init { msg } => Error::SpecFile {
            file: file.clone(),
            msg: format!("git init: {msg}"),
        },
        StepFailure::Step { index, msg } => {
            let step = steps.iter().find(|s| s.index == index);
            Error::Step {
                file: file.clone(),
                line: step.and_then(|s| s.line),
                index,
                action: step.map(|s| s.action.name()).unwrap_or("?").to_string(),
                msg,
            }
        }
        StepFailure::Runner { msg } => Error::SpecFile {
            file: file.clone(),
            msg: format!("source.steps: {msg}"),
        },
    })?;
    crate::workspace::overlay::apply(spec, root)
}

fn apply(git: &Git, root: &Path, step: &Step) -> std::result::Result<(), String> {
    match &step.action {
        Action::Write { path, content } => write_file(root, path, content.as_bytes(), 0o644),
        Action::Mkdir { path } => {
            inside(root, path, Last::NoSymlink)?;
            mkdirs(root, Path::new(path))
        }
        Action::Remove { path } => {
            let p = inside(root, path, Last::SymlinkOk)?;
            match std::fs::symlink_metadata(&p) {
                Err(_) => Ok(()),
                Ok(md) if md.is_dir() => {
                    std::fs::remove_dir_all(&p).map_err(|e| format!("remove {path}: {e}"))
                }
                Ok(_) => std::fs::remove_file(&p).map_err(|e| format!("remove {path}: {e}")),
            }
        }
        Action::Commit {
            message,
            allow_empty,
        } => {
            git.run(root, &["add", "-A"])?;
            let mut args = vec!["commit", "--quiet", "-m", message.as_str()];
            if *allow_empty {
                args.push("--allow-empty");
            }
            git.run(root, &args).map(|_| ())
        }
        Action::Checkout { branch, create } => {
            let mut args = vec!["checkout", "--quiet"];
            if *create {
                args.push("-b");
            }
            args.push(branch);
            git.run(root, &args).map(|_| ())
        }
        Action::Branch { branch } => git.run(root, &["branch", branch.as_str()]).map(|_| ()),
        Action::Git {
            args,
            dir,
            allow_failure,
        } => {
            let cwd = match dir {
                Some(d) => {
                    let p = inside(root, d, Last::NoSymlink)?;
                    if !p.is_dir() {
                        return Err(format!("dir {d:?} is not a directory in the workspace"));
                    }
                    p
                }
                None => root.to_path_buf(),
            };
            match git.run(&cwd, args) {
                Ok(_) => Ok(()),
                Err(e) if *allow_failure => {
                    tracing::debug!("step {} failed as allowed: {e}", step.index);
                    Ok(())
                }
                Err(e) => Err(format!("git {}: {e}", args.join(" "))),
            }
        }
        Action::BareRemote { name, path, branch } => {
            let remote = inside(root, path, Last::NoSymlink)?;
            if let Some(parent) = Path::new(path).parent() {
                mkdirs(root, parent)?;
            }
            let remote_s = remote.to_string_lossy().into_owned();
            git.run(root, &["init", "--bare", "--quiet", remote_s.as_str()])?;
            git.run(root, &["remote", "add", name.as_str(), remote_s.as_str()])?;
            let branch = match branch {
                Some(b) => b.clone(),
                None => {
                    let out = git.run(root, &["branch", "--show-current"])?;
                    let b = String::from_utf8_lossy(&out.stdout).trim().to_string();
                    if b.is_empty() {
                        return Err("HEAD is detached; give the bare_remote a branch".into());
                    }
                    b
                }
            };
            git.run(
                root,
                &["push", "--quiet", "-u", name.as_str(), branch.as_str()],
            )
            .map(|_| ())
        }
    }
}

/// Append the manifest and sentinel to `.git/info/exclude` (as Kitsoki does). `.git`
/// and `.git/info` must be real directories and `exclude` a regular file (or absent):
/// nothing the steps planted is followed.
pub fn exclude_provenance(root: &Path) -> Result<()> {
    let git = root.join(".git");
    let md = std::fs::symlink_metadata(&git).at(&git)?;
    if !md.is_dir() {
        return Err(Error::other(format!(
            "{}: .git is not a directory",
            root.display()
        )));
    }
    let info = git.join("info");
    match std::fs::symlink_metadata(&info) {
        Ok(md) if md.is_dir() => {}
        Ok(_) => {
            return Err(Error::other(format!(
                "{}: not a directory (a symlink or a special file); not written",
                info.display()
            )))
        }
        Err(_) => std::fs::create_dir(&info).at(&info)?,
    }
    let p = info.join("exclude");
    let mut f = open_regular(&p, libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND)?;
    write!(f, "\n/{MANIFEST}\n/{SENTINEL}\n").at(&p)
}

/// What a sandboxed build left in `root`, checked before the host touches it: `.git` a
/// real directory pointing nowhere else, without symlinks or special files
/// ([`crate::git::guard::check_git_dir`]), and nothing but a regular file (or nothing) at
/// the names of capsule's own files (sentinel, manifest).
pub fn check_staged(root: &Path) -> std::result::Result<(), String> {
    crate::git::guard::check_git_dir(root).map_err(|e| e.to_string())?;
    for name in [SENTINEL, MANIFEST] {
        if let Ok(md) = std::fs::symlink_metadata(root.join(name)) {
            if !md.is_file() {
                return Err(format!(
                    "{name} (capsule's own file) is a symlink, folder or special file"
                ));
            }
        }
    }
    Ok(())
}

/// Remove a tree a sandboxed build wrote (e.g. the build's private tmp): a folder it
/// left without permissions (`chmod 000`) is made removable first. Symlinks are removed,
/// never followed.
pub fn remove_built(path: &Path) -> Result<()> {
    if std::fs::remove_dir_all(path).is_ok() || std::fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    fn open_up(dir: &Path, depth: usize) {
        if depth > 256 {
            return;
        }
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    open_up(&e.path(), depth + 1);
                }
            }
        }
    }
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        open_up(path, 0);
    }
    std::fs::remove_dir_all(path).at(path)
}

/// Largest git bookkeeping file [`rewrite_paths`] reads (configs, gitdir links: a few KiB).
const MAX_GIT_FILE: u64 = 4 << 20;

/// Open `p` with `flags` plus `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC` (mode 0644 when
/// created) and make sure it is a regular file with one link: a symlink, FIFO, device,
/// socket or hard link a sandboxed step planted is refused, never followed or blocked on.
pub fn open_regular(p: &Path, flags: libc::c_int) -> Result<std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let mut o = std::fs::OpenOptions::new();
    match flags & libc::O_ACCMODE {
        libc::O_RDONLY => o.read(true),
        libc::O_WRONLY => o.write(true),
        _ => o.read(true).write(true),
    };
    let f = o
        .custom_flags(
            (flags & !libc::O_ACCMODE) | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
        .mode(0o644)
        .open(p)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENXIO) {
                Error::other(format!(
                    "{}: a symlink or a special file (not followed)",
                    p.display()
                ))
            } else {
                Error::io(p, e)
            }
        })?;
    let md = f.metadata().at(p)?;
    if !md.is_file() || md.nlink() > 1 {
        return Err(Error::other(format!(
            "{}: not a regular file of its own (a FIFO, device, socket or hard link); not used",
            p.display()
        )));
    }
    Ok(f)
}

/// Replace the temporary build path `from` by the final path `to` in what git recorded
/// inside `root`: `config` files and worktree links of every git dir, and `.git` files.
/// Never follows a symlink: only real directories are walked, only regular files of their
/// own (bounded in size) are read and rewritten.
pub fn rewrite_paths(root: &Path, from: &Path, to: &Path) -> Result<()> {
    use std::io::{Read, Seek};
    let from_b = from.as_os_str().as_bytes();
    let to_b = to.as_os_str().as_bytes();
    let mut candidates = Vec::new();
    collect_git_files(root, &mut candidates, 0)?;
    for p in candidates {
        let Ok(mut f) = open_regular(&p, libc::O_RDWR) else {
            continue;
        };
        let mut data = Vec::new();
        (&mut f)
            .take(MAX_GIT_FILE + 1)
            .read_to_end(&mut data)
            .at(&p)?;
        if data.len() as u64 > MAX_GIT_FILE {
            return Err(Error::other(format!(
                "{}: larger than {MAX_GIT_FILE} bytes; not a git bookkeeping file",
                p.display()
            )));
        }
        if !contains(&data, from_b) {
            continue;
        }
        let new = replace_all(&data, from_b, to_b);
        f.set_len(0).at(&p)?;
        f.seek(std::io::SeekFrom::Start(0)).at(&p)?;
        f.write_all(&new).at(&p)?;
    }
    Ok(())
}

fn contains(h: &[u8], n: &[u8]) -> bool {
    !n.is_empty() && h.windows(n.len()).any(|w| w == n)
}

fn replace_all(h: &[u8], n: &[u8], r: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(h.len());
    let mut i = 0;
    while i < h.len() {
        if h[i..].starts_with(n) {
            out.extend_from_slice(r);
            i += n.len();
        } else {
            out.push(h[i]);
            i += 1;
        }
    }
    out
}

/// `lstat` says `p` is a regular file / a real directory (no symlink followed).
fn lfile(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
}
fn ldir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

fn is_git_dir(d: &Path) -> bool {
    lfile(&d.join("HEAD")) && (ldir(&d.join("objects")) || lfile(&d.join("commondir")))
}

fn collect_git_files(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) -> Result<()> {
    if depth > 64 {
        return Ok(());
    }
    if is_git_dir(dir) {
        let info_ok = ldir(&dir.join("objects/info"));
        for f in [
            "config",
            "gitdir",
            "commondir",
            "FETCH_HEAD",
            "objects/info/alternates",
        ] {
            if f.starts_with("objects/") && !info_ok {
                continue;
            }
            let p = dir.join(f);
            if lfile(&p) {
                out.push(p);
            }
        }
        // linked worktrees' admin folders (a real folder only: never followed)
        let worktrees = dir.join("worktrees");
        if ldir(&worktrees) {
            for e in std::fs::read_dir(&worktrees).at(&worktrees)?.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    collect_git_files(&e.path(), out, depth + 1)?;
                }
            }
        }
        // never descend into objects
        return Ok(());
    }
    for e in std::fs::read_dir(dir).at(dir)?.flatten() {
        // DirEntry::file_type does not follow symlinks
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            collect_git_files(&e.path(), out, depth + 1)?;
        } else if ft.is_file() && e.file_name() == ".git" {
            out.push(e.path());
        }
    }
    Ok(())
}

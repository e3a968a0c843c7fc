//! The full check itself ([`Guard`]): the workspace's git dirs walked through directory
//! descriptors, each file judged as the module above documents, offenders moved to the
//! quarantine, and every path looked at noted for the stamp.

use super::fsat::{Dir, Kind, Quarantine};
use super::stamp::Watch;
use super::{config, paths, rel_esc, Finding, GuardReport, MAX_GIT_DIRS, MAX_NESTING, PLACEHOLDER};
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Which kind of git dir is checked (what `commondir` may say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GitDirKind {
    /// A repository of its own (the workspace's `.git`, a submodule's, a bare remote):
    /// no `commondir`.
    Own,
    /// A linked worktree's admin dir: `commondir` is `../..`.
    Linked,
}

/// One full check in progress: what it found, what it watched, the git dirs done.
pub(super) struct Guard {
    /// The workspace's canonical path.
    pub(super) ws: PathBuf,
    pub(super) roots: paths::Roots,
    pub(super) q: Quarantine,
    pub(super) report: GuardReport,
    pub(super) watch: BTreeSet<Watch>,
    pub(super) visited: BTreeSet<PathBuf>,
    pub(super) pending_repos: Vec<PathBuf>,
}

impl Guard {
    fn watch(&mut self, rel: &Path, ident_only: bool) {
        self.watch.insert(Watch {
            rel: rel.to_path_buf(),
            ident_only,
            repo: false,
        });
    }

    fn found(&mut self, rel: &Path, found: impl Into<String>, action: impl Into<String>) {
        self.report.findings.push(Finding {
            path: rel_esc(rel),
            found: found.into(),
            action: action.into(),
        });
    }

    fn error(&mut self, rel: &Path, e: impl std::fmt::Display) {
        self.report.errors.push(format!("{}: {e}", rel_esc(rel)));
    }

    /// Quarantine `name` of `dir` (at `rel`); true when it is gone.
    fn quarantine(&mut self, dir: &Dir, name: &OsStr, rel: &Path) -> bool {
        match self.q.take(dir, name, rel) {
            Ok(_) => true,
            Err(e) => {
                self.error(rel, format!("cannot quarantine it: {e}"));
                false
            }
        }
    }

    pub(super) fn run(&mut self, root: &Dir, gitlinks: &[PathBuf]) {
        let dotgit = OsStr::new(".git");
        let rel = PathBuf::from(".git");
        self.watch(&rel, true);
        match root.lstat(dotgit).kind() {
            Kind::Dir => self.git_dir(root, &rel, GitDirKind::Own, 0),
            Kind::Missing => {}
            Kind::File if root.read(dotgit).ok().flatten().as_deref() == Some(PLACEHOLDER) => {}
            k => {
                let what = match k {
                    Kind::File => "a .git file (points git at another repository)",
                    Kind::Symlink => "a .git symlink (points git at another repository)",
                    _ => "a .git that is neither a directory nor a file",
                };
                if self.quarantine(root, dotgit, &rel) {
                    let action = match root.replace(dotgit, PLACEHOLDER) {
                        Ok(()) => "quarantined, placeholder written (git there now fails)",
                        Err(_) => "quarantined",
                    };
                    self.found(&rel, what, action);
                }
            }
        }
        for link in gitlinks {
            self.gitlink(root, link);
        }
        while let Some(abs) = self.pending_repos.pop() {
            let Ok(rel) = abs.strip_prefix(&self.ws).map(Path::to_path_buf) else {
                continue;
            };
            if rel.as_os_str().is_empty() || self.visited.contains(&rel) {
                continue;
            }
            // watched even when missing or not (yet) a repository: one made later is seen
            self.watch.insert(Watch {
                rel: rel.clone(),
                ident_only: true,
                repo: true,
            });
            self.watch(&rel.join("HEAD"), true);
            self.watch(&rel.join(".git"), true);
            let Some((parent, name)) = split(&rel) else {
                continue;
            };
            let Ok(pd) = root.open_rel(&parent) else {
                continue;
            };
            if pd.lstat(name).kind() != Kind::Dir {
                continue;
            }
            let Ok(d) = pd.open_dir(name) else { continue };
            // a repository: HEAD and objects (a bare one, or a work tree's `.git`)
            if d.lstat(OsStr::new("HEAD")).kind() == Kind::File {
                self.git_dir(root, &rel, GitDirKind::Own, 1);
            } else if d.lstat(OsStr::new(".git")).kind() == Kind::Dir {
                self.git_dir(root, &rel.join(".git"), GitDirKind::Own, 1);
            }
        }
    }

    /// A submodule checkout the index names: its `.git`.
    fn gitlink(&mut self, root: &Dir, link: &Path) {
        if link
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return;
        }
        let dotgit = OsStr::new(".git");
        let rel = link.join(".git");
        // watched even when missing: one made later is seen
        self.watch(&rel, true);
        let Ok(d) = root.open_rel(link) else {
            // missing, or a symlink on the way: git does not look into it either way
            return;
        };
        match d.lstat(dotgit).kind() {
            Kind::Missing => {}
            Kind::Dir => self.git_dir(root, &rel, GitDirKind::Own, 1),
            Kind::File => {
                self.watch(&rel, false);
                let target = d.read(dotgit).ok().flatten().and_then(|b| gitdir_line(&b));
                let abs_dir = self.ws.join(link);
                let inside = target
                    .as_ref()
                    .map(|t| paths::local_inside(&self.roots, &abs_dir, t));
                match inside {
                    Some(paths::Inside::Yes(abs)) => {
                        if let Ok(r) = abs.strip_prefix(&self.ws) {
                            let r = r.to_path_buf();
                            if !r.as_os_str().is_empty()
                                && !self.visited.contains(&r)
                                && root.open_rel(&r).is_ok()
                            {
                                self.watch(&r, true);
                                self.git_dir(root, &r, GitDirKind::Own, 1);
                            }
                        }
                    }
                    _ => {
                        if self.quarantine(&d, dotgit, &rel) {
                            self.found(
                                &rel,
                                "a submodule's .git file pointing outside the workspace",
                                "quarantined",
                            );
                        }
                    }
                }
            }
            _ => {
                if self.quarantine(&d, dotgit, &rel) {
                    self.found(
                        &rel,
                        "a submodule's .git symlink or special file",
                        "quarantined",
                    );
                }
            }
        }
    }

    /// Check the git dir at `rel` (a directory reached without symlinks).
    fn git_dir(&mut self, root: &Dir, rel: &Path, kind: GitDirKind, nesting: usize) {
        if self.visited.contains(rel) {
            return;
        }
        if self.visited.len() >= MAX_GIT_DIRS {
            return self.error(
                rel,
                format!("more than {MAX_GIT_DIRS} git dirs; not checked"),
            );
        }
        self.visited.insert(rel.to_path_buf());
        let d = match root.open_rel(rel) {
            Ok(d) => d,
            Err(e) => return self.error(rel, e),
        };
        let abs = self.ws.join(rel);
        // commondir
        let cd = OsStr::new("commondir");
        let cd_rel = rel.join("commondir");
        self.watch(&cd_rel, false);
        let st = d.lstat(cd);
        if st.kind() != Kind::Missing {
            let ok = kind == GitDirKind::Linked
                && st.kind() == Kind::File
                && d.read(cd)
                    .ok()
                    .flatten()
                    .is_some_and(|b| matches!(b.trim_ascii_end(), b"../.." | b"../../"));
            if !ok && self.quarantine(&d, cd, &cd_rel) {
                let action = if kind == GitDirKind::Linked {
                    match d.replace(cd, b"../..\n") {
                        Ok(()) => "quarantined, ../.. written",
                        Err(_) => "quarantined",
                    }
                } else {
                    "quarantined"
                };
                self.found(
                    &cd_rel,
                    "a commondir pointing git at another repository",
                    action,
                );
            }
        }
        for name in ["config", "config.worktree"] {
            self.config(&d, rel, &abs, OsStr::new(name));
        }
        if kind == GitDirKind::Linked {
            return;
        }
        self.hooks(&d, rel);
        self.alternates(&d, rel, &abs);
        self.worktrees(root, &d, rel);
        if nesting < MAX_NESTING {
            self.modules(root, &d, rel, &rel.join("modules"), nesting, 0);
        }
    }

    fn config(&mut self, d: &Dir, rel: &Path, abs: &Path, name: &OsStr) {
        let frel = rel.join(name);
        self.watch(&frel, false);
        match d.lstat(name).kind() {
            Kind::Missing => {}
            Kind::File => {
                let bytes = match d.read(name) {
                    Ok(Some(b)) => b,
                    Ok(None) => return,
                    Err(e) => {
                        // too large or not what lstat said: not git's to read either
                        if self.quarantine(d, name, &frel) {
                            self.found(
                                &frel,
                                format!("a config that cannot be read ({e})"),
                                "quarantined",
                            );
                        }
                        return;
                    }
                };
                let s = config::sanitize(&bytes, &self.roots, abs);
                self.pending_repos.extend(s.local_repos.iter().cloned());
                if s.dropped.is_empty() {
                    return;
                }
                let keys: Vec<String> = s
                    .dropped
                    .iter()
                    .map(|k| format!("{} ({})", k.key, k.why))
                    .collect();
                if self.quarantine(d, name, &frel) {
                    let action = match d.replace(name, &s.bytes) {
                        Ok(()) => "quarantined, reduced config written",
                        Err(e) => {
                            self.error(&frel, format!("cannot write the reduced config: {e}"));
                            "quarantined"
                        }
                    };
                    self.found(&frel, format!("config keys {}", keys.join(", ")), action);
                }
            }
            _ => {
                if self.quarantine(d, name, &frel) {
                    self.found(
                        &frel,
                        "a config that is a symlink, directory or special file",
                        "quarantined",
                    );
                }
            }
        }
    }

    fn hooks(&mut self, d: &Dir, rel: &Path) {
        let name = OsStr::new("hooks");
        let hrel = rel.join("hooks");
        self.watch(&hrel, false);
        match d.lstat(name).kind() {
            Kind::Missing => {}
            Kind::Dir => {
                let h = match d.open_dir(name) {
                    Ok(h) => h,
                    Err(e) => return self.error(&hrel, e),
                };
                let names = match h.names() {
                    Ok(n) => n,
                    Err(e) => return self.error(&hrel, e),
                };
                for n in names {
                    let erel = hrel.join(&n);
                    // git runs a hook only under its exact name and only when executable:
                    // `*.sample` files and non-executable files (gix's `docs.url`) stay
                    let st = h.lstat(&n);
                    let sample = n.as_bytes().ends_with(b".sample");
                    if st.kind() == Kind::File && (sample || st.mode & 0o111 == 0) {
                        // a later `chmod +x` changes no directory: watch the file itself
                        // (a sample never runs, whatever its mode)
                        if !sample {
                            self.watch(&erel, false);
                        }
                        continue;
                    }
                    if self.quarantine(&h, &n, &erel) {
                        self.found(
                            &erel,
                            "a hook (git would run it on the host)",
                            "quarantined",
                        );
                    }
                }
            }
            _ => {
                if self.quarantine(d, name, &hrel) {
                    self.found(&hrel, "hooks that are not a directory", "quarantined");
                }
            }
        }
    }

    fn alternates(&mut self, d: &Dir, rel: &Path, abs: &Path) {
        let arel = rel.join("objects/info/alternates");
        self.watch(&arel, false);
        self.watch(&rel.join("objects/info"), true);
        self.watch(&rel.join("objects"), true);
        let Ok(info) = d.open_rel(Path::new("objects/info")) else {
            return;
        };
        let name = OsStr::new("alternates");
        if info.lstat(name).kind() == Kind::Missing {
            return;
        }
        let objects = abs.join("objects");
        let ok = match info.read(name) {
            Ok(Some(b)) => b.split(|c| *c == b'\n').all(|l| {
                let l = l.trim_ascii();
                l.is_empty()
                    || l.starts_with(b"#")
                    || matches!(
                        paths::local_inside(&self.roots, &objects, Path::new(OsStr::from_bytes(l))),
                        paths::Inside::Yes(_)
                    )
            }),
            Ok(None) => true,
            Err(_) => false,
        };
        if !ok && self.quarantine(&info, name, &arel) {
            self.found(
                &arel,
                "alternates outside the workspace (git would read objects there)",
                "quarantined",
            );
        }
    }

    fn worktrees(&mut self, root: &Dir, d: &Dir, rel: &Path) {
        let name = OsStr::new("worktrees");
        let wrel = rel.join("worktrees");
        self.watch(&wrel, false);
        match d.lstat(name).kind() {
            Kind::Missing => {}
            Kind::Dir => {
                let w = match d.open_dir(name) {
                    Ok(w) => w,
                    Err(e) => return self.error(&wrel, e),
                };
                let names = match w.names() {
                    Ok(n) => n,
                    Err(e) => return self.error(&wrel, e),
                };
                for n in names {
                    self.admin(root, &w, &wrel, &n);
                }
            }
            _ => {
                if self.quarantine(d, name, &wrel) {
                    self.found(&wrel, "worktrees that are not a directory", "quarantined");
                }
            }
        }
    }

    /// A linked worktree's admin dir `wrel/name`.
    fn admin(&mut self, root: &Dir, w: &Dir, wrel: &Path, name: &OsStr) {
        let arel = wrel.join(name);
        self.watch(&arel, true);
        match w.lstat(name).kind() {
            Kind::Dir => {}
            _ => {
                if self.quarantine(w, name, &arel) {
                    self.found(
                        &arel,
                        "a linked worktree entry that is not a directory",
                        "quarantined",
                    );
                }
                return;
            }
        }
        let a = match w.open_dir(name) {
            Ok(a) => a,
            Err(e) => return self.error(&arel, e),
        };
        let abs_admin = self.ws.join(&arel);
        let grel = arel.join("gitdir");
        self.watch(&grel, false);
        let gitdir = OsStr::new("gitdir");
        let target = match a.lstat(gitdir).kind() {
            Kind::Missing => None,
            Kind::File => match a.read(gitdir) {
                Ok(Some(b)) => Some(Some(PathBuf::from(OsStr::from_bytes(b.trim_ascii_end())))),
                _ => Some(None),
            },
            _ => Some(None),
        };
        let inside = match &target {
            None => None,
            Some(None) => Some(None),
            Some(Some(t)) => Some(match paths::local_inside(&self.roots, &abs_admin, t) {
                paths::Inside::Yes(p) if p.file_name() == Some(OsStr::new(".git")) => Some(p),
                _ => None,
            }),
        };
        if let Some(None) = inside {
            if self.quarantine(w, name, &arel) {
                self.found(
                    &arel,
                    "a linked worktree whose gitdir points outside the workspace (git worktree remove would delete there)",
                    "quarantined",
                );
            }
            return;
        }
        // the admin dir is a git dir of its own kind
        self.git_dir(root, &arel, GitDirKind::Linked, 1);
        // the linked worktree's `.git` file must point back here
        if let Some(Some(dotgit_abs)) = inside {
            self.linked_dotgit(root, &dotgit_abs, &abs_admin);
        }
    }

    fn linked_dotgit(&mut self, root: &Dir, dotgit_abs: &Path, abs_admin: &Path) {
        let Ok(rel) = dotgit_abs.strip_prefix(&self.ws).map(Path::to_path_buf) else {
            return;
        };
        let Some((parent, name)) = split(&rel) else {
            return;
        };
        self.watch(&rel, true);
        let Ok(p) = root.open_rel(&parent) else {
            return;
        };
        match p.lstat(name).kind() {
            Kind::Missing => {}
            Kind::File => {
                self.watch(&rel, false);
                let abs_parent = self.ws.join(&parent);
                let back = p
                    .read(name)
                    .ok()
                    .flatten()
                    .and_then(|b| gitdir_line(&b))
                    .map(|t| self.roots.rebase(&paths::normalize(&abs_parent.join(t))));
                if back.as_deref() != Some(abs_admin) && self.quarantine(&p, name, &rel) {
                    self.found(
                        &rel,
                        "a linked worktree's .git file pointing elsewhere",
                        "quarantined",
                    );
                }
            }
            Kind::Dir => {
                self.git_dir(root, &rel, GitDirKind::Own, 1);
            }
            _ => {
                if self.quarantine(&p, name, &rel) {
                    self.found(
                        &rel,
                        "a linked worktree's .git symlink or special file",
                        "quarantined",
                    );
                }
            }
        }
    }

    /// Submodule git dirs below `mrel` (names may hold `/`: a directory without `HEAD` is
    /// walked further).
    fn modules(
        &mut self,
        root: &Dir,
        d: &Dir,
        grel: &Path,
        mrel: &Path,
        nesting: usize,
        depth: usize,
    ) {
        let Ok(sub) = mrel.strip_prefix(grel) else {
            return;
        };
        self.watch(mrel, false);
        let m = match d.open_rel(sub) {
            Ok(m) => m,
            Err(_) => {
                if depth == 0 {
                    let name = OsStr::new("modules");
                    let k = d.lstat(name).kind();
                    if k != Kind::Missing && k != Kind::Dir && self.quarantine(d, name, mrel) {
                        self.found(mrel, "modules that are not a directory", "quarantined");
                    }
                }
                return;
            }
        };
        if depth > MAX_NESTING {
            return self.error(mrel, "submodule git dirs nested too deep; not checked");
        }
        let Ok(names) = m.names() else { return };
        for n in names {
            let erel = mrel.join(&n);
            match m.lstat(&n).kind() {
                Kind::Dir => {}
                _ => continue,
            }
            let Ok(e) = m.open_dir(&n) else { continue };
            if e.lstat(OsStr::new("HEAD")).kind() == Kind::File {
                self.watch(&erel, true);
                self.git_dir(root, &erel, GitDirKind::Own, nesting + 1);
            } else {
                self.modules(root, d, grel, &erel, nesting, depth + 1);
            }
        }
    }
}

/// `(parent, name)` of a relative path.
fn split(rel: &Path) -> Option<(PathBuf, &OsStr)> {
    let name = rel.file_name()?;
    let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
    Some((parent, name))
}

/// The path of a `gitdir: <path>` file.
fn gitdir_line(b: &[u8]) -> Option<PathBuf> {
    let line = b.split(|c| *c == b'\n').next()?;
    let p = line.strip_prefix(b"gitdir:")?.trim_ascii();
    if p.is_empty() {
        return None;
    }
    Some(PathBuf::from(OsStr::from_bytes(p)))
}

//! The home as a command sees it: a *view* that holds only what development tools need
//! (default deny). Everything of the real home that is not an entry of the view does not
//! exist inside (`ENOENT`), whatever its name and whenever it was made: shell histories,
//! every tool's token, the person's projects, a credential written on the host while the
//! command runs.
//!
//! Decided here, on the host, for each exec's plan ([`HomeView`], a
//! [`crate::linux::plan::MountStep`]):
//! - the entries: [`HOME_VISIBLE`], the PATH and SDK folders below the home, the agent
//!   login the exec un-hid, each resolved once (a symlinked entry shows its target) and
//!   left out when absent, hidden, or inside capsule's own state;
//! - the *points*: paths below the home that later steps of the plan mount on (the
//!   workspace, the package caches, revealed folders, writable paths, `~/.npmrc`'s
//!   filtered copy), so that each has a place in the view without anything being made in
//!   the home layer.
//!
//! Built by the executor (the `homeview` part of [`crate::linux::mounts`]) once per
//! prepared root: an overlay of the layer's upper dir over a small directory of the setup
//! root holding copies of the file entries and empty places for the rest, then one overlay
//! per folder entry (the real folder under the layer's matching subfolder), so writes
//! anywhere in the home land in the layer exactly where `capsule home diff` looks.

pub use crate::linux::plan::view::{works_dir, Entry, EntryKind, HomeView, Point, MAX_FILE};
use crate::linux::plan::{within, MountStep};
use capsule_bundle::policy::{
    env_dirs, SandboxPolicy, HOME_AGENT_LOGINS, HOME_CREDENTIALS, HOME_VISIBLE,
};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// A folder's canonical path and entries, `None` when it cannot be listed.
type Listing = Option<(PathBuf, HashMap<OsString, std::fs::FileType>)>;

/// The entries of the view of `home` under `policy` (the sandbox's view of it), with
/// the PATH and SDK folders from `env` and the agent `login` paths the exec un-hid.
pub fn entries(
    home: &Path,
    policy: &SandboxPolicy,
    env: &[(OsString, OsString)],
    login: &[&str],
) -> Vec<Entry> {
    // a hidden path is `p` or one of its folders: one set lookup per folder of `p`
    // instead of a comparison with each of hundreds of hidden paths (policy paths are
    // canonical: equal bytes, equal paths)
    let hidden_set: std::collections::HashSet<&[u8]> = policy
        .hidden
        .iter()
        .map(|h| h.path.as_os_str().as_encoded_bytes())
        .collect();
    let hidden = |p: &Path| {
        let mut b = p.as_os_str().as_encoded_bytes();
        loop {
            if hidden_set.contains(b) {
                return true;
            }
            match b.iter().rposition(|c| *c == b'/') {
                Some(0) if b.len() > 1 => b = b"/",
                Some(i) if i > 0 => b = &b[..i],
                _ => return false,
            }
        }
    };
    let mut rels: Vec<PathBuf> = HOME_VISIBLE.iter().map(PathBuf::from).collect();
    rels.extend(login.iter().map(PathBuf::from));
    let dirs = env_dirs(env.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str())));
    for d in dirs {
        if let Ok(rel) = d.strip_prefix(home) {
            if !rel.as_os_str().is_empty() {
                rels.push(rel.to_path_buf());
            }
        }
    }
    rels.sort();
    rels.dedup();
    // one listing per parent folder (d_type), instead of a stat per candidate; and the
    // parent's canonical path (an entry reached through a symlinked parent is shown from
    // its target: the executor resolves no symlink of the host)
    let mut listings: HashMap<PathBuf, Listing> = HashMap::new();
    let mut out: Vec<Entry> = Vec::new();
    for rel in rels {
        if rel
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            continue;
        }
        if out
            .iter()
            .any(|e| e.kind != EntryKind::File && within(&rel, &e.rel))
        {
            continue; // inside a folder entry already
        }
        let path = home.join(&rel);
        if hidden(&path) {
            continue;
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            continue;
        };
        let list = listing(&mut listings, home, parent);
        let Some((canon_parent, ft)) = list
            .as_ref()
            .and_then(|(c, l)| Some((c.clone(), *l.get(name)?)))
        else {
            continue;
        };
        let (src, dir) = if ft.is_symlink() {
            let Ok(c) = std::fs::canonicalize(&path) else {
                continue;
            };
            let Ok(md) = std::fs::metadata(&c) else {
                continue;
            };
            (c, md.is_dir())
        } else if ft.is_dir() || ft.is_file() {
            (canon_parent.join(name), ft.is_dir())
        } else {
            continue;
        };
        // a link into a hidden folder (or capsule's state) shows nothing
        if src != path && hidden(&src) {
            continue;
        }
        if !dir && std::fs::metadata(&src).map_or(true, |m| m.len() > MAX_FILE) {
            tracing::warn!(
                "{}: larger than 8 MiB; not shown in the home",
                path.display()
            );
            continue;
        }
        let kind = match (dir, src == path) {
            (false, _) => EntryKind::File,
            (true, true) => EntryKind::Dir,
            (true, false) => EntryKind::LinkedDir,
        };
        out.push(Entry { rel, src, kind });
    }
    out
}

/// A folder's entries with their types (`d_type`, one listing) and its canonical path,
/// for `dir` at or below `home` (canonical): a folder reached through no symlink is its
/// own canonical path, found from its parent's listing without a system call of its own.
fn listing<'m>(map: &'m mut HashMap<PathBuf, Listing>, home: &Path, dir: &Path) -> &'m Listing {
    if !map.contains_key(dir) {
        let canon = if dir == home {
            Some(dir.to_path_buf())
        } else {
            match (dir.parent(), dir.file_name()) {
                (Some(parent), Some(name)) => {
                    let up = listing(map, home, parent)
                        .as_ref()
                        .and_then(|(c, l)| Some((c.clone(), *l.get(name)?)));
                    match up {
                        Some((c, ft)) if ft.is_dir() => Some(c.join(name)),
                        Some((_, ft)) if ft.is_symlink() => std::fs::canonicalize(dir).ok(),
                        _ => None,
                    }
                }
                _ => None,
            }
        };
        let found = canon.and_then(|canon| {
            let names = std::fs::read_dir(&canon).ok()?;
            let names = names
                .filter_map(|e| e.ok())
                .filter_map(|e| Some((e.file_name(), e.file_type().ok()?)))
                .collect();
            Some((canon, names))
        });
        map.insert(dir.to_path_buf(), found);
    }
    &map[dir]
}

/// The points of the view: `steps` (those after the view) that mount below `home`
/// outside every folder entry. A `watched` mask ([`crate::linux::fusemask`]) is one too:
/// it is shown where the host has it, as a folder or a file as the host has it.
pub fn points(
    home: &Path,
    entries: &[Entry],
    steps: &[MountStep],
    watched: &[PathBuf],
) -> Vec<Point> {
    let mut out: Vec<Point> = Vec::new();
    for s in steps {
        let src = match s {
            MountStep::Bind { src, .. } => Some(src.clone()),
            MountStep::Mask {
                dst,
                carve_outs: false,
            } if watched.contains(dst) => Some(dst.clone()),
            MountStep::Tmpfs { .. }
            | MountStep::Overlay { .. }
            | MountStep::Dir { .. }
            | MountStep::Mask {
                carve_outs: true, ..
            } => None,
            _ => continue,
        };
        let Ok(rel) = s.dst().strip_prefix(home) else {
            continue;
        };
        if rel.as_os_str().is_empty() || entries.iter().any(|e| within(rel, &e.rel)) {
            continue;
        }
        if !out.iter().any(|p| p.rel == rel) {
            out.push(Point {
                rel: rel.to_path_buf(),
                src,
            });
        }
    }
    out
}

/// The paths inside the view's folder entries that it keeps absent ([`HomeView::absent`]):
/// each credential and agent login of the lists (but the exec's own `login` paths) and
/// each hidden path of `policy`, when it lies strictly inside a folder entry and nothing
/// else is mounted on the way: another entry between the two or below it, or a later step
/// of the plan (`later`, plain masks aside) at, above or below it (such a path keeps its
/// mask, as before). Absent then whatever the host has there, also when it is made after
/// the root was built: a credential the operator saves while an exec runs (`cargo login`
/// writing `~/.cargo/credentials.toml`) is not in the running sandbox either.
pub fn absent(
    v: &HomeView,
    later: &[MountStep],
    policy: &SandboxPolicy,
    login: &[&str],
    watched: &[PathBuf],
) -> Vec<PathBuf> {
    // the folder entries as the host names them: a hidden path is looked at only when it
    // lies in one (a byte comparison; hundreds of hidden paths lie elsewhere)
    let folders: Vec<PathBuf> = v
        .entries
        .iter()
        .filter(|e| e.kind == EntryKind::Dir)
        .map(|e| v.src.join(&e.rel))
        .collect();
    if folders.is_empty() {
        return Vec::new();
    }
    let names = HOME_CREDENTIALS
        .iter()
        .chain(HOME_AGENT_LOGINS)
        .filter(|n| !login.contains(n))
        .map(PathBuf::from)
        .chain(
            policy
                .hidden
                .iter()
                .filter(|h| folders.iter().any(|f| within(&h.path, f)))
                .filter_map(|h| h.path.strip_prefix(&v.src).ok().map(Path::to_path_buf)),
        );
    let mounted: Vec<&Path> = later
        .iter()
        .filter(|s| match s {
            MountStep::Mask {
                carve_outs: false,
                dst,
            } => watched.contains(dst),
            _ => true,
        })
        .filter_map(|s| s.dst().strip_prefix(&v.dst).ok())
        .collect();
    let mut out: Vec<PathBuf> = Vec::new();
    for rel in names {
        if rel.as_os_str().is_empty() || rel.is_absolute() {
            continue;
        }
        let Some(e) = v
            .entries
            .iter()
            .find(|e| e.kind == EntryKind::Dir && within(&rel, &e.rel) && rel != e.rel)
        else {
            continue;
        };
        let entry_clash = v.entries.iter().any(|x| {
            x.rel != e.rel
                && (within(&x.rel, &rel) || (within(&rel, &x.rel) && within(&x.rel, &e.rel)))
        });
        let mount_clash = mounted.iter().any(|m| within(m, &rel) || within(&rel, m));
        if !entry_clash && !mount_clash {
            out.push(rel);
        }
    }
    out.sort();
    out.dedup();
    // a path below another one kept absent is absent with it
    let all = out.clone();
    out.retain(|p| !all.iter().any(|a| a != p && within(p, a)));
    out
}

/// `step` is a mask (without carve-outs) of a path below the view's home that no entry
/// or point of `v` shows (a path an entry holds but [`HomeView::absent`] keeps out is not
/// shown) and that the layer's upper dir does not hold now (`in_upper`,
/// asked with the path relative to the home): the view leaves it absent, whatever it is
/// on the host. What the layer holds (another agent's login a task left there) shows
/// through the view and keeps its mask.
pub fn leaves_absent(
    v: &HomeView,
    step: &MountStep,
    watched: &[PathBuf],
    in_upper: &mut dyn FnMut(&Path) -> bool,
) -> bool {
    let MountStep::Mask {
        dst,
        carve_outs: false,
    } = step
    else {
        return false;
    };
    if watched.contains(dst) {
        return false;
    }
    let Ok(rel) = dst.strip_prefix(&v.dst) else {
        return false;
    };
    !rel.as_os_str().is_empty()
        && (v.keeps_absent(rel) || !v.entries.iter().any(|e| within(rel, &e.rel)))
        && !v.points.iter().any(|p| within(rel, &p.rel))
        && !in_upper(rel)
}

/// Does the folder `upper` hold `rel` (or anything in its place: a file, a symlink or a
/// whiteout on the way counts as held)? Asked without following anything, one `lstat`
/// per folder on the way, each answer kept in `seen` (hundreds of hidden paths share a
/// few folders).
pub fn held_in(upper: &Path, rel: &Path, seen: &mut HashMap<PathBuf, Held>) -> bool {
    let mut at = PathBuf::new();
    for c in rel.components() {
        at.push(c);
        // asked before a copy of the key is made (most answers are known)
        let held = match seen.get(&at) {
            Some(h) => *h,
            None => {
                let h = match std::fs::symlink_metadata(upper.join(&at)) {
                    Err(_) => Held::No,
                    Ok(m) if m.is_dir() => Held::Folder,
                    Ok(_) => Held::Other,
                };
                seen.insert(at.clone(), h);
                h
            }
        };
        match held {
            Held::No => return false,
            // nothing below it is looked at (a symlink is never followed)
            Held::Other => return true,
            Held::Folder => {}
        }
    }
    true
}

/// What [`held_in`] found at a path of the upper dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    No,
    Folder,
    Other,
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_bundle::policy::{HiddenPath, HiddenReason, NetworkPolicy};

    /// `rels` (below `home`) added to `p`'s hidden paths.
    fn hide(p: &mut SandboxPolicy, home: &Path, rels: &[&str]) {
        for r in rels {
            p.hidden.push(HiddenPath {
                path: home.join(r),
                reason: HiddenReason::Credentials,
            });
        }
    }

    fn policy(home: &Path) -> SandboxPolicy {
        SandboxPolicy {
            version: 1,
            capsule_name: "c".into(),
            workspace: home.join(".local/share/capsule/workspaces/c"),
            read_only: vec![],
            tmp_dir: "/tmp".into(),
            home: Some(home.into()),
            home_layer: None,
            cache_dir: None,
            writable: vec![],
            hidden: vec![HiddenPath {
                path: home.join(".config/git/credentials"),
                reason: HiddenReason::Credentials,
            }],
            revealed: vec![],
            pass_env: vec![],
            devices: vec![],
            network: NetworkPolicy::default(),
        }
    }

    #[test]
    fn only_listed_existing_entries_and_path_folders() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path();
        for d in [
            ".cargo/bin",
            ".config/git",
            ".config/rclone",
            "tools/bin",
            ".aws",
        ] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        for f in [".gitconfig", ".bash_history", ".config/rclone/rclone.conf"] {
            std::fs::write(home.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink(home.join("tools"), home.join(".bashrc")).unwrap();
        let env = vec![(
            OsString::from("PATH"),
            OsString::from(format!(
                "/usr/bin:{}/tools/bin:{}/.cargo/bin",
                home.display(),
                home.display()
            )),
        )];
        let e = entries(home, &policy(home), &env, &[]);
        let rels: Vec<&str> = e.iter().map(|e| e.rel.to_str().unwrap()).collect();
        assert_eq!(
            rels,
            [
                ".bashrc",
                ".cargo",
                ".config/git",
                ".gitconfig",
                "tools/bin"
            ]
        );
        // a symlinked entry shows its target
        assert_eq!(e[0].src, home.join("tools"));
        assert_eq!(e[0].kind, EntryKind::LinkedDir);
        assert_eq!(e[1].kind, EntryKind::Dir);
        assert_eq!(e[3].kind, EntryKind::File);
    }

    #[test]
    fn an_entry_in_or_below_a_hidden_path_is_left_out() {
        let t = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(t.path()).unwrap();
        for d in [".config/git", ".cargo/bin", ".rustup"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        let mut p = policy(&home);
        hide(&mut p, &home, &[".config", ".rustup"]);
        let e = entries(&home, &p, &[], &[]);
        let rels: Vec<&str> = e.iter().map(|e| e.rel.to_str().unwrap()).collect();
        assert_eq!(rels, [".cargo"]);
    }

    #[test]
    fn an_entry_below_a_symlinked_folder_is_shown_from_its_target() {
        let t = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(t.path()).unwrap().join("h");
        let dots = home.with_file_name("dots");
        std::fs::create_dir_all(dots.join("git")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::os::unix::fs::symlink(&dots, home.join(".config")).unwrap();
        let e = entries(&home, &policy(&home), &[], &[]);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].rel, Path::new(".config/git"));
        assert_eq!(e[0].src, dots.join("git"));
        assert_eq!(e[0].kind, EntryKind::LinkedDir);
    }

    #[test]
    fn masks_the_view_leaves_absent_are_known() {
        let v = HomeView {
            src: "/h".into(),
            dst: "/h".into(),
            upper: "/u".into(),
            work: "/w".into(),
            works: "/v".into(),
            entries: vec![Entry {
                rel: ".cargo".into(),
                src: "/h/.cargo".into(),
                kind: EntryKind::Dir,
            }],
            points: vec![Point {
                rel: "proj".into(),
                src: Some("/h/proj".into()),
            }],
            absent: vec![],
        };
        let mask = |d: &str, carve_outs: bool| MountStep::Mask {
            dst: d.into(),
            carve_outs,
        };
        let mut none = |_: &Path| false;
        assert!(leaves_absent(&v, &mask("/h/.ssh", false), &[], &mut none));
        // a watched mask stays (see crate::linux::fusemask)
        let watched = [PathBuf::from("/h/.ssh")];
        assert!(!leaves_absent(
            &v,
            &mask("/h/.ssh", false),
            &watched,
            &mut none
        ));
        assert!(leaves_absent(
            &v,
            &mask("/h/hidden/d1", false),
            &[],
            &mut none
        ));
        // shown by an entry or a place of the view: still masked
        assert!(!leaves_absent(
            &v,
            &mask("/h/.cargo/credentials.toml", false),
            &[],
            &mut none
        ));
        assert!(!leaves_absent(
            &v,
            &mask("/h/proj/.env", false),
            &[],
            &mut none
        ));
        // with carve-outs, outside the home, the home itself: kept
        assert!(!leaves_absent(
            &v,
            &mask("/h/.config", true),
            &[],
            &mut none
        ));
        assert!(!leaves_absent(
            &v,
            &mask("/etc/shadow", false),
            &[],
            &mut none
        ));
        assert!(!leaves_absent(&v, &mask("/h", false), &[], &mut none));
        // what the layer holds shows through the view: still masked
        let mut claude = |r: &Path| r.starts_with(".claude");
        assert!(!leaves_absent(
            &v,
            &mask("/h/.claude/.credentials.json", false),
            &[],
            &mut claude
        ));
        assert!(leaves_absent(&v, &mask("/h/.ssh", false), &[], &mut claude));
    }

    #[test]
    fn credentials_inside_folder_entries_are_kept_absent_unless_something_is_mounted_there() {
        let home = Path::new("/h");
        let entry = |rel: &str, kind| Entry {
            rel: rel.into(),
            src: home.join(rel),
            kind,
        };
        let mut v = HomeView {
            src: home.into(),
            dst: home.into(),
            upper: "/u".into(),
            work: "/w".into(),
            works: "/v".into(),
            entries: vec![
                entry(".cargo", EntryKind::Dir),
                entry(".config/git", EntryKind::Dir),
                entry(".docker-tool", EntryKind::LinkedDir),
            ],
            points: vec![],
            absent: vec![],
        };
        let mut p = policy(home);
        hide(
            &mut p,
            home,
            &[
                ".cargo/private",
                ".cargo/private/deeper",
                ".docker-tool/token",
            ],
        );
        let later = [
            // a cache inside the entry, and a reveal of git's credentials
            MountStep::Overlay {
                lower: vec![],
                upper: "/c/u".into(),
                work: "/c/w".into(),
                dst: home.join(".cargo/registry"),
            },
            MountStep::Bind {
                src: home.join(".config/git/credentials"),
                dst: home.join(".config/git/credentials"),
                rw: false,
                optional: false,
            },
            MountStep::Mask {
                dst: home.join(".cargo/credentials.toml"),
                carve_outs: false,
            },
        ];
        v.absent = absent(&v, &later, &p, &[], &[]);
        let rels: Vec<&str> = v.absent.iter().filter_map(|a| a.to_str()).collect();
        // the lists' names and the policy's hidden paths inside the folder entry; not the
        // revealed one, nothing below another, nothing in a bound (linked) folder
        assert_eq!(
            rels,
            [
                ".cargo/credentials",
                ".cargo/credentials.toml",
                ".cargo/private"
            ]
        );
        // their masks go: the view leaves them absent (unless the layer holds them)
        let mask = MountStep::Mask {
            dst: home.join(".cargo/credentials.toml"),
            carve_outs: false,
        };
        assert!(leaves_absent(&v, &mask, &[], &mut |_: &Path| false));
        assert!(!leaves_absent(&v, &mask, &[], &mut |_: &Path| true));
        let other = MountStep::Mask {
            dst: home.join(".cargo/config.toml"),
            carve_outs: false,
        };
        assert!(!leaves_absent(&v, &other, &[], &mut |_: &Path| false));
        // an exec's own agent login is never kept out
        let login = absent(&v, &later, &p, &[".cargo/credentials"], &[]);
        assert!(!login.iter().any(|a| a == Path::new(".cargo/credentials")));
        // a watched mask is a mount of its own: its path is not kept out by a whiteout
        let watched = [home.join(".cargo/credentials.toml")];
        let w = absent(&v, &later, &p, &[], &watched);
        assert!(
            !w.iter().any(|a| a == Path::new(".cargo/credentials.toml")),
            "{w:?}"
        );
        assert!(
            w.iter().any(|a| a == Path::new(".cargo/credentials")),
            "{w:?}"
        );
    }

    #[test]
    fn the_upper_dir_is_asked_once_per_folder_without_following() {
        let t = tempfile::tempdir().unwrap();
        let up = t.path();
        std::fs::create_dir_all(up.join(".claude")).unwrap();
        std::fs::write(up.join(".claude/.credentials.json"), "x").unwrap();
        std::os::unix::fs::symlink("/nowhere", up.join(".dangling")).unwrap();
        let mut seen = HashMap::new();
        assert!(held_in(
            up,
            Path::new(".claude/.credentials.json"),
            &mut seen
        ));
        assert!(
            held_in(up, Path::new(".dangling"), &mut seen),
            "a symlink counts as held"
        );
        assert!(
            held_in(up, Path::new(".dangling/below"), &mut seen),
            "and is not followed"
        );
        assert!(!held_in(up, Path::new(".claude/other"), &mut seen));
        assert!(!held_in(up, Path::new("hidden/d1"), &mut seen));
        assert!(!held_in(up, Path::new("hidden/d2"), &mut seen));
        assert_eq!(seen.len(), 5, "{seen:?}");
    }

    #[test]
    fn points_are_later_mounts_outside_entries() {
        let home = Path::new("/h");
        let entries = vec![Entry {
            rel: ".cargo".into(),
            src: "/h/.cargo".into(),
            kind: EntryKind::Dir,
        }];
        let steps = vec![
            MountStep::Bind {
                src: "/h/ws".into(),
                dst: "/h/ws".into(),
                rw: true,
                optional: false,
            },
            MountStep::Mask {
                dst: "/h/.ssh".into(),
                carve_outs: false,
            },
            MountStep::Overlay {
                lower: vec!["/c".into()],
                upper: "/u".into(),
                work: "/w".into(),
                dst: "/h/.cargo/registry".into(),
            },
            MountStep::Mask {
                dst: "/h/.local/share/capsule".into(),
                carve_outs: true,
            },
            MountStep::Bind {
                src: "/usr".into(),
                dst: "/usr".into(),
                rw: false,
                optional: true,
            },
        ];
        let p = points(home, &entries, &steps, &[]);
        let rels: Vec<&str> = p.iter().map(|p| p.rel.to_str().unwrap()).collect();
        assert_eq!(rels, ["ws", ".local/share/capsule"]);
        assert_eq!(p[0].src.as_deref(), Some(Path::new("/h/ws")));
        // a watched mask has its place, of the kind the host has there
        let p = points(home, &entries, &steps, &["/h/.ssh".into()]);
        let rels: Vec<&str> = p.iter().map(|p| p.rel.to_str().unwrap()).collect();
        assert_eq!(rels, ["ws", ".ssh", ".local/share/capsule"]);
        assert_eq!(p[1].src.as_deref(), Some(Path::new("/h/.ssh")));
    }
}

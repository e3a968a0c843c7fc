//! What `capsule agent launch` prepares so a coding agent's CLI works inside the capsule's
//! sandbox without weakening it for anything else:
//!
//! - **its own login, and only its own.** Every agent's login, configuration and
//!   transcripts are hidden by default
//!   ([`HOME_AGENT_LOGINS`](capsule_bundle::policy::HOME_AGENT_LOGINS)). The launched
//!   backend's own paths (its [profile](crate::agent::Profile)'s `login_paths`) are
//!   un-hidden with `capsule exec --agent-login B`
//!   ([`unhide_login`]): they then read through the home layer from the real home, and the
//!   CLI's writes (refreshed tokens, settings, transcripts) land in the capsule's layer,
//!   never in the real home (`capsule home diff` lists them, as refused: they are never
//!   applied). Every *other* agent's path is passed as `--hide` whether or not it existed
//!   when the capsule was opened ([`other_logins`]), so a login made later, or one a
//!   previous launch of another agent left in the layer, stays hidden too. Under weaker
//!   isolation (no namespaces, no home layer) the own login is readable, not writable.
//! - **its binary, resolved once on the host.** The first executable of the profile's
//!   `binary` on `PATH` is canonicalized ([`resolve_binary`]) and that path is what runs inside. When
//!   it (or the interpreter its `#!` line names, e.g. `node`) lies in a folder the capsule
//!   hides as a sibling project or personal files, its package folder is revealed
//!   read-only; inside credentials, tool state, another agent's login or a folder the
//!   spec hid on purpose it is refused. A binary whose path the capsule's home layer
//!   shadows (a copy a task wrote) is refused: review it with `capsule home diff`.
//!   A `#!` line is only followed for files the sandbox cannot write.
//! - **its API hosts** (the profile's `hosts`), passed as `--allow-host` when this
//!   build's `capsule exec` has the allowlist ([`exec_has_allow_host`]).

use capsule_bundle::policy::{on_home_list, Access, HiddenReason, SandboxPolicy};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

pub use crate::agent::{other_logins, unhide_login};

/// Does this build's `capsule exec` take `--allow-host` (the network allowlist)?
pub fn exec_has_allow_host() -> bool {
    use clap::Args;
    let cmd = crate::cli::exec::ExecArgs::augment_args(clap::Command::new("exec"));
    let has = cmd
        .get_arguments()
        .any(|a| a.get_long() == Some("allow-host"));
    has
}

/// The backend binary as it will run inside the sandbox.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Resolved {
    /// Where it was found on `PATH`.
    pub found: PathBuf,
    /// Its canonical path (what runs).
    pub binary: PathBuf,
    /// The canonical interpreter its `#!` line names, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interpreter: Option<PathBuf>,
    /// Folders revealed read-only so the binary and interpreter can be read inside.
    pub reveal: Vec<PathBuf>,
}

/// Why the binary cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{0} not found on PATH; install the {0} CLI or add its directory to PATH")]
    NotFound(String),
    #[error("{what} {path}: {source}")]
    Io {
        what: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} {path} lies in {hidden}, which this capsule hides ({reason}); install it outside that folder")]
    Hidden {
        what: String,
        path: PathBuf,
        hidden: PathBuf,
        reason: &'static str,
    },
    #[error("{what} {path} is shadowed by a copy in the capsule's home layer ({upper}), written by a task; review it with `capsule home diff` and remove it with `capsule home discard`")]
    Shadowed {
        what: String,
        path: PathBuf,
        upper: PathBuf,
    },
}

/// Find an executable `name` in the absolute directories of `path`.
pub fn which(name: &str, path: &OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// What the sandbox of a capsule shows, to decide reveals: the policy (with the backend's
/// own login un-hidden and every other agent's hidden) and the home layer's upper folder.
pub struct View<'a> {
    pub policy: &'a SandboxPolicy,
    pub upper: Option<&'a Path>,
}

fn reason_words(r: HiddenReason) -> &'static str {
    match r {
        HiddenReason::Credentials => "credentials",
        HiddenReason::NotListed => "not among what development tools need in the home",
        HiddenReason::PersonalFiles => "personal files",
        HiddenReason::SiblingProject => "a project beside the capsule's source",
        HiddenReason::ToolState => "capsule's own state",
        HiddenReason::AgentLogins => "another agent's login",
        HiddenReason::Requested => "hidden on purpose by the spec or --hide",
    }
}

impl View<'_> {
    /// The deepest hidden path covering `p`.
    fn covering(&self, p: &Path) -> Option<(&Path, HiddenReason)> {
        self.policy
            .hidden
            .iter()
            .filter(|h| p.starts_with(&h.path))
            .max_by_key(|h| h.path.components().count())
            .map(|h| (h.path.as_path(), h.reason))
    }

    /// Make `file` (canonical) readable inside: nothing when it already is, else the
    /// folder to reveal (its package folder), or why it may not be.
    /// `path`: the `PATH` the sandbox gets (its folders are shown in the home).
    fn reveal_for(
        &self,
        what: &str,
        file: &Path,
        path: &OsStr,
    ) -> Result<Option<PathBuf>, ResolveError> {
        if self.policy.access(file) != Access::Hidden {
            // the home shows only what its list names (default deny): a binary elsewhere
            // in it gets its package folder revealed, read-only
            return Ok(self
                .policy
                .home
                .as_deref()
                .filter(|h| file.starts_with(h) && !on_home_list(h, file))
                .filter(|_| {
                    !std::env::split_paths(path).any(|d| d.is_absolute() && file.starts_with(d))
                })
                .map(|h| package_root(file, h)));
        }
        let Some((hidden, reason)) = self.covering(file) else {
            return Ok(None);
        };
        if !matches!(
            reason,
            HiddenReason::SiblingProject | HiddenReason::PersonalFiles
        ) {
            return Err(ResolveError::Hidden {
                what: what.into(),
                path: file.into(),
                hidden: hidden.into(),
                reason: reason_words(reason),
            });
        }
        Ok(Some(package_root(file, hidden)))
    }

    /// Refuse `file` when the home layer holds an entry on its way (a file, symlink or
    /// whiteout at a prefix, the file itself, or an opaque folder on the way).
    fn check_shadow(&self, what: &str, file: &Path) -> Result<(), ResolveError> {
        let (Some(upper), Some(home)) = (self.upper, self.policy.home.as_deref()) else {
            return Ok(());
        };
        if self.policy.access(file) == Access::ReadWrite {
            return Ok(()); // the workspace or a writable path: not in the layer
        }
        let Ok(rel) = file.strip_prefix(home) else {
            return Ok(());
        };
        let mut at = upper.to_path_buf();
        let n = rel.components().count();
        for (i, c) in rel.components().enumerate() {
            at.push(c);
            let Ok(md) = std::fs::symlink_metadata(&at) else {
                return Ok(()); // nothing in the layer below here
            };
            let shadowed = i + 1 == n || !md.is_dir() || is_opaque(&at);
            if shadowed {
                return Err(ResolveError::Shadowed {
                    what: what.into(),
                    path: file.into(),
                    upper: at,
                });
            }
        }
        Ok(())
    }
}

fn is_opaque(dir: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(fd) = capsule_bundle::fsat::open_dir(dir) else {
        return true; // unreadable: assume the worst
    };
    ["trusted.overlay.opaque", "user.overlay.opaque"]
        .iter()
        .any(|n| capsule_bundle::fsat::get_xattr(fd.as_raw_fd(), n).is_some_and(|v| v == b"y"))
}

/// The package folder of `file`: the nearest folder holding a `package.json` between the
/// file and `limit` (an npm package: its vendored binaries sit beside `bin/`), else the
/// file's own folder.
fn package_root(file: &Path, limit: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(file).to_path_buf();
    let mut d = parent.as_path();
    while d.starts_with(limit) {
        if d.join("package.json").is_file() {
            return d.to_path_buf();
        }
        match d.parent() {
            Some(p) => d = p,
            None => break,
        }
    }
    parent
}

/// The interpreter a `#!` line names (`#!/usr/bin/env node` looks `node` up on `path`).
fn interpreter(file: &Path, path: &OsStr) -> Option<PathBuf> {
    use std::io::Read;
    let mut buf = [0u8; 256];
    let n = std::fs::File::open(file).ok()?.read(&mut buf).ok()?;
    let head = buf.get(..n)?;
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n')?];
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let interp = Path::new(words.next()?);
    if interp.file_name() != Some(OsStr::new("env")) {
        return Some(interp.to_path_buf());
    }
    let prog = words.find(|w| !w.starts_with('-') && !w.contains('='))?;
    if prog.contains('/') {
        Some(PathBuf::from(prog))
    } else {
        which(prog, path)
    }
}

/// Resolve the backend's binary once (see the module docs).
pub fn resolve_binary(
    name: &str,
    path: &OsStr,
    view: Option<&View<'_>>,
) -> Result<Resolved, ResolveError> {
    let found = which(name, path).ok_or_else(|| ResolveError::NotFound(name.into()))?;
    let binary = std::fs::canonicalize(&found).map_err(|e| ResolveError::Io {
        what: format!("resolving {name} at"),
        path: found.clone(),
        source: e,
    })?;
    let mut r = Resolved {
        found,
        binary: binary.clone(),
        interpreter: None,
        reveal: Vec::new(),
    };
    let Some(view) = view else {
        return Ok(r);
    };
    let what = format!("the {name} binary");
    view.check_shadow(&what, &binary)?;
    r.reveal.extend(view.reveal_for(&what, &binary, path)?);
    // a file the sandbox can write could name anything in its #! line: not followed
    if view.policy.access(&binary) == Access::ReadWrite {
        return Ok(r);
    }
    if let Some(i) = interpreter(&binary, path).and_then(|i| std::fs::canonicalize(i).ok()) {
        let what = format!("the interpreter of {name}");
        view.check_shadow(&what, &i)?;
        if let Some(dir) = view.reveal_for(&what, &i, path)? {
            if !r.reveal.iter().any(|d| i.starts_with(d)) {
                r.reveal.push(dir);
            }
        }
        r.interpreter = Some(i);
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Profile;

    fn claude() -> Profile {
        crate::agent::find("claude", &[]).unwrap()
    }
    use capsule_bundle::policy::{HiddenPath, NetworkPolicy};

    fn pol(home: &Path, hidden: Vec<HiddenPath>) -> SandboxPolicy {
        SandboxPolicy {
            version: 1,
            capsule_name: "c".into(),
            workspace: home.join("ws"),
            read_only: vec![],
            tmp_dir: "/t".into(),
            home: Some(home.into()),
            home_layer: None,
            cache_dir: None,
            writable: vec![],
            hidden,
            revealed: vec![home.join(".claude/local")],
            pass_env: vec![],
            devices: vec![],
            network: NetworkPolicy::default(),
        }
    }

    fn hp(p: PathBuf, reason: HiddenReason) -> HiddenPath {
        HiddenPath { path: p, reason }
    }

    #[test]
    fn own_login_unhidden_others_kept() {
        let h = Path::new("/home/u");
        let mut p = pol(
            h,
            vec![
                hp(h.join(".claude"), HiddenReason::AgentLogins),
                hp(h.join(".claude.json"), HiddenReason::AgentLogins),
                hp(h.join(".codex"), HiddenReason::AgentLogins),
                hp(h.join(".ssh"), HiddenReason::Credentials),
                hp(h.join(".config/claude"), HiddenReason::Requested),
            ],
        );
        unhide_login(&mut p, &claude());
        let left: Vec<_> = p.hidden.iter().map(|h| h.path.clone()).collect();
        assert_eq!(
            left,
            vec![h.join(".codex"), h.join(".ssh"), h.join(".config/claude")]
        );
        assert!(p.revealed.is_empty());
        assert_eq!(
            p.access(&h.join(".claude/.credentials.json")),
            Access::ReadOnly
        );
        assert_eq!(p.access(&h.join(".codex/auth.json")), Access::Hidden);
    }

    #[test]
    fn other_logins_exclude_own_only() {
        let all = crate::agent::builtin();
        let codex = crate::agent::find("codex", &[]).unwrap();
        let o = other_logins(&codex, &all);
        let has = |o: &[String], x: &str| o.iter().any(|p| p == x);
        assert!(has(&o, ".claude") && has(&o, ".claude.json.backup"));
        assert!(has(&o, ".gemini") && !has(&o, ".codex"));
        let o = other_logins(&claude(), &all);
        assert!(has(&o, ".codex") && !o.iter().any(|p| p.starts_with(".claude")));
        assert!(!has(&o, ".config/claude"));
    }

    #[test]
    fn reveals_only_siblings_and_personal_files() {
        let t = tempfile::tempdir().unwrap();
        let h = std::fs::canonicalize(t.path()).unwrap();
        let pkg = h.join("tools/lib/node_modules/x");
        std::fs::create_dir_all(pkg.join("bin")).unwrap();
        std::fs::write(pkg.join("package.json"), "{}").unwrap();
        let bin = pkg.join("bin/x.js");
        std::fs::write(&bin, "#!/usr/bin/env node\n").unwrap();
        for (reason, ok) in [
            (HiddenReason::SiblingProject, true),
            (HiddenReason::PersonalFiles, true),
            (HiddenReason::Credentials, false),
            (HiddenReason::Requested, false),
            (HiddenReason::AgentLogins, false),
            (HiddenReason::ToolState, false),
        ] {
            let p = pol(&h, vec![hp(h.join("tools"), reason)]);
            let v = View {
                policy: &p,
                upper: None,
            };
            let r = v.reveal_for("x", &bin, OsStr::new("/usr/bin"));
            assert_eq!(r.is_ok(), ok, "{reason:?}: {r:?}");
            if ok {
                assert_eq!(r.unwrap(), Some(pkg.clone()));
            }
        }
        // not hidden, but on no list of the home (default deny): revealed all the same;
        // on the list (or outside the home): nothing to do
        let p = pol(&h, vec![]);
        let v = View {
            policy: &p,
            upper: None,
        };
        assert_eq!(
            v.reveal_for("x", &bin, OsStr::new("/usr/bin")).unwrap(),
            Some(pkg.clone())
        );
        // in a PATH folder: the home shows it already
        let on_path = pkg.join("bin");
        assert_eq!(v.reveal_for("x", &bin, on_path.as_os_str()).unwrap(), None);
        let listed = h.join(".local/bin/x");
        assert_eq!(
            v.reveal_for("x", &listed, OsStr::new("/usr/bin")).unwrap(),
            None
        );
        assert_eq!(
            v.reveal_for("x", Path::new("/usr/bin/x"), OsStr::new("/usr/bin"))
                .unwrap(),
            None
        );
    }

    #[test]
    fn shadowed_by_the_layer() {
        let t = tempfile::tempdir().unwrap();
        let h = t.path().join("home");
        let upper = t.path().join("upper");
        std::fs::create_dir_all(h.join(".local/bin")).unwrap();
        std::fs::write(h.join(".local/bin/claude"), "x").unwrap();
        let p = pol(&h, vec![]);
        let v = View {
            policy: &p,
            upper: Some(&upper),
        };
        let bin = h.join(".local/bin/claude");
        assert!(v.check_shadow("b", &bin).is_ok(), "no upper at all");
        std::fs::create_dir_all(upper.join(".local/bin")).unwrap();
        assert!(v.check_shadow("b", &bin).is_ok(), "folders copied up only");
        std::fs::write(upper.join(".local/bin/claude"), "evil").unwrap();
        assert!(matches!(
            v.check_shadow("b", &bin),
            Err(ResolveError::Shadowed { .. })
        ));
        std::fs::remove_dir_all(upper.join(".local")).unwrap();
        std::os::unix::fs::symlink("/elsewhere", upper.join(".local")).unwrap();
        assert!(v.check_shadow("b", &bin).is_err(), "symlink on the way");
    }

    #[test]
    fn shebang_interpreters() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let bin = d.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let node = bin.join("node");
        std::fs::write(&node, "").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::ffi::OsString::from(bin.as_os_str());
        for (line, want) in [
            ("#!/usr/bin/env node\n", Some(node.clone())),
            ("#!/usr/bin/env -S node --x\n", Some(node.clone())),
            (
                "#!/opt/py/bin/python3 -u\n",
                Some(PathBuf::from("/opt/py/bin/python3")),
            ),
            ("\x7fELF", None),
            ("#!/usr/bin/env nothere\n", None),
        ] {
            let f = d.join("s");
            std::fs::write(&f, line).unwrap();
            assert_eq!(interpreter(&f, &path), want, "{line:?}");
        }
    }
}

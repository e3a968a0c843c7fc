//! A repository's `config` (or `config.worktree`) as the operator's host git may read it,
//! reduced to an allowlist: [`sanitize`] parses the bytes (git's syntax, with gix's parser:
//! sections, `[section "sub"]` and `[section.sub]` headers, case-insensitive names, quotes,
//! escapes, `\` continuations; includes are never followed) and gives back a config in a
//! canonical form holding only the keys in [`ALLOWED`] whose values pass their check, and
//! what was dropped.
//!
//! The output is written by us, every value quoted and escaped, so that what git reads
//! back is exactly what was checked here (no difference between two parsers can smuggle a
//! key through). An allowlist, not a denylist: git grows keys that run programs
//! (`core.fsmonitor`, `core.pager`, `core.sshCommand`, `diff.external`, `filter.*`,
//! `diff.*.textconv`, `merge.*.driver`, `credential.helper`, `alias.*`, `gpg.program`,
//! `sequence.editor`, `uploadpack.packObjectsHook`, `remote.*.uploadpack`,
//! `remote.*.receivepack`...) or point it elsewhere (`core.hooksPath`, `include.path`,
//! `includeIf.*`, `core.worktree`, `url.*.insteadOf`, `init.templateDir`,
//! `extensions.partialClone`...) faster than a list of bad ones could follow.

use super::paths::{local_inside, Inside, Roots};
use gix::bstr::{BStr, BString, ByteSlice};
use gix::config::parse::{EventRef, Events};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// How a value is checked before it is kept.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Check {
    /// Any value (it names nothing git runs or reads).
    Any,
    /// A repository URL: a network URL of a known scheme, scp-like `host:path`, or a local
    /// path inside the workspace; never a transport helper (`ext::`, `fd::`, `x::`) or an
    /// option-like `-...`.
    Url,
    /// A path that must stay inside the workspace (relative to the git dir).
    InsideFromGitDir,
    /// `submodule.<name>.update`: only git's own modes, never `!command`.
    SubmoduleUpdate,
    /// One of a few words.
    OneOf(&'static [&'static str]),
}

/// Does the key take a subsection?
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sub {
    No,
    Any,
}

/// The keys kept: `(section, subsection, key, check)`, names lowercase.
const ALLOWED: &[(&str, Sub, &str, Check)] = &[
    ("core", Sub::No, "repositoryformatversion", Check::Any),
    ("core", Sub::No, "filemode", Check::Any),
    ("core", Sub::No, "bare", Check::Any),
    ("core", Sub::No, "logallrefupdates", Check::Any),
    ("core", Sub::No, "ignorecase", Check::Any),
    ("core", Sub::No, "precomposeunicode", Check::Any),
    ("core", Sub::No, "symlinks", Check::Any),
    ("core", Sub::No, "autocrlf", Check::Any),
    ("core", Sub::No, "eol", Check::Any),
    ("core", Sub::No, "safecrlf", Check::Any),
    ("core", Sub::No, "quotepath", Check::Any),
    ("core", Sub::No, "abbrev", Check::Any),
    ("core", Sub::No, "sparsecheckout", Check::Any),
    ("core", Sub::No, "sparsecheckoutcone", Check::Any),
    ("core", Sub::No, "worktree", Check::InsideFromGitDir),
    ("index", Sub::No, "sparse", Check::Any),
    (
        "extensions",
        Sub::No,
        "objectformat",
        Check::OneOf(&["sha1", "sha256"]),
    ),
    ("extensions", Sub::No, "worktreeconfig", Check::Any),
    (
        "extensions",
        Sub::No,
        "refstorage",
        Check::OneOf(&["files", "reftable"]),
    ),
    ("remote", Sub::Any, "url", Check::Url),
    ("remote", Sub::Any, "pushurl", Check::Url),
    ("remote", Sub::Any, "fetch", Check::Any),
    ("remote", Sub::Any, "push", Check::Any),
    ("remote", Sub::Any, "mirror", Check::Any),
    ("remote", Sub::Any, "tagopt", Check::Any),
    ("remote", Sub::Any, "prune", Check::Any),
    ("remote", Sub::Any, "prunetags", Check::Any),
    ("remote", Sub::Any, "skipdefaultupdate", Check::Any),
    ("remote", Sub::Any, "skipfetchall", Check::Any),
    ("branch", Sub::Any, "remote", Check::Any),
    ("branch", Sub::Any, "pushremote", Check::Any),
    ("branch", Sub::Any, "merge", Check::Any),
    ("branch", Sub::Any, "rebase", Check::Any),
    ("branch", Sub::Any, "description", Check::Any),
    ("user", Sub::No, "name", Check::Any),
    ("user", Sub::No, "email", Check::Any),
    ("init", Sub::No, "defaultbranch", Check::Any),
    ("pull", Sub::No, "rebase", Check::Any),
    ("pull", Sub::No, "ff", Check::Any),
    ("push", Sub::No, "default", Check::Any),
    ("push", Sub::No, "autosetupremote", Check::Any),
    ("fetch", Sub::No, "prune", Check::Any),
    ("submodule", Sub::Any, "url", Check::Url),
    ("submodule", Sub::Any, "active", Check::Any),
    ("submodule", Sub::Any, "branch", Check::Any),
    ("submodule", Sub::Any, "update", Check::SubmoduleUpdate),
    ("submodule", Sub::Any, "fetchrecursesubmodules", Check::Any),
    ("submodule", Sub::Any, "ignore", Check::Any),
    ("submodule", Sub::No, "active", Check::Any),
    ("lfs", Sub::No, "repositoryformatversion", Check::Any),
];

/// One key or section that was not kept, for the record (names as git spells them,
/// lowercase; never the value: it may be a secret or a command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// `section.key` or `section.<sub>.key` (the subsection escaped), or a whole-file
    /// reason such as `unparsable`.
    pub key: String,
    /// Why it was not kept.
    pub why: &'static str,
}

/// The result of [`sanitize`].
#[derive(Debug, Clone)]
pub struct Sanitized {
    /// The config to write back when something was dropped.
    pub bytes: Vec<u8>,
    /// What was dropped; empty: the original may stay as it is.
    pub dropped: Vec<Dropped>,
    /// Local repository paths (absolute) named by kept `remote.*.url` / `pushurl` /
    /// `submodule.*.url` values that lie inside the workspace: git dirs to check too.
    pub local_repos: Vec<std::path::PathBuf>,
}

/// Reduce `input` (a config file of the git dir `git_dir`, inside `workspace`) to the
/// allowlist, as the module documents.
pub fn sanitize(input: &[u8], workspace: &Roots, git_dir: &Path) -> Sanitized {
    let mut out = Sanitized {
        bytes: Vec::new(),
        dropped: Vec::new(),
        local_repos: Vec::new(),
    };
    let events = match Events::from_bytes(input, None) {
        Ok(e) => e,
        Err(_) => {
            out.dropped.push(Dropped {
                key: "(the whole file)".into(),
                why: "not parsable as git config",
            });
            return out;
        }
    };
    let mut entries: Vec<Entry> = Vec::new();
    let mut section: Option<(BString, Option<BString>)> = None;
    let mut pending: Option<Entry> = None;
    let finish = |p: &mut Option<Entry>, entries: &mut Vec<Entry>| {
        if let Some(e) = p.take() {
            entries.push(e);
        }
    };
    for ev in events.iter() {
        match ev {
            EventRef::SectionHeader {
                name,
                separator,
                subsection_name,
            } => {
                finish(&mut pending, &mut entries);
                let name = name.to_ascii_lowercase().into();
                // `[section.sub]` (legacy): the subsection is lowercase, as in git
                let sub = subsection_name.map(|s| {
                    if separator.is_some_and(|s| s == ".") {
                        BString::from(s.to_ascii_lowercase())
                    } else {
                        BString::from(s.to_vec())
                    }
                });
                section = Some((name, sub));
            }
            EventRef::SectionValueName(k) => {
                finish(&mut pending, &mut entries);
                pending = Some(Entry {
                    section: section.clone(),
                    key: k.to_ascii_lowercase().into(),
                    raw: None,
                    separator: false,
                });
            }
            EventRef::KeyValueSeparator => {
                if let Some(p) = pending.as_mut() {
                    p.separator = true;
                    p.raw.get_or_insert_with(BString::default);
                }
            }
            EventRef::Value(v) | EventRef::ValueNotDone(v) | EventRef::ValueDone(v) => {
                if let Some(p) = pending.as_mut() {
                    p.raw
                        .get_or_insert_with(BString::default)
                        .extend_from_slice(v);
                }
            }
            EventRef::Comment { .. } | EventRef::Newline(_) | EventRef::Whitespace(_) => {}
        }
    }
    finish(&mut pending, &mut entries);

    let mut kept: Vec<Kept> = Vec::new();
    for e in entries {
        let value: Option<BString> = e
            .raw
            .as_ref()
            .filter(|_| e.separator)
            .map(|r| gix::config::value::normalize(r.as_bstr()).into_owned());
        let name = e.display();
        let Some((sec, sub)) = &e.section else {
            out.dropped.push(Dropped {
                key: name,
                why: "outside any section",
            });
            continue;
        };
        let rule = ALLOWED.iter().find(|(s, k, key, _)| {
            sec == s.as_bytes()
                && key.as_bytes() == e.key.as_slice()
                && match k {
                    Sub::No => sub.is_none(),
                    Sub::Any => sub.is_some(),
                }
        });
        let Some((_, _, _, check)) = rule else {
            out.dropped.push(Dropped {
                key: name,
                why: "not on the allowlist",
            });
            continue;
        };
        if !valid_name(sec)
            || !valid_name(&e.key)
            || sub
                .as_ref()
                .is_some_and(|s| s.iter().any(|&b| b == 0 || b == b'\n' || b == b'\r'))
        {
            out.dropped.push(Dropped {
                key: name,
                why: "not a valid name",
            });
            continue;
        }
        let v = value.as_ref().map(|v| v.as_bstr());
        if v.is_some_and(|v| v.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n')) {
            out.dropped.push(Dropped {
                key: name,
                why: "a value with line breaks or NUL",
            });
            continue;
        }
        match value_ok(*check, v, workspace, git_dir) {
            Ok(local) => {
                if let Some(p) = local {
                    out.local_repos.push(p);
                }
                kept.push((e.section.clone(), e.key.clone(), value.clone()));
            }
            Err(why) => out.dropped.push(Dropped { key: name, why }),
        }
    }
    out.bytes = write(&kept);
    out
}

/// A kept key: its section and subsection, name, value (`None`: an implicit true).
type Kept = (Option<(BString, Option<BString>)>, BString, Option<BString>);

struct Entry {
    section: Option<(BString, Option<BString>)>,
    key: BString,
    raw: Option<BString>,
    /// false: no `=` (an implicit true, whatever events the parser gave)
    separator: bool,
}

impl Entry {
    fn display(&self) -> String {
        let key = self.key.to_str_lossy();
        match &self.section {
            None => format!("{key:?}"),
            Some((s, None)) => format!("{}.{key}", s.to_str_lossy())
                .escape_debug()
                .to_string(),
            Some((s, Some(sub))) => format!("{}.{}.{key}", s.to_str_lossy(), sub.to_str_lossy())
                .escape_debug()
                .to_string(),
        }
    }
}

fn valid_name(n: &[u8]) -> bool {
    !n.is_empty() && n.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-')
}

fn value_ok(
    check: Check,
    v: Option<&BStr>,
    workspace: &Roots,
    git_dir: &Path,
) -> Result<Option<std::path::PathBuf>, &'static str> {
    match check {
        Check::Any => Ok(None),
        Check::OneOf(words) => match v {
            Some(v) if words.iter().any(|w| v.eq_ignore_ascii_case(w.as_bytes())) => Ok(None),
            _ => Err("a value git would not accept"),
        },
        Check::SubmoduleUpdate => match v {
            Some(v)
                if ["checkout", "rebase", "merge", "none"]
                    .iter()
                    .any(|w| v.eq_ignore_ascii_case(w.as_bytes())) =>
            {
                Ok(None)
            }
            _ => Err("runs a command (only checkout, rebase, merge, none are kept)"),
        },
        Check::InsideFromGitDir => {
            let Some(v) = v else {
                return Err("a path without a value");
            };
            match local_inside(
                workspace,
                git_dir,
                Path::new(std::ffi::OsStr::from_bytes(v)),
            ) {
                Inside::Yes(_) => Ok(None),
                _ => Err("points outside the workspace"),
            }
        }
        Check::Url => {
            let Some(v) = v else {
                return Err("a URL without a value");
            };
            url_ok(v, workspace)
        }
    }
}

/// Schemes of network URLs git handles itself.
const SCHEMES: &[&str] = &[
    "http", "https", "ssh", "git", "git+ssh", "ssh+git", "ftp", "ftps",
];

fn url_ok(v: &BStr, workspace: &Roots) -> Result<Option<std::path::PathBuf>, &'static str> {
    if v.is_empty() {
        return Ok(None);
    }
    if v[0] == b'-' {
        return Err("an option-like URL");
    }
    // git's own test for a transport helper: scheme characters, then `::`
    let scheme_len = v
        .iter()
        .enumerate()
        .take_while(|(i, b)| {
            b.is_ascii_alphabetic() || (*i > 0 && (b.is_ascii_digit() || b"+.-".contains(b)))
        })
        .count();
    if v[scheme_len..].starts_with(b"::") {
        return Err("a transport helper URL (runs a program)");
    }
    if v[scheme_len..].starts_with(b"://") {
        let scheme = v[..scheme_len].to_ascii_lowercase();
        if scheme == b"file" {
            let path = &v[scheme_len + 3..];
            return local(path.as_bstr(), workspace);
        }
        if SCHEMES.iter().any(|s| s.as_bytes() == scheme.as_slice()) {
            let rest = &v[scheme_len + 3..];
            let authority = rest.split_str("/").next().unwrap_or(rest);
            if option_like(authority) {
                return Err("an option-like user or host");
            }
            return Ok(None);
        }
        return Err("an unknown URL scheme (git would run a remote helper for it)");
    }
    // scp-like `[user@]host:path`: a colon before any slash
    if let Some(colon) = v.find_byte(b':') {
        if !v[..colon].contains(&b'/') {
            if option_like(&v[..colon]) {
                return Err("an option-like user or host");
            }
            return Ok(None);
        }
    }
    local(v, workspace)
}

/// Does a part of `user@host` start with `-` (ssh would take it for an option)?
fn option_like(authority: &[u8]) -> bool {
    authority.split_str("@").any(|p| p.starts_with(b"-"))
}

fn local(path: &BStr, workspace: &Roots) -> Result<Option<std::path::PathBuf>, &'static str> {
    let p = Path::new(std::ffi::OsStr::from_bytes(path)).to_path_buf();
    if !p.is_absolute()
        && p.components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(
            "a relative local path with `..` (where it leads depends on the directory git runs in)",
        );
    }
    match local_inside(workspace, &workspace.canonical, &p) {
        Inside::Yes(abs) => Ok(Some(abs)),
        Inside::Outside => Err("a local repository outside the workspace"),
        Inside::Symlink => Err("a local path through a symlink"),
    }
}

/// The canonical config text of `kept`, grouped under one header per section as met.
fn write(kept: &[Kept]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut current: Option<&(BString, Option<BString>)> = None;
    for (sec, key, value) in kept {
        let Some(sec) = sec else { continue };
        if current != Some(sec) {
            out.push(b'[');
            out.extend_from_slice(&sec.0);
            if let Some(sub) = &sec.1 {
                out.extend_from_slice(b" \"");
                for &b in sub.iter() {
                    if b == b'"' || b == b'\\' {
                        out.push(b'\\');
                    }
                    out.push(b);
                }
                out.push(b'"');
            }
            out.extend_from_slice(b"]\n");
            current = Some(sec);
        }
        out.push(b'\t');
        out.extend_from_slice(key);
        if let Some(v) = value {
            out.extend_from_slice(b" = \"");
            for &b in v.iter() {
                match b {
                    b'"' => out.extend_from_slice(b"\\\""),
                    b'\\' => out.extend_from_slice(b"\\\\"),
                    b'\t' => out.extend_from_slice(b"\\t"),
                    0x08 => out.extend_from_slice(b"\\b"),
                    _ => out.push(b),
                }
            }
            out.push(b'"');
        }
        out.push(b'\n');
    }
    out
}

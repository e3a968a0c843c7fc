//! The typed SBPL model (operations, filters, modifiers, rules) and its rendering to text.
//!
//! Nothing here pastes a path into rule text: a path is a [`Str::Param`] (`(param "WS")`)
//! whose value travels separately (`sandbox-exec -D WS=/path`). The only literal strings
//! rendered are a validated nonce, port numbers and a fixed table of service names; a
//! literal is escaped (`\` first, then `"`) and refused if it holds a control character
//! or NUL ([`escape_literal`]).

use std::fmt::Write as _;

/// Operation names this crate knows, each with its parent in SBPL's wildcard tree
/// (`file-read-data` -> `file-read*` -> `file*`). `default` has no parent.
pub const OPERATIONS: &[(&str, Option<&str>)] = &[
    ("default", None),
    ("file*", None),
    ("file-read*", Some("file*")),
    ("file-read-data", Some("file-read*")),
    ("file-read-metadata", Some("file-read*")),
    ("file-read-xattr", Some("file-read*")),
    ("file-write*", Some("file*")),
    ("file-write-data", Some("file-write*")),
    ("file-write-create", Some("file-write*")),
    ("file-write-unlink", Some("file-write*")),
    ("file-write-mode", Some("file-write*")),
    ("file-write-owner", Some("file-write*")),
    ("file-write-flags", Some("file-write*")),
    ("file-write-times", Some("file-write*")),
    ("file-write-xattr", Some("file-write*")),
    ("file-write-acl", Some("file-write*")),
    ("file-write-setugid", Some("file-write*")),
    ("file-link", Some("file*")),
    ("file-ioctl", Some("file*")),
    ("file-clone", Some("file*")),
    ("file-revoke", Some("file*")),
    ("file-search", Some("file*")),
    ("file-test-existence", Some("file*")),
    ("file-map-executable", Some("file*")),
    ("file-mknod", Some("file*")),
    ("file-chroot", Some("file*")),
    ("file-mount", Some("file*")),
    ("file-unmount", Some("file*")),
    ("file-issue-extension", Some("file*")),
    ("process*", None),
    ("process-fork", Some("process*")),
    ("process-exec*", Some("process*")),
    ("process-exec", Some("process-exec*")),
    ("process-exec-interpreter", Some("process-exec*")),
    ("process-info*", Some("process*")),
    ("process-info-pidinfo", Some("process-info*")),
    ("process-info-listpids", Some("process-info*")),
    ("process-info-setcontrol", Some("process-info*")),
    ("process-info-dirtycontrol", Some("process-info*")),
    ("process-info-rusage", Some("process-info*")),
    ("process-info-codesignature", Some("process-info*")),
    ("signal", None),
    ("network*", None),
    ("network-outbound", Some("network*")),
    ("network-inbound", Some("network*")),
    ("network-bind", Some("network*")),
    ("mach*", None),
    ("mach-lookup", Some("mach*")),
    ("mach-register", Some("mach*")),
    ("mach-task-name", Some("mach*")),
    ("mach-per-user-lookup", Some("mach*")),
    ("mach-bootstrap", Some("mach*")),
    ("sysctl*", None),
    ("sysctl-read", Some("sysctl*")),
    ("sysctl-write", Some("sysctl*")),
    ("ipc*", None),
    ("ipc-posix*", Some("ipc*")),
    ("ipc-posix-sem", Some("ipc-posix*")),
    ("ipc-posix-shm*", Some("ipc-posix*")),
    ("ipc-posix-shm-read*", Some("ipc-posix-shm*")),
    ("ipc-posix-shm-read-data", Some("ipc-posix-shm-read*")),
    ("ipc-posix-shm-read-metadata", Some("ipc-posix-shm-read*")),
    ("ipc-posix-shm-write*", Some("ipc-posix-shm*")),
    ("ipc-posix-shm-write-create", Some("ipc-posix-shm-write*")),
    ("ipc-posix-shm-write-data", Some("ipc-posix-shm-write*")),
    ("ipc-posix-shm-write-unlink", Some("ipc-posix-shm-write*")),
    ("ipc-sysv*", Some("ipc*")),
    ("pseudo-tty", None),
    ("system-socket", None),
    ("iokit*", None),
    ("iokit-open", Some("iokit*")),
    ("user-preference*", None),
    ("user-preference-read", Some("user-preference*")),
    ("user-preference-write", Some("user-preference*")),
];

/// An operation name (`file-read*`, `mach-lookup`, ...). Built from [`OPERATIONS`] by the
/// generator; the parser keeps unknown names so the linter can report them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Operation(pub String);

impl Operation {
    /// A known operation. Unknown names are a programming error in the generator, so they
    /// still build (the linter refuses them).
    pub fn new(name: &str) -> Self {
        Operation(name.to_string())
    }
    pub fn name(&self) -> &str {
        &self.0
    }
    pub fn is_known(&self) -> bool {
        OPERATIONS.iter().any(|(n, _)| *n == self.0)
    }
    /// The parent wildcard of this operation, if any.
    pub fn parent(&self) -> Option<Operation> {
        OPERATIONS
            .iter()
            .find(|(n, _)| *n == self.0)
            .and_then(|(_, p)| p.map(Operation::new))
    }
    /// Does a rule naming `self` apply to the concrete operation `op` (itself or a
    /// descendant in the wildcard tree)?
    pub fn covers(&self, op: &Operation) -> bool {
        let mut cur = Some(op.clone());
        while let Some(c) = cur {
            if &c == self {
                return true;
            }
            cur = c.parent();
        }
        false
    }
}

/// A string argument: a parameter reference (every path) or a literal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Str {
    /// `(param "NAME")`
    Param(String),
    /// `"text"` (escaped on rendering)
    Lit(String),
}

/// A filter: what a rule's target must match. Several filters directly on a rule are
/// alternatives (any may match).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// `(literal S)`: exactly this path.
    Literal(Str),
    /// `(subpath S)`: this path and everything under it (whole components).
    Subpath(Str),
    /// `(regex #"^...")`: a path regular expression (POSIX-style).
    Regex(String),
    /// `(require-all F...)`
    RequireAll(Vec<Filter>),
    /// `(require-any F...)`
    RequireAny(Vec<Filter>),
    /// `(require-not F)`
    RequireNot(Box<Filter>),
    /// `(global-name S)`: a Mach service name.
    GlobalName(Str),
    /// `(remote ip "host:port")`, host `localhost` or `*`, port a number or `*`.
    RemoteIp(String),
    /// `(local ip "host:port")`
    LocalIp(String),
    /// `(remote unix-socket F)`: the socket path of a connect.
    RemoteUnixSocket(Box<Filter>),
    /// `(local unix-socket F)`: the socket path of a bind/accept.
    LocalUnixSocket(Box<Filter>),
    /// `(target same-sandbox)` and friends, for signal / process-info.
    Target(String),
    /// Anything else the parser met (the linter refuses it).
    Other(String),
}

/// A rule modifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Modifier {
    /// `(with message "text")`
    Message(String),
    /// `(with report)`
    Report,
    /// `(with no-sandbox)` (never generated; the linter refuses it)
    NoSandbox,
    /// Anything else the parser met.
    Other(String),
}

/// `allow` or `deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Allow,
    Deny,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
        }
    }
}

/// One rule: `(action op... filter... modifier...)`. No filter: unfiltered (the
/// operation's fallback).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub action: Action,
    pub operations: Vec<Operation>,
    pub filters: Vec<Filter>,
    pub modifiers: Vec<Modifier>,
}

impl Rule {
    pub fn new(action: Action, ops: &[&str], filters: Vec<Filter>) -> Self {
        Rule {
            action,
            operations: ops.iter().map(|o| Operation::new(o)).collect(),
            filters,
            modifiers: Vec::new(),
        }
    }
    pub fn is_filtered(&self) -> bool {
        !self.filters.is_empty()
    }
}

/// A top-level form of a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// `(version N)`
    Version(u32),
    Rule(Rule),
    /// `; text` (one line)
    Comment(String),
    /// Any other top-level form (`import`, `define`, ...), kept as its head word.
    Other(String),
}

/// A whole profile.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Profile {
    pub items: Vec<Item>,
}

impl Profile {
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.items.iter().filter_map(|i| match i {
            Item::Rule(r) => Some(r),
            _ => None,
        })
    }
}

/// Errors of rendering.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("literal {0:?} holds a control character or NUL; it cannot go into a profile")]
    ControlChar(String),
    #[error("comment {0:?} spans lines")]
    MultilineComment(String),
    #[error("filter {0:?} cannot be rendered (it came from a parser, not a generator)")]
    Unrenderable(String),
}

/// Escape a literal string for SBPL: `\` becomes `\\`, then `"` becomes `\"`. Control
/// characters (newline included) and NUL are refused rather than escaped.
pub fn escape_literal(s: &str) -> Result<String, RenderError> {
    if s.chars().any(|c| c.is_control()) {
        return Err(RenderError::ControlChar(s.to_string()));
    }
    Ok(s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn quote(s: &str) -> Result<String, RenderError> {
    Ok(format!("\"{}\"", escape_literal(s)?))
}

fn render_str(s: &Str) -> Result<String, RenderError> {
    match s {
        Str::Param(n) => Ok(format!("(param {})", quote(n)?)),
        Str::Lit(l) => quote(l),
    }
}

/// Render one filter.
pub fn render_filter(f: &Filter) -> Result<String, RenderError> {
    let list = |head: &str, fs: &[Filter]| -> Result<String, RenderError> {
        let mut s = format!("({head}");
        for f in fs {
            s.push(' ');
            s.push_str(&render_filter(f)?);
        }
        s.push(')');
        Ok(s)
    };
    Ok(match f {
        Filter::Literal(s) => format!("(literal {})", render_str(s)?),
        Filter::Subpath(s) => format!("(subpath {})", render_str(s)?),
        Filter::Regex(r) => format!("(regex #{})", quote(r)?),
        Filter::RequireAll(fs) => list("require-all", fs)?,
        Filter::RequireAny(fs) => list("require-any", fs)?,
        Filter::RequireNot(f) => format!("(require-not {})", render_filter(f)?),
        Filter::GlobalName(s) => format!("(global-name {})", render_str(s)?),
        Filter::RemoteIp(a) => format!("(remote ip {})", quote(a)?),
        Filter::LocalIp(a) => format!("(local ip {})", quote(a)?),
        Filter::RemoteUnixSocket(f) => format!("(remote unix-socket {})", render_filter(f)?),
        Filter::LocalUnixSocket(f) => format!("(local unix-socket {})", render_filter(f)?),
        Filter::Target(t) => {
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err(RenderError::Unrenderable(t.clone()));
            }
            format!("(target {t})")
        }
        Filter::Other(o) => return Err(RenderError::Unrenderable(o.clone())),
    })
}

fn render_modifier(m: &Modifier) -> Result<String, RenderError> {
    Ok(match m {
        Modifier::Message(t) => format!("(with message {})", quote(t)?),
        Modifier::Report => "(with report)".into(),
        Modifier::NoSandbox => "(with no-sandbox)".into(),
        Modifier::Other(o) => return Err(RenderError::Unrenderable(o.clone())),
    })
}

/// Render one rule. A rule with more than one filter puts each on its own line.
pub fn render_rule(r: &Rule) -> Result<String, RenderError> {
    let mut s = format!("({}", r.action.as_str());
    for op in &r.operations {
        if op.0.is_empty()
            || !op
                .0
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'-' || b == b'*')
        {
            return Err(RenderError::Unrenderable(op.0.clone()));
        }
        s.push(' ');
        s.push_str(&op.0);
    }
    let multi = r.filters.len() > 1;
    for f in &r.filters {
        s.push_str(if multi { "\n  " } else { " " });
        s.push_str(&render_filter(f)?);
    }
    for m in &r.modifiers {
        s.push(' ');
        s.push_str(&render_modifier(m)?);
    }
    s.push(')');
    Ok(s)
}

/// Render a whole profile, one top-level form per line (multi-filter rules span lines).
pub fn render(p: &Profile) -> Result<String, RenderError> {
    let mut out = String::new();
    for item in &p.items {
        match item {
            Item::Version(v) => {
                let _ = writeln!(out, "(version {v})");
            }
            Item::Rule(r) => {
                out.push_str(&render_rule(r)?);
                out.push('\n');
            }
            Item::Comment(c) => {
                if c.contains('\n') || c.contains('\r') {
                    return Err(RenderError::MultilineComment(c.clone()));
                }
                let _ = writeln!(out, "; {c}");
            }
            Item::Other(o) => return Err(RenderError::Unrenderable(o.clone())),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_order_and_refusals() {
        assert_eq!(escape_literal(r#"a\"b"#).unwrap(), r#"a\\\"b"#);
        assert!(escape_literal("a\nb").is_err());
        assert!(escape_literal("a\0b").is_err());
        assert_eq!(escape_literal("ü);x").unwrap(), "ü);x");
    }

    #[test]
    fn covers_walks_the_wildcard_tree() {
        let fw = Operation::new("file-write*");
        assert!(fw.covers(&Operation::new("file-write-unlink")));
        assert!(!fw.covers(&Operation::new("file-link")));
        assert!(Operation::new("file*").covers(&Operation::new("file-link")));
        assert!(!Operation::new("file-read*").covers(&Operation::new("file-write-data")));
    }
}

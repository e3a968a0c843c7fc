//! The linter every generated profile passes before it is used or printed. It refuses:
//! unknown operations and filters; `(allow default)`; `(with no-sandbox)` and unknown
//! modifiers; `import` and every other top-level form but `version` and rules;
//! unfiltered allows of writes, network or Mach lookups; regexes that are not anchored
//! (`^`) or use PCRE-only syntax; path filters that are not parameters or whose values are
//! not canonical; undefined parameters; rules over the size budget; an unfiltered rule
//! after a filtered rule for the same operation (its meaning would hinge on precedence);
//! a profile that does not start with `(version 1)` and `(deny default ...)`.

use crate::canon::is_canonical_text;
use crate::profile::MAX_RULE_BYTES;
use crate::sbpl::{Action, Filter, Item, Modifier, Operation, Profile, Rule, Str};
use std::collections::BTreeMap;

/// One finding: which rule (0-based among rules; `None` for the profile as a whole) and
/// what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub rule: Option<usize>,
    pub kind: Kind,
    pub detail: String,
}

/// Kinds of findings (each has a negative test).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    UnknownOperation,
    UnknownFilter,
    UnknownModifier,
    AllowDefault,
    NoSandbox,
    ForbiddenForm,
    UnfilteredAllow,
    UnanchoredRegex,
    PcreRegex,
    LiteralPath,
    NonCanonicalPath,
    UndefinedParam,
    OversizedRule,
    FallbackAfterOverride,
    BadPreamble,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.rule {
            Some(i) => write!(f, "rule {}: {:?}: {}", i + 1, self.kind, self.detail),
            None => write!(f, "profile: {:?}: {}", self.kind, self.detail),
        }
    }
}

/// Operations that must never be allowed without a filter.
const NO_UNFILTERED_ALLOW: &[&str] = &[
    "file-write*",
    "file-link",
    "network*",
    "mach-lookup",
    "file*",
    "mach*",
];

/// Regex constructs of PCRE that SBPL's (POSIX-style) regexes do not have.
const PCRE_ONLY: &[&str] = &[
    "(?", "\\d", "\\w", "\\s", "\\b", "\\D", "\\W", "\\S", "*?", "+?", "??", "\\1", "\\p{",
];

struct Ctx<'a> {
    params: &'a BTreeMap<String, String>,
    out: Vec<Finding>,
    rule: usize,
}

impl Ctx<'_> {
    fn push(&mut self, kind: Kind, detail: impl Into<String>) {
        self.out.push(Finding {
            rule: Some(self.rule),
            kind,
            detail: detail.into(),
        });
    }
    fn path(&mut self, s: &Str) {
        match s {
            Str::Lit(l) => {
                self.push(
                    Kind::LiteralPath,
                    format!("path {l:?} is a literal, not a parameter"),
                );
                if !is_canonical_text(l) {
                    self.push(Kind::NonCanonicalPath, format!("{l:?}"));
                }
            }
            Str::Param(n) => match self.params.get(n) {
                None => self.push(Kind::UndefinedParam, format!("(param {n:?})")),
                Some(v) if !is_canonical_text(v) => {
                    self.push(Kind::NonCanonicalPath, format!("{n}={v:?}"))
                }
                Some(_) => {}
            },
        }
    }
    fn filter(&mut self, f: &Filter) {
        match f {
            Filter::Literal(s) | Filter::Subpath(s) => self.path(s),
            Filter::GlobalName(Str::Param(n)) => {
                if !self.params.contains_key(n) {
                    self.push(Kind::UndefinedParam, format!("(param {n:?})"));
                }
            }
            Filter::GlobalName(Str::Lit(_)) | Filter::Target(_) => {}
            Filter::Regex(r) => {
                if !r.starts_with('^') {
                    self.push(Kind::UnanchoredRegex, format!("{r:?}"));
                }
                if let Some(c) = PCRE_ONLY.iter().find(|c| r.contains(*c)) {
                    self.push(Kind::PcreRegex, format!("{r:?} uses {c}"));
                }
            }
            Filter::RequireAll(fs) | Filter::RequireAny(fs) => {
                fs.iter().for_each(|f| self.filter(f))
            }
            Filter::RequireNot(f) | Filter::RemoteUnixSocket(f) | Filter::LocalUnixSocket(f) => {
                self.filter(f)
            }
            Filter::RemoteIp(a) | Filter::LocalIp(a) => {
                let ok = a.rsplit_once(':').is_some_and(|(h, p)| {
                    (h == "*" || h == "localhost") && (p == "*" || p.parse::<u16>().is_ok())
                });
                if !ok {
                    self.push(
                        Kind::UnknownFilter,
                        format!("ip {a:?} (want localhost|*:port|*)"),
                    );
                }
            }
            Filter::Other(o) => self.push(Kind::UnknownFilter, o.clone()),
        }
    }
}

/// Size of a rule's text with its parameters substituted.
fn substituted_size(r: &Rule, params: &BTreeMap<String, String>) -> usize {
    fn values(f: &Filter, params: &BTreeMap<String, String>) -> usize {
        let v = |s: &Str| match s {
            Str::Param(n) => params.get(n).map_or(0, |v| v.len()),
            Str::Lit(_) => 0,
        };
        match f {
            Filter::Literal(s) | Filter::Subpath(s) | Filter::GlobalName(s) => v(s),
            Filter::RequireAll(fs) | Filter::RequireAny(fs) => {
                fs.iter().map(|f| values(f, params)).sum()
            }
            Filter::RequireNot(f) | Filter::RemoteUnixSocket(f) | Filter::LocalUnixSocket(f) => {
                values(f, params)
            }
            _ => 0,
        }
    }
    let text = crate::sbpl::render_rule(r).map_or(0, |t| t.len());
    text + r.filters.iter().map(|f| values(f, params)).sum::<usize>()
}

/// Lint `profile` with its parameter map. Empty: clean.
pub fn lint(profile: &Profile, params: &BTreeMap<String, String>) -> Vec<Finding> {
    let mut cx = Ctx {
        params,
        out: Vec::new(),
        rule: 0,
    };
    // preamble: (version 1) then (deny default ...) before any other rule
    let mut forms = profile
        .items
        .iter()
        .filter(|i| !matches!(i, Item::Comment(_)));
    let v_ok = matches!(forms.next(), Some(Item::Version(1)));
    let d_ok = matches!(forms.next(), Some(Item::Rule(r))
        if r.action == Action::Deny && r.operations == [Operation::new("default")] && r.filters.is_empty());
    if !(v_ok && d_ok) {
        cx.out.push(Finding {
            rule: None,
            kind: Kind::BadPreamble,
            detail: "a profile starts with (version 1) and (deny default ...)".into(),
        });
    }
    let mut filtered_ops: Vec<Operation> = Vec::new();
    for item in &profile.items {
        let r = match item {
            Item::Rule(r) => r,
            Item::Other(o) => {
                cx.out.push(Finding {
                    rule: None,
                    kind: Kind::ForbiddenForm,
                    detail: format!("top-level ({o} ...)"),
                });
                continue;
            }
            Item::Version(v) if *v != 1 => {
                cx.out.push(Finding {
                    rule: None,
                    kind: Kind::BadPreamble,
                    detail: format!("(version {v})"),
                });
                continue;
            }
            _ => continue,
        };
        for op in &r.operations {
            if !op.is_known() {
                cx.push(Kind::UnknownOperation, op.name());
            }
            if r.action == Action::Allow && op.name() == "default" {
                cx.push(Kind::AllowDefault, "(allow default)");
            }
            if r.action == Action::Allow
                && !r.is_filtered()
                && (NO_UNFILTERED_ALLOW.contains(&op.name())
                    || ["file-write*", "network*"]
                        .iter()
                        .any(|w| Operation::new(w).covers(op)))
            {
                cx.push(
                    Kind::UnfilteredAllow,
                    format!("(allow {}) without a filter", op.name()),
                );
            }
            if !r.is_filtered() && op.name() != "default" {
                if let Some(f) = filtered_ops.iter().find(|f| op.covers(f) || f.covers(op)) {
                    let d = format!(
                        "unfiltered {} after a filtered rule for {}",
                        op.name(),
                        f.name()
                    );
                    cx.push(Kind::FallbackAfterOverride, d);
                }
            }
        }
        if r.is_filtered() {
            for op in &r.operations {
                if !filtered_ops.contains(op) {
                    filtered_ops.push(op.clone());
                }
            }
        }
        for m in &r.modifiers {
            match m {
                Modifier::NoSandbox => cx.push(Kind::NoSandbox, "(with no-sandbox)"),
                Modifier::Other(o) => cx.push(Kind::UnknownModifier, o.clone()),
                Modifier::Message(_) | Modifier::Report => {}
            }
        }
        for f in &r.filters {
            cx.filter(f);
        }
        let size = substituted_size(r, params);
        if size > MAX_RULE_BYTES {
            cx.push(
                Kind::OversizedRule,
                format!("{size} bytes with parameters (budget {MAX_RULE_BYTES})"),
            );
        }
        cx.rule += 1;
    }
    cx.out
}

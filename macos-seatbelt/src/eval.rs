//! An evaluator of SBPL profiles: `decide(operation, target)` gives allow/deny and the rule
//! that decided, following SBPL's precedence as this crate relies on it:
//!
//! 1. rules apply to an operation when they name it or one of its wildcard parents
//!    (`file-write*` covers `file-write-unlink`; `default` is never one of them);
//! 2. among filtered rules that apply and whose filter matches, the **last** one wins;
//! 3. otherwise the last unfiltered rule that applies (the operation's fallback);
//! 4. otherwise `default` (the last `(… default)` rule; none: deny).
//!
//! Targets are what the kernel would check: canonical paths, Mach service names, socket
//! addresses. Parameters are substituted from the map given to [`Evaluator::new`].

use crate::sbpl::{Action, Filter, Operation, Profile, Rule, Str};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What an operation is applied to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// No object (fork, sysctl, ...).
    None,
    /// A file (canonical path).
    Path(PathBuf),
    /// A Mach service name.
    Mach(String),
    /// A TCP/UDP peer: `host` is an IP address or `localhost`.
    Remote { host: String, port: u16 },
    /// A local address being bound or accepting.
    Local { host: String, port: u16 },
    /// A unix socket path being connected to.
    RemoteUnix(PathBuf),
    /// A unix socket path being bound.
    LocalUnix(PathBuf),
    /// A process (`same-sandbox`, ...), for signal and process-info.
    Process(String),
}

impl Target {
    pub fn path(p: impl Into<PathBuf>) -> Self {
        Target::Path(p.into())
    }
}

/// The evaluator's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allow: bool,
    /// Index (among the profile's rules, 0-based) of the deciding rule; `None`: implicit
    /// deny (no rule applied, not even `default`).
    pub rule: Option<usize>,
}

/// Errors of evaluation: the profile references something the evaluator cannot resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    #[error("parameter {0:?} is not defined")]
    UndefinedParam(String),
    #[error("regex {0:?} does not compile: {1}")]
    BadRegex(String, String),
    #[error("filter {0} cannot be evaluated")]
    Unknown(String),
}

/// A profile ready to answer questions.
pub struct Evaluator<'a> {
    rules: Vec<&'a Rule>,
    params: &'a BTreeMap<String, String>,
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .map(|ip| ip.is_loopback())
            .unwrap_or(false)
}

/// Does an `ip` filter value (`host:port`, host `localhost` or `*`) match?
fn ip_matches(spec: &str, host: &str, port: u16) -> bool {
    let Some((h, p)) = spec.rsplit_once(':') else {
        return false;
    };
    let host_ok = match h {
        "*" => true,
        "localhost" => is_loopback(host),
        _ => false,
    };
    let port_ok = p == "*" || p.parse::<u16>().ok() == Some(port);
    host_ok && port_ok
}

impl<'a> Evaluator<'a> {
    /// Check every parameter and regex once, so `decide` cannot fail later.
    pub fn new(
        profile: &'a Profile,
        params: &'a BTreeMap<String, String>,
    ) -> Result<Self, EvalError> {
        let rules: Vec<&Rule> = profile.rules().collect();
        let ev = Evaluator { rules, params };
        fn check(ev: &Evaluator<'_>, f: &Filter) -> Result<(), EvalError> {
            match f {
                Filter::Literal(s) | Filter::Subpath(s) | Filter::GlobalName(s) => {
                    ev.value(s).map(|_| ())
                }
                Filter::Regex(r) => regex::Regex::new(r)
                    .map(|_| ())
                    .map_err(|e| EvalError::BadRegex(r.clone(), e.to_string())),
                Filter::RequireAll(fs) | Filter::RequireAny(fs) => {
                    fs.iter().try_for_each(|f| check(ev, f))
                }
                Filter::RequireNot(f)
                | Filter::RemoteUnixSocket(f)
                | Filter::LocalUnixSocket(f) => check(ev, f),
                Filter::RemoteIp(_) | Filter::LocalIp(_) | Filter::Target(_) => Ok(()),
                Filter::Other(o) => Err(EvalError::Unknown(o.clone())),
            }
        }
        for r in &ev.rules {
            for f in &r.filters {
                check(&ev, f)?;
            }
        }
        Ok(ev)
    }

    fn value<'s>(&'s self, s: &'s Str) -> Result<&'s str, EvalError> {
        match s {
            Str::Lit(l) => Ok(l),
            Str::Param(n) => self
                .params
                .get(n)
                .map(|v| v.as_str())
                .ok_or_else(|| EvalError::UndefinedParam(n.clone())),
        }
    }

    fn path_matches(&self, f: &Filter, p: &Path) -> bool {
        match f {
            Filter::Literal(s) => self
                .value(s)
                .is_ok_and(|v| Path::new(v) == p && v.len() == p.as_os_str().len()),
            Filter::Subpath(s) => self.value(s).is_ok_and(|v| p.starts_with(v)),
            Filter::Regex(r) => match (regex::Regex::new(r), p.to_str()) {
                (Ok(re), Some(s)) => re.is_match(s),
                _ => false,
            },
            _ => self.matches(f, &Target::None),
        }
    }

    /// Does filter `f` match `t`?
    pub fn matches(&self, f: &Filter, t: &Target) -> bool {
        match (f, t) {
            (Filter::RequireAll(fs), _) => fs.iter().all(|f| self.matches(f, t)),
            (Filter::RequireAny(fs), _) => fs.iter().any(|f| self.matches(f, t)),
            (Filter::RequireNot(f), _) => !self.matches(f, t),
            (Filter::Literal(_) | Filter::Subpath(_) | Filter::Regex(_), Target::Path(p)) => {
                self.path_matches(f, p)
            }
            (Filter::GlobalName(s), Target::Mach(m)) => self.value(s).is_ok_and(|v| v == m),
            (Filter::RemoteIp(spec), Target::Remote { host, port }) => {
                ip_matches(spec, host, *port)
            }
            (Filter::LocalIp(spec), Target::Local { host, port }) => ip_matches(spec, host, *port),
            (Filter::RemoteUnixSocket(inner), Target::RemoteUnix(p)) => self.path_matches(inner, p),
            (Filter::LocalUnixSocket(inner), Target::LocalUnix(p)) => self.path_matches(inner, p),
            (Filter::Target(k), Target::Process(w)) => k == w,
            _ => false,
        }
    }

    /// The decision for `op` (a concrete operation name such as `file-read-data`) on `t`.
    pub fn decide(&self, op: &str, t: &Target) -> Decision {
        let op = Operation::new(op);
        let default = Operation::new("default");
        let mut fallback: Option<usize> = None;
        let mut default_rule: Option<usize> = None;
        let mut filtered: Option<usize> = None;
        for (i, r) in self.rules.iter().enumerate() {
            if r.operations.contains(&default) {
                default_rule = Some(i);
            }
            if !r.operations.iter().any(|o| *o != default && o.covers(&op)) {
                continue;
            }
            if !r.is_filtered() {
                fallback = Some(i);
            } else if r.filters.iter().any(|f| self.matches(f, t)) {
                filtered = Some(i);
            }
        }
        match filtered.or(fallback).or(default_rule) {
            Some(i) => Decision {
                allow: self.rules[i].action == Action::Allow,
                rule: Some(i),
            },
            None => Decision {
                allow: false,
                rule: None,
            },
        }
    }

    /// The rule at `index` (as in [`Decision::rule`]).
    pub fn rule(&self, index: usize) -> Option<&Rule> {
        self.rules.get(index).copied()
    }
}

//! The resource limits of an exec: the operator's defaults, the spec's `sandbox.limits`
//! (which only lower them) and capsule's own defaults for what neither gives, and the
//! messages that say when one of capsule's defaults is held or reached.

use crate::exec::{fail, ExecOptions};
use crate::exit::CliError;
use crate::linux::Isolation;
use crate::settings::Settings;
use capsule_bundle::policy::limits::LimitValues;
use std::time::Duration;

/// The limits of an exec for the flags it does not give: the operator's defaults
/// ([`Settings::limits`]) and the spec's `sandbox.limits` (`spec`), the lower of the two
/// where both give one: a spec may lower a limit (or set one the operator left open),
/// never raise one; the operator's flags decide over both.
pub(super) fn limits_now(
    settings: &Settings,
    spec: &LimitValues,
) -> Result<(crate::limits::Limits, Option<Duration>), CliError> {
    use crate::limits::{parse_count, parse_cpus, parse_duration, parse_size};
    fn pick<T: PartialOrd>(
        settings: &LimitValues,
        spec: &LimitValues,
        name: &str,
        parse: fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, CliError> {
        let mine = settings
            .read(name, parse)
            .map_err(|e| fail(format!("settings {e}")))?;
        let theirs = spec
            .read(name, parse)
            .map_err(|e| fail(format!("the spec's sandbox.{e}")))?;
        Ok(match (mine, theirs) {
            (Some(m), Some(t)) => Some(if t < m { t } else { m }),
            (m, None) => m,
            (None, t) => t,
        })
    }
    let d = &settings.limits;
    let l = crate::limits::Limits {
        memory: pick(d, spec, "memory", parse_size)?,
        pids: pick(d, spec, "pids", parse_count)?,
        cpus_milli: pick(d, spec, "cpus", parse_cpus)?,
        tmp_size: pick(d, spec, "tmp_size", parse_size)?,
        fds: pick(d, spec, "fds", parse_count)?,
        file_size: pick(d, spec, "file_size", parse_size)?,
        nproc: None,
        disk_budget: None,
    };
    let activity = pick(d, spec, "activity_timeout", parse_duration)?;
    Ok((l, activity))
}

/// capsule's own defaults ([`crate::limits::machine_defaults`]) for memory and processes
/// where `asked` (flags, settings, spec) gives none; a spec's value above one is lowered
/// to it (a spec only lowers: capsule's default stands for the operator's), unless the
/// operator's settings give one. Returns the defaults that now apply.
pub(super) fn own_defaults(
    asked: &mut crate::limits::Limits,
    settings: &Settings,
) -> crate::limits::Limits {
    let own = crate::limits::machine_defaults();
    let mut applied = crate::limits::Limits::default();
    let operator = |k: &str| {
        settings
            .limits
            .read(k, |_| Ok::<(), String>(()))
            .ok()
            .flatten()
            .is_some()
    };
    for (mine, theirs, out, key) in [
        (&mut asked.memory, own.memory, &mut applied.memory, "memory"),
        (&mut asked.pids, own.pids, &mut applied.pids, "pids"),
    ] {
        match (*mine, theirs) {
            (None, Some(d)) => {
                *mine = Some(d);
                *out = Some(d);
            }
            (Some(v), Some(d)) if v > d && !operator(key) => {
                *mine = Some(d);
                *out = Some(d);
            }
            _ => {}
        }
    }
    applied
}

/// [`limits_now`] for the flags `a` does not give, and capsule's own defaults
/// ([`own_defaults`]) where none is given; returns those defaults.
pub(super) fn with_default_limits(
    a: &mut ExecOptions,
    settings: &Settings,
    spec: &LimitValues,
) -> Result<crate::limits::Limits, CliError> {
    let (mut d, activity) = limits_now(settings, spec)?;
    // the spec's and the operator's, with capsule's own for what no flag gives
    let flagged = a.limits;
    let mut own = own_defaults(&mut d, settings);
    if flagged.memory.is_some() {
        own.memory = None;
    }
    if flagged.pids.is_some() {
        own.pids = None;
    }
    let l = &mut a.limits;
    l.memory = l.memory.or(d.memory);
    l.pids = l.pids.or(d.pids);
    l.cpus_milli = l.cpus_milli.or(d.cpus_milli);
    l.tmp_size = l.tmp_size.or(d.tmp_size);
    l.fds = l.fds.or(d.fds);
    l.file_size = l.file_size.or(d.file_size);
    a.activity_timeout = a.activity_timeout.or(activity);
    Ok(own)
}

/// The degradation of capsule's own defaults `own` that no cgroup holds here (`why`):
/// which, and what holds processes instead.
pub(super) fn defaults_unheld(own: &crate::limits::Limits, why: &str) -> String {
    let mut what = Vec::new();
    if let Some(m) = own.memory {
        what.push(format!("memory {}", crate::limits::show_size(m)));
    }
    if let Some(p) = own.pids {
        what.push(format!("processes {p}"));
    }
    let instead = match own.pids {
        Some(p) => format!(" (processes are held by RLIMIT_NPROC {p} instead)"),
        None => String::new(),
    };
    format!(
        "capsule's default limits of {} need a cgroup: {why}{instead}",
        what.join(" and ")
    )
}

/// A limit's message `m` ([`crate::kernel::cgroup::ExecCgroups::reached`]), saying so when the
/// limit reached was capsule's own default (`own`) and how to give another.
pub(super) fn said_as_default(
    m: String,
    own: &crate::limits::Limits,
    limits: &crate::limits::Limits,
) -> String {
    let default = |l: Option<u64>, o: Option<u64>| o.is_some() && l == o;
    let flag = if m.starts_with("killed: memory limit") && default(limits.memory, own.memory) {
        "--memory"
    } else if m.starts_with("pids limit") && default(limits.pids, own.pids) {
        "--pids"
    } else {
        return m;
    };
    format!("{m} (capsule's default here; {flag} or settings.json's \"limits\" give another)")
}

/// `--tmp-size` needs the exec's own mount namespace: without one (weaker isolation,
/// accepted) the capsule's tmp stays the bundle's folder, unbounded; said on stderr and
/// in the record.
pub(super) fn tmp_size_degraded(
    a: &ExecOptions,
    isolation: Isolation,
    degradation: &mut Vec<String>,
) {
    if a.limits.tmp_size.is_some() && isolation != Isolation::Full {
        let m = "--tmp-size cannot be enforced without a mount namespace; not enforced";
        eprintln!("capsule: warning: {m} (weaker isolation accepted)");
        degradation.push(m.to_string());
    }
}

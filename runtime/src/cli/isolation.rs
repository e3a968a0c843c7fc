//! `capsule isolation [--json] [--accept-weaker on|off]`: what isolation this machine gives
//! and what is missing, in plain words; and the persisted, knowing acceptance of weaker
//! isolation (tool settings, `$CAPSULE_ROOT/settings.json`).

use crate::cli::print_json;
use crate::exit::{CliError, CliResult};
use crate::isolation::{self, IsolationLevel, IsolationReport};
use crate::settings::Settings;
use capsule_bundle::layout::{capsule_root, Layout};
use clap::{Args, ValueEnum};
use std::process::ExitCode;

/// Show what isolation this machine gives (user namespaces, Landlock, seccomp), what is
/// missing, and accept weaker isolation knowingly.
///
/// When full isolation is not available (for example unprivileged user namespaces are
/// refused, as on Ubuntu 24.04), `capsule exec` runs nothing unless weaker isolation was
/// accepted with `--accept-weaker on`: Landlock and seccomp without namespaces. Every exec
/// under weaker isolation says so on stderr and in its record.
#[derive(Debug, Args)]
pub struct IsolationArgs {
    /// Print one JSON object for programs instead of plain words.
    #[arg(long)]
    pub json: bool,
    /// Accept weaker isolation when full isolation is not available (persisted), or take
    /// that acceptance back.
    #[arg(long, value_name = "on|off")]
    pub accept_weaker: Option<OnOff>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

pub fn isolation(args: IsolationArgs) -> CliResult {
    let root = capsule_root().ok_or_else(|| {
        CliError::failure("cannot find the capsule root: set CAPSULE_ROOT or HOME")
    })?;
    let path = Layout::new(root).settings_file();
    let mut settings = Settings::load(&path).map_err(|e| CliError::failure(e.to_string()))?;
    if let Some(v) = args.accept_weaker {
        settings.accept_weaker = v == OnOff::On;
        settings
            .save(&path)
            .map_err(|e| CliError::failure(format!("saving settings: {e}")))?;
    }
    let report = isolation::probe();
    #[cfg(target_os = "linux")]
    let notify = crate::kernel::seccomp::continue_supported();
    #[cfg(target_os = "linux")]
    let watched = crate::linux::fusemask::usable();
    #[cfg(not(target_os = "linux"))]
    let notify = false;
    #[cfg(not(target_os = "linux"))]
    let watched = false;
    let decision = isolation::decide(&report, &settings);
    #[cfg(target_os = "linux")]
    let limits = crate::kernel::cgroup::probe();
    #[cfg(not(target_os = "linux"))]
    let limits: Vec<(&str, Result<String, String>)> = Vec::new();
    if args.json {
        let (level, error) = match &decision {
            Ok(l) => (serde_json::to_value(l).unwrap_or_default(), None),
            Err(e) => (serde_json::Value::Null, Some(e.message.clone())),
        };
        print_json(&serde_json::json!({
            "report": report,
            "full": report.full(),
            "accept_weaker": settings.accept_weaker,
            "settings_file": path,
            "exec_level": level,
            "exec_refused": error,
            "limits": limits_json(&limits),
            "capsule_default_limits": default_limits_json(&limits, &settings),
            "refusals": {
                "full": crate::refusals::listing::kinds(true, notify, false, watched),
                "weaker": crate::refusals::listing::kinds(false, notify, false, watched),
                "full_with_list_reads": crate::refusals::listing::kinds(true, notify, true, watched),
            },
        }));
    } else {
        print!(
            "{}",
            human(&report, &settings, &decision, args.accept_weaker)
        );
        print!("{}", limits_human(&limits));
        print!("{}", default_limits_human(&limits, &settings));
        print!(
            "{}",
            crate::refusals::listing::human(report.full(), notify, watched)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Where each resource limit of `capsule exec` is enforced on this machine.
fn limits_json(cg: &[(&str, Result<String, String>)]) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for (flag, r) in cg {
        m.insert(
            flag.trim_start_matches("--").to_string(),
            match r {
                Ok(w) => serde_json::json!({"enforced": true, "by": w}),
                Err(e) => serde_json::json!({"enforced": false, "why": e}),
            },
        );
    }
    for (flag, by) in [
        ("fds", "rlimit RLIMIT_NOFILE"),
        ("file_size", "rlimit RLIMIT_FSIZE"),
        ("activity_timeout", "capsule's supervisor"),
        (
            "tmp_size",
            "a tmpfs of the exec's own at /tmp and /var/tmp (mount namespace)",
        ),
    ] {
        if cfg!(target_os = "linux") {
            m.insert(flag.into(), serde_json::json!({"enforced": true, "by": by}));
        }
    }
    serde_json::Value::Object(m)
}

/// capsule's own default limits here, and whether each is enforced (where the cgroup it
/// needs can be made; processes fall back to `RLIMIT_NPROC`); the disk guard's reserve.
fn default_limits_json(cg: &[(&str, Result<String, String>)], s: &Settings) -> serde_json::Value {
    #[cfg(target_os = "linux")]
    {
        let d = crate::limits::machine_defaults();
        let why = |flag: &str| {
            cg.iter()
                .find(|(f, _)| *f == flag)
                .and_then(|(_, r)| r.as_ref().err().cloned())
        };
        serde_json::json!({
            "memory": {"value": d.memory, "enforced": why("--memory").is_none(), "why_not": why("--memory")},
            "pids": {
                "value": d.pids,
                "enforced": true,
                "by": if why("--pids").is_none() { "cgroup" } else { "rlimit RLIMIT_NPROC (no cgroup here)" },
                "why_no_cgroup": why("--pids"),
            },
            "disk_reserve": s.disk_reserve.clone().unwrap_or_else(|| "5%,2G".into()),
            "disk_guard": disk_guard_json(),
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (cg, s);
        serde_json::Value::Null
    }
}

/// What the disk guard bounds before it happens on this machine, and what it only stops.
#[cfg(target_os = "linux")]
fn disk_guard_json() -> serde_json::Value {
    let checked = crate::kernel::seccomp::continue_supported();
    serde_json::json!({
        "single_calls": if checked {
            "no file may grow past the free space above the reserve when the exec starts (RLIMIT_FSIZE: write, truncate, copy_file_range, sendfile, mapped pages); fallocate and copy_file_range are checked before they run and refused (ENOSPC) past the headroom"
        } else {
            "no file may grow past the free space above the reserve when the exec starts (RLIMIT_FSIZE); fallocate with FALLOC_FL_KEEP_SIZE and what several fallocate or copy_file_range calls add up to are NOT checked on this kernel (no seccomp user notification that can continue a call, Linux 5.5): only the poll stops them"
        },
        "fallocate_checked": checked,
        "polled": "what many calls add up to (writes to several files, mapped pages of several files, new files until the inodes run out) is stopped by the poll, 50 ms of writing ahead of the reserve, not refused",
    })
}

fn default_limits_human(cg: &[(&str, Result<String, String>)], s: &Settings) -> String {
    #[cfg(target_os = "linux")]
    {
        let d = crate::limits::machine_defaults();
        let ok = |flag: &str| cg.iter().any(|(f, r)| *f == flag && r.is_ok());
        let mut o = String::from(
            "capsule's own defaults (where no flag, setting or spec gives one; a default is not a request: one that cannot be enforced here is recorded in the exec's degradation, never refused):
",
        );
        if let Some(m) = d.memory {
            o += &format!(
                "  memory {}: {}
",
                crate::limits::show_size(m),
                if ok("--memory") {
                    "enforced (a cgroup)"
                } else {
                    "NOT enforced here (no cgroup can be made)"
                }
            );
        }
        if let Some(n) = d.pids {
            o += &format!(
                "  processes {n}: {}
",
                if ok("--pids") {
                    "enforced (a cgroup)"
                } else {
                    "enforced by RLIMIT_NPROC in the sandbox's user namespace (no cgroup can be made)"
                }
            );
        }
        o += &format!(
            "  disk reserve {}: the disk guard stops the whole tree before a filesystem the task can write (or one mounted below it) falls below it, in bytes or inodes (settings.json \"disk_reserve\")\n",
            s.disk_reserve.as_deref().unwrap_or("the smaller of 5% and 2 GiB")
        );
        let g = disk_guard_json();
        o += &format!(
            "    single calls: {}\n",
            g["single_calls"].as_str().unwrap_or("")
        );
        o += &format!(
            "    not refused, stopped: {}\n",
            g["polled"].as_str().unwrap_or("")
        );
        o
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (cg, s);
        String::new()
    }
}

fn limits_human(cg: &[(&str, Result<String, String>)]) -> String {
    if !cfg!(target_os = "linux") {
        return String::new();
    }
    let mut o = String::from(
        "\nResource limits of capsule exec:\n  --fds, --file-size: rlimits (always)\n  --activity-timeout: capsule's supervisor (always)\n  --tmp-size: a tmpfs of the exec's own at /tmp and /var/tmp (with namespaces)\n",
    );
    for (flag, r) in cg {
        match r {
            Ok(w) => o += &format!("  {flag}: {w}\n"),
            Err(e) => o += &format!(
                "  {flag}: NOT enforceable here ({e}): an exec asking for it runs nothing unless weaker isolation is accepted\n"
            ),
        }
    }
    o
}

fn human(
    r: &IsolationReport,
    s: &Settings,
    decision: &Result<IsolationLevel, isolation::MissingIsolation>,
    changed: Option<OnOff>,
) -> String {
    let mut o = String::new();
    let yes_no = |b: bool| if b { "yes" } else { "NO" };
    if let Some(v) = changed {
        o += &format!(
            "Weaker isolation is now {}.\n\n",
            if v == OnOff::On {
                "accepted (capsule exec runs with what this machine gives, and says so)"
            } else {
                "not accepted (capsule exec refuses to run without full isolation)"
            }
        );
    }
    let ns = &r.user_namespaces;
    o += &format!("User namespaces:  {}", yes_no(ns.available));
    if let Some(e) = &ns.error {
        o += &format!(" ({e})");
    }
    if let Some(m) = ns.max_user_namespaces {
        o += &format!("; max_user_namespaces = {m}");
    }
    o += "\n";
    for x in &ns.restrictions {
        o += &format!("                  {x}\n");
    }
    if r.landlock.abi == 0 {
        o += "Landlock:         NO\n";
    } else {
        o += &format!("Landlock:         yes, ABI {}\n", r.landlock.abi);
    }
    for l in &r.landlock.lacking {
        o += &format!("                  lacking {l}\n");
    }
    o += "Host sockets:     masked by path where the sandbox would show them (the kernel's list of the host network namespace's, read per exec; with namespaces)\n";
    o += &format!(
        "                  Landlock's rule for them (ABI 9): {}\n",
        if r.landlock.abi >= 9 {
            "on this kernel, not used yet"
        } else {
            "not on this kernel"
        }
    );
    o += &format!("Seccomp:          {}", yes_no(r.seccomp.available));
    if let Some(e) = &r.seccomp.error {
        o += &format!(" ({e})");
    }
    o += "\n\n";
    if r.full() {
        o += "Full isolation is available: commands run in their own user, mount, pid, network, ipc and uts namespaces, with Landlock and seccomp.\n";
    } else {
        o += "Missing for full isolation:\n";
        for m in &r.missing {
            o += &format!("  - {m}\n");
        }
    }
    o += &format!(
        "\nWeaker isolation accepted: {}\n",
        if s.accept_weaker { "yes" } else { "no" }
    );
    match decision {
        Ok(IsolationLevel::Full) => {}
        Ok(IsolationLevel::Weaker(d)) => {
            o += &format!(
                "capsule exec runs with weaker isolation: {}, Landlock ABI {}, seccomp. Every exec says so on stderr and in its record. Turn it off with `capsule isolation --accept-weaker off`.\n",
                if d.namespaces { "namespaces" } else { "no namespaces" },
                d.landlock_abi
            );
        }
        Err(e) if e.weaker_possible => {
            o += "capsule exec refuses to run commands until full isolation is available, or until you accept weaker isolation knowingly with `capsule isolation --accept-weaker on` (Landlock and seccomp without namespaces: the command then shares the host's processes and network view, kept in check only by Landlock's rules).\n";
        }
        Err(_) => {
            o += "capsule exec cannot run commands on this machine: even weaker isolation needs seccomp and either user namespaces or Landlock.\n";
        }
    }
    o
}

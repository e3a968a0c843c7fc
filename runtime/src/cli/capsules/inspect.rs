//! `capsule inspect`: what a capsule's policy gives and hides, in words
//! ([`policy_in_words`]) or JSON, and what this machine enforces of it right now.

use super::*;

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The capsule's name, workspace path or bundle directory.
    #[arg(value_name = "WORKSPACE|NAME|BUNDLE")]
    pub target: String,
    #[arg(long)]
    pub json: bool,
}

fn reason_words(r: HiddenReason) -> &'static str {
    match r {
        HiddenReason::Credentials => "credentials",
        HiddenReason::NotListed => "not among what development tools need in the home",
        HiddenReason::PersonalFiles => "personal files",
        HiddenReason::SiblingProject => "a project next to the source",
        HiddenReason::ToolState => "capsule's own state and other capsules",
        HiddenReason::AgentLogins => "agent logins and transcripts",
        HiddenReason::Requested => "hidden by the spec",
    }
}

fn network_words(p: &SandboxPolicy) -> String {
    match p.network.mode {
        NetworkMode::None => "none: an own network namespace with loopback only".into(),
        NetworkMode::Off => "off: no network at all, not even loopback TCP".into(),
        NetworkMode::Allowlist => format!(
            "allowlist: only through capsule's proxy to {}",
            p.network.allow.join(", ")
        ),
        NetworkMode::Open => "open: the host's network, unrestricted".into(),
        NetworkMode::Replay => {
            "replay: needs a supervised replay network from the deployment".into()
        }
    }
}

/// The effective policy in plain words, one line each.
pub fn policy_in_words(p: &SandboxPolicy) -> Vec<String> {
    let mut v = Vec::new();
    v.push(format!("writable: the workspace {}", p.workspace.display()));
    v.push(format!(
        "writable: its /tmp (kept in {})",
        p.tmp_dir.display()
    ));
    for w in &p.writable {
        v.push(format!("writable: {} (asked for by the spec)", w.display()));
    }
    for r in &p.read_only {
        v.push(format!("read-only inside the workspace: {}", r.display()));
    }
    v.push("read-only: everything else on the system".into());
    if let Some(home) = &p.home {
        v.push(format!(
            "home {}: only what development tools need is there (toolchains, git's and shells' configuration, tool settings, PATH folders); the rest of it does not exist inside (full isolation)",
            home.display()
        ));
    }
    for h in &p.hidden {
        v.push(format!(
            "hidden: {} ({})",
            h.path.display(),
            reason_words(h.reason)
        ));
    }
    for r in &p.revealed {
        let why = if p.access(r) == Access::ReadOnly {
            "readable again inside a hidden folder"
        } else {
            "revealed"
        };
        v.push(format!("revealed: {} ({why})", r.display()));
    }
    if !p.pass_env.is_empty() {
        v.push(format!(
            "environment passed besides the defaults: {}",
            p.pass_env.join(", ")
        ));
    }
    if !p.devices.is_empty() {
        v.push(format!("devices: {}", p.devices.join(", ")));
    }
    v.push(format!("network: {}", network_words(p)));
    for (name, hosts) in &p.network.secrets {
        v.push(format!(
            "secret: {name} is a placeholder inside; its value (from the exec's environment) goes to {} only",
            hosts.join(", ")
        ));
    }
    for port in &p.network.publish {
        v.push(format!(
            "published while an exec runs: {port} (HOST_PORT:PORT) on this computer's 127.0.0.1 and [::1] only"
        ));
    }
    v
}

pub fn inspect(a: InspectArgs) -> CliResult {
    let layout = layout()?;
    let cap = store::resolve(&layout, &a.target).map_err(fail)?;
    let spec_text = cap
        .record
        .spec_path
        .as_ref()
        .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| format!("(cannot read: {e})")));
    let manifest = Manifest::read(&cap.workspace.join(MANIFEST));
    let config_path = cap.bundle_file(bundle_files::CONFIG);
    let config_check = capsule_bundle::policy::oci::load_and_validate(&config_path);
    let config_json: serde_json::Value = std::fs::read_to_string(&config_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    // in words: the policy an exec with no flags resolves now (the plan's), not only the
    // stored one
    let words = policy_in_words(&crate::exec::with_current_hidden(&cap, &layout));
    let now = enforced_now(&cap, &layout);
    if a.json {
        print_json(&json!({
            "capsule": capsule_json(&cap),
            "spec_path": cap.record.spec_path,
            "spec": spec_text,
            "manifest": manifest.as_ref().ok(),
            "manifest_error": manifest.as_ref().err(),
            "policy": cap.policy,
            "policy_in_words": words,
            "spec_limits": cap.record.limits,
            "config": config_json,
            "config_valid": config_check.is_ok(),
            "config_error": config_check.as_ref().err().map(|e| e.to_string()),
            "config_is": "the open-time rendering of the policy; `plan` and `config_now` are what an exec enforces now",
            "plan": now.as_ref().ok().map(|n| &n.plan),
            "config_now": now.as_ref().ok().map(|n| &n.config),
            "oci_not_enforced": now.as_ref().ok().map(|_| crate::linux::oci::NOT_ENFORCED),
            "plan_error": now.as_ref().err(),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    println!("capsule {}", esc_name(&cap.name));
    println!("  workspace  {}", esc_path(&cap.workspace));
    println!("  bundle     {}", esc_path(&cap.bundle_dir));
    println!("  opened     {}", esc_name(&cap.record.opened_at));
    println!(
        "  HEAD       {} ({})",
        esc_name(&short(&cap.record.head)),
        esc_name(cap.record.branch.as_deref().unwrap_or("detached"))
    );
    if let Some(s) = &cap.record.source {
        println!("  source     {} (checkout, left untouched)", esc_path(s));
    }
    println!("\ngrants (access beyond the defaults, accepted at open):");
    for w in grants_in_words(&cap) {
        println!("  {w}");
    }
    println!("\nlimits of an exec without flags (the spec's may only lower your defaults; memory and processes are capsule's own where nothing else gives one):");
    match &now {
        Ok(n) => println!("  {}", esc_line(&limits_in_words(&n.plan))),
        Err(e) => println!("  unknown: {}", esc_line(e)),
    }
    println!(
        "\neffective policy (from {}, with the hidden paths of now):",
        esc_path(&cap.bundle_file(bundle_files::POLICY))
    );
    // paths and lines below come from the spec: escaped, never raw on the terminal
    for w in &words {
        println!("  {}", esc_line(w));
    }
    println!("\nspec:");
    match (&cap.record.spec_path, &spec_text) {
        (Some(p), Some(t)) => {
            println!("  {}", esc_path(p));
            for l in t.strip_suffix('\n').unwrap_or(t).split('\n') {
                println!("  | {}", esc_line(l));
            }
        }
        _ => println!("  (none: opened from a checkout)"),
    }
    println!(
        "\nmanifest ({}; informational, the runtime never trusts it):",
        esc_path(&cap.workspace.join(MANIFEST))
    );
    match &manifest {
        Ok(m) => {
            let t = serde_json::to_string_pretty(m).unwrap_or_default();
            for l in t.lines() {
                println!("  | {}", esc_line(l));
            }
        }
        Err(e) => println!("  (unreadable: {})", esc_line(e)),
    }
    match &now {
        Ok(n) => {
            println!("\nenforced now (the plan of an exec, rendered as OCI config.json; `capsule export` writes it):");
            println!(
                "  plan digest {} (an exec with no flags records it as applied.plan_digest)",
                esc_name(n.plan["digest"].as_str().unwrap_or("?"))
            );
            println!("  a plain OCI runtime (runc, crun) running it does NOT enforce:");
            for w in crate::linux::oci::NOT_ENFORCED {
                println!("    {w}");
            }
            let t = serde_json::to_string_pretty(&n.config).unwrap_or_default();
            for l in t.lines() {
                println!("  | {}", esc_line(l));
            }
        }
        Err(e) => println!("\nenforced now: cannot resolve the plan: {}", esc_line(e)),
    }
    println!(
        "\nconfig.json ({}; rendered from the policy at open, not what runs):",
        esc_path(&config_path)
    );
    match &config_check {
        Ok(_) => println!("  valid OCI runtime spec"),
        Err(e) => println!("  INVALID: {}", esc_line(&e.to_string())),
    }
    let t = serde_json::to_string_pretty(&config_json).unwrap_or_default();
    for l in t.lines() {
        println!("  | {}", esc_line(l));
    }
    Ok(ExitCode::SUCCESS)
}

/// What an exec of the capsule enforces now: its plan, in JSON, and the plan rendered as
/// OCI `config.json`.
struct EnforcedNow {
    plan: serde_json::Value,
    config: serde_json::Value,
}

#[cfg(target_os = "linux")]
fn enforced_now(cap: &OpenCapsule, layout: &Layout) -> Result<EnforcedNow, String> {
    use crate::kernel::seccomp;
    use crate::linux::oci;
    let shell = std::env::var_os("SHELL").unwrap_or_else(|| "/bin/sh".into());
    let mut plan = crate::exec::plan_preview(cap, layout, vec![shell]).map_err(|e| e.message)?;
    // values passed through by name (tokens, keys) stay out of what inspect prints
    for (k, v) in plan.env.iter_mut() {
        let shown = k.to_str().is_some_and(|k| {
            matches!(
                k,
                "PATH" | "TMPDIR" | "HOME" | "USER" | "LOGNAME" | "LANG" | "TERM" | "SHELL"
            ) || k.starts_with("LC_")
        });
        if !shown {
            *v = "(value from the environment of the exec)".into();
        }
    }
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let rendered =
        oci::render(&plan, uid, gid, Path::new("rootfs"), false, &[]).map_err(|e| e.to_string())?;
    let seccomp: Vec<_> = seccomp::rules()
        .into_iter()
        .map(|r| {
            json!({
                "name": r.name,
                "errno": r.errno,
                "conditional": !r.when.is_empty(),
            })
        })
        .collect();
    let plan_json = json!({
        // what the exec record's `applied.plan_digest` says of an exec with no flags
        "digest": plan.digest(),
        "isolation": plan.isolation,
        "mounts": plan.mounts,
        "cwd": plan.cwd,
        // names only: values may carry what --pass-env passes
        "env": plan.env.iter().map(|(k, _)| k.to_string_lossy()).collect::<Vec<_>>(),
        "namespaces": {
            "user": true, "mount": true, "pid": true, "ipc": true, "uts": true,
            "network": plan.new_netns,
        },
        "hostname": plan.hostname,
        "capabilities": [],
        "no_new_privs": true,
        "id_mapping": {"uid": uid, "gid": gid, "size": 1},
        "seccomp": seccomp,
        "network": plan.policy.network.mode.as_str(),
        "network_allow": plan.policy.network.allow,
        // an exec with no flags: the operator's defaults, lowered by the spec's
        "limits": plan.limits,
        "activity_timeout": plan.activity_timeout.map(|d| humantime::format_duration(d).to_string()),
        "network_secrets": plan.policy.network.secrets,
        "network_publish": plan.policy.network.publish,
        "landlock": {
            "workspace": plan.policy.workspace,
            "writable": plan.policy.writable,
            "read_only": plan.policy.read_only,
            "hidden": plan.policy.hidden.iter().map(|h| &h.path).collect::<Vec<_>>(),
            "revealed": plan.policy.revealed,
        },
        "policy_digest": plan.policy.digest(),
    });
    Ok(EnforcedNow {
        plan: plan_json,
        config: serde_json::to_value(&rendered.spec).map_err(|e| e.to_string())?,
    })
}

#[cfg(not(target_os = "linux"))]
fn enforced_now(_: &OpenCapsule, _: &Layout) -> Result<EnforcedNow, String> {
    Err("the exec plan is resolved on Linux only in this build".into())
}

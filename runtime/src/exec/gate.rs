//! The launch-policy gate in front of every exec (the gate itself lives in the
//! `capsule-policy` crate): where the operator's configuration is looked up for an exec,
//! the decision for the sandbox's working directory, its trace, and a denial as exit
//! status 3.

/// The launch-policy gate in front of `capsule exec` (every executor): load the operator's
/// configuration (see below), decide for `cwd` with verb `capsule.exec`, append
/// the decision to the trace sink if one is set (a trace that cannot be written is a
/// warning, not a reason to refuse), and turn a denial into exit status 3.
///
/// The configuration is looked up from the caller's directory, but never from inside the
/// workspace: its files are the sandboxed command's to write, and a planted `.kitsoki.yaml`
/// (with the sentinel deleted, under weaker isolation) must not replace the operator's
/// policy. A caller inside the workspace, or without a current directory, searches from
/// the workspace's parent.
pub fn exec_gate(
    caller: Option<&std::path::Path>,
    workspace: &std::path::Path,
    cwd: &std::path::Path,
) -> Result<capsule_policy::Decision, crate::exit::CliError> {
    let from = match caller {
        Some(c) if !c.starts_with(workspace) => c,
        _ => workspace.parent().unwrap_or(workspace),
    };
    let gate = capsule_policy::Gate::load(from, None)
        .map_err(|e| crate::exit::CliError::failure(format!("launch policy: {e}")))?;
    let trace = capsule_policy::trace_path(None);
    // without a trace nobody sees the facts of an allowed decision: an off gate skips them
    let decision = match &trace {
        Some(_) => gate.decide("capsule.exec", None, cwd),
        None => gate.decide_unrecorded("capsule.exec", None, cwd),
    };
    if let Some(trace) = trace {
        if let Err(e) = capsule_policy::append_trace(&trace, &decision) {
            tracing::warn!(
                "cannot append to the launch-policy trace {}: {e}",
                trace.display()
            );
        }
    }
    if !decision.allowed {
        return Err(crate::exit::CliError::new(
            crate::exit::DENIED,
            format!(
                "denied by the launch policy: {}; nothing ran",
                decision.reason
            ),
        ));
    }
    Ok(decision)
}

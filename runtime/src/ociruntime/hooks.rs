//! The bundle's hooks, as runc runs them: each `path` executed with its `args` (argv[0]
//! included) and `env`, the container's state JSON on its stdin, killed at its `timeout`;
//! a failing prestart, createRuntime, createContainer or startContainer hook fails the
//! operation, a failing poststart or poststop hook is logged. Host-side hooks run in the
//! runtime's namespaces; createContainer and startContainer run in the container's, after
//! its root is built (the hook's path is the container's).

use super::spec::Hook;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

pub fn run(list: &[Hook], kind: &str, state: &serde_json::Value) -> Result<(), String> {
    for (i, h) in list.iter().enumerate() {
        let name = format!("hooks.{kind}[{i}] ({})", h.path.display());
        let mut cmd = std::process::Command::new(&h.path);
        if let Some(a0) = h.args.first() {
            cmd.arg0(a0);
        }
        cmd.args(h.args.iter().skip(1)).env_clear();
        for e in &h.env {
            if let Some((k, v)) = e.split_once('=') {
                cmd.env(k, v);
            }
        }
        cmd.stdin(std::process::Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("{name}: {e}"))?;
        if let Some(mut i) = child.stdin.take() {
            let _ = i.write_all(state.to_string().as_bytes());
        }
        let deadline = h
            .timeout
            .filter(|t| *t > 0)
            .map(|t| Instant::now() + Duration::from_secs(t as u64));
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => {}
                Err(e) => return Err(format!("{name}: {e}")),
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{name}: timed out after {}s",
                    h.timeout.unwrap_or(0)
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if !status.success() {
            return Err(format!("{name}: {status}"));
        }
    }
    Ok(())
}

/// In the container (its root is `/`): the same, with the state on stdin.
pub fn run_inside(list: &[Hook], kind: &str) -> Result<(), String> {
    if list.is_empty() {
        return Ok(());
    }
    run(
        list,
        kind,
        &serde_json::json!({"ociVersion": "1.0.2", "status": "creating"}),
    )
}

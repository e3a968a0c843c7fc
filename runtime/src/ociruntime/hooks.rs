//! The bundle's hooks, as runc runs them: each `path` executed with its `args` (argv[0]
//! included) and `env`, the container's state JSON on its stdin, killed at its `timeout`;
//! a failing prestart, createRuntime, createContainer or startContainer hook fails the
//! operation, a failing poststart or poststop hook is logged. Host-side hooks run in the
//! runtime's namespaces; createContainer and startContainer run in the container's, after
//! its root is built (the hook's path is the container's).
//!
//! A hook's output is never passed through raw (it could be a terminal's, and a hook
//! inside the container is the image's program): its stdout and stderr are read (at most
//! 4 KiB of each is kept), and said escaped, on one line, in the error of a failing hook
//! or in a warning line on stderr (and in `--log`) of one that succeeds with output.

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
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("{name}: {e}"))?;
        if let Some(mut i) = child.stdin.take() {
            let _ = i.write_all(state.to_string().as_bytes());
        }
        let out = child.stdout.take().map(drain);
        let err = child.stderr.take().map(drain);
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
        let said = said(out, err);
        if !status.success() {
            return Err(format!("{name}: {status}{said}"));
        }
        if !said.is_empty() {
            eprintln!("capsule-runc: {name}{said}");
        }
    }
    Ok(())
}

/// Read a hook's output to its end in a thread (a hook that fills a pipe must not stall),
/// keeping at most [`KEEP`] bytes.
fn drain(mut r: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            let room = KEEP.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
        kept
    })
}

const KEEP: usize = 4096;

/// `, stdout: "…", stderr: "…"` (escaped: no control byte of the hook's reaches a
/// terminal), the empty ones left out.
fn said(
    out: Option<std::thread::JoinHandle<Vec<u8>>>,
    err: Option<std::thread::JoinHandle<Vec<u8>>>,
) -> String {
    let mut s = String::new();
    for (what, h) in [("stdout", out), ("stderr", err)] {
        let b = h.and_then(|h| h.join().ok()).unwrap_or_default();
        if !b.is_empty() {
            s.push_str(&format!(
                ", {what}: \"{}\"",
                capsule_bundle::escape::name(&b)
            ));
        }
    }
    s
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hooks_output_is_said_escaped() {
        let h = Hook {
            path: "/bin/sh".into(),
            args: vec![
                "sh".into(),
                "-c".into(),
                "printf 'clear\\033[2J'; printf 'oops\\n' >&2; exit 3".into(),
            ],
            env: vec![],
            timeout: Some(10),
        };
        let e = run(&[h], "prestart", &serde_json::json!({})).unwrap_err();
        assert!(
            e.starts_with("hooks.prestart[0] (/bin/sh): exit status: 3"),
            "{e}"
        );
        assert!(e.contains(r#"stdout: "clear\x1b[2J""#), "{e}");
        assert!(e.contains(r#"stderr: "oops\n""#), "{e}");
        assert!(!e.contains('\x1b') && !e.contains('\n'), "{e:?}");
    }
}

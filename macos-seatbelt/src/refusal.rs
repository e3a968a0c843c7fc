//! Reading Seatbelt refusals out of the system log. The executor runs
//! `log stream --style ndjson --predicate <refusal_predicate(nonce)>`; each line it gets is
//! handed to [`parse_log_line`], which keeps only this task's refusals (the profile's
//! `deny default` carries the nonce as its message).

use crate::profile::Nonce;
use serde::{Deserialize, Serialize};

/// One refused operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRefusal {
    /// `seatbelt`, to tell these lines from the proxy's in `refusals.jsonl`.
    pub reason: String,
    pub process: String,
    pub pid: u32,
    pub operation: String,
    pub target: String,
}

/// The `log` predicate for a nonce (safe to embed: a nonce is `[A-Za-z0-9_-]`).
pub fn refusal_predicate(nonce: &Nonce) -> String {
    format!("eventMessage CONTAINS \"{}\"", nonce.as_str())
}

/// Parse one line of `log stream --style ndjson` output. `None`: not a refusal of ours.
///
/// The kernel's message looks like
/// `Sandbox: cat(4242) deny(1) file-read-data /Users/u/.ssh/id_rsa`; the nonce is
/// expected somewhere in the line.
pub fn parse_log_line(line: &str, nonce: &Nonce) -> Option<SandboxRefusal> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let msg = v.get("eventMessage")?.as_str()?;
    if !line.contains(nonce.as_str()) {
        return None;
    }
    let start = msg.find("Sandbox: ")? + "Sandbox: ".len();
    let rest = &msg[start..];
    let (proc_pid, rest) = rest.split_once(' ')?;
    let open = proc_pid.rfind('(')?;
    let process = proc_pid[..open].to_string();
    let pid = proc_pid[open + 1..].strip_suffix(')')?.parse().ok()?;
    let rest = rest.strip_prefix("deny")?;
    let rest = rest.split_once(' ')?.1; // skip "(1)"
    let (operation, target) = match rest.split_once(' ') {
        Some((o, t)) => (o.to_string(), t.trim().to_string()),
        None => (rest.trim().to_string(), String::new()),
    };
    Some(SandboxRefusal {
        reason: "seatbelt".into(),
        process,
        pid,
        operation,
        target,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_kernel_refusal() {
        let n = Nonce::parse("capsule-0123456789abcdef").unwrap();
        let line = r#"{"eventMessage":"Sandbox: cat(4242) deny(1) file-read-data /Users/u/.ssh/id_rsa","processImagePath":"/usr/bin/cat","formatString":"capsule-0123456789abcdef"}"#;
        let r = parse_log_line(line, &n).unwrap();
        assert_eq!((r.process.as_str(), r.pid), ("cat", 4242));
        assert_eq!(r.operation, "file-read-data");
        assert_eq!(r.target, "/Users/u/.ssh/id_rsa");
        // another task's refusal, or not a refusal at all
        let other = line.replace("0123456789abcdef", "ffffffffffffffff");
        assert!(parse_log_line(&other, &n).is_none());
        assert!(
            parse_log_line(r#"{"eventMessage":"hello capsule-0123456789abcdef"}"#, &n).is_none()
        );
        assert!(parse_log_line("not json", &n).is_none());
        assert_eq!(
            refusal_predicate(&n),
            "eventMessage CONTAINS \"capsule-0123456789abcdef\""
        );
    }
}

//! The proxy's own refusal log (`capsule proxy --refusal-log`): one JSON line per request
//! it refused, in the shape of the capsule's `refusals.jsonl` ([`crate::refusals::log`])
//! plus the host and port apart:
//!
//! ```json
//! {"time":"2026-11-29T21:40:00.123Z","kind":"connect","target":"example.com:443","count":1,
//!  "grant":"--allow-host example.com:443","reason":"not on the allowlist","host":"example.com","port":443}
//! ```
//!
//! Under `capsule exec` the proxy reports to the exec's [`crate::refusals::Collector`]
//! instead, which writes the log when the exec ends.
//!
//! Each line is written with a single `write` on a file opened with `O_APPEND`, so lines
//! from concurrent execs of one capsule do not interleave.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// Who is behind a client connection the relay handed over, to be found only if it is
/// refused ([`super::owner`]): what the proxy knows of the sandbox, and the connection's
/// two addresses inside (known at no cost when the socket is taken); or, for a connection
/// the seccomp supervisor sent to the proxy ([`super::direct`]), the program it saw make it.
#[derive(Debug, Clone)]
pub struct Who(WhoIs);

#[derive(Debug, Clone)]
enum WhoIs {
    #[cfg(target_os = "linux")]
    Lookup {
        sandbox: std::sync::Arc<super::owner::Sandbox>,
        client: std::net::SocketAddr,
        server: std::net::SocketAddr,
    },
    Known {
        program: String,
        pid: Option<i32>,
    },
}

impl Who {
    /// The connection from `client` to `server` (addresses inside the sandbox).
    #[cfg(target_os = "linux")]
    pub fn new(
        sandbox: std::sync::Arc<super::owner::Sandbox>,
        client: std::net::SocketAddr,
        server: std::net::SocketAddr,
    ) -> Who {
        Who(WhoIs::Lookup {
            sandbox,
            client,
            server,
        })
    }

    /// A program known already (its `comm`, its pid in the sandbox).
    pub fn known(program: String, pid: Option<i32>) -> Who {
        Who(WhoIs::Known { program, pid })
    }

    /// The program behind `who` and its pid in the sandbox, for a refusal: looked up on a
    /// blocking thread, one lookup at a time in this process; ("", None) when unknown.
    pub async fn asker(who: Option<&Who>) -> (String, Option<i32>) {
        match who.map(|w| &w.0) {
            Some(WhoIs::Known { program, pid }) => return (program.clone(), *pid),
            #[cfg(target_os = "linux")]
            Some(WhoIs::Lookup {
                sandbox,
                client,
                server,
            }) => {
                static ONE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
                let _one = ONE.acquire().await;
                let (sandbox, client, server) = (sandbox.clone(), *client, *server);
                let found = tokio::task::spawn_blocking(move || sandbox.find(client, server)).await;
                if let Ok(Some(o)) = found {
                    return (o.program, o.pid);
                }
            }
            None => {}
        }
        (String::new(), None)
    }
}

/// An open refusal log.
#[derive(Debug)]
pub struct RefusalLog {
    path: PathBuf,
    file: Mutex<File>,
}

/// One refusal, as logged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Refusal {
    pub time: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub target: String,
    #[serde(default)]
    pub count: u64,
    #[serde(default)]
    pub grant: String,
    pub host: String,
    pub port: u16,
    pub reason: String,
    /// For a secret's placeholder sent to a host it is not for: the header (or `request
    /// target`) it was in. Never the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
}

impl RefusalLog {
    /// Open (creating, mode 0600) `path` for appending. A symlink at `path` is refused.
    pub fn open(path: &Path) -> std::io::Result<RefusalLog> {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        Ok(RefusalLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one refusal. Failures are reported through `tracing` and otherwise ignored:
    /// the request is refused either way.
    pub fn record(&self, host: &str, port: u16, reason: &str) {
        self.append(host, port, reason.to_string(), None)
    }

    /// Append a refused placeholder: the host, the header's name, the secret's name.
    pub fn record_leak(&self, host: &str, port: u16, leak: &super::secrets::Leak) {
        self.append(host, port, leak.to_string(), Some(leak.header.clone()))
    }

    fn append(&self, host: &str, port: u16, reason: String, header: Option<String>) {
        let target = target(host, port);
        let r = Refusal {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            kind: "connect".into(),
            grant: crate::refusals::connect_grant(&target),
            target,
            count: 1,
            host: host.to_string(),
            port,
            reason,
            header,
        };
        let mut line = match serde_json::to_vec(&r) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("cannot encode refusal: {e}");
                return;
            }
        };
        line.push(b'\n');
        let mut f = match self.file.lock() {
            Ok(f) => f,
            Err(p) => p.into_inner(),
        };
        // bounded as the capsule's log is: rotated past its cap, then written anew
        use crate::record::rotate;
        if let Err(e) = rotate::make_room(&self.path, line.len(), rotate::REFUSALS_MAX) {
            tracing::warn!("cannot rotate {}: {e}", self.path.display());
        }
        if !names(&self.path, &f) {
            match RefusalLog::open(&self.path) {
                Ok(l) => *f = l.file.into_inner().unwrap_or_else(|p| p.into_inner()),
                Err(e) => tracing::warn!("cannot reopen {}: {e}", self.path.display()),
            }
        }
        if let Err(e) = f.write_all(&line) {
            tracing::warn!("cannot append to {}: {e}", self.path.display());
        }
    }
}

/// Is `f` the file `path` names (not rotated away)?
fn names(path: &Path, f: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::symlink_metadata(path), f.metadata()) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

/// `host:port` as a refusal's target (hosts are given as the proxy prints them: an IPv6
/// address in brackets).
pub fn target(host: &str, port: u16) -> String {
    format!("{host}:{port}")
}

/// Read every refusal in `path` (lines that do not parse are skipped).
pub fn read(path: &Path) -> std::io::Result<Vec<Refusal>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// Report a refused placeholder to where this proxy reports refusals: the exec's list
/// (under `capsule exec`, naming the program behind `who`) and the proxy's own log
/// (`capsule proxy --refusal-log`).
pub async fn report_leak(
    log: Option<&RefusalLog>,
    refusals: Option<&std::sync::Arc<crate::refusals::Collector>>,
    host: &str,
    port: u16,
    leak: &super::secrets::Leak,
    who: Option<&Who>,
) {
    if let Some(log) = log {
        log.record_leak(host, port, leak);
    }
    if let Some(c) = refusals {
        let (program, pid) = Who::asker(who).await;
        c.add(crate::refusals::Event {
            kind: crate::refusals::Kind::Connect,
            target: target(host, port),
            program,
            pid,
            grant: None,
            reason: Some(leak.to_string()),
            header: Some(leak.header.clone()),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_json_lines() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("refusals.jsonl");
        let log = RefusalLog::open(&p).unwrap();
        log.record("example.com", 443, "not on the allowlist");
        drop(log);
        RefusalLog::open(&p)
            .unwrap()
            .record("[::1]", 80, "a loopback address");
        let got = read(&p).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].host, "example.com");
        assert_eq!(got[0].port, 443);
        assert_eq!(got[0].reason, "not on the allowlist");
        assert!(got[0].time.ends_with('Z'), "{}", got[0].time);
        assert_eq!(got[1].host, "[::1]");
    }

    #[test]
    fn refuses_symlink() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("refusals.jsonl");
        std::os::unix::fs::symlink(d.path().join("elsewhere"), &p).unwrap();
        assert!(RefusalLog::open(&p).is_err());
        assert!(!d.path().join("elsewhere").exists());
    }
}

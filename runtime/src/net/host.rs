//! The host side of allowlist mode inside the `capsule exec` supervisor: the proxy's end
//! of the [handoff channel](super::handoff) and a thread running a tokio runtime that
//! serves the client sockets the sandbox's relay passes over it.
//!
//! Two steps, so the supervisor can fork the sandbox while still single-threaded:
//! [`HostProxy::new`] makes the channel (no threads, no file: the relay's end is inherited
//! by the sandbox's init), [`HostProxy::start`] starts the serving thread. Clients handed
//! over in between wait in the channel. Dropping the [`RunningProxy`] stops it.
//!
//! [`bind_socket`] / [`connect_unix`]: a proxy on a unix socket by path (`capsule proxy
//! --unix`), for paths of any length.

use super::proxy::{Proxy, ProxyConfig};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::thread::JoinHandle;

/// A proxy that is set up but not serving yet, and the relay's end of its channel.
pub struct HostProxy {
    channel: OwnedFd,
    cfg: ProxyConfig,
}

/// The serving proxy; stops on [`RunningProxy::stop`] or drop.
pub struct RunningProxy {
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HostProxy {
    /// Make the channel. Returns the proxy and the relay's end (for the sandbox's init;
    /// close-on-exec, so the command never inherits it).
    pub fn new(cfg: ProxyConfig) -> io::Result<(HostProxy, OwnedFd)> {
        let (proxy_end, relay_end) = super::handoff::channel()?;
        Ok((
            HostProxy {
                channel: proxy_end,
                cfg,
            },
            relay_end,
        ))
    }

    /// Start serving on a thread of its own (a two-worker tokio runtime). Raises the
    /// process's soft descriptor limit to fit the proxy's clients
    /// ([`ensure_fd_budget`](super::proxy::ensure_fd_budget)): call it after the sandbox
    /// is cloned.
    pub fn start(self) -> io::Result<RunningProxy> {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let HostProxy { channel, cfg } = self;
        // after the sandbox's clone: only the supervisor's limit changes
        super::proxy::ensure_fd_budget(&cfg.limits);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("capsule-proxy")
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("capsule-proxy".into())
            .spawn(move || {
                let proxy = Proxy::new(cfg);
                rt.block_on(async move {
                    proxy
                        .serve_handoff(channel, async {
                            let _ = rx.await;
                        })
                        .await
                });
                rt.shutdown_background();
            })?;
        Ok(RunningProxy {
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }
}

impl RunningProxy {
    /// Stop serving (open tunnels are cut) and join the thread.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// Create a listening unix socket at `path`, mode 0600, non-blocking. An existing socket
/// file there (left by a crashed run) is replaced; any other existing file is an error.
pub fn bind_socket(path: &Path) -> io::Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = bind_unix(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// A path to reach `path` by for `bind`/`connect`, even when it is longer than `sun_path`
/// allows (108 bytes): on Linux the directory is then opened and reached through
/// `/proc/self/fd/N`, so the returned handle must stay open until the call is made.
pub(crate) fn short_unix_path(
    path: &Path,
) -> io::Result<(std::path::PathBuf, Option<std::fs::File>)> {
    #[cfg(target_os = "linux")]
    if path.as_os_str().len() >= 100 {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
            let d = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
                .open(dir)?;
            let short = Path::new("/proc/self/fd")
                .join(d.as_raw_fd().to_string())
                .join(name);
            return Ok((short, Some(d)));
        }
    }
    Ok((path.to_path_buf(), None))
}

/// Bind a unix socket at `path`, however long the path (see [`short_unix_path`]).
fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    let (p, _dir) = short_unix_path(path)?;
    UnixListener::bind(p)
}

/// Connect to a unix socket at `path`, however long the path (see [`short_unix_path`]).
pub fn connect_unix(path: &Path) -> io::Result<std::os::unix::net::UnixStream> {
    let (p, _dir) = short_unix_path(path)?;
    std::os::unix::net::UnixStream::connect(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_sockets_bind_and_connect_past_the_sun_path_limit() {
        let d = tempfile::Builder::new().tempdir_in("/dev/shm").unwrap();
        let deep = d.path().join("a".repeat(60)).join("b".repeat(60));
        std::fs::create_dir_all(&deep).unwrap();
        let sock = deep.join("proxy.sock");
        assert!(
            sock.as_os_str().len() > 108,
            "the path must exceed sun_path"
        );
        // the plain call cannot take it
        assert!(UnixListener::bind(&sock).is_err());
        let l = bind_unix(&sock).unwrap();
        assert!(sock.exists(), "bound at the long path itself");
        let _c = connect_unix(&sock).unwrap();
        let (_s, _) = l.accept().unwrap();
    }
}

//! The host side of allowlist mode inside the `capsule exec` supervisor: the proxy's unix
//! socket in the bundle directory, and a thread running a tokio runtime that serves it.
//!
//! Two steps, so the supervisor can fork the sandbox while still single-threaded:
//! [`HostProxy::bind`] creates the socket (no threads; the socket file exists and can be
//! bind-mounted), [`HostProxy::start`] starts the serving thread. Connections made in
//! between wait in the listen backlog. Dropping the [`RunningProxy`] stops it and removes
//! the socket file.

use super::proxy::{Proxy, ProxyConfig};
use std::io;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

/// A bound, not yet serving, proxy socket.
pub struct HostProxy {
    listener: UnixListener,
    path: PathBuf,
    cfg: ProxyConfig,
}

/// The serving proxy; stops (and unlinks its socket) on [`RunningProxy::stop`] or drop.
pub struct RunningProxy {
    path: PathBuf,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HostProxy {
    /// Create the unix socket at `path` (see [`bind_socket`]); nothing runs yet.
    pub fn bind(path: &Path, cfg: ProxyConfig) -> io::Result<HostProxy> {
        Ok(HostProxy {
            listener: bind_socket(path)?,
            path: path.to_path_buf(),
            cfg,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Start serving on a thread of its own (a two-worker tokio runtime).
    pub fn start(self) -> io::Result<RunningProxy> {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let HostProxy {
            listener,
            path,
            cfg,
        } = self;
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
                    match tokio::net::UnixListener::from_std(listener) {
                        Ok(l) => {
                            proxy
                                .serve_unix(l, async {
                                    let _ = rx.await;
                                })
                                .await
                        }
                        Err(e) => tracing::warn!("proxy: cannot serve its socket: {e}"),
                    }
                });
                rt.shutdown_background();
            })?;
        Ok(RunningProxy {
            path,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }
}

impl RunningProxy {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stop serving (open tunnels are cut), join the thread, remove the socket file.
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
        let _ = std::fs::remove_file(&self.path);
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

/// Bind a unix socket at `path`, even when the path is longer than `sun_path` allows
/// (108 bytes): on Linux the directory is then reached through `/proc/self/fd/N`.
fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    if path.as_os_str().len() < 100 {
        return UnixListener::bind(path);
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let (dir, name) = match (path.parent(), path.file_name()) {
            (Some(d), Some(n)) => (d, n),
            _ => return UnixListener::bind(path),
        };
        let d = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)?;
        let short = Path::new("/proc/self/fd")
            .join(d.as_raw_fd().to_string())
            .join(name);
        UnixListener::bind(short)
    }
    #[cfg(not(target_os = "linux"))]
    UnixListener::bind(path)
}

/// Connect to a unix socket at `path`, however long the path (see [`bind_unix`]).
pub fn connect_unix(path: &Path) -> io::Result<std::os::unix::net::UnixStream> {
    use std::os::unix::net::UnixStream;
    if path.as_os_str().len() < 100 {
        return UnixStream::connect(path);
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let (dir, name) = match (path.parent(), path.file_name()) {
            (Some(d), Some(n)) => (d, n),
            _ => return UnixStream::connect(path),
        };
        let d = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)?;
        let short = Path::new("/proc/self/fd")
            .join(d.as_raw_fd().to_string())
            .join(name);
        UnixStream::connect(short)
    }
    #[cfg(not(target_os = "linux"))]
    UnixStream::connect(path)
}

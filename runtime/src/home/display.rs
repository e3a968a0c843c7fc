//! Programs that need the screen: tasks run without a display (no X11 or Wayland socket,
//! `DISPLAY` unset — see [`super::sandbox`]). When a command fails after trying to reach
//! one, `capsule exec` says so once on stderr ("needs a display; tasks run without one")
//! and records it in the capsule's `events.jsonl`.
//!
//! To see what the command printed, [`Watch`] relays the command's stderr through a pipe:
//! while it runs, this process's fd 2 is the pipe's write end (the sandbox inherits it), and
//! a thread copies everything to the original stderr unchanged while scanning for the
//! messages toolkits print when no display is reachable. It is not used with `-t` (the
//! terminal carries stderr then) nor when stderr is a terminal (programs would lose their
//! colors), where detection is skipped.
//!
//! The relay thread is started by [`Watch::spawn_relay`], which `capsule exec` calls from
//! the executor's `before_release` hook, i.e. after `clone`: the executor's children
//! allocate between `clone` and `execve`, so no other thread may be alive at clone time.
//! Until then the pipe buffers what is written (nothing runs before the command is
//! released).

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The message printed once when a command failed for want of a display.
pub const NEEDS_DISPLAY: &str = "needs a display; tasks run without one";

/// Substrings (lower-cased) that programs print when no display can be reached.
const PATTERNS: &[&str] = &[
    "cannot open display",
    "can't open display",
    "unable to open display",
    "could not open display",
    "no display",
    "$display is not set",
    "display environment variable",
    "wayland_display",
    "failed to connect to wayland",
    "could not connect to any x display",
    "cannot connect to x server",
    "qt.qpa.xcb: could not connect to display",
    "gtk-warning **: cannot open display",
    "no protocol specified",
];

/// Does this stderr text say a display was needed?
pub fn mentions_display(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    PATTERNS.iter().any(|p| t.contains(p))
}

/// Relays fd 2 through a pipe while a command runs (see the module docs).
pub struct Watch {
    saved: Option<OwnedFd>,
    /// The pipe's read end and a copy of the original stderr, until the relay starts.
    pending: Option<(OwnedFd, OwnedFd)>,
    thread: Option<std::thread::JoinHandle<()>>,
    seen: Arc<AtomicBool>,
}

impl Watch {
    /// Redirect fd 2 into the relay's pipe unless `enabled` is false or stderr is a
    /// terminal; starts no thread (see [`Watch::spawn_relay`]). Failing to set up the relay
    /// is not an error: the command then runs without detection.
    pub fn start(enabled: bool) -> Self {
        let off = Watch {
            saved: None,
            pending: None,
            thread: None,
            seen: Arc::new(AtomicBool::new(false)),
        };
        // SAFETY: isatty on fd 2 has no memory effects.
        if !enabled || unsafe { libc::isatty(2) } == 1 {
            return off;
        }
        let mut fds = [0; 2];
        // SAFETY: fds is a valid two-int buffer.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return off;
        }
        // SAFETY: both descriptors are fresh and owned here.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: dup of fd 2 with CLOEXEC; checked below.
        let saved = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) };
        if saved < 0 {
            return off;
        }
        // SAFETY: fresh descriptor owned here.
        let saved = unsafe { OwnedFd::from_raw_fd(saved) };
        // SAFETY: dup2 onto fd 2 (not CLOEXEC: the sandbox inherits it).
        if unsafe { libc::dup2(w.as_raw_fd(), 2) } < 0 {
            return off;
        }
        drop(w);
        let out = match saved.try_clone() {
            Ok(o) => o,
            Err(_) => {
                // SAFETY: restore the original stderr.
                unsafe { libc::dup2(saved.as_raw_fd(), 2) };
                return off;
            }
        };
        Watch {
            saved: Some(saved),
            pending: Some((r, out)),
            thread: None,
            seen: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Start the relay thread (once; a no-op when relaying is off or already started).
    /// Call it only where a second thread is safe: after the executor's `clone`.
    pub fn spawn_relay(&mut self) {
        let Some((r, out)) = self.pending.take() else {
            return;
        };
        let seen2 = self.seen.clone();
        // The relay thread must never take a signal meant for the executor (it waits for
        // SIGCHLD on a signalfd with the signal blocked in its own thread only): start it
        // with every signal blocked; threads inherit the creator's mask.
        // SAFETY: sigfillset/pthread_sigmask on valid local sets.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        }
        let (r2, out2) = match (r.try_clone(), out.try_clone()) {
            (Ok(a), Ok(b)) => (a, b),
            // cannot happen in practice; relay inline at finish instead
            _ => {
                // SAFETY: restore this thread's mask.
                unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
                self.pending = Some((r, out));
                return;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("stderr-relay".into())
            .spawn(move || relay(r2, out2, &seen2));
        // SAFETY: restore this thread's mask.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        match spawned {
            Ok(t) => self.thread = Some(t),
            // relay inline at finish instead (the pipe holds 64 KiB meanwhile)
            Err(_) => self.pending = Some((r, out)),
        }
    }

    /// Restore stderr, wait for the relay to drain, and tell whether the command's stderr
    /// mentioned a missing display.
    pub fn finish(mut self) -> bool {
        self.stop();
        self.seen.load(Ordering::Relaxed)
    }

    fn stop(&mut self) {
        if let Some(saved) = self.saved.take() {
            // SAFETY: put the original stderr back; this closes our copy of the write end.
            unsafe { libc::dup2(saved.as_raw_fd(), 2) };
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // never started (the sandbox did not start, or no thread could be made): copy what
        // the pipe holds; every write end is closed now
        if let Some((r, out)) = self.pending.take() {
            relay(r, out, &self.seen);
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Copy `input` to `output` until end of file, noting display messages in `seen`.
fn relay(input: OwnedFd, output: OwnedFd, seen: &AtomicBool) {
    let mut input = std::fs::File::from(input);
    let mut output = std::fs::File::from(output);
    let mut buf = [0u8; 8192];
    // keep the tail of the previous chunk so a message split across reads is seen
    let mut tail = String::new();
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let _ = output.write_all(&buf[..n]);
        let chunk = String::from_utf8_lossy(&buf[..n]);
        let hay = format!("{tail}{chunk}");
        if mentions_display(&hay) {
            seen.store(true, Ordering::Relaxed);
        }
        let keep = hay.len().saturating_sub(64);
        tail = hay.get(keep..).unwrap_or("").to_string();
    }
}

/// Append the "needs a display" event to the capsule's events file.
pub fn record(
    events: &std::path::Path,
    capsule: &str,
    argv: &[String],
    exit_status: u8,
) -> std::io::Result<()> {
    let line = serde_json::json!({
        "event": "needs_display",
        "version": 1,
        "capsule": capsule,
        "argv": argv,
        "exit_status": exit_status,
        "message": NEEDS_DISPLAY,
    });
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(events)?;
    writeln!(f, "{line}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(mentions_display("Error: Can't open display: :0"));
        assert!(mentions_display("xdg-open: cannot open display"));
        assert!(mentions_display(
            "qt.qpa.xcb: could not connect to display \nAborted"
        ));
        assert!(mentions_display("error: WAYLAND_DISPLAY not set"));
        assert!(!mentions_display("error[E0308]: mismatched types"));
    }
}

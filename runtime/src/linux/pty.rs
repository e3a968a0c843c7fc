//! `exec -t`: a new pseudo-terminal of the command's own, relayed to the caller's
//! terminal (raw mode while it runs), with window size changes passed on.
//!
//! Init opens the pair on the sandbox's own devpts (so `ttyname` and `/dev/pts/N` work
//! inside) and sends the master to the caller over a socket (`SCM_RIGHTS`); the command
//! gets the slave as its controlling terminal (`setsid` + `TIOCSCTTY`).

use crate::kernel::sys;
use std::io;
use std::os::fd::RawFd;

/// The caller's side of `-t`: a socket on which init sends the master of a pair it opens
/// inside the sandbox (so the command's terminal lives in the sandbox's own devpts and
/// `ttyname` works), and the caller's saved terminal mode.
pub struct Pty {
    /// Our end of the console socket.
    pub sock: RawFd,
    /// The end init gets.
    pub child_sock: RawFd,
    /// The master, once received (-1 before).
    pub master: RawFd,
    saved: Option<libc::termios>,
}

impl Pty {
    /// Make the console socket and put the caller's terminal (if stdin is one) in raw
    /// mode until drop.
    pub fn open() -> io::Result<Pty> {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        use std::os::fd::IntoRawFd;
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        let fds = [a.into_raw_fd(), b.into_raw_fd()];
        let mut pty = Pty {
            sock: fds[0],
            child_sock: fds[1],
            master: -1,
            saved: None,
        };
        // SAFETY: termios calls on fd 0 with valid structs.
        unsafe {
            if libc::isatty(0) == 1 {
                let mut t: libc::termios = std::mem::zeroed();
                if libc::tcgetattr(0, &mut t) == 0 {
                    pty.saved = Some(t);
                    let mut raw = t;
                    libc::cfmakeraw(&mut raw);
                    libc::tcsetattr(0, libc::TCSANOW, &raw);
                }
            }
        }
        Ok(pty)
    }

    /// Receive the master from init (blocking until it arrives or init is gone).
    pub fn receive_master(&mut self) -> io::Result<RawFd> {
        use std::os::fd::IntoRawFd;
        let (_, fds) = crate::kernel::sys::recv_fds(self.sock, &mut [0u8; 1])?;
        let mut fds = fds.into_iter();
        let Some(fd) = fds.next() else {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the sandbox sent no terminal",
            ));
        };
        let fd = fd.into_raw_fd();
        self.master = fd;
        self.copy_winsize();
        Ok(fd)
    }

    fn copy_winsize(&self) {
        // SAFETY: winsize is a plain struct; ioctls on our descriptors.
        unsafe {
            let mut ws: libc::winsize = std::mem::zeroed();
            if libc::ioctl(0, libc::TIOCGWINSZ, &mut ws) == 0
                || libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) == 0
            {
                libc::ioctl(self.master, libc::TIOCSWINSZ, &ws);
            }
        }
    }

    /// The relay between the caller's stdin/stdout and the master.
    pub fn relay(&self) -> Relay {
        // SAFETY: fcntl on our own descriptor.
        unsafe {
            let fl = libc::fcntl(self.master, libc::F_GETFL);
            libc::fcntl(self.master, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        Relay {
            master: self.master,
            stdin_open: true,
            out_open: true,
        }
    }

    /// Make the command's terminal the caller's controlling terminal target: called in the
    /// command's process before `execve`.
    pub fn attach_slave(slave: RawFd) -> io::Result<()> {
        // SAFETY: session and descriptor calls on our own descriptors.
        unsafe {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::ioctl(slave, libc::TIOCSCTTY, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            for fd in 0..3 {
                if libc::dup2(slave, fd) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if slave > 2 {
                libc::close(slave);
            }
        }
        Ok(())
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        if let Some(t) = self.saved.take() {
            // SAFETY: restoring the caller's terminal mode.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, &t) };
        }
        sys::close(self.master);
        sys::close(self.sock);
        sys::close(self.child_sock);
    }
}

/// In the sandbox: open a pair on its own devpts's `ptmx` (`/dev/pts/ptmx`, opened
/// without following a link and checked to be one: [`crate::kernel::checked::open_ptmx`]);
/// returns (master, slave), the slave by `TIOCGPTPEER`.
pub fn open_here() -> io::Result<(RawFd, RawFd)> {
    use std::os::fd::IntoRawFd;
    let ptmx = crate::kernel::checked::open_ptmx(libc::AT_FDCWD, c"/dev/pts/ptmx", 0)?;
    let (m, s) = crate::kernel::checked::pty_pair(ptmx)?;
    Ok((m.into_raw_fd(), s.into_raw_fd()))
}

/// Send `fd` over the console socket.
pub fn send_fd(sock: RawFd, fd: RawFd) -> io::Result<()> {
    crate::kernel::sys::send_fds(sock, b"t", &[fd]).map(drop)
}

/// Copies bytes between the caller and the pseudo-terminal.
pub struct Relay {
    master: RawFd,
    stdin_open: bool,
    out_open: bool,
}

impl Relay {
    /// Descriptors to poll: stdin, then the master (`-1` once closed).
    pub fn pollfds(&self) -> [libc::pollfd; 2] {
        [
            libc::pollfd {
                fd: if self.stdin_open { 0 } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if self.out_open { self.master } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ]
    }

    /// Move what is ready.
    pub fn pump(&mut self, fds: &[libc::pollfd]) {
        let mut buf = [0u8; 16384];
        if self.stdin_open && fds.first().is_some_and(|f| f.revents != 0) {
            match sys::read(0, &mut buf) {
                Ok(0) | Err(_) => {
                    self.stdin_open = false;
                    // end of input: an end-of-file character for the terminal
                    let _ = sys::write_all(self.master, &[4]);
                }
                Ok(n) => {
                    let _ = sys::write_all(self.master, &buf[..n]);
                }
            }
        }
        if self.out_open && fds.get(1).is_some_and(|f| f.revents != 0) {
            self.copy_out(&mut buf);
        }
    }

    fn copy_out(&mut self, buf: &mut [u8]) -> bool {
        match sys::read(self.master, buf) {
            Ok(0) => {
                self.out_open = false;
                false
            }
            Ok(n) => {
                let _ = sys::write_all(1, &buf[..n]);
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            Err(_) => {
                // EIO: every slave is closed
                self.out_open = false;
                false
            }
        }
    }

    /// Copy whatever output is left after the command ended.
    pub fn drain(&mut self) {
        let mut buf = [0u8; 16384];
        while self.out_open && self.copy_out(&mut buf) {}
    }

    /// The caller's window changed: pass the size on.
    pub fn resize(&self) {
        // SAFETY: winsize is a plain struct; ioctls on our descriptors.
        unsafe {
            let mut ws: libc::winsize = std::mem::zeroed();
            if libc::ioctl(0, libc::TIOCGWINSZ, &mut ws) == 0
                || libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) == 0
            {
                libc::ioctl(self.master, libc::TIOCSWINSZ, &ws);
            }
        }
    }
}

//! Appending to a JSON-lines log (`events.jsonl`, `refusals.jsonl`) so that it stays
//! readable line by line: what is appended in one call is kept whole or not at all. A
//! full disk gives a short write; what was written of the lines is then cut off again
//! (unless another process appended after it, which is then left alone), instead of
//! leaving a torn line that the next record would be glued to.

use std::fs::File;
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;

/// Append `buf` (whole lines) to `f`, opened with `O_APPEND`: one write when it all fits,
/// as concurrent appenders need; on an error after a short write, the part written is
/// truncated away and the error returned.
pub fn append_whole(mut f: &File, buf: &[u8]) -> std::io::Result<()> {
    let first = loop {
        match f.write(buf) {
            Ok(n) => break n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    if first == buf.len() {
        return Ok(());
    }
    // O_APPEND: the offset is now the end of what this write put at the end of the file
    let start = f.stream_position()? - first as u64;
    let rest = match first {
        0 => Err(std::io::Error::from(std::io::ErrorKind::WriteZero)),
        _ => f.write_all(&buf[first..]),
    };
    let Err(e) = rest else { return Ok(()) };
    let end = f.stream_position().unwrap_or(0);
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    if size == end && end >= start {
        // SAFETY: valid fd; only shortens the file to where this append began.
        unsafe { libc::ftruncate(f.as_raw_fd(), start as libc::off_t) };
    }
    Err(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_whole_lines() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log");
        for l in [b"{\"a\":1}\n".as_slice(), b"{\"b\":2}\n"] {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&p)
                .unwrap();
            append_whole(&f, l).unwrap();
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"{\"a\":1}\n{\"b\":2}\n");
    }

    #[test]
    fn a_short_write_is_cut_back() {
        // a file size limit gives the short write a full disk gives (EFBIG after it)
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log");
        std::fs::write(&p, b"{\"a\":1}\n").unwrap();
        let st = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -f 1 && exec {} --exact record::append::tests::child --ignored --nocapture",
                std::env::current_exe().unwrap().display()
            ))
            .env("APPEND_TEST_FILE", &p)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "child: {st:?}");
        assert_eq!(std::fs::read(&p).unwrap(), b"{\"a\":1}\n");
    }

    #[test]
    #[ignore = "run by a_short_write_is_cut_back under a file size limit"]
    fn child() {
        let Some(p) = std::env::var_os("APPEND_TEST_FILE") else {
            return;
        };
        // SAFETY: ignoring SIGXFSZ, so that the write past the limit fails with EFBIG.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        let f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
        let line = [b'x'; 2000];
        let e = append_whole(&f, &line).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "{e}");
    }
}

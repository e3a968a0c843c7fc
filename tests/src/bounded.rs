//! Commands bounded in time: a host-side hang (a FIFO, a blocking read) fails the test
//! after a deadline, the process killed first, instead of stalling the suite.

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Run `cmd` with stdin from `/dev/null`; fail the test if it is still running after
/// `secs` seconds (it is killed first, so a hang cannot stall the suite).
#[track_caller]
pub fn bounded(cmd: &mut Command, secs: u64) -> Output {
    cmd.stdin(Stdio::null());
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn capsule");
    wait_bounded(child, secs, &format!("{cmd:?}"))
}

/// Wait for `child` (stdout and stderr piped), reading both; fail the test naming `what`
/// if it is still running after `secs` seconds (killed first).
#[track_caller]
pub fn wait_bounded(mut child: Child, secs: u64, what: &str) -> Output {
    let mut out = child.stdout.take().expect("stdout");
    let mut errp = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = errp.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("host process hung (killed after {secs}s): {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: t_out.join().expect("stdout reader"),
        stderr: t_err.join().expect("stderr reader"),
    }
}

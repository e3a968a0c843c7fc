//! Host processes as the test sees them in `/proc`: found by a marker in their command
//! line, and waited for (a sandbox's processes must be gone soon after it ends).

use std::time::{Duration, Instant};

/// Host processes whose command line contains `marker`.
pub fn host_procs(marker: &str) -> Vec<i32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(marker) {
            v.push(pid);
        }
    }
    v
}

/// Poll `f` every 50 ms for up to `secs` seconds; whether it became true (asked once more
/// at the end).
pub fn wait_until(mut f: impl FnMut() -> bool, secs: u64) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

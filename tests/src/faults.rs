//! Shared pieces of the fault-injection tests (`tests/tests/faults*.rs`): how many times
//! to inject, killing a command part-way, and the checks made afterwards (no process or
//! mount of a scratch tree is left, the records still parse), and a small filesystem
//! made for a test ([`SmallFs`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Iterations per runner: `CAPSULE_FAULT_ITERS`, else `default` (small: the suite's
/// budget); `hack/faults.sh N` runs more.
pub fn iters(default: u64) -> u64 {
    std::env::var("CAPSULE_FAULT_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `CAPSULE_FAULT_LONG=1`: the full-size versions (`hack/faults.sh`).
pub fn long() -> bool {
    std::env::var("CAPSULE_FAULT_LONG").as_deref() == Ok("1")
}

/// Spawn `cmd` (stdio to /dev/null), SIGKILL it `after` its start; whether it had
/// already ended by then (the kill came too late).
pub fn kill_after(cmd: &mut Command, after: Duration) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn capsule");
    let end = Instant::now() + after;
    let mut finished = false;
    while Instant::now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            finished = true;
            break;
        }
        std::thread::sleep(Duration::from_micros(500).min(end - Instant::now()));
    }
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    finished
}

/// How long `cmd` takes, run to its end (asserted to succeed).
#[track_caller]
pub fn timed(cmd: &mut Command, what: &str) -> Duration {
    let t = Instant::now();
    let o = crate::bounded(cmd, 60);
    crate::assert_ok(&o, what);
    t.elapsed()
}

/// Whether `text` (a command line, a mount table) names `path` or something below it
/// (`/x/l1` names neither `/x/l10` nor `/x/l1x`).
pub fn names_path(text: &str, path: &Path) -> bool {
    let p = path.to_string_lossy();
    text.match_indices(p.as_ref()).any(|(i, _)| {
        matches!(
            text.as_bytes().get(i + p.len()),
            None | Some(b'/' | b' ' | b'\n' | b'\0')
        )
    })
}

/// Host processes that still have something of `tree` (a scratch folder): its path in
/// their command line or mount table. The capsule's holders, sandboxes and commands
/// all do while they run.
pub fn procs_of(tree: &Path) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let mi = std::fs::read_to_string(e.path().join("mountinfo")).unwrap_or_default();
        if names_path(&String::from_utf8_lossy(&cmd), tree) || names_path(&mi, tree) {
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            v.push((pid, comm.trim().to_string()));
        }
    }
    v
}

/// Assert that within `secs` seconds no process has anything of `tree` and that this
/// process's mount table shows nothing under it.
#[track_caller]
pub fn assert_nothing_runs(tree: &Path, secs: u64, label: &str) {
    assert!(
        crate::wait_until(|| procs_of(tree).is_empty(), secs),
        "[{label}] processes still have {}: {:?}",
        tree.display(),
        procs_of(tree)
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let left: Vec<&str> = mounts.lines().filter(|l| names_path(l, tree)).collect();
    assert!(left.is_empty(), "[{label}] mounts left: {left:?}");
}

/// Assert every line of the `events.jsonl` of every bundle under `root` parses; the
/// number of records read.
#[track_caller]
pub fn assert_events_parse(root: &Path, label: &str) -> usize {
    let mut n = 0;
    for b in std::fs::read_dir(root.join("bundles"))
        .map(|d| d.flatten().collect::<Vec<_>>())
        .unwrap_or_default()
    {
        let ev = b.path().join("events.jsonl");
        let Ok(text) = std::fs::read_to_string(&ev) else {
            continue;
        };
        for (k, l) in text.lines().enumerate() {
            assert!(
                serde_json::from_str::<serde_json::Value>(l).is_ok(),
                "[{label}] {} line {} does not parse: {l}",
                ev.display(),
                k + 1
            );
            n += 1;
        }
    }
    n
}

/// Assert `root/settings.json`, when there is one, parses; its value.
#[track_caller]
pub fn assert_settings_parse(root: &Path, label: &str) -> Option<serde_json::Value> {
    let p = root.join("settings.json");
    let text = std::fs::read_to_string(&p).ok()?;
    match serde_json::from_str(&text) {
        Ok(v) => Some(v),
        Err(e) => panic!("[{label}] settings.json does not parse ({e}): {text}"),
    }
}

/// Names in `dir` (none when it cannot be read).
pub fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Free bytes (for unprivileged users) on the filesystem of `p`.
pub fn free(p: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs fills a struct of ours from a valid path.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        assert_eq!(
            libc::statvfs(c.as_ptr(), &mut s),
            0,
            "statvfs {}",
            p.display()
        );
        s.f_bavail as u64 * s.f_frsize as u64
    }
}

/// A tmpfs of `size` mounted on `dir` (made), owned by `r`; unmounted on drop.
pub struct SmallFs(pub PathBuf);

impl SmallFs {
    pub fn mount(dir: &Path, size: &str, r: &crate::Runner) -> SmallFs {
        std::fs::create_dir_all(dir).unwrap();
        let o = crate::run(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o"])
                .arg(format!("size={size},mode=0755"))
                .arg("capsule-e2e-small")
                .arg(dir),
        );
        crate::assert_ok(&o, "mount a small tmpfs");
        let fs = SmallFs(dir.to_path_buf());
        r.own(dir);
        fs
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `capsule exec NAME` (as `r`, capsule root `root`) of a task that fills the disk of the
/// capsule's workspace (`fill`) to its last block, the disk guard off for it
/// (`settings.json`'s `disk_reserve`, written here; the guard would stop it before);
/// asserts that the task got to its end.
pub fn fill_the_disk(
    r: &crate::Runner,
    root: &Path,
    name: &str,
    label: &str,
) -> std::process::Output {
    let settings = root.join("settings.json");
    std::fs::write(&settings, r#"{"disk_reserve": "off"}"#).unwrap();
    r.own(&settings);
    let o = crate::bounded(
        r.capsule(root).args([
            "exec",
            name,
            "--",
            "sh",
            "-c",
            "cat /dev/zero > fill 2>/dev/null; echo filled",
        ]),
        60,
    );
    assert!(
        crate::stdout(&o).contains("filled"),
        "[{label}] {}",
        crate::stderr(&o)
    );
    o
}

//! capsule-runc under Docker (Debian's docker.io): one private `dockerd` for this test
//! binary (tests/src/engines.rs), each cell of `hack/engines.sh`'s matrix a case, run
//! with `--runtime capsule`. Root only; skipped with the reason where docker.io is not
//! installed (CI installs it). The cells hold for runc too (`hack/engines.sh` runs them
//! side by side); the daemon's own cgroup driver is cgroupfs on this host's cgroup v1
//! (the memory, pids and stats cells read v1 files through Docker).

use capsule_e2e::engines::{out, processes_naming, usable, wait_until, Docker, IMAGE};
use capsule_e2e::{code, stderr, stdout};
use std::process::Output;
use std::sync::OnceLock;

fn docker() -> Option<&'static Docker> {
    static D: OnceLock<Option<Docker>> = OnceLock::new();
    D.get_or_init(|| usable("Docker", &["dockerd", "unshare"]).then(Docker::start))
        .as_ref()
}

/// `docker run --rm --runtime capsule ARGS... IMAGE CMD...` (`opts` before the image).
fn run(d: &Docker, opts: &[&str], cmd: &[&str]) -> Output {
    out(d
        .cmd()
        .args(["run", "--rm", "--runtime", "capsule"])
        .args(opts)
        .arg(IMAGE)
        .args(cmd))
}

fn name(n: &str) -> String {
    format!("{n}-{}", std::process::id())
}

/// A detached container `n` running `cmd`.
fn detached(d: &Docker, n: &str, opts: &[&str], cmd: &[&str]) -> String {
    let o = out(d
        .cmd()
        .args(["run", "-d", "--runtime", "capsule", "--name", n])
        .args(opts)
        .arg(IMAGE)
        .args(cmd));
    assert!(o.status.success(), "docker run -d: {}", stderr(&o));
    stdout(&o).trim().to_string()
}

fn rm(d: &Docker, n: &str) {
    let _ = out(d.cmd().args(["rm", "-f", n]));
}

fn inspect(d: &Docker, n: &str, fmt: &str) -> String {
    stdout(&out(d.cmd().args(["inspect", "-f", fmt, n])))
        .trim()
        .to_string()
}

#[test]
fn output_and_exit_code() {
    let Some(d) = docker() else { return };
    let o = run(d, &[], &["sh", "-c", "echo out; echo err >&2; exit 7"]);
    assert_eq!(code(&o), 7, "{}", stderr(&o));
    assert_eq!(stdout(&o), "out\n");
    assert!(stderr(&o).contains("err"));
}

#[test]
fn exec_into_a_running_container() {
    let Some(d) = docker() else { return };
    let n = name("exec");
    detached(d, &n, &[], &["sleep", "1000"]);
    let o = out(d
        .cmd()
        .args(["exec", &n, "sh", "-c", "cat /proc/1/cmdline; exit 4"]));
    rm(d, &n);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(stdout(&o).starts_with("sleep"), "{}", stdout(&o));
}

#[test]
fn a_terminal() {
    let Some(d) = docker() else { return };
    let o = run(d, &["-t"], &["tty"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("/dev/pts/"), "{}", stdout(&o));
}

#[test]
fn kill_delivers_the_signal_and_stop_kills_after_its_timeout() {
    let Some(d) = docker() else { return };
    let n = name("kill");
    detached(
        d,
        &n,
        &[],
        &[
            "sh",
            "-c",
            "trap 'echo got-term; exit 3' TERM; while true; do sleep 0.1; done",
        ],
    );
    let o = out(d.cmd().args(["kill", "-s", "TERM", &n]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(wait_until(10, || inspect(d, &n, "{{.State.Status}}") == "exited"));
    let (exit, logs) = (
        inspect(d, &n, "{{.State.ExitCode}}"),
        stdout(&out(d.cmd().args(["logs", &n]))),
    );
    rm(d, &n);
    assert_eq!(exit, "3");
    assert!(logs.contains("got-term"), "{logs}");
    // pid 1 ignores SIGTERM (no handler): stop sends SIGKILL after its timeout
    let n = name("stop");
    detached(d, &n, &[], &["sleep", "1000"]);
    let o = out(d.cmd().args(["stop", "-t", "1", &n]));
    let exit = inspect(d, &n, "{{.State.ExitCode}}");
    rm(d, &n);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(exit, "137");
}

#[test]
fn read_only_root() {
    let Some(d) = docker() else { return };
    let o = run(d, &["--read-only"], &["sh", "-c", "touch /x"]);
    assert_ne!(code(&o), 0);
    assert!(
        stderr(&o).contains("Read-only file system"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn memory_and_pids_limits_are_enforced() {
    let Some(d) = docker() else { return };
    let o = run(
        d,
        &["-m", "32m", "--memory-swap", "32m"],
        &["sh", "-c", "head -c 100m /dev/zero | tail > /dev/null"],
    );
    assert_eq!(code(&o), 137, "the OOM kill: {}", stderr(&o));
    let o = run(
        d,
        &["--pids-limit", "8"],
        &["sh", "-c", "for i in $(seq 12); do sleep 2 & done; wait"],
    );
    assert!(stderr(&o).contains("can't fork"), "{}", stderr(&o));
}

#[test]
fn bind_mounts_rw_written_through_ro_refused() {
    let Some(d) = docker() else { return };
    let dir = d.dir.join("bind");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("host"), "from-host\n").unwrap();
    let v = format!("{}:/b", dir.display());
    let o = run(d, &["-v", &v], &["sh", "-c", "cat /b/host; echo w > /b/w"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "from-host\n");
    assert_eq!(std::fs::read_to_string(dir.join("w")).unwrap(), "w\n");
    let o = run(
        d,
        &["-v", &format!("{v}:ro")],
        &["sh", "-c", "echo w > /b/w2"],
    );
    assert_ne!(code(&o), 0);
    assert!(!dir.join("w2").exists());
}

#[test]
fn home_user_capabilities_and_no_new_privileges() {
    let Some(d) = docker() else { return };
    let o = run(d, &[], &["sh", "-c", "echo $HOME"]);
    assert_eq!(stdout(&o), "/root\n", "{}", stderr(&o));
    let o = run(d, &["--user", "1000"], &["sh", "-c", "id -u; echo $HOME"]);
    assert_eq!(stdout(&o), "1000\n/home/app\n", "{}", stderr(&o));
    let o = run(
        d,
        &["--cap-drop", "ALL", "--cap-add", "NET_ADMIN"],
        &["grep", "CapEff", "/proc/self/status"],
    );
    // CAP_NET_ADMIN is bit 12
    assert!(stdout(&o).contains("0000000000001000"), "{}", stdout(&o));
    let o = run(
        d,
        &["--security-opt", "no-new-privileges"],
        &["grep", "NoNewPrivs", "/proc/self/status"],
    );
    assert!(stdout(&o).contains('1'), "{}", stdout(&o));
}

#[test]
fn init_runs_as_pid_1() {
    let Some(d) = docker() else { return };
    let o = run(d, &["--init"], &["cat", "/proc/1/cmdline"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("init"), "{}", stdout(&o));
}

#[test]
fn seccomp_unconfined_has_no_filter_of_capsules() {
    let Some(d) = docker() else { return };
    let o = run(
        d,
        &["--security-opt", "seccomp=unconfined"],
        &["grep", "^Seccomp:", "/proc/self/status"],
    );
    assert!(stdout(&o).contains('0'), "{}", stdout(&o));
    let o = run(d, &[], &["grep", "^Seccomp:", "/proc/self/status"]);
    assert!(stdout(&o).contains('2'), "{}", stdout(&o));
}

#[test]
fn network_none_and_the_default_bridge() {
    let Some(d) = docker() else { return };
    let o = run(d, &["--network", "none"], &["ip", "-o", "link"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 1, "only lo: {}", stdout(&o));
    let o = run(d, &[], &["ip", "-o", "-4", "addr", "show", "eth0"]);
    assert!(stdout(&o).contains("inet 172."), "{}", stdout(&o));
}

#[test]
fn tmpfs_and_device() {
    let Some(d) = docker() else { return };
    let o = run(
        d,
        &["--tmpfs", "/scratch:size=1m"],
        &[
            "sh",
            "-c",
            "grep ' /scratch ' /proc/mounts && echo a > /scratch/a",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("tmpfs"), "{}", stdout(&o));
    let o = run(
        d,
        &["--device", "/dev/zero:/dev/myzero"],
        &[
            "sh",
            "-c",
            "head -c 3 /dev/myzero | wc -c; ls -l /dev/myzero",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("3\nc"), "{}", stdout(&o));
}

#[test]
fn pause_logs_cp_update_top_stats() {
    let Some(d) = docker() else { return };
    let n = name("ops");
    detached(
        d,
        &n,
        &[],
        &["sh", "-c", "echo started; while true; do sleep 0.1; done"],
    );
    let step = |args: &[&str]| {
        let o = out(d.cmd().args(args));
        assert!(o.status.success(), "docker {args:?}: {}", stderr(&o));
        stdout(&o)
    };
    step(&["pause", &n]);
    assert_eq!(inspect(d, &n, "{{.State.Status}}"), "paused");
    step(&["unpause", &n]);
    assert_eq!(inspect(d, &n, "{{.State.Status}}"), "running");
    assert!(step(&["logs", &n]).contains("started"));
    let f = d.dir.join("cp-in");
    std::fs::write(&f, "copied\n").unwrap();
    step(&["cp", f.to_str().unwrap(), &format!("{n}:/tmp/cp-in")]);
    assert_eq!(step(&["exec", &n, "cat", "/tmp/cp-in"]), "copied\n");
    let back = d.dir.join("cp-out");
    step(&["cp", &format!("{n}:/etc/passwd"), back.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&back)
        .unwrap()
        .contains("app:x:1000"));
    // top lists the container's processes, not capsule's helpers beside them
    // docker update: capsule-runc's `update` writes the new limit
    step(&["update", "--memory", "64m", "--memory-swap", "64m", &n]);
    assert_eq!(
        step(&[
            "exec",
            &n,
            "cat",
            "/sys/fs/cgroup/memory/memory.limit_in_bytes"
        ]),
        "67108864\n"
    );
    let top = step(&["top", &n]);
    assert!(
        top.contains("sh -c") && !top.contains("capsule-runc"),
        "{top}"
    );
    let stats = step(&["stats", "--no-stream", "--format", "{{.PIDs}}", &n]);
    rm(d, &n);
    assert!(stats.trim().parse::<u32>().is_ok_and(|p| p >= 2), "{stats}");
}

#[test]
fn restart_and_health_check() {
    let Some(d) = docker() else { return };
    let n = name("restart");
    detached(
        d,
        &n,
        &["--restart", "on-failure:2"],
        &["sh", "-c", "exit 5"],
    );
    let ok = wait_until(20, || {
        inspect(d, &n, "{{.RestartCount}} {{.State.Status}}") == "2 exited"
    });
    let got = inspect(
        d,
        &n,
        "{{.RestartCount}} {{.State.Status}} {{.State.ExitCode}}",
    );
    rm(d, &n);
    assert!(ok, "{got}");
    let n = name("health");
    detached(
        d,
        &n,
        &[
            "--health-cmd",
            "test -e /etc/passwd",
            "--health-interval",
            "1s",
        ],
        &["sleep", "1000"],
    );
    let ok = wait_until(20, || {
        inspect(d, &n, "{{.State.Health.Status}}") == "healthy"
    });
    rm(d, &n);
    assert!(ok);
}

#[test]
fn rm_force_leaves_nothing_behind() {
    let Some(d) = docker() else { return };
    let n = name("rmf");
    let id = detached(d, &n, &[], &["sleep", "1000"]);
    assert!(wait_until(10, || !processes_naming(&id).is_empty()));
    let cg = std::path::Path::new("/sys/fs/cgroup/pids/docker").join(&id);
    // capsule's helpers are in the container's cgroup, beside its process
    let procs = std::fs::read_to_string(cg.join("cgroup.procs")).unwrap_or_default();
    let o = out(d.cmd().args(["rm", "-f", &n]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        wait_until(10, || processes_naming(&id).is_empty()),
        "left: {:?}",
        processes_naming(&id)
    );
    assert!(!d.runtime_root().join(&id).exists(), "the state directory");
    assert!(!cg.exists(), "the cgroup");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&id),
        "mounts naming the container are left"
    );
    assert!(
        procs.lines().count() >= 2,
        "helpers in the cgroup: {procs:?}"
    );
}

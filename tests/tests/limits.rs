//! Resource limits of `capsule exec`: `--fds` and `--file-size` (rlimits, in built roots
//! and in warm spares' commands alike) and `--activity-timeout` (the whole tree killed
//! after that long without output). Every command here is bounded in time and size.
use capsule_e2e::bounded::bounded;
use capsule_e2e::sandbox::*;
use std::time::{Duration, Instant};

/// `capsule exec t [flags] -- argv`, bounded to `secs`; `built`: prepared roots off (the
/// root is built for this exec), else the prepared root and its warm spares.
fn exec(
    c: &Capsule,
    built: bool,
    flags: &[&str],
    argv: &[&str],
    secs: u64,
) -> std::process::Output {
    let mut cmd = c.capsule();
    if built {
        cmd.env("CAPSULE_PREPARED_IDLE", "0");
    }
    cmd.arg("exec").arg(NAME).args(flags).arg("--").args(argv);
    bounded(&mut cmd, secs)
}

fn last_record(c: &Capsule) -> serde_json::Value {
    c.records().pop().expect("an exec record")
}

/// The line of `/proc/self/limits` for `name`, as the command sees it.
fn limit_line<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[test]
fn fds_and_file_size_hold_in_built_roots_and_warm_spares() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // built, then the prepared root's first exec and its warm spares after it
        for built in [true, false, false, false] {
            let flags = ["--fds", "32", "--file-size", "1M"];
            let o = exec(&c, built, &flags, &["cat", "/proc/self/limits"], 30);
            ok(&o, "cat /proc/self/limits");
            let text = out(&o);
            let files: Vec<&str> = limit_line(&text, "Max open files")
                .split_whitespace()
                .collect();
            assert_eq!(files[3..5], ["32", "32"], "built={built}: {text}");
            let size: Vec<&str> = limit_line(&text, "Max file size")
                .split_whitespace()
                .collect();
            assert_eq!(size[3..5], ["1048576", "1048576"], "built={built}: {text}");
            assert_eq!(
                last_record(&c)["requested"]["limits"],
                serde_json::json!({"fds": 32, "file_size": 1048576})
            );
            // the command cannot raise them again (the hard limit is the limit)
            let o = exec(
                &c,
                built,
                &flags,
                &["sh", "-c", "ulimit -n 4096 || exit 9"],
                30,
            );
            assert_eq!(code(&o), 9, "built={built}: raised --fds: {}", err(&o));
            // more descriptors than the limit: refused (fds 0-7 may be open, 8 may not)
            let o = exec(
                &c,
                built,
                &["--fds", "8"],
                &["sh", "-c", "exec 3</dev/null 4</dev/null 5</dev/null 6</dev/null 7</dev/null; (exec 8</dev/null) || exit 8"],
                30,
            );
            assert_eq!(
                code(&o),
                8,
                "built={built}: a 9th descriptor opened: {}",
                err(&o)
            );
            // a file past the limit: the writer is killed, and told why
            let o = exec(
                &c,
                built,
                &flags,
                &["sh", "-c", "exec head -c 2097152 /dev/zero > big.bin"],
                30,
            );
            assert_eq!(code(&o), 128 + 25, "built={built}: {}", err(&o));
            assert!(
                err(&o).contains("killed: file size limit 1 MiB reached"),
                "{}",
                err(&o)
            );
            let len = std::fs::metadata(c.ws.join("big.bin")).unwrap().len();
            assert!(len <= 1 << 20, "built={built}: {len} bytes written");
            assert_eq!(
                last_record(&c)["limits_reached"][0],
                "killed: file size limit 1 MiB reached"
            );
            std::fs::remove_file(c.ws.join("big.bin")).unwrap();
        }
        // without the flags the caller's own limits hold (the test can fail)
        let o = exec(
            &c,
            false,
            &[],
            &["sh", "-c", "head -c 2097152 /dev/zero > big.bin"],
            30,
        );
        ok(&o, "2 MiB without --file-size");
        assert!(last_record(&c).get("limits_reached").is_none());
    });
}

#[test]
fn activity_timeout_kills_a_silent_command_not_a_talking_one() {
    each_runner(|r| {
        let c = Capsule::new(r);
        for built in [true, false, false] {
            // silent: killed after ~1 s, with everything it started
            let t = Instant::now();
            let o = exec(
                &c,
                built,
                &["--activity-timeout", "1s"],
                &["sh", "-c", "(sleep 2; touch late) & sleep 5"],
                30,
            );
            let took = t.elapsed();
            assert_eq!(code(&o), 124, "built={built}: {}", err(&o));
            assert!(
                took < Duration::from_secs(4),
                "built={built}: took {took:?}"
            );
            assert!(
                err(&o).contains("killed: no output for 1s (activity timeout)"),
                "{}",
                err(&o)
            );
            let rec = last_record(&c);
            assert_eq!(
                rec["limits_reached"][0],
                "killed: no output for 1s (activity timeout)"
            );
            assert_eq!(rec["termination"]["kind"], "activity_timeout");
            std::thread::sleep(Duration::from_millis(1500));
            assert!(
                !c.ws.join("late").exists(),
                "built={built}: a child outlived the kill"
            );

            // talking every 0.3 s for 3 s, on stdout and stderr: runs to its end, and what
            // it wrote arrives whole and in order
            let o = exec(
                &c,
                built,
                &["--activity-timeout", "1s"],
                &[
                    "sh",
                    "-c",
                    "for i in 1 2 3 4 5 6 7 8 9 10; do echo out$i; echo err$i >&2; sleep 0.3; done",
                ],
                30,
            );
            ok(&o, "a command that prints every 0.3 s");
            let want: String = (1..=10).map(|i| format!("out{i}\n")).collect();
            assert_eq!(out(&o), want);
            for i in 1..=10 {
                assert!(err(&o).contains(&format!("err{i}\n")), "{}", err(&o));
            }
            assert!(last_record(&c).get("limits_reached").is_none());
        }
        // under -t the terminal's output is the activity
        let o = exec(
            &c,
            false,
            &["-t", "--activity-timeout", "1s"],
            &["sleep", "5"],
            30,
        );
        assert_eq!(code(&o), 124, "-t: {}", err(&o));
        let o = exec(
            &c,
            false,
            &["-t", "--activity-timeout", "1s"],
            &[
                "sh",
                "-c",
                "for i in 1 2 3 4 5 6 7 8 9 10; do echo $i; sleep 0.3; done",
            ],
            30,
        );
        ok(&o, "-t: a command that prints every 0.3 s");
        // the absolute --timeout still holds for a command that keeps talking
        let t = Instant::now();
        let o = exec(
            &c,
            false,
            &["--activity-timeout", "1s", "--timeout", "1500ms"],
            &["sh", "-c", "while :; do echo x; sleep 0.1; done"],
            30,
        );
        assert_eq!(code(&o), 124, "{}", err(&o));
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "took {:?}",
            t.elapsed()
        );
        assert_eq!(last_record(&c)["termination"]["kind"], "timed_out");
    });
}

#[test]
fn limits_that_cannot_be_read_are_refused_before_anything_runs() {
    each_runner(|r| {
        let c = Capsule::new(r);
        for flags in [
            ["--fds", "0"],
            ["--file-size", "12Q"],
            ["--activity-timeout", "0s"],
        ] {
            let o = exec(&c, false, &flags, &["touch", "ran"], 30);
            assert_eq!(code(&o), 2, "{flags:?}: {}", err(&o));
            assert!(!c.ws.join("ran").exists());
        }
    });
}

/// Can this runner make cgroups for its execs here? Root can on this kind of host; an
/// unprivileged user only where a subtree is delegated to it.
fn cgroups_for(r: &capsule_e2e::Runner) -> bool {
    r.uid() == 0
}

/// Processes on the host whose command line is `argv` (joined by NULs).
fn host_procs_running(argv: &[&str]) -> usize {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want))
        .count()
}

/// Per-exec cgroups (v1 pids hierarchy) of capsules that have exited and that still hold
/// a process.
fn exec_cgroups_left() -> Vec<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let Some(path) = own
        .lines()
        .find_map(|l| l.split_once(":pids:").map(|(_, p)| p.to_string()))
    else {
        return Vec::new();
    };
    let base = std::path::Path::new("/sys/fs/cgroup/pids")
        .join(path.trim_start_matches('/'))
        .join("capsule");
    std::fs::read_dir(&base)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("exec-"))
                .filter(|n| {
                    let pid: i32 = n["exec-".len()..].parse().unwrap_or(0);
                    // SAFETY: signal 0 only checks for existence.
                    unsafe { libc::kill(pid, 0) != 0 }
                })
                .filter(|n| {
                    let procs = base.join(n).join("cgroup.procs");
                    !std::fs::read_to_string(procs)
                        .unwrap_or_default()
                        .trim()
                        .is_empty()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn pids_limit_stops_a_process_loop_and_cleans_up() {
    // 500 sleeping processes tried, 64 allowed: bounded either way
    let script = "i=0; while [ $i -lt 500 ]; do sleep 93.25 & i=$((i+1)); done; wait";
    each_runner(|r| {
        let c = Capsule::new(r);
        for built in [true, false, false] {
            let t = Instant::now();
            let o = exec(&c, built, &["--pids", "64"], &["sh", "-c", script], 60);
            if !cgroups_for(r) {
                // no cgroup for this user here: refused, nothing ran
                assert_eq!(code(&o), 125, "{}", err(&o));
                assert!(
                    err(&o).contains("--pids cannot be enforced here")
                        && err(&o).contains("nothing ran"),
                    "{}",
                    err(&o)
                );
                assert_eq!(host_procs_running(&["sleep", "93.25"]), 0);
                continue;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "took {:?}",
                t.elapsed()
            );
            assert!(
                err(&o).contains("pids limit 64 reached"),
                "built={built}: {}",
                err(&o)
            );
            let rec = last_record(&c);
            let reached = rec["limits_reached"].to_string();
            assert!(reached.contains("pids limit 64 reached"), "{rec}");
            assert_eq!(rec["limits"]["in_force"]["pids"], 64, "{rec}");
            // everything it started is gone, and so is its cgroup
            assert_eq!(host_procs_running(&["sleep", "93.25"]), 0, "built={built}");
        }
        if cgroups_for(r) {
            assert_eq!(exec_cgroups_left(), Vec::<String>::new());
            // the prepared root's next spares wait in pids groups of their own already,
            // so that an exec does not wait for a move into a cgroup
            assert!(
                capsule_e2e::procs::wait_until(|| !waiting_spares("pids").is_empty(), 5),
                "no warm spare waits in a cgroup of its own"
            );
        }
    });
}

/// The groups (`warm-*`) of capsule's folder in this process's v1 `controller`
/// hierarchy that hold a process (a prepared root's waiting spare).
fn waiting_spares(controller: &str) -> Vec<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let key = format!(":{controller}:");
    let Some(path) = own
        .lines()
        .find_map(|l| l.split_once(key.as_str()).map(|(_, p)| p.to_string()))
    else {
        return Vec::new();
    };
    let base = std::path::Path::new("/sys/fs/cgroup")
        .join(controller)
        .join(path.trim_start_matches('/'))
        .join("capsule");
    std::fs::read_dir(&base)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("warm-"))
                .filter(|e| {
                    !std::fs::read_to_string(e.path().join("cgroup.procs"))
                        .unwrap_or_default()
                        .trim()
                        .is_empty()
                })
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn memory_limit_kills_a_large_allocation_and_says_why() {
    // dd allocates its 256 MiB block and fills it from /dev/zero
    let argv = ["dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"];
    each_runner(|r| {
        let c = Capsule::new(r);
        for built in [true, false, false] {
            let o = exec(&c, built, &["--memory", "64M"], &argv, 60);
            if !cgroups_for(r) {
                assert_eq!(code(&o), 125, "{}", err(&o));
                assert!(
                    err(&o).contains("--memory cannot be enforced here")
                        && err(&o).contains("capsule isolation --accept-weaker on"),
                    "{}",
                    err(&o)
                );
                continue;
            }
            assert_eq!(code(&o), 137, "built={built}: {}", err(&o));
            assert!(
                err(&o).contains("capsule: killed: memory limit 64 MiB reached"),
                "{}",
                err(&o)
            );
            let rec = last_record(&c);
            assert_eq!(
                rec["limits_reached"][0], "killed: memory limit 64 MiB reached",
                "{rec}"
            );
        }
        if cgroups_for(r) {
            // a group where the limit was reached is not used again (its kills would be
            // counted for the next exec): the next one within the limit reports nothing
            // within the limit it runs (the test can fail)
            let o = exec(
                &c,
                false,
                &["--memory", "64M"],
                &["dd", "if=/dev/zero", "of=/dev/null", "bs=8M", "count=1"],
                60,
            );
            ok(&o, "8 MiB under a 64 MiB limit");
            assert!(last_record(&c).get("limits_reached").is_none());
        } else {
            // accepted weaker isolation: it runs, and the record says the limit was not
            // enforced
            std::fs::write(c.root.join("settings.json"), r#"{"accept_weaker": true}"#).unwrap();
            r.own(&c.root.join("settings.json"));
            let o = exec(&c, false, &["--memory", "64M"], &["true"], 60);
            ok(&o, "--memory with weaker isolation accepted");
            assert!(
                err(&o).contains("--memory cannot be enforced here"),
                "{}",
                err(&o)
            );
            let rec = last_record(&c);
            assert!(
                rec["degradation"]
                    .to_string()
                    .contains("--memory cannot be enforced"),
                "{rec}"
            );
            assert!(rec["limits"]["in_force"].get("memory").is_none(), "{rec}");
        }
    });
}

#[test]
fn isolation_says_where_each_limit_is_enforced() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let mut cmd = c.capsule();
        cmd.args(["isolation", "--json"]);
        let o = bounded(&mut cmd, 30);
        ok(&o, "capsule isolation --json");
        let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
        let l = &v["limits"];
        assert_eq!(l["fds"]["enforced"], true, "{l}");
        assert_eq!(l["file_size"]["enforced"], true, "{l}");
        assert_eq!(l["activity_timeout"]["enforced"], true, "{l}");
        for k in ["memory", "pids", "cpus"] {
            // what the exec tests above find, said ahead of time
            assert_eq!(l[k]["enforced"], cgroups_for(r), "{k}: {l}");
            if !cgroups_for(r) {
                assert!(l[k]["why"].as_str().unwrap().contains("cannot"), "{l}");
            }
        }
    });
}

/// The children's user + system seconds `times` printed (its second line).
fn children_cpu_secs(text: &str) -> f64 {
    let line = text
        .lines()
        .nth(1)
        .unwrap_or_else(|| panic!("times: {text}"));
    line.split_whitespace()
        .map(|t| {
            let (m, s) = t.trim_end_matches('s').split_once('m').expect("NmN.Ns");
            m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
        })
        .sum()
}

#[test]
fn cpus_limit_holds_a_busy_loop_to_its_share() {
    // a busy loop for 1.5 s of wall time, then the CPU time it got
    let script = "timeout 1.5 sh -c 'while :; do :; done'; times";
    each_runner(|r| {
        let c = Capsule::new(r);
        for built in [true, false, false] {
            let o = exec(&c, built, &["--cpus", "0.2"], &["sh", "-c", script], 30);
            if !cgroups_for(r) {
                assert_eq!(code(&o), 125, "{}", err(&o));
                assert!(
                    err(&o).contains("--cpus cannot be enforced here"),
                    "{}",
                    err(&o)
                );
                continue;
            }
            ok(&o, "busy loop under --cpus 0.2");
            let used = children_cpu_secs(&out(&o));
            // 0.2 CPU for 1.5 s is 0.3 s; a little slack for the period's edges
            assert!(
                used <= 0.45,
                "built={built}: {used} s of CPU under --cpus 0.2"
            );
            assert_eq!(last_record(&c)["limits"]["in_force"]["cpus_milli"], 200);
        }
    });
}

#[test]
fn settings_give_default_limits_that_flags_override() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let settings = c.root.join("settings.json");
        std::fs::write(&settings, r#"{"limits": {"fds": 16, "file_size": "1M"}}"#).unwrap();
        r.own(&settings);
        let o = exec(&c, false, &[], &["cat", "/proc/self/limits"], 30);
        ok(&o, "defaults from the settings");
        let text = out(&o);
        let files: Vec<&str> = limit_line(&text, "Max open files")
            .split_whitespace()
            .collect();
        assert_eq!(files[3], "16", "{text}");
        let size: Vec<&str> = limit_line(&text, "Max file size")
            .split_whitespace()
            .collect();
        assert_eq!(size[3], "1048576", "{text}");
        // a flag wins over the default
        let o = exec(
            &c,
            false,
            &["--fds", "20"],
            &["cat", "/proc/self/limits"],
            30,
        );
        let text = out(&o);
        let files: Vec<&str> = limit_line(&text, "Max open files")
            .split_whitespace()
            .collect();
        assert_eq!(files[3], "20", "{text}");
        // a default that cannot be read refuses, naming the setting
        std::fs::write(&settings, r#"{"limits": {"memory": "lots"}}"#).unwrap();
        let o = exec(&c, false, &[], &["touch", "ran"], 30);
        assert_eq!(code(&o), 1, "{}", err(&o));
        assert!(err(&o).contains("settings limits.memory"), "{}", err(&o));
        assert!(!c.ws.join("ran").exists());
    });
}

#[test]
fn tmp_size_bounds_tmp_and_var_tmp_together_per_exec() {
    each_runner(|r| {
        let c = Capsule::new(r);
        // 8 MiB in /tmp and 8 in /var/tmp fill 16 MiB; the 17th MiB is refused (ENOSPC)
        let fill = "[ -e /tmp/a ] && exit 7; dd if=/dev/zero of=/tmp/a bs=1M count=8 2>/dev/null || exit 3; \
            dd if=/dev/zero of=/var/tmp/b bs=1M count=8 2>/dev/null || exit 4; \
            e=$(dd if=/dev/zero of=/tmp/c bs=1M count=1 2>&1) && exit 5; \
            echo \"$e\" | grep -q 'No space left' || { echo \"$e\"; exit 6; }";
        // built, then the prepared root's first exec and its warm spares after it
        for built in [true, false, false] {
            let o = exec(&c, built, &["--tmp-size", "16M"], &["sh", "-c", fill], 30);
            ok(&o, &format!("built={built}: filling /tmp and /var/tmp"));
            // each exec's own: the last one's files are gone, nothing in the bundle
            assert!(
                !c.bundle.join("tmp/a").exists(),
                "built={built}: landed in the bundle"
            );
            assert_eq!(
                last_record(&c)["requested"]["limits"]["tmp_size"],
                16 << 20,
                "built={built}"
            );
        }
        // without it: the bundle's tmp, at /tmp and /var/tmp alike, kept between execs
        let o = exec(&c, false, &[], &["sh", "-c", "echo kept > /var/tmp/k"], 30);
        ok(&o, "writing /var/tmp");
        let o = exec(&c, false, &[], &["cat", "/tmp/k"], 30);
        ok(&o, "reading it back in the next exec");
        assert_eq!(out(&o), "kept\n");
    });
}

//! capsule's own default limits of an exec given no flags: a fork bomb stops in the
//! sandbox's own group, a memory hog is killed inside the exec's group and capsule says so
//! in one line; where no cgroup can be made (the unprivileged user on a host that
//! delegates none) the exec still runs, processes held by `RLIMIT_NPROC`, and the record
//! says which default was not enforced, while an explicit `--memory` still refuses.
//!
//! The defaults are lowered through `CAPSULE_OWN_DEFAULTS` so that every test is small and
//! fast: the machine's own numbers (thousands of processes, gigabytes) are the unit
//! tests' (`runtime/src/limits.rs`).
use capsule_e2e::bounded::bounded;
use capsule_e2e::procs::{host_procs, wait_until};
use capsule_e2e::sandbox::*;

/// `capsule exec t -- argv` with no limit flags, capsule's defaults set to `defaults`;
/// `built`: prepared roots off (the root is built for this exec), else the prepared root
/// and its warm spares.
fn exec_defaults(
    c: &Capsule,
    defaults: &str,
    built: bool,
    flags: &[&str],
    argv: &[&str],
) -> std::process::Output {
    let mut cmd = c.capsule();
    cmd.env("CAPSULE_OWN_DEFAULTS", defaults);
    if built {
        cmd.env("CAPSULE_PREPARED_IDLE", "0");
    }
    cmd.arg("exec").arg(NAME).args(flags).arg("--").args(argv);
    bounded(&mut cmd, 60)
}

/// Root can make cgroups for its execs on this kind of host; the unprivileged user only
/// where a subtree is delegated to it (none here).
fn cgroups_for(r: &capsule_e2e::Runner) -> bool {
    r.uid() == 0
}

fn last_record(c: &Capsule) -> serde_json::Value {
    c.records().pop().expect("an exec record")
}

/// A fork bomb bounded by depth (2^10 - 1 sleeping processes if nothing stops it), started
/// in the background; the command then waits 3 s (a fork the limit refuses ends it
/// earlier) and prints how many processes its pid namespace holds, counted without a
/// fork.
const BOMB: &str = "f() { if [ $1 -lt 9 ]; then f $(($1+1)) & f $(($1+1)) & fi; exec sleep 93.71; }
f 0 &
sleep 3
set -- /proc/[0-9]*
echo procs $#";

#[test]
fn a_fork_bomb_stops_in_the_sandboxs_own_group_with_no_flags() {
    each_runner(|r| {
        let c = Capsule::new(r);
        for built in [true, false] {
            let o = exec_defaults(&c, "pids=64", built, &[], &["sh", "-c", BOMB]);
            let (so, se) = (out(&o), err(&o));
            eprintln!("built={built}: exit {:?}\n{so}{se}", o.status.code());
            // the bomb never had more than the default's processes: either the command
            // counted them, or its own fork was refused
            let counted = so
                .lines()
                .find_map(|l| l.strip_prefix("procs "))
                .map(|n| n.trim().parse::<usize>().expect("a count"));
            match counted {
                Some(n) => assert!(
                    n <= 64,
                    "built={built}: {n} processes under a default of 64"
                ),
                None => assert!(se.contains("Cannot fork"), "built={built}: {so}{se}"),
            }
            let rec = last_record(&c);
            let l = &rec["limits"];
            if cgroups_for(r) {
                // the sandbox's group refused the forks, and capsule says so
                assert!(se.contains("capsule: pids limit 64 reached"), "{se}");
                assert!(
                    rec["limits_reached"]
                        .to_string()
                        .contains("pids limit 64 reached"),
                    "{rec}"
                );
                assert_eq!(l["in_force"]["pids"], 64, "{rec}");
                assert_eq!(l["capsule_defaults"]["pids"], 64, "{rec}");
                assert!(l["cgroups"].to_string().contains("pids"), "{rec}");
            } else {
                // no cgroup: RLIMIT_NPROC in the sandbox's user namespace held it, and the
                // record says the cgroup default was not enforced
                assert_eq!(l["in_force"]["nproc"], 64, "{rec}");
                assert!(l["in_force"].get("pids").is_none(), "{rec}");
                let d = rec["degradation"].to_string();
                assert!(
                    d.contains("capsule's default limits of")
                        && d.contains("processes 64")
                        && d.contains("RLIMIT_NPROC 64 instead")
                        && d.contains("not enforced"),
                    "{rec}"
                );
            }
            // the host is fine: nothing of the bomb is left, and the host forks
            assert!(
                wait_until(|| host_procs("93.71").is_empty(), 10),
                "built={built}: the bomb's processes outlived the exec: {:?}",
                host_procs("93.71")
            );
        }
        // with the machine's own default (thousands), ordinary work forks freely: 200
        // processes at once
        let o = c.sh("i=0; while [ $i -lt 200 ]; do sleep 1 & i=$((i+1)); done; wait; echo done");
        ok(&o, "200 processes under the machine's default");
        assert!(out(&o).contains("done"));
    });
}

#[test]
fn a_memory_hog_is_killed_inside_the_execs_group_and_said_in_one_line() {
    // dd allocates its 256 MiB block and fills it from /dev/zero
    let argv = ["dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"];
    each_runner(|r| {
        let c = Capsule::new(r);
        for built in [true, false, false] {
            let o = exec_defaults(&c, "memory=64M", built, &[], &argv);
            let se = err(&o);
            let rec = last_record(&c);
            if !cgroups_for(r) {
                // a default is not a request: it runs, and the record says what was not
                // enforced (once: on stderr nothing but dd's own lines)
                ok(&o, "dd under a memory default that cannot be enforced");
                let d = rec["degradation"].to_string();
                assert!(
                    d.contains("capsule's default limits of memory 64 MiB")
                        && d.contains("need a cgroup")
                        && d.contains("not enforced"),
                    "{rec}"
                );
                assert!(rec["limits"]["in_force"].get("memory").is_none(), "{rec}");
                assert!(rec.get("limits_reached").is_none(), "{rec}");
                continue;
            }
            assert_eq!(code(&o), 137, "built={built}: {se}");
            let lines: Vec<&str> = se.lines().filter(|l| l.contains("memory limit")).collect();
            assert_eq!(
                lines,
                ["capsule: killed: memory limit 64 MiB reached (capsule's default here; --memory or settings.json's \"limits\" give another)"],
                "built={built}: {se}"
            );
            assert_eq!(
                rec["limits_reached"],
                serde_json::json!([lines[0].trim_start_matches("capsule: ")]),
                "{rec}"
            );
            let l = &rec["limits"];
            assert_eq!(l["capsule_defaults"]["memory"], 64 << 20, "{rec}");
            // the kill happened in the exec's own group: the one the record names, under
            // capsule's folder, and capsule (outside it) lived on to write the record
            let groups = l["cgroups"].as_array().expect("cgroups");
            let mem = groups
                .iter()
                .find(|g| g["controllers"].to_string().contains("memory"))
                .unwrap_or_else(|| panic!("no memory group: {rec}"));
            assert!(mem["dir"].as_str().unwrap().contains("/capsule/"), "{rec}");
        }
    });
}

#[test]
fn explicit_limits_that_cannot_be_enforced_still_refuse() {
    each_runner(|r| {
        if cgroups_for(r) {
            return;
        }
        let c = Capsule::new(r);
        for flag in [["--memory", "64M"], ["--pids", "64"]] {
            let o = exec_defaults(&c, "", false, &flag, &["true"]);
            assert_eq!(code(&o), 125, "{flag:?}: {}", err(&o));
            assert!(
                err(&o).contains(&format!("{} cannot be enforced here", flag[0]))
                    && err(&o).contains("nothing ran"),
                "{}",
                err(&o)
            );
        }
        // and with no flag, the same exec runs
        ok(
            &exec_defaults(&c, "", false, &[], &["true"]),
            "true with the defaults",
        );
    });
}

#[test]
fn isolation_shows_the_defaults_and_where_they_hold() {
    each_runner(|r| {
        let c = Capsule::new(r);
        let mut cmd = c.capsule();
        cmd.env("CAPSULE_OWN_DEFAULTS", "pids=64,memory=64M")
            .args(["isolation", "--json"]);
        let o = bounded(&mut cmd, 30);
        ok(&o, "capsule isolation --json");
        let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
        let d = &v["capsule_default_limits"];
        assert_eq!(d["memory"]["value"], 64 << 20, "{d}");
        assert_eq!(d["memory"]["enforced"], cgroups_for(r), "{d}");
        assert_eq!(d["pids"]["value"], 64, "{d}");
        assert_eq!(d["pids"]["enforced"], true, "{d}");
        let by = d["pids"]["by"].as_str().unwrap();
        assert_eq!(by == "cgroup", cgroups_for(r), "{d}");
        assert_eq!(d["disk_reserve"], "5%,2G", "{d}");
    });
}

//! cgroup v2 against a fake cgroupfs: a temporary folder laid out as systemd delegates a
//! user's subtree on a v2 host (`user@1000.service` and below owned by the user, `cpu
//! memory pids` enabled for the children of each delegated level), with the interface
//! files a group has (`cgroup.controllers`, `cgroup.subtree_control`, `memory.max`,
//! `pids.max`, `cpu.max`, `memory.swap.max`, `memory.events`, `pids.events`,
//! `cgroup.procs`). This machine runs cgroup v1 (its v2 mount holds only hugetlb), so what
//! the kernel itself does on v2 (a `mkdir` making the interface files, enabling
//! controllers, refusing a process in an inner group, counting) is not exercised here:
//! these tests check what capsule reads and writes.

use super::*;

const USER_SCOPE: &str = "/user.slice/user-1000.slice/user@1000.service/app.slice/term.scope";

/// The files the kernel gives a v2 group, made in `dir` with the values of a new group.
fn kernel_group(dir: &Path, controllers: &str, subtree: &str) {
    std::fs::create_dir_all(dir).unwrap();
    for (f, v) in [
        ("cgroup.controllers", controllers),
        ("cgroup.subtree_control", subtree),
        ("cgroup.procs", ""),
        ("memory.max", "max"),
        ("memory.swap.max", "max"),
        ("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"),
        ("pids.max", "max"),
        ("pids.events", "max 0\n"),
        ("cpu.max", "max 100000"),
    ] {
        std::fs::write(dir.join(f), format!("{v}\n")).unwrap();
    }
}

/// A v2 host's hierarchy at `root`, with the caller in a scope of its user's delegated
/// subtree: (mountinfo, /proc/self/cgroup) as this process would read them.
fn delegated(root: &Path) -> (Vec<(String, PathBuf)>, Vec<(String, String)>) {
    let all = "cpuset cpu io memory hugetlb pids rdma misc";
    kernel_group(root, all, "cpu io memory pids");
    let mut dir = root.to_path_buf();
    for level in USER_SCOPE.trim_start_matches('/').split('/') {
        dir = dir.join(level);
        let leaf = level.ends_with(".scope");
        kernel_group(
            &dir,
            "cpu memory pids",
            if leaf { "" } else { "cpu memory pids" },
        );
    }
    let mountinfo = format!(
        "25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
         36 25 0:30 / {} rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
        root.display()
    );
    let own = format!("0::{USER_SCOPE}\n");
    (parse_mounts(&mountinfo), parse_own(&own))
}

fn app_slice(root: &Path) -> PathBuf {
    under(root, USER_SCOPE).parent().unwrap().to_path_buf()
}

#[test]
fn a_v2_hosts_mountinfo_and_own_group_are_read() {
    let d = tempfile::tempdir().unwrap();
    let (mounts, own) = delegated(d.path());
    assert_eq!(mounts, vec![(String::new(), d.path().to_path_buf())]);
    assert_eq!(own, vec![(String::new(), USER_SCOPE.to_string())]);
    // a hybrid host: v1 controllers by name, the unified hierarchy as ""
    let m = parse_mounts(
        "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
         31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
         32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
    );
    assert_eq!(
        m,
        vec![
            (String::new(), PathBuf::from("/sys/fs/cgroup/unified")),
            ("memory".into(), PathBuf::from("/sys/fs/cgroup/memory")),
            ("cpu".into(), PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")),
        ]
    );
    let o = parse_own("0::/user.slice\n4:memory:/m\n3:cpu,cpuacct:/c\n");
    assert_eq!(
        o,
        vec![
            (String::new(), "/user.slice".into()),
            ("memory".into(), "/m".into()),
            ("cpu".into(), "/c".into()),
        ]
    );
}

#[test]
fn a_delegated_subtree_gets_capsules_folder_next_to_the_callers_group() {
    let d = tempfile::tempdir().unwrap();
    let (mounts, own) = delegated(d.path());
    let b = bases_in(&["memory", "pids"], &mounts, &own).unwrap();
    assert_eq!(b.len(), 1, "{b:?}");
    // a process sits only in a leaf: the folder goes next to its scope, not under it
    assert_eq!(b[0].dir, app_slice(d.path()).join("capsule"));
    assert_eq!(b[0].version, Version::V2);
    assert_eq!(b[0].controllers, ["memory", "pids"]);
    // and the controllers are enabled for the exec groups it will hold
    let on = std::fs::read_to_string(b[0].dir.join("cgroup.subtree_control")).unwrap();
    assert_eq!(on, "+memory +pids");
    // root in the root cgroup: the folder is in the root
    let own_root = parse_own("0::/\n");
    let b = bases_in(&["pids"], &mounts, &own_root).unwrap();
    assert_eq!(b[0].dir, d.path().join("capsule"));
}

#[test]
fn a_subtree_without_the_controllers_refuses_naming_why() {
    let d = tempfile::tempdir().unwrap();
    let (mounts, own) = delegated(d.path());
    let parent = app_slice(d.path());
    // not delegated: the parent has the controller but does not enable it for children
    std::fs::write(parent.join("cgroup.subtree_control"), "pids\n").unwrap();
    let e = bases_in(&["memory", "pids"], &mounts, &own).unwrap_err();
    assert_eq!(e.flag, "--memory");
    assert!(
        e.why.contains(&format!(
            "the memory controller is not delegated to {}",
            parent.display()
        )),
        "{e}"
    );
    assert!(!parent.join("capsule").exists(), "nothing made");
    // this machine's v2 mount: only hugetlb there
    std::fs::write(parent.join("cgroup.controllers"), "hugetlb\n").unwrap();
    std::fs::write(parent.join("cgroup.subtree_control"), "hugetlb\n").unwrap();
    let e = bases_in(&["pids"], &mounts, &own).unwrap_err();
    assert_eq!(e.flag, "--pids");
    assert!(
        e.why
            .contains("no cgroup hierarchy of this machine gives this process the pids controller"),
        "{e}"
    );
    // no v2 mount at all
    let e = bases_in(&["memory"], &[], &own).unwrap_err();
    assert!(e.why.contains("no cgroup hierarchy"), "{e}");
}

#[test]
fn a_controller_on_a_v1_hierarchy_is_taken_there_the_others_on_v2() {
    let d = tempfile::tempdir().unwrap();
    let (mut mounts, mut own) = delegated(&d.path().join("unified"));
    let v1 = d.path().join("memory");
    std::fs::create_dir_all(v1.join("user.slice")).unwrap();
    mounts.push(("memory".into(), v1.clone()));
    own.push(("memory".into(), "/user.slice".into()));
    let b = bases_in(&["memory", "pids"], &mounts, &own).unwrap();
    assert_eq!(b.len(), 2, "{b:?}");
    assert_eq!(
        (b[0].version, b[0].controllers.as_slice()),
        (Version::V1, &["memory"][..])
    );
    assert_eq!(b[0].dir, v1.join("user.slice/capsule"));
    assert_eq!(
        (b[1].version, b[1].controllers.as_slice()),
        (Version::V2, &["pids"][..])
    );
}

#[test]
fn limits_are_written_into_v2_files_and_the_others_reset() {
    let d = tempfile::tempdir().unwrap();
    let g = d.path().join("exec-7");
    kernel_group(&g, "memory pids cpu", "");
    // a group used before holds its last exec's limits
    std::fs::write(g.join("cpu.max"), "150000 100000").unwrap();
    let limits = Limits {
        memory: Some(64 << 20),
        pids: Some(64),
        ..Limits::default()
    };
    let group = group_at(&g, &limits);
    assert_eq!(group.version, Version::V2);
    assert_eq!(group.controllers, ["memory", "pids"]);
    apply(&limits, &group).unwrap();
    let read = |f: &str| std::fs::read_to_string(g.join(f)).unwrap();
    assert_eq!(read("memory.max"), (64u64 << 20).to_string());
    assert_eq!(read("memory.swap.max"), "0", "no swap beyond the limit");
    assert_eq!(read("pids.max"), "64");
    assert_eq!(read("cpu.max"), "max", "a limit not asked for is lifted");
    // --cpus 1.5: a quota of 150 ms per 100 ms period
    let cpus = Limits {
        cpus_milli: Some(1500),
        ..Limits::default()
    };
    apply(&cpus, &group_at(&g, &cpus)).unwrap();
    assert_eq!(read("cpu.max"), "150000 100000");
    assert_eq!(
        (read("memory.max"), read("pids.max")),
        ("max".into(), "max".into())
    );
    // a read-only interface file (not delegated to this user) is an error naming it
    let ro = d.path().join("ro");
    kernel_group(&ro, "memory", "");
    std::fs::remove_file(ro.join("memory.max")).unwrap();
    std::fs::create_dir(ro.join("memory.max")).unwrap();
    let e = apply(
        &limits,
        &Group {
            controllers: vec!["memory"],
            ..group_at(&ro, &limits)
        },
    )
    .unwrap_err();
    assert_eq!(e.flag, "--memory");
    assert!(
        e.why.contains(&ro.join("memory.max").display().to_string()),
        "{e}"
    );
}

#[test]
fn an_exec_claims_a_spare_v2_group_and_moves_itself_by_cgroup_procs() {
    let d = tempfile::tempdir().unwrap();
    let base = d.path().join("capsule");
    kernel_group(&base.join("spare-41"), "memory pids", "");
    let limits = Limits {
        pids: Some(100),
        ..Limits::default()
    };
    ensure(&base.join("exec-7"), &limits).unwrap();
    assert!(!base.join("spare-41").exists(), "the spare was renamed");
    assert_eq!(
        std::fs::read_to_string(base.join("exec-7/pids.max")).unwrap(),
        "100"
    );
    // a single-threaded process moves itself in by cgroup.procs on v2 (tasks on v1)
    assert_eq!(spares::move_self_file(Version::V2), "cgroup.procs");
    let moves = open_self_moves(&[base.join("exec-7/cgroup.procs")], &limits).unwrap();
    use std::os::fd::AsRawFd;
    move_self(&[moves[0].as_raw_fd()]).unwrap();
    std::mem::forget(moves); // move_self closed them
    assert_eq!(
        std::fs::read_to_string(base.join("exec-7/cgroup.procs")).unwrap(),
        "0"
    );
    // a warm spare's group whose name carries the limits' tag is taken as it is
    let tag = spares::limits_tag(&limits);
    let warm = base.join(format!("warm-00-{tag}"));
    kernel_group(&warm, "memory pids", "");
    let g = group_at(&warm, &limits);
    fit(std::slice::from_ref(&g), &limits).unwrap();
    assert_eq!(
        std::fs::read_to_string(warm.join("pids.max")).unwrap(),
        "max\n",
        "nothing written"
    );
    let other = Limits {
        pids: Some(50),
        ..Limits::default()
    };
    fit(std::slice::from_ref(&g), &other).unwrap();
    assert_eq!(
        std::fs::read_to_string(warm.join("pids.max")).unwrap(),
        "50"
    );
}

#[test]
fn what_a_v2_group_reached_is_read_from_its_events() {
    let d = tempfile::tempdir().unwrap();
    let g = d.path().join("exec-7");
    kernel_group(&g, "memory pids", "");
    let limits = Limits {
        memory: Some(64 << 20),
        pids: Some(64),
        ..Limits::default()
    };
    let mut group = group_at(&g, &limits);
    // the counters when this exec claimed the group (an earlier exec's kill was counted)
    std::fs::write(g.join("memory.events"), "oom 1\noom_kill 1\n").unwrap();
    group.before = vec![("memory", 1), ("pids", 0)];
    let cg = ExecCgroups::found(vec![group.clone()], &limits);
    assert_eq!(
        cg.reached(),
        Vec::<String>::new(),
        "the earlier exec's kill is not this one's"
    );
    std::fs::write(g.join("memory.events"), "oom 2\noom_kill 2\n").unwrap();
    std::fs::write(g.join("pids.events"), "max 5\n").unwrap();
    assert_eq!(
        cg.reached(),
        [
            "killed: memory limit 64 MiB reached",
            "pids limit 64 reached: 5 process creations refused"
        ]
    );
}

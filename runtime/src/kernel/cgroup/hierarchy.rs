//! The host's cgroup layout, read the same way for both front ends: the hierarchies
//! mounted ([`parse_hierarchies`]: each v1 one with its controllers, the v2 one with
//! none, from `mountinfo`, its octal escapes undone), whether `/sys/fs/cgroup` is the
//! unified hierarchy ([`unified`]), and the groups a process is in ([`parse_own`], from
//! `/proc/<pid>/cgroup`).

use std::path::PathBuf;

/// One cgroup hierarchy of the host: where it is mounted and which controllers it has
/// (none listed: the unified hierarchy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    pub mount: PathBuf,
    pub controllers: Vec<String>,
}

/// `statfs` magic of a cgroup2 filesystem.
const CGROUP2_SUPER_MAGIC: libc::c_long = 0x6367_7270;

/// Is this host's `/sys/fs/cgroup` the unified (v2) hierarchy?
pub fn unified() -> bool {
    // SAFETY: statfs into a zeroed struct.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        libc::statfs(c"/sys/fs/cgroup".as_ptr(), &mut s) == 0
            && s.f_type as libc::c_long == CGROUP2_SUPER_MAGIC
    }
}

/// Every cgroup hierarchy in the text of a `mountinfo`, in the order mounted: a `cgroup2`
/// mount with no controllers, a `cgroup` (v1) one with the controllers its super options
/// name (a v1 mount naming none is left out: it can hold no limit).
pub fn parse_hierarchies(text: &str) -> Vec<Hierarchy> {
    let mut out = Vec::new();
    for line in text.lines() {
        // ... mount_point ... - fstype source super_options
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mut r = right.split(' ');
        let fstype = r.next().unwrap_or("");
        let opts = r.nth(1).unwrap_or("");
        let Some(dir) = left.split(' ').nth(4).filter(|d| !d.is_empty()) else {
            continue;
        };
        let mount = PathBuf::from(unescape(dir));
        match fstype {
            "cgroup2" => out.push(Hierarchy {
                mount,
                controllers: vec![],
            }),
            "cgroup" => {
                let controllers: Vec<String> = opts
                    .split(',')
                    .filter(|o| {
                        !matches!(*o, "rw" | "ro" | "clone_children" | "noprefix" | "")
                            && !o.starts_with("release_agent")
                    })
                    .map(String::from)
                    .collect();
                if !controllers.is_empty() {
                    out.push(Hierarchy { mount, controllers });
                }
            }
            _ => {}
        }
    }
    out
}

/// The hierarchies a container's cgroups are made in: the v2 root on a unified host,
/// else every v1 hierarchy mounted.
pub fn hierarchies() -> Vec<Hierarchy> {
    if unified() {
        return vec![Hierarchy {
            mount: "/sys/fs/cgroup".into(),
            controllers: vec![],
        }];
    }
    parse_hierarchies(&read_proc("/proc/self/mountinfo"))
        .into_iter()
        .filter(|h| !h.controllers.is_empty())
        .collect()
}

/// The lines of a `/proc/<pid>/cgroup`: the controllers of each hierarchy (none: v2)
/// and the process's group in it (absolute within the hierarchy).
pub fn parse_own(text: &str) -> Vec<(Vec<&str>, &str)> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.splitn(3, ':');
            let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
            Some((ctrls.split(',').filter(|c| !c.is_empty()).collect(), path))
        })
        .collect()
}

/// The cgroup of this process in hierarchy `h` (from `/proc/self/cgroup`), relative to
/// the hierarchy's root.
pub fn own_path(h: &Hierarchy) -> Option<PathBuf> {
    let text = read_proc("/proc/self/cgroup");
    let mut want: Vec<&str> = h.controllers.iter().map(String::as_str).collect();
    want.sort_unstable();
    parse_own(&text).into_iter().find_map(|(mut have, path)| {
        have.sort_unstable();
        (have == want).then(|| PathBuf::from(path.trim_start_matches('/')))
    })
}

/// mountinfo's octal escapes (`\040` for a space).
pub(super) fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Some(n) = s
                .get(i + 1..i + 4)
                .and_then(|o| u8::from_str_radix(o, 8).ok())
            {
                out.push(n);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A small file of `/proc` in one or two reads (`read_to_string` starts at 32 bytes).
pub(crate) fn read_proc(path: &str) -> String {
    let mut buf = Vec::with_capacity(16 << 10);
    let _ =
        std::fs::File::open(path).and_then(|mut f| std::io::Read::read_to_end(&mut f, &mut buf));
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hierarchy_is_read_with_its_controllers() {
        let h = parse_hierarchies(
            "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
             31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
             32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
             33 25 0:29 / /sys/fs/cgroup/a\\040b rw - cgroup cgroup rw,clone_children,release_agent=/x,pids\n\
             34 25 0:30 / /sys/fs/cgroup/none rw - cgroup cgroup rw\n\
             35 25 8:1 / /home rw - ext4 /dev/sda1 rw\n",
        );
        let got: Vec<(&str, Vec<&str>)> = h
            .iter()
            .map(|h| {
                (
                    h.mount.to_str().unwrap(),
                    h.controllers.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("/sys/fs/cgroup/unified", vec![]),
                ("/sys/fs/cgroup/memory", vec!["memory"]),
                ("/sys/fs/cgroup/cpu,cpuacct", vec!["cpu", "cpuacct"]),
                ("/sys/fs/cgroup/a b", vec!["pids"]),
            ]
        );
        let own = parse_own("0::/user.slice\n4:memory:/m\n3:cpu,cpuacct:/c\nbad\n");
        assert_eq!(
            own,
            vec![
                (vec![], "/user.slice"),
                (vec!["memory"], "/m"),
                (vec!["cpu", "cpuacct"], "/c"),
            ]
        );
    }
}

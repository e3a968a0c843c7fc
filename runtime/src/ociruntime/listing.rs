//! `list` and `ps`, printed as runc prints them: `list`'s table (Go's tabwriter layout:
//! columns at least 12 wide, 3 spaces of padding), `-q` (the ids) and `--format json`
//! (the states in runc's order, one line); `ps`'s table is the host's `ps` (its options,
//! default `-ef`) with only the lines of the container's processes kept, `--format json`
//! their pids. What a container's processes named themselves reaches the terminal only
//! through `ps` (which escapes it) and then with control characters escaped again.

use super::state::{self, ContainerState};
use std::path::Path;

/// The containers under `root`, by id.
fn containers(root: &Path) -> Vec<(ContainerState, u32)> {
    let mut ids: Vec<(String, u32)> = std::fs::read_dir(root)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| {
                    use std::os::unix::fs::MetadataExt;
                    let uid = e.metadata().ok()?.uid();
                    Some((e.file_name().to_str()?.to_string(), uid))
                })
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids.into_iter()
        .filter_map(|(id, uid)| {
            let s = state::load(root, &id).ok()?;
            Some((s.container_state(root), uid))
        })
        .collect()
}

/// The name of `uid` in the host's `/etc/passwd`, or `#uid` (as runc shows it).
fn owner(uid: u32, passwd: &str) -> String {
    passwd
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
        })
        .unwrap_or_else(|| format!("#{uid}"))
}

/// Go's `tabwriter.NewWriter(w, 12, 1, 3, ' ', 0)` over rows of cells: every cell but
/// the last of a row padded to its column's width.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut width = vec![0usize; cols];
    for r in rows {
        for (j, c) in r.iter().enumerate().take(r.len().saturating_sub(1)) {
            width[j] = width[j].max((c.chars().count() + 3).max(12));
        }
    }
    let mut out = String::new();
    for r in rows {
        for (j, c) in r.iter().enumerate() {
            out.push_str(c);
            if j + 1 < r.len() {
                let pad = width[j].saturating_sub(c.chars().count());
                out.push_str(&" ".repeat(pad));
            }
        }
        out.push('\n');
    }
    out
}

pub fn list(root: &Path, json: bool, quiet: bool) -> Result<(), String> {
    let all = containers(root);
    if quiet {
        for (s, _) in &all {
            println!("{}", s.id);
        }
        return Ok(());
    }
    if json {
        let states: Vec<&ContainerState> = all.iter().map(|(s, _)| s).collect();
        // Go's encoder writes `null` for no containers
        let text = if states.is_empty() {
            "null".to_string()
        } else {
            serde_json::to_string(&states).map_err(|e| e.to_string())?
        };
        println!("{text}");
        return Ok(());
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let mut rows = vec![["ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER"]
        .map(String::from)
        .to_vec()];
    for (s, uid) in &all {
        rows.push(vec![
            s.id.clone(),
            s.pid.to_string(),
            s.status.to_string(),
            s.bundle.display().to_string(),
            s.created.clone(),
            owner(*uid, &passwd),
        ]);
    }
    print!("{}", table(&rows));
    Ok(())
}

/// The container's processes: every pid in its cgroups (sub-cgroups too) but capsule's
/// helpers, or its init where it has none.
pub fn pids(root: &Path, s: &state::Saved) -> Vec<libc::pid_t> {
    let mut pids = super::detached::container_pids(&s.cgroups, &state::dir(root, &s.id));
    if pids.is_empty() && s.alive() {
        pids.push(s.pid);
    }
    pids
}

pub fn ps(root: &Path, id: &str, json: bool, args: &[String]) -> Result<(), String> {
    let s = state::load(root, id)?;
    let pids = pids(root, &s);
    if json {
        let text = if pids.is_empty() {
            "null".to_string()
        } else {
            serde_json::to_string(&pids).map_err(|e| e.to_string())?
        };
        println!("{text}");
        return Ok(());
    }
    let args: Vec<String> = if args.is_empty() {
        vec!["-ef".into()]
    } else {
        args.to_vec()
    };
    let out = std::process::Command::new("ps")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("running ps: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "ps {}: {} {}",
            args.join(" "),
            out.status,
            capsule_bundle::escape::text_line(&String::from_utf8_lossy(&out.stderr))
        ));
    }
    print!("{}", filter_ps(&text, &pids)?);
    Ok(())
}

/// `ps`'s header and the lines whose PID column is one of `pids`, control characters
/// escaped.
pub fn filter_ps(text: &str, pids: &[libc::pid_t]) -> Result<String, String> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("");
    let col = header
        .split_whitespace()
        .position(|t| t == "PID")
        .ok_or("couldn't find PID field in ps output")?;
    let mut out = format!("{}\n", capsule_bundle::escape::text_line(header));
    for l in lines.filter(|l| !l.is_empty()) {
        let p: libc::pid_t = l
            .split_whitespace()
            .nth(col)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                format!(
                    "unable to parse pid in {:?}",
                    capsule_bundle::escape::text_line(l)
                )
            })?;
        if pids.contains(&p) {
            out.push_str(&capsule_bundle::escape::text_line(l));
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laid_out_as_gos_tabwriter() {
        let rows = vec![
            vec!["ID".into(), "PID".into(), "STATUS".into(), "OWNER".into()],
            vec![
                "test_box1".into(),
                "4242".into(),
                "running".into(),
                "root".into(),
            ],
            vec![
                "a-much-longer-id".into(),
                "7".into(),
                "stopped".into(),
                "#1000".into(),
            ],
        ];
        assert_eq!(
            table(&rows),
            "ID                 PID         STATUS      OWNER\n\
             test_box1          4242        running     root\n\
             a-much-longer-id   7           stopped     #1000\n"
        );
    }

    #[test]
    fn owners_by_name_or_number() {
        let passwd = "root:x:0:0:root:/root:/bin/sh\nci:x:1001:1001::/home/ci:/bin/sh\n";
        assert_eq!(owner(0, passwd), "root");
        assert_eq!(owner(1001, passwd), "ci");
        assert_eq!(owner(4242, passwd), "#4242");
    }

    #[test]
    fn ps_keeps_the_containers_lines_escaped() {
        let text = "UID          PID    PPID  C STIME TTY          TIME CMD\n\
                    root           1       0  0 18:11 ?        00:00:01 /sbin/init\n\
                    root        4242       1  0 18:12 ?        00:00:00 sleep \x1b[2Jx\n";
        let out = filter_ps(text, &[4242]).unwrap();
        assert!(out.starts_with("UID          PID"));
        assert!(!out.contains("/sbin/init"));
        assert!(out.contains("4242") && !out.contains('\x1b'), "{out:?}");
        assert!(filter_ps("USER COMMAND\nroot x\n", &[1]).is_err());
    }
}

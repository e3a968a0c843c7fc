//! Red team: the records are bounded within one exec (or one container run), and nothing
//! that matters is dropped. One exec adds 100,000 files to its workspace and is refused
//! 100,000 writes to distinct paths (after one early refusal of its own): its record
//! line stays within the room kept for it (256 KiB, so `events.jsonl` never passes its
//! cap), `refusals.jsonl` grows by at most 256 KiB, and both keep the first and the last
//! entries with the counts of what was left out between. A container refused 20,000
//! distinct writes keeps containerd's `--log` within its bound the same way.
//!
//! Calibration, in the same test: what the exec did, listed whole, is far larger than
//! those bounds (an unbounded record would pass them).

use capsule_e2e::oci::{bundle, runc_link};
use capsule_e2e::sandbox::Capsule;
use capsule_e2e::*;

const N: usize = 100_000;
/// The room kept for one record (the record's own bound).
const RECORD_ROOM: u64 = 256 << 10;
/// What one exec appends to refusals.jsonl at most.
const REFUSALS_APPEND: u64 = 256 << 10;

/// The exec: one early refusal, `N` new files, `N` refused writes, in one process.
fn script(n: usize) -> String {
    format!(
        r#"
import os
def refuse(p):
    try:
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o644))
    except OSError:
        pass
refuse("/usr/early-refusal")
os.makedirs("gen", exist_ok=True)
for i in range({n}):
    os.close(os.open("gen/f%06d" % i, os.O_WRONLY | os.O_CREAT, 0o644))
for i in range({n}):
    refuse("/usr/flood-%06d" % i)
print("done")
"#
    )
}

#[test]
fn one_exec_of_100k_paths_keeps_its_records_bounded_and_their_ends() {
    for (k, r) in runners().into_iter().enumerate() {
        // 100k paths as the first runner; the other (the same code, rootless) with fewer,
        // which pass the bounds as well, to keep the suite's time
        let n = if k == 0 { N } else { N / 5 };
        let label = r.label().to_string();
        let c = Capsule::new(&r);
        let refusals_log = c.bundle.join("refusals.jsonl");
        let o = c.exec_with(&["--quiet-refusals"], &["python3", "-c", &script(n)]);
        assert_eq!(stdout(&o), "done\n", "[{label}] {}", stderr(&o));
        // calibration: listed whole, the exec's paths are far past the bounds
        let whole: u64 = (0..n)
            .map(|i| format!("\"gen/f{i:06}\",").len() as u64)
            .sum::<u64>()
            + (0..n)
                .map(|i| {
                    format!("{{\"kind\":\"write\",\"target\":\"/usr/flood-{i:06}\"}},").len() as u64
                })
                .sum::<u64>();
        assert!(
            whole > 4 * RECORD_ROOM,
            "calibration: the lists are {whole} bytes"
        );
        // the record: within its room, first and last of each list, the counts between
        let events = std::fs::read_to_string(c.bundle.join("events.jsonl")).unwrap();
        let line = events.lines().last().unwrap();
        assert!(
            line.len() as u64 <= RECORD_ROOM,
            "[{label}] the record is {} bytes",
            line.len()
        );
        let rec: serde_json::Value = serde_json::from_str(line).unwrap();
        let added = rec["changes"]["added"].as_array().unwrap();
        assert_eq!(added[0], "gen/f000000", "[{label}]");
        assert_eq!(added.last().unwrap(), &format!("gen/f{:06}", n - 1));
        let om = &rec["changes"]["omitted"]["added"];
        assert_eq!(
            om["count"].as_u64().unwrap() as usize + added.len(),
            n,
            "[{label}] {om}"
        );
        let refused = rec["refusals"].as_array().unwrap();
        assert_eq!(
            refused[0]["target"], "/usr/early-refusal",
            "[{label}] the early refusal is hidden by the flood"
        );
        assert_eq!(
            refused.last().unwrap()["target"],
            format!("/usr/flood-{:06}", n - 1),
            "[{label}] the last refusal is not kept"
        );
        let dropped = rec["refusals_dropped"].as_u64().unwrap();
        let kept: u64 = refused.iter().map(|x| x["count"].as_u64().unwrap()).sum();
        assert_eq!(kept + dropped, n as u64 + 1, "[{label}] counts");
        assert!(
            rec["refusals_dropped_after"].as_u64().is_some(),
            "[{label}]"
        );
        // refusals.jsonl: one append, bounded, the first and the last, the count between
        let size = std::fs::metadata(&refusals_log).unwrap().len();
        assert!(
            size <= REFUSALS_APPEND,
            "[{label}] refusals.jsonl is {size} bytes"
        );
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&refusals_log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["target"], "/usr/early-refusal", "[{label}]");
        assert_eq!(
            lines.last().unwrap()["target"],
            format!("/usr/flood-{:06}", n - 1),
            "[{label}]"
        );
        let logged: u64 = lines
            .iter()
            .map(|l| l["count"].as_u64().unwrap() + l["omitted_before"].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(logged, n as u64 + 1, "[{label}] counts in refusals.jsonl");
        // `capsule refusals` reads it
        let o = bounded(c.capsule().args(["refusals", "t"]), 60);
        assert_ok(&o, "refusals");
    }
}

#[test]
fn one_container_keeps_its_log_bounded_and_its_ends() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: capsule-runc needs root");
        return;
    }
    let t = scratch();
    let dir = t.path();
    let rc = runc_link(dir);
    // 20,000 refused writes to distinct paths of a read-only root, from one shell (a
    // redirection is no new process), after an early one
    let script = "echo > /early-refusal; i=0; while [ $i -lt 20000 ]; do echo > /flood-$i; i=$((i+1)); done; echo done";
    let b = bundle(dir, "logflood", &["sh", "-c", script], |c| {
        c["linux"]["seccomp"] = serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW"});
    });
    let log = dir.join("log.json");
    let o = std::process::Command::new(&rc)
        .arg("--root")
        .arg(dir.join("runc-root"))
        .arg("--log")
        .arg(&log)
        .args(["--log-format", "json", "run", "--bundle"])
        .arg(&b)
        .arg("logflood")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(stdout(&o).contains("done"), "{}", stderr(&o));
    let _ = std::process::Command::new(&rc)
        .arg("--root")
        .arg(dir.join("runc-root"))
        .args(["delete", "-f", "logflood"])
        .output();
    // calibration: said whole, one line per refusal is far past the log's bound
    assert!(20_000 * 100 > 4 * (256 << 10), "calibration");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.len() <= (256 << 10) + 8192,
        "the log is {} bytes",
        text.len()
    );
    let msgs: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["msg"].as_str().map(String::from))
        .filter(|m| m.contains("refused"))
        .collect();
    assert!(
        msgs.first().is_some_and(|m| m.contains("/early-refusal")),
        "the early refusal is not the first: {:?}",
        msgs.first()
    );
    assert!(
        msgs.iter().any(|m| m.contains("/flood-19999")),
        "the last refusal is not in the log"
    );
    let summary = msgs.last().unwrap();
    assert!(
        summary.contains("20001 refused writes") && summary.contains("more not listed"),
        "{summary}"
    );
}

//! The trace sink: every decision, allowed or denied, appended as one `agent.launch.policy`
//! event line of JSON.
//!
//! The sink is the file named by `--trace FILE`, else by the environment variable
//! `CAPSULE_TRACE` (when set and not empty). The file is opened with `O_APPEND` (created
//! with mode 0600 when missing) and each event is written with one `write` call of one whole
//! line, so concurrent writers do not interleave within a line.
//!
//! Event: `{"event":"agent.launch.policy","time":"<RFC 3339 UTC>", …the decision record…}`.

use crate::Decision;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The environment variable naming the trace file.
pub const TRACE_ENV: &str = "CAPSULE_TRACE";
/// The event name of each line.
pub const EVENT: &str = "agent.launch.policy";

/// The trace file: `flag` (from `--trace`) if given, else `$CAPSULE_TRACE` if set.
pub fn trace_path(flag: Option<&Path>) -> Option<PathBuf> {
    flag.map(Path::to_path_buf).or_else(|| {
        std::env::var_os(TRACE_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}

/// The event line for `decision` (without the trailing newline).
pub fn event_json(decision: &Decision) -> String {
    let mut v = serde_json::to_value(decision).unwrap_or(serde_json::Value::Null);
    let mut obj = serde_json::Map::new();
    obj.insert("event".into(), EVENT.into());
    obj.insert("time".into(), now_rfc3339().into());
    if let serde_json::Value::Object(m) = &mut v {
        obj.append(m);
    }
    serde_json::Value::Object(obj).to_string()
}

/// Append `decision` to the trace file at `path` as one event line.
pub fn append_trace(path: &Path, decision: &Decision) -> std::io::Result<()> {
    let mut line = event_json(decision);
    line.push('\n');
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    let n = f.write(line.as_bytes())?;
    if n != line.len() {
        // a short write on a regular file means the disk is full or similar; finish the line
        f.write_all(&line.as_bytes()[n..])?;
    }
    Ok(())
}

/// Current time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn now_rfc3339() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format_unix(d.as_secs() as i64, d.subsec_millis())
}

fn format_unix(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // civil from days (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = if month <= 2 { y + 1 } else { y };
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn unix_times_format() {
        assert_eq!(super::format_unix(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::format_unix(951_827_696, 5),
            "2000-02-29T12:34:56.005Z"
        );
        assert_eq!(
            super::format_unix(1_798_761_599, 999),
            "2026-12-31T23:59:59.999Z"
        );
    }
}

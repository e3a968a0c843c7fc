//! The parts of `capsule exec`'s command line that a program driving it (Kitsoki's agent
//! runtime) needs beyond the operator's flags: variables set by value (`--env`,
//! `--env-file`, read here into the library's `ExecOptions::env`) and the exec record
//! written to a file or pipe of the caller's (`--record-to`).

use crate::exit::CliError;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

/// The most `--env-file` may hold: an environment, not a data channel.
const MAX_ENV_FILE: u64 = 1 << 20;

fn name_ok(n: &[u8]) -> bool {
    !n.is_empty() && !n.contains(&b'=') && !n.contains(&0)
}

fn split(entry: Vec<u8>, what: &str) -> Result<(OsString, OsString), CliError> {
    let Some(eq) = entry.iter().position(|&b| b == b'=') else {
        return Err(CliError::failure(format!(
            "{what}: {:?} is not NAME=VALUE",
            String::from_utf8_lossy(&entry)
        )));
    };
    let (n, v) = entry.split_at(eq);
    if !name_ok(n) {
        return Err(CliError::failure(format!(
            "{what}: {:?} is not a variable name",
            String::from_utf8_lossy(n)
        )));
    }
    Ok((
        OsString::from_vec(n.to_vec()),
        OsString::from_vec(v[1..].to_vec()),
    ))
}

/// The variables of `--env` and `--env-file`, in that order (a later one of the same name
/// wins). Errors name the flag, never a value.
pub(super) fn read(
    env: &[String],
    file: Option<&Path>,
) -> Result<Vec<(OsString, OsString)>, CliError> {
    let mut out = Vec::new();
    for e in env {
        let (n, v) = split(e.clone().into_bytes(), "--env")?;
        out.push((n, v));
    }
    if let Some(f) = file {
        use std::io::Read;
        let what = format!("--env-file {}", f.display());
        let mut buf = Vec::new();
        std::fs::File::open(f)
            .and_then(|h| h.take(MAX_ENV_FILE + 1).read_to_end(&mut buf))
            .map_err(|e| CliError::failure(format!("{what}: {e}")))?;
        if buf.len() as u64 > MAX_ENV_FILE {
            return Err(CliError::failure(format!("{what}: larger than 1 MiB")));
        }
        for entry in buf.split(|&b| b == 0).filter(|e| !e.is_empty()) {
            let (n, v) = split(entry.to_vec(), &what).map_err(|_| {
                CliError::failure(format!("{what}: an entry is not NAME=VALUE ended by NUL"))
            })?;
            out.push((n, v));
        }
    }
    Ok(out)
}

/// Write the record as one JSON line to `f`; a failure is said on stderr (the command has
/// run: its status stays what `exec` returns).
pub(super) fn write_record(f: &Path, rec: &impl serde::Serialize) {
    use std::io::Write;
    let line = match serde_json::to_string(rec) {
        Ok(l) => l + "\n",
        Err(e) => {
            eprintln!("capsule: --record-to: cannot serialize the record: {e}");
            return;
        }
    };
    let r = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(f)
        .and_then(|mut h| h.write_all(line.as_bytes()));
    if let Err(e) = r {
        eprintln!("capsule: --record-to {}: {e}", f.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_flags_and_file() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("env");
        std::fs::write(&f, b"A=1\0B=two\nlines\0A=3\0").unwrap();
        let v = read(&["C=x=y".into(), "D=".into()], Some(&f)).unwrap();
        let s: Vec<(String, String)> = v
            .iter()
            .map(|(k, v)| (k.to_string_lossy().into(), v.to_string_lossy().into()))
            .collect();
        assert_eq!(
            s,
            [
                ("C", "x=y"),
                ("D", ""),
                ("A", "1"),
                ("B", "two\nlines"),
                ("A", "3")
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        let mut env: Vec<(OsString, OsString)> =
            vec![("A".into(), "0".into()), ("Z".into(), "z".into())];
        crate::exec::set_env(&mut env, &v);
        assert_eq!(env.iter().filter(|(k, _)| k == "A").count(), 1);
        assert!(env.contains(&("A".into(), "3".into())));
        for bad in ["NOVALUE", "=x", ""] {
            assert!(read(&[bad.into()], None).is_err(), "{bad:?}");
        }
        std::fs::write(&f, b"SECRET-no-equals\0").unwrap();
        let e = read(&[], Some(&f)).unwrap_err();
        assert!(!e.message.contains("SECRET"), "{}", e.message);
    }
}
